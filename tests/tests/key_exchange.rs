//! The key-exchange group per connection, post-quantum hybrids included, each record
//! checked against the client's own view: Go clients of a Go TLS 1.3 server that has no
//! libssl (hstrace sees it from the wire only), openssl s_client and tlslite-ng (TLS 1.3
//! resumption with and without a key exchange) against nginx. Root only; run with
//! `cargo xtask test`.

use std::process::Command;

use hstrace_tests::{
    assert::{assert_accounted, assert_has_stages, check_stages},
    clients::s_client,
    go_pqtls::{go_client, GoPqServer},
    hstrace::Hstrace,
    ja4plus::{ja4_mismatches, peer_port, Ja4Capture},
    servers::Nginx,
    util::{venv_python, workspace},
};

/// The IANA name hstrace gives a group Go reports by number.
fn iana_name(id: u64) -> String {
    match id {
        0x001d => "x25519".into(),
        0x0017 => "secp256r1".into(),
        0x0018 => "secp384r1".into(),
        0x0019 => "secp521r1".into(),
        0x11eb => "SecP256r1MLKEM768".into(),
        0x11ec => "X25519MLKEM768".into(),
        0x11ed => "SecP384r1MLKEM1024".into(),
        other => format!("0x{other:04X}"),
    }
}

/// (the client's groups, the group both sides must name, a PQ offer, a retry)
type Case = (&'static str, &'static str, bool, bool);

/// Go clients against two Go servers, each record checked against Go's own view: the
/// group Go negotiated, the client's post-quantum offer, a retry's cause and stages, the
/// accounting. Go sends a key share for the first of its groups in its own fixed order
/// (the hybrids first), whatever order `CurvePreferences` lists them in.
///
/// A server with Go's defaults: a client by default (X25519MLKEM768), one restricted to
/// X25519, one with Go 1.26's SecP256r1MLKEM768 alone; the hybrid's ClientHello is about
/// 1.2 KB larger than the X25519 one's.
///
/// A server that takes only SecP256r1MLKEM768 and P-256: the default client's X25519MLKEM768
/// and X25519 shares are refused, so the server asks for SecP256r1MLKEM768 with a
/// HelloRetryRequest, and a client of X25519 and P-256 is asked for P-256.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn go_hybrid_key_exchanges_are_named_as_go_clients_saw_them() {
    let defaults: [Case; 3] = [
        ("default", "X25519MLKEM768", true, false),
        ("X25519", "x25519", false, false),
        ("SecP256r1MLKEM768", "SecP256r1MLKEM768", true, false),
    ];
    let bytes = check_go_server("go-pq-default", "default", &defaults);
    // X25519MLKEM768's share is ML-KEM-768's 1184-byte encapsulation key and X25519's
    // 32 bytes, sent beside the X25519 share the restricted client sends alone
    let extra = bytes[0] - bytes[1];
    assert!(
        (1_150..=1_400).contains(&extra),
        "the hybrid's ClientHello is {extra} bytes larger: {bytes:?}"
    );
    let retries: [Case; 2] = [
        ("default", "SecP256r1MLKEM768", true, true),
        ("X25519,P256", "secp256r1", false, true),
    ];
    check_go_server("go-pq-retry", "SecP256r1MLKEM768,P256", &retries);
}

