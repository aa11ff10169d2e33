//! `hstrace serve` and `hstrace export` against a real nginx, real openssl/curl clients
//! and a real Prometheus (Debian's package) scraping the daemon.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    io::{Read, Write},
    path::PathBuf,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use hstrace_tests::{
    assert::without_rates,
    chromium,
    clients::{curl, drive_mix, s_client, s_time},
    daemon::{Daemon, Scrape},
    fixtures::{client_hello_record, client_hello_record_of, split_client_hello},
    hstrace::{hstrace_bin, hstrace_output, hstrace_run, Hstrace},
    prometheus,
    servers::Nginx,
    util::workspace,
};
use serde_json::Value;

/// Until `ok` holds or 15 s pass (records come when each response is complete).
fn eventually(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < Duration::from_secs(15), "never: {what}");
        thread::sleep(Duration::from_millis(200));
    }
}

fn rules() -> PathBuf {
    workspace().join("dashboards/prometheus/rules.yml")
}

/// The sum of a metric's samples whose labels pass `keep`.
fn sum_where(m: &Scrape, name: &str, keep: impl Fn(&BTreeMap<String, String>) -> bool) -> f64 {
    m.samples
        .iter()
        .filter(|(n, l, _)| n == name && keep(l))
        .map(|(_, _, v)| v)
        .sum()
}

/// The labels of one server in the daemon's metrics.
fn server<'a>(process: &'a str, port: &'a str) -> [(&'a str, &'a str); 2] {
    [("process_executable_name", process), ("server_port", port)]
}

/// Heatmaps of stages this test's traffic never has: Prometheus has no series for them.
const STAGES_NOT_IN_THE_MIX: [(&str, &str); 6] = [
    (
        "preamble_wait",
        "no server with a plaintext preamble (STARTTLS) here",
    ),
    ("preamble_queue", "no server with a plaintext preamble here"),
    (
        "preamble_service",
        "no server with a plaintext preamble here",
    ),
    (
        "hello_retry",
        "no client sends a key share the server refuses (no HelloRetryRequest)",
    ),
    ("wait_client_hello_2", "no HelloRetryRequest"),
    ("client_hello_2_queue", "no HelloRetryRequest"),
];

fn expected_empty(q: &prometheus::PanelQuery) -> bool {
    q.panel_type == "heatmap"
        && STAGES_NOT_IN_THE_MIX
            .iter()
            .any(|(stage, _)| q.title == format!("{stage} heatmap"))
}

/// One panel query's answer: the `instance` values in it (none: it has no `instance`
/// label) and the `server_port` values.
struct Answer {
    query: prometheus::PanelQuery,
    instances: BTreeSet<String>,
    ports: BTreeSet<String>,
}

