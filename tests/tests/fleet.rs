//! What `hstrace serve` keeps for a fleet's operators, against a real nginx and real
//! openssl clients: SNI series that survive a scanner's flood, and the last failed
//! handshakes at /api/v1/failures.

use std::{collections::BTreeSet, time::Duration};

use hstrace_tests::{
    clients::{raw_exchange, s_client},
    daemon::{Daemon, Scrape},
    http,
    servers::Nginx,
    util::wait_for,
};
use serde_json::Value;

/// The SNI label values of the handshakes series.
fn sni_values(m: &Scrape) -> BTreeSet<String> {
    m.samples
        .iter()
        .filter(|(n, ..)| n == "hstrace_tls_handshakes_total")
        .filter_map(|(_, l, _)| l.get("tls_client_server_name").cloned())
        .collect()
}

/// A scanner sends ten random names, three handshakes each, and fills every one of the
/// five places; then only real names come. They get their series back once the window
/// after the flood ends, and the scanner's series are removed.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn sni_flood_gives_way_to_real_names() {
    let nginx = Nginx::start("fleet-sni", 1);
    let daemon = Daemon::start(&[
        "--port",
        &nginx.port.to_string(),
        "--max-sni",
        "5",
        "--label-window",
        "3",
    ]);
    let handshake = |name: &str| {
        s_client(nginx.port, &["-servername", name]);
    };
    for _ in 0..3 {
        for i in 0..10 {
            handshake(&format!("Scan{i}.Example"));
        }
    }
    wait_for("the flood counted", Duration::from_secs(15), || {
        daemon.scrape().sum("hstrace_tls_handshakes_total", &[]) >= 30.0
    });
    let flooded = sni_values(&daemon.scrape());
    let scanned = flooded.iter().filter(|s| s.starts_with("scan")).count();
    assert!(
        scanned > 0 && flooded.len() <= 5 + 2,
        "the flood should hold places, lower-cased, within the bound: {flooded:?}"
    );
    let real = ["shop.example", "api.example"];
    // real traffic only, a few handshakes a second: the flood spans windows, but within
    // two windows of its end (the second is the first without it) the real names have
    // their series and the scanner's are gone
    let mut rounds = 0;
    let m = loop {
        for name in real {
            handshake(name);
        }
        let m = daemon.scrape();
        let values = sni_values(&m);
        if real.iter().all(|r| values.contains(*r)) && !values.iter().any(|v| v.starts_with("scan"))
        {
            break m;
        }
        rounds += 1;
        assert!(
            rounds < 60,
            "the real names never got their places back from the scanner's: {values:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(m.sum("hstrace_sni_evicted_total", &[]) >= scanned as f64);
    assert!(m.sum("hstrace_sni_folded_total", &[]) > 0.0);
    // and they keep counting there, as full or resumed handshakes
    let shop = m.sum(
        "hstrace_tls_handshakes_total",
        &[("tls_client_server_name", "shop.example")],
    );
    assert!(shop >= 1.0, "{}", m.text);
}

/// Three connections fail in three ways; the daemon keeps the last two, newest first,
/// each with its stage, error type and alert, and counts all three.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn failures_api_lists_the_last_failed_handshakes() {
    let nginx = Nginx::start("fleet-failures", 1);
    let daemon = Daemon::start(&["--port", &nginx.port.to_string(), "--recent-failures", "2"]);
    // the client rejects the self-signed certificate with an alert
    let out = s_client(nginx.port, &["-tls1_2", "-verify_return_error"]);
    assert!(!out.contains("New, TLS"), "the client accepted it: {out}");
    wait_for("the first failure", Duration::from_secs(15), || {
        daemon.scrape().sum("hstrace_failures_total", &[]) >= 1.0
    });
    // plain HTTP to the TLS port, then a lone zero-length record
    raw_exchange(nginx.port, b"GET /secret-path HTTP/1.0\r\n\r\n");
    wait_for("the second failure", Duration::from_secs(15), || {
        daemon.scrape().sum("hstrace_failures_total", &[]) >= 2.0
    });
    raw_exchange(nginx.port, &[22, 3, 1, 0, 0]);
    wait_for("every failure counted", Duration::from_secs(15), || {
        daemon.scrape().sum("hstrace_failures_total", &[]) >= 3.0
    });
    let body = daemon.get("/api/v1/failures");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["failures_seen"], 3, "{v}");
    assert_eq!(v["kept"], 2, "{v}");
    let failures = v["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 2, "{v}");
    let (newest, older) = (&failures[0], &failures[1]);
    assert_eq!(newest["stage"], "wait_client_hello", "{newest}");
    assert_eq!(older["error_type"], "not_tls", "{older}");
    assert!(
        !body.contains("secret-path"),
        "application data served: {body}"
    );
    for f in failures {
        assert_eq!(f["process_executable_name"], "nginx", "{f}");
        assert_eq!(f["server_port"], nginx.port, "{f}");
        // the client's network by default (--failures-peer prefix), never its address
        assert_eq!(f["peer"], "127.0.0.0/24", "{f}");
        assert!(f["time"].as_str().unwrap().ends_with('Z'), "{f}");
    }
    let m = daemon.scrape();
    assert_eq!(
        m.sum("hstrace_failures_total", &[("error_type", "not_tls")]),
        1.0
    );
    // the alert's connection has left the ring; a bigger one would have shown it
    let one: Value = serde_json::from_str(&daemon.get("/api/v1/failures?limit=1")).unwrap();
    assert_eq!(one["failures"].as_array().unwrap().len(), 1, "{one}");
    let (status, err) = http::get(&daemon.addr, "/api/v1/failures?limit=ten");
    assert_eq!(status, 400, "{err}");
    assert!(err.contains("whole number"), "{err}");
    daemon.stop();
}

/// The rejected certificate's alert, as /api/v1/failures tells it: from the client, in
/// the stage after the server's first flight, with the SNI and the alert's name.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn failures_api_names_the_alert() {
    let nginx = Nginx::start("fleet-alert", 1);
    let daemon = Daemon::start(&["--port", &nginx.port.to_string()]);
    s_client(nginx.port, &["-tls1_2", "-verify_return_error"]);
    wait_for("the failure", Duration::from_secs(15), || {
        daemon.scrape().sum("hstrace_failures_total", &[]) >= 1.0
    });
    let v: Value = serde_json::from_str(&daemon.get("/api/v1/failures")).unwrap();
    let f = &v["failures"][0];
    assert_eq!(f["error_type"], "alert", "{f}");
    assert_eq!(f["stage"], "wait_client_flight_2", "{f}");
    assert_eq!(f["sni"], "demo.test", "{f}");
    assert_eq!(f["tls_version"], "1.2", "{f}");
    assert_eq!(f["alert"]["from"], "client", "{f}");
    assert_eq!(f["alert"]["level"], 2, "{f}");
    assert!(f["alert"]["name"].is_string(), "{f}");
}
