//! The server matrix: every handshake kind (TLS 1.2 full and resumed by session id and by
//! ticket, TLS 1.3 full and PSK) and three failures, through nginx, Apache (event and
//! prefork), HAProxy, Node.js, Go and a server with OpenSSL linked in statically, with the
//! uprobes, wire only and through the syscall hooks; each record checked field by field
//! and against the server's own log of session reuse. Root only; run with
//! `cargo xtask test`.

use hstrace_tests::{
    assert::{assert_has_stages, check_stages, str_field},
    clients::{raw_exchange, s_client},
    fixtures::client_hello_record,
    hstrace::Hstrace,
    servers::{Apache, GoServer, Haproxy, Nginx, Node, StaticTlsServer, TestServer},
};
use serde_json::Value;

const TLS12_CIPHER: &str = "ECDHE-RSA-AES128-GCM-SHA256";
const TLS12_CIPHER_IANA: &str = "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256";
const TLS13_SUITE: &str = "TLS_AES_128_GCM_SHA256";

/// What one client connection must produce.
struct Expect {
    what: &'static str,
    version: Option<&'static str>,
    kind: &'static str,
    offered: bool,
    resumption: Option<&'static str>,
    cipher: Option<&'static str>,
    failure: Option<&'static str>,
}

const fn ok(
    what: &'static str,
    version: &'static str,
    kind: &'static str,
    offered: bool,
    resumption: Option<&'static str>,
    cipher: &'static str,
) -> Expect {
    Expect {
        what,
        version: Some(version),
        kind,
        offered,
        resumption,
        cipher: Some(cipher),
        failure: None,
    }
}

const fn failed(what: &'static str, failure: &'static str) -> Expect {
    Expect {
        what,
        version: None,
        kind: "failed",
        offered: false,
        resumption: None,
        cipher: None,
        failure: Some(failure),
    }
}

/// Drive the six handshake kinds and three failures; returns what each must look like.
fn drive_all_kinds(server: &TestServer) -> Vec<Expect> {
    let port = server.port;
    let s = |f: &str| server.dir.join(f).display().to_string();
    let (id12, tk12, ps13) = (s("id12.sess"), s("tk12.sess"), s("ps13.sess"));
    let tls12 = ["-tls1_2", "-cipher", TLS12_CIPHER];
    let tls13 = ["-tls1_3", "-ciphersuites", TLS13_SUITE];
    let run = |base: &[&str], extra: &[&str], reused: bool| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let out = s_client(port, &args);
        let want = if reused { "Reused, " } else { "New, " };
        assert!(
            out.contains(want),
            "s_client {args:?} did not report {want:?}:\n{out}"
        );
    };
    // without a session-id cache, the server gives no id to resume: two full handshakes
    let ids = server.software.resumes_session_ids();
    run(&tls12, &["-no_ticket", "-sess_out", &id12], false);
    if ids {
        run(&tls12, &["-no_ticket", "-sess_in", &id12], true);
    } else {
        run(&tls12, &["-no_ticket"], false);
    }
    run(&tls12, &["-sess_out", &tk12], false);
    run(&tls12, &["-sess_in", &tk12], true);
    run(&tls13, &["-sess_out", &ps13], false);
    run(&tls13, &["-sess_in", &ps13], true);
    // TLS 1.1 is not enabled: the server answers the ClientHello with an alert
    let out = s_client(port, &["-tls1_1"]);
    assert!(
        !out.contains("New, TLS"),
        "TLS 1.1 unexpectedly accepted:\n{out}"
    );
    // garbage instead of a ClientHello: plain HTTP to the TLS port
    raw_exchange(port, b"GET / HTTP/1.0\r\n\r\n");
    // a client that sends its ClientHello, reads the server's first flight and leaves
    let flight = raw_exchange(port, &client_hello_record("tls12_full.client_hello.hex"));
    assert!(flight.first() == Some(&22), "no ServerHello came back");
    vec![
        ok(
            "TLS 1.2 full (session id)",
            "1.2",
            "full",
            false,
            None,
            TLS12_CIPHER_IANA,
        ),
        if ids {
            ok(
                "TLS 1.2 resumed by session id",
                "1.2",
                "resumed",
                true,
                Some("session_id"),
                TLS12_CIPHER_IANA,
            )
        } else {
            ok(
                "TLS 1.2 full, no session id to resume",
                "1.2",
                "full",
                false,
                None,
                TLS12_CIPHER_IANA,
            )
        },
        ok(
            "TLS 1.2 full (ticket)",
            "1.2",
            "full",
            false,
            None,
            TLS12_CIPHER_IANA,
        ),
        ok(
            "TLS 1.2 resumed by ticket",
            "1.2",
            "resumed",
            true,
            Some("ticket"),
            TLS12_CIPHER_IANA,
        ),
        ok("TLS 1.3 full", "1.3", "full", false, None, TLS13_SUITE),
        ok(
            "TLS 1.3 resumed (PSK)",
            "1.3",
            "resumed",
            true,
            Some("psk"),
            TLS13_SUITE,
        ),
        failed("TLS 1.1 refused", "alert"),
        failed("plain HTTP on the TLS port", "not_tls"),
        failed(
            "client left after the server's first flight",
            "client_closed",
        ),
    ]
}