/// Every dashboard query with `vars`: the panels that have no data and should (or the
/// other way round), and the answers of those that have.
fn run_panels(
    prom: &prometheus::Prometheus,
    queries: &[prometheus::PanelQuery],
    vars: &prometheus::Vars,
) -> (Vec<String>, Vec<Answer>) {
    let mut empty = Vec::new();
    let mut answered = Vec::new();
    for q in queries {
        let promql = prometheus::substitute(&q.expr, vars);
        let v = prom.query(&promql);
        let result = v["data"]["result"].as_array().cloned().unwrap_or_default();
        if result.is_empty() != expected_empty(q) {
            let what = if result.is_empty() {
                "no data"
            } else {
                "data, where STAGES_NOT_IN_THE_MIX says none"
            };
            empty.push(format!("{} ({what}): {promql}", q.title));
        }
        if result.is_empty() {
            continue;
        }
        let label = |name: &str| -> BTreeSet<String> {
            result
                .iter()
                .filter_map(|s| s["metric"][name].as_str().map(String::from))
                .collect()
        };
        answered.push(Answer {
            query: q.clone(),
            instances: label("instance"),
            ports: label("server_port"),
        });
    }
    (empty, answered)
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn serve_counts_every_connection_and_prometheus_answers_every_panel() {
    let nginx = Nginx::start("serve-mix", 1);
    // this nginx only (its master and workers): the totals below count everything the
    // daemon traced, and the other tests' servers run at the same time. Two daemons trace
    // it, as two hosts would: Prometheus scrapes both, and every panel must keep them
    // apart.
    let master = nginx.master_pid().to_string();
    let daemon = Daemon::start(&["--pid", &master, "--window", "600"]);
    let second = Daemon::start(&["--pid", &master, "--window", "600"]);
    let port = nginx.port.to_string();
    let plain_port = nginx.plain_port.to_string();
    let tls_server = server("nginx", &port);
    let plain_server = server("nginx", &plain_port);
    // the parameters still name a server comm:port
    let server_name = format!("nginx:{}", nginx.port);
    let plain_server_name = format!("nginx:{}", nginx.plain_port);
    let mix = drive_mix(&nginx, 3);
    let total = mix.tls() + mix.plain + mix.failed;
    for d in [&daemon, &second] {
        eventually("every connection counted", || {
            d.scrape().sum("hstrace_connections_total", &[]) as u64 == total
        });
    }
    let m = daemon.scrape();
    for m in [&m, &second.scrape()] {
        let kind = |k: &str| m.sum("hstrace_connections_total", &[("kind", k)]) as u64;
        assert_eq!(kind("full"), mix.full, "{}", m.text);
        assert_eq!(kind("resumed"), mix.resumed);
        assert_eq!(kind("plain"), mix.plain);
        assert_eq!(kind("failed"), mix.failed);
    }
    // by version: a third of each is TLS 1.3
    let v13 = m.sum(
        "hstrace_connections_total",
        &[&tls_server[..], &[("tls_protocol_version", "1.3")]].concat(),
    ) as u64;
    assert_eq!(v13, mix.tls() / 3);
    // plain HTTP is kind="plain" of the http protocol, on its own port
    assert_eq!(
        m.sum(
            "hstrace_connections_total",
            &[
                &plain_server[..],
                &[("kind", "plain"), ("network_protocol_name", "http")]
            ]
            .concat(),
        ) as u64,
        mix.plain,
        "{}",
        m.text
    );
    // every resumed handshake was offered and accepted; no full one offered
    let on_tls = |l: &BTreeMap<String, String>| {
        tls_server
            .iter()
            .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
    };
    let offered = sum_where(&m, "hstrace_tls_handshakes_total", |l| {
        on_tls(l) && l.get("tls_resumption_offered").is_some_and(|o| o != "none")
    }) as u64;
    let resumed = m.sum(
        "hstrace_tls_handshakes_total",
        &[&tls_server[..], &[("kind", "resumed")]].concat(),
    ) as u64;
    assert_eq!((offered, resumed), (mix.resumed, mix.resumed), "{}", m.text);
    assert_eq!(
        m.sum(
            "hstrace_tls_handshakes_total",
            &[("kind", "full"), ("tls_resumption_offered", "none")]
        ) as u64,
        mix.full
    );
    for (mechanism, n) in [("psk", 3), ("session_id", 3), ("ticket", 3)] {
        assert_eq!(
            m.sum(
                "hstrace_tls_handshakes_total",
                &[("kind", "resumed"), ("tls_resumption_offered", mechanism)]
            ) as u64,
            n,
            "{mechanism}: {}",
            m.text
        );
    }
    assert_eq!(
        m.sum(
            "hstrace_tls_handshakes_total",
            &[("tls_client_server_name", "demo.test"), ("kind", "resumed")]
        ) + m.sum(
            "hstrace_tls_handshakes_total",
            &[("tls_client_server_name", "other"), ("kind", "resumed")]
        ),
        mix.resumed as f64
    );
    assert_eq!(
        m.sum("hstrace_failures_total", &[("error_type", "alert")]) as u64,
        1
    );
    assert_eq!(
        m.sum("hstrace_failures_total", &[("error_type", "not_tls")]) as u64,
        1
    );
    // a stage histogram counts each connection that had the stage
    assert_eq!(
        m.sum(
            "hstrace_stage_duration_seconds_count",
            &[("stage", "server_flight_1"), ("kind", "full")]
        ) as u64,
        mix.full
    );
    assert_eq!(
        m.sum(
            "hstrace_stage_duration_seconds_count",
            &[&plain_server[..], &[("stage", "response")]].concat()
        ) as u64,
        mix.plain
    );
    assert_eq!(
        m.sum("hstrace_records_total", &[("record", "connection")]) as u64,
        total
    );
    assert_eq!(m.sum("hstrace_lost_total", &[]), 0.0, "{}", m.text);
    // the old labels are gone
    for old in [
        "server",
        "sni",
        "reason",
        "resumed",
        "tls_version",
        "cipher",
        "app_protocol",
    ] {
        assert!(
            m.samples.iter().all(|(_, l, _)| !l.contains_key(old)),
            "label {old} still there: {}",
            m.text
        );
    }
    // which hstrace answered: one series, the version the binary says
    let out = hstrace_output(&["--version"]);
    let said = String::from_utf8_lossy(&out.stdout);
    let version = said
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    assert!(out.status.success() && !version.is_empty(), "{said}");
    assert_eq!(
        m.sum("hstrace_build_info", &[("version", &version)]),
        1.0,
        "{}",
        m.text
    );
    // the health on /healthz is the same accounting (updated once a second)
    eventually("/healthz to report every connection", || {
        let health: Value = serde_json::from_str(&daemon.get("/healthz")).unwrap();
        health["reported"].as_u64() == Some(total) && health["lost"]["state_evicted"] == 0
    });

    // promtool on a real scrape
    let problems = prometheus::promtool_metrics_problems(&m.text);
    assert!(problems.is_empty(), "promtool check metrics: {problems:#?}");

    // the parameters: all three classes, every stage of each, plausible values
    let params: Value = serde_json::from_str(&daemon.get("/api/v1/parameters")).unwrap();
    assert_eq!(params["schema"], "hstrace.parameters/v1");
    let servers = params["servers"].as_array().unwrap();
    let tls = servers
        .iter()
        .find(|s| s["server"] == server_name.as_str())
        .unwrap_or_else(|| panic!("{server_name} missing: {params}"));
    assert_eq!(tls["connections"].as_u64(), Some(mix.tls() + mix.failed));
    assert_eq!(tls["failed"].as_u64(), Some(mix.failed));
    assert_eq!(tls["cache"]["offered"].as_u64(), Some(mix.resumed));
    assert_eq!(tls["cache"]["hit_ratio"].as_f64(), Some(1.0));
    assert_eq!(tls["cache"]["resumption_rate"].as_f64(), Some(0.5));
    for (class, count, stages) in [
        (
            "tls_full",
            mix.full,
            &[
                "accept_queue",
                "wait_client_hello",
                "server_flight_1",
                "wait_client_flight_2",
                "server_flight_2",
                "wait_request",
                "response",
            ][..],
        ),
        (
            "tls_resumed",
            mix.resumed,
            &["server_flight_1", "response"][..],
        ),
    ] {
        let c = &tls["classes"][class];
        assert_eq!(c["count"].as_u64(), Some(count), "{class}: {c}");
        for stage in stages {
            let s = &c["stages"][stage];
            let mean = s["mean_s"]
                .as_f64()
                .unwrap_or_else(|| panic!("{class} {stage}: {c}"));
            assert!((0.0..1.0).contains(&mean), "{class} {stage}: {s}");
            assert!(s["p99_s"].as_f64().unwrap() >= s["p50_s"].as_f64().unwrap() * 0.99);
        }
        let service = c["demand_s"]["service"].as_f64().unwrap();
        assert!(service > 0.0 && service < 1.0, "{class}: {c}");
    }
    let plain = servers
        .iter()
        .find(|s| s["server"] == plain_server_name.as_str())
        .expect("the plain server");
    assert_eq!(plain["classes"]["plain"]["count"].as_u64(), Some(mix.plain));
    assert!(
        plain["classes"]["plain"]["stages"]["response"]["mean_s"]
            .as_f64()
            .unwrap()
            > 0.0
    );

    // CSV carries the same numbers
    let csv = daemon.get("/api/v1/parameters?format=csv");
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let row = csv
        .lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|r| {
            r[col("server")] == server_name
                && r[col("class")] == "tls_full"
                && r[col("stage")] == "server_flight_1"
        })
        .expect("a tls_full server_flight_1 row");
    let json_mean = tls["classes"]["tls_full"]["stages"]["server_flight_1"]["mean_s"]
        .as_f64()
        .unwrap();
    let csv_mean: f64 = row[col("mean_s")].parse().unwrap();
    assert!(
        (csv_mean - json_mean).abs() <= json_mean * 1e-9,
        "{csv_mean} vs {json_mean}"
    );
    assert_eq!(row[col("count")], mix.full.to_string());

    // export --from asks the daemon: the same parameters
    let out = Command::new(hstrace_bin())
        .args(["export", "--from", &daemon.url()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let exported: Value = serde_json::from_slice(&out.stdout).unwrap();
    // the same counts and times; the rates differ as the window (still filling) grew
    assert_eq!(
        without_rates(exported["servers"].clone()),
        without_rates(params["servers"].clone())
    );
    // and as the table --help's example shows: the server, its connections, its stages
    let out = Command::new(hstrace_bin())
        .args(["export", "--from", &daemon.url(), "--format", "table"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tls_server = tls["server"].as_str().unwrap();
    let heading = format!("\n{tls_server}: {} connections", tls["connections"]);
    assert!(table.contains(&heading), "{heading:?} in:\n{table}");
    assert!(table.contains("server_flight_1"), "{table}");

    // a real Prometheus scraping both daemons, with the shipped rules loaded
    let targets = [daemon.addr.clone(), second.addr.clone()];
    let both: BTreeSet<String> = targets.iter().cloned().collect();
    let prom = prometheus::Prometheus::start(&targets, &[rules()], "1s");
    prom.wait_for_scrapes(2);
    // more traffic, now that Prometheus has samples from before it: rates and ratios
    // over its short history then have values
    let more = drive_mix(&nginx, 1);
    let grand_total = total + more.tls() + more.plain + more.failed;
    let per_instance = |promql: &str| -> BTreeMap<String, f64> {
        prom.query(promql)["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["metric"]["instance"].as_str().unwrap_or("").to_owned(),
                    s["value"][1].as_str().unwrap().parse::<f64>().unwrap(),
                )
            })
            .collect()
    };
    eventually(
        "Prometheus to have every connection from both daemons",
        || {
            let seen =
                per_instance("sum by (instance) (hstrace_connections_total{job=\"hstrace\"})");
            seen.len() == 2 && seen.values().all(|n| *n as u64 == grand_total)
        },
    );
    // the rules loaded and evaluate without errors; the ratios have this traffic's values
    // for each daemon apart (two daemons summed into one would still read the same ratio,
    // which the per-instance series count below catches)
    let rule_filter =
        format!("{{job=\"hstrace\",process_executable_name=\"nginx\",server_port=\"{port}\"}}");
    let near = |a: f64, b: f64| (a - b).abs() < 1e-6;
    eventually("the recording rules to see the new traffic", || {
        let ratio = |name: &str, want: f64| {
            let v = per_instance(&format!("{name}{rule_filter}"));
            v.len() == 2 && v.values().all(|x| near(*x, want))
        };
        ratio("hstrace:cache_hit_ratio:rate5m", 1.0)
            && ratio("hstrace:resumption_rate:rate5m", 0.5)
            && ratio(
                "hstrace:failure_ratio:rate5m",
                more.failed as f64 / (more.tls() + more.failed) as f64,
            )
    });
    let rules = prom.rules();
    let mut recorded = Vec::new();
    for group in rules["data"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            assert_eq!(rule["health"], "ok", "{rule}");
            if rule["type"] == "recording" {
                recorded.push(rule["name"].as_str().unwrap().to_owned());
            }
        }
    }
    assert_eq!(recorded.len(), 13, "{recorded:?}");
    for name in &recorded {
        let seen: BTreeSet<String> = per_instance(&format!("count by (instance) ({name})"))
            .into_keys()
            .collect();
        assert_eq!(seen, both, "{name}");
    }

    // every panel's query: with instance All, each answers for both daemons, apart (an
    // `instance` label). Only a heatmap draws one distribution of all it selects, by
    // design, and has none.
    let dashboard = workspace().join("dashboards/hstrace.json");
    let queries = prometheus::dashboard_queries(&dashboard);
    assert!(queries.len() >= 40, "{} panel queries", queries.len());
    let (empty, answered) = run_panels(&prom, &queries, &prometheus::Vars::all());
    assert!(
        empty.is_empty(),
        "panels without the data they should have:\n{}",
        empty.join("\n")
    );
    let merged: Vec<String> = answered
        .iter()
        .filter(|a| a.query.panel_type != "heatmap" && a.instances != both)
        .map(|a| format!("{} {:?}: {}", a.query.title, a.instances, a.query.expr))
        .collect();
    assert!(
        merged.is_empty(),
        "panels that do not answer for each instance apart:\n{}",
        merged.join("\n")
    );
    // one daemon selected: only it answers, and every panel still has its data
    let one = prometheus::Vars {
        instance: prometheus::Vars::regex(&[&second.addr]),
        ..prometheus::Vars::all()
    };
    let (empty, answered) = run_panels(&prom, &queries, &one);
    assert!(
        empty.is_empty(),
        "panels without the data they should have, for {}:\n{}",
        second.addr,
        empty.join("\n")
    );
    for a in answered.iter().filter(|a| a.query.panel_type != "heatmap") {
        assert_eq!(
            a.instances.iter().collect::<Vec<_>>(),
            [&second.addr],
            "{}: {}",
            a.query.title,
            a.query.expr
        );
    }
    // one server selected (the TLS port, on both daemons): only it answers
    let tls_only = prometheus::Vars {
        process: prometheus::Vars::regex(&["nginx"]),
        port: prometheus::Vars::regex(&[&port]),
        ..prometheus::Vars::all()
    };
    let (empty, answered) = run_panels(&prom, &queries, &tls_only);
    assert!(
        empty.is_empty(),
        "panels without the data they should have, for port {port}:\n{}",
        empty.join("\n")
    );
    for a in &answered {
        assert!(
            a.ports.iter().all(|p| *p == port),
            "{}: {:?}: {}",
            a.query.title,
            a.ports,
            a.query.expr
        );
    }
    drop(prom);
    for d in [second, daemon] {
        let stderr = d.stop();
        assert!(
            stderr.contains("records lost (ring buffer full) 0,"),
            "{stderr}"
        );
    }
}

#[test]
fn shipped_rules_check_and_pass_their_unit_tests() {
    let (ok, out) = prometheus::promtool(&["check", "rules", rules().to_str().unwrap()]);
    assert!(ok, "promtool check rules:\n{out}");
    let tests = workspace().join("dashboards/prometheus/rules_test.yml");
    let (ok, out) = prometheus::promtool(&["test", "rules", tests.to_str().unwrap()]);
    assert!(ok, "promtool test rules:\n{out}");
}

/// Every shipped alert links to its own section of docs/alerts.md, and rules_test.yml has
/// it both firing and not firing. (Read line by line: the tests have no YAML parser.)
#[test]
fn every_alert_has_a_runbook_and_is_tested_both_ways() {
    let rules_text = fs::read_to_string(rules()).unwrap();
    let runbook = fs::read_to_string(workspace().join("docs/alerts.md")).unwrap();
    let tests =
        fs::read_to_string(workspace().join("dashboards/prometheus/rules_test.yml")).unwrap();
    // (alert, its runbook_url) in file order
    let mut alerts: Vec<(String, Option<String>)> = Vec::new();
    for line in rules_text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- alert: ") {
            alerts.push((name.to_owned(), None));
        } else if let Some(url) = line.strip_prefix("runbook_url: ") {
            let (name, slot) = alerts.last_mut().expect("a runbook_url after an alert");
            assert!(slot.is_none(), "{name}: two runbook_urls");
            *slot = Some(url.to_owned());
        }
    }
    assert!(alerts.len() >= 9, "{alerts:?}");
    let tests_lines: Vec<&str> = tests.lines().map(str::trim).collect();
    for (name, url) in &alerts {
        let want = format!(
            "https://github.com/hstrace/hstrace/blob/main/docs/alerts.md#{}",
            name.to_lowercase()
        );
        assert_eq!(url.as_deref(), Some(want.as_str()), "{name}");
        assert!(
            runbook.lines().any(|l| l == format!("## {name}")),
            "docs/alerts.md has no section {name}"
        );
        // `alertname: X` followed by `exp_alerts: []` (not firing) or `exp_alerts:` and a
        // list (firing)
        let outcomes: BTreeSet<&str> = tests_lines
            .windows(2)
            .filter(|w| w[0] == format!("alertname: {name}"))
            .map(|w| w[1])
            .collect();
        assert!(
            outcomes.contains("exp_alerts: []") && outcomes.contains("exp_alerts:"),
            "rules_test.yml must have {name} both firing and not: {outcomes:?}"
        );
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn export_duration_measures_a_run() {
    let nginx = Nginx::start("export-run", 1);
    let port = nginx.port.to_string();
    let child = Command::new(hstrace_bin())
        .args([
            "export",
            "--duration",
            "8",
            "--port",
            &port,
            "--format",
            "json",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // attached once it says it measures: give it the moment it needs
    thread::sleep(Duration::from_secs(3));
    let mut made = 0;
    for _ in 0..4 {
        assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLS"));
        made += 1;
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &p["servers"][0];
    assert_eq!(s["server"], format!("nginx:{port}").as_str(), "{p}");
    assert_eq!(
        s["classes"]["tls_full"]["count"].as_u64(),
        Some(made),
        "{p}"
    );
    let secs = p["window"]["seconds"].as_f64().unwrap();
    assert!((7.0..=9.5).contains(&secs), "window {secs}");
}

/// CPU time (ns) `pid` has run, all threads: /proc/PID/stat's ticks.
fn cpu_ticks_ns(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions
    ticks * 1e9 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// The parameters carry the server's CPU per connection: the worker's own CPU time over
/// its connections (as /proc counts it), and what of it lies outside the service stages.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn parameters_carry_the_servers_cpu_per_connection() {
    let nginx = Nginx::start("serve-cpu", 1);
    let worker = *nginx.worker_pids().iter().next().unwrap();
    let master = nginx.master_pid().to_string();
    let daemon = Daemon::start(&["--pid", &master]);
    // the daemon's first look at the worker's CPU comes a second after it starts
    thread::sleep(Duration::from_millis(1500));
    let before = cpu_ticks_ns(worker);
    s_time(nginx.port, 4);
    // the daemon's last look after the load
    thread::sleep(Duration::from_millis(1500));
    let used = cpu_ticks_ns(worker) - before;
    let s = daemon.server_parameters(&format!("nginx:{}", nginx.port));
    let conns = s["connections"].as_f64().unwrap();
    assert!(conns >= 200.0, "{s}");
    let per = s["cpu"]["per_connection_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("{s}"));
    let outside = s["cpu"]["outside_stages_s"].as_f64().unwrap();
    let expected = used / 1e9 / conns;
    assert!(
        (per - expected).abs() <= 0.1 * expected,
        "per connection {per} s, the worker's /proc {expected} s: {s}"
    );
    // the handshake's service stages hold most of it, not all
    let full = &s["classes"]["tls_full"];
    let stages: f64 = full["stages"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|st| st["cpu_mean_s"].as_f64())
        .sum();
    assert!(
        stages > 0.5 * per && stages < per,
        "stages {stages} s of {per} s: {s}"
    );
    assert!(
        (outside - (per - stages)).abs() <= 0.05 * per,
        "outside {outside} s, per connection {per} s, stages {stages} s"
    );
    daemon.stop();
}

/// The cold start is timed where the server runs once, then its longest pause again through
/// the run, on one thread: that pause's runs grow, the others' stay, every figure a mean
/// beside the median.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn the_cold_start_is_timed_again_through_the_run() {
    let nginx = Nginx::start("serve-cold-start", 1);
    let master = nginx.master_pid().to_string();
    let daemon = Daemon::start(&["--pid", &master, "--measure-cold-start"]);
    let cold_start = || -> Value {
        let doc: Value = serde_json::from_str(&daemon.get("/api/v1/parameters")).unwrap();
        doc["host"]["cold_start"].clone()
    };
    // (pause, runs) of the record's work and of the handshake's
    let runs = |c: &Value| -> Vec<(f64, u64)> {
        [&c["runs"], &c["handshake"]["runs"]]
            .into_iter()
            .flat_map(|r| r.as_array().unwrap().clone())
            .map(|r| {
                let cost = r["cpu_mean_s"].as_f64().unwrap_or(-1.0);
                assert!(cost > 0.0 && cost < 0.01, "{c}");
                (r["pause_s"].as_f64().unwrap(), r["runs"].as_u64().unwrap())
            })
            .collect()
    };
    // the first measurement: about 7 s from the server's first sight
    let start = Instant::now();
    let first = loop {
        let c = cold_start();
        if !c.is_null() {
            break c;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no cold start");
        thread::sleep(Duration::from_millis(250));
    };
    let before = runs(&first);
    assert_eq!(before.len(), 12, "{first}");
    // a round every 6 s or so adds two runs at 200 ms
    let start = Instant::now();
    let after = loop {
        let now = runs(&cold_start());
        if now.iter().zip(&before).any(|(a, b)| a.1 > b.1) {
            break now;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "not timed again");
        thread::sleep(Duration::from_millis(250));
    };
    for ((pause, was), (_, is)) in before.iter().zip(&after) {
        let retimed = *pause == 0.2;
        assert!(retimed == (is > was), "{pause} s: {was} runs, then {is}");
    }
    let threads = |pid: u32| -> usize {
        fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter(|t| {
                let comm = t.as_ref().unwrap().path().join("comm");
                fs::read_to_string(comm).unwrap_or_default().trim() == "cold-start"
            })
            .count()
    };
    assert_eq!(threads(daemon.pid()), 1);
    daemon.stop();
}

/// Each thread of process `pid`: its name and CPU time (user + system, seconds), from
/// /proc/PID/task/*/stat.
fn threads_cpu(pid: u32) -> Vec<(String, f64)> {
    // SAFETY: sysconf has no preconditions
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| {
            let stat = fs::read_to_string(t.ok()?.path().join("stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let name = head.split_once('(')?.1.to_owned();
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f[11].parse::<f64>().ok()? + f[12].parse::<f64>().ok()?;
            Some((name, ticks / hz))
        })
        .collect()
}

/// The files process `pid` has mapped whose name holds `what` (/proc/PID/maps).
fn mapped(pid: u32, what: &str) -> BTreeSet<String> {
    fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|path| path.contains(what))
        .map(String::from)
        .collect()
}

/// The threads `serve` runs by default: its record source (the main thread) and its HTTP
/// server. Anything else is work nobody asked for.
const DAEMON_THREADS: [&str; 2] = ["hstrace", "hstrace-http"];

/// By default the daemon adds no work of its own to the host it measures: under traffic,
/// its only threads are the record source's and the HTTP server's, no libcrypto or libssl
/// is mapped into it (nor linked into the binary), and the parameters say the cold start
/// was not asked for. Asked (--measure-cold-start), the cold start's thread and libcrypto
/// are there: the check can fail.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn serve_runs_no_work_of_its_own_unless_asked() {
    let ldd = Command::new("ldd").arg(hstrace_bin()).output().unwrap();
    let linked = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        ldd.status.success() && !linked.contains("libcrypto") && !linked.contains("libssl"),
        "{linked}"
    );
    let nginx = Nginx::start("serve-no-work", 1);
    let master = nginx.master_pid().to_string();
    let daemon = Daemon::start(&["--pid", &master]);
    // new TLS handshakes for 10 s: well past the seconds in which the cold start used to
    // be measured at the start
    let made = s_time(nginx.port, 10);
    assert!(made > 10, "{made} connections");
    eventually("the daemon counts the connections", || {
        daemon.scrape().sum("hstrace_connections_total", &[]) >= made as f64
    });
    let pid = daemon.pid();
    let threads = threads_cpu(pid);
    assert!(
        threads
            .iter()
            .all(|(name, _)| DAEMON_THREADS.contains(&name.as_str())),
        "threads (name, CPU s) beyond {DAEMON_THREADS:?}: {threads:?}"
    );
    assert_eq!(mapped(pid, "libcrypto"), BTreeSet::new());
    assert_eq!(mapped(pid, "libssl"), BTreeSet::new());
    let doc: Value = serde_json::from_str(&daemon.get("/api/v1/parameters")).unwrap();
    assert!(doc["host"]["cold_start"].is_null(), "{doc}");
    assert_eq!(doc["host"]["cold_start_absent"], "not_asked", "{doc}");
    daemon.stop();

    let daemon = Daemon::start(&["--pid", &master, "--measure-cold-start"]);
    let pid = daemon.pid();
    eventually("the cold start's thread and libcrypto", || {
        threads_cpu(pid)
            .iter()
            .any(|(name, _)| name == "cold-start")
            && !mapped(pid, "libcrypto").is_empty()
    });
    let doc: Value = serde_json::from_str(&daemon.get("/api/v1/parameters")).unwrap();
    assert!(
        doc["host"]["cold_start"].is_null() == (doc["host"]["cold_start_absent"] == "not_yet"),
        "{doc}"
    );
    daemon.stop();
}

/// A field of /proc/PID/stat (numbered as in proc(5)).
fn stat_field(pid: u32, n: usize) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = stat.rsplit_once(')').unwrap().1;
    rest.split_whitespace().nth(n - 3).unwrap().parse().unwrap()
}

/// The BPF programs process `pid` holds (the fdinfo with a run_cnt: a link's names its
/// program but counts nothing), and their run counts summed.
fn bpf_programs(pid: u32) -> (usize, f64) {
    let mut programs = BTreeSet::new();
    let mut runs = 0.0;
    for fd in fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let text = fs::read_to_string(fd.path()).unwrap_or_default();
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        if let (Some(id), Some(count)) = (field("prog_id:"), field("run_cnt:")) {
            if programs.insert(id) {
                runs += count.parse::<f64>().unwrap();
            }
        }
    }
    (programs.len(), runs)
}

/// The daemon's own cost in the conventions: the `process_*` series are what /proc says of
/// the daemon, read around one scrape, and `hstrace_bpf_*` what the kernel says of its BPF
/// programs; promtool finds nothing wrong with them.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn the_daemons_own_cost_is_what_proc_says() {
    let nginx = Nginx::start("serve-self-cost", 1);
    let daemon = Daemon::start(&["--pid", &nginx.master_pid().to_string()]);
    assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLS"));
    let pid = daemon.pid();
    // SAFETY: sysconf has no preconditions
    let (hz, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK) as f64,
            libc::sysconf(libc::_SC_PAGESIZE) as f64,
        )
    };
    let cpu = || (stat_field(pid, 14) + stat_field(pid, 15)) / hz;
    let fds = || fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count() as f64;
    let (cpu0, rss0, fds0, (_, runs0)) =
        (cpu(), stat_field(pid, 24) * page, fds(), bpf_programs(pid));
    let m = daemon.scrape();
    let (cpu1, rss1, fds1, (programs, runs1)) =
        (cpu(), stat_field(pid, 24) * page, fds(), bpf_programs(pid));
    let v = |name: &str| m.sum(name, &[]);
    let cpu_s = v("process_cpu_seconds_total");
    assert!(
        cpu0 <= cpu_s && cpu_s <= cpu1 + 1.0 / hz,
        "{cpu0} <= {cpu_s} <= {cpu1}"
    );
    let rss = v("process_resident_memory_bytes");
    let (lo, hi) = (rss0.min(rss1), rss0.max(rss1));
    assert!(
        rss >= lo - 4e6 && rss <= hi + 4e6,
        "RSS {rss}, /proc {rss0} then {rss1}"
    );
    let vsize = stat_field(pid, 23);
    assert!(
        (v("process_virtual_memory_bytes") - vsize).abs() <= 0.05 * vsize,
        "{} against {vsize}",
        v("process_virtual_memory_bytes")
    );
    // the scrape's own connection is open while it is answered
    let open = v("process_open_fds");
    assert!(
        open >= fds0.min(fds1) && open <= fds0.max(fds1) + 2.0,
        "{open} fds: {fds0}, {fds1}"
    );
    let limits = fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let soft: f64 = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert_eq!(v("process_max_fds"), soft);
    let btime: f64 = fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let start = btime + stat_field(pid, 22) / hz;
    assert!(
        (v("process_start_time_seconds") - start).abs() < 0.02,
        "{} against {start}",
        v("process_start_time_seconds")
    );
    assert_eq!(v("process_threads"), stat_field(pid, 20));
    // its BPF programs, as their fdinfo counts them
    assert!(programs > 0);
    assert_eq!(v("hstrace_bpf_programs"), programs as f64);
    let runs = v("hstrace_bpf_runs_total");
    assert!(
        runs0 <= runs && runs <= runs1,
        "{runs0} <= {runs} <= {runs1}"
    );
    let counting: f64 = fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(v("hstrace_bpf_stats_enabled"), counting.min(1.0));
    assert!(v("hstrace_bpf_run_seconds_total") >= 0.0);
    // the conventions' names, units and types, as promtool reads them
    for family in [
        "# TYPE process_cpu_seconds counter",
        "# UNIT process_cpu_seconds seconds",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_start_time_seconds gauge",
        "# TYPE hstrace_bpf_run_seconds counter",
    ] {
        assert!(m.text.contains(family), "no {family:?}:\n{}", m.text);
    }
    let problems = prometheus::promtool_metrics_problems(&m.text);
    assert!(problems.is_empty(), "promtool check metrics: {problems:#?}");
    daemon.stop();
}

