//! Where a failed handshake died: `failed_in` is the stage the connection was in when it
//! ended. Real nginx, real clients. Root only; run with `cargo xtask test`.

use hstrace_tests::*;

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
fn a_client_that_rejects_the_certificate() {
    rejects_the_certificate(Nginx::start("reject-cert", 1));
}

/// The same against HAProxy, which reads the alert's record header and its two bytes in
/// separate reads.
#[test]
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
