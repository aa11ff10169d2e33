//! Which processes and ports are traced: `--comm`, every listener, `--port`. Root only;
//! run with `cargo xtask test`.

use hstrace_tests::{
    assert::{assert_accounted, str_field},
    clients::{curl, s_client},
    hstrace::Hstrace,
    servers::Nginx,
};
use serde_json::Value;

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn selectors_comm_and_all_listeners() {
    let nginx = Nginx::start("selectors", 1);
    for args in [vec!["--comm", "nginx"], vec![]] {
        let tracer = Hstrace::start(&args);
        let out = s_client(nginx.port, &["-tls1_3"]);
        assert!(out.contains("New, TLSv1.3"), "{out}");
        let traced = tracer.stop();
        let mine: Vec<&Value> = traced
            .records
            .iter()
            .filter(|r| str_field(r, "local") == Some(format!("127.0.0.1:{}", nginx.port).as_str()))
            .collect();
        assert_eq!(mine.len(), 1, "selector {args:?}: {:?}", traced.records);
        assert_eq!(str_field(mine[0], "kind"), Some("full"));
        assert_eq!(
            str_field(mine[0], "hs_done_from"),
            Some("ssl"),
            "selector {args:?} attached uprobes"
        );
    }
}

/// --port follows every process's accepts (a server started later is traced from its
/// first one), and leaves the others at once: connections to another port of the same
/// server are neither reported nor counted, and all of the selected port's are, before
/// and after the other port's.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn port_selects_that_port_alone() {
    let nginx = Nginx::start("port-alone", 1);
    let port = nginx.port.to_string();
    let tracer = Hstrace::start(&["--port", &port]);
    let one = |url: String| curl(&[], &[url]);
    assert_eq!(one(format!("https://127.0.0.1:{port}/a")), "ok\n");
    for i in 0..4 {
        assert_eq!(
            one(format!("http://127.0.0.1:{}/{i}", nginx.plain_port)),
            "plain\n"
        );
    }
    assert_eq!(one(format!("https://127.0.0.1:{port}/b")), "ok\n");
    let out = tracer.stop();
    assert_eq!(out.records.len(), 2, "{:?}", out.records);
    for r in &out.records {
        assert_eq!(
            str_field(r, "local"),
            Some(format!("127.0.0.1:{port}").as_str()),
            "{r}"
        );
        assert_eq!(str_field(r, "protocol"), Some("tls"), "{r}");
    }
    assert_eq!(out.health["accepted"], 2, "{}", out.health);
    assert_accounted(&out.health, true);
}
