//! What observing one connection costs on the kernel this runs on: how many times
//! hstrace's BPF programs run per connection (a count of runs: it does not depend on the
//! machine's speed), the BPF run time per connection beside the traced nginx's own CPU per
//! connection, for resumed TLS 1.2, resumed TLS 1.3 and plain HTTP keep-alive; with the
//! hooks this kernel made hstrace choose. `cargo xtask vm-test` runs it inside each of
//! Debian's kernels and writes what it finds (HSTRACE_KERNEL_COST_OUT) into
//! docs/kernels.md (`--docs`). Root only; run with `cargo xtask test`.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    fs,
    io::Write as _,
    os::fd::{FromRawFd, OwnedFd},
    process::Command,
    thread,
    time::{Duration, Instant},
};

use hstrace_tests::{
    assert::{assert_accounted, str_field},
    clients::{curl, s_client},
    hstrace::Hstrace,
    procs::{children, process_run_secs},
    servers::{Nginx, TestServer},
};
use serde_json::{json, Value};

/// Rounds of each workload, each counted on its own: another process's socket I/O, forks
/// and execs only add runs, so the round with the fewest is the connection's own count
/// (inside a VM nothing else runs and the rounds agree).
const ROUNDS: usize = 4;
/// Connections per round.
const PER_ROUND: usize = 10;
/// Requests on each plain keep-alive connection.
const REQUESTS: usize = 3;

/// The kernel's BPF run-time statistics (run_cnt, run_time_ns) on while this lives: an fd
/// of BPF_ENABLE_STATS (5.8+), which keeps them on whatever another process writes to
/// kernel.bpf_stats_enabled meanwhile (a bench on this machine turns the sysctl on and off
/// around its own windows), and leaves the sysctl as it was.
struct StatsOn {
    /// held, never read: closing it turns the statistics off
    _fd: OwnedFd,
}

impl StatsOn {
    fn new() -> StatsOn {
        const BPF_ENABLE_STATS: libc::c_long = 32;
        const BPF_STATS_RUN_TIME: u32 = 0;
        // union bpf_attr's enable_stats: { __u32 type; }
        let attr = [BPF_STATS_RUN_TIME];
        // SAFETY: the kernel reads `size_of_val(&attr)` bytes of `attr`, which lives
        // through the call
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_ENABLE_STATS,
                attr.as_ptr(),
                std::mem::size_of_val(&attr),
            )
        };
        assert!(
            fd >= 0,
            "BPF_ENABLE_STATS: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: the fd was just returned to us and nothing else owns it
        StatsOn {
            _fd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
        }
    }
}

/// Run count and run time (ns) of each BPF program process `pid` holds open, by program
/// id, from its fdinfo (a program's fd shows both; a link's fd names its program but has
/// no counts). Reading them starts no process: a `bpftool` here would fire the fork and
/// exec hooks inside the window it measures.
fn counts(pid: u32) -> BTreeMap<u64, (u64, u64)> {
    let mut by_id = BTreeMap::new();
    for fd in fs::read_dir(format!("/proc/{pid}/fdinfo")).expect("hstrace's fdinfo") {
        let Ok(text) = fs::read_to_string(fd.unwrap().path()) else {
            continue;
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(id), Some(cnt), Some(ns)) =
            (field("prog_id:"), field("run_cnt:"), field("run_time_ns:"))
        {
            by_id.insert(id, (cnt, ns));
        }
    }
    by_id
}

/// Every BPF program's name by id (`bpftool prog show`), read outside the counted windows.
fn program_names() -> BTreeMap<u64, String> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "-j"])
        .output()
        .expect("bpftool (Debian's bpftool package)");
    let all: Value = serde_json::from_slice(&out.stdout).expect("bpftool's JSON");
    all.as_array()
        .expect("a list of programs")
        .iter()
        .filter_map(|p| Some((p["id"].as_u64()?, p["name"].as_str()?.to_string())))
        .collect()
}

/// CPU seconds nginx's processes (the master and its workers) have run so far.
fn nginx_cpu_secs(nginx: &TestServer) -> f64 {
    let master = nginx.master_pid();
    std::iter::once(master)
        .chain(children(master))
        .filter_map(|p| process_run_secs(p).ok())
        .sum()
}

/// The workloads, in the order they run.
#[derive(Clone, Copy, Debug)]
enum Workload {
    /// TLS 1.2 resumed by the ticket of one earlier full handshake
    Tls12Resumed,
    /// TLS 1.3 resumed by the PSK (ticket) of one earlier full handshake
    Tls13Resumed,
    /// plain HTTP/1.1, `REQUESTS` requests on each connection
    PlainKeepAlive,
}

