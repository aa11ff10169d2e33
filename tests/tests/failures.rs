//! Where a failed handshake died: `failed_in` is the stage the connection was in when it
//! ended. Real nginx, real clients. Root only; run with `cargo xtask test`.

use std::{thread, time::Duration};

use hstrace_tests::{
    assert::{assert_accounted, check_stages, str_field},
    clients::{raw_exchange, reset_on_close, s_client, s_client_child},
    fixtures::client_hello_record,
    hstrace::Hstrace,
    procs::Stopped,
    servers::{Haproxy, Nginx, TestServer},
};

/// The one connection record of a run, in both probe modes.
fn one_record(nginx: &TestServer, mode: &str, client: impl Fn()) -> serde_json::Value {
    let master = nginx.master_pid().to_string();
    let tracer = Hstrace::start(&["--pid", &master, "--uprobes", mode]);
    client();
    let out = tracer.stop();
    assert_eq!(out.records.len(), 1, "{mode}: {}", out.stderr);
    assert_accounted(&out.health, true);
    out.records[0].clone()
}

/// A TLS 1.2 client that rejects the server's certificate answers its first flight with
/// an alert: the handshake died while the server waited for the client's second flight,
/// not in the server's (it never wrote one).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_client_that_rejects_the_certificate() {
    rejects_the_certificate(Nginx::start("reject-cert", 1));
}

/// The same against HAProxy, which reads the alert's record header and its two bytes in
/// separate reads.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_client_that_rejects_haproxys_certificate() {
    rejects_the_certificate(Haproxy::start("reject-cert-haproxy"));
}

fn rejects_the_certificate(nginx: TestServer) {
    for mode in ["handshake", "none"] {
        let r = one_record(&nginx, mode, || {
            let out = s_client(nginx.port, &["-tls1_2", "-verify_return_error"]);
            assert!(!out.contains("New, TLS"), "the client accepted it: {out}");
        });
        assert_eq!(r["failure"], "alert", "{mode}: {r}");
        assert_eq!(r["alert"]["from"], "client", "{mode}: {r}");
        assert_eq!(r["failed_in"], "wait_client_flight_2", "{mode}: {r}");
        check_stages(&r);
    }
}

/// A lone zero-length handshake record, then the client leaves: the server was still
/// waiting for a ClientHello.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_lone_zero_length_record() {
    let nginx = Nginx::start("zero-record", 1);
    for mode in ["handshake", "none"] {
        let r = one_record(&nginx, mode, || {
            raw_exchange(nginx.port, &[22, 3, 1, 0, 0]);
        });
        assert_eq!(r["kind"], "failed", "{mode}: {r}");
        assert_eq!(r["failed_in"], "wait_client_hello", "{mode}: {r}");
        check_stages(&r);
    }
}

/// An SSLv2-format ClientHello (as old scanners send) offering only TLS 1.0, which nginx
/// refuses: the server answers it with an alert, so it died in the server's first flight,
/// and the alert is the server's.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn an_sslv2_client_hello() {
    let nginx = Nginx::start("sslv2-hello", 1);
    // msg_type 1, version 3.1, three 3-byte cipher specs, no session id, a 16-byte challenge
    let mut body = vec![1, 3, 1, 0, 9, 0, 0, 0, 16];
    body.extend_from_slice(&[0x00, 0x00, 0x2f, 0x00, 0x00, 0x35, 0x00, 0x00, 0x0a]);
    body.extend_from_slice(&[7; 16]);
    let mut hello = (0x8000u16 | body.len() as u16).to_be_bytes().to_vec();
    hello.extend_from_slice(&body);
    for mode in ["handshake", "none"] {
        let r = one_record(&nginx, mode, || {
            let answer = raw_exchange(nginx.port, &hello);
            assert_eq!(
                answer.first(),
                Some(&21),
                "nginx did not answer with an alert: {answer:?}"
            );
        });
        assert_eq!(r["failure"], "alert", "{mode}: {r}");
        assert_eq!(r["alert"]["from"], "server", "{mode}: {r}");
        assert_eq!(r["failed_in"], "server_flight_1", "{mode}: {r}");
        assert!(
            r["notes"].to_string().contains("client_hello_sslv2"),
            "{mode}: {r}"
        );
        check_stages(&r);
    }
}

/// A handshake record that claims 65,535 bytes, longer than TLS allows: nginx's OpenSSL
/// answers record_overflow (22) at once. A TLS peer breaking the protocol, not plain text.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_record_longer_than_tls_allows() {
    let nginx = Nginx::start("overlong-record", 1);
    for mode in ["handshake", "none"] {
        let r = one_record(&nginx, mode, || {
            raw_exchange(nginx.port, &[22, 3, 1, 0xff, 0xff]);
        });
        assert_eq!(r["failure"], "alert", "{mode}: {r}");
        assert_eq!(r["alert"]["from"], "server", "{mode}: {r}");
        assert_eq!(r["alert"]["description"], 22, "{mode}: {r}");
        assert_eq!(r["failed_in"], "server_flight_1", "{mode}: {r}");
        check_stages(&r);
    }
}

