//! The network every solver solves: seed 002's closed network of a secure web server
//! (users thinking, a web server, a delay centre), what a solution is, and the pieces a
//! route is made of. `mva` (exact and event-loop MVA), `sim` (the event loop simulated)
//! and the CTMC check depend on this module and not on each other; `model::solve_at`
//! picks the solver by `Discipline`.

/// How the web server shares its processor among the requests at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Discipline {
    /// seed 002's: every request present progresses at once (threads or processes, a
    /// preemptive scheduler). Product form: solved exactly.
    #[default]
    ProcessorSharing,
    /// one event loop (an nginx worker): each visit (a flight read and answered) runs to
    /// completion, in arrival order. Not product form: approximate MVA (below).
    EventLoop,
    /// the same event loop as nginx runs it (gated passes over the epoll ready list, one
    /// accept per listener per pass), solved by discrete-event simulation (`sim`).
    EventLoopSim,
}

impl Discipline {
    pub fn name(self) -> &'static str {
        match self {
            Discipline::ProcessorSharing => "processor_sharing",
            Discipline::EventLoop => "event_loop",
            Discipline::EventLoopSim => "event_loop_sim",
        }
    }

    /// The command line's name (`--discipline event-loop-sim`).
    pub fn flag(self) -> &'static str {
        match self {
            Discipline::ProcessorSharing => "processor-sharing",
            Discipline::EventLoop => "event-loop",
            Discipline::EventLoopSim => "event-loop-sim",
        }
    }

    /// An event loop (one per processor), however solved.
    pub fn is_event_loop(self) -> bool {
        matches!(self, Discipline::EventLoop | Discipline::EventLoopSim)
    }
}

/// The network: demands per request of each class (`RequestClass::ALL` order).
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    /// mean think time Z (seed 002's h), seconds
    pub think_s: f64,
    /// processors of the web server
    pub servers: u32,
    /// probability that a request is of each class (sums to 1)
    pub mix: [f64; 3],
    /// each class's total service demand at the web server, seconds
    pub service_s: [f64; 3],
    /// each class's total delay (client and network), seconds
    pub delay_s: [f64; 3],
    pub discipline: Discipline,
    /// each class's visits to the web server (with an event loop, each waits its turn)
    pub visits: [f64; 3],
    /// each class's sum over its visits of the visit's service time squared, s²
    pub visit_sq_s: [f64; 3],
    /// each class's route, stage by stage (what `EventLoopSim` simulates)
    pub routes: [Vec<Step>; 3],
    /// `EventLoopSim`'s seed
    pub seed: u64,
    /// `EventLoopSim`: the web server's CPU per request that no stage measures (accepting,
    /// closing, logging, epoll), seconds; part of its demand
    pub overhead_s: f64,
    /// `EventLoopSim`: how long a worker asleep in `epoll_wait` takes to run after an
    /// event, by how long it slept
    pub wakeup: IdleCurve,
    /// `EventLoopSim`: the worker's CPU each time it sleeps and is woken (back to its
    /// loop, into `epoll_wait`, out of it, the event dispatched), paid when a handler call
    /// finds it asleep: at low load every call, under load almost none
    pub sleep_cpu_s: f64,
    /// `EventLoopSim`: the CPUs the workers share beside the other work on them (None:
    /// each worker has a CPU of its own)
    pub cpus_left: Option<f64>,
    /// `EventLoopSim`: the CPU a visit's service pays beyond its route's (warm) time, by
    /// how long since a visit of its kind (its queue stage) last ran on its worker's CPU
    pub cold_start: ColdStartCurves,
    /// `EventLoopSim`: what the window's cold start took out of each class's visits, per
    /// request (`service_s` still holds it; the routes do not)
    pub cold_paid_s: [f64; 3],
    /// `EventLoopSim`: the cold start of the CPU no stage measures (`overhead_s` still
    /// holds it)
    pub overhead_cold: OverheadCold,
}

