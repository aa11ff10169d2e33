//! Servers from Debian's packages whose TLS sits off the common path, traced in both probe
//! modes and checked against each client's own view and the server's own log:
//! - Mosquitto calls `SSL_accept` once and finishes the handshake inside `SSL_read`: every
//!   connection is a completed handshake, its end from the wire;
//! - MariaDB answers a client's alert with a plaintext error packet, which looks like a
//!   TLS record: the failure is the client's alert while the server waited for it, with no
//!   desync;
//! - vsftpd (explicit TLS) forks a child per connection: every child's handshakes are
//!   tied but the first one's, served before its fork's uprobes are in place; a refused
//!   client's alert is its failure, whatever the server writes after it;
//! - Postfix's master (no libssl) forks and execs `smtpd` (libssl): the exec'd children get
//!   their uprobes, and "no libssl" is said once per executable.

use std::{fs, process::Command, thread, time::Duration};

use serde_json::Value;

use hstrace_tests::{
    assert::{assert_accounted, assert_has_stages, check_stages, str_field},
    fixtures::make_cert_named,
    hstrace::Hstrace,
    procs::children,
    proxies::DelayProxy,
    quirky_servers::{Mariadb, Mosquitto, Vsftpd},
    starttls_servers::{starttls_client, Postfix},
    util::{run_ok, wait_for},
};

/// The probe modes: the default (uprobes on SSL_do_handshake), and from the wire only.
const MODES: [&[&str]; 2] = [&[], &["--no-uprobes"]];

fn connections(records: &[Value]) -> Vec<&Value> {
    records
        .iter()
        .filter(|r| r["record"] == "connection")
        .collect()
}

