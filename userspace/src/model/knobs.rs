//! The what-if knobs, each changing only what it names, and the network they make from a
//! server's measured parameters. Also the parsing of the model's option values, each bad
//! one refused with one line saying what to give.

use std::{borrow::Cow, collections::BTreeSet};

use anyhow::{anyhow, bail, Result};

use super::{
    input::{ClassInput, ServerInput, StageMean},
    keys::KeyChange,
    network::{ColdStartCurves, Discipline, IdleCurve, Network, OverheadCold, Step, VisitKinds},
    pick::DisciplineFrom,
};
use crate::{
    cold_start::ColdStart,
    stage::{RequestClass, Stage, StageClass},
};

/// Users beyond this are refused (the solver is O(N · c), the output a row per N).
pub const MAX_USERS: u32 = 1_000_000;
/// User counts reported at most.
pub const MAX_POINTS: usize = 100_000;
/// Web-server processors at most.
pub const MAX_SERVERS: u32 = 1024;

/// The knobs, as given.
#[derive(Debug, Clone, PartialEq)]
pub struct Knobs {
    /// Z, seconds
    pub think_s: f64,
    /// c
    pub servers: u32,
    /// `--servers` was given; otherwise `pick` takes them from the measured architecture
    pub servers_given: bool,
    /// the share of TLS requests that resume (the TLS share unchanged)
    pub hit_ratio: Option<f64>,
    /// divides every service demand
    pub cpu_speedup: f64,
    /// `--other-cpus`: how many of the servers' CPUs other work keeps busy (None: as
    /// measured, the parameters' `host.other_cpus`)
    pub other_cpus: Option<f64>,
    /// the CPUs the servers share beside that work (None: a whole CPU each); made by
    /// `model::effective_knobs`
    pub cpus_left: Option<f64>,
    /// (stage, factor): multiplies that stage's mean in every class that has it
    pub scale_stages: Vec<(String, f64)>,
    /// how the web server shares its processor
    pub discipline: Discipline,
    /// `--discipline` was given; otherwise `pick` takes it from the measured architecture
    pub discipline_given: bool,
    /// where the discipline and servers came from (`pick`)
    pub discipline_from: DisciplineFrom,
    /// why, in one line (`pick`; empty before it)
    pub because: String,
    /// the seed of `--discipline event-loop-sim`
    pub seed: u64,
    /// `--overhead`: the web server's CPU per request that no stage measures, seconds
    pub overhead_s: f64,
    /// `--overhead` was given; otherwise event-loop-sim takes the parameters' measured
    /// CPU outside the stages (`ServerInput::outside_stages_s`) where they have it
    pub overhead_given: bool,
    /// `--wakeup`: how long an idle worker takes to run after an event, by how long it slept
    pub wakeup: IdleCurve,
    /// `--wakeup` was given; otherwise event-loop-sim takes it from the parameters' queue
    /// stages, when they were measured at low load
    pub wakeup_given: bool,
    /// `--sleep-cpu`: the worker's CPU each time it goes to sleep and wakes, seconds
    pub sleep_cpu_s: f64,
    /// `--sleep-cpu` was given; otherwise event-loop-sim takes the parameters' measured
    /// CPU across a wait (`ServerInput::per_wait_s`)
    pub sleep_cpu_given: bool,
    /// `--cold-start`: the CPU a visit pays beyond its warm cost, by how long since it
    /// last ran on its CPU (a full handshake's first flight's own, where measured)
    pub cold_start: ColdStartCurves,
    /// `--cold-start` was given (a curve, `measure` or `none`); otherwise event-loop-sim
    /// takes the parameters' `host.cold_start`
    pub cold_start_given: bool,
    /// the runs `cold_start` was made of: `--cold-start measure`'s, or the parameters'
    pub cold_start_measured: Option<ColdStart>,
    /// where `cold_start` came from
    pub cold_start_from: ColdStartFrom,
    /// `--key-change`: another certificate key, and what a signature costs with each
    pub key_change: Option<KeyChange>,
}

impl Default for Knobs {
    fn default() -> Knobs {
        Knobs {
            think_s: 2.0,
            servers: 1,
            servers_given: false,
            hit_ratio: None,
            cpu_speedup: 1.0,
            other_cpus: None,
            cpus_left: None,
            scale_stages: Vec::new(),
            discipline: Discipline::ProcessorSharing,
            discipline_given: false,
            discipline_from: DisciplineFrom::Default,
            because: String::new(),
            seed: 1,
            overhead_s: 0.0,
            overhead_given: false,
            wakeup: IdleCurve::default(),
            wakeup_given: false,
            sleep_cpu_s: 0.0,
            sleep_cpu_given: false,
            cold_start: ColdStartCurves::default(),
            cold_start_given: false,
            cold_start_measured: None,
            cold_start_from: ColdStartFrom::None,
            key_change: None,
        }
    }
}