/// `about`: what else the run said of this connection (its close line, the exit totals),
/// printed with any failure.
fn check_record(r: &Value, e: &Expect, server: &TestServer, hs_done_from: &str, about: &str) {
    let ctx = format!("{}: {r}\n{about}", e.what);
    assert_eq!(str_field(r, "kind"), Some(e.kind), "kind, {ctx}");
    assert_eq!(str_field(r, "protocol"), Some("tls"), "{ctx}");
    assert_eq!(str_field(r, "comm"), Some(server.comm()), "{ctx}");
    let pid = r["pid"].as_u64().unwrap() as u32;
    assert!(
        server.worker_pids().contains(&pid),
        "pid {pid} is not a worker, {ctx}"
    );
    assert_eq!(
        str_field(r, "local"),
        Some(format!("127.0.0.1:{}", server.port).as_str()),
        "{ctx}"
    );
    assert!(
        str_field(r, "peer").is_some_and(|p| p.starts_with("127.0.0.1:")),
        "{ctx}"
    );
    let time = str_field(r, "time").unwrap();
    assert!(
        time.len() == 27 && time.ends_with('Z') && time.starts_with("20"),
        "time {time}, {ctx}"
    );
    assert_eq!(
        r["resumption_offered"].as_bool(),
        Some(e.offered),
        "resumption_offered, {ctx}"
    );
    assert_eq!(
        str_field(r, "resumption"),
        e.resumption,
        "resumption, {ctx}"
    );
    assert_eq!(str_field(r, "failure"), e.failure, "failure, {ctx}");
    check_stages(r);
    if e.kind == "failed" {
        assert!(r.get("handshake_ns").is_none(), "{ctx}");
        assert!(str_field(r, "failed_in").is_some(), "{ctx}");
        return;
    }
    assert_eq!(str_field(r, "tls_version"), e.version, "tls_version, {ctx}");
    assert_eq!(str_field(r, "cipher"), e.cipher, "cipher, {ctx}");
    assert_eq!(str_field(r, "sni"), Some("demo.test"), "sni, {ctx}");
    assert_eq!(str_field(r, "alpn"), Some("http/1.1"), "alpn, {ctx}");
    assert_eq!(str_field(r, "hs_done_from"), Some(hs_done_from), "{ctx}");
    // the key exchange: s_client (OpenSSL 3.0) sends an x25519 share, which every server
    // here takes, also when it resumes (psk_dhe_ke); a TLS 1.2 resumption exchanges no
    // key; a TLS 1.2 full handshake's ECDHE group is read from its ServerKeyExchange
    let ecdhe = e.cipher.is_some_and(|c| c.starts_with("TLS_ECDHE_"));
    let group = match (e.version, e.kind) {
        (Some("1.3"), _) => Some("x25519"),
        (Some("1.2"), "resumed") => Some("none"),
        (Some("1.2"), "full") if ecdhe => Some("x25519"),
        _ => None,
    };
    assert_eq!(str_field(r, "tls_group"), group, "tls_group, {ctx}");
    assert_eq!(r["pq_offered"].as_bool(), Some(false), "{ctx}");
    let prefix = if e.version == Some("1.3") {
        "t13d"
    } else {
        "t12d"
    };
    assert!(
        str_field(r, "ja4").is_some_and(|j| j.starts_with(prefix) && j.len() == 36),
        "ja4, {ctx}"
    );
    // s_client sends one HTTP/1.0 request: the first request and response are in the record
    let want = [
        "accept_queue",
        "wait_client_hello",
        "client_hello_queue",
        "server_flight_1",
        "wait_client_flight_2",
        "server_flight_2",
        "wait_request",
        "response",
    ];
    assert_has_stages(r, &want, &ctx);
    let stages = r["stages_ns"].as_object().unwrap();
    let classes = r["stage_classes"].as_object().unwrap();
    assert_eq!(
        classes.len(),
        stages.len(),
        "a class for every stage, {ctx}"
    );
    for (s, class) in [
        ("server_flight_1", "service"),
        ("wait_client_flight_2", "delay"),
        ("response", "service"),
    ] {
        assert_eq!(classes[s], class, "{ctx}");
    }
}

