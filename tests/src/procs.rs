//! Processes the tests and xtask's jobs look at or steer through the kernel: children, CPU
//! time and memory from /proc, the CPUs a thread may run on, stopped and continued.

use std::{
    collections::BTreeSet,
    fs, io,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc,
    },
    thread,
};

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
    Ok(stat_cpu_secs(&stat_fields(&format!("/proc/{pid}/stat"))?))
}

/// The fields of a /proc stat line (a process's or a thread's, `/proc/PID/task/TID/stat`)
/// from field 3, its state, on: field n is at n − 3. The comm before them may hold spaces
/// and parentheses: they resume after the last ')'.
pub fn stat_fields(path: &str) -> io::Result<Vec<String>> {
    let stat =
        fs::read_to_string(path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?;
    Ok(stat
        .rsplit_once(')')
        .ok_or_else(|| io::Error::other(format!("{path}: not a stat line")))?
        .1
        .split_whitespace()
        .map(String::from)
        .collect())
}

/// The CPU seconds a stat line's fields (`stat_fields`) count: utime and stime, fields 14
/// and 15.
pub fn stat_cpu_secs(fields: &[String]) -> f64 {
    let ticks: f64 = [14, 15]
        .iter()
        .filter_map(|n| fields.get(n - 3)?.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
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

/// Run the calling thread at a scheduling `policy` (`libc::SCHED_*`) and `priority`. At
/// SCHED_FIFO (priority 1-99, root only) it preempts every ordinary task on its CPU and
/// runs until it blocks; processes it starts inherit the policy.
pub fn schedule_thread(policy: i32, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: pid 0 is the calling thread, and the kernel only reads param
    match unsafe { libc::sched_setscheduler(0, policy, &param) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Run every thread of process `pid` at a scheduling `policy` (`libc::SCHED_*`) and
/// `priority` (threads it starts later inherit it).
pub fn schedule(pid: u32, policy: i32, priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    for_each_thread(pid, |tid| {
        // SAFETY: the kernel only reads param
        match unsafe { libc::sched_setscheduler(tid, policy, &param) } {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    })
    .map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot schedule {pid} at policy {policy}: {e}"),
        )
    })
}

/// The scheduling policy (`libc::SCHED_*`) of thread or process `tid`.
pub fn policy(tid: u32) -> io::Result<i32> {
    // SAFETY: plain sched_getscheduler(2)
    match unsafe { libc::sched_getscheduler(tid as i32) } {
        -1 => Err(io::Error::last_os_error()),
        p => Ok(p),
    }
}

/// `each` for every thread of process `pid`; a thread that ended since the listing is
/// skipped.
fn for_each_thread(pid: u32, mut each: impl FnMut(i32) -> io::Result<()>) -> io::Result<()> {
    for task in fs::read_dir(format!("/proc/{pid}/task"))? {
        let tid: i32 = task?
            .file_name()
            .to_string_lossy()
            .parse()
            .map_err(io::Error::other)?;
        match each(tid) {
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            r => r?,
        }
    }
    Ok(())
}

/// Run every thread of process `pid` on `cpu` only (threads it starts later inherit it).
pub fn pin(pid: u32, cpu: usize) -> io::Result<()> {
    for_each_thread(pid, |tid| pin_thread(tid, cpu))
        .map_err(|e| io::Error::new(e.kind(), format!("cannot pin {pid} to CPU {cpu}: {e}")))
}

/// A thread of its own on `cpu` alone at a scheduling `policy` (`libc::SCHED_*`, at
/// `priority`), running `turn` again and again until dropped (also when a test panics, so
/// it never outlives its owner). Started only once placed: a placement the kernel refuses
/// (a real-time policy without root) is the start's error.
pub struct PinnedLoop {
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl PinnedLoop {
    pub fn start(
        cpu: usize,
        policy: i32,
        priority: i32,
        mut turn: impl FnMut() + Send + 'static,
    ) -> io::Result<PinnedLoop> {
        let stop = Arc::new(AtomicBool::new(false));
        let (placed, is_placed) = mpsc::channel();
        let flag = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            let placement = pin_thread(0, cpu).and_then(|()| schedule_thread(policy, priority));
            let placed_well = placement.is_ok();
            let _ = placed.send(placement);
            while placed_well && !flag.load(Ordering::Relaxed) {
                turn();
            }
        });
        let running = PinnedLoop {
            stop,
            thread: Some(thread),
        };
        is_placed
            .recv()
            .map_err(|_| io::Error::other("the thread ended before it was placed"))??;
        Ok(running)
    }
}

impl Drop for PinnedLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
