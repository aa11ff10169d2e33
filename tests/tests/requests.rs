//! The first request and response of a connection: keep-alive (nginx and Apache), a TLS 1.3
//! request in the same segment as the client's Finished, and the library's view with
//! `--uprobes all`. Root only; run with `cargo xtask test`.

use std::time::Duration;

use hstrace_tests::{
    assert::{check_stages, str_field},
    clients::{curl, s_client},
    hstrace::Hstrace,
    proxies::DelayProxy,
    servers::{Apache, Nginx, TestServer},
};
use serde_json::Value;

/// Plain HTTP and TLS on one server, keep-alive: each connection's first request and
/// response are stages of its record, and its close line counts every request.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn plain_and_tls_on_one_server_with_keep_alive() {
    let nginx = Nginx::start("plain", 1);
    let tracer = Hstrace::start(&["--comm", "nginx"]);
    let tls: Vec<String> = (0..3)
        .map(|i| format!("https://127.0.0.1:{}/{i}", nginx.port))
        .collect();
    let plain: Vec<String> = (0..4)
        .map(|i| format!("http://127.0.0.1:{}/{i}", nginx.plain_port))
        .collect();
    assert_eq!(curl(&[], &tls), "ok\nok\nok\n");
    assert_eq!(
        curl(&["--tlsv1.2", "--tls-max", "1.2"], &tls),
        "ok\nok\nok\n"
    );
    assert_eq!(curl(&[], &plain), "plain\n".repeat(4));
    let out = tracer.stop();
    let mine: Vec<&Value> = out
        .records
        .iter()
        .filter(|r| r["pid"] != Value::Null)
        .collect();
    assert_eq!(mine.len(), 3, "{:?}", out.records);
    for (r, version) in mine[..2].iter().zip(["1.3", "1.2"]) {
        assert_eq!(str_field(r, "protocol"), Some("tls"), "{r}");
        assert_eq!(str_field(r, "tls_version"), Some(version), "{r}");
        check_stages(r);
        for s in [
            "server_flight_2",
            "wait_request",
            "request_queue",
            "response",
        ] {
            assert!(r["stages_ns"].get(s).is_some(), "{s} missing: {r}");
        }
    }
    let p = mine[2];
    assert_eq!(str_field(p, "protocol"), Some("plain"), "{p}");
    assert_eq!(str_field(p, "kind"), Some("plain"), "{p}");
    assert_eq!(
        str_field(p, "local"),
        Some(format!("127.0.0.1:{}", nginx.plain_port).as_str())
    );
    // (serde_json sorts map keys)
    let stages: Vec<&String> = p["stages_ns"].as_object().unwrap().keys().collect();
    assert_eq!(
        stages,
        ["accept_queue", "request_queue", "response", "wait_request"],
        "{p}"
    );
    assert!(
        p.get("handshake_ns").is_none() && p.get("failure").is_none(),
        "{p}"
    );
    let exchanges: Vec<u64> = mine
        .iter()
        .map(|r| {
            let c = out
                .closes
                .iter()
                .find(|c| c["conn_id"] == r["conn_id"])
                .expect("close line");
            c["exchanges"].as_u64().unwrap()
        })
        .collect();
    assert_eq!(
        exchanges,
        [3, 3, 4],
        "requests per connection: {:?}",
        out.closes
    );
}

/// Apache's event MPM hands a keep-alive connection back to its listener after a response
/// instead of reading again: the response is reported once quiet, with its own times.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn apache_plain_and_tls_keep_alive() {
    let apache = Apache::start("apache-keepalive");
    let master = apache.master_pid().to_string();
    let tracer = Hstrace::start(&["--pid", &master]);
    let tls: Vec<String> = (0..3)
        .map(|_| format!("https://127.0.0.1:{}/index.html", apache.port))
        .collect();
    let plain: Vec<String> = (0..2)
        .map(|_| format!("http://127.0.0.1:{}/index.html", apache.plain_port))
        .collect();
    assert_eq!(curl(&[], &tls), "ok\n".repeat(3));
    assert_eq!(curl(&[], &plain), "ok\n".repeat(2));
    let out = tracer.stop();
    assert_eq!(out.records.len(), 2, "{:?}", out.records);
    let (t, p) = (&out.records[0], &out.records[1]);
    assert_eq!(
        (str_field(t, "kind"), str_field(p, "kind")),
        (Some("full"), Some("plain")),
        "{t}\n{p}"
    );
    for r in [t, p] {
        let response = r["stages_ns"]["response"]
            .as_u64()
            .unwrap_or_else(|| panic!("no response: {r}"));
        assert!(
            response < 50_000_000,
            "the response stage took in the idle wait: {r}"
        );
        check_stages(r);
    }
    let exchanges: Vec<u64> = out
        .closes
        .iter()
        .map(|c| c["exchanges"].as_u64().unwrap())
        .collect();
    assert_eq!(exchanges, [3, 2], "{:?}", out.closes);
}

