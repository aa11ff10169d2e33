//! `hstrace report`: one self-contained HTML page of where a server's handshakes spend
//! their time. Traced for `--duration` (the record source with `gather::Gather` as its
//! sink, the parameter estimator fed the same records) or read from a running daemon
//! (`daemon`); both make a `View`, which `page` writes with the charts of the model
//! crate's `svg` (the one drawing layer, `hstrace model --plot`'s too).
//!
//! - `gather`: the figures of a traced window, and the sink that gathers them
//! - `daemon`: the same figures from a daemon's /metrics, parameters, failures and health
//! - `page`: the HTML

mod daemon;
mod gather;
mod page;

use std::{
    path::Path,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{
    model::{
        self, input,
        knobs::Knobs,
        svg::{Distribution, Row, Segment},
    },
    params::v1::Parameters,
    signal::stop_signal,
    source::{Options, Source},
    stage::{Kind, Stage},
};

use self::gather::{bucket_edges_s, Gather, ServerAcc, CACHE_STEPS};

/// Everything the page shows, whichever way it was measured.
pub struct View {
    /// the server reported, "comm:port"
    pub server: String,
    /// how and where it was measured, for the page's header
    pub origin: String,
    /// the window's start and end (RFC 3339) and length
    pub window: (String, String, f64),
    pub rows: Vec<Row>,
    pub distributions: Vec<Distribution>,
    pub cache: CacheView,
    /// (error type, stage, connections)
    pub failures: Vec<(String, String, u64)>,
    /// the last failed handshakes, as /api/v1/failures writes them
    pub examples: Value,
    pub parameters: Parameters,
    /// what the parameters cover, when it is not the window
    pub parameters_note: Option<String>,
    /// the tracer's health, as /healthz writes it
    pub health: Value,
}

/// The session cache over the window.
pub struct CacheView {
    /// offered and accepted, by mechanism (session_id, ticket, psk)
    pub offered: [u64; 3],
    pub accepted: [u64; 3],
    /// (seconds into the window, offered, accepted) per step
    pub over_time: Vec<(f64, u64, u64)>,
    /// mean handshake time of full and of resumed handshakes, seconds
    pub full_s: Option<f64>,
    pub resumed_s: Option<f64>,
}

/// `hstrace report --duration`: trace, then write the page of `server` (default: the
/// one with the most connections) to `out`.
pub async fn traced(
    opts: Options,
    duration: Duration,
    server: Option<&str>,
    out: &Path,
) -> Result<()> {
    let source = Source::attach(opts)?;
    let stop = stop_signal(Some(duration));
    eprintln!(
        "hstrace: measuring for {:.0} s for the report; Ctrl-C stops early",
        duration.as_secs_f64()
    );
    let mut gather = Gather::new(duration);
    let start_wall = SystemTime::now();
    let health = source.run(&mut gather, stop).await?;
    eprint!("{}", health.text());
    gather.health = health;
    let seconds = gather.start.elapsed().as_secs_f64();
    let view = traced_view(gather, server, start_wall, seconds)?;
    write(&view, out)
}

/// `hstrace report --from URL`: the page of a running daemon's server, over `duration`
/// (the counters' increase) or since the daemon started.
pub fn from_daemon(
    base: &str,
    duration: Option<Duration>,
    server: Option<&str>,
    out: &Path,
) -> Result<()> {
    let view = daemon::view(base, duration, server)?;
    write(&view, out)
}

fn write(view: &View, out: &Path) -> Result<()> {
    let html = page::html(view);
    std::fs::write(out, &html).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!(
        "hstrace: wrote {} ({} KB): {}, {} connections",
        out.display(),
        html.len().div_ceil(1024),
        view.server,
        view.rows.iter().map(|r| r.connections).sum::<u64>()
    );
    Ok(())
}

/// The servers shown ("comm:port" each): those asked for (comma-separated ports of one
/// server), else every port of the process with the most connections (nginx:443 and
/// nginx:80 are one web server: its TLS and its plain connections).
fn pick<'a>(
    names: impl Iterator<Item = (&'a String, u64)>,
    want: Option<&str>,
) -> Result<Vec<String>> {
    let all: Vec<(&String, u64)> = names.collect();
    let known = || {
        let k: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        if k.is_empty() {
            "(none: no connection was reported; check the selection)".to_owned()
        } else {
            k.join(", ")
        }
    };
    if let Some(w) = want {
        let wanted: Vec<String> = w.split(',').map(|n| n.trim().to_owned()).collect();
        if let Some(missing) = wanted
            .iter()
            .find(|n| !all.iter().any(|(a, _)| a.as_str() == n.as_str()))
        {
            bail!(
                "no connections of server {missing:?} in the window: give --server one or more (comma-separated) of {}",
                known()
            );
        }
        return Ok(wanted);
    }
    let Some((busiest, _)) = all.iter().max_by_key(|(_, n)| *n) else {
        bail!(
            "no connection was reported in the window: nothing to report (is the server busy? check the selection, or a longer --duration)"
        );
    };
    let comm = busiest
        .rsplit_once(':')
        .map_or(busiest.as_str(), |(c, _)| c);
    let mut ports: Vec<(&String, u64)> = all
        .iter()
        .filter(|(n, _)| n.rsplit_once(':').is_some_and(|(c, _)| c == comm))
        .copied()
        .collect();
    // the busiest port first
    ports.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    Ok(ports.into_iter().map(|(n, _)| n.clone()).collect())
}

fn traced_view(
    mut g: Gather,
    want: Option<&str>,
    start_wall: SystemTime,
    seconds: f64,
) -> Result<View> {
    let chosen = pick(g.servers.iter().map(|(n, s)| (n, s.connections)), want)?;
    let mut parameters = g.estimator.parameters(Instant::now(), SystemTime::now());
    parameters.servers.retain(|s| chosen.contains(&s.server));
    let mut s = ServerAcc::default();
    let mut examples: Vec<Value> = Vec::new();
    for name in &chosen {
        let port = g.servers.remove(name).expect("picked from these");
        if let Some(e) = &port.examples {
            let v: Value = serde_json::from_str(&e.json(usize::MAX))?;
            examples.extend(v["failures"].as_array().cloned().unwrap_or_default());
        }
        s.merge(port);
    }
    // the newest first, over every port
    examples.sort_by(|a, b| b["time"].as_str().cmp(&a["time"].as_str()));
    examples.truncate(gather::EXAMPLES);
    let server = chosen.join(",");
    let rows = s
        .rows
        .iter()
        .map(|(key, row)| Row {
            label: key.label(),
            connections: row.connections,
            segments: row
                .stages
                .iter()
                .map(|(stage, acc)| Segment {
                    stage: stage.name().to_owned(),
                    class: stage.class().into(),
                    mean_s: acc.mean_s(),
                    p90_s: acc.hist.quantile_s(0.9),
                    cpu_s: acc.cpu_mean_s(),
                    count: acc.count,
                })
                .collect(),
        })
        .collect();
    let distributions = s
        .by_stage
        .iter()
        .map(|(stage, (counts, hist))| Distribution {
            title: stage.name().to_owned(),
            class: stage.class().into(),
            edges_s: bucket_edges_s(),
            counts: counts.clone(),
            markers: vec![
                ("p50".to_owned(), hist.quantile_s(0.5)),
                ("p90".to_owned(), hist.quantile_s(0.9)),
            ],
        })
        .collect();
    let step_s = g.duration.as_secs_f64() / CACHE_STEPS as f64;
    let mean = |(n, sum): (u64, u128)| (n > 0).then(|| sum as f64 / n as f64 * 1e-9);
    let cache = CacheView {
        offered: s.cache.offered,
        accepted: s.cache.accepted,
        over_time: s
            .cache
            .steps
            .iter()
            .enumerate()
            .map(|(i, (o, a))| ((i as f64 + 1.0) * step_s, *o, *a))
            .collect(),
        full_s: mean(s.cache.handshake_ns[0]),
        resumed_s: mean(s.cache.handshake_ns[1]),
    };
    let examples = serde_json::json!({ "failures": examples });
    let start_ns = start_wall
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    Ok(View {
        origin: format!(
            "traced by hstrace {} for {seconds:.0} s",
            env!("CARGO_PKG_VERSION")
        ),
        window: (
            crate::clock::rfc3339_utc(start_ns),
            crate::clock::rfc3339_utc(start_ns + (seconds * 1e9) as i128),
            seconds,
        ),
        rows,
        distributions,
        cache,
        failures: s
            .failures
            .iter()
            .map(|((e, st), n)| ((*e).to_owned(), (*st).to_owned(), *n))
            .collect(),
        examples,
        parameters,
        parameters_note: None,
        health: serde_json::from_str(&g.health.json())?,
        server,
    })
}

/// A forecast point: users, and the mean response time of all requests and of each class
/// (`RequestClass::ALL` order; None for a class the window did not have).
pub type ForecastPoint = (u32, [Option<f64>; 4]);

/// The model's response time against users for the view's parameters, and the user count
/// that makes the measured throughput (an error when the model cannot be built: e.g. no
/// completed connection of any class).
pub fn forecast(view: &View) -> Result<(Vec<ForecastPoint>, Option<f64>)> {
    let text = view.parameters.to_json();
    let servers = input::parse_parameters(&text, "the report's window")?;
    let server = input::pick(servers, Some(&view.server), "the report's window")?;
    let knobs = Knobs::default();
    let report = model::build(&server, "report".into(), &knobs, &[], None)?;
    let curve = report.curves.first().context("the model made no curve")?;
    let points: Vec<ForecastPoint> = curve
        .points
        .iter()
        .map(|(s, _)| {
            let mut r = [Some(s.response_s), None, None, None];
            for (c, measured) in report.measured.iter().enumerate() {
                if *measured && curve.network.mix[c] > 0.0 {
                    r[c + 1] = Some(s.class_response_s[c]);
                }
            }
            (s.users, r)
        })
        .collect();
    // the load now: the users whose throughput in the model is the measured one
    let seconds = view.window.2.max(1e-9);
    let classified: u64 = view
        .parameters
        .servers
        .first()
        .map_or(0, |p| p.classes.iter().map(|(_, c)| c.count).sum());
    let x_now = classified as f64 / seconds;
    let now = curve
        .points
        .windows(2)
        .find(|w| w[0].0.throughput_per_s <= x_now && x_now <= w[1].0.throughput_per_s)
        .map(|w| {
            let (a, b) = (&w[0].0, &w[1].0);
            let span = (b.throughput_per_s - a.throughput_per_s).max(1e-12);
            f64::from(a.users) + (x_now - a.throughput_per_s) / span * f64::from(b.users - a.users)
        })
        .or_else(|| {
            let first = &curve.points.first()?.0;
            (x_now <= first.throughput_per_s)
                .then(|| f64::from(first.users) * x_now / first.throughput_per_s.max(1e-12))
        });
    Ok((points, now))
}

/// The stages in wire order, for daemon views (whose series come in label order).
fn wire_order(stage: &str) -> usize {
    Stage::from_name(stage).map_or(usize::MAX, Stage::index)
}

/// The waterfall row label of a kind of connection whose TLS version is not told.
fn kind_label(kind: Kind) -> String {
    gather::RowKey {
        kind,
        tls_version: None,
    }
    .label()
}
