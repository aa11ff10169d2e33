//! The real `hstrace` binary under test: `trace` run until Ctrl-C with every line it
//! printed, started and waited for until it says it is ready, or run to completion.

use std::{
    collections::HashSet,
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{mpsc, OnceLock},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::util::workspace;

/// The hstrace binary under test (built by `cargo xtask test`).
pub fn hstrace_bin() -> PathBuf {
    let p = std::env::var_os("HSTRACE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/release/hstrace"));
    assert!(
        p.exists(),
        "{} missing: run the tests with `cargo xtask test`",
        p.display()
    );
    p
}

/// The real hstrace binary, running `trace --format json ARGS`.
pub struct Hstrace {
    child: Child,
    /// (taken by `stop`)
    stdout: Option<thread::JoinHandle<Vec<String>>>,
    stderr: mpsc::Receiver<String>,
    stderr_seen: Vec<String>,
}

pub struct Traced {
    /// one "connection" record per connection
    pub records: Vec<Value>,
    /// one "close" record per connection, with its totals
    pub closes: Vec<Value>,
    pub stderr: String,
    /// the exit totals' JSON line (`{"record": "health", …}`), Null if none was printed
    pub health: Value,
    pub success: bool,
}

impl Hstrace {
    /// Start and wait until it says it is tracing.
    pub fn start(args: &[&str]) -> Hstrace {
        let mut cmd = Command::new(hstrace_bin());
        cmd.args(["trace", "--format", "json"]).args(args);
        Hstrace::start_command(cmd)
    }

    /// The same, started by `cmd` (e.g. under `setpriv`), which must run
    /// `hstrace trace --format json …` in the end.
    pub fn start_command(mut cmd: Command) -> Hstrace {
        cmd.stdout(Stdio::piped());
        let (mut child, stderr, stderr_seen) = spawn_until_ready(&mut cmd, "hstrace: tracing");
        let out = child.stdout.take().unwrap();
        let stdout =
            thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).collect());
        Hstrace {
            child,
            stdout: Some(stdout),
            stderr,
            stderr_seen,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until a line it printed on stderr contains `text`; panics after `timeout`,
    /// with what it said.
    pub fn wait_for_stderr(&mut self, text: &str, timeout: Duration) {
        let end = Instant::now() + timeout;
        while !self.stderr_seen.iter().any(|l| l.contains(text)) {
            match self
                .stderr
                .recv_timeout(end.saturating_duration_since(Instant::now()))
            {
                Ok(line) => self.stderr_seen.push(line),
                Err(_) => panic!(
                    "hstrace did not say {text:?} within {timeout:?}:\n{}",
                    self.stderr_seen.join("\n")
                ),
            }
        }
    }

    /// Ctrl-C, then every record it printed and what it said at exit.
    pub fn stop(mut self) -> Traced {
        // let the last connections' TCP close reach the kernel side
        thread::sleep(Duration::from_millis(500));
        // SAFETY: plain kill(2) on our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().unwrap();
        let lines = self.stdout.take().expect("stopped once").join().unwrap();
        self.stderr_seen.extend(self.stderr.iter());
        let (closes, records): (Vec<Value>, Vec<Value>) = lines
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))
            })
            .partition(|r| r["record"] == "close");
        let health = self
            .stderr_seen
            .iter()
            .find(|l| l.starts_with("{\"record\":\"health\""))
            .map(|l| serde_json::from_str(l).expect("the health line is JSON"))
            .unwrap_or(Value::Null);
        for line in records.iter().chain(&closes).chain([&health]) {
            let missing = undocumented(line);
            assert!(
                missing.is_empty(),
                "the trace JSON lines are a contract: docs/trace-records.md does not list \
                 {missing:?}, written in {line}"
            );
        }
        Traced {
            records,
            closes,
            stderr: self.stderr_seen.join("\n"),
            health,
            success: status.success(),
        }
    }
}

/// The top-level fields of a JSON line that docs/trace-records.md's tables do not name (a
/// table row's first cell: every `name` in it). The doc is read at build time, so a test
/// in a VM needs no copy of it.
fn undocumented(line: &Value) -> Vec<String> {
    static NAMED: OnceLock<HashSet<String>> = OnceLock::new();
    let named = NAMED.get_or_init(|| {
        let doc = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/trace-records.md"
        ));
        doc.lines()
            .filter(|l| l.starts_with("| `"))
            .filter_map(|l| l.split('|').nth(1))
            .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(str::to_owned))
            .collect()
    });
    line.as_object()
        .map(|o| o.keys().filter(|k| !named.contains(*k)).cloned().collect())
        .unwrap_or_default()
}

/// A test that fails while hstrace runs stops it: a tracer left running keeps its BPF
/// programs attached, and the lock the test runner holds with them, for every later test.
impl Drop for Hstrace {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Spawn `cmd` (hstrace) with stderr read on a thread, and wait until a line contains
/// `ready`: the child, the rest of its stderr, and the lines seen so far.
pub fn spawn_until_ready(
    cmd: &mut Command,
    ready: &str,
) -> (Child, mpsc::Receiver<String>, Vec<String>) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hstrace binary");
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let start = Instant::now();
    let failure = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                let done = line.contains(ready);
                seen.push(line);
                if done {
                    return (child, rx, seen);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break format!("hstrace exited before {ready:?}");
            }
        }
        if start.elapsed() >= Duration::from_secs(30) {
            break format!("hstrace did not say {ready:?}");
        }
    };
    // not left running (still attached) into the next test
    let _ = child.kill();
    let _ = child.wait();
    panic!("{failure}:\n{}", seen.join("\n"))
}

/// Run hstrace to completion, no input: its exit status and output.
pub fn hstrace_output(args: &[&str]) -> std::process::Output {
    Command::new(hstrace_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Run hstrace to completion (for argument and error checks).
pub fn hstrace_run(args: &[&str]) -> (bool, String) {
    let out = hstrace_output(args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
