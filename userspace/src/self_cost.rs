//! What the daemon itself costs, read at each scrape: the standard `process_*` series every
//! Prometheus exporter has (CPU, memory, file descriptors, start time, from /proc/self), and
//! the run time of its BPF programs as the kernel counts it (`hstrace_bpf_*`, from the
//! programs' fdinfo: counted only while kernel.bpf_stats_enabled is 1). prometheus-client
//! has no process collector, and the one crate that adds it is built for an older
//! prometheus-client, so these few lines read /proc themselves.

use std::fs;

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
    registry::Unit,
};

/// Where the kernel says whether it counts BPF programs' runs.
pub const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// The process's own figures, from /proc/self.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Process {
    /// user + system CPU, seconds
    pub cpu_s: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub threads: u64,
    /// since the epoch, seconds
    pub start_time_s: f64,
    pub open_fds: u64,
    /// the soft limit of open files (RLIMIT_NOFILE)
    pub max_fds: u64,
}

impl Process {
    /// Read now; `None` where /proc cannot be read (then no series, not zeros).
    pub fn read() -> Option<Process> {
        let stat = fs::read_to_string("/proc/self/stat").ok()?;
        let boot_s = boot_time_s(&fs::read_to_string("/proc/stat").ok()?)?;
        let open_fds = fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given
        let max_fds = match unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } {
            0 => limit.rlim_cur,
            _ => return None,
        };
        // SAFETY: sysconf has no preconditions
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if ticks <= 0 || page <= 0 {
            return None;
        }
        from_stat(&stat, ticks as f64, page as u64, boot_s).map(|p| Process {
            open_fds,
            max_fds,
            ..p
        })
    }
}

/// /proc/PID/stat's fields past the command (whose parentheses may hold anything): CPU,
/// memory, threads and start time; the descriptors are left at 0.
fn from_stat(stat: &str, ticks: f64, page: u64, boot_s: f64) -> Option<Process> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // fields from the 3rd (state) on: the n-th of proc(5) is f[n - 3]
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(Process {
        cpu_s: (num(14)? + num(15)?) as f64 / ticks,
        threads: num(20)?,
        start_time_s: boot_s + num(22)? as f64 / ticks,
        virtual_bytes: num(23)?,
        resident_bytes: num(24)? * page,
        open_fds: 0,
        max_fds: 0,
    })
}

/// The boot time, seconds since the epoch (/proc/stat's `btime`).
fn boot_time_s(proc_stat: &str) -> Option<f64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|s| s as f64)
}

/// The `process_*` series (registered in a registry without the `hstrace_` prefix: their
/// names are the convention's).
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(p) = Process::read() else {
            return Ok(());
        };
        let counter = ConstCounter::new(p.cpu_s);
        counter.encode(encoder.encode_descriptor(
            "process_cpu",
            "Total user and system CPU time spent in seconds",
            Some(&Unit::Seconds),
            counter.metric_type(),
        )?)?;
        let gauges: [(&str, &str, Option<Unit>, f64); 6] = [
            (
                "process_resident_memory",
                "Resident memory size in bytes",
                Some(Unit::Bytes),
                p.resident_bytes as f64,
            ),
            (
                "process_virtual_memory",
                "Virtual memory size in bytes",
                Some(Unit::Bytes),
                p.virtual_bytes as f64,
            ),
            (
                "process_start_time",
                "Start time of the process since unix epoch in seconds",
                Some(Unit::Seconds),
                p.start_time_s,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                None,
                p.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                None,
                p.max_fds as f64,
            ),
            (
                "process_threads",
                "Number of OS threads in the process",
                None,
                p.threads as f64,
            ),
        ];
        for (name, help, unit, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(
                name,
                help,
                unit.as_ref(),
                gauge.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// Runs and run time of the BPF programs this process holds, summed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BpfRuns {
    pub programs: u64,
    pub runs: u64,
    pub run_ns: u64,
}

impl BpfRuns {
    /// Read now from /proc/self/fdinfo (each BPF program's `run_cnt` and `run_time_ns`).
    pub fn read() -> BpfRuns {
        let mut total = BpfRuns::default();
        let Ok(fds) = fs::read_dir("/proc/self/fdinfo") else {
            return total;
        };
        // a program held by two fds counts once
        let mut seen = std::collections::BTreeSet::new();
        for fd in fds.flatten() {
            if let Some((id, runs, ns)) = fs::read_to_string(fd.path())
                .ok()
                .and_then(|t| prog_runs(&t))
            {
                if seen.insert(id) {
                    total.programs += 1;
                    total.runs += runs;
                    total.run_ns += ns;
                }
            }
        }
        total
    }
}

/// A BPF program's (`prog_id`, `run_cnt`, `run_time_ns`) from its fdinfo; `None` for
/// another fd (a link's names its program's id too, but has no counts).
fn prog_runs(fdinfo: &str) -> Option<(u64, u64, u64)> {
    Some((
        fdinfo_field(fdinfo, "prog_id:")?,
        fdinfo_field(fdinfo, "run_cnt:")?,
        fdinfo_field(fdinfo, "run_time_ns:")?,
    ))
}

/// A number field of a BPF object's fdinfo (`name` with its colon), `None` where it has
/// none (an older kernel's, or another kind of fd).
pub(crate) fn fdinfo_field(fdinfo: &str, name: &str) -> Option<u64> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().parse().ok())
}

