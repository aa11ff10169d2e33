//! The stages against ground truth: a known network delay must land in the right delay
//! stage and nowhere else. Root only; run with `cargo xtask test`.

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::Command,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Barrier,
    },
    thread,
    time::{Duration, Instant},
};

use hstrace_tests::{
    assert::check_stages,
    clients::{s_client, s_time},
    cpuset::CpuToItself,
    daemon::Daemon,
    hstrace::Hstrace,
    procs::{pin_thread, schedule_thread, PinnedLoop},
    proxies::DelayProxy,
    servers::{Nginx, TestServer},
    util::{median, wait_for},
};
use openssl::ssl::{SslConnector, SslMethod, SslOptions, SslVerifyMode, SslVersion};
use serde_json::Value;

/// One TLS 1.2 full handshake and request through a proxy that holds the client's
/// `flight`-th flight for `delay_ms`; returns its record and the proxy's ground truth: the
/// server's wait on the wire for client flight 2 and for the request (flight 3).
fn through_proxy(nginx: &TestServer, flight: u32, delay_ms: u64) -> (Value, [f64; 2]) {
    let proxy = DelayProxy::start(nginx.port, flight, Duration::from_millis(delay_ms));
    let port = nginx.port.to_string();
    let tracer = Hstrace::start(&["--port", &port]);
    let out = s_client(proxy.port, &["-tls1_2", "-no_ticket"]);
    assert!(out.contains("New, TLSv1.2"), "{out}");
    let traced = tracer.stop();
    assert_eq!(traced.records.len(), 1, "{:?}", traced.records);
    let wire = [2, 3].map(|f| {
        proxy
            .wait_for(f)
            .unwrap_or_else(|| panic!("the proxy saw no client flight {f}"))
            .as_secs_f64()
            * 1e3
    });
    (traced.records[0].clone(), wire)
}

fn stage_ms(r: &Value, s: &str) -> f64 {
    r["stages_ns"][s]
        .as_u64()
        .unwrap_or_else(|| panic!("no {s}: {r}")) as f64
        / 1e6
}