/// 10,000 TLS handshakes, each with a random SNI: the SNI label stays capped and the
/// series count and the daemon's memory stay flat.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn random_snis_leave_series_and_memory_flat() {
    let nginx = Nginx::start("serve-sni", 1);
    let daemon = Daemon::start(&["--port", &nginx.port.to_string(), "--max-sni", "50"]);
    let dir = hstrace_tests::util::work_dir("serve-sni-urls");
    // one curl: each URL's host is a new name (a new connection, a new SNI), all sent to
    // the test nginx
    let batch = |from: u32, n: u32| {
        let list = dir.join(format!("urls-{from}"));
        let mut text = String::new();
        for i in from..from + n {
            text.push_str(&format!(
                "url = \"https://r{i}-{:x}.example/\"\n",
                i.wrapping_mul(2654435761)
            ));
            text.push_str("output = \"/dev/null\"\n");
        }
        fs::write(&list, text).unwrap();
        curl(
            &[
                "--connect-to",
                &format!("::127.0.0.1:{}", nginx.port),
                "-K",
                list.to_str().unwrap(),
            ],
            &[],
        );
    };
    batch(0, 2_000);
    let settle = |n: u64| {
        eventually("every handshake counted", || {
            daemon.scrape().sum("hstrace_tls_handshakes_total", &[]) as u64 >= n
        })
    };
    settle(2_000);
    let first = daemon.scrape();
    let (series_a, rss_a) = (first.series(), daemon.rss_kib());
    batch(2_000, 8_000);
    settle(10_000);
    let m = daemon.scrape();
    let (series_b, rss_b) = (m.series(), daemon.rss_kib());
    eprintln!(
        "after 2,000 random SNIs: {series_a} series, {rss_a} KiB; after 10,000: {series_b} series, {rss_b} KiB"
    );
    assert_eq!(
        series_a,
        series_b,
        "the series count grew: (new, gone) {:?}",
        m.series_changed(&first)
    );
    assert!(rss_b <= rss_a + 8 * 1024, "RSS grew {rss_a} -> {rss_b} KiB");
    let snis: BTreeSet<&String> = m
        .samples
        .iter()
        .filter_map(|(_, l, _)| l.get("tls_client_server_name"))
        .collect();
    assert!(snis.len() <= 52, "{snis:?}");
    assert!(m.sum("hstrace_sni_folded_total", &[]) >= 10_000.0 - 52.0 * 2.0);
}