/// Whether the kernel counts BPF programs' runs now (kernel.bpf_stats_enabled); `None`
/// where it cannot be read.
pub fn bpf_stats_enabled() -> Option<bool> {
    fs::read_to_string(BPF_STATS).ok().map(|v| v.trim() != "0")
}

/// `hstrace_bpf_*`: hstrace's BPF programs' run time as the kernel counts it (registered
/// in the `hstrace_` registry).
#[derive(Debug, Default)]
pub struct BpfCollector;

impl Collector for BpfCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let b = BpfRuns::read();
        let runs = ConstCounter::new(b.runs);
        runs.encode(encoder.encode_descriptor(
            "bpf_runs",
            "Runs of hstrace's BPF programs, as the kernel counts them: only while kernel.bpf_stats_enabled is 1 (see hstrace_bpf_stats_enabled)",
            None,
            runs.metric_type(),
        )?)?;
        let time = ConstCounter::new(b.run_ns as f64 * 1e-9);
        time.encode(encoder.encode_descriptor(
            "bpf_run",
            "Time hstrace's BPF programs ran, as the kernel counts it: only while kernel.bpf_stats_enabled is 1 (see hstrace_bpf_stats_enabled)",
            Some(&Unit::Seconds),
            time.metric_type(),
        )?)?;
        let programs = ConstGauge::new(b.programs as i64);
        programs.encode(encoder.encode_descriptor(
            "bpf_programs",
            "BPF programs hstrace holds loaded",
            None,
            programs.metric_type(),
        )?)?;
        if let Some(on) = bpf_stats_enabled() {
            let enabled = ConstGauge::new(i64::from(on));
            enabled.encode(encoder.encode_descriptor(
                "bpf_stats_enabled",
                "1 while the kernel counts BPF programs' run time (sysctl kernel.bpf_stats_enabled=1, which costs some 20 ns a run), else 0: hstrace_bpf_run_seconds_total does not move",
                None,
                enabled.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command with a parenthesis and spaces in it does not shift the fields.
    #[test]
    fn stat_fields_are_read_past_the_command() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss
        let stat = "42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 7 0 1000 123456789 300 18446744073709551615";
        let p = from_stat(stat, 100.0, 4096, 1_700_000_000.0).unwrap();
        assert_eq!(p.cpu_s, 3.0);
        assert_eq!(p.threads, 7);
        assert_eq!(p.start_time_s, 1_700_000_010.0);
        assert_eq!(p.virtual_bytes, 123456789);
        assert_eq!(p.resident_bytes, 300 * 4096);
        assert_eq!(from_stat("42 (short) S 1", 100.0, 4096, 0.0), None);
    }

    #[test]
    fn boot_time_is_btime() {
        assert_eq!(
            boot_time_s("cpu  1 2 3\nbtime 1700000000\nprocesses 5\n"),
            Some(1_700_000_000.0)
        );
        assert_eq!(boot_time_s("cpu 1\n"), None);
    }

    /// A program's fdinfo counts; a map's, a link's or a file's is not a program.
    #[test]
    fn only_programs_are_counted() {
        let prog = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nprog_type:\t5\nprog_jited:\t1\nprog_tag:\tabc\nmemlock:\t4096\nprog_id:\t77\nrun_time_ns:\t12345\nrun_cnt:\t9\nrecursion_misses:\t0\nverified_insns:\t10\n";
        assert_eq!(prog_runs(prog), Some((77, 9, 12345)));
        let map = "pos:\t0\nflags:\t02000002\nmap_type:\t27\nmap_id:\t5\n";
        assert_eq!(prog_runs(map), None);
        let link = "pos:\t0\nflags:\t02000000\nlink_type:\ttracepoint\nlink_id:\t12\nprog_tag:\tabc\nprog_id:\t77\n";
        assert_eq!(prog_runs(link), None);
        assert_eq!(prog_runs("pos:\t0\nflags:\t0100000\n"), None);
    }

    /// This process reads itself: CPU and memory above zero, its start before now.
    #[test]
    fn this_process_reads_itself() {
        let p = Process::read().expect("/proc/self");
        assert!(
            p.resident_bytes > 0 && p.virtual_bytes >= p.resident_bytes,
            "{p:?}"
        );
        assert!(p.open_fds >= 3 && p.max_fds >= p.open_fds, "{p:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            p.start_time_s <= now + 1.0 && p.start_time_s > now - 86400.0 * 365.0,
            "{p:?}"
        );
    }
}