/// The peer's port of a record ("127.0.0.1:PORT").
fn peer_port(r: &Value) -> String {
    str_field(r, "peer")
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_string()
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn mosquitto_handshakes_finished_in_ssl_read_are_complete_in_both_probe_modes() {
    let mq = Mosquitto::start("quirky-mosquitto");
    for mode in MODES {
        let log_before = mq.log().len();
        let tracer = Hstrace::start(&[&["--pid", &mq.pid().to_string()][..], mode].concat());
        // straight: SSL_accept may find the client's second flight already there and
        // finish, or not
        for _ in 0..3 {
            let (ok, out) = mq.publish(mq.port);
            assert!(ok && out.contains("received CONNACK (0)"), "{out}");
        }
        // the client's second flight held back 30 ms: SSL_accept has returned by then,
        // and SSL_read finishes the handshake
        let proxy = DelayProxy::start(mq.port, 3, Duration::from_millis(30));
        let mut delayed = Vec::new();
        for _ in 0..3 {
            let (ok, out) = mq.publish(proxy.port);
            assert!(ok && out.contains("received CONNACK (0)"), "{out}");
        }
        let traced = tracer.stop();
        assert!(traced.success, "{}", traced.stderr);
        let r = connections(&traced.records);
        assert_eq!(r.len(), 6, "{mode:?}: {r:#?}");
        let log = mq.log()[log_before..].to_string();
        for (i, c) in r.iter().enumerate() {
            if i >= 3 {
                delayed.push(*c);
            }
            // the client got its CONNACK: the handshake completed, whatever the library
            // call that finished it
            assert_eq!(c["kind"], "full", "{mode:?}: {c}");
            assert!(c.get("failure").is_none_or(Value::is_null), "{c}");
            assert_eq!(str_field(c, "tls_version"), Some("1.3"), "{c}");
            assert_has_stages(
                c,
                &[
                    "server_flight_1",
                    "wait_client_flight_2",
                    "server_flight_2",
                    "wait_request",
                    "response",
                ],
                &c.to_string(),
            );
            check_stages(c);
            // SSL_accept is called once; from the wire alone, no call is seen
            let calls = c["ssl_calls"].as_u64().unwrap_or(0);
            assert_eq!(calls, u64::from(mode.is_empty()), "{c}");
            if mode.is_empty() {
                // SSL_accept's return of 1, or the wire's end when SSL_read finished
                let from = str_field(c, "hs_done_from");
                assert!(from == Some("ssl") || from == Some("wire"), "{c}");
            }
            // the server's own log saw this client connect
            let seen = format!("New client connected from 127.0.0.1:{} ", peer_port(c));
            assert!(log.contains(&seen), "{seen:?} not in {log}");
        }
        // SSL_accept ended with the first flight, SSL_read finished the handshake: the
        // wire says when
        for c in delayed {
            assert_eq!(str_field(c, "hs_done_from"), Some("wire"), "{mode:?}: {c}");
        }
        assert_accounted(&traced.health, true);
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn mariadb_plaintext_error_after_a_client_alert_is_the_clients_failure() {
    let db = Mariadb::start("quirky-mariadb");
    // a CA that did not sign the server's certificate: the client refuses it with an alert
    let (other_ca, _) = make_cert_named(&db.dir, "other-", 2048, &[]);
    let other_ca = other_ca.to_str().unwrap().to_string();
    for mode in MODES {
        let tracer = Hstrace::start(&[&["--port", &db.port.to_string()][..], mode].concat());
        let log_before = db.log().len();
        let (ok, out) = db.query_tls_version();
        assert!(ok && out.contains("TLSv1.3"), "{out}");
        // refused in TLS 1.2 and in TLS 1.3: the server answers the alert in plain text
        for version in ["-tls1_2", "-tls1_3"] {
            let refused = starttls_client(
                "mysql",
                db.port,
                &[version, "-verify_return_error", "-CAfile", &other_ca],
                "",
            );
            assert!(refused.contains("certificate verify failed"), "{refused}");
        }
        thread::sleep(Duration::from_millis(300));
        let traced = tracer.stop();
        assert!(traced.success, "{}", traced.stderr);
        let r = connections(&traced.records);
        assert_eq!(r.len(), 3, "{mode:?}: {r:#?}");
        let full: Vec<_> = r.iter().filter(|c| c["kind"] == "full").collect();
        assert_eq!(full.len(), 1, "{mode:?}: {r:#?}");
        assert_eq!(
            str_field(full[0], "tls_version"),
            Some("1.3"),
            "{}",
            full[0]
        );
        assert_eq!(
            str_field(full[0], "app_protocol"),
            Some("mysql"),
            "{}",
            full[0]
        );
        let failed: Vec<_> = r.iter().filter(|c| c["kind"] == "failed").collect();
        assert_eq!(failed.len(), 2, "{mode:?}: {r:#?}");
        for f in failed {
            assert_client_alert(f, "mysql");
        }
        assert_eq!(
            traced.health["record_stream_desync"], 0,
            "{}",
            traced.health
        );
        assert_accounted(&traced.health, true);
        // the server's own view: the two refused clients never authenticated (the query's
        // connection did)
        let log = db.log()[log_before..].to_string();
        let aborted = log
            .lines()
            .filter(|l| l.contains("Aborted connection") && l.contains("without authentication"))
            .count();
        assert_eq!(aborted, 2, "{log}");
    }
}

/// A failed record of `app`: the client refused the certificate with a fatal unknown_ca
/// alert while the server waited for its second flight, and nothing after it (the
/// server's plain text) broke the parse.
fn assert_client_alert(f: &Value, app: &str) {
    assert_eq!(str_field(f, "app_protocol"), Some(app), "{f}");
    assert_eq!(str_field(f, "failure"), Some("alert"), "{f}");
    assert_eq!(f["alert"]["from"], "client", "{f}");
    assert_eq!(f["alert"]["level"], 2, "{f}");
    assert_eq!(f["alert"]["description"], 48, "{f}");
    assert_eq!(
        str_field(f, "failed_in"),
        Some("wait_client_flight_2"),
        "{f}"
    );
    assert!(
        !f["notes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|n| n == "record_stream_desync")),
        "{f}"
    );
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn vsftpd_explicit_tls_with_a_child_per_connection_in_both_probe_modes() {
    let ftp = Vsftpd::start("quirky-vsftpd");
    let (other_ca, _) = make_cert_named(&ftp.dir, "other-", 2048, &[]);
    let other_ca = other_ca.to_str().unwrap().to_string();
    for mode in MODES {
        let log_before = ftp.log().len();
        let tracer = Hstrace::start(&[&["--pid", &ftp.pid().to_string(), "-v"][..], mode].concat());
        for i in 0..3 {
            let out = starttls_client("ftp", ftp.port, &[], "QUIT\r\n");
            assert!(out.contains("New, TLS") && out.contains("221"), "{out}");
            if i == 0 {
                // the first child's fork widens the uprobes to every process (see below)
                thread::sleep(Duration::from_millis(1500));
            }
        }
        for version in ["-tls1_2", "-tls1_3"] {
            let refused = starttls_client(
                "ftp",
                ftp.port,
                &[version, "-verify_return_error", "-CAfile", &other_ca],
                "QUIT\r\n",
            );
            assert!(refused.contains("certificate verify failed"), "{refused}");
        }
        thread::sleep(Duration::from_millis(300));
        let traced = tracer.stop();
        assert!(traced.success, "{}", traced.stderr);
        let r = connections(&traced.records);
        assert_eq!(r.len(), 5, "{mode:?}: {r:#?}");
        let full: Vec<_> = r.iter().filter(|c| c["kind"] == "full").collect();
        assert_eq!(full.len(), 3, "{mode:?}: {r:#?}");
        for (i, c) in full.iter().enumerate() {
            assert_eq!(str_field(c, "starttls"), Some("upgraded"), "{c}");
            check_stages(c);
            // each connection is a new child; the first one's handshake runs before the
            // uprobes its fork brings are in place (docs/limits.md), the later ones' after
            if mode.is_empty() && i > 0 {
                assert_eq!(
                    str_field(c, "hs_done_from"),
                    Some("ssl"),
                    "{c}\n{}",
                    traced.stderr
                );
            }
        }
        for f in r.iter().filter(|c| c["kind"] == "failed") {
            assert_client_alert(f, "ftp");
        }
        assert_eq!(
            traced.health["record_stream_desync"], 0,
            "{}",
            traced.health
        );
        assert_accounted(&traced.health, true);
        // vsftpd's own log: three sessions, two refused by the client's alert
        let log = ftp.log()[log_before..].to_string();
        let ok = log
            .lines()
            .filter(|l| l.contains("\"SSL version: TLSv1.3"))
            .count();
        let refused = log
            .lines()
            .filter(|l| l.contains("alert unknown ca"))
            .count();
        assert_eq!((ok, refused), (3, 2), "{log}");
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn postfix_smtpd_exec_d_by_a_master_without_libssl_gets_uprobes() {
    let pf = Postfix::start("quirky-postfix");
    // the smtpd that served the start's check exits at a reload: the master forks and
    // execs a new one, under the tracer, for the first connection
    let master = pf.master_pid();
    let smtpd = || -> Vec<u32> {
        children(master)
            .into_iter()
            .filter(|p| {
                fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "smtpd")
            })
            .collect()
    };
    run_ok(
        Command::new("postfix")
            .arg("-c")
            .arg(&pf.conf)
            .arg("reload"),
    );
    wait_for("the old smtpd to exit", Duration::from_secs(30), || {
        smtpd().is_empty()
    });
    let tracer = Hstrace::start(&["--pid", &master.to_string(), "-v"]);
    // an smtpd is forked and exec'd for the first connection; later ones reuse it or
    // more of its kind
    let n = 4;
    for _ in 0..n {
        let out = starttls_client("smtp", pf.port, &[], "QUIT\r\n");
        assert!(out.contains("New, TLS"), "{out}");
        thread::sleep(Duration::from_millis(1200));
    }
    let traced = tracer.stop();
    assert!(traced.success, "{}", traced.stderr);
    let r = connections(&traced.records);
    let tls: Vec<&&Value> = r.iter().filter(|c| c["kind"] == "full").collect();
    assert_eq!(tls.len(), n, "{r:#?}\n{}", traced.stderr);
    // the first may be served before the exec'd child's uprobes are attached; every later
    // one is tied to the library
    for c in &tls[1..] {
        assert_eq!(
            str_field(c, "hs_done_from"),
            Some("ssl"),
            "{c}\n{}",
            traced.stderr
        );
        assert!(c["ssl_calls"].as_u64().unwrap() >= 1, "{c}");
    }
    assert!(
        traced.stderr.contains("SSL_do_handshake uprobes on") && traced.stderr.contains("(smtpd)"),
        "{}",
        traced.stderr
    );
    // "no libssl" once per executable (the master's and its other services'), not once
    // per child
    let no_libssl: Vec<&str> = traced
        .stderr
        .lines()
        .filter(|l| l.contains("has no libssl"))
        .collect();
    let mut said: Vec<&str> = no_libssl
        .iter()
        .filter_map(|l| l.split("(said once for ").nth(1)?.split(')').next())
        .collect();
    assert_eq!(
        said.len(),
        no_libssl.len(),
        "each line names its executable: {}",
        traced.stderr
    );
    let n_said = said.len();
    said.sort_unstable();
    said.dedup();
    assert_eq!(said.len(), n_said, "{}", traced.stderr);
    assert!(
        said.iter().all(|exe| !exe.ends_with("smtpd")),
        "{}",
        traced.stderr
    );
    let log = pf.log();
    let established = log
        .lines()
        .filter(|l| l.contains("TLS connection established from"))
        .count();
    assert!(established >= n, "{log}");
}
