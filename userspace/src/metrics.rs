//! `serve`'s Prometheus metrics: every family, label and bound is defined here, through the
//! prometheus-client crate (OpenMetrics exposition). Base units, `_total` counters, an
//! `hstrace_` prefix. A label holds one dimension, named after OpenTelemetry's semantic
//! conventions with the dots made underscores: `process_executable_name` and `server_port`
//! say which server; then `tls_protocol_version`, `tls_cipher`, `tls_client_server_name`
//! (the SNI), `network_protocol_name` and `error_type`. `kind` (full, resumed, plain,
//! failed) is the one way a series says that a handshake resumed.
//!
//! With `--container-labels`, a server's series also carry its container (`container_id`)
//! and pod (`k8s_namespace_name`, `k8s_pod_name`): at most `MAX_CONTAINERS` containers
//! have series, the rest count under `container_id="other"`.
//!
//! docs/metrics.md lists every family with its labels and bounds; `series_budget` is the
//! most series one server can have, and a test holds the exposition to it. Label values
//! that come from traffic (SNI names, containers) are kept by recent traffic: at the end of
//! each `--label-window` those that lost their place or had no connection lose their series.

use std::{
    borrow::Cow,
    collections::HashMap,
    time::{Duration, Instant},
};

use prometheus_client::{
    encoding::{EncodeLabel, EncodeLabelSet, LabelSetEncoder},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::{Registry, Unit},
};

use crate::{
    container::Container,
    health::Health,
    host_cpu::HostCpu,
    record::{CloseRecord, Record},
    sink::Sink,
    stage::{Kind, Resumption, Stage},
    tls,
};

/// The duration histograms' bucket bounds: 10 µs · 2^k up to ~42 s (23 buckets),
/// resolving microseconds (the report's distributions use them too).
pub const DURATION_BUCKETS_S: [f64; 23] = {
    let mut b = [0.0; 23];
    let mut k = 0;
    while k < b.len() {
        b[k] = 10e-6 * (1u32 << k) as f64;
        k += 1;
    }
    b
};
/// The series of one histogram: its buckets, +Inf, _sum and _count.
const HISTOGRAM_SERIES: usize = DURATION_BUCKETS_S.len() + 3;

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS_S)
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Which server: its executable's name and listening port (OpenTelemetry's
/// `process.executable.name` and `server.port`), and with `--container-labels` its
/// container (`container.id`, `k8s.namespace.name`, `k8s.pod.name`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ServerLabels {
    process: String,
    port: u16,
    container: Option<ContainerLabels>,
}

/// A container's labels: its id (or `other` past `MAX_CONTAINERS`), and its pod's
/// namespace and name when known.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ContainerLabels {
    id: String,
    pod: Option<(String, String)>,
}

impl ContainerLabels {
    fn of(c: &Container) -> ContainerLabels {
        ContainerLabels {
            id: c.id.clone(),
            pod: c
                .pod
                .as_ref()
                .map(|p| (p.namespace.clone(), p.name.clone())),
        }
    }

    fn other() -> ContainerLabels {
        ContainerLabels {
            id: OTHER.to_owned(),
            pod: None,
        }
    }
}

/// Labels that are absent, not empty, when unknown (a process outside any container has
/// no `container_id`, a container outside Kubernetes no `k8s_pod_name`).
impl EncodeLabelSet for ServerLabels {
    fn encode(&self, e: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        ("process_executable_name", self.process.as_str()).encode(e.encode_label())?;
        ("server_port", self.port).encode(e.encode_label())?;
        if let Some(c) = &self.container {
            ("container_id", c.id.as_str()).encode(e.encode_label())?;
            if let Some((namespace, name)) = &c.pod {
                ("k8s_namespace_name", namespace.as_str()).encode(e.encode_label())?;
                ("k8s_pod_name", name.as_str()).encode(e.encode_label())?;
            }
        }
        Ok(())
    }
}

/// Containers with series of their own at once (with `--container-labels`); the
/// connections of any other count under `container_id="other"` until one of these goes a
/// whole `--label-window` without a connection.
pub const MAX_CONTAINERS: usize = 128;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabels {
    #[prometheus(flatten)]
    server: ServerLabels,
    stage: &'static str,
    stage_class: &'static str,
    kind: &'static str,
    tls_group: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandshakeLabels {
    #[prometheus(flatten)]
    server: ServerLabels,
    kind: &'static str,
    tls_protocol_version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CpuLabels {
    #[prometheus(flatten)]
    server: ServerLabels,
    stage: &'static str,
    kind: &'static str,
    tls_group: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectionLabels {
    #[prometheus(flatten)]
    server: ServerLabels,
    kind: &'static str,
    /// the plaintext part's protocol (STARTTLS's, or a plain connection's), "none" when
    /// not told: one of ten names, bounded
    network_protocol_name: &'static str,
    tls_protocol_version: &'static str,
    tls_cipher: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    #[prometheus(flatten)]
    server: ServerLabels,
    error_type: &'static str,
    stage: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HandshakeSniLabels {
    #[prometheus(flatten)]
    server: ServerLabels,
    tls_client_server_name: String,
    /// full or resumed
    kind: &'static str,
    /// none, session_id, ticket or psk
    tls_resumption_offered: &'static str,
    tls_group: &'static str,
}

/// A server's HelloRetryRequests, by why the server asked again (`HRR_CAUSES`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    #[prometheus(flatten)]
    server: ServerLabels,
    cause: &'static str,
}

/// Completed handshakes by the group they agreed on and whether the client offered a
/// post-quantum group: the PQ share, and the clients that offered PQ but did not get it.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyExchangeLabels {
    #[prometheus(flatten)]
    server: ServerLabels,
    kind: &'static str,
    tls_group: &'static str,
    /// true, false, or unknown (the ClientHello was not seen)
    post_quantum_offered: &'static str,
}

/// TLS connections by their client's JA4 fingerprint (bounded like the SNI) and kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClientLabels {
    #[prometheus(flatten)]
    server: ServerLabels,
    tls_client_ja4: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RecordLabels {
    record: &'static str,
}

/// Whose work kept the traced servers' CPUs busy: `servers` (their processes) or `other`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkLabels {
    work: &'static str,
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

/// Plaintext protocols told apart (`record::app_protocol_name`), and failure reasons
/// (`record::failure_name`): the bounds of `network_protocol_name` and `error_type`.
const NETWORK_PROTOCOLS: usize = 9;
const ERROR_TYPES: usize = 8;

/// What a client offered to resume with: the `tls_resumption_offered` values, in the
/// order `SniSeries::handshakes` keeps them.
pub(crate) const OFFERED: [&str; 4] = ["none", "session_id", "ticket", "psk"];

pub(crate) fn offered_index(offer: Option<Resumption>) -> usize {
    offer.map_or(0, |r| r.index() + 1)
}

/// Why a server sent a HelloRetryRequest (`Record::hrr_cause`): the `cause` values.
pub(crate) const HRR_CAUSES: [&str; 3] = ["no_acceptable_share", "cookie", "other"];

/// `cause`'s index in `HRR_CAUSES` (a cause it does not name counts as `other`).
pub(crate) fn hrr_cause_index(cause: &str) -> usize {
    HRR_CAUSES.iter().position(|c| *c == cause).unwrap_or(2)
}

/// The `tls_group` label value of a record's group and kind: a name of `tls::GROUPS` (or `rsa`/`ffdhe`, TLS
/// 1.2's key exchanges without a named group), `none` (resumed without a key exchange,
/// and plain connections), `unknown` (the hello that names it was not seen) or `other` (a
/// code point without a name). So the label is bounded by the registry, and a server has
/// a series only for the groups it negotiates.
pub(crate) fn group_label(tls_group: Option<&str>, kind: Kind) -> &'static str {
    match tls_group {
        Some(g) => tls::GROUPS
            .iter()
            .map(|(_, name)| *name)
            .chain(["none", "rsa", "ffdhe"])
            .find(|name| *name == g)
            .unwrap_or(OTHER),
        None if kind == Kind::Plain => "none",
        None => "unknown",
    }
}

/// The `post_quantum_offered` label value.
pub(crate) fn pq_offered_label(r: &Record) -> &'static str {
    match r.pq_offered {
        Some(true) => "true",
        Some(false) => "false",
        None => "unknown",
    }
}

