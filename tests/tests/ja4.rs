//! Each client's JA4 as hstrace computes it, against ja4plus (PyPI), an independent
//! implementation fed the same ClientHellos captured from loopback. Root only; run with
//! `cargo xtask test` (which installs ja4plus into target/python/venv).

use std::{collections::BTreeMap, process::Command};

use hstrace_tests::{
    assert::assert_accounted,
    chromium,
    clients::{curl, s_client},
    go_pqtls::go_client,
    hstrace::Hstrace,
    ja4plus::{ja4_mismatches, peer_port, Ja4Capture},
    servers::Nginx,
    util::workspace,
};

/// Run a client to completion, or fail naming it.
fn run(name: &str, cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        out.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// openssl s_client (TLS 1.3 and 1.2 only), curl, Python's ssl module, Go's crypto/tls
/// (a post-quantum hybrid offered), Java's JSSE and Chromium (GREASE in its ciphers,
/// extensions and groups, its extensions in a random order) against a real nginx: every
/// record's `ja4` is ja4plus's for the same client port, and every hello ja4plus saw has
/// its record.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn every_clients_ja4_is_the_one_ja4plus_computes() {
    let nginx = Nginx::start("ja4plus", 1);
    let port = nginx.port;
    let mut capture = Ja4Capture::start(port);
    let tracer = Hstrace::start(&["--port", &port.to_string()]);
    let url = format!("https://127.0.0.1:{port}/");
    let ja4_dir = workspace().join("tests/ja4");
    let mut clients: BTreeMap<u16, String> = BTreeMap::new();
    let mut drive = |name: &str, capture: &mut Ja4Capture, go: &mut dyn FnMut()| {
        go();
        let ports = capture.new_ports(1);
        assert!(!ports.is_empty(), "ja4plus saw no ClientHello from {name}");
        for p in ports {
            clients.insert(p, name.to_owned());
        }
    };
    drive("openssl s_client -tls1_3", &mut capture, &mut || {
        assert!(s_client(port, &["-tls1_3"]).contains("New, TLS"));
    });
    drive("openssl s_client -tls1_2", &mut capture, &mut || {
        assert!(s_client(port, &["-tls1_2"]).contains("New, TLS"));
    });
    drive("curl", &mut capture, &mut || {
        curl(&[], std::slice::from_ref(&url));
    });
    drive("python ssl", &mut capture, &mut || {
        run(
            "python ssl",
            Command::new("/usr/bin/python3")
                .arg(ja4_dir.join("python_client.py"))
                .arg(port.to_string()),
        );
    });
    drive("go crypto/tls", &mut capture, &mut || {
        go_client(port, "default");
    });
    drive("java jsse", &mut capture, &mut || {
        run(
            "java jsse",
            Command::new("java")
                .arg(ja4_dir.join("JavaClient.java"))
                .arg(port.to_string()),
        );
    });
    drive("chromium", &mut capture, &mut || {
        chromium::dump_dom_with(&url, &["--ignore-certificate-errors".to_owned()]);
    });
    let out = tracer.stop();
    capture.new_ports(0);
    // connections that sent a ClientHello (a browser may open one it never uses)
    let hellos: Vec<_> = out
        .records
        .iter()
        .filter(|r| !r["client_hello_bytes"].is_null())
        .cloned()
        .collect();
    for r in &hellos {
        let p = peer_port(r).unwrap_or(0);
        eprintln!(
            "{:<26} port {p:<5} hstrace {:<38} ja4plus {}",
            clients.get(&p).map_or("?", String::as_str),
            r["ja4"].as_str().unwrap_or("-"),
            capture
                .seen
                .get(&p)
                .map_or(&serde_json::Value::Null, |v| &v["ja4"])
        );
    }
    let mismatches = ja4_mismatches(&hellos, &capture.seen, &clients);
    assert!(
        mismatches.is_empty(),
        "hstrace's JA4 and ja4plus's differ:\n{}",
        mismatches.join("\n")
    );
    // seven clients, seven fingerprints: the comparison had something to compare
    let distinct: std::collections::BTreeSet<_> =
        hellos.iter().filter_map(|r| r["ja4"].as_str()).collect();
    assert!(distinct.len() >= 7, "{distinct:#?}");
    assert!(
        distinct.iter().any(|j| j.starts_with("t12")),
        "s_client -tls1_2's fingerprint says TLS 1.2: {distinct:#?}"
    );
    assert_accounted(&out.health, true);
}
