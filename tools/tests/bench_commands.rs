//! `hstrace-bench`, the parts of `cargo xtask bench` that need hstrace's insides, works
//! and measures something: the userspace pipeline on synthetic records, the idle sweep
//! over a filled connection map and the empty programs at trace's hooks (which load BPF
//! objects: needs root, run through `cargo xtask test`). Their speed is recorded by the
//! bench, not asserted here.

use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_hstrace-bench");

fn number(args: &[&str]) -> f64 {
    let out = Command::new(BENCH).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "hstrace-bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("hstrace-bench {args:?} printed {text:?}"))
}

#[test]
fn pipeline_benchmark_parses_synthetic_connections() {
    let per_sec = number(&["pipeline", "--records", "20000"]);
    assert!(per_sec > 0.0 && per_sec.is_finite(), "{per_sec}");
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn sweep_benchmark_walks_a_full_map_and_keeps_live_connections() {
    // sweep fails if the sweep takes any of the live connections it was given, or
    // reports, evicts or counts a socket still waiting in an accept queue
    let ms = number(&["sweep", "--conns", "4096"]);
    assert!(ms > 0.0 && ms.is_finite(), "{ms}");
}

#[test]
fn pipeline_benchmark_through_the_daemons_sinks_counts_every_connection() {
    // pipeline --serve fails unless the metrics counted every synthetic connection
    let per_sec = number(&["pipeline", "--records", "20000", "--serve"]);
    assert!(per_sec > 0.0 && per_sec.is_finite(), "{per_sec}");
}

/// Run `hstrace-bench hooks-alone` with `args` until it says it is attached: the hooks it
/// names, after checking that it holds one attachment (a BPF link) per hook and stops
/// cleanly on SIGINT.
fn hooks_held(args: &[&str]) -> Vec<String> {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let mut child = Command::new(BENCH)
        .arg("hooks-alone")
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let said = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("hstrace: tracing"))
        .expect("hstrace-bench hooks-alone exited before attaching");
    // "hstrace: tracing (empty programs at inet_sock_set_state, sys_exit_accept4, ...)"
    let hooks: Vec<String> = said
        .split_once(" at ")
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{said}"))
        .split(", ")
        .map(str::to_string)
        .collect();
    let links = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .filter_map(|fd| std::fs::read_to_string(fd.ok()?.path()).ok())
        .filter(|info| info.contains("link_type:"))
        .count();
    assert_eq!(links, hooks.len(), "{said}");
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    // bounded: a signal lost (sent before the handler was in place, where the test's own
    // parent left SIGINT ignored) would otherwise hang the suite
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("hstrace-bench hooks-alone did not stop within 30 s of SIGINT: {said}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    hooks
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn hooks_alone_attaches_an_empty_program_at_each_hook_and_stops_on_sigint() {
    let hooks = hooks_held(&[]);
    // the socket hooks every kernel here gives, and accept
    for hook in [
        "inet_sock_set_state",
        "sock_recv_length",
        "sock_send_length",
        "sys_exit_accept4",
    ] {
        assert!(
            hooks.iter().any(|h| h == hook),
            "{hook} missing from {hooks:?}"
        );
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn hooks_alone_splits_the_syscall_tracepoints_from_the_other_hooks() {
    let all = hooks_held(&["--hooks", "all"]);
    let syscalls = hooks_held(&["--hooks", "syscalls"]);
    let others = hooks_held(&["--hooks", "not-syscalls"]);
    // accept is hooked at its syscall on this kernel (no fexit): the bench's split needs it
    assert!(
        syscalls.iter().any(|h| h == "sys_exit_accept4"),
        "{syscalls:?}"
    );
    assert!(
        syscalls.iter().all(|h| h.starts_with("sys_")),
        "{syscalls:?}"
    );
    assert!(others.iter().all(|h| !h.starts_with("sys_")), "{others:?}");
    // the two halves are all the hooks, each once
    let mut both: Vec<&String> = syscalls.iter().chain(&others).collect();
    let mut every: Vec<&String> = all.iter().collect();
    both.sort();
    every.sort();
    assert_eq!(both, every);
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn hooks_alone_control_holds_only_hooks_no_connection_fires() {
    let all = hooks_held(&["--hooks", "all"]);
    let mut quiet = hooks_held(&["--hooks", "quiet"]);
    quiet.sort();
    // the bench's control: new processes and execs, which its loads never make
    assert_eq!(quiet, ["sched_process_exec", "sched_process_fork"]);
    assert!(quiet.iter().all(|h| all.contains(h)), "{quiet:?} {all:?}");
}
