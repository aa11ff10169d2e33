//! The estimator of the measured stage parameters, a sink: per server and request class,
//! each stage's count, mean and percentiles over a sliding window, the cache's hit ratio,
//! and the demands by stage class, made into a `hstrace.parameters/v1` document (v1.rs).
//!
//! Percentiles come from HDR histograms of 2 significant digits (≤ 1 % relative error)
//! over 1 µs … 1000 s; means from exact sums. Memory is bounded: at most `max_servers`
//! servers × 3 classes × 10 stages, each with `SLOTS` histograms of ~6 KiB, allocated
//! only for what is seen; and, to tell the servers' architecture, each process's last
//! `architecture::HELD_RECENT` connections (accept, end), dropped when it has none in the
//! window.

use std::{
    collections::BTreeMap,
    io,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use hdrhistogram::Histogram;

use super::{
    architecture::{self, Held},
    v1::{
        wake_bin, Architecture, Cache, ClassParams, Classes, ColdStartAbsent, Cpu, CpuAfter,
        Demand, GroupParams, GroupStage, Host, Parameters, ServerParams, StageParams, WaitAfter,
        WakeupAfter, Window, LONGEST_SLEEP_S, SCHEMA, WAKE_BINS,
    },
};
use crate::{
    clock::rfc3339_utc,
    cold_start::ColdStart,
    host_cpu::HostCpu,
    ordered::Ordered,
    record::{CloseRecord, Record},
    sink::Sink,
    stage::{Kind, RequestClass, Stage, StageClass, Wakeup},
};

/// Servers (comm:port) the parameters keep apart; more are folded into `other`.
pub const MAX_SERVERS: usize = 64;

/// The window is kept as this many slots of window/SLOTS each.
const SLOTS: usize = 12;
/// Histograms record whole microseconds up to 1000 s, 2 significant digits.
const HIST_MAX_US: u64 = 1_000_000_000;
const HIST_DIGITS: u8 = 2;
/// The server name connections of servers past the cap are counted under.
const OTHER_SERVER: &str = "other";

/// One finished connection, as the estimator sees it.
pub struct Sample<'a> {
    /// "comm:port", e.g. "nginx:443"
    pub server: &'a str,
    /// the process that accepted the connection
    pub pid: u32,
    pub kind: Kind,
    /// wall-clock ns of each stage present
    pub stages: &'a [(Stage, u64)],
    /// on-CPU ns of service stages (may be empty)
    pub cpu: &'a [(Stage, u64)],
    /// on-CPU ns across the waits between service stages (may be empty)
    pub wait_cpu: &'a [(Stage, u64)],
    /// the stages of `cpu` that began on a CPU that had been idle (None: not known)
    pub idle_before: Option<&'a [Stage]>,
    /// the messages taken by a call that woke its CPU, with how long it had slept
    pub wakeups: &'a [Wakeup],
    /// the client offered resumption
    pub resumption_offered: bool,
    /// the key exchange's group (`Record::tls_group`), when known
    pub tls_group: Option<&'a str>,
    /// when the process accepted the connection and when its record was made (ns, one
    /// clock); None when the accept was not seen
    pub held: Option<(i128, i128)>,
}

/// One stage's samples in one slot.
#[derive(Clone)]
struct StageAcc {
    hist: Histogram<u32>,
    count: u64,
    sum_ns: u128,
    cpu_count: u64,
    cpu_sum_ns: u128,
    /// by what the CPU did before the service stage (this one, or the one that read a
    /// queue stage's message): [idle, busy], each (count, on-CPU ns of a service stage or
    /// wall ns of a queue stage)
    after: [(u64, u128); 2],
}

/// An empty histogram of whole microseconds, as every one here is.
fn us_histogram() -> Histogram<u32> {
    Histogram::new_with_bounds(1, HIST_MAX_US, HIST_DIGITS).expect("valid histogram bounds")
}

impl StageAcc {
    fn new() -> StageAcc {
        StageAcc {
            hist: us_histogram(),
            count: 0,
            sum_ns: 0,
            cpu_count: 0,
            cpu_sum_ns: 0,
            after: [(0, 0); 2],
        }
    }

    fn merge(&mut self, o: &StageAcc) {
        // same bounds: adding cannot fail
        let _ = self.hist.add(&o.hist);
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        self.cpu_count += o.cpu_count;
        self.cpu_sum_ns += o.cpu_sum_ns;
        for (mine, theirs) in self.after.iter_mut().zip(o.after) {
            mine.0 += theirs.0;
            mine.1 += theirs.1;
        }
    }

    /// Files `ns` under what `reader` (this service stage, or the one that read this queue
    /// stage's message) found: its CPU idle (listed in `idle`) or busy.
    fn split(&mut self, idle: &[Stage], reader: Stage, ns: u64) {
        let a = &mut self.after[usize::from(!idle.contains(&reader))];
        a.0 += 1;
        a.1 += u128::from(ns);
    }

    /// The stages that began (a service stage) or were read (a queue stage) after the CPU
    /// was idle (`i` 0) or busy (1), if any: (count, mean seconds).
    fn after(&self, i: usize) -> Option<(u64, f64)> {
        let (count, sum_ns) = self.after[i];
        (count > 0).then(|| (count, sum_ns as f64 / 1e9 / count as f64))
    }
}

/// The groups a server's full handshakes are kept by, at most (a server agrees only on
/// groups it is configured with; any past these count under "other").
const MAX_GROUPS: usize = 32;

/// One key-exchange group's full handshakes in one slot: how many, and each service and
/// delay stage's (count, wall ns, on-CPU count, on-CPU ns), by `Stage::index`.
#[derive(Clone, Default)]
struct GroupAcc {
    count: u64,
    stages: [(u64, u128, u64, u128); Stage::ALL.len()],
}

impl GroupAcc {
    fn merge(&mut self, o: &GroupAcc) {
        self.count += o.count;
        for (mine, theirs) in self.stages.iter_mut().zip(&o.stages) {
            mine.0 += theirs.0;
            mine.1 += theirs.1;
            mine.2 += theirs.2;
            mine.3 += theirs.3;
        }
    }
}

/// One server's counts in one slot.
#[derive(Clone, Default)]
struct ServerAcc {
    connections: u64,
    /// connections by the process that accepted them
    by_pid: BTreeMap<u32, u64>,
    failed: u64,
    offered: u64,
    classes: [u64; 3],
    /// the waits between service stages with their CPU read, and that CPU (whole µs)
    waits: u64,
    wait_cpu: Option<Box<Histogram<u32>>>,
    /// by class, then stage (`Stage::index`)
    stages: [[Option<Box<StageAcc>>; Stage::ALL.len()]; 3],
    /// the waits of the messages taken by a call that woke its CPU, by how long the CPU
    /// had slept (`wake_bin`)
    wakeups: [WakeAcc; WAKE_BINS],
    /// full TLS handshakes whose group is known, by group (at most `MAX_GROUPS` + other)
    groups: BTreeMap<String, GroupAcc>,
}

/// The wake-ups of one bin of sleep lengths.
#[derive(Clone, Copy, Default)]
struct WakeAcc {
    count: u64,
    asleep_ns: u128,
    wait_ns: u128,
}

