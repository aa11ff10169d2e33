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
//!
//! Here: the settings, the handle the record path holds and the resource; `conn.rs` is
//! a record as handed over; `recorder.rs` counts records into the SDK's instruments;
//! `export.rs` builds the exporter and counts its failures.

mod conn;
mod export;
mod recorder;
mod series;

use std::{
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc::{self, Receiver, SyncSender},
        Arc, Mutex,
    },
    time::Duration,
};

use anyhow::{bail, Context, Result};
use opentelemetry::{metrics::MeterProvider as _, KeyValue};
use opentelemetry_sdk::{
    metrics::{Aggregation, InstrumentKind, PeriodicReader, SdkMeterProvider, Stream},
    Resource,
};
use prometheus_client::metrics::counter::Counter as PromCounter;

use crate::{health::Health, metrics::DURATION_BUCKETS_S, record::Record};
use conn::Conn;
use export::{build_exporter, Counted};
use recorder::Recorder;

/// Records handed over together: one wake-up of the recorder per batch, not per record
/// (waking it for each record doubled the record path's cost in the bench). A batch goes
/// when full, and at each tick (once a second).
pub const BATCH_RECORDS: usize = 256;

/// Batches waiting for the OTLP recorder at most (16,384 records, about 600 bytes each,
/// conn.rs); past that a batch is dropped and its records counted
/// (`hstrace_otlp_records_dropped_total`).
pub const CHANNEL_BATCHES: usize = 64;

/// Batches the recorder has emptied and sends back to be filled again, at most: the
/// record path then allocates none (and the recorder's thread frees none of its memory).
const SPARE_BATCHES: usize = 4;

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

/// The endpoint the environment gives: the metrics signal's, else the base one.
fn env_endpoint() -> Option<String> {
    env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT").or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
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
        if endpoint.is_none() && env_endpoint().is_none() {
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
        // HTTP adds the signal's path to a URL without one (http://collector:4318), as to
        // OTEL_EXPORTER_OTLP_ENDPOINT; a URL with a path is taken as is
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

    /// The endpoint as given: the flag's, else the environment's.
    pub(super) fn url(&self) -> String {
        self.endpoint
            .clone()
            .or_else(env_endpoint)
            .unwrap_or_default()
    }

    /// Where the metrics go, for the start line.
    pub fn describe(&self) -> String {
        format!(
            "{} ({}, every {:?}, {} histograms)",
            self.url(),
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

/// Records gathered on the record path until they go over together.
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

/// The batch the record path fills, and the emptied ones to fill next.
struct Filling {
    batch: Batch,
    spares: Receiver<Vec<Conn>>,
}

impl Filling {
    /// Send the batch (when it has records) and start the next one in a spare.
    fn send(&mut self, tx: &SyncSender<Msg>, stats: &OtlpStats) {
        if self.batch.records() == 0 {
            return;
        }
        let conns = self
            .spares
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH_RECORDS));
        let full = std::mem::replace(&mut self.batch, Batch { conns, closes: 0 });
        let n = full.records();
        if tx.try_send(Msg::Batch(full)).is_err() {
            stats.records_dropped.inc_by(n);
        }
    }
}

/// The record path's end of the OTLP side.
pub struct Otlp {
    tx: SyncSender<Msg>,
    /// filled by the one thread that feeds the sink: never contended
    filling: Mutex<Filling>,
    stats: OtlpStats,
    timeout: Duration,
}

impl Otlp {
    /// Start the recorder and exporter threads. Fails on settings that cannot work (an
    /// unreadable CA file, a bad endpoint), never on a collector that is down.
    pub fn start(
        opts: &OtlpOptions,
        max_sni: usize,
        max_ja4: usize,
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
        let recorder = Recorder::new(&meter, max_sni, max_ja4, label_window, &stats);
        let (tx, rx) = mpsc::sync_channel(CHANNEL_BATCHES);
        let (spare_tx, spares) = mpsc::sync_channel(SPARE_BATCHES);
        std::thread::Builder::new()
            .name("hstrace-otlp".into())
            .spawn(move || {
                let stopped = recorder.run(rx, spare_tx);
                // a last export of everything counted, before the daemon exits
                let _ = provider.shutdown();
                if let Some(done) = stopped {
                    let _ = done.send(());
                }
            })?;
        Ok(Otlp {
            tx,
            filling: Mutex::new(Filling {
                batch: Batch {
                    conns: Vec::with_capacity(BATCH_RECORDS),
                    closes: 0,
                },
                spares,
            }),
            stats,
            timeout: opts.timeout,
        })
    }

    /// Hand a record over, in its batch; a full queue drops the batch (counted), never
    /// waits.
    pub fn connection(&self, r: &Record) {
        let mut f = self.filling.lock().expect("otlp batch lock");
        f.batch.conns.push(Conn::of(r));
        if f.batch.conns.len() >= BATCH_RECORDS {
            f.send(&self.tx, &self.stats);
        }
    }

    pub fn close(&self) {
        self.filling.lock().expect("otlp batch lock").batch.closes += 1;
    }

    /// Once a second: the batch so far, then the tracer's totals.
    pub fn tick(&self, h: &Health) {
        self.send_batch();
        let _ = self.tx.try_send(Msg::Tick(Box::new(h.clone())));
    }

    fn send_batch(&self) {
        let mut f = self.filling.lock().expect("otlp batch lock");
        f.send(&self.tx, &self.stats);
    }

    /// The daemon stops: count what is queued, export once more, wait for that (at
    /// most the export timeout and a second).
    pub fn finish(&self) {
        self.send_batch();
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
