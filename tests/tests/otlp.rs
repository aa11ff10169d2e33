//! `hstrace serve --otlp-endpoint` against a real OpenTelemetry Collector (built from the
//! Collector's Go modules, tests/src/otelcol/source.rs) and a real nginx under the mix of
//! every kind:
//! what the collector wrote matches the daemon's own /metrics, the attributes follow
//! OpenTelemetry's conventions, a collector that is away for 30 s costs the Prometheus
//! side nothing and the pushes resume, and TLS (mutual) works over HTTP and gRPC.
//! Root only: `cargo xtask test`.

use std::{
    collections::BTreeMap,
    fs, thread,
    time::{Duration, Instant},
};

use hstrace_tests::{
    clients::{curl, drive_mix, s_client},
    daemon::{Daemon, Scrape},
    fixtures::test_pki,
    hstrace::hstrace_bin,
    otelcol::{Collector, CollectorTls, Export, PointValue},
    servers::Nginx,
    util::wait_for,
};
use serde_json::Value;

/// Each Prometheus counter and its OTLP metric.
const COUNTERS: [(&str, &str); 11] = [
    (
        "hstrace_tls_key_exchanges_total",
        "hstrace.tls.key_exchanges",
    ),
    (
        "hstrace_tls_hello_retries_total",
        "hstrace.tls.hello_retries",
    ),
    ("hstrace_tls_clients_total", "hstrace.tls.clients"),
    ("hstrace_connections_total", "hstrace.connections"),
    ("hstrace_tls_handshakes_total", "hstrace.tls.handshakes"),
    ("hstrace_failures_total", "hstrace.failures"),
    ("hstrace_records_total", "hstrace.records"),
    (
        "hstrace_connections_accepted_total",
        "hstrace.connections.accepted",
    ),
    (
        "hstrace_connections_tracked_total",
        "hstrace.connections.tracked",
    ),
    ("hstrace_lost_total", "hstrace.lost"),
    ("hstrace_stage_cpu_seconds_total", "hstrace.stage.cpu"),
];

/// Each Prometheus histogram and its OTLP metric.
const HISTOGRAMS: [(&str, &str); 2] = [
    ("hstrace_stage_duration_seconds", "hstrace.stage.duration"),
    (
        "hstrace_handshake_duration_seconds",
        "hstrace.handshake.duration",
    ),
];

/// A Prometheus label's OTLP attribute (docs/metrics.md's table).
fn attribute(label: &str) -> String {
    match label {
        "kind" => "hstrace.kind",
        "stage" => "hstrace.stage",
        "stage_class" => "hstrace.stage.class",
        "tls_client_server_name" => "server.address",
        "tls_resumption_offered" => "hstrace.tls.resumption_offered",
        "tls_group" => "hstrace.tls.group",
        "post_quantum_offered" => "hstrace.tls.post_quantum_offered",
        "tls_client_ja4" => "hstrace.tls.client.ja4",
        "record" => "hstrace.record",
        "cause" => "hstrace.cause",
        // process_executable_name, server_port, tls_protocol_version, tls_cipher,
        // network_protocol_name, error_type, container_id, k8s_*: the dots made underscores
        other => return other.replace('_', "."),
    }
    .to_owned()
}

/// The attributes OTLP points may carry besides hstrace's own (`hstrace.*`): OTel's.
const CONVENTIONS: [&str; 11] = [
    "process.executable.name",
    "server.port",
    "container.id",
    "k8s.namespace.name",
    "k8s.pod.name",
    "tls.protocol.version",
    "tls.cipher",
    "tls.resumed",
    "server.address",
    "network.protocol.name",
    "error.type",
];

type Key = (String, BTreeMap<String, String>);
/// A histogram's count, sum and cumulative bucket counts by bound.
type Hist = (u64, f64, Vec<(f64, u64)>);

/// Both sides' values by (OTLP metric, attributes): counters' values, histograms'
/// counts, sums and cumulative bucket counts by bound.
#[derive(Debug, Default, PartialEq)]
struct Side {
    numbers: BTreeMap<Key, f64>,
    histograms: BTreeMap<Key, Hist>,
}