/// The cold start of the worker's CPU outside the stages (the accept, the close, the log
/// line, epoll: the loop's own code, which runs at every handler call): a connection's
/// first call, its accept, pays the record's curve (`ColdStartCurves::record`) by how
/// long since the worker's last handler call, times `share`; the window's `overhead_s`
/// held `paid_s` of it a request (the record's curve at the window's interval between
/// connections on a worker), and the rest is the warm part every call shares.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct OverheadCold {
    /// what the window's CPU outside the stages held of the cold start, per request
    pub paid_s: f64,
    /// the share of the record's curve it held: 1 where all of it, less where that CPU
    /// was less than the curve (its warm part then 0); 0 without a cold start
    pub share: f64,
}

/// 95 % confidence half-widths of a simulated solution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ci95 {
    pub response_s: f64,
    pub throughput_per_s: f64,
    pub class_response_s: [f64; 3],
}

/// The network's means at one user count.
#[derive(Debug, Clone, PartialEq)]
pub struct Solution {
    pub users: u32,
    /// requests completed per second, X(N)
    pub throughput_per_s: f64,
    /// mean response time over all requests, R(N) (think time excluded)
    pub response_s: f64,
    /// mean response time of a request of each class
    pub class_response_s: [f64; 3],
    /// of each class, the part spent at the web server (service and queueing)
    pub class_web_server_s: [f64; 3],
    /// busy fraction of each web-server processor, X · D_ws / c
    pub utilisation: f64,
    /// mean requests at the web server, Q_ws(N)
    pub web_server_users: f64,
    /// a simulation's statistical error (None: solved, not simulated)
    pub ci95: Option<Ci95>,
    /// per class, each queue stage's predicted mean (simulated only; else empty)
    pub queue_s: [Vec<(String, f64)>; 3],
}

impl Solution {
    /// Mean users thinking, n̄_0 = X · Z.
    pub fn thinking_users(&self, net: &Network) -> f64 {
        self.throughput_per_s * net.think_s
    }

    /// Mean requests of class c at the web server (n̄_1c) and at the delay centre (n̄_2c),
    /// by Little's law on each.
    pub fn class_users(&self, net: &Network, c: usize) -> (f64, f64) {
        let x = self.throughput_per_s * net.mix[c];
        (x * self.class_web_server_s[c], x * net.delay_s[c])
    }
}

/// The bottleneck bounds at one user count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// X ≤ min(N / (D + Z), 1 / D_max)
    pub throughput_max_per_s: f64,
    /// R ≥ max(D, N · D_max − Z)
    pub response_min_s: f64,
}

/// The mix-weighted mean of a per-class value.
pub(crate) fn mixed(mix: &[f64; 3], v: &[f64; 3]) -> f64 {
    mix.iter().zip(v).map(|(m, d)| m * d).sum()
}

impl Network {
    /// D_ws: the mean request's demand at the web server (its service stages, and the
    /// CPU no stage measures when given).
    pub fn service_demand(&self) -> f64 {
        mixed(&self.mix, &self.service_s) + self.overhead_s
    }

    /// The mean request's delay.
    pub fn delay_demand(&self) -> f64 {
        mixed(&self.mix, &self.delay_s)
    }

    /// D: the mean request's total demand (its response time alone: its stages; the CPU
    /// no stage measures runs after them).
    pub fn demand(&self) -> f64 {
        mixed(&self.mix, &self.service_s) + self.delay_demand()
    }

    /// The processors the web server has: its servers, or the CPUs other work leaves them
    /// where fewer (`cpus_left`).
    pub fn processors(&self) -> f64 {
        let servers = f64::from(self.servers.max(1));
        self.cpus_left.map_or(servers, |left| left.min(servers))
    }

    /// The mean request's demand at the server at its least: with a cold start, its warm
    /// parts and the cold start right after another visit of each kind (as under load);
    /// else the service demand.
    pub fn least_service_demand(&self) -> f64 {
        let cold: [f64; 3] = std::array::from_fn(|c| {
            self.routes[c]
                .iter()
                .map(|s| match s {
                    Step::Visit {
                        cold, handshake, ..
                    } => cold * self.cold_start.paid(*handshake, 0.0, 0.0),
                    _ => 0.0,
                })
                .sum()
        });
        self.warm_service_demand()
            + mixed(&self.mix, &cold)
            + self.overhead_cold.share * self.cold_start.record.after(0.0)
    }