/// Holding a client flight for D ms lands in the stage that waits for it and nowhere
/// else: each wait stage matches, within 2 ms, the wait the proxy measured on the wire for
/// its flight (D included for the held one); since the stages add up to the handshake
/// (check_stages), the server's own stages cannot have absorbed it. The ground truth is
/// the proxy's kernel receive stamps on this very connection, not a difference from an
/// earlier undelayed run: the client's time to compute its flight varies by several ms
/// between runs on a loaded machine (CI failed on exactly that), and a VM's stolen time
/// can stretch any stage by 100+ ms, so no fixed bound on a service stage holds here.
fn delay_lands_in(flight: u32) {
    let nginx = Nginx::start(&format!("accuracy-{flight}"), 1);
    for d in [0u64, 25, 60] {
        let (r, wire) = through_proxy(&nginx, flight, d);
        check_stages(&r);
        let held = wire[flight as usize - 2];
        assert!(
            held >= d as f64,
            "the proxy held flight {flight} {held:.2} ms < {d} ms"
        );
        for (stage, wire_ms) in [("wait_client_flight_2", wire[0]), ("wait_request", wire[1])] {
            let traced = stage_ms(&r, stage);
            eprintln!(
                "held flight {flight} for {d} ms: {stage} {traced:.2} ms, on the wire {wire_ms:.2} ms"
            );
            assert!(
                (traced - wire_ms).abs() <= 2.0,
                "{stage} is {traced:.2} ms, the proxy measured {wire_ms:.2} ms (flight {flight} held {d} ms): {r}"
            );
        }
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn known_delay_of_client_flight_2() {
    delay_lands_in(2);
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn known_delay_of_the_request() {
    // TLS 1.2 full: ClientHello, flight 2, then (after the server's Finished) the request
    delay_lands_in(3);
}

/// Seconds per RSA private-key operation (sign) of `bits`, from `openssl speed` on this
/// machine: what a server pays to sign (ECDHE, TLS 1.3) or decrypt (RSA key exchange).
fn rsa_private_op_ms(bits: u32) -> f64 {
    let out = Command::new("openssl")
        .args(["speed", "-seconds", "1", &format!("rsa{bits}")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("rsa {bits} bits")))
        .unwrap_or_else(|| panic!("no rsa{bits} line from openssl speed:\n{text}"));
    let secs: f64 = line
        .split_whitespace()
        .nth(3)
        .unwrap()
        .trim_end_matches('s')
        .parse()
        .unwrap();
    secs * 1e3
}

/// Median of `stage` over `n` handshakes with these s_client arguments.
/// The median of a service stage's on-CPU time (ms) over `n` new handshakes.
fn median_stage_cpu(nginx: &TestServer, args: &[&str], stage: &str, n: usize) -> f64 {
    let port = nginx.port.to_string();
    let tracer = Hstrace::start(&["--port", &port]);
    for _ in 0..n {
        assert!(s_client(nginx.port, args).contains("New, TLS"));
    }
    let out = tracer.stop();
    assert_eq!(out.records.len(), n, "{:?}", out.records);
    median(
        out.records
            .iter()
            .map(|r| {
                r["cpu_ns"][stage]
                    .as_u64()
                    .unwrap_or_else(|| panic!("no cpu_ns of {stage}: {r}")) as f64
                    / 1e6
            })
            .collect(),
    )
}

/// A 4096-bit RSA key costs the server one slower private-key operation per full
/// handshake. With ECDHE (and in TLS 1.3) that is the signature in the server's first
/// flight; with RSA key exchange it is the decryption of the client's second flight. The
/// on-CPU time of the stage that holds it must grow by what `openssl speed` says the
/// operation costs here (its CPU time per operation), within a factor of 2 either way (the
/// server's operation includes padding and hashing speed leaves out); the other service
/// stage's must not. On-CPU time, not the stage's wall time: a shared machine's other
/// load stretched the wall time of the same stage to twice the operation's cost in CI, and
/// that wait for a CPU is in the stage by design (the competing-hog test checks it).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn known_server_work_moves_into_the_right_stage() {
    let expected = rsa_private_op_ms(4096) - rsa_private_op_ms(2048);
    let small = Nginx::start_with_key("rsa2048", 1, 2048);
    let big = Nginx::start_with_key("rsa4096", 1, 4096);
    let cases: [(&str, &[&str], &str, &str); 3] = [
        (
            "TLS 1.3",
            &["-tls1_3"],
            "server_flight_1",
            "server_flight_2",
        ),
        (
            "TLS 1.2 ECDHE",
            &["-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"],
            "server_flight_1",
            "server_flight_2",
        ),
        (
            "TLS 1.2 RSA key exchange",
            &["-tls1_2", "-cipher", "AES128-GCM-SHA256"],
            "server_flight_2",
            "server_flight_1",
        ),
    ];
    for (what, args, moves, stays) in cases {
        let grew =
            median_stage_cpu(&big, args, moves, 9) - median_stage_cpu(&small, args, moves, 9);
        let other =
            median_stage_cpu(&big, args, stays, 9) - median_stage_cpu(&small, args, stays, 9);
        eprintln!("{what}: {moves}'s CPU grew {grew:.2} ms (openssl speed: {expected:.2} ms), {stays}'s by {other:.2} ms");
        assert!(
            grew > expected / 2.0 && grew < expected * 2.0,
            "{what}: {moves}'s CPU grew {grew:.2} ms, expected {expected:.2}"
        );
        assert!(
            other.abs() < expected / 4.0,
            "{what}: {stays}'s CPU moved by {other:.2} ms too"
        );
    }
}

/// Move the thread `pid` to `cpu` alone.
fn pin(pid: u32, cpu: usize) {
    pin_thread(pid as i32, cpu).unwrap_or_else(|e| panic!("cannot move {pid} to CPU {cpu}: {e}"));
}

/// CPU 0 kept for the nginx worker `pid` alone, whatever else the machine runs: the
/// stages after an idle CPU need a CPU that idles whenever the worker waits.
fn alone_on_cpu_0(pid: u32) -> CpuToItself {
    let kept = CpuToItself::reserve(0)
        .unwrap_or_else(|e| panic!("cannot keep CPU 0 for the worker (needs root): {e}"));
    kept.admit(pid).unwrap();
    pin(pid, 0);
    kept
}

/// Run `lone` (one client at a time, pinned to CPU 1) and check that the kept CPU idled
/// for at least a third of it: the condition the test asserts on, created and seen.
fn while_cpu_idles<T>(kept: &CpuToItself, lone: impl FnOnce() -> T) -> T {
    let (idle, start) = (kept.idle_seconds(), Instant::now());
    let out = lone();
    let (idled, wall) = (kept.idle_seconds() - idle, start.elapsed().as_secs_f64());
    eprintln!("CPU 0 idled {idled:.2} s of {wall:.2} s");
    assert!(
        idled >= wall / 3.0,
        "CPU 0 idled {idled:.2} s of {wall:.2} s: something else ran beside the worker"
    );
    out
}

/// A real-time (SCHED_FIFO) thread on one CPU that spins 2 ms and sleeps 1 ms until
/// dropped (also when a test panics, so it never outlives its test): every wake-up
/// preempts whatever ordinary task runs there, so that task gets the CPU one millisecond
/// in three. Well inside the kernel's real-time budget (95 % of each second).
struct RealTimeHog {
    _running: PinnedLoop,
}

impl RealTimeHog {
    fn start(cpu: usize) -> RealTimeHog {
        let spin_then_sleep = || {
            let spin = Instant::now();
            while spin.elapsed() < Duration::from_millis(2) {
                std::hint::spin_loop();
            }
            thread::sleep(Duration::from_millis(1));
        };
        match PinnedLoop::start(cpu, libc::SCHED_FIFO, 1, spin_then_sleep) {
            Ok(running) => RealTimeHog { _running: running },
            Err(e) => panic!("cannot run a real-time thread on CPU {cpu} (needs root): {e}"),
        }
    }
}

/// On-CPU time survives the worker moving between CPUs mid-stage: every CPU keeps its
/// own lag of the scheduler's task clock behind its clock (the IRQ and steal time charged
/// there, a fifth of a second apart on these VMs), so a stage read on two CPUs is only
/// right once that lag is taken off. Without it, a migrated stage's CPU came out
/// negative (dropped: no cpu_ns) or far too large (cut to the wall clock): 165 of 11,216
/// stages (1.5 %) had no cpu_ns. What is left is docs/limits.md's "Stolen time": a steal
/// just before a stage began, on a VM, loses that stage's cpu_ns, about 1 stage in 4,000
/// in 1 run in 15. The test allows 1 in 1,000, fifteen times below the bug it guards.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn cpu_ns_survives_the_worker_moving_between_cpus() {
    // SAFETY: sysconf has no preconditions
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    assert!(
        cpus >= 2,
        "moving a worker between CPUs needs 2 CPUs; this machine has {cpus}"
    );
    let nginx = Nginx::start("migrate", 1);
    let worker = *nginx.worker_pids().iter().next().unwrap();
    let tracer = Hstrace::start(&["--port", &nginx.port.to_string()]);
    let done = Arc::new(AtomicBool::new(false));
    let mover = {
        let done = done.clone();
        thread::spawn(move || {
            let mut moves = 0u64;
            while !done.load(Ordering::Relaxed) {
                pin(worker, (moves % 2) as usize);
                moves += 1;
                thread::sleep(Duration::from_millis(2));
            }
            pin(worker, 0);
            moves
        })
    };
    let made = s_time(nginx.port, 3);
    done.store(true, Ordering::Relaxed);
    let moves = mover.join().unwrap();
    let out = tracer.stop();
    assert!(
        made >= 200 && moves >= 200,
        "{made} handshakes, {moves} moves"
    );
    assert_eq!(out.records.len() as u64, made, "{}", out.stderr);
    let (mut stages, mut without) = (0u64, Vec::new());
    for r in &out.records {
        for s in ["server_flight_1", "server_flight_2"] {
            if r["stages_ns"][s].is_u64() {
                stages += 1;
                if !r["cpu_ns"][s].is_u64() {
                    without.push(r);
                }
            }
        }
    }
    assert!(
        without.len() as u64 * 1000 <= stages,
        "{} of {stages} service stages have no cpu_ns (more than 1 in 1,000); the first: {}",
        without.len(),
        without[0]
    );
    assert!(
        stages >= 2 * made,
        "{stages} service stages in {made} handshakes"
    );
}

/// On-CPU time tells a service stage that computed from one that waited for a CPU: with
/// the worker pinned to one CPU and a real-time thread taking that CPU two milliseconds in
/// every three, server_flight_1 (an RSA-4096 signature) takes about three times longer on
/// the wall clock, but its cpu_ns stays what the signature costs.
///
/// The thread is real-time and wakes every millisecond because a plain busy loop, even at
/// nice -10, preempts the worker only at a scheduler tick (4 ms at HZ=250) that falls after
/// the worker's slice: a 3.7 ms signature often ran through untouched, and in one CI run
/// the median of seven was never slowed in three tries.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn cpu_ns_separates_computing_from_waiting_for_a_cpu() {
    let nginx = Nginx::start_with_key("oncpu", 1, 4096);
    let worker = *nginx.worker_pids().iter().next().unwrap();
    pin(worker, 0);
    let port = nginx.port.to_string();
    let run = |label: &str| {
        let tracer = Hstrace::start(&["--port", &port]);
        for _ in 0..7 {
            assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLS"));
        }
        let out = tracer.stop();
        assert_eq!(out.records.len(), 7, "{:?}", out.records);
        let wall = median(
            out.records
                .iter()
                .map(|r| stage_ms(r, "server_flight_1"))
                .collect(),
        );
        let cpu = median(
            out.records
                .iter()
                .map(|r| {
                    r["cpu_ns"]["server_flight_1"]
                        .as_u64()
                        .unwrap_or_else(|| panic!("no cpu_ns: {r}")) as f64
                        / 1e6
                })
                .collect(),
        );
        eprintln!("{label}: server_flight_1 {wall:.2} ms on the wall clock, {cpu:.2} ms on CPU");
        (wall, cpu)
    };
    let (idle_wall, idle_cpu) = run("CPU to itself");
    assert!(
        idle_cpu > 0.8 * idle_wall,
        "alone, the stage computes: {idle_cpu:.2} of {idle_wall:.2} ms"
    );
    let hog = RealTimeHog::start(0);
    let (busy_wall, busy_cpu) = run("sharing its CPU with a real-time thread");
    drop(hog);
    assert!(
        busy_wall > 1.4 * busy_cpu && busy_wall > idle_wall,
        "the real-time thread did not slow the stage: {busy_wall:.2} ms on the wall clock, \
         {busy_cpu:.2} ms on CPU, vs {idle_wall:.2} ms alone"
    );
    assert!(
        busy_cpu < 0.75 * busy_wall,
        "cpu_ns {busy_cpu:.2} of {busy_wall:.2} ms: waiting counted as computing"
    );
    // The same signature costs 5-8 ms of CPU from one minute to the next on these shared
    // machines, and being switched out mid-way costs some more (caches refilled), but the
    // waiting must stay out of cpu_ns: of the time the stage grew on the wall clock, at
    // most a sixth may show up as on-CPU time (and none of the computing may go missing).
    assert!(
        busy_cpu > 0.5 * idle_cpu && busy_cpu - idle_cpu < (busy_wall - idle_wall) / 6.0,
        "on-CPU time moved {idle_cpu:.2} -> {busy_cpu:.2} ms while the wall clock moved \
         {idle_wall:.2} -> {busy_wall:.2} ms"
    );
}

