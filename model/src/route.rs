//! Each class's route through the server and the client, stage by stage, for the
//! event-loop simulation: where a connection waits to be accepted, which stages make one
//! visit of the worker, and the time at the client between them.

use super::{
    demand::scale,
    input::{ClassInput, StageMean},
    knobs::Knobs,
    network::Step,
};
use crate::stage::{RequestClass, Stage, StageClass};

/// A delay before a queue stage under this mean: the client's message was (nearly always)
/// in when the server finished its last visit, and the same handler reads it and goes on
/// (a resumed TLS 1.2 client's request comes behind its Finished: `wait_request` ≈ 0).
/// Longer, and it is a visit of its own.
const CONTINUATION_DELAY_S: f64 = 10e-6;

/// Listeners: TLS and plain HTTP come to different listening ports, each its own
/// listening socket in the worker's epoll set.
const TLS_LISTENER: usize = 0;
const PLAIN_LISTENER: usize = 1;

/// A class's route through the server and the client, stage by stage in wire order (knobs
/// applied), for the event-loop simulation: `accept_queue` is the wait in the listener's
/// accept queue (nginx's accept handler reads nothing: the next message is read in a visit
/// of its own); each other queue stage starts a visit (the connection back on the ready
/// list), served by the service stages after it; a delay stage is time at the client. A
/// queue stage after a delay of (nearly) zero, not after the accept, is the same handler
/// reading on (see CONTINUATION_DELAY_S). Queue stages give the route's shape, never a
/// time: queueing is what the simulation predicts. A service stage with no queue stage
/// before it (a hand-written file, seed 002's) is a visit of its own.
pub fn route(class: &ClassInput, knobs: &Knobs) -> Vec<Step> {
    let listener = match class.class {
        RequestClass::Plain => PLAIN_LISTENER,
        _ => TLS_LISTENER,
    };
    let mut stages: Vec<&StageMean> = class.stages.iter().collect();
    stages.sort_by_key(|m| Stage::from_name(&m.name).map_or(usize::MAX, Stage::index));
    let mut out: Vec<Step> = Vec::new();
    // a visit is open: a service stage now is its work
    let mut open = false;
    for m in stages {
        let known = Stage::from_name(&m.name).is_some();
        match m.class {
            StageClass::Queue if m.name == Stage::AcceptQueue.name() => {
                out.push(Step::Accept { listener });
                open = false;
            }
            StageClass::Queue => {
                let n = out.len();
                let continues = n >= 2
                    && matches!(out[n - 1], Step::Delay { mean_s } if mean_s < CONTINUATION_DELAY_S)
                    && matches!(out[n - 2], Step::Visit { .. });
                if continues {
                    out.pop();
                } else {
                    out.push(Step::Visit {
                        queue: Some(m.name.clone()),
                        service_s: 0.0,
                        cold: 0.0,
                        handshake: false,
                    });
                }
                open = known;
            }
            StageClass::Service => {
                let s = m.mean_s * scale(knobs, &m.name) / knobs.speed();
                // the flight that signs: a full handshake's first (TLS 1.2 and 1.3 alike)
                let signs =
                    class.class == RequestClass::TlsFull && m.name == Stage::ServerFlight1.name();
                match (open && known, out.last_mut()) {
                    (
                        true,
                        Some(Step::Visit {
                            service_s,
                            handshake,
                            ..
                        }),
                    ) => {
                        *service_s += s;
                        *handshake |= signs;
                    }
                    _ => out.push(Step::Visit {
                        queue: None,
                        service_s: s,
                        cold: 0.0,
                        handshake: signs,
                    }),
                }
                open = false;
            }
            StageClass::Delay => {
                out.push(Step::Delay {
                    mean_s: m.mean_s * scale(knobs, &m.name),
                });
                open = false;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::seed_parameters as seed;

    #[test]
    fn routes_from_the_stage_table() {
        let stage = |name: &str, ms: f64| StageMean {
            name: name.into(),
            class: Stage::from_name(name).unwrap().class(),
            mean_s: ms * 1e-3,
            idle_wait: None,
        };
        let class = |c: RequestClass, stages: Vec<StageMean>| ClassInput {
            class: c,
            share: 0.5,
            rate_per_s: None,
            stages,
        };
        let visit = |queue: &str, ms: f64| Step::Visit {
            queue: Some(queue.into()),
            service_s: ms * 1e-3,
            cold: 0.0,
            handshake: false,
        };
        let delay = |ms: f64| Step::Delay { mean_s: ms * 1e-3 };
        let close = |a: &[Step], b: &[Step]| {
            a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| match (x, y) {
                    (
                        Step::Visit {
                            queue: q,
                            service_s: s,
                            cold: a,
                            handshake: h,
                        },
                        Step::Visit {
                            queue: r,
                            service_s: t,
                            cold: b,
                            handshake: i,
                        },
                    ) => q == r && (s - t).abs() < 1e-15 && a == b && h == i,
                    (Step::Delay { mean_s: s }, Step::Delay { mean_s: t }) => (s - t).abs() < 1e-15,
                    (x, y) => x == y,
                })
        };
        // a full TLS 1.2 handshake, stages out of order as a JSON object may give them
        let full = class(
            RequestClass::TlsFull,
            vec![
                stage("response", 0.1),
                stage("accept_queue", 2.0),
                stage("wait_client_hello", 0.05),
                stage("client_hello_queue", 0.9),
                stage("server_flight_1", 6.0),
                stage("wait_client_flight_2", 1.1),
                stage("client_flight_2_queue", 3.5),
                stage("server_flight_2", 0.25),
                stage("wait_request", 0.4),
                stage("request_queue", 2.0),
            ],
        );
        let r = route(&full, &Knobs::default());
        // the visit that answers the ClientHello signs: the handshake's cold start is its
        let signing = Step::Visit {
            queue: Some("client_hello_queue".into()),
            service_s: 6.0e-3,
            cold: 0.0,
            handshake: true,
        };
        let want = [
            Step::Accept { listener: 0 },
            delay(0.05),
            signing,
            delay(1.1),
            visit("client_flight_2_queue", 0.25),
            delay(0.4),
            visit("request_queue", 0.1),
        ];
        assert!(close(&r, &want), "{r:?}");
        // the knobs act on the route too; queue stages' means never do
        let k = Knobs {
            cpu_speedup: 2.0,
            scale_stages: vec![("wait_client_flight_2".into(), 3.0)],
            ..Knobs::default()
        };
        let mut waited = full.clone();
        for m in &mut waited.stages {
            if m.class == StageClass::Queue {
                m.mean_s *= 10.0;
            }
        }
        let r = route(&waited, &k);
        assert!(
            matches!(r[2], Step::Visit { service_s, .. } if (service_s - 3.0e-3).abs() < 1e-15)
        );
        assert!(matches!(r[3], Step::Delay { mean_s } if (mean_s - 3.3e-3).abs() < 1e-15));
        // resumed TLS 1.2: the request came behind the Finished (no wait): the same handler
        let mut resumed = full.clone();
        resumed.class = RequestClass::TlsResumed;
        for m in &mut resumed.stages {
            match m.name.as_str() {
                "wait_request" => m.mean_s = 0.0,
                "request_queue" => m.mean_s = 0.3e-3,
                _ => {}
            }
        }
        let r = route(&resumed, &Knobs::default());
        let mut unsigned = want.clone();
        unsigned[2] = visit("client_hello_queue", 6.0);
        assert!(close(&r[..4], &unsigned[..4]), "{r:?}");
        assert!(
            close(&r[4..], &[visit("client_flight_2_queue", 0.35)]),
            "{r:?}"
        );
        // TLS 1.3 with a HelloRetryRequest: the visit after the second ClientHello signs,
        // not the one that sent the retry
        let mut retried = full.clone();
        retried.stages.extend([
            stage("hello_retry", 0.05),
            stage("wait_client_hello_2", 0.3),
            stage("client_hello_2_queue", 0.1),
        ]);
        let r = route(&retried, &Knobs::default());
        let signing: Vec<&Option<String>> = (r.iter())
            .filter_map(|s| match s {
                Step::Visit {
                    queue,
                    handshake: true,
                    ..
                } => Some(queue),
                _ => None,
            })
            .collect();
        assert_eq!(
            signing,
            [&Some("client_hello_2_queue".to_string())],
            "{r:?}"
        );
        // plain HTTP on its own listener; its request is read in a pass after the accept
        // even when it was there at once
        let plain = class(
            RequestClass::Plain,
            vec![
                stage("accept_queue", 1.0),
                stage("wait_request", 0.0),
                stage("request_queue", 0.04),
                stage("response", 0.1),
            ],
        );
        let r = route(&plain, &Knobs::default());
        let want = [
            Step::Accept { listener: 1 },
            delay(0.0),
            visit("request_queue", 0.1),
        ];
        assert!(close(&r, &want), "{r:?}");
        // seed 002's file: no queue stages, no accept; each service stage a visit
        let s = seed();
        let r = route(&s.classes[0], &Knobs::default());
        let visits = r.iter().filter(|s| matches!(s, Step::Visit { .. })).count();
        assert_eq!(visits, 5, "{r:?}");
        assert!(r.iter().all(|s| !matches!(s, Step::Accept { .. })));
    }
}
