//! The window's visits made warm: the cold start each held, at the window's rates, taken
//! out of the routes and of the CPU outside the stages (the simulation adds it back after
//! however long each kind of visit had been away).

use std::collections::BTreeSet;

use anyhow::{bail, Result};

use super::{
    input::ServerInput,
    network::{ColdStartCurves, OverheadCold, Step, VisitKinds},
};

/// The classes' routes with each visit's service split into a warm part and the cold
/// start, where the window's rates are known. A visit is its kind of handler call (its
/// queue stage: the ClientHello read, client flight 2, the request): the server's code for
/// it (the event loop, OpenSSL's record layer, the kernel's TCP) is much the same whichever
/// the class. In the window each kind had last run on a worker about one interval of the
/// requests that serve it there before (`workers` / their classes' rates summed), and its
/// measured time holds the cold start after that long (`cold_start`); the rest is the
/// visit's warm part, and the simulation adds the cold start back after however long that
/// kind had been away when the visit runs (under load, a short while). A visit that held
/// less than that (its warm part floored at 0) pays that share of it. A visit with no
/// service runs nothing. `rates`: the classes' (`cold_start_rates`). Also what was taken
/// out of each class's visits, per request.
pub(crate) fn warm(
    mut routes: [Vec<Step>; 3],
    rates: [f64; 3],
    workers: u32,
    cold_start: &ColdStartCurves,
) -> ([Vec<Step>; 3], [f64; 3]) {
    let served = |s: &Step| matches!(s, Step::Visit { service_s, .. } if *service_s > 0.0);
    let mut taken = [0.0; 3];
    if cold_start.is_zero() {
        return (routes, taken);
    }
    // each kind's window rate: the classes' whose visits of it serve something
    let kinds = VisitKinds::new(&routes);
    let mut kind_rate = vec![0.0; kinds.count];
    for (c, route) in routes.iter().enumerate() {
        let serving: BTreeSet<usize> = (route.iter().enumerate())
            .filter(|(_, s)| served(s))
            .map(|(step, _)| kinds.of[c][step])
            .collect();
        for kind in serving {
            kind_rate[kind] += rates[c];
        }
    }
    // and the window's signatures: the classes whose signing visit serves something
    let signing_rate: f64 = (0..3)
        .filter(|&c| {
            (routes[c].iter()).any(|s| {
                served(s)
                    && matches!(
                        s,
                        Step::Visit {
                            handshake: true,
                            ..
                        }
                    )
            })
        })
        .map(|c| rates[c])
        .sum();
    let workers = f64::from(workers.max(1));
    let paid: [Vec<f64>; 3] = std::array::from_fn(|c| {
        (routes[c].iter().enumerate())
            .map(|(step, s)| match s {
                Step::Visit { handshake, .. } if served(s) => cold_start.paid(
                    *handshake,
                    workers / kind_rate[kinds.of[c][step]],
                    workers / signing_rate,
                ),
                _ => 0.0,
            })
            .collect()
    });
    for ((route, paid), taken) in routes.iter_mut().zip(paid).zip(&mut taken) {
        for (step, paid) in route.iter_mut().zip(paid) {
            if let Step::Visit {
                service_s, cold, ..
            } = step
            {
                if *service_s > 0.0 {
                    let warm = (*service_s - paid).max(0.0);
                    *taken += *service_s - warm;
                    *cold = if paid > 0.0 {
                        (*service_s - warm) / paid
                    } else {
                        1.0
                    };
                    *service_s = warm;
                }
            }
        }
    }
    (routes, taken)
}