impl ServerAcc {
    fn add(&mut self, s: &Sample) {
        self.connections += 1;
        *self.by_pid.entry(s.pid).or_default() += 1;
        // the CPU's, whatever became of the connection
        for w in s.wakeups {
            let asleep_ns = w.asleep_ns.min((LONGEST_SLEEP_S * 1e9) as u64);
            let bin = &mut self.wakeups[wake_bin(asleep_ns as f64 / 1e9)];
            bin.count += 1;
            bin.asleep_ns += u128::from(asleep_ns);
            bin.wait_ns += u128::from(w.wait_ns);
        }
        if !s.wait_cpu.is_empty() {
            let h = self
                .wait_cpu
                .get_or_insert_with(|| Box::new(us_histogram()));
            for (_, ns) in s.wait_cpu {
                h.saturating_record(ns / 1000);
                self.waits += 1;
            }
        }
        let Some(class) = s.kind.class() else {
            self.failed += 1;
            return;
        };
        if class != RequestClass::Plain && s.resumption_offered {
            self.offered += 1;
        }
        let c = class.index();
        self.classes[c] += 1;
        for (stage, ns) in s.stages {
            let acc =
                self.stages[c][stage.index()].get_or_insert_with(|| Box::new(StageAcc::new()));
            // whole microseconds: a sub-µs stage is 0
            acc.hist.saturating_record(ns / 1000);
            acc.count += 1;
            acc.sum_ns += u128::from(*ns);
            // a queue split by whether the CPU idled before its message was read
            let reader = stage.read_by(s.stages);
            if let (Some(idle), Some(reader)) = (s.idle_before, reader) {
                if s.cpu.iter().any(|(c, _)| *c == reader) {
                    acc.split(idle, reader, *ns);
                }
            }
        }
        if class == RequestClass::TlsFull {
            if let Some(group) = s.tls_group {
                self.add_group(group, s);
            }
        }
        for (stage, ns) in s.cpu {
            if let Some(acc) = self.stages[c][stage.index()].as_mut() {
                acc.cpu_count += 1;
                acc.cpu_sum_ns += u128::from(*ns);
                if let Some(idle) = s.idle_before {
                    acc.split(idle, *stage, *ns);
                }
            }
        }
    }

    /// A full handshake of `group`: its service stages, wall and on-CPU, and its delay
    /// stages (the client's part: a hybrid client's key generation and decapsulation).
    fn add_group(&mut self, group: &str, s: &Sample) {
        let key = if self.groups.contains_key(group) || self.groups.len() < MAX_GROUPS {
            group
        } else {
            OTHER_SERVER
        };
        let g = self.groups.entry(key.to_owned()).or_default();
        g.count += 1;
        for (stage, ns) in s.stages {
            if stage.class() != StageClass::Queue {
                let a = &mut g.stages[stage.index()];
                a.0 += 1;
                a.1 += u128::from(*ns);
            }
        }
        for (stage, ns) in s.cpu {
            let a = &mut g.stages[stage.index()];
            a.2 += 1;
            a.3 += u128::from(*ns);
        }
    }

    fn merge(&mut self, o: &ServerAcc) {
        self.connections += o.connections;
        for (group, theirs) in &o.groups {
            self.groups.entry(group.clone()).or_default().merge(theirs);
        }
        for (mine, theirs) in self.wakeups.iter_mut().zip(&o.wakeups) {
            mine.count += theirs.count;
            mine.asleep_ns += theirs.asleep_ns;
            mine.wait_ns += theirs.wait_ns;
        }
        for (pid, n) in &o.by_pid {
            *self.by_pid.entry(*pid).or_default() += n;
        }
        self.failed += o.failed;
        self.offered += o.offered;
        self.waits += o.waits;
        if let Some(t) = &o.wait_cpu {
            match &mut self.wait_cpu {
                // same bounds: adding cannot fail
                Some(m) => {
                    let _ = m.add(&**t);
                }
                None => self.wait_cpu = Some(t.clone()),
            }
        }
        for c in 0..3 {
            self.classes[c] += o.classes[c];
            for (mine, theirs) in self.stages[c].iter_mut().zip(&o.stages[c]) {
                if let Some(t) = theirs {
                    match mine {
                        Some(m) => m.merge(t),
                        None => *mine = Some(t.clone()),
                    }
                }
            }
        }
    }
}

struct Slot {
    /// index of the slot since the estimator began
    seq: u64,
    servers: BTreeMap<String, ServerAcc>,
    /// by process: what its connections' service stages and the process itself ran
    procs: BTreeMap<u32, ProcAcc>,
    /// the traced processes' CPUs (the source's once-a-second readings)
    host: HostAcc,
}

/// What the traced processes' CPUs did in one slot (or the window).
#[derive(Clone, Copy, Default)]
struct HostAcc {
    span_ns: u128,
    busy_ns: u128,
    traced_ns: u128,
    /// the most CPUs the traced processes could use at a reading
    cpus: u32,
}

impl HostAcc {
    fn add(&mut self, h: &HostCpu) {
        self.merge(&HostAcc {
            span_ns: h.span_ns.into(),
            busy_ns: h.busy_ns.into(),
            traced_ns: h.traced_ns.into(),
            cpus: h.cpus,
        });
    }

    fn merge(&mut self, o: &HostAcc) {
        self.span_ns += o.span_ns;
        self.busy_ns += o.busy_ns;
        self.traced_ns += o.traced_ns;
        self.cpus = self.cpus.max(o.cpus);
    }

    /// The CPUs the servers may use, and how many of them everything else kept busy on
    /// average (None before two readings).
    fn server_cpus(&self) -> Option<(u32, f64)> {
        (self.span_ns > 0 && self.cpus > 0).then(|| {
            let other = self.busy_ns.saturating_sub(self.traced_ns) as f64 / self.span_ns as f64;
            (self.cpus, other.min(f64::from(self.cpus)))
        })
    }
}

/// One traced process's CPU in one slot.
#[derive(Clone, Copy, Default)]
struct ProcAcc {
    connections: u64,
    /// the on-CPU time of its connections' service stages
    stage_cpu_ns: u128,
    /// connections with a service stage but no stage CPU (no on-CPU reading): its CPU
    /// cannot be split. One that ended before any service stage (a port check, a client
    /// that left before its ClientHello) has nothing to split and is not counted here.
    without_cpu: u64,
    /// the process's whole CPU time (`Estimator::add_cpu`)
    cpu_ns: u128,
    /// the most connections it held at once, as its records came in this slot
    most_at_once: u32,
}

impl ProcAcc {
    fn merge(&mut self, o: &ProcAcc) {
        self.connections += o.connections;
        self.stage_cpu_ns += o.stage_cpu_ns;
        self.without_cpu += o.without_cpu;
        self.cpu_ns += o.cpu_ns;
        self.most_at_once = self.most_at_once.max(o.most_at_once);
    }
}

/// Where the estimator reads what its records do not carry, when a document is made.
#[derive(Clone, Copy)]
pub struct Probe {
    /// a process's threads (None: gone)
    pub threads: fn(u32) -> Option<u32>,
    /// the host's CPUs online
    pub cpus: fn() -> Option<u32>,
}

impl Default for Probe {
    fn default() -> Probe {
        Probe {
            threads: architecture::proc_threads,
            cpus: architecture::online_cpus,
        }
    }
}

/// A process's recent connections, and the slot of its last.
struct ProcHeld {
    held: Held,
    seq: u64,
}

/// The sliding-window estimator.
pub struct Estimator {
    window: Duration,
    max_servers: usize,
    start: Instant,
    slots: Vec<Slot>,
    /// servers seen (kept by name up to `max_servers`)
    known: std::collections::BTreeSet<String>,
    /// by process, its recent connections (dropped with its last slot)
    held: BTreeMap<u32, ProcHeld>,
    probe: Probe,
    /// the host's cold start, once the source has measured it
    cold_start: Option<ColdStart>,
    /// why there is none: not asked until the source says it was
    cold_start_absent: ColdStartAbsent,
    /// when the run stopped tracing (`Sink::stopped`): a run's window ends there, not
    /// after the wait for the cold start
    stopped: Option<(Instant, SystemTime)>,
}

impl Estimator {
    /// `window`: the parameters cover the last `window`; `max_servers`: servers kept by
    /// name (further ones are counted as server "other").
    pub fn new(window: Duration, max_servers: usize) -> Estimator {
        Estimator {
            window: window.max(Duration::from_millis(SLOTS as u64)),
            max_servers,
            start: Instant::now(),
            slots: Vec::new(),
            known: Default::default(),
            held: BTreeMap::new(),
            probe: Probe::default(),
            cold_start: None,
            cold_start_absent: ColdStartAbsent::NotAsked,
            stopped: None,
        }
    }

