//! Following the traced processes as they change: nginx's reload, Apache prefork's
//! children forked by a graceful restart, and `trace` ending when its `--pid` exits. Root
//! only; run with `cargo xtask test`.

use std::{collections::BTreeSet, process::Command, thread, time::Duration};

use hstrace_tests::{
    assert::{check_stages, str_field},
    clients::s_client,
    hstrace::{hstrace_run, Hstrace},
    servers::{Apache, Nginx},
    util::wait_for,
};

/// `nginx -s reload` while tracing: the new workers are traced (uprobes too), nothing
/// crashes, nothing is counted twice.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn nginx_reload_while_tracing() {
    let nginx = Nginx::start("reload", 2);
    let master = nginx.master_pid().to_string();
    let tracer = Hstrace::start(&["--pid", &master]);
    let old = nginx.worker_pids();
    for _ in 0..5 {
        assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLSv1.3"));
    }
    // SAFETY: plain kill(2): SIGHUP is nginx's reload
    unsafe { libc::kill(nginx.master_pid() as i32, libc::SIGHUP) };
    let start = std::time::Instant::now();
    while nginx.worker_pids().intersection(&old).count() > 0 || nginx.worker_pids().len() != 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nginx did not replace its workers"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let new = nginx.worker_pids();
    // the once-a-second scan attaches the uprobes to the new workers
    thread::sleep(Duration::from_millis(1500));
    for _ in 0..5 {
        assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLSv1.3"));
    }
    let out = tracer.stop();
    assert!(out.success, "{}", out.stderr);
    assert_eq!(out.records.len(), 10, "{:?}", out.records);
    let ids: BTreeSet<u64> = out
        .records
        .iter()
        .map(|r| r["conn_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids.len(), 10, "a connection reported twice");
    for (i, r) in out.records.iter().enumerate() {
        let pid = r["pid"].as_u64().unwrap() as u32;
        let workers = if i < 5 { &old } else { &new };
        assert!(
            workers.contains(&pid),
            "record {i} from pid {pid}, not {workers:?}: {r}"
        );
        assert_eq!(str_field(r, "kind"), Some("full"), "{r}");
        assert_eq!(str_field(r, "hs_done_from"), Some("ssl"), "{r}");
    }
}

/// Apache prefork: each child process serves one connection at a time. The children a
/// graceful restart forks while tracing get their uprobes, and every TLS 1.3 record has
/// its response where it belongs, in both probe modes.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn apache_prefork_children_forked_while_tracing() {
    for (mode, from) in [("handshake", "ssl"), ("none", "wire")] {
        let server = Apache::start_prefork(&format!("apache-prefork-{mode}"), 3);
        let master = server.master_pid().to_string();
        let tracer = Hstrace::start(&["--pid", &master, "--uprobes", mode]);
        let connect = |n| {
            for _ in 0..n {
                let out = s_client(server.port, &["-tls1_3"]);
                assert!(out.contains("New, TLSv1.3"), "{out}");
            }
        };
        connect(10);
        let before = server.worker_pids();
        // SAFETY: plain kill(2): SIGUSR1 is Apache's graceful restart
        unsafe { libc::kill(server.master_pid() as i32, libc::SIGUSR1) };
        wait_for("new children", Duration::from_secs(15), || {
            let now = server.worker_pids();
            now.len() == 3 && now.is_disjoint(&before)
        });
        connect(10);
        let out = tracer.stop();
        assert_eq!(out.records.len(), 20, "--uprobes {mode}: {:?}", out.records);
        for r in &out.records {
            check_stages(r);
            assert_eq!(str_field(r, "kind"), Some("full"), "{r}");
            assert_eq!(str_field(r, "hs_done_from"), Some(from), "{r}");
            if mode == "handshake" {
                assert!(r["ssl_calls"].as_u64() >= Some(1), "{r}");
            }
            let ns = |s: &str| r["stages_ns"][s].as_u64().unwrap_or(0);
            assert!(ns("response") > 0, "--uprobes {mode}: no response: {r}");
            assert!(
                ns("server_flight_2") < 20_000_000,
                "--uprobes {mode}: the response in server_flight_2: {r}"
            );
        }
    }
}

/// `--pid` of a process that exits ends `trace`, saying why (the --duration is only a
/// bound: reaching it would not print the line).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn trace_ends_when_its_pid_exits() {
    let mut short = Command::new("sleep").arg("2").spawn().unwrap();
    let pid = short.id().to_string();
    let (ok, err) = hstrace_run(&["trace", "--pid", &pid, "--duration", "60"]);
    let _ = short.wait();
    assert!(ok, "{err}");
    assert!(
        err.contains(&format!("pid {pid} exited, and every process it started")),
        "{err}"
    );
}
