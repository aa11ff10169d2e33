//! `cargo xtask bench`: each workload against a throwaway nginx on loopback with hstrace
//! off and on, interleaved A/B in one run, for each hstrace mode; the median on/off
//! throughput ratio with its min–max goes to docs/benchmarks.md beside the goals.

use std::{
    fs,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use hstrace_tests::{
    http,
    procs::{process_cpu_secs, process_peak_rss_kib},
    util::median,
};

use crate::{
    nginx::DemoNginx,
    setup::{install_missing, setup_test_machine, TEST_PACKAGES},
    soak, template,
    util::{build_bench, commit, cpus, kernel, root},
};

pub mod cost;
pub mod memory;
pub mod otlp;
pub mod profile;

/// The page's prose, with the tables and figures filled in.
const TEMPLATE: &str = include_str!("../templates/benchmarks.md");

/// What `cargo xtask bench` measures.
pub enum Mode {
    /// every section: docs/benchmarks.md
    Full,
    /// only the "Cost per operation" section, written in place
    Cost,
    /// one workload's CPU on/off row and the split of the hooks' cost, printed
    Cpu { workload: usize },
    /// where the BPF programs' time goes, for `seconds` of one workload (new TLS 1.2
    /// handshakes unless asked)
    Profile { seconds: u32, workload: usize },
    /// this build against `other`, in `pairs` interleaved pairs under one workload
    Ab {
        other: PathBuf,
        workload: usize,
        pairs: usize,
        /// the MODES label both builds run in
        mode: String,
    },
}

/// `cargo xtask bench`: a throwaway nginx, hstrace built with the bench's own commands,
/// then `mode`.
pub fn bench(mode: Mode) -> Result<()> {
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build_bench()?;
    let nginx = DemoNginx::start("bench", 1, 18443, 18080)?;
    let syscall_exe = build_c(&nginx.dir, "syscall_cost", &[])?;
    let uprobe_exe = build_c(&nginx.dir, "uprobe_cost", &["-lssl", "-lcrypto"])?;
    let target = BenchNginx {
        master: nginx.pid,
        tls_port: 18443,
        plain_port: 18080,
    };
    let commit = commit()?;
    match mode {
        Mode::Profile { seconds, workload } => {
            // perf is for this alone: installed here, not by setup
            install_missing(&["linux-perf"])?;
            let w = self::workload(workload)?;
            profile::run(&bin, &target, w, seconds, &nginx.dir.join("perf.data"))
        }
        Mode::Ab {
            other,
            workload,
            pairs,
            mode,
        } => {
            let other = other_build(&other)?;
            cost::ab(&bin, &other, &target, workload, pairs, &mode)
        }
        Mode::Cpu { workload } => {
            // one workload's CPU on/off row, printed: for trying a change, writes nothing
            let w = self::workload(workload)?;
            let c = cost::cpu_on_off(&bin, nginx.pid, &w.cmd(&target))?;
            println!("| workload | off | empty programs | default | wire only | empty programs on/off | default on/off | wire only on/off | uprobes in nginx |");
            print!("{}", cost::cpu_row(w.name, &c));
            let split = cost::cpu_split(&bin, nginx.pid, &w.cmd(&target))?;
            println!("\n| empty programs at | CPU per connection | on/off |");
            print!("{}", cost::split_rows(&split));
            Ok(())
        }
        Mode::Cost => {
            // the cost section alone, in place: the rest of the page stays as the last full run
            let section = cost::section(&bin, &target, &uprobe_exe, Some(&commit))?;
            let path = root().join("docs/benchmarks.md");
            let old = fs::read_to_string(&path).unwrap_or_default();
            fs::write(&path, cost::replace_section(&old, &section))?;
            eprintln!("xtask: wrote the cost section of docs/benchmarks.md");
            Ok(())
        }
        Mode::Full => {
            let page = run(&bin, &target, &syscall_exe, &uprobe_exe, &commit)?;
            // the soak's section (`cargo xtask soak`) stays until the soak runs again
            let path = root().join("docs/benchmarks.md");
            let old = fs::read_to_string(&path).unwrap_or_default();
            fs::create_dir_all(root().join("docs"))?;
            fs::write(
                &path,
                format!("{page}{}", soak::section(&old).unwrap_or("")),
            )?;
            eprintln!("xtask: wrote docs/benchmarks.md");
            Ok(())
        }
    }
}

/// Off/on pairs per workload and mode.
const PAIRS: usize = 7;
/// Seconds each s_time run lasts.
const STIME_SECS: &str = "3";
/// Requests per keep-alive run (h2load, 4 connections).
const KEEPALIVE_REQUESTS: &str = "150000";

pub struct Workload {
    pub name: &'static str,
    /// goals for the default and the wire-only mode (on/off throughput)
    goal: (f64, f64),
    tls: bool,
    args: fn(u16) -> Vec<String>,
}

impl Workload {
    /// The load generator's command line against `nginx`'s TLS or plain port.
    pub fn cmd(&self, nginx: &BenchNginx) -> Vec<String> {
        (self.args)(if self.tls {
            nginx.tls_port
        } else {
            nginx.plain_port
        })
    }
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

/// WORKLOADS[n], for a flag that names one by number.
pub fn workload(n: usize) -> Result<&'static Workload> {
    WORKLOADS.get(n).with_context(|| {
        let names: Vec<String> = WORKLOADS
            .iter()
            .enumerate()
            .map(|(i, w)| format!("{i}: {}", w.name))
            .collect();
        format!(
            "--workload {n}: there are {} ({})",
            WORKLOADS.len(),
            names.join(", ")
        )
    })
}

/// hstrace modes measured: label, extra arguments.
const MODES: &[(&str, &[&str])] = &[
    ("default", &[]),
    ("wire only", &["--uprobes", "none"]),
    ("uprobes all", &["--uprobes", "all"]),
    // the daemon (default probes), aggregating into metrics and parameters, scraped
    // every second
    ("serve", &[SERVE]),
];

/// The extra arguments of the mode labelled `label` in MODES.
pub fn mode_args(label: &str) -> Result<&'static [&'static str]> {
    MODES
        .iter()
        .find(|(l, _)| *l == label)
        .map(|(_, extra)| *extra)
        .with_context(|| {
            let labels: Vec<String> = MODES.iter().map(|(l, _)| l.replace(' ', "-")).collect();
            format!("mode {label:?}: there are {}", labels.join(", "))
        })
}

