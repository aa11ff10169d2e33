//! `cargo xtask validate-model`: does seed 002's model, fed with what `hstrace serve`
//! measured, predict a loaded server, and forecast it from one window at low load? Real
//! servers from Debian's packages, each an architecture the model must see right (`ARCHES`:
//! nginx with one worker pinned to CPU 0, nginx with two workers on both CPUs, Apache httpd
//! prefork on both CPUs; an RSA-4096 key so that a full handshake costs milliseconds), are
//! driven by hsload, the closed-loop generator (N users, exponential think time), for each
//! mix and user count. Each point's parameters are the daemon's over that point's run;
//! `hstrace model` with the architecture's discipline predicts throughput and mean response
//! time from them (the same-point fit: a check of the model's structure), and from the
//! parameters measured with one user (the forecast, made before the load); hsload's own
//! clock (connect to the last byte of the response) is the truth. Then the what-if: from
//! one window with an RSA-2048 certificate, `--key-change` forecasts the curve with RSA-4096
//! and ECDSA P-256, and the real server with each key is run. Every point goes to
//! docs/model-validation.md, misses included; the command fails when a prediction at a
//! point whose CPUs were busy below `UTIL_LIMIT` is off by more than `TOLERANCE` (but
//! for the busier window's told the point's host speed, a check, not a prediction).
//!
//! `reduced` is the fast version CI runs (`a_reduced_validation_forecasts_within_a_quarter`):
//! nginx with one worker, one mix, three user counts, short windows.

use std::{
    collections::BTreeMap,
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
    fixtures::make_ecdsa_cert,
    procs::{pin, pin_thread, process_cpu_secs, process_run_secs, schedule_thread, PinnedLoop},
    servers::{Apache, Nginx, TestServer},
};
use serde_json::Value;

mod group;

use crate::{
    setup::{setup_test_machine, TEST_PACKAGES},
    template,
    util::{build, commit, cpus, kernel, require_root, root, run},
};

/// The document's prose, with the settings and the architectures filled in.
const TEMPLATE: &str = include_str!("../templates/model-validation.md");
/// One architecture's mix: its table, misses, queue stages and picture.
const MIX_TEMPLATE: &str = include_str!("../templates/model-validation-mix.md");
/// The what-if: another key, forecast and measured.
const WHATIF_TEMPLATE: &str = include_str!("../templates/model-validation-whatif.md");

/// Mean think time asked of hsload, seconds (the model is given the one it really had).
const THINK_S: f64 = 0.2;
/// Within this of the measurement, relative...
const TOLERANCE: f64 = 0.15;
/// ...at every point whose server was busy less than this.
const UTIL_LIMIT: f64 = 0.9;
const WARMUP_S: u64 = 3;
const CLASSES: [&str; 3] = ["tls_full", "tls_resumed", "plain"];
/// The discipline of nginx's worker loop, simulated.
const SIMULATED: &str = "event-loop-sim";
/// hstrace's queue stages of a TLS 1.2 handshake and a request, in wire order.
const QUEUE_STAGES: [&str; 4] = [
    "accept_queue",
    "client_hello_queue",
    "client_flight_2_queue",
    "request_queue",
];
/// The user count whose parameters make the forecast (the *from N=1* column, the what-if).
const FORECAST_FROM_USERS: u32 = 1;
/// The second forecast's window, a production window's load: users enough to keep the
/// server about this busy, reckoned from the one-user window's utilisation...
const BUSIER_UTIL: f64 = 0.15;
/// ...which the issue's criterion allows up to this.
const BUSIER_UTIL_MAX: f64 = 0.2;
/// A busier window measured again has at most this many times the first one's users.
const BUSIER_AGAIN_MAX: u32 = 4;

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

/// A server architecture the model is validated on: how the server runs, and how
/// `hstrace model` is told to see it.
struct Arch {
    /// in file names and `--only`
    key: &'static str,
    /// a heading
    title: &'static str,
    /// how it runs, for the document
    how: &'static str,
    /// the discipline the model is checked with
    discipline: &'static str,
    /// `--servers`: event loops (workers) or processors
    servers: u32,
    /// the user counts of the full plan
    users: &'static [u32],
    /// the CPU hsload and the daemon are pinned to (None: where the scheduler puts them)
    client_cpu: Option<usize>,
}

const NGINX_ONE: Arch = Arch {
    key: "nginx-1",
    title: "nginx, one worker",
    how: "nginx with one worker process (one event loop), master and worker pinned to CPU 0; \
          hsload pinned to CPU 1 at a real-time priority and the daemon beside it, that CPU \
          kept from halting in its idle time",
    discipline: SIMULATED,
    servers: 1,
    users: &[1, 4, 16, 32, 48, 64, 80, 96],
    client_cpu: Some(1),
};

/// Apache's children: one per user at most, and a few spare.
const APACHE_CHILDREN: u32 = 100;

const ARCHES: [Arch; 3] = [
    NGINX_ONE,
    Arch {
        key: "nginx-2",
        title: "nginx, two workers",
        how: "nginx with two worker processes (two event loops sharing the listening sockets), \
              pinned to CPU 0 and CPU 1; hsload and the daemon unpinned, sharing both CPUs with \
              them",
        discipline: SIMULATED,
        servers: 2,
        users: &[1, 4, 32, 64, 96, 128, 160],
        client_cpu: None,
    },
    Arch {
        key: "apache-prefork",
        title: "Apache httpd, prefork",
        how: "Apache httpd with the prefork MPM: 100 single-threaded child processes, each \
              serving one connection at a time, all pinned to CPU 0 and sharing it (one \
              processor: the machine's other CPU is the client's); hsload pinned to CPU 1 at \
              a real-time priority and the daemon beside it, that CPU kept from halting in \
              its idle time. The model is the \
              discipline `hstrace model` picks for one process per connection: each CPU runs \
              a flight to completion, simulated; processor sharing is the PS column",
        discipline: SIMULATED,
        servers: 1,
        users: &[1, 4, 16, 32, 48, 64, 80],
        client_cpu: Some(1),
    },
];

/// The certificate's key, by `openssl speed`'s name (what `--key-change` takes).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Key {
    Rsa(u32),
    EcdsaP256,
}

impl Key {
    fn name(self) -> String {
        match self {
            Key::Rsa(bits) => format!("rsa{bits}"),
            Key::EcdsaP256 => "ecdsap256".into(),
        }
    }
}

/// What the architectures run with.
const KEY: Key = Key::Rsa(4096);
/// The what-if: from one window with this key...
const WHATIF_FROM: Key = Key::Rsa(2048);
/// ...the curve with each of these, checked at these user counts (the mix is mix 1's).
const WHATIF_TO: [(Key, &[u32]); 2] = [
    (Key::Rsa(4096), &[4, 16, 48, 80]),
    (Key::EcdsaP256, &[4, 32, 96, 192]),
];

/// How long and at which user counts.
struct Plan {
    /// the user counts of an architecture
    users: fn(&Arch) -> Vec<u32>,
    duration_s: u64,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            users: |a| a.users.to_vec(),
            duration_s: 20,
        }
    }

    /// The full plan's windows (a document is written only from them).
    fn is_full(&self) -> bool {
        self.duration_s >= Plan::full().duration_s
    }

    /// A short run, to check the machinery (its figures are noisier).
    fn quick() -> Plan {
        Plan {
            users: |a| vec![a.users[0], a.users[2], a.users[5]],
            duration_s: 6,
        }
    }

    /// How long the point with `users` users is measured: the plan's duration, longer for
    /// few users (up to 4×), to take about `MIN_REQUESTS` requests.
    fn duration_s(&self, users: u32) -> u64 {
        let wanted = (MIN_REQUESTS * THINK_S / f64::from(users.max(1))).ceil() as u64;
        wanted.clamp(self.duration_s, 4 * self.duration_s)
    }
}

/// Requests a point's mean is taken over at least, where the plan's duration gives fewer
/// (few users, long think times): a mean of a hundred is moved by a handful of the
/// platform's long wake-ups.
const MIN_REQUESTS: f64 = 400.0;

/// One user count of one mix: measured and predicted.
struct Point {
    users: u32,
    /// this point's window is the busier one the forecasts are made from (`Windows`)
    busier_window: bool,
    /// hsload's output (`hsload/v1`)
    load: Value,
    /// the server's CPU busy share over the measuring window (per CPU it may use)
    cpu_busy: f64,
    /// the client's CPU over the same window (hsload and the daemon), in CPUs: on the
    /// server's CPUs when the client is not pinned apart
    client_cpu: f64,
    /// the daemon's parameters of this point (`hstrace.parameters/v1`)
    params: Value,
    /// the server's CPU per request outside the measured service stages, as the daemon
    /// measured it (the parameters' cpu.outside_stages_s, which the model took)
    overhead_s: f64,
    /// the same from this harness's own reading of the server's CPU (/proc) over the
    /// measured window, less the stages' demand: a check of the daemon's figure
    overhead_proc_s: f64,
    /// the server's whole CPU per request as the daemon measured it (cpu.per_connection_s):
    /// the stages' part of it falls with load too, as the worker runs warmer
    cpu_per_request_s: f64,
    /// the architecture's discipline from this point's own parameters (with an event loop:
    /// the CPU outside the stages and the harness's wake-up): what the criterion is
    /// checked on
    live: Value,
    /// the other work hstrace measured on the server's CPUs (`host.other_cpus`: the
    /// client's, where it is not pinned apart, the kernel's, the daemon's), in CPUs; the
    /// same-point fit and the forecast at the point's speed take it
    other_cpus: Option<f64>,
    /// the same-point fit told no other work (`--other-cpus 0`): what that work did to R
    live_without_other: Value,
    /// the architecture's discipline from the stages alone
    params_only: Value,
    /// the event-loop MVA approximation (event loops only, where it answers)
    approx: Option<Value>,
    /// seed 002's processor sharing
    shared: Option<Value>,
    /// the forecast: the architecture's discipline from the parameters measured with
    /// `FORECAST_FROM_USERS` users, at this point's mix
    forecast: Value,
    /// the same from the busier window's parameters (`busier_users`)
    busier: Value,
    /// that forecast told the point's client delays (`--scale-stage`, each delay stage from
    /// the busier window's mean to the point's): how much of its miss is the rig's client
    busier_told_delays: Value,
    /// how much faster the host ran this point's signatures than the forecast window's
    /// (`signature_cpu_s` there over here; None without full handshakes in both)
    host_speed: Option<f64>,
    /// the forecast with `--cpu-speedup host_speed` and the point's `--other-cpus`: what
    /// it would have said had it known the host's speed and the other work on the
    /// server's CPUs at this point (a check of the model, not a forecast)
    forecast_at_speed: Option<Value>,
    /// the same told the point's client delays too (each delay stage scaled to the
    /// point's mean, `--scale-stage`): what is left is the model's own error
    forecast_told_delays: Option<Value>,
    /// the forecast told the point's client delays alone: how much of its miss is the
    /// rig's client, whose delays a remote client's would not share
    forecast_told_delays_alone: Value,
    /// how much faster the host ran this point's signatures than the busier window's
    /// (`host_speed`; both windows warm, so nearly all of it the host's own doing)
    busier_speed: Option<f64>,
    /// the busier window's forecast told that speed and the point's other work on the
    /// server's CPUs (`at_speed_args`): what is left is the model's error, not the host's
    busier_at_speed: Option<Value>,
}

/// A model's errors on R and X against hsload's measurement (`load`).
fn errors(model: &Value, load: &Value) -> (f64, f64) {
    (
        rel(f(&model["response_s"]), f(&load["response_s"]["mean"])),
        rel(f(&model["throughput_per_s"]), f(&load["throughput_per_s"])),
    )
}

impl Point {
    /// A model's errors on R and X against hsload's measurement.
    fn errors(&self, model: &Value) -> (f64, f64) {
        errors(model, &self.load)
    }

    fn response_error(&self) -> f64 {
        self.errors(&self.live).0
    }

    fn throughput_error(&self) -> f64 {
        self.errors(&self.live).1
    }

    /// The forecast's errors on R and X.
    fn forecast_errors(&self) -> (f64, f64) {
        self.errors(&self.forecast)
    }

