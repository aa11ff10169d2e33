//! Hellos as real clients send them today, against a real nginx in the real kernel.
//! Root only; run with `cargo xtask test`.

use std::time::Duration;

use hstrace_tests::{
    assert::{assert_accounted, assert_has_stages, check_stages, str_field},
    chromium,
    clients::{curl, dribble_exchange, raw_exchange, s_client},
    fixtures::{client_hello_record, client_hello_record_of, split_client_hello},
    hstrace::Hstrace,
    proxies::ReframeProxy,
    servers::Nginx,
    util::wait_for,
};

const SERVER_NAME: u16 = 0;
const SUPPORTED_GROUPS: u16 = 10;
const KEY_SHARE: u16 = 51;
/// X25519MLKEM768 (draft-kwiatkowski-tls-ecdhe-mlkem): a 1,216-byte client key share
const X25519_MLKEM768: u16 = 0x11ec;
/// padding (RFC 7685), which BoringSSL adds to keep a hello out of 256–511 bytes
const PADDING: u16 = 21;

/// The captured TLS 1.3 ClientHello as a current browser sends it: an X25519MLKEM768 key
/// share of 1,216 bytes beside its X25519 one, a padding extension, and the extensions in
/// another order, the key share first and the SNI last. Returns the record and the SNI.
fn post_quantum_client_hello() -> (Vec<u8>, String) {
    let rec = client_hello_record("tls13_full.client_hello.hex");
    let (head, mut exts) = split_client_hello(&rec[5..]);
    for (ty, data) in exts.iter_mut() {
        if *ty == SUPPORTED_GROUPS {
            let mut groups = X25519_MLKEM768.to_be_bytes().to_vec();
            groups.extend_from_slice(&data[2..]);
            *data = [(groups.len() as u16).to_be_bytes().to_vec(), groups].concat();
        }
        if *ty == KEY_SHARE {
            let mut shares = X25519_MLKEM768.to_be_bytes().to_vec();
            shares.extend_from_slice(&1216u16.to_be_bytes());
            shares.extend((0..1216u32).map(|i| (i * 7 + 3) as u8));
            shares.extend_from_slice(&data[2..]);
            *data = [(shares.len() as u16).to_be_bytes().to_vec(), shares].concat();
        }
    }
    exts.push((PADDING, vec![0; 256]));
    exts.sort_by_key(|(ty, _)| match *ty {
        KEY_SHARE => 0,
        SERVER_NAME => 2,
        _ => 1,
    });
    let sni = exts
        .iter()
        .find(|(ty, _)| *ty == SERVER_NAME)
        .map(|(_, d)| String::from_utf8(d[5..].to_vec()).unwrap())
        .expect("the fixture names a server");
    let rec = client_hello_record_of(&head, &exts);
    (rec, sni)
}

/// `hello` (records) sent to a fresh nginx: its answer is its own hello, and the record of
/// the connection has the hello's SNI, in both probe modes.
fn keeps_its_sni(name: &str, hello: &[u8], sni: &str) {
    let nginx = Nginx::start(name, 1);
    let master = nginx.master_pid().to_string();
    for mode in ["handshake", "none"] {
        let tracer = Hstrace::start(&["--pid", &master, "--uprobes", mode]);
        let answer = raw_exchange(nginx.port, hello);
        assert_eq!(
            answer.first(),
            Some(&22),
            "nginx answers with its hello: {answer:?}"
        );
        let out = tracer.stop();
        assert_eq!(out.records.len(), 1, "{}", out.stderr);
        let r = &out.records[0];
        assert_eq!(r["sni"].as_str(), Some(sni), "{mode}: {r}");
        assert_eq!(r["tls_version"], "1.3", "{mode}: {r}");
        assert_eq!(r["resumption_offered"], false, "{mode}: {r}");
        assert!(
            !r["notes"].to_string().contains("client_hello"),
            "{mode}: {r}"
        );
        assert_accounted(&out.health, true);
    }
}

