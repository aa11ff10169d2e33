//! Processes the tests and xtask's jobs look at or steer through the kernel: children, CPU
//! time and memory from /proc, the CPUs a thread may run on, stopped and continued.

use std::{collections::BTreeSet, fs, io};

/// Direct children of `pid`.
pub fn children(pid: u32) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.insert(p);
        }
    }
    out
}

/// A process stopped (SIGSTOP) until this is dropped (SIGCONT): connections queue in its
/// accept queue meanwhile. Continued even when the test panics, or nginx's master would
/// wait for the stopped worker forever when the test's server is dropped.
pub struct Stopped(i32);

impl Stopped {
    pub fn new(pid: u32) -> Stopped {
        // SAFETY: plain kill(2) on a process the test started
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        Stopped(pid as i32)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// CPU seconds a process has run so far, to the nanosecond: the sum of its threads' run
/// times in /proc/PID/task/*/schedstat, else /proc/PID/stat's clock ticks (10 ms steps).
pub fn process_run_secs(pid: u32) -> io::Result<f64> {
    let tasks = fs::read_dir(format!("/proc/{pid}/task"));
    let ns: Option<f64> = tasks.ok().and_then(|dir| {
        dir.map(|t| {
            let text = fs::read_to_string(t.ok()?.path().join("schedstat")).ok()?;
            text.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum()
    });
    match ns {
        Some(ns) => Ok(ns / 1e9),
        None => process_cpu_secs(pid),
    }
}

/// CPU seconds (user + system) a process has used so far, from /proc/PID/stat's clock
/// ticks.
pub fn process_cpu_secs(pid: u32) -> io::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat =
        fs::read_to_string(&path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    // the comm field may hold spaces and parentheses: fields resume after the last ')'
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .ok_or_else(|| io::Error::other(format!("{path}: not a stat line")))?
        .1
        .split_whitespace()
        .collect();
    // utime, stime: fields 14 and 15 of stat, 12 and 13 after the comm
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| f.get(*i)?.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions
    Ok(ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64)
}

/// A process's resident memory now (KiB, /proc/PID/status's VmRSS), 0 if it is gone.
pub fn process_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A process's peak resident memory so far (KiB, VmHWM), 0 if it is gone.
pub fn process_peak_rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// The KiB figure of one line of /proc/PID/status, 0 if there is none.
fn status_kib(pid: u32, key: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Run thread `tid` (0: the caller) on `cpu` only. Only sched_setaffinity and errno: safe
/// between fork and exec.
pub fn pin_thread(tid: i32, cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is the empty set, CPU_SET stays inside it, and
    // sched_setaffinity only reads it
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Run every thread of process `pid` on `cpu` only (threads it starts later inherit it).
pub fn pin(pid: u32, cpu: usize) -> io::Result<()> {
    for task in fs::read_dir(format!("/proc/{pid}/task"))? {
        let tid: i32 = task?
            .file_name()
            .to_string_lossy()
            .parse()
            .map_err(io::Error::other)?;
        match pin_thread(tid, cpu) {
            // a thread that ended since the listing needs no pinning
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            r => r.map_err(|e| {
                io::Error::new(e.kind(), format!("cannot pin {pid} to CPU {cpu}: {e}"))
            })?,
        }
    }
    Ok(())
}
