//! `serve --otlp-endpoint`: the daemon's measurements pushed as OTLP metrics to an
//! OpenTelemetry Collector, beside the Prometheus endpoint, through the OpenTelemetry
//! crates (SDK aggregation, OTLP/HTTP protobuf by default, gRPC as an option).
//!
//! The record path only gathers each record into a batch and hands batches over a
//! bounded channel (`try_send`: never a wait); a full channel drops the batch and counts
//! its records. Two threads of its own do the rest: one records into the SDK's
//! instruments, with the same label bounds as metrics.rs (SNI top-K with `other`, at most
//! `MAX_CONTAINERS` containers); the SDK's periodic reader collects and exports every
//! interval, one attempt at a time: a collector that is down or slow costs one failed
//! export per interval, counted, and nothing queues up.
//! Cumulative temporality: the next export that gets through carries everything.
//!
//! Attribute names follow OpenTelemetry's semantic conventions (`tls.protocol.version`,
//! `tls.cipher`, `tls.resumed`, `server.address`, `server.port`,
//! `process.executable.name`, `network.protocol.name`, `error.type`, `container.id`,
//! `k8s.*`); hstrace's own sit under `hstrace.`. docs/metrics.md has the table.

use std::{
    borrow::Cow,
    collections::HashMap,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Receiver, SyncSender},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use opentelemetry::{
    metrics::{Counter, Gauge, Histogram, Meter, MeterProvider as _},
    KeyValue,
};
#[cfg(feature = "otlp-grpc")]
use opentelemetry_otlp::WithTonicConfig;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{
    error::OTelSdkResult,
    metrics::{
        data::ResourceMetrics, exporter::PushMetricExporter, Aggregation, InstrumentKind,
        PeriodicReader, SdkMeterProvider, Stream, Temporality,
    },
    Resource,
};
use prometheus_client::metrics::counter::Counter as PromCounter;

use crate::{
    container::Container,
    health::Health,
    metrics::{offered_index, SniLabels, DURATION_BUCKETS_S, MAX_CONTAINERS, OFFERED, OTHER},
    record::Record,
    stage::{Kind, Resumption, Stage},
};

/// Records handed over together: one wake-up of the recorder per batch, not per record
/// (waking it for each record doubled the record path's cost in the bench). A batch goes
/// when full, and at each tick (once a second).
pub const BATCH_RECORDS: usize = 256;

/// Batches waiting for the OTLP recorder at most (16,384 records, about 150 bytes each);
/// past that a batch is dropped and its records counted
/// (`hstrace_otlp_records_dropped_total`).
pub const CHANNEL_BATCHES: usize = 64;

/// Attribute sets one instrument keeps at most (the SDK folds the rest into one
/// `otel.metric.overflow` point): the memory bound of the OTLP side's aggregation.
pub const CARDINALITY_LIMIT: usize = 20_000;

/// The wire protocol to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    HttpProtobuf,
    Grpc,
}

impl Protocol {
    /// An `OTEL_EXPORTER_OTLP_PROTOCOL` value.
    pub fn parse(s: &str) -> Result<Protocol> {
        match s {
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "grpc" => Ok(Protocol::Grpc),
            "http/json" => bail!(
                "OTLP protocol http/json is not supported: use http/protobuf (the default) or grpc"
            ),
            other => {
                bail!("unknown OTLP protocol {other:?}: use http/protobuf (the default) or grpc")
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::Grpc => "grpc",
        }
    }
}

/// How the duration histograms aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum HistogramKind {
    /// explicit bucket boundaries, the same as the Prometheus buckets
    Explicit,
    /// base-2 exponential (160 buckets, the SDK's default scale)
    Exponential,
}

/// `serve`'s OTLP settings, resolved from the flags and the standard environment.
#[derive(Debug, Clone)]
pub struct OtlpOptions {
    /// None: the crate takes `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`
    pub endpoint: Option<String>,
    pub protocol: Protocol,
    pub interval: Duration,
    pub timeout: Duration,
    pub histograms: HistogramKind,
    pub ca_file: Option<PathBuf>,
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
}