/// A TLS 1.3 client's request in the same segment as its Finished (a proxy merges them):
/// the server writes its NewSessionTickets and then its response without reading again
/// (Apache). From the wire alone, the tickets' write ends the handshake and the later
/// writes are the response.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn wire_only_request_with_the_finished() {
    request_with_the_finished(Apache::start("apache-merged"));
    request_with_the_finished(Nginx::start("nginx-merged", 1));
}

fn request_with_the_finished(server: TestServer) {
    let proxy = DelayProxy::merging(server.port, 2, Duration::from_millis(50));
    let port = server.port.to_string();
    let tracer = Hstrace::start(&["--port", &port, "--no-uprobes"]);
    for _ in 0..3 {
        let out = s_client(proxy.port, &["-tls1_3", "-no_ticket"]);
        assert!(out.contains("New, TLSv1.3"), "{out}");
    }
    let out = tracer.stop();
    assert_eq!(out.records.len(), 3, "{:?}", out.records);
    for r in &out.records {
        check_stages(r);
        let ms = |s: &str| {
            r["stages_ns"][s]
                .as_u64()
                .unwrap_or_else(|| panic!("stage {s} missing: {r}")) as f64
                / 1e6
        };
        assert_eq!(r["hs_done_from"], "wire", "{r}");
        // the proxy's 50 ms is the client's, and the request came with the Finished
        assert!(ms("wait_client_flight_2") >= 45.0, "{r}");
        assert!(ms("wait_request") < 1.0, "{r}");
        assert!(ms("server_flight_2") < 20.0, "{r}");
        assert!(ms("response") > 0.0 && ms("response") < 20.0, "{r}");
        eprintln!(
            "{}: server_flight_2 {:.3} ms, response {:.3} ms",
            r["comm"],
            ms("server_flight_2"),
            ms("response")
        );
    }
}

/// --uprobes all adds the library's view of the first request and response; the wire
/// alone still places the stages, and the default mode has no library view.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn library_view_with_uprobes_all() {
    let nginx = Nginx::start("library", 1);
    let port = nginx.port.to_string();
    for (mode, library) in [("all", true), ("handshake", false)] {
        let tracer = Hstrace::start(&["--port", &port, "--uprobes", mode]);
        for v in ["-tls1_3", "-tls1_2"] {
            assert!(s_client(nginx.port, &[v]).contains("New, TLS"));
        }
        let out = tracer.stop();
        assert_eq!(out.records.len(), 2, "{:?}", out.records);
        for r in &out.records {
            for s in ["wait_request", "response"] {
                assert!(
                    r["stages_ns"].get(s).is_some(),
                    "--uprobes {mode}: no {s}: {r}"
                );
            }
            let lib = r.get("library");
            assert_eq!(lib.is_some(), library, "--uprobes {mode}: {r}");
            if let Some(lib) = lib {
                // s_client sends "GET / HTTP/1.0\r\nHost: demo.test\r\n\r\n"
                assert_eq!(lib["request_bytes"].as_u64(), Some(35), "{r}");
                let resp = lib["response_bytes"].as_u64().unwrap();
                assert!(resp > 100 && resp < 1000, "response headers and 'ok': {r}");
                assert!(
                    lib["request_ns"].as_u64().unwrap() > 0
                        && lib["response_ns"].as_u64().unwrap() > 0
                );
            }
        }
    }
}
