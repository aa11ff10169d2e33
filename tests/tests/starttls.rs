//! TLS after a plaintext preamble, from real servers of Debian's packages and real
//! clients, in both probe modes: PostgreSQL's SSLRequest (psql), Postfix's SMTP STARTTLS
//! and Dovecot's IMAP and POP3 STARTTLS (openssl s_client -starttls). Each server makes
//! full TLS connections (and resumed ones where it resumes), a plain one of its protocol,
//! one whose request for TLS is refused and one whose handshake fails; every record is
//! checked against what the client saw and what the server's own log says it negotiated,
//! and every connection is accounted for.

use serde_json::Value;

use hstrace_tests::{
    assert::{assert_accounted, assert_has_stages, check_stages, str_field},
    hstrace::Hstrace,
    starttls_servers::{plain_conversation, starttls_client, Dovecot, Postfix, Postgres},
};

/// The probe modes: the default (uprobes on SSL_do_handshake), and from the wire only.
const MODES: [&[&str]; 2] = [&[], &["--no-uprobes"]];

/// The records of `kind`.
fn of_kind<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

/// A TLS record after a preamble of `app`: every field of direct TLS, the preamble's
/// stages before the handshake's, all adding up, and the first exchange of the protocol
/// after the handshake (its client's first message and the server's answer) timed.
fn assert_upgraded(r: &Value, app: &str) {
    assert_eq!(str_field(r, "app_protocol"), Some(app), "{r}");
    assert_eq!(str_field(r, "starttls"), Some("upgraded"), "{r}");
    assert_eq!(str_field(r, "protocol"), Some("tls"), "{r}");
    assert!(
        str_field(r, "tls_version").is_some() && str_field(r, "cipher").is_some(),
        "{r}"
    );
    assert_has_stages(
        r,
        &[
            "accept_queue",
            "preamble_wait",
            "preamble_queue",
            "preamble_service",
            "wait_client_hello",
            "client_hello_queue",
            "server_flight_1",
            "wait_client_flight_2",
            "server_flight_2",
            "wait_request",
            "request_queue",
            "response",
        ],
        &r.to_string(),
    );
    assert_eq!(r["stage_classes"]["preamble_service"], "service", "{r}");
    assert_eq!(r["stage_classes"]["preamble_queue"], "queue", "{r}");
    assert_eq!(r["stage_classes"]["preamble_wait"], "delay", "{r}");
    check_stages(r);
}

/// Each TLS connection's close line counts the protocol's exchanges after the handshake as
/// the wire shows them (client messages that each got an answer): at least one.
fn assert_exchanges(records: &[&Value], closes: &[Value]) {
    for r in records {
        let close = closes
            .iter()
            .find(|c| c["conn_id"] == r["conn_id"])
            .unwrap_or_else(|| panic!("no close line for {r}"));
        assert!(close["exchanges"].as_u64().unwrap() >= 1, "{close}");
    }
}

/// A plain record of `app` whose preamble ended `starttls` (None: never watched).
fn assert_plain(r: &Value, app: &str, starttls: Option<&str>) {
    assert_eq!(str_field(r, "protocol"), Some("plain"), "{r}");
    assert_eq!(str_field(r, "app_protocol"), Some(app), "{r}");
    assert_eq!(str_field(r, "starttls"), starttls, "{r}");
    assert!(
        r["tls_version"].is_null() && r.get("failure").is_none(),
        "{r}"
    );
}

/// The server log's "(protocol, cipher)" pairs for its TLS connections, in order, found
/// by `pick` in each line.
fn logged(log: &str, pick: impl Fn(&str) -> Option<(String, String)>) -> Vec<(String, String)> {
    log.lines().filter_map(pick).collect()
}

