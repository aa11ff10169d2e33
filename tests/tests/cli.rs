//! What `trace` says when it cannot do what it was asked, or does less: a pid, port or
//! name that matches nothing, no privileges, a process without libssl that listens on
//! nothing. Root only; run with `cargo xtask test`.

use std::{process::Command, thread, time::Duration};

use hstrace_tests::{
    hstrace::{hstrace_bin, hstrace_run, Hstrace},
    util::free_port,
};

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn errors_say_what_to_do() {
    let (ok, err) = hstrace_run(&["trace", "--pid", "999999999"]);
    assert!(
        !ok && err.contains("no process with pid 999999999"),
        "{err}"
    );
    let port = free_port().to_string();
    let (ok, err) = hstrace_run(&["trace", "--port", &port]);
    assert!(
        !ok && err.contains(&format!("nothing is listening on TCP port {port}")),
        "{err}"
    );
    let (ok, err) = hstrace_run(&["trace", "--comm", "no-such-server"]);
    assert!(
        !ok && err.contains("no running process is named 'no-such-server'"),
        "{err}"
    );

    // without privileges: a clear line, not a libbpf error
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(hstrace_bin())
        .args(["trace", "--duration", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("hstrace needs root"),
        "{err}"
    );

    // a process without libssl: traced from the wire only, and told so
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let tracer = Hstrace::start(&["--pid", &pid]);
    thread::sleep(Duration::from_millis(200));
    let out = tracer.stop();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(out.success, "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("pid {pid} (sleep) has no libssl")),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("from the wire only"), "{}", out.stderr);
    // and it listens on nothing: said, not traced silently
    assert!(
        out.stderr.contains(&format!(
            "pid {pid} (sleep) and its children listen on no TCP port"
        )),
        "{}",
        out.stderr
    );
}
