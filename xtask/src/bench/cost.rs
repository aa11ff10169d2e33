//! The cost of observing one connection or request, per operation, from figures that hold
//! still on a shared machine: the BPF programs' run time as the kernel counts it (less
//! what the counting itself adds), the uprobe traps (count × measured cost), the tracer
//! process's own CPU, and the CPU the whole machine spends per operation with hstrace off,
//! on, and on without uprobes, in short interleaved runs.

use std::{
    collections::HashMap,
    fs,
    io::{BufRead, BufReader, Write},
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use hstrace_tests::{procs::process_run_secs, util::median};

use super::{range, run_load, split, BenchNginx, Tracer, SERVE, WORKLOADS};
use crate::template;

/// The section's prose, with its tables and figures filled in.
const TEMPLATE: &str = include_str!("../../templates/benchmarks-cost.md");

const STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// Calls of the uprobe loop per run.
const UPROBE_CALLS: &str = "200000";
/// Rounds (each side of CPU_SIDES once) of the CPU-per-connection rows.
const CPU_PAIRS: usize = 9;
/// Rounds of the split of the empty programs' cost: its parts are a percent or two each,
/// inside one short run's noise.
const SPLIT_ROUNDS: usize = 15;

/// The ids of the BPF programs process `pid` holds open (from /proc/PID/fdinfo).
pub fn prog_ids(pid: u32) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fdinfo"))? {
        let Ok(text) = fs::read_to_string(fd?.path()) else {
            continue;
        };
        if let Some(id) = text
            .lines()
            .find_map(|l| l.strip_prefix("prog_id:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
        {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// Run count and run time (ns) of each of one process's BPF programs, by program name
/// (the uprobe programs are one program each, however many processes they are attached to).
fn programs(pid: u32) -> Result<HashMap<String, (u64, u64)>> {
    let ids = prog_ids(pid)?;
    let out = Command::new("bpftool")
        .args(["prog", "show", "-j"])
        .output()
        .context("bpftool prog show")?;
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).context("bpftool's JSON")?;
    let mut by_name = HashMap::new();
    for p in all.as_array().context("a list of programs")? {
        if !p["id"].as_u64().is_some_and(|id| ids.contains(&id)) {
            continue;
        }
        let e = by_name
            .entry(p["name"].as_str().unwrap_or("?").to_string())
            .or_insert((0, 0));
        e.0 += p["run_cnt"].as_u64().unwrap_or(0);
        e.1 += p["run_time_ns"].as_u64().unwrap_or(0);
    }
    Ok(by_name)
}

/// (program name, runs, run time in ns) gained over a stretch of time.
type Gained = Vec<(String, u64, u64)>;

/// All programs' runs and run time (ns) in `gained`.
fn totals(gained: &Gained) -> (f64, f64) {
    let runs: u64 = gained.iter().map(|(_, c, _)| c).sum();
    let ns: u64 = gained.iter().map(|(_, _, t)| t).sum();
    (runs as f64, ns as f64)
}

/// Run `work` with kernel.bpf_stats_enabled on: what it returns, and what each of process
/// `pid`'s programs gained meanwhile.
fn counting<R>(pid: u32, work: impl FnOnce() -> R) -> Result<(R, Gained)> {
    fs::write(STATS, "1").context("enabling kernel.bpf_stats_enabled")?;
    let before = programs(pid);
    let out = work();
    let after = programs(pid);
    let _ = fs::write(STATS, "0");
    let before = before?;
    let gained = after?
        .into_iter()
        .map(|(name, (c1, t1))| {
            let (c0, t0) = before.get(&name).copied().unwrap_or((0, 0));
            (name, c1 - c0, t1 - t0)
        })
        .collect();
    Ok((out, gained))
}

/// One workload's figures per operation.
struct PerOp {
    runs: f64,
    counted_ns: f64,
    traps: f64,
    tracer_ns: f64,
    /// the run's length, to take the tracer's idle CPU out of tracer_ns
    secs: f64,
    ops: f64,
    /// (program, runs, ns) per operation, costliest first
    top: Vec<(String, f64, f64)>,
}

fn per_op(bin: &Path, master: u32, extra: &[&str], cmd: &[String]) -> Result<PerOp> {
    let tracer = Tracer::start(bin, master, extra)?;
    let pid = tracer.child.id();
    let counted = counting(pid, || {
        let cpu_before = process_run_secs(pid);
        let started = Instant::now();
        let run = run_load(cmd);
        let secs = started.elapsed().as_secs_f64();
        (cpu_before, run, secs, process_run_secs(pid))
    });
    tracer.stop();
    let ((cpu_before, run, secs, cpu_after), gained) = counted?;
    let (_, ops) = run?;
    let mut top = Vec::new();
    let (mut runs, mut ns, mut traps) = (0.0, 0.0, 0.0);
    for (name, c, t) in gained {
        let (c, t) = (c as f64 / ops, t as f64 / ops);
        runs += c;
        ns += t;
        // every uprobe or uretprobe program run is one trap into the kernel
        if name.starts_with("ssl_") {
            traps += c;
        }
        if c > 0.0 {
            top.push((name, c, t));
        }
    }
    top.sort_by(|a, b| b.2.total_cmp(&a.2));
    Ok(PerOp {
        runs,
        counted_ns: ns,
        traps,
        tracer_ns: (cpu_after? - cpu_before?) * 1e9 / ops,
        secs,
        ops,
        top,
    })
}

/// CPU seconds per second the tracer spends with no connection to trace (its timers, the
/// once-a-second checks and sweep), over IDLE_SECS.
fn idle_cpu(bin: &Path, master: u32, extra: &[&str]) -> Result<f64> {
    const IDLE_SECS: u64 = 10;
    let tracer = Tracer::start(bin, master, extra)?;
    let pid = tracer.child.id();
    let before = process_run_secs(pid)?;
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(IDLE_SECS));
    let cpu = process_run_secs(pid)? - before;
    let secs = started.elapsed().as_secs_f64();
    tracer.stop();
    Ok(cpu / secs)
}

/// ns per call of the uprobe loop, with hstrace tracing it or not.
fn uprobe_loop_ns(bin: &Path, exe: &Path, traced: bool) -> Result<f64> {
    let mut child = Command::new(exe)
        .arg(UPROBE_CALLS)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| exe.display().to_string())?;
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    out.read_line(&mut line)?;
    if line.trim() != "ready" {
        bail!("{} printed {line:?}", exe.display());
    }
    let tracer = if traced {
        Some(Tracer::start(bin, child.id(), &[])?)
    } else {
        None
    };
    child.stdin.take().expect("piped").write_all(b"go\n")?;
    line.clear();
    out.read_line(&mut line)?;
    child.wait()?;
    if let Some(t) = tracer {
        t.stop();
    }
    line.trim()
        .parse()
        .with_context(|| format!("{} printed {line:?}", exe.display()))
}

/// The cost of one SSL_do_handshake call's two traps and their programs (ns): the median
/// over interleaved pairs of the traced loop less the untraced one.
fn uprobe_trap_pair_ns(bin: &Path, exe: &Path) -> Result<f64> {
    let mut d = Vec::new();
    for _ in 0..5 {
        let off = uprobe_loop_ns(bin, exe, false)?;
        let on = uprobe_loop_ns(bin, exe, true)?;
        d.push(on - off);
    }
    Ok(median(d))
}

/// CPU seconds used so far by the children of this process that have been waited for
/// (the load generator, once its run is over).
fn waited_children_cpu_secs() -> f64 {
    // SAFETY: getrusage writes only the struct it is given
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// CPU seconds of nginx's workers (the master's children) so far.
fn workers_cpu_secs(master: u32) -> f64 {
    fs::read_to_string(format!("/proc/{master}/task/{master}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .filter_map(|p| process_run_secs(p).ok())
        .sum()
}

/// Send + recv pairs of the untraced loop.
const UNTRACED_PAIRS: u32 = 100_000;

/// BPF run time per loopback send + recv pair of a process hstrace does not trace (this
/// one, its own listener): (program runs, ns counted) per pair, the tracer in default mode.
fn untraced_pair(bin: &Path, master: u32) -> Result<(f64, f64)> {
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut tx = TcpStream::connect(listener.local_addr()?)?;
    tx.set_nodelay(true)?;
    let (mut rx, _) = listener.accept()?;
    let tracer = Tracer::start(bin, master, &[])?;
    let mut byte = [0u8; 1];
    let counted = counting(tracer.child.id(), || -> std::io::Result<()> {
        for _ in 0..UNTRACED_PAIRS {
            tx.write_all(b"x")?;
            std::io::Read::read_exact(&mut rx, &mut byte)?;
        }
        Ok(())
    });
    tracer.stop();
    let (done, gained) = counted?;
    done?;
    let (runs, ns) = totals(&gained);
    let n = f64::from(UNTRACED_PAIRS);
    Ok((runs / n, ns / n))
}

/// Rounds of the hooks' floors (each one run of each side).
const FLOOR_ROUNDS: usize = 3;

/// Program runs and BPF run time counted per operation of `cmd` (a workload against nginx)
/// under two floors of hstrace's figures: [empty programs at the hooks `trace` attaches
/// (`hstrace-bench hooks-alone`), hstrace tracing another server (`--port` of the bench's
/// own listener: with --port alone every process's accept is looked at, so nginx's are
/// too, and every other run leaves at its first checks)]. Medians of interleaved rounds.
fn hook_floors(bin: &Path, cmd: &[String]) -> Result<[(f64, f64); 2]> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port().to_string();
    let once = |side: usize| -> Result<(f64, f64)> {
        let mut c = Command::new(if side == 0 {
            super::tool(bin)
        } else {
            bin.into()
        });
        if side == 0 {
            c.arg("hooks-alone");
        } else {
            c.args([
                "trace",
                "--format",
                "json",
                "--uprobes",
                "none",
                "--port",
                &port,
            ]);
        }
        let tracer = Tracer::spawn(c, false)?;
        let counted = counting(tracer.child.id(), || run_load(cmd));
        tracer.stop();
        let (run, gained) = counted?;
        let (_, ops) = run?;
        let (runs, ns) = totals(&gained);
        Ok((runs / ops, ns / ops))
    };
    let mut got: [Vec<(f64, f64)>; 2] = [Vec::new(), Vec::new()];
    for round in 0..FLOOR_ROUNDS {
        for k in 0..2 {
            let side = (round + k) % 2;
            got[side].push(once(side)?);
        }
    }
    drop(listener);
    Ok(got.map(|side| {
        let (runs, ns) = side.into_iter().unzip();
        (median(runs), median(ns))
    }))
}

/// What runs beside nginx in one side of the CPU on/off rows.
#[derive(Clone, Copy)]
enum Side {
    Off,
    /// `hstrace-bench hooks-alone --hooks SET`: an empty program at each of wire only's
    /// hooks in SET (all, syscalls, not-syscalls)
    EmptyPrograms(&'static str),
    /// `hstrace trace` with these arguments
    Trace(&'static [&'static str]),
}

/// The sides of the CPU on/off table, in the order of `OnOff::all`.
const CPU_SIDES: [Side; 4] = [
    Side::Off,
    Side::EmptyPrograms("all"),
    Side::Trace(&[]),
    Side::Trace(&["--uprobes", "none"]),
];

/// The sides that split the empty programs' cost, each with its row's label: a control
/// (hooks held that no connection fires), accept's syscall tracepoints, the rest, all.
const SPLIT_SIDES: [(Side, &str); 5] = [
    (Side::Off, "none (hstrace off)"),
    (
        Side::EmptyPrograms("quiet"),
        "only hooks no connection fires (fork, exec): the control",
    ),
    (
        Side::EmptyPrograms("syscalls"),
        "accept's syscall tracepoints only",
    ),
    (
        Side::EmptyPrograms("not-syscalls"),
        "every other hook of wire only",
    ),
    (Side::EmptyPrograms("all"), "all of wire only's hooks"),
];

/// The workload whose on/off cost the hooks weigh on most: resumed TLS 1.2 handshakes.
pub const SPLIT_WORKLOAD: &super::Workload = &WORKLOADS[2];

/// The rows of the split table, from `cpu_split`'s figures.
pub fn split_rows((all, ratio): &(Vec<f64>, Vec<f64>)) -> String {
    SPLIT_SIDES
        .iter()
        .enumerate()
        .map(|(i, (_, what))| {
            let r = if i == 0 {
                "—".to_string()
            } else {
                format!("{:+.1} %", (ratio[i - 1] - 1.0) * 100.0)
            };
            format!("| {what} | {:.1} µs | {r} |\n", all[i] / 1e3)
        })
        .collect()
}

/// CPU per operation of nginx's workers, the client and the tracer, with `side` beside
/// them during one run of `cmd`: (all, nginx's workers), ns.
fn cpu_once(bin: &Path, master: u32, cmd: &[String], side: Side) -> Result<(f64, f64)> {
    let tracer = match side {
        Side::Off => None,
        Side::EmptyPrograms(set) => {
            let mut c = Command::new(super::tool(bin));
            c.args(["hooks-alone", "--hooks", set]);
            Some(Tracer::spawn(c, false)?)
        }
        Side::Trace(extra) => Some(Tracer::start(bin, master, extra)?),
    };
    let pid = tracer.as_ref().map(|t| t.child.id());
    let measured = (|| -> Result<(f64, f64)> {
        let (w0, c0) = (workers_cpu_secs(master), waited_children_cpu_secs());
        let t0 = pid.map_or(Ok(0.0), process_run_secs)?;
        let (_, ops) = run_load(cmd)?;
        let t1 = pid.map_or(Ok(0.0), process_run_secs)?;
        let workers = workers_cpu_secs(master) - w0;
        // the client's CPU before the tracer is waited for: its own would join it
        let spent = workers + waited_children_cpu_secs() - c0 + t1 - t0;
        Ok((spent * 1e9 / ops, workers * 1e9 / ops))
    })();
    if let Some(t) = tracer {
        t.stop();
    }
    measured
}

/// `rounds` rounds of one run of `cmd` beside each of `sides`, each round in a rotated
/// order: per round, (all, nginx's workers) per operation of each side, ns.
fn cpu_rounds<const N: usize>(
    bin: &Path,
    master: u32,
    cmd: &[String],
    sides: [Side; N],
    rounds: usize,
) -> Result<Vec<[(f64, f64); N]>> {
    let mut got_all = Vec::new();
    for round in 0..rounds {
        let mut got = [(0.0, 0.0); N];
        for k in 0..N {
            let side = (round + k) % N;
            got[side] = cpu_once(bin, master, cmd, sides[side])?;
        }
        got_all.push(got);
    }
    Ok(got_all)
}

/// Over `rounds` (sides[0] off): the median CPU per operation of each side, and the
/// median of each round's ratio of each other side to its off run.
fn medians<const N: usize>(rounds: &[[(f64, f64); N]]) -> (Vec<f64>, Vec<f64>) {
    let all = (0..N)
        .map(|s| median(rounds.iter().map(|r| r[s].0).collect()))
        .collect();
    let ratio = (1..N)
        .map(|s| median(rounds.iter().map(|r| r[s].0 / r[0].0).collect()))
        .collect();
    (all, ratio)
}

/// The CPU on/off rows of one workload: medians over interleaved rounds, ns per operation.
pub struct OnOff {
    /// nginx's workers + the client + the tracer, per CPU_SIDES: off, empty programs at
    /// the hooks, default (`trace`), wire only
    pub all: Vec<f64>,
    /// the median ratios of each round's empty-program, default and wire-only runs to its
    /// off run
    pub ratio: Vec<f64>,
    /// nginx's workers alone: default less wire only, the OpenSSL uprobes where they run
    pub uprobes_in_nginx: f64,
}

/// CPU per operation of nginx's workers, the client and the tracer: hstrace off, empty
/// programs at its hooks, on in default mode and on wire only.
pub fn cpu_on_off(bin: &Path, master: u32, cmd: &[String]) -> Result<OnOff> {
    let rounds = cpu_rounds(bin, master, cmd, CPU_SIDES, CPU_PAIRS)?;
    let (all, ratio) = medians(&rounds);
    Ok(OnOff {
        all,
        ratio,
        uprobes_in_nginx: median(rounds.iter().map(|r| r[2].1 - r[3].1).collect()),
    })
}

/// The empty programs' CPU on/off split between accept's syscall tracepoints and the
/// other hooks, beside a control and all of them: (CPU per operation off, with each; each
/// one's on/off ratio), ns.
pub fn cpu_split(bin: &Path, master: u32, cmd: &[String]) -> Result<(Vec<f64>, Vec<f64>)> {
    Ok(medians(&cpu_rounds(
        bin,
        master,
        cmd,
        SPLIT_SIDES.map(|(side, _)| side),
        SPLIT_ROUNDS,
    )?))
}

/// One row of the CPU on/off table.
pub fn cpu_row(workload: &str, c: &OnOff) -> String {
    format!(
        "| {workload} | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs | {:+.1} % | {:+.1} % | {:+.1} % | {:.1} µs |\n",
        c.all[0] / 1e3,
        c.all[1] / 1e3,
        c.all[2] / 1e3,
        c.all[3] / 1e3,
        (c.ratio[0] - 1.0) * 100.0,
        (c.ratio[1] - 1.0) * 100.0,
        (c.ratio[2] - 1.0) * 100.0,
        c.uprobes_in_nginx / 1e3,
    )
}

/// The "Cost per operation" section of docs/benchmarks.md, starting "\n## Cost per
/// operation\n"; `alone`: run by itself (`--cost`) at this commit.
pub fn section(
    bin: &Path,
    nginx: &BenchNginx,
    uprobe_exe: &Path,
    alone: Option<&str>,
) -> Result<String> {
    let floor = super::hstrace_number(&super::tool(bin), &["stats-floor"])?;
    let trap_pair = uprobe_trap_pair_ns(bin, uprobe_exe)?;
    let idle_trace = idle_cpu(bin, nginx.master, &[])?;
    let idle_serve = idle_cpu(bin, nginx.master, &[SERVE])?;
    eprintln!(
        "tracer idle: trace {:.2} ms/s, serve {:.2} ms/s",
        idle_trace * 1e3,
        idle_serve * 1e3
    );
    let mut rows = String::new();
    let mut detail = String::new();
    // each workload's traced figures, wire only (beside its floors below)
    let mut traced = Vec::new();
    for w in WORKLOADS {
        let cmd = w.cmd(nginx);
        for (mode, extra) in [
            ("default", &[][..]),
            ("wire only", &["--uprobes", "none"][..]),
            ("serve", &[SERVE][..]),
        ] {
            let p = per_op(bin, nginx.master, extra, &cmd)?;
            let net = p.counted_ns - p.runs * floor;
            let idle = if mode == "serve" {
                idle_serve
            } else {
                idle_trace
            };
            let tracer_busy_ns = p.tracer_ns - idle * p.secs * 1e9 / p.ops;
            let line = format!(
                "| {} | {mode} | {:.1} | {:.2} µs | {:.2} µs | {:.1} (~{:.1} µs) | {:.2} µs | {:.2} µs |\n",
                w.name,
                p.runs,
                p.counted_ns / 1e3,
                net / 1e3,
                p.traps,
                p.traps / 2.0 * trap_pair / 1e3,
                p.tracer_ns / 1e3,
                tracer_busy_ns / 1e3,
            );
            eprint!("{line}");
            rows.push_str(&line);
            if mode == "wire only" {
                traced.push((p.runs, p.counted_ns));
            }
            if mode == "default" {
                let top: Vec<String> = p
                    .top
                    .iter()
                    .map(|(n, c, t)| format!("{n} {:.1}×{:.0} ns", c, (t / c - floor).max(0.0)))
                    .collect();
                detail.push_str(&format!("| {} | {} |\n", w.name, top.join(", ")));
            }
        }
    }
    let (untraced_runs, untraced_ns) = untraced_pair(bin, nginx.master)?;
    eprintln!(
        "untraced send+recv pair: {untraced_runs:.2} runs, {untraced_ns:.0} ns counted, {:.0} ns less the counting",
        untraced_ns - untraced_runs * floor
    );
    let mut floor_rows = String::new();
    for (w, traced) in WORKLOADS.iter().zip(traced) {
        let [empty, other] = hook_floors(bin, &w.cmd(nginx))?;
        let cell =
            |(runs, ns): (f64, f64)| format!("{runs:.1} runs, {:.2} µs", (ns - runs * floor) / 1e3);
        let line = format!(
            "| {} | {} | {} | {} |\n",
            w.name,
            cell(empty),
            cell(other),
            cell(traced)
        );
        eprint!("{line}");
        floor_rows.push_str(&line);
    }
    let mut cpu_rows = String::new();
    for w in WORKLOADS.iter().filter(|w| w.tls).take(3) {
        let line = cpu_row(w.name, &cpu_on_off(bin, nginx.master, &w.cmd(nginx))?);
        eprint!("{line}");
        cpu_rows.push_str(&line);
    }
    let split = split_rows(&cpu_split(bin, nginx.master, &SPLIT_WORKLOAD.cmd(nginx))?);
    eprint!("{split}");
    let untraced_net = untraced_ns - untraced_runs * floor;
    let filled = template::fill(
        TEMPLATE,
        &[
            (
                "RUN_ALONE",
                alone.map_or(String::new(), |commit| {
                    format!("; this section from commit {commit}, run alone")
                }),
            ),
            ("FLOOR_NS", format!("{floor:.0}")),
            ("TRAP_PAIR_US", format!("{:.2}", trap_pair / 1e3)),
            ("IDLE_TRACE_MS", format!("{:.2}", idle_trace * 1e3)),
            ("IDLE_SERVE_MS", format!("{:.2}", idle_serve * 1e3)),
            ("PER_OPERATION_ROWS", rows.trim_end().to_string()),
            ("PROGRAM_ROWS", detail.trim_end().to_string()),
            ("UNTRACED_PAIRS", UNTRACED_PAIRS.to_string()),
            ("UNTRACED_RUNS", format!("{untraced_runs:.2}")),
            ("UNTRACED_NS", format!("{untraced_ns:.0}")),
            ("UNTRACED_NET_NS", format!("{untraced_net:.0}")),
            ("FLOOR_ROUNDS", FLOOR_ROUNDS.to_string()),
            ("FLOOR_ROWS", floor_rows.trim_end().to_string()),
            ("CPU_PAIRS", CPU_PAIRS.to_string()),
            ("CPU_ROWS", cpu_rows.trim_end().to_string()),
            ("SPLIT_WORKLOAD", SPLIT_WORKLOAD.name.to_string()),
            ("SPLIT_ROUNDS", SPLIT_ROUNDS.to_string()),
            ("SPLIT_ROWS", split.trim_end().to_string()),
        ],
    )?;
    Ok(format!("\n{filled}"))
}

/// `cargo xtask bench --ab OTHER`: this build's BPF run time per operation against another
/// hstrace binary's (OTHER, built from another commit), both in the mode labelled `mode`
/// (wire only unless asked), under one workload's load against the same nginx, in `pairs` interleaved pairs (every other pair with OTHER
/// first): single runs here move by more than most changes do, pairs run back to back
/// move together. Prints each pair and the medians (per operation, less the counting),
/// by program too; writes nothing.
pub fn ab(
    bin: &Path,
    other: &Path,
    nginx: &BenchNginx,
    workload: usize,
    pairs: usize,
    mode: &str,
) -> Result<()> {
    let w = super::workload(workload)?;
    let extra = super::mode_args(mode)?;
    let floor = super::hstrace_number(&super::tool(bin), &["stats-floor"])?;
    let cmd = w.cmd(nginx);
    println!(
        "{}, {mode}, {pairs} pairs: BPF per operation less {floor:.0} ns a run (other → this)",
        w.name
    );
    let (mut deltas, mut by_program) = (Vec::new(), HashMap::<String, Vec<f64>>::new());
    for pair in 0..pairs {
        let run = |b: &Path| per_op(b, nginx.master, extra, &cmd);
        let (o, t) = super::in_turn(pair, || run(other), || run(bin))?;
        let net = |p: &PerOp| (p.counted_ns - p.runs * floor) / 1e3;
        deltas.push(net(&t) - net(&o));
        println!(
            "pair {}: {:.2} → {:.2} µs ({:+.2}), {:.1} → {:.1} runs",
            pair + 1,
            net(&o),
            net(&t),
            net(&t) - net(&o),
            o.runs,
            t.runs
        );
        let ns = |p: &PerOp, name: &str| {
            p.top
                .iter()
                .find(|(n, _, _)| n == name)
                .map_or(0.0, |(_, c, t)| t - c * floor)
        };
        let mut names: Vec<&String> = t.top.iter().chain(&o.top).map(|(n, _, _)| n).collect();
        names.sort();
        names.dedup();
        for name in names {
            by_program
                .entry(name.clone())
                .or_default()
                .push(ns(&t, name) - ns(&o, name));
        }
    }
    let (lo, hi) = range(&deltas);
    println!(
        "this − other: median {:+.2} µs ({lo:+.2}…{hi:+.2}), {}",
        median(deltas.clone()),
        split(&deltas)
    );
    let mut programs: Vec<_> = by_program.into_iter().collect();
    programs.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, v) in programs {
        let (lo, hi) = range(&v);
        println!(
            "  {name}: median {:+.0} ns ({lo:+.0}…{hi:+.0}, {} pairs)",
            median(v.clone()),
            v.len()
        );
    }
    Ok(())
}

/// `doc` with its "Cost per operation" section replaced by `section` (which starts with
/// its own heading), or the section put before the next one when there was none.
pub fn replace_section(doc: &str, section: &str) -> String {
    const HEADING: &str = "\n## Cost per operation\n";
    if let Some(start) = doc.find(HEADING) {
        let end = doc[start + HEADING.len()..]
            .find("\n## ")
            .map_or(doc.len(), |i| start + HEADING.len() + i);
        return format!("{}{section}{}", &doc[..start], &doc[end..]);
    }
    match doc.find("\n## Cost for processes") {
        Some(at) => format!("{}{section}{}", &doc[..at], &doc[at..]),
        None => format!("{doc}{section}"),
    }
}

#[cfg(test)]
mod tests {
    use super::{replace_section, TEMPLATE};

    #[test]
    fn the_cost_template_is_filled() {
        let out = crate::template::tests::fill_all(TEMPLATE);
        assert!(out.starts_with(
            "## Cost per operation\n\n`cargo xtask bench --cost` (also part of the full bench<RUN_ALONE>). "
        ));
        assert!(out.ends_with("|---|---|---|\n<SPLIT_ROWS>\n"), "{out}");
    }

    #[test]
    fn the_cost_section_is_replaced_in_place() {
        let doc = "# B\n\n## In-kernel\nx\n\n## Cost for processes\ny\n";
        let once = replace_section(doc, "\n## Cost per operation\nA\n");
        assert_eq!(
            once,
            "# B\n\n## In-kernel\nx\n\n## Cost per operation\nA\n\n## Cost for processes\ny\n"
        );
        let twice = replace_section(&once, "\n## Cost per operation\nB\n");
        assert_eq!(
            twice,
            "# B\n\n## In-kernel\nx\n\n## Cost per operation\nB\n\n## Cost for processes\ny\n"
        );
    }
}