    /// The busier window's forecast's errors on R and X.
    fn busier_errors(&self) -> (f64, f64) {
        self.errors(&self.busier)
    }

    /// The same told the point's host speed and other work, where the speed is known.
    fn busier_at_speed_errors(&self) -> Option<(f64, f64)> {
        self.busier_at_speed.as_ref().map(|m| self.errors(m))
    }

    /// How busy the server's CPUs were, by anything: the server's processes (`cpu_busy`)
    /// and the other work hstrace measured on those CPUs (`host.other_cpus` over
    /// `host.server_cpus`: with two nginx workers, hsload's users share their CPUs). The
    /// knee comes where the CPUs are full, whoever fills them; the model's utilisation
    /// counts both.
    fn cpus_busy(&self) -> f64 {
        cpus_busy(self.cpu_busy, self.other_cpus, &self.params)
    }

    /// Counted against the tolerance (the server's CPUs were busy less than UTIL_LIMIT),
    /// and within it?
    fn verdict(&self) -> (bool, bool) {
        let counted = self.cpus_busy() < UTIL_LIMIT;
        let ok =
            self.response_error().abs() <= TOLERANCE && self.throughput_error().abs() <= TOLERANCE;
        (counted, ok)
    }

    /// Whether the point counts, and each prediction within the tolerance there.
    fn verdicts(&self) -> Verdicts {
        let (counted, fit) = self.verdict();
        let ok = |(r, x): (f64, f64)| within(&[r, x]);
        Verdicts {
            counted,
            fit,
            forecast: ok(self.forecast_errors()),
            busier: ok(self.busier_errors()),
            busier_at_speed: self.busier_at_speed_errors().map(ok),
        }
    }
}

/// One point's verdicts (`Point::verdicts`): counted, and each prediction within.
struct Verdicts {
    counted: bool,
    fit: bool,
    forecast: bool,
    busier: bool,
    /// None where the host's speed could not be read at the point
    busier_at_speed: Option<bool>,
}

/// The share of the server's CPUs (`params`' `host.server_cpus`) busy with the server
/// (`server_busy`, per CPU) or the other work on them (`other_cpus`, in CPUs): the
/// server's alone where either is unknown.
fn cpus_busy(server_busy: f64, other_cpus: Option<f64>, params: &Value) -> f64 {
    let cpus = f(&params["host"]["server_cpus"]);
    match other_cpus {
        Some(other) if cpus > 0.0 => server_busy + other / cpus,
        _ => server_busy,
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

/// A server of an architecture, started with `key`, and the processes whose CPU is its.
struct Server {
    server: TestServer,
    /// the processes that serve connections (nginx's workers, Apache's children)
    workers: Vec<u32>,
    /// the client's own CPU, where it has one, kept awake (`awake_cpu`)
    _client_cpu_awake: Option<PinnedLoop>,
}

/// A CPU kept from halting in its idle time: a busy loop at the lowest priority there is
/// (SCHED_IDLE: any other task that wakes on that CPU runs first). On these virtual
/// machines a CPU that halts gives its core back to the host, and a task woken on it waits
/// for the host to run it again; with one user, the client's CPU would halt through every
/// think time and answer each handshake late, where under load it never halts. A remote
/// client's delays do not follow the server's load, so the rig's client CPU never halts.
/// The loop touches no memory but its flag: the server's caches are left as they were.
/// Stopped on drop.
fn awake_cpu(cpu: usize) -> Result<PinnedLoop> {
    // no spin-loop hint: a hypervisor may take a run of pauses for a lock's wait and
    // deschedule the CPU, which is what the loop is there to prevent
    PinnedLoop::start(cpu, libc::SCHED_IDLE, 0, || {})
        .with_context(|| format!("cannot run a busy loop at SCHED_IDLE on CPU {cpu}"))
}

impl Server {
    /// `arch` started, pinned as it says, with a certificate of `key` (`dir`: where an
    /// ECDSA certificate is made).
    fn start(arch: &Arch, key: Key, dir: &Path) -> Result<Server> {
        let name = format!("validate-{}-{}", arch.key, key.name());
        let server = match (arch.key, key) {
            ("apache-prefork", Key::Rsa(bits)) => {
                Apache::start_prefork_with_key(&name, APACHE_CHILDREN, bits)
            }
            ("apache-prefork", _) => bail!("the Apache rig has RSA keys only"),
            (_, Key::Rsa(bits)) => Nginx::start_with_key(&name, arch.servers, bits),
            (_, Key::EcdsaP256) => {
                let (cert, key) = make_ecdsa_cert(dir, &format!("{}-ecdsa-", arch.key));
                let certificate = format!(
                    "ssl_certificate {};\n        ssl_certificate_key {};",
                    cert.display(),
                    key.display()
                );
                Nginx::start_with(&name, arch.servers, 2048, &certificate)
            }
        };
        let workers: Vec<u32> = server.worker_pids().into_iter().collect();
        // nginx's workers each on a CPU of their own, its master with the first; Apache's
        // children all on CPU 0. (Not a CPU kept to the server alone: the daemon measures
        // the cold start on the server's CPU.)
        pin(server.master_pid(), 0)?;
        for (i, &w) in workers.iter().enumerate() {
            pin(w, i % arch.servers as usize)?;
        }
        let _client_cpu_awake = arch.client_cpu.map(awake_cpu).transpose()?;
        Ok(Server {
            server,
            workers,
            _client_cpu_awake,
        })
    }

    /// The CPU seconds its workers have run.
    fn cpu_secs(&self) -> Result<f64> {
        let mut sum = 0.0;
        for &w in &self.workers {
            sum += process_run_secs(w)?;
        }
        Ok(sum)
    }
}

/// One point's load: hsload with `users` users of `mix` against `server`, measured for
/// `duration_s`.
struct Run<'a> {
    hsload: &'a Path,
    arch: &'a Arch,
    server: &'a Server,
    mix: &'a Mix,
    users: u32,
    duration_s: u64,
}

/// hsload running `run` (pinned to `arch.client_cpu`); returns its output, the server's
/// CPU busy share over the measuring window, per server of the architecture, and the
/// client's CPUs (hsload's and the `daemon`'s).
fn drive(run: &Run, daemon: u32) -> Result<(Value, f64, f64)> {
    let Run {
        hsload,
        arch,
        server,
        mix,
        users,
        duration_s,
    } = *run;
    let s = &server.server;
    let mut cmd = Command::new(hsload);
    cmd.args(["--tls-port", &s.port.to_string()])
        .args(["--plain-port", &s.plain_port.to_string()])
        .args(["--users", &users.to_string()])
        .args(["--think-time", &THINK_S.to_string()])
        .args(["--secure-fraction", &mix.secure.to_string()])
        .args(["--resume-fraction", &mix.resume.to_string()])
        .args(["--warmup", &WARMUP_S.to_string()])
        .args(["--duration", &duration_s.to_string()])
        .args(["--seed", &(u64::from(users) * 7919).to_string()]);
    let load = Load {
        client_cpu: arch.client_cpu,
        server_cpu_secs: &|| server.cpu_secs(),
        servers: arch.servers,
    };
    drive_load(cmd, &load, daemon)
}

/// Where a closed-loop generator runs and what it loads.
struct Load<'a> {
    /// the CPU the generator is pinned to (None: where the scheduler puts it)
    client_cpu: Option<usize>,
    /// the CPU seconds the server's processes have run
    server_cpu_secs: &'a dyn Fn() -> Result<f64>,
    /// the servers (workers, event loops) its CPU busy share is per
    servers: u32,
}

