//! `hstrace serve`: the daemon. The record source feeds the metrics and the parameter
//! estimator; a small HTTP server on its own thread answers Prometheus and users:
//!   /metrics             OpenMetrics text (prometheus-client)
//!   /healthz             the tracer's health, JSON: every loss counter, the probes chosen
//!   /api/v1/parameters   the measured stage parameters (`?format=csv` for CSV)
//!   /api/v1/failures     the last failed handshakes, newest first (`?limit=N`)
//! and with `--otlp-endpoint` pushes the same measurements to an OpenTelemetry Collector
//! (otlp/),
//! behind TLS and basic auth when `--web.config.file` says so (web_config.rs, web_guard.rs).

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context, Result};
use axum::{
    extract::{Query, State},
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Router,
};
use prometheus_client::registry::Registry;

use crate::{
    failures::{PeerDetail, RecentFailures},
    health::Health,
    metrics::Metrics,
    otlp::{Otlp, OtlpOptions, OtlpStats},
    params::{format, Estimator, Parameters, MAX_SERVERS},
    record::{CloseRecord, Record},
    self_cost,
    signal::stop_signal,
    sink::Sink,
    source::{Options, Source},
    stage::Kind,
    web_config::WebConfig,
};

/// `serve`'s own settings.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// the parameters cover the last `window`
    pub window: Duration,
    /// SNI label values kept (the rest are `other`), re-ranked every `label_window`
    pub max_sni: usize,
    /// JA4 label values kept (the rest are `other`), re-ranked every `label_window`
    pub max_ja4: usize,
    /// SNI names, JA4 fingerprints and containers without connections in it lose their series
    pub label_window: Duration,
    /// failed handshakes kept for /api/v1/failures
    pub recent_failures: usize,
    /// how much of their peer address /api/v1/failures shows
    pub failures_peer: PeerDetail,
    /// the exporter-toolkit web configuration (TLS, basic auth); None: plain HTTP
    pub web_config: Option<PathBuf>,
    /// where and how to push OTLP metrics; None: no push
    pub otlp: Option<OtlpOptions>,
}

/// The command line's defaults (`hstrace serve --help`).
impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 9725)),
            window: Duration::from_secs(60),
            max_sni: 50,
            max_ja4: 50,
            label_window: Duration::from_secs(600),
            recent_failures: 100,
            failures_peer: PeerDetail::default(),
            web_config: None,
            otlp: None,
        }
    }
}

/// What the daemon keeps between records and scrapes: the metrics, the parameter estimator,
/// the recent failures and the last health, each behind its own lock. The record source feeds them through
/// `sink()`, the HTTP handlers read them; `cargo xtask bench` measures this same sink.
pub struct Daemon {
    registry: Registry,
    /// the `process_*` series, named by the convention (no `hstrace_` prefix)
    process: Registry,
    metrics: Mutex<Metrics>,
    params: Mutex<Estimator>,
    failures: Mutex<RecentFailures>,
    health: Mutex<Health>,
    /// the OTLP side's end of the record path, and its counters
    otlp: Option<(Otlp, OtlpStats)>,
}

impl Daemon {
    /// The daemon without OTLP push (what the bench measures).
    pub fn new(opts: &ServeOptions) -> Arc<Daemon> {
        Daemon::build(opts, Registry::with_prefix("hstrace"), None)
    }

    /// The daemon, pushing OTLP metrics when `opts.otlp` says where. Fails on OTLP
    /// settings that cannot work (not on a collector that is down).
    pub fn start(opts: &ServeOptions) -> Result<Arc<Daemon>> {
        let mut registry = Registry::with_prefix("hstrace");
        let otlp = match &opts.otlp {
            None => None,
            Some(o) => {
                let stats = OtlpStats::default();
                registry.register(
                    "otlp_exports",
                    "OTLP exports attempted (--otlp-endpoint), one per --otlp-interval",
                    stats.exports.clone(),
                );
                registry.register(
                    "otlp_export_failures",
                    "OTLP exports that failed: the collector down, slow or refusing (the metrics stay here; the next export that gets through carries everything)",
                    stats.export_failures.clone(),
                );
                registry.register(
                    "otlp_records_dropped",
                    "Records the OTLP side dropped because its queue was full (its series then count fewer than these)",
                    stats.records_dropped.clone(),
                );
                let otlp = Otlp::start(
                    o,
                    opts.max_sni,
                    opts.max_ja4,
                    opts.label_window,
                    stats.clone(),
                )?;
                Some((otlp, stats))
            }
        };
        Ok(Daemon::build(opts, registry, otlp))
    }

