//! What `hstrace model` prints: per curve (one per `--secure-fraction`) and user count, the
//! throughput, mean response time overall and per class, web-server utilisation and the
//! bottleneck bounds, as a table, `hstrace.model/v1` JSON, or CSV.

use serde_json::{json, Map, Value};

use super::{
    knobs::Knobs,
    network::{Bounds, Discipline, IdleCurve, Network, Solution},
};
use crate::stage::RequestClass;

pub const MODEL_SCHEMA: &str = "hstrace.model/v1";

/// One curve: the network for one secure fraction, solved at the asked user counts.
#[derive(Debug, Clone)]
pub struct Curve {
    /// `--secure-fraction`'s p, or None (the measured mix)
    pub secure_fraction: Option<f64>,
    pub network: Network,
    pub points: Vec<(Solution, Bounds)>,
}

/// Everything the outputs show.
#[derive(Debug, Clone)]
pub struct Report {
    pub server: String,
    /// where the parameters came from (a file, a URL)
    pub source: String,
    pub knobs: Knobs,
    /// `--key-change`: the full handshake's `server_flight_1` mean, measured and with the
    /// new key
    pub key_change_s: Option<(f64, f64)>,
    /// with `--group`: a full handshake's service demand and waits for the client,
    /// measured (all groups) and with that group's stages
    pub group_s: Option<crate::group::GroupDemand>,
    /// which classes have stages measured (the others have no response time)
    pub measured: [bool; 3],
    /// the network of the measured mix (after `--hit-ratio`)
    pub base: Network,
    pub curves: Vec<Curve>,
}

/// A half-width for CSV: empty when solved (not simulated) or too few samples.
fn ci_text(v: Option<f64>) -> String {
    v.and_then(finite)
        .map(|v| v.to_string())
        .unwrap_or_default()
}

/// A number for JSON, None for NaN (too few samples to say).
fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// A class's predicted queue stages, by name (a simulation's; else empty).
fn queue_stages(s: &Solution, c: RequestClass) -> Value {
    Value::Object(
        s.queue_s[c.index()]
            .iter()
            .map(|(name, v)| (name.clone(), json!(v)))
            .collect::<Map<_, _>>(),
    )
}

/// Milliseconds for people, to the microsecond.
fn ms(v: f64) -> String {
    format!("{:.3}", v * 1e3)
}

impl Report {
    /// What `--key-change` measured and did, in one line (for stderr): the keys' signature
    /// costs, and the stage they change.
    pub fn key_change_line(&self) -> Option<String> {
        let (k, (measured, with_key)) = (self.knobs.key_change.as_ref()?, self.key_change_s?);
        let floored = if measured + k.added_s() < 0.0 {
            format!(
                ": floored at 0, the signatures differ by {} ms",
                ms(k.added_s().abs())
            )
        } else {
            String::new()
        };
        Some(format!(
            "{}: {} signs in {} ms, {} in {} ms: a full handshake's server_flight_1 {}{} ms ({} → {} ms{floored})",
            k.source.name(),
            k.from.name(),
            ms(k.from_sign_s),
            k.to.name(),
            ms(k.to_sign_s),
            if with_key >= measured { "+" } else { "-" },
            ms((with_key - measured).abs()),
            ms(measured),
            ms(with_key),
        ))
    }

    fn class_response(&self, s: &Solution, c: RequestClass) -> Option<f64> {
        self.measured[c.index()].then(|| s.class_response_s[c.index()])
    }