impl Knobs {
    /// What every service demand is divided by: `--cpu-speedup`, and the share of a CPU
    /// each server runs at beside the other work on its CPUs (`cpu_share`).
    pub fn speed(&self) -> f64 {
        self.cpu_speedup * self.cpu_share()
    }

    /// The share of a CPU each server runs at beside the other work on its CPUs, where the
    /// solver takes it as one figure: the CPUs left shared by all the servers, at most a
    /// whole one each. The simulation shares them among the workers busy at each moment
    /// instead (`Network::cpus_left`): 1 here.
    pub fn cpu_share(&self) -> f64 {
        match (self.discipline, self.cpus_left) {
            (Discipline::EventLoopSim, _) | (_, None) => 1.0,
            (_, Some(left)) => (left / f64::from(self.servers.max(1))).min(1.0),
        }
    }

    /// The think time for people: 0.196 s, 2 s.
    pub fn think_time(&self) -> String {
        let s = format!("{:.3}", self.think_s);
        format!("{} s", s.trim_end_matches('0').trim_end_matches('.'))
    }

    /// How the web server serves, in words.
    pub fn web_server(&self) -> String {
        match (self.discipline, self.servers) {
            (Discipline::EventLoop, _) => "one event loop, each flight answered in turn".into(),
            (Discipline::EventLoopSim, 1) => format!(
                "one event loop (nginx's: gated passes, one accept per pass), simulated, seed {}",
                self.seed
            ),
            (Discipline::EventLoopSim, c) => format!(
                "{c} event loops sharing the listeners (nginx's workers: gated passes, one accept per pass), simulated, seed {}",
                self.seed
            ),
            (_, 1) => "1 processor shared by all requests".into(),
            (_, c) => format!("{c} processors shared by all requests"),
        }
    }
}

/// `1,10,50`, `1..400` (every integer), `1..400:10` (1, 11, …, 391 and 400), or a mix of
/// these; sorted, each once.
pub fn parse_users(s: &str) -> Result<Vec<u32>> {
    let bad = || {
        anyhow!("--users {s:?} is not a list of user counts: give e.g. 1,10,50 or 1..400 or 1..400:10 (from 1 to {MAX_USERS})")
    };
    let count = |t: &str| -> Result<u32> {
        let n: u32 = t.trim().parse().map_err(|_| bad())?;
        if n == 0 || n > MAX_USERS {
            return Err(bad());
        }
        Ok(n)
    };
    let mut out = Vec::new();
    for item in s.split(',') {
        match item.split_once("..") {
            None => out.push(count(item)?),
            Some((from, rest)) => {
                let (to, step) = match rest.split_once(':') {
                    Some((to, step)) => (to, count(step)?),
                    None => (rest, 1),
                };
                let (from, to) = (count(from)?, count(to)?);
                if to < from {
                    return Err(bad());
                }
                out.extend((from..=to).step_by(step as usize));
                out.push(to);
            }
        }
        if out.len() > MAX_POINTS {
            bail!("--users {s:?} asks for more than {MAX_POINTS} user counts: choose a step, e.g. 1..{MAX_USERS}:1000");
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// `2s`, `500ms`, `150us` or plain seconds (`2`, `0.5`): from 0 to a day.
pub fn parse_seconds(flag: &str, s: &str) -> Result<f64> {
    let t = s.trim();
    let (num, scale) = if let Some(us) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (us, 1e-6)
    } else if let Some(ms) = t.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(sec) = t.strip_suffix('s') {
        (sec, 1.0)
    } else {
        (t, 1.0)
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=86400.0).contains(&(v * scale)) => Ok(v * scale),
        _ => {
            bail!("{flag} {s:?} is not a time between 0 and a day: give e.g. {flag} 2s, 500ms or 2")
        }
    }
}

/// `--wakeup`, `--cold-start` (`flag`): one time (the same after any idle), or
/// `IDLE=TIME,...` (how long the worker had slept, or been away from the work, and the
/// time then), idle strictly ascending.
pub fn parse_idle_curve(flag: &str, s: &str) -> Result<IdleCurve> {
    if !s.contains('=') {
        return Ok(IdleCurve::constant(parse_seconds(flag, s)?));
    }
    let mut points: Vec<(f64, f64)> = Vec::new();
    for pair in s.split(',') {
        let Some((idle, time)) = pair.split_once('=') else {
            bail!("{flag} {s:?}: {pair:?} is not IDLE=TIME: give e.g. {flag} 1ms=50us,200ms=300us");
        };
        let idle = parse_seconds(flag, idle)?;
        let time = parse_seconds(flag, time)?;
        if points.last().is_some_and(|&(last, _)| idle <= last) {
            bail!("{flag} {s:?}: give the idle times in ascending order, each once");
        }
        points.push((idle, time));
    }
    Ok(IdleCurve::curve(points))
}

/// A fraction in [0, 1].
pub fn check_fraction(flag: &str, v: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&v) {
        bail!("{flag} {v} is not a fraction: give a number between 0 and 1");
    }
    Ok(v)
}