    fn build(
        opts: &ServeOptions,
        mut registry: Registry,
        otlp: Option<(Otlp, OtlpStats)>,
    ) -> Arc<Daemon> {
        let metrics = Metrics::new(&mut registry, opts.max_sni, opts.max_ja4, opts.label_window);
        registry.register_collector(Box::new(self_cost::BpfCollector));
        let mut process = Registry::default();
        process.register_collector(Box::new(self_cost::ProcessCollector));
        Arc::new(Daemon {
            registry,
            process,
            metrics: Mutex::new(metrics),
            params: Mutex::new(Estimator::new(opts.window, MAX_SERVERS)),
            failures: Mutex::new(RecentFailures::new(
                opts.recent_failures,
                opts.failures_peer,
            )),
            health: Mutex::new(Health::default()),
            otlp,
        })
    }

    /// The sink the record source feeds.
    pub fn sink(self: &Arc<Daemon>) -> DaemonSink {
        DaemonSink(self.clone())
    }

    /// `/metrics`: the OpenMetrics text.
    pub fn metrics_text(&self) -> Result<String, std::fmt::Error> {
        let mut body = String::with_capacity(64 << 10);
        prometheus_client::encoding::text::encode_registry(&mut body, &self.registry)?;
        prometheus_client::encoding::text::encode_registry(&mut body, &self.process)?;
        prometheus_client::encoding::text::encode_eof(&mut body)?;
        Ok(body)
    }

    /// `/api/v1/parameters`: the parameters of the window ending now.
    pub fn parameters(&self) -> Parameters {
        self.params
            .lock()
            .expect("params lock")
            .parameters(Instant::now(), SystemTime::now())
    }

    /// `/api/v1/failures`: the last `limit` failed handshakes, newest first.
    pub fn failures_json(&self, limit: usize) -> String {
        self.failures.lock().expect("failures lock").json(limit)
    }

    /// `/healthz`: the health the source last told.
    pub fn health_json(&self) -> String {
        let json = self.health.lock().expect("health lock").json();
        let Some((_, stats)) = &self.otlp else {
            return json;
        };
        // the OTLP push's own health, as one more field
        match serde_json::from_str::<serde_json::Value>(&json) {
            Ok(serde_json::Value::Object(mut o)) => {
                o.insert("otlp".into(), stats.json());
                serde_json::Value::Object(o).to_string()
            }
            _ => json,
        }
    }
}

/// Every record into the metrics and the parameters; the health kept for /healthz.
pub struct DaemonSink(Arc<Daemon>);

impl Sink for DaemonSink {
    fn connection(&mut self, r: &Record) -> std::io::Result<()> {
        self.0.metrics.lock().expect("metrics lock").connection(r)?;
        if let Some((otlp, _)) = &self.0.otlp {
            otlp.connection(r);
        }
        if r.kind == Kind::Failed {
            self.0.failures.lock().expect("failures lock").push(r);
        }
        self.0.params.lock().expect("params lock").connection(r)
    }

    fn close(&mut self, c: &CloseRecord) -> std::io::Result<()> {
        if let Some((otlp, _)) = &self.0.otlp {
            otlp.close();
        }
        self.0.metrics.lock().expect("metrics lock").close(c)
    }

    fn tick(&mut self, health: &Health) -> std::io::Result<()> {
        self.0.metrics.lock().expect("metrics lock").tick(health)?;
        if let Some((otlp, _)) = &self.0.otlp {
            otlp.tick(health);
        }
        *self.0.health.lock().expect("health lock") = health.clone();
        Ok(())
    }

    fn process_cpu(&mut self, pid: u32, ns: u64) {
        self.0
            .params
            .lock()
            .expect("params lock")
            .process_cpu(pid, ns);
    }

    fn host_cpu(&mut self, h: &crate::host_cpu::HostCpu) {
        self.0.metrics.lock().expect("metrics lock").host_cpu(h);
        self.0.params.lock().expect("params lock").host_cpu(h);
    }

    fn cold_start(&mut self, c: &crate::cold_start::ColdStart) {
        self.0.params.lock().expect("params lock").cold_start(c);
    }