fn prometheus_side(m: &Scrape) -> Side {
    let mut side = Side::default();
    let key = |otlp: &str, labels: &BTreeMap<String, String>| -> Key {
        let attrs = labels
            .iter()
            .filter(|(k, _)| *k != "le")
            .map(|(k, v)| (attribute(k), v.clone()))
            .collect();
        (otlp.to_owned(), attrs)
    };
    for (name, labels, value) in &m.samples {
        if let Some((_, otlp)) = COUNTERS.iter().find(|(p, _)| p == name) {
            side.numbers.insert(key(otlp, labels), *value);
        }
        for (prom, otlp) in HISTOGRAMS {
            let Some(part) = name.strip_prefix(prom) else {
                continue;
            };
            let e = side.histograms.entry(key(otlp, labels)).or_default();
            match part {
                "_count" => e.0 = *value as u64,
                "_sum" => e.1 = *value,
                "_bucket" => {
                    let le: f64 = labels["le"].parse().unwrap_or(f64::INFINITY);
                    if le.is_finite() {
                        e.2.push((le, *value as u64));
                    }
                }
                _ => {}
            }
        }
    }
    for h in side.histograms.values_mut() {
        h.2.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    }
    side
}

fn otlp_side(e: &Export) -> Side {
    let mut side = Side::default();
    for p in &e.points {
        let mut attrs = p.attrs.clone();
        // tls.resumed says what hstrace.kind says (checked in `conventions`); Prometheus
        // has kind only
        attrs.remove("tls.resumed");
        let key = (p.metric.clone(), attrs);
        if COUNTERS.iter().any(|(_, o)| *o == p.metric) {
            if let PointValue::Number(n) = p.value {
                side.numbers.insert(key, n);
            }
        } else if HISTOGRAMS.iter().any(|(_, o)| *o == p.metric) {
            if let PointValue::Histogram {
                count,
                sum,
                bounds,
                counts,
            } = &p.value
            {
                let mut cumulative = 0;
                let buckets = bounds
                    .iter()
                    .zip(counts)
                    .map(|(b, c)| {
                        cumulative += c;
                        (*b, cumulative)
                    })
                    .collect();
                side.histograms.insert(key, (*count, *sum, buckets));
            }
        }
    }
    side
}

/// What differs between the two sides (sums to 1e-9; bounds to 1e-12 relative: the
/// exposition prints them in decimal).
fn differences(prom: &Side, otlp: &Side) -> Vec<String> {
    let mut d = Vec::new();
    for (k, v) in &prom.numbers {
        match otlp.numbers.get(k) {
            Some(o) if (o - v).abs() <= 1e-9 => {}
            o => d.push(format!("{k:?}: Prometheus {v}, OTLP {o:?}")),
        }
    }
    for k in otlp
        .numbers
        .keys()
        .filter(|k| !prom.numbers.contains_key(*k))
    {
        d.push(format!("{k:?}: only in OTLP"));
    }
    for (k, (count, sum, buckets)) in &prom.histograms {
        let Some((oc, os, ob)) = otlp.histograms.get(k) else {
            d.push(format!("{k:?}: histogram only in Prometheus"));
            continue;
        };
        if count != oc || (sum - os).abs() > 1e-9 {
            d.push(format!(
                "{k:?}: Prometheus count {count} sum {sum}, OTLP {oc} {os}"
            ));
        }
        let same_buckets = buckets.len() == ob.len()
            && buckets
                .iter()
                .zip(ob)
                .all(|(a, b)| ((a.0 - b.0) / a.0).abs() < 1e-12 && a.1 == b.1);
        if !same_buckets {
            d.push(format!("{k:?}: buckets {buckets:?} vs OTLP {ob:?}"));
        }
    }
    for k in otlp
        .histograms
        .keys()
        .filter(|k| !prom.histograms.contains_key(*k))
    {
        d.push(format!("{k:?}: histogram only in OTLP"));
    }
    d
}

/// Until the collector's last export from `service` matches the daemon's /metrics
/// (traffic has stopped: the two agree once the next push has gone); the export.
fn matches_prometheus(c: &Collector, service: &str, d: &Daemon, within: Duration) -> Export {
    let start = Instant::now();
    loop {
        let m = d.scrape();
        let diff = match c.last_export(service) {
            None => vec!["no export received yet".to_owned()],
            Some(e) => {
                let diff = differences(&prometheus_side(&m), &otlp_side(&e));
                if diff.is_empty() {
                    return e;
                }
                diff
            }
        };
        assert!(
            start.elapsed() < within,
            "the collector's data never matched /metrics:\n{}",
            diff.join("\n")
        );
        thread::sleep(Duration::from_millis(300));
    }
}