/// The MODES marker for `hstrace serve` instead of `hstrace trace`.
const SERVE: &str = "serve";
/// Where the benchmarked daemon listens.
const SERVE_ADDR: &str = "127.0.0.1:19725";

/// Operations per second from one run of a load generator.
fn throughput(cmd: &[String]) -> Result<f64> {
    run_load(cmd).map(|(rate, _)| rate)
}

/// One run of a load generator: operations per second, and operations done.
fn run_load(cmd: &[String]) -> Result<(f64, f64)> {
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
        // "requests: 150000 total, 150000 started, 150000 done, 150000 succeeded, ..."
        let done = text
            .lines()
            .find_map(|l| l.strip_prefix("requests: "))
            .and_then(|l| l.split(", ").find_map(|f| f.strip_suffix(" succeeded")))
            .context("h2load requests succeeded")?;
        return Ok((rps.parse()?, done.parse()?));
    }
    // s_time: "N connections in X.XXs; ..." (X: the client's user time); the wall clock is ours
    let line = text
        .lines()
        .find(|l| l.contains("connections in") && l.contains("real seconds"))
        .context("no s_time count")?;
    let n: f64 = line.split_whitespace().next().context("count")?.parse()?;
    Ok((n / secs, n))
}

/// What the syscall loop measures, in the order it prints them (ns per call or pair).
const SYSCALL_ROWS: [&str; 3] = [
    "file read + write pair (not hooked)",
    "loopback TCP send + recv pair (socket tracepoints, untraced port)",
    "getppid (not hooked)",
];