/// The most series one server can have in the families labelled by server, with
/// `versions` TLS versions, `ciphers` ciphers and `groups` key-exchange groups seen (a
/// server negotiates only the groups it is configured with), `--max-sni` = `max_sni` and
/// `--max-ja4` = `max_ja4`. Every bound is the product of the label values each family can
/// take, where a TLS kind (full, resumed, failed) has `groups` + "none" + "unknown" group
/// values and a plain connection one ("none"):
/// - stage_duration: 16 stages × (kind, group) pairs × 26 series (fewer occur: a plain
///   connection has no handshake stages);
/// - stage_cpu: the stages whose CPU is read × (kind, group) pairs;
/// - handshake_duration: 2 kinds × (versions + "none") × 26;
/// - connections: 4 kinds × 10 network protocols (nine and "none") × (versions + "none") ×
///   (ciphers + "none");
/// - failures: 8 error types × 16 stages;
/// - tls_handshakes: (max_sni + "other" + "none") × (full: 4 offers + resumed: 3 offers) ×
///   group values;
/// - tls_hello_retries: 3 causes;
/// - tls_key_exchanges: 2 kinds × group values × 3 (post-quantum offered or not, unknown);
/// - tls_clients: (max_ja4 + "other" + "none") × 3 TLS kinds.
pub fn series_budget(
    versions: usize,
    ciphers: usize,
    groups: usize,
    max_sni: usize,
    max_ja4: usize,
) -> usize {
    let with_cpu = Stage::ALL.iter().filter(|s| s.has_cpu()).count();
    let group_values = groups + 2;
    let kind_groups = CLIENT_KINDS.len() * group_values + 1;
    Stage::ALL.len() * kind_groups * HISTOGRAM_SERIES
        + with_cpu * kind_groups
        + 2 * (versions + 1) * HISTOGRAM_SERIES
        + Kind::ALL.len() * (NETWORK_PROTOCOLS + 1) * (versions + 1) * (ciphers + 1)
        + ERROR_TYPES * Stage::ALL.len()
        + (max_sni + 2) * (OFFERED.len() + OFFERED.len() - 1) * group_values
        + HRR_CAUSES.len()
        + 2 * group_values * 3
        + (max_ja4 + 2) * CLIENT_KINDS.len()
}

/// The metrics, registered in `registry` (what `/metrics` encodes), and the sink that
/// counts records into them.
pub struct Metrics {
    stage: Histograms<StageLabels>,
    handshake: Histograms<HandshakeLabels>,
    stage_cpu: Family<CpuLabels, Counter<f64>>,
    connections: Family<ConnectionLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    handshakes: Family<HandshakeSniLabels, Counter>,
    records: Family<RecordLabels, Counter>,
    lost: Family<CauseLabels, Counter>,
    accepted_conns: Counter,
    tracked: Counter,
    in_progress: Gauge,
    open: Gauge,
    traced: Gauge,
    /// the CPUs the traced servers may run on, and their busy time by whose work
    server_cpus: Gauge,
    server_cpus_busy: Family<WorkLabels, Counter<f64>>,
    probes: Family<ProbeLabels, Gauge>,
    uprobe_failures: Counter,
    uprobes_untied: Counter,
    accept_queue_unmeasured: Counter,
    hook_runs_skipped: Counter,
    sni_folded: Counter,
    sni_evicted: Counter,
    containers_evicted: Counter,
    containers_folded: Counter,
    sni: TopLabels,
    ja4: TopLabels,
    ja4_folded: Counter,
    ja4_evicted: Counter,
    retries: Family<RetryLabels, Counter>,
    key_exchanges: Family<KeyExchangeLabels, Counter>,
    clients: Family<ClientLabels, Counter>,
    /// when the label window ends, and how long the next one lasts
    window_end: Instant,
    label_window: Duration,
    /// each server's series, looked up once
    servers: Vec<ServerSeries>,
    /// the records counter's two series
    records_connection: Counter,
    records_close: Counter,
    /// the health last seen, to turn the tracer's totals into counter increments
    last: Health,
}

