//! A real Prometheus (Debian's package) for the tests: scraping given targets with given
//! rule files, queried through its HTTP API; promtool; and the queries of a Grafana
//! dashboard with its variables substituted (no Grafana server can be installed here, so
//! the tests run each panel's query themselves).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::Value;

use crate::{
    http::{get, try_get, url_encode},
    util::{free_port, wait_for, work_dir},
};

/// `prometheus` on a free loopback port with a data dir of its own; killed on drop.
pub struct Prometheus {
    child: Child,
    /// host:port of its HTTP API
    pub addr: String,
    /// its config, `prometheus.log` and TSDB (`data/`, removed on drop)
    pub dir: PathBuf,
    targets: usize,
}

impl Prometheus {
    /// Scrape `targets` (host:port, job "hstrace") every `scrape_interval` ("1s"),
    /// evaluating `rule_files` as often; wait until it is ready. No targets: nothing is
    /// scraped (enough to check that queries parse).
    pub fn start(targets: &[String], rule_files: &[PathBuf], scrape_interval: &str) -> Prometheus {
        Self::start_on(free_port(), targets, rule_files, scrape_interval)
    }

    /// The same on a chosen loopback port (the demo prints its URL).
    pub fn start_on(
        port: u16,
        targets: &[String],
        rule_files: &[PathBuf],
        scrape_interval: &str,
    ) -> Prometheus {
        let addr = format!("127.0.0.1:{port}");
        // named after the port: two Prometheus servers (parallel tests) never share a dir
        let dir = work_dir(&format!("prometheus-{port}"));
        let rules: String = rule_files
            .iter()
            .map(|r| format!("  - '{}'\n", r.display()))
            .collect();
        let scrape = if targets.is_empty() {
            "scrape_configs: []\n".to_owned()
        } else {
            let quoted: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
            format!(
                "scrape_configs:\n  - job_name: hstrace\n    static_configs:\n      - targets: [{}]\n",
                quoted.join(", ")
            )
        };
        let config = format!(
            "global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n\
             rule_files:{}\n{rules}{scrape}",
            if rule_files.is_empty() { " []" } else { "" }
        );
        Self::run(addr, dir, &config, targets.len())
    }

    /// Scrape what `scrape_configs` (the YAML list's items, each starting `  - job_name:`)
    /// say, every second; wait until it is ready. For scrapes that are meant to fail,
    /// read `targets()` rather than `wait_for_scrapes`.
    pub fn start_with_jobs(scrape_configs: &str) -> Prometheus {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let dir = work_dir(&format!("prometheus-{port}"));
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n{scrape_configs}"
        );
        Self::run(addr, dir, &config, 0)
    }

    fn run(addr: String, dir: PathBuf, config: &str, targets: usize) -> Prometheus {
        fs::write(dir.join("prometheus.yml"), config).unwrap();
        let log = dir.join("prometheus.log");
        let child = Command::new("/usr/bin/prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .expect("/usr/bin/prometheus (`cargo xtask setup` installs it)");
        let mut p = Prometheus {
            child,
            addr,
            dir,
            targets,
        };
        let what = format!("prometheus to get ready (its log: {})", log.display());
        wait_for(&what, Duration::from_secs(30), || {
            // a config it rejects makes it exit: say so now, not after the timeout
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!(
                    "prometheus exited ({status}):\n{}",
                    fs::read_to_string(&log).unwrap_or_default()
                );
            }
            try_get(&p.addr, "/-/ready").map(|(s, _)| s) == Some(200)
        });
        p
    }

    /// An instant query: the whole answer; panics with the body unless Prometheus says
    /// `success` (a syntax error is `error`; a metric it has never seen is an empty result).
    pub fn query(&self, promql: &str) -> Value {
        let (status, body) = get(
            &self.addr,
            &format!("/api/v1/query?query={}", url_encode(promql)),
        );
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{promql}: not JSON ({e}): {status} {body}"));
        assert!(
            status == 200 && v["status"] == "success",
            "{promql}: {status} {body}"
        );
        v
    }

    /// Wait until every target has been scraped successfully at least `n` times.
    pub fn wait_for_scrapes(&self, n: usize) {
        if self.targets == 0 {
            return;
        }
        let what = format!("{} targets to be scraped {n} times", self.targets);
        wait_for(&what, Duration::from_secs(60), || {
            // up is 1 for a successful scrape, 0 for a failed one: its sum counts the good
            // ones, of the target scraped least
            let good = self.query("min(sum_over_time(up[1h]))");
            let seen = self.query("count(up)");
            let num = |v: &Value| {
                v["data"]["result"][0]["value"][1]
                    .as_str()
                    .and_then(|s| s.parse::<f64>().ok())
                    .unwrap_or(0.0)
            };
            num(&seen) as usize == self.targets && num(&good) >= n as f64
        });
    }

    /// Its scrape targets and how their last scrape went (`/api/v1/targets`: `health`,
    /// `lastError`, `labels.job`).
    pub fn targets(&self) -> Vec<Value> {
        let (status, body) = get(&self.addr, "/api/v1/targets");
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("/api/v1/targets: not JSON ({e}): {status} {body}"));
        v["data"]["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The rules it loaded and their health (`/api/v1/rules`).
    pub fn rules(&self) -> Value {
        let (status, body) = get(&self.addr, "/api/v1/rules");
        serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("/api/v1/rules: not JSON ({e}): {status} {body}"))
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // the TSDB is the big part; the config and the log stay for a look after a failure
        let _ = fs::remove_dir_all(self.dir.join("data"));
    }
}