/// Read an environment variable; an empty one counts as unset.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A duration in milliseconds from the first of `names` that is set (the OTel spec's unit).
fn env_ms(names: &[&str]) -> Result<Option<Duration>> {
    for name in names {
        if let Some(v) = env(name) {
            let ms: u64 = v
                .parse()
                .with_context(|| format!("{name}={v:?} is not a whole number of milliseconds"))?;
            return Ok(Some(Duration::from_millis(ms)));
        }
    }
    Ok(None)
}

impl OtlpOptions {
    /// The settings from `serve`'s flags, the standard `OTEL_*` variables filling what
    /// the flags leave out. None: OTLP is off (no endpoint given anywhere).
    #[allow(clippy::too_many_arguments)]
    pub fn resolve(
        endpoint: Option<String>,
        protocol: Option<String>,
        interval: Option<f64>,
        histograms: HistogramKind,
        ca_file: Option<PathBuf>,
        client_cert: Option<PathBuf>,
        client_key: Option<PathBuf>,
    ) -> Result<Option<OtlpOptions>> {
        let from_env = env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .is_some();
        if endpoint.is_none() && !from_env {
            return Ok(None);
        }
        let protocol = match protocol
            .or_else(|| env("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"))
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            Some(p) => Protocol::parse(&p)?,
            None => Protocol::HttpProtobuf,
        };
        let interval = match interval {
            Some(s) if s.is_finite() && s >= 0.1 => Duration::from_secs_f64(s),
            Some(s) => bail!("--otlp-interval {s} is too short: give at least 0.1 seconds"),
            None => env_ms(&["OTEL_METRIC_EXPORT_INTERVAL"])?.unwrap_or(Duration::from_secs(60)),
        };
        let timeout = env_ms(&[
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ])?
        .unwrap_or(Duration::from_secs(10));
        if client_cert.is_some() != client_key.is_some() {
            bail!("--otlp-client-cert and --otlp-client-key go together: give both, or neither");
        }
        // the flag is a base URL, like OTEL_EXPORTER_OTLP_ENDPOINT: HTTP adds the signal's path
        let endpoint = endpoint.map(|e| match protocol {
            Protocol::HttpProtobuf => {
                let trimmed = e.trim_end_matches('/');
                let has_path = trimmed
                    .split_once("://")
                    .is_some_and(|(_, rest)| rest.contains('/'));
                if has_path {
                    e
                } else {
                    format!("{trimmed}/v1/metrics")
                }
            }
            Protocol::Grpc => e,
        });
        Ok(Some(OtlpOptions {
            endpoint,
            protocol,
            interval,
            timeout,
            histograms,
            ca_file,
            client_cert,
            client_key,
        }))
    }

    /// Where the metrics go, for the start line.
    pub fn describe(&self) -> String {
        let to = self.endpoint.clone().unwrap_or_else(|| {
            env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
                .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
                .unwrap_or_default()
        });
        format!(
            "{to} ({}, every {:?}, {} histograms)",
            self.protocol.name(),
            self.interval,
            match self.histograms {
                HistogramKind::Explicit => "explicit-bucket",
                HistogramKind::Exponential => "exponential",
            }
        )
    }
}

/// The OTLP side's own counters, also in the Prometheus registry and /healthz.
#[derive(Debug, Default, Clone)]
pub struct OtlpStats {
    pub exports: PromCounter,
    pub export_failures: PromCounter,
    pub records_dropped: PromCounter,
    failing: Arc<AtomicBool>,
    last_error: Arc<Mutex<Option<String>>>,
}

impl OtlpStats {
    /// `/healthz`'s `otlp` object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "exports": self.exports.get(),
            "export_failures": self.export_failures.get(),
            "records_dropped": self.records_dropped.get(),
            "failing": self.failing.load(Ordering::Relaxed),
            "last_error": *self.last_error.lock().expect("otlp error lock"),
        })
    }
}

