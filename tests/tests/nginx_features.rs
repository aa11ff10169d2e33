//! nginx with the TLS features real deployments turn on — HTTP/2, mutual TLS, IPv6, a
//! certificate chain written in several calls — in both probe modes, each checked against
//! the client's view. Root only; run with `cargo xtask test`.

use hstrace_tests::{
    assert::{assert_accounted, assert_has_stages, check_stages},
    clients::{curl, s_client, s_client_early_only},
    fixtures::make_cert_named,
    hstrace::{Hstrace, Traced},
    proxies::DelayProxy,
    servers::{Nginx, TestServer},
    util::work_dir,
};
use serde_json::Value;
use std::time::Duration;

/// Trace `nginx` in `mode` while `client` runs; its records and close lines.
fn traced(nginx: &TestServer, mode: &str, client: impl Fn()) -> Traced {
    let master = nginx.master_pid().to_string();
    let tracer = Hstrace::start(&["--pid", &master, "--uprobes", mode]);
    client();
    let out = tracer.stop();
    assert_accounted(&out.health, true);
    out
}

/// A completed handshake with every stage of its kind, one request and its response.
fn check_full(r: &Value, version: &str, what: &str) {
    let what = format!("{what}: {r}");
    assert_eq!(r["kind"], "full", "{what}");
    assert_eq!(r["tls_version"], version, "{what}");
    assert!(r.get("notes").is_none(), "{what}");
    let stages = [
        "server_flight_1",
        "wait_client_flight_2",
        "server_flight_2",
        "response",
    ];
    assert_has_stages(r, &stages, &what);
    check_stages(r);
}