impl Workload {
    const ALL: [Workload; 3] = [
        Workload::Tls12Resumed,
        Workload::Tls13Resumed,
        Workload::PlainKeepAlive,
    ];

    fn name(self) -> &'static str {
        match self {
            Workload::Tls12Resumed => "resumed TLS 1.2",
            Workload::Tls13Resumed => "resumed TLS 1.3",
            Workload::PlainKeepAlive => "plain keep-alive",
        }
    }

    /// s_client's version flag and its word for the version.
    fn tls(self) -> Option<(&'static str, &'static str)> {
        match self {
            Workload::Tls12Resumed => Some(("-tls1_2", "TLSv1.2")),
            Workload::Tls13Resumed => Some(("-tls1_3", "TLSv1.3")),
            Workload::PlainKeepAlive => None,
        }
    }

    /// Before the counted rounds: the full handshake whose session the rounds resume.
    fn prepare(self, nginx: &TestServer, sess: &str) {
        if let Some((flag, word)) = self.tls() {
            let out = s_client(nginx.port, &[flag, "-sess_out", sess]);
            assert!(out.contains(&format!("New, {word}")), "{out}");
        }
    }

    /// One connection of the workload, by one client process (s_client or curl).
    fn connect_once(self, nginx: &TestServer, sess: &str) {
        match self.tls() {
            Some((flag, word)) => {
                let out = s_client(nginx.port, &[flag, "-sess_in", sess]);
                assert!(
                    out.contains(&format!("Reused, {word}")),
                    "not resumed: {out}"
                );
            }
            None => {
                let urls: Vec<String> = (0..REQUESTS)
                    .map(|i| format!("http://127.0.0.1:{}/{i}", nginx.plain_port))
                    .collect();
                assert_eq!(curl(&[], &urls), "plain\n".repeat(REQUESTS));
            }
        }
    }
}

/// One round's counts: (program name, runs, ns) gained, and its connections.
struct Round {
    gained: BTreeMap<String, (u64, u64)>,
    connections: usize,
}

impl Round {
    fn runs(&self) -> u64 {
        self.gained.values().map(|(c, _)| c).sum()
    }

    fn ns(&self) -> u64 {
        self.gained.values().map(|(_, t)| t).sum()
    }
}

/// One workload's figures.
struct Measured {
    workload: Workload,
    rounds: Vec<Round>,
    /// nginx's processes' CPU over every round, ns
    server_cpu_ns: f64,
    seconds: f64,
}

impl Measured {
    fn connections(&self) -> usize {
        self.rounds.iter().map(|r| r.connections).sum()
    }

    /// The round with the fewest runs (the others may hold other processes' runs).
    fn clean(&self) -> &Round {
        self.rounds.iter().min_by_key(|r| r.runs()).expect("rounds")
    }

    fn runs_per_conn(&self) -> f64 {
        let c = self.clean();
        c.runs() as f64 / c.connections as f64
    }

    fn bpf_ns_per_conn(&self) -> f64 {
        let c = self.clean();
        c.ns() as f64 / c.connections as f64
    }

    fn server_cpu_ns_per_conn(&self) -> f64 {
        self.server_cpu_ns / self.connections() as f64
    }

    /// Runs per connection of each program that ran, in the clean round.
    fn programs(&self) -> BTreeMap<String, f64> {
        let c = self.clean();
        c.gained
            .iter()
            .filter(|(_, (runs, _))| *runs > 0)
            .map(|(name, (runs, _))| (name.clone(), *runs as f64 / c.connections as f64))
            .collect()
    }

    fn json(&self) -> Value {
        let round = |r: &Round| {
            json!({
                "connections": r.connections,
                "runs_per_conn": r.runs() as f64 / r.connections as f64,
                "bpf_ns_per_conn": r.ns() as f64 / r.connections as f64,
            })
        };
        json!({
            "name": self.workload.name(),
            "connections": self.connections(),
            "runs_per_conn": self.runs_per_conn(),
            "bpf_ns_per_conn": self.bpf_ns_per_conn(),
            "server_cpu_ns_per_conn": self.server_cpu_ns_per_conn(),
            "programs": self.programs(),
            "rounds": self.rounds.iter().map(round).collect::<Vec<_>>(),
            "seconds": self.seconds,
        })
    }
}

/// Let the last connection's closing state changes reach the kernel's hooks before a count.
fn settle() {
    thread::sleep(Duration::from_millis(200));
}