/// The cold start the window's CPU outside the stages (`overhead_s` a request) held: the
/// record's curve at the window's interval between connections on a worker (the workers
/// over the classes' summed rates, `cold_start_rates`), for the loop's own code a
/// connection's accept runs after that long; none without a cold start or a rate.
pub(crate) fn warm_overhead(
    overhead_s: f64,
    routes: &[Vec<Step>; 3],
    rates: [f64; 3],
    workers: u32,
    cold_start: &ColdStartCurves,
) -> OverheadCold {
    let accepts = |c: usize| (routes[c].iter()).any(|s| matches!(s, Step::Accept { .. }));
    let rate: f64 = (0..3).filter(|&c| accepts(c)).map(|c| rates[c]).sum();
    if cold_start.record.is_zero() || rate <= 0.0 || overhead_s <= 0.0 {
        return OverheadCold::default();
    }
    let paid = cold_start.record.after(f64::from(workers.max(1)) / rate);
    if paid <= 0.0 {
        return OverheadCold::default();
    }
    let paid_s = overhead_s.min(paid);
    OverheadCold {
        paid_s,
        share: paid_s / paid,
    }
}

/// The classes' rates over the window (`rate_per_s`; 0 for a class not measured), at which
/// `--cold-start` is taken out of the window's visits: every measured class needs one
/// (parameters hstrace wrote; not from Prometheus, nor a file written by hand before
/// hstrace measured rates).
pub fn cold_start_rates(server: &ServerInput) -> Result<[f64; 3]> {
    if let Some(c) = server
        .classes
        .iter()
        .find(|c| c.measured() && c.rate_per_s.is_none())
    {
        bail!(
            "--cold-start needs each class's rate over the window (rate_per_s), and server {}'s {} has none (parameters from Prometheus, or written by hand): give parameters hstrace wrote (hstrace export, or --from a daemon), or leave --cold-start out",
            server.server,
            c.class.name()
        );
    }
    Ok(server
        .classes
        .each_ref()
        .map(|c| c.rate_per_s.unwrap_or(0.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::{Discipline, IdleCurve, Network};

    /// With a cold start and the window's rates, each visit that served something is its
    /// warm part (never below 0) and cold (the share of the cold start it held), the cold
    /// start taken at the interval of the classes that make that kind of visit on one
    /// worker, the handshake's curve for the visit that sends a full handshake's first
    /// flight; without a served class's rate, or a curve, the routes as measured.
    #[test]
    fn the_window_rates_split_each_visit_into_warm_and_cold() {
        let record = IdleCurve::curve(vec![(0.0, 0.0), (0.1, 40e-6), (1.0, 60e-6)]);
        let handshake = IdleCurve::curve(vec![(0.0, 0.0), (0.1, 150e-6), (1.0, 240e-6)]);
        let curve = ColdStartCurves {
            record: record.clone(),
            handshake: handshake.clone(),
        };
        let visit = |queue: &str, service_s: f64, cold: f64| Step::Visit {
            queue: Some(queue.into()),
            service_s,
            cold,
            handshake: false,
        };
        let signing = |service_s: f64, cold: f64| Step::Visit {
            queue: Some("client_hello_queue".into()),
            service_s,
            cold,
            handshake: true,
        };
        let routes = [
            vec![
                Step::Accept { listener: 0 },
                signing(0.5e-3, 0.0),
                Step::Delay { mean_s: 1e-3 },
                visit("request_queue", 30e-6, 0.0),
                visit("client_flight_2_queue", 0.0, 0.0),
            ],
            vec![
                Step::Accept { listener: 0 },
                visit("client_hello_queue", 0.2e-3, 0.0),
                visit("client_flight_2_queue", 0.1e-3, 0.0),
            ],
            vec![],
        ];
        // two requests of each class a second on two workers: the ClientHello read, which
        // both classes make, had been away half a second in the window on a worker; the
        // request, the first class's only, and client flight 2, served by the second
        // class's only (the first's serves nothing), one second
        let (got, taken) = warm(routes.clone(), [2.0, 2.0, 0.0], 2, &curve);
        let (hello, once) = (record.after(0.5), record.after(1.0));
        assert!(hello > 40e-6 && hello < once && once == 60e-6);
        // the signing visit: the record's part by its kind's interval, the signature's by
        // the first class's only (one a second on a worker)
        let signed = hello + (handshake.after(1.0) - record.after(1.0));
        assert!((signed - (hello + 180e-6)).abs() < 1e-15);
        let want = [
            vec![
                Step::Accept { listener: 0 },
                signing(0.5e-3 - signed, 1.0),
                Step::Delay { mean_s: 1e-3 },
                visit("request_queue", 0.0, 0.5),
                visit("client_flight_2_queue", 0.0, 0.0),
            ],
            vec![
                Step::Accept { listener: 0 },
                visit("client_hello_queue", 0.2e-3 - hello, 1.0),
                visit("client_flight_2_queue", 0.1e-3 - once, 1.0),
            ],
            vec![],
        ];
        for (got, want) in got.iter().zip(&want) {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                match (g, w) {
                    (
                        Step::Visit {
                            service_s: a,
                            cold: c,
                            handshake: h,
                            ..
                        },
                        Step::Visit {
                            service_s: b,
                            cold: d,
                            handshake: i,
                            ..
                        },
                    ) => assert!(
                        (a - b).abs() < 1e-15 && (c - d).abs() < 1e-12 && h == i,
                        "{got:?}"
                    ),
                    (g, w) => assert_eq!(g, w),
                }
            }
        }
        // taken: all of what the window paid, but no more than the visit had
        assert!((taken[0] - (signed + 30e-6)).abs() < 1e-15);
        assert!((taken[1] - (hello + once)).abs() < 1e-15);
        assert_eq!(taken[2], 0.0);
        let none = (routes.clone(), [0.0; 3]);
        assert_eq!(
            warm(
                routes.clone(),
                [2.0, 2.0, 0.0],
                2,
                &ColdStartCurves::default()
            ),
            none
        );
        // no handshake curve measured: the signing visit pays the record's like any other
        let (got, _) = warm(
            routes.clone(),
            [2.0, 2.0, 0.0],
            2,
            &ColdStartCurves::every_visit(record.clone()),
        );
        assert!(
            matches!(got[0][1], Step::Visit { service_s, .. } if (service_s - (0.5e-3 - hello)).abs() < 1e-15)
        );
    }

    /// One user away from the server as long as the window's interval pays back exactly
    /// what the window's visits held, a visit that held less than the curve too: the
    /// window's response time. Far past the knee the visits run warm and the server is
    /// busy all the time on their warm parts.
    #[test]
    fn the_window_gets_back_what_it_paid() {
        use super::super::sim::{simulate, Dist, Settings};
        let curve = ColdStartCurves::every_visit(IdleCurve::curve(vec![
            (0.0, 0.0),
            (0.05, 0.0),
            (1.0, 60e-6),
        ]));
        let visit = |queue: &str, ms: f64| Step::Visit {
            queue: Some(queue.into()),
            service_s: ms * 1e-3,
            cold: 0.0,
            handshake: false,
        };
        let routes = [
            vec![
                Step::Accept { listener: 0 },
                Step::Delay { mean_s: 2e-4 },
                visit("client_hello_queue", 0.5),
                Step::Delay { mean_s: 1e-3 },
                visit("request_queue", 0.03),
            ],
            vec![],
            vec![],
        ];
        let net =
            |routes: [Vec<Step>; 3], cold_start: ColdStartCurves, cold_paid_s: [f64; 3]| Network {
                think_s: 2.0,
                servers: 1,
                mix: [1.0, 0.0, 0.0],
                service_s: [0.53e-3, 0.0, 0.0],
                delay_s: [1.2e-3, 0.0, 0.0],
                discipline: Discipline::EventLoopSim,
                visits: [3.0, 0.0, 0.0],
                visit_sq_s: [0.25e-6 + 0.9e-9, 0.0, 0.0],
                routes,
                seed: 1,
                overhead_s: 0.0,
                wakeup: IdleCurve::default(),
                sleep_cpu_s: 0.0,
                cpus_left: None,
                cold_start,
                cold_paid_s,
                overhead_cold: OverheadCold::default(),
            };
        // the window: a request every 2 s, each visit's kind away that long
        let (warmed, paid) = warm(routes.clone(), [0.5, 0.0, 0.0], 1, &curve);
        assert!((paid[0] - 90e-6).abs() < 1e-15, "{paid:?}");
        let (measured, cold) = (
            net(routes.clone(), ColdStartCurves::default(), [0.0; 3]),
            net(warmed.clone(), curve.clone(), paid),
        );
        let one = Settings {
            think: Dist::Constant,
            delay: Dist::Constant,
            ..Settings::for_users(1, 1)
        };
        let (a, b) = (simulate(&measured, 1, one), simulate(&cold, 1, one));
        assert!((a.response_s - b.response_s).abs() < 1e-9, "{a:?} {b:?}");
        assert!((a.utilisation - b.utilisation).abs() < 1e-9, "{a:?} {b:?}");
        let top = 3 * cold.n_star().ceil() as u32;
        let loaded = simulate(&cold, top, Settings::for_users(1, top));
        let warm_demand = 0.53e-3 - 90e-6;
        assert!((cold.least_service_demand() - warm_demand).abs() < 1e-15);
        // a cold start that took every visit whole: no warm demand, and no bound below
        // nothing from the subtraction's rounding
        let all_cold = Network {
            cold_paid_s: [0.53e-3 * (1.0 + 1e-12), 0.0, 0.0],
            ..cold.clone()
        };
        assert_eq!(all_cold.warm_service_demand(), 0.0);
        assert!(all_cold.bounds(3000).throughput_max_per_s > 0.0);
        assert!(
            (loaded.throughput_per_s * warm_demand - 1.0).abs() < 0.01,
            "{loaded:?}"
        );
        assert!((loaded.utilisation - 1.0).abs() < 0.01, "{loaded:?}");

        // 0.2 ms of CPU outside the stages a request: the window's held the record's curve
        // at its interval between connections (2 s on one worker: 60 µs), which one user
        // pays back at each accept (within the client's 0.2 ms before its ClientHello);
        // the rest every call shares, warm
        let rates = [0.5, 0.0, 0.0];
        let overhead_cold = warm_overhead(0.2e-3, &warmed, rates, 1, &curve);
        assert!(
            (overhead_cold.paid_s - 60e-6).abs() < 1e-15,
            "{overhead_cold:?}"
        );
        assert!(
            (overhead_cold.share - 1.0).abs() < 1e-12,
            "{overhead_cold:?}"
        );
        let (measured, cold) = (
            Network {
                overhead_s: 0.2e-3,
                ..measured
            },
            Network {
                overhead_s: 0.2e-3,
                overhead_cold,
                ..cold
            },
        );
        assert!((cold.warm_overhead_s() - 0.14e-3).abs() < 1e-15);
        let (a, b) = (simulate(&measured, 1, one), simulate(&cold, 1, one));
        assert!((a.response_s - b.response_s).abs() < 1e-9, "{a:?} {b:?}");
        assert!((a.utilisation - b.utilisation).abs() < 1e-9, "{a:?} {b:?}");
        // under load the accepts follow other calls closely: the loop's code runs warm
        let warm_demand = warm_demand + 0.14e-3;
        assert!((cold.least_service_demand() - warm_demand).abs() < 1e-15);
        let top = 3 * cold.n_star().ceil() as u32;
        let loaded = simulate(&cold, top, Settings::for_users(1, top));
        assert!(
            (loaded.throughput_per_s * warm_demand - 1.0).abs() < 0.01,
            "{loaded:?}"
        );
        // less CPU outside the stages than the curve: all of it cold, the share it held;
        // without an accepting class's rate, or a curve, none
        let less = warm_overhead(30e-6, &warmed, rates, 1, &curve);
        assert!((less.paid_s - 30e-6).abs() < 1e-15 && (less.share - 0.5).abs() < 1e-12);
        let none = OverheadCold::default();
        assert_eq!(
            warm_overhead(0.2e-3, &warmed, [0.0, 1.0, 1.0], 1, &curve),
            none
        );
        let no_curve = ColdStartCurves::default();
        assert_eq!(warm_overhead(0.2e-3, &warmed, rates, 1, &no_curve), none);
    }
}