/// `promtool ARGS`: (success, stdout and stderr).
pub fn promtool(args: &[&str]) -> (bool, String) {
    let out = Command::new("promtool")
        .args(args)
        .output()
        .expect("promtool (`cargo xtask setup` installs prometheus)");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// What `promtool check metrics` finds wrong with an exposition, but the false alarm of
/// OpenMetrics counters' help text (promtool 2.42 reads `# HELP x` of a counter `x_total`
/// as metadata without a metric): empty when it is right.
pub fn promtool_metrics_problems(exposition: &str) -> Vec<String> {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (`cargo xtask setup` installs prometheus)");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(exposition.as_bytes())
        .expect("promtool reads the exposition");
    let out = child.wait_with_output().expect("promtool ran");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .filter(|l| !l.trim().is_empty() && !l.contains("no help text"))
        .map(String::from)
        .collect()
}

/// One query of a dashboard panel.
#[derive(Debug, Clone, PartialEq)]
pub struct PanelQuery {
    /// the panel's title
    pub title: String,
    /// the panel's type: "timeseries", "heatmap", "table", …
    pub panel_type: String,
    pub expr: String,
}

/// Every query of a Grafana dashboard, in panel order; the panels of rows (collapsed rows
/// keep theirs in `panels`) included.
pub fn dashboard_queries(path: &Path) -> Vec<PanelQuery> {
    let d = read_dashboard(path);
    let mut out = Vec::new();
    fn walk(panels: &Value, out: &mut Vec<PanelQuery>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("?");
            let panel_type = p["type"].as_str().unwrap_or("?");
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(PanelQuery {
                        title: title.to_owned(),
                        panel_type: panel_type.to_owned(),
                        expr: e.to_owned(),
                    });
                }
            }
            walk(&p["panels"], out);
        }
    }
    walk(&d["panels"], &mut out);
    out
}