/// `0.1,0.2,0.3`: one curve per value.
pub fn parse_fractions(flag: &str, s: &str) -> Result<Vec<f64>> {
    s.split(',')
        .map(|t| {
            let v: f64 = t.trim().parse().map_err(|_| {
                anyhow!("{flag} {s:?} is not a list of fractions: give e.g. {flag} 0.1,0.2,0.3")
            })?;
            check_fraction(flag, v)
        })
        .collect()
}

/// A positive factor.
pub fn check_factor(flag: &str, v: f64) -> Result<f64> {
    if !v.is_finite() || v <= 0.0 {
        bail!("{flag} {v} is not a positive factor: give e.g. {flag} 2 (twice as fast) or 0.5");
    }
    Ok(v)
}

/// A count of CPUs' worth of work: finite, not negative.
pub fn check_cpus(flag: &str, v: f64) -> Result<f64> {
    if !v.is_finite() || v < 0.0 {
        bail!("{flag} {v} is not a number of CPUs: give e.g. {flag} 0.5 (half a CPU busy with other work) or 0");
    }
    Ok(v)
}

/// `STAGE=k`.
pub fn parse_scale(s: &str) -> Result<(String, f64)> {
    let (stage, k) = s.split_once('=').ok_or_else(|| {
        anyhow!(
            "--scale-stage {s:?} is not STAGE=FACTOR: give e.g. --scale-stage server_flight_2=4"
        )
    })?;
    let k: f64 = k.trim().parse().map_err(|_| {
        anyhow!("--scale-stage {s:?}: {k:?} is not a number: give e.g. --scale-stage {stage}=4")
    })?;
    // a stage's time × k: 0 is a stage that takes no time (a client that answers at once)
    if !k.is_finite() || k < 0.0 {
        bail!("--scale-stage {s:?}: {k} is not a factor of the stage's time: give e.g. --scale-stage {stage}=2 (twice as long), 0.5 (half), or 0 (no time at all)");
    }
    Ok((stage.trim().to_owned(), k))
}

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
fn warm(
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
fn warm_overhead(
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

impl Knobs {
    /// The cold start measured (`--cold-start measure`, or the parameters'): its curve, the
    /// cost beyond back to back, with the runs it was made of and where they came from.
    pub fn take_cold_start(&mut self, measured: ColdStart, from: ColdStartFrom) {
        self.cold_start = ColdStartCurves {
            record: IdleCurve::curve(measured.beyond_back_to_back()),
            handshake: measured
                .handshake_beyond_back_to_back()
                .map_or_else(IdleCurve::default, IdleCurve::curve),
        };
        self.cold_start_measured = Some(measured);
        self.cold_start_from = from;
    }
}

/// `--cold-start` as given.
#[derive(Debug, Clone, PartialEq)]
pub enum ColdStartArg {
    /// left out: the parameters' `host.cold_start`, with event-loop-sim
    Parameters,
    /// `none`: not simulated
    None,
    /// `measure`: timed on the model's host, by `model::run`
    Measure,
    /// `SINCE=TIME,...`: one curve for every visit
    Given(IdleCurve),
}

impl ColdStartArg {
    pub fn parse(arg: Option<&str>) -> Result<ColdStartArg> {
        Ok(match arg {
            None => ColdStartArg::Parameters,
            Some("none") => ColdStartArg::None,
            Some("measure") => ColdStartArg::Measure,
            Some(curve) => ColdStartArg::Given(parse_idle_curve("--cold-start", curve)?),
        })
    }

    /// Sets `knobs`' cold start as asked (a curve given is taken here; the parameters' and
    /// a measured one once the discipline is known); whether to measure it.
    pub fn apply(self, knobs: &mut Knobs) -> bool {
        knobs.cold_start_given = self != ColdStartArg::Parameters;
        match self {
            ColdStartArg::Given(curve) => {
                knobs.cold_start = ColdStartCurves::every_visit(curve);
                knobs.cold_start_from = ColdStartFrom::Given;
                false
            }
            ColdStartArg::Measure => true,
            ColdStartArg::Parameters | ColdStartArg::None => false,
        }
    }
}

/// Where the model's cold start came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColdStartFrom {
    /// none: not simulated, `--cold-start none`, or none measured
    None,
    /// `--cold-start SINCE=TIME,...`
    Given,
    /// `--cold-start measure`, on the model's host
    Measured,
    /// the parameters' `host.cold_start`, measured where the servers ran
    Parameters,
}

impl ColdStartFrom {
    pub fn name(self) -> &'static str {
        match self {
            ColdStartFrom::None => "none",
            ColdStartFrom::Given => "given",
            ColdStartFrom::Measured => "measured",
            ColdStartFrom::Parameters => "parameters",
        }
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

/// The product of the --scale-stage factors naming `stage`.
fn scale(knobs: &Knobs, stage: &str) -> f64 {
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

/// The loop's own knobs given to another discipline.
pub const NOT_SIMULATED: &str = "--wakeup, --sleep-cpu and --cold-start are parts of the simulated event loop: give --discipline event-loop-sim";

/// Shares of the mix closer to 0 than this are rounding, and taken as 0.
const MIX_ROUNDING: f64 = 1e-9;

/// The stage a certificate's key signs in: the server's first flight of a full handshake
/// (TLS 1.3 CertificateVerify, TLS 1.2 ECDHE ServerKeyExchange). A resumed handshake and a
/// plain request sign nothing.
const SIGNING: (RequestClass, Stage) = (RequestClass::TlsFull, Stage::ServerFlight1);

/// The signing stage's measured mean, or why `--key-change` has nothing to change.
pub fn signing_stage_s(server: &ServerInput) -> Result<f64> {
    let (class, stage) = SIGNING;
    server.classes[class.index()]
        .stages
        .iter()
        .find(|m| m.name == stage.name())
        .map(|m| m.mean_s)
        .ok_or_else(|| {
            anyhow!(
                "--key-change: server {} has no {} measured for {} handshakes, the stage the key signs in: measure full TLS handshakes first (or model another --server)",
                server.server,
                stage.name(),
                class.name()
            )
        })
}

/// `--key-change`: the signing stage's mean (measured, and with the new key): one
/// signature's difference added, not a factor (the rest of the flight, the key exchange and
/// the records, does not change with the certificate's key), never below zero.
pub fn key_changed_s(server: &ServerInput, k: &KeyChange) -> Result<(f64, f64)> {
    let measured = signing_stage_s(server)?;
    Ok((measured, (measured + k.added_s()).max(0.0)))
}

/// The server's input as measured with `--key-change`'s new key: the signing stage's mean
/// changed, nothing else. What every discipline's network is made of.
pub fn with_key_change<'a>(server: &'a ServerInput, knobs: &Knobs) -> Result<Cow<'a, ServerInput>> {
    let Some(k) = &knobs.key_change else {
        return Ok(Cow::Borrowed(server));
    };
    let (_, with_key) = key_changed_s(server, k)?;
    let (class, stage) = SIGNING;
    let mut changed = server.clone();
    for m in &mut changed.classes[class.index()].stages {
        if m.name == stage.name() {
            m.mean_s = with_key;
        }
    }
    Ok(Cow::Owned(changed))
}

/// The network for one curve.
pub fn network(
    server: &ServerInput,
    knobs: &Knobs,
    secure_fraction: Option<f64>,
) -> Result<Network> {
    // --key-change changes the input itself: every knob and every solver sees the new key
    let server = &*with_key_change(server, knobs)?;
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
    use super::*;
    use crate::model::input::seed_parameters as seed;

    /// `--cold-start` left out, none, measure or a curve: what the knobs then hold and
    /// whether the model measures it.
    #[test]
    fn the_cold_start_argument_sets_the_knobs() {
        let set = |arg: Option<&str>| {
            let mut knobs = Knobs::default();
            let measure = ColdStartArg::parse(arg).unwrap().apply(&mut knobs);
            (knobs, measure)
        };
        let (k, measure) = set(None);
        assert!(!k.cold_start_given && !measure && k.cold_start.is_zero());
        assert_eq!(k.cold_start_from, ColdStartFrom::None);
        let (k, measure) = set(Some("none"));
        assert!(k.cold_start_given && !measure && k.cold_start.is_zero());
        assert_eq!(k.cold_start_from, ColdStartFrom::None);
        let (k, measure) = set(Some("measure"));
        assert!(k.cold_start_given && measure && k.cold_start.is_zero());
        let (k, measure) = set(Some("1ms=2us,200ms=60us"));
        assert!(k.cold_start_given && !measure);
        assert_eq!(k.cold_start_from, ColdStartFrom::Given);
        assert!((k.cold_start.record.after(0.2) - 60e-6).abs() < 1e-12);
        assert!(k.cold_start.handshake.is_zero());
        assert!(ColdStartArg::parse(Some("soon")).is_err());
    }

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

    #[test]
    fn option_values() {
        assert_eq!(parse_users("50,1,10,10").unwrap(), [1, 10, 50]);
        assert_eq!(parse_users("1..4").unwrap(), [1, 2, 3, 4]);
        assert_eq!(parse_users("1..25:10,3").unwrap(), [1, 3, 11, 21, 25]);
        for bad in ["0", "x", "5..1", "1..10:0", "", "2000000"] {
            assert!(parse_users(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_seconds("--think-time", "2s").unwrap(), 2.0);
        assert_eq!(parse_seconds("--think-time", "500ms").unwrap(), 0.5);
        assert_eq!(parse_seconds("--think-time", "0.25").unwrap(), 0.25);
        assert!((parse_seconds("--overhead", "150us").unwrap() - 150e-6).abs() < 1e-18);
        assert!((parse_seconds("--wakeup", "80µs").unwrap() - 80e-6).abs() < 1e-18);
        let close = |got: &[(f64, f64)], want: &[(f64, f64)]| {
            got.len() == want.len()
                && got
                    .iter()
                    .zip(want)
                    .all(|(g, w)| (g.0 - w.0).abs() < 1e-15 && (g.1 - w.1).abs() < 1e-15)
        };
        assert!(close(
            parse_idle_curve("--wakeup", "80us").unwrap().points(),
            &[(0.0, 80e-6)]
        ));
        assert_eq!(
            parse_idle_curve("--wakeup", "0").unwrap(),
            IdleCurve::default()
        );
        let curve = parse_idle_curve("--wakeup", "1ms=50us, 200ms=0.3ms").unwrap();
        assert!(
            close(curve.points(), &[(1e-3, 50e-6), (0.2, 0.3e-3)]),
            "{curve:?}"
        );
        for (bad, says) in [
            ("200ms=1ms,1ms=50us", "ascending"),
            ("1ms=50us,1ms=60us", "ascending"),
            ("1ms=50us,200ms", "IDLE=TIME"),
            ("1ms=-5us", "between 0 and a day"),
        ] {
            let e = parse_idle_curve("--wakeup", bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("--wakeup"), "{bad}: {e}");
        }
        assert!(parse_seconds("--think-time", "-1s").is_err());
        assert!(parse_seconds("--think-time", "2h").is_err());
        assert_eq!(parse_fractions("-p", "0.1, 0.3").unwrap(), [0.1, 0.3]);
        assert!(parse_fractions("-p", "1.5").is_err());
        assert_eq!(
            parse_scale("server_flight_2=4").unwrap(),
            ("server_flight_2".into(), 4.0)
        );
        assert_eq!(
            parse_scale("wait_client_hello=0").unwrap(),
            ("wait_client_hello".into(), 0.0)
        );
        for bad in ["server_flight_2=-1", "server_flight_2=inf"] {
            let e = parse_scale(bad).unwrap_err().to_string();
            assert!(e.contains("twice as long"), "{bad}: {e}");
        }
        assert!(parse_scale("server_flight_2").is_err());
    }

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
        use crate::model::{
            input,
            keys::{CostSource, Key},
        };
        let text = include_str!("../../../examples/parameters.json");
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
        let changed = with_key_change(&s, &k).unwrap().into_owned();
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
            with_key_change(&s, &Knobs::default()).unwrap(),
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
        let cheap = with_key_change(&s, &k).unwrap();
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