/// Drive every kind through `server` traced with `extra` arguments and check each record;
/// returns hstrace's stderr.
fn six_kinds(server: &TestServer, extra: &[&str], hs_done_from: &str) -> String {
    let master = server.master_pid().to_string();
    let mut args = vec!["--pid", master.as_str()];
    args.extend_from_slice(extra);
    let tracer = Hstrace::start(&args);
    let expect = drive_all_kinds(server);
    let out = tracer.stop();
    assert!(out.success, "hstrace failed:\n{}", out.stderr);
    let listing: Vec<String> = out.records.iter().map(Value::to_string).collect();
    assert_eq!(
        out.records.len(),
        expect.len(),
        "one record per connection expected:\n{}",
        listing.join("\n")
    );
    for (r, e) in out.records.iter().zip(&expect) {
        let close = out.closes.iter().find(|c| c["conn_id"] == r["conn_id"]);
        let about = format!(
            "its close line: {}\nthe exit totals: {}",
            close.unwrap_or(&Value::Null),
            out.health
        );
        check_record(r, e, server, hs_done_from, &about);
    }
    // one close line per connection: one exchange (HTTP/1.0) when the handshake completed
    assert_eq!(out.closes.len(), expect.len(), "{:?}", out.closes);
    for (r, e) in out.records.iter().zip(&expect) {
        let close = out
            .closes
            .iter()
            .find(|c| c["conn_id"] == r["conn_id"])
            .expect("its close line");
        // (plain HTTP on the TLS port is a request: one exchange, answered or not)
        let want = if e.kind != "failed" || e.failure == Some("not_tls") {
            1
        } else {
            0
        };
        assert_eq!(
            close["exchanges"].as_u64(),
            Some(want),
            "{}: {close}",
            e.what
        );
        assert!(
            close["bytes_in"].as_u64().unwrap() > 0 && close["duration_ns"].as_u64().unwrap() > 0,
            "{close}"
        );
    }
    assert!(
        out.stderr.contains("records lost (ring buffer full) 0,"),
        "{}",
        out.stderr
    );
    // the server's own view of each completed handshake agrees on resumption, 100 %
    let reused = server.resumed_log();
    let traced: Vec<bool> = out
        .records
        .iter()
        .filter(|r| r["kind"] != "failed")
        .map(|r| r["kind"] == "resumed")
        .collect();
    assert_eq!(
        traced, reused,
        "kind vs the server's own log of session reuse"
    );
    out.stderr
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn six_handshake_kinds_and_failures_with_uprobes() {
    six_kinds(&Nginx::start("kinds-uprobes", 2), &[], "ssl");
}

/// Kernels with neither the socket-layer read/write tracepoints (6.3+) nor hooks on kernel
/// functions (kprobes, fentry): the same records come from the syscall tracepoints.
/// (Arrivals keep their hook: without one, each wait and its queue are one stage.)
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn six_kinds_through_the_syscall_hooks() {
    let mut args = vec!["-v"];
    for hook in [
        "sock_recv_length",
        "sock_send_length",
        "inet_recvmsg",
        "inet6_recvmsg",
        "tcp_sendmsg",
        "inet_csk_accept",
    ] {
        args.extend(["--avoid-hook", hook]);
    }
    let stderr = six_kinds(&Nginx::start("kinds-syscalls", 2), &args, "ssl");
    for group in [
        r#"probe group read: [Tracepoint("syscalls", "sys_enter_read")"#,
        r#"probe group send: [Tracepoint("syscalls", "sys_enter_write")"#,
        r#"probe group accept: [Tracepoint("syscalls", "sys_exit_accept4")"#,
    ] {
        assert!(stderr.contains(group), "{group} not chosen:\n{stderr}");
    }
}

/// Can this kernel hook its functions (fentry, kprobes)? Told apart from hstrace's own
/// probing by what ftrace lists: these machines' kernel lists none.
fn kernel_functions_hookable() -> bool {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .any(|t| {
            std::fs::read_to_string(format!("{t}/available_filter_functions"))
                .map(|f| {
                    f.lines()
                        .any(|l| l.split_whitespace().next() == Some("inet_recvmsg"))
                })
                .unwrap_or(false)
        })
}

/// The six kinds with the tracepoints that would come first passed over, so that reads,
/// writes, accepts and arrivals are hooked on kernel functions, by `family` (fentry or
/// kprobe): where the kernel can (Debian's kernels), that family is chosen; where it can't
/// (these machines), the syscall tracepoints are. Both give the same records.
fn six_kinds_on_kernel_functions(name: &str, family: &str, avoid_too: &[&str]) -> String {
    let hookable = kernel_functions_hookable();
    let mut args = vec!["-v"];
    args.extend(on_kernel_functions(family, avoid_too));
    let stderr = six_kinds(&Nginx::start(name, 2), &args, "ssl");
    let (enter, exit) = if family == "fentry" {
        ("FEntry", "FExit")
    } else {
        ("KProbe", "KRetProbe")
    };
    let expected = if hookable {
        vec![
            format!(r#"probe group read: [{enter}("inet_recvmsg"), {exit}("inet_recvmsg")"#),
            format!(r#"probe group send: [{enter}("tcp_sendmsg"), {exit}("tcp_sendmsg")]"#),
            format!(r#"probe group accept: [{exit}("inet_csk_accept")]"#),
            format!(r#"probe group arrival: [{enter}("tcp_data_ready")]"#),
        ]
    } else {
        vec![
            r#"probe group read: [Tracepoint("syscalls", "sys_enter_read")"#.to_string(),
            r#"probe group accept: [Tracepoint("syscalls", "sys_exit_accept4")"#.to_string(),
        ]
    };
    for group in expected {
        assert!(stderr.contains(&group), "{group} not chosen:\n{stderr}");
    }
    stderr
}

/// The `--avoid-hook` arguments that leave reads, writes, accepts and arrivals to kernel
/// functions hooked by `family`, with the hooks in `avoid_too` passed over too.
fn on_kernel_functions<'a>(family: &str, avoid_too: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--avoid-hook",
        "sock_recv_length",
        "--avoid-hook",
        "sock_send_length",
    ];
    // (arrivals too, where a kernel function can take them: else they would have no hook;
    // and kprobes come after the syscall tracepoints)
    if kernel_functions_hookable() {
        args.extend(["--avoid-hook", "sk_data_ready"]);
        if family == "kprobe" {
            args.extend(["--avoid-hook", "tracepoint"]);
        }
    }
    for a in avoid_too {
        args.extend(["--avoid-hook", a]);
    }
    args
}

/// Reads, writes, accepts and arrivals through BPF trampolines (fentry/fexit), as on
/// kernels before 6.3.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn six_kinds_through_fentry() {
    six_kinds_on_kernel_functions("kinds-fentry", "fentry", &[]);
}

/// The same through kprobes, as on a kernel without BPF trampolines.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn six_kinds_through_kprobes() {
    six_kinds_on_kernel_functions("kinds-kprobe", "kprobe", &["fentry"]);
}

/// Threads asleep in a socket read, in any process, hold a kretprobe's return instances
/// (the kernel keeps max(10, 2 × CPUs) for each probe). On a kernel without trampolines nor
/// the socket tracepoints, the reads, writes and accepts are then hooked at the syscalls,
/// not by kretprobes, and every kind is right with 64 threads asleep in reads. Forced onto
/// kprobes, most of the server's reads are skipped: every connection is still reported,
/// and the kernel's count of the skipped runs (6.7+) is reported (`hook_runs_skipped`).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn threads_asleep_in_reads() {
    let asleep = AsleepInRead::start(64);
    let stderr = six_kinds(
        &Nginx::start("kinds-asleep", 2),
        &[
            "-v",
            "--avoid-hook",
            "fentry",
            "--avoid-hook",
            "sock_recv_length",
            "--avoid-hook",
            "sock_send_length",
        ],
        "ssl",
    );
    for group in [
        r#"probe group read: [Tracepoint("syscalls", "sys_enter_read")"#,
        r#"probe group send: [Tracepoint("syscalls", "sys_enter_write")"#,
        r#"probe group accept: [Tracepoint("syscalls", "sys_exit_accept4")"#,
    ] {
        assert!(stderr.contains(group), "{group} not chosen:\n{stderr}");
    }
    if !kernel_functions_hookable() {
        return;
    }
    let server = Nginx::start("kprobes-asleep", 2);
    let master = server.master_pid().to_string();
    let mut args = vec!["--pid", master.as_str()];
    args.extend(on_kernel_functions("kprobe", &["fentry"]));
    let tracer = Hstrace::start(&args);
    for _ in 0..3 {
        s_client(server.port, &["-tls1_3"]);
    }
    let out = tracer.stop();
    drop(asleep);
    assert!(out.success, "{}", out.stderr);
    assert_eq!(out.records.len(), 3, "{}", out.stderr);
    assert_eq!(out.health["accepted"], 3, "{}", out.health);
    let skipped = out.health["hook_runs_skipped"].as_u64().unwrap();
    // (kprobes' own misses are counted since 6.7: its perf link's `missed`)
    if kernel_release() >= (6, 7) {
        assert!(skipped > 0, "{}", out.health);
        assert!(
            out.stderr.contains("runs of hstrace's hooks"),
            "{}",
            out.stderr
        );
    }
}

