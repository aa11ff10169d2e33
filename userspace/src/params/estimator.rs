//! The measured stage parameters of seed 002's queueing model (`hstrace.parameters/v1`):
//! per server and request class, each stage's count, mean and percentiles over a sliding
//! window, the cache's hit ratio, and the demands by stage class. `serve` answers them,
//! `export` prints them, `hstrace model` reads them.
//!
//! Percentiles come from HDR histograms of 2 significant digits (≤ 1 % relative error)
//! over 1 µs … 1000 s; means from exact sums. Memory is bounded: at most `max_servers`
//! servers × 3 classes × 10 stages, each with `SLOTS` histograms of ~6 KiB, allocated
//! only for what is seen.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use hdrhistogram::Histogram;

use crate::{
    clock::rfc3339_utc,
    json::Object,
    stage::{Kind, RequestClass, Stage, StageClass},
};

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
    /// the client offered resumption
    pub resumption_offered: bool,
}

/// One stage's samples in one slot.
#[derive(Clone)]
struct StageAcc {
    hist: Histogram<u32>,
    count: u64,
    sum_ns: u128,
    cpu_count: u64,
    cpu_sum_ns: u128,
}

impl StageAcc {
    fn new() -> StageAcc {
        StageAcc {
            hist: Histogram::new_with_bounds(1, HIST_MAX_US, HIST_DIGITS)
                .expect("valid histogram bounds"),
            count: 0,
            sum_ns: 0,
            cpu_count: 0,
            cpu_sum_ns: 0,
        }
    }

    fn merge(&mut self, o: &StageAcc) {
        // same bounds: adding cannot fail
        let _ = self.hist.add(&o.hist);
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        self.cpu_count += o.cpu_count;
        self.cpu_sum_ns += o.cpu_sum_ns;
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
    /// by class, then stage (`Stage::index`)
    stages: [[Option<Box<StageAcc>>; Stage::ALL.len()]; 3],
}

impl ServerAcc {
    fn add(&mut self, s: &Sample) {
        self.connections += 1;
        *self.by_pid.entry(s.pid).or_default() += 1;
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
        }
        for (stage, ns) in s.cpu {
            if let Some(acc) = self.stages[c][stage.index()].as_mut() {
                acc.cpu_count += 1;
                acc.cpu_sum_ns += u128::from(*ns);
            }
        }
    }

    fn merge(&mut self, o: &ServerAcc) {
        self.connections += o.connections;
        for (pid, n) in &o.by_pid {
            *self.by_pid.entry(*pid).or_default() += n;
        }
        self.failed += o.failed;
        self.offered += o.offered;
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
}

impl ProcAcc {
    fn merge(&mut self, o: &ProcAcc) {
        self.connections += o.connections;
        self.stage_cpu_ns += o.stage_cpu_ns;
        self.without_cpu += o.without_cpu;
        self.cpu_ns += o.cpu_ns;
    }
}

/// The sliding-window estimator.
pub struct Estimator {
    window: Duration,
    max_servers: usize,
    start: Instant,
    slots: Vec<Slot>,
    /// servers seen (kept by name up to `max_servers`)
    known: std::collections::BTreeSet<String>,
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
        }
    }

    fn slot_len(&self) -> Duration {
        self.window / SLOTS as u32
    }

    fn seq(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.start).as_nanos() / self.slot_len().as_nanos()) as u64
    }

    /// Drop slots that fell out of the window ending at `now`.
    fn expire(&mut self, now: Instant) {
        let seq = self.seq(now);
        self.slots.retain(|s| s.seq + SLOTS as u64 > seq);
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
            });
        }
        self.slots.last_mut().expect("pushed above")
    }

    /// Process `pid` ran `ns` more nanoseconds of CPU (the source's once-a-second look at
    /// the traced processes).
    pub fn add_cpu(&mut self, now: Instant, pid: u32, ns: u64) {
        self.slot(now).procs.entry(pid).or_default().cpu_ns += u128::from(ns);
    }

    pub fn add(&mut self, now: Instant, s: &Sample) {
        let slot = self.slot(now);
        let proc = slot.procs.entry(s.pid).or_default();
        proc.connections += 1;
        let served = s
            .stages
            .iter()
            .any(|(st, _)| st.class() == StageClass::Service);
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
        self.expire(now);
        let mut merged: BTreeMap<String, ServerAcc> = BTreeMap::new();
        let mut procs: BTreeMap<u32, ProcAcc> = BTreeMap::new();
        for slot in &self.slots {
            for (name, acc) in &slot.servers {
                merged.entry(name.clone()).or_default().merge(acc);
            }
            for (pid, acc) in &slot.procs {
                procs.entry(*pid).or_default().merge(acc);
            }
        }
        // the window covers whole slots: from the oldest kept slot's start, or the start
        let covered =
            (self.slot_len() * SLOTS as u32).min(now.saturating_duration_since(self.start));
        let seconds = covered.as_secs_f64();
        let end_ns = wall_now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        Parameters {
            window_start: rfc3339_utc(end_ns - covered.as_nanos() as i128),
            window_end: rfc3339_utc(end_ns),
            window_seconds: seconds,
            servers: merged
                .into_iter()
                .map(|(name, acc)| {
                    let cpu = server_cpu(&acc, &procs);
                    server_params(name, &acc, seconds, cpu)
                })
                .collect(),
        }
    }
}

