//! The parts of `cargo xtask bench` that are hstrace's own commands work and measure
//! something: the userspace pipeline on synthetic records, and the idle sweep over a
//! filled connection map (which loads the BPF object: needs root). Their speed is
//! recorded by the bench, not asserted here.

use std::process::Command;

use hstrace_tests::hstrace_bin;

fn number(args: &[&str]) -> f64 {
    let out = Command::new(hstrace_bin()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "hstrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("hstrace {args:?} printed {text:?}"))
}

#[test]
fn pipeline_benchmark_parses_synthetic_connections() {
    let per_sec = number(&["bench-pipeline", "--records", "20000"]);
    assert!(per_sec > 0.0 && per_sec.is_finite(), "{per_sec}");
}

#[test]
fn sweep_benchmark_walks_a_full_map_and_keeps_live_connections() {
    // bench-sweep fails if the sweep takes any of the live connections it was given
    let ms = number(&["bench-sweep", "--conns", "4096"]);
    assert!(ms > 0.0 && ms.is_finite(), "{ms}");
}

#[test]
fn pipeline_benchmark_through_the_daemons_sinks_counts_every_connection() {
    // bench-pipeline --serve fails unless the metrics counted every synthetic connection
    let per_sec = number(&["bench-pipeline", "--records", "20000", "--serve"]);
    assert!(per_sec > 0.0 && per_sec.is_finite(), "{per_sec}");
}
