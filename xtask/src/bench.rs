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

pub mod cost;
pub mod profile;

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

/// CPU seconds a process has run so far, to the nanosecond: the sum of its threads' run
/// times in /proc/PID/task/*/schedstat, else /proc/PID/stat's clock ticks (10 ms steps).
pub fn process_run_secs(pid: u32) -> Result<f64> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task"));
    let ns: Option<f64> = tasks.ok().and_then(|dir| {
        dir.map(|t| {
            let text = fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
            text.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum()
    });
    match ns {
        Some(ns) => Ok(ns / 1e9),
        None => process_cpu_secs(pid),
    }
}

/// CPU seconds (user + system) a process has used so far, from /proc/PID/stat.
pub fn process_cpu_secs(pid: u32) -> Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("/proc/{pid}/stat"))?;
    // the comm field may hold spaces and parentheses: fields resume after the last ')'
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .context("a /proc stat line")?
        .1
        .split_whitespace()
        .collect();
    // utime, stime: fields 14 and 15 of stat, 12 and 13 after the comm
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| f.get(*i)?.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions
    Ok(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
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
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let hwm = status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0);
        (process_cpu_secs(pid).unwrap_or(0.0), hwm)
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

/// A process's resident memory now (KiB), 0 if it is gone.
pub fn process_rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// The number one of hstrace's hidden bench commands prints.
/// Live connections held for the memory row: the default --max-conns.
pub const LIVE_CONNS: usize = 65_536;
/// No process here may hold more than 20,000 files (the sandbox's hard limit; root cannot
/// raise it without CAP_SYS_RESOURCE): the memory row's connections are held by this many
/// client processes, and its nginx has as many workers (`reuseport` spreads them).
const HOLDERS: usize = 5;
/// Connecting slows down sharply once more than about half of a destination's 28,232
/// client ports (`ip_local_port_range`) are in use: the held connections go to eight.
const MEMORY_PORTS: [u16; 8] = [18091, 18092, 18093, 18094, 18095, 18096, 18097, 18098];

/// serve's peak RSS with many live connections.
pub struct LiveMemory {
    /// peak RSS (KiB) before the connections were opened
    pub idle_kib: u64,
    /// and while they were open
    pub live_kib: u64,
    /// connections the kernel tracked, and those in its map (/healthz: `tracked`, `open`)
    pub tracked: u64,
    pub open: u64,
}

/// serve's peak RSS before and while `LIVE_CONNS` idle plain-HTTP connections to an nginx
/// of its own are open (each a live connection in hstrace's maps).
pub fn serve_rss_with_live_connections(bin: &Path) -> Result<LiveMemory> {
    let nginx = crate::DemoNginx::start_with(
        "bench-memory",
        HOLDERS as u32,
        18490,
        &MEMORY_PORTS,
        "reuseport",
    )?;
    let daemon = Tracer::start(bin, nginx.pid, &[SERVE])?;
    thread::sleep(Duration::from_secs(2));
    let (_, before) = daemon.usage();
    let mut holders = (0..HOLDERS)
        .map(|i| {
            let count = LIVE_CONNS / HOLDERS + usize::from(i < LIVE_CONNS % HOLDERS);
            Holder::start(count)
        })
        .collect::<Result<Vec<_>>>()?;
    for h in &mut holders {
        h.wait_held()?;
    }
    // a sweep (once a second) has seen them all
    thread::sleep(Duration::from_secs(3));
    let (_, with) = daemon.usage();
    let health: serde_json::Value = serde_json::from_str(&get(SERVE_ADDR, "/healthz")?)?;
    let count = |k: &str| health[k].as_u64().context("/healthz without {k}");
    let live = LiveMemory {
        idle_kib: before,
        live_kib: with,
        tracked: count("tracked")?,
        open: count("open")?,
    };
    drop(holders);
    daemon.stop();
    Ok(live)
}

/// A child process (`xtask hold-connections`) holding idle connections open until dropped.
struct Holder {
    child: std::process::Child,
    said: std::io::BufReader<std::process::ChildStdout>,
}

impl Holder {
    fn start(count: usize) -> Result<Holder> {
        let ports: Vec<String> = MEMORY_PORTS.iter().map(u16::to_string).collect();
        let mut child = Command::new(std::env::current_exe()?)
            .arg("hold-connections")
            .arg(count.to_string())
            .args(&ports)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("xtask hold-connections")?;
        let out = child.stdout.take().expect("piped");
        Ok(Holder {
            child,
            said: std::io::BufReader::new(out),
        })
    }