    pub fn to_json(&self) -> String {
        let classes = |f: &dyn Fn(RequestClass) -> Value| -> Value {
            Value::Object(
                RequestClass::ALL
                    .into_iter()
                    .map(|c| (c.name().to_owned(), f(c)))
                    .collect::<Map<_, _>>(),
            )
        };
        let mix = |net: &Network| classes(&|c| json!(net.mix[c.index()]));
        let curves: Vec<Value> = self
            .curves
            .iter()
            .map(|curve| {
                let net = &curve.network;
                let points: Vec<Value> = curve
                    .points
                    .iter()
                    .map(|(s, b)| {
                        let ci = s.ci95.as_ref();
                        json!({
                            "users": s.users,
                            "throughput_per_s": s.throughput_per_s,
                            "response_s": s.response_s,
                            "utilisation": s.utilisation,
                            "web_server_users": s.web_server_users,
                            "ci95": ci.map(|ci| json!({
                                "response_s": finite(ci.response_s),
                                "throughput_per_s": finite(ci.throughput_per_s),
                            })),
                            "classes": classes(&|c| json!({
                                "response_s": self.class_response(s, c),
                                "throughput_per_s": s.throughput_per_s * net.mix[c.index()],
                                "response_ci95_s": ci.filter(|_| self.measured[c.index()])
                                    .and_then(|ci| finite(ci.class_response_s[c.index()])),
                                "queue_s": queue_stages(s, c),
                            })),
                            "bounds": {
                                "throughput_max_per_s": b.throughput_max_per_s,
                                "response_min_s": b.response_min_s,
                            },
                        })
                    })
                    .collect();
                json!({
                    "secure_fraction": curve.secure_fraction,
                    "mix": mix(net),
                    "n_star": net.n_star(),
                    "points": points,
                })
            })
            .collect();
        let doc = json!({
            "schema": MODEL_SCHEMA,
            "server": self.server,
            "source": self.source,
            "think_time_s": self.knobs.think_s,
            "servers": self.knobs.servers,
            "discipline": self.knobs.discipline.name(),
            "discipline_from": self.knobs.discipline_from.name(),
            "because": self.knobs.because,
            "seed": (self.knobs.discipline == Discipline::EventLoopSim).then_some(self.knobs.seed),
            "knobs": {
                "hit_ratio": self.knobs.hit_ratio,
                "cpu_speedup": self.knobs.cpu_speedup,
                "other_cpus": self.knobs.other_cpus,
                "cpus_left": self.knobs.cpus_left,
                "cpu_share": self.knobs.cpu_share(),
                "scale_stage": self.knobs.scale_stages.iter()
                    .map(|(s, k)| (s.clone(), json!(k))).collect::<Map<_, _>>(),
                "overhead_s": self.knobs.overhead_s,
                "sleep_cpu_s": self.knobs.sleep_cpu_s,
                "wakeup_s": self.knobs.wakeup.longest(),
                "wakeup_after_idle": self.knobs.wakeup.points().iter()
                    .map(|&(idle, wake)| json!({"idle_s": idle, "wakeup_s": wake}))
                    .collect::<Vec<_>>(),
                "cold_start_after": curve_json(&self.knobs.cold_start.record),
                "cold_start_handshake_after": curve_json(&self.knobs.cold_start.handshake),
                "cold_start_from": self.knobs.cold_start_from.name(),
                "cold_start_measured": self.knobs.cold_start_measured,
                "group": self.knobs.group.as_ref().zip(self.group_s)
                    .map(|(g, d)| json!({
                        "group": g,
                        "full_service_s": {"measured": d.service_s.0, "with_group": d.service_s.1},
                        // null with_group: the parameters hold no per-group delay stages,
                        // and the waits stay as measured
                        "full_delay_s": {
                            "measured": d.delay_s.0,
                            "with_group": d.delays_by_group.then_some(d.delay_s.1),
                        },
                        "delays_from": if d.delays_by_group { "group" } else { "window" },
                    })),
                "key_change": self.knobs.key_change.as_ref().zip(self.key_change_s)
                    .map(|(k, (measured, with_key))| json!({
                        "from": k.from.name(),
                        "to": k.to.name(),
                        "sign_s": {k.from.name(): k.from_sign_s, k.to.name(): k.to_sign_s},
                        "measured_by": k.source.name(),
                        "server_flight_1_added_s": with_key - measured,
                        "server_flight_1_s": {"measured": measured, "with_key": with_key},
                    })),
            },
            "mix": mix(&self.base),
            "measured": classes(&|c| json!(self.measured[c.index()])),
            "demand_s": classes(&|c| json!({
                "service": self.base.service_s[c.index()],
                "delay": self.base.delay_s[c.index()],
            })),
            "n_star": self.base.n_star(),
            "curves": curves,
        });
        let mut out = serde_json::to_string_pretty(&doc).expect("a JSON value serialises");
        out.push('\n');
        out
    }

