//! The report's HTML: one file, its style inline, its charts inline SVG, no script and no
//! request for anything (the icon is an empty data: URL, so browsers do not ask for
//! /favicon.ico). Printable: sections do not break inside a chart.

use std::fmt::Write;

use serde_json::Value;

use crate::{
    model::svg::{self, esc, Bars, Class, LineChart, Series},
    stage::Resumption,
};

use super::{forecast, View};

const STYLE: &str = "body{font-family:sans-serif;max-width:1180px;margin:1.5em auto;padding:0 1em;color:#222}\
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}\
p.note,p.sub{color:#555;font-size:.9em}table{border-collapse:collapse;font-size:.85em;margin:.5em 0}\
td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}th{background:#f3f3f3}\
td.l,th.l{text-align:left}.grid{display:flex;flex-wrap:wrap;gap:.5em}\
svg{max-width:100%;height:auto}section{break-inside:avoid-page}\
pre{font-size:.75em;background:#f7f7f7;padding:.5em;overflow-x:auto;white-space:pre-wrap}\
.ok{color:#007a4d}.bad{color:#b00020}\
@media print{body{max-width:none;margin:0}details{display:none}}";

/// The page.
pub fn html(v: &View) -> String {
    let mut o = String::with_capacity(256 << 10);
    let title = format!("hstrace report: {}", v.server);
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"icon\" href=\"data:,\"><title>{}</title><style>{STYLE}</style></head><body>\n",
        esc(&title)
    );
    let _ = writeln!(
        o,
        "<h1>{}</h1><p class=\"sub\">{}; window {} → {} ({:.1} s). Every figure below is \
         from that window's connections, read from the bytes the server read and wrote \
         (record and handshake headers only, never application data).</p>",
        esc(&title),
        esc(&v.origin),
        esc(&v.window.0),
        esc(&v.window.1),
        v.window.2
    );
    waterfall(&mut o, v);
    distributions(&mut o, v);
    cache(&mut o, v);
    key_exchange(&mut o, v);
    failures(&mut o, v);
    parameters(&mut o, v);
    forecast_section(&mut o, v);
    accounting(&mut o, v);
    o.push_str("</body></html>\n");
    o
}

fn waterfall(o: &mut String, v: &View) {
    o.push_str("<section id=\"waterfall\"><h2>Where the time goes: the stages of each kind of connection</h2>\n");
    o.push_str(
        "<p class=\"note\">Each bar is one kind of connection, its stages end to end by their \
         means, on one time axis from the connection's arrival. Blue: the server works \
         (service; the darker band is the server thread's time on CPU); orange, hatched: a \
         message waits for the server (queue); grey: the server waits for the client and \
         the network (delay). The thin line under a stage reaches its 90th percentile. \
         stages.md in the docs defines each stage.</p>\n",
    );
    o.push_str(&svg::waterfall("wf", &v.rows));
    o.push_str("</section>\n");
}

fn distributions(o: &mut String, v: &View) {
    o.push_str("<section id=\"distributions\"><h2>Each stage's distribution</h2>\n");
    o.push_str(
        "<p class=\"note\">Connections by stage duration, every kind of connection together, \
         on a log time scale (buckets 10 µs · 2^k, as the daemon's histograms), with the \
         median and the 90th percentile marked.</p><div class=\"grid\">\n",
    );
    for (i, d) in v.distributions.iter().enumerate() {
        o.push_str(&svg::distribution(&format!("d{i}"), d));
    }
    if v.distributions.is_empty() {
        o.push_str(&svg::distribution(
            "d0",
            &svg::Distribution {
                title: "no stage measured".into(),
                class: Class::Service,
                edges_s: Vec::new(),
                counts: Vec::new(),
                markers: Vec::new(),
            },
        ));
    }
    o.push_str("</div></section>\n");
}

fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "–".into()
    } else {
        format!("{:.1} %", 100.0 * a as f64 / b as f64)
    }
}

