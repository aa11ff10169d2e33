//! Assertions on what hstrace printed: a record's stages, the accounting of a `health`
//! line, and small readers of the JSON.

use serde_json::Value;

pub fn str_field<'a>(r: &'a Value, k: &str) -> Option<&'a str> {
    r.get(k).and_then(Value::as_str)
}

/// Each of `stages` is in the record's `stages_ns` (`what` names the record on failure).
pub fn assert_has_stages(r: &Value, stages: &[&str], what: &str) {
    let have = r["stages_ns"].as_object().expect("stages_ns");
    for s in stages {
        assert!(have.contains_key(*s), "no {s}: {what}");
    }
}

/// Every stage present is >= 0, and the stages between accept (or the end of a plaintext
/// preamble) and the end of the handshake add up to handshake_ns (within 1 ms).
/// accept_queue lies before accept(), a preamble before TLS and the request stages after
/// the handshake, so they are not part of it.
pub fn check_stages(r: &Value) {
    let stages = r["stages_ns"]
        .as_object()
        .unwrap_or_else(|| panic!("no stages_ns: {r}"));
    let mut inside = 0u64;
    for (k, v) in stages {
        let v = v
            .as_u64()
            .unwrap_or_else(|| panic!("stage {k} is not a non-negative integer: {r}"));
        if ![
            "accept_queue",
            "preamble_wait",
            "preamble_queue",
            "preamble_service",
            "wait_request",
            "request_queue",
            "response",
        ]
        .contains(&k.as_str())
        {
            inside += v;
        }
    }
    if let Some(hs) = r["handshake_ns"].as_u64() {
        assert!(hs > 0, "handshake_ns 0: {r}");
        assert!(
            inside <= hs + 1_000_000,
            "handshake stages {inside} > handshake_ns {hs} + 1 ms: {r}"
        );
        assert!(
            inside + 1_000_000 >= hs,
            "handshake stages {inside} leave more than 1 ms of handshake_ns {hs} unaccounted: {r}"
        );
    }
}

/// The accounting of a `health` line (trace's exit totals): every accepted connection is
/// reported, in progress or lost with its cause counted; every tracked one's close line is
/// reported, still to come or lost with its cause; and (`closed`: every connection has
/// closed) every per-connection table in the kernel is empty again.
pub fn assert_accounted(h: &Value, closed: bool) {
    let n = |path: &[&str]| {
        path.iter()
            .fold(h, |v, k| &v[*k])
            .as_u64()
            .unwrap_or_else(|| panic!("no {path:?} in {h}"))
    };
    assert_eq!(
        n(&["accepted"]),
        n(&["reported"])
            + n(&["in_progress"])
            + n(&["lost", "ring_buffer_full"])
            + n(&["lost", "state_evicted"])
            + n(&["lost", "table_full"])
            + n(&["lost", "end_missed"])
            + n(&["accepted_without_socket"]),
        "accepted = reported + in progress + lost: {h}"
    );
    assert_eq!(
        n(&["tracked"]),
        n(&["closes"])
            + n(&["open"])
            + n(&["lost", "close_ring_buffer_full"])
            + n(&["lost", "close_evicted"])
            + n(&["lost", "end_missed"])
            + n(&["lost", "close_missed"]),
        "tracked = close lines + open + lost: {h}"
    );
    // accounted for, but never right: a connection whose end no hook saw
    assert_eq!(
        n(&["lost", "end_missed"]) + n(&["lost", "close_missed"]),
        0,
        "connections ended unseen (their sockets reused before a close hook fired): {h}"
    );
    if closed {
        assert_eq!(n(&["open"]), 0, "{h}");
        for (table, entries) in h["tables"].as_object().expect("table entries at exit") {
            assert_eq!(entries.as_u64(), Some(0), "entries left in {table}: {h}");
        }
    }
}

/// A parameters document without its `rate_per_s` fields.
pub fn without_rates(mut v: Value) -> Value {
    match &mut v {
        Value::Object(m) => {
            m.remove("rate_per_s");
            for x in m.values_mut() {
                *x = without_rates(x.take());
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                *x = without_rates(x.take());
            }
        }
        _ => {}
    }
    v
}
