//! The real `hstrace serve` daemon under test, and reading what it exposes.

use std::{
    collections::BTreeMap,
    os::unix::process::CommandExt,
    process::{Child, Command, Stdio},
    sync::mpsc,
};

use crate::{
    hstrace::{hstrace_bin, spawn_until_ready},
    http,
    procs::process_rss_kib,
    util::free_port,
};

/// `hstrace serve ARGS --listen 127.0.0.1:<free port>`, stopped (SIGINT) on drop.
pub struct Daemon {
    child: Child,
    pub addr: String,
    stderr: mpsc::Receiver<String>,
    pub stderr_seen: Vec<String>,
}

impl Daemon {
    /// Start and wait until it says it serves.
    pub fn start(args: &[&str]) -> Daemon {
        Daemon::start_on(args, None)
    }

    /// The same, its every thread started on `cpu` (`taskset -c CPU`): a thread that
    /// pins itself elsewhere (the cold start's) stays where it went, as it would not if the
    /// daemon's threads were moved once it runs.
    pub fn start_on(args: &[&str], cpu: Option<usize>) -> Daemon {
        Daemon::start_with(args, &[], cpu)
    }

    /// The same, with `env` added to its environment.
    pub fn start_with(args: &[&str], env: &[(&str, &str)], cpu: Option<usize>) -> Daemon {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut cmd = Command::new(hstrace_bin());
        cmd.arg("serve")
            .args(["--listen", &addr])
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null());
        if let Some(cpu) = cpu {
            // SAFETY: only sched_setaffinity (async-signal-safe) between fork and exec
            unsafe {
                cmd.pre_exec(move || crate::procs::pin_thread(0, cpu));
            }
        }
        let (child, stderr, stderr_seen) = spawn_until_ready(&mut cmd, "hstrace: serving");
        Daemon {
            child,
            addr,
            stderr,
            stderr_seen,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// GET a path; panics unless 200.
    pub fn get(&self, path: &str) -> String {
        let (status, body) = http::get(&self.addr, path);
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// One server's entry of the parameters (`comm:port`); panics without it.
    pub fn server_parameters(&self, server: &str) -> serde_json::Value {
        let p: serde_json::Value =
            serde_json::from_str(&self.get("/api/v1/parameters")).expect("the parameters are JSON");
        p["servers"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["server"] == server))
            .cloned()
            .unwrap_or_else(|| panic!("no {server}: {p}"))
    }

    /// The metrics, parsed.
    pub fn scrape(&self) -> Scrape {
        Scrape::parse(&self.get("/metrics"))
    }

    /// Resident memory of the daemon, KiB.
    pub fn rss_kib(&self) -> u64 {
        let kib = process_rss_kib(self.pid());
        assert!(kib > 0, "no VmRSS for the daemon (pid {})", self.pid());
        kib
    }

    /// Everything it said on stderr so far.
    pub fn stderr_now(&mut self) -> String {
        self.stderr_seen.extend(self.stderr.try_iter());
        self.stderr_seen.join("\n")
    }

    /// Ctrl-C, then everything it said on stderr; panics if it failed.
    pub fn stop(mut self) -> String {
        // SAFETY: plain kill(2) on our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().unwrap();
        self.stderr_seen.extend(self.stderr.try_iter());
        let text = self.stderr_seen.join("\n");
        assert!(status.success(), "hstrace serve failed:\n{text}");
        text
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let _ = self.child.wait();
    }
}

/// One scrape: every sample as (name, labels) → value.
pub struct Scrape {
    pub text: String,
    pub samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

impl Scrape {
    pub fn parse(text: &str) -> Scrape {
        let mut samples = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (series, value) = line.rsplit_once(' ').expect("name value");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let mut map = BTreeMap::new();
            // label values here never hold `",` (names, stages, SNIs, ciphers)
            for pair in labels.split("\",").filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                map.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
            }
            samples.push((name.to_owned(), map, value.parse().expect("a number")));
        }
        Scrape {
            text: text.to_owned(),
            samples,
        }
    }

    /// The sum of a metric's samples whose labels include every `(label, value)` given.
    pub fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && with
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// How many series the exposition has.
    pub fn series(&self) -> usize {
        self.samples.len()
    }

    /// The series of this scrape that `earlier` did not have, and those it had that this
    /// one has not, each as `name{labels}`.
    pub fn series_changed(&self, earlier: &Scrape) -> (Vec<String>, Vec<String>) {
        let keys = |s: &Scrape| -> std::collections::BTreeSet<String> {
            s.samples
                .iter()
                .map(|(n, l, _)| format!("{n}{l:?}"))
                .collect()
        };
        let (now, then) = (keys(self), keys(earlier));
        (
            now.difference(&then).cloned().collect(),
            then.difference(&now).cloned().collect(),
        )
    }
}