    /// The same, reading threads and CPUs with `probe` (tests).
    pub fn with_probe(self, probe: Probe) -> Estimator {
        Estimator { probe, ..self }
    }

    /// An estimator of a whole run of `duration` (`export --duration`, `report`): its
    /// window twice the run, so that stopping a moment after `duration` does not push the
    /// run's first slot out of the window.
    pub fn for_run(duration: Duration, max_servers: usize) -> Estimator {
        Estimator::new(duration * 2, max_servers)
    }

    fn slot_len(&self) -> Duration {
        self.window / SLOTS as u32
    }

    fn seq(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.start).as_nanos() / self.slot_len().as_nanos()) as u64
    }

    /// Drop slots that fell out of the window ending at `now`, and the connections of
    /// processes with none in it.
    fn expire(&mut self, now: Instant) {
        let seq = self.seq(now);
        self.slots.retain(|s| s.seq + SLOTS as u64 > seq);
        self.held.retain(|_, h| h.seq + SLOTS as u64 > seq);
    }

    /// The slot of `now`, made if new.
    fn slot(&mut self, now: Instant) -> &mut Slot {
        self.expire(now);
        let seq = self.seq(now);
        if self.slots.last().is_none_or(|l| l.seq != seq) {
            self.slots.push(Slot {
                seq,
                servers: BTreeMap::new(),
                procs: BTreeMap::new(),
                host: HostAcc::default(),
            });
        }
        self.slots.last_mut().expect("pushed above")
    }

    /// Process `pid` ran `ns` more nanoseconds of CPU (the source's once-a-second look at
    /// the traced processes).
    pub fn add_cpu(&mut self, now: Instant, pid: u32, ns: u64) {
        self.slot(now).procs.entry(pid).or_default().cpu_ns += u128::from(ns);
    }

    /// The traced processes' CPUs since the last reading (`Sink::host_cpu`).
    pub fn add_host_cpu(&mut self, now: Instant, h: &HostCpu) {
        self.slot(now).host.add(h);
    }

    pub fn add(&mut self, now: Instant, s: &Sample) {
        let seq = self.seq(now);
        let most = s.held.map(|(accept, end)| {
            let h = self.held.entry(s.pid).or_insert_with(|| ProcHeld {
                held: Held::default(),
                seq,
            });
            h.seq = seq;
            h.held.add(accept, end)
        });
        let slot = self.slot(now);
        let proc = slot.procs.entry(s.pid).or_default();
        proc.connections += 1;
        proc.most_at_once = proc.most_at_once.max(most.unwrap_or(0));
        // (a preamble's service has no on-CPU reading: its CPU counts as outside the
        // stages, as accepting does)
        let served = s.stages.iter().any(|(st, _)| st.has_cpu());
        if served && s.cpu.is_empty() {
            proc.without_cpu += 1;
        }
        proc.stage_cpu_ns += s.cpu.iter().map(|(_, ns)| u128::from(*ns)).sum::<u128>();
        let server = if self.known.contains(s.server) {
            s.server
        } else if self.known.len() < self.max_servers {
            self.known.insert(s.server.to_owned());
            s.server
        } else {
            OTHER_SERVER
        };
        let slot = self.slots.last_mut().expect("made above");
        match slot.servers.get_mut(server) {
            Some(acc) => acc.add(s),
            None => slot.servers.entry(server.to_owned()).or_default().add(s),
        }
    }

    /// The parameters over the window ending at `now` (`wall_now`: the same instant on the
    /// wall clock).
    pub fn parameters(&mut self, now: Instant, wall_now: SystemTime) -> Parameters {
        let (now, wall_now) = match self.stopped {
            Some((at, wall_at)) => (at.min(now), wall_at.min(wall_now)),
            None => (now, wall_now),
        };
        self.expire(now);
        let mut merged: BTreeMap<String, ServerAcc> = BTreeMap::new();
        let mut procs: BTreeMap<u32, ProcAcc> = BTreeMap::new();
        let mut host = HostAcc::default();
        for slot in &self.slots {
            host.merge(&slot.host);
            for (name, acc) in &slot.servers {
                merged.entry(name.clone()).or_default().merge(acc);
            }
            for (pid, acc) in &slot.procs {
                procs.entry(*pid).or_default().merge(acc);
            }
        }
        // what the kept slots cover (`expire` keeps the current slot and the SLOTS - 1
        // before it): the whole ones before the current, and the current one so far
        let slot = self.slot_len();
        let whole = self.seq(now).min(SLOTS as u64 - 1) as u32;
        let into_current = now.saturating_duration_since(self.start).as_nanos() % slot.as_nanos();
        let covered = slot * whole + Duration::from_nanos(into_current as u64);
        let seconds = covered.as_secs_f64();
        let end_ns = wall_now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        let probe = self.probe;
        Parameters {
            schema: SCHEMA.to_owned(),
            window: Some(Window {
                start: rfc3339_utc(end_ns - covered.as_nanos() as i128),
                end: rfc3339_utc(end_ns),
                seconds,
            }),
            host: (probe.cpus)().map(|cpus| {
                let (server_cpus, other_cpus) = host.server_cpus().unzip();
                Host {
                    cpus,
                    server_cpus,
                    other_cpus,
                    cold_start: self.cold_start.clone(),
                    cold_start_absent: self.cold_start.is_none().then_some(self.cold_start_absent),
                }
            }),
            servers: merged
                .into_iter()
                .map(|(name, acc)| {
                    let cpu = with_waits(server_cpu(&acc, &procs), &acc);
                    let arch = server_architecture(&acc, &procs, probe.threads);
                    ServerParams {
                        architecture: Some(arch),
                        ..server_params(name, &acc, seconds, cpu)
                    }
                })
                .collect(),
        }
    }
}

/// How the server's processes held its connections over the window: how many accepted
/// them, the most one held at once (whatever their server: one process, one way of
/// serving), the most threads among them now, and the kind those make.
fn server_architecture(
    acc: &ServerAcc,
    procs: &BTreeMap<u32, ProcAcc>,
    threads: fn(u32) -> Option<u32>,
) -> Architecture {
    let most_at_once = acc
        .by_pid
        .keys()
        .filter_map(|pid| procs.get(pid))
        .map(|p| p.most_at_once)
        .max()
        .unwrap_or(0);
    let threads = acc.by_pid.keys().filter_map(|&pid| threads(pid)).max();
    let processes = acc.by_pid.len();
    Architecture {
        kind: architecture::classify(processes, most_at_once, threads),
        processes: u32::try_from(processes).unwrap_or(u32::MAX),
        most_at_once,
        threads,
    }
}

/// The share of a server's connections that may lack an on-CPU reading of their service
/// stages for its CPU to be split into the stages' and the rest.
const MAX_UNREAD: f64 = 0.01;

/// The CPU per connection of a server's connections (`acc`) from its processes' CPU
/// (`procs`): each process's CPU time over the window divided among all the connections it
/// accepted (whatever their server), averaged over this server's connections by process.
/// A process may show no CPU of its own (a prefork child whose connection came before the
/// look that first read it); the server's processes together hold the server's CPU.
/// Unknown (nulls) when none of them showed CPU, or more than `MAX_UNREAD` of its served
/// connections have no on-CPU time of their stages.
fn server_cpu(acc: &ServerAcc, procs: &BTreeMap<u32, ProcAcc>) -> Cpu {
    let unknown = Cpu::default();
    let (mut whole, mut stages, mut n, mut unread) = (0.0, 0.0, 0u64, 0.0);
    for (pid, count) in &acc.by_pid {
        let Some(p) = procs.get(pid) else {
            return unknown;
        };
        if p.connections == 0 {
            return unknown;
        }
        let share = *count as f64 / p.connections as f64;
        whole += p.cpu_ns as f64 / 1e9 * share;
        stages += p.stage_cpu_ns as f64 / 1e9 * share;
        unread += p.without_cpu as f64 * share;
        n += count;
    }
    // a few served connections without an on-CPU reading are given the others' mean stage
    // CPU; more, and the split would be a guess
    if n == 0 || whole == 0.0 || unread > n as f64 * MAX_UNREAD {
        return unknown;
    }
    let stages = stages * n as f64 / (n as f64 - unread);
    Cpu {
        per_connection_s: Some(whole / n as f64),
        // the stages' CPU is read at their edges, the processes' once a second: over a
        // short window the two can cross; never less than nothing outside
        outside_stages_s: Some((whole - stages).max(0.0) / n as f64),
        ..unknown
    }
}

