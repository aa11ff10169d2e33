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
            targets: targets.len(),
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

/// Every query of a Grafana dashboard, as (panel title, expr), in panel order; the panels
/// of rows (collapsed rows keep theirs in `panels`) included.
pub fn dashboard_queries(path: &Path) -> Vec<(String, String)> {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let d: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("?").to_owned();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push((title.clone(), e.to_owned()));
                }
            }
            walk(&p["panels"], out);
        }
    }
    walk(&d["panels"], &mut out);
    out
}

/// A dashboard query as Grafana would send it: `$server` becomes `server` (put inside
/// `=~"…"`: a regex, so a concrete server must come regex-escaped, or ".*" for All), the
/// interval variables a minute, the range an hour.
pub fn substitute(expr: &str, server: &str) -> String {
    // longest names first: `$__range` must not eat the start of `$__range_ms`
    let vars: [(&str, &str); 15] = [
        ("${server}", server),
        ("[[server]]", server),
        ("$server", server),
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
    vars.iter()
        .fold(expr.to_owned(), |e, (var, value)| e.replace(var, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dashboard() -> PathBuf {
        crate::util::workspace().join("dashboards/hstrace.json")
    }

    #[test]
    fn every_panel_has_a_query_and_no_variable_is_left() {
        let path = dashboard();
        let d: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        let queries = dashboard_queries(&path);
        // every panel but a row (a heading) has at least one query
        for p in d["panels"].as_array().unwrap() {
            let title = p["title"].as_str().unwrap();
            if p["type"] != "row" {
                assert!(
                    queries.iter().any(|(t, _)| t == title),
                    "panel {title:?} has no query"
                );
            }
        }
        assert!(queries.len() >= 16, "{queries:?}");
        for (title, expr) in &queries {
            assert!(expr.contains("server=~\"$server\""), "{title}: {expr}");
            for server in ["nginx:443", ".*"] {
                let q = substitute(expr, server);
                assert!(!q.contains('$'), "{title}: {q}");
            }
        }
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
        let pair = |t: &str, e: &str| (t.to_owned(), e.to_owned());
        assert_eq!(
            dashboard_queries(&path),
            [pair("top", "a"), pair("top", "b"), pair("inside", "c")]
        );
    }

    #[test]
    fn substitute_fills_every_variable_form() {
        assert_eq!(
            substitute(
                "rate(x{server=~\"$server\"}[$__rate_interval]) + y{s=\"${server}\"}[${__range}]",
                ".*"
            ),
            "rate(x{server=~\".*\"}[1m]) + y{s=\".*\"}[1h]"
        );
        assert_eq!(
            substitute(
                "x{server=~\"[[server]]\"}[${__rate_interval}] / $__range_s / $__interval_ms[$__interval]",
                "nginx:18443"
            ),
            "x{server=~\"nginx:18443\"}[1m] / 3600 / 60000[1m]"
        );
    }

    /// Every dashboard query, variables substituted, parses in a real Prometheus: a syntax
    /// error is an `error` answer, a metric it never saw (nothing is scraped here) an empty
    /// `success`. (The rules' expressions: `promtool check rules`.)
    #[test]
    fn every_dashboard_query_parses_in_prometheus() {
        let prom = Prometheus::start(&[], &[], "1s");
        for (title, expr) in dashboard_queries(&dashboard()) {
            for server in ["nginx:18443", ".*"] {
                let v = prom.query(&substitute(&expr, server));
                assert_eq!(v["data"]["result"], Value::Array(vec![]), "{title}: {v}");
            }
        }
    }
}
