//! `--discipline event-loop-sim`: seed 002's closed network (N users, exponential think
//! time, a request of each class with the measured shares, its stages in wire order) with
//! the web server as what nginx is, one event loop per worker, solved by discrete-event
//! simulation of those loops.
//!
//! The loop, as nginx runs it on Linux (`multi_accept off`, no accept mutex), in each of
//! `servers` workers (`worker_processes`), each on its own CPU with its own ready list:
//!
//! - `epoll_wait` hands the worker every event on the epoll ready list (at most
//!   `EPOLL_EVENTS`), in the order they became ready; the worker calls each one's handler
//!   in turn, and each handler runs to completion (a visit: a flight read and answered).
//!   What becomes ready meanwhile waits for the next `epoll_wait`: gated batches.
//! - A listening socket is level-triggered: its event, while connections wait in its accept
//!   queue, makes the worker accept ONE connection, and the kernel puts it back at the end
//!   of the ready list as it hands it out, so it leads the next pass. Each listening port
//!   (TLS, plain HTTP) is its own listener.
//! - The accept handler reads nothing (no deferred accept): it adds the connection's read
//!   event to the epoll set (edge-triggered), which puts it at the end of the ready list
//!   at once if the ClientHello (or plain request) is in, else when it comes: it is read
//!   in a later pass.
//! - A connection's later messages come after delays (the client's work, the network)
//!   and put it at the end of the ready list of the worker that accepted it.
//! - Several workers share each listening socket, each with it in its own epoll set
//!   (EPOLLEXCLUSIVE): a new connection makes the listener ready in each worker's set in
//!   turn up to the first worker asleep in `epoll_wait`, which is woken; the first worker
//!   whose pass comes to the listener accepts it, the others find the queue empty.
//!
//! Service times are constant (each stage's measured mean: the same signature, the same key
//! schedule every time), delays exponential with the measured means (only means are
//! known), think times exponential. With one user nobody waits: R is the sum of the stage
//! means.
//!
//! Two parts of the loop no stage measures, zero unless given (`--overhead`, `--wakeup`):
//! the worker's CPU per request outside the service stages (the accept, the close and the
//! log line, epoll), shared equally among the request's handler calls and run after the
//! measured part of each (the connection's flight is out: only the others wait for it);
//! and the time a worker asleep in `epoll_wait` takes to run once something is ready (its
//! CPU waking up), paid by the pass that wakes it: a constant, or a curve of how long the
//! worker had slept (`IdleCurve`: an idle CPU that slept longer sleeps deeper). And, given
//! (`--cold-start`), the cold start: a visit's CPU beyond its warm part, by how long since
//! a visit of its kind (`VisitKinds`) last ran on the worker's CPU (the route's service is
//! then the warm part: `warm::warm`), and at each accept the record's cold start by how
//! long since the worker's last handler call, for the CPU outside the stages
//! (`Network::overhead_cold`: the rest of `--overhead` is its warm part).
//!
//! Estimates: after a warm-up, `BATCHES` batches of requests; the means over all of them,
//! and the 95 % confidence half-width from the batch means (Student's t). Deterministic
//! given the seed: the same seed, the same answer.

use std::{
    cmp::Ordering,
    collections::{BinaryHeap, VecDeque},
};

use super::network::{
    Ci95, ColdStartCurves, IdleCurve, Network, OverheadCold, Solution, Step, VisitKinds,
};

/// How a time is drawn from its mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dist {
    Constant,
    Exponential,
}

/// How long to run and what to draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    pub service: Dist,
    pub delay: Dist,
    pub think: Dist,
    pub seed: u64,
    /// requests completed before measuring
    pub warmup: u64,
    /// requests per batch (`BATCHES` batches)
    pub batch: u64,
}

impl Settings {
    /// The model's: constant service, exponential delays; a run long enough for a tight
    /// estimate at `users` users, and bounded (at most `BATCHES` × 20 000 requests after
    /// 2 000 + 10 N of warm-up).
    pub fn for_users(seed: u64, users: u32) -> Settings {
        let n = u64::from(users);
        Settings {
            service: Dist::Constant,
            delay: Dist::Exponential,
            think: Dist::Exponential,
            seed,
            warmup: 2_000 + 10 * n,
            batch: (50 * n).clamp(5_000, 20_000),
        }
    }
}

/// Batches of the estimate.
pub const BATCHES: usize = 20;
/// Student's t, 97.5 % quantile, BATCHES − 1 degrees of freedom.
const T_975: f64 = 2.093;
/// Events one `epoll_wait` hands out at most (nginx's `epoll_events`, 512 by default).
pub const EPOLL_EVENTS: usize = 512;
/// Users simulated at most (the run grows with N).
pub const MAX_USERS: u32 = 20_000;

/// SplitMix64: a small, fast generator; each user count gets its own stream.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, users: u32) -> Rng {
        let mut r = Rng(seed ^ u64::from(users).wrapping_mul(0xA076_1D64_78BD_642F));
        r.next();
        r
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform on (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    pub fn draw(&mut self, mean: f64, dist: Dist) -> f64 {
        match dist {
            _ if mean <= 0.0 => 0.0,
            Dist::Constant => mean,
            Dist::Exponential => -mean * self.uniform().ln(),
        }
    }
}

/// Whose timer it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Timer {
    /// a user's think time or delay ends
    User(u32),
    /// what worker `w` is doing ends (a visit, its unmeasured part, its waking up)
    Worker(usize),
}

/// A timer: a user's think time or delay ends, or a worker's visit in service does.
#[derive(Debug, Clone, Copy)]
struct Event {
    at: f64,
    /// ties broken by scheduling order: deterministic
    seq: u64,
    timer: Timer,
}

impl PartialEq for Event {
    fn eq(&self, o: &Event) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Event) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    /// Reversed: the heap's top is the earliest.
    fn cmp(&self, o: &Event) -> Ordering {
        o.at.total_cmp(&self.at).then(o.seq.cmp(&self.seq))
    }
}

/// What the worker is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Worker {
    /// going on with its loop, between handler calls
    Running,
    /// blocked in `epoll_wait`, nothing ready
    Asleep,
    /// something became ready while it slept: it runs once its CPU has woken
    Waking,
    /// serving a user's visit: the part of the handler call a stage measures
    Serving(u32),
    /// the rest of a handler call, which no stage measures (`--overhead`)
    Unmeasured,
}

/// An entry of the epoll ready list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Item {
    Conn(u32),
    Listener(usize),
}

#[derive(Debug, Clone, Default)]
struct User {
    /// a request under way (else thinking)
    active: bool,
    /// the worker that accepted its connection (whose ready list it goes on)
    worker: usize,
    class: usize,
    /// the next step of the route
    step: usize,
    /// when the request began
    start: f64,
    /// when it began its current wait (accept queue or ready list)
    since: f64,
    /// its time in delays so far
    delayed: f64,
    /// its message is in: a visit is due
    data: bool,
    /// on the ready list
    linked: bool,
}