/// 5,000 distinct JA4 fingerprints, each sent twice: 10,000 real TLS 1.3 hellos (a
/// captured OpenSSL one, with one unregistered extension type of its own each) that nginx
/// answers, under `serve --max-ja4 50`. The JA4 label keeps at most 50 values besides
/// `other` and `none`, the rest are counted as `other` and folded, and the series count
/// stays flat from the first 2,000 hellos to the last (within a rarer outcome's series).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn five_thousand_fingerprints_leave_the_ja4_label_bounded() {
    let nginx = Nginx::start("serve-ja4", 1);
    let daemon = Daemon::start(&["--port", &nginx.port.to_string(), "--max-ja4", "50"]);
    let (head, exts) = split_client_hello(&client_hello_record("tls13_full.client_hello.hex")[5..]);
    // extension types no one registered, GREASE's (0x?a?a) left out: JA4 skips those
    let types: Vec<u16> = (0xe000u16..)
        .filter(|t| t & 0x0f0f != 0x0a0a)
        .take(5_000)
        .collect();
    let hello = |i: usize| {
        let mut e = exts.clone();
        e.push((types[i], Vec::new()));
        client_hello_record_of(&head, &e)
    };
    // each hello twice; the connection closed once nginx's first flight came
    let batch = |from: usize, to: usize| {
        for i in from..to {
            let record = hello(i);
            for _ in 0..2 {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", nginx.port)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                s.write_all(&record).unwrap();
                let mut first = [0u8; 1];
                let n = s.read(&mut first).unwrap_or(0);
                assert_eq!(
                    (n, first[0]),
                    (1, 22),
                    "nginx answers hello {i} with a handshake"
                );
            }
        }
    };
    let settle = |n: f64| {
        eventually("every hello counted", || {
            daemon.scrape().sum("hstrace_tls_clients_total", &[]) >= n
        })
    };
    batch(0, 1_000);
    settle(2_000.0);
    let first = daemon.scrape();
    let series_a = first.series();
    batch(1_000, 5_000);
    settle(10_000.0);
    let m = daemon.scrape();
    let series_b = m.series();
    let labels: BTreeSet<&String> = m
        .samples
        .iter()
        .filter(|(name, _, _)| name == "hstrace_tls_clients_total")
        .filter_map(|(_, l, _)| l.get("tls_client_ja4"))
        .collect();
    eprintln!(
        "after 2,000 hellos: {series_a} series; after 10,000: {series_b} series, {} JA4 values",
        labels.len()
    );
    assert!(labels.len() <= 52, "{labels:?}");
    assert!(labels.contains(&"other".to_owned()), "{labels:?}");
    let other = m.sum("hstrace_tls_clients_total", &[("tls_client_ja4", "other")]);
    assert!(other >= 10_000.0 - 2.0 * 50.0, "other: {other}");
    assert!(
        m.sum("hstrace_ja4_folded_total", &[]) >= other,
        "{}",
        m.text
    );
    // 8,000 more hellos with 4,000 new fingerprints must not add a series each; a rarer
    // outcome among them (a failure's cause, a lost record's) may add one or two
    assert!(
        series_b <= series_a + 4,
        "the series count grew from {series_a} to {series_b}: (new, gone) {:?}",
        m.series_changed(&first)
    );
}