impl Metrics {
    /// `max_sni`, `max_ja4`: SNI and JA4 label values kept per daemon (the rest are
    /// `other`), re-ranked by their connections every `label_window`, when containers
    /// without connections lose their series too.
    pub fn new(
        registry: &mut Registry,
        max_sni: usize,
        max_ja4: usize,
        label_window: Duration,
    ) -> Metrics {
        let records: Family<RecordLabels, Counter> = Family::default();
        let m = Metrics {
            stage: Family::new_with_constructor(duration_histogram),
            handshake: Family::new_with_constructor(duration_histogram),
            stage_cpu: Family::default(),
            connections: Family::default(),
            failures: Family::default(),
            handshakes: Family::default(),
            records_connection: records.get_or_create_owned(&RecordLabels {
                record: "connection",
            }),
            records_close: records.get_or_create_owned(&RecordLabels { record: "close" }),
            records,
            lost: Family::default(),
            accepted_conns: Counter::default(),
            tracked: Counter::default(),
            in_progress: Gauge::default(),
            open: Gauge::default(),
            traced: Gauge::default(),
            server_cpus: Gauge::default(),
            server_cpus_busy: Family::default(),
            probes: Family::default(),
            uprobe_failures: Counter::default(),
            uprobes_untied: Counter::default(),
            accept_queue_unmeasured: Counter::default(),
            hook_runs_skipped: Counter::default(),
            sni_folded: Counter::default(),
            sni_evicted: Counter::default(),
            containers_evicted: Counter::default(),
            containers_folded: Counter::default(),
            sni: TopLabels::new(max_sni),
            ja4: TopLabels::new(max_ja4),
            ja4_folded: Counter::default(),
            ja4_evicted: Counter::default(),
            retries: Family::default(),
            key_exchanges: Family::default(),
            clients: Family::default(),
            window_end: Instant::now() + label_window,
            label_window,
            servers: Vec::new(),
            last: Health::default(),
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
            "Connections reported, by how they went (kind) and what they spoke",
            m.connections.clone(),
        );
        r.register(
            "failures",
            "Connections that failed before their handshake completed, by error type and the stage they died in",
            m.failures.clone(),
        );
        r.register(
            "tls_handshakes",
            "Completed TLS handshakes, by SNI, kind (full or resumed) and what the client offered to resume with (cache hit ratio = kind=\"resumed\" / tls_resumption_offered!=\"none\")",
            m.handshakes.clone(),
        );
        r.register(
            "tls_hello_retries",
            "HelloRetryRequests sent, by cause (no_acceptable_share: the client sent no key share for a group the server takes; cookie: the server asked for a cookie)",
            m.retries.clone(),
        );
        r.register(
            "tls_key_exchanges",
            "Completed TLS handshakes by the key-exchange group agreed (tls_group) and whether the client offered a post-quantum group (post_quantum_offered)",
            m.key_exchanges.clone(),
        );
        r.register(
            "tls_clients",
            "TLS connections by the JA4 fingerprint of their ClientHello (the busiest --max-ja4 per window; other: the rest, none: not seen)",
            m.clients.clone(),
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
            "Connections the selected servers accepted: each reported, in progress, or lost with a counted cause (docs/accounting.md)",
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
            "server_cpus",
            "CPUs the traced servers' processes may run on (their affinity)",
            m.server_cpus.clone(),
        );
        r.register_with_unit(
            "server_cpus_busy",
            "Busy time of the CPUs the traced servers may run on, by whose work: the servers' processes, or other (programs, interrupts, hstrace)",
            Unit::Seconds,
            m.server_cpus_busy.clone(),
        );
        r.register(
            "probe_info",
            "The hook each probe group uses (hook=\"unavailable\": none worked on this kernel); group=\"bpf_build\": the build of the BPF programs loaded (full or basic), group=\"kernel_lacks\": each BPF feature of the full build the kernel lacks",
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
        r.register(
            "hook_runs_skipped",
            "Runs of hstrace's hooks the kernel skipped and counted, for any process's calls: those of traced connections are events lost (a stage, a request)",
            m.hook_runs_skipped.clone(),
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
            "TLS handshakes whose SNI was counted as \"other\" (over --max-sni, or not yet seen twice in the window)",
            m.sni_folded.clone(),
        );
        r.register(
            "sni_evicted",
            "SNI label values whose series were removed at the end of a --label-window: no handshakes in it, or fewer than --max-sni other names",
            m.sni_evicted.clone(),
        );
        r.register(
            "ja4_folded",
            "TLS connections whose JA4 was counted as \"other\" (over --max-ja4, or not yet seen twice in the window)",
            m.ja4_folded.clone(),
        );
        r.register(
            "ja4_evicted",
            "JA4 label values whose series were removed at the end of a --label-window",
            m.ja4_evicted.clone(),
        );
        r.register(
            "containers_evicted",
            "Containers whose series were removed at the end of a --label-window without a connection (--container-labels)",
            m.containers_evicted.clone(),
        );
        r.register(
            "containers_folded",
            "Connections counted under container_id=\"other\": their container came while --container-labels' 128 containers had series",
            m.containers_folded.clone(),
        );
        m
    }

    /// Series the SNI label has now (for the cardinality test and the bench).
    pub fn sni_values(&self) -> usize {
        self.sni.admitted.len()
    }

    /// The series of `r`'s server (and container), found without formatting a label.
    fn server_series(&mut self, r: &Record) -> usize {
        let container = r.container.as_deref().map(|c| c.id.as_str());
        let found = |s: &ServerSeries, id: Option<&str>| {
            s.labels.port == r.local.port
                && s.labels.process == r.comm
                && s.labels.container.as_ref().map(|c| c.id.as_str()) == id
        };
        if let Some(i) = self.servers.iter().position(|s| found(s, container)) {
            return i;
        }
        let mut labels = ServerLabels {
            process: r.comm.clone(),
            port: r.local.port,
            container: r.container.as_deref().map(ContainerLabels::of),
        };
        if container.is_some() {
            let mut ids: Vec<&str> = self
                .servers
                .iter()
                .filter_map(|s| s.labels.container.as_ref().map(|c| c.id.as_str()))
                .filter(|id| *id != OTHER)
                .collect();
            ids.sort_unstable();
            ids.dedup();
            if ids.len() >= MAX_CONTAINERS {
                self.containers_folded.inc();
                if let Some(i) = self.servers.iter().position(|s| found(s, Some(OTHER))) {
                    return i;
                }
                labels.container = Some(ContainerLabels::other());
            }
        }
        self.servers.push(ServerSeries {
            labels,
            kinds: Default::default(),
            snis: HashMap::new(),
            failures: Vec::new(),
            active: false,
            retries: Default::default(),
            key_exchanges: Vec::new(),
            clients: HashMap::new(),
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
        series.active = true;
        let server = &series.labels;
        let kind = r.kind.name();
        let group = group_label(r.tls_group.as_deref(), r.kind);
        let of_kind = &mut series.kinds[r.kind as usize];
        let of_group = cached(&mut of_kind.groups, group, GroupSeries::default);
        for (stage, ns) in &r.stages_ns.0 {
            of_group.stage[stage.index()]
                .get_or_insert_with(|| {
                    stage_family.get_or_create_owned(&StageLabels {
                        server: server.clone(),
                        stage: stage.name(),
                        stage_class: stage.class().name(),
                        kind,
                        tls_group: group,
                    })
                })
                .observe(*ns as f64 * 1e-9);
        }
        for (stage, ns) in &r.cpu_ns.0 {
            of_group.cpu[stage.index()]
                .get_or_insert_with(|| {
                    cpu_family.get_or_create_owned(&CpuLabels {
                        server: server.clone(),
                        stage: stage.name(),
                        kind,
                        tls_group: group,
                    })
                })
                .inc_by(*ns as f64 * 1e-9);
        }
        let tls_version = r.tls_version.unwrap_or("none");
        let cipher = r.cipher.as_deref().unwrap_or("none");
        let app = r.app_protocol.unwrap_or("none");
        let connections = match of_kind
            .connections
            .iter()
            .find(|(a, v, c, _)| *a == app && *v == tls_version && c == cipher)
        {
            Some((.., counter)) => counter,
            None => {
                let counter = connection_family.get_or_create_owned(&ConnectionLabels {
                    server: server.clone(),
                    kind,
                    network_protocol_name: app,
                    tls_protocol_version: tls_version,
                    tls_cipher: cipher.to_owned(),
                });
                of_kind
                    .connections
                    .push((app, tls_version, cipher.to_owned(), counter));
                &of_kind.connections.last().expect("pushed").3
            }
        };
        connections.inc();
        let server = server.clone();
        if let (Some(reason), Some(stage)) = (r.failure, r.failed_in) {
            cached(
                &mut self.servers[i].failures,
                (reason, stage.name()),
                || {
                    self.failures.get_or_create_owned(&FailureLabels {
                        server: server.clone(),
                        error_type: reason,
                        stage: stage.name(),
                    })
                },
            )
            .inc();
        }
        if let Some(cause) = r.hrr_cause {
            let j = hrr_cause_index(cause);
            self.servers[i].retries[j]
                .get_or_insert_with(|| {
                    self.retries.get_or_create_owned(&RetryLabels {
                        server: server.clone(),
                        cause: HRR_CAUSES[j],
                    })
                })
                .inc();
        }
        if let Some(k) = CLIENT_KINDS.iter().position(|k| *k == r.kind) {
            let ja4 = self.ja4.label(r.ja4.as_deref());
            if ja4 == OTHER {
                self.ja4_folded.inc();
            }
            let clients = &mut self.servers[i].clients;
            if !clients.contains_key(&*ja4) {
                clients.insert(ja4.clone().into_owned(), Default::default());
            }
            clients.get_mut(&*ja4).expect("inserted above")[k]
                .get_or_insert_with(|| {
                    self.clients
                        .get_or_create_owned(&client_labels(&server, &ja4, k))
                })
                .inc();
        }
        let resumed = match r.kind {
            Kind::Full => false,
            Kind::Resumed => true,
            Kind::Plain | Kind::Failed => return,
        };
        if let Some(h) = r.handshake_ns {
            let of_kind = &mut self.servers[i].kinds[r.kind as usize];
            cached(&mut of_kind.handshake, tls_version, || {
                self.handshake.get_or_create_owned(&HandshakeLabels {
                    server: server.clone(),
                    kind,
                    tls_protocol_version: tls_version,
                })
            })
            .observe(h as f64 * 1e-9);
        }
        let offered_pq = pq_offered_label(r);
        let exchange = (kind, group, offered_pq);
        cached(&mut self.servers[i].key_exchanges, exchange, || {
            self.key_exchanges.get_or_create_owned(&KeyExchangeLabels {
                server: server.clone(),
                kind,
                tls_group: group,
                post_quantum_offered: offered_pq,
            })
        })
        .inc();
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
        // a resumed session was offered, even when the ClientHello was not seen
        let offer = r.offered.or(if resumed { r.resumption } else { None });
        let offer = offered_index(offer);
        let by_group = cached(&mut of_sni.handshakes, group, Default::default);
        by_group[usize::from(resumed)][offer]
            .get_or_insert_with(|| {
                self.handshakes
                    .get_or_create_owned(&sni_labels(&server, sni, resumed, offer, group))
            })
            .inc();
    }

    /// The label window ended: re-rank the SNI names and remove the series of those that
    /// lost their place, and of the containers that had no connection in it.
    fn end_window(&mut self) {
        self.end_sni_window();
        self.end_ja4_window();
        let mut i = 0;
        while i < self.servers.len() {
            let s = &mut self.servers[i];
            if s.labels.container.is_some() && !s.active {
                let gone = self.servers.swap_remove(i);
                self.remove_server(&gone);
                self.containers_evicted.inc();
                continue;
            }
            s.active = false;
            i += 1;
        }
    }

    /// Remove every series of `s` from the exposition.
    fn remove_server(&self, s: &ServerSeries) {
        let server = &s.labels;
        for (kind, of_kind) in Kind::ALL.iter().zip(&s.kinds) {
            let kind = kind.name();
            for (tls_group, of_group) in &of_kind.groups {
                for stage in Stage::ALL {
                    if of_group.stage[stage.index()].is_some() {
                        self.stage.remove(&StageLabels {
                            server: server.clone(),
                            stage: stage.name(),
                            stage_class: stage.class().name(),
                            kind,
                            tls_group,
                        });
                    }
                    if of_group.cpu[stage.index()].is_some() {
                        self.stage_cpu.remove(&CpuLabels {
                            server: server.clone(),
                            stage: stage.name(),
                            kind,
                            tls_group,
                        });
                    }
                }
            }
            for (version, _) in &of_kind.handshake {
                self.handshake.remove(&HandshakeLabels {
                    server: server.clone(),
                    kind,
                    tls_protocol_version: version,
                });
            }
            for (app, version, cipher, _) in &of_kind.connections {
                self.connections.remove(&ConnectionLabels {
                    server: server.clone(),
                    kind,
                    network_protocol_name: app,
                    tls_protocol_version: version,
                    tls_cipher: cipher.clone(),
                });
            }
        }
        for ((error_type, stage), _) in &s.failures {
            self.failures.remove(&FailureLabels {
                server: server.clone(),
                error_type,
                stage,
            });
        }
        for (sni, of_sni) in &s.snis {
            self.remove_sni(server, sni, of_sni);
        }
        for (cause, counter) in HRR_CAUSES.iter().zip(&s.retries) {
            if counter.is_some() {
                self.retries.remove(&RetryLabels {
                    server: server.clone(),
                    cause,
                });
            }
        }
        for ((kind, tls_group, post_quantum_offered), _) in &s.key_exchanges {
            self.key_exchanges.remove(&KeyExchangeLabels {
                server: server.clone(),
                kind,
                tls_group,
                post_quantum_offered,
            });
        }
        for (ja4, of_ja4) in &s.clients {
            self.remove_client(server, ja4, of_ja4);
        }
    }

    fn remove_client(
        &self,
        server: &ServerLabels,
        ja4: &str,
        of_ja4: &[Option<Counter>; CLIENT_KINDS.len()],
    ) {
        for (k, counter) in of_ja4.iter().enumerate() {
            if counter.is_some() {
                self.clients.remove(&client_labels(server, ja4, k));
            }
        }
    }

    fn remove_sni(&self, server: &ServerLabels, sni: &str, of_sni: &SniSeries) {
        for (group, by_group) in &of_sni.handshakes {
            for (resumed, offers) in by_group.iter().enumerate() {
                for (offer, counter) in offers.iter().enumerate() {
                    if counter.is_some() {
                        self.handshakes.remove(&sni_labels(
                            server,
                            sni,
                            resumed == 1,
                            offer,
                            group,
                        ));
                    }
                }
            }
        }
    }

    /// Re-rank the SNI names, and remove the series of those that lost their place.
    fn end_sni_window(&mut self) {
        let evicted = self.sni.rotate();
        for name in &evicted {
            for i in 0..self.servers.len() {
                if let Some(of_sni) = self.servers[i].snis.remove(name.as_str()) {
                    self.remove_sni(&self.servers[i].labels, name, &of_sni);
                }
            }
        }
        self.sni_evicted.inc_by(evicted.len() as u64);
    }

    /// Re-rank the JA4 fingerprints, and remove the series of those that lost their place.
    fn end_ja4_window(&mut self) {
        let evicted = self.ja4.rotate();
        for name in &evicted {
            for i in 0..self.servers.len() {
                if let Some(of_ja4) = self.servers[i].clients.remove(name.as_str()) {
                    self.remove_client(&self.servers[i].labels, name, &of_ja4);
                }
            }
        }
        self.ja4_evicted.inc_by(evicted.len() as u64);
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
        self.hook_runs_skipped
            .inc_by(h.hook_runs_skipped.saturating_sub(last.hook_runs_skipped));
        self.in_progress.set(h.in_progress as i64);
        self.open.set(h.open as i64);
        self.traced.set(h.traced_processes as i64);
        if h.traced_processes == 0 {
            self.server_cpus.set(0);
        }
        for p in &h.probes {
            self.probes
                .get_or_create(&ProbeLabels {
                    group: p.group,
                    hook: p.hook.clone().unwrap_or_else(|| "unavailable".into()),
                })
                .set(1);
        }
        // the build of the programs, and each feature of the default build the kernel lacks
        let kernel = std::iter::once(("bpf_build", h.bpf_build))
            .chain(h.kernel_lacks.iter().map(|f| ("kernel_lacks", *f)));
        for (group, hook) in kernel {
            self.probes
                .get_or_create(&ProbeLabels {
                    group,
                    hook: hook.into(),
                })
                .set(1);
        }
        self.last = h.clone();
    }
}

/// The value kept under `key` in one of a server's short lists of series, looked up by
/// label values (a linear scan: a server has few of each); made by `make` on first use.
fn cached<K: PartialEq, V>(list: &mut Vec<(K, V)>, key: K, make: impl FnOnce() -> V) -> &mut V {
    let j = match list.iter().position(|(k, _)| *k == key) {
        Some(j) => j,
        None => {
            list.push((key, make()));
            list.len() - 1
        }
    };
    &mut list[j].1
}

fn sni_labels(
    server: &ServerLabels,
    sni: &str,
    resumed: bool,
    offer: usize,
    tls_group: &'static str,
) -> HandshakeSniLabels {
    HandshakeSniLabels {
        server: server.clone(),
        tls_client_server_name: sni.to_owned(),
        kind: if resumed { "resumed" } else { "full" },
        tls_resumption_offered: OFFERED[offer],
        tls_group,
    }
}

fn client_labels(server: &ServerLabels, ja4: &str, kind: usize) -> ClientLabels {
    ClientLabels {
        server: server.clone(),
        tls_client_ja4: ja4.to_owned(),
        kind: CLIENT_KINDS[kind].name(),
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

    fn host_cpu(&mut self, h: &HostCpu) {
        self.server_cpus.set(i64::from(h.cpus));
        let secs = |ns: u64| ns as f64 / 1e9;
        for (work, ns) in [
            ("servers", h.traced_ns),
            ("other", h.busy_ns.saturating_sub(h.traced_ns)),
        ] {
            self.server_cpus_busy
                .get_or_create(&WorkLabels { work })
                .inc_by(secs(ns));
        }
    }

    fn tick(&mut self, health: &Health) -> std::io::Result<()> {
        self.health(health);
        let now = Instant::now();
        if now >= self.window_end {
            self.end_window();
            self.window_end = now + self.label_window;
        }
        Ok(())
    }
}

/// The series one server's connections of one kind update, looked up by label set once
/// and kept: hashing label sets per record was a fifth of serve's pipeline time.
#[derive(Default)]
struct KindSeries {
    /// by `tls_group` label value (the groups the server negotiates, `none`, `unknown`)
    groups: Vec<(&'static str, GroupSeries)>,
    /// by TLS version
    handshake: Vec<(&'static str, Histogram)>,
    /// by network protocol, TLS version and cipher
    connections: Vec<(&'static str, &'static str, String, Counter)>,
}

/// The stage series of one kind and key-exchange group.
#[derive(Default)]
struct GroupSeries {
    stage: [Option<Histogram>; Stage::ALL.len()],
    cpu: [Option<Counter<f64>>; Stage::ALL.len()],
}

/// A server's series (bounded by the listeners selected, not by the wire; with
/// `--container-labels`, one per container of each, at most `MAX_CONTAINERS` + 1).
struct ServerSeries {
    labels: ServerLabels,
    /// a connection came in this label window
    active: bool,
    /// by error type and stage
    failures: Vec<((&'static str, &'static str), Counter)>,
    /// by `Kind` (declaration order)
    kinds: [KindSeries; Kind::ALL.len()],
    /// by SNI label value (at most `max_sni` + 2 of them)
    snis: HashMap<String, SniSeries>,
    /// HelloRetryRequests by `HRR_CAUSES`
    retries: [Option<Counter>; HRR_CAUSES.len()],
    /// completed handshakes by kind, group and `post_quantum_offered`
    key_exchanges: Vec<((&'static str, &'static str, &'static str), Counter)>,
    /// by JA4 label value (at most `max_ja4` + 2 of them), then by `CLIENT_KINDS`
    clients: HashMap<String, [Option<Counter>; CLIENT_KINDS.len()]>,
}

/// One server's series of one SNI label value, looked up once: by `tls_group` label
/// value, then full/resumed, then what was offered (`OFFERED`'s order).
#[derive(Default)]
struct SniSeries {
    handshakes: Vec<(&'static str, [[Option<Counter>; OFFERED.len()]; 2])>,
}

/// The kinds of connection counted by their client's fingerprint: those that spoke TLS.
pub(crate) const CLIENT_KINDS: [Kind; 3] = [Kind::Full, Kind::Resumed, Kind::Failed];

/// The SNI label value of handshakes whose SNI has no series of its own.
pub(crate) const OTHER: &str = "other";
/// ... and of those that sent none.
const NONE: &str = "none";
/// An SNI gets its own series once it has surely been seen this often in a window: a
/// client sending random names, each once, never gets one.
const ADMIT_AFTER: u64 = 2;

/// Bounded label values from traffic (SNI names, JA4 fingerprints), kept by recent
/// traffic. At most `max` names have series
/// (`admitted`, with their handshakes this window); a name is admitted while there is room
/// once it has surely been seen `ADMIT_AFTER` times. The other names are counted in a
/// space-saving sketch of the most frequent (8 × `max` entries: a name's count is
/// over-estimated by at most its `err`, so `count - err` is a sure lower bound). At the end
/// of each window the admitted names and the sketch's sure candidates are ranked by their
/// handshakes in it (an admitted name wins a tie) and the top `max` kept: a scanner's
/// random names, admitted while there was room, give way to the real names one window
/// after the flood stops.
pub(crate) struct TopLabels {
    admitted: HashMap<String, u64>,
    max: usize,
    sketch: HashMap<String, (u64, u64)>,
    sketch_cap: usize,
}

impl TopLabels {
    pub(crate) fn new(max: usize) -> TopLabels {
        TopLabels {
            admitted: HashMap::new(),
            max,
            sketch: HashMap::new(),
            sketch_cap: (8 * max).max(64),
        }
    }

    /// The label value of `sni`, lower-cased (DNS names are case-insensitive).
    pub(crate) fn label<'a>(&mut self, sni: Option<&'a str>) -> Cow<'a, str> {
        let Some(sni) = sni else {
            return Cow::Borrowed(NONE);
        };
        let sni = if sni.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(sni.to_ascii_lowercase())
        } else {
            Cow::Borrowed(sni)
        };
        if let Some(n) = self.admitted.get_mut(&*sni) {
            *n += 1;
            return sni;
        }
        let sure = self.sketch_add(&sni);
        if sure >= ADMIT_AFTER && self.admitted.len() < self.max {
            self.sketch.remove(&*sni);
            self.admitted.insert(sni.clone().into_owned(), sure);
            return sni;
        }
        Cow::Borrowed(OTHER)
    }

    /// Count `sni` in the sketch; its sure count.
    fn sketch_add(&mut self, sni: &str) -> u64 {
        if let Some(e) = self.sketch.get_mut(sni) {
            e.0 += 1;
            return e.0 - e.1;
        }
        // full: the least frequent name makes room, and its count is the new one's error
        let mut floor = 0;
        if self.sketch.len() >= self.sketch_cap {
            if let Some((name, count)) = self
                .sketch
                .iter()
                .min_by_key(|(_, (c, _))| *c)
                .map(|(k, v)| (k.clone(), v.0))
            {
                self.sketch.remove(&name);
                floor = count;
            }
        }
        self.sketch.insert(sni.to_owned(), (floor + 1, floor));
        1
    }

    /// The window ended: keep the `max` names with the most handshakes in it (sure counts;
    /// an admitted name wins a tie, a name with none is dropped) and start the next window
    /// from zero. Returns the names that lost their series.
    pub(crate) fn rotate(&mut self) -> Vec<String> {
        let mut ranked: Vec<(u64, bool, String)> = self
            .admitted
            .drain()
            .map(|(name, n)| (n, true, name))
            .chain(
                self.sketch
                    .drain()
                    .map(|(name, (c, err))| (c - err, false, name))
                    .filter(|(sure, ..)| *sure >= ADMIT_AFTER),
            )
            .collect();
        ranked.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(&b.2)));
        let mut evicted = Vec::new();
        for (rank, (n, was_admitted, name)) in ranked.into_iter().enumerate() {
            if rank < self.max && n > 0 {
                self.admitted.insert(name, 0);
            } else if was_admitted {
                evicted.push(name);
            }
        }
        evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        record::{app_protocol_name, failure_name},
        stage::Stages,
    };

    fn exposition(reg: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, reg).unwrap();
        text
    }

    /// Sample lines of the families labelled by server.
    fn server_series(text: &str) -> usize {
        text.lines()
            .filter(|l| !l.starts_with('#') && l.contains("process_executable_name="))
            .count()
    }

    #[test]
    fn random_snis_never_get_a_series() {
        let mut s = TopLabels::new(50);
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
        let mut s = TopLabels::new(50);
        assert_eq!(s.label(Some("Shop.Example")), OTHER);
        // the second sighting, spelled otherwise, is the same name
        assert_eq!(s.label(Some("shop.EXAMPLE")), "shop.example");
        assert_eq!(s.label(Some("SHOP.example")), "shop.example");
        assert_eq!(s.admitted.len(), 1);
    }

    #[test]
    fn sni_values_are_capped() {
        let mut s = TopLabels::new(3);
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
    fn real_names_come_back_one_window_after_a_flood() {
        let mut s = TopLabels::new(5);
        // a scanner's names, each three times: the first five take every place
        for _ in 0..3 {
            for i in 0..10 {
                s.label(Some(&format!("scan{i}.example")));
            }
        }
        assert_eq!(s.admitted.len(), 5);
        assert!(s.rotate().is_empty(), "the flood was this window's traffic");
        // the next window: real traffic only, folded while the places are taken
        for _ in 0..3 {
            for name in ["shop.example", "api.example"] {
                assert_eq!(s.label(Some(name)), OTHER);
            }
        }
        let mut evicted = s.rotate();
        evicted.sort();
        assert_eq!(evicted.len(), 5, "{evicted:?}");
        assert!(evicted.iter().all(|n| n.starts_with("scan")));
        assert_eq!(s.label(Some("shop.example")), "shop.example");
        assert_eq!(s.label(Some("api.example")), "api.example");
        // names seen once in the window are not candidates
        assert_eq!(s.admitted.len(), 2);
    }

    #[test]
    fn the_busiest_names_keep_their_places() {
        let mut s = TopLabels::new(2);
        for (name, n) in [("a", 5), ("b", 2), ("c", 9)] {
            for _ in 0..n {
                s.label(Some(name));
            }
        }
        // a and b were admitted; c, folded, was busier than b
        assert_eq!(s.rotate(), vec!["b".to_owned()]);
        assert!(s.admitted.contains_key("a") && s.admitted.contains_key("c"));
        // a tie: the admitted name stays
        for name in ["a", "c", "d", "d"] {
            s.label(Some(name));
        }
        s.label(Some("a"));
        s.label(Some("c"));
        assert!(s.rotate().is_empty());
        assert!(s.admitted.contains_key("a") && s.admitted.contains_key("c"));
        // a quiet window frees every place
        let mut gone = s.rotate();
        gone.sort();
        assert_eq!(gone, ["a", "c"]);
        assert!(s.admitted.is_empty() && s.sketch.is_empty());
    }

    #[test]
    fn evicted_names_lose_their_series() {
        let mut reg = Registry::with_prefix("hstrace");
        let mut m = Metrics::new(&mut reg, 1, 50, Duration::from_secs(600));
        let with_sni = |name: &str| Record {
            sni: Some(name.into()),
            ..Record::fixture(Kind::Full)
        };
        for _ in 0..2 {
            m.count(&with_sni("old.example"));
        }
        assert!(exposition(&reg).contains("tls_client_server_name=\"old.example\""));
        m.end_window();
        for _ in 0..3 {
            m.count(&with_sni("new.example"));
        }
        m.end_window();
        m.count(&with_sni("new.example"));
        let text = exposition(&reg);
        assert!(!text.contains("old.example"), "{text}");
        assert!(
            text.contains("tls_client_server_name=\"new.example\""),
            "{text}"
        );
        assert!(text.contains("hstrace_sni_evicted_total 1"), "{text}");
    }

    #[test]
    fn one_way_to_say_resumed() {
        let mut reg = Registry::with_prefix("hstrace");
        let mut m = Metrics::new(&mut reg, 50, 50, Duration::from_secs(600));
        m.count(&Record {
            offered: Some(Resumption::Ticket),
            resumption_offered: true,
            ..Record::fixture(Kind::Full)
        });
        m.count(&Record {
            offered: Some(Resumption::Ticket),
            resumption_offered: true,
            resumption: Some(Resumption::Ticket),
            ..Record::fixture(Kind::Resumed)
        });
        // resumed with the ClientHello unseen: still counted as offered (the ratio ≤ 1)
        m.count(&Record {
            resumption: Some(Resumption::Psk),
            ..Record::fixture(Kind::Resumed)
        });
        m.count(&Record::fixture(Kind::Full));
        let text = exposition(&reg);
        let line = |kind: &str, offered: &str| {
            format!("hstrace_tls_handshakes_total{{process_executable_name=\"nginx\",server_port=\"443\",tls_client_server_name=\"none\",kind=\"{kind}\",tls_resumption_offered=\"{offered}\",tls_group=\"unknown\"}} 1")
        };
        for (kind, offered) in [
            ("full", "ticket"),
            ("resumed", "ticket"),
            ("resumed", "psk"),
            ("full", "none"),
        ] {
            assert!(
                text.contains(&line(kind, offered)),
                "{kind} {offered}:\n{text}"
            );
        }
        for gone in [
            "resumption_offered_total",
            "resumption_accepted",
            "resumed=",
            "server=\"",
        ] {
            assert!(!text.contains(gone), "{gone}:\n{text}");
        }
    }

    #[test]
    fn key_exchange_series() {
        let mut reg = Registry::with_prefix("hstrace");
        let mut m = Metrics::new(&mut reg, 50, 50, Duration::from_secs(600));
        let exchange = |group: &str, pq: Option<bool>, cause: Option<&'static str>| Record {
            tls_group: Some(Cow::Owned(group.to_owned())),
            pq_offered: pq,
            hrr_cause: cause,
            ..Record::fixture(Kind::Full)
        };
        m.count(&exchange("X25519MLKEM768", Some(true), None));
        m.count(&exchange("x25519", Some(true), Some("no_acceptable_share")));
        m.count(&exchange("x25519", Some(false), None));
        // a code point without a name is "other", whatever it is
        m.count(&exchange("0x11EE", Some(false), None));
        m.count(&exchange("0x2A2A", Some(false), None));
        let text = exposition(&reg);
        let server = "process_executable_name=\"nginx\",server_port=\"443\"";
        for line in [
            format!("hstrace_tls_key_exchanges_total{{{server},kind=\"full\",tls_group=\"X25519MLKEM768\",post_quantum_offered=\"true\"}} 1"),
            format!("hstrace_tls_key_exchanges_total{{{server},kind=\"full\",tls_group=\"x25519\",post_quantum_offered=\"true\"}} 1"),
            format!("hstrace_tls_key_exchanges_total{{{server},kind=\"full\",tls_group=\"x25519\",post_quantum_offered=\"false\"}} 1"),
            format!("hstrace_tls_key_exchanges_total{{{server},kind=\"full\",tls_group=\"other\",post_quantum_offered=\"false\"}} 2"),
            format!("hstrace_tls_hello_retries_total{{{server},cause=\"no_acceptable_share\"}} 1"),
            format!("hstrace_stage_duration_seconds_count{{{server},stage=\"server_flight_1\",stage_class=\"service\",kind=\"full\",tls_group=\"X25519MLKEM768\"}} 1"),
            format!("hstrace_stage_cpu_seconds_total{{{server},stage=\"server_flight_1\",kind=\"full\",tls_group=\"x25519\"}} 0.000001"),
        ] {
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
        assert!(!text.contains("0x"), "{text}");
    }

    #[test]
    fn a_ja4_flood_stays_bounded() {
        let mut reg = Registry::with_prefix("hstrace");
        let max_ja4 = 50;
        let mut m = Metrics::new(&mut reg, 50, max_ja4, Duration::from_secs(600));
        let client = |ja4: String| Record {
            ja4: Some(ja4),
            ..Record::fixture(Kind::Full)
        };
        let real = "t13d1516h2_8daaf6152771_02713d6af862".to_owned();
        for _ in 0..3 {
            m.count(&client(real.clone()));
        }
        // 5,000 distinct fingerprints, twice each: they fill the free places, no more
        for i in 0..5_000 {
            for _ in 0..2 {
                m.count(&client(format!("t13d1516h2_{i:012x}_000000000000")));
            }
        }
        let series = |reg: &Registry| {
            exposition(reg)
                .lines()
                .filter(|l| l.starts_with("hstrace_tls_clients_total{"))
                .count()
        };
        assert_eq!(series(&reg), max_ja4 + 1, "the places and other");
        assert!(m.ja4.sketch.len() <= m.ja4.sketch_cap);
        // the flood stops; the real client goes on, and one window later it alone is left
        m.end_window();
        for _ in 0..3 {
            m.count(&client(real.clone()));
        }
        m.end_window();
        let text = exposition(&reg);
        assert_eq!(series(&reg), 2, "the real client and other:\n{text}");
        assert!(text.contains(&real), "{text}");
        assert_eq!(m.ja4_evicted.get(), max_ja4 as u64 - 1);
    }

    fn in_container(id: usize, pod: bool) -> Record {
        let pod = pod.then(|| crate::container::Pod {
            name: format!("web-{id}"),
            namespace: "shop".into(),
            uid: format!("uid-{id}"),
        });
        Record {
            container: Some(std::sync::Arc::new(Container {
                id: format!("{id:064x}"),
                pod,
            })),
            ..Record::fixture(Kind::Plain)
        }
    }

    #[test]
    fn container_labels_are_bounded_and_freed() {
        let mut reg = Registry::with_prefix("hstrace");
        let mut m = Metrics::new(&mut reg, 50, 50, Duration::from_secs(600));
        m.count(&Record::fixture(Kind::Plain));
        m.count(&in_container(1, true));
        m.count(&in_container(2, false));
        let text = exposition(&reg);
        let first = format!(
            "container_id=\"{:064x}\",k8s_namespace_name=\"shop\",k8s_pod_name=\"web-1\"",
            1
        );
        assert!(text.contains(&first), "{text}");
        // outside Kubernetes: the id alone; outside a container: no container label at all
        assert!(
            text.contains(&format!("container_id=\"{:064x}\",kind=", 2)),
            "{text}"
        );
        assert!(
            text.contains("server_port=\"443\",kind=\"plain\",network_protocol_name"),
            "{text}"
        );
        for id in 3..MAX_CONTAINERS + 10 {
            m.count(&in_container(id, false));
        }
        let text = exposition(&reg);
        let ids: std::collections::HashSet<&str> = text
            .match_indices("container_id=\"")
            .map(|(at, _)| &text[at + 14..at + 14 + text[at + 14..].find('"').unwrap()])
            .collect();
        assert_eq!(ids.len(), MAX_CONTAINERS + 1, "{} ids", ids.len());
        assert!(ids.contains(OTHER));
        assert!(text.contains(",container_id=\"other\""));
        assert!(text.contains("hstrace_containers_folded_total 9"), "{text}");
        // a window in which only container 1 and the host's server had connections: every
        // other container's series go, and the freed places are taken again
        m.end_window();
        m.count(&in_container(1, true));
        m.count(&Record::fixture(Kind::Plain));
        m.end_window();
        let text = exposition(&reg);
        assert!(text.contains(&first), "{text}");
        assert!(!text.contains(&format!("{:064x}", 2)), "{text}");
        assert!(!text.contains(",container_id=\"other\""), "{text}");
        assert!(
            text.contains("server_port=\"443\",kind=\"plain\""),
            "{text}"
        );
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("hstrace_containers_evicted_total"))
                .collect::<Vec<_>>(),
            [format!(
                "hstrace_containers_evicted_total {}",
                MAX_CONTAINERS
            )]
        );
        m.count(&in_container(500, false));
        assert!(exposition(&reg).contains(&format!("{:064x}", 500)));
    }

    #[test]
    fn label_bounds_match_the_record() {
        let protocols: std::collections::HashSet<_> =
            (0..=u8::MAX).filter_map(app_protocol_name).collect();
        assert_eq!(protocols.len(), NETWORK_PROTOCOLS);
        let errors: std::collections::HashSet<_> = (0..=u8::MAX).map(failure_name).collect();
        assert_eq!(errors.len(), ERROR_TYPES);
    }

    /// Every label value a server's records can give, counted in: the exposition stays
    /// within `series_budget`, and the documented figure is that budget.
    #[test]
    fn series_stay_within_the_budget() {
        let max_sni = 50;
        let mut reg = Registry::with_prefix("hstrace");
        let max_ja4 = 50;
        let mut m = Metrics::new(&mut reg, max_sni, max_ja4, Duration::from_secs(600));
        let versions = ["1.2", "1.3"];
        let groups = ["x25519", "X25519MLKEM768"];
        // a TLS connection's group values: the server's groups, none, and unknown
        let group_values = || {
            groups
                .iter()
                .map(|g| Some(Cow::Borrowed(*g)))
                .chain([Some(Cow::Borrowed("none")), None])
        };
        let ciphers = [
            "TLS_AES_128_GCM_SHA256",
            "TLS_AES_256_GCM_SHA384",
            "ECDHE-RSA-AES128-GCM-SHA256",
        ];
        let offers = [
            None,
            Some(Resumption::SessionId),
            Some(Resumption::Ticket),
            Some(Resumption::Psk),
        ];
        let snis = (0..max_sni + 20).map(|i| Some(format!("site{i}.example")));
        for sni in snis.chain([None]) {
            for _ in 0..2 {
                for kind in [Kind::Full, Kind::Resumed] {
                    for offered in offers {
                        if kind == Kind::Resumed && offered.is_none() {
                            continue; // a resumed session was offered
                        }
                        for tls_group in group_values() {
                            m.count(&Record {
                                sni: sni.clone(),
                                offered,
                                resumption: offered,
                                tls_group,
                                ..Record::fixture(kind)
                            });
                        }
                    }
                }
            }
        }
        for kind in Kind::ALL {
            for version in versions.iter().map(|v| Some(*v)).chain([None]) {
                for cipher in ciphers
                    .iter()
                    .map(|c| Some(Cow::Borrowed(*c)))
                    .chain([None])
                {
                    for app in (0..=u8::MAX)
                        .filter_map(app_protocol_name)
                        .map(Some)
                        .chain([None])
                    {
                        m.count(&Record {
                            tls_version: version,
                            cipher: cipher.clone(),
                            app_protocol: app,
                            resumption: (kind == Kind::Resumed).then_some(Resumption::Ticket),
                            ..Record::fixture(kind)
                        });
                    }
                }
            }
        }
        for f in 0..=u8::MAX {
            for stage in Stage::ALL {
                m.count(&Record {
                    failure: Some(failure_name(f)),
                    failed_in: Some(stage),
                    ..Record::fixture(Kind::Failed)
                });
            }
        }
        // every TLS kind's stages in every group; key exchanges, retries and fingerprints
        for kind in CLIENT_KINDS {
            for tls_group in group_values() {
                for pq_offered in [Some(true), Some(false), None] {
                    m.count(&Record {
                        tls_group: tls_group.clone(),
                        pq_offered,
                        resumption: (kind == Kind::Resumed).then_some(Resumption::Ticket),
                        ..Record::fixture(kind)
                    });
                }
            }
            for ja4 in 0..max_ja4 + 20 {
                for _ in 0..2 {
                    m.count(&Record {
                        ja4: Some(format!("t13d1516h2_{ja4:012x}_{ja4:012x}")),
                        resumption: (kind == Kind::Resumed).then_some(Resumption::Ticket),
                        ..Record::fixture(kind)
                    });
                }
            }
        }
        for cause in HRR_CAUSES {
            m.count(&Record {
                hrr_cause: Some(cause),
                ..Record::fixture(Kind::Full)
            });
        }
        let n = server_series(&exposition(&reg));
        let budget = series_budget(
            versions.len(),
            ciphers.len(),
            groups.len(),
            max_sni,
            max_ja4,
        );
        assert!(n <= budget, "{n} series over the budget {budget}");
        // the fixture reaches every bound
        assert_eq!(n, budget, "the budget {budget} is loose");
        assert_eq!(
            budget, 7_863,
            "docs/metrics.md states this figure: update it too"
        );
    }

    #[test]
    fn exposition_names_follow_the_conventions() {
        let mut reg = Registry::with_prefix("hstrace");
        let mut m = Metrics::new(&mut reg, 50, 50, Duration::from_secs(600));
        m.health(&Health::default());
        m.count(&Record {
            failure: Some("alert"),
            failed_in: Some(Stage::ServerFlight1),
            stages_ns: Stages(vec![(Stage::Response, 20_000)]),
            cpu_ns: Stages(vec![(Stage::Response, 10_000)]),
            ..Record::fixture(Kind::Plain)
        });
        m.count(&Record {
            stages_ns: Stages(Vec::new()),
            cpu_ns: Stages(Vec::new()),
            ..Record::fixture(Kind::Full)
        });
        let text = exposition(&reg);
        let server = "process_executable_name=\"nginx\",server_port=\"443\"";
        for name in [
            "# TYPE hstrace_stage_duration_seconds histogram",
            "# TYPE hstrace_handshake_duration_seconds histogram",
            "# TYPE hstrace_stage_cpu_seconds counter",
            &format!("hstrace_stage_cpu_seconds_total{{{server},stage=\"response\",kind=\"plain\",tls_group=\"none\"}} 0.00001"),
            &format!("hstrace_stage_duration_seconds_bucket{{le=\"0.00002\",{server},stage=\"response\",stage_class=\"service\",kind=\"plain\",tls_group=\"none\"}} 1"),
            &format!("hstrace_handshake_duration_seconds_count{{{server},kind=\"full\",tls_protocol_version=\"1.3\"}} 1"),
            &format!("hstrace_connections_total{{{server},kind=\"plain\",network_protocol_name=\"none\",tls_protocol_version=\"1.3\",tls_cipher=\"TLS_AES_128_GCM_SHA256\"}} 1"),
            &format!("hstrace_failures_total{{{server},error_type=\"alert\",stage=\"server_flight_1\"}} 1"),
            "# TYPE hstrace_tls_handshakes counter",
            "hstrace_lost_total{cause=\"ring_buffer_full\"} 0",
            "hstrace_connections_tracked_total 0",
            "hstrace_accept_queue_unmeasured_total 0",
            "hstrace_hook_runs_skipped_total 0",
            "hstrace_sni_evicted_total 0",
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
