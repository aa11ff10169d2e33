//! A report of a running daemon: its /metrics (the increase over `--duration`, or the
//! totals since it started), its parameters (its own `--window`), its last failures and
//! its health. The waterfall's rows are by kind only: the daemon's stage histograms are not
//! split by TLS version.

use std::{collections::BTreeMap, thread, time::Duration};

use anyhow::{anyhow, Context, Result};
use serde_json::Value;

use super::{
    gather::{bucket_edges_s, CACHE_STEPS},
    kind_label, pick, wire_order, CacheView, View,
};
use crate::{
    http_client::{self, Server},
    model::svg::{Distribution, Row, Segment},
    params::v1::Parameters,
    stage::{Kind, Resumption, Stage},
};

/// One scrape: (metric name, labels) → value.
#[derive(Default, Clone)]
struct Scrape(BTreeMap<(String, BTreeMap<String, String>), f64>);

impl Scrape {
    fn get(base: &str) -> Result<Scrape> {
        Ok(Scrape::parse(&http_client::get(
            base,
            "/metrics",
            Server::Daemon,
        )?))
    }

    /// The OpenMetrics text: `name{a="x",b="y"} value` lines (comments skipped).
    fn parse(text: &str) -> Scrape {
        let mut out = BTreeMap::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, labels(rest.strip_suffix('}').unwrap_or(rest))),
                None => (series, BTreeMap::new()),
            };
            out.insert((name.to_owned(), labels), value);
        }
        Scrape(out)
    }

    /// The samples of `name` of the servers `servers` ("comm:port"), every other label
    /// kept (containers summed by the caller's grouping).
    fn of<'a>(
        &'a self,
        name: &'a str,
        servers: &'a [String],
    ) -> impl Iterator<Item = (&'a BTreeMap<String, String>, f64)> + 'a {
        self.0
            .iter()
            .filter(move |((n, l), _)| {
                n == name && server_of(l).is_some_and(|s| servers.contains(&s))
            })
            .map(|((_, l), v)| (l, *v))
    }

    /// `of`, summed by the values of `keys`.
    fn sum_by(&self, name: &str, server: &[String], keys: &[&str]) -> BTreeMap<Vec<String>, f64> {
        let mut out: BTreeMap<Vec<String>, f64> = BTreeMap::new();
        for (l, v) in self.of(name, server) {
            let key = keys
                .iter()
                .map(|k| l.get(*k).cloned().unwrap_or_default())
                .collect();
            *out.entry(key).or_default() += v;
        }
        out
    }

    /// The increase from `before` (a counter that restarted counts from zero).
    fn minus(&self, before: &Scrape) -> Scrape {
        Scrape(
            self.0
                .iter()
                .map(|(k, v)| {
                    let b = before.0.get(k).copied().unwrap_or(0.0);
                    (k.clone(), if *v >= b { v - b } else { *v })
                })
                .collect(),
        )
    }
}

fn labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(match n {
                            'n' => '\n',
                            other => other,
                        });
                    }
                }
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').trim().to_owned(), value);
        rest = &after[end..];
    }
    out
}

fn server_of(l: &BTreeMap<String, String>) -> Option<String> {
    Some(format!(
        "{}:{}",
        l.get("process_executable_name")?,
        l.get("server_port")?
    ))
}

/// The q-quantile of cumulative buckets (le, count), interpolated in its bucket as
/// Prometheus's histogram_quantile does.
fn quantile(buckets: &[(f64, f64)], q: f64) -> f64 {
    let Some(&(_, total)) = buckets.last() else {
        return 0.0;
    };
    if total <= 0.0 {
        return 0.0;
    }
    let want = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, cum) in buckets {
        if cum >= want {
            if le.is_infinite() {
                return prev.0;
            }
            let span = (cum - prev.1).max(1e-12);
            return prev.0 + (le - prev.0) * (want - prev.1) / span;
        }
        prev = (le, cum);
    }
    prev.0
}