    /// Until the child says it holds all its connections (or fails).
    fn wait_held(&mut self) -> Result<()> {
        use std::io::BufRead;
        let mut line = String::new();
        self.said.read_line(&mut line)?;
        anyhow::ensure!(
            line.trim() == "held",
            "a connection holder failed (see its message above)"
        );
        Ok(())
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // closing its stdin is its signal to close the connections and exit
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// `xtask hold-connections COUNT PORT...`: open COUNT connections to 127.0.0.1, spread
/// over the ports, say "held", and keep them open until stdin closes.
pub fn hold_connections(args: &[String]) -> Result<()> {
    use std::io::{Read, Write};
    let count: usize = args
        .first()
        .context("hold-connections COUNT PORT...")?
        .parse()?;
    let ports = args[1..]
        .iter()
        .map(|p| p.parse::<u16>())
        .collect::<Result<Vec<_>, _>>()?;
    anyhow::ensure!(!ports.is_empty(), "hold-connections COUNT PORT...");
    // the soft limit up to the hard one
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let held = (0..count)
        .map(|i| std::net::TcpStream::connect(("127.0.0.1", ports[i % ports.len()])))
        .collect::<std::io::Result<Vec<_>>>()
        .with_context(|| format!("opening {count} connections (file limit {})", lim.rlim_cur))?;
    println!("held");
    std::io::stdout().flush()?;
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(held);
    Ok(())
}

/// The body of GET `path` from the daemon at `addr`.
fn get(addr: &str, path: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    anyhow::ensure!(resp.starts_with("HTTP/1.0 200"), "GET {path} failed");
    let (_, body) = resp.split_once("\r\n\r\n").unwrap_or_default();
    Ok(body.to_string())
}

/// Milliseconds one GET /metrics of the benchmarked daemon takes, whole body read.
fn scrape_ms() -> Result<f64> {
    let start = Instant::now();
    get(SERVE_ADDR, "/metrics")?;
    Ok(start.elapsed().as_secs_f64() * 1e3)
}

/// `hstrace-bench` (the tools crate: the bench's own commands, never shipped), built
/// beside `bin` by xtask's `build_bench`.
fn tool(bin: &Path) -> std::path::PathBuf {
    bin.with_file_name("hstrace-bench")
}

/// The one number `hstrace-bench ARGS` prints.
fn hstrace_number(tool: &Path, args: &[&str]) -> Result<f64> {
    let out = Command::new(tool).args(args).output()?;
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .with_context(|| {
            format!(
                "hstrace-bench {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}

/// The smallest and largest of `v`.
fn range(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
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

pub fn run(
    bin: &Path,
    nginx: &BenchNginx,
    syscall_exe: &Path,
    uprobe_exe: &Path,
) -> Result<String> {
    let mut doc = String::new();
    let (mut cpu_per_sec, mut rss_kib, mut attach_ms, mut map_bytes) =
        (Vec::new(), 0u64, Vec::new(), 0u64);
    doc.push_str(&format!(
        "Throughput with hstrace on / off, {PAIRS} interleaved pairs per row (off first, then on first, \
         alternately), median (min–max).\n\
         nginx with 1 worker on 127.0.0.1; clients on the same 2-core machine.\n\n\
         | workload | mode | off (ops/s, median) | on/off | goal |\n|---|---|---|---|---|\n"
    ));
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
            doc.push_str(&line);
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
    let live = serve_rss_with_live_connections(bin)?;
    doc.push_str(&format!(
        "\n| measure | result | goal |\n|---|---|---|\n\
         | the once-a-second idle sweep over 65,536 live connections (the default --max-conns; map filled from userspace) | {sweep:.0} ms per sweep | — |\n\
         | userspace pipeline on one core, synthetic connections (4 ring-buffer records and 2 JSON lines each), median of {PAIRS} runs (min–max) | {:.0} connections/s = {:.0} records/s ({:.0}–{:.0}) | ≥ 1,000,000 records/s |\n\
         | the same through serve's sinks (metrics and parameters) | {serve_pipeline:.0} connections/s = {:.0} records/s ({:.0}–{:.0}) | ≥ 1,000,000 records/s |\n\
         | time to answer one scrape of /metrics (median of 21, after the TLS and plain workloads) | {scrape:.1} ms | ≤ 50 ms |\n\
         | serve's peak RSS after those workloads | {:.1} MiB | ≤ 64 MiB |\n\
         | serve's peak RSS with {LIVE_CONNS} idle connections open (its own nginx, {HOLDERS} workers; the kernel tracked {}, {} still in its map), against none | {:.1} MiB ({:.1} MiB) | ≤ 64 MiB |\n\
         | time to attach to the running nginx (median) | {:.0} ms | ≤ 1000 ms |\n\
         | daemon peak RSS | {:.1} MiB | ≤ 64 MiB |\n\
         | daemon CPU during the runs (median) | {:.1} % of one core | — |\n\
         | kernel map memory (memlock) | {:.1} MiB | — |\n",
        pipeline,
        pipeline * 4.0,
        pipe_min * 4.0,
        pipe_max * 4.0,
        serve_pipeline * 4.0,
        serve_min * 4.0,
        serve_max * 4.0,
        serve_rss as f64 / 1024.0,
        live.tracked,
        live.open,
        live.live_kib as f64 / 1024.0,
        live.idle_kib as f64 / 1024.0,
        median(attach_ms),
        rss_kib as f64 / 1024.0,
        median(cpu_per_sec) * 100.0,
        map_bytes as f64 / (1024.0 * 1024.0),
    ));
    doc.push_str(&cost::section(bin, nginx, uprobe_exe)?);
    let rows: String = SYSCALL_ROWS
        .iter()
        .zip(syscall_cost(bin, nginx.master, syscall_exe)?)
        .map(|(what, (off, on))| format!("| {what} | {off:.0} | {on:.0} | {:.0} |\n", on - off))
        .collect();
    doc.push_str(&format!(
        "\n## Cost for processes hstrace does not trace\n\n\
         Reads and writes are hooked in the socket layer, so file and pipe I/O is not hooked \
         at all, and another process's socket calls leave the programs at the port check. \
         accept is still hooked at the syscall, and any syscall tracepoint sends every \
         syscall of every process down the kernel's traced-syscall path: that is what \
         getppid shows. A loop of each, {PAIRS} interleaved off/on pairs, median ns per call \
         or pair:\n\n\
         | syscall | off | on | added |\n|---|---|---|---|\n{rows}"
    ));
    Ok(doc)
}