fn read_dashboard(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The dashboard's own variables (`datasource` aside), as their values are written into a
/// query: each goes inside `=~"…"`, so a value is a regex inside a PromQL string. All is
/// `.*` (the variables' `allValue`), which also matches a series without the label (a
/// Prometheus that adds no `cluster`).
#[derive(Debug, Clone, PartialEq)]
pub struct Vars {
    pub job: String,
    pub cluster: String,
    pub instance: String,
    /// `process_executable_name`
    pub process: String,
    /// `server_port`
    pub port: String,
    /// `k8s_pod_name`
    pub pod: String,
    pub stage: String,
    /// `tls_client_server_name`
    pub sni: String,
}

/// What Grafana writes for a variable set to All.
pub const ALL: &str = ".*";

impl Vars {
    /// The dashboard's defaults: job "hstrace", everything else All.
    pub fn all() -> Vars {
        Vars {
            job: "hstrace".into(),
            cluster: ALL.into(),
            instance: ALL.into(),
            process: ALL.into(),
            port: ALL.into(),
            pod: ALL.into(),
            stage: ALL.into(),
            sni: ALL.into(),
        }
    }

    /// A selection as Grafana writes it into a Prometheus query: each value's regex
    /// metacharacters escaped, with the backslash doubled for the PromQL string
    /// (`127.0.0.1` → `127\\.0\\.0\\.1`), several values as `(a|b)`.
    pub fn regex(values: &[&str]) -> String {
        let escaped: Vec<String> = values
            .iter()
            .map(|v| {
                v.chars()
                    .flat_map(|c| {
                        let special = "\\.+*?()|[]{}^$'".contains(c);
                        special
                            .then_some("\\\\")
                            .into_iter()
                            .flat_map(str::chars)
                            .chain([c])
                    })
                    .collect()
            })
            .collect();
        match escaped.as_slice() {
            [one] => one.clone(),
            many => format!("({})", many.join("|")),
        }
    }

    /// (name, value) of every variable.
    pub fn pairs(&self) -> [(&'static str, &str); 8] {
        [
            ("job", &self.job),
            ("cluster", &self.cluster),
            ("instance", &self.instance),
            ("process", &self.process),
            ("port", &self.port),
            ("pod", &self.pod),
            ("stage", &self.stage),
            ("sni", &self.sni),
        ]
    }
}

/// A dashboard query as Grafana would send it: every variable of `vars` in each of its
/// forms (`$name`, `${name}`, `[[name]]`), the interval variables a minute, the range an
/// hour.
pub fn substitute(expr: &str, vars: &Vars) -> String {
    let mut e = expr.to_owned();
    for (name, value) in vars.pairs() {
        for form in [
            format!("${{{name}}}"),
            format!("[[{name}]]"),
            format!("${name}"),
        ] {
            e = e.replace(&form, value);
        }
    }
    // longest names first: `$__range` must not eat the start of `$__range_ms`
    let builtins: [(&str, &str); 12] = [
        ("${__rate_interval}", "1m"),
        ("$__rate_interval", "1m"),
        ("${__interval_ms}", "60000"),
        ("$__interval_ms", "60000"),
        ("${__interval}", "1m"),
        ("$__interval", "1m"),
        ("${__range_ms}", "3600000"),
        ("$__range_ms", "3600000"),
        ("${__range_s}", "3600"),
        ("$__range_s", "3600"),
        ("${__range}", "1h"),
        ("$__range", "1h"),
    ];
    builtins
        .iter()
        .fold(e, |e, (var, value)| e.replace(var, value))
}

/// The metric families whose series carry a server (`process_executable_name`,
/// `server_port`); the others are the daemon's own (its health, its build).
pub const SERVER_METRICS: [&str; 6] = [
    "hstrace_stage_duration_seconds",
    "hstrace_handshake_duration_seconds",
    "hstrace_stage_cpu_seconds_total",
    "hstrace_connections_total",
    "hstrace_failures_total",
    "hstrace_tls_handshakes_total",
];

/// Every series selector of a query, as (metric name, the matchers between the braces).
/// Enough for the dashboard's queries: braces only open selectors there.
pub fn selectors(expr: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(open) = rest.find('{') {
        let name: String = rest[..open]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
        out.push((name, rest[open + 1..close].to_owned()));
        rest = &rest[(close + 1).min(rest.len())..];
    }
    out
}

/// Metric names a query reads with no selector at all (`hstrace_lost_total[5m]`): each one
/// would read every host, whatever the variables say.
pub fn bare_metrics(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < expr.len() {
        let at_word_start =
            i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if at_word_start && (expr[i..].starts_with("hstrace_") || expr[i..].starts_with("up")) {
            let len = expr[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(expr.len() - i);
            let word = &expr[i..i + len];
            let is_metric = word.starts_with("hstrace_") || word == "up";
            if is_metric && !expr[i + len..].starts_with('{') {
                out.push(word.to_owned());
            }
            i += len.max(1);
        } else {
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dashboard() -> PathBuf {
        crate::util::workspace().join("dashboards/hstrace.json")
    }

    /// Every panel queries something; every selector of every query filters on the job,
    /// the cluster and the instance (so no panel reads hosts the variables left out), and
    /// the servers' metrics also on the process and the port; no variable is left once
    /// substituted.
    #[test]
    fn every_panel_has_a_query_and_no_variable_is_left() {
        let path = dashboard();
        let d = read_dashboard(&path);
        let queries = dashboard_queries(&path);
        // every panel but a row (a heading) has at least one query
        for p in d["panels"].as_array().unwrap() {
            let title = p["title"].as_str().unwrap();
            if p["type"] != "row" {
                assert!(
                    queries.iter().any(|q| q.title == title),
                    "panel {title:?} has no query"
                );
            }
        }
        assert!(queries.len() >= 40, "{queries:?}");
        let host = [
            "job=~\"$job\"",
            "cluster=~\"$cluster\"",
            "instance=~\"$instance\"",
        ];
        let server = [
            "process_executable_name=~\"$process\"",
            "server_port=~\"$port\"",
            "k8s_pod_name=~\"$pod\"",
        ];
        for PanelQuery { title, expr, .. } in &queries {
            assert_eq!(bare_metrics(expr), [] as [String; 0], "{title}: {expr}");
            let sels = selectors(expr);
            assert!(!sels.is_empty(), "{title}: {expr}");
            for (metric, matchers) in &sels {
                for m in host {
                    assert!(matchers.contains(m), "{title}: {metric} lacks {m}: {expr}");
                }
                let family = metric
                    .trim_end_matches("_bucket")
                    .trim_end_matches("_sum")
                    .trim_end_matches("_count");
                if SERVER_METRICS.contains(&family) {
                    for m in server {
                        assert!(matchers.contains(m), "{title}: {metric} lacks {m}: {expr}");
                    }
                }
            }
            let one = Vars {
                instance: Vars::regex(&["127.0.0.1:9725"]),
                process: Vars::regex(&["nginx"]),
                port: Vars::regex(&["443", "8443"]),
                stage: Vars::regex(&["server_flight_1"]),
                sni: Vars::regex(&["demo.test"]),
                ..Vars::all()
            };
            for vars in [Vars::all(), one] {
                let q = substitute(expr, &vars);
                assert!(!q.contains('$') && !q.contains("[["), "{title}: {q}");
            }
        }
    }

    /// The variables the queries use are the dashboard's, and each but the job can be
    /// All, written as `.*`.
    #[test]
    fn the_dashboard_defines_every_variable_its_queries_use() {
        let d = read_dashboard(&dashboard());
        let list = d["templating"]["list"].as_array().unwrap();
        let var = |name: &str| {
            list.iter()
                .find(|v| v["name"] == name)
                .unwrap_or_else(|| panic!("no variable {name}"))
        };
        assert_eq!(var("datasource")["type"], "datasource");
        assert_eq!(var("job")["current"]["value"], "hstrace");
        for (name, _) in Vars::all().pairs() {
            let v = var(name);
            assert_eq!(v["datasource"]["uid"], "${datasource}", "{name}");
            if name != "job" {
                assert_eq!(v["includeAll"], true, "{name}");
                assert_eq!(v["multi"], true, "{name}");
                assert_eq!(v["allValue"], ALL, "{name}");
            }
        }
        assert_eq!(list.len(), 1 + Vars::all().pairs().len(), "{list:?}");
    }

    /// The stage names of model/src/stage.rs (the one place they are spelled), in
    /// wire order.
    fn stage_names() -> Vec<String> {
        let src = fs::read_to_string(crate::util::workspace().join("model/src/stage.rs")).unwrap();
        let names: Vec<String> = src
            .lines()
            .filter_map(|l| {
                l.trim()
                    .strip_prefix("Stage::")?
                    .split_once("=> (\"")?
                    .1
                    .split_once('"')
            })
            .map(|(name, _)| name.to_owned())
            .collect();
        assert!(names.len() >= 16, "{names:?}");
        names
    }

    /// One heatmap per stage, and each stage in the percentile panel of exactly one row.
    #[test]
    fn every_stage_has_its_heatmap_and_its_row() {
        let queries = dashboard_queries(&dashboard());
        for stage in stage_names() {
            let exact = format!("stage=\"{stage}\"");
            let heatmaps: Vec<&PanelQuery> = queries
                .iter()
                .filter(|q| q.panel_type == "heatmap" && q.expr.contains(&exact))
                .collect();
            assert_eq!(heatmaps.len(), 1, "{stage}: {heatmaps:?}");
            assert!(heatmaps[0].title.starts_with(&stage), "{heatmaps:?}");
            // the p50 query of each row's percentile panel lists its stages
            let rows: Vec<&PanelQuery> = queries
                .iter()
                .filter(|q| {
                    q.expr.starts_with("histogram_quantile(0.5, ")
                        && q.title.ends_with("stages p50 / p90 / p99")
                })
                .filter(|q| {
                    selectors(&q.expr).iter().any(|(_, m)| {
                        m.split("stage=~\"").skip(1).any(|r| {
                            r.split('"')
                                .next()
                                .unwrap_or("")
                                .split('|')
                                .any(|s| s == stage)
                        })
                    })
                })
                .collect();
            assert_eq!(rows.len(), 1, "{stage} in {} rows: {rows:?}", rows.len());
        }
        assert_eq!(
            queries.iter().filter(|q| q.panel_type == "heatmap").count(),
            stage_names().len()
        );
    }

    #[test]
    fn dashboard_queries_walks_rows() {
        let dir = crate::util::work_dir("prometheus-unit-rows");
        let path = dir.join("d.json");
        let d = r#"{"panels": [
            {"type": "timeseries", "title": "top", "targets": [{"expr": "a"}, {"expr": "b"}]},
            {"type": "row", "title": "collapsed", "collapsed": true, "panels": [
                {"type": "stat", "title": "inside", "targets": [{"expr": "c"}]},
                {"type": "text", "title": "no query"}]},
            {"type": "table", "title": "other datasource", "targets": [{"rawSql": "x"}]}]}"#;
        fs::write(&path, d).unwrap();
        let q = |title: &str, panel_type: &str, expr: &str| PanelQuery {
            title: title.into(),
            panel_type: panel_type.into(),
            expr: expr.into(),
        };
        assert_eq!(
            dashboard_queries(&path),
            [
                q("top", "timeseries", "a"),
                q("top", "timeseries", "b"),
                q("inside", "stat", "c")
            ]
        );
    }

    #[test]
    fn substitute_fills_every_variable_form() {
        assert_eq!(
            substitute(
                "rate(x{instance=~\"$instance\",job=~\"${job}\"}[$__rate_interval]) + y{s=~\"[[sni]]\"}[${__range}]",
                &Vars::all()
            ),
            "rate(x{instance=~\".*\",job=~\"hstrace\"}[1m]) + y{s=~\".*\"}[1h]"
        );
        let vars = Vars {
            instance: Vars::regex(&["127.0.0.1:9725"]),
            process: Vars::regex(&["nginx"]),
            port: Vars::regex(&["443", "8443"]),
            stage: Vars::regex(&["accept_queue", "response"]),
            cluster: "eu".into(),
            ..Vars::all()
        };
        assert_eq!(
            substitute(
                "x{cluster=~\"$cluster\",instance=~\"$instance\",process_executable_name=~\"$process\",server_port=~\"$port\",stage=~\"${stage}\"}[${__rate_interval}] / $__range_s / $__interval_ms[$__interval]",
                &vars
            ),
            "x{cluster=~\"eu\",instance=~\"127\\\\.0\\\\.0\\\\.1:9725\",process_executable_name=~\"nginx\",server_port=~\"(443|8443)\",stage=~\"(accept_queue|response)\"}[1m] / 3600 / 60000[1m]"
        );
    }

    #[test]
    fn selectors_and_bare_metrics_are_found() {
        let e = "sum by (instance) (rate(a_total{x=\"1\",y=~\"$y\"}[5m])) / on (instance) up{job=\"j\"} + hstrace_lost_total + uptime{}";
        assert_eq!(
            selectors(e),
            [
                ("a_total".to_owned(), "x=\"1\",y=~\"$y\"".to_owned()),
                ("up".to_owned(), "job=\"j\"".to_owned()),
                ("uptime".to_owned(), String::new()),
            ]
        );
        assert_eq!(bare_metrics(e), ["hstrace_lost_total"]);
        assert_eq!(bare_metrics("up + hstrace_x{a=\"b\"}"), ["up"]);
    }

    /// Every dashboard query, variables substituted, parses in a real Prometheus: a syntax
    /// error is an `error` answer, a metric it never saw (nothing is scraped here) an empty
    /// `success`. (The rules' expressions: `promtool check rules`.)
    #[test]
    fn every_dashboard_query_parses_in_prometheus() {
        let prom = Prometheus::start(&[], &[], "1s");
        let one = Vars {
            instance: Vars::regex(&["127.0.0.1:9725", "[::1]:9725"]),
            process: Vars::regex(&["nginx"]),
            port: Vars::regex(&["18443"]),
            stage: Vars::regex(&["server_flight_1", "response"]),
            sni: Vars::regex(&["demo.test"]),
            ..Vars::all()
        };
        for q in dashboard_queries(&dashboard()) {
            for vars in [&Vars::all(), &one] {
                let v = prom.query(&substitute(&q.expr, vars));
                assert_eq!(
                    v["data"]["result"],
                    Value::Array(vec![]),
                    "{}: {v}",
                    q.title
                );
            }
        }
    }
}