/// Plain HTTP sent to the TLS port: nginx answers with its own 400 page and closes. Not
/// TLS, and it died in the server's answer to the first bytes. nginx peeks at the first
/// byte and never hands plain text to OpenSSL, so a TLS handshake first shows the port is TLS.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn plain_http_to_the_tls_port() {
    let nginx = Nginx::start("plain-to-tls", 1);
    for mode in ["handshake", "none"] {
        let master = nginx.master_pid().to_string();
        let tracer = Hstrace::start(&["--pid", &master, "--uprobes", mode]);
        s_client(nginx.port, &[]);
        let answer = raw_exchange(nginx.port, b"GET / HTTP/1.0\r\n\r\n");
        assert!(
            answer.starts_with(b"HTTP/1.1 400"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        let out = tracer.stop();
        assert_eq!(out.records.len(), 2, "{mode}: {}", out.stderr);
        assert_accounted(&out.health, true);
        let r = out.records.last().unwrap();
        assert_eq!(r["failure"], "not_tls", "{mode}: {r}");
        assert_eq!(r["protocol"], "tls", "{mode}: {r}");
        assert_eq!(r["failed_in"], "server_flight_1", "{mode}: {r}");
        check_stages(r);
    }
}

/// A client that connects and resets while its connection waits in the accept queue (the
/// worker is stopped meanwhile): nginx still accepts the dead socket, reads the reset and
/// closes it. The reset released the socket's port before the accept, so the port comes
/// from where the reset left it; under `--port` a port of 0 had the connection dropped
/// from the accounting, under `--pid` it printed `local` with port 0.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_reset_in_the_accept_queue() {
    let nginx = Nginx::start("reset-in-queue", 1);
    let worker = *nginx.worker_pids().iter().next().unwrap();
    let port = nginx.port.to_string();
    let master = nginx.master_pid().to_string();
    for selector in [["--port", port.as_str()], ["--pid", master.as_str()]] {
        let tracer = Hstrace::start(&[selector[0], selector[1], "--uprobes", "none"]);
        let stopped = Stopped::new(worker);
        let stream = std::net::TcpStream::connect(("127.0.0.1", nginx.port)).unwrap();
        reset_on_close(&stream).expect("SO_LINGER");
        drop(stream); // a reset, not a FIN
        std::thread::sleep(std::time::Duration::from_millis(200));
        drop(stopped);
        let out = tracer.stop();
        let what = format!("{}: {}", selector[0], out.stderr);
        assert_eq!(out.records.len(), 1, "{what}");
        assert_accounted(&out.health, true);
        let r = &out.records[0];
        assert_eq!(r["local"], format!("127.0.0.1:{port}"), "{what}: {r}");
        assert_eq!(r["kind"], "failed", "{what}: {r}");
    }
}

/// A client that resets the connection after the server's first flight: failed, reset.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn client_reset_mid_handshake() {
    let nginx = Nginx::start("reset", 1);
    let port = nginx.port.to_string();
    let tracer = Hstrace::start(&["--port", &port]);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", nginx.port)).unwrap();
    std::io::Write::write_all(&mut s, &client_hello_record("tls12_full.client_hello.hex")).unwrap();
    let mut first = [0u8; 1];
    std::io::Read::read_exact(&mut s, &mut first).unwrap();
    reset_on_close(&s).unwrap();
    drop(s);
    let out = tracer.stop();
    assert_eq!(out.records.len(), 1, "{:?}", out.records);
    let r = &out.records[0];
    assert_eq!(str_field(r, "failure"), Some("reset"), "{r}");
    assert_eq!(
        str_field(r, "failed_in"),
        Some("wait_client_flight_2"),
        "{r}"
    );
}

/// A connection that never finishes is reported after --idle-timeout, not held forever;
/// one that completed its handshake but sent no request is reported as it stands.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn idle_connections_are_reported_after_the_timeout() {
    let nginx = Nginx::start("idle", 1);
    let port = nginx.port.to_string();
    let tracer = Hstrace::start(&["--port", &port, "--idle-timeout", "1"]);
    // nothing sent at all, for 3 s
    let silent = std::net::TcpStream::connect(("127.0.0.1", nginx.port)).unwrap();
    // a handshake, then nothing: s_client waits on its stdin
    let mut idle_tls = s_client_child(nginx.port, &["-tls1_3"]);
    thread::sleep(Duration::from_secs(3));
    let _ = idle_tls.kill();
    let _ = idle_tls.wait();
    drop(silent);
    let out = tracer.stop();
    assert_eq!(out.records.len(), 2, "{:?}", out.records);
    let silent = out
        .records
        .iter()
        .find(|r| r["kind"] == "failed")
        .expect("the silent one");
    assert_eq!(str_field(silent, "failure"), Some("timeout"), "{silent}");
    assert_eq!(
        str_field(silent, "failed_in"),
        Some("wait_client_hello"),
        "{silent}"
    );
    let tls = out
        .records
        .iter()
        .find(|r| r["kind"] == "full")
        .expect("the idle TLS one");
    assert!(
        tls["stages_ns"].get("server_flight_2").is_some()
            && tls["stages_ns"].get("response").is_none(),
        "{tls}"
    );
    // reported once, even though the kernel saw them close later
    assert_eq!(out.closes.len(), 2, "{:?}", out.closes);
}