/// Post-quantum key shares make real ClientHellos ~1.8 KB, and browsers randomize the
/// extension order: the SNI may come after the first 1.5 KB. hstrace reads it, and the
/// rest of the hello, wherever it is (both probe modes).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_post_quantum_client_hello_keeps_its_sni() {
    let (hello, sni) = post_quantum_client_hello();
    let sni_at = hello
        .windows(sni.len())
        .position(|w| w == sni.as_bytes())
        .unwrap();
    assert!(
        sni_at > 1536,
        "the SNI at {sni_at}: not past the old capture"
    );
    keeps_its_sni("pq-hello", &hello, &sni);
}

/// A ClientHello cut into TLS records of 1 byte (legal, and the extreme), then of 100 bytes,
/// by a proxy in front of nginx: a real client's handshake completes, and hstrace reads the
/// hello's SNI and its resumption offer from the pieces (both probe modes).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_client_hello_in_many_records_keeps_its_sni() {
    let nginx = Nginx::start("fragmented-hello", 1);
    let master = nginx.master_pid().to_string();
    for piece in [1, 100] {
        let proxy = ReframeProxy::start(nginx.port, piece);
        let mut served = 0;
        for mode in ["handshake", "none"] {
            let tracer = Hstrace::start(&["--pid", &master, "--uprobes", mode]);
            for version in ["-tls1_3", "-tls1_2"] {
                let out = s_client(proxy.port, &[version, "-servername", "pieces.example"]);
                assert!(
                    out.contains("New, TLS"),
                    "{piece}-byte records, {version}: {out}"
                );
            }
            // the proxy's own sockets close too before the tables are checked
            wait_for(
                "the proxy's connections to close",
                Duration::from_secs(5),
                || proxy.served() == served + 2,
            );
            served += 2;
            let out = tracer.stop();
            assert_eq!(out.records.len(), 2, "{}", out.stderr);
            for (r, version) in out.records.iter().zip(["1.3", "1.2"]) {
                let what = format!("{piece}-byte records, {mode}: {r}");
                assert_eq!(r["kind"], "full", "{what}");
                assert_eq!(r["tls_version"], version, "{what}");
                assert_eq!(r["sni"], "pieces.example", "{what}");
                assert!(r.get("notes").is_none(), "{what}");
                check_stages(r);
            }
            assert_accounted(&out.health, true);
        }
    }
}

/// The post-quantum hello above, spread over records of 600 bytes: the SNI, in the last
/// record, is still read.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_post_quantum_client_hello_over_several_records() {
    let (hello, sni) = post_quantum_client_hello();
    let mut records = Vec::new();
    for chunk in hello[5..].chunks(600) {
        records.extend_from_slice(&hello[..3]);
        records.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        records.extend_from_slice(chunk);
    }
    keeps_its_sni("pq-hello-records", &records, &sni);
}

/// TLS 1.3 with a HelloRetryRequest: the client's key share (P-256) is not one nginx takes
/// (X25519 only), so nginx asks again. The retry round gets stages of its own, the flights
/// after it line up, and a resumption after the retry is reported as one, as nginx's log
/// says (both probe modes).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_hello_retry_request_has_stages_of_its_own() {
    let nginx = Nginx::start_with("hello-retry", 1, 2048, "ssl_ecdh_curve X25519;");
    let master = nginx.master_pid().to_string();
    let sess = nginx.dir.join("hrr.sess").display().to_string();
    for mode in ["handshake", "none"] {
        let tracer = Hstrace::start(&["--pid", &master, "--uprobes", mode]);
        let retry = ["-tls1_3", "-groups", "P-256:X25519"];
        let out = s_client(nginx.port, &[&retry[..], &["-sess_out", &sess]].concat());
        assert!(out.contains("New, TLS"), "{out}");
        let out = s_client(nginx.port, &[&retry[..], &["-sess_in", &sess]].concat());
        assert!(out.contains("Reused, TLS"), "{out}");
        let out = tracer.stop();
        assert_eq!(out.records.len(), 2, "{}", out.stderr);
        for (r, kind) in out.records.iter().zip(["full", "resumed"]) {
            let what = format!("{mode}: {r}");
            assert_eq!(r["kind"], kind, "{what}");
            assert_eq!(r["tls_version"], "1.3", "{what}");
            assert_eq!(r["sni"], "demo.test", "{what}");
            let stages = [
                "wait_client_hello",
                "hello_retry",
                "wait_client_hello_2",
                "server_flight_1",
                "wait_client_flight_2",
                "server_flight_2",
                "response",
            ];
            assert_has_stages(r, &stages, &what);
            assert!(
                r["cpu_ns"]["hello_retry"].as_u64().is_some_and(|v| v > 0),
                "{what}"
            );
            assert!(r.get("notes").is_none(), "{what}");
            // the retry asked for nginx's only group, and the handshake used it
            assert_eq!(r["hrr_cause"], "no_acceptable_share", "{what}");
            assert_eq!(r["tls_group"], "x25519", "{what}");
            check_stages(r);
        }
        assert_eq!(out.records[1]["resumption"], "psk", "{mode}");
        assert_accounted(&out.health, true);
    }
    assert_eq!(
        nginx.resumed_log(),
        [false, true, false, true],
        "nginx's own log"
    );
}

