//! The fuzzers: `cargo xtask fuzz-parsers` (the userspace parsers under libFuzzer, the
//! fuzz/ crate) and `cargo xtask fuzz-wire` (mutated real handshakes to a real nginx under
//! `hstrace trace`, the kernel side end to end).

use std::{
    collections::BTreeMap,
    env, fs,
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use hstrace_tests::{assert::assert_accounted, clients::curl, wire_fuzz};

use crate::{
    nginx::DemoNginx,
    setup::{setup, setup_test_machine, TEST_PACKAGES},
    util::{build, require_root, root, run},
};

/// libFuzzer's coverage instrumentation, as cargo-fuzz passes it, on the stable toolchain;
/// with overflow checks and debug assertions, so an arithmetic overflow is a crash too.
const FUZZ_RUSTFLAGS: &str = "--cfg fuzzing -Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares \
    -Cdebug-assertions -Coverflow-checks";

/// The userspace parsers under libFuzzer (fuzz/, hstrace_tools::fuzz::one), from the captured
/// hellos: N executions (default 10 M), failing on any crash, hang or overflow.
pub fn fuzz_parsers(runs: u64) -> Result<()> {
    setup()?;
    let target = format!("{}-unknown-linux-gnu", env::consts::ARCH);
    let out = root().join("target/fuzz");
    // --target keeps the instrumentation out of build scripts
    run(Command::new("cargo")
        .args(["build", "--release", "--target", &target])
        .current_dir(root().join("fuzz"))
        .env(
            "RUSTFLAGS",
            FUZZ_RUSTFLAGS
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        )
        .env("CARGO_TARGET_DIR", &out))?;
    let bin = out.join(&target).join("release");
    let corpus = root().join("target/fuzz-corpus");
    let artifacts = root().join("target/fuzz-artifacts");
    fs::create_dir_all(&artifacts)?;
    // the fuzzer seeds an empty corpus itself (fuzz/fuzz_targets/parsers.rs)
    fs::create_dir_all(&corpus)?;
    let start = Instant::now();
    let res = Command::new(bin.join("parsers"))
        .arg(&corpus)
        .arg(format!("-runs={runs}"))
        .args([
            "-max_len=4096",
            "-timeout=5",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
        ])
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .output()?;
    let log = String::from_utf8_lossy(&res.stderr);
    let stat = |k: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(&format!("stat::{k}:")))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    println!(
        "fuzz-parsers: {} executions in {:.0} s ({} per s), {} corpus units added, peak RSS {} MB",
        stat("number_of_executed_units"),
        start.elapsed().as_secs_f64(),
        stat("average_exec_per_sec"),
        stat("new_units_added"),
        stat("peak_rss_mb"),
    );
    if !res.status.success() {
        let why: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains("panicked") || l.contains("ERROR") || l.contains("Test unit written")
            })
            .collect();
        bail!("the fuzzer found an input that fails:\n{}", why.join("\n"));
    }
    println!(
        "fuzz-parsers: 0 crashes, 0 hangs (corpus in {})",
        corpus.display()
    );
    Ok(())
}

/// The kernel side fuzzed end to end: mutated real handshakes (hstrace_tests::wire_fuzz) to
/// a real nginx under `hstrace trace`, in rounds of 1,000. After each round hstrace must
/// still run and nginx still serve; at the end hstrace must exit within 30 s with every
/// connection accounted for and every kernel table empty.
pub fn fuzz_wire(cases: usize, seed: u64) -> Result<()> {
    require_root("fuzz-wire")?;
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build()?;
    let nginx = DemoNginx::start("fuzz-wire", 2, 18543, 18580)?;
    let mut tracer = Command::new(&bin)
        .args(["trace", "--format", "json", "--pid", &nginx.pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let (tx, rx) = mpsc::channel();
    let stderr = BufReader::new(tracer.stderr.take().expect("piped"));
    thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ready = rx
        .recv_timeout(Duration::from_secs(30))
        .context("hstrace did not start")?;
    anyhow::ensure!(ready.contains("tracing"), "hstrace: {ready}");
    let start = Instant::now();
    let mut made = BTreeMap::new();
    let url = format!("https://127.0.0.1:{}/", 18543);
    for first in (0..cases).step_by(1000) {
        let round = wire_fuzz::run(18543, seed, first, 1000.min(cases - first), 16);
        for (k, v) in round {
            *made.entry(k).or_insert(0usize) += v;
        }
        anyhow::ensure!(tracer.try_wait()?.is_none(), "hstrace exited mid-run");
        curl(&[], std::slice::from_ref(&url));
        eprintln!(
            "xtask: fuzz-wire: {} cases, {:.0} s",
            first + 1000.min(cases - first),
            start.elapsed().as_secs_f64()
        );
    }
    let secs = start.elapsed().as_secs_f64();
    thread::sleep(Duration::from_secs(1));
    // SAFETY: plain kill(2) on our own child
    unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
    let stop = Instant::now();
    while tracer.try_wait()?.is_none() {
        anyhow::ensure!(
            stop.elapsed() < Duration::from_secs(30),
            "hstrace hangs at exit"
        );
        thread::sleep(Duration::from_millis(100));
    }
    let health: serde_json::Value = rx
        .try_iter()
        .find(|l| l.starts_with("{\"record\":\"health\""))
        .context("hstrace printed no health line")
        .and_then(|l| Ok(serde_json::from_str(&l)?))?;
    let sent: usize = made.values().sum();
    println!("fuzz-wire: seed {seed}, {sent} connections in {secs:.0} s, by mutation: {made:?}");
    println!("hstrace's health: {health}");
    assert_accounted(&health, true);
    // the rounds' curls are connections too
    let expected = sent + cases.div_ceil(1000);
    anyhow::ensure!(
        health["accepted"].as_u64() == Some(expected as u64),
        "hstrace counted {} accepted connections, {expected} were made",
        health["accepted"]
    );
    println!("fuzz-wire: every connection accounted for, every table empty, nginx still serving");
    Ok(())
}
