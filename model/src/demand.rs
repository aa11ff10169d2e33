//! What the solvers take of a server's measured stages, knobs applied: each class's
//! service and delay demand, its visits to the web server, and the class mix.

use anyhow::{bail, Result};

use super::{
    input::{ClassInput, ServerInput, StageMean},
    knobs::Knobs,
};
use crate::stage::{RequestClass, Stage, StageClass};

/// Each class's service and delay demand after `--scale-stage` and `--cpu-speedup`:
/// (service, delay), `RequestClass::ALL` order. Queue stages are left out: queueing is
/// what the model computes, not something it takes.
pub fn demands(server: &ServerInput, knobs: &Knobs) -> Result<([f64; 3], [f64; 3])> {
    for (name, _) in &knobs.scale_stages {
        let found = server
            .classes
            .iter()
            .flat_map(|c| &c.stages)
            .find(|m| &m.name == name);
        match found {
            Some(m) if m.class == StageClass::Queue => bail!(
                "--scale-stage {name}: a queue stage is an output of the model, not an input: scale a service or delay stage"
            ),
            Some(_) => {}
            None => {
                let mut names: Vec<&str> = server
                    .classes
                    .iter()
                    .flat_map(|c| &c.stages)
                    .filter(|m| m.class != StageClass::Queue)
                    .map(|m| m.name.as_str())
                    .collect();
                names.sort_unstable();
                names.dedup();
                let what = if Stage::from_name(name).is_some() {
                    "was not measured on"
                } else {
                    "is not a stage of"
                };
                bail!(
                    "--scale-stage {name} {what} server {}: give one of {}",
                    server.server,
                    names.join(", ")
                );
            }
        }
    }
    let mut service = [0.0; 3];
    let mut delay = [0.0; 3];
    for c in &server.classes {
        let i = c.class.index();
        for m in &c.stages {
            let k = scale(knobs, &m.name);
            match m.class {
                StageClass::Service => service[i] += m.mean_s * k / knobs.speed(),
                StageClass::Delay => delay[i] += m.mean_s * k,
                StageClass::Queue => {}
            }
        }
    }
    Ok((service, delay))
}

/// A queue stage whose mean stays under this share of the class's longest is not a visit
/// of its own but the server going on in the same handler: a resumed TLS 1.2 client's
/// request comes in the same read as its Finished, and nginx answers it at once
/// (`wait_request` and `request_queue` ≈ 0 while the other queue stages grow with load).
const CONTINUATION: f64 = 0.1;

/// A class's visits to the web server, each its service time (knobs applied): each queue
/// stage is a visit (the server picks the connection up), served by the service stage
/// that follows it in the stage table (none for `accept_queue`); a service stage with no
/// queue stage before it (a hand-written file, seed 002's) is a visit of its own.
pub fn visits(class: &ClassInput, knobs: &Knobs) -> Vec<f64> {
    let longest_queue = class
        .stages
        .iter()
        .filter(|m| m.class == StageClass::Queue)
        .map(|m| m.mean_s)
        .fold(0.0, f64::max);
    let mut stages: Vec<&StageMean> = class.stages.iter().collect();
    // hstrace's stages in wire order, others (hand-written names) after, each its own visit
    stages.sort_by_key(|m| Stage::from_name(&m.name).map_or(usize::MAX, Stage::index));
    let mut out = Vec::new();
    let mut open = false;
    for m in stages {
        let known = Stage::from_name(&m.name).is_some();
        match m.class {
            StageClass::Queue => {
                // a continuation (see CONTINUATION): what follows joins the last visit
                if out.is_empty() || m.mean_s >= CONTINUATION * longest_queue {
                    out.push(0.0);
                }
                open = true;
            }
            StageClass::Service => {
                let s = m.mean_s * scale(knobs, &m.name) / knobs.speed();
                match (open && known, out.last_mut()) {
                    (true, Some(last)) => *last += s,
                    _ => out.push(s),
                }
                open = false;
            }
            StageClass::Delay => open = false,
        }
    }
    out
}

/// The product of the --scale-stage factors naming `stage`.
pub(crate) fn scale(knobs: &Knobs, stage: &str) -> f64 {
    knobs
        .scale_stages
        .iter()
        .filter(|(n, _)| n == stage)
        .map(|(_, k)| k)
        .product()
}