/// `cpu` with the server's waits between service stages: their median CPU (an event loop's
/// own cost of a sleep; under load some waits also hold other connections' work, which
/// the median leaves out while most do not), and how many a connection has (null
/// without any).
fn with_waits(cpu: Cpu, acc: &ServerAcc) -> Cpu {
    Cpu {
        per_wait_s: acc
            .wait_cpu
            .as_ref()
            .filter(|h| !h.is_empty())
            .map(|h| h.value_at_quantile(0.5) as f64 * 1e-6),
        waits_per_connection: (acc.waits > 0 && acc.connections > 0)
            .then(|| acc.waits as f64 / acc.connections as f64),
        ..cpu
    }
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

fn server_params(server: String, acc: &ServerAcc, seconds: f64, cpu: Cpu) -> ServerParams {
    let classified: u64 = acc.classes.iter().sum();
    let class = |class: RequestClass| {
        let c = class.index();
        let count = acc.classes[c];
        let mut demand_s = Demand::default();
        let stages = Stage::ALL
            .into_iter()
            .filter_map(|stage| {
                let a = acc.stages[c][stage.index()].as_deref()?;
                let q = |p: f64| a.hist.value_at_quantile(p) as f64 / 1e6;
                // the split, where the stage is of `class`
                let split = |i, class| a.after(i).filter(|_| stage.class() == class);
                let mean_s = a.sum_ns as f64 / 1e9 / a.count as f64;
                demand_s.add(stage.class(), mean_s);
                Some((
                    stage.name().to_owned(),
                    StageParams {
                        class: stage.class(),
                        count: a.count,
                        mean_s,
                        p50_s: q(0.5),
                        p90_s: q(0.9),
                        p99_s: q(0.99),
                        cpu_mean_s: (a.cpu_count > 0)
                            .then(|| a.cpu_sum_ns as f64 / 1e9 / a.cpu_count as f64),
                        after_idle: split(0, StageClass::Service)
                            .map(|(count, cpu_mean_s)| CpuAfter { count, cpu_mean_s }),
                        after_busy: split(1, StageClass::Service)
                            .map(|(count, cpu_mean_s)| CpuAfter { count, cpu_mean_s }),
                        wait_after_idle: split(0, StageClass::Queue)
                            .map(|(count, mean_s)| WaitAfter { count, mean_s }),
                        wait_after_busy: split(1, StageClass::Queue)
                            .map(|(count, mean_s)| WaitAfter { count, mean_s }),
                    },
                ))
            })
            .collect();
        ClassParams {
            share: ratio(count, classified).unwrap_or(0.0),
            count,
            rate_per_s: if seconds > 0.0 {
                count as f64 / seconds
            } else {
                0.0
            },
            stages: Ordered(stages),
            demand_s,
        }
    };
    let full = acc.classes[RequestClass::TlsFull.index()];
    let resumed = acc.classes[RequestClass::TlsResumed.index()];
    let known: u64 = acc.groups.values().map(|g| g.count).sum();
    let mut key_exchange: Vec<GroupParams> = acc
        .groups
        .iter()
        .map(|(group, g)| {
            // the stages of one class in stage order, and the sum of their means
            let of = |class: StageClass| {
                let mut sum_s = 0.0;
                let stages = Stage::ALL
                    .into_iter()
                    .filter(|stage| stage.class() == class)
                    .filter_map(|stage| {
                        let (count, sum_ns, cpu_count, cpu_ns) = g.stages[stage.index()];
                        (count > 0).then(|| {
                            let mean_s = sum_ns as f64 / 1e9 / count as f64;
                            sum_s += mean_s;
                            let cpu_mean_s =
                                (cpu_count > 0).then(|| cpu_ns as f64 / 1e9 / cpu_count as f64);
                            let stage_params = GroupStage {
                                count,
                                mean_s,
                                cpu_mean_s,
                            };
                            (stage.name().to_owned(), stage_params)
                        })
                    })
                    .collect();
                (Ordered(stages), sum_s)
            };
            let (stages, service_s) = of(StageClass::Service);
            let (delay_stages, delay_s) = of(StageClass::Delay);
            GroupParams {
                group: group.clone(),
                count: g.count,
                share: ratio(g.count, known).unwrap_or(0.0),
                stages,
                service_s,
                delay_stages: Some(delay_stages),
                delay_s: Some(delay_s),
            }
        })
        .collect();
    key_exchange.sort_by(|a, b| b.count.cmp(&a.count).then(a.group.cmp(&b.group)));
    ServerParams {
        server,
        connections: acc.connections,
        failed: acc.failed,
        cache: Cache {
            offered: acc.offered,
            accepted: resumed,
            hit_ratio: ratio(resumed, acc.offered),
            resumption_rate: ratio(resumed, full + resumed),
        },
        cpu,
        architecture: None,
        wakeup_after_idle: acc
            .wakeups
            .iter()
            .filter(|b| b.count > 0)
            .map(|b| WakeupAfter {
                idle_s: b.asleep_ns as f64 / 1e9 / b.count as f64,
                count: b.count,
                mean_s: b.wait_ns as f64 / 1e9 / b.count as f64,
            })
            .collect(),
        key_exchange,
        classes: Classes {
            tls_full: class(RequestClass::TlsFull),
            tls_resumed: class(RequestClass::TlsResumed),
            plain: class(RequestClass::Plain),
        },
    }
}

/// The estimator fed as a sink: every record a sample (at the time it comes), every
/// process's CPU as the source reads it.
impl Sink for Estimator {
    fn connection(&mut self, r: &Record) -> io::Result<()> {
        let server = r.server();
        self.add(
            Instant::now(),
            &Sample {
                server: &server,
                pid: r.pid,
                kind: r.kind,
                stages: &r.stages_ns.0,
                cpu: &r.cpu_ns.0,
                wait_cpu: &r.wait_cpu_ns.0,
                idle_before: r.idle_before.as_deref(),
                wakeups: &r.wakeups,
                resumption_offered: r.resumption_offered,
                tls_group: r.tls_group.as_deref(),
                held: r.held_ns.map(|ns| (r.wall_ns - i128::from(ns), r.wall_ns)),
            },
        );
        Ok(())
    }

    fn close(&mut self, _c: &CloseRecord) -> io::Result<()> {
        Ok(())
    }

    fn process_cpu(&mut self, pid: u32, ns: u64) {
        self.add_cpu(Instant::now(), pid, ns);
    }

    fn host_cpu(&mut self, h: &HostCpu) {
        self.add_host_cpu(Instant::now(), h);
    }

    fn cold_start(&mut self, c: &ColdStart) {
        self.cold_start = Some(c.clone());
    }

    fn cold_start_absent(&mut self, why: ColdStartAbsent) {
        self.cold_start_absent = why;
    }

    fn stopped(&mut self) {
        self.stopped
            .get_or_insert((Instant::now(), SystemTime::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::v1::ArchitectureKind;
    use serde_json::Value;

    fn sample<'a>(
        server: &'a str,
        kind: Kind,
        stages: &'a [(Stage, u64)],
        offered: bool,
    ) -> Sample<'a> {
        Sample {
            server,
            pid: 1,
            kind,
            stages,
            cpu: &[],
            wait_cpu: &[],
            idle_before: None,
            wakeups: &[],
            resumption_offered: offered,
            tls_group: None,
            held: None,
        }
    }

    /// The CPU across the waits between service stages: its mean per wait, and the waits
    /// per connection.
    #[test]
    fn waits_between_service_stages() {
        let mut e = Estimator::new(Duration::from_secs(60), 8);
        let now = e.start + Duration::from_secs(1);
        let stages = [(Stage::ServerFlight1, 1_000_000)];
        let waits = [
            (Stage::WaitClientFlight2, 30_000),
            (Stage::WaitRequest, 10_000),
        ];
        for _ in 0..2 {
            e.add(
                now,
                &Sample {
                    wait_cpu: &waits,
                    ..sample("nginx:443", Kind::Full, &stages, false)
                },
            );
        }
        e.add(now, &sample("nginx:443", Kind::Full, &stages, false));
        let cpu = e.parameters(now, UNIX_EPOCH).servers[0].cpu;
        // the median of 30, 10, 30, 10 µs (HDR: the lower of the two middle values)
        assert!((cpu.per_wait_s.unwrap() - 10e-6).abs() < 1e-12, "{cpu:?}");
        assert!((cpu.waits_per_connection.unwrap() - 4.0 / 3.0).abs() < 1e-12);
    }

    /// Full handshakes by key-exchange group: each group's count, share of the known ones,
    /// service stages (wall and on-CPU means) and their sum, delay stages and theirs, most
    /// first, across slots; resumed handshakes and unknown groups are not in it.
    #[test]
    fn full_handshakes_by_key_exchange_group() {
        let mut e = Estimator::new(Duration::from_secs(60), 8);
        let t0 = e.start + Duration::from_secs(1);
        let t1 = e.start + Duration::from_secs(20);
        let classic = [
            (Stage::WaitClientHello, 5_000_000),
            (Stage::ServerFlight1, 1_000_000),
            (Stage::ServerFlight2, 200_000),
        ];
        let hybrid = [
            (Stage::WaitClientHello, 6_000_000),
            (Stage::ServerFlight1, 1_600_000),
            (Stage::WaitClientFlight2, 700_000),
            (Stage::ClientFlight2Queue, 50_000),
            (Stage::ServerFlight2, 200_000),
        ];
        let cpu = [(Stage::ServerFlight1, 800_000)];
        for (now, stages, group) in [
            (t0, &classic[..], Some("x25519")),
            (t1, &classic[..], Some("x25519")),
            (t1, &hybrid[..], Some("X25519MLKEM768")),
            (t1, &classic[..], None),
        ] {
            e.add(
                now,
                &Sample {
                    tls_group: group,
                    cpu: &cpu,
                    ..sample("nginx:443", Kind::Full, stages, false)
                },
            );
        }
        e.add(
            t1,
            &Sample {
                tls_group: Some("none"),
                ..sample("nginx:443", Kind::Resumed, &hybrid, true)
            },
        );
        let p = e.parameters(t1, UNIX_EPOCH);
        let kx = &p.servers[0].key_exchange;
        let groups: Vec<(&str, u64)> = kx.iter().map(|g| (g.group.as_str(), g.count)).collect();
        assert_eq!(groups, [("x25519", 2), ("X25519MLKEM768", 1)]);
        assert!((kx[0].share - 2.0 / 3.0).abs() < 1e-12);
        // service stages only: the wait for the ClientHello is not the server's work
        let names: Vec<&str> = kx[0].stages.0.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["server_flight_1", "server_flight_2"]);
        assert!((kx[0].service_s - 1.2e-3).abs() < 1e-12, "{:?}", kx[0]);
        assert!((kx[1].service_s - 1.8e-3).abs() < 1e-12, "{:?}", kx[1]);
        let sf1 = kx[1].stages.0[0].1;
        assert_eq!(sf1.count, 1);
        assert!((sf1.cpu_mean_s.unwrap() - 0.8e-3).abs() < 1e-12);
        assert_eq!(kx[1].stages.0[1].1.cpu_mean_s, None);
        // the delay stages apart, in stage order, the queue stages in neither
        let delays = |g: &GroupParams| {
            let d = g.delay_stages.as_ref().unwrap();
            d.0.iter()
                .map(|(n, st)| (n.clone(), st.count, st.mean_s, st.cpu_mean_s))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            delays(&kx[0]),
            [("wait_client_hello".to_owned(), 2, 5e-3, None)]
        );
        assert_eq!(
            delays(&kx[1]),
            [
                ("wait_client_hello".to_owned(), 1, 6e-3, None),
                ("wait_client_flight_2".to_owned(), 1, 0.7e-3, None)
            ]
        );
        assert!((kx[0].delay_s.unwrap() - 5e-3).abs() < 1e-12);
        assert!((kx[1].delay_s.unwrap() - 6.7e-3).abs() < 1e-12);
        assert!(!kx[1].stages.0.iter().any(|(n, _)| n.ends_with("_queue")));
        // the JSON: added to each server, absent where empty
        let json = p.to_json();
        assert!(
            json.contains("\"key_exchange\":[{\"group\":\"x25519\",\"count\":2"),
            "{json}"
        );
        assert!(
            json.contains("\"delay_stages\":{\"wait_client_hello\":{\"count\":2,\"mean_s\":0.005,\"cpu_mean_s\":null}},\"delay_s\":0.005"),
            "{json}"
        );
    }

    /// The wake-ups of a server's CPU by how long it slept: one entry per range of sleeps
    /// (shortest first) with its sleeps' and waits' means, over the window's slots, a
    /// failed connection's too; none without any.
    #[test]
    fn wakeups_by_how_long_the_cpu_slept() {
        let mut e = Estimator::new(Duration::from_secs(60), 8);
        let stages = [(Stage::ServerFlight1, 1_000_000)];
        let now = e.start + Duration::from_secs(1);
        e.add(now, &sample("nginx:443", Kind::Full, &stages, false));
        assert!(e.parameters(now, UNIX_EPOCH).servers[0]
            .wakeup_after_idle
            .is_empty());
        let w = |asleep_ms: f64, wait_us: u64| Wakeup {
            queue: Stage::ClientHelloQueue,
            asleep_ns: (asleep_ms * 1e6) as u64,
            wait_ns: wait_us * 1000,
        };
        // 0.1 and 0.2 ms (one range), 150 ms (another): in two slots, one failed; an hour
        // asleep counts as the longest sleep taken as it is
        let (short, long) = ([w(0.1, 40), w(0.2, 60)], [w(150.0, 300), w(3.6e6, 900)]);
        e.add(
            now,
            &Sample {
                wakeups: &long,
                ..sample("nginx:443", Kind::Failed, &[], false)
            },
        );
        let later = now + Duration::from_secs(20);
        e.add(
            later,
            &Sample {
                wakeups: &short,
                ..sample("nginx:443", Kind::Full, &stages, false)
            },
        );
        let p = e.parameters(later, UNIX_EPOCH);
        let got: Vec<(f64, u64, f64)> = p.servers[0]
            .wakeup_after_idle
            .iter()
            .map(|b| (b.idle_s, b.count, b.mean_s))
            .collect();
        assert_eq!(got.len(), 3, "{got:?}");
        let near = |a: f64, b: f64| (a - b).abs() < 1e-9;
        assert!(near(got[2].0, LONGEST_SLEEP_S) && got[2].1 == 1, "{got:?}");
        assert!(
            near(got[0].0, 150e-6) && got[0].1 == 2 && near(got[0].2, 50e-6),
            "{got:?}"
        );
        assert!(
            near(got[1].0, 0.15) && got[1].1 == 1 && near(got[1].2, 300e-6),
            "{got:?}"
        );
    }

    /// The ranges of sleeps: below 64 µs, then each 4 times longer, up to 1.05 s and beyond.
    #[test]
    fn wake_bins_are_quartering_ranges() {
        for (asleep, bin) in [
            (0.0, 0),
            (63e-6, 0),
            (64e-6, 1),
            (255e-6, 1),
            (1.1e-3, 3),
            (0.2, 6),
            (1.0, 7),
            (1.1, 8),
            (3600.0, 8),
        ] {
            assert_eq!(wake_bin(asleep), bin, "{asleep}");
        }
        assert_eq!(wake_bin(1e9), WAKE_BINS - 1);
        assert_eq!(wake_bin(LONGEST_SLEEP_S), WAKE_BINS - 1);
    }

    /// A service stage's on-CPU time split by what its CPU did before it: the means of
    /// those after an idle CPU and after a busy one, with their counts; nothing without
    /// `idle_before`. A queue stage's wait is split by the stage that read its message.
    #[test]
    fn stage_cpu_split_by_an_idle_cpu_before_it() {
        let mut e = Estimator::new(Duration::from_secs(60), 8);
        let now = e.start + Duration::from_secs(1);
        let stages = [
            (Stage::AcceptQueue, 70_000),
            (Stage::ClientHelloQueue, 60_000),
            (Stage::ServerFlight1, 1_000_000),
            (Stage::RequestQueue, 90_000),
            (Stage::Response, 500_000),
        ];
        let (cold, warm) = (
            [(Stage::ServerFlight1, 300_000), (Stage::Response, 50_000)],
            [(Stage::ServerFlight1, 200_000), (Stage::Response, 40_000)],
        );
        let idle_sf1 = [Stage::ServerFlight1];
        for (cpu, idle) in [
            (&cold, Some(&idle_sf1[..])),
            (&cold, Some(&idle_sf1[..])),
            (&warm, Some(&[][..])),
            (&warm, None),
        ] {
            e.add(
                now,
                &Sample {
                    cpu,
                    idle_before: idle,
                    ..sample("nginx:443", Kind::Full, &stages, false)
                },
            );
        }
        let p = e.parameters(now, UNIX_EPOCH);
        let st = &p.servers[0].classes.tls_full.stages;
        let sf1 = st.get("server_flight_1").unwrap();
        assert_eq!(sf1.after_idle.map(|a| a.count), Some(2));
        assert!((sf1.after_idle.unwrap().cpu_mean_s - 300e-6).abs() < 1e-12);
        assert_eq!(sf1.after_busy.map(|a| a.count), Some(1));
        assert!((sf1.after_busy.unwrap().cpu_mean_s - 200e-6).abs() < 1e-12);
        assert_eq!(sf1.wait_after_idle, None);
        let response = st.get("response").unwrap();
        assert_eq!(response.after_idle, None);
        assert_eq!(response.after_busy.map(|a| a.count), Some(3));
        assert!((response.after_busy.unwrap().cpu_mean_s - 140e-6 / 3.0).abs() < 1e-12);
        // all four in the whole mean
        assert!((sf1.cpu_mean_s.unwrap() - 1_000e-6 / 4.0).abs() < 1e-12);
        // the ClientHello's queue, by the first flight's mark: its waits, no CPU split
        let hello = st.get("client_hello_queue").unwrap();
        let idle = hello.wait_after_idle.unwrap();
        assert_eq!(idle.count, 2);
        assert!((idle.mean_s - 60e-6).abs() < 1e-12);
        assert_eq!(hello.wait_after_busy.map(|a| a.count), Some(1));
        assert_eq!(hello.after_idle, None);
        let request = st.get("request_queue").unwrap();
        assert_eq!(request.wait_after_busy.map(|a| a.count), Some(3));
        // no service stage reads the accept queue's connection
        let accept = st.get("accept_queue").unwrap();
        assert_eq!(
            (accept.wait_after_idle, accept.wait_after_busy),
            (None, None)
        );
    }

    /// A run's parameters, read a moment after the run's end, still hold its first
    /// connections (a window of exactly the run's length would have dropped its first
    /// twelfth).
    #[test]
    fn a_run_keeps_its_first_slot() {
        let run = Duration::from_secs(60);
        let stages = [(Stage::ServerFlight1, 1_000_000)];
        let count = |mut e: Estimator| {
            let t0 = e.start;
            e.add(
                t0 + Duration::from_secs(1),
                &sample("nginx:443", Kind::Full, &stages, false),
            );
            let p = e.parameters(t0 + run + Duration::from_millis(300), UNIX_EPOCH);
            p.servers.first().map_or(0, |s| s.connections)
        };
        assert_eq!(count(Estimator::new(run, 8)), 0);
        assert_eq!(count(Estimator::for_run(run, 8)), 1);
    }

    /// A run's window ends where it stopped tracing: read after waiting seconds for the
    /// cold start, a short export still holds its connections, over the seconds it traced.
    #[test]
    fn a_run_ends_where_it_stopped() {
        let run = Duration::from_secs(3);
        let stages = [(Stage::ServerFlight1, 1_000_000)];
        let mut e = Estimator::for_run(run, 8);
        let t0 = e.start;
        e.add(
            t0 + Duration::from_millis(500),
            &sample("nginx:443", Kind::Full, &stages, false),
        );
        e.stopped();
        let stopped_at = e.stopped.unwrap().1;
        let later = Instant::now() + Duration::from_secs(8);
        let p = e.parameters(later, stopped_at + Duration::from_secs(8));
        assert_eq!(p.servers.first().map(|s| s.connections), Some(1));
        let w = p.window.unwrap();
        assert!(w.seconds < 1.0, "{w:?}");
        assert_eq!(
            w.end,
            rfc3339_utc(stopped_at.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i128)
        );
    }

    #[test]
    fn counts_means_shares_and_the_cache() {
        let mut e = Estimator::new(Duration::from_secs(60), 8);
        let t0 = e.start;
        let now = t0 + Duration::from_secs(30);
        let full = [
            (Stage::ServerFlight1, 1_000_000),
            (Stage::WaitClientFlight2, 2_000_000),
        ];
        let resumed = [(Stage::ServerFlight1, 200_000)];
        for i in 0..3u64 {
            let stages = [(Stage::ServerFlight1, 1_000_000 * (i + 1))];
            e.add(now, &sample("nginx:443", Kind::Full, &stages, false));
        }
        e.add(now, &sample("nginx:443", Kind::Full, &full, true));
        e.add(now, &sample("nginx:443", Kind::Resumed, &resumed, true));
        e.add(now, &sample("nginx:443", Kind::Failed, &[], false));
        e.add(
            now,
            &Sample {
                cpu: &[(Stage::Response, 400_000)],
                ..sample(
                    "nginx:80",
                    Kind::Plain,
                    &[(Stage::Response, 500_000)],
                    false,
                )
            },
        );
        let p = e.parameters(now, UNIX_EPOCH + Duration::from_secs(1_800_000_000));
        let w = p.window.as_ref().unwrap();
        assert_eq!(w.seconds, 30.0);
        assert_eq!(w.end, "2027-01-15T08:00:00.000000Z");
        let s = &p.servers[0];
        assert_eq!(s.server, "nginx:443");
        assert_eq!(
            (s.connections, s.failed, s.cache.offered, s.cache.accepted),
            (6, 1, 2, 1)
        );
        assert_eq!(s.cache.hit_ratio, Some(0.5));
        assert_eq!(s.cache.resumption_rate, Some(0.2));
        let f = &s.classes.tls_full;
        assert_eq!((f.count, f.share, f.rate_per_s), (4, 0.8, 4.0 / 30.0));
        let (name, first) = &f.stages.0[0];
        assert_eq!(name, "server_flight_1");
        // (1 + 2 + 3 + 1) ms / 4
        assert!((first.mean_s - 1.75e-3).abs() < 1e-12);
        assert!((first.p50_s - 1e-3).abs() <= 1e-3 * 0.01, "{}", first.p50_s);
        assert!((first.p99_s - 3e-3).abs() <= 3e-3 * 0.01);
        assert!((f.demand_s.service - 1.75e-3).abs() < 1e-12);
        assert!((f.demand_s.delay - 2e-3).abs() < 1e-12);
        let plain = &p.servers[1].classes.plain;
        assert_eq!(plain.stages.0[0].1.cpu_mean_s, Some(4e-4));
        // the JSON and the CSV carry the same numbers
        let v: Value = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(v["schema"], "hstrace.parameters/v1");
        let j = &v["servers"][0];
        assert_eq!(j["cache"]["hit_ratio"], 0.5);
        assert_eq!(
            j["classes"]["tls_full"]["stages"]["server_flight_1"]["count"],
            4
        );
        assert_eq!(
            j["classes"]["tls_full"]["stages"]["server_flight_1"]["class"],
            "service"
        );
        assert_eq!(j["classes"]["plain"]["count"], 0);
        assert_eq!(j["classes"]["tls_resumed"]["demand_s"]["service"], 2e-4);
        let csv = super::super::format::csv(&p);
        let row = csv
            .lines()
            .find(|l| {
                l.contains(",nginx:443,")
                    && l.contains(",tls_full,")
                    && l.contains(",server_flight_1,")
            })
            .unwrap();
        assert!(row.contains(",0.00175,"), "{row}");
        assert!(super::super::format::table(&p).contains("server_flight_1"));
    }

    /// Each process's CPU is divided among all the connections it accepted; a server's
    /// figure averages its connections' processes; the stages' CPU is what is not outside.
    #[test]
    fn cpu_per_connection_and_outside_the_stages() {
        let mut e = Estimator::new(Duration::from_secs(60), 8);
        let now = e.start + Duration::from_secs(10);
        let st = [(Stage::Response, 2_000_000)];
        let cpu = [(Stage::Response, 1_000_000)];
        let conn = |server, pid| Sample {
            pid,
            cpu: &cpu,
            ..sample(server, Kind::Plain, &st, false)
        };
        // process 10: 3 connections of a:1 and 1 of b:2, 8 ms of CPU: 2 ms each, 1 outside
        for _ in 0..3 {
            e.add(now, &conn("a:1", 10));
        }
        e.add(now, &conn("b:2", 10));
        e.add_cpu(now, 10, 5_000_000);
        e.add_cpu(now + Duration::from_secs(1), 10, 3_000_000);
        // process 20: 1 connection of b:2, 4 ms: 3 ms outside
        e.add(now, &conn("b:2", 20));
        e.add_cpu(now, 20, 4_000_000);
        let p = e.parameters(now + Duration::from_secs(1), SystemTime::now());
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        let a = p.servers[0].cpu;
        assert!(
            close(a.per_connection_s.unwrap(), 2e-3) && close(a.outside_stages_s.unwrap(), 1e-3),
            "{a:?}"
        );
        let b = p.servers[1].cpu;
        assert!(close(b.per_connection_s.unwrap(), 3e-3), "{b:?}");
        assert!(close(b.outside_stages_s.unwrap(), 2e-3), "{b:?}");
        let v: Value = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(v["servers"][1]["cpu"]["outside_stages_s"], 2e-3);

        // a connection that ended before any service stage (a port check) has no stage CPU
        // and nothing to split: the figures stand, over one more connection
        let unserved = [
            (Stage::AcceptQueue, 30_000),
            (Stage::WaitClientHello, 10_000),
        ];
        e.add(
            now,
            &Sample {
                pid: 20,
                ..sample("b:2", Kind::Failed, &unserved, false)
            },
        );
        let p = e.parameters(now + Duration::from_secs(1), SystemTime::now());
        let b = p.servers[1].cpu;
        // process 20: 4 ms over 2 connections, 0.5 ms of stages each; process 10 as above
        assert!(
            close(b.per_connection_s.unwrap(), 2e-3)
                && close(b.outside_stages_s.unwrap(), (1e-3 + 2.0 * 1.5e-3) / 3.0),
            "{b:?}"
        );

        // a connection whose service stage has no CPU (no on-CPU reading): its process's
        // CPU cannot be split
        e.add(
            now,
            &Sample {
                pid: 10,
                ..sample("a:1", Kind::Plain, &st, false)
            },
        );
        let p = e.parameters(now + Duration::from_secs(1), SystemTime::now());
        assert_eq!(p.servers[0].cpu, Cpu::default());
        let v: Value = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(v["servers"][0]["cpu"]["outside_stages_s"], Value::Null);
    }

    /// The servers' CPUs over the window: the most at a reading, and their busy time less
    /// the traced processes' over the time the readings span, in CPUs; none before a
    /// reading.
    #[test]
    fn other_work_on_the_servers_cpus() {
        let probe = Probe {
            threads: |_| None,
            cpus: || Some(4),
        };
        let mut e = Estimator::new(Duration::from_secs(60), 8).with_probe(probe);
        let now = e.start + Duration::from_secs(1);
        let p = e.parameters(now, SystemTime::now());
        let none = Host {
            cpus: 4,
            server_cpus: None,
            other_cpus: None,
            cold_start: None,
            cold_start_absent: Some(ColdStartAbsent::NotAsked),
        };
        assert_eq!(p.host, Some(none));
        let s = 1_000_000_000;
        e.add_host_cpu(
            now,
            &HostCpu {
                span_ns: s,
                cpus: 2,
                busy_ns: 2 * s,
                traced_ns: s / 2,
            },
        );
        let later = now + Duration::from_secs(10);
        e.add_host_cpu(
            later,
            &HostCpu {
                span_ns: s,
                cpus: 1,
                busy_ns: s,
                traced_ns: s / 2,
            },
        );
        let host = e.parameters(later, SystemTime::now()).host.unwrap();
        assert_eq!(host.server_cpus, Some(2));
        assert!((host.other_cpus.unwrap() - 1.0).abs() < 1e-12);
        // the first slot leaves the window
        let host = e
            .parameters(now + Duration::from_secs(65), SystemTime::now())
            .host
            .unwrap();
        assert_eq!(host.server_cpus, Some(1));
        assert!((host.other_cpus.unwrap() - 0.5).abs() < 1e-12);
    }

    /// The cold start the source measured is the host's from then on, whatever the window
    /// holds, and survives the document's round trip.
    #[test]
    fn the_cold_start_measured_is_the_hosts() {
        let probe = Probe {
            threads: |_| None,
            cpus: || Some(2),
        };
        let mut e = Estimator::new(Duration::from_secs(60), 8).with_probe(probe);
        let now = e.start + Duration::from_secs(1);
        // none, and why: not asked, then asked and not yet there, then failed
        let absent = |e: &mut Estimator| {
            let h = e.parameters(now, SystemTime::now()).host.unwrap();
            assert_eq!(h.cold_start, None);
            h.cold_start_absent
        };
        assert_eq!(absent(&mut e), Some(ColdStartAbsent::NotAsked));
        e.cold_start_absent(ColdStartAbsent::NotYet);
        assert_eq!(absent(&mut e), Some(ColdStartAbsent::NotYet));
        e.cold_start_absent(ColdStartAbsent::Failed);
        assert_eq!(absent(&mut e), Some(ColdStartAbsent::Failed));
        let text = e.parameters(now, SystemTime::now()).to_json();
        assert!(text.contains(r#""cold_start_absent":"failed""#), "{text}");
        let run = |pause_s, cpu_s| crate::cold_start::ColdRun {
            pause_s,
            cpu_s,
            runs: 10,
            cpu_mean_s: Some(2.0 * cpu_s),
        };
        let c = ColdStart {
            work: "SHA-256".into(),
            cpu: 1,
            runs: vec![run(0.0, 14e-6), run(0.2, 70e-6)],
            handshake: Some(crate::cold_start::ColdWork {
                work: "X25519".into(),
                runs: vec![run(0.0, 130e-6), run(0.2, 330e-6)],
            }),
        };
        e.cold_start(&c);
        let p = e.parameters(now + Duration::from_secs(600), SystemTime::now());
        assert_eq!(p.host.as_ref().unwrap().cold_start, Some(c.clone()));
        assert_eq!(p.host.as_ref().unwrap().cold_start_absent, None);
        let back = Parameters::from_json(&p.to_json(), "test").unwrap();
        assert_eq!(back.host.unwrap().cold_start, Some(c.clone()));
        // timed again through the run: the latest replaces it
        let mut again = c;
        again.runs[1].runs = 12;
        e.cold_start(&again);
        let p = e.parameters(now + Duration::from_secs(601), SystemTime::now());
        assert_eq!(p.host.unwrap().cold_start, Some(again));
    }

    /// Prefork children each serve a connection now and then: one whose connection came
    /// before the look that first read it shows no CPU, another more than its own.
    /// Together they hold the server's CPU; none showing any is unknown.
    #[test]
    fn cpu_of_processes_that_show_none_is_the_servers_together() {
        let mut e = Estimator::new(Duration::from_secs(60), 8);
        let now = e.start + Duration::from_secs(10);
        let st = [(Stage::ServerFlight1, 1_000_000)];
        let cpu = [(Stage::ServerFlight1, 1_000_000)];
        for pid in [30, 31, 32, 33] {
            e.add(
                now,
                &Sample {
                    pid,
                    cpu: &cpu,
                    ..sample("apache2:443", Kind::Full, &st, false)
                },
            );
            e.add_cpu(now, pid, 0);
        }
        let p = e.parameters(now + Duration::from_secs(1), SystemTime::now());
        assert_eq!(p.servers[0].cpu, Cpu::default(), "no CPU seen: unknown");
        // 10 ms land on child 31: 2.5 ms a connection, 1.5 ms outside the stages
        // (not the 9 ms of child 31 alone, nor the −1 ms of the others, over four)
        e.add_cpu(now, 31, 10_000_000);
        let p = e.parameters(now + Duration::from_secs(1), SystemTime::now());
        let c = p.servers[0].cpu;
        assert!(
            (c.per_connection_s.unwrap() - 2.5e-3).abs() < 1e-12,
            "{c:?}"
        );
        assert!(
            (c.outside_stages_s.unwrap() - 1.5e-3).abs() < 1e-12,
            "{c:?}"
        );

        // one served connection in 200 without an on-CPU reading: given the others' mean
        // (1 ms), not counted as CPU outside the stages
        let mut e = Estimator::new(Duration::from_secs(60), 8);
        for i in 0..200 {
            let read: &[(Stage, u64)] = if i == 0 { &[] } else { &cpu };
            e.add(
                now,
                &Sample {
                    pid: 40,
                    cpu: read,
                    ..sample("b:2", Kind::Full, &st, false)
                },
            );
        }
        e.add_cpu(now, 40, 300_000_000);
        let c = e
            .parameters(now + Duration::from_secs(1), SystemTime::now())
            .servers[0]
            .cpu;
        assert!(
            (c.per_connection_s.unwrap() - 1.5e-3).abs() < 1e-12,
            "{c:?}"
        );
        assert!(
            (c.outside_stages_s.unwrap() - 0.5e-3).abs() < 1e-12,
            "{c:?}"
        );
    }

    /// Each server's architecture from its processes' overlapping connections and their
    /// threads; the host's CPUs once per document.
    #[test]
    fn architecture_from_overlapping_connections() {
        fn threads(pid: u32) -> Option<u32> {
            match pid {
                10 | 11 | 20 | 21 => Some(1),
                30 => Some(25),
                _ => None,
            }
        }
        let probe = Probe {
            threads,
            cpus: || Some(2),
        };
        let mut e = Estimator::new(Duration::from_secs(60), 8).with_probe(probe);
        let now = e.start + Duration::from_secs(1);
        let st = [(Stage::Response, 1_000)];
        let conn = |server, pid, accept: i128, end: i128| Sample {
            pid,
            held: Some((accept, end)),
            ..sample(server, Kind::Plain, &st, false)
        };
        // an event loop: workers 10 and 11, worker 10 holding three at once at 5
        for (pid, a, b) in [(10, 5, 9), (10, 0, 10), (11, 0, 3), (10, 2, 12), (11, 4, 6)] {
            e.add(now, &conn("nginx:443", pid, a, b));
        }
        // prefork: children 20 and 21, one after another each
        for (pid, a, b) in [(20, 0, 5), (21, 1, 6), (20, 6, 9), (21, 7, 8)] {
            e.add(now, &conn("apache2:443", pid, a, b));
        }
        // threads: one process of 25 threads
        for (a, b) in [(0, 5), (1, 6)] {
            e.add(now, &conn("httpd:443", 30, a, b));
        }
        // one process, one at a time: cannot tell
        e.add(now, &conn("lone:1", 40, 0, 1));
        let p = e.parameters(now, SystemTime::now());
        assert_eq!(
            p.host,
            Some(Host {
                cpus: 2,
                server_cpus: None,
                other_cpus: None,
                cold_start: None,
                cold_start_absent: Some(ColdStartAbsent::NotAsked),
            })
        );
        let arch = |name: &str| {
            p.servers
                .iter()
                .find(|s| s.server == name)
                .unwrap()
                .architecture
                .unwrap()
        };
        let a = arch("nginx:443");
        assert_eq!(
            (a.kind, a.processes, a.most_at_once, a.threads),
            (ArchitectureKind::EventLoop, 2, 3, Some(1))
        );
        let a = arch("apache2:443");
        assert_eq!(
            (a.kind, a.processes, a.most_at_once),
            (ArchitectureKind::ProcessPerConnection, 2, 1)
        );
        assert_eq!(arch("httpd:443").kind, ArchitectureKind::Threads);
        let a = arch("lone:1");
        assert_eq!((a.kind, a.threads), (ArchitectureKind::Unknown, None));
        let v: Value = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(v["host"]["cpus"], 2);
        assert_eq!(
            v["servers"][0]["architecture"]["kind"],
            "process_per_connection"
        );
        assert_eq!(v["servers"][2]["architecture"].get("threads"), None);
        // a process's connections leave with the window
        let later = now + Duration::from_secs(200);
        e.parameters(later, SystemTime::now());
        assert!(e.held.is_empty());
    }

    #[test]
    fn old_samples_leave_the_window() {
        let mut e = Estimator::new(Duration::from_secs(60), 8);
        let t0 = e.start;
        let st = [(Stage::Response, 1_000)];
        e.add(t0, &sample("a:1", Kind::Plain, &st, false));
        e.add(
            t0 + Duration::from_secs(50),
            &sample("a:1", Kind::Plain, &st, false),
        );
        // 5 s slots: at 61 s the kept ones start at 5 s, and cover 56 s, not 60
        let p = e.parameters(t0 + Duration::from_secs(61), SystemTime::now());
        assert_eq!(p.servers[0].classes.plain.count, 1);
        assert_eq!(p.window.as_ref().unwrap().seconds, 56.0);
        assert_eq!(p.servers[0].classes.plain.rate_per_s, 1.0 / 56.0);
        let p = e.parameters(t0 + Duration::from_secs(200), SystemTime::now());
        assert!(p.servers.is_empty());
        assert_eq!(p.window.as_ref().unwrap().seconds, 55.0);
        let v: Value = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(v["servers"], serde_json::json!([]));
    }

    #[test]
    fn servers_past_the_cap_are_other() {
        let mut e = Estimator::new(Duration::from_secs(60), 2);
        let now = e.start;
        for i in 0..5 {
            e.add(now, &sample(&format!("s:{i}"), Kind::Failed, &[], false));
        }
        let p = e.parameters(now, SystemTime::now());
        let names: Vec<&str> = p.servers.iter().map(|s| s.server.as_str()).collect();
        assert_eq!(names, ["other", "s:0", "s:1"]);
        assert_eq!(p.servers[0].connections, 3);
    }
}