/// A closed-loop generator (`cmd`: hsload, or `pqtls load`) run to its end, pinned as
/// `load` says: its output (`hsload/v1`), the server's CPU busy share over the measuring
/// window (between the generator's `NAME: measuring` and `NAME: measured` on stderr), per
/// server, and the client's CPUs (the generator's and the `daemon`'s).
fn drive_load(mut cmd: Command, load: &Load, daemon: u32) -> Result<(Value, f64, f64)> {
    let name = Path::new(cmd.get_program())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(cpu) = load.client_cpu {
        // at a real-time priority, so that other work on its CPU (a shared machine's) does
        // not delay the clients: a remote client's delays do not follow this machine's load
        // SAFETY: only sched_setaffinity and sched_setscheduler (async-signal-safe) between
        // fork and exec
        unsafe {
            cmd.pre_exec(move || {
                let _ = pin_thread(0, cpu);
                schedule_thread(libc::SCHED_FIFO, 1)?;
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().with_context(|| format!("running {name}"))?;
    let client = [child.id(), daemon];
    // (when, the server's CPU seconds, the client's: the generator's and the daemon's,
    // from /proc/PID/stat, which keeps the time of threads that have exited; the tasks'
    // own schedstat loses it)
    let read = || -> Result<(Instant, f64, f64)> {
        let mut c = 0.0;
        for pid in client {
            c += process_cpu_secs(pid)?;
        }
        Ok((Instant::now(), (load.server_cpu_secs)()?, c))
    };
    let stderr = BufReader::new(child.stderr.take().expect("piped"));
    let (mut from, mut to) = (None, None);
    let mut said = String::new();
    for line in stderr.lines() {
        let line = line?;
        match line.strip_prefix(&name).and_then(|l| l.strip_prefix(": ")) {
            Some("measuring") => from = Some(read()?),
            Some("measured") => to = Some(read()?),
            _ => said.push_str(&line),
        }
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("{name} failed ({}): {said}", out.status);
    }
    let output: Value =
        serde_json::from_slice(&out.stdout).with_context(|| format!("{name}'s JSON"))?;
    let (busy, client_cpu) = match (from, to) {
        (Some((t0, s0, c0)), Some((t1, s1, c1))) => {
            let secs = (t1 - t0).as_secs_f64();
            ((s1 - s0) / secs / f64::from(load.servers), (c1 - c0) / secs)
        }
        _ => (f64::NAN, f64::NAN),
    };
    Ok((output, busy, client_cpu))
}

/// One point measured: the daemon following the server over `run`; the daemon's
/// parameters are written to `file` and hsload's output beside it.
fn measure(run: &Run, file: &Path) -> Result<(Value, f64, f64)> {
    let master = run.server.server.master_pid();
    let traced = (master, run.arch.client_cpu, run.duration_s);
    measure_window(traced, file, |daemon| drive(run, daemon))
}

/// A window measured: `hstrace serve` (pinned to `cpu`) following the process `pid` while
/// `drive` runs a load of `duration_s` after its warm-up (given the daemon's pid); the
/// daemon's parameters written to `file` and the generator's output beside it
/// (`FILE.hsload.json`).
fn measure_window(
    (pid, cpu, duration_s): (u32, Option<usize>, u64),
    file: &Path,
    drive: impl FnOnce(u32) -> Result<(Value, f64, f64)>,
) -> Result<(Value, f64, f64)> {
    let seconds = (duration_s + 1).to_string();
    let pid = pid.to_string();
    // (pinned from its start: moving its threads once it runs would move the cold
    // start's measurement off the server's CPU, which it pins itself to)
    let daemon = Daemon::start_on(
        &["--pid", &pid, "--window", &seconds, "--measure-cold-start"],
        cpu,
    );
    let measured = drive(daemon.pid())?;
    let params_text = daemon.get("/api/v1/parameters");
    drop(daemon);
    fs::write(file, &params_text)?;
    fs::write(file.with_extension("hsload.json"), measured.0.to_string())?;
    Ok(measured)
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

/// The cold start a parameters document holds (`host.cold_start`, the daemon's
/// measurement) in words: each work, then its mean CPU back to back and after each pause.
/// (`ColdStart::words` says it for stderr; xtask reads the JSON itself, as it may not
/// depend on the hstrace crate, whose build needs the clang `setup` installs.)
fn cold_start_words(measured: &Value) -> String {
    let runs = |work: &Value| {
        (work["runs"].as_array().into_iter().flatten())
            .map(|r| {
                let after = match f(&r["pause_s"]) {
                    0.0 => "back to back".to_string(),
                    s => format!("after {} ms asleep", ms(s)),
                };
                // the mean, what the forecast takes (the median in older documents)
                let (cost, of) = match r["cpu_mean_s"].as_f64() {
                    Some(mean) => (mean, "mean of"),
                    None => (f(&r["cpu_s"]), "median of"),
                };
                format!("{:.1} µs {after} ({of} {} runs)", cost * 1e6, r["runs"])
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let work = |w: &Value| w["work"].as_str().unwrap_or("?").to_string();
    let record = format!(
        "{} on CPU {}: {}",
        work(measured),
        measured["cpu"],
        runs(measured)
    );
    match &measured["handshake"] {
        Value::Null => record,
        h => format!("{record}; {}: {}", work(h), runs(h)),
    }
}

/// A forecast window's parameters (`file`) must hold the cold start the daemon measured in
/// its first seconds: a forecast without it would be another model's.
fn has_cold_start(doc: &Value, file: &Path) -> Result<()> {
    if doc["host"]["cold_start"].is_null() {
        bail!(
            "{}: the window's parameters hold no cold start (the daemon measures it in its first seconds: a window too short?)",
            file.display()
        );
    }
    Ok(())
}

/// The cold start each forecast took, from its window's parameters (the daemon measured it
/// on the CPU most of the server's processes may run on as the window began), one line per
/// architecture and mix.
fn cold_starts(archs: &[(&Arch, Vec<Vec<Point>>)]) -> String {
    let mut lines = Vec::new();
    for (arch, mixes) in archs.iter().filter(|(a, _)| a.discipline == SIMULATED) {
        for (i, points) in mixes.iter().enumerate() {
            if let Some(p) = points.iter().find(|p| p.users == FORECAST_FROM_USERS) {
                lines.push(format!(
                    "  - {}, mix {}: {}",
                    arch.title,
                    i + 1,
                    cold_start_words(&p.params["host"]["cold_start"])
                ));
            }
        }
    }
    lines.join("\n")
}

/// The one point of a one-user-count answer.
fn point(answer: &Value) -> Value {
    answer["curves"][0]["points"][0].clone()
}

/// `point`, with the wake-up curve the model took (its knobs' `wakeup_after_idle`) as
/// `wakeup`.
fn point_and_wakeup(answer: &Value) -> Value {
    let mut p = point(answer);
    p["wakeup"] = answer["knobs"]["wakeup_after_idle"].clone();
    p
}

/// A wake-up curve as the model reports it (`[{idle_s, wakeup_s}]`), in words.
fn wakeup_words(curve: &Value) -> String {
    let points: Vec<String> = curve
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let idle = f(&p["idle_s"]);
            let after = match idle > 0.0 {
                true => format!(" after {} ms asleep", ms(idle)),
                false => " after any sleep".into(),
            };
            format!("{:.0} µs{after}", f(&p["wakeup_s"]) * 1e6)
        })
        .collect();
    match points.is_empty() {
        true => "none".into(),
        false => points.join(", "),
    }
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

/// What every point of an architecture runs against.
struct Rig<'a> {
    bin: &'a Path,
    hsload: &'a Path,
    arch: &'a Arch,
    server: &'a Server,
    /// where each point's parameters and hsload output go
    dir: &'a Path,
    /// the harness's wake-up curve, given to the same-point fit of an event loop (None:
    /// the reduced run, which checks the forecast only)
    platform: Option<&'a Platform>,
    /// the server's workers run at a real-time priority (the reduced validation): the
    /// other work hstrace measures on their CPUs does not take it from them, and the
    /// forecasts are told so (`--other-cpus 0`)
    real_time: bool,
}

/// `hstrace model`'s arguments for `params` at `users` users thinking `think` seconds, with
/// `discipline` on `servers` servers.
fn model_args(
    params: &Path,
    server: &str,
    users: u32,
    think: f64,
    discipline: &str,
    servers: u32,
) -> Vec<String> {
    [
        "--params",
        &params.display().to_string(),
        "--server",
        server,
        "--users",
        &users.to_string(),
        "--think-time",
        &think.to_string(),
        "--discipline",
        discipline,
        "--servers",
        &servers.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

/// `--secure-fraction` and `--hit-ratio` for the mix hsload really sent (its classes'
/// shares): a forecast is asked for the point's own mix.
fn mix_args(load: &Value) -> Vec<String> {
    let share = |c: &str| f(&load["classes"][c]["share"]).max(0.0);
    let tls = share("tls_full") + share("tls_resumed");
    let mut args = vec!["--secure-fraction".into(), tls.to_string()];
    if tls > 0.0 {
        args.extend([
            "--hit-ratio".into(),
            (share("tls_resumed") / tls).to_string(),
        ]);
    }
    args
}

/// One point's predictions from its parameters (`file`), hsload's output and the server's
/// CPU; the forecasts from the parameters in `windows`: the one-user window's and the
/// busier one's.
fn predict(
    rig: &Rig,
    file: &Path,
    (load, cpu_busy, client_cpu): (Value, f64, f64),
    windows: &Windows,
) -> Result<Point> {
    let forecast_from = windows.one_user.file.as_path();
    let Rig {
        bin,
        arch,
        platform,
        ..
    } = *rig;
    let params: Value = serde_json::from_str(&fs::read_to_string(file)?)?;
    let users = load["users"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .context("hsload's output has no user count")?;
    let think = load["think_time_measured_s"].as_f64().unwrap_or(THINK_S);
    let server = servers_from(&params);
    let with = |params: &Path, discipline: &str| {
        model_args(params, &server, users, think, discipline, arch.servers)
    };
    let event_loop = arch.discipline == SIMULATED;
    // the same point: the architecture's discipline, an event loop with the parameters'
    // own CPU outside the stages (the daemon's measurement) and the harness's wake-up
    let mut live_args = with(file, arch.discipline);
    if let (true, Some(platform)) = (event_loop, platform) {
        live_args.extend(["--wakeup".into(), platform.wakeup_arg()]);
    }
    let live = point(&model(bin, &live_args)?);
    live_args.extend(["--other-cpus".into(), "0".into()]);
    let live_without_other = point(&model(bin, &live_args)?);
    // other work cannot take a real-time server's CPU, however much of the rest it used
    let other_cpus = match rig.real_time {
        true => Some(0.0),
        false => params["host"]["other_cpus"].as_f64(),
    };
    // the stages alone: nothing outside them, no wake-up
    let mut args = with(file, arch.discipline);
    args.extend(["--overhead".into(), "0".into()]);
    if event_loop {
        args.extend(
            ["--wakeup", "0", "--sleep-cpu", "0", "--cold-start", "none"].map(String::from),
        );
    }
    let params_only = point(&model(bin, &args)?);
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
    // the same from /proc beside it: the server's CPU a request (the service demand law,
    // D = U·c / X), less the stages'
    let stages = &params_only;
    let servers = f64::from(arch.servers);
    let stages_s = f(&stages["utilisation"]) * servers / f(&stages["throughput_per_s"]);
    let overhead_proc_s = (cpu_busy * servers / f(&load["throughput_per_s"]) - stages_s).max(0.0);
    // an approximation that refuses a case (several loops) is shown as –
    let approx = match event_loop {
        true => model(bin, &with(file, "event-loop"))
            .ok()
            .map(|a| point(&a)),
        false => None,
    };
    let shared = model(bin, &with(file, "processor-sharing"))
        .ok()
        .map(|a| point(&a));
    // the forecast: hstrace's own measurements at low load, only the mix set to this
    // point's (no harness wake-up curve); an event loop's with the cold start the daemon
    // measured (the window's host.cold_start, which the model takes unasked)
    let base = &windows.one_user.params;
    if event_loop {
        has_cold_start(base, forecast_from)?;
    }
    let forecast_args = |window: &Path| {
        let mut args = with(window, arch.discipline);
        args.extend(mix_args(&load));
        if rig.real_time {
            args.extend(["--other-cpus".into(), "0".into()]);
        }
        args
    };
    let told_delays_from = |window: &Value| -> Vec<String> {
        delay_scales(window, &params)
            .into_iter()
            .flat_map(|(stage, k)| ["--scale-stage".into(), format!("{stage}={k}")])
            .collect()
    };
    let busier_args = forecast_args(&windows.busier.file);
    let busier = point_and_wakeup(&model(bin, &busier_args)?);
    let busier_told_delays = point(&model(
        bin,
        &[
            &busier_args[..],
            &told_delays_from(&windows.busier.params)[..],
        ]
        .concat(),
    )?);
    // the point's other work, told with its speed (a real-time server's forecasts were
    // told none already)
    let other_told = other_cpus.filter(|_| !rig.real_time);
    let busier_speed = host_speed(&windows.busier.params, &params);
    let busier_at_speed = match busier_speed {
        Some(k) => Some(point(&model(
            bin,
            &[&busier_args[..], &at_speed_args(k, other_told)[..]].concat(),
        )?)),
        None => None,
    };
    let mut args = forecast_args(forecast_from);
    let forecast = point_and_wakeup(&model(bin, &args)?);
    let told_delays = told_delays_from(base);
    let forecast_told_delays_alone = point(&model(bin, &[&args[..], &told_delays[..]].concat())?);
    let host_speed = host_speed(base, &params);
    let (forecast_at_speed, forecast_told_delays) = match host_speed {
        Some(k) => {
            args.extend(at_speed_args(k, other_told));
            let at_speed = point(&model(bin, &args)?);
            args.extend(told_delays);
            (Some(at_speed), Some(point(&model(bin, &args)?)))
        }
        None => (None, None),
    };
    Ok(Point {
        users,
        busier_window: file == windows.busier.file,
        load,
        cpu_busy,
        client_cpu,
        params,
        overhead_s,
        overhead_proc_s,
        cpu_per_request_s,
        live,
        other_cpus,
        live_without_other,
        params_only,
        approx,
        shared,
        forecast,
        busier,
        busier_told_delays,
        host_speed,
        forecast_at_speed,
        forecast_told_delays,
        forecast_told_delays_alone,
        busier_speed,
        busier_at_speed,
    })
}

/// How much faster the host ran a point's signatures (`point`'s parameters) than a
/// window's: the ratio of their `signature_cpu_s`; None without full handshakes in both.
fn host_speed(window: &Value, point: &Value) -> Option<f64> {
    signature_cpu_s(window)
        .zip(signature_cpu_s(point))
        .map(|(then, now)| then / now)
}

/// What a forecast is told to take the point's host speed `k` and the other work on the
/// server's CPUs the point measured (`other_cpus`, where read).
fn at_speed_args(k: f64, other_cpus: Option<f64>) -> Vec<String> {
    let mut args = vec!["--cpu-speedup".into(), k.to_string()];
    if let Some(o) = other_cpus {
        args.extend(["--other-cpus".into(), o.to_string()]);
    }
    args
}

/// A full handshake's first flight's mean on-CPU time in a parameters document: nearly all
/// of it the server's signature, the same work at every load (it costs the same after an
/// idle CPU as after a busy one: `after_idle`, `after_busy`), so two windows' ratio is how
/// much faster the host ran one than the other.
fn signature_cpu_s(params: &Value) -> Option<f64> {
    params["servers"].as_array()?.iter().find_map(|s| {
        s["classes"]["tls_full"]["stages"]["server_flight_1"]["cpu_mean_s"]
            .as_f64()
            .filter(|x| *x > 0.0)
    })
}

/// The file of one point's parameters.
fn point_file(dir: &Path, arch: &Arch, mix: usize, users: u32) -> PathBuf {
    dir.join(format!("{}-mix{}-users{users}.json", arch.key, mix + 1))
}

/// The two windows the forecasts are made from: one user's, and one at a production
/// window's load (`busier_users`).
struct Windows {
    one_user: Window,
    busier: Window,
}

/// A window the forecasts are made from: its parameters' file, read once.
struct Window {
    file: PathBuf,
    params: Value,
}

impl Window {
    fn read(file: &Path) -> Result<Window> {
        let text =
            fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        Ok(Window {
            file: file.to_owned(),
            params: serde_json::from_str(&text)
                .with_context(|| format!("{}: not a parameters document", file.display()))?,
        })
    }
}

/// The users that keep the server about `BUSIER_UTIL` busy, from the one-user window's
/// busy share (per CPU it may use): utilisation grows nearly in proportion at low load.
/// Unread (NaN), the fewest.
fn busier_users(one_user_busy: f64) -> u32 {
    if one_user_busy.is_nan() {
        return 2;
    }
    let n = (BUSIER_UTIL / one_user_busy.max(1e-3)).round();
    (n as u32).max(2)
}

/// The users to measure the busier window again with, when a window of `users` found the
/// server `busy` less than two thirds of `BUSIER_UTIL`: scaled by that window's own busy
/// share (the CPU a request falls as load grows, so one user's reckoning falls short: 7
/// users for 15 % kept nginx 8.7 % busy), at most `BUSIER_AGAIN_MAX` times as many. None
/// when near enough, or unread (NaN, or no CPU at all: not a reading to scale by).
fn busier_users_again(users: u32, busy: f64) -> Option<u32> {
    if busy.is_nan() || busy <= 0.0 || busy >= BUSIER_UTIL * 2.0 / 3.0 {
        return None;
    }
    let n = (f64::from(users) * BUSIER_UTIL / busy).round();
    let n = n.min(f64::from(users * BUSIER_AGAIN_MAX)) as u32;
    (n > users).then_some(n)
}

/// The user counts a mix measures after its windows (one user's, then `windows`): the
/// plan's past the first, less those a window measured already.
fn users_after_windows(plan: &[u32], windows: &[u32]) -> Vec<u32> {
    plan.iter()
        .skip(1)
        .filter(|n| !windows.contains(n))
        .copied()
        .collect()
}

/// The busier window, measured (`measure`: a window at that many users, and how busy it
/// kept the server) at `busier_users` and, when that fell short, once more at
/// `busier_users_again`: every window measured, in order; the last is the busier one.
fn measure_busier<T>(
    one_user_busy: f64,
    mut measure: impl FnMut(u32) -> Result<(T, f64)>,
) -> Result<Vec<(u32, T, f64)>> {
    let first = busier_users(one_user_busy);
    let (window, busy) = measure(first)?;
    let mut windows = vec![(first, window, busy)];
    if let Some(again) = busier_users_again(first, busy) {
        let (window, busy) = measure(again)?;
        windows.push((again, window, busy));
    }
    Ok(windows)
}

/// How busy the busier window's server was, in per cent, and whether past what the
/// criterion allows a production window.
fn busier_busy_words(busy: f64) -> String {
    match busy > BUSIER_UTIL_MAX {
        true => format!(
            "{:.1} (more than the {:.0} % a production window may be)",
            busy * 100.0,
            BUSIER_UTIL_MAX * 100.0
        ),
        false => format!("{:.1}", busy * 100.0),
    }
}

/// The busier window's point among a mix's (`run_mix`'s).
fn busier_window(points: &[Point]) -> Result<&Point> {
    points
        .iter()
        .find(|p| p.busier_window)
        .context("a mix without the busier window's point")
}

/// One mix (the `index`th) at every user count of the plan, and at the busier window's;
/// the forecasts are made from the first point's parameters (`FORECAST_FROM_USERS` users)
/// and from the busier window's, both measured before the rest.
fn run_mix(rig: &Rig, mix: &Mix, index: usize, plan: &Plan) -> Result<Vec<Point>> {
    let users = (plan.users)(rig.arch);
    if users.first() != Some(&FORECAST_FROM_USERS) {
        bail!("a plan starts with the forecast's window, {FORECAST_FROM_USERS} user(s)");
    }
    let at = |n: u32| format!("{}: mix {}: {n} users", rig.arch.key, index + 1);
    let measure_at = |n: u32| -> Result<(PathBuf, (Value, f64, f64))> {
        eprintln!("xtask: {}", at(n));
        let file = point_file(rig.dir, rig.arch, index, n);
        let run = Run {
            hsload: rig.hsload,
            arch: rig.arch,
            server: rig.server,
            mix,
            users: n,
            duration_s: plan.duration_s(n),
        };
        let measured = measure(&run, &file).with_context(|| format!("{}: measuring", at(n)))?;
        Ok((file, measured))
    };
    let one_user = measure_at(FORECAST_FROM_USERS)?;
    let busier = measure_busier(one_user.1 .1, |n| {
        let window = measure_at(n)?;
        let busy = window.1 .1;
        Ok((window, busy))
    })?;
    let windows = Windows {
        one_user: Window::read(&one_user.0)?,
        busier: Window::read(&busier.last().context("no busier window")?.1 .0)?,
    };
    let predict_at = |n: u32, (file, m): (PathBuf, (Value, f64, f64))| {
        predict(rig, &file, m, &windows).with_context(|| format!("{}: the models", at(n)))
    };
    let mut points = vec![predict_at(FORECAST_FROM_USERS, one_user)?];
    let measured: Vec<u32> = busier.iter().map(|w| w.0).collect();
    for (n, window, _) in busier {
        points.push(predict_at(n, window)?);
    }
    for n in users_after_windows(&users, &measured) {
        points.push(predict_at(n, measure_at(n)?)?);
    }
    points.sort_by_key(|p| p.users);
    Ok(points)
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

/// Misses counted by the document: the same-point fit's, the forecast's and the what-if's;
/// `busier_at_speed`, the busier window's forecast told the point's host speed, is a check
/// of the model on a drifting host, not a forecast.
#[derive(Debug, Default, Clone, Copy)]
struct Misses {
    /// the points counted (the server's CPUs busy below `UTIL_LIMIT`) of the
    /// architectures' mixes
    counted: usize,
    fit: usize,
    forecast: usize,
    busier: usize,
    busier_at_speed: usize,
    whatif: usize,
    whatif_busier: usize,
    /// the key-exchange what-if's (`group`)
    whatif_group: usize,
}

impl Misses {
    /// One mix's point, counted where its server's CPUs were busy below the limit: a miss
    /// of each prediction that was not within.
    fn add_point(&mut self, v: &Verdicts) {
        if !v.counted {
            return;
        }
        self.counted += 1;
        self.fit += usize::from(!v.fit);
        self.forecast += usize::from(!v.forecast);
        self.busier += usize::from(!v.busier);
        self.busier_at_speed += usize::from(v.busier_at_speed == Some(false));
    }

    fn merge(&mut self, o: &Misses) {
        self.counted += o.counted;
        self.fit += o.fit;
        self.forecast += o.forecast;
        self.busier += o.busier;
        self.busier_at_speed += o.busier_at_speed;
        self.whatif += o.whatif;
        self.whatif_busier += o.whatif_busier;
        self.whatif_group += o.whatif_group;
    }
}

/// A verdict cell: counted (busy below the limit) and within the tolerance?
fn verdict(counted: bool, ok: bool) -> &'static str {
    match (counted, ok) {
        (true, true) => "within",
        (true, false) => "**MISS**",
        (false, true) => "within (saturated, not counted)",
        (false, false) => "miss (saturated, not counted)",
    }
}

fn within(errors: &[f64]) -> bool {
    errors.iter().all(|e| e.abs() <= TOLERANCE)
}

/// One architecture's mix as the document shows it, counting its misses.
fn mix_section(
    arch: &Arch,
    mix: &Mix,
    index: usize,
    points: &[Point],
    misses: &mut Misses,
) -> Result<String> {
    let busier = busier_window(points)?;
    let mut rows = String::new();
    let mut reasons = String::new();
    for p in points {
        let v = p.verdicts();
        misses.add_point(&v);
        let (forecast_r, forecast_x) = p.forecast_errors();
        let (busier_r, busier_x) = p.busier_errors();
        let busier_speed = p.busier_speed.map_or("–".into(), |k| pct(k - 1.0));
        let busier_at_speed_err = p
            .busier_at_speed_errors()
            .map_or("–".into(), |(r, _)| pct(r));
        let busier_at_speed_verdict = v.busier_at_speed.map_or("–", |ok| verdict(v.counted, ok));
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
        let (forecast, _) = other(Some(&p.forecast));
        let (_, at_speed_err) = other(p.forecast_at_speed.as_ref());
        let (_, told_delays_err) = other(p.forecast_told_delays.as_ref());
        let (_, told_alone_err) = other(Some(&p.forecast_told_delays_alone));
        let (_, busier_told_err) = other(Some(&p.busier_told_delays));
        let (_, without_other_err) = other(Some(&p.live_without_other));
        let other_cpus = p.other_cpus.map_or("–".into(), |o| format!("{o:.2}"));
        let speed = p.host_speed.map_or("–".into(), |k| pct(k - 1.0));
        let (alone, alone_err) = other(Some(&p.params_only));
        let (mva, mva_err) = other(p.approx.as_ref());
        let (ps, ps_err) = other(p.shared.as_ref());
        let utilisation = f(&p.live["utilisation"]);
        let x_model = f(&p.live["throughput_per_s"]);
        let r_model = match p.live["ci95"]["response_s"].as_f64() {
            Some(ci) => format!("{} ± {}", ms(f(&p.live["response_s"])), ms(ci)),
            None => ms(f(&p.live["response_s"])),
        };
        let _ = writeln!(
            rows,
            "| {} | {:.1} % | {other_cpus} / {:.2} | {:.1} % | {:.0} | {:.0} / {:.0} | {:.1} | {x_model:.1} | {} | {} | {r_model} | {} | {without_other_err} | {forecast} | {} | {} | {told_alone_err} | {} | {} | {busier_told_err} | {busier_speed} | {busier_at_speed_err} | {speed} | {at_speed_err} | {told_delays_err} | {alone} | {alone_err} | {mva} | {mva_err} | {ps} | {ps_err} | {} | {} | {} | {} | {} | {} | {} | {busier_at_speed_verdict} |",
            p.users,
            p.cpu_busy * 100.0,
            p.client_cpu,
            utilisation * 100.0,
            p.cpu_per_request_s * 1e6,
            p.overhead_s * 1e6,
            p.overhead_proc_s * 1e6,
            f(&p.load["throughput_per_s"]),
            pct(p.throughput_error()),
            ms(measured_r),
            pct(p.response_error()),
            pct(forecast_r),
            pct(forecast_x),
            pct(busier_r),
            pct(busier_x),
            classes(&p.load, &|c| f(&c["response_s"]["mean"])),
            classes(&p.live, &|c| f(&c["response_s"])),
            p.load["requests"],
            p.load["errors"],
            verdict(v.counted, v.fit),
            verdict(v.counted, v.forecast),
            verdict(v.counted, v.busier),
        );
        if !v.fit {
            let _ = writeln!(
                reasons,
                "- N = {}: R {} and X {} off. The server's CPUs were busy {:.1} % of the time (the server's processes {:.1} %), the model's {:.1} %.{}",
                p.users,
                pct(p.response_error()),
                pct(p.throughput_error()),
                p.cpus_busy() * 100.0,
                p.cpu_busy * 100.0,
                utilisation * 100.0,
                if v.counted {
                    ""
                } else {
                    " At saturation R → N·D_max − Z: an error in the bottleneck's demand \
                     is multiplied by N. Not counted."
                }
            );
        }
    }
    let queue = match arch.discipline == SIMULATED {
        true => format!(
            "Queue stages, measured by hstrace / predicted by the simulation (an output of the \
             model: it never reads them), mean ms; a prediction of – is a message the handler \
             that answered the one before reads on, in the same visit:\n\n{}\n",
            queue_table(points).trim_end()
        ),
        false => String::new(),
    };
    template::fill(
        MIX_TEMPLATE,
        &[
            ("ARCH", arch.title.to_string()),
            ("KEY", arch.key.to_string()),
            ("N", (index + 1).to_string()),
            ("NAME", mix.name.to_string()),
            ("SECURE", mix.secure.to_string()),
            ("RESUME", mix.resume.to_string()),
            ("ROWS", rows.trim_end().to_string()),
            (
                "MISSES",
                match reasons.is_empty() {
                    true => String::new(),
                    false => format!("\n\nSame-point misses:\n\n{}", reasons.trim_end()),
                },
            ),
            ("QUEUE", queue),
            ("DISCIPLINE", arch.discipline.to_string()),
            ("SERVERS", arch.servers.to_string()),
            ("FROM_USERS", FORECAST_FROM_USERS.to_string()),
            ("BUSIER_USERS", busier.users.to_string()),
            ("BUSIER_BUSY", busier_busy_words(busier.cpu_busy)),
            ("WAKEUP_ONE", wakeup_words(&busier.forecast["wakeup"])),
            ("WAKEUP_BUSIER", wakeup_words(&busier.busier["wakeup"])),
        ],
    )
}

/// One key of the what-if, at one user count: measured with the real key, and forecast
/// from the window with `WHATIF_FROM`.
struct WhatIfPoint {
    key: Key,
    users: u32,
    load: Value,
    cpu_busy: f64,
    /// `--key-change FROM:KEY` from the base window
    forecast: Value,
    /// the same from the busier window with `WHATIF_FROM`
    from_busier: Value,
    /// its knobs (the key change: the signing stage it took)
    forecast_knobs: Value,
    /// the same base window with the key unchanged, for scale
    unchanged: Value,
    /// the client's delays a request, hstrace's reading at the point (`delays_s`)
    delays_s: f64,
    /// a full handshake's first flight on CPU at the point, hstrace's reading (the new
    /// key's signature in it: `signature_cpu_s`)
    signing_s: Option<f64>,
}

/// The delay stages (the client's work and the network) of a mean request in a parameters
/// document: each server's classes weighted by their shares, the servers by their
/// connections.
fn delays_s(params: &Value) -> f64 {
    let (mut sum, mut conns) = (0.0, 0.0);
    for s in params["servers"].as_array().into_iter().flatten() {
        let n = f(&s["connections"]);
        for c in CLASSES {
            let class = &s["classes"][c];
            let stages = class["stages"].as_object().into_iter().flatten();
            let delay: f64 = stages
                .filter(|(_, m)| m["class"] == "delay")
                .map(|(_, m)| f(&m["mean_s"]))
                .sum();
            sum += n * f(&class["share"]).max(0.0) * delay;
        }
        conns += n;
    }
    if conns > 0.0 {
        sum / conns
    } else {
        0.0
    }
}

/// Each delay stage (the client's work and the network) of `params` against `base`: the
/// ratio of their means, each weighted by its count over every server and class, for
/// the stages both measured.
fn delay_scales(base: &Value, params: &Value) -> Vec<(String, f64)> {
    let means = |doc: &Value| {
        let mut by: BTreeMap<String, (f64, f64)> = BTreeMap::new();
        for s in doc["servers"].as_array().into_iter().flatten() {
            for c in CLASSES {
                let stages = s["classes"][c]["stages"].as_object().into_iter().flatten();
                for (name, m) in stages.filter(|(_, m)| m["class"] == "delay") {
                    let n = f(&m["count"]);
                    let e = by.entry(name.clone()).or_default();
                    e.0 += n * f(&m["mean_s"]);
                    e.1 += n;
                }
            }
        }
        by
    };
    let then = means(base);
    means(params)
        .into_iter()
        .filter_map(|(name, (sum, n))| {
            let (sum0, n0) = then.get(&name)?;
            let (now, before) = (sum / n, sum0 / n0);
            (n > 0.0 && *n0 > 0.0 && before > 0.0 && now.is_finite()).then(|| (name, now / before))
        })
        .collect()
}

/// A what-if point's signing stage, measured / forecast (`--key-change`'s window mean with
/// the new key's signature), ms, and how much faster the host ran it than the forecast
/// took.
fn signing_words(p: &WhatIfPoint) -> String {
    let forecast = f(&p.forecast_knobs["key_change"]["server_flight_1_s"]["with_key"]);
    match p.signing_s {
        Some(measured) if forecast > 0.0 => format!(
            "{} / {} ({})",
            ms(measured),
            ms(forecast),
            pct(forecast / measured - 1.0)
        ),
        _ => "–".into(),
    }
}

/// The what-if's rows, its verdicts counted.
fn whatif_rows(points: &[WhatIfPoint], misses: &mut Misses) -> String {
    let mut rows = String::new();
    for p in points {
        let measured_r = f(&p.load["response_s"]["mean"]);
        let measured_x = f(&p.load["throughput_per_s"]);
        let (dr, dx) = errors(&p.forecast, &p.load);
        let (busier_r, busier_x) = errors(&p.from_busier, &p.load);
        let counted = p.cpu_busy < UTIL_LIMIT;
        let ok = within(&[dr, dx]);
        let busier_ok = within(&[busier_r, busier_x]);
        misses.whatif += usize::from(counted && !ok);
        misses.whatif_busier += usize::from(counted && !busier_ok);
        let _ = writeln!(
            rows,
            "| {} | {} | {:.1} % | {:.1} % | {measured_x:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.key.name(),
            p.users,
            p.cpu_busy * 100.0,
            f(&p.forecast["utilisation"]) * 100.0,
            f(&p.forecast["throughput_per_s"]),
            pct(dx),
            ms(measured_r),
            ms(f(&p.forecast["response_s"])),
            pct(dr),
            ms(f(&p.unchanged["response_s"])),
            ms(p.delays_s),
            signing_words(p),
            pct(busier_r),
            pct(busier_x),
            verdict(counted, ok),
            verdict(counted, busier_ok),
        );
    }
    rows
}

/// The document: settings, one section per architecture and mix, the what-if, every miss
/// with its reason (the templates' prose, the tables filled in); and the misses counted.
fn report(
    archs: &[(&Arch, Vec<Vec<Point>>)],
    (whatif, whatif_group): (&WhatIf, &str),
    plan: &Plan,
    platform: &Platform,
    commit: &str,
) -> Result<(String, Misses)> {
    let mut misses = Misses::default();
    let mut sections = Vec::new();
    let mut summary = String::new();
    for (arch, mixes) in archs {
        let mut text = format!(
            "## {}\n\n{}. The model: `--discipline {} --servers {}`.\n",
            arch.title, arch.how, arch.discipline, arch.servers
        );
        for (i, points) in mixes.iter().enumerate() {
            let mut mine = Misses::default();
            text.push('\n');
            text.push_str(&mix_section(arch, &MIXES[i], i, points, &mut mine)?);
            summary.push_str(&summary_row(arch, i, points, &mine));
            misses.merge(&mine);
        }
        sections.push(text);
    }
    let whatif_doc = template::fill(
        WHATIF_TEMPLATE,
        &[
            ("FROM", WHATIF_FROM.name()),
            ("FROM_USERS", FORECAST_FROM_USERS.to_string()),
            ("SIGN_COSTS", whatif.sign_costs.clone()),
            ("WINDOW_DELAYS", ms(whatif.window_delays_s)),
            ("BUSIER_USERS", whatif.busier.0.to_string()),
            ("BUSIER_BUSY", busier_busy_words(whatif.busier.1)),
            ("BUSIER_PCT", format!("{:.0}", BUSIER_UTIL * 100.0)),
            (
                "ROWS",
                whatif_rows(&whatif.points, &mut misses)
                    .trim_end()
                    .to_string(),
            ),
            (
                "PICTURES",
                WHATIF_TO
                    .iter()
                    .map(|(k, _)| {
                        format!(
                            "![{} forecast from {}](model-validation-whatif-{}.svg)",
                            k.name(),
                            WHATIF_FROM.name(),
                            k.name()
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        ],
    )?;
    let all: Vec<&Point> = archs.iter().flat_map(|(_, m)| m.iter().flatten()).collect();
    let doc = template::fill(
        TEMPLATE,
        &[
            (
                "COLD_WARM",
                cold_and_warm(&all.iter().map(|p| &p.params).collect::<Vec<_>>()),
            ),
            ("SPEED_RANGE", speed_range(&all, |p| p.host_speed)),
            ("OTHER_GROWTH", other_growth(archs)),
            ("COMMIT", commit.to_string()),
            ("KERNEL", kernel()),
            ("CPUS", cpus().to_string()),
            ("THINK_S", THINK_S.to_string()),
            ("WARMUP_S", WARMUP_S.to_string()),
            ("DURATION_S", plan.duration_s.to_string()),
            ("MIN_REQUESTS", MIN_REQUESTS.to_string()),
            ("SIMULATED", SIMULATED.to_string()),
            ("FROM_USERS", FORECAST_FROM_USERS.to_string()),
            ("BUSIER_PCT", format!("{:.0}", BUSIER_UTIL * 100.0)),
            ("BUSIER_MAX_PCT", format!("{:.0}", BUSIER_UTIL_MAX * 100.0)),
            ("WAKEUP", platform.wakeup_words()),
            ("COLD", cold_starts(archs)),
            ("TOLERANCE_PCT", format!("{:.0}", TOLERANCE * 100.0)),
            ("UTIL_LIMIT_PCT", format!("{:.0}", UTIL_LIMIT * 100.0)),
            ("SUMMARY", summary.trim_end().to_string()),
            ("ARCHES", sections.join("\n").trim_end().to_string()),
            ("WHATIF", whatif_doc.trim_end().to_string()),
            ("WHATIF_GROUP", whatif_group.trim_end().to_string()),
        ],
    )?;
    Ok((doc, misses))
}

/// One mix's line of the summary: its counted points and each prediction's misses among
/// them, and how far the host's speed moved from the busier window's.
fn summary_row(arch: &Arch, index: usize, points: &[Point], m: &Misses) -> String {
    let speeds: Vec<&Point> = points.iter().filter(|p| !p.busier_window).collect();
    let range = speed_range(&speeds, |p| p.busier_speed);
    format!(
        "| {}, mix {} | {} | {} | {} | {} | {} | {range} |\n",
        arch.title,
        index + 1,
        m.counted,
        m.fit,
        m.forecast,
        m.busier,
        m.busier_at_speed,
    )
}

/// Stages read each way at a point, at least, for the point's split to count.
const MIN_SPLIT: f64 = 30.0;

/// What the points' parameters (`params`) say of three service stages begun right behind
/// another one against those begun on an idle CPU (`after_busy`, `after_idle`), within
/// each point
/// (a pooled mean would mix loads, and the host's speed moves with the load): the median
/// ratio over the points with `MIN_SPLIT` of each, and its range, in words.
fn cold_and_warm(params: &[&Value]) -> String {
    let stages = [
        (
            "tls_full",
            "server_flight_1",
            "a full handshake's first flight (the signature)",
        ),
        ("tls_resumed", "server_flight_1", "a resumed one's"),
        ("plain", "response", "a plain response"),
    ];
    let words: Vec<String> = stages
        .iter()
        .map(|(class, stage, what)| {
            let mut ratios: Vec<f64> = params
                .iter()
                .flat_map(|p| p["servers"].as_array().into_iter().flatten())
                .filter_map(|s| {
                    let st = &s["classes"][class]["stages"][stage];
                    let (idle, busy) = (&st["after_idle"], &st["after_busy"]);
                    let enough = f(&idle["count"]) >= MIN_SPLIT && f(&busy["count"]) >= MIN_SPLIT;
                    let ratio = f(&busy["cpu_mean_s"]) / f(&idle["cpu_mean_s"]);
                    (enough && ratio.is_finite()).then_some(ratio)
                })
                .collect();
            ratios.sort_by(f64::total_cmp);
            match ratios.len() {
                0 => format!("{what}: no point read enough of both"),
                n => format!(
                    "{what} {:.0} % (median of {n} points, {:.0} … {:.0} %)",
                    ratios[n / 2] * 100.0,
                    ratios[0] * 100.0,
                    ratios[n - 1] * 100.0
                ),
            }
        })
        .collect();
    words.join("; ")
}

/// The range of a host speed (`speed`: a point's against one of its windows) over `points`, in
/// words.
fn speed_range(points: &[&Point], speed: fn(&Point) -> Option<f64>) -> String {
    let speeds: Vec<f64> = points.iter().filter_map(|p| speed(p)).collect();
    let lo = speeds.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = speeds.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    match speeds.is_empty() {
        true => "–".into(),
        false => format!("from {} to {}", pct(lo - 1.0), pct(hi - 1.0)),
    }
}

/// How the other work on the server's CPUs grew with load where the client is not pinned
/// apart, in words: each mix's first and last point.
fn other_growth(archs: &[(&Arch, Vec<Vec<Point>>)]) -> String {
    let said: Vec<String> = archs
        .iter()
        .filter(|(a, _)| a.client_cpu.is_none())
        .flat_map(|(a, mixes)| {
            mixes.iter().enumerate().filter_map(move |(i, points)| {
                let first = points.first()?;
                let last = points.last()?;
                Some(format!(
                    "{} mix {}: {:.2} CPUs at N = {}, {:.2} at N = {}",
                    a.title,
                    i + 1,
                    first.other_cpus?,
                    first.users,
                    last.other_cpus?,
                    last.users
                ))
            })
        })
        .collect();
    match said.is_empty() {
        true => "this run measured none".into(),
        false => format!("under load it grew ({})", said.join("; ")),
    }
}

/// The what-if measured: every key's points, and what the model said it measured of the
/// keys' signing costs.
struct WhatIf {
    points: Vec<WhatIfPoint>,
    /// `openssl speed`'s costs as the model reported them, in words
    sign_costs: String,
    /// the same per key of `WHATIF_TO`, as `--sign-cost` takes them
    sign_cost_args: Vec<(Key, String)>,
    /// the base window's parameters
    base: PathBuf,
    /// the client's delays a request in the base window (`delays_s`)
    window_delays_s: f64,
    /// the busier window with `WHATIF_FROM`: its users and how busy the server was
    busier: (u32, f64),
}

/// From one window of mix 1 with `FORECAST_FROM_USERS` users on nginx (one worker) with
/// `WHATIF_FROM`, the forecast with each key of `WHATIF_TO`, and the real server with that
/// key at its user counts (the plan's duration; a quick plan takes the first and last).
fn run_whatif(bin: &Path, hsload: &Path, dir: &Path, plan: &Plan) -> Result<WhatIf> {
    let arch = &NGINX_ONE;
    let mix = &MIXES[0];
    // each key's server (mix 1) at `n` users, measured into `file`
    let measure_at = |server: &Server, key: Key, n: u32, file: &Path| {
        eprintln!("xtask: what-if: {}: {n} users", key.name());
        let run = Run {
            hsload,
            arch,
            server,
            mix,
            users: n,
            duration_s: plan.duration_s(n),
        };
        measure(&run, file)
    };
    let window = |n: u32| dir.join(format!("whatif-{}-users{n}.json", WHATIF_FROM.name()));
    let base = window(FORECAST_FROM_USERS);
    // the one-user window, then the busier one (`busier_users`), both with WHATIF_FROM
    let busier = {
        let server = Server::start(arch, WHATIF_FROM, dir)?;
        let (_, one_user_busy, _) = measure_at(&server, WHATIF_FROM, FORECAST_FROM_USERS, &base)?;
        let windows = measure_busier(one_user_busy, |n| {
            let (_, busy, _) = measure_at(&server, WHATIF_FROM, n, &window(n))?;
            Ok(((), busy))
        })?;
        windows
            .last()
            .map(|&(n, _, busy)| (n, busy))
            .context("no busier window")?
    };
    let busier_file = window(busier.0);
    let base_params: Value = serde_json::from_str(&fs::read_to_string(&base)?)?;
    has_cold_start(&base_params, &base)?;
    let server_arg = servers_from(&base_params);
    let mut points = Vec::new();
    let mut sign_costs = Vec::new();
    let mut sign_cost_args: Vec<(Key, String)> = Vec::new();
    for (key, users) in WHATIF_TO {
        let server = Server::start(arch, key, dir)?;
        let users: Vec<u32> = match plan.is_full() {
            false => vec![users[0], users[users.len() - 1]],
            true => users.to_vec(),
        };
        for (i, n) in users.into_iter().enumerate() {
            let file = dir.join(format!("whatif-{}-users{n}.json", key.name()));
            let (load, cpu_busy, _) = measure_at(&server, key, n, &file)?;
            let think = load["think_time_measured_s"].as_f64().unwrap_or(THINK_S);
            let args = |window: &Path| {
                let mut args = model_args(window, &server_arg, n, think, SIMULATED, 1);
                args.extend(mix_args(&load));
                args
            };
            let unchanged = point(&model(bin, &args(&base))?);
            // openssl's costs, measured once per key (at its first point) and given to
            // the others, the busier window's forecasts and the picture, so that all are
            // forecast from one measurement
            let key_change = |window: &Path, costs: &[(Key, String)]| {
                let mut args = args(window);
                args.extend([
                    "--key-change".into(),
                    format!("{}:{}", WHATIF_FROM.name(), key.name()),
                ]);
                args.extend(sign_cost_of(costs, key));
                args
            };
            let answer = model(bin, &key_change(&base, &sign_cost_args))?;
            if i == 0 {
                sign_costs.push(key_change_words(&answer));
                sign_cost_args.push((key, sign_cost_arg(&answer)));
            }
            let from_busier = point(&model(bin, &key_change(&busier_file, &sign_cost_args))?);
            let params: Value = serde_json::from_str(&fs::read_to_string(&file)?)?;
            points.push(WhatIfPoint {
                key,
                users: n,
                load,
                cpu_busy,
                forecast: point(&answer),
                from_busier,
                forecast_knobs: answer["knobs"].clone(),
                unchanged,
                delays_s: delays_s(&params),
                signing_s: signature_cpu_s(&params),
            });
        }
    }
    Ok(WhatIf {
        points,
        sign_costs: sign_costs.join("; "),
        sign_cost_args,
        window_delays_s: delays_s(&base_params),
        base,
        busier,
    })
}

/// The signing costs `--key-change` measured, as `--sign-cost` takes them
/// (`FROM=SECONDS,TO=SECONDS`).
fn sign_cost_arg(answer: &Value) -> String {
    let k = &answer["knobs"]["key_change"];
    [&k["from"], &k["to"]]
        .map(|name| {
            let name = name.as_str().unwrap_or("?");
            format!("{name}={:.9}s", f(&k["sign_s"][name]))
        })
        .join(",")
}

/// `--sign-cost` as measured for `key` (none before its first point).
fn sign_cost_of(measured: &[(Key, String)], key: Key) -> Vec<String> {
    measured
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, arg)| vec!["--sign-cost".into(), arg.clone()])
        .unwrap_or_default()
}

/// The signing costs `--key-change` measured, in words (from its `hstrace.model/v1`
/// answer).
fn key_change_words(answer: &Value) -> String {
    let k = &answer["knobs"]["key_change"];
    let sign = |name: &Value| {
        let name = name.as_str().unwrap_or("?");
        format!("{name} {:.3} ms", f(&k["sign_s"][name]) * 1e3)
    };
    format!(
        "{} and {} a signature, so a full handshake's server_flight_1 {:+.3} ms",
        sign(&k["from"]),
        sign(&k["to"]),
        f(&k["server_flight_1_added_s"]) * 1e3
    )
}

/// A picture, docs/model-validation-NAME.svg: `hstrace model ARGS --users 1..TOP --plot`
/// with `measured` (users, hsload output) as its points, overall and per class, TOP the
/// most users measured; the points' CSV beside the parameters in `dir`.
fn plot(
    bin: &Path,
    args: &[String],
    measured: &[(u32, &Value)],
    (dir, docs, name): (&Path, &Path, &str),
) -> Result<()> {
    let top = measured.iter().map(|m| m.0).max().unwrap_or(1);
    let csv = &dir.join(format!("{name}-measured.csv"));
    let svg = &docs.join(format!("model-validation-{name}.svg"));
    let mut rows = String::from("users,response_s,class\n");
    for (users, load) in measured {
        let _ = writeln!(rows, "{users},{},all", f(&load["response_s"]["mean"]));
        for c in CLASSES {
            if let Some(r) = load["classes"][c]["response_s"]["mean"].as_f64() {
                let _ = writeln!(rows, "{users},{r},{c}");
            }
        }
    }
    fs::write(csv, rows)?;
    let out = Command::new(bin)
        .arg("model")
        .args(args)
        .args(["--users", &format!("1..{top}")])
        .arg("--plot")
        .arg(svg)
        .arg("--measured")
        .arg(csv)
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

/// `hstrace model`'s arguments without `--users`: `args` less the pair that names them.
fn without_users(args: Vec<String>) -> Vec<String> {
    let at = args.iter().position(|a| a == "--users");
    args.into_iter()
        .enumerate()
        .filter(|(i, _)| at.is_none_or(|at| *i != at && *i != at + 1))
        .map(|(_, a)| a)
        .collect()
}

/// Every picture of the document: per architecture and mix the forecasts from its one-user
/// window and from its busier window, per key of the what-if its forecast (each with the
/// forecasts' cold start).
fn pictures(
    bin: &Path,
    dir: &Path,
    docs: &Path,
    archs: &[(&Arch, Vec<Vec<Point>>)],
    whatif: &WhatIf,
) -> Result<()> {
    for (arch, mixes) in archs {
        for (i, points) in mixes.iter().enumerate() {
            let first = points.first().context("no points to draw")?;
            let busier = busier_window(points)?;
            let measured: Vec<(u32, &Value)> = points.iter().map(|p| (p.users, &p.load)).collect();
            for (from, suffix) in [(first, ""), (busier, "-busier")] {
                let think = from.load["think_time_measured_s"]
                    .as_f64()
                    .unwrap_or(THINK_S);
                let args = without_users(model_args(
                    &point_file(dir, arch, i, from.users),
                    &servers_from(&from.params),
                    1,
                    think,
                    arch.discipline,
                    arch.servers,
                ));
                let name = format!("{}-mix{}{suffix}", arch.key, i + 1);
                plot(bin, &args, &measured, (dir, docs, &name))?;
            }
        }
    }
    let base: Value = serde_json::from_str(&fs::read_to_string(&whatif.base)?)?;
    let server = servers_from(&base);
    for (key, _) in WHATIF_TO {
        let points: Vec<&WhatIfPoint> = whatif.points.iter().filter(|p| p.key == key).collect();
        let Some(first) = points.first() else {
            continue;
        };
        let think = first.load["think_time_measured_s"]
            .as_f64()
            .unwrap_or(THINK_S);
        let mut args = without_users(model_args(&whatif.base, &server, 1, think, SIMULATED, 1));
        args.extend(mix_args(&first.load));
        args.extend([
            "--key-change".into(),
            format!("{}:{}", WHATIF_FROM.name(), key.name()),
        ]);
        args.extend(sign_cost_of(&whatif.sign_cost_args, key));
        let measured: Vec<(u32, &Value)> = points.iter().map(|p| (p.users, &p.load)).collect();
        let name = format!("whatif-{}", key.name());
        plot(bin, &args, &measured, (dir, docs, &name))?;
    }
    Ok(())
}

/// `cargo xtask validate-model [--quick] [--only A,B]`: hstrace and hsload built, then the
/// validation (`quick`: a short run, printed, nothing written; `only`: those architectures
/// and/or `whatif`, printed).
pub fn validate_model(quick: bool, only: &[String]) -> Result<()> {
    require_root("validate-model")?;
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build()?;
    let hsload = build_hsload()?;
    let known: Vec<&str> = (ARCHES.iter().map(|a| a.key))
        .chain(["whatif", group::KEY])
        .collect();
    if let Some(bad) = only.iter().find(|o| !known.contains(&o.as_str())) {
        bail!("--only {bad}: not one of {}", known.join(", "));
    }
    let plan = if quick { Plan::quick() } else { Plan::full() };
    validate(&bin, &hsload, &root(), &plan, only)
}

/// hsload, built (tools/, feature `load`).
pub fn build_hsload() -> Result<PathBuf> {
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
    Ok(root().join("target/release/hsload"))
}

/// The validation; writes docs/model-validation.md and its pictures when the plan is full
/// and nothing is left out (else only prints). Fails when a counted point misses.
fn validate(bin: &Path, hsload: &Path, root: &Path, plan: &Plan, only: &[String]) -> Result<()> {
    let dir = root.join("target/validate-model");
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    let chosen = |key: &str| only.is_empty() || only.iter().any(|o| o == key);
    // measured first, both CPUs idle
    let platform = Platform::measure()?;
    eprintln!(
        "xtask: an idle CPU 0 wakes a thread in epoll_wait in {}",
        platform.wakeup_words()
    );
    let mut archs = Vec::new();
    for arch in ARCHES.iter().filter(|a| chosen(a.key)) {
        let server = Server::start(arch, KEY, &dir)?;
        let rig = Rig {
            bin,
            hsload,
            arch,
            server: &server,
            dir: &dir,
            platform: Some(&platform),
            real_time: false,
        };
        let mut mixes = Vec::new();
        for (i, mix) in MIXES.iter().enumerate() {
            mixes.push(run_mix(&rig, mix, i, plan)?);
        }
        archs.push((arch, mixes));
    }
    let whatif = match chosen("whatif") {
        true => run_whatif(bin, hsload, &dir, plan)?,
        false => WhatIf {
            points: Vec::new(),
            sign_costs: "not run".into(),
            sign_cost_args: Vec::new(),
            base: PathBuf::new(),
            window_delays_s: 0.0,
            busier: (0, f64::NAN),
        },
    };
    let whatif_group = match chosen(group::KEY) {
        true => Some(group::run(bin, &dir, plan)?),
        false => None,
    };
    let (group_doc, group_misses) = match &whatif_group {
        Some(g) => group::section(g)?,
        None => ("Not run.".into(), 0),
    };
    let (doc, mut misses) = report(&archs, (&whatif, &group_doc), plan, &platform, &commit()?)?;
    misses.whatif_group = group_misses;
    let docs = root.join("docs");
    let page = docs.join("model-validation.md");
    match (&whatif_group, plan.is_full()) {
        (Some(g), true) if only.is_empty() => {
            pictures(bin, &dir, &docs, &archs, &whatif)?;
            group::picture(bin, &dir, &docs, g)?;
            fs::write(&page, &doc)?;
            eprintln!("xtask: wrote docs/model-validation.md");
        }
        // the key-exchange what-if alone: its section of the page, and its picture
        (Some(g), true) if only == [group::KEY] => {
            group::picture(bin, &dir, &docs, g)?;
            let text = fs::read_to_string(&page)?;
            fs::write(&page, group::splice(&text, &group_doc)?)?;
            eprintln!("xtask: wrote the key-exchange what-if into docs/model-validation.md");
        }
        _ => println!("{doc}"),
    }
    if misses.fit
        + misses.forecast
        + misses.busier
        + misses.whatif
        + misses.whatif_busier
        + misses.whatif_group
        > 0
    {
        bail!(
            "points below {:.0} % busy off by more than {:.0} %: {} same-point fit(s), {} forecast(s) from one user, {} from the busier window ({} told the point's host speed), {} what-if(s) from one user, {} from the busier window, {} key-exchange what-if(s): see the tables",
            UTIL_LIMIT * 100.0,
            TOLERANCE * 100.0,
            misses.fit,
            misses.forecast,
            misses.busier,
            misses.busier_at_speed,
            misses.whatif,
            misses.whatif_busier,
            misses.whatif_group
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hstrace_tests::procs::{policy, schedule, stat_cpu_secs, stat_fields};
    use serde_json::json;

    /// The reduced validation's forecast: within this...
    const REDUCED_TOLERANCE: f64 = 0.25;
    /// ...at every point whose server was busy less than this...
    const REDUCED_UTIL_LIMIT: f64 = 0.7;
    /// ...among its loads: the users of the reduced plan past its one-user window (the
    /// windows, one user's and the busier one's, are what the forecasts are made from)
    const REDUCED_LOADS: [u32; 2] = [16, 40];

    /// The threads of this process at SCHED_IDLE that last ran on `cpu`: (tid, CPU seconds
    /// run), from /proc/self/task/*/stat (field 39 the CPU, 41 the policy). Another test's
    /// busy loop (the reduced validation's, on CPU 1) is not one.
    fn idle_threads_on(cpu: usize) -> Vec<(String, f64)> {
        let mut found = vec![];
        for task in fs::read_dir("/proc/self/task").expect("/proc/self/task") {
            let tid = task
                .expect("a task")
                .file_name()
                .to_string_lossy()
                .into_owned();
            let Ok(fields) = stat_fields(&format!("/proc/self/task/{tid}/stat")) else {
                continue; // ended since the listing
            };
            let field = |n: usize| fields[n - 3].as_str();
            if field(41) == libc::SCHED_IDLE.to_string() && field(39) == cpu.to_string() {
                found.push((tid, stat_cpu_secs(&fields)));
            }
        }
        found
    }

    /// The rig's client CPU kept awake: a thread at SCHED_IDLE on that CPU that runs
    /// whenever nothing else does, and is gone when dropped.
    #[test]
    fn the_awake_cpu_spins_at_the_lowest_priority_until_dropped() {
        let cpu = 0;
        let awake = awake_cpu(cpu).expect("a busy loop at SCHED_IDLE");
        // the CPU's idle time is the loop's; /proc counts it in 10 ms ticks, and on a CPU
        // busy with other work the loop's lowest weight gets little: wait for a tick, a while
        let start = Instant::now();
        let spinning = loop {
            thread::sleep(Duration::from_millis(100));
            let spinning = idle_threads_on(cpu);
            let ran = spinning.iter().any(|(_, ran_s)| *ran_s > 0.0);
            if ran || start.elapsed() > Duration::from_secs(10) {
                break spinning;
            }
        };
        assert_eq!(
            spinning.len(),
            1,
            "one SCHED_IDLE thread on CPU {cpu}: {spinning:?}"
        );
        assert!(spinning[0].1 > 0.0, "the busy loop never ran in 10 s");
        drop(awake);
        assert_eq!(
            idle_threads_on(cpu),
            vec![],
            "the busy loop outlived its drop"
        );
    }

    /// Where the reduced validation keeps its windows.
    fn reduced_dir() -> PathBuf {
        root().join("target/validate-model-reduced")
    }

    /// A server's workers at a real-time priority (SCHED_FIFO 1, like hsload on the client's
    /// CPU): other work on their CPU at an ordinary priority, a shared machine's, no longer
    /// takes it from them, which the kernel is asked back.
    fn at_real_time(server: &Server) -> Result<()> {
        for &w in &server.workers {
            schedule(w, libc::SCHED_FIFO, 1)?;
            let got = policy(w)?;
            if got != libc::SCHED_FIFO {
                bail!("nginx worker {w} runs at policy {got} after SCHED_FIFO was set");
            }
        }
        Ok(())
    }

    /// The reduced validation CI runs: nginx with one worker, mix 1, measured at 1, 16 and 40
    /// users and at the busier window's (once more where it fell short) in short windows;
    /// each point with its forecasts from the one-user window and from the busier one.
    fn reduced(bin: &Path, hsload: &Path) -> Result<Vec<Point>> {
        let dir = reduced_dir();
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)?;
        let plan = Plan {
            users: |_| [&[FORECAST_FROM_USERS][..], &REDUCED_LOADS].concat(),
            duration_s: 8,
        };
        let server = Server::start(&NGINX_ONE, KEY, &dir)?;
        let rig = Rig {
            bin,
            hsload,
            arch: &NGINX_ONE,
            server: &server,
            dir: &dir,
            platform: None,
            real_time: true,
        };
        // a shared machine's other work (a CI runner's) at an ordinary priority would take
        // nginx's CPU in the loads and not in the window, or the other way round: the
        // model's input, other work on the server's CPU, would be a guess of the scheduler's
        at_real_time(&server)?;
        run_mix(&rig, &MIXES[0], 0, &plan)
    }

    /// A point is counted by how busy its server's CPUs were, whoever kept them busy: two
    /// nginx workers 78 % busy beside 0.34 CPUs of hsload's are past the limit.
    #[test]
    fn a_point_counts_the_other_work_on_its_servers_cpus() {
        let two = json!({"host": {"server_cpus": 2}});
        assert!((cpus_busy(0.781, Some(0.34), &two) - 0.951).abs() < 1e-9);
        assert!(cpus_busy(0.781, Some(0.34), &two) >= UTIL_LIMIT);
        assert_eq!(
            cpus_busy(0.5, Some(0.01), &json!({"host": {"server_cpus": 1}})),
            0.51
        );
        // unknown: the server's own
        assert_eq!(cpus_busy(0.781, None, &two), 0.781);
        assert_eq!(cpus_busy(0.781, Some(0.34), &json!({})), 0.781);
    }

    /// The what-if's signing column: measured / forecast, and the host's speed from them;
    /// – without the measurement.
    #[test]
    fn the_signing_stage_is_shown_against_the_forecasts() {
        let mut p = WhatIfPoint {
            key: Key::Rsa(4096),
            users: 4,
            load: json!({}),
            cpu_busy: 0.05,
            forecast: json!({}),
            from_busier: json!({}),
            forecast_knobs: json!({"key_change": {"server_flight_1_s": {"with_key": 0.0045}}}),
            unchanged: json!({}),
            delays_s: 0.0006,
            signing_s: Some(0.005),
        };
        assert_eq!(signing_words(&p), "5.00 / 4.50 (-10.0 %)");
        p.signing_s = None;
        assert_eq!(signing_words(&p), "–");
    }

    /// Each delay stage's ratio of means, weighted by its counts across classes; a stage
    /// one side never measured is left out.
    #[test]
    fn delay_stages_scale_by_their_weighted_means() {
        let stage = |mean_ms: f64, count: u32| serde_json::json!({"class": "delay", "mean_s": mean_ms * 1e-3, "count": count});
        let doc = |tls: f64, plain: f64, extra: bool| {
            let mut tls_stages = serde_json::json!({"wait_request": stage(tls, 10),
                "server_flight_1": {"class": "service", "mean_s": 0.001, "count": 10}});
            if extra {
                tls_stages["wait_client_flight_2"] = stage(1.0, 5);
            }
            serde_json::json!({"servers": [{"classes": {
                "tls_full": {"stages": tls_stages},
                "plain": {"stages": {"wait_request": stage(plain, 10)}}}}]})
        };
        let got = delay_scales(&doc(3.0, 1.0, false), &doc(6.0, 2.0, true));
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].0, "wait_request");
        assert!((got[0].1 - 2.0).abs() < 1e-12, "{got:?}");
    }

    /// The wake-up curve the model took, in words: each point, a constant's as after any
    /// sleep, none when there was none.
    #[test]
    fn wakeup_words_name_each_point() {
        let curve =
            json!([{"idle_s": 1.5e-4, "wakeup_s": 4.2e-5}, {"idle_s": 0.19, "wakeup_s": 3.1e-4}]);
        assert_eq!(
            wakeup_words(&curve),
            "42 µs after 0.15 ms asleep, 310 µs after 190.00 ms asleep"
        );
        assert_eq!(
            wakeup_words(&json!([{"idle_s": 0.0, "wakeup_s": 6e-5}])),
            "60 µs after any sleep"
        );
        assert_eq!(wakeup_words(&json!([])), "none");
        assert_eq!(wakeup_words(&Value::Null), "none");
    }

    /// The cold/warm words: a point's split counts only with enough stages read each way,
    /// and the median and range are of the ratios within each point.
    #[test]
    fn cold_and_warm_compares_within_each_point() {
        let point = |idle: (u64, f64), busy: (u64, f64)| {
            json!({"servers": [{"classes": {"tls_full": {"stages": {"server_flight_1": {
                "after_idle": {"count": idle.0, "cpu_mean_s": idle.1},
                "after_busy": {"count": busy.0, "cpu_mean_s": busy.1},
            }}}}}]})
        };
        let points = [
            point((100, 5e-3), (40, 4.5e-3)),
            point((50, 4e-3), (200, 4.4e-3)),
            point((300, 4e-3), (10, 1e-3)),
        ];
        let words = cold_and_warm(&points.iter().collect::<Vec<_>>());
        assert!(
            words.starts_with("a full handshake's first flight (the signature) 110 % (median of 2 points, 90 … 110 %)"),
            "{words}"
        );
        assert!(
            words.contains("a plain response: no point read enough of both"),
            "{words}"
        );
    }

    #[test]
    fn the_model_validation_templates_are_filled() {
        let doc = crate::template::tests::fill_all(TEMPLATE);
        assert!(doc.starts_with("# Model validation\n\nCommit <COMMIT>, kernel <KERNEL>"));
        assert!(
            doc.contains(&format!(
                "\n\n<ARCHES>\n\n<WHATIF>\n\n{}\n<WHATIF_GROUP>\n{}\n\n## Why a point can miss\n\n",
                group::BEGIN,
                group::END
            )),
            "{doc}"
        );
        let mix = crate::template::tests::fill_all(MIX_TEMPLATE);
        assert!(
            mix.starts_with(
                "### <ARCH>, mix <N>: <NAME> (p = <SECURE>, resume offered <RESUME>)\n\nThe busier window: <BUSIER_USERS> users, the server <BUSIER_BUSY> % busy.\n\nThe wake-up"
            ),
            "{mix}"
        );
        assert!(mix.contains("|\n<ROWS><MISSES>\n\n<QUEUE>"), "{mix}");
        let whatif = crate::template::tests::fill_all(WHATIF_TEMPLATE);
        assert!(
            whatif.starts_with("## What-if: another key\n\n"),
            "{whatif}"
        );
        assert!(whatif.contains("|\n<ROWS>\n\n<PICTURES>"), "{whatif}");
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

    #[test]
    fn a_forecast_is_asked_for_the_mix_hsload_really_sent() {
        let load = json!({"classes": {"tls_full": {"share": 0.3}, "tls_resumed": {"share": 0.1},
                                       "plain": {"share": 0.6}}});
        let args = mix_args(&load);
        assert_eq!(args[0], "--secure-fraction");
        assert!((args[1].parse::<f64>().unwrap() - 0.4).abs() < 1e-12);
        assert_eq!(args[2], "--hit-ratio");
        assert!((args[3].parse::<f64>().unwrap() - 0.25).abs() < 1e-12);
        let plain = json!({"classes": {"plain": {"share": 1.0}}});
        assert_eq!(mix_args(&plain), ["--secure-fraction", "0"]);
    }

    #[test]
    fn the_busier_window_keeps_the_server_about_as_busy_as_asked() {
        // 1.5 % busy with one user: ten users make about 15 %
        assert_eq!(busier_users(0.015), 10);
        assert_eq!(busier_users(0.011), 14);
        // never one user again, nor an idle server's thousands
        assert_eq!(busier_users(0.2), 2);
        assert_eq!(busier_users(0.0), 150);
        assert_eq!(busier_users(f64::NAN), 2);
    }

    #[test]
    fn a_busier_window_that_fell_short_is_measured_again_in_proportion() {
        // last run's: 7 users kept nginx 8.7 % busy, so 12 make about 15 %
        assert_eq!(busier_users_again(7, 0.087), Some(12));
        // at two thirds of the aim or more, or unread, it stands
        assert_eq!(busier_users_again(7, 0.10), None);
        assert_eq!(busier_users_again(7, 0.16), None);
        assert_eq!(busier_users_again(7, f64::NAN), None);
        assert_eq!(busier_users_again(7, 0.0), None);
        // this run's Apache: 6 users 9.7 % busy make 9.28, so 9; rounded, not cut: 7 users
        // 9 % busy make 11.67, so 12
        assert_eq!(busier_users_again(6, 0.097), Some(9));
        assert_eq!(busier_users_again(7, 0.09), Some(12));
        // a reading near nothing is not scaled past four times the users
        assert_eq!(busier_users_again(7, 0.001), Some(28));
        // measured once more at most, each window in order, the last the busier one
        let mut asked = Vec::new();
        let windows = measure_busier(0.021, |n| {
            asked.push(n);
            Ok((n * 10, f64::from(n) * 0.0125))
        })
        .unwrap();
        assert_eq!(asked, [7, 12]);
        let last = windows.last().unwrap();
        assert_eq!((last.0, last.1), (12, 120));
        let once = measure_busier(0.021, |n| Ok(((), f64::from(n) * 0.02))).unwrap();
        assert_eq!(once.len(), 1);
        // a server that stays quiet is measured twice, not until it is busy
        let mut asked = Vec::new();
        measure_busier(0.021, |n| {
            asked.push(n);
            Ok(((), 0.05))
        })
        .unwrap();
        assert_eq!(asked, [7, 21]);
    }

    #[test]
    fn a_mix_measures_each_user_count_once() {
        // the windows' counts are points already; the one-user window is the plan's first
        assert_eq!(users_after_windows(&[1, 4, 16, 32], &[8, 14]), [4, 16, 32]);
        assert_eq!(users_after_windows(&[1, 4, 16, 32], &[16]), [4, 32]);
        assert_eq!(users_after_windows(&[1], &[7]), Vec::<u32>::new());
    }

    #[test]
    fn users_are_left_out_of_a_pictures_arguments() {
        let args = model_args(Path::new("p.json"), "nginx:1", 7, 0.2, SIMULATED, 2);
        let rest = without_users(args);
        assert!(!rest.iter().any(|a| a == "--users" || a == "7"), "{rest:?}");
        assert!(rest.windows(2).any(|w| w == ["--servers", "2"]), "{rest:?}");
    }

    /// How far the host's speed at a point must be from the window's for a forecast's miss
    /// to be put down to it.
    const HOST_DRIFT: f64 = 0.10;

    /// The fast validation CI runs (issue 35): the forecast from one user's window, at
    /// each of `REDUCED_LOADS` where nginx was busy less than `REDUCED_UTIL_LIMIT`, and the
    /// busier window's at each such load above it, within `REDUCED_TOLERANCE` of hsload's
    /// measurement (the windows themselves are inputs, not loads: a busier window measured
    /// again, at ~15 % busy, would check the one-user forecast twice at about 16 users). A
    /// miss is let pass only with its cause measured: the host ran the point's signatures
    /// at least `HOST_DRIFT` faster or slower than the window's (hstrace's own readings:
    /// the host's speed moves between windows on these shared VMs), and the same forecast
    /// told that speed (and the point's other work on nginx's CPU, next to none: the
    /// client is pinned apart) is within the tolerance; or the point's client delays were
    /// at least `HOST_DRIFT` off the window's (the rig's client shares one CPU among its
    /// users, unlike a remote one), and the forecast told them is within it. A broken
    /// model misses all three. Where every miss came with such a cause but neither told
    /// forecast held (in one CI run the one-user window ran its signatures 51–57 % slower
    /// than the loads, the forecast +61 … +79 %), the whole run is measured once more; a
    /// miss without a measured cause fails at once.
    /// `cargo xtask test` builds hsload and gives it as HSTRACE_HSLOAD.
    #[test]
    #[ignore = "needs root: a real nginx, hsload and the daemon (cargo xtask test runs it)"]
    fn a_reduced_validation_forecasts_within_a_quarter() {
        let bin = hstrace_tests::hstrace::hstrace_bin();
        let hsload = PathBuf::from(
            std::env::var_os("HSTRACE_HSLOAD")
                .expect("HSTRACE_HSLOAD: run it with `cargo xtask test`"),
        );
        let mut misses = reduced_misses(&bin, &hsload);
        if !misses.is_empty() && misses.iter().all(|m| m.host_drifted) {
            eprintln!("xtask: every miss came with the host's speed drifting: once more");
            misses = reduced_misses(&bin, &hsload);
        }
        assert!(
            misses.is_empty(),
            "forecast off by more than {:.0} %:\n{}",
            REDUCED_TOLERANCE * 100.0,
            misses
                .iter()
                .map(|m| m.line.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    /// A forecast of the reduced validation off by more than the tolerance, and whether the
    /// host ran that point's signatures at least `HOST_DRIFT` off the window's speed.
    struct ReducedMiss {
        line: String,
        host_drifted: bool,
    }

    /// One reduced validation, checked: the forecasts that missed, each explained.
    fn reduced_misses(bin: &Path, hsload: &Path) -> Vec<ReducedMiss> {
        let points = reduced(bin, hsload).expect("the reduced validation ran");
        // one point is the busier window; one that kept nginx less than two thirds as busy
        // as aimed at was measured again, after a first window with fewer users
        let flagged: Vec<&Point> = points.iter().filter(|p| p.busier_window).collect();
        assert_eq!(flagged.len(), 1, "one busier window among the points");
        let window = flagged[0];
        let first_window = points.iter().find(|p| {
            p.users > FORECAST_FROM_USERS
                && p.users < window.users
                && !REDUCED_LOADS.contains(&p.users)
        });
        assert!(
            window.users > FORECAST_FROM_USERS
                && (window.cpu_busy.is_nan()
                    || window.cpu_busy >= BUSIER_UTIL * 2.0 / 3.0
                    || first_window.is_some()),
            "the busier window, {} users, kept nginx {:.1} % busy and was not measured again",
            window.users,
            window.cpu_busy * 100.0
        );
        let busier = window.users;
        let first = points.first().expect("the one-user window");
        let mut misses = Vec::new();
        for p in points.iter().filter(|p| REDUCED_LOADS.contains(&p.users)) {
            // the one-user window's forecast at every load; the busier window's above it;
            // each with its window, and told the point's speed and the point's client delays
            let mut forecasts = vec![(
                "from one user",
                p.forecast_errors(),
                first,
                p.host_speed
                    .zip(p.forecast_at_speed.as_ref().map(|v| p.errors(v))),
                p.errors(&p.forecast_told_delays_alone),
            )];
            if p.users > busier {
                forecasts.push((
                    "from the busier window",
                    p.busier_errors(),
                    window,
                    p.busier_speed.zip(p.busier_at_speed_errors()),
                    p.errors(&p.busier_told_delays),
                ));
            }
            for (which, (r, x), from, at_speed, told_delays) in forecasts {
                let line = format!(
                    "N = {}: nginx busy {:.1} %, R {:.2} ms measured, X {:.1}/s; forecast {which} R {}, X {}",
                    p.users,
                    p.cpu_busy * 100.0,
                    f(&p.load["response_s"]["mean"]) * 1e3,
                    f(&p.load["throughput_per_s"]),
                    pct(r),
                    pct(x),
                );
                eprintln!("{line}");
                let off =
                    |(r, x): (f64, f64)| r.abs() > REDUCED_TOLERANCE || x.abs() > REDUCED_TOLERANCE;
                if p.cpus_busy() >= REDUCED_UTIL_LIMIT || !off((r, x)) {
                    continue;
                }
                let drifted = at_speed.is_some_and(|(k, _)| (k - 1.0).abs() >= HOST_DRIFT);
                let delays = delays_s(&p.params) / delays_s(&from.params) - 1.0;
                let client_moved = delays.abs() >= HOST_DRIFT;
                match at_speed {
                    Some((k, e)) if drifted && !off(e) => eprintln!(
                        "  the host ran the signatures {:.1} % {} than in the window; the forecast told that speed (and the point's other work, {} CPUs): R {}, X {}",
                        100.0 * (k - 1.0).abs(),
                        if k > 1.0 { "faster" } else { "slower" },
                        p.other_cpus.map_or("–".into(), |o| format!("{o:.2}")),
                        pct(e.0),
                        pct(e.1)
                    ),
                    _ if client_moved && !off(told_delays) => eprintln!(
                        "  the client's delays were {} the window's; the forecast told them: R {}, X {}",
                        pct(delays),
                        pct(told_delays.0),
                        pct(told_delays.1)
                    ),
                    // say what the host's speed and the client's delays were, and what the
                    // forecast told them gave
                    _ => misses.push(ReducedMiss {
                        line: format!(
                            "{line}; host speed {}, told it: {}; the client's delays {}, told them: R {}, X {}",
                            at_speed.map_or("–".into(), |(k, _)| pct(k - 1.0)),
                            at_speed.map_or("–".into(), |(_, (r, x))| format!("R {}, X {}", pct(r), pct(x))),
                            pct(delays),
                            pct(told_delays.0),
                            pct(told_delays.1)
                        ),
                        host_drifted: drifted || client_moved,
                    }),
                }
            }
        }
        assert!(
            points.iter().any(|p| p.cpu_busy > 0.25),
            "the run never loaded nginx past 25 %: it checked nothing"
        );
        assert!(
            points
                .iter()
                .any(|p| p.users > busier && p.cpus_busy() < REDUCED_UTIL_LIMIT),
            "no point above the busier window's {busier} users: its forecast was not checked"
        );
        misses
    }
}
