//! Where the model's parameters come from: a `hstrace.parameters/v1` document (a file, or a
//! running daemon's `/api/v1/parameters`) or PromQL over the daemons' metrics in the user's
//! Prometheus. Each gives, per request class, its share of requests and the mean of every
//! stage it has, with the stage's class (service, queue, delay).

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use crate::{
    cold_start::ColdStart,
    http_client,
    params::{v1, Parameters},
    stage::{Kind, RequestClass, Stage, StageClass},
};

/// What the model takes of a measured stage: a service stage's on-CPU time where it was
/// measured (its demand: the rest of its time is waiting for a CPU, which the model
/// predicts, or blocked), else its mean; any other stage's mean.
pub(crate) fn demand_s(class: StageClass, mean_s: f64, cpu_mean_s: Option<f64>) -> f64 {
    match (class, cpu_mean_s) {
        (StageClass::Service, Some(cpu)) if cpu >= 0.0 => cpu,
        _ => mean_s,
    }
}

/// One stage's mean, as measured (or transcribed); a service stage's on-CPU part where
/// it was measured (`demand_s`).
#[derive(Debug, Clone, PartialEq)]
pub struct StageMean {
    /// a stage of hstrace's table, or, in a hand-written file, a stage it has no name for
    /// (seed 002's SSLv2 `server_finish`)
    pub name: String,
    pub class: StageClass,
    pub mean_s: f64,
    /// a queue stage's messages read by a server whose CPU had been idle since its last
    /// service stage (`wait_after_idle`): how many, and their mean wait, the server waking
    /// up to them; None where the source does not split it
    pub idle_wait: Option<(u64, f64)>,
}

/// One request class of a server.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassInput {
    pub class: RequestClass,
    /// the class's part of the server's requests
    pub share: f64,
    /// its requests a second over the window (None where the source does not say): how
    /// long each of its stages had been away from the CPU when it ran
    pub rate_per_s: Option<f64>,
    /// empty when the class was not seen
    pub stages: Vec<StageMean>,
}

impl ClassInput {
    pub fn measured(&self) -> bool {
        !self.stages.is_empty()
    }
}

/// One server's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInput {
    pub server: String,
    /// classified connections in the window (failed ones are in no class): weighs the
    /// ports of a merged server, picks the default server
    pub connections: f64,
    /// `RequestClass::ALL` order
    pub classes: [ClassInput; 3],
    /// the server's processes' CPU per connection outside its service stages, seconds
    /// (`cpu.outside_stages_s`; None where the parameters do not have it)
    pub outside_stages_s: Option<f64>,
    /// the server thread's CPU across one wait between service stages (`cpu.per_wait_s`):
    /// at low load, what one sleep of an event loop costs
    pub per_wait_s: Option<f64>,
    /// the share of the window the server's processes were on CPU (its connections' rate
    /// × their CPU per connection; None without them)
    pub busy: Option<f64>,
    /// how the server holds its connections (None where the parameters do not say)
    pub architecture: Option<v1::Architecture>,
    /// the host's CPUs online (the document's `host.cpus`)
    pub cpus: Option<u32>,
    /// the CPUs the servers' processes may run on (`host.server_cpus`)
    pub server_cpus: Option<u32>,
    /// how many of those CPUs other work kept busy (`host.other_cpus`)
    pub other_cpus: Option<f64>,
    /// the cold start measured on a CPU the servers run on (`host.cold_start`)
    pub cold_start: Option<ColdStart>,
    /// why there is none, where the document says (`host.cold_start_absent`)
    pub cold_start_absent: Option<v1::ColdStartAbsent>,
    /// a message's wait for a call that woke the server's CPU, by how long the CPU had
    /// slept (`wakeup_after_idle`, shortest first)
    pub wakeup_after_idle: Vec<v1::WakeupAfter>,
    /// the full handshakes by key-exchange group (`key_exchange`; empty where the source
    /// does not say)
    pub key_exchange: Vec<v1::GroupParams>,
    /// read from Prometheus, which carries neither
    pub from_prometheus: bool,
}

