//! What a report shows, and the sink that gathers it from the records of a traced window:
//! per server, each kind of connection's stages (mean, p90, on-CPU), each stage's
//! distribution, the session cache over time, the failures, with the parameter estimator
//! fed the same records so that the page's parameters are the same window's.

use std::{
    collections::BTreeMap,
    io,
    time::{Duration, Instant},
};

use crate::{
    failures::RecentFailures,
    health::Health,
    metrics::DURATION_BUCKETS_S,
    params::Estimator,
    record::{CloseRecord, Record},
    sink::Sink,
    stage::{Kind, Stage},
};

/// Servers a traced report keeps apart (more are folded into "other").
pub const MAX_SERVERS: usize = 16;
/// Failed handshakes listed as examples.
pub const EXAMPLES: usize = 5;
/// Steps of the session cache's chart over the window.
pub const CACHE_STEPS: usize = 30;

/// The distributions' buckets, the metrics' (10 µs · 2^k, 23 of them), and the rest.
pub fn bucket_edges_s() -> Vec<f64> {
    DURATION_BUCKETS_S.to_vec()
}

/// A latency histogram on a log scale fine enough for percentiles: bucket i holds
/// durations below 2^((i+1)/16) ns (about 4 % wide), so a percentile read from it is
/// within 4.4 % of the exact one. 2 KiB, whatever the count.
#[derive(Clone)]
pub struct LogHist {
    counts: Vec<u32>,
    n: u64,
}

const PER_OCTAVE: f64 = 16.0;
const LOG_BUCKETS: usize = 16 * 44; // up to 2^44 ns: 4.9 hours

impl Default for LogHist {
    fn default() -> LogHist {
        LogHist {
            counts: vec![0; LOG_BUCKETS],
            n: 0,
        }
    }
}

impl LogHist {
    pub fn add(&mut self, ns: u64) {
        let i = if ns <= 1 {
            0
        } else {
            ((ns as f64).log2() * PER_OCTAVE) as usize
        };
        let c = &mut self.counts[i.min(LOG_BUCKETS - 1)];
        *c = c.saturating_add(1);
        self.n += 1;
    }

    pub fn merge(&mut self, o: &LogHist) {
        for (m, t) in self.counts.iter_mut().zip(&o.counts) {
            *m = m.saturating_add(*t);
        }
        self.n += o.n;
    }

    /// The q-quantile in seconds (the upper edge of its bucket); 0 when empty.
    pub fn quantile_s(&self, q: f64) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let want = (q * self.n as f64).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            seen += u64::from(*c);
            if seen >= want {
                // bucket 0 holds the stages that took no time (0 or 1 ns)
                return if i == 0 {
                    0.0
                } else {
                    2f64.powf((i + 1) as f64 / PER_OCTAVE) * 1e-9
                };
            }
        }
        2f64.powf(LOG_BUCKETS as f64 / PER_OCTAVE) * 1e-9
    }
}

/// One stage's figures over some connections.
#[derive(Clone, Default)]
pub struct StageAcc {
    pub count: u64,
    pub sum_ns: u128,
    pub cpu_count: u64,
    pub cpu_sum_ns: u128,
    pub hist: LogHist,
}

impl StageAcc {
    fn merge(&mut self, o: &StageAcc) {
        self.count += o.count;
        self.sum_ns += o.sum_ns;
        self.cpu_count += o.cpu_count;
        self.cpu_sum_ns += o.cpu_sum_ns;
        self.hist.merge(&o.hist);
    }

    pub fn mean_s(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count as f64 * 1e-9
        }
    }

    pub fn cpu_mean_s(&self) -> Option<f64> {
        (self.cpu_count > 0).then(|| self.cpu_sum_ns as f64 / self.cpu_count as f64 * 1e-9)
    }
}

/// A kind of connection, as a waterfall row: the TLS version (None: plain, or a failure
/// before the version was told) and the kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RowKey {
    pub kind: Kind,
    pub tls_version: Option<&'static str>,
}

impl RowKey {
    pub fn label(&self) -> String {
        match (self.kind, self.tls_version) {
            (Kind::Plain, _) => "plain".to_owned(),
            (kind, Some(v)) => format!("TLS {v} {}", kind.name()),
            (kind, None) => format!("TLS {}", kind.name()),
        }
    }
}

/// One row's connections and stages.
#[derive(Clone, Default)]
pub struct RowAcc {
    pub connections: u64,
    pub stages: BTreeMap<Stage, StageAcc>,
}

/// The session cache over the window.
#[derive(Clone, Default)]
pub struct CacheAcc {
    /// by mechanism (`Resumption::index`)
    pub offered: [u64; 3],
    pub accepted: [u64; 3],
    /// by step of the window: (offered, accepted)
    pub steps: Vec<(u64, u64)>,
    /// accept() to handshake complete, by full (0) and resumed (1)
    pub handshake_ns: [(u64, u128); 2],
}