/// One stage's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct StageParams {
    pub stage: Stage,
    pub count: u64,
    pub mean_s: f64,
    pub p50_s: f64,
    pub p90_s: f64,
    pub p99_s: f64,
    pub cpu_mean_s: Option<f64>,
}

/// One request class of a server.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassParams {
    pub class: RequestClass,
    pub share: f64,
    pub count: u64,
    pub rate_per_s: f64,
    /// in wire order
    pub stages: Vec<StageParams>,
    /// the sum of the stages' means by stage class (`StageClass::ALL` order)
    pub demand_s: [f64; 3],
}

#[derive(Debug, Clone, PartialEq)]
pub struct ServerParams {
    pub server: String,
    pub connections: u64,
    /// the CPU time of the processes that accepted this server's connections, per
    /// connection (`ServerCpu`), when known
    pub cpu: Option<ServerCpu>,
    pub failed: u64,
    pub offered: u64,
    pub accepted: u64,
    pub hit_ratio: Option<f64>,
    pub resumption_rate: Option<f64>,
    /// `RequestClass::ALL` order, always all three
    pub classes: Vec<ClassParams>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Parameters {
    pub window_start: String,
    pub window_end: String,
    pub window_seconds: f64,
    pub servers: Vec<ServerParams>,
}

/// The CPU per connection of the processes behind a server: each process's CPU time over
/// the window divided among all the connections it accepted (whatever their server), and
/// averaged over this server's connections by process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerCpu {
    /// the processes' whole CPU time per connection
    pub per_connection_s: f64,
    /// the same less the connections' service stages: accepting, closing, logging, the
    /// event loop's own work (what `hstrace model`'s simulated event loop adds)
    pub outside_stages_s: f64,
}