/// A listening socket every worker has in its epoll set; one accept queue.
#[derive(Debug, Clone, Default)]
struct Listener {
    queue: VecDeque<u32>,
    /// on each worker's ready list
    linked: Vec<bool>,
}

/// One worker (an nginx worker process on its own CPU): its epoll ready list, the pass it
/// is in, what it is doing.
#[derive(Debug, Clone)]
struct Loop {
    /// the epoll ready list
    ready: VecDeque<Item>,
    /// this pass's events, not yet handled
    pass: VecDeque<Item>,
    state: Worker,
    /// when it last fell asleep in `epoll_wait`
    asleep_since: f64,
    /// per kind of visit (`VisitKinds`), then for the visit that signs, then for any
    /// handler call (the loop's own code): when one last ran here (−∞: never)
    last_ran: Vec<f64>,
}

impl Loop {
    fn new(kinds: usize) -> Loop {
        Loop {
            ready: VecDeque::new(),
            pass: VecDeque::new(),
            state: Worker::Asleep,
            asleep_since: 0.0,
            last_ran: vec![f64::NEG_INFINITY; kinds],
        }
    }
}

/// Sums over one batch.
#[derive(Debug, Clone, Default)]
struct Batch {
    requests: u64,
    class_requests: [u64; 3],
    class_response: [f64; 3],
    class_web_server: [f64; 3],
    start: f64,
    end: f64,
}

struct Sim<'a> {
    routes: &'a [Vec<Step>; 3],
    /// cumulative mix
    cum: [f64; 3],
    /// the last class with a share (rounding in `cum` never draws an empty class)
    last_class: usize,
    think_s: f64,
    set: Settings,
    rng: Rng,
    now: f64,
    seq: u64,
    timers: BinaryHeap<Event>,
    users: Vec<User>,
    listeners: Vec<Listener>,
    /// the workers, each an event loop on its own CPU
    loops: Vec<Loop>,
    /// per class, the worker's time after each handler call that no stage measures
    unmeasured_s: [f64; 3],
    /// an asleep worker's time to run after an event, by how long it slept
    wakeup: &'a IdleCurve,
    /// its CPU for each sleep, paid on waking
    sleep_cpu_s: f64,
    /// a cold visit's CPU beyond its warm part, by how long since its kind last ran on
    /// the CPU
    cold_start: &'a ColdStartCurves,
    /// the CPU outside the stages' share of the record's cold start, paid at each accept
    overhead_cold: OverheadCold,
    kinds: VisitKinds,
    /// the cold start charged while measuring
    cold_charged_s: f64,
    /// the CPUs the workers share beside other work (None: each its own)
    cpus_left: Option<f64>,
    completed: u64,
    /// when measuring began (the warm-up's last completion)
    measuring_from: Option<f64>,
    batches: Vec<Batch>,
    current: Batch,
    /// per class, per step: (sum, count) of the waits before it, while measuring
    waits: [Vec<(f64, u64)>; 3],
}

impl<'a> Sim<'a> {
    fn schedule(&mut self, at: f64, timer: Timer) {
        self.seq += 1;
        self.timers.push(Event {
            at,
            seq: self.seq,
            timer,
        });
    }

    /// `item` ready on worker `w`'s list (once).
    fn link(&mut self, w: usize, item: Item) {
        let linked = match item {
            Item::Conn(u) => &mut self.users[u as usize].linked,
            Item::Listener(l) => &mut self.listeners[l].linked[w],
        };
        if !*linked {
            *linked = true;
            self.loops[w].ready.push_back(item);
        }
    }

    /// A connection came into listener `l`'s accept queue. Every worker has the listener
    /// in its epoll set with EPOLLEXCLUSIVE: the kernel makes it ready in each worker's set
    /// in turn, and stops at the first worker asleep in `epoll_wait`, which it wakes (a
    /// woken worker is no longer waiting: the next connection goes on to the next one). A
    /// busy worker finds it in its next pass; whichever worker comes to it first accepts.
    fn listener_ready(&mut self, l: usize) {
        for w in 0..self.loops.len() {
            self.link(w, Item::Listener(l));
            if self.loops[w].state == Worker::Asleep {
                self.wake(w);
                break;
            }
        }
    }

    /// How long `cpu` seconds of a worker's CPU take from now: as long where each worker
    /// has a CPU of its own; where other work leaves the workers fewer CPUs than are on
    /// CPU now (this one with them), the CPUs left shared equally among those. The speed
    /// is the one of the moment the work begins, kept to its end (an approximation: a
    /// burst begun alone keeps a whole CPU when another begins beside it).
    fn on_cpu(&self, cpu: f64) -> f64 {
        let Some(left) = self.cpus_left else {
            return cpu;
        };
        let others = self
            .loops
            .iter()
            .filter(|l| matches!(l.state, Worker::Serving(_) | Worker::Unmeasured))
            .count();
        cpu / (left / (others + 1) as f64).min(1.0)
    }

    /// Worker `w`, asleep, is woken: it runs once its CPU has woken (`resume` runs it).
    fn wake(&mut self, w: usize) {
        let sleep_cpu = self.on_cpu(self.sleep_cpu_s);
        let lp = &mut self.loops[w];
        let wake = self.wakeup.after(self.now - lp.asleep_since) + sleep_cpu;
        if wake > 0.0 {
            lp.state = Worker::Waking;
            self.schedule(self.now + wake, Timer::Worker(w));
        } else {
            lp.state = Worker::Running;
        }
    }

    fn wait_done(&mut self, u: u32) {
        let user = &self.users[u as usize];
        if self.measuring_from.is_some() {
            let w = &mut self.waits[user.class][user.step];
            w.0 += self.now - user.since;
            w.1 += 1;
        }
    }

    /// User `u` takes its route from its current step until it must wait (a delay, the
    /// accept queue, the ready list) or its request is done.
    fn advance(&mut self, u: u32) {
        let routes = self.routes;
        loop {
            let user = &self.users[u as usize];
            let route = &routes[user.class];
            let Some(step) = route.get(user.step) else {
                self.finish(u);
                return;
            };
            match *step {
                Step::Delay { mean_s } => {
                    let d = self.rng.draw(mean_s, self.set.delay);
                    let user = &mut self.users[u as usize];
                    user.step += 1;
                    user.delayed += d;
                    if d > 0.0 {
                        self.schedule(self.now + d, Timer::User(u));
                        return;
                    }
                }
                Step::Accept { listener } => {
                    self.users[u as usize].since = self.now;
                    self.listeners[listener].queue.push_back(u);
                    self.listener_ready(listener);
                    return;
                }
                Step::Visit { .. } => {
                    let user = &mut self.users[u as usize];
                    user.since = self.now;
                    user.data = true;
                    let w = user.worker;
                    self.link(w, Item::Conn(u));
                    return;
                }
            }
        }
    }