/// This kernel's (major, minor).
fn kernel_release() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut n = r
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0))
}

/// `n` threads of this process in reads of loopback TCP connections, each read timing
/// out after 100 ms and taken again (so that each is inside a call hooked after hstrace
/// attached), until dropped.
struct AsleepInRead {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl AsleepInRead {
    fn start(n: usize) -> AsleepInRead {
        use std::{io::Read, sync::atomic::Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut threads = Vec::new();
        for _ in 0..n {
            let mut client = std::net::TcpStream::connect(addr).unwrap();
            let (server, _) = listener.accept().unwrap();
            client
                .set_read_timeout(Some(std::time::Duration::from_millis(100)))
                .unwrap();
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                let _server = server;
                while !stop.load(Ordering::Relaxed) {
                    let _ = client.read(&mut [0u8; 16]);
                }
            }));
        }
        AsleepInRead { stop, threads }
    }
}

impl Drop for AsleepInRead {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The build of the programs for kernels without bpf_loop, atomics that fetch and the
/// BTF-typed task (5.10): every kind the same, and -v says which build ran.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn six_kinds_in_the_basic_build() {
    let stderr = six_kinds(
        &Nginx::start("kinds-basic", 2),
        &["-v", "--bpf-build", "basic"],
        "ssl",
    );
    assert!(stderr.contains("BPF build: basic"), "{stderr}");
}