    /// The mean request's demand at the server with each visit's cold start left out (the
    /// window's, `cold_paid_s`); the service demand without a cold start. Never below
    /// nothing: where the cold start took every visit whole (a host whose quiet CPU stalls
    /// longer than the visits ran), the difference is rounding, and a tiny negative
    /// demand would make the throughput bound a huge negative.
    pub fn warm_service_demand(&self) -> f64 {
        (self.service_demand() - mixed(&self.mix, &self.cold_paid_s) - self.overhead_cold.paid_s)
            .max(0.0)
    }

    /// The CPU outside the stages per request, warm (`overhead_cold`'s left out).
    pub fn warm_overhead_s(&self) -> f64 {
        (self.overhead_s - self.overhead_cold.paid_s).max(0.0)
    }

    /// D_max: the bottleneck's demand per processor (the delay centre has no bottleneck),
    /// at its least (`least_service_demand`).
    pub fn bottleneck_demand(&self) -> f64 {
        self.least_service_demand() / self.processors()
    }

    /// N* = (D + Z) / D_max: where the two asymptotes cross, the user count past which
    /// the web server saturates.
    pub fn n_star(&self) -> f64 {
        (self.demand() + self.think_s) / self.bottleneck_demand()
    }

    pub fn bounds(&self, users: u32) -> Bounds {
        let n = f64::from(users);
        // with a cold start, a request's least (each visit warm): bounds that hold at any load
        let d = self.demand() - self.service_demand() + self.least_service_demand();
        let (dmax, z) = (self.bottleneck_demand(), self.think_s);
        Bounds {
            throughput_max_per_s: (n / (d + z)).min(1.0 / dmax),
            response_min_s: d.max(n * dmax - z),
        }
    }

    /// The means at `users` users from the throughput and each class's time at the web
    /// server (its service and its waiting).
    pub(crate) fn solution(&self, users: u32, x: f64, class_web_server_s: [f64; 3]) -> Solution {
        let r_ws = mixed(&self.mix, &class_web_server_s);
        Solution {
            users,
            throughput_per_s: x,
            response_s: r_ws + self.delay_demand(),
            class_response_s: std::array::from_fn(|k| class_web_server_s[k] + self.delay_s[k]),
            class_web_server_s,
            utilisation: x * self.service_demand() / self.processors(),
            web_server_users: x * r_ws,
            ci95: None,
            queue_s: Default::default(),
        }
    }
}

/// One step of a request's route, in wire order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The connection waits in listener `listener`'s accept queue (the `accept_queue`
    /// stage) until the loop accepts it, one connection per pass. No service measured.
    Accept { listener: usize },
    /// The client's message is in: the connection waits on the ready list for its turn
    /// (`queue`, the queue stage that wait is; None for a service stage with no queue stage
    /// before it), then is served `service_s`, to completion; and `cold` times the
    /// network's cold start (`Network::cold_start`, `ColdStartCurves::paid`: by how long
    /// since its kind last ran, and where `handshake` since the last signature): 1 where
    /// the window's visits held all of it, less where they held less, 0 for none.
    Visit {
        queue: Option<String>,
        service_s: f64,
        cold: f64,
        /// the visit sends a full handshake's first flight (a key exchange and a signature)
        handshake: bool,
    },
    /// Waiting for the client and the network (an infinite-server delay).
    Delay { mean_s: f64 },
}

/// Each step's kind of visit, per class: its queue stage (the ClientHello read, client
/// flight 2, the request: the same handler call whichever the class); a visit with no
/// queue stage is a kind of its own. What the cold start is reckoned by (`warm::warm`,
/// the simulation).
pub struct VisitKinds {
    pub of: [Vec<usize>; 3],
    pub count: usize,
}

impl VisitKinds {
    pub fn new(routes: &[Vec<Step>; 3]) -> VisitKinds {
        let mut names: Vec<Option<&str>> = Vec::new();
        let of = routes.each_ref().map(|r| {
            r.iter()
                .map(|s| {
                    let name = match s {
                        Step::Visit { queue, .. } => queue.as_deref(),
                        _ => None,
                    };
                    match names.iter().position(|n| n.is_some() && *n == name) {
                        Some(i) => i,
                        None => {
                            names.push(name);
                            names.len() - 1
                        }
                    }
                })
                .collect()
        });
        VisitKinds {
            of,
            count: names.len(),
        }
    }
}

