//! `cargo xtask validate-model`: does seed 002's model, fed with what `hstrace serve`
//! measured, predict a loaded server? A real nginx (one worker, pinned to CPU 0, an RSA-4096
//! key so that a full handshake costs milliseconds) is driven by hsload, the closed-loop
//! generator (N users, exponential think time, pinned to CPU 1 with the daemon), for each
//! mix and user count. Each point's parameters are the daemon's over that point's run;
//! `hstrace model --discipline event-loop-sim` (the worker's event loop, simulated)
//! predicts throughput and mean response time from them, and hsload's own clock (connect
//! to the last byte of the response) is the truth; the event-loop MVA approximation and
//! seed 002's processor sharing are shown beside it, and hstrace's measured queue stages
//! beside the ones the simulation predicts. Every point goes to docs/model-validation.md,
//! misses included; the command fails when a point below `UTIL_LIMIT` is off by more than
//! `TOLERANCE`.

use std::{
    fmt::Write as _,
    fs,
    io::{BufRead, BufReader, Read, Write as _},
    net::{TcpListener, TcpStream},
    os::unix::{io::AsRawFd, process::CommandExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use hstrace_tests::{
    daemon::Daemon,
    procs::{pin, pin_thread, process_run_secs},
    servers::{Nginx, TestServer},
};
use serde_json::Value;

use crate::{
    setup::{setup_test_machine, TEST_PACKAGES},
    template,
    util::{build, commit, cpus, kernel, require_root, root, run},
};

/// The document's prose, with the settings and the mixes filled in.
const TEMPLATE: &str = include_str!("../templates/model-validation.md");
/// One mix's section: its table, misses, queue stages and picture.
const MIX_TEMPLATE: &str = include_str!("../templates/model-validation-mix.md");

/// Mean think time asked of hsload, seconds (the model is given the one it really had).
const THINK_S: f64 = 0.2;
/// Within this of the measurement, relative...
const TOLERANCE: f64 = 0.15;
/// ...at every point whose predicted utilisation is below this.
const UTIL_LIMIT: f64 = 0.9;
const WARMUP_S: u64 = 3;
const CLASSES: [&str; 3] = ["tls_full", "tls_resumed", "plain"];
/// The discipline the criterion is checked on: nginx's worker loop, simulated.
const SIMULATED: &str = "event-loop-sim";
/// hstrace's queue stages of a TLS 1.2 handshake and a request, in wire order.
const QUEUE_STAGES: [&str; 4] = [
    "accept_queue",
    "client_hello_queue",
    "client_flight_2_queue",
    "request_queue",
];

/// A request mix: seed 002's p (TLS share) and the share of TLS requests that offer the
/// user's saved session.
struct Mix {
    name: &'static str,
    secure: f64,
    resume: f64,
}

const MIXES: [Mix; 2] = [
    Mix {
        name: "every request TLS, half of them offering the saved session",
        secure: 1.0,
        resume: 0.5,
    },
    Mix {
        name: "half the requests TLS (full handshakes), half plain HTTP",
        secure: 0.5,
        resume: 0.0,
    },
];

/// How long and at which user counts.
struct Plan {
    users: Vec<u32>,
    duration_s: u64,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            users: vec![1, 4, 16, 32, 48, 64, 80, 96],
            duration_s: 20,
        }
    }

    /// How long the point with `users` users is measured: the plan's duration, longer for
    /// few users (up to 4×), to take about `MIN_REQUESTS` requests.
    fn duration_s(&self, users: u32) -> u64 {
        let wanted = (MIN_REQUESTS * THINK_S / f64::from(users.max(1))).ceil() as u64;
        wanted.clamp(self.duration_s, 4 * self.duration_s)
    }

    /// A short run, to check the machinery (its figures are noisier).
    fn quick() -> Plan {
        Plan {
            users: vec![1, 16, 64],
            duration_s: 6,
        }
    }
}

/// Requests a point's mean is taken over at least, where the plan's duration gives fewer
/// (few users, long think times): a mean of a hundred is moved by a handful of the
/// platform's long wake-ups.
const MIN_REQUESTS: f64 = 400.0;