/// The syscall loop's figures for an untraced process, hstrace off and on: (off, on)
/// medians of interleaved pairs, one per SYSCALL_ROWS.
fn syscall_cost(bin: &Path, master: u32, exe: &Path) -> Result<Vec<(f64, f64)>> {
    let once = || -> Result<Vec<f64>> {
        let out = Command::new(exe).arg("1000000").output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let v: Vec<f64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        if !out.status.success() || v.len() != SYSCALL_ROWS.len() {
            bail!("{} printed {text:?}", exe.display());
        }
        Ok(v)
    };
    let rows = SYSCALL_ROWS.len();
    let (mut off, mut on) = (vec![Vec::new(); rows], vec![Vec::new(); rows]);
    let keep = |got: Vec<f64>, into: &mut Vec<Vec<f64>>| {
        got.into_iter().zip(into).for_each(|(x, v)| v.push(x));
    };
    for pair in 0..PAIRS {
        let off_first = pair % 2 == 0;
        if off_first {
            keep(once()?, &mut off);
        }
        let tracer = Tracer::start(bin, master, &[])?;
        let got = once();
        tracer.stop();
        keep(got?, &mut on);
        if !off_first {
            keep(once()?, &mut off);
        }
    }
    Ok(off
        .into_iter()
        .zip(on)
        .map(|(a, b)| (median(a), median(b)))
        .collect())
}