/// A record as the OTLP recorder needs it: what its labels and values are made of.
struct Conn {
    comm: String,
    port: u16,
    container: Option<Arc<Container>>,
    kind: Kind,
    tls_version: Option<&'static str>,
    cipher: Option<Cow<'static, str>>,
    app: Option<&'static str>,
    sni: Option<String>,
    offered: Option<Resumption>,
    resumption: Option<Resumption>,
    handshake_ns: Option<u64>,
    stages_ns: Vec<(Stage, u64)>,
    cpu_ns: Vec<(Stage, u64)>,
    failure: Option<(&'static str, Stage)>,
}

impl Conn {
    fn of(r: &Record) -> Conn {
        Conn {
            comm: r.comm.clone(),
            port: r.local.port,
            container: r.container.clone(),
            kind: r.kind,
            tls_version: r.tls_version,
            cipher: r.cipher.clone(),
            app: r.app_protocol,
            sni: r.sni.clone(),
            offered: r.offered,
            resumption: r.resumption,
            handshake_ns: r.handshake_ns,
            stages_ns: r.stages_ns.0.clone(),
            cpu_ns: r.cpu_ns.0.clone(),
            failure: r.failure.zip(r.failed_in),
        }
    }
}

/// Records gathered on the record path until they go over together.
#[derive(Default)]
struct Batch {
    conns: Vec<Conn>,
    closes: u64,
}

impl Batch {
    fn records(&self) -> u64 {
        self.conns.len() as u64 + self.closes
    }
}

enum Msg {
    Batch(Batch),
    /// the tracer's totals (cumulative: a tick lost to a full queue is made up by the next)
    Tick(Box<Health>),
    /// the daemon stops: a last export, then say so
    Stop(SyncSender<()>),
}

/// The record path's end of the OTLP side.
pub struct Otlp {
    tx: SyncSender<Msg>,
    /// filled by the one thread that feeds the sink: never contended
    batch: Mutex<Batch>,
    stats: OtlpStats,
    timeout: Duration,
}

impl Otlp {
    /// Start the recorder and exporter threads. Fails on settings that cannot work (an
    /// unreadable CA file, a bad endpoint), never on a collector that is down.
    pub fn start(
        opts: &OtlpOptions,
        max_sni: usize,
        label_window: Duration,
        stats: OtlpStats,
    ) -> Result<Otlp> {
        // rustls (reqwest, tonic) takes ring, as the rest of hstrace does
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("hstrace-otlp-io")
            .enable_all()
            .build()?;
        let inner = {
            let _in_rt = rt.enter();
            build_exporter(opts)?
        };
        let exporter = Counted {
            inner,
            rt,
            stats: stats.clone(),
            endpoint: opts.describe(),
            interval: opts.interval,
        };
        let reader = PeriodicReader::builder(exporter)
            .with_interval(opts.interval)
            .build();
        let histograms = opts.histograms;
        let provider = SdkMeterProvider::builder()
            .with_resource(resource())
            .with_reader(reader)
            .with_view(move |i: &opentelemetry_sdk::metrics::Instrument| {
                let b = Stream::builder().with_cardinality_limit(CARDINALITY_LIMIT);
                let b = match (i.kind(), histograms) {
                    (InstrumentKind::Histogram, HistogramKind::Explicit) => {
                        b.with_aggregation(Aggregation::ExplicitBucketHistogram {
                            boundaries: DURATION_BUCKETS_S.to_vec(),
                            record_min_max: true,
                        })
                    }
                    (InstrumentKind::Histogram, HistogramKind::Exponential) => {
                        b.with_aggregation(Aggregation::Base2ExponentialHistogram {
                            max_size: 160,
                            max_scale: 20,
                            record_min_max: true,
                        })
                    }
                    _ => b,
                };
                b.build().ok()
            })
            .build();
        let meter = provider.meter("hstrace");
        let recorder = Recorder::new(&meter, max_sni, label_window, &stats);
        let (tx, rx) = mpsc::sync_channel(CHANNEL_BATCHES);
        std::thread::Builder::new()
            .name("hstrace-otlp".into())
            .spawn(move || {
                let stopped = recorder.run(rx);
                // a last export of everything counted, before the daemon exits
                let _ = provider.shutdown();
                if let Some(done) = stopped {
                    let _ = done.send(());
                }
            })?;
        Ok(Otlp {
            tx,
            batch: Mutex::new(Batch::default()),
            stats,
            timeout: opts.timeout,
        })
    }