/// Trace a Go server taking `server_groups` while Go clients connect, one per case, and
/// check each record: the clients' ClientHello sizes, in the cases' order.
fn check_go_server(name: &str, server_groups: &str, cases: &[Case]) -> Vec<u64> {
    let server = GoPqServer::start(name, server_groups);
    let mut capture = Ja4Capture::start(server.port);
    let tracer = Hstrace::start(&["--port", &server.port.to_string()]);
    let seen: Vec<_> = cases
        .iter()
        .map(|(groups, want, _, _)| {
            let go = go_client(server.port, groups);
            assert_eq!(go["version"], "TLS 1.3", "{groups}: {go}");
            let id = go["curve_id"].as_u64().expect("curve_id");
            assert_eq!(iana_name(id), *want, "{groups}: Go negotiated {go}");
            go
        })
        .collect();
    let out = tracer.stop();
    assert_eq!(out.records.len(), cases.len(), "{:?}", out.records);
    let mut hello_bytes = Vec::new();
    for ((groups, _, pq, retry), go) in cases.iter().zip(&seen) {
        let port = go["port"].as_u64().map(|p| p as u16);
        let r = out
            .records
            .iter()
            .find(|r| peer_port(r) == port)
            .unwrap_or_else(|| panic!("{groups}: no record for Go's port {port:?}"));
        let what = format!("server {server_groups}, client {groups} (Go: {go}): {r}");
        assert_eq!(r["kind"], "full", "{what}");
        assert_eq!(r["tls_version"], "1.3", "{what}");
        let client_view = iana_name(go["curve_id"].as_u64().unwrap());
        assert_eq!(r["tls_group"], client_view.as_str(), "{what}");
        assert_eq!(r["pq_offered"], *pq, "{what}");
        let mut stages = vec![
            "accept_queue",
            "wait_client_hello",
            "server_flight_1",
            "wait_client_flight_2",
            "response",
        ];
        if *retry {
            assert_eq!(r["hrr_cause"], "no_acceptable_share", "{what}");
            stages.extend(["hello_retry", "wait_client_hello_2"]);
        } else {
            assert!(r.get("hrr_cause").is_none(), "{what}");
        }
        assert_has_stages(r, &stages, &what);
        check_stages(r);
        let bytes = r["client_hello_bytes"]
            .as_u64()
            .expect("client_hello_bytes");
        eprintln!(
            "server {server_groups:<24} client {groups:<18} Go {:<18} hstrace {} pq_offered {} hrr {} hello {bytes} B ja4 {}",
            go["curve"], r["tls_group"], r["pq_offered"], r["hrr_cause"], r["ja4"]
        );
        hello_bytes.push(bytes);
    }
    // the hybrid's and the retried hellos' JA4 too, against ja4plus
    capture.new_ports(cases.len());
    let mismatches = ja4_mismatches(&out.records, &capture.seen, &Default::default());
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert_accounted(&out.health, true);
    hello_bytes
}

/// TLS 1.3 resumption with and without a key exchange, against nginx (OpenSSL 3.0, told
/// to allow `psk_ke` with `AllowNoDHEKEX`): tlslite-ng (PyPI) offers one mode alone, which
/// openssl s_client (it offers `psk_ke` only beside `psk_dhe_ke`, and OpenSSL's server
/// then takes `psk_dhe_ke`), Go and Java cannot. A `psk_dhe_ke` resumption names the
/// group of its key share; a `psk_ke` one says `none`; each as the client read the
/// ServerHello, and as nginx's log says it resumed.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn tls13_resumption_names_its_group_only_with_psk_dhe_ke() {
    let nginx = Nginx::start_with(
        "psk-modes",
        1,
        2048,
        "ssl_conf_command Options AllowNoDHEKEX;",
    );
    let mut capture = Ja4Capture::start(nginx.port);
    let tracer = Hstrace::start(&["--port", &nginx.port.to_string()]);
    let mut seen = Vec::new();
    for mode in ["psk_dhe_ke", "psk_ke"] {
        let out = Command::new(venv_python())
            .arg(workspace().join("tests/python/psk_client.py"))
            .arg(nginx.port.to_string())
            .arg(mode)
            .output()
            .expect("tlslite-ng client");
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
            seen.push((mode, v));
        }
    }
    let out = tracer.stop();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(out.records.len(), 4, "{:?}", out.records);
    for (i, (mode, client)) in seen.iter().enumerate() {
        let resumed = i % 2 == 1;
        assert_eq!(client["resumed"], resumed, "{mode}: {client}");
        let port = client["port"].as_u64().map(|p| p as u16);
        let r = out
            .records
            .iter()
            .find(|r| peer_port(r) == port)
            .unwrap_or_else(|| panic!("{mode}: no record for port {port:?}"));
        let what = format!("{mode} (client: {client}): {r}");
        eprintln!("{what}");
        assert_eq!(
            r["kind"],
            if resumed { "resumed" } else { "full" },
            "{what}"
        );
        assert_eq!(r["tls_version"], "1.3", "{what}");
        let client_view = client["group"]
            .as_u64()
            .map_or_else(|| "none".to_owned(), iana_name);
        assert_eq!(r["tls_group"], client_view.as_str(), "{what}");
        // the one resumption without a key exchange
        assert_eq!(
            client_view == "none",
            resumed && *mode == "psk_ke",
            "{what}"
        );
        check_stages(r);
    }
    // tlslite-ng's hellos' JA4 (a pre_shared_key in the resuming ones), against ja4plus
    capture.new_ports(seen.len());
    let mismatches = ja4_mismatches(&out.records, &capture.seen, &Default::default());
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert_accounted(&out.health, true);
    assert_eq!(
        nginx.resumed_log(),
        [false, true, false, true],
        "nginx's own log"
    );
}