/// Every point's attributes are OTel's or hstrace's own; tls.resumed agrees with kind;
/// durations are in seconds.
fn conventions(e: &Export) {
    for p in &e.points {
        for k in p.attrs.keys() {
            assert!(
                CONVENTIONS.contains(&k.as_str()) || k.starts_with("hstrace."),
                "{}: attribute {k} is neither OTel's nor under hstrace.",
                p.metric
            );
        }
        if let Some(resumed) = p.attrs.get("tls.resumed") {
            let kind = &p.attrs["hstrace.kind"];
            assert_eq!(resumed == "true", kind == "resumed", "{p:?}");
        }
        if p.metric.ends_with(".duration") {
            assert_eq!(p.unit, "s", "{p:?}");
        }
    }
}

fn healthz_otlp(d: &Daemon) -> Value {
    let h: Value = serde_json::from_str(&d.get("/healthz")).unwrap();
    h["otlp"].clone()
}

fn lines_with(text: &str, words: &[&str]) -> usize {
    text.lines()
        .filter(|l| words.iter().all(|w| l.contains(w)))
        .count()
}

/// The test collector itself (no root): what an OTLP/HTTP client posts comes back from
/// `last_export` point for point, so the comparisons below read what the collector got.
#[test]
fn the_test_collector_writes_each_request_it_receives() {
    let c = Collector::start("otlp-collector-itself", None);
    let body = r#"{"resourceMetrics":[{"resource":{"attributes":[
        {"key":"service.name","value":{"stringValue":"collector-check"}}]},
      "scopeMetrics":[{"metrics":[
        {"name":"c","unit":"1","sum":{"aggregationTemporality":2,"isMonotonic":true,
          "dataPoints":[{"asInt":"7","attributes":[{"key":"tls.resumed","value":{"boolValue":true}}]}]}},
        {"name":"h","unit":"s","histogram":{"aggregationTemporality":2,"dataPoints":[
          {"count":"3","sum":0.25,"explicitBounds":[0.1],"bucketCounts":["2","1"]}]}}]}]}]}"#;
    curl(
        &[
            "-S",
            "--fail",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ],
        &[format!("{}/v1/metrics", c.http_url("http"))],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let e = loop {
        if let Some(e) = c.last_export("collector-check") {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "the collector wrote nothing to {}",
            c.out.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(e.total("c"), 7.0);
    let c_point = e.of("c").next().unwrap();
    assert_eq!(
        c_point.attrs.get("tls.resumed").map(String::as_str),
        Some("true")
    );
    match &e.of("h").next().unwrap().value {
        PointValue::Histogram {
            count,
            sum,
            bounds,
            counts,
        } => {
            assert_eq!((*count, *sum), (3, 0.25));
            assert_eq!(
                (bounds.as_slice(), counts.as_slice()),
                (&[0.1][..], &[2, 1][..])
            );
        }
        other => panic!("h is not an explicit-bucket histogram: {other:?}"),
    };
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn otlp_push_matches_prometheus_and_survives_a_collector_away() {
    let mut collector = Collector::start("otlp-collector", None);
    let nginx = Nginx::start("otlp-mix", 1);
    let master = nginx.master_pid().to_string();
    let endpoint = collector.http_url("http");
    let mut daemon = Daemon::start_with(
        &[
            "--pid",
            &master,
            "--otlp-endpoint",
            &endpoint,
            "--otlp-interval",
            "1",
        ],
        &[(
            "OTEL_RESOURCE_ATTRIBUTES",
            "k8s.node.name=node-7,k8s.pod.name=hstrace-x1",
        )],
        None,
    );
    assert_eq!(
        lines_with(
            &daemon.stderr_now(),
            &["pushing OTLP metrics to", &endpoint]
        ),
        1
    );
    let mix = drive_mix(&nginx, 2);
    let total = (mix.tls() + mix.plain + mix.failed) as f64;
    let e = matches_prometheus(&collector, "hstrace", &daemon, Duration::from_secs(20));
    assert_eq!(e.total("hstrace.connections"), total);
    assert!(e.total("hstrace.stage.duration") > 0.0);
    conventions(&e);
    let host = fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for (k, v) in [
        ("service.name", "hstrace"),
        ("host.name", host.trim()),
        ("k8s.node.name", "node-7"),
        ("k8s.pod.name", "hstrace-x1"),
    ] {
        assert_eq!(
            e.resource.get(k).map(String::as_str),
            Some(v),
            "{:?}",
            e.resource
        );
    }
    // the attributes name what the mix had
    let resumed = e
        .of("hstrace.tls.handshakes")
        .filter(|p| p.attrs["tls.resumed"] == "true")
        .filter(|p| p.attrs["process.executable.name"] == "nginx")
        .filter(|p| p.attrs["server.port"] == nginx.port.to_string())
        .map(|p| match p.value {
            PointValue::Number(n) => n,
            _ => 0.0,
        })
        .sum::<f64>();
    assert_eq!(resumed, mix.resumed as f64);
    let v13 = e
        .of("hstrace.connections")
        .filter(|p| p.attrs["tls.protocol.version"] == "1.3")
        .count();
    assert!(v13 > 0, "no tls.protocol.version=1.3 point");
    // the buckets are the Prometheus ones
    let m = daemon.scrape();
    assert_eq!(m.sum("hstrace_otlp_export_failures_total", &[]), 0.0);
    assert_eq!(healthz_otlp(&daemon)["failing"], false);

    // the collector away for 30 s: the Prometheus side loses nothing, failures count,
    // memory stays put, one line says so
    let rss_before = daemon.rss_kib();
    let failures_before = m.sum("hstrace_otlp_export_failures_total", &[]);
    collector.stop();
    let away = Instant::now();
    let more = drive_mix(&nginx, 1);
    let total = total + (more.tls() + more.plain + more.failed) as f64;
    thread::sleep(Duration::from_secs(30).saturating_sub(away.elapsed()));
    let m = daemon.scrape();
    assert_eq!(m.sum("hstrace_connections_total", &[]), total, "{}", m.text);
    assert_eq!(m.sum("hstrace_lost_total", &[]), 0.0, "{}", m.text);
    let failures = m.sum("hstrace_otlp_export_failures_total", &[]);
    assert!(
        failures >= failures_before + 20.0,
        "{failures} failures in 30 s at 1 s"
    );
    let h = healthz_otlp(&daemon);
    assert_eq!(h["failing"], true, "{h}");
    assert!(h["export_failures"].as_f64().unwrap() >= failures, "{h}");
    assert!(h["last_error"].is_string(), "{h}");
    assert_eq!(m.sum("hstrace_otlp_records_dropped_total", &[]), 0.0);
    let rss_after = daemon.rss_kib();
    assert!(
        rss_after < rss_before + 16 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB while the collector was away"
    );
    let said = daemon.stderr_now();
    assert_eq!(
        lines_with(&said, &["OTLP export to", ") failed:"]),
        1,
        "{said}"
    );

    // back: the next push carries everything, and one line says so
    collector.resume();
    let e = matches_prometheus(&collector, "hstrace", &daemon, Duration::from_secs(20));
    assert_eq!(e.total("hstrace.connections"), total);
    assert_eq!(healthz_otlp(&daemon)["failing"], false);
    thread::sleep(Duration::from_millis(500));
    let said = daemon.stderr_now();
    assert_eq!(
        lines_with(&said, &["OTLP export to", "works again"]),
        1,
        "{said}"
    );
    assert_eq!(
        lines_with(&said, &["OTLP export to", ") failed:"]),
        1,
        "{said}"
    );
    daemon.stop();
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn otlp_push_over_mutual_tls_http_and_grpc() {
    let pki = test_pki("otlp-pki");
    let path = |f: &str| pki.join(f).display().to_string();
    let collector = Collector::start(
        "otlp-collector-tls",
        Some(CollectorTls {
            cert: pki.join("server.crt"),
            key: pki.join("server.key"),
            client_ca: pki.join("ca.crt"),
        }),
    );
    let nginx = Nginx::start("otlp-tls", 1);
    let master = nginx.master_pid().to_string();
    let (ca, cert, key) = (path("ca.crt"), path("client.crt"), path("client.key"));
    let tls = [
        "--otlp-ca-file",
        &ca,
        "--otlp-client-cert",
        &cert,
        "--otlp-client-key",
        &key,
    ];
    let https = collector.http_url("https");
    let grpcs = collector.grpc_url("https");
    let common = ["--pid", &master, "--otlp-interval", "1"];
    let over_http = Daemon::start_with(
        &[&common[..], &tls, &["--otlp-endpoint", &https]].concat(),
        &[("OTEL_SERVICE_NAME", "hstrace-https")],
        None,
    );
    // gRPC is in the default build, the one the package ships
    let over_grpc = Daemon::start_with(
        &[
            &common[..],
            &tls,
            &[
                "--otlp-endpoint",
                &grpcs,
                "--otlp-protocol",
                "grpc",
                "--otlp-histograms",
                "exponential",
            ],
        ]
        .concat(),
        &[("OTEL_SERVICE_NAME", "hstrace-grpc")],
        None,
    );
    // the CA's certificate given, but no client certificate: the collector refuses it
    let mut no_client_cert = Daemon::start_with(
        &[
            &common[..],
            &["--otlp-ca-file", &ca, "--otlp-endpoint", &https],
        ]
        .concat(),
        &[("OTEL_SERVICE_NAME", "hstrace-no-client-cert")],
        None,
    );
    // no CA file: the collector's certificate is checked against the system's CA
    // certificates, here the test CA by SSL_CERT_FILE; and a CA file is the only one
    // trusted, even beside a system store that would do
    let (client, system_ca) = (
        ["--otlp-client-cert", &cert, "--otlp-client-key", &key],
        [("SSL_CERT_FILE", ca.as_str())],
    );
    let by_system_ca = |name: &'static str, endpoint: &[&str], ca_file: &[&str]| {
        Daemon::start_with(
            &[&common[..], &client, endpoint, ca_file].concat(),
            &[system_ca[0], ("OTEL_SERVICE_NAME", name)],
            None,
        )
    };
    let other_ca = path("other-ca.crt");
    let system_https = by_system_ca("hstrace-system-ca-https", &["--otlp-endpoint", &https], &[]);
    let system_grpc = by_system_ca(
        "hstrace-system-ca-grpc",
        &["--otlp-endpoint", &grpcs, "--otlp-protocol", "grpc"],
        &[],
    );
    let mut wrong_ca_file = by_system_ca(
        "hstrace-other-ca-file",
        &["--otlp-endpoint", &https],
        &["--otlp-ca-file", &other_ca],
    );
    let n = 4;
    for _ in 0..n {
        assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLS"));
    }
    let e = matches_prometheus(
        &collector,
        "hstrace-https",
        &over_http,
        Duration::from_secs(20),
    );
    assert_eq!(e.total("hstrace.connections"), n as f64);
    conventions(&e);
    // gRPC, with exponential histograms: their counts and sums are Prometheus's
    let start = Instant::now();
    loop {
        let m = over_grpc.scrape();
        let prom = prometheus_side(&m);
        let got = collector.last_export("hstrace-grpc");
        let ok = got.as_ref().is_some_and(|e| {
            e.total("hstrace.connections") == n as f64
                && prom
                    .histograms
                    .iter()
                    .all(|((metric, attrs), (count, sum, _))| {
                        e.of(metric).any(|p| {
                            let mut a = p.attrs.clone();
                            a.remove("tls.resumed");
                            &a == attrs
                                && matches!(p.value, PointValue::Exponential { count: c, sum: s }
                                if c == *count && (s - sum).abs() <= 1e-9)
                        })
                    })
                && !prom.histograms.is_empty()
        });
        if ok {
            conventions(got.as_ref().unwrap());
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the gRPC export never matched /metrics: {got:?}"
        );
        thread::sleep(Duration::from_millis(300));
    }
    // a daemon whose TLS the collector (or it) refuses: its exports fail, counted and
    // said once, and none arrives
    let refused = |d: &mut Daemon, name: &str| {
        let m = d.scrape();
        assert!(
            m.sum("hstrace_otlp_export_failures_total", &[]) >= 1.0,
            "{name}: {}",
            m.text
        );
        assert!(collector.last_export(name).is_none(), "{name}");
        let said = d.stderr_now();
        assert_eq!(
            lines_with(&said, &["OTLP export to", ") failed:"]),
            1,
            "{name}: {said}"
        );
    };
    refused(&mut no_client_cert, "hstrace-no-client-cert");
    for name in ["hstrace-system-ca-https", "hstrace-system-ca-grpc"] {
        let what = format!("{name}'s export with the {n} connections");
        wait_for(&what, Duration::from_secs(20), || {
            collector
                .last_export(name)
                .is_some_and(|e| e.total("hstrace.connections") == n as f64)
        });
    }
    refused(&mut wrong_ca_file, "hstrace-other-ca-file");
    for d in [&over_http, &over_grpc, &system_https, &system_grpc] {
        assert_eq!(
            d.scrape().sum("hstrace_otlp_export_failures_total", &[]),
            0.0
        );
    }
    // gRPC over TLS with no CA file on a host with no CA certificates: refused at start,
    // saying what to do
    let out = std::process::Command::new(hstrace_bin())
        .args(["serve", "--pid", &master, "--listen", "127.0.0.1:0"])
        .args(["--otlp-endpoint", &grpcs, "--otlp-protocol", "grpc"])
        .env("SSL_CERT_FILE", "/nonexistent")
        .env("SSL_CERT_DIR", "/nonexistent")
        .output()
        .expect("run hstrace");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("install ca-certificates, set SSL_CERT_FILE"),
        "{err}"
    );
}