    /// A new request: its class drawn from the mix. A route without an accept (a
    /// hand-written file's) is served by the worker of the user's number, round robin.
    fn begin(&mut self, u: u32) {
        let x = self.rng.uniform();
        let class = self
            .cum
            .iter()
            .position(|&c| x < c)
            .unwrap_or(self.last_class)
            .min(self.last_class);
        self.users[u as usize] = User {
            active: true,
            worker: u as usize % self.loops.len(),
            class,
            start: self.now,
            ..User::default()
        };
        self.advance(u);
    }

    fn finish(&mut self, u: u32) {
        let user = &mut self.users[u as usize];
        user.active = false;
        let (class, r, delayed) = (user.class, self.now - user.start, user.delayed);
        self.completed += 1;
        if self.measuring_from.is_some() {
            let b = &mut self.current;
            b.requests += 1;
            b.class_requests[class] += 1;
            b.class_response[class] += r;
            b.class_web_server[class] += r - delayed;
            if b.requests == self.set.batch {
                b.end = self.now;
                let next = Batch {
                    start: self.now,
                    ..Batch::default()
                };
                self.batches
                    .push(std::mem::replace(&mut self.current, next));
            }
        } else if self.completed == self.set.warmup {
            self.measuring_from = Some(self.now);
            self.current.start = self.now;
        }
        let think = self.rng.draw(self.think_s, self.set.think);
        self.schedule(self.now + think, Timer::User(u));
    }

    /// Worker `w`'s `epoll_wait` with events ready: they become its pass; a listener with
    /// connections left goes back on its (now empty) ready list, ahead of what comes in
    /// meanwhile (level-triggered: on this worker's list only, no one is woken).
    fn harvest(&mut self, w: usize) {
        let take = self.loops[w].ready.len().min(EPOLL_EVENTS);
        let mut rearm = Vec::new();
        for _ in 0..take {
            let item = self.loops[w].ready.pop_front().expect("counted");
            match item {
                Item::Listener(l) => {
                    self.listeners[l].linked[w] = false;
                    if !self.listeners[l].queue.is_empty() {
                        self.loops[w].pass.push_back(item);
                        rearm.push(l);
                    }
                }
                Item::Conn(u) => {
                    let user = &mut self.users[u as usize];
                    debug_assert!(user.data, "only a message puts a connection on the list");
                    user.linked = false;
                    self.loops[w].pass.push_back(item);
                }
            }
        }
        for l in rearm {
            self.link(w, Item::Listener(l));
        }
    }

    /// A cold start charged now, counted while measuring (the utilisation holds it).
    fn charged(&mut self, cold: f64) -> f64 {
        if self.measuring_from.is_some() {
            self.cold_charged_s += cold;
        }
        cold
    }

    /// A handler call on worker `w` now: when the one before it ran.
    fn ran_call(&mut self, w: usize) -> f64 {
        let slot = self.kinds.count + 1;
        std::mem::replace(&mut self.loops[w].last_ran[slot], self.now)
    }

    /// After worker `w`'s handler call for a connection of `class`: its time no stage
    /// measures (the connection has what it needs: its flight is out), and `cold` beside.
    fn unmeasured(&mut self, w: usize, class: usize, cold: f64) {
        let t = self.unmeasured_s[class] + cold;
        if t > 0.0 {
            let t = self.on_cpu(t);
            self.loops[w].state = Worker::Unmeasured;
            self.schedule(self.now + t, Timer::Worker(w));
        }
    }

    /// Worker `w`, running: handles its pass's events in turn (a new pass if none is
    /// left: the events ready, or, with none, it sleeps in `epoll_wait`), until a handler
    /// takes time or the pass is done. Workers take turns pass by pass at one instant
    /// (`resume`): each runs on its own CPU.
    fn work(&mut self, w: usize) {
        let routes = self.routes;
        if self.loops[w].pass.is_empty() {
            let lp = &mut self.loops[w];
            if lp.ready.is_empty() {
                lp.state = Worker::Asleep;
                lp.asleep_since = self.now;
                return;
            }
            self.harvest(w);
        }
        while self.loops[w].state == Worker::Running {
            let Some(item) = self.loops[w].pass.pop_front() else {
                return;
            };
            match item {
                Item::Listener(l) => {
                    // another worker may have taken it first
                    let Some(u) = self.listeners[l].queue.pop_front() else {
                        continue;
                    };
                    self.wait_done(u);
                    let user = &mut self.users[u as usize];
                    user.step += 1;
                    user.worker = w;
                    self.advance(u);
                    // the loop's own code, cold by how long since the worker's last call
                    let since = self.now - self.ran_call(w);
                    let cold = self
                        .charged(self.overhead_cold.share * self.cold_start.record.after(since));
                    self.unmeasured(w, self.users[u as usize].class, cold);
                }
                Item::Conn(u) => {
                    self.wait_done(u);
                    let user = &mut self.users[u as usize];
                    user.data = false;
                    let (class, step) = (user.class, user.step);
                    let (service, cold, handshake) = match &routes[class][step] {
                        Step::Visit {
                            service_s,
                            cold,
                            handshake,
                            ..
                        } => (*service_s, *cold, *handshake),
                        other => unreachable!("a ready connection is at a visit, not {other:?}"),
                    };
                    user.step += 1;
                    self.ran_call(w);
                    let mut s = self.rng.draw(service, self.set.service);
                    if cold > 0.0 {
                        // the kind's last visit here, and (one slot past the kinds) the
                        // last signature
                        let kind = self.kinds.of[class][step];
                        let signed = self.kinds.count;
                        let last = &mut self.loops[w].last_ran;
                        let (kind_away, signed_away) =
                            (self.now - last[kind], self.now - last[signed]);
                        let cold = cold * self.cold_start.paid(handshake, kind_away, signed_away);
                        last[kind] = self.now;
                        if handshake {
                            last[signed] = self.now;
                        }
                        s += self.charged(cold);
                    }
                    if s > 0.0 {
                        let s = self.on_cpu(s);
                        self.loops[w].state = Worker::Serving(u);
                        self.schedule(self.now + s, Timer::Worker(w));
                    } else {
                        self.advance(u);
                        self.unmeasured(w, class, 0.0);
                    }
                }
            }
        }
    }

    /// Each worker after a timer, in turn: going on, or woken by what became ready; again
    /// until none is left running.
    fn resume(&mut self) {
        loop {
            let mut ran = false;
            for w in 0..self.loops.len() {
                let lp = &self.loops[w];
                if lp.state == Worker::Asleep && !lp.ready.is_empty() {
                    self.wake(w);
                }
                if self.loops[w].state == Worker::Running {
                    self.work(w);
                    ran = true;
                }
            }
            if !ran {
                return;
            }
        }
    }