/// `idle_before` tells a service stage that began on a CPU left idle since the last
/// service stage ran there from one that began right behind another. The worker is pinned
/// to CPU 0 and the clients to CPU 1. One client at a time: CPU 0 idles before every
/// ClientHello (a TLS 1.3 request may follow the client's Finished in the same read
/// pass, so later stages can be either). Eight clients at once: the worker reads some
/// ClientHellos while others' signatures (RSA-4096, ~5 ms each) keep its CPU busy.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn idle_before_tells_a_stage_after_an_idle_cpu() {
    let nginx = Nginx::start_with_key("idle", 1, 4096);
    let worker = *nginx.worker_pids().iter().next().unwrap();
    let kept = alone_on_cpu_0(worker);
    let port = nginx.port.to_string();
    // the records' server_flight_1s, and those of them listed in idle_before
    let count = |records: &[Value]| {
        let (mut stages, mut idle) = (0, 0);
        for r in records {
            let listed = r["idle_before"]
                .as_array()
                .unwrap_or_else(|| panic!("no idle_before: {r}"));
            let cpu = r["cpu_ns"].as_object().expect("cpu_ns");
            assert!(
                listed.iter().all(|s| cpu.contains_key(s.as_str().unwrap())),
                "idle_before lists a stage without cpu_ns: {r}"
            );
            if cpu.contains_key("server_flight_1") {
                stages += 1;
                idle += usize::from(listed.iter().any(|s| s == "server_flight_1"));
            }
        }
        (stages, idle)
    };
    let tracer = Hstrace::start(&["--port", &port]);
    let nginx = while_cpu_idles(&kept, || {
        let one = thread::spawn(move || {
            pin_thread(0, 1).unwrap();
            for _ in 0..6 {
                assert!(s_client(nginx.port, &["-tls1_3"]).contains("New, TLS"));
                thread::sleep(Duration::from_millis(20));
            }
            nginx
        });
        one.join().unwrap()
    });
    let out = tracer.stop();
    assert_eq!(out.records.len(), 6, "{:?}", out.records);
    let (stages, idle) = count(&out.records);
    eprintln!("one client at a time: {idle} of {stages} first flights after an idle CPU");
    assert!(
        stages == 6 && idle == stages,
        "one client at a time, {idle} of {stages} first flights began after an idle CPU"
    );
    let tracer = Hstrace::start(&["--port", &port]);
    handshakes_at_once(nginx.port, 8, SslVersion::TLS1_3);
    let out = tracer.stop();
    assert_eq!(out.records.len(), 8, "{:?}", out.records);
    let (stages, idle) = count(&out.records);
    eprintln!("eight clients at once: {idle} of {stages} first flights after an idle CPU");
    assert!(
        stages == 8 && idle < stages,
        "eight clients at once, every one of {stages} first flights began after an idle CPU"
    );
}

