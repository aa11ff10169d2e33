//! `cargo xtask bench`: each workload against a throwaway nginx on loopback with hstrace
//! off and on, interleaved A/B in one run, for each hstrace mode; the median on/off
//! throughput ratio with its min–max goes to docs/benchmarks.md beside the goals.

use std::{
    fs,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

/// Off/on pairs per workload and mode.
const PAIRS: usize = 5;
/// Seconds each s_time run lasts.
const STIME_SECS: &str = "3";
/// Requests per keep-alive run (h2load, 4 connections).
const KEEPALIVE_REQUESTS: &str = "40000";

struct Workload {
    name: &'static str,
    /// goals for the default and the wire-only mode (on/off throughput)
    goal: (f64, f64),
    tls: bool,
    args: fn(u16) -> Vec<String>,
}

fn s_time(port: u16, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "openssl",
        "s_time",
        "-connect",
        &format!("127.0.0.1:{port}"),
        "-time",
        STIME_SECS,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn h2load(url: String) -> Vec<String> {
    [
        "h2load",
        "--h1",
        "-n",
        KEEPALIVE_REQUESTS,
        "-c",
        "4",
        "-t",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([url])
    .collect()
}

const WORKLOADS: &[Workload] = &[
    Workload {
        name: "new TLS 1.2 handshakes",
        goal: (0.98, 0.99),
        tls: true,
        args: |p| s_time(p, &["-new", "-tls1_2"]),
    },
    Workload {
        name: "new TLS 1.3 handshakes",
        goal: (0.98, 0.99),
        tls: true,
        args: |p| s_time(p, &["-new", "-tls1_3"]),
    },
    Workload {
        name: "resumed TLS 1.2 handshakes",
        goal: (0.95, 0.99),
        tls: true,
        args: |p| s_time(p, &["-reuse", "-tls1_2"]),
    },
    Workload {
        name: "keep-alive TLS requests",
        goal: (0.99, 0.99),
        tls: true,
        args: |p| h2load(format!("https://127.0.0.1:{p}/")),
    },
    Workload {
        name: "plain keep-alive requests",
        goal: (0.99, 0.99),
        tls: false,
        args: |p| h2load(format!("http://127.0.0.1:{p}/")),
    },
];

/// hstrace modes measured: label, extra arguments.
const MODES: &[(&str, &[&str])] = &[
    ("default", &[]),
    ("wire only", &["--uprobes", "none"]),
    ("uprobes all", &["--uprobes", "all"]),
];

/// Operations per second from one run of a load generator.
fn throughput(cmd: &[String]) -> Result<f64> {
    let start = Instant::now();
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| cmd[0].clone())?;
    let secs = start.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    if cmd[0] == "h2load" {
        // "finished in 1.23s, 32520.33 req/s, ..."
        let line = text
            .lines()
            .find(|l| l.starts_with("finished in"))
            .context("no h2load summary")?;
        let rps = line
            .split(", ")
            .nth(1)
            .and_then(|f| f.strip_suffix(" req/s"))
            .context("h2load req/s")?;
        return Ok(rps.parse()?);
    }
    // s_time: "N connections in X.XXs; ..." (X: the client's user time); the wall clock is ours
    let line = text
        .lines()
        .find(|l| l.contains("connections in") && l.contains("real seconds"))
        .context("no s_time count")?;
    let n: f64 = line.split_whitespace().next().context("count")?.parse()?;
    Ok(n / secs)
}

/// hstrace attached to the demo nginx, output discarded.
struct Tracer {
    child: Child,
    attach: Duration,
}

impl Tracer {
    fn start(bin: &Path, master: u32, extra: &[&str]) -> Result<Tracer> {
        let start = Instant::now();
        let mut child = Command::new(bin)
            .args(["trace", "--format", "json", "--pid", &master.to_string()])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let err = child.stderr.take().expect("piped");
        let mut lines = BufReader::new(err).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("hstrace: tracing") => break,
                Some(_) => {}
                None => bail!("hstrace exited before tracing"),
            }
        }
        let attach = start.elapsed();
        // keep draining stderr so hstrace never blocks on it
        thread::spawn(move || lines.for_each(drop));
        Ok(Tracer { child, attach })
    }

    /// CPU seconds used and peak RSS (KiB) so far.
    fn usage(&self) -> (f64, u64) {
        let pid = self.child.id();
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let f: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, r)| r.split_whitespace().collect())
            .unwrap_or_default();
        // utime, stime: fields 14 and 15 of stat, 12 and 13 after the comm
        let ticks: f64 = [11, 12]
            .iter()
            .filter_map(|i| f.get(*i)?.parse::<f64>().ok())
            .sum();
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let hwm = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0);
        // SAFETY: sysconf has no preconditions
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        (ticks / hz, hwm)
    }

    /// Kernel memory of hstrace's maps (bytes), from bpftool.
    fn map_memory(&self) -> u64 {
        let Ok(out) = Command::new("bpftool").args(["map", "list"]).output() else {
            return 0;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        // "ID: TYPE  name NAME  flags ..." then "\tkey 8B  value 352B  max_entries 65536  memlock 23068672B"
        let names = [
            "traced_tgids",
            "est_socks",
            "conns",
            "fds",
            "io_in_flight",
            "ssl_in_flight",
            "ssl_io_in_flig",
            "ssl_socks",
            "events",
            "counters",
            "conn_scratch",
            "thread_cpu",
        ];
        let mut total = 0;
        let mut ours = false;
        for line in text.lines() {
            if let Some(rest) = line.split_once(" name ").map(|(_, r)| r) {
                ours = names
                    .iter()
                    .any(|n| rest.split_whitespace().next() == Some(n));
            } else if ours {
                if let Some(m) = line.split("memlock ").nth(1).and_then(|m| {
                    m.trim_end_matches('B')
                        .split_whitespace()
                        .next()?
                        .parse::<u64>()
                        .ok()
                }) {
                    total += m;
                }
                ours = false;
            }
        }
        total
    }

    fn stop(mut self) {
        // SAFETY: plain kill(2) on our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

pub struct BenchNginx {
    pub master: u32,
    pub tls_port: u16,
    pub plain_port: u16,
}

pub fn run(bin: &Path, nginx: &BenchNginx) -> Result<String> {
    let mut doc = String::new();
    let mut summary = Vec::new();
    let (mut cpu_per_sec, mut rss_kib, mut attach_ms, mut map_bytes) =
        (Vec::new(), 0u64, Vec::new(), 0u64);
    doc.push_str(&format!(
        "Throughput with hstrace on / off, {PAIRS} interleaved off/on pairs per row, median (min–max).\n\
         nginx with 1 worker on 127.0.0.1; clients on the same 2-core machine.\n\n\
         | workload | mode | off (ops/s, median) | on/off | goal |\n|---|---|---|---|---|\n"
    ));
    for w in WORKLOADS {
        let port = if w.tls {
            nginx.tls_port
        } else {
            nginx.plain_port
        };
        let cmd = (w.args)(port);
        for (mode, extra) in MODES {
            let (mut ratios, mut offs) = (Vec::new(), Vec::new());
            for _ in 0..PAIRS {
                let off = throughput(&cmd)?;
                let tracer = Tracer::start(bin, nginx.master, extra)?;
                attach_ms.push(tracer.attach.as_secs_f64() * 1e3);
                // CPU during the run only, not the loading of the programs before it
                let (cpu_before, _) = tracer.usage();
                let start = Instant::now();
                let on = throughput(&cmd)?;
                let (cpu, rss) = tracer.usage();
                cpu_per_sec.push((cpu - cpu_before) / start.elapsed().as_secs_f64());
                rss_kib = rss_kib.max(rss);
                map_bytes = map_bytes.max(tracer.map_memory());
                tracer.stop();
                ratios.push(on / off);
                offs.push(off);
            }
            let goal = match *mode {
                "default" => format!("≥ {:.2}", w.goal.0),
                "wire only" => format!("≥ {:.2}", w.goal.1),
                _ => "—".into(),
            };
            let (lo, hi) = (
                ratios.iter().cloned().fold(f64::MAX, f64::min),
                ratios.iter().cloned().fold(0.0, f64::max),
            );
            let m = median(ratios);
            let line = format!(
                "| {} | {mode} | {:.0} | {m:.3} ({lo:.3}–{hi:.3}) | {goal} |\n",
                w.name,
                median(offs)
            );
            eprint!("{line}");
            doc.push_str(&line);
            summary.push((w.name, *mode, m));
        }
    }
    let pipeline: f64 = String::from_utf8_lossy(
        &Command::new(bin)
            .args(["bench-pipeline", "--records", "1000000"])
            .output()?
            .stdout,
    )
    .trim()
    .parse()
    .context("hstrace bench-pipeline")?;
    doc.push_str(&format!(
        "\n| measure | result | goal |\n|---|---|---|\n\
         | userspace pipeline on one core, synthetic connections (4 ring-buffer records and 2 JSON lines each) | {:.0} connections/s = {:.0} records/s | ≥ 1,000,000 records/s |\n\
         | time to attach to the running nginx (median) | {:.0} ms | ≤ 1000 ms |\n\
         | daemon peak RSS | {:.1} MiB | ≤ 64 MiB |\n\
         | daemon CPU during the runs (median) | {:.1} % of one core | — |\n\
         | kernel map memory (memlock) | {:.1} MiB | — |\n",
        pipeline,
        pipeline * 4.0,
        median(attach_ms),
        rss_kib as f64 / 1024.0,
        median(cpu_per_sec) * 100.0,
        map_bytes as f64 / (1024.0 * 1024.0),
    ));
    Ok(doc)
}