/// A time by how long a CPU had been idle, or away from a piece of work: points (idle,
/// time), idle ascending; between two points the time is interpolated on log(idle),
/// outside them it is the nearest point's. One point: the same after any idle. No points:
/// none. Two of the simulated loop's parts are such curves: the wake-up (how long a worker
/// asleep in `epoll_wait` takes to run once something is ready: a CPU that slept briefly is
/// still polling, the guest's halt-polling, or in a shallow state; one that slept long
/// waits for its host to run it again) and the cold start (the CPU a stage pays beyond its
/// warm cost, by how long since it last ran on its CPU: what the CPU cached of its code
/// and data is gone).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IdleCurve(Vec<(f64, f64)>);

/// The cold start by the work a visit does: a record's, which every visit does, and a full
/// handshake's first flight's (a key exchange and a signature: more code and data to bring
/// back), which the visit answering a ClientHello with a certificate does. That visit pays
/// the record's part by how long its kind was away, as any visit, and the rest of the
/// handshake's (its signing, never below 0) by how long since the last signature: a
/// resumed handshake's first flight, the same kind of visit, keeps the record's code warm,
/// not the signature's.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ColdStartCurves {
    pub record: IdleCurve,
    pub handshake: IdleCurve,
}

impl ColdStartCurves {
    /// One curve for every visit (`--cold-start SINCE=TIME,...`).
    pub fn every_visit(record: IdleCurve) -> ColdStartCurves {
        ColdStartCurves {
            record,
            handshake: IdleCurve::default(),
        }
    }

    pub fn is_zero(&self) -> bool {
        self.record.is_zero() && self.handshake.is_zero()
    }

    /// Every time divided by `k` (the same work on a K times faster CPU).
    pub fn divided(&self, k: f64) -> ColdStartCurves {
        ColdStartCurves {
            record: self.record.divided(k),
            handshake: self.handshake.divided(k),
        }
    }

    /// What a visit pays: the record's curve after its kind was away `kind_away_s`, and a
    /// visit that signs the handshake's beyond the record's after `signed_away_s` since the
    /// last signature.
    pub fn paid(&self, handshake: bool, kind_away_s: f64, signed_away_s: f64) -> f64 {
        let record = self.record.after(kind_away_s);
        match handshake {
            true => record + self.signing(signed_away_s),
            false => record,
        }
    }

    /// The handshake's cold start beyond the record's, never below 0 (so 0 without a
    /// handshake curve).
    fn signing(&self, away_s: f64) -> f64 {
        (self.handshake.after(away_s) - self.record.after(away_s)).max(0.0)
    }
}

impl IdleCurve {
    /// The same time after any idle (0: none).
    pub fn constant(wake_s: f64) -> IdleCurve {
        IdleCurve(if wake_s > 0.0 {
            vec![(0.0, wake_s)]
        } else {
            Vec::new()
        })
    }

    /// A curve of (idle, time) points; idle strictly ascending, every time finite and
    /// not negative (the caller has checked).
    pub fn curve(points: Vec<(f64, f64)>) -> IdleCurve {
        debug_assert!(points.windows(2).all(|w| w[0].0 < w[1].0));
        IdleCurve(points)
    }

    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&(_, w)| w == 0.0)
    }

    /// The points as given.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.0
    }

    /// Every time divided by `k` (the same work on a K times faster CPU).
    pub fn divided(&self, k: f64) -> IdleCurve {
        IdleCurve(self.0.iter().map(|&(idle, t)| (idle, t / k)).collect())
    }

    /// The time after the longest idle given (0: none).
    pub fn longest(&self) -> f64 {
        self.0.last().map_or(0.0, |&(_, w)| w)
    }

    /// The time after `idle_s` idle.
    pub fn after(&self, idle_s: f64) -> f64 {
        let p = &self.0;
        match p.iter().position(|&(idle, _)| idle >= idle_s) {
            None => self.longest(),
            Some(0) => p[0].1,
            Some(i) => {
                let ((i0, w0), (i1, w1)) = (p[i - 1], p[i]);
                // on log(idle); a first point at idle 0 is a floor, linear from it
                let at = if i0 > 0.0 {
                    (idle_s.max(i0) / i0).ln() / (i1 / i0).ln()
                } else {
                    idle_s / i1
                };
                w0 + (w1 - w0) * at.clamp(0.0, 1.0)
            }
        }
    }
}