/// Everything gathered for one server.
#[derive(Default)]
pub struct ServerAcc {
    pub connections: u64,
    pub rows: BTreeMap<RowKey, RowAcc>,
    /// every kind together, by stage: the distributions
    pub by_stage: BTreeMap<Stage, (Vec<u64>, LogHist)>,
    pub cache: CacheAcc,
    /// (error type, stage) → count
    pub failures: BTreeMap<(&'static str, &'static str), u64>,
    pub examples: Option<RecentFailures>,
}

impl ServerAcc {
    /// Another port of the same server, added in (its examples are kept apart).
    pub fn merge(&mut self, o: ServerAcc) {
        self.connections += o.connections;
        for (key, row) in o.rows {
            let mine = self.rows.entry(key).or_default();
            mine.connections += row.connections;
            for (stage, acc) in row.stages {
                mine.stages.entry(stage).or_default().merge(&acc);
            }
        }
        for (stage, (buckets, hist)) in o.by_stage {
            let (b, h) = self
                .by_stage
                .entry(stage)
                .or_insert_with(|| (vec![0; DURATION_BUCKETS_S.len() + 1], LogHist::default()));
            for (m, t) in b.iter_mut().zip(&buckets) {
                *m += t;
            }
            h.merge(&hist);
        }
        let (c, oc) = (&mut self.cache, o.cache);
        for i in 0..3 {
            c.offered[i] += oc.offered[i];
            c.accepted[i] += oc.accepted[i];
        }
        if c.steps.is_empty() {
            c.steps = oc.steps;
        } else {
            for (m, t) in c.steps.iter_mut().zip(&oc.steps) {
                m.0 += t.0;
                m.1 += t.1;
            }
        }
        for i in 0..2 {
            c.handshake_ns[i].0 += oc.handshake_ns[i].0;
            c.handshake_ns[i].1 += oc.handshake_ns[i].1;
        }
        for (k, n) in o.failures {
            *self.failures.entry(k).or_default() += n;
        }
    }
}

/// The sink of a traced report: every record into its server's figures and into the
/// parameter estimator; each process's CPU into the estimator.
pub struct Gather {
    pub start: Instant,
    pub duration: Duration,
    pub servers: BTreeMap<String, ServerAcc>,
    pub estimator: Estimator,
    pub health: Health,
}

impl Gather {
    pub fn new(duration: Duration) -> Gather {
        Gather {
            start: Instant::now(),
            duration,
            servers: BTreeMap::new(),
            estimator: Estimator::for_run(duration, crate::params::MAX_SERVERS),
            health: Health::default(),
        }
    }

    fn step(&self) -> usize {
        let at = self.start.elapsed().as_secs_f64() / self.duration.as_secs_f64().max(1e-3);
        ((at * CACHE_STEPS as f64) as usize).min(CACHE_STEPS - 1)
    }

    fn add(&mut self, r: &Record) {
        let step = self.step();
        let name = r.server();
        let name = if self.servers.contains_key(&name) || self.servers.len() < MAX_SERVERS {
            name
        } else {
            "other".to_owned()
        };
        let s = self.servers.entry(name).or_default();
        s.connections += 1;
        let key = RowKey {
            kind: r.kind,
            tls_version: if r.kind == Kind::Plain {
                None
            } else {
                r.tls_version
            },
        };
        let row = s.rows.entry(key).or_default();
        row.connections += 1;
        for (stage, ns) in &r.stages_ns.0 {
            let acc = row.stages.entry(*stage).or_default();
            acc.count += 1;
            acc.sum_ns += u128::from(*ns);
            acc.hist.add(*ns);
            let (buckets, hist) = s
                .by_stage
                .entry(*stage)
                .or_insert_with(|| (vec![0; DURATION_BUCKETS_S.len() + 1], LogHist::default()));
            let secs = *ns as f64 * 1e-9;
            let b = DURATION_BUCKETS_S
                .iter()
                .position(|e| secs <= *e)
                .unwrap_or(DURATION_BUCKETS_S.len());
            buckets[b] += 1;
            hist.add(*ns);
        }
        for (stage, ns) in &r.cpu_ns.0 {
            if let Some(acc) = row.stages.get_mut(stage) {
                acc.cpu_count += 1;
                acc.cpu_sum_ns += u128::from(*ns);
            }
        }
        let cache = &mut s.cache;
        if cache.steps.is_empty() {
            cache.steps = vec![(0, 0); CACHE_STEPS];
        }
        if let Some(offer) = r.offered {
            cache.offered[offer.index()] += 1;
            cache.steps[step].0 += 1;
        }
        if r.kind == Kind::Resumed {
            // a resumed session was offered, even when its ClientHello was not seen
            if let Some(how) = r.resumption.or(r.offered) {
                cache.accepted[how.index()] += 1;
                if r.offered.is_none() {
                    cache.offered[how.index()] += 1;
                    cache.steps[step].0 += 1;
                }
            }
            cache.steps[step].1 += 1;
        }
        if let (Some(h), Some(i)) = (
            r.handshake_ns,
            match r.kind {
                Kind::Full => Some(0),
                Kind::Resumed => Some(1),
                _ => None,
            },
        ) {
            cache.handshake_ns[i].0 += 1;
            cache.handshake_ns[i].1 += u128::from(h);
        }
        if r.kind == Kind::Failed {
            let stage = r.failed_in.map_or("none", Stage::name);
            *s.failures
                .entry((r.failure.unwrap_or("unknown"), stage))
                .or_default() += 1;
            s.examples
                .get_or_insert_with(|| RecentFailures::new(EXAMPLES, Default::default()))
                .push(r);
        }
    }
}