fn cache(o: &mut String, v: &View) {
    let c = &v.cache;
    o.push_str("<section id=\"cache\"><h2>The session cache</h2>\n");
    let (offered, accepted): (u64, u64) = (c.offered.iter().sum(), c.accepted.iter().sum());
    let _ = write!(
        o,
        "<p>Clients offered to resume {offered} times; the server resumed {accepted}: a hit \
         ratio of <b>{}</b>.",
        ratio(accepted, offered)
    );
    if let (Some(f), Some(r)) = (c.full_s, c.resumed_s) {
        let _ = write!(
            o,
            " A full handshake took {:.2} ms on average (accept() to handshake complete), a \
             resumed one {:.2} ms: resumption saves <b>{:.0} %</b> of it, (T(full) − \
             T(resumed)) / T(full).",
            f * 1e3,
            r * 1e3,
            100.0 * (f - r) / f
        );
    }
    o.push_str("</p><div class=\"grid\">\n");
    o.push_str(&svg::bars(
        "cb",
        &Bars {
            title: "Resumption offered and accepted, by mechanism".into(),
            y_label: "handshakes".into(),
            members: vec!["offered".into(), "accepted".into()],
            groups: Resumption::ALL
                .iter()
                .map(|m| {
                    let i = m.index();
                    (
                        m.name().to_owned(),
                        vec![c.offered[i] as f64, c.accepted[i] as f64],
                    )
                })
                .collect(),
        },
    ));
    let points: Vec<(f64, f64)> = c
        .over_time
        .iter()
        .filter(|(_, o, _)| *o > 0)
        .map(|(t, o, a)| (*t, *a as f64 / *o as f64))
        .collect();
    o.push_str(&svg::line_chart(
        "ct",
        &LineChart {
            title: "Hit ratio over the window".into(),
            x_label: "time into the window (s)".into(),
            y_label: "hit ratio".into(),
            series: vec![Series {
                label: "resumed / offered".into(),
                points,
                ..Default::default()
            }],
            marker: None,
            y_max: Some(1.0),
            y_percent: true,
            ..Default::default()
        },
    ));
    o.push_str("</div></section>\n");
}

