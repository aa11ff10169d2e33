//! The stages against ground truth: a known network delay must land in the right delay
//! stage and nowhere else. Root only; run with `cargo xtask test`.

use std::time::Duration;

use hstrace_tests::*;
use serde_json::Value;

/// One TLS 1.2 full handshake and request through a proxy that holds the client's
/// `flight`-th flight for `delay_ms`; returns its record.
fn through_proxy(nginx: &Nginx, flight: u32, delay_ms: u64) -> Value {
    let proxy = DelayProxy::start(nginx.port, flight, Duration::from_millis(delay_ms));
    let port = nginx.port.to_string();
    let tracer = Hstrace::start(&["--port", &port]);
    let out = s_client(proxy.port, &["-tls1_2", "-no_ticket"]);
    assert!(out.contains("New, TLSv1.2"), "{out}");
    let traced = tracer.stop();
    assert_eq!(traced.records.len(), 1, "{:?}", traced.records);
    traced.records[0].clone()
}

fn stage_ms(r: &Value, s: &str) -> f64 {
    r["stages_ns"][s]
        .as_u64()
        .unwrap_or_else(|| panic!("no {s}: {r}")) as f64
        / 1e6
}

/// Holding a client flight for D ms moves exactly D ms into the stage that waits for it,
/// compared with the same handshake through the proxy with no delay; the server's own
/// stages do not absorb it.
fn delay_lands_in(flight: u32, stage: &str) {
    let nginx = Nginx::start(&format!("accuracy-{stage}"), 1);
    let base = through_proxy(&nginx, flight, 0);
    for d in [25u64, 60] {
        let r = through_proxy(&nginx, flight, d);
        check_stages(&r);
        let added = stage_ms(&r, stage) - stage_ms(&base, stage);
        eprintln!("held flight {flight} for {d} ms: {stage} grew by {added:.2} ms");
        assert!(
            (added - d as f64).abs() <= 2.0,
            "{stage} grew by {added:.2} ms for a {d} ms delay: {r}"
        );
        for service in ["server_flight_1", "server_flight_2", "response"] {
            let ms = stage_ms(&r, service);
            assert!(
                ms < 10.0,
                "{service} took {ms:.2} ms with a {d} ms network delay: {r}"
            );
        }
    }
}

#[test]
fn known_delay_of_client_flight_2() {
    delay_lands_in(2, "wait_client_flight_2");
}

#[test]
fn known_delay_of_the_request() {
    // TLS 1.2 full: ClientHello, flight 2, then (after the server's Finished) the request
    delay_lands_in(3, "wait_request");
}