impl Sink for Gather {
    fn connection(&mut self, r: &Record) -> io::Result<()> {
        self.add(r);
        self.estimator.connection(r)
    }

    fn close(&mut self, _c: &CloseRecord) -> io::Result<()> {
        Ok(())
    }

    fn tick(&mut self, health: &Health) -> io::Result<()> {
        self.health = health.clone();
        Ok(())
    }

    fn process_cpu(&mut self, pid: u32, ns: u64) {
        self.estimator.process_cpu(pid, ns);
    }

    fn host_cpu(&mut self, h: &crate::host_cpu::HostCpu) {
        self.estimator.host_cpu(h);
    }

    fn cold_start(&mut self, c: &crate::cold_start::ColdStart) {
        self.estimator.cold_start(c);
    }

    fn cold_start_absent(&mut self, why: crate::params::v1::ColdStartAbsent) {
        self.estimator.cold_start_absent(why);
    }

    fn stopped(&mut self) {
        self.estimator.stopped();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Resumption;

    #[test]
    fn log_histogram_quantiles_are_within_their_bucket() {
        let mut h = LogHist::default();
        assert_eq!(h.quantile_s(0.9), 0.0);
        for us in 1..=1000u64 {
            h.add(us * 1000);
        }
        for (q, exact) in [(0.5, 500e-6), (0.9, 900e-6), (0.99, 990e-6)] {
            let got = h.quantile_s(q);
            assert!(
                got >= exact && got <= exact * 1.045,
                "q{q}: {got} vs {exact}"
            );
        }
        let mut zero = LogHist::default();
        zero.add(0);
        assert_eq!(zero.quantile_s(0.9), 0.0);
        h.add(0);
        h.add(u64::MAX);
        assert!(h.quantile_s(1.0).is_finite());
    }

    #[test]
    fn rows_cache_and_failures_from_records() {
        let mut g = Gather::new(Duration::from_secs(10));
        let full = Record::fixture(Kind::Full);
        g.connection(&full).unwrap();
        g.connection(&Record {
            offered: Some(Resumption::Ticket),
            resumption: Some(Resumption::Ticket),
            handshake_ns: Some(250_000),
            ..Record::fixture(Kind::Resumed)
        })
        .unwrap();
        // resumed with its ClientHello unseen: offered all the same
        g.connection(&Record {
            resumption: Some(Resumption::SessionId),
            ..Record::fixture(Kind::Resumed)
        })
        .unwrap();
        g.connection(&Record {
            failure: Some("alert"),
            failed_in: Some(Stage::ServerFlight1),
            tls_version: None,
            ..Record::fixture(Kind::Failed)
        })
        .unwrap();
        let s = &g.servers["nginx:443"];
        assert_eq!(s.connections, 4);
        let labels: Vec<String> = s.rows.keys().map(RowKey::label).collect();
        assert_eq!(labels, ["TLS 1.3 full", "TLS 1.3 resumed", "TLS failed"]);
        let full_row = &s.rows[&RowKey {
            kind: Kind::Full,
            tls_version: Some("1.3"),
        }];
        assert!((full_row.stages[&Stage::Response].mean_s() - 1e-6).abs() < 1e-15);
        assert!((full_row.stages[&Stage::Response].cpu_mean_s().unwrap() - 500e-9).abs() < 1e-15);
        assert_eq!(s.cache.offered, [1, 1, 0]);
        assert_eq!(s.cache.accepted, [1, 1, 0]);
        assert_eq!(s.cache.steps.iter().map(|x| x.1).sum::<u64>(), 2);
        assert_eq!(s.cache.handshake_ns[1], (2, 1_250_000));
        assert_eq!(s.failures[&("alert", "server_flight_1")], 1);
        assert_eq!(s.by_stage[&Stage::Response].0.iter().sum::<u64>(), 4);
    }
}
