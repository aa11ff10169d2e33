//! `cargo xtask demo`: a throwaway nginx traced under a client mix of every kind (TLS 1.2
//! and 1.3, full and resumed, plain HTTP, a failure), or (`--serve`) the production shape
//! on one machine: `hstrace serve` and a real Prometheus with the shipped rules; or
//! `hstrace trace` of the user's own server.

use std::{
    path::Path,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};
use hstrace_tests::{clients::s_client, prometheus::Prometheus};

use crate::{
    nginx::DemoNginx,
    setup::{setup_test_machine, DEMO_PACKAGES},
    util::{build, root, run},
};

/// One client connection of the demo mix; session files are named relative to `dir`.
fn client(port: u16, dir: &Path, args: &[&str]) -> Result<()> {
    let paths: Vec<String> = args
        .iter()
        .map(|a| match a.starts_with('-') {
            true => a.to_string(),
            false => dir.join(a).display().to_string(),
        })
        .collect();
    let args: Vec<&str> = paths.iter().map(String::as_str).collect();
    s_client(port, &args);
    Ok(())
}

/// The demo's client mix: TLS 1.2 and 1.3, full and resumed (session id, ticket, PSK),
/// plain HTTP, and one handshake that fails.
pub fn drive_demo_mix(port: u16, plain_port: u16, dir: &Path) -> Result<()> {
    for _ in 0..2 {
        client(port, dir, &["-tls1_2", "-no_ticket", "-sess_out", "id12"])?;
        client(port, dir, &["-tls1_2", "-no_ticket", "-sess_in", "id12"])?;
        client(port, dir, &["-tls1_2", "-sess_out", "tk12"])?;
        client(port, dir, &["-tls1_2", "-sess_in", "tk12"])?;
        client(port, dir, &["-tls1_3", "-sess_out", "ps13"])?;
        client(port, dir, &["-tls1_3", "-sess_in", "ps13"])?;
        run(Command::new("curl")
            .args(["-s", "-o", "/dev/null"])
            .arg(format!("http://127.0.0.1:{plain_port}/")))?;
    }
    client(port, dir, &["-tls1_1"])
}

/// `cargo xtask demo [--serve | TRACE ARGS]`: `trace_args` given, `hstrace trace` with them
/// until Ctrl-C; `serve`, `demo_serve`; neither, the demo nginx traced under the client mix.
pub fn demo(serve: bool, trace_args: &[String]) -> Result<()> {
    // a server of the user's own (--pid, --comm, --port): nothing to install but the build
    let own = !trace_args.is_empty();
    setup_test_machine(if own { &[] } else { DEMO_PACKAGES })?;
    let bin = build()?;
    if serve {
        return demo_serve(&bin);
    }
    if own {
        // trace what the user named, until Ctrl-C
        return run(Command::new(&bin).arg("trace").args(trace_args));
    }
    let (port, plain_port) = (8443, 8080);
    let nginx = DemoNginx::start("demo", 2, port, plain_port)?;
    eprintln!(
        "xtask: demo nginx (master pid {}) on https://127.0.0.1:{port} and http://127.0.0.1:{plain_port}, config in {}",
        nginx.pid,
        nginx.dir.display()
    );
    let pid = nginx.pid.to_string();
    let mut tracer = Command::new(&bin)
        .args(["trace", "--pid", &pid, "--duration", "7"])
        .spawn()?;
    // the seed 002 table of this run, measured by a second tracer beside the first
    let params = Command::new(&bin)
        .args([
            "export",
            "--pid",
            &pid,
            "--duration",
            "7",
            "--format",
            "table",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    thread::sleep(Duration::from_secs(3));
    eprintln!("xtask: driving TLS 1.2 and 1.3 handshakes, full and resumed, plain HTTP, and one that fails");
    drive_demo_mix(port, plain_port, &nginx.dir)?;
    let st = tracer.wait()?;
    if !st.success() {
        bail!("hstrace trace failed ({st})");
    }
    let out = params.wait_with_output()?;
    if !out.status.success() {
        bail!("hstrace export failed ({})", out.status);
    }
    println!("\nThe measured stage parameters of this run (hstrace export --format table):\n");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    Ok(())
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The production shape on one machine: the demo nginx, `hstrace serve` and a real
/// Prometheus scraping it with the shipped rules, until Ctrl-C.
fn demo_serve(bin: &Path) -> Result<()> {
    let (port, plain_port, listen, prom_port) = (8443, 8080, "127.0.0.1:9725", 9090);
    let nginx = DemoNginx::start("demo-serve", 2, port, plain_port)?;
    let dir = nginx.dir.clone();
    // SAFETY: the handler only stores to an atomic
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let mut serve = Command::new(bin)
        .args(["serve", "--pid", &nginx.pid.to_string(), "--listen", listen])
        .spawn()?;
    let rules = root().join("dashboards/prometheus/rules.yml");
    let prom = Prometheus::start_on(
        prom_port,
        &[listen.to_owned()],
        std::slice::from_ref(&rules),
        "2s",
    );
    thread::sleep(Duration::from_secs(3));
    let server = format!("process_executable_name=\"nginx\",server_port=\"{port}\"");
    println!(
        "\nhstrace serve:  http://{listen}/metrics  http://{listen}/api/v1/parameters  http://{listen}/healthz\n\
         Prometheus:     http://127.0.0.1:{prom_port}  (rules from {rules})\n\
         demo nginx:     https://127.0.0.1:{port}  http://127.0.0.1:{plain_port}\n\n\
         Ask Prometheus (curl -sG http://127.0.0.1:{prom_port}/api/v1/query --data-urlencode 'query=...'):\n\
         \x20 what is my cache hit ratio?   hstrace:cache_hit_ratio:rate5m{{{server}}}\n\
         \x20 resumption rate?              hstrace:resumption_rate:rate5m{{{server}}}\n\
         \x20 which stage is slow (p90)?    topk(3, hstrace:stage_duration_seconds:p90_rate5m{{{server}}})\n\
         \x20 where the time goes?          sum by (stage_class) (rate(hstrace_stage_duration_seconds_sum[5m]))\n\
         \x20 why do handshakes fail?       sum by (error_type, stage) (hstrace_failures_total{{{server}}})\n\
         \x20                               (each one: curl -s http://{listen}/api/v1/failures)\n\n\
         A client mix runs every 10 s. Ctrl-C stops everything.\n",
        rules = rules.display()
    );
    // the first mix once Prometheus has a sample from before it, so rates have an increase
    let mut last = Instant::now() - Duration::from_secs(5);
    while !STOP.load(std::sync::atomic::Ordering::Relaxed) {
        if last.elapsed() >= Duration::from_secs(10) {
            drive_demo_mix(port, plain_port, &dir)?;
            last = Instant::now();
        }
        thread::sleep(Duration::from_millis(200));
    }
    eprintln!("\nxtask: stopping");
    // SAFETY: plain kill(2) on our own child (it may have had the SIGINT already)
    unsafe { libc::kill(serve.id() as i32, libc::SIGINT) };
    let _ = serve.wait();
    drop(prom);
    Ok(())
}