    /// The next timer, and what its worker or user does then.
    fn step(&mut self) {
        let ev = self
            .timers
            .pop()
            .expect("users always have a timer or a place");
        self.now = ev.at;
        match ev.timer {
            Timer::Worker(w) => {
                match std::mem::replace(&mut self.loops[w].state, Worker::Running) {
                    Worker::Serving(u) => {
                        self.advance(u);
                        self.unmeasured(w, self.users[u as usize].class, 0.0);
                    }
                    Worker::Waking | Worker::Unmeasured => {}
                    s => unreachable!("worker {w} has no timer while {s:?}"),
                }
            }
            Timer::User(u) if self.users[u as usize].active => self.advance(u),
            Timer::User(u) => self.begin(u),
        }
        self.resume();
    }

    fn run(&mut self, users: u32) {
        for u in 0..users {
            let think = self.rng.draw(self.think_s, self.set.think);
            self.schedule(think, Timer::User(u));
        }
        if self.set.warmup == 0 {
            self.measuring_from = Some(0.0);
        }
        while self.batches.len() < BATCHES {
            self.step();
        }
    }
}

/// Mean and 95 % half-width of batch values.
fn estimate(values: &[f64]) -> (f64, f64) {
    let k = values.len() as f64;
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mean = values.iter().sum::<f64>() / k;
    if values.len() < 2 {
        return (mean, f64::NAN);
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (k - 1.0);
    (mean, T_975 * (var / k).sqrt())
}

/// The queue stage each step's wait is, per class (None: no name, or not a wait).
fn queue_names(route: &[Step]) -> Vec<Option<&str>> {
    route
        .iter()
        .map(|s| match s {
            Step::Accept { .. } => Some("accept_queue"),
            Step::Visit { queue, .. } => queue.as_deref(),
            Step::Delay { .. } => None,
        })
        .collect()
}

/// The network simulated at `users` users with `set`.
pub fn simulate(net: &Network, users: u32, set: Settings) -> Solution {
    let mut sim = Sim::new(net, users, set);
    sim.run(users);
    sim.solution(net, users)
}

impl<'a> Sim<'a> {
    fn new(net: &'a Network, users: u32, set: Settings) -> Sim<'a> {
        let kinds = VisitKinds::new(&net.routes);
        let workers = net.servers.max(1) as usize;
        let mut cum = [0.0; 3];
        let mut acc = 0.0;
        for (c, m) in net.mix.iter().enumerate() {
            acc += m;
            cum[c] = acc;
        }
        Sim {
            routes: &net.routes,
            cum,
            last_class: (0..3).rev().find(|&c| net.mix[c] > 0.0).unwrap_or(0),
            think_s: net.think_s,
            set,
            rng: Rng::new(set.seed, users),
            now: 0.0,
            seq: 0,
            timers: BinaryHeap::with_capacity(users as usize + 2),
            users: vec![User::default(); users as usize],
            listeners: vec![
                Listener {
                    queue: VecDeque::new(),
                    linked: vec![false; workers],
                };
                listeners(net)
            ],
            loops: vec![Loop::new(kinds.count + 2); workers],
            unmeasured_s: std::array::from_fn(|c| {
                let calls = net.routes[c]
                    .iter()
                    .filter(|s| !matches!(s, Step::Delay { .. }))
                    .count();
                if calls > 0 {
                    net.warm_overhead_s() / calls as f64
                } else {
                    0.0
                }
            }),
            wakeup: &net.wakeup,
            sleep_cpu_s: net.sleep_cpu_s,
            cold_start: &net.cold_start,
            overhead_cold: net.overhead_cold,
            kinds,
            cold_charged_s: 0.0,
            cpus_left: net.cpus_left,
            completed: 0,
            measuring_from: None,
            batches: Vec::with_capacity(BATCHES),
            current: Batch::default(),
            waits: std::array::from_fn(|c| vec![(0.0, 0); net.routes[c].len()]),
        }
    }

    /// The estimates from the batches run. The mean response time is stratified by class,
    /// R = Σ_c mix_c · R_c (the mix as given, not as drawn), as the MVA's is.
    fn solution(&self, net: &Network, users: u32) -> Solution {
        let b = &self.batches;
        let requests: u64 = b.iter().map(|b| b.requests).sum();
        let elapsed = b.last().map_or(0.0, |l| l.end) - b.first().map_or(0.0, |f| f.start);
        let x = requests as f64 / elapsed;
        let (_, x_ci) = estimate(
            &b.iter()
                .map(|b| b.requests as f64 / (b.end - b.start))
                .collect::<Vec<_>>(),
        );
        // a class nobody drew (no share): its stages alone, nobody to meet
        let alone = |c: usize, web_server: bool| -> f64 {
            net.service_s[c] + if web_server { 0.0 } else { net.delay_s[c] }
        };
        let class_mean = |of: &[Batch], c: usize, web_server: bool| -> f64 {
            let n: u64 = of.iter().map(|b| b.class_requests[c]).sum();
            if n == 0 {
                return alone(c, web_server);
            }
            let sum: f64 = of
                .iter()
                .map(|b| match web_server {
                    true => b.class_web_server[c],
                    false => b.class_response[c],
                })
                .sum();
            sum / n as f64
        };
        let mixed = |v: [f64; 3]| -> f64 { (0..3).map(|c| net.mix[c] * v[c]).sum() };
        let class_response_s: [f64; 3] = std::array::from_fn(|c| class_mean(b, c, false));
        let class_web_server_s: [f64; 3] = std::array::from_fn(|c| class_mean(b, c, true));
        let per_batch: Vec<[f64; 3]> = b
            .iter()
            .map(|one| std::array::from_fn(|c| class_mean(std::slice::from_ref(one), c, false)))
            .collect();
        let (_, response_ci) = estimate(&per_batch.iter().map(|v| mixed(*v)).collect::<Vec<_>>());
        let class_ci: [f64; 3] = std::array::from_fn(|c| {
            let drawn: Vec<f64> = b
                .iter()
                .zip(&per_batch)
                .filter(|(one, _)| one.class_requests[c] > 0)
                .map(|(_, v)| v[c])
                .collect();
            estimate(&drawn).1
        });
        let queue_s: [Vec<(String, f64)>; 3] = std::array::from_fn(|c| {
            queue_names(&net.routes[c])
                .into_iter()
                .zip(&self.waits[c])
                .filter_map(|(name, &(sum, n))| {
                    Some((name?.to_owned(), if n > 0 { sum / n as f64 } else { 0.0 }))
                })
                .collect()
        });
        Solution {
            users,
            throughput_per_s: x,
            response_s: mixed(class_response_s),
            class_response_s,
            class_web_server_s,
            // the cold start as charged under this load, not as the window paid it
            utilisation: x
                * (net.warm_service_demand() + self.cold_charged_s / requests.max(1) as f64)
                / net.processors(),
            web_server_users: x * mixed(class_web_server_s),
            ci95: Some(Ci95 {
                response_s: response_ci,
                throughput_per_s: x_ci,
                class_response_s: class_ci,
            }),
            queue_s,
        }
    }
}

/// Listeners the routes use.
fn listeners(net: &Network) -> usize {
    net.routes
        .iter()
        .flatten()
        .filter_map(|s| match s {
            Step::Accept { listener } => Some(listener + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// The model's estimate at each of `users`.
pub fn solve_at(net: &Network, users: &[u32]) -> Vec<Solution> {
    users
        .iter()
        .map(|&n| simulate(net, n, Settings::for_users(net.seed, n)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{network::Discipline, solve_at};

    fn visit(queue: &str, ms: f64) -> Step {
        Step::Visit {
            queue: Some(queue.into()),
            service_s: ms * 1e-3,
            cold: 0.0,
            handshake: false,
        }
    }

    fn delay(ms: f64) -> Step {
        Step::Delay { mean_s: ms * 1e-3 }
    }

    fn accept() -> Step {
        Step::Accept { listener: 0 }
    }

    fn network(think_s: f64, mix: [f64; 3], routes: [Vec<Step>; 3]) -> Network {
        let sum = |r: &[Step], ws: bool| -> f64 {
            r.iter()
                .map(|s| match (s, ws) {
                    (Step::Visit { service_s, .. }, true) => *service_s,
                    (Step::Delay { mean_s }, false) => *mean_s,
                    _ => 0.0,
                })
                .sum()
        };
        let service = |r: &[Step]| -> Vec<f64> {
            r.iter()
                .filter_map(|s| match s {
                    Step::Visit { service_s, .. } => Some(*service_s),
                    Step::Accept { .. } => Some(0.0),
                    Step::Delay { .. } => None,
                })
                .collect()
        };
        Network {
            think_s,
            servers: 1,
            mix,
            service_s: routes.each_ref().map(|r| sum(r, true)),
            delay_s: routes.each_ref().map(|r| sum(r, false)),
            discipline: Discipline::EventLoopSim,
            visits: routes.each_ref().map(|r| service(r).len() as f64),
            visit_sq_s: routes
                .each_ref()
                .map(|r| service(r).iter().map(|s| s * s).sum()),
            routes,
            seed: 7,
            overhead_s: 0.0,
            wakeup: IdleCurve::default(),
            sleep_cpu_s: 0.0,
            cpus_left: None,
            cold_start: ColdStartCurves::default(),
            cold_paid_s: [0.0; 3],
            overhead_cold: Default::default(),
        }
    }

    /// A full and a resumed TLS 1.2 handshake as hstrace measures them on nginx with an
    /// RSA-4096 key (target/validate-model/mix1-users16.json, rounded).
    fn tls(think_s: f64) -> Network {
        network(
            think_s,
            [0.5, 0.5, 0.0],
            [
                vec![
                    accept(),
                    delay(0.05),
                    visit("client_hello_queue", 6.2),
                    delay(1.0),
                    visit("client_flight_2_queue", 0.26),
                    delay(0.25),
                    visit("request_queue", 0.1),
                ],
                vec![
                    accept(),
                    delay(0.05),
                    visit("client_hello_queue", 0.19),
                    delay(0.3),
                    visit("client_flight_2_queue", 0.17),
                ],
                vec![],
            ],
        )
    }

    fn within(sim: f64, ci: f64, want: f64, what: &str) {
        assert!(
            (sim - want).abs() <= 3.0 * ci,
            "{what}: simulated {sim} ± {ci}, want {want}"
        );
    }

    fn queue(s: &Solution, class: usize, name: &str) -> f64 {
        s.queue_s[class]
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", s.queue_s[class]))
            .1
    }

    #[test]
    fn one_user_sees_the_sum_of_its_stages() {
        let net = tls(0.2);
        // constant delays: nobody to wait for, so every request takes exactly its stages
        let set = Settings {
            delay: Dist::Constant,
            ..Settings::for_users(1, 1)
        };
        let s = simulate(&net, 1, set);
        for c in 0..2 {
            let alone = net.service_s[c] + net.delay_s[c];
            assert!(
                (s.class_response_s[c] - alone).abs() < 1e-12,
                "class {c}: {s:?}"
            );
            assert!(s.ci95.unwrap().class_response_s[c] < 1e-12);
            assert!(
                s.queue_s[c].iter().all(|(_, w)| *w == 0.0),
                "{:?}",
                s.queue_s[c]
            );
        }
        // the mix's response: D
        assert!((s.response_s - net.demand()).abs() < 1e-12, "{s:?}");
        // exponential delays (the model's): the same, within the estimate's error
        let s = &solve_at(&net, &[1])[0];
        let ci = s.ci95.unwrap();
        within(s.response_s, ci.response_s, net.demand(), "R");
        let x = 1.0 / (net.demand() + net.think_s);
        within(s.throughput_per_s, ci.throughput_per_s, x, "X");
        assert!(s.queue_s[0].iter().all(|(_, w)| *w == 0.0));
    }

    /// One class, no accept gate, exponential service of one rate: the loop serves in
    /// arrival order, and FCFS with exponential service is product form, so the exact MVA
    /// (which equals processor sharing for one class) is the answer.
    #[test]
    fn without_the_gate_it_is_the_closed_fcfs_network_mva_solves() {
        for route in [
            vec![visit("q", 4.0), delay(1.0)],
            vec![delay(0.5), visit("a", 2.0), delay(0.5), visit("b", 2.0)],
        ] {
            let sim = network(0.02, [1.0, 0.0, 0.0], [route, vec![], vec![]]);
            let exact = Network {
                discipline: Discipline::ProcessorSharing,
                ..sim.clone()
            };
            for n in [2, 5, 10, 20] {
                let set = Settings {
                    service: Dist::Exponential,
                    ..Settings::for_users(3, n)
                };
                let s = simulate(&sim, n, set);
                let want = &solve_at(&exact, &[n])[0];
                let ci = s.ci95.unwrap();
                within(
                    s.response_s,
                    ci.response_s,
                    want.response_s,
                    &format!("N={n} R"),
                );
                within(
                    s.throughput_per_s,
                    ci.throughput_per_s,
                    want.throughput_per_s,
                    &format!("N={n} X"),
                );
                assert!(ci.response_s < 0.02 * s.response_s, "N={n}: {ci:?}");
            }
        }
    }

    #[test]
    fn within_the_bounds_and_on_the_asymptotes() {
        let net = tls(0.2);
        let dmax = net.bottleneck_demand();
        let top = (3.0 * net.n_star()).ceil() as u32;
        let users: Vec<u32> = vec![1, 8, 30, 50, 70, top];
        for s in solve_at(&net, &users) {
            let b = net.bounds(s.users);
            let ci = s.ci95.unwrap();
            assert!(
                s.throughput_per_s <= b.throughput_max_per_s + 3.0 * ci.throughput_per_s,
                "{s:?} {b:?}"
            );
            assert!(
                s.response_s >= b.response_min_s - 3.0 * ci.response_s,
                "{s:?} {b:?}"
            );
            // the mix's means add up, and Little's law at the web server
            let mean: f64 = (0..3).map(|c| net.mix[c] * s.class_response_s[c]).sum();
            assert!((mean - s.response_s).abs() < 1e-9 * s.response_s);
        }
        // far past N*: the worker never idles while anything is ready
        let s = simulate(&net, top, Settings::for_users(1, top));
        assert!((s.throughput_per_s * dmax - 1.0).abs() < 0.01, "{s:?}");
        let asymptote = f64::from(top) * dmax - net.think_s;
        assert!(
            (s.response_s / asymptote - 1.0).abs() < 0.02,
            "{s:?} vs {asymptote}"
        );
    }

    #[test]
    fn the_same_seed_the_same_answer() {
        let net = tls(0.2);
        let a = &solve_at(&net, &[30])[0];
        // (Debug: an empty class's NaN half-width is not == itself)
        assert_eq!(format!("{a:?}"), format!("{:?}", solve_at(&net, &[30])[0]));
        let other = Network {
            seed: 8,
            ..net.clone()
        };
        let b = &solve_at(&other, &[30])[0];
        assert_ne!(a.response_s, b.response_s);
        let ci = a.ci95.unwrap().response_s + b.ci95.unwrap().response_s;
        assert!(
            (a.response_s - b.response_s).abs() <= 2.0 * ci,
            "{a:?} {b:?}"
        );
    }

    /// Three connections at once, one listener, each then 1 ms of work: the loop accepts
    /// one per pass. Pass 1 accepts the first; pass 2 (the listener leads it) the second,
    /// then serves the first; pass 3 accepts the third at 1 ms, then serves the second;
    /// pass 4 the third.
    #[test]
    fn one_accept_per_pass() {
        let net = network(
            1.0,
            [1.0, 0.0, 0.0],
            [vec![accept(), visit("request_queue", 1.0)], vec![], vec![]],
        );
        let sim = all_at_once(&net, 3);
        let (accept_wait, accepted) = sim.waits[0][0];
        let (visit_wait, served) = sim.waits[0][1];
        assert_eq!((accepted, served), (3, 3));
        assert!((accept_wait - 1e-3).abs() < 1e-12, "{accept_wait}");
        // the second waited from its accept (0) to 1 ms, the third from 1 ms to 2 ms
        assert!((visit_wait - 2e-3).abs() < 1e-12, "{visit_wait}");
        assert!((sim.now - 3e-3).abs() < 1e-12);
        assert!((sim.current.class_response[0] - 6e-3).abs() < 1e-12);
    }

    /// `users` users of `net` arriving together at time 0, measured from then, run until
    /// each has made one request.
    fn all_at_once(net: &Network, users: u32) -> Sim<'_> {
        let set = Settings {
            warmup: 0,
            batch: 1_000,
            ..Settings::for_users(1, users)
        };
        let mut sim = Sim::new(net, users, set);
        sim.measuring_from = Some(0.0);
        for u in 0..users {
            sim.begin(u);
        }
        sim.resume();
        while sim.completed < u64::from(users) {
            sim.step();
        }
        sim
    }

    /// Two workers, two connections at once, each then 1 ms of work: the first wakes
    /// worker 0, the second (worker 0 no longer waiting) worker 1; each accepts its own and
    /// serves it in its next pass, side by side.
    #[test]
    fn a_second_connection_wakes_the_second_worker() {
        let net = Network {
            servers: 2,
            ..network(
                1.0,
                [1.0, 0.0, 0.0],
                [vec![accept(), visit("request_queue", 1.0)], vec![], vec![]],
            )
        };
        let sim = all_at_once(&net, 2);
        assert_eq!(sim.users[0].worker, 0);
        assert_eq!(sim.users[1].worker, 1);
        assert_eq!(sim.waits[0][0], (0.0, 2));
        assert!((sim.now - 1e-3).abs() < 1e-12, "{}", sim.now);
        assert!((sim.current.class_response[0] - 2e-3).abs() < 1e-12);
    }

    /// c workers: alone, a request meets nobody, as with one; under load they serve c
    /// times what one can at most, and in between more than one and at most c times it.
    #[test]
    fn several_workers_share_the_load() {
        let one = tls(0.2);
        let two = Network {
            servers: 2,
            ..tls(0.2)
        };
        // very light load: the same R within the estimates' error
        let (a, b) = (&solve_at(&one, &[1])[0], &solve_at(&two, &[1])[0]);
        let ci = a.ci95.unwrap().response_s + b.ci95.unwrap().response_s;
        assert!(
            (a.response_s - b.response_s).abs() <= 2.0 * ci,
            "{a:?} {b:?}"
        );
        within(b.response_s, b.ci95.unwrap().response_s, two.demand(), "R");
        // and with a few users who seldom meet, within 1 %
        let slow = |servers| Network {
            servers,
            ..tls(2.0)
        };
        let (a, b) = (&solve_at(&slow(1), &[3])[0], &solve_at(&slow(2), &[3])[0]);
        assert!(
            (a.response_s / b.response_s - 1.0).abs() < 0.01,
            "{a:?} {b:?}"
        );
        // mid load: more than one loop, at most twice it
        for n in [40, 70] {
            let (a, b) = (&solve_at(&one, &[n])[0], &solve_at(&two, &[n])[0]);
            assert!(
                b.throughput_per_s > a.throughput_per_s
                    && b.throughput_per_s <= 2.0 * a.throughput_per_s,
                "N={n}: {a:?} {b:?}"
            );
            assert!(b.response_s < a.response_s, "N={n}");
        }
        // far past N*: X → 2 / D_ws, both CPUs busy
        let top = (3.0 * two.n_star()).ceil() as u32;
        let s = simulate(&two, top, Settings::for_users(1, top));
        let x_max = 2.0 / one.service_demand();
        assert!(
            (s.throughput_per_s / x_max - 1.0).abs() < 0.01,
            "{s:?} vs {x_max}"
        );
        assert!((s.utilisation - 1.0).abs() < 0.01, "{s:?}");
        // the same seed, the same answer
        assert_eq!(
            format!("{:?}", solve_at(&two, &[30])[0]),
            format!("{:?}", solve_at(&two, &[30])[0])
        );
    }

    /// Other work on the workers' CPUs: a worker busy alone still has a CPU of its own
    /// while one is left; two busy at once share what is left. Far past N*, two workers
    /// beside one CPU of other work serve what one worker alone does.
    #[test]
    fn workers_share_the_cpus_other_work_leaves() {
        let two = |cpus_left| Network {
            servers: 2,
            cpus_left,
            ..tls(0.2)
        };
        let one_user = |net: &Network| solve_at(net, &[1])[0].response_s;
        assert_eq!(one_user(&two(Some(1.0))), one_user(&two(None)));
        // half a CPU left: the one user's flights take twice as long
        let slow = &solve_at(&two(Some(0.5)), &[1])[0];
        let service = two(None).service_demand();
        let want = two(None).demand() + service;
        within(slow.response_s, slow.ci95.unwrap().response_s, want, "R");
        // far past N*, which the CPUs left make smaller: one CPU's throughput
        let shared = two(Some(1.0));
        assert_eq!(shared.processors(), 1.0);
        assert!((shared.n_star() - two(None).n_star() / 2.0).abs() < 1e-9);
        let top = (3.0 * two(None).n_star()).ceil() as u32;
        let x = |net: &Network| simulate(net, top, Settings::for_users(1, top));
        let (x_max, s) = (1.0 / service, x(&shared));
        assert!(
            (s.throughput_per_s / x_max - 1.0).abs() < 0.01,
            "{s:?} vs {x_max}"
        );
        assert!((s.utilisation - 1.0).abs() < 0.01, "{s:?}");
        let whole = x(&two(None)).throughput_per_s;
        assert!((whole / (2.0 * x_max) - 1.0).abs() < 0.01);
    }

    /// An idle worker's CPU takes `wakeup_s` to run it: with one user every handler call
    /// (the accept and each visit) finds it asleep, and each queue stage is that.
    #[test]
    fn waking_up_costs_each_call_that_finds_the_worker_asleep() {
        let wakeup = 0.1e-3;
        let net = Network {
            wakeup: IdleCurve::constant(wakeup),
            ..tls(0.2)
        };
        let set = Settings {
            delay: Dist::Constant,
            ..Settings::for_users(1, 1)
        };
        let s = simulate(&net, 1, set);
        for (c, calls) in [(0, 4.0), (1, 3.0)] {
            let want = net.service_s[c] + net.delay_s[c] + calls * wakeup;
            assert!(
                (s.class_response_s[c] - want).abs() < 1e-12,
                "class {c}: {s:?}"
            );
            assert!(s.queue_s[c].iter().all(|(_, w)| (w - wakeup).abs() < 1e-12));
        }
        // under load most calls find it busy: far less than a wake-up each
        let busy = &solve_at(&net, &[60])[0];
        let asleep = &solve_at(&tls(0.2), &[60])[0];
        let extra = busy.response_s - asleep.response_s;
        assert!(extra < 3.5 * wakeup, "{busy:?} {asleep:?}");
    }

    /// A cold visit pays the cold start for how long since a visit of its kind last ran on
    /// its CPU: one user thinking longer than the curve's last point pays the most
    /// at every visit; under load each visit ran a few milliseconds before, warm, and the
    /// server's throughput is its warm parts'.
    #[test]
    fn a_cold_visit_pays_for_how_long_it_was_away() {
        let most = 0.5e-3;
        let cold_start = ColdStartCurves::every_visit(IdleCurve::curve(vec![
            (0.0, 0.0),
            (0.05, 0.0),
            (1.0, most),
        ]));
        let net = Network {
            routes: tls(2.0).routes.map(|r| {
                r.into_iter()
                    .map(|s| match s {
                        Step::Visit {
                            queue, service_s, ..
                        } => Step::Visit {
                            queue,
                            service_s,
                            cold: 1.0,
                            handshake: false,
                        },
                        s => s,
                    })
                    .collect()
            }),
            cold_start,
            ..tls(2.0)
        };
        let set = Settings {
            delay: Dist::Constant,
            think: Dist::Constant,
            ..Settings::for_users(1, 1)
        };
        let s = simulate(&net, 1, set);
        for (c, visits) in [(0, 3.0), (1, 2.0)] {
            let want = net.service_s[c] + net.delay_s[c] + visits * most;
            // (hours of simulated time: the clock's rounding)
            assert!(
                (s.class_response_s[c] - want).abs() < 1e-9,
                "class {c}: {} want {want}",
                s.class_response_s[c]
            );
        }
        // far past N*: each visit of a class ran a few ms before, within the warm 50 ms
        let top = (3.0 * net.n_star()).ceil() as u32;
        let loaded = simulate(&net, top, Settings::for_users(1, top));
        let x_max = 1.0 / net.service_demand();
        assert!(
            (loaded.throughput_per_s / x_max - 1.0).abs() < 0.01,
            "{loaded:?} vs {x_max}"
        );
        // busy all the time, on the warm parts (the cold start charged is counted)
        assert!((loaded.utilisation - 1.0).abs() < 0.01, "{loaded:?}");
        assert!(
            s.utilisation > s.throughput_per_s * net.service_demand(),
            "{s:?}"
        );
        // the same visits not cold: one user pays every visit's whole cold start less
        let warm = simulate(&tls(2.0), 1, set);
        assert!((s.response_s - warm.response_s - 2.5 * most).abs() < 1e-9);
        // the full handshake's first visit signs: it pays the handshake's curve, four times
        // the record's here; the other visits, and the other class's, the record's
        let mut signing = net.clone();
        if let Some(Step::Visit { handshake, .. }) =
            (signing.routes[0].iter_mut()).find(|s| matches!(s, Step::Visit { .. }))
        {
            *handshake = true;
        }
        signing.cold_start.handshake =
            IdleCurve::curve(vec![(0.0, 0.0), (0.05, 0.0), (1.0, 4.0 * most)]);
        let h = simulate(&signing, 1, set);
        let want = net.service_s[0] + net.delay_s[0] + (2.0 + 4.0) * most;
        assert!((h.class_response_s[0] - want).abs() < 1e-9, "{h:?}");
        assert!((h.class_response_s[1] - s.class_response_s[1]).abs() < 1e-9);
    }

    /// The visit that signs pays the record's curve by its kind's time away and the
    /// handshake's beyond it by the time since the last signature (never below 0); other
    /// visits, or no handshake curve, the record's only.
    #[test]
    fn a_signing_visit_pays_the_signature_since_the_last_signature() {
        let record = IdleCurve::curve(vec![(0.0, 0.0), (1e-3, 10e-6), (0.2, 60e-6)]);
        let handshake = IdleCurve::curve(vec![(0.0, 0.0), (1e-3, 40e-6), (0.2, 240e-6)]);
        let c = ColdStartCurves {
            record: record.clone(),
            handshake,
        };
        // a resumed handshake's first flight ran 1 ms ago, the last signature 200 ms ago
        assert!((c.paid(true, 1e-3, 0.2) - (10e-6 + 180e-6)).abs() < 1e-15);
        assert!((c.paid(false, 1e-3, 0.2) - 10e-6).abs() < 1e-15);
        assert!((c.paid(true, 0.2, 0.2) - 240e-6).abs() < 1e-15);
        // a handshake cheaper than the record (measurement noise) adds nothing
        let low = ColdStartCurves {
            record: record.clone(),
            handshake: IdleCurve::curve(vec![(0.0, 0.0), (0.2, 30e-6)]),
        };
        assert_eq!(low.paid(true, 0.2, 0.2), 60e-6);
        let given = ColdStartCurves::every_visit(record);
        assert_eq!(given.paid(true, 0.2, 0.2), given.paid(false, 0.2, 0.2));
    }

    /// A wake-up by how long the worker slept: each point exact, log-interpolated between,
    /// the nearest outside them; one point is a constant.
    #[test]
    fn a_wakeup_curve_interpolates_on_log_idle() {
        let w = IdleCurve::curve(vec![(1e-4, 10e-6), (0.1, 1e-3)]);
        assert_eq!(w.after(1e-4), 10e-6);
        assert_eq!(w.after(0.1), 1e-3);
        assert_eq!(w.after(1e-6), 10e-6);
        assert_eq!(w.after(5.0), 1e-3);
        // 1 ms is a third of the way from 0.1 ms to 100 ms on log(idle)
        assert!((w.after(1e-3) - (10e-6 + 990e-6 / 3.0)).abs() < 1e-15);
        assert_eq!(w.longest(), 1e-3);
        let c = IdleCurve::constant(5e-5);
        assert_eq!(
            (c.after(0.0), c.after(1e-6), c.after(100.0)),
            (5e-5, 5e-5, 5e-5)
        );
        assert!(IdleCurve::constant(0.0).is_zero() && IdleCurve::default().is_zero());
        assert_eq!(IdleCurve::default().after(1.0), 0.0);
    }

    /// With one user and constant times the worker's sleeps are known: before the accept,
    /// the think time; before each later visit, the delay before it (its handler calls
    /// take no unmeasured time). Each call pays the curve's wake-up for its own sleep.
    #[test]
    fn each_call_pays_the_wakeup_of_its_own_sleep() {
        let curve = IdleCurve::curve(vec![(1e-4, 10e-6), (0.1, 1e-3)]);
        let net = Network {
            wakeup: curve.clone(),
            ..tls(0.2)
        };
        let set = Settings {
            delay: Dist::Constant,
            think: Dist::Constant,
            ..Settings::for_users(1, 1)
        };
        let s = simulate(&net, 1, set);
        let w = |ms: f64| curve.after(ms * 1e-3);
        // full: the accept after 0.2 s thinking, then the ClientHello 0.05 ms, client
        // flight 2 1 ms and the request 0.25 ms after the worker went to sleep
        let full = w(200.0) + w(0.05) + w(1.0) + w(0.25);
        let resumed = w(200.0) + w(0.05) + w(0.3);
        for (c, wakes) in [(0, full), (1, resumed)] {
            let want = net.service_s[c] + net.delay_s[c] + wakes;
            assert!(
                (s.class_response_s[c] - want).abs() < 1e-12,
                "class {c}: {} want {want}",
                s.class_response_s[c]
            );
        }
        assert!((queue(&s, 0, "accept_queue") - 1e-3).abs() < 1e-12);
        assert!((queue(&s, 0, "client_flight_2_queue") - w(1.0)).abs() < 1e-12);
        // the constant wake-up of the curve's longest idle would charge every call that
        assert!(
            s.response_s
                < simulate(
                    &Network {
                        wakeup: IdleCurve::constant(1e-3),
                        ..tls(0.2)
                    },
                    1,
                    set
                )
                .response_s
        );
    }

    /// CPU no stage measures, run after each handler call's measured part: nobody waits
    /// for it with one user, but it is demand: utilisation and the bound X ≤ 1/D_max.
    #[test]
    fn cpu_no_stage_measures_is_demand() {
        let overhead = 0.1e-3;
        let net = Network {
            overhead_s: overhead,
            ..tls(0.2)
        };
        let set = Settings {
            delay: Dist::Constant,
            ..Settings::for_users(1, 1)
        };
        let s = simulate(&net, 1, set);
        let base = tls(0.2);
        // (but for a think time shorter than the user's own last share, 1 in 10⁴)
        assert!((s.response_s - base.demand()).abs() < 1e-7, "{s:?}");
        assert!((net.service_demand() - base.service_demand() - overhead).abs() < 1e-15);
        assert!((s.utilisation - s.throughput_per_s * net.service_demand()).abs() < 1e-12);
        let top = (3.0 * net.n_star()).ceil() as u32;
        let s = simulate(&net, top, Settings::for_users(1, top));
        let x_max = 1.0 / net.bottleneck_demand();
        assert!(
            (s.throughput_per_s / x_max - 1.0).abs() < 0.01,
            "{s:?} {x_max}"
        );
        assert!(x_max < 1.0 / base.bottleneck_demand());
        // and the bounds hold with it: R ≥ the stages alone, X ≤ 1/(D_ws + overhead)
        for n in [1, 20, 60] {
            let s = &solve_at(&net, &[n])[0];
            let (b, ci) = (net.bounds(n), s.ci95.unwrap());
            assert!(s.throughput_per_s <= b.throughput_max_per_s + 3.0 * ci.throughput_per_s);
            assert!(
                s.response_s >= b.response_min_s - 3.0 * ci.response_s,
                "{s:?} {b:?}"
            );
        }
    }

    /// What hstrace's queue stages show on nginx at mid load, and FCFS with one wait for
    /// every visit does not: the accept waits longest (one per pass); the ClientHello, read
    /// in the pass after its accept, a fraction of that; client flight 2 waits longer after
    /// a full handshake (the backlog its signature built) than after a resumed one.
    #[test]
    fn the_waits_have_the_shape_nginx_shows() {
        let net = tls(0.2);
        let s = &solve_at(&net, &[32])[0];
        assert!((0.4..0.65).contains(&s.utilisation), "{s:?}");
        for c in 0..2 {
            let accept = queue(s, c, "accept_queue");
            let hello = queue(s, c, "client_hello_queue");
            assert!(hello < 0.6 * accept, "class {c}: {:?}", s.queue_s[c]);
        }
        let after_full = queue(s, 0, "client_flight_2_queue");
        let after_resumed = queue(s, 1, "client_flight_2_queue");
        assert!(after_full > 2.0 * after_resumed, "{:?}", s.queue_s);
        // and the two MVA solutions bracket it: sharing waits less, the FCFS
        // approximation (every visit one W) more
        let solve = |d| {
            let net = Network {
                discipline: d,
                ..net.clone()
            };
            solve_at(&net, &[32])[0].response_s
        };
        let (ps, el) = (
            solve(Discipline::ProcessorSharing),
            solve(Discipline::EventLoop),
        );
        assert!(ps < s.response_s && s.response_s < el, "{ps} {s:?} {el}");
    }
}
