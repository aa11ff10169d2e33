//! `serve`'s Prometheus metrics: every name, label and bucket is defined here, through the
//! prometheus-client crate (OpenMetrics exposition). Base units, `_total` counters, an
//! `hstrace_` prefix; `tls_version`, `cipher` and `resumed` as OpenTelemetry names them.
//!
//! Series budget per server at the defaults: the stage histogram has ≤ 31 (stage, kind)
//! pairs × 26 series (23 buckets, +Inf, _sum, _count) ≈ 810; the handshake histogram
//! 2 kinds × TLS versions seen × 26; per-SNI counters ≤ (`--max-sni` + 2) × 3 mechanisms ×
//! 2 + (`--max-sni` + 2) × 2; connections one per (protocol, app protocol, kind, version,
//! cipher) seen.
//! About 1,500 series for a server with two TLS versions, a few ciphers and 50 SNIs.

use std::{
    borrow::Cow,
    collections::{HashMap, HashSet},
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{exponential_buckets, Histogram},
    },
    registry::{Registry, Unit},
};

use crate::{
    health::Health,
    record::{CloseRecord, Record},
    sink::Sink,
    stage::{Kind, Resumption, Stage},
};

/// Stage buckets: 10 µs · 2^k up to ~42 s (23 buckets), resolving microseconds.
const BUCKET_FLOOR_S: f64 = 10e-6;
const BUCKETS: u16 = 23;

fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(BUCKET_FLOOR_S, 2.0, BUCKETS))
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    server: String,
    stage: &'static str,
    stage_class: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandshakeLabels {
    server: String,
    kind: &'static str,
    tls_version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CpuLabels {
    server: String,
    stage: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabels {
    server: String,
    protocol: &'static str,
    /// the plaintext part's protocol (STARTTLS's, or a plain connection's), "none" when
    /// not told: one of ten names, bounded
    app_protocol: &'static str,
    kind: &'static str,
    tls_version: &'static str,
    cipher: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    server: String,
    reason: &'static str,
    stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResumptionLabels {
    server: String,
    mechanism: &'static str,
    sni: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandshakeSniLabels {
    server: String,
    sni: String,
    resumed: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RecordLabels {
    record: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    revision: &'static str,
    rust_version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabels {
    group: &'static str,
    hook: String,
}

/// The metrics, registered in `registry` (what `/metrics` encodes), and the sink that
/// counts records into them.
pub struct Metrics {
    stage: Histograms<StageLabels>,
    handshake: Histograms<HandshakeLabels>,
    stage_cpu: Family<CpuLabels, Counter<f64>>,
    connections: Family<ConnectionLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    offered: Family<ResumptionLabels, Counter>,
    accepted: Family<ResumptionLabels, Counter>,
    handshakes: Family<HandshakeSniLabels, Counter>,
    records: Family<RecordLabels, Counter>,
    lost: Family<CauseLabels, Counter>,
    accepted_conns: Counter,
    tracked: Counter,
    in_progress: Gauge,
    open: Gauge,
    traced: Gauge,
    probes: Family<ProbeLabels, Gauge>,
    uprobe_failures: Counter,
    uprobes_untied: Counter,
    accept_queue_unmeasured: Counter,
    sni_folded: Counter,
    sni: SniLabels,
    /// each server's series, looked up once
    servers: Vec<ServerSeries>,
    /// the records counter's two series
    records_connection: Counter,
    records_close: Counter,
    /// the health last seen, to turn the tracer's totals into counter increments
    last: Health,
}

impl Metrics {
    /// `max_sni`: SNI label values kept per daemon (the rest are `other`).
    pub fn new(registry: &mut Registry, max_sni: usize) -> Metrics {
        let m = Metrics {
            stage: Family::new_with_constructor(duration_histogram),
            handshake: Family::new_with_constructor(duration_histogram),
            stage_cpu: Family::default(),
            connections: Family::default(),
            failures: Family::default(),
            offered: Family::default(),
            accepted: Family::default(),
            handshakes: Family::default(),
            records: Family::default(),
            lost: Family::default(),
            accepted_conns: Counter::default(),
            tracked: Counter::default(),
            in_progress: Gauge::default(),
            open: Gauge::default(),
            traced: Gauge::default(),
            probes: Family::default(),
            uprobe_failures: Counter::default(),
            uprobes_untied: Counter::default(),
            accept_queue_unmeasured: Counter::default(),
            sni_folded: Counter::default(),
            sni: SniLabels::new(max_sni),
            servers: Vec::new(),
            records_connection: Counter::default(),
            records_close: Counter::default(),
            last: Health::default(),
        };
        let m = Metrics {
            records_connection: m.records.get_or_create_owned(&RecordLabels {
                record: "connection",
            }),
            records_close: m
                .records
                .get_or_create_owned(&RecordLabels { record: "close" }),
            ..m
        };
        let r = registry;
        r.register_with_unit(
            "stage_duration",
            "Time of each stage of a connection (service: the server works; queue: a message waits for the server; delay: the server waits for the client and network)",
            Unit::Seconds,
            m.stage.clone(),
        );
        r.register_with_unit(
            "handshake_duration",
            "accept() to handshake complete, of completed TLS handshakes",
            Unit::Seconds,
            m.handshake.clone(),
        );
        r.register_with_unit(
            "stage_cpu",
            "On-CPU time of the server thread during service stages",
            Unit::Seconds,
            m.stage_cpu.clone(),
        );
        r.register(
            "connections",
            "Connections reported, by how they went",
            m.connections.clone(),
        );
        r.register(
            "failures",
            "Connections that failed before their handshake completed, by reason and the stage they died in",
            m.failures.clone(),
        );
        r.register(
            "resumption_offered",
            "TLS handshakes whose client offered to resume a session",
            m.offered.clone(),
        );
        r.register(
            "resumption_accepted",
            "TLS handshakes that resumed a session (cache hit ratio = accepted / offered)",
            m.accepted.clone(),
        );
        r.register(
            "tls_handshakes",
            "Completed TLS handshakes, by SNI (resumption rate = resumed / all)",
            m.handshakes.clone(),
        );
        r.register(
            "records",
            "Records reported (connection lines and close lines)",
            m.records.clone(),
        );
        r.register(
            "lost",
            "Connection records, hellos or close lines lost, by cause",
            m.lost.clone(),
        );
        r.register(
            "connections_accepted",
            "Connections the selected servers accepted (reported + in progress + lost)",
            m.accepted_conns.clone(),
        );
        r.register(
            "connections_tracked",
            "Connections the kernel side accepted and tracked",
            m.tracked.clone(),
        );
        r.register(
            "connections_in_progress",
            "Connections whose record has not been made yet",
            m.in_progress.clone(),
        );
        r.register(
            "connections_open",
            "Tracked connections not closed yet (in the kernel's table; at most --max-conns)",
            m.open.clone(),
        );
        r.register("traced_processes", "Processes traced now", m.traced.clone());
        r.register(
            "probe_info",
            "The hook each probe group uses (hook=\"unavailable\": none worked on this kernel)",
            m.probes.clone(),
        );
        r.register(
            "uprobe_attach_failures",
            "Processes whose libssl could not be hooked (traced from the wire only)",
            m.uprobe_failures.clone(),
        );
        r.register(
            "uprobes_untied",
            "Processes whose uprobes tied no OpenSSL call to a connection (memory BIOs, Node.js): detached, traced from the wire only",
            m.uprobes_untied.clone(),
        );
        r.register(
            "accept_queue_unmeasured",
            "Connections that waited to be accepted while --max-conns others did: reported without an accept_queue stage",
            m.accept_queue_unmeasured.clone(),
        );
        let build = Family::<BuildLabels, Gauge>::default();
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                revision: env!("HSTRACE_REVISION"),
                rust_version: env!("HSTRACE_RUSTC"),
            })
            .set(1);
        r.register(
            "build_info",
            "Which hstrace this is: always 1, with the version, the git revision it was built from and the Rust compiler's version",
            build,
        );
        r.register(
            "sni_folded",
            "Connections whose SNI was counted as \"other\" (over --max-sni, or not yet seen twice)",
            m.sni_folded.clone(),
        );
        m
    }

    /// Series the SNI label has now (for the cardinality test and the bench).
    pub fn sni_values(&self) -> usize {
        self.sni.admitted.len()
    }

    /// The series of `r`'s server, found by comm and port without formatting its name.
    fn server_series(&mut self, r: &Record) -> usize {
        if let Some(i) = self
            .servers
            .iter()
            .position(|s| s.port == r.local.port && s.comm == r.comm)
        {
            return i;
        }
        self.servers.push(ServerSeries {
            comm: r.comm.clone(),
            port: r.local.port,
            name: r.server(),
            kinds: Default::default(),
            snis: HashMap::new(),
        });
        self.servers.len() - 1
    }

    fn count(&mut self, r: &Record) {
        let i = self.server_series(r);
        let Metrics {
            stage: stage_family,
            stage_cpu: cpu_family,
            connections: connection_family,
            servers,
            ..
        } = self;
        let series = &mut servers[i];
        let server = &series.name;
        let kind = r.kind.name();
        let of_kind = &mut series.kinds[r.kind as usize];
        for (stage, ns) in &r.stages_ns.0 {
            of_kind.stage[stage.index()]
                .get_or_insert_with(|| {
                    stage_family.get_or_create_owned(&StageLabels {
                        server: server.clone(),
                        stage: stage.name(),
                        stage_class: stage.class().name(),
                        kind,
                    })
                })
                .observe(*ns as f64 * 1e-9);
        }
        for (stage, ns) in &r.cpu_ns.0 {
            of_kind.cpu[stage.index()]
                .get_or_insert_with(|| {
                    cpu_family.get_or_create_owned(&CpuLabels {
                        server: server.clone(),
                        stage: stage.name(),
                        kind,
                    })
                })
                .inc_by(*ns as f64 * 1e-9);
        }
        let tls_version = r.tls_version.unwrap_or("none");
        let cipher = r.cipher.as_deref().unwrap_or("none");
        let app = r.app_protocol.unwrap_or("none");
        let connections = match of_kind.connections.iter().find(|(p, a, v, c, _)| {
            *p == r.protocol && *a == app && *v == tls_version && c == cipher
        }) {
            Some((.., counter)) => counter,
            None => {
                let counter = connection_family.get_or_create_owned(&ConnectionLabels {
                    server: server.clone(),
                    protocol: r.protocol,
                    app_protocol: app,
                    kind,
                    tls_version,
                    cipher: cipher.to_owned(),
                });
                of_kind.connections.push((
                    r.protocol,
                    app,
                    tls_version,
                    cipher.to_owned(),
                    counter,
                ));
                &of_kind.connections.last().expect("pushed").4
            }
        };
        connections.inc();
        let server = server.clone();
        if let (Some(reason), Some(stage)) = (r.failure, r.failed_in) {
            self.failures
                .get_or_create(&FailureLabels {
                    server: server.clone(),
                    reason,
                    stage: stage.name(),
                })
                .inc();
        }
        if !matches!(r.kind, Kind::Full | Kind::Resumed) {
            return;
        }
        if let Some(h) = r.handshake_ns {
            let cached = &mut self.servers[i].kinds[r.kind as usize].handshake;
            let histogram = match cached.iter().position(|(v, _)| *v == tls_version) {
                Some(j) => &cached[j].1,
                None => {
                    let histogram = self.handshake.get_or_create_owned(&HandshakeLabels {
                        server: server.clone(),
                        kind,
                        tls_version,
                    });
                    cached.push((tls_version, histogram));
                    &cached.last().expect("pushed").1
                }
            };
            histogram.observe(h as f64 * 1e-9);
        }
        let sni = self.sni.label(r.sni.as_deref());
        let sni: &str = &sni;
        if sni == OTHER {
            self.sni_folded.inc();
        }
        let snis = &mut self.servers[i].snis;
        if !snis.contains_key(sni) {
            snis.insert(sni.to_owned(), SniSeries::default());
        }
        let of_sni = snis.get_mut(sni).expect("inserted above");
        let resumption = |family: &Family<ResumptionLabels, Counter>, how: Resumption| {
            family.get_or_create_owned(&ResumptionLabels {
                server: server.clone(),
                mechanism: how.name(),
                sni: sni.to_owned(),
            })
        };
        if let Some(offer) = r.offered {
            of_sni.offered[offer as usize]
                .get_or_insert_with(|| resumption(&self.offered, offer))
                .inc();
        }
        if let Some(how) = r.resumption {
            of_sni.accepted[how as usize]
                .get_or_insert_with(|| resumption(&self.accepted, how))
                .inc();
        }
        let resumed = r.kind == Kind::Resumed;
        of_sni.handshakes[usize::from(resumed)]
            .get_or_insert_with(|| {
                self.handshakes.get_or_create_owned(&HandshakeSniLabels {
                    server: server.clone(),
                    sni: sni.to_owned(),
                    resumed: if resumed { "true" } else { "false" },
                })
            })
            .inc();
    }

    /// The tracer's health, as counter increments since the last tick and gauges.
    fn health(&mut self, h: &Health) {
        let last = &self.last;
        for ((cause, now), (_, before)) in h.losses().into_iter().zip(last.losses()) {
            self.lost
                .get_or_create(&CauseLabels { cause })
                .inc_by(now.saturating_sub(before));
        }
        self.accepted_conns
            .inc_by(h.accepted.saturating_sub(last.accepted));
        self.tracked.inc_by(h.tracked.saturating_sub(last.tracked));
        self.uprobe_failures.inc_by(
            h.uprobe_attach_failures
                .saturating_sub(last.uprobe_attach_failures),
        );
        self.uprobes_untied
            .inc_by(h.uprobes_untied.saturating_sub(last.uprobes_untied));
        self.accept_queue_unmeasured.inc_by(
            h.accept_queue_unmeasured
                .saturating_sub(last.accept_queue_unmeasured),
        );
        self.in_progress.set(h.in_progress as i64);
        self.open.set(h.open as i64);
        self.traced.set(h.traced_processes as i64);
        for p in &h.probes {
            self.probes
                .get_or_create(&ProbeLabels {
                    group: p.group,
                    hook: p.hook.clone().unwrap_or_else(|| "unavailable".into()),
                })
                .set(1);
        }
        self.last = h.clone();
    }
}

impl Sink for Metrics {
    fn connection(&mut self, r: &Record) -> std::io::Result<()> {
        self.count(r);
        self.records_connection.inc();
        Ok(())
    }

    fn close(&mut self, _c: &CloseRecord) -> std::io::Result<()> {
        self.records_close.inc();
        Ok(())
    }

    fn tick(&mut self, health: &Health) -> std::io::Result<()> {
        self.health(health);
        Ok(())
    }
}

/// The series one server's connections of one kind update, looked up by label set once
/// and kept: hashing label sets per record was a fifth of serve's pipeline time.
#[derive(Default)]
struct KindSeries {
    stage: [Option<Histogram>; Stage::ALL.len()],
    cpu: [Option<Counter<f64>>; Stage::ALL.len()],
    /// by TLS version
    handshake: Vec<(&'static str, Histogram)>,
    /// by protocol, app protocol, TLS version and cipher
    connections: Vec<(&'static str, &'static str, &'static str, String, Counter)>,
}

/// A server's series (`server` is bounded by the listeners selected, not by the wire).
struct ServerSeries {
    comm: String,
    port: u16,
    /// "comm:port"
    name: String,
    /// by `Kind` (declaration order)
    kinds: [KindSeries; Kind::ALL.len()],
    /// by SNI label value (at most `max_sni` + 2 of them)
    snis: HashMap<String, SniSeries>,
}

/// One server's series of one SNI label value, looked up once.
#[derive(Default)]
struct SniSeries {
    /// by `Resumption` (declaration order)
    offered: [Option<Counter>; 3],
    accepted: [Option<Counter>; 3],
    /// not resumed, resumed
    handshakes: [Option<Counter>; 2],
}

/// The SNI label value of connections whose SNI has no series of its own.
const OTHER: &str = "other";
/// ... and of those that sent none.
const NONE: &str = "none";
/// An SNI gets its own series once it has surely been seen this often: a client sending
/// random names, each once, never gets one.
const ADMIT_AFTER: u64 = 2;

/// Bounded SNI label values: the first `max` names surely seen `ADMIT_AFTER` times, by a
/// space-saving sketch of the most frequent names (8 × `max` entries: a name's count is
/// over-estimated by at most its `err`, so `count - err` is a sure lower bound).
struct SniLabels {
    admitted: HashSet<String>,
    max: usize,
    sketch: HashMap<String, (u64, u64)>,
    sketch_cap: usize,
}

impl SniLabels {
    fn new(max: usize) -> SniLabels {
        SniLabels {
            admitted: HashSet::new(),
            max,
            sketch: HashMap::new(),
            sketch_cap: (8 * max).max(64),
        }
    }

    /// The label value of `sni`, lower-cased (DNS names are case-insensitive).
    fn label<'a>(&mut self, sni: Option<&'a str>) -> Cow<'a, str> {
        let Some(sni) = sni else {
            return Cow::Borrowed(NONE);
        };
        let sni = if sni.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(sni.to_ascii_lowercase())
        } else {
            Cow::Borrowed(sni)
        };
        if self.admitted.contains(&*sni) {
            return sni;
        }
        if self.admitted.len() >= self.max {
            return Cow::Borrowed(OTHER);
        }
        let (count, err) = match self.sketch.get_mut(&*sni) {
            Some(e) => {
                e.0 += 1;
                *e
            }
            None => {
                // full: the least frequent name makes room, and its count is the new one's error
                let mut floor = 0;
                if self.sketch.len() >= self.sketch_cap {
                    if let Some(min) = self
                        .sketch
                        .iter()
                        .min_by_key(|(_, (c, _))| *c)
                        .map(|(k, v)| (k.clone(), v.0))
                    {
                        self.sketch.remove(&min.0);
                        floor = min.1;
                    }
                }
                self.sketch
                    .insert(sni.clone().into_owned(), (floor + 1, floor));
                (floor + 1, floor)
            }
        };
        if count - err >= ADMIT_AFTER {
            self.sketch.remove(&*sni);
            self.admitted.insert(sni.clone().into_owned());
            return sni;
        }
        Cow::Borrowed(OTHER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_snis_never_get_a_series() {
        let mut s = SniLabels::new(50);
        for i in 0..10_000 {
            assert_eq!(s.label(Some(&format!("r{i}.example"))), OTHER);
        }
        assert!(s.admitted.is_empty());
        assert!(s.sketch.len() <= s.sketch_cap);
        // a real name among the noise gets its series at its second connection
        assert_eq!(s.label(Some("shop.example")), OTHER);
        s.label(Some("noise.example"));
        assert_eq!(s.label(Some("shop.example")), "shop.example");
        assert_eq!(s.label(None), NONE);
    }

    #[test]
    fn sni_labels_are_lower_case() {
        let mut s = SniLabels::new(50);
        assert_eq!(s.label(Some("Shop.Example")), OTHER);
        // the second sighting, spelled otherwise, is the same name
        assert_eq!(s.label(Some("shop.EXAMPLE")), "shop.example");
        assert_eq!(s.label(Some("SHOP.example")), "shop.example");
        assert_eq!(s.admitted.len(), 1);
    }

    #[test]
    fn sni_values_are_capped() {
        let mut s = SniLabels::new(3);
        for round in 0..3 {
            for i in 0..10 {
                let name = format!("h{i}");
                let l = s.label(Some(&name));
                if round > 0 && i < 3 {
                    assert_eq!(l, name);
                }
            }
        }
        assert_eq!(s.admitted.len(), 3);
        assert_eq!(s.label(Some("h9")), OTHER);
    }

    #[test]
    fn exposition_names_follow_the_conventions() {
        let mut reg = Registry::with_prefix("hstrace");
        let mut m = Metrics::new(&mut reg, 50);
        m.health(&Health::default());
        // a family shows in the exposition once it has a series
        let server = || "nginx:443".to_owned();
        m.stage
            .get_or_create(&StageLabels {
                server: server(),
                stage: "response",
                stage_class: "service",
                kind: "plain",
            })
            .observe(20e-6);
        m.handshake
            .get_or_create(&HandshakeLabels {
                server: server(),
                kind: "full",
                tls_version: "1.3",
            })
            .observe(1e-3);
        for family in [&m.offered, &m.accepted] {
            family
                .get_or_create(&ResumptionLabels {
                    server: server(),
                    mechanism: "psk",
                    sni: "demo.test".into(),
                })
                .inc();
        }
        m.stage_cpu
            .get_or_create(&CpuLabels {
                server: server(),
                stage: "response",
                kind: "plain",
            })
            .inc_by(1e-5);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        for name in [
            "# TYPE hstrace_stage_duration_seconds histogram",
            "# TYPE hstrace_handshake_duration_seconds histogram",
            "# TYPE hstrace_stage_cpu_seconds counter",
            "hstrace_stage_cpu_seconds_total{server=\"nginx:443\",stage=\"response\",kind=\"plain\"} 0.00001",
            "hstrace_stage_duration_seconds_bucket{le=\"0.00002\",server=\"nginx:443\",stage=\"response\",stage_class=\"service\",kind=\"plain\"} 1",
            "# TYPE hstrace_resumption_offered counter",
            "# TYPE hstrace_resumption_accepted counter",
            "hstrace_lost_total{cause=\"ring_buffer_full\"} 0",
            "hstrace_connections_tracked_total 0",
            "hstrace_accept_queue_unmeasured_total 0",
            concat!(
                "hstrace_build_info{version=\"",
                env!("CARGO_PKG_VERSION"),
                "\",revision=\""
            ),
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
    }
}
