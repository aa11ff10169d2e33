//! The host's CPUs as the traced servers share them: which CPUs the servers' processes may
//! run on (their affinity), and how busy those CPUs were (/proc/stat). Less the servers'
//! own CPU time, that is the work of everything else on their CPUs (other programs, the
//! kernel's interrupts, hstrace itself), which the queueing model takes off the servers'
//! capacity. Read by the source once a second, beside each traced process's CPU.

use std::{collections::BTreeSet, fs};

use crate::clock;

/// Each CPU's busy time so far, ns, by CPU number (from /proc/stat's `cpuN` lines: user,
/// nice, system, irq and softirq; not idle, iowait, or steal, the time the hypervisor ran
/// something else, which a stage's on-CPU time already holds). None when unreadable.
pub fn busy_ns() -> Option<Vec<(u32, u64)>> {
    parse_stat(&fs::read_to_string("/proc/stat").ok()?, clock::tick_ns())
}

/// `busy_ns` of /proc/stat's text, its counters in ticks of `tick_ns`.
fn parse_stat(text: &str, tick_ns: u64) -> Option<Vec<(u32, u64)>> {
    let mut cpus = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(cpu) = fields
            .next()
            .and_then(|name| name.strip_prefix("cpu"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let ticks: Vec<u64> = fields.map_while(|f| f.parse().ok()).collect();
        // user nice system idle iowait irq softirq
        let busy = [0, 1, 2, 5, 6]
            .iter()
            .map(|&i| ticks.get(i).copied())
            .sum::<Option<u64>>()?;
        cpus.push((cpu, busy * tick_ns));
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// The CPUs process `pid` may run on; None when it is gone.
pub fn allowed(pid: u32) -> Option<BTreeSet<u32>> {
    // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity writes at most its size
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a valid cpu_set_t of `size` bytes
    if unsafe { libc::sched_getaffinity(pid as libc::pid_t, size, &mut set) } != 0 {
        return None;
    }
    let bits = 8 * size as u32;
    // SAFETY: CPU_ISSET reads the set within its size
    Some(
        (0..bits)
            .filter(|&c| unsafe { libc::CPU_ISSET(c as usize, &set) })
            .collect(),
    )
}

/// What the traced servers' CPUs did since the last reading.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostCpu {
    /// the clock time between the two readings
    pub span_ns: u64,
    /// the CPUs the traced processes may run on (the union of their affinity)
    pub cpus: u32,
    /// those CPUs' busy time
    pub busy_ns: u64,
    /// the traced processes' CPU time
    pub traced_ns: u64,
}

/// The busy time between two readings of `busy_ns` of the CPUs in `on`.
pub fn busy_between(before: &[(u32, u64)], now: &[(u32, u64)], on: &BTreeSet<u32>) -> u64 {
    now.iter()
        .filter(|(cpu, _)| on.contains(cpu))
        .filter_map(|(cpu, ns)| {
            let (_, then) = before.iter().find(|(c, _)| c == cpu)?;
            Some(ns.saturating_sub(*then))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  100 5 50 9000 10 3 2 7 0 0
cpu0 60 5 30 4000 5 2 1 4 0 0
cpu1 40 0 20 5000 5 1 1 3 0 0
intr 12345
ctxt 999
";

    #[test]
    fn busy_is_user_nice_system_irq_and_softirq_of_each_cpu() {
        let cpus = parse_stat(STAT, 10_000_000).unwrap();
        // cpu0: 60 + 5 + 30 + 2 + 1 ticks of 10 ms; the all-CPU line is not a CPU
        assert_eq!(cpus, vec![(0, 980_000_000), (1, 620_000_000)]);
        assert_eq!(parse_stat("intr 1\n", 10_000_000), None);
        // a line cut short is not read as idle
        assert_eq!(parse_stat("cpu0 1 2 3\n", 10_000_000), None);
    }

    #[test]
    fn busy_between_counts_the_cpus_asked_for() {
        let before = [(0, 100), (1, 1_000), (2, 50)];
        let now = [(0, 400), (1, 1_500), (2, 60), (3, 9)];
        let on: BTreeSet<u32> = [0, 1, 3].into();
        // cpu 3 came online since: nothing to subtract from, left out
        assert_eq!(busy_between(&before, &now, &on), 300 + 500);
    }

    #[test]
    fn this_process_may_run_on_a_cpu_and_the_host_was_busy() {
        let own = allowed(std::process::id()).unwrap();
        assert!(!own.is_empty());
        assert!(busy_ns().unwrap().iter().any(|(_, ns)| *ns > 0));
        assert_eq!(allowed(u32::MAX >> 1), None);
    }
}
