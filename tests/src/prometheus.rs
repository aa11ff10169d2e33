//! A real Prometheus (Debian's package) for the tests: scraping given targets with given
//! rule files, queried through its HTTP API; promtool; and the queries of a Grafana
//! dashboard with its variables substituted.

use std::{
    fs,
    io::{Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::{free_port, work_dir};

/// `prometheus` on a free loopback port with a data dir of its own; killed on drop.
pub struct Prometheus {
    child: Child,
    pub addr: String,
    pub dir: PathBuf,
}

impl Prometheus {
    /// Scrape `targets` (host:port) every `scrape_interval`, evaluating `rule_files` as
    /// often; wait until it is ready.
    pub fn start(targets: &[String], rule_files: &[PathBuf], scrape_interval: &str) -> Prometheus {
        let dir = work_dir("prometheus");
        let addr = format!("127.0.0.1:{}", free_port());
        let rules: String = rule_files
            .iter()
            .map(|r| format!("  - {}\n", r.display()))
            .collect();
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n\
             rule_files:\n{rules}\
             scrape_configs:\n  - job_name: hstrace\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        fs::write(dir.join("prometheus.yml"), config).unwrap();
        let child = Command::new("prometheus")
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
            .stderr(fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (`cargo xtask setup` installs it)");
        let p = Prometheus { child, addr, dir };
        let start = Instant::now();
        while http_get_opt(&p.addr, "/-/ready").map(|(s, _)| s) != Some(200) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "prometheus did not get ready:\n{}",
                fs::read_to_string(p.dir.join("prometheus.log")).unwrap_or_default()
            );
            thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// An instant query; panics unless Prometheus answers `success`.
    pub fn query(&self, promql: &str) -> Value {
        let (status, body) = http_get(
            &self.addr,
            &format!("/api/v1/query?query={}", url_encode(promql)),
        );
        let v: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{promql}: not JSON ({e}): {body}"));
        assert!(
            status == 200 && v["status"] == "success",
            "{promql}: {status} {body}"
        );
        v
    }

    /// Wait until every target has been scraped successfully `n` times.
    pub fn wait_for_scrapes(&self, n: usize) {
        let start = Instant::now();
        loop {
            let v = self.query("min(count_over_time(up[1h]))");
            let ups = self.query("min(up)");
            let scraped = v["data"]["result"][0]["value"][1]
                .as_str()
                .and_then(|s| s.parse::<f64>().ok())
                .unwrap_or(0.0);
            let up = ups["data"]["result"][0]["value"][1].as_str() == Some("1");
            if up && scraped >= n as f64 {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the targets were not scraped {n} times: {v} {ups}"
            );
            thread::sleep(Duration::from_millis(250));
        }
    }

    /// The rules it loaded, and their health.
    pub fn rules(&self) -> Value {
        let (_, body) = http_get(&self.addr, "/api/v1/rules");
        serde_json::from_str(&body).unwrap()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// GET `path` from `addr` (host:port) over HTTP/1.0: (status, body). Panics when nobody
/// answers.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    http_get_opt(addr, path).unwrap_or_else(|| panic!("nothing answers at {addr}"))
}

fn http_get_opt(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    // HTTP/1.0: the body ends when the connection closes, never chunked
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
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

/// Every query of a Grafana dashboard, as (panel title, expr), rows' panels included.
pub fn dashboard_queries(path: &Path) -> Vec<(String, String)> {
    let d: Value = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
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

/// A dashboard query as Grafana would send it: `$server` is `server` (a regex), the
/// interval variables a minute, the range an hour.
pub fn substitute(expr: &str, server: &str) -> String {
    expr.replace("${server}", server)
        .replace("[[server]]", server)
        .replace("$server", server)
        .replace("${__rate_interval}", "1m")
        .replace("$__rate_interval", "1m")
        .replace("${__interval}", "1m")
        .replace("$__interval", "1m")
        .replace("${__range}", "1h")
        .replace("$__range", "1h")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_panel_has_a_query_and_no_variable_is_left() {
        let queries = dashboard_queries(&crate::workspace().join("dashboards/hstrace.json"));
        assert!(queries.len() >= 12, "{queries:?}");
        for (title, expr) in &queries {
            let q = substitute(expr, "nginx:443");
            assert!(!q.contains('$'), "{title}: {q}");
        }
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
        assert_eq!(url_encode("a b{c=\"d\"}"), "a%20b%7Bc%3D%22d%22%7D");
    }
}