/// The view of the daemon at `base`.
pub fn view(base: &str, duration: Option<Duration>, want: Option<&str>) -> Result<View> {
    let health_before: Value =
        serde_json::from_str(&http_client::get(base, "/healthz", Server::Daemon)?)
            .with_context(|| format!("{base}/healthz is not JSON: is it hstrace serve?"))?;
    let (scrape, over_time, seconds) = match duration {
        None => (Scrape::get(base)?, Vec::new(), None),
        Some(d) => {
            let first = Scrape::get(base)?;
            eprintln!(
                "hstrace: reading {base} for {:.0} s for the report",
                d.as_secs_f64()
            );
            let step = d / CACHE_STEPS as u32;
            let mut polls = vec![first.clone()];
            for _ in 0..CACHE_STEPS {
                thread::sleep(step);
                polls.push(Scrape::get(base)?);
            }
            let last = polls.last().expect("polled").minus(&first);
            (last, polls, Some(d.as_secs_f64()))
        }
    };
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for ((name, l), v) in &scrape.0 {
        if name == "hstrace_connections_total" {
            if let Some(s) = server_of(l) {
                *totals.entry(s).or_default() += *v as u64;
            }
        }
    }
    let chosen = pick(totals.iter().map(|(n, c)| (n, *c)), want)?;
    let s = chosen.as_slice();
    let server = chosen.join(",");

    // rows: one per kind
    let per_kind = scrape.sum_by("hstrace_connections_total", s, &["kind"]);
    let sums = scrape.sum_by("hstrace_stage_duration_seconds_sum", s, &["kind", "stage"]);
    let counts = scrape.sum_by(
        "hstrace_stage_duration_seconds_count",
        s,
        &["kind", "stage"],
    );
    let cpu = scrape.sum_by("hstrace_stage_cpu_seconds_total", s, &["kind", "stage"]);
    let buckets = scrape.sum_by(
        "hstrace_stage_duration_seconds_bucket",
        s,
        &["kind", "stage", "le"],
    );
    let cumulative = |kind: Option<&str>, stage: &str| -> Vec<(f64, f64)> {
        let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for (k, v) in &buckets {
            if kind.is_some_and(|kind| k[0] != kind) || k[1] != stage {
                continue;
            }
            let le = if k[2] == "+Inf" {
                f64::INFINITY
            } else {
                k[2].parse().unwrap_or(f64::INFINITY)
            };
            let e = by_le.entry(le.to_bits()).or_insert((le, 0.0));
            e.1 += v;
        }
        let mut b: Vec<(f64, f64)> = by_le.into_values().collect();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        b
    };
    let mut rows = Vec::new();
    for kind in Kind::ALL {
        let n = per_kind
            .get(&vec![kind.name().to_owned()])
            .copied()
            .unwrap_or(0.0);
        if n <= 0.0 {
            continue;
        }
        let mut segments: Vec<Segment> = counts
            .iter()
            .filter(|(k, c)| k[0] == kind.name() && **c > 0.0)
            .filter_map(|(k, c)| {
                let stage = Stage::from_name(&k[1])?;
                let sum = sums.get(k).copied().unwrap_or(0.0);
                Some(Segment {
                    stage: k[1].clone(),
                    class: stage.class().into(),
                    mean_s: sum / c,
                    p90_s: quantile(&cumulative(Some(kind.name()), &k[1]), 0.9),
                    cpu_s: cpu.get(k).map(|x| x / c),
                    count: *c as u64,
                })
            })
            .collect();
        segments.sort_by_key(|g| wire_order(&g.stage));
        rows.push(Row {
            label: kind_label(kind),
            connections: n as u64,
            segments,
        });
    }

    // distributions: every kind together
    let edges = bucket_edges_s();
    let mut stages: Vec<String> = counts.keys().map(|k| k[1].clone()).collect();
    stages.sort_by_key(|st| wire_order(st));
    stages.dedup();
    let distributions = stages
        .iter()
        .filter_map(|st| {
            let stage = Stage::from_name(st)?;
            let cum = cumulative(None, st);
            let mut counts = Vec::with_capacity(edges.len() + 1);
            let mut prev = 0.0;
            for (_, c) in &cum {
                counts.push((c - prev).max(0.0) as u64);
                prev = *c;
            }
            Some(Distribution {
                title: st.clone(),
                class: stage.class().into(),
                edges_s: edges.clone(),
                counts,
                markers: vec![
                    ("p50".into(), quantile(&cum, 0.5)),
                    ("p90".into(), quantile(&cum, 0.9)),
                ],
            })
        })
        .collect();

    // the session cache
    let hs = |sc: &Scrape| {
        sc.sum_by(
            "hstrace_tls_handshakes_total",
            s,
            &["kind", "tls_resumption_offered"],
        )
    };
    let mut cache = CacheView {
        offered: [0; 3],
        accepted: [0; 3],
        over_time: Vec::new(),
        full_s: None,
        resumed_s: None,
    };
    for (k, v) in hs(&scrape) {
        if let Some(m) = Resumption::from_name(&k[1]).map(Resumption::index) {
            cache.offered[m] += v as u64;
            if k[0] == "resumed" {
                cache.accepted[m] += v as u64;
            }
        }
    }
    if let Some(total) = seconds {
        let step_s = total / CACHE_STEPS as f64;
        cache.over_time = over_time
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let d = hs(&w[1].minus(&w[0]));
                let offered: f64 = d
                    .iter()
                    .filter(|(k, _)| k[1] != "none")
                    .map(|(_, v)| v)
                    .sum();
                let accepted: f64 = d
                    .iter()
                    .filter(|(k, _)| k[0] == "resumed")
                    .map(|(_, v)| v)
                    .sum();
                ((i as f64 + 1.0) * step_s, offered as u64, accepted as u64)
            })
            .collect();
    }
    let hsum = scrape.sum_by("hstrace_handshake_duration_seconds_sum", s, &["kind"]);
    let hcount = scrape.sum_by("hstrace_handshake_duration_seconds_count", s, &["kind"]);
    let mean = |k: &str| {
        let key = vec![k.to_owned()];
        let c = hcount.get(&key).copied().unwrap_or(0.0);
        (c > 0.0).then(|| hsum.get(&key).copied().unwrap_or(0.0) / c)
    };
    cache.full_s = mean("full");
    cache.resumed_s = mean("resumed");

    let failures = scrape
        .sum_by("hstrace_failures_total", s, &["error_type", "stage"])
        .into_iter()
        .filter(|(_, n)| *n > 0.0)
        .map(|(k, n)| (k[0].clone(), k[1].clone(), n as u64))
        .collect();
    let examples: Value = serde_json::from_str(&http_client::get(
        base,
        "/api/v1/failures?limit=5",
        Server::Daemon,
    )?)
    .map_err(|_| {
        anyhow!("{base}/api/v1/failures is not JSON: is it hstrace serve 0.1 or later?")
    })?;
    let mut parameters = Parameters::from_json(
        &http_client::get(base, "/api/v1/parameters", Server::Daemon)?,
        base,
    )?;
    parameters.servers.retain(|p| chosen.contains(&p.server));
    let daemon_window = parameters.window.as_ref().map_or(0.0, |w| w.seconds);
    let health_after: Value =
        serde_json::from_str(&http_client::get(base, "/healthz", Server::Daemon)?)?;
    let health = match seconds {
        None => health_after,
        Some(_) => increase(&health_before, &health_after),
    };
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let now = crate::clock::rfc3339_utc(now_ns);
    let (window, origin) = match seconds {
        Some(t) => (
            (
                crate::clock::rfc3339_utc(now_ns - (t * 1e9) as i128),
                now,
                t,
            ),
            format!("read from the hstrace serve at {base} over {t:.0} s"),
        ),
        None => (
            ("the daemon's start".to_owned(), now, daemon_window),
            format!("read from the hstrace serve at {base}: its totals since it started"),
        ),
    };
    Ok(View {
        server,
        origin,
        window,
        rows,
        distributions,
        cache,
        failures,
        examples,
        parameters,
        parameters_note: Some(format!(
            "The daemon's parameters cover its own last {daemon_window:.0} s (its --window), not the report's window; rows above come from its counters."
        )),
        health,
    })
}