    /// One row per curve × user count × class, and an `all` row (the whole mix; its
    /// bounds). A class row's throughput and utilisation are that class's part.
    pub fn to_csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let _ = w.write_record([
            "secure_fraction",
            "users",
            "class",
            "share",
            "throughput_per_s",
            "response_s",
            "utilisation",
            "throughput_max_per_s",
            "response_min_s",
            "response_ci95_s",
        ]);
        for curve in &self.curves {
            let net = &curve.network;
            let p = curve
                .secure_fraction
                .map(|p| p.to_string())
                .unwrap_or_default();
            for (s, b) in &curve.points {
                let _ = w.write_record([
                    p.clone(),
                    s.users.to_string(),
                    "all".into(),
                    "1".into(),
                    s.throughput_per_s.to_string(),
                    s.response_s.to_string(),
                    s.utilisation.to_string(),
                    b.throughput_max_per_s.to_string(),
                    b.response_min_s.to_string(),
                    ci_text(s.ci95.map(|ci| ci.response_s)),
                ]);
                for c in RequestClass::ALL {
                    let i = c.index();
                    let x = s.throughput_per_s * net.mix[i];
                    let _ = w.write_record([
                        p.clone(),
                        s.users.to_string(),
                        c.name().into(),
                        net.mix[i].to_string(),
                        x.to_string(),
                        self.class_response(s, c)
                            .map(|r| r.to_string())
                            .unwrap_or_default(),
                        (x * net.service_s[i] / f64::from(net.servers)).to_string(),
                        String::new(),
                        String::new(),
                        ci_text(
                            s.ci95
                                .filter(|_| self.measured[i])
                                .map(|ci| ci.class_response_s[i]),
                        ),
                    ]);
                }
            }
        }
        String::from_utf8(w.into_inner().unwrap_or_default()).expect("CSV is UTF-8")
    }

    pub fn text(&self) -> String {
        let k = &self.knobs;
        let mut s = format!(
            "server {} ({})\nthink time {}; web server: {}\n",
            self.server,
            self.source,
            k.think_time(),
            k.web_server()
        );
        let mut what_if = Vec::new();
        if let Some(r) = k.hit_ratio {
            what_if.push(format!("hit ratio {r}"));
        }
        if k.cpu_speedup != 1.0 {
            what_if.push(format!("CPU {}x", k.cpu_speedup));
        }
        for (st, f) in &k.scale_stages {
            what_if.push(format!("{st} x{f}"));
        }
        if let (Some(g), Some(d)) = (&k.group, self.group_s) {
            let waits = match d.delays_by_group {
                true => format!(
                    ", its waits for the client {} → {} ms",
                    ms(d.delay_s.0),
                    ms(d.delay_s.1)
                ),
                false => format!(
                    "; its waits for the client stay as measured, {} ms: these parameters hold no per-group delay stages (an older hstrace wrote them), so the group's own client work is not in the forecast",
                    ms(d.delay_s.0)
                ),
            };
            what_if.push(format!(
                "every full handshake on {g} (its service stages {} → {} ms{waits})",
                ms(d.service_s.0),
                ms(d.service_s.1)
            ));
        }
        if let (Some(kc), Some((measured, with_key))) = (&k.key_change, self.key_change_s) {
            what_if.push(format!(
                "key {} → {} (a full handshake's server_flight_1 {} → {} ms)",
                kc.from.name(),
                kc.to.name(),
                ms(measured),
                ms(with_key)
            ));
        }
        if k.overhead_s > 0.0 {
            what_if.push(format!(
                "{} ms of CPU a request outside the stages",
                ms(k.overhead_s)
            ));
        }
        if k.sleep_cpu_s > 0.0 {
            what_if.push(format!(
                "{} ms of CPU each time the worker sleeps and wakes",
                ms(k.sleep_cpu_s)
            ));
        }
        what_if.extend(curve_words(&k.wakeup, "to wake the worker", "after idle"));
        what_if.extend(curve_words(
            &k.cold_start.record,
            "of CPU a visit run cold",
            "since it last ran",
        ));
        what_if.extend(curve_words(
            &k.cold_start.handshake,
            "of CPU a full handshake's first flight run cold",
            "since it last ran",
        ));
        if !what_if.is_empty() {
            s.push_str(&format!("what if: {}\n", what_if.join(", ")));
        }
        s.push_str(&format!(
            "\n{:<12} {:>6} {:>11} {:>10}\n",
            "class", "share", "service ms", "delay ms"
        ));
        let b = &self.base;
        for c in RequestClass::ALL {
            let i = c.index();
            let (sv, dl) = if self.measured[i] {
                (ms(b.service_s[i]), ms(b.delay_s[i]))
            } else {
                ("-".into(), "-".into())
            };
            s.push_str(&format!(
                "{:<12} {:>6.3} {sv:>11} {dl:>10}\n",
                c.name(),
                b.mix[i]
            ));
        }
        for curve in &self.curves {
            let net = &curve.network;
            s.push('\n');
            if let Some(p) = curve.secure_fraction {
                s.push_str(&format!(
                    "secure fraction {p} (mix {:.3} / {:.3} / {:.3}): ",
                    net.mix[0], net.mix[1], net.mix[2]
                ));
            }
            s.push_str(&format!(
                "D = {} ms (web server {} ms), N* = {:.1}\n",
                ms(net.demand()),
                ms(net.service_demand()),
                net.n_star()
            ));
            let simulated = curve.points.iter().any(|(p, _)| p.ci95.is_some());
            if simulated {
                s.push_str("simulated: ± is the 95 % confidence half-width of R\n");
            }
            s.push_str(&format!(
                "{:>7} {:>10} {:>10}{} {:>10} {:>11} {:>10} {:>6} {:>10} {:>10}\n",
                "users",
                "X /s",
                "R ms",
                if simulated {
                    format!(" {:>7}", "± ms")
                } else {
                    String::new()
                },
                "tls_full",
                "tls_resumed",
                "plain",
                "util",
                "X max /s",
                "R min ms"
            ));
            for (p, bd) in &curve.points {
                let class =
                    |c: RequestClass| self.class_response(p, c).map_or_else(|| "-".to_owned(), ms);
                let ci = match (simulated, p.ci95) {
                    (true, Some(ci)) if ci.response_s.is_finite() => {
                        format!(" {:>7}", ms(ci.response_s))
                    }
                    (true, _) => format!(" {:>7}", "-"),
                    (false, _) => String::new(),
                };
                s.push_str(&format!(
                    "{:>7} {:>10.3} {:>10}{ci} {:>10} {:>11} {:>10} {:>6.3} {:>10.3} {:>10}\n",
                    p.users,
                    p.throughput_per_s,
                    ms(p.response_s),
                    class(RequestClass::TlsFull),
                    class(RequestClass::TlsResumed),
                    class(RequestClass::Plain),
                    p.utilisation,
                    bd.throughput_max_per_s,
                    ms(bd.response_min_s)
                ));
            }
        }
        s
    }
}
/// A curve's points as the JSON's knobs give them: `[{"since_s", "cpu_s"}]`.
fn curve_json(curve: &IdleCurve) -> Vec<serde_json::Value> {
    (curve.points().iter())
        .map(|&(since, cpu)| json!({"since_s": since, "cpu_s": cpu}))
        .collect()
}

/// A curve by idle in a few words (None: none): `3 ms to wake the worker`, or
/// `0.05 ms / 0.3 ms to wake the worker after idle 1 ms / 200 ms`.
fn curve_words(curve: &IdleCurve, what: &str, after: &str) -> Option<String> {
    let join = |f: &dyn Fn(&(f64, f64)) -> f64| {
        curve
            .points()
            .iter()
            .map(|p| format!("{} ms", ms(f(p))))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    match curve.points() {
        [] => None,
        [(_, t)] if *t == 0.0 => None,
        [(_, t)] => Some(format!("{} ms {what}", ms(*t))),
        _ => Some(format!(
            "{} {what} {after} {}",
            join(&|p| p.1),
            join(&|p| p.0)
        )),
    }
}