/// The servers of a `hstrace.parameters/v1` document; `origin` names it in errors. What
/// the type cannot say is checked here: shares between 0 and 1, finite means that are not
/// negative, and each stage hstrace knows in the class its stage table gives it.
pub fn parse_parameters(text: &str, origin: &str) -> Result<Vec<ServerInput>> {
    let doc = Parameters::from_json(text, origin)?;
    let host = doc.host.as_ref();
    let cpus = host.map(|h| h.cpus).filter(|&c| c > 0);
    let server_cpus = host.and_then(|h| h.server_cpus).filter(|&c| c > 0);
    let other_cpus = host
        .and_then(|h| h.other_cpus)
        .filter(|o| o.is_finite() && *o >= 0.0);
    // (checked where the model takes it: a bad one costs only itself)
    let cold_start = host.and_then(|h| h.cold_start.clone());
    let cold_start_absent = host.and_then(|h| h.cold_start_absent);
    doc.servers
        .iter()
        .map(|s| {
            Ok(ServerInput {
                cpus,
                server_cpus,
                other_cpus,
                cold_start: cold_start.clone(),
                cold_start_absent,
                ..server_input(s, origin)?
            })
        })
        .collect()
}

fn server_input(s: &v1::ServerParams, origin: &str) -> Result<ServerInput> {
    let server = &s.server;
    let class = |class: RequestClass| -> Result<ClassInput> {
        let name = class.name();
        let c = s.classes.get(class);
        if !(0.0..=1.0).contains(&c.share) {
            bail!(
                "{origin}: {server} {name}'s share {} is not between 0 and 1",
                c.share
            );
        }
        let stages = c
            .stages
            .0
            .iter()
            .map(|(stage, v)| {
                let what = || format!("{origin}: {server} {name} stage {stage}");
                if let Some(known) = Stage::from_name(stage) {
                    if known.class() != v.class {
                        bail!(
                            "{}: hstrace's stage table makes it {}, not {}",
                            what(),
                            known.class().name(),
                            v.class.name()
                        );
                    }
                }
                if v.mean_s < 0.0 {
                    bail!("{}: mean_s {} is negative", what(), v.mean_s);
                }
                Ok(StageMean {
                    name: stage.clone(),
                    class: v.class,
                    mean_s: demand_s(v.class, v.mean_s, v.cpu_mean_s),
                    idle_wait: v
                        .wait_after_idle
                        .filter(|a| a.mean_s >= 0.0)
                        .map(|a| (a.count, a.mean_s)),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ClassInput {
            class,
            share: c.share,
            rate_per_s: Some(c.rate_per_s).filter(|r| r.is_finite() && *r > 0.0),
            stages,
        })
    };
    let outside_stages_s = s.cpu.outside_stages_s;
    if let Some(x) = outside_stages_s.filter(|x| *x < 0.0) {
        bail!("{origin}: {server}'s cpu.outside_stages_s {x} is negative");
    }
    let per_wait_s = s.cpu.per_wait_s.filter(|x| x.is_finite() && *x >= 0.0);
    let rate: f64 = s.classes.iter().map(|(_, c)| c.rate_per_s).sum();
    let busy = s
        .cpu
        .per_connection_s
        .filter(|_| rate > 0.0)
        .map(|per| (per * rate).clamp(0.0, 1.0));
    Ok(ServerInput {
        server: server.clone(),
        // the shares are of the classified connections: without the failed ones
        connections: s.connections.saturating_sub(s.failed) as f64,
        classes: [
            class(RequestClass::TlsFull)?,
            class(RequestClass::TlsResumed)?,
            class(RequestClass::Plain)?,
        ],
        outside_stages_s,
        per_wait_s,
        busy,
        architecture: s.architecture,
        cpus: None,
        server_cpus: None,
        other_cpus: None,
        cold_start: None,
        cold_start_absent: None,
        wakeup_after_idle: s
            .wakeup_after_idle
            .iter()
            .filter(|w| w.idle_s.is_finite() && w.idle_s >= 0.0)
            .filter(|w| w.mean_s.is_finite() && w.mean_s >= 0.0)
            .copied()
            .collect(),
        key_exchange: s
            .key_exchange
            .iter()
            .filter(|g| g.service_s.is_finite() && g.service_s >= 0.0)
            .cloned()
            .collect(),
        from_prometheus: false,
    })
}

/// The server named `want`, or the one with the most connections; its shares checked
/// (they sum to 1) and made exact.
pub fn pick(servers: Vec<ServerInput>, want: Option<&str>, origin: &str) -> Result<ServerInput> {
    let names = || {
        servers
            .iter()
            .map(|s| s.server.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if servers.is_empty() {
        bail!("{origin} has no servers: the daemon has seen no connections in its window (drive some traffic, or a longer --window)");
    }
    let chosen = match want {
        Some(w) if w.contains(',') => {
            let mut parts = Vec::new();
            for name in w.split(',').map(str::trim) {
                let i = servers.iter().position(|s| s.server == name).ok_or_else(|| {
                    anyhow!(
                        "{origin} has no server {name:?}: give --server one or more (comma-separated) of: {}",
                        names()
                    )
                })?;
                parts.push(servers[i].clone());
            }
            return check_shares(merge(parts, origin)?, origin);
        }
        Some(w) => servers.iter().position(|s| s.server == w).ok_or_else(|| {
            anyhow!(
                "{origin} has no server {w:?}: give --server one of: {}",
                names()
            )
        })?,
        None => {
            // the first of those with the most connections
            let most = servers.iter().map(|s| s.connections).fold(0.0, f64::max);
            servers
                .iter()
                .position(|s| s.connections == most)
                .expect("the maximum is one of them")
        }
    };
    let s = servers
        .into_iter()
        .nth(chosen)
        .expect("an index of servers");
    check_shares(s, origin)
}

/// Several listening ports of one server as one web server (nginx:443 and nginx:80 share
/// the same workers' CPU): its connections summed, each class's share and stage means
/// weighted by that class's connections on each port.
pub fn merge(parts: Vec<ServerInput>, origin: &str) -> Result<ServerInput> {
    if let Some(p) = parts.iter().find(|p| p.connections <= 0.0) {
        bail!(
            "{origin}: server {} gives no \"connections\": merging servers weighs each by its connections",
            p.server
        );
    }
    let connections: f64 = parts.iter().map(|p| p.connections).sum();
    let server = parts
        .iter()
        .map(|p| p.server.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let classes = RequestClass::ALL.map(|class| {
        let i = class.index();
        // (connections of this class, its stages) on each port
        let of: Vec<(f64, &[StageMean])> = parts
            .iter()
            .map(|p| {
                (
                    p.connections * p.classes[i].share,
                    p.classes[i].stages.as_slice(),
                )
            })
            .filter(|(n, stages)| *n > 0.0 && !stages.is_empty())
            .collect();
        let mut stages: Vec<StageMean> = Vec::new();
        for (_, ss) in &of {
            for m in ss.iter() {
                if stages.iter().all(|x| x.name != m.name) {
                    stages.push(StageMean {
                        mean_s: 0.0,
                        idle_wait: None,
                        ..m.clone()
                    });
                }
            }
        }
        for m in &mut stages {
            let (mut sum, mut weight) = (0.0, 0.0);
            // the idle waits by their own counts, over the ports that split them
            let (mut idle_sum, mut idle_n) = (0.0, 0);
            for (n, ss) in &of {
                if let Some(x) = ss.iter().find(|x| x.name == m.name) {
                    sum += n * x.mean_s;
                    weight += n;
                    if let Some((k, mean)) = x.idle_wait {
                        idle_sum += k as f64 * mean;
                        idle_n += k;
                    }
                }
            }
            m.mean_s = sum / weight;
            m.idle_wait = (idle_n > 0).then(|| (idle_n, idle_sum / idle_n as f64));
        }
        ClassInput {
            class,
            share: of.iter().map(|(n, _)| n).sum::<f64>() / connections,
            // the ports' connections share the server's CPUs: their rates add up
            rate_per_s: parts
                .iter()
                .filter(|p| p.classes[i].measured())
                .map(|p| p.classes[i].rate_per_s)
                .sum::<Option<f64>>()
                .filter(|&r| r > 0.0),
            stages,
        }
    });
    // each connection pays its own port's CPU outside the stages (all ports, or unknown)
    let outside_stages_s = parts
        .iter()
        .map(|p| p.outside_stages_s.map(|o| o * p.connections))
        .sum::<Option<f64>>()
        .map(|sum| sum / connections);
    // one loop's cost of a sleep, from the ports that measured it (a plain port's
    // connections have no wait between two service stages); the ports' CPU adds up
    let measured: Vec<(f64, f64)> = parts
        .iter()
        .filter_map(|p| Some((p.per_wait_s?, p.connections)))
        .collect();
    let weight: f64 = measured.iter().map(|(_, n)| n).sum();
    let per_wait_s =
        (weight > 0.0).then(|| measured.iter().map(|(w, n)| w * n).sum::<f64>() / weight);
    let busy = parts.iter().map(|p| p.busy).sum::<Option<f64>>();
    Ok(ServerInput {
        server,
        connections,
        classes,
        outside_stages_s,
        per_wait_s,
        busy,
        architecture: merged_architecture(&parts),
        cpus: parts.iter().find_map(|p| p.cpus),
        server_cpus: parts.iter().find_map(|p| p.server_cpus),
        other_cpus: parts.iter().find_map(|p| p.other_cpus),
        cold_start: parts.iter().find_map(|p| p.cold_start.clone()),
        cold_start_absent: parts.iter().find_map(|p| p.cold_start_absent),
        wakeup_after_idle: v1::WakeupAfter::pooled(parts.iter().flat_map(|p| &p.wakeup_after_idle)),
        // (by port: one port's groups, not pooled; --group then names the port)
        key_exchange: match parts.as_slice() {
            [one] => one.key_exchange.clone(),
            _ => Vec::new(),
        },
        from_prometheus: parts.iter().any(|p| p.from_prometheus),
    })
}

/// The ports of one server: one architecture when every port measured the same kind (their
/// processes are mostly the same: the larger count, the most at once, the most threads);
/// unknown when they disagree; None when a port has none.
fn merged_architecture(parts: &[ServerInput]) -> Option<v1::Architecture> {
    let all: Vec<v1::Architecture> = parts
        .iter()
        .map(|p| p.architecture)
        .collect::<Option<_>>()?;
    let first = *all.first()?;
    Some(v1::Architecture {
        kind: if all.iter().all(|a| a.kind == first.kind) {
            first.kind
        } else {
            v1::ArchitectureKind::Unknown
        },
        processes: all.iter().map(|a| a.processes).max().unwrap_or(0),
        most_at_once: all.iter().map(|a| a.most_at_once).max().unwrap_or(0),
        threads: all.iter().filter_map(|a| a.threads).max(),
    })
}

/// The shares checked (they sum to 1) and made exact; a class with a share has stages.
fn check_shares(mut s: ServerInput, origin: &str) -> Result<ServerInput> {
    let total: f64 = s.classes.iter().map(|c| c.share).sum();
    if total == 0.0 {
        bail!(
            "{origin}: server {} has no classified connections (only failed ones, or none): pick another with --server, or measure longer",
            s.server
        );
    }
    if (total - 1.0).abs() > 1e-3 {
        bail!(
            "{origin}: server {}'s class shares sum to {total}, not 1",
            s.server
        );
    }
    for c in &mut s.classes {
        c.share /= total;
        if c.share > 0.0 && !c.measured() {
            bail!(
                "{origin}: server {} gives {} a share of {} but no stages",
                s.server,
                c.class.name(),
                c.share
            );
        }
    }
    Ok(s)
}

/// A parameters file.
pub fn from_file(path: &str, want: Option<&str>) -> Result<ServerInput> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read --params {path}"))?;
    pick(parse_parameters(&text, path)?, want, path)
}

/// A running daemon (`hstrace serve`) at `base` (http://HOST:PORT).
pub fn from_daemon(base: &str, want: Option<&str>) -> Result<ServerInput> {
    let text = http_client::get(base, "/api/v1/parameters", http_client::Server::Daemon)?;
    let origin = format!("{base}/api/v1/parameters");
    pick(parse_parameters(&text, &origin)?, want, &origin)
}

/// Percent-encoding for a URL query value (everything but RFC 3986's unreserved bytes).
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A PromQL label value in double quotes.
fn label_value(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// One instant vector: each element's labels and value (NaN ones, 0/0, are left out).
fn prom_query(base: &str, query: &str) -> Result<Vec<(BTreeMap<String, String>, f64)>> {
    let path = format!("/api/v1/query?query={}", url_encode(query));
    let (_, body) = http_client::get_any(base, &path, http_client::Server::Prometheus)?;
    let doc: Value = serde_json::from_str(&body).map_err(|_| {
        anyhow!("{base} did not answer a Prometheus query with JSON: is it a Prometheus?")
    })?;
    if doc.get("status").and_then(Value::as_str) != Some("success") {
        bail!(
            "Prometheus at {base} refused {query}: {}",
            doc.get("error")
                .and_then(Value::as_str)
                .unwrap_or("no reason given")
        );
    }
    let result = doc
        .pointer("/data/result")
        .and_then(Value::as_array)
        .ok_or_else(|| anyhow!("Prometheus at {base} answered no vector for {query}"))?;
    let mut out = Vec::new();
    for r in result {
        let labels = r
            .get("metric")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        // "value": [time, "1.5"]
        let value = r
            .pointer("/value/1")
            .and_then(Value::as_str)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN);
        if value.is_finite() {
            out.push((labels, value));
        }
    }
    Ok(out)
}

/// The stage means and class shares over the last `window_s` seconds, summed across every
/// host's daemon, from the Prometheus at `base`. `want`: the server label (default: the
/// one with the most connections in the window).
pub fn from_prometheus(base: &str, want: Option<&str>, window_s: u64) -> Result<ServerInput> {
    let w = format!("{window_s}s");
    let names: Vec<String> = match want {
        Some(s) => s.split(',').map(|n| n.trim().to_owned()).collect(),
        None => vec![{
            let v = prom_servers(base, &w)?;
            let most = v.iter().map(|(_, x)| *x).fold(0.0, f64::max);
            v.into_iter()
                .find(|(_, x)| *x == most)
                .map(|(s, _)| s)
                .ok_or_else(|| anyhow!("Prometheus at {base} has no hstrace_connections_total in the last {w}: is it scraping hstrace serve? (or a longer --window)"))?
        }],
    };
    let origin = format!("Prometheus at {base}");
    let mut parts = names
        .into_iter()
        .map(|server| prom_server(base, server, &w))
        .collect::<Result<Vec<_>>>()?;
    let input = match parts.len() {
        1 => parts.pop().expect("one"),
        _ => merge(parts, &origin)?,
    };
    check_shares(input, &origin)
}

/// The servers with connections in the window `w`, and how many (failed ones included).
fn prom_servers(base: &str, w: &str) -> Result<Vec<(String, f64)>> {
    let q = format!(
        "sum by (process_executable_name, server_port) (increase(hstrace_connections_total[{w}]))"
    );
    Ok(prom_query(base, &q)?
        .into_iter()
        .filter(|(_, x)| *x > 0.0)
        .filter_map(|(l, x)| {
            let name = format!(
                "{}:{}",
                l.get("process_executable_name")?,
                l.get("server_port")?
            );
            Some((name, x))
        })
        .collect())
}

/// The label matchers of a server named "comm:port", as the parameters name it.
fn server_selector(server: &str) -> Result<String> {
    match server.rsplit_once(':') {
        Some((comm, port)) if !comm.is_empty() && port.parse::<u16>().is_ok() => Ok(format!(
            "process_executable_name={},server_port={}",
            label_value(comm),
            label_value(port)
        )),
        _ => bail!("--server {server:?} is not comm:port (e.g. nginx:443)"),
    }
}

/// One server's shares and stage means, summed across hosts, over the window `w`.
fn prom_server(base: &str, server: String, w: &str) -> Result<ServerInput> {
    let sel = server_selector(&server)?;
    let shares_q = format!("sum by (kind) (increase(hstrace_connections_total{{{sel}}}[{w}]))");
    let mut counts = [0.0; 3];
    for (labels, v) in prom_query(base, &shares_q)? {
        let kind = labels.get("kind").map(String::as_str).unwrap_or("");
        let class = Kind::ALL
            .into_iter()
            .find(|k| k.name() == kind)
            .and_then(Kind::class);
        if let Some(c) = class {
            counts[c.index()] += v;
        }
    }
    let total: f64 = counts.iter().sum();
    if total <= 0.0 {
        // say which servers there are (or that this one only failed)
        let mut names: Vec<String> = prom_servers(base, w)?.into_iter().map(|(s, _)| s).collect();
        if names.contains(&server) {
            bail!("Prometheus at {base}: server {server:?} has only failed connections in the last {w}: pick another with --server, or a longer --window");
        }
        names.sort_unstable();
        let known = if names.is_empty() {
            "none has any (is it scraping hstrace serve?)".to_owned()
        } else {
            format!(
                "give --server one or more (comma-separated) of: {}",
                names.join(", ")
            )
        };
        bail!("Prometheus at {base} has no connections of server {server:?} in the last {w}: {known}, or a longer --window");
    }
    let by = "by (stage, stage_class, kind)";
    let means_q = format!(
        "sum {by} (rate(hstrace_stage_duration_seconds_sum{{{sel}}}[{w}])) / sum {by} (rate(hstrace_stage_duration_seconds_count{{{sel}}}[{w}]))"
    );
    let mut stages: [Vec<StageMean>; 3] = Default::default();
    for (labels, mean_s) in prom_query(base, &means_q)? {
        let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
        let Some(class) = Kind::ALL
            .into_iter()
            .find(|k| k.name() == get("kind"))
            .and_then(Kind::class)
        else {
            continue; // failed connections are counted, not a class
        };
        let Some(stage) = Stage::from_name(get("stage")) else {
            continue;
        };
        stages[class.index()].push(StageMean {
            name: stage.name().to_owned(),
            class: stage.class(),
            mean_s,
            idle_wait: None,
        });
    }
    // the stages' means: the daemons' metrics hold each service stage's CPU in a series
    // of its own, which Prometheus extrapolates apart from the stage's count, so a
    // service stage's demand is its whole mean here (its on-CPU part from a parameters
    // document or a daemon)
    for s in &mut stages {
        // wire order, as the parameters JSON has them
        s.sort_by_key(|m| Stage::from_name(&m.name).map(Stage::index));
    }
    let [f, r, p] = stages;
    let [cf, cr, cp] = counts;
    Ok(ServerInput {
        server,
        connections: total,
        classes: [
            (RequestClass::TlsFull, cf, f),
            (RequestClass::TlsResumed, cr, r),
            (RequestClass::Plain, cp, p),
        ]
        .map(|(class, n, stages)| ClassInput {
            class,
            share: n / total,
            rate_per_s: None,
            stages,
        }),
        // the daemons export no per-process CPU series, nor the architecture
        outside_stages_s: None,
        per_wait_s: None,
        busy: None,
        architecture: None,
        cpus: None,
        server_cpus: None,
        other_cpus: None,
        cold_start: None,
        cold_start_absent: None,
        wakeup_after_idle: Vec::new(),
        key_exchange: Vec::new(),
        from_prometheus: true,
    })
}

/// examples/seed002-parameters.json: seed 002's Figs. 4–7 (Lin, Wong, Kou: one user,
/// Sun Ultra 10, SSLeay 0.6.6b SSLv2, RSA-512, RC4, a 1 KB page); the tests' fixture.
#[cfg(test)]
pub fn seed_parameters() -> ServerInput {
    let text = include_str!("../../examples/seed002-parameters.json");
    pick(parse_parameters(text, "seed").unwrap(), None, "seed").unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_the_daemon_writes() {
        let text = include_str!("../../examples/parameters.json");
        let servers = parse_parameters(text, "examples/parameters.json").unwrap();
        // by default, the server with the most connections: the TLS one
        let tls = pick(servers.clone(), None, "x").unwrap();
        assert_eq!(tls.server, "nginx:28443");
        assert_eq!(tls.classes[RequestClass::TlsFull.index()].share, 0.5);
        assert!(tls.classes[RequestClass::TlsResumed.index()].measured());
        let s = pick(servers, Some("nginx:28080"), "x").unwrap();
        let plain = &s.classes[RequestClass::Plain.index()];
        assert_eq!(plain.share, 1.0);
        assert!(plain.measured());
        assert!(!s.classes[0].measured());
        // queue stages are read (and later left out of the model)
        assert!(plain.stages.iter().any(|m| m.class == StageClass::Queue));
    }

    #[test]
    fn two_ports_of_one_server_merge_by_connections() {
        let text = include_str!("../../examples/parameters.json");
        let servers = parse_parameters(text, "f").unwrap();
        let both = pick(servers.clone(), Some("nginx:28443, nginx:28080"), "f").unwrap();
        assert_eq!(both.server, "nginx:28443,nginx:28080");
        assert_eq!(both.connections, 20.0);
        // 16 TLS connections, half resumed; 4 plain
        let shares = both.classes.each_ref().map(|c| c.share);
        assert_eq!(shares, [0.4, 0.4, 0.2]);
        let alone = pick(servers.clone(), Some("nginx:28443"), "f").unwrap();
        assert_eq!(both.classes[0].stages, alone.classes[0].stages);
        let e = pick(servers, Some("nginx:28443,nginx:1"), "f").unwrap_err();
        assert!(e.to_string().contains("no server \"nginx:1\""), "{e}");
    }

    #[test]
    fn merging_weighs_ports_by_classified_connections() {
        // 4 full, 2 failed on one port; 2 plain on the other: 4 : 2, not 6 : 2
        let doc = r#"{"schema":"hstrace.parameters/v1","servers":[
          {"server":"a:1","connections":6,"failed":2,"classes":{
            "tls_full":{"share":1,"stages":{"response":{"class":"service","mean_s":0.002}}},
            "tls_resumed":{"share":0,"stages":{}},"plain":{"share":0,"stages":{}}}},
          {"server":"a:2","connections":2,"failed":0,"classes":{
            "tls_full":{"share":0,"stages":{}},"tls_resumed":{"share":0,"stages":{}},
            "plain":{"share":1,"stages":{"response":{"class":"service","mean_s":0.001}}}}}]}"#;
        let servers = parse_parameters(doc, "f").unwrap();
        let both = pick(servers, Some("a:1,a:2"), "f").unwrap();
        let shares = both.classes.each_ref().map(|c| c.share);
        assert_eq!(shares, [4.0 / 6.0, 0.0, 2.0 / 6.0]);
    }

    /// Under load a service stage's wall time holds its wait for a CPU (Apache prefork at
    /// 128 users: a first flight of 10.5 ms, 4.2 ms of it on the CPU): its demand is the
    /// on-CPU part, where measured; a delay's mean is a delay whatever CPU it shows.
    #[test]
    fn a_service_stages_demand_is_its_on_cpu_time() {
        let doc = r#"{"schema":"hstrace.parameters/v1","servers":[
          {"server":"a:1","connections":4,"failed":0,"classes":{
            "tls_full":{"share":1,"stages":{
              "server_flight_1":{"class":"service","mean_s":0.0105,"cpu_mean_s":0.0042},
              "wait_client_flight_2":{"class":"delay","mean_s":0.001,"cpu_mean_s":0.0001},
              "response":{"class":"service","mean_s":0.0002}}},
            "tls_resumed":{"share":0,"stages":{}},"plain":{"share":0,"stages":{}}}}]}"#;
        let s = pick(parse_parameters(doc, "f").unwrap(), None, "f").unwrap();
        let mean = |name: &str| {
            s.classes[0]
                .stages
                .iter()
                .find(|m| m.name == name)
                .map(|m| m.mean_s)
        };
        assert_eq!(mean("server_flight_1"), Some(0.0042));
        assert_eq!(mean("wait_client_flight_2"), Some(0.001));
        // no on-CPU reading: the mean stands
        assert_eq!(mean("response"), Some(0.0002));
    }

    #[test]
    fn reads_the_seed_file() {
        let text = include_str!("../../examples/seed002-parameters.json");
        let s = pick(parse_parameters(text, "seed").unwrap(), None, "seed").unwrap();
        let full = &s.classes[0];
        let sum = |k: StageClass| -> f64 {
            full.stages
                .iter()
                .filter(|m| m.class == k)
                .map(|m| m.mean_s)
                .sum()
        };
        assert!((sum(StageClass::Service) - 14.916e-3).abs() < 1e-12);
        assert!((sum(StageClass::Delay) - 19.336e-3).abs() < 1e-12);
    }

    #[test]
    fn refuses_other_schemas_and_missing_classes() {
        let e = parse_parameters(r#"{"schema":"other/v2","servers":[]}"#, "f").unwrap_err();
        assert!(
            e.to_string().contains("not \"hstrace.parameters/v1\""),
            "{e}"
        );
        let e = parse_parameters(
            r#"{"schema":"hstrace.parameters/v1","servers":[{"server":"a:1","classes":{"tls_full":{"share":1,"stages":{}}}}]}"#,
            "f",
        )
        .unwrap_err();
        assert!(e.to_string().contains("missing field `tls_resumed`"), "{e}");
        let e = parse_parameters(
            r#"{"schema":"hstrace.parameters/v1","servers":[{"server":"a:1","classes":{
              "tls_full":{"share":1.5,"stages":{}},
              "tls_resumed":{"share":0,"stages":{}},"plain":{"share":0,"stages":{}}}}]}"#,
            "f",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("share 1.5 is not between 0 and 1"),
            "{e}"
        );
        let e = parse_parameters(
            r#"{"schema":"hstrace.parameters/v1","servers":[{"server":"a:1","classes":{
              "tls_full":{"share":1,"stages":{"accept_queue":{"class":"service","mean_s":0.1}}},
              "tls_resumed":{"share":0,"stages":{}},"plain":{"share":0,"stages":{}}}}]}"#,
            "f",
        )
        .unwrap_err();
        assert!(e.to_string().contains("makes it queue"), "{e}");
    }

    #[test]
    fn url_and_label_escaping() {
        assert_eq!(url_encode("a b{c=\"d\"}"), "a%20b%7Bc%3D%22d%22%7D");
        assert_eq!(label_value("x\"y\\"), "\"x\\\"y\\\\\"");
        assert_eq!(
            server_selector("nginx:443").unwrap(),
            "process_executable_name=\"nginx\",server_port=\"443\""
        );
        // a comm may hold a colon: the port is after the last one
        assert_eq!(
            server_selector("a:b:80").unwrap(),
            "process_executable_name=\"a:b\",server_port=\"80\""
        );
        for bad in ["nginx", "nginx:", ":443", "nginx:http"] {
            assert!(server_selector(bad).is_err(), "{bad}");
        }
    }
}