/// One user count of one mix: measured and predicted.
struct Point {
    users: u32,
    /// hsload's output (`hsload/v1`)
    load: Value,
    /// nginx worker's CPU busy share over the measuring window
    cpu_busy: f64,
    /// the daemon's parameters of this point (`hstrace.parameters/v1`)
    params: Value,
    /// the worker's CPU per request outside the measured service stages, as the daemon
    /// measured it (the parameters' cpu.outside_stages_s, which the model took)
    overhead_s: f64,
    /// the same from this harness's own reading of the worker's CPU (/proc) over the
    /// measured window, less the stages' demand: a check of the daemon's figure
    overhead_proc_s: f64,
    /// the worker's whole CPU per request as the daemon measured it (cpu.per_connection_s):
    /// the stages' part of it falls with load too, as the worker runs warmer
    cpu_per_request_s: f64,
    /// `hstrace model --discipline event-loop-sim` from this point's own parameters (the
    /// CPU outside the stages among them) and the wake-up (the `hstrace.model/v1` point):
    /// what the criterion is checked on
    live: Value,
    /// the simulation from the parameters alone
    params_only: Value,
    /// the same with the event-loop MVA approximation (`--discipline event-loop`)
    approx: Value,
    /// the same with seed 002's processor sharing
    shared: Value,
    /// the simulation from the parameters measured with one user, at this point's mix
    one_user: Option<Value>,
}

impl Point {
    fn response_error(&self) -> f64 {
        rel(
            f(&self.live["response_s"]),
            f(&self.load["response_s"]["mean"]),
        )
    }

    fn throughput_error(&self) -> f64 {
        rel(
            f(&self.live["throughput_per_s"]),
            f(&self.load["throughput_per_s"]),
        )
    }

    /// Counted against the tolerance (the server was busy less than UTIL_LIMIT), and
    /// within it?
    fn verdict(&self) -> (bool, bool) {
        let counted = self.cpu_busy < UTIL_LIMIT;
        let ok =
            self.response_error().abs() <= TOLERANCE && self.throughput_error().abs() <= TOLERANCE;
        (counted, ok)
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// (predicted − measured) / measured
fn rel(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured
}

/// The pauses between `wakeup_latency`'s messages, and how many of each: from the gaps
/// within a request at low load (a client's next flight comes 0.1-2 ms after the
/// worker's last write) to a think time with one user (0.2 s), where an idle CPU sleeps
/// deepest. About 15 s in all.
const WAKEUP_PAUSES: [(Duration, usize); 5] = [
    (Duration::from_micros(200), 500),
    (Duration::from_millis(1), 500),
    (Duration::from_millis(5), 300),
    (Duration::from_millis(25), 100),
    (Duration::from_millis(200), 50),
];

/// How long an idle CPU took to run a thread after a message, after one pause.
#[derive(Debug, Clone, Copy)]
struct WakeupPoint {
    /// the mean time the thread had been asleep in `epoll_wait` when a message came
    idle_s: f64,
    mean_s: f64,
    median_s: f64,
    samples: usize,
}

/// How long a thread asleep in `epoll_wait` on `cpu`, idle, takes to run after a message
/// is sent to its loopback TCP socket from `sender_cpu`, `samples` times, `pause` apart. A
/// platform's part of an event loop that no stage measures; with one user, each of a
/// request's visits to nginx pays it, after as long a sleep as the client took. The model
/// is given the mean: it predicts a mean, and on these VMs the wake-up has a long tail (a
/// halted vCPU waits for the host to run it again), longer the longer it slept.
fn wakeup_latency(
    cpu: usize,
    sender_cpu: usize,
    pause: Duration,
    samples: usize,
) -> Result<WakeupPoint> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let mut tx = TcpStream::connect(listener.local_addr()?)?;
    tx.set_nodelay(true)?;
    let (mut rx, _) = listener.accept()?;
    let start = Instant::now();
    // each sample: (woke − sent, sent − fell asleep), ns
    let sleeper = thread::spawn(move || -> Result<Vec<(u64, u64)>> {
        pin_thread(0, cpu).with_context(|| format!("cannot pin to CPU {cpu}"))?;
        // SAFETY: epoll_create1 takes no pointers; its fd is closed below
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            bail!("epoll_create1: {}", std::io::Error::last_os_error());
        }
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: ev is a valid epoll_event, rx's fd is open for the thread's life
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, rx.as_raw_fd(), &mut ev) } != 0 {
            bail!("epoll_ctl: {}", std::io::Error::last_os_error());
        }
        let mut out = Vec::with_capacity(samples);
        let mut buf = [0u8; 8];
        while out.len() < samples {
            let mut got = libc::epoll_event { events: 0, u64: 0 };
            let asleep = start.elapsed().as_nanos() as u64;
            // SAFETY: room for the one event asked for
            if unsafe { libc::epoll_wait(ep, &mut got, 1, -1) } != 1 {
                continue;
            }
            let woke = start.elapsed().as_nanos() as u64;
            rx.read_exact(&mut buf)?;
            let sent = u64::from_le_bytes(buf);
            out.push((woke.saturating_sub(sent), sent.saturating_sub(asleep)));
        }
        // SAFETY: ep is ours, closed once
        unsafe { libc::close(ep) };
        Ok(out)
    });
    let sender = thread::spawn(move || -> Result<()> {
        pin_thread(0, sender_cpu).with_context(|| format!("cannot pin to CPU {sender_cpu}"))?;
        for _ in 0..samples {
            thread::sleep(pause);
            let sent = start.elapsed().as_nanos() as u64;
            tx.write_all(&sent.to_le_bytes())?;
        }
        Ok(())
    });
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("the wake-up sender panicked"))??;
    let got = sleeper
        .join()
        .map_err(|_| anyhow::anyhow!("the wake-up sleeper panicked"))??;
    let mut ns: Vec<u64> = got.iter().map(|&(w, _)| w).collect();
    ns.sort_unstable();
    let n = got.len() as f64;
    Ok(WakeupPoint {
        idle_s: got.iter().map(|&(_, i)| i as f64).sum::<f64>() / n / 1e9,
        mean_s: ns.iter().sum::<u64>() as f64 / n / 1e9,
        median_s: ns[ns.len() / 2] as f64 / 1e9,
        samples: got.len(),
    })
}