/// Drive `workload`'s rounds against `nginx`, counting the programs hstrace (`pid`) holds.
fn measure(
    workload: Workload,
    nginx: &TestServer,
    pid: u32,
    names: &mut BTreeMap<u64, String>,
) -> Measured {
    let started = Instant::now();
    let sess = nginx
        .dir
        .join(format!("{workload:?}.sess"))
        .display()
        .to_string();
    workload.prepare(nginx, &sess);
    settle();
    let mut rounds = Vec::new();
    let mut server_cpu = 0.0;
    for _ in 0..ROUNDS {
        let cpu0 = nginx_cpu_secs(nginx);
        let before = counts(pid);
        for _ in 0..PER_ROUND {
            workload.connect_once(nginx, &sess);
        }
        settle();
        let after = counts(pid);
        server_cpu += nginx_cpu_secs(nginx) - cpu0;
        if after.keys().any(|id| !names.contains_key(id)) {
            *names = program_names();
        }
        let mut gained = BTreeMap::new();
        for (id, (c1, t1)) in &after {
            let (c0, t0) = before.get(id).copied().unwrap_or((0, 0));
            let name = names
                .get(id)
                .cloned()
                .unwrap_or_else(|| format!("prog{id}"));
            let e = gained.entry(name).or_insert((0, 0));
            e.0 += c1 - c0;
            e.1 += t1 - t0;
        }
        rounds.push(Round {
            gained,
            connections: PER_ROUND,
        });
    }
    Measured {
        workload,
        rounds,
        server_cpu_ns: server_cpu * 1e9,
        seconds: started.elapsed().as_secs_f64(),
    }
}

/// From -v's stderr: each "probe group GROUP: [HOOKS]" line's group and hooks (the hook
/// family included, which the health line's names leave out).
fn probe_lines(stderr: &str) -> BTreeMap<String, String> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = &l[l.find("probe group ")? + "probe group ".len()..];
            let (group, hooks) = rest.split_once(": ")?;
            (!group.contains(' ') && hooks.starts_with('['))
                .then(|| (group.to_string(), hooks.trim().to_string()))
        })
        .collect()
}

/// From -v's stderr: the "BPF build: …" line's words after the colon.
fn build_line(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|l| {
        let at = l.find("BPF build: ")?;
        Some(l[at + "BPF build: ".len()..].trim().to_string())
    })
}

/// The readable table: the hooks, then each workload's figures and its programs' runs.
/// Written to stderr directly, past libtest's capture: the VM's log keeps it.
fn print_table(release: &str, build: &str, probes: &BTreeMap<String, String>, m: &[Measured]) {
    let mut t = format!("\nkernel {release}, BPF build {build}\n");
    for (group, hooks) in probes {
        let _ = writeln!(t, "  {group:<10} {hooks}");
    }
    let _ = writeln!(
        t,
        "\n{:<18} {:>6} {:>10} {:>12} {:>18}   runs/conn of each round",
        "workload", "conns", "runs/conn", "BPF µs/conn", "nginx CPU µs/conn"
    );
    for w in m {
        let each: Vec<String> = w
            .rounds
            .iter()
            .map(|r| format!("{:.1}", r.runs() as f64 / r.connections as f64))
            .collect();
        let _ = writeln!(
            t,
            "{:<18} {:>6} {:>10.1} {:>12.2} {:>18.1}   {} ({:.1} s)",
            w.workload.name(),
            w.connections(),
            w.runs_per_conn(),
            w.bpf_ns_per_conn() / 1e3,
            w.server_cpu_ns_per_conn() / 1e3,
            each.join(" "),
            w.seconds
        );
        for (name, runs) in w.programs() {
            let _ = writeln!(t, "    {name:<22} {runs:>6.2}");
        }
    }
    let _ = std::io::stderr().write_all(format!("{t}\n").as_bytes());
}