/// The records' own (version as the logs spell it, cipher), in order.
fn negotiated(records: &[&Value]) -> Vec<(String, String)> {
    records
        .iter()
        .map(|r| {
            (
                format!("TLSv{}", r["tls_version"].as_str().unwrap()),
                r["cipher"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn postgresql_tls_after_its_ssl_request_in_both_probe_modes() {
    let pg = Postgres::start("starttls-postgres");
    for mode in MODES {
        let port = pg.port.to_string();
        let tracer = Hstrace::start(&[&["--port", &port][..], mode].concat());
        // a first backend: from its fork on, the postmaster's libssl has uprobes for
        // every process (its children answer at once)
        let (ok, out) = pg.psql("disable");
        assert!(ok && out.trim() == "f", "{out}");
        std::thread::sleep(std::time::Duration::from_millis(500));
        let log_before = pg.log().len();
        for _ in 0..2 {
            let (ok, out) = pg.psql("require");
            assert!(ok && out.trim() == "t", "psql saw no TLS: {out}");
        }
        let tls_log = pg.log()[log_before..].to_string();
        // refused: TLS off, the SSLRequest answered 'N', psql goes on in plain text
        pg.set_ssl(false);
        let (ok, out) = pg.psql("prefer");
        pg.set_ssl(true);
        assert!(ok && out.trim() == "f", "{out}");
        // failed: a ClientHello the server refuses with an alert
        let out = starttls_client("postgres", pg.port, &["-tls1_1"], "");
        assert!(!out.contains("New, TLS"), "{out}");
        let traced = tracer.stop();
        assert!(traced.success, "{}", traced.stderr);
        let r = &traced.records;
        let full = of_kind(r, "full");
        assert_eq!(full.len(), 2, "{mode:?}: {r:#?}");
        for f in &full {
            assert_upgraded(f, "postgresql");
            if mode.is_empty() {
                assert_eq!(str_field(f, "hs_done_from"), Some("ssl"), "{f}");
            }
        }
        // what the server says it negotiated: "SSL enabled (protocol=TLSv1.3, cipher=…"
        let pg_logged = logged(&tls_log, |l| {
            let rest = l.split("SSL enabled (protocol=").nth(1)?;
            let (proto, rest) = rest.split_once(", cipher=")?;
            Some((proto.to_string(), rest.split(',').next()?.to_string()))
        });
        assert_eq!(pg_logged, negotiated(&full), "{tls_log}");
        assert_exchanges(&full, &traced.closes);
        let plain = of_kind(r, "plain");
        assert_eq!(plain.len(), 2, "{r:#?}");
        assert_plain(plain[0], "postgresql", None);
        assert_plain(plain[1], "postgresql", Some("refused"));
        let failed = of_kind(r, "failed");
        assert_eq!(failed.len(), 1, "{r:#?}");
        assert_eq!(str_field(failed[0], "app_protocol"), Some("postgresql"));
        assert_eq!(str_field(failed[0], "starttls"), Some("upgraded"));
        assert_eq!(r.len(), 5, "{r:#?}");
        assert_accounted(&traced.health, true);
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn smtp_starttls_on_postfix_in_both_probe_modes() {
    let pf = Postfix::start("starttls-postfix");
    let sess = pf.conf.join("smtp.sess");
    let sess = sess.to_str().unwrap();
    for mode in MODES {
        let log_before = pf.log().len();
        let tracer = Hstrace::start(&[&["--pid", &pf.master_pid().to_string()][..], mode].concat());
        let new = starttls_client("smtp", pf.port, &["-sess_out", sess], "QUIT\r\n");
        assert!(new.contains("New, TLS"), "{new}");
        let again = starttls_client("smtp", pf.port, &["-sess_in", sess], "QUIT\r\n");
        assert!(again.contains("Reused, TLS"), "{again}");
        let plain = plain_conversation(pf.port, true, &["EHLO c.test\r\n", "QUIT\r\n"]);
        assert!(
            plain[0].starts_with("220 ") && plain[1].starts_with("250"),
            "{plain:?}"
        );
        // a listener without TLS refuses STARTTLS
        let refused = plain_conversation(
            pf.port_no_tls,
            true,
            &["EHLO c.test\r\n", "STARTTLS\r\n", "QUIT\r\n"],
        );
        assert!(
            refused[2].starts_with('5') || refused[2].starts_with('4'),
            "{refused:?}"
        );
        let failed = starttls_client("smtp", pf.port, &["-tls1_1"], "");
        assert!(!failed.contains("New, TLS"), "{failed}");
        let traced = tracer.stop();
        assert!(traced.success, "{}", traced.stderr);
        let r = &traced.records;
        let tls: Vec<&Value> = r
            .iter()
            .filter(|r| r["kind"] == "full" || r["kind"] == "resumed")
            .collect();
        assert_eq!(tls.len(), 2, "{mode:?}: {r:#?}");
        assert_eq!(tls[0]["kind"], "full", "{r:#?}");
        assert_eq!(tls[1]["kind"], "resumed", "{r:#?}");
        for t in &tls {
            assert_upgraded(t, "smtp");
        }
        // "Anonymous TLS connection established from …: TLSv1.3 with cipher TLS_…"
        let log = pf.log()[log_before..].to_string();
        let pf_logged = logged(&log, |l| {
            let rest = l.split("TLS connection established from ").nth(1)?;
            let rest = rest.split(": ").nth(1)?;
            let (proto, rest) = rest.split_once(" with cipher ")?;
            Some((proto.to_string(), rest.split(' ').next()?.to_string()))
        });
        assert_eq!(pf_logged, negotiated(&tls), "{log}");
        assert_exchanges(&tls, &traced.closes);
        let plain = of_kind(r, "plain");
        assert_eq!(plain.len(), 2, "{r:#?}");
        assert_plain(plain[0], "smtp", Some("not_asked"));
        assert_plain(plain[1], "smtp", Some("refused"));
        let failed = of_kind(r, "failed");
        assert_eq!(failed.len(), 1, "{r:#?}");
        assert_eq!(str_field(failed[0], "app_protocol"), Some("smtp"));
        assert_eq!(r.len(), 5, "{r:#?}");
        assert_accounted(&traced.health, true);
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn imap_and_pop3_starttls_on_dovecot_in_both_probe_modes() {
    let dc = Dovecot::start("starttls-dovecot", true);
    let no_tls = Dovecot::start("starttls-dovecot-no-tls", false);
    for mode in MODES {
        let log_before = dc.log().len();
        let tracer = Hstrace::start(
            &[
                &[
                    "--pid",
                    &dc.master_pid().to_string(),
                    "--pid",
                    &no_tls.master_pid().to_string(),
                ][..],
                mode,
            ]
            .concat(),
        );
        for _ in 0..2 {
            let out = starttls_client("imap", dc.imap_port, &[], "a LOGOUT\r\n");
            assert!(out.contains("New, TLS"), "{out}");
        }
        let pop3 = starttls_client("pop3", dc.pop3_port, &[], "QUIT\r\n");
        assert!(pop3.contains("New, TLS"), "{pop3}");
        let plain = plain_conversation(dc.imap_port, true, &["a1 CAPABILITY\r\n", "a2 LOGOUT\r\n"]);
        assert!(plain[0].starts_with("* OK"), "{plain:?}");
        // a server without TLS refuses STARTTLS with BAD
        let refused = plain_conversation(
            no_tls.imap_port,
            true,
            &["a1 STARTTLS\r\n", "a2 LOGOUT\r\n"],
        );
        assert!(refused[1].starts_with("a1 BAD"), "{refused:?}");
        let failed = starttls_client("imap", dc.imap_port, &["-tls1_1"], "");
        assert!(!failed.contains("New, TLS"), "{failed}");
        let traced = tracer.stop();
        assert!(traced.success, "{}", traced.stderr);
        let r = &traced.records;
        let full = of_kind(r, "full");
        assert_eq!(full.len(), 3, "{mode:?}: {r:#?}");
        let apps: Vec<&str> = full
            .iter()
            .map(|f| str_field(f, "app_protocol").unwrap())
            .collect();
        assert_eq!(apps.iter().filter(|a| **a == "imap").count(), 2, "{apps:?}");
        assert_eq!(apps.iter().filter(|a| **a == "pop3").count(), 1, "{apps:?}");
        for f in &full {
            assert_upgraded(f, str_field(f, "app_protocol").unwrap());
        }
        // Dovecot logs each login process's end, "TLS" for the ones that negotiated it
        let log = dc.log()[log_before..].to_string();
        let ended_tls = log
            .lines()
            .filter(|l| l.contains("Disconnected") && l.contains(", TLS, session="))
            .count();
        assert_eq!(ended_tls, 3, "{log}");
        assert_exchanges(&full, &traced.closes);
        let plain = of_kind(r, "plain");
        assert_eq!(plain.len(), 2, "{r:#?}");
        assert_plain(plain[0], "imap", Some("not_asked"));
        assert_plain(plain[1], "imap", Some("refused"));
        let failed = of_kind(r, "failed");
        assert_eq!(failed.len(), 1, "{r:#?}");
        assert_eq!(r.len(), 6, "{r:#?}");
        assert_accounted(&traced.health, true);
    }
}