/// hstrace attached to the demo nginx, output discarded: `trace`, or `serve` (extra =
/// [SERVE]) with a scrape every second, as Prometheus would.
struct Tracer {
    child: Child,
    attach: Duration,
    scraping: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Tracer {
    fn start(bin: &Path, master: u32, extra: &[&str]) -> Result<Tracer> {
        let serve = extra.first() == Some(&SERVE);
        let mut cmd = Command::new(bin);
        if serve {
            cmd.args(["serve", "--listen", SERVE_ADDR])
                .args(&extra[1..]);
        } else {
            cmd.args(["trace", "--format", "json"]).args(extra);
        }
        cmd.args(["--pid", &master.to_string()]);
        Tracer::spawn(cmd, serve)
    }

    /// Start `cmd` (a tracer, or `hstrace-bench hooks-alone`) and wait until it says it
    /// is attached; `serve`: scrape it every second meanwhile.
    fn spawn(mut cmd: Command, serve: bool) -> Result<Tracer> {
        let start = Instant::now();
        let mut child = cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn()?;
        let err = child.stderr.take().expect("piped");
        let mut lines = BufReader::new(err).lines();
        loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("hstrace: tracing") || l.contains("hstrace: serving") => {
                    break
                }
                Some(_) => {}
                None => bail!("hstrace exited before tracing"),
            }
        }
        let attach = start.elapsed();
        // keep draining stderr so hstrace never blocks on it
        thread::spawn(move || lines.for_each(drop));
        let scraping = serve.then(|| {
            let on = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
            let flag = on.clone();
            thread::spawn(move || {
                while flag.load(std::sync::atomic::Ordering::Relaxed) {
                    let _ = scrape_ms();
                    thread::sleep(Duration::from_secs(1));
                }
            });
            on
        });
        Ok(Tracer {
            child,
            attach,
            scraping,
        })
    }

    /// CPU seconds used and peak RSS (KiB) so far.
    fn usage(&self) -> (f64, u64) {
        let pid = self.child.id();
        (
            process_cpu_secs(pid).unwrap_or(0.0),
            process_peak_rss_kib(pid),
        )
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
            "conns",
            "fds",
            "io_in_flight",
            "ssl_in_flight",
            "ssl_io_in_flig",
            "ssl_socks",
            "events",
            "counters",
            "conn_scratch",
            "hello_scratch",
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
        if let Some(s) = &self.scraping {
            s.store(false, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: plain kill(2) on our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
    }
}

/// Milliseconds one GET /metrics of the benchmarked daemon takes, whole body read.
fn scrape_ms() -> Result<f64> {
    let start = Instant::now();
    match http::try_get(SERVE_ADDR, "/metrics") {
        Some((200, _)) => Ok(start.elapsed().as_secs_f64() * 1e3),
        _ => bail!("GET /metrics failed"),
    }
}

/// The hstrace binary `--ab` names, as an absolute path (its `hstrace-bench` beside it).
fn other_build(other: &Path) -> Result<PathBuf> {
    fs::canonicalize(other).with_context(|| {
        format!(
            "--ab {}: an hstrace binary built from another commit",
            other.display()
        )
    })
}

/// `hstrace-bench` (the tools crate: the bench's own commands, never shipped), built
/// beside `bin` by xtask's `build_bench`.
fn tool(bin: &Path) -> std::path::PathBuf {
    bin.with_file_name("hstrace-bench")
}

/// The one number `hstrace-bench ARGS` prints.
fn hstrace_number(tool: &Path, args: &[&str]) -> Result<f64> {
    let [n] = hstrace_numbers(tool, args)?;
    Ok(n)
}

/// The `N` numbers `hstrace-bench ARGS` prints, separated by spaces.
fn hstrace_numbers<const N: usize>(tool: &Path, args: &[&str]) -> Result<[f64; N]> {
    let out = Command::new(tool).args(args).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Option<Vec<f64>> = text.split_whitespace().map(|n| n.parse().ok()).collect();
    numbers
        .and_then(|v| <[f64; N]>::try_from(v).ok())
        .with_context(|| {
            format!(
                "hstrace-bench {}: {} number(s) expected, got {:?}: {}",
                args.join(" "),
                N,
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
}

/// Pair `pair` of interleaved runs of `a` and `b`: `a` first in even pairs, `b` first in
/// odd ones, so that neither always runs second (after the other's warm-up or drift).
fn in_turn<T>(
    pair: usize,
    a: impl FnOnce() -> Result<T>,
    b: impl FnOnce() -> Result<T>,
) -> Result<(T, T)> {
    if pair.is_multiple_of(2) {
        let a = a()?;
        Ok((a, b()?))
    } else {
        let b = b()?;
        Ok((a()?, b))
    }
}

/// The smallest and largest of `v`.
fn range(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

/// How the differences of interleaved pairs split: "lower in L of N pairs, sign test p =
/// P", where P is the two-sided sign test's: the chance of a split at least this uneven if
/// the two sides were the same build (pairs that came out equal are left out). Above about
/// 0.05 the pairs cannot tell the sides apart, whatever the median says.
fn split(diffs: &[f64]) -> String {
    let lower = diffs.iter().filter(|d| **d < 0.0).count();
    let higher = diffs.iter().filter(|d| **d > 0.0).count();
    format!(
        "lower in {lower} of {} pairs, sign test p = {:.2}",
        diffs.len(),
        sign_test(lower, higher)
    )
}

/// The two-sided exact sign test: the probability that `lower + higher` fair coin tosses
/// split at least as unevenly as `lower` to `higher`.
fn sign_test(lower: usize, higher: usize) -> f64 {
    let n = lower + higher;
    let k = lower.min(higher);
    // P(X = 0) for X ~ Binomial(n, 1/2), then each next term from the one before
    let mut term = 0.5f64.powi(n as i32);
    let mut tail = 0.0;
    for i in 0..=k {
        tail += term;
        term *= (n - i) as f64 / (i + 1) as f64;
    }
    (2.0 * tail).min(1.0)
}

pub struct BenchNginx {
    pub master: u32,
    pub tls_port: u16,
    pub plain_port: u16,
}

/// xtask/bench/NAME.c built into `dir` (gcc -O2, with `libs`), for the bench's loops.
pub fn build_c(dir: &Path, name: &str, libs: &[&str]) -> Result<std::path::PathBuf> {
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("bench/{name}.c"));
    let ok = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(libs)
        .status()
        .context("gcc")?
        .success();
    if !ok {
        bail!("gcc could not build {}", src.display());
    }
    Ok(exe)
}

/// The whole page (docs/benchmarks.md but its Soak section), measured: the template with
/// every table and figure filled in.
pub fn run(
    bin: &Path,
    nginx: &BenchNginx,
    syscall_exe: &Path,
    uprobe_exe: &Path,
    commit: &str,
) -> Result<String> {
    let mut throughput_rows = String::new();
    let (mut cpu_per_sec, mut rss_kib, mut attach_ms, mut map_bytes) =
        (Vec::new(), 0u64, Vec::new(), 0u64);
    for w in WORKLOADS {
        let cmd = w.cmd(nginx);
        for (mode, extra) in MODES {
            let (mut ratios, mut offs) = (Vec::new(), Vec::new());
            for pair in 0..PAIRS {
                // every other pair runs "on" first: neither side always comes right after
                // an attach or a detach
                let off_first = pair % 2 == 0;
                let off_before = if off_first {
                    Some(throughput(&cmd)?)
                } else {
                    None
                };
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
                let off = match off_before {
                    Some(off) => off,
                    None => throughput(&cmd)?,
                };
                ratios.push(on / off);
                offs.push(off);
            }
            let goal = match *mode {
                "default" | "serve" => format!("≥ {:.2}", w.goal.0),
                "wire only" => format!("≥ {:.2}", w.goal.1),
                _ => "—".into(),
            };
            let (lo, hi) = range(&ratios);
            let m = median(ratios);
            let line = format!(
                "| {} | {mode} | {:.0} | {m:.3} ({lo:.3}–{hi:.3}) | {goal} |\n",
                w.name,
                median(offs)
            );
            eprint!("{line}");
            throughput_rows.push_str(&line);
        }
    }
    // the machine's other tenants only ever slow a run down: the median of several, with
    // their spread, says more than one long run
    let mut pipelines = (0..PAIRS)
        .map(|_| hstrace_number(&tool(bin), &["pipeline", "--records", "200000"]))
        .collect::<Result<Vec<f64>>>()?;
    pipelines.sort_by(f64::total_cmp);
    let (pipe_min, pipe_max) = (pipelines[0], pipelines[pipelines.len() - 1]);
    let pipeline = median(pipelines);
    let sweep = hstrace_number(&tool(bin), &["sweep", "--conns", "65536"])?;
    let mut serve_pipelines = (0..PAIRS)
        .map(|_| hstrace_number(&tool(bin), &["pipeline", "--records", "200000", "--serve"]))
        .collect::<Result<Vec<f64>>>()?;
    serve_pipelines.sort_by(f64::total_cmp);
    let (serve_min, serve_max) = (
        serve_pipelines[0],
        serve_pipelines[serve_pipelines.len() - 1],
    );
    let serve_pipeline = median(serve_pipelines);
    // a scrape of a daemon that has seen every workload's kinds of connection
    let daemon = Tracer::start(bin, nginx.master, &[SERVE])?;
    throughput(&WORKLOADS[0].cmd(nginx))?;
    throughput(&WORKLOADS[4].cmd(nginx))?;
    let scrapes = (0..21).map(|_| scrape_ms()).collect::<Result<Vec<f64>>>()?;
    let (_, serve_rss) = daemon.usage();
    daemon.stop();
    let scrape = median(scrapes);
    let live = memory::serve_rss_with_live_connections(bin)?;
    let cost_section = cost::section(bin, nginx, uprobe_exe, None)?;
    let syscall_rows: String = SYSCALL_ROWS
        .iter()
        .zip(syscall_cost(bin, nginx.master, syscall_exe)?)
        .map(|(what, (off, on))| format!("| {what} | {off:.0} | {on:.0} | {:.0} |\n", on - off))
        .collect();
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);
    template::fill(
        TEMPLATE,
        &[
            ("COMMIT", commit.to_string()),
            ("KERNEL", kernel()),
            ("CPUS", cpus().to_string()),
            ("PAIRS", PAIRS.to_string()),
            ("THROUGHPUT_ROWS", throughput_rows.trim_end().to_string()),
            ("SWEEP_MS", format!("{sweep:.0}")),
            ("PIPELINE", format!("{pipeline:.0}")),
            ("PIPELINE_RECORDS", format!("{:.0}", pipeline * 4.0)),
            ("PIPELINE_MIN", format!("{:.0}", pipe_min * 4.0)),
            ("PIPELINE_MAX", format!("{:.0}", pipe_max * 4.0)),
            ("SERVE_PIPELINE", format!("{serve_pipeline:.0}")),
            (
                "SERVE_PIPELINE_RECORDS",
                format!("{:.0}", serve_pipeline * 4.0),
            ),
            ("SERVE_PIPELINE_MIN", format!("{:.0}", serve_min * 4.0)),
            ("SERVE_PIPELINE_MAX", format!("{:.0}", serve_max * 4.0)),
            ("SCRAPE_MS", format!("{scrape:.1}")),
            ("SERVE_RSS_MIB", mib(serve_rss)),
            ("LIVE_CONNS", memory::LIVE_CONNS.to_string()),
            ("HOLDERS", memory::HOLDERS.to_string()),
            ("TRACKED", live.tracked.to_string()),
            ("OPEN", live.open.to_string()),
            ("LIVE_MIB", mib(live.live_kib)),
            ("IDLE_MIB", mib(live.idle_kib)),
            ("ATTACH_MS", format!("{:.0}", median(attach_ms))),
            ("DAEMON_RSS_MIB", mib(rss_kib)),
            (
                "DAEMON_CPU_PCT",
                format!("{:.1}", median(cpu_per_sec) * 100.0),
            ),
            (
                "MAP_MIB",
                format!("{:.1}", map_bytes as f64 / (1024.0 * 1024.0)),
            ),
            ("COST_SECTION", cost_section.trim().to_string()),
            ("SYSCALL_ROWS", syscall_rows.trim_end().to_string()),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::{sign_test, split, TEMPLATE};

    #[test]
    fn the_sign_test_gives_the_binomial_tails() {
        // 0 of 10 lower: 2 x (1/2)^10
        assert!((sign_test(0, 10) - 2.0 / 1024.0).abs() < 1e-12);
        // 4 of 30: 2 x (1 + 30 + 435 + 4,060 + 27,405) / 2^30
        assert!((sign_test(4, 26) - 2.0 * 31_931.0 / 1_073_741_824.0).abs() < 1e-12);
        // 28 of 50: 2 x P(X <= 22) = 0.4799
        assert!(
            (sign_test(28, 22) - 0.4799).abs() < 1e-4,
            "{}",
            sign_test(28, 22)
        );
        // an even split, and no pairs at all, tell nothing
        assert_eq!(sign_test(5, 5), 1.0);
        assert_eq!(sign_test(0, 0), 1.0);
        // symmetric
        assert_eq!(sign_test(3, 13), sign_test(13, 3));
    }

    #[test]
    fn a_split_leaves_equal_pairs_out_of_the_test() {
        assert_eq!(
            split(&[-1.0, -2.0, 0.0, -0.5]),
            "lower in 3 of 4 pairs, sign test p = 0.25"
        );
    }

    #[test]
    fn the_benchmarks_template_is_filled() {
        let out = crate::template::tests::fill_all(TEMPLATE);
        assert!(out.starts_with("# Benchmarks\n\nWritten by `cargo xtask bench` (commit <COMMIT>"));
        assert!(
            out.contains("\n<COST_SECTION>\n\n## Cost for processes hstrace does not trace\n\n")
        );
        assert!(
            out.ends_with("|---|---|---|---|\n<SYSCALL_ROWS>\n"),
            "{out}"
        );
    }
}
