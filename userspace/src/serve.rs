//! `hstrace serve`: the daemon. The record source feeds the metrics and the parameter
//! estimator; a small HTTP server on its own thread answers Prometheus and users:
//!   /metrics             OpenMetrics text (prometheus-client)
//!   /healthz             the tracer's health, JSON: every loss counter, the probes chosen
//!   /api/v1/parameters   the measured stage parameters (`?format=csv` for CSV)

use std::{
    net::SocketAddr,
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
    health::Health,
    metrics::Metrics,
    params::{Estimator, Sample},
    record::{CloseRecord, Record},
    sink::Sink,
    source::{Options, Source},
    trace::stop_signal,
};

/// `serve`'s own settings.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    /// the parameters cover the last `window`
    pub window: Duration,
    /// SNI label values kept (the rest are `other`)
    pub max_sni: usize,
}

/// Servers (comm:port) the parameters keep apart; more are folded into `other`.
pub const MAX_SERVERS: usize = 64;

/// What the HTTP handlers read, shared with the sink.
struct Shared {
    registry: Registry,
    metrics: Mutex<Metrics>,
    params: Mutex<Estimator>,
    health: Mutex<Health>,
}

/// The daemon's sink: every record into the metrics and the parameters.
struct ServeSink(Arc<Shared>);

impl Sink for ServeSink {
    fn connection(&mut self, r: &Record) -> std::io::Result<()> {
        self.0.metrics.lock().expect("metrics lock").connection(r)?;
        add_sample(&mut self.0.params.lock().expect("params lock"), r);
        Ok(())
    }

    fn close(&mut self, c: &CloseRecord) -> std::io::Result<()> {
        self.0.metrics.lock().expect("metrics lock").close(c)
    }

    fn tick(&mut self, health: &Health) -> std::io::Result<()> {
        self.0.metrics.lock().expect("metrics lock").tick(health)?;
        *self.0.health.lock().expect("health lock") = health.clone();
        Ok(())
    }

    fn process_cpu(&mut self, pid: u32, ns: u64) {
        let mut params = self.0.params.lock().expect("params lock");
        params.add_cpu(Instant::now(), pid, ns);
    }
}

/// A record as the estimator takes it.
pub fn add_sample(est: &mut Estimator, r: &Record) {
    let server = r.server();
    est.add(
        Instant::now(),
        &Sample {
            server: &server,
            pid: r.pid,
            kind: r.kind,
            stages: &r.stages_ns.0,
            cpu: &r.cpu_ns.0,
            resumption_offered: r.resumption_offered,
        },
    );
}

/// Run the daemon until Ctrl-C or SIGTERM.
pub fn run(opts: Options, serve: ServeOptions) -> Result<()> {
    // the address first: a port in use is the commonest mistake, and cheap to find
    let listener = std::net::TcpListener::bind(serve.listen).with_context(|| {
        format!(
            "cannot listen on {} (in use by another process? choose another with --listen ADDR:PORT)",
            serve.listen
        )
    })?;
    listener.set_nonblocking(true)?;
    let mut registry = Registry::with_prefix("hstrace");
    let metrics = Metrics::new(&mut registry, serve.max_sni);
    let shared = Arc::new(Shared {
        registry,
        metrics: Mutex::new(metrics),
        params: Mutex::new(Estimator::new(serve.window, MAX_SERVERS)),
        health: Mutex::new(Health::default()),
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let source = Source::attach(opts)?;
        let http = http_thread(listener, shared.clone())?;
        eprintln!(
            "hstrace: serving http://{}/metrics, /healthz and /api/v1/parameters; Ctrl-C stops",
            serve.listen
        );
        let mut sink = ServeSink(shared.clone());
        let health = source.run(&mut sink, stop_signal(None)).await?;
        eprint!("{}", health.text());
        drop(http);
        Ok(())
    })
}

/// The HTTP server on a thread of its own, so a scrape never waits for the ring buffer
/// to be drained (nor the other way round). It ends with the process.
fn http_thread(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
) -> Result<std::thread::JoinHandle<()>> {
    let app = Router::new()
        .route("/", get(index))
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/api/v1/parameters", get(parameters))
        .with_state(shared);
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
                if let Err(e) = axum::serve(listener, app).await {
                    log::error!("http server: {e}");
                }
            })
        })?)
}

async fn index() -> &'static str {
    "hstrace serve: /metrics (Prometheus), /healthz (the tracer's health), /api/v1/parameters (measured stage parameters; ?format=csv)\n"
}

async fn metrics(State(s): State<Arc<Shared>>) -> Response {
    let mut body = String::with_capacity(64 << 10);
    if let Err(e) = prometheus_client::encoding::text::encode(&mut body, &s.registry) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding: {e}\n"),
        )
            .into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

async fn healthz(State(s): State<Arc<Shared>>) -> Response {
    let body = s.health.lock().expect("health lock").json();
    ([(header::CONTENT_TYPE, "application/json")], body + "\n").into_response()
}

async fn parameters(
    State(s): State<Arc<Shared>>,
    Query(q): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let p = s
        .params
        .lock()
        .expect("params lock")
        .parameters(Instant::now(), SystemTime::now());
    match q.get("format").map(String::as_str) {
        None | Some("json") => {
            ([(header::CONTENT_TYPE, "application/json")], p.to_json()).into_response()
        }
        Some("csv") => ([(header::CONTENT_TYPE, "text/csv")], p.to_csv()).into_response(),
        Some(other) => (
            StatusCode::BAD_REQUEST,
            format!("unknown format {other:?}: use json or csv\n"),
        )
            .into_response(),
    }
}
