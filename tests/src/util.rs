//! Small helpers every test and xtask job shares: the workspace, a fresh directory, a free
//! port, waiting for a condition or a listener, running a command that must succeed, a
//! median, whether a Debian package is installed.

use std::{
    fs,
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Output},
    thread,
    time::{Duration, Instant},
};

/// Is Debian package `pkg` installed?
pub fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The python of the venv `cargo xtask test` installs tests/python/requirements.txt into
/// (ja4plus, tlslite-ng).
pub fn venv_python() -> PathBuf {
    let python = workspace().join("target/python/venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: `sudo cargo xtask test` installs tests/python/requirements.txt there",
        python.display()
    );
    python
}

/// A fresh directory for one test.
pub fn work_dir(name: &str) -> PathBuf {
    let d = workspace().join("target/hstrace-tests").join(name);
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Poll `ok` every 20 ms until it holds; panic after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until something listens on 127.0.0.1:`port`; panic after `timeout`.
pub fn wait_listening(what: &str, port: u16, timeout: Duration) {
    wait_for(what, timeout, || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
}

/// Run `cmd`; its output, or a panic with what it said if it fails.
pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The middle of `v` (the upper one of an even count); panics on an empty `v` or a NaN.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    v[v.len() / 2]
}