/// nginx stopped and started again (a new master) under `serve --comm nginx`: the new
/// processes are traced and the counters keep counting.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn serve_follows_a_restarted_server() {
    let nginx = Nginx::start("serve-restart", 1);
    let daemon = Daemon::start(&["--comm", "nginx", "--uprobes", "handshake", "-v"]);
    // this server's connections: the daemon also traces the other tests' nginx
    let port = nginx.port.to_string();
    let count = || {
        daemon.scrape().sum(
            "hstrace_connections_total",
            &[&server("nginx", &port)[..], &[("kind", "full")]].concat(),
        ) as u64
    };
    assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLS"));
    eventually("the first connection", || count() == 1);
    let old_master = nginx.master_pid();
    let mut nginx = nginx;
    nginx.restart();
    assert_ne!(nginx.master_pid(), old_master);
    // the daemon finds new processes within its once-a-second scan
    thread::sleep(Duration::from_secs(2));
    for _ in 0..3 {
        assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLS"));
    }
    eventually("the restarted server's connections", || count() == 4);
    // the new processes' libssl was hooked too (after the daemon dropped its capabilities)
    let m = daemon.scrape();
    assert_eq!(
        m.sum("hstrace_uprobe_attach_failures_total", &[]),
        0.0,
        "{}",
        m.text
    );
    let new_master = nginx.master_pid();
    let stderr = daemon.stop();
    assert!(
        stderr.contains(&format!(
            "pid {new_master} (nginx): SSL_do_handshake uprobes on"
        )),
        "{stderr}"
    );
}