/// `n` full handshakes (`version`, no session ticket) and a request each, at once: every
/// client is a thread pinned to CPU 1 at a real-time priority, connected and with its
/// context built before a barrier releases them all, so the ClientHellos leave within
/// microseconds of one another whatever else runs on CPU 1. The first keeps the worker
/// busy with its flight while the others wait in their sockets: the burst the assertions
/// need, made by the test, not hoped for from a quiet machine.
fn handshakes_at_once(port: u16, n: usize, version: SslVersion) {
    let ready = Arc::new(Barrier::new(n));
    let clients: Vec<_> = (0..n)
        .map(|_| {
            let ready = Arc::clone(&ready);
            thread::spawn(move || {
                pin_thread(0, 1).unwrap();
                schedule_thread(libc::SCHED_FIFO, 1)
                    .unwrap_or_else(|e| panic!("a real-time client thread (needs root): {e}"));
                let mut tls = SslConnector::builder(SslMethod::tls_client()).unwrap();
                tls.set_verify(SslVerifyMode::NONE);
                tls.set_min_proto_version(Some(version)).unwrap();
                tls.set_max_proto_version(Some(version)).unwrap();
                tls.set_options(SslOptions::NO_TICKET);
                tls.set_alpn_protos(b"\x08http/1.1").unwrap();
                let tls = tls.build();
                let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
                ready.wait();
                let mut s = tls.connect("demo.test", tcp).unwrap();
                s.write_all(b"GET / HTTP/1.0\r\nHost: demo.test\r\n\r\n")
                    .unwrap();
                let mut answer = Vec::new();
                s.read_to_end(&mut answer).unwrap();
                assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
}

/// The parameters split each queue stage by the idle mark of the service stage that read
/// its message: a ClientHello read on a CPU left idle waited for the worker to wake up;
/// one read right behind another connection's RSA-4096 signature (~5 ms) waited for it,
/// far longer. The model takes the first as the server's wake-up at any load. The worker
/// is pinned to CPU 0 and the clients to CPU 1, one at a time, then eight at once.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_queue_is_split_by_what_its_reader_found() {
    let nginx = Nginx::start_with_key("idle-queue", 1, 4096);
    let worker = *nginx.worker_pids().iter().next().unwrap();
    let kept = alone_on_cpu_0(worker);
    let daemon = Daemon::start(&["--pid", &nginx.master_pid().to_string()]);
    let port = nginx.port;
    pin_thread(0, 1).unwrap();
    while_cpu_idles(&kept, || {
        for _ in 0..6 {
            assert!(s_client(port, &["-tls1_2", "-no_ticket"]).contains("New, TLS"));
            thread::sleep(Duration::from_millis(20));
        }
    });
    for _ in 0..2 {
        handshakes_at_once(port, 8, SslVersion::TLS1_2);
    }
    // every handshake counted before the parameters are read
    let server = format!("nginx:{port}");
    wait_for(
        "the daemon to count 22 connections",
        Duration::from_secs(10),
        || daemon.server_parameters(&server)["connections"].as_u64() >= Some(22),
    );
    let s = daemon.server_parameters(&server);
    let stages = &s["classes"]["tls_full"]["stages"];
    let queue = &stages["client_hello_queue"];
    let (idle, busy) = (&queue["wait_after_idle"], &queue["wait_after_busy"]);
    let count = |v: &Value| v["count"].as_u64().unwrap_or(0);
    eprintln!("client_hello_queue: {queue}");
    assert!(
        count(idle) >= 6 && count(busy) >= 1,
        "the six lone ClientHellos after an idle CPU, some of the sixteen behind a signature: {queue}"
    );
    assert!(count(idle) + count(busy) <= count(queue), "{queue}");
    // a wait's wall time, not a CPU time, and not under the service stages' name
    assert!(
        idle["cpu_mean_s"].is_null() && queue["after_idle"].is_null(),
        "{queue}"
    );
    let (woken, behind) = (f(&idle["mean_s"]), f(&busy["mean_s"]));
    assert!(
        woken > 0.0 && behind > woken,
        "after an idle CPU {woken} s, behind another's work {behind} s: {queue}"
    );
    // the accept queue is no service stage's message
    assert!(
        stages["accept_queue"]["wait_after_idle"].is_null(),
        "{stages}"
    );
    daemon.stop();
}

/// The parameters' wake-up by how long the server's CPU slept, read on the live server:
/// lone handshakes 150 ms apart (a client process's start adds a few milliseconds) find the
/// worker's CPU asleep for that long at their accept, and briefly asleep inside the
/// handshake (between the accept and the ClientHello, or while the client answers). Each
/// range of sleeps keeps its mean sleep and wait; the accepts' range holds one a handshake.
/// The worker is pinned to CPU 0 and the clients to CPU 1.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn the_wakeup_is_measured_by_how_long_the_cpu_slept() {
    let nginx = Nginx::start_with_key("wakeup", 1, 2048);
    let worker = *nginx.worker_pids().iter().next().unwrap();
    let kept = alone_on_cpu_0(worker);
    let daemon = Daemon::start(&["--pid", &nginx.master_pid().to_string()]);
    let port = nginx.port;
    pin_thread(0, 1).unwrap();
    let lone = 12;
    while_cpu_idles(&kept, || {
        for _ in 0..lone {
            thread::sleep(Duration::from_millis(150));
            assert!(s_client(port, &["-tls1_2", "-no_ticket"]).contains("New, TLS"));
        }
    });
    let server = format!("nginx:{port}");
    wait_for(
        "the daemon to count the handshakes",
        Duration::from_secs(10),
        || daemon.server_parameters(&server)["connections"].as_u64() >= Some(lone),
    );
    let s = daemon.server_parameters(&server);
    let ranges = s["wakeup_after_idle"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    eprintln!("wakeup_after_idle: {ranges:?}");
    let idle: Vec<f64> = ranges.iter().map(|r| f(&r["idle_s"])).collect();
    assert!(
        idle.windows(2).all(|w| w[0] < w[1]),
        "shortest sleep first: {ranges:?}"
    );
    for r in &ranges {
        let (count, wait) = (r["count"].as_u64().unwrap_or(0), f(&r["mean_s"]));
        assert!(
            count > 0 && wait > 0.0 && wait < 0.05,
            "a wake-up's wait, not another's work: {r}"
        );
    }
    // every accept after the pause (the first may follow the daemon's own start)
    let accepts = ranges
        .iter()
        .find(|r| (0.14..0.6).contains(&f(&r["idle_s"])))
        .unwrap_or_else(|| panic!("no range of sleeps about 150 ms long: {ranges:?}"));
    assert!(
        accepts["count"].as_u64() >= Some(lone - 1),
        "{accepts} of {lone} handshakes"
    );
    // their waits are the accept queue's: each of these accepts found its CPU asleep
    let accept_queue = f(&s["classes"]["tls_full"]["stages"]["accept_queue"]["mean_s"]);
    let accepts_wait = f(&accepts["mean_s"]);
    assert!(
        (accepts_wait / accept_queue - 1.0).abs() < 0.3,
        "the accepts' wait {accepts_wait} s against the accept queue's mean {accept_queue} s"
    );
    // and the short sleeps inside each handshake
    assert!(
        idle.first().is_some_and(|&i| i < 0.02),
        "no sleep shorter than 20 ms: {ranges:?}"
    );
    let calls: u64 = ranges.iter().filter_map(|r| r["count"].as_u64()).sum();
    assert!(
        (lone..=4 * lone).contains(&calls),
        "at least the accepts, at most an accept and three reads a handshake: {calls}"
    );
    daemon.stop();
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}