/// The counters of a health object grown from `a` to `b` (gauges as in `b`).
fn increase(a: &Value, b: &Value) -> Value {
    let mut out = b.clone();
    for key in [
        "reported",
        "closes",
        "accepted",
        "tracked",
        "accepted_without_socket",
    ] {
        if let (Some(x), Some(y)) = (a[key].as_u64(), b[key].as_u64()) {
            out[key] = Value::from(y.saturating_sub(x));
        }
    }
    if let (Some(x), Some(y)) = (a["lost"].as_object(), b["lost"].as_object()) {
        let mut lost = serde_json::Map::new();
        for (k, v) in y {
            let before = x.get(k).and_then(Value::as_u64).unwrap_or(0);
            lost.insert(
                k.clone(),
                Value::from(v.as_u64().unwrap_or(0).saturating_sub(before)),
            );
        }
        out["lost"] = Value::Object(lost);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_exposition_and_its_quantiles() {
        let text = "# TYPE x counter\n\
            hstrace_connections_total{process_executable_name=\"nginx\",server_port=\"443\",kind=\"full\"} 3\n\
            hstrace_connections_total{process_executable_name=\"nginx\",server_port=\"443\",container_id=\"a\",kind=\"full\"} 2\n\
            hstrace_tls_handshakes_total{process_executable_name=\"nginx\",server_port=\"443\",tls_client_server_name=\"a\\\"b\",kind=\"resumed\",tls_resumption_offered=\"psk\"} 4\n\
            # EOF\n";
        let s = Scrape::parse(text);
        let nginx = ["nginx:443".to_owned()];
        let by = s.sum_by("hstrace_connections_total", &nginx, &["kind"]);
        assert_eq!(by[&vec!["full".to_owned()]], 5.0);
        let sni = s
            .of("hstrace_tls_handshakes_total", &nginx)
            .map(|(l, _)| l["tls_client_server_name"].clone())
            .next();
        assert_eq!(sni.as_deref(), Some("a\"b"));
        // 10 below 1 ms, 10 more below 2 ms: the p75 is half-way into the second bucket
        let b = [(0.001, 10.0), (0.002, 20.0), (f64::INFINITY, 20.0)];
        assert!((quantile(&b, 0.75) - 0.0015).abs() < 1e-12);
        assert_eq!(quantile(&[], 0.9), 0.0);
        let before = s.clone();
        assert_eq!(
            s.minus(&before)
                .sum_by("hstrace_connections_total", &nginx, &[])[&vec![]],
            0.0
        );
    }
}
