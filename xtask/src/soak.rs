//! `cargo xtask soak [--minutes M]`: `hstrace serve` under mixed new, resumed, plain and
//! abandoned connections for M minutes (default 10). Every 30 s: the daemon's RSS, its
//! accounting (/healthz) and the entries of each kernel table. At the end, with the load
//! stopped: accepted = reported + in progress + lost, and the tables empty. Writes the
//! "Soak" section of docs/benchmarks.md.

use std::{
    fs,
    path::Path,
    process::{Command, Stdio},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use hstrace_tests::{assert::assert_accounted, http, procs::process_rss_kib, wire_fuzz};
use serde_json::Value;

use crate::{
    nginx::DemoNginx,
    setup::{setup_test_machine, TEST_PACKAGES},
    template,
    util::{build, require_root, root},
};

/// The section's prose, with the samples' table and the final sums filled in.
const TEMPLATE: &str = include_str!("../templates/benchmarks-soak.md");

const ADDR: &str = "127.0.0.1:19726";
const TLS_PORT: u16 = 18643;
const PLAIN_PORT: u16 = 18680;
const TABLES: [&str; 3] = ["conns", "fds", "ssl_socks"];

/// One sample of the daemon.
struct Sample {
    secs: f64,
    rss_kib: u64,
    health: Value,
    tables: Vec<u64>,
}

/// `cargo xtask soak --minutes M`: the run, printed and put in docs/benchmarks.md.
pub fn soak(minutes: f64) -> Result<()> {
    require_root("soak")?;
    if !(minutes > 0.0 && minutes <= 24.0 * 60.0) {
        bail!("--minutes takes a number of minutes up to a day, e.g. --minutes 10");
    }
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build()?;
    let section = run(&bin, minutes)?;
    print!("{section}");
    write_section(&root().join("docs/benchmarks.md"), &section)?;
    eprintln!("xtask: wrote the Soak section of docs/benchmarks.md");
    Ok(())
}

/// The soak itself: the section of docs/benchmarks.md (starting "\n## Soak").
fn run(bin: &Path, minutes: f64) -> Result<String> {
    let nginx = DemoNginx::start("soak", 2, TLS_PORT, PLAIN_PORT)?;
    let mut daemon = Command::new(bin)
        .args(["serve", "--pid", &nginx.pid.to_string(), "--listen", ADDR])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("hstrace serve")?;
    let start = Instant::now();
    while http::try_get(ADDR, "/healthz").is_none() {
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(30),
            "serve did not start"
        );
        thread::sleep(Duration::from_millis(200));
    }
    let pid = daemon.id();
    let stop = AtomicBool::new(false);
    let run = Duration::from_secs_f64(minutes * 60.0);
    let start = Instant::now();
    let mut samples = Vec::new();
    thread::scope(|s| -> Result<()> {
        let tls = |args: &'static [&'static str]| {
            let stop = &stop;
            move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = Command::new("openssl")
                        .args([
                            "s_time",
                            "-connect",
                            &format!("127.0.0.1:{TLS_PORT}"),
                            "-time",
                            "5",
                        ])
                        .args(args)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null())
                        .status();
                }
            }
        };
        s.spawn(tls(&["-new", "-tls1_3"]));
        s.spawn(tls(&["-reuse", "-tls1_2"]));
        s.spawn(|| {
            let plain = format!("127.0.0.1:{PLAIN_PORT}");
            while !stop.load(Ordering::Relaxed) {
                let _ = http::try_get(&plain, "/");
            }
        });
        // abandoned and malformed handshakes: the wire fuzzer's cases, round after round
        s.spawn(|| {
            let mut first = 0;
            while !stop.load(Ordering::Relaxed) {
                wire_fuzz::run(TLS_PORT, 7, first, 200, 4);
                first += 200;
            }
        });
        while start.elapsed() < run {
            thread::sleep(Duration::from_secs(30).min(run.saturating_sub(start.elapsed())));
            samples.push(sample(pid, start)?);
            eprintln!("xtask: soak: {:.0} s", start.elapsed().as_secs_f64());
        }
        stop.store(true, Ordering::Relaxed);
        Ok(())
    })?;
    // the load has stopped: let the last connections close and a sweep count them
    thread::sleep(Duration::from_secs(3));
    let last = sample(pid, start)?;
    // SAFETY: plain kill(2) on our own child
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let _ = daemon.wait();
    assert_accounted(&last.health, false);
    report(minutes, &samples, &last)
}