/// `serve` is wire only unless asked: no uprobe on the servers, and CAP_SYS_ADMIN (bit 21),
/// which only uprobes need, dropped once attached. Its records are still complete.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn serve_is_wire_only_by_default() {
    let nginx = Nginx::start("serve-wire", 1);
    let master = nginx.master_pid().to_string();
    let daemon = Daemon::start(&["--pid", &master, "-v"]);
    let port = nginx.port.to_string();
    assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLS"));
    eventually("the connection", || {
        daemon.scrape().sum(
            "hstrace_connections_total",
            &[&server("nginx", &port)[..], &[("kind", "full")]].concat(),
        ) == 1.0
    });
    let stderr = daemon.stop();
    assert!(!stderr.contains("SSL_do_handshake uprobes on"), "{stderr}");
    let kept = stderr
        .lines()
        .find_map(|l| l.split("capabilities kept after attach: 0x").nth(1))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no capabilities line: {stderr}"));
    assert_eq!(kept & 1 << 21, 0, "CAP_SYS_ADMIN kept: {kept:#x}");
}

#[test]
#[ignore = "needs the release build of hstrace: run `sudo cargo xtask test`"]
fn bad_options_get_one_clear_line() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    for (args, says) in [
        (vec!["serve", "--listen", addr.as_str()], "cannot listen on"),
        (
            vec!["serve", "--listen", "nowhere"],
            "is not an address:port",
        ),
        (
            vec!["serve", "--window", "0"],
            "--window 0 is not a number of seconds",
        ),
        (
            vec!["serve", "--window", "nan"],
            "--window NaN is not a number of seconds",
        ),
        (
            vec!["export", "--from", "http://127.0.0.1:1"],
            "no hstrace daemon answered at http://127.0.0.1:1",
        ),
        (vec!["export"], "say where the parameters come from"),
        // the values that once panicked or printed a loader error
        (
            vec!["trace", "--duration=-1"],
            "--duration -1 is not a number of seconds",
        ),
        (
            vec!["trace", "--idle-timeout=-1"],
            "--idle-timeout -1 is not a number of seconds",
        ),
        (
            vec!["trace", "--duration=nan"],
            "--duration NaN is not a number of seconds",
        ),
        (
            vec!["trace", "--duration=1e300"],
            "--duration 1e300 is not a number of seconds",
        ),
        (
            vec!["trace", "--max-conns", "0"],
            "--max-conns 0 is out of range",
        ),
        (
            vec!["serve", "--max-conns", "4294967295"],
            "--max-conns 4294967295 is out of range",
        ),
        (
            vec!["trace", "--comm", "a-name-of-16-byt"],
            "--comm 'a-name-of-16-byt' cannot be a process name",
        ),
    ] {
        let (ok, stderr) = hstrace_run(&args);
        assert!(!ok, "{args:?} succeeded");
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
        assert!(
            lines[0].starts_with("hstrace: ") && lines[0].contains(says),
            "{args:?}: {stderr}"
        );
    }
}