/// hsload with `users` users of `mix` on CPU 1; returns its output and nginx's worker's
/// CPU busy share over the measuring window.
fn drive(
    hsload: &Path,
    nginx: &TestServer,
    worker: u32,
    mix: &Mix,
    users: u32,
    duration_s: u64,
) -> Result<(Value, f64)> {
    let mut cmd = Command::new(hsload);
    cmd.args(["--tls-port", &nginx.port.to_string()])
        .args(["--plain-port", &nginx.plain_port.to_string()])
        .args(["--users", &users.to_string()])
        .args(["--think-time", &THINK_S.to_string()])
        .args(["--secure-fraction", &mix.secure.to_string()])
        .args(["--resume-fraction", &mix.resume.to_string()])
        .args(["--warmup", &WARMUP_S.to_string()])
        .args(["--duration", &duration_s.to_string()])
        .args(["--seed", &(u64::from(users) * 7919).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: only sched_setaffinity (async-signal-safe) between fork and exec
    unsafe {
        cmd.pre_exec(|| {
            let _ = pin_thread(0, 1);
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("running hsload")?;
    let stderr = BufReader::new(child.stderr.take().expect("piped"));
    let (mut from, mut to) = (None, None);
    let mut said = String::new();
    for line in stderr.lines() {
        let line = line?;
        match line.as_str() {
            "hsload: measuring" => from = Some((Instant::now(), process_run_secs(worker)?)),
            "hsload: measured" => to = Some((Instant::now(), process_run_secs(worker)?)),
            _ => said.push_str(&line),
        }
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("hsload failed ({}): {said}", out.status);
    }
    let load: Value = serde_json::from_slice(&out.stdout).context("hsload's JSON")?;
    let busy = match (from, to) {
        (Some((t0, c0)), Some((t1, c1))) => (c1 - c0) / (t1 - t0).as_secs_f64(),
        _ => f64::NAN,
    };
    Ok((load, busy))
}

/// `hstrace model ARGS --format json`: its whole answer (`hstrace.model/v1`).
fn model(bin: &Path, args: &[String]) -> Result<Value> {
    let out = Command::new(bin)
        .arg("model")
        .args(args)
        .args(["--format", "json"])
        .output()?;
    if !out.status.success() {
        bail!(
            "hstrace model {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// The one point of a one-user-count answer.
fn point(answer: &Value) -> Value {
    answer["curves"][0]["points"][0].clone()
}

/// Every server of a parameters document, as `--server`'s comma list: the daemon follows
/// nginx's master only, so these are its TLS port and (with plain requests) its plain one.
fn servers_from(params: &Value) -> String {
    params["servers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["server"].as_str())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// What every point runs against.
struct Rig<'a> {
    bin: &'a Path,
    hsload: &'a Path,
    nginx: &'a TestServer,
    /// nginx's one worker
    worker: u32,
    /// where each point's parameters and hsload output go
    dir: &'a Path,
    platform: Platform,
}

/// What the simulation is given beside a point's parameters: the platform's parts of the
/// loop that no stage measures.
#[derive(Debug, Clone)]
struct Platform {
    /// how long the worker's idle CPU takes to run it after an event, by how long it had
    /// slept (`wakeup_latency` after each of `WAKEUP_PAUSES`): the model is given the means
    wakeup: Vec<WakeupPoint>,
}

impl Platform {
    /// Measured with nginx idle: CPU 0 asleep between the samples, as between requests at
    /// low load.
    fn measure() -> Result<Platform> {
        let wakeup = WAKEUP_PAUSES
            .iter()
            .map(|&(pause, samples)| wakeup_latency(0, 1, pause, samples))
            .collect::<Result<Vec<_>>>()?;
        Ok(Platform { wakeup })
    }

    /// `hstrace model --wakeup`'s value: IDLE=TIME,... in seconds, the idle ascending.
    fn wakeup_arg(&self) -> String {
        let mut points = self.wakeup.clone();
        points.sort_by(|a, b| a.idle_s.total_cmp(&b.idle_s));
        points.dedup_by(|b, a| b.idle_s <= a.idle_s);
        points
            .iter()
            .map(|p| format!("{:.9}={:.9}", p.idle_s, p.mean_s))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The curve in words, for the log and the document.
    fn wakeup_words(&self) -> String {
        self.wakeup
            .iter()
            .map(|p| {
                format!(
                    "{:.0} µs after {} ms asleep (median {:.0} µs, {} messages)",
                    p.mean_s * 1e6,
                    ms(p.idle_s),
                    p.median_s * 1e6,
                    p.samples
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// The one-user point's parameters (its CPU outside the stages among them).
struct OneUser {
    params: PathBuf,
}

/// One point's predictions from its parameters (`file`), hsload's output and the
/// worker's CPU: the point, with the prediction from the one-user point (None: this is
/// it).
fn predict(
    bin: &Path,
    file: &Path,
    load: Value,
    cpu_busy: f64,
    platform: &Platform,
    one: Option<&OneUser>,
) -> Result<Point> {
    let params: Value = serde_json::from_str(&fs::read_to_string(file)?)?;
    let users = load["users"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .context("hsload's output has no user count")?;
    let think = load["think_time_measured_s"].as_f64().unwrap_or(THINK_S);
    let server = servers_from(&params);
    let with = |params: &Path, discipline: &str| -> Vec<String> {
        vec![
            "--params".into(),
            params.display().to_string(),
            "--server".into(),
            server.clone(),
            "--users".into(),
            users.to_string(),
            "--think-time".into(),
            think.to_string(),
            "--discipline".into(),
            discipline.into(),
        ]
    };
    // the simulated loop with the parameters' own CPU outside the stages (the daemon's
    // measurement) and the platform's wake-up
    let loop_of = |params: &Path| -> Vec<String> {
        let mut args = with(params, SIMULATED);
        args.extend(["--wakeup".into(), platform.wakeup_arg()]);
        args
    };
    let mut stages_only = with(file, SIMULATED);
    stages_only.extend(["--overhead".into(), "0".into()]);
    let answer = model(bin, &stages_only)?;
    let params_only = point(&answer);
    let live_answer = model(bin, &loop_of(file))?;
    let live = point(&live_answer);
    // the daemon's own reading, its ports weighted by their connections (the model splits
    // it into a part per sleep and a part per request)
    let (mut outside, mut whole, mut conns) = (0.0, 0.0, 0.0);
    for s in params["servers"].as_array().into_iter().flatten() {
        if let Some(o) = s["cpu"]["outside_stages_s"].as_f64() {
            let n = f(&s["connections"]);
            outside += o * n;
            whole += f(&s["cpu"]["per_connection_s"]) * n;
            conns += n;
        }
    }
    let per_conn = |x: f64| if conns > 0.0 { x / conns } else { 0.0 };
    let (overhead_s, cpu_per_request_s) = (per_conn(outside), per_conn(whole));
    // the same from /proc beside it: the worker's CPU a request (the service demand law,
    // D = U / X), less the stages'
    let stages_s = f(&params_only["utilisation"]) / f(&params_only["throughput_per_s"]);
    let overhead_proc_s = (cpu_busy / f(&load["throughput_per_s"]) - stages_s).max(0.0);
    let approx = point(&model(bin, &with(file, "event-loop"))?);
    let shared = point(&model(bin, &with(file, "processor-sharing"))?);
    // the one-user point's parameters and CPU at this point's mix: only the mix changes
    let one_user = match one {
        Some(one) => {
            let mix_of = |c: &str| f(&answer["mix"][c]);
            let tls = mix_of("tls_full") + mix_of("tls_resumed");
            // hstrace's own measurements only: no harness wake-up curve
            let mut args = with(&one.params, SIMULATED);
            args.extend(["--secure-fraction".into(), tls.to_string()]);
            if tls > 0.0 {
                args.extend([
                    "--hit-ratio".into(),
                    (mix_of("tls_resumed") / tls).to_string(),
                ]);
            }
            point(&model(bin, &args)?)
        }
        None => live.clone(),
    };
    Ok(Point {
        users,
        load,
        cpu_busy,
        params,
        overhead_s,
        overhead_proc_s,
        cpu_per_request_s,
        live,
        params_only,
        approx,
        shared,
        one_user: Some(one_user),
    })
}

/// One mix (the `index`th) at every user count of the plan.
fn run_mix(rig: &Rig, mix: &Mix, index: usize, plan: &Plan) -> Result<Vec<Point>> {
    let Rig {
        bin,
        hsload,
        nginx,
        worker,
        dir,
        ref platform,
    } = *rig;
    let mut points = Vec::new();
    let mut one: Option<OneUser> = None;
    for &users in &plan.users {
        eprintln!("xtask: mix {}: {users} users", index + 1);
        let duration_s = plan.duration_s(users);
        let window = (duration_s + 1).to_string();
        let master = nginx.master_pid().to_string();
        let daemon = Daemon::start(&["--pid", &master, "--window", &window]);
        pin(daemon.pid(), 1)?;
        let (load, cpu_busy) = drive(hsload, nginx, worker, mix, users, duration_s)?;
        let params_text = daemon.get("/api/v1/parameters");
        drop(daemon);
        let file = dir.join(format!("mix{}-users{users}.json", index + 1));
        fs::write(&file, &params_text)?;
        fs::write(
            dir.join(format!("mix{}-users{users}-hsload.json", index + 1)),
            load.to_string(),
        )?;
        let p = predict(bin, &file, load, cpu_busy, platform, one.as_ref())?;
        if one.is_none() {
            one = Some(OneUser { params: file });
        }
        points.push(p);
    }
    Ok(points)
}

fn ms(v: f64) -> String {
    if v.is_finite() {
        format!("{:.2}", v * 1e3)
    } else {
        "–".into()
    }
}

fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{:+.1} %", v * 100.0)
    } else {
        "–".into()
    }
}

/// The measured mean of `stage` for `class` in a parameters document: weighted by each
/// server's connections of that class (mix 2's classes are each on one port).
fn measured_stage(params: &Value, class: &str, stage: &str) -> Option<f64> {
    let (mut sum, mut weight) = (0.0, 0.0);
    for s in params["servers"].as_array()? {
        let c = &s["classes"][class];
        let n = f(&s["connections"]) * f(&c["share"]);
        if let Some(mean) = c["stages"][stage]["mean_s"].as_f64().filter(|_| n > 0.0) {
            sum += n * mean;
            weight += n;
        }
    }
    (weight > 0.0).then(|| sum / weight)
}

/// One mix's queue stages: hstrace's measurement against the simulation's prediction (the
/// model never reads them), per point and class.
fn queue_table(points: &[Point]) -> String {
    let mut t = format!(
        "| N | class | {} |\n|---|---|{}\n",
        QUEUE_STAGES.join(" ms | ") + " ms",
        "---|".repeat(QUEUE_STAGES.len())
    );
    for p in points {
        for c in CLASSES {
            if f(&p.live["classes"][c]["throughput_per_s"]) <= 0.0 {
                continue;
            }
            let cells: Vec<String> = QUEUE_STAGES
                .iter()
                .map(|stage| {
                    let measured = measured_stage(&p.params, c, stage);
                    let predicted = p.live["classes"][c]["queue_s"][*stage].as_f64();
                    match (measured, predicted) {
                        (None, None) => "–".into(),
                        (m, p) => format!(
                            "{} / {}",
                            m.map_or("–".into(), ms),
                            p.map_or("–".into(), ms)
                        ),
                    }
                })
                .collect();
            let _ = writeln!(t, "| {} | {c} | {} |", p.users, cells.join(" | "));
        }
    }
    t
}

/// The document: settings, one table per mix, every miss with its reason (the
/// templates' prose, the tables filled in); and how many counted points missed.
fn report(
    mixes: &[(&Mix, Vec<Point>)],
    plan: &Plan,
    platform: &Platform,
    commit: &str,
) -> Result<(String, usize)> {
    let mut misses = 0;
    let mut sections = Vec::new();
    for (i, (mix, points)) in mixes.iter().enumerate() {
        let mut rows = String::new();
        let mut reasons = String::new();
        for p in points {
            let (counted, ok) = p.verdict();
            let verdict = match (counted, ok) {
                (true, true) => "within",
                (true, false) => {
                    misses += 1;
                    "**MISS**"
                }
                (false, true) => "within (saturated, not counted)",
                (false, false) => "miss (saturated, not counted)",
            };
            let classes = |of: &Value, key: &dyn Fn(&Value) -> f64| -> String {
                CLASSES.map(|c| ms(key(&of["classes"][c]))).join(" / ")
            };
            let measured_r = f(&p.load["response_s"]["mean"]);
            let other = |v: Option<&Value>| -> (String, String) {
                match v.map(|v| f(&v["response_s"])) {
                    Some(r) => (ms(r), pct(rel(r, measured_r))),
                    None => ("–".into(), "–".into()),
                }
            };
            let (alone, alone_err) = other(Some(&p.params_only));
            let (mva, mva_err) = other(Some(&p.approx));
            let (ps, ps_err) = other(Some(&p.shared));
            let (one, one_err) = other(p.one_user.as_ref());
            let utilisation = f(&p.live["utilisation"]);
            let x_model = f(&p.live["throughput_per_s"]);
            let r_model = format!(
                "{} ± {}",
                ms(f(&p.live["response_s"])),
                ms(f(&p.live["ci95"]["response_s"]))
            );
            let _ = writeln!(
                rows,
                "| {} | {:.1} % | {:.1} % | {:.0} | {:.0} / {:.0} | {:.1} | {x_model:.1} | {} | {} | {r_model} | {} | {alone} | {alone_err} | {mva} | {mva_err} | {ps} | {ps_err} | {one} | {one_err} | {} | {} | {} | {} | {verdict} |",
                p.users,
                p.cpu_busy * 100.0,
                utilisation * 100.0,
                p.cpu_per_request_s * 1e6,
                p.overhead_s * 1e6,
                p.overhead_proc_s * 1e6,
                f(&p.load["throughput_per_s"]),
                pct(p.throughput_error()),
                ms(measured_r),
                pct(p.response_error()),
                classes(&p.load, &|c| f(&c["response_s"]["mean"])),
                classes(&p.live, &|c| f(&c["response_s"])),
                p.load["requests"],
                p.load["errors"],
            );
            if !ok {
                let _ = writeln!(
                    reasons,
                    "- N = {}: R {} and X {} off (from the stages alone: R {}). nginx was busy \
                     {:.1} % of the time, the model's {:.1} %.{}",
                    p.users,
                    pct(p.response_error()),
                    pct(p.throughput_error()),
                    alone_err,
                    p.cpu_busy * 100.0,
                    utilisation * 100.0,
                    if counted {
                        ""
                    } else {
                        " At saturation R → N·D_max − Z: an error in the bottleneck's demand \
                         is multiplied by N. Not counted."
                    }
                );
            }
        }
        sections.push(template::fill(
            MIX_TEMPLATE,
            &[
                ("N", (i + 1).to_string()),
                ("NAME", mix.name.to_string()),
                ("SECURE", mix.secure.to_string()),
                ("RESUME", mix.resume.to_string()),
                ("ROWS", rows.trim_end().to_string()),
                (
                    "MISSES",
                    match reasons.is_empty() {
                        true => String::new(),
                        false => format!("\n\nMisses:\n\n{}", reasons.trim_end()),
                    },
                ),
                ("QUEUE_TABLE", queue_table(points).trim_end().to_string()),
                ("PLOT_FROM_USERS", PLOT_FROM_USERS.to_string()),
            ],
        )?);
    }
    let doc = template::fill(
        TEMPLATE,
        &[
            ("COMMIT", commit.to_string()),
            ("KERNEL", kernel()),
            ("CPUS", cpus().to_string()),
            ("THINK_S", THINK_S.to_string()),
            ("WARMUP_S", WARMUP_S.to_string()),
            ("DURATION_S", plan.duration_s.to_string()),
            ("MIN_REQUESTS", MIN_REQUESTS.to_string()),
            ("SIMULATED", SIMULATED.to_string()),
            ("WAKEUP", platform.wakeup_words()),
            ("TOLERANCE_PCT", format!("{:.0}", TOLERANCE * 100.0)),
            ("UTIL_LIMIT_PCT", format!("{:.0}", UTIL_LIMIT * 100.0)),
            ("MIXES", sections.join("\n").trim_end().to_string()),
        ],
    )?;
    Ok((doc, misses))
}

/// The user count whose parameters draw the curve of the picture: one user, the forecast
/// (the *from N=1* column's model).
const PLOT_FROM_USERS: u32 = 1;

/// One mix's picture: the forecast, the simulated event loop's R against N per class from
/// the parameters measured at `PLOT_FROM_USERS` users and hstrace's measurements alone (no
/// wake-up curve from this harness), every measured point (overall and per class) on it.
fn plot(
    bin: &Path,
    dir: &Path,
    index: usize,
    plan: &Plan,
    points: &[Point],
    svg: &Path,
) -> Result<()> {
    let mut measured = String::from("users,response_s,class\n");
    for p in points {
        let _ = writeln!(
            measured,
            "{},{},all",
            p.users,
            f(&p.load["response_s"]["mean"])
        );
        for c in CLASSES {
            if let Some(r) = p.load["classes"][c]["response_s"]["mean"].as_f64() {
                let _ = writeln!(measured, "{},{r},{c}", p.users);
            }
        }
    }
    let csv = dir.join(format!("mix{}-measured.csv", index + 1));
    fs::write(&csv, measured)?;
    let from = points
        .iter()
        .find(|p| p.users == PLOT_FROM_USERS)
        .or_else(|| points.first())
        .context("no points to draw")?;
    let params = dir.join(format!("mix{}-users{}.json", index + 1, from.users));
    let text = fs::read_to_string(&params)?;
    let server = servers_from(&serde_json::from_str(&text)?);
    let top = plan.users.last().copied().unwrap_or(1);
    let think = from.load["think_time_measured_s"]
        .as_f64()
        .unwrap_or(THINK_S);
    let out = Command::new(bin)
        .args(["model", "--params"])
        .arg(&params)
        .args(["--server", &server, "--users", &format!("1..{top}")])
        .args([
            "--think-time",
            &think.to_string(),
            "--discipline",
            SIMULATED,
        ])
        .arg("--plot")
        .arg(svg)
        .arg("--measured")
        .arg(&csv)
        .output()?;
    if !out.status.success() {
        bail!(
            "drawing {}: {}",
            svg.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `cargo xtask validate-model [--quick]`: hstrace and hsload built, then the whole
/// validation (`quick`: a short run, printed, nothing written).
pub fn validate_model(quick: bool) -> Result<()> {
    require_root("validate-model")?;
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build()?;
    run(Command::new("cargo")
        .args([
            "build",
            "--release",
            "-p",
            "hstrace-tools",
            "--features",
            "load",
            "--bin",
            "hsload",
        ])
        .current_dir(root()))?;
    let hsload = root().join("target/release/hsload");
    let plan = if quick { Plan::quick() } else { Plan::full() };
    validate(&bin, &hsload, &root(), &plan, !quick)
}

/// The whole validation; writes docs/model-validation.md (or, with a quick plan, only
/// prints). Fails when a counted point misses.
fn validate(bin: &Path, hsload: &Path, root: &Path, plan: &Plan, write_doc: bool) -> Result<()> {
    let dir = root.join("target/validate-model");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let nginx = Nginx::start_with_key("validate-model", 1, 4096);
    let worker = *nginx
        .worker_pids()
        .iter()
        .next()
        .context("nginx has no worker")?;
    pin(nginx.master_pid(), 0)?;
    pin(worker, 0)?;
    let platform = Platform::measure()?;
    eprintln!(
        "xtask: an idle CPU 0 wakes a thread in epoll_wait in {}",
        platform.wakeup_words()
    );
    let rig = Rig {
        bin,
        hsload,
        nginx: &nginx,
        worker,
        dir: &dir,
        platform,
    };
    let mut mixes = Vec::new();
    for (i, mix) in MIXES.iter().enumerate() {
        mixes.push((mix, run_mix(&rig, mix, i, plan)?));
    }
    let (doc, misses) = report(&mixes, plan, &rig.platform, &commit()?)?;
    if write_doc {
        for (i, (_, points)) in mixes.iter().enumerate() {
            let svg = root.join(format!("docs/model-validation-mix{}.svg", i + 1));
            plot(bin, &dir, i, plan, points, &svg)?;
        }
        fs::write(root.join("docs/model-validation.md"), &doc)?;
        eprintln!("xtask: wrote docs/model-validation.md");
    } else {
        println!("{doc}");
    }
    if misses > 0 {
        bail!("{misses} point(s) below {:.0} % utilisation missed by more than {:.0} %: see the table", UTIL_LIMIT * 100.0, TOLERANCE * 100.0);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_model_validation_templates_are_filled() {
        let doc = crate::template::tests::fill_all(TEMPLATE);
        assert!(doc.starts_with("# Model validation\n\nCommit <COMMIT>, kernel <KERNEL>"));
        assert!(
            doc.contains("\n\n<MIXES>\n\n## Why a point can miss\n\n"),
            "{doc}"
        );
        let mix = crate::template::tests::fill_all(MIX_TEMPLATE);
        assert!(
            mix.starts_with("## Mix <N>: <NAME> (p = <SECURE>, resume offered <RESUME>)\n\n| N |")
        );
        assert!(mix.contains("|\n<ROWS><MISSES>\n\nQueue stages"), "{mix}");
        assert!(mix.ends_with("measurements at every N.*\n"), "{mix}");
    }

    #[test]
    fn measured_stages_are_weighted_by_each_ports_connections() {
        let stage = |ms: f64| json!({"class": "queue", "mean_s": ms * 1e-3});
        let params = json!({"servers": [
            {"server": "nginx:443", "connections": 300,
             "classes": {"tls_full": {"share": 1.0, "stages": {"accept_queue": stage(2.0)}},
                         "plain": {"share": 0.0, "stages": {}}}},
            {"server": "nginx:80", "connections": 100,
             "classes": {"tls_full": {"share": 0.5, "stages": {"accept_queue": stage(6.0)}},
                         "plain": {"share": 0.5, "stages": {"request_queue": stage(1.0)}}}},
        ]});
        // (300 · 2 + 50 · 6) / 350 ms
        let full = measured_stage(&params, "tls_full", "accept_queue").unwrap();
        assert!((full - 900.0 / 350.0 * 1e-3).abs() < 1e-15, "{full}");
        assert_eq!(
            measured_stage(&params, "plain", "request_queue"),
            Some(1e-3)
        );
        assert_eq!(measured_stage(&params, "plain", "accept_queue"), None);
        assert_eq!(measured_stage(&params, "tls_resumed", "accept_queue"), None);
    }
}
