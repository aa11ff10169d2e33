//! The network for one curve: a server's measured parameters, the what-if knobs applied,
//! in the shape every solver takes (demands and visits, the routes, the cold start).

use anyhow::{bail, Result};

use super::{
    demand::{demands, mix, visits},
    input::ServerInput,
    keys::with_key_change,
    knobs::{Knobs, NOT_SIMULATED},
    network::{ColdStartCurves, Discipline, Network, OverheadCold},
    route::route,
    warm::{cold_start_rates, warm, warm_overhead},
};

/// The network for one curve.
pub fn network(
    server: &ServerInput,
    knobs: &Knobs,
    secure_fraction: Option<f64>,
) -> Result<Network> {
    // --group and --key-change change the input itself: every knob and every solver sees
    // the group's first flight, and the new key's signature on top of it
    let server = &*crate::group::with_group(server, knobs.group.as_deref())?;
    let server = &*with_key_change(server, knobs.key_change.as_ref())?;
    let (mut service_s, delay_s) = demands(server, knobs)?;
    // processor sharing: the CPU no stage measures is each request's demand too (the
    // simulated loop runs it after each handler call instead)
    let mut overhead_s = knobs.overhead_s;
    if knobs.discipline == Discipline::ProcessorSharing {
        for (s, c) in service_s.iter_mut().zip(&server.classes) {
            if c.measured() {
                *s += overhead_s;
            }
        }
        overhead_s = 0.0;
    }
    let visits = server.classes.each_ref().map(|c| visits(c, knobs));
    let cold_start = match knobs.discipline {
        Discipline::EventLoopSim => knobs.cold_start.divided(knobs.speed()),
        _ => ColdStartCurves::default(),
    };
    let rates = match cold_start.is_zero() {
        true => [0.0; 3],
        false => cold_start_rates(server)?,
    };
    let (routes, cold_paid_s) = warm(
        server.classes.each_ref().map(|c| route(c, knobs)),
        rates,
        knobs.servers,
        &cold_start,
    );
    // the CPU outside the stages as measured holds a cold start; a figure given is taken
    // as it is
    let overhead_cold = match knobs.overhead_given {
        true => OverheadCold::default(),
        false => warm_overhead(overhead_s, &routes, rates, knobs.servers, &cold_start),
    };
    let net = Network {
        think_s: knobs.think_s,
        servers: knobs.servers,
        mix: mix(server, knobs, secure_fraction)?,
        service_s,
        delay_s,
        discipline: knobs.discipline,
        visits: visits.each_ref().map(|v| v.len() as f64),
        visit_sq_s: visits.map(|v| v.iter().map(|s| s * s).sum()),
        routes,
        seed: knobs.seed,
        overhead_s,
        wakeup: knobs.wakeup.clone(),
        sleep_cpu_s: knobs.sleep_cpu_s,
        cpus_left: knobs
            .cpus_left
            .filter(|_| knobs.discipline == Discipline::EventLoopSim),
        cold_start,
        cold_paid_s,
        overhead_cold,
    };
    if knobs.discipline != Discipline::EventLoopSim
        && (!knobs.wakeup.is_zero() || knobs.sleep_cpu_s > 0.0 || !knobs.cold_start.is_zero())
    {
        bail!("{NOT_SIMULATED}");
    }
    if knobs.discipline == Discipline::EventLoop && knobs.overhead_s > 0.0 {
        bail!("--overhead is CPU the simulated event loop or processor sharing adds to each request: give --discipline event-loop-sim or processor-sharing");
    }
    if knobs.discipline == Discipline::EventLoop && knobs.servers > 1 {
        bail!("--discipline event-loop (the approximation) models one event loop: give --discipline event-loop-sim for {} workers, or --servers 1", knobs.servers);
    }
    if net.service_demand() <= 0.0 {
        bail!(
            "server {} has no service stages in the mix (its web server would do no work): nothing to model",
            server.server
        );
    }
    Ok(net)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;
    use crate::{
        input::seed_parameters as seed,
        keys::{key_changed_s, signing_stage_s, KeyChange},
        network::{IdleCurve, Step},
        stage::RequestClass,
    };

    #[test]
    fn each_knob_changes_only_what_it_names() {
        let s = seed();
        let base = network(&s, &Knobs::default(), None).unwrap();
        assert_eq!(base.mix, [0.2, 0.0, 0.8]);
        // --secure-fraction: the mix only
        let p = network(&s, &Knobs::default(), Some(0.3)).unwrap();
        assert!((p.mix[0] - 0.3).abs() < 1e-15 && (p.mix[2] - 0.7).abs() < 1e-15);
        assert_eq!((p.service_s, p.delay_s), (base.service_s, base.delay_s));
        // --cpu-speedup: service demands only
        let k = Knobs {
            cpu_speedup: 2.0,
            ..Knobs::default()
        };
        let fast = network(&s, &k, None).unwrap();
        assert_eq!(fast.service_s, base.service_s.map(|d| d / 2.0));
        assert_eq!((fast.delay_s, fast.mix), (base.delay_s, base.mix));
        // --scale-stage: that stage only, wherever it is
        let k = Knobs {
            scale_stages: vec![("response".into(), 3.0)],
            ..Knobs::default()
        };
        let big = network(&s, &k, None).unwrap();
        assert!((big.service_s[0] - (base.service_s[0] + 2.0 * 1.937e-3)).abs() < 1e-15);
        assert!((big.service_s[2] - (base.service_s[2] + 2.0 * 1.911e-3)).abs() < 1e-15);
        assert_eq!(big.delay_s, base.delay_s);
        // --think-time, --servers: themselves
        let k = Knobs {
            think_s: 7.0,
            servers: 3,
            ..Knobs::default()
        };
        let other = network(&s, &k, None).unwrap();
        assert_eq!(
            Network {
                think_s: 2.0,
                servers: 1,
                ..other
            },
            base
        );
    }

    /// --key-change: one signature's difference added to the full handshake's first
    /// flight, and nothing else, in every discipline's network; never below zero.
    #[test]
    fn key_change_adds_the_signatures_difference_to_full_handshakes_first_flight_only() {
        use crate::{
            input,
            keys::{CostSource, Key},
        };
        let text = include_str!("../../examples/parameters.json");
        let servers = input::parse_parameters(text, "t").unwrap();
        let s = input::pick(servers.clone(), Some("nginx:28443,nginx:28080"), "t").unwrap();
        let with = |from_sign_s: f64, to_sign_s: f64, base: &Knobs| Knobs {
            key_change: Some(KeyChange {
                from: Key::Rsa2048,
                to: Key::Rsa4096,
                from_sign_s,
                to_sign_s,
                source: CostSource::Given,
            }),
            ..base.clone()
        };
        let [full, resumed, plain] = RequestClass::ALL.map(RequestClass::index);
        let flight_1 = |s: &ServerInput, c: usize| {
            s.classes[c]
                .stages
                .iter()
                .find(|m| m.name == "server_flight_1")
                .map(|m| m.mean_s)
        };
        // every class measured, the resumed ones with a first flight of their own
        assert!(s.classes.iter().all(|c| c.measured()));
        let measured = flight_1(&s, full).unwrap();
        assert!(flight_1(&s, resumed).is_some());
        assert_eq!(signing_stage_s(&s).unwrap(), measured);

        // the input: that one mean, plus the difference; the rest as measured
        let k = with(0.25e-3, 1.75e-3, &Knobs::default());
        let changed = with_key_change(&s, k.key_change.as_ref())
            .unwrap()
            .into_owned();
        assert!((flight_1(&changed, full).unwrap() - (measured + 1.5e-3)).abs() < 1e-15);
        let mut want = changed.clone();
        want.classes[full]
            .stages
            .iter_mut()
            .find(|m| m.name == "server_flight_1")
            .unwrap()
            .mean_s = measured;
        assert_eq!(
            want, s,
            "--key-change changed more than tls_full's server_flight_1"
        );
        assert_eq!(
            key_changed_s(&s, k.key_change.as_ref().unwrap()).unwrap(),
            (measured, flight_1(&changed, full).unwrap())
        );
        // no --key-change: the input itself
        assert!(matches!(
            with_key_change(&s, None).unwrap(),
            Cow::Borrowed(_)
        ));

        // every discipline's network: the full class's service demand, and its first
        // flight's visit, rise by the difference; the other classes and delays do not move
        for discipline in [
            Discipline::ProcessorSharing,
            Discipline::EventLoop,
            Discipline::EventLoopSim,
        ] {
            let plain_knobs = Knobs {
                discipline,
                ..Knobs::default()
            };
            let base = network(&s, &plain_knobs, None).unwrap();
            let new = network(&s, &with(0.25e-3, 1.75e-3, &plain_knobs), None).unwrap();
            assert!((new.service_s[full] - base.service_s[full] - 1.5e-3).abs() < 1e-15);
            for c in [resumed, plain] {
                assert_eq!(new.service_s[c], base.service_s[c], "{discipline:?}");
                assert_eq!(new.routes[c], base.routes[c], "{discipline:?}");
                assert_eq!(new.visit_sq_s[c], base.visit_sq_s[c], "{discipline:?}");
            }
            assert_eq!(
                (&new.delay_s, &new.mix, &new.visits),
                (&base.delay_s, &base.mix, &base.visits)
            );
            let services = |n: &Network| -> Vec<f64> {
                n.routes[full]
                    .iter()
                    .filter_map(|st| match st {
                        Step::Visit { service_s, .. } => Some(*service_s),
                        _ => None,
                    })
                    .collect()
            };
            let moved: Vec<f64> = services(&new)
                .iter()
                .zip(services(&base))
                .map(|(a, b)| a - b)
                .filter(|d| *d != 0.0)
                .collect();
            assert!(
                moved.len() == 1 && (moved[0] - 1.5e-3).abs() < 1e-15,
                "{discipline:?}: {moved:?}"
            );
            assert!(new.visit_sq_s[full] > base.visit_sq_s[full]);
        }
        // other knobs act on the stage as the new key would have it measured: a twice
        // faster CPU signs twice as fast too
        let fast = Knobs {
            cpu_speedup: 2.0,
            ..Knobs::default()
        };
        let base = network(&s, &fast, None).unwrap();
        let new = network(&s, &with(0.25e-3, 1.75e-3, &fast), None).unwrap();
        assert!((new.service_s[full] - base.service_s[full] - 0.75e-3).abs() < 1e-15);

        // a cheaper key than the whole measured flight: floored at zero, not below
        let k = with(5.0, 1e-5, &Knobs::default());
        let cheap = with_key_change(&s, k.key_change.as_ref()).unwrap();
        assert_eq!(flight_1(&cheap, full), Some(0.0));
        assert_eq!(
            key_changed_s(&s, k.key_change.as_ref().unwrap()).unwrap(),
            (measured, 0.0)
        );
        let base = network(&s, &Knobs::default(), None).unwrap();
        let new = network(&s, &k, None).unwrap();
        assert!((base.service_s[full] - new.service_s[full] - measured).abs() < 1e-15);

        // a server with no full handshakes measured: nothing to change, and why
        let plain_only = input::pick(servers, Some("nginx:28080"), "t").unwrap();
        let e = network(&plain_only, &k, None).unwrap_err().to_string();
        assert!(
            e.contains("--key-change")
                && e.contains("no server_flight_1 measured for tls_full")
                && e.contains("nginx:28080"),
            "{e}"
        );
    }

    #[test]
    fn bad_knobs_say_what_to_do() {
        let s = seed();
        // the loop's platform parts belong to the simulated loop; the CPU outside the
        // stages to it and to processor sharing
        for k in [
            Knobs {
                overhead_s: 1e-4,
                discipline: Discipline::EventLoop,
                ..Knobs::default()
            },
            Knobs {
                wakeup: IdleCurve::constant(1e-4),
                discipline: Discipline::EventLoop,
                ..Knobs::default()
            },
        ] {
            let e = network(&s, &k, None).unwrap_err().to_string();
            assert!(e.contains("--discipline event-loop-sim"), "{e}");
        }
        let k = Knobs {
            discipline: Discipline::EventLoop,
            servers: 2,
            ..Knobs::default()
        };
        let e = network(&s, &k, None).unwrap_err().to_string();
        assert!(
            e.contains("event-loop-sim for 2 workers") && e.contains("--servers 1"),
            "{e}"
        );
        // several simulated loops are nginx's workers
        let k = Knobs {
            discipline: Discipline::EventLoopSim,
            ..k
        };
        assert_eq!(network(&s, &k, None).unwrap().servers, 2);
        let k = |stage: &str| Knobs {
            scale_stages: vec![(stage.into(), 2.0)],
            ..Knobs::default()
        };
        let e = demands(&s, &k("nonsense")).unwrap_err().to_string();
        assert!(
            e.contains("is not a stage of") && e.contains("server_flight_2"),
            "{e}"
        );
        let e = demands(&s, &k("accept_queue")).unwrap_err().to_string();
        assert!(e.contains("was not measured"), "{e}");
        // the seed measured no resumed handshakes
        let e = mix(
            &s,
            &Knobs {
                hit_ratio: Some(0.5),
                ..Knobs::default()
            },
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("no tls_resumed stages") && e.contains("--hit-ratio"),
            "{e}"
        );
    }
}