/// The scrape parser reads what it is given (the other tests rely on it).
#[test]
fn scrape_parser_sums_by_label() {
    let s = Scrape::parse(
        "# TYPE a counter\na_total{k=\"x\",s=\"nginx:1\"} 2\na_total{k=\"y\",s=\"nginx:1\"} 3\nb 1\n# EOF\n",
    );
    assert_eq!(s.sum("a_total", &[]), 5.0);
    assert_eq!(s.sum("a_total", &[("k", "y")]), 3.0);
    assert_eq!(s.sum("b", &[]), 1.0);
    assert_eq!(s.series(), 3);
}

/// `serve --pid` of a process that exits keeps serving and says so: once on stderr, on
/// /healthz, and in `hstrace_traced_processes` (the shipped alert fires on 0).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn serve_says_when_its_pid_has_exited() {
    let mut short = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = short.id().to_string();
    let daemon = Daemon::start(&["--pid", &pid]);
    let exited = |d: &Daemon| -> bool {
        let h: Value = serde_json::from_str(&d.get("/healthz")).unwrap();
        h["selection_exited"]
            .as_bool()
            .expect("selection_exited in /healthz")
    };
    assert!(!exited(&daemon));
    short.kill().unwrap();
    short.wait().unwrap();
    hstrace_tests::util::wait_for(
        "the daemon to see the exit",
        Duration::from_secs(10),
        || exited(&daemon),
    );
    assert_eq!(daemon.scrape().sum("hstrace_traced_processes", &[]), 0.0);
    let err = daemon.stop();
    assert!(
        err.contains(&format!("pid {pid} exited")) && err.contains("serving on"),
        "{err}"
    );
}