/// A ClientHello that reaches the server a few bytes at a time: the server's reads cut the
/// record header and body anywhere, and the parser must still find every field.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn client_hello_split_over_many_reads() {
    let nginx = Nginx::start("split", 1);
    let port = nginx.port.to_string();
    let tracer = Hstrace::start(&["--port", &port]);
    let hello = client_hello_record("tls12_full.client_hello.hex");
    for piece in [1, 3, 7] {
        let flight = dribble_exchange(nginx.port, &hello, piece);
        assert_eq!(
            flight.first(),
            Some(&22),
            "no ServerHello for pieces of {piece}"
        );
    }
    let out = tracer.stop();
    assert_eq!(out.records.len(), 3, "{:?}\n{}", out.records, out.stderr);
    for r in &out.records {
        // the client leaves after the server's first flight
        assert_eq!(str_field(r, "kind"), Some("failed"), "{r}");
        assert_eq!(str_field(r, "failure"), Some("client_closed"), "{r}");
        assert_eq!(
            str_field(r, "failed_in"),
            Some("wait_client_flight_2"),
            "{r}"
        );
        assert_eq!(str_field(r, "sni"), Some("demo.test"), "{r}");
        assert_eq!(str_field(r, "tls_version"), Some("1.2"), "{r}");
        assert!(r.get("notes").is_none(), "{r}");
        check_stages(r);
    }
}

/// The key exchange and the client's fingerprint as clients send them in 2026. Chromium
/// offers X25519MLKEM768 and sends its hybrid share (a ClientHello of well over a kilobyte);
/// nginx on Debian's OpenSSL 3.0 knows no ML-KEM and takes x25519: a client offering
/// post-quantum and not getting it. openssl s_client offers no post-quantum group; two of
/// its connections have one JA4, curl's (another ClientHello) another, Chromium's a third.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn key_exchange_and_fingerprints_of_three_clients() {
    let nginx = Nginx::start("pq-offer", 1);
    let port = nginx.port.to_string();
    let tracer = Hstrace::start(&["--port", &port]);
    let url = format!("https://127.0.0.1:{}/", nginx.port);
    chromium::dump_dom_with(&url, &["--ignore-certificate-errors".to_owned()]);
    for _ in 0..2 {
        assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLS"));
    }
    curl(&["--tlsv1.3"], std::slice::from_ref(&url));
    let out = tracer.stop();
    let done: Vec<_> = out
        .records
        .iter()
        .filter(|r| r["kind"] == "full" || r["kind"] == "resumed")
        .collect();
    let ja4 = |r: &serde_json::Value| {
        str_field(r, "ja4")
            .unwrap_or_else(|| panic!("no ja4: {r}"))
            .to_owned()
    };
    // Chromium: to an address, so no SNI (`t13i`)
    let browser: Vec<_> = done.iter().filter(|r| r["pq_offered"] == true).collect();
    assert!(
        !browser.is_empty(),
        "no connection offered post-quantum: {:?}",
        out.records
    );
    for r in &browser {
        assert_eq!(r["tls_group"], "x25519", "{r}");
        assert!(r["client_hello_bytes"].as_u64() > Some(1_200), "{r}");
        assert!(ja4(r).starts_with("t13i"), "{r}");
    }
    // s_client: SNI demo.test
    let openssl: Vec<_> = done.iter().filter(|r| r["sni"] == "demo.test").collect();
    assert_eq!(openssl.len(), 2, "{:?}", out.records);
    for r in &openssl {
        assert_eq!(r["pq_offered"], false, "{r}");
        assert_eq!(r["tls_group"], "x25519", "{r}");
        assert!(r["client_hello_bytes"].as_u64() < Some(1_000), "{r}");
        assert!(ja4(r).starts_with("t13d"), "{r}");
    }
    assert_eq!(
        ja4(openssl[0]),
        ja4(openssl[1]),
        "one client, one fingerprint"
    );
    // curl: no SNI to an address, no post-quantum offer
    let curls: Vec<_> = done
        .iter()
        .filter(|r| r["pq_offered"] == false && r["sni"].is_null())
        .collect();
    assert_eq!(curls.len(), 1, "{:?}", out.records);
    let fingerprints: std::collections::BTreeSet<String> =
        [ja4(curls[0]), ja4(openssl[0]), ja4(browser[0])]
            .into_iter()
            .collect();
    assert_eq!(
        fingerprints.len(),
        3,
        "three clients, three fingerprints: {fingerprints:?}"
    );
    assert_accounted(&out.health, true);
}