    /// Hand a record over, in its batch; a full queue drops the batch (counted), never
    /// waits.
    pub fn connection(&self, r: &Record) {
        let mut b = self.batch.lock().expect("otlp batch lock");
        b.conns.push(Conn::of(r));
        if b.conns.len() >= BATCH_RECORDS {
            self.send_batch(&mut b);
        }
    }

    pub fn close(&self) {
        self.batch.lock().expect("otlp batch lock").closes += 1;
    }

    /// Once a second: the batch so far, then the tracer's totals.
    pub fn tick(&self, h: &Health) {
        self.send_batch(&mut self.batch.lock().expect("otlp batch lock"));
        let _ = self.tx.try_send(Msg::Tick(Box::new(h.clone())));
    }

    fn send_batch(&self, b: &mut Batch) {
        if b.records() == 0 {
            return;
        }
        let full = std::mem::replace(
            b,
            Batch {
                conns: Vec::with_capacity(BATCH_RECORDS),
                closes: 0,
            },
        );
        let n = full.records();
        if self.tx.try_send(Msg::Batch(full)).is_err() {
            self.stats.records_dropped.inc_by(n);
        }
    }

    /// The daemon stops: count what is queued, export once more, wait for that (at
    /// most the export timeout and a second).
    pub fn finish(&self) {
        self.send_batch(&mut self.batch.lock().expect("otlp batch lock"));
        let (done, wait) = mpsc::sync_channel(1);
        if self.tx.send(Msg::Stop(done)).is_ok() {
            let _ = wait.recv_timeout(self.timeout + Duration::from_secs(1));
        }
    }

}

/// The service, host and (in Kubernetes, from `OTEL_RESOURCE_ATTRIBUTES`) node and pod:
/// the SDK reads `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME`; hstrace adds
/// `host.name` and names the service `hstrace` when neither does.
fn resource() -> Resource {
    let attrs = env("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
    let named = env("OTEL_SERVICE_NAME").is_some() || attrs.contains("service.name=");
    let mut b = Resource::builder();
    if !named {
        b = b.with_service_name("hstrace");
    }
    if !attrs.contains("host.name=") {
        if let Some(host) = hostname() {
            b = b.with_attribute(KeyValue::new("host.name", host));
        }
    }
    b.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build()
}

fn hostname() -> Option<String> {
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname fills the struct it is given
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let name = unsafe { std::ffi::CStr::from_ptr(u.nodename.as_ptr()) };
    name.to_str().ok().map(str::to_owned)
}

fn read(path: &PathBuf, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

/// The exporter for `opts.protocol`, with TLS from the CA file and client certificate.
fn build_exporter(opts: &OtlpOptions) -> Result<opentelemetry_otlp::MetricExporter> {
    let ca = opts
        .ca_file
        .as_ref()
        .map(|p| read(p, "--otlp-ca-file"))
        .transpose()?;
    let identity = match (&opts.client_cert, &opts.client_key) {
        (Some(c), Some(k)) => Some((
            read(c, "--otlp-client-cert")?,
            read(k, "--otlp-client-key")?,
        )),
        _ => None,
    };
    let b = opentelemetry_otlp::MetricExporter::builder().with_temporality(Temporality::Cumulative);
    let exporter = match opts.protocol {
        Protocol::HttpProtobuf => {
            let mut client = reqwest::Client::builder().timeout(opts.timeout);
            if let Some(ca) = &ca {
                for cert in reqwest::Certificate::from_pem_bundle(ca)
                    .context("--otlp-ca-file holds no PEM certificate")?
                {
                    client = client.add_root_certificate(cert);
                }
            }
            if let Some((cert, key)) = &identity {
                let pem = [cert.as_slice(), b"\n", key.as_slice()].concat();
                client = client.identity(reqwest::Identity::from_pem(&pem).context(
                    "--otlp-client-cert/--otlp-client-key: not a PEM certificate and key",
                )?);
            }
            let client = client.build().context("building the OTLP HTTP client")?;
            let mut b = b
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_http_client(client)
                .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                .with_timeout(opts.timeout);
            if let Some(e) = &opts.endpoint {
                b = b.with_endpoint(e.clone());
            }
            b.build()
        }
        #[cfg(not(feature = "otlp-grpc"))]
        Protocol::Grpc => bail!(
            "this hstrace was built without OTLP over gRPC (cargo build --features otlp-grpc adds it): \
             use --otlp-protocol http/protobuf, which every OpenTelemetry Collector's OTLP receiver takes"
        ),
        #[cfg(feature = "otlp-grpc")]
        Protocol::Grpc => {
            use opentelemetry_otlp::tonic_types::transport::{
                Certificate, ClientTlsConfig, Identity,
            };
            let mut b = b
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc)
                .with_timeout(opts.timeout);
            if ca.is_some() || identity.is_some() {
                let mut tls = ClientTlsConfig::new();
                if let Some(ca) = &ca {
                    tls = tls.ca_certificate(Certificate::from_pem(ca));
                }
                if let Some((cert, key)) = &identity {
                    tls = tls.identity(Identity::from_pem(cert, key));
                }
                b = b.with_tls_config(tls);
            }
            if let Some(e) = &opts.endpoint {
                b = b.with_endpoint(e.clone());
            }
            b.build()
        }
    };
    exporter.context("the OTLP exporter's settings (--otlp-*, OTEL_EXPORTER_OTLP_*)")
}

/// The OTLP exporter, counting its failures: one log line when exports start failing,
/// one when they get through again. The SDK's periodic reader calls it from a thread of
/// its own, one export at a time; the exporter's I/O runs on a one-worker tokio runtime.
struct Counted {
    inner: opentelemetry_otlp::MetricExporter,
    rt: tokio::runtime::Runtime,
    stats: OtlpStats,
    endpoint: String,
    interval: Duration,
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counted({})", self.endpoint)
    }
}

impl PushMetricExporter for Counted {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.rt.block_on(self.inner.export(metrics));
        let stats = &self.stats;
        stats.exports.inc();
        match &result {
            Ok(()) => {
                if stats.failing.swap(false, Ordering::Relaxed) {
                    eprintln!(
                        "hstrace: OTLP export to {} works again ({} failed exports so far)",
                        self.endpoint,
                        stats.export_failures.get()
                    );
                }
            }
            Err(e) => {
                stats.export_failures.inc();
                *stats.last_error.lock().expect("otlp error lock") = Some(e.to_string());
                if !stats.failing.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "hstrace: OTLP export to {} failed: {e}; the metrics stay on /metrics, exports \
                         are retried every {:?} and counted in hstrace_otlp_export_failures_total (is \
                         the collector up, and the endpoint, protocol and TLS settings right?)",
                        self.endpoint, self.interval
                    );
                }
            }
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

/// The instruments, and the label bounds kept as metrics.rs keeps them.
struct Recorder {
    stage: Histogram<f64>,
    handshake: Histogram<f64>,
    stage_cpu: Counter<f64>,
    connections: Counter<u64>,
    failures: Counter<u64>,
    handshakes: Counter<u64>,
    records: Counter<u64>,
    lost: Counter<u64>,
    accepted: Counter<u64>,
    tracked: Counter<u64>,
    uprobe_failures: Counter<u64>,
    uprobes_untied: Counter<u64>,
    accept_queue_unmeasured: Counter<u64>,
    sni_folded: Counter<u64>,
    in_progress: Gauge<i64>,
    open: Gauge<i64>,
    traced: Gauge<i64>,
    sni: SniLabels,
    /// containers with attributes of their own, and whether each had a connection in
    /// this label window
    containers: HashMap<String, bool>,
    window_end: Instant,
    label_window: Duration,
    last: Health,
}

impl Recorder {
    fn new(meter: &Meter, max_sni: usize, label_window: Duration, stats: &OtlpStats) -> Recorder {
        let failures = stats.export_failures.clone();
        meter
            .u64_observable_counter("hstrace.otlp.export.failures")
            .with_description("OTLP exports that failed (the collector down, slow or refusing)")
            .with_unit("{export}")
            .with_callback(move |o| o.observe(failures.get(), &[]))
            .build();
        let dropped = stats.records_dropped.clone();
        meter
            .u64_observable_counter("hstrace.otlp.records.dropped")
            .with_description("Records the OTLP side dropped because its queue was full")
            .with_unit("{record}")
            .with_callback(move |o| o.observe(dropped.get(), &[]))
            .build();
        let count = |name: &'static str, unit: &'static str, description: &'static str| {
            meter
                .u64_counter(name)
                .with_unit(unit)
                .with_description(description)
                .build()
        };
        let gauge = |name: &'static str, unit: &'static str, description: &'static str| {
            meter
                .i64_gauge(name)
                .with_unit(unit)
                .with_description(description)
                .build()
        };
        Recorder {
            stage: meter
                .f64_histogram("hstrace.stage.duration")
                .with_unit("s")
                .with_description("Time of each stage of a connection")
                .build(),
            handshake: meter
                .f64_histogram("hstrace.handshake.duration")
                .with_unit("s")
                .with_description("accept() to handshake complete, of completed TLS handshakes")
                .build(),
            stage_cpu: meter
                .f64_counter("hstrace.stage.cpu")
                .with_unit("s")
                .with_description("On-CPU time of the server thread during service stages")
                .build(),
            connections: count(
                "hstrace.connections",
                "{connection}",
                "Connections reported, by how they went and what they spoke",
            ),
            failures: count(
                "hstrace.failures",
                "{connection}",
                "Connections that failed before their handshake completed",
            ),
            handshakes: count(
                "hstrace.tls.handshakes",
                "{handshake}",
                "Completed TLS handshakes, by SNI, kind and what the client offered to resume with",
            ),
            records: count(
                "hstrace.records",
                "{record}",
                "Records reported (connection lines and close lines)",
            ),
            lost: count(
                "hstrace.lost",
                "{record}",
                "Connection records, hellos or close lines lost, by cause",
            ),
            accepted: count(
                "hstrace.connections.accepted",
                "{connection}",
                "Connections the selected servers accepted",
            ),
            tracked: count(
                "hstrace.connections.tracked",
                "{connection}",
                "Connections the kernel side accepted and tracked",
            ),
            uprobe_failures: count(
                "hstrace.uprobe.attach_failures",
                "{process}",
                "Processes whose libssl could not be hooked",
            ),
            uprobes_untied: count(
                "hstrace.uprobes.untied",
                "{process}",
                "Processes whose uprobes tied no OpenSSL call to a connection",
            ),
            accept_queue_unmeasured: count(
                "hstrace.accept_queue.unmeasured",
                "{connection}",
                "Connections reported without an accept_queue stage",
            ),
            sni_folded: count(
                "hstrace.sni.folded",
                "{handshake}",
                "TLS handshakes whose SNI was counted as \"other\"",
            ),
            in_progress: gauge(
                "hstrace.connections.in_progress",
                "{connection}",
                "Connections whose record has not been made yet",
            ),
            open: gauge(
                "hstrace.connections.open",
                "{connection}",
                "Tracked connections not closed yet",
            ),
            traced: gauge(
                "hstrace.traced_processes",
                "{process}",
                "Processes traced now",
            ),
            sni: SniLabels::new(max_sni),
            containers: HashMap::new(),
            window_end: Instant::now() + label_window,
            label_window,
            last: Health::default(),
        }
    }

    /// Until the daemon stops (the channel to answer it), or its end of the channel goes.
    fn run(mut self, rx: Receiver<Msg>) -> Option<SyncSender<()>> {
        while let Ok(m) = rx.recv() {
            match m {
                Msg::Stop(done) => return Some(done),
                Msg::Batch(b) => {
                    for c in &b.conns {
                        self.connection(c);
                    }
                    let record = |r| [KeyValue::new("hstrace.record", r)];
                    self.records.add(b.conns.len() as u64, &record("connection"));
                    self.records.add(b.closes, &record("close"));
                }
                Msg::Tick(h) => self.tick(&h),
            }
        }
        None
    }

    /// Which server: `process.executable.name`, `server.port` and its container, folded
    /// into `container.id="other"` past `MAX_CONTAINERS` as metrics.rs does.
    fn server(&mut self, c: &Conn) -> Vec<KeyValue> {
        let mut a = vec![
            KeyValue::new("process.executable.name", c.comm.clone()),
            KeyValue::new("server.port", i64::from(c.port)),
        ];
        if let Some(ct) = &c.container {
            let known =
                self.containers.len() < MAX_CONTAINERS || self.containers.contains_key(&ct.id);
            if known {
                self.containers.insert(ct.id.clone(), true);
                a.push(KeyValue::new("container.id", ct.id.clone()));
                if let Some(p) = &ct.pod {
                    a.push(KeyValue::new("k8s.namespace.name", p.namespace.clone()));
                    a.push(KeyValue::new("k8s.pod.name", p.name.clone()));
                }
            } else {
                a.push(KeyValue::new("container.id", OTHER));
            }
        }
        a
    }

    fn connection(&mut self, c: &Conn) {
        let server = self.server(c);
        let kind = c.kind.name();
        let with = |extra: &[KeyValue]| -> Vec<KeyValue> {
            server
                .iter()
                .cloned()
                .chain(extra.iter().cloned())
                .collect()
        };
        for (stage, ns) in &c.stages_ns {
            self.stage.record(
                *ns as f64 * 1e-9,
                &with(&[
                    KeyValue::new("hstrace.stage", stage.name()),
                    KeyValue::new("hstrace.stage.class", stage.class().name()),
                    KeyValue::new("hstrace.kind", kind),
                ]),
            );
        }
        for (stage, ns) in &c.cpu_ns {
            self.stage_cpu.add(
                *ns as f64 * 1e-9,
                &with(&[
                    KeyValue::new("hstrace.stage", stage.name()),
                    KeyValue::new("hstrace.kind", kind),
                ]),
            );
        }
        let tls_version = c.tls_version.unwrap_or("none");
        self.connections.add(
            1,
            &with(&[
                KeyValue::new("hstrace.kind", kind),
                KeyValue::new("network.protocol.name", c.app.unwrap_or("none")),
                KeyValue::new("tls.protocol.version", tls_version),
                KeyValue::new(
                    "tls.cipher",
                    c.cipher.as_deref().unwrap_or("none").to_owned(),
                ),
            ]),
        );
        if let Some((reason, stage)) = c.failure {
            self.failures.add(
                1,
                &with(&[
                    KeyValue::new("error.type", reason),
                    KeyValue::new("hstrace.stage", stage.name()),
                ]),
            );
        }
        let resumed = match c.kind {
            Kind::Full => false,
            Kind::Resumed => true,
            Kind::Plain | Kind::Failed => return,
        };
        if let Some(h) = c.handshake_ns {
            self.handshake.record(
                h as f64 * 1e-9,
                &with(&[
                    KeyValue::new("hstrace.kind", kind),
                    KeyValue::new("tls.protocol.version", tls_version),
                ]),
            );
        }
        let sni = self.sni.label(c.sni.as_deref()).into_owned();
        if sni == OTHER {
            self.sni_folded.add(1, &[]);
        }
        let offer = offered_index(c.offered.or(if resumed { c.resumption } else { None }));
        self.handshakes.add(
            1,
            &with(&[
                KeyValue::new("server.address", sni),
                KeyValue::new("hstrace.kind", kind),
                KeyValue::new("tls.resumed", resumed),
                KeyValue::new("hstrace.tls.resumption_offered", OFFERED[offer]),
            ]),
        );
    }

    /// The tracer's totals as counter increments since the last tick, as metrics.rs
    /// turns them; the label window's end re-ranks SNI names and frees containers.
    fn tick(&mut self, h: &Health) {
        let last = &self.last;
        for ((cause, now), (_, before)) in h.losses().into_iter().zip(last.losses()) {
            self.lost.add(
                now.saturating_sub(before),
                &[KeyValue::new("hstrace.cause", cause)],
            );
        }
        self.accepted
            .add(h.accepted.saturating_sub(last.accepted), &[]);
        self.tracked
            .add(h.tracked.saturating_sub(last.tracked), &[]);
        self.uprobe_failures.add(
            h.uprobe_attach_failures
                .saturating_sub(last.uprobe_attach_failures),
            &[],
        );
        self.uprobes_untied
            .add(h.uprobes_untied.saturating_sub(last.uprobes_untied), &[]);
        self.accept_queue_unmeasured.add(
            h.accept_queue_unmeasured
                .saturating_sub(last.accept_queue_unmeasured),
            &[],
        );
        self.in_progress.record(h.in_progress as i64, &[]);
        self.open.record(h.open as i64, &[]);
        self.traced.record(h.traced_processes as i64, &[]);
        self.last = h.clone();
        let now = Instant::now();
        if now >= self.window_end {
            self.sni.rotate();
            self.containers.retain(|_, active| std::mem::take(active));
            self.window_end = now + self.label_window;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_parse_as_the_spec_names_them() {
        assert_eq!(Protocol::parse("grpc").unwrap(), Protocol::Grpc);
        assert_eq!(
            Protocol::parse("http/protobuf").unwrap(),
            Protocol::HttpProtobuf
        );
        assert!(Protocol::parse("http/json").is_err());
        assert!(Protocol::parse("udp").is_err());
    }

    #[test]
    fn the_flag_is_a_base_url_for_http() {
        let r = |e: &str, p: &str| {
            OtlpOptions::resolve(
                Some(e.into()),
                Some(p.into()),
                Some(1.0),
                HistogramKind::Explicit,
                None,
                None,
                None,
            )
            .unwrap()
            .unwrap()
            .endpoint
            .unwrap()
        };
        assert_eq!(
            r("http://c:4318", "http/protobuf"),
            "http://c:4318/v1/metrics"
        );
        assert_eq!(
            r("http://c:4318/", "http/protobuf"),
            "http://c:4318/v1/metrics"
        );
        assert_eq!(
            r("http://c:4318/custom/path", "http/protobuf"),
            "http://c:4318/custom/path"
        );
        assert_eq!(r("http://c:4317", "grpc"), "http://c:4317");
    }

    #[test]
    fn a_client_cert_needs_its_key() {
        let e = OtlpOptions::resolve(
            Some("http://c:4318".into()),
            None,
            None,
            HistogramKind::Explicit,
            None,
            Some("c.pem".into()),
            None,
        );
        assert!(e.is_err());
    }
}