    fn cold_start_absent(&mut self, why: crate::params::v1::ColdStartAbsent) {
        self.0
            .params
            .lock()
            .expect("params lock")
            .cold_start_absent(why);
    }
}

/// Run the daemon until Ctrl-C or SIGTERM.
pub fn run(opts: Options, serve: ServeOptions) -> Result<()> {
    // the guard before anything else: a wrong file stops the daemon before it serves
    let web = match &serve.web_config {
        Some(path) => Some(Arc::new(WebConfig::load(path)?)),
        None => None,
    };
    // the address first: a port in use is the commonest mistake, and cheap to find
    let listener = std::net::TcpListener::bind(serve.listen).with_context(|| {
        format!(
            "cannot listen on {} (in use by another process? choose another with --listen ADDR:PORT)",
            serve.listen
        )
    })?;
    listener.set_nonblocking(true)?;
    let daemon = Daemon::start(&serve)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let source = Source::attach(opts)?;
        let stop = stop_signal(None);
        let scheme = match &web {
            Some(w) if w.tls.is_some() => "https",
            _ => "http",
        };
        if let Some(w) = &web {
            if w.tls.is_none() {
                log::warn!("--web.config.file has no tls_server_config: basic auth passwords cross the network in clear");
            }
            eprintln!("hstrace: every path behind {} (--web.config.file)", w.describe());
        }
        let http = http_thread(listener, daemon.clone(), web)?;
        if let Some(o) = &serve.otlp {
            eprintln!("hstrace: pushing OTLP metrics to {}", o.describe());
        }
        // the last line of the start: what a script (or a test) waits for
        eprintln!(
            "hstrace: serving {scheme}://{}/metrics, /healthz, /api/v1/parameters and /api/v1/failures; Ctrl-C stops",
            serve.listen
        );
        let mut sink = daemon.sink();
        let health = source.run(&mut sink, stop).await?;
        if let Some((otlp, _)) = &daemon.otlp {
            otlp.finish();
        }
        eprint!("{}", health.text());
        drop(http);
        Ok(())
    })
}

/// The HTTP server on a thread of its own, so a scrape never waits for the ring buffer
/// to be drained (nor the other way round). It ends with the process.
fn http_thread(
    listener: std::net::TcpListener,
    daemon: Arc<Daemon>,
    web: Option<Arc<WebConfig>>,
) -> Result<std::thread::JoinHandle<()>> {
    let app = Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/api/v1/parameters", get(parameters))
        .route("/api/v1/failures", get(failures))
        .with_state(daemon);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok(std::thread::Builder::new()
        .name("hstrace-http".into())
        .spawn(move || {
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => return log::error!("http listener: {e}"),
                };
                if let Err(e) = crate::web_guard::serve(listener, app, web).await {
                    log::error!("http server: {e}");
                }
            })
        })?)
}

async fn index() -> &'static str {
    "hstrace serve: /metrics (Prometheus), /healthz (the tracer's health), /api/v1/parameters (measured stage parameters; ?format=csv), /api/v1/failures (the last failed handshakes; ?limit=N)\n"
}

async fn metrics(State(d): State<Arc<Daemon>>) -> Response {
    let body = match d.metrics_text() {
        Ok(body) => body,
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding: {e}\n"),
            )
                .into_response()
        }
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn healthz(State(d): State<Arc<Daemon>>) -> Response {
    let body = d.health_json();
    ([(header::CONTENT_TYPE, "application/json")], body + "\n").into_response()
}

async fn parameters(
    State(d): State<Arc<Daemon>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let p = d.parameters();
    match q.get("format").map(String::as_str) {
        None | Some("json") => {
            ([(header::CONTENT_TYPE, "application/json")], p.to_json()).into_response()
        }
        Some("csv") => ([(header::CONTENT_TYPE, "text/csv")], format::csv(&p)).into_response(),
        Some(other) => (
            StatusCode::BAD_REQUEST,
            format!("unknown format {other:?}: use json or csv\n"),
        )
            .into_response(),
    }
}

async fn failures(
    State(d): State<Arc<Daemon>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let limit = match q.get("limit").map(|l| l.parse::<usize>()) {
        None => usize::MAX,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            return (
                StatusCode::BAD_REQUEST,
                "limit must be a whole number, e.g. /api/v1/failures?limit=20\n",
            )
                .into_response()
        }
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        d.failures_json(limit),
    )
        .into_response()
}