/// The class mix: the measured shares, the TLS part re-mixed by `--hit-ratio` (resumed /
/// TLS = r) and resized by `secure_fraction` (TLS = p, full : resumed kept).
pub fn mix(server: &ServerInput, knobs: &Knobs, secure_fraction: Option<f64>) -> Result<[f64; 3]> {
    let [full, resumed, _] = server.classes.each_ref().map(|c| c.share);
    let tls = full + resumed;
    let resumed_of_tls = knobs
        .hit_ratio
        .unwrap_or(if tls > 0.0 { resumed / tls } else { 0.0 });
    let tls = secure_fraction.unwrap_or(tls);
    // a share within rounding of 0 is none (a fraction computed as 0.9999999999999999
    // leaves plain requests 1e-16)
    let mix = [
        tls * (1.0 - resumed_of_tls),
        tls * resumed_of_tls,
        1.0 - tls,
    ]
    .map(|share| {
        if share.abs() < MIX_ROUNDING {
            0.0
        } else {
            share
        }
    });
    for c in &server.classes {
        let share = mix[c.class.index()];
        if share > 0.0 && !c.measured() {
            let knob = match c.class {
                RequestClass::TlsResumed => "--hit-ratio",
                _ => "--secure-fraction",
            };
            bail!(
                "the mix gives {} a share of {share:.3}, but server {} has no {} stages measured: measure such requests first, or change {knob}",
                c.class.name(),
                server.server,
                c.class.name()
            );
        }
    }
    Ok(mix)
}

/// Shares of the mix closer to 0 than this are rounding, and taken as 0.
const MIX_ROUNDING: f64 = 1e-9;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::seed_parameters as seed;

    #[test]
    fn visits_from_the_queue_stages() {
        let stage = |name: &str, ms: f64| StageMean {
            name: name.into(),
            class: Stage::from_name(name).unwrap().class(),
            mean_s: ms * 1e-3,
            idle_wait: None,
        };
        let class = |stages: Vec<StageMean>| ClassInput {
            class: RequestClass::TlsResumed,
            share: 1.0,
            rate_per_s: None,
            stages,
        };
        // a full handshake under load: accept, ClientHello, client flight 2, request
        let full = class(vec![
            stage("accept_queue", 2.0),
            stage("wait_client_hello", 0.05),
            stage("client_hello_queue", 0.9),
            stage("server_flight_1", 6.0),
            stage("wait_client_flight_2", 1.1),
            stage("client_flight_2_queue", 3.5),
            stage("server_flight_2", 0.25),
            stage("wait_request", 0.4),
            stage("request_queue", 2.0),
            stage("response", 0.1),
        ]);
        let v = visits(&full, &Knobs::default());
        let want = [0.0, 6.0e-3, 0.25e-3, 0.1e-3];
        assert_eq!(v.len(), 4);
        assert!(
            v.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-15),
            "{v:?}"
        );
        // resumed TLS 1.2: the request came with the Finished, answered in the same visit
        let mut resumed = full.stages.clone();
        resumed[8].mean_s = 0.00001e-3;
        let v = visits(&class(resumed), &Knobs::default());
        assert_eq!(v.len(), 3, "{v:?}");
        assert!((v[2] - 0.35e-3).abs() < 1e-15);
        // no queue stages (seed 002's file): each service stage is a visit
        let s = seed();
        assert_eq!(visits(&s.classes[0], &Knobs::default()).len(), 5);
    }

    /// A fraction a script computed as 0.9999999999999999 asks for no plain requests, and
    /// a hit ratio of 1e-17 for no resumed handshakes: neither is refused for want of
    /// their stages.
    #[test]
    fn a_share_within_rounding_of_nothing_is_nothing() {
        let mut s = seed();
        s.classes[2].stages.clear();
        s.classes[0].share = 1.0;
        s.classes[2].share = 0.0;
        let m = mix(&s, &Knobs::default(), Some(0.9999999999999999)).unwrap();
        assert_eq!(m[2], 0.0, "{m:?}");
        let k = Knobs {
            hit_ratio: Some(1e-17),
            ..Knobs::default()
        };
        assert_eq!(mix(&s, &k, None).unwrap()[1], 0.0);
        // a real share still needs its stages
        let e = mix(&s, &Knobs::default(), Some(0.999)).unwrap_err();
        assert!(e.to_string().contains("no plain stages measured"), "{e}");
    }

    #[test]
    fn hit_ratio_remixes_tls_only() {
        let mut s = seed();
        // pretend resumed handshakes were measured, 1 in 4 of the TLS ones
        s.classes[1].stages = s.classes[0].stages.clone();
        s.classes[0].share = 0.15;
        s.classes[1].share = 0.05;
        let k = Knobs {
            hit_ratio: Some(0.9),
            ..Knobs::default()
        };
        let m = mix(&s, &k, None).unwrap();
        assert!((m[0] - 0.02).abs() < 1e-15 && (m[1] - 0.18).abs() < 1e-15 && m[2] == 0.8);
        // and --secure-fraction keeps full : resumed
        let m = mix(&s, &Knobs::default(), Some(0.4)).unwrap();
        assert!((m[0] - 0.3).abs() < 1e-15 && (m[1] - 0.1).abs() < 1e-15);
    }
}