/// `ServerCpu` of a server's connections (`acc`) from its processes' CPU (`procs`): None
/// when no process's CPU was seen, or a connection's service stages have no on-CPU time.
fn server_cpu(acc: &ServerAcc, procs: &BTreeMap<u32, ProcAcc>) -> Option<ServerCpu> {
    let (mut whole, mut outside, mut n) = (0.0, 0.0, 0u64);
    for (pid, count) in &acc.by_pid {
        let p = procs.get(pid)?;
        if p.cpu_ns == 0 || p.connections == 0 || p.without_cpu > 0 {
            return None;
        }
        let per = p.cpu_ns as f64 / 1e9 / p.connections as f64;
        let stages = p.stage_cpu_ns as f64 / 1e9 / p.connections as f64;
        whole += per * *count as f64;
        // the stages' CPU is read at their edges, the process's once a second: over a
        // short window the two can cross; never less than nothing outside
        outside += (per - stages).max(0.0) * *count as f64;
        n += count;
    }
    (n > 0).then(|| ServerCpu {
        per_connection_s: whole / n as f64,
        outside_stages_s: outside / n as f64,
    })
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

fn server_params(
    server: String,
    acc: &ServerAcc,
    seconds: f64,
    cpu: Option<ServerCpu>,
) -> ServerParams {
    let classified: u64 = acc.classes.iter().sum();
    let classes = RequestClass::ALL
        .into_iter()
        .map(|class| {
            let c = class.index();
            let count = acc.classes[c];
            let stages: Vec<StageParams> = Stage::ALL
                .into_iter()
                .filter_map(|stage| {
                    let a = acc.stages[c][stage.index()].as_deref()?;
                    let q = |p: f64| a.hist.value_at_quantile(p) as f64 / 1e6;
                    Some(StageParams {
                        stage,
                        count: a.count,
                        mean_s: a.sum_ns as f64 / 1e9 / a.count as f64,
                        p50_s: q(0.5),
                        p90_s: q(0.9),
                        p99_s: q(0.99),
                        cpu_mean_s: (a.cpu_count > 0)
                            .then(|| a.cpu_sum_ns as f64 / 1e9 / a.cpu_count as f64),
                    })
                })
                .collect();
            let mut demand_s = [0.0; 3];
            for s in &stages {
                demand_s[s.stage.class() as usize] += s.mean_s;
            }
            ClassParams {
                class,
                share: ratio(count, classified).unwrap_or(0.0),
                count,
                rate_per_s: if seconds > 0.0 {
                    count as f64 / seconds
                } else {
                    0.0
                },
                stages,
                demand_s,
            }
        })
        .collect();
    let full = acc.classes[RequestClass::TlsFull.index()];
    let resumed = acc.classes[RequestClass::TlsResumed.index()];
    ServerParams {
        server,
        connections: acc.connections,
        cpu,
        failed: acc.failed,
        offered: acc.offered,
        accepted: resumed,
        hit_ratio: ratio(resumed, acc.offered),
        resumption_rate: ratio(resumed, full + resumed),
        classes,
    }
}

impl Parameters {
    /// The `hstrace.parameters/v1` JSON (docs/parameters.md).
    pub fn to_json(&self) -> String {
        let mut out = Vec::with_capacity(4096);
        let mut o = Object::begin(&mut out);
        o.str("schema", "hstrace.parameters/v1");
        o.object("window", |w| {
            w.str("start", &self.window_start)
                .str("end", &self.window_end)
                .f64("seconds", self.window_seconds);
        });
        o.array("servers", |a| {
            for s in &self.servers {
                a.object(|o| server_json(s, o));
            }
        });
        o.end();
        out.push(b'\n');
        String::from_utf8(out).expect("JSON is UTF-8")
    }

    /// One row per server × class × stage, the class's numbers repeated on each row.
    pub fn to_csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let header = [
            "window_end",
            "window_seconds",
            "server",
            "connections",
            "failed",
            "hit_ratio",
            "resumption_rate",
            "class",
            "share",
            "class_count",
            "rate_per_s",
            "stage",
            "stage_class",
            "count",
            "mean_s",
            "p50_s",
            "p90_s",
            "p99_s",
            "cpu_mean_s",
        ];
        let _ = w.write_record(header);
        let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
        for s in &self.servers {
            for c in &s.classes {
                for st in &c.stages {
                    let _ = w.write_record([
                        self.window_end.clone(),
                        self.window_seconds.to_string(),
                        s.server.clone(),
                        s.connections.to_string(),
                        s.failed.to_string(),
                        opt(s.hit_ratio),
                        opt(s.resumption_rate),
                        c.class.name().into(),
                        c.share.to_string(),
                        c.count.to_string(),
                        c.rate_per_s.to_string(),
                        st.stage.name().into(),
                        st.stage.class().name().into(),
                        st.count.to_string(),
                        st.mean_s.to_string(),
                        st.p50_s.to_string(),
                        st.p90_s.to_string(),
                        st.p99_s.to_string(),
                        opt(st.cpu_mean_s),
                    ]);
                }
            }
        }
        String::from_utf8(w.into_inner().unwrap_or_default()).expect("CSV is UTF-8")
    }

    /// Seed 002's table (Figs. 4–7) for people: per server and class, each stage's class,
    /// count and times in ms.
    pub fn text_table(&self) -> String {
        let mut s = format!(
            "window {} .. {} ({:.1} s)\n",
            self.window_start, self.window_end, self.window_seconds
        );
        let ms = |v: f64| format!("{:.3}", v * 1e3);
        for sv in &self.servers {
            s.push_str(&format!(
                "\n{}: {} connections, {} failed; resumption offered {}, accepted {} (hit ratio {}, resumption rate {})\n",
                sv.server,
                sv.connections,
                sv.failed,
                sv.offered,
                sv.accepted,
                sv.hit_ratio.map_or("-".into(), |r| format!("{r:.2}")),
                sv.resumption_rate.map_or("-".into(), |r| format!("{r:.2}")),
            ));
            for c in sv.classes.iter().filter(|c| c.count > 0) {
                s.push_str(&format!(
                    "  {} ({} connections, share {:.2}, {:.2}/s)\n    {:<22} {:<8} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
                    c.class.name(),
                    c.count,
                    c.share,
                    c.rate_per_s,
                    "stage", "class", "count", "mean ms", "p50 ms", "p90 ms", "p99 ms", "cpu ms"
                ));
                for st in &c.stages {
                    s.push_str(&format!(
                        "    {:<22} {:<8} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
                        st.stage.name(),
                        st.stage.class().name(),
                        st.count,
                        ms(st.mean_s),
                        ms(st.p50_s),
                        ms(st.p90_s),
                        ms(st.p99_s),
                        st.cpu_mean_s.map_or("-".into(), ms),
                    ));
                }
                s.push_str(&format!(
                    "    demand: service {} ms, queue {} ms, delay {} ms\n",
                    ms(c.demand_s[0]),
                    ms(c.demand_s[1]),
                    ms(c.demand_s[2])
                ));
            }
        }
        s
    }
}

