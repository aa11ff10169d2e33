//! `cargo xtask soak [--minutes M]`: `hstrace serve` under mixed new, resumed, plain and
//! abandoned connections for M minutes (default 10). Every 30 s: the daemon's RSS, its
//! accounting (/healthz) and the entries of each kernel table. At the end, with the load
//! stopped: accepted = reported + in progress + lost, and the tables empty. Writes the
//! "Soak" section of docs/benchmarks.md.

use std::{
    fs,
    io::{Read, Write},
    net::TcpStream,
    path::Path,
    process::{Command, Stdio},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use serde_json::Value;

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

pub fn soak(bin: &Path, minutes: f64) -> Result<String> {
    let nginx = crate::DemoNginx::start("soak", 2, TLS_PORT, PLAIN_PORT)?;
    let mut daemon = Command::new(bin)
        .args(["serve", "--pid", &nginx.pid.to_string(), "--listen", ADDR])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("hstrace serve")?;
    let start = Instant::now();
    while get("/healthz").is_err() {
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
            while !stop.load(Ordering::Relaxed) {
                let _ = plain_request();
            }
        });
        // abandoned and malformed handshakes: the wire fuzzer's cases, round after round
        s.spawn(|| {
            let mut first = 0;
            while !stop.load(Ordering::Relaxed) {
                hstrace_tests::wire_fuzz::run(TLS_PORT, 7, first, 200, 4);
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
    hstrace_tests::assert_accounted(&last.health, false);
    Ok(report(minutes, &samples, &last))
}

fn sample(pid: u32, start: Instant) -> Result<Sample> {
    let health: Value = serde_json::from_str(&get("/healthz")?)?;
    Ok(Sample {
        secs: start.elapsed().as_secs_f64(),
        rss_kib: crate::bench::process_rss_kib(pid),
        health,
        tables: TABLES.iter().map(|t| table_entries(t)).collect(),
    })
}

fn report(minutes: f64, samples: &[Sample], last: &Sample) -> String {
    let n = |h: &Value, k: &str| h[k].as_u64().unwrap_or(0);
    let lost = |h: &Value| -> u64 {
        ["ring_buffer_full", "state_evicted", "table_full"]
            .iter()
            .map(|c| h["lost"][c].as_u64().unwrap_or(0))
            .sum::<u64>()
            + n(h, "accepted_without_socket")
    };
    let mut out = format!(
        "\n## Soak\n\n`cargo xtask soak --minutes {minutes}`: `hstrace serve` (default probes) on nginx \
         (2 workers) under new TLS 1.3 and resumed TLS 1.2 handshakes (`openssl s_time`), plain \
         HTTP requests and the wire fuzzer's abandoned and malformed handshakes, all at once. \
         Every 30 s: the daemon's RSS, its accounting from /healthz and the entries in each \
         kernel table (bpftool). The last row is 3 s after the load stopped.\n\n\
         | s | RSS MiB | accepted | reported | in progress | lost (counted) | {} |\n{}|\n",
        TABLES.join(" | "),
        "|---".repeat(6 + TABLES.len())
    );
    for s in samples.iter().chain([last]) {
        let h = &s.health;
        out.push_str(&format!(
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
    out.push_str(&format!(
        "\nAt the end: accepted {} = reported {} + in progress {} + lost {}.\n",
        n(&last.health, "accepted"),
        n(&last.health, "reported"),
        n(&last.health, "in_progress"),
        lost(&last.health)
    ));
    out
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

fn plain_request() -> Result<()> {
    let mut s = TcpStream::connect(("127.0.0.1", PLAIN_PORT))?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: soak\r\n\r\n")?;
    let mut body = Vec::new();
    s.read_to_end(&mut body)?;
    Ok(())
}

fn get(path: &str) -> Result<String> {
    let mut s = TcpStream::connect(ADDR)?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {ADDR}\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (_, body) = resp.split_once("\r\n\r\n").context("no HTTP body")?;
    Ok(body.to_string())
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