/// Apache: one blocking SSL_do_handshake call spans the whole handshake; the wire events
/// inside it must still split the stages.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn apache_six_handshake_kinds_and_failures() {
    let stderr = six_kinds(&Apache::start("apache-kinds"), &["-v"], "ssl");
    for group in [
        r#"probe group read: [BtfTracepoint("sock_recv_length")]"#,
        r#"probe group send: [BtfTracepoint("sock_send_length")]"#,
    ] {
        assert!(stderr.contains(group), "{group} not chosen:\n{stderr}");
    }
}

/// HAProxy reads a record's header and its body in separate reads: every kind, in both
/// probe modes, against its own log of session reuse.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn haproxy_six_handshake_kinds_and_failures() {
    let server = Haproxy::start("haproxy-kinds");
    six_kinds(&server, &[], "ssl");
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn haproxy_wire_only() {
    six_kinds(&Haproxy::start("haproxy-wire"), &["--no-uprobes"], "wire");
}

/// Node.js: OpenSSL inside the executable, its handshakes driven through SSL_read and
/// SSL_write on memory BIOs. Every kind comes from the wire, and -v says once that the
/// uprobes cannot be tied to its connections.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn node_six_handshake_kinds_and_failures() {
    let server = Node::start("node-kinds");
    let stderr = six_kinds(&server, &["-v"], "wire");
    let pid = server.master_pid();
    assert!(
        stderr.contains(&format!(
            "pid {pid} (node): SSL_do_handshake uprobes on /proc/{pid}/exe"
        )),
        "{stderr}"
    );
    let said = format!(
        "pid {pid} (node): none of its first 5 handshakes made socket I/O inside SSL_do_handshake"
    );
    assert_eq!(stderr.matches(&said).count(), 1, "said once: {stderr}");
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn node_wire_only() {
    six_kinds(&Node::start("node-wire"), &["--no-uprobes"], "wire");
}