fn server_json(s: &ServerParams, o: &mut Object) {
    o.str("server", &s.server)
        .u64("connections", s.connections)
        .u64("failed", s.failed);
    o.object("cache", |c| {
        c.u64("offered", s.offered)
            .u64("accepted", s.accepted)
            .opt_f64("hit_ratio", s.hit_ratio)
            .opt_f64("resumption_rate", s.resumption_rate);
    });
    o.object("cpu", |c| {
        c.opt_f64("per_connection_s", s.cpu.map(|c| c.per_connection_s))
            .opt_f64("outside_stages_s", s.cpu.map(|c| c.outside_stages_s));
    });
    o.object("classes", |m| {
        for c in &s.classes {
            m.object(c.class.name(), |o| {
                o.f64("share", c.share)
                    .u64("count", c.count)
                    .f64("rate_per_s", c.rate_per_s);
                o.object("stages", |m| {
                    for st in &c.stages {
                        m.object(st.stage.name(), |o| {
                            o.str("class", st.stage.class().name())
                                .u64("count", st.count)
                                .f64("mean_s", st.mean_s)
                                .f64("p50_s", st.p50_s)
                                .f64("p90_s", st.p90_s)
                                .f64("p99_s", st.p99_s)
                                .opt_f64("cpu_mean_s", st.cpu_mean_s);
                        });
                    }
                });
                o.object("demand_s", |m| {
                    for k in StageClass::ALL {
                        m.f64(k.name(), c.demand_s[k as usize]);
                    }
                });
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
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
            resumption_offered: offered,
        }
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
        assert_eq!(p.window_seconds, 30.0);
        assert_eq!(p.window_end, "2027-01-15T08:00:00.000000Z");
        let s = &p.servers[0];
        assert_eq!(s.server, "nginx:443");
        assert_eq!(
            (s.connections, s.failed, s.offered, s.accepted),
            (6, 1, 2, 1)
        );
        assert_eq!(s.hit_ratio, Some(0.5));
        assert_eq!(s.resumption_rate, Some(0.2));
        let f = &s.classes[0];
        assert_eq!((f.count, f.share, f.rate_per_s), (4, 0.8, 4.0 / 30.0));
        assert_eq!(f.stages[0].stage, Stage::ServerFlight1);
        // (1 + 2 + 3 + 1) ms / 4
        assert!((f.stages[0].mean_s - 1.75e-3).abs() < 1e-12);
        assert!(
            (f.stages[0].p50_s - 1e-3).abs() <= 1e-3 * 0.01,
            "{}",
            f.stages[0].p50_s
        );
        assert!((f.stages[0].p99_s - 3e-3).abs() <= 3e-3 * 0.01);
        assert!((f.demand_s[StageClass::Service as usize] - 1.75e-3).abs() < 1e-12);
        assert!((f.demand_s[StageClass::Delay as usize] - 2e-3).abs() < 1e-12);
        let plain = &p.servers[1].classes[2];
        assert_eq!(plain.stages[0].cpu_mean_s, Some(4e-4));
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
        let csv = p.to_csv();
        let row = csv
            .lines()
            .find(|l| {
                l.contains(",nginx:443,")
                    && l.contains(",tls_full,")
                    && l.contains(",server_flight_1,")
            })
            .unwrap();
        assert!(row.contains(",0.00175,"), "{row}");
        assert!(p.text_table().contains("server_flight_1"));
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
        let a = p.servers[0].cpu.unwrap();
        assert!(
            close(a.per_connection_s, 2e-3) && close(a.outside_stages_s, 1e-3),
            "{a:?}"
        );
        let b = p.servers[1].cpu.unwrap();
        assert!(close(b.per_connection_s, 3e-3), "{b:?}");
        assert!(close(b.outside_stages_s, 2e-3), "{b:?}");
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
        let b = p.servers[1].cpu.unwrap();
        // process 20: 4 ms over 2 connections, 0.5 ms of stages each; process 10 as above
        assert!(
            close(b.per_connection_s, 2e-3)
                && close(b.outside_stages_s, (1e-3 + 2.0 * 1.5e-3) / 3.0),
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
        assert_eq!(p.servers[0].cpu, None);
        let v: Value = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(v["servers"][0]["cpu"]["outside_stages_s"], Value::Null);
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
        let p = e.parameters(t0 + Duration::from_secs(61), SystemTime::now());
        assert_eq!(p.servers[0].classes[2].count, 1);
        let p = e.parameters(t0 + Duration::from_secs(200), SystemTime::now());
        assert!(p.servers.is_empty());
        assert_eq!(p.window_seconds, 60.0);
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