/// The key-exchange metrics against the records of a `trace` run beside the daemon, on
/// an nginx that takes X25519 only: Chromium (offers a post-quantum hybrid and gets
/// X25519), s_client in TLS 1.3 (twice: one fingerprint), s_client whose key share is
/// P-256 (a HelloRetryRequest), s_client in TLS 1.2 and curl. Every key-exchange, retry
/// and fingerprint count the daemon exposes is the one its connections' records give.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn serve_counts_key_exchanges_retries_and_fingerprints_as_the_records_say() {
    let nginx = Nginx::start_with("serve-kx", 1, 2048, "ssl_ecdh_curve X25519;");
    let port = nginx.port.to_string();
    // both time the handshake's end by SSL_do_handshake's return (serve's default is the
    // wire's last write before the next read: a worker preempted between that write and
    // the return would put the two apart, by as long, on the wait for the request); by
    // --pid both attach their uprobes at start, where by --port each would at the first
    // accept on its own, and a handshake one of them saw without them ends at another event
    let master = nginx.master_pid().to_string();
    let daemon = Daemon::start(&["--pid", &master, "--uprobes", "handshake"]);
    let tracer = Hstrace::start(&["--pid", &master]);
    let url = format!("https://127.0.0.1:{port}/");
    chromium::dump_dom_with(&url, &["--ignore-certificate-errors".to_owned()]);
    for _ in 0..2 {
        assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLS"));
    }
    let retry = s_client(nginx.port, &["-tls1_3", "-groups", "P-256:X25519"]);
    assert!(retry.contains("New, TLS"), "{retry}");
    assert!(s_client(nginx.port, &["-tls1_2"]).contains("New, TLS"));
    curl(&["--tlsv1.3"], std::slice::from_ref(&url));
    let out = tracer.stop();
    let records: Vec<&Value> = out
        .records
        .iter()
        .filter(|r| r["record"] == "connection")
        .collect();
    // what the records say, in the daemon's label values
    let group = |r: &Value| match r["tls_group"].as_str() {
        Some(g) if g.starts_with("0x") => "other".to_owned(),
        Some(g) => g.to_owned(),
        None => "unknown".to_owned(),
    };
    let pq = |r: &Value| match r["pq_offered"].as_bool() {
        Some(b) => b.to_string(),
        None => "unknown".to_owned(),
    };
    let mut exchanges: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    let mut retries: BTreeMap<String, u64> = BTreeMap::new();
    let mut clients: BTreeMap<String, u64> = BTreeMap::new();
    for r in &records {
        let kind = r["kind"].as_str().unwrap().to_owned();
        if kind == "full" || kind == "resumed" {
            *exchanges
                .entry((kind.clone(), group(r), pq(r)))
                .or_default() += 1;
        }
        if let Some(cause) = r["hrr_cause"].as_str() {
            *retries.entry(cause.to_owned()).or_default() += 1;
        }
        if kind != "plain" {
            let ja4 = r["ja4"].as_str().unwrap_or("none").to_owned();
            *clients.entry(ja4).or_default() += 1;
        }
    }
    assert!(
        exchanges.contains_key(&("full".into(), "x25519".into(), "true".into())),
        "Chromium offered a hybrid and got X25519: {records:?}"
    );
    assert_eq!(retries.get("no_acceptable_share"), Some(&1), "{records:?}");
    let tls = records.iter().filter(|r| r["kind"] != "plain").count() as f64;
    eventually("every TLS connection counted by its fingerprint", || {
        daemon.scrape().sum("hstrace_tls_clients_total", &[]) >= tls
    });
    let m = daemon.scrape();
    let s = [("server_port", port.as_str())];
    for ((kind, group, pq), n) in &exchanges {
        let with = [
            s[0],
            ("kind", kind.as_str()),
            ("tls_group", group.as_str()),
            ("post_quantum_offered", pq.as_str()),
        ];
        assert_eq!(
            m.sum("hstrace_tls_key_exchanges_total", &with),
            *n as f64,
            "{with:?}:\n{}",
            m.text
        );
    }
    assert_eq!(
        m.sum("hstrace_tls_key_exchanges_total", &s),
        exchanges.values().sum::<u64>() as f64
    );
    for (cause, n) in &retries {
        let with = [s[0], ("cause", cause.as_str())];
        assert_eq!(m.sum("hstrace_tls_hello_retries_total", &with), *n as f64);
    }
    // a fingerprint has a series from its second connection on; its first counts as other
    assert_eq!(m.sum("hstrace_tls_clients_total", &s), tls, "{}", m.text);
    for (ja4, n) in &clients {
        let own = m.sum(
            "hstrace_tls_clients_total",
            &[s[0], ("tls_client_ja4", ja4)],
        );
        let want = if ja4 == "none" { *n } else { n - 1 };
        assert_eq!(own, want as f64, "{ja4}: {}", m.text);
    }
    // the stage series carry the group too: the retry's stage is X25519's
    assert!(
        m.sum(
            "hstrace_stage_duration_seconds_count",
            &[s[0], ("stage", "hello_retry"), ("tls_group", "x25519")]
        ) >= 1.0,
        "{}",
        m.text
    );
    // the parameters: the full handshakes by group, as the records say, each with its
    // first flight's service time
    let mut full_by_group: BTreeMap<String, u64> = BTreeMap::new();
    for r in records.iter().filter(|r| r["kind"] == "full") {
        if let Some(g) = r["tls_group"].as_str() {
            *full_by_group.entry(g.to_owned()).or_default() += 1;
        }
    }
    let params = daemon.server_parameters(&format!("nginx:{port}"));
    let kx = params["key_exchange"].as_array().expect("key_exchange");
    let got: BTreeMap<String, u64> = kx
        .iter()
        .map(|g| {
            (
                g["group"].as_str().unwrap().to_owned(),
                g["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, full_by_group, "{params}");
    for g in kx {
        assert!(
            g["stages"]["server_flight_1"]["mean_s"].as_f64() > Some(0.0),
            "{g}"
        );
        assert!(g["service_s"].as_f64() > Some(0.0), "{g}");
    }
    // and each group's waits for its client (its delay stages), as the records say: the
    // handshakes that had each, their mean, no CPU, and the sum of the means
    for g in kx {
        let name = g["group"].as_str().unwrap();
        let mut want: BTreeMap<&str, (u64, f64)> = BTreeMap::new();
        for r in records
            .iter()
            .filter(|r| r["kind"] == "full" && r["tls_group"] == name)
        {
            let classes = r["stage_classes"].as_object().expect("stage_classes");
            for (stage, _) in classes.iter().filter(|(_, c)| *c == "delay") {
                let e = want.entry(stage.as_str()).or_default();
                e.0 += 1;
                e.1 += r["stages_ns"][stage].as_f64().unwrap() / 1e9;
            }
        }
        let delays = g["delay_stages"].as_object().expect("delay_stages");
        let counts = |m: &BTreeMap<&str, (u64, f64)>| -> Vec<(String, u64)> {
            m.iter().map(|(n, (c, _))| (n.to_string(), *c)).collect()
        };
        let got: BTreeMap<&str, (u64, f64)> = delays
            .iter()
            .map(|(n, st)| {
                assert!(st["cpu_mean_s"].is_null(), "{g}");
                let c = st["count"].as_u64().unwrap();
                (n.as_str(), (c, st["mean_s"].as_f64().unwrap() * c as f64))
            })
            .collect();
        assert_eq!(counts(&got), counts(&want), "{g}");
        assert!(want.contains_key("wait_client_hello"), "{g}");
        let mut sum = 0.0;
        for (stage, (c, total)) in &want {
            let mean = total / *c as f64;
            let got_mean = got[stage].1 / *c as f64;
            // (the daemon and the tracer time the same events each with its own probes,
            // which run one after the other at each hook)
            assert!(
                (got_mean - mean).abs() < 10e-6 + 0.05 * mean,
                "{stage}: the records' mean {mean} s: {g}"
            );
            sum += got_mean;
        }
        assert!((g["delay_s"].as_f64().unwrap() - sum).abs() < 1e-12, "{g}");
    }
    // the model's --group: the full handshakes' service stages take x25519's means; a
    // group no handshake agreed on is refused, naming those that were measured
    assert_eq!(full_by_group.keys().collect::<Vec<_>>(), ["x25519"]);
    let model = |group: &str| {
        hstrace_output(&[
            "model",
            "--from",
            &daemon.url(),
            "--server",
            &format!("nginx:{port}"),
            "--group",
            group,
            "--users",
            "1,10",
            "--format",
            "json",
        ])
    };
    let out = model("x25519");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // the waits for the client are the group's too
    let delay = &v["knobs"]["group"]["full_delay_s"];
    assert_eq!(v["knobs"]["group"]["delays_from"], "group", "{v}");
    assert!(delay["with_group"].as_f64() > Some(0.0), "{delay}");
    let g = &v["knobs"]["group"]["full_service_s"];
    let (measured, with) = (
        g["measured"].as_f64().unwrap(),
        g["with_group"].as_f64().unwrap(),
    );
    // (every full handshake whose group was seen is x25519's: only those whose group was
    // not seen leave the measured mean, a few per cent at most)
    assert!(
        measured > 0.0 && (with - measured).abs() < 0.05 * measured,
        "{g} {params}"
    );
    let out = model("X25519MLKEM768");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("only x25519 ("), "{err}");
    daemon.stop();
}