/// TLS 1.2's key exchange, each checked against s_client's own "Server Temp Key" line:
/// ECDHE's named group read from the ServerKeyExchange (X25519, P-256, P-384), DHE as
/// `ffdhe` (nginx with RFC 7919's ffdhe2048 parameters), RSA key transport as `rsa` (no
/// ServerKeyExchange, no temporary key), in both probe modes.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn tls12_key_exchanges_are_named_as_the_client_saw_them() {
    let dir = hstrace_tests::util::work_dir("tls12-kx-dh");
    let dh = dir.join("ffdhe2048.pem");
    let made = std::process::Command::new("openssl")
        .args(["genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt"])
        .args(["group:ffdhe2048", "-out"])
        .arg(&dh)
        .status()
        .unwrap();
    assert!(made.success(), "openssl genpkey -genparam");
    let nginx = Nginx::start_with(
        "tls12-kx",
        1,
        2048,
        &format!("ssl_dhparam {};", dh.display()),
    );
    let master = nginx.master_pid().to_string();
    // (s_client's arguments, its "Server Temp Key" line's start, the record's group)
    let cases: [(&[&str], Option<&str>, &str); 5] = [
        (&["-groups", "X25519"], Some("X25519"), "x25519"),
        (&["-groups", "P-256"], Some("ECDH, prime256v1"), "secp256r1"),
        (&["-groups", "P-384"], Some("ECDH, secp384r1"), "secp384r1"),
        (
            &["-cipher", "DHE-RSA-AES128-GCM-SHA256"],
            Some("DH, 2048 bits"),
            "ffdhe",
        ),
        (&["-cipher", "AES128-GCM-SHA256"], None, "rsa"),
    ];
    for mode in ["handshake", "none"] {
        let tracer = Hstrace::start(&["--pid", &master, "--uprobes", mode]);
        for (args, want, _) in &cases {
            let out = s_client(nginx.port, &[&["-tls1_2"][..], args].concat());
            assert!(out.contains("New, TLS"), "{args:?}: {out}");
            let temp = out
                .lines()
                .find_map(|l| l.trim().strip_prefix("Server Temp Key: "))
                .map(str::to_owned);
            match want {
                Some(w) => assert!(
                    temp.as_deref().is_some_and(|t| t.starts_with(w)),
                    "{args:?}: s_client says {temp:?}"
                ),
                None => assert_eq!(temp, None, "{args:?}"),
            }
        }
        let out = tracer.stop();
        assert_eq!(out.records.len(), cases.len(), "{}", out.stderr);
        for (r, (args, _, group)) in out.records.iter().zip(&cases) {
            let what = format!("{mode} {args:?}: {r}");
            assert_eq!(r["kind"], "full", "{what}");
            assert_eq!(r["tls_version"], "1.2", "{what}");
            assert_eq!(r["tls_group"], *group, "{what}");
        }
        assert_accounted(&out.health, true);
    }
}