/// One request, one exchange in the close line.
fn one_exchange(out: &Traced, what: &str) {
    for c in &out.closes {
        assert_eq!(c["exchanges"], 1, "{what}: {c}");
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn http2() {
    let nginx = Nginx::start_with("h2", 1, 2048, "listen 127.0.0.1:$port ssl http2;");
    let url = format!("https://127.0.0.1:{}/", nginx.port);
    for mode in ["handshake", "none"] {
        let out = traced(&nginx, mode, || {
            for v in ["--tlsv1.3", "--tls-max"] {
                let args = if v == "--tls-max" {
                    vec!["--http2", v, "1.2"]
                } else {
                    vec!["--http2", v]
                };
                assert_eq!(curl(&args, std::slice::from_ref(&url)), "ok\n");
            }
        });
        assert_eq!(out.records.len(), 2, "{}", out.stderr);
        // TLS 1.3 encrypts the server's choice: curl offered two, so only the offer is
        // known; TLS 1.2's ServerHello says h2
        let r13 = &out.records[0];
        assert_eq!(r13["alpn"], Value::Null, "{mode}: {r13}");
        assert_eq!(
            r13["alpn_offered"],
            serde_json::json!(["h2", "http/1.1"]),
            "{mode}: {r13}"
        );
        assert_eq!(out.records[1]["alpn"], "h2", "{mode}: {}", out.records[1]);
        for (r, version) in out.records.iter().zip(["1.3", "1.2"]) {
            check_full(r, version, &format!("h2 {mode}"));
        }
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn mutual_tls() {
    let dir = work_dir("mtls-client");
    let (ccert, ckey) = make_cert_named(&dir, "client-", 2048, &[]);
    let extra = format!(
        "ssl_client_certificate {}; ssl_verify_client on;",
        ccert.display()
    );
    let nginx = Nginx::start_with("mtls", 1, 2048, &extra);
    let (c, k) = (ccert.display().to_string(), ckey.display().to_string());
    for mode in ["handshake", "none"] {
        let out = traced(&nginx, mode, || {
            for v in ["-tls1_3", "-tls1_2"] {
                let out = s_client(nginx.port, &[v, "-cert", &c, "-key", &k]);
                assert!(
                    out.contains("New, TLS") && out.contains("200 OK"),
                    "{v}: {out}"
                );
            }
        });
        assert_eq!(out.records.len(), 2, "{}", out.stderr);
        for (r, version) in out.records.iter().zip(["1.3", "1.2"]) {
            check_full(r, version, &format!("mTLS {mode}"));
        }
        one_exchange(&out, &format!("mTLS {mode}"));
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn ipv6() {
    let nginx = Nginx::start_with(
        "ipv6",
        1,
        2048,
        "listen 127.0.0.1:$port ssl; listen [::1]:$port ssl;",
    );
    let url = format!("https://[::1]:{}/", nginx.port);
    for mode in ["handshake", "none"] {
        let out = traced(&nginx, mode, || {
            assert_eq!(curl(&["--tlsv1.3"], std::slice::from_ref(&url)), "ok\n");
        });
        assert_eq!(out.records.len(), 1, "{}", out.stderr);
        let r = &out.records[0];
        assert_eq!(r["local"], format!("[::1]:{}", nginx.port), "{mode}: {r}");
        assert!(
            r["peer"].as_str().unwrap().starts_with("[::1]:"),
            "{mode}: {r}"
        );
        check_full(r, "1.3", &format!("IPv6 {mode}"));
        one_exchange(&out, &format!("IPv6 {mode}"));
    }
}

/// A big certificate (600 subject alternative names, a PEM file over 16 KiB): nginx writes
/// the first flight in several calls (16,384 + 8,692 + 305 bytes for TLS 1.2, seen with
/// strace), and the Certificate message is longer than a record buffer.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_certificate_chain_written_in_several_calls() {
    let dir = work_dir("big-cert-files");
    let names: Vec<String> = (0..600)
        .map(|i| format!("DNS:host-{i}.demo.test"))
        .collect();
    let san = format!("subjectAltName=DNS:demo.test,{}", names.join(","));
    let (cert, key) = make_cert_named(&dir, "big-", 2048, &["-addext", &san]);
    assert!(std::fs::metadata(&cert).unwrap().len() > 16_384);
    let extra = format!(
        "ssl_certificate {}; ssl_certificate_key {};",
        cert.display(),
        key.display()
    );
    let nginx = Nginx::start_with("big-cert", 1, 2048, &extra);
    for mode in ["handshake", "none"] {
        let out = traced(&nginx, mode, || {
            for v in ["-tls1_3", "-tls1_2"] {
                let out = s_client(nginx.port, &[v]);
                assert!(out.contains("New, TLS"), "{v}: {out}");
            }
        });
        assert_eq!(out.records.len(), 2, "{}", out.stderr);
        for (r, version) in out.records.iter().zip(["1.3", "1.2"]) {
            check_full(r, version, &format!("big certificate {mode}"));
        }
        one_exchange(&out, &format!("big certificate {mode}"));
    }
}

/// Where a 0-RTT test keeps its session (`.0`) and its early request (`.1`, HTTP/1.`minor`
/// to demo.test) in `nginx`'s directory.
fn early_files(nginx: &TestServer, minor: u32) -> (String, String) {
    let req = nginx.dir.join("request.txt");
    let text = format!("GET / HTTP/1.{minor}\r\nHost: demo.test\r\n\r\n");
    std::fs::write(&req, text).unwrap();
    let sess = nginx.dir.join("early.sess");
    (sess.display().to_string(), req.display().to_string())
}

/// Resumes `sess` on `port` with `req` as 0-RTT data and nothing else to send: nginx took
/// the early data and answered it.
fn early_request_only(port: u16, sess: &str, req: &str) {
    let early = s_client_early_only(port, &["-tls1_3", "-sess_in", sess, "-early_data", req]);
    assert!(early.contains("Early data was accepted"), "{early}");
    assert!(early.contains("HTTP/1.1 200 OK"), "{early}");
}

/// 0-RTT (`ssl_early_data on`): a resumed TLS 1.3 client sends its request with its
/// ClientHello, and nginx answers it right after its first flight, usually before the
/// client's Finished (with HTTP/1.0 it closes without ever reading that Finished). The
/// early request is the first request, its stages follow `server_flight_1`. On the same server a
/// new TLS 1.3 handshake (OpenSSL's SSL_do_handshake returns before the client's Finished
/// there) keeps every stage of its kind.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn early_data() {
    let nginx = Nginx::start_with("early", 1, 2048, "ssl_early_data on;");
    let (sess, req) = early_files(&nginx, 0);
    for mode in ["handshake", "none"] {
        let out = traced(&nginx, mode, || {
            let first = s_client(nginx.port, &["-tls1_3", "-sess_out", &sess]);
            assert!(first.contains("New, TLSv1.3"), "{first}");
            // the early request only: a second one from stdin, sent once the handshake
            // is done, may reach nginx before it closes (two exchanges, rightly counted)
            early_request_only(nginx.port, &sess, &req);
        });
        let what = format!("--uprobes {mode}");
        assert_eq!(out.records.len(), 2, "{what}: {}", out.stderr);
        let (new, early) = (&out.records[0], &out.records[1]);
        check_full(new, "1.3", &what);
        assert!(new.get("early_data").is_none(), "{what}: {new}");
        assert_eq!(early["kind"], "resumed", "{what}: {early}");
        assert_eq!(early["resumption"], "psk", "{what}: {early}");
        assert_eq!(early["early_data"], true, "{what}: {early}");
        let want = ["server_flight_1", "request_queue", "response"];
        assert_has_stages(early, &want, &format!("{what}: {early}"));
        let stages = early["stages_ns"].as_object().unwrap();
        assert!(stages["response"].as_u64() > Some(0), "{what}: {early}");
        // the answer's writes are the response, not more of the first flight: the
        // handshake ends with that flight (with uprobes, where SSL_do_handshake returned)
        let sum = |names: &[&str]| -> u64 {
            names
                .iter()
                .map(|s| stages.get(*s).and_then(Value::as_u64).unwrap_or(0))
                .sum()
        };
        let mut handshake = vec!["wait_client_hello", "client_hello_queue", "server_flight_1"];
        // From the wire alone, a busy nginx may read the client's Finished (in the read
        // that takes the early request) before it answers; the Finished, its tickets and
        // then the answer are that connection's story. With uprobes, SSL_do_handshake
        // returned at the first flight: the handshake was done before that read.
        if mode == "none" && stages.contains_key("wait_client_flight_2") {
            handshake.extend([
                "wait_client_flight_2",
                "client_flight_2_queue",
                "server_flight_2",
            ]);
            assert_has_stages(early, &handshake, &format!("{what}: {early}"));
        } else {
            assert!(
                !stages.contains_key("wait_client_flight_2"),
                "{what}: the client's Finished was no stage of this handshake: {early}"
            );
        }
        let total = early["handshake_ns"].as_u64().unwrap();
        assert_eq!(sum(&handshake), total, "{what}: {early}");
        check_stages(early);
        one_exchange(&out, &what);
    }
    // nginx's view of the same connections: new, resumed; new, resumed
    assert_eq!(nginx.resumed_log(), [false, true, false, true]);
}

/// A keep-alive request in 0-RTT, the client's second flight (EndOfEarlyData, Finished)
/// held back until nginx has answered it: reading that flight opens no second exchange.
/// No more requests follow; nginx closes the connection after a second of keep-alive.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn early_data_answered_before_the_clients_finished() {
    let extra = "ssl_early_data on; keepalive_timeout 1s;";
    let nginx = Nginx::start_with("early-late", 1, 2048, extra);
    let (sess, req) = early_files(&nginx, 1);
    let first = s_client(nginx.port, &["-tls1_3", "-sess_out", &sess]);
    assert!(first.contains("New, TLSv1.3"), "{first}");
    let late = DelayProxy::start(nginx.port, 2, Duration::from_millis(50));
    for mode in ["handshake", "none"] {
        let out = traced(&nginx, mode, || early_request_only(late.port, &sess, &req));
        let what = format!("--uprobes {mode}");
        assert_eq!(out.records.len(), 1, "{what}: {}", out.stderr);
        let early = &out.records[0];
        assert_eq!(early["early_data"], true, "{what}: {early}");
        assert_has_stages(early, &["response"], &format!("{what}: {early}"));
        check_stages(early);
        assert_eq!(out.closes.len(), 1, "{what}: {}", out.stderr);
        one_exchange(&out, &what);
    }
}