/// TLS 1.3 against nginx (Debian's, OpenSSL 3.0: no ML-KEM), each group as openssl
/// s_client saw it in its "Server Temp Key" line: X25519, P-256, P-384, ffdhe2048, and a
/// `-groups` list whose first share (P-521) nginx does not take, so it asks for P-384
/// with a HelloRetryRequest.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn tls13_groups_are_named_as_s_client_saw_them() {
    let nginx = Nginx::start_with(
        "tls13-groups",
        1,
        2048,
        "ssl_ecdh_curve X25519:prime256v1:secp384r1:ffdhe2048;",
    );
    let tracer = Hstrace::start(&["--port", &nginx.port.to_string()]);
    // (s_client's -groups, its "Server Temp Key" line's start, the record's group, a retry)
    let cases = [
        ("X25519", "X25519", "x25519", false),
        ("P-256", "ECDH, prime256v1", "secp256r1", false),
        ("P-384", "ECDH, secp384r1", "secp384r1", false),
        ("ffdhe2048", "DH, 2048 bits", "ffdhe2048", false),
        ("P-521:P-384", "ECDH, secp384r1", "secp384r1", true),
    ];
    for (groups, temp_key, _, _) in &cases {
        let out = s_client(nginx.port, &["-tls1_3", "-groups", groups]);
        assert!(out.contains("New, TLSv1.3"), "{groups}: {out}");
        let temp = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("Server Temp Key: "))
            .unwrap_or_else(|| panic!("{groups}: no Server Temp Key line: {out}"));
        assert!(
            temp.starts_with(temp_key),
            "{groups}: s_client says {temp:?}"
        );
    }
    let out = tracer.stop();
    assert_eq!(out.records.len(), cases.len(), "{:?}", out.records);
    for (r, (groups, temp_key, group, retry)) in out.records.iter().zip(&cases) {
        let what = format!("-groups {groups} (s_client: {temp_key}): {r}");
        assert_eq!(r["kind"], "full", "{what}");
        assert_eq!(r["tls_version"], "1.3", "{what}");
        assert_eq!(r["tls_group"], *group, "{what}");
        assert_eq!(r["pq_offered"], false, "{what}");
        if *retry {
            assert_eq!(r["hrr_cause"], "no_acceptable_share", "{what}");
            assert_has_stages(r, &["hello_retry", "wait_client_hello_2"], &what);
        } else {
            assert!(r.get("hrr_cause").is_none(), "{what}");
        }
        check_stages(r);
    }
    assert_accounted(&out.health, true);
}