fn failures(o: &mut String, v: &View) {
    o.push_str("<section id=\"failures\"><h2>Failures</h2>\n");
    let total: u64 = v.failures.iter().map(|(.., n)| n).sum();
    let _ = writeln!(
        o,
        "<p>{total} connections failed before their handshake completed, by error type and \
         the stage they died in (the metrics' <code>error_type</code> and <code>stage</code>).</p>"
    );
    let mut types: Vec<&str> = v.failures.iter().map(|(e, ..)| e.as_str()).collect();
    types.dedup();
    let mut stages: Vec<&str> = v.failures.iter().map(|(_, s, _)| s.as_str()).collect();
    stages.sort_by_key(|s| super::wire_order(s));
    stages.dedup();
    o.push_str(&svg::bars(
        "fb",
        &Bars {
            title: "Failed connections by error type and stage".into(),
            y_label: "connections".into(),
            members: stages.iter().map(|s| (*s).to_owned()).collect(),
            groups: types
                .iter()
                .map(|t| {
                    (
                        (*t).to_owned(),
                        stages
                            .iter()
                            .map(|s| {
                                v.failures
                                    .iter()
                                    .find(|(e, st, _)| e == t && st == s)
                                    .map_or(0.0, |(.., n)| *n as f64)
                            })
                            .collect(),
                    )
                })
                .collect(),
        },
    ));
    let list = v.examples["failures"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !list.is_empty() {
        o.push_str(
            "<p>The last ones (what the handshake's headers said; as /api/v1/failures \
             serves them):</p><table><tr><th class=\"l\">time</th><th class=\"l\">peer</th>\
             <th class=\"l\">SNI</th><th class=\"l\">TLS</th><th class=\"l\">stage</th>\
             <th class=\"l\">error type</th><th class=\"l\">alert</th><th>after ms</th></tr>\n",
        );
        for f in &list {
            let s = |k: &str| f[k].as_str().unwrap_or("–").to_owned();
            let alert = match &f["alert"] {
                Value::Object(a) => format!(
                    "{} from the {} (level {})",
                    a.get("name")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .unwrap_or_else(|| format!("description {}", a["description"])),
                    a["from"].as_str().unwrap_or("?"),
                    a["level"]
                ),
                _ => "–".into(),
            };
            let _ = writeln!(
                o,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
                 <td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
                 <td class=\"l\">{}</td><td>{:.2}</td></tr>",
                esc(&s("time")),
                esc(&s("peer")),
                esc(&s("sni")),
                esc(&s("tls_version")),
                esc(&s("stage")),
                esc(&s("error_type")),
                esc(&alert),
                f["duration_ns"].as_f64().unwrap_or(0.0) * 1e-6
            );
        }
        o.push_str("</table>\n");
    }
    o.push_str("</section>\n");
}

fn ms(s: f64) -> String {
    format!("{:.3}", s * 1e3)
}

/// The full handshakes by key-exchange group: each group's share, what each of its
/// service stages cost the server, and its waits for the client (the parameters'
/// `key_exchange`).
fn key_exchange(o: &mut String, v: &View) {
    o.push_str("<section id=\"key-exchange\"><h2>Key exchange: what each group costs</h2>\n");
    let groups: Vec<_> = v
        .parameters
        .servers
        .iter()
        .filter(|s| !s.key_exchange.is_empty())
        .collect();
    if groups.is_empty() {
        o.push_str(
            "<p>No full handshake's key-exchange group was seen in the window.</p></section>\n",
        );
        return;
    }
    o.push_str(
        "<p>Full TLS handshakes by the group the server agreed on, and the mean of each of \
         their service stages, wall and on CPU: the server's first flight holds the key \
         share's computation (a post-quantum hybrid's encapsulation among it); and the \
         sum of their waits for the client (its delay stages), which hold the client's own \
         key-share work. <code>hstrace model --group</code> forecasts with one group's.</p>\n",
    );
    for s in groups {
        let _ = writeln!(
            o,
            "<table><caption>{}</caption><tr><th class=\"l\">group</th><th>handshakes</th>\
             <th>share</th><th class=\"l\">stage</th><th>mean ms</th><th>on CPU ms</th>\
             <th>service ms</th><th>client waits ms</th></tr>",
            esc(&s.server)
        );
        for g in &s.key_exchange {
            for (i, (stage, st)) in g.stages.0.iter().enumerate() {
                let first = i == 0;
                let _ = writeln!(
                    o,
                    "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td>\
                     <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    if first { esc(&g.group) } else { String::new() },
                    if first {
                        g.count.to_string()
                    } else {
                        String::new()
                    },
                    if first {
                        format!("{:.1} %", g.share * 100.0)
                    } else {
                        String::new()
                    },
                    esc(stage),
                    ms(st.mean_s),
                    st.cpu_mean_s.map_or("–".into(), ms),
                    if first {
                        ms(g.service_s)
                    } else {
                        String::new()
                    },
                    match (first, g.delay_s) {
                        (true, Some(d)) => ms(d),
                        (true, None) => "–".into(),
                        (false, _) => String::new(),
                    },
                );
            }
        }
        o.push_str("</table>\n");
    }
    o.push_str("</section>\n");
}

fn parameters(o: &mut String, v: &View) {
    o.push_str("<section id=\"parameters\"><h2>The measured parameters</h2>\n");
    if let Some(note) = &v.parameters_note {
        let _ = write!(o, "<p class=\"note\">{}</p>", esc(note));
    }
    for s in &v.parameters.servers {
        let _ = writeln!(
            o,
            "<p>{}: {} connections ({} failed); the cache hit ratio {}, resumption rate {}; \
             the server's CPU per connection {} ms, of which outside the stages {} ms.</p>",
            esc(&s.server),
            s.connections,
            s.failed,
            s.cache
                .hit_ratio
                .map_or("–".into(), |r| format!("{:.1} %", r * 100.0)),
            s.cache
                .resumption_rate
                .map_or("–".into(), |r| format!("{:.1} %", r * 100.0)),
            s.cpu.per_connection_s.map_or("–".into(), ms),
            s.cpu.outside_stages_s.map_or("–".into(), ms)
        );
        o.push_str(
            "<table><tr><th class=\"l\">class</th><th class=\"l\">stage</th><th class=\"l\">\
             stage class</th><th>connections</th><th>mean ms</th><th>p50 ms</th><th>p90 ms\
             </th><th>p99 ms</th><th>on CPU ms</th></tr>\n",
        );
        for (class, c) in s.classes.iter() {
            for (stage, p) in &c.stages.0 {
                let _ = writeln!(
                    o,
                    "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
                     <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    class.name(),
                    esc(stage),
                    p.class.name(),
                    p.count,
                    ms(p.mean_s),
                    ms(p.p50_s),
                    ms(p.p90_s),
                    ms(p.p99_s),
                    p.cpu_mean_s.map_or("–".into(), ms)
                );
            }
        }
        o.push_str("</table>\n");
    }
    let _ = writeln!(
        o,
        "<details><summary>hstrace.parameters/v1 JSON (for <code>hstrace model --params</code>)\
         </summary><pre id=\"parameters-json\">{}</pre></details></section>",
        esc(&v.parameters.to_json())
    );
}

fn forecast_section(o: &mut String, v: &View) {
    o.push_str("<section id=\"forecast\"><h2>What more load would do</h2>\n");
    match forecast(v) {
        Ok((points, now)) => {
            let _ = writeln!(
                o,
                "<p class=\"note\">The model of these parameters (<code>hstrace model</code>: a \
                 closed queueing network of the server, its defaults: processor sharing, think \
                 time 2 s): mean response time against users.{}</p>",
                match now {
                    Some(n) => format!(
                        " The window's throughput is what {n:.1} users make in the model (the \
                         dashed line)."
                    ),
                    None => String::new(),
                }
            );
            let names = ["all", "tls_full", "tls_resumed", "plain"];
            let series = (0..4)
                .map(|k| Series {
                    label: names[k].to_owned(),
                    points: points
                        .iter()
                        .filter_map(|(n, r)| r[k].map(|r| (f64::from(*n), r * 1e3)))
                        .collect(),
                    ..Default::default()
                })
                .filter(|s| !s.points.is_empty())
                .collect();
            o.push_str(&svg::line_chart(
                "fc",
                &LineChart {
                    title: "Forecast: response time against users".into(),
                    x_label: "users".into(),
                    y_label: "response time (ms)".into(),
                    series,
                    marker: now.map(|n| (n, format!("now: {n:.1} users"))),
                    ..Default::default()
                },
            ));
        }
        Err(e) => {
            let _ = write!(
                o,
                "<p>No forecast: {}</p>{}",
                esc(&format!("{e:#}")),
                svg::line_chart(
                    "fc",
                    &LineChart {
                        title: "Forecast: response time against users".into(),
                        x_label: "users".into(),
                        y_label: "response time (ms)".into(),
                        ..Default::default()
                    }
                )
            );
        }
    }
    o.push_str("</section>\n");
}

fn accounting(o: &mut String, v: &View) {
    let h = &v.health;
    let n = |k: &str| h[k].as_u64().unwrap_or(0);
    let lost: Vec<(String, u64)> = h["lost"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    let lost_total: u64 = lost
        .iter()
        .filter(|(k, _)| {
            // the causes that lose a connection record (the others lose hellos or close lines)
            matches!(
                k.as_str(),
                "ring_buffer_full" | "state_evicted" | "table_full"
            )
        })
        .map(|(_, n)| n)
        .sum();
    let (accepted, reported, in_progress) = (n("accepted"), n("reported"), n("in_progress"));
    let balanced = accepted == reported + in_progress + lost_total + n("accepted_without_socket");
    let _ = write!(
        o,
        "<section id=\"accounting\"><h2>The tracer's own accounting</h2>\n<p>Every connection \
         the selected servers accepted (every server traced, not only the one above) is \
         reported, still in progress, or lost with its cause: accepted {accepted} = reported \
         {reported} + in progress {in_progress} + lost {lost_total}{}. <span class=\"{}\">{}</span></p>\n",
        match n("accepted_without_socket") {
            0 => String::new(),
            w => format!(" + accepted without a socket {w}"),
        },
        if balanced { "ok" } else { "bad" },
        if balanced {
            "It balances."
        } else {
            "It does not balance: please report this (the daemon's /healthz has the detail)."
        }
    );
    let mut groups = vec![(
        "connections".to_owned(),
        vec![
            accepted as f64,
            reported as f64,
            in_progress as f64,
            lost_total as f64,
        ],
    )];
    groups.extend(
        lost.iter()
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (format!("lost: {k}"), vec![0.0, 0.0, 0.0, *n as f64])),
    );
    o.push_str(&svg::bars(
        "ac",
        &Bars {
            title: "Accepted = reported + in progress + lost".into(),
            y_label: "connections".into(),
            members: vec![
                "accepted".into(),
                "reported".into(),
                "in progress".into(),
                "lost".into(),
            ],
            groups,
        },
    ));
    o.push_str("</section>\n");
}