fn sample(pid: u32, start: Instant) -> Result<Sample> {
    let (_, body) = http::try_get(ADDR, "/healthz").context("serve does not answer /healthz")?;
    let health: Value = serde_json::from_str(&body)?;
    Ok(Sample {
        secs: start.elapsed().as_secs_f64(),
        rss_kib: process_rss_kib(pid),
        health,
        tables: TABLES.iter().map(|t| table_entries(t)).collect(),
    })
}

/// The section: the template with the samples' table and the final sums.
fn report(minutes: f64, samples: &[Sample], last: &Sample) -> Result<String> {
    let n = |h: &Value, k: &str| h[k].as_u64().unwrap_or(0);
    let lost = |h: &Value| -> u64 {
        ["ring_buffer_full", "state_evicted", "table_full"]
            .iter()
            .map(|c| h["lost"][c].as_u64().unwrap_or(0))
            .sum::<u64>()
            + n(h, "accepted_without_socket")
    };
    let mut table = format!(
        "| s | RSS MiB | accepted | reported | in progress | lost (counted) | {} |\n{}|\n",
        TABLES.join(" | "),
        "|---".repeat(6 + TABLES.len())
    );
    for s in samples.iter().chain([last]) {
        let h = &s.health;
        table.push_str(&format!(
            "| {:.0} | {:.1} | {} | {} | {} | {} | {} |\n",
            s.secs,
            s.rss_kib as f64 / 1024.0,
            n(h, "accepted"),
            n(h, "reported"),
            n(h, "in_progress"),
            lost(h),
            s.tables
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    let h = &last.health;
    let section = template::fill(
        TEMPLATE,
        &[
            ("MINUTES", minutes.to_string()),
            ("SAMPLES_TABLE", table.trim_end().to_string()),
            ("ACCEPTED", n(h, "accepted").to_string()),
            ("REPORTED", n(h, "reported").to_string()),
            ("IN_PROGRESS", n(h, "in_progress").to_string()),
            ("LOST", lost(h).to_string()),
        ],
    )?;
    Ok(format!("\n{section}"))
}

/// Entries in the kernel table `name` now (bpftool), 0 if there is none.
fn table_entries(name: &str) -> u64 {
    let Ok(out) = Command::new("bpftool")
        .args(["map", "dump", "name", name, "-j"])
        .output()
    else {
        return 0;
    };
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|v| v.as_array().map(|a| a.len() as u64))
        .unwrap_or(0)
}

/// docs/benchmarks.md's soak section, the last one, if it has one.
pub fn section(doc: &str) -> Option<&str> {
    doc.find("\n## Soak\n").map(|at| &doc[at..])
}

/// Put `section` (starting "\n## Soak") in place of docs/benchmarks.md's soak section.
pub fn write_section(doc: &Path, section: &str) -> Result<()> {
    let text = fs::read_to_string(doc).unwrap_or_default();
    let before = text.find("\n## Soak\n").map_or(&text[..], |at| &text[..at]);
    fs::write(doc, format!("{}\n{section}", before.trim_end_matches('\n')))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soak_template_is_filled() {
        let out = crate::template::tests::fill_all(TEMPLATE);
        assert!(
            out.starts_with("## Soak\n\n`cargo xtask soak --minutes <MINUTES>`"),
            "{out}"
        );
        let sample = |secs: f64| Sample {
            secs,
            rss_kib: 10240,
            health: serde_json::json!({"accepted": 9, "reported": 7, "in_progress": 1,
                "lost": {"table_full": 1}}),
            tables: vec![3, 2, 1],
        };
        let sec = report(10.0, &[sample(30.0)], &sample(33.0)).unwrap();
        assert!(
            sec.starts_with("\n## Soak\n\n`cargo xtask soak --minutes 10`:"),
            "{sec}"
        );
        assert!(
            sec.contains("| conns | fds | ssl_socks |\n|---|---|---|---|---|---|---|---|---|\n| 30 | 10.0 | 9 | 7 | 1 | 1 | 3 | 2 | 1 |\n| 33 |"),
            "{sec}"
        );
        assert!(
            sec.ends_with("\n\nAt the end: accepted 9 = reported 7 + in progress 1 + lost 1.\n"),
            "{sec}"
        );
        assert_eq!(section(&format!("# B\n{sec}")), Some(sec.as_str()));
    }
}