/// Go's crypto/tls: no OpenSSL to probe, every kind from the wire in the default mode.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn go_six_handshake_kinds_and_failures() {
    let server = GoServer::start("go-kinds");
    let stderr = six_kinds(&server, &["-v"], "wire");
    let said = format!(
        "pid {} (go_tls_server) has no libssl with SSL_do_handshake: tracing it from the wire only",
        server.master_pid()
    );
    assert_eq!(stderr.matches(&said).count(), 1, "said once: {stderr}");
}

/// Apache prefork, every kind in both probe modes: one connection per child at a time.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn apache_prefork_six_kinds_both_probe_modes() {
    six_kinds(&Apache::start_prefork("prefork-kinds", 2), &[], "ssl");
    six_kinds(
        &Apache::start_prefork("prefork-kinds-wire", 2),
        &["--no-uprobes"],
        "wire",
    );
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn apache_wire_only() {
    six_kinds(&Apache::start("apache-wire"), &["--no-uprobes"], "wire");
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn six_handshake_kinds_and_failures_wire_only() {
    six_kinds(&Nginx::start("kinds-wire", 2), &["--no-uprobes"], "wire");
}

/// OpenSSL linked into the server's executable: the uprobes go on the executable.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn ssl_in_the_executable_itself() {
    let server = StaticTlsServer::start("static");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", server.pid())).unwrap();
    assert!(
        !maps.contains("libssl"),
        "the test server should not map a libssl"
    );
    let pid = server.pid().to_string();
    let tracer = Hstrace::start(&["-v", "--pid", &pid]);
    assert!(s_client(server.port, &["-tls1_3"]).contains("New, TLSv1.3"));
    let out = tracer.stop();
    assert!(
        out.stderr.contains(&format!(
            "pid {pid} (static_tls_serv): SSL_do_handshake uprobes on /proc/{pid}/exe"
        )),
        "{}",
        out.stderr
    );
    assert_eq!(out.records.len(), 1, "{:?}", out.records);
    let r = &out.records[0];
    assert_eq!(str_field(r, "kind"), Some("full"), "{r}");
    assert_eq!(str_field(r, "hs_done_from"), Some("ssl"), "{r}");
    assert_eq!(str_field(r, "sni"), Some("demo.test"), "{r}");
    assert_eq!(
        r["ssl_calls"].as_u64(),
        Some(1),
        "one blocking SSL_accept spans the handshake: {r}"
    );
    check_stages(r);
}