/// The records of one workload are the ones expected, one per connection, of its kind.
fn check_records(out: &hstrace_tests::hstrace::Traced, nginx: &TestServer, n: usize) {
    let listing = || {
        out.records
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let tls_port = format!("127.0.0.1:{}", nginx.port);
    let plain_port = format!("127.0.0.1:{}", nginx.plain_port);
    for (version, resumption) in [("1.2", "ticket"), ("1.3", "psk")] {
        let mine: Vec<&Value> = out
            .records
            .iter()
            .filter(|r| str_field(r, "tls_version") == Some(version))
            .collect();
        let kinds: Vec<&str> = mine.iter().filter_map(|r| str_field(r, "kind")).collect();
        let mut want = vec!["full"];
        want.extend(std::iter::repeat_n("resumed", n));
        assert_eq!(
            kinds,
            want,
            "TLS {version}: one full, then every resumed one:\n{}",
            listing()
        );
        for r in &mine[1..] {
            assert_eq!(str_field(r, "resumption"), Some(resumption), "{r}");
            assert_eq!(str_field(r, "local"), Some(tls_port.as_str()), "{r}");
        }
    }
    let plain: Vec<&Value> = out
        .records
        .iter()
        .filter(|r| str_field(r, "kind") == Some("plain"))
        .collect();
    assert_eq!(
        plain.len(),
        n,
        "plain keep-alive connections:\n{}",
        listing()
    );
    for r in &plain {
        assert_eq!(str_field(r, "local"), Some(plain_port.as_str()), "{r}");
        let close = out
            .closes
            .iter()
            .find(|c| c["conn_id"] == r["conn_id"])
            .unwrap_or_else(|| panic!("no close line: {r}"));
        assert_eq!(
            close["exchanges"].as_u64(),
            Some(REQUESTS as u64),
            "requests on the connection: {close}"
        );
    }
    // nothing else: 1 + n per TLS version, n plain
    assert_eq!(out.records.len(), 2 + 3 * n, "{}", listing());
    // nginx's own log of session reuse: the full handshake, then every resumed one, twice
    let mut reused = vec![false];
    reused.extend(std::iter::repeat_n(true, n));
    reused = [reused.clone(), reused].concat();
    assert_eq!(nginx.resumed_log(), reused, "nginx's $ssl_session_reused");
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn hook_runs_per_connection() {
    let started = Instant::now();
    let release = fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap()
        .trim()
        .to_string();
    let nginx = Nginx::start("kernel-cost", 2);
    let master = nginx.master_pid().to_string();
    let tracer = Hstrace::start(&["--pid", &master, "-v"]);
    let pid = tracer.pid();
    let mut names = program_names();
    let measured: Vec<Measured> = {
        let _stats = StatsOn::new();
        Workload::ALL
            .iter()
            .map(|w| measure(*w, &nginx, pid, &mut names))
            .collect()
    };
    let out = tracer.stop();
    assert!(out.success, "hstrace failed:\n{}", out.stderr);
    let h = &out.health;
    let probes = probe_lines(&out.stderr);
    let build = h["bpf_build"].as_str().unwrap_or("?").to_string();
    print_table(&release, &build, &probes, &measured);

    // the hooks: every group of the probe table chosen, and -v and the health line agree
    let chosen = h["probes"]
        .as_object()
        .unwrap_or_else(|| panic!("no probes in the health line: {h}"));
    let unavailable: Vec<&String> = chosen
        .iter()
        .filter(|(_, hook)| !hook.is_string())
        .map(|(g, _)| g)
        .collect();
    assert!(
        unavailable.is_empty(),
        "groups without a hook: {unavailable:?}: {h}"
    );
    let groups: BTreeSet<&String> = chosen.keys().collect();
    assert_eq!(
        groups,
        probes.keys().collect::<BTreeSet<_>>(),
        "-v's probe group lines against the health line:\n{}",
        out.stderr
    );
    for g in ["tcp_state", "accept", "read", "send", "arrival", "close"] {
        assert!(chosen.contains_key(g), "no group {g}: {h}");
    }
    let build_said = build_line(&out.stderr)
        .unwrap_or_else(|| panic!("no \"BPF build:\" line in -v:\n{}", out.stderr));
    assert!(build_said.starts_with(&build), "{build_said} vs {h}");

    // every connection reported, of its kind, and accounted for
    let n = ROUNDS * PER_ROUND;
    check_records(&out, &nginx, n);
    assert_accounted(h, false);
    let all = (2 + 3 * n) as u64;
    assert_eq!(h["accepted"].as_u64(), Some(all), "{h}");
    assert_eq!(h["reported"].as_u64(), Some(all), "{h}");
    for (cause, lost) in h["lost"].as_object().expect("lost") {
        assert_eq!(lost.as_u64(), Some(0), "lost to {cause}: {h}");
    }
    for m in &measured {
        assert!(
            m.runs_per_conn() > 0.0,
            "{}: no program ran",
            m.workload.name()
        );
        assert!(
            m.bpf_ns_per_conn() > 0.0,
            "{}: no BPF time",
            m.workload.name()
        );
    }

    if let Some(path) = std::env::var_os("HSTRACE_KERNEL_COST_OUT") {
        let doc = json!({
            "release": release,
            "bpf_build": build,
            "bpf_build_line": build_said,
            "kernel_lacks": h["kernel_lacks"],
            "probes": h["probes"],
            "probe_hooks": probes,
            "rounds": ROUNDS,
            "connections_per_round": PER_ROUND,
            "requests_per_keep_alive_connection": REQUESTS,
            "workloads": measured.iter().map(Measured::json).collect::<Vec<_>>(),
            "seconds": started.elapsed().as_secs_f64(),
        });
        fs::write(&path, serde_json::to_string_pretty(&doc).unwrap() + "\n")
            .unwrap_or_else(|e| panic!("{}: {e}", path.to_string_lossy()));
    }
}
