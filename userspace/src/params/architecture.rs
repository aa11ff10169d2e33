//! How a server serves its connections, told from what it did: how many processes accepted
//! them, how many one process held at once, how many threads those processes run. An
//! event loop (nginx, HAProxy) holds many connections in one single-threaded process; a
//! prefork server (Apache prefork) one per process; threads (Apache worker/event) hold
//! them in many threads of few processes. `hstrace model` picks its discipline from this.

use std::collections::VecDeque;

use super::v1::ArchitectureKind;

/// Each process's most recent connections kept to count overlaps with: an event loop
/// holding more than this at once may be counted as holding fewer (never fewer than this).
pub const HELD_RECENT: usize = 256;

/// The rule, from the window's measurement: `processes` that accepted the server's
/// connections, the `most_at_once` one of them held (accept → the record's end), the most
/// `threads` among them (None: no process could be read).
pub fn classify(processes: usize, most_at_once: u32, threads: Option<u32>) -> ArchitectureKind {
    match threads {
        Some(t) if t > 1 => ArchitectureKind::Threads,
        // a single-threaded process with several connections open: it multiplexes them
        Some(_) if most_at_once > 1 => ArchitectureKind::EventLoop,
        // several connections at once with the threads unread: an event loop or threads
        None if most_at_once > 1 => ArchitectureKind::Unknown,
        // one at a time, each process: prefork; one process alone cannot tell
        _ if processes > 1 => ArchitectureKind::ProcessPerConnection,
        _ => ArchitectureKind::Unknown,
    }
}

/// One connection a process held: from its accept to its record's end (ns, one clock),
/// and how many of the connections seen so far were open at its accept.
#[derive(Debug, Clone, Copy)]
struct Open {
    accept: i128,
    end: i128,
    at_accept: u32,
}

/// One process's recent connections, to count the most it held at once. The most
/// connections open at one instant are all open at the latest accept among them, so it is
/// the most open at any connection's accept; records come at their ends, so a connection's
/// count grows as the records of those that were open at its accept come in.
#[derive(Debug, Clone, Default)]
pub struct Held {
    recent: VecDeque<Open>,
}

impl Held {
    /// A connection held from `accept` to `end`: the most open at once among the recent
    /// ones, counting this one.
    pub fn add(&mut self, accept: i128, end: i128) -> u32 {
        let mut most = 1;
        let mut at_accept = 1;
        for k in &mut self.recent {
            if k.accept <= accept && accept <= k.end {
                at_accept += 1;
            }
            if accept <= k.accept && k.accept <= end {
                k.at_accept += 1;
                most = most.max(k.at_accept);
            }
        }
        if self.recent.len() == HELD_RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back(Open {
            accept,
            end,
            at_accept,
        });
        most.max(at_accept)
    }
}

/// `Threads:` of /proc/PID/status; None when the process is gone or unreadable.
pub fn proc_threads(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The CPUs online (/sys/devices/system/cpu/online; sysconf where it cannot be read): a
/// cpuset limits what a process may use, not what the host runs.
pub fn online_cpus() -> Option<u32> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| count_cpu_list(&s))
        .or_else(|| {
            // SAFETY: sysconf reads a constant, no pointer is passed
            let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
            u32::try_from(n).ok().filter(|&n| n > 0)
        })
}

/// The CPUs of a kernel CPU list: "0-3,6,8-9" is 7.
pub fn count_cpu_list(list: &str) -> Option<u32> {
    let mut n = 0;
    for part in list.trim().split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?),
            None => {
                let a = part.trim().parse::<u32>().ok()?;
                (a, a)
            }
        };
        n += b.checked_sub(a)? + 1;
    }
    (n > 0).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ArchitectureKind::*;

    #[test]
    fn the_rule() {
        // nginx: 2 single-threaded workers, 14 connections each at once
        assert_eq!(classify(2, 14, Some(1)), EventLoop);
        // HAProxy: one process, one thread, many at once
        assert_eq!(classify(1, 30, Some(1)), EventLoop);
        // Apache prefork: never two at once, several children
        assert_eq!(classify(4, 1, Some(1)), ProcessPerConnection);
        assert_eq!(classify(4, 1, None), ProcessPerConnection);
        // Apache worker/event, Node with its pool: threads, however many at once
        assert_eq!(classify(2, 25, Some(27)), Threads);
        assert_eq!(classify(1, 1, Some(7)), Threads);
        // one process that never held two: cannot tell
        assert_eq!(classify(1, 1, Some(1)), Unknown);
        assert_eq!(classify(1, 0, None), Unknown);
        // many at once, threads unread (the processes gone): an event loop or threads
        assert_eq!(classify(2, 9, None), Unknown);
    }

    /// Records come at their connections' ends, in any order of accepts; the count is
    /// the most open at one instant, whichever record closes the set.
    #[test]
    fn the_most_held_at_once() {
        let mut h = Held::default();
        // one after another: never two
        assert_eq!(h.add(0, 10), 1);
        assert_eq!(h.add(11, 20), 1);
        // [30, 50] and [35, 40] overlap; [45, 60] overlaps [30, 50] only
        let mut h = Held::default();
        assert_eq!(h.add(35, 40), 1);
        assert_eq!(h.add(30, 50), 2);
        assert_eq!(h.add(45, 60), 2);
        // a long one, accepted first and recorded last, open across all three: 3 at 35
        assert_eq!(h.add(0, 70), 3);
        // touching ends count as open at once (the same instant)
        let mut h = Held::default();
        h.add(0, 10);
        assert_eq!(h.add(10, 20), 2);
        // bounded: past HELD_RECENT the oldest are forgotten
        let mut h = Held::default();
        for _ in 0..HELD_RECENT + 10 {
            h.add(0, 1_000);
        }
        assert_eq!(h.recent.len(), HELD_RECENT);
        assert!(h.add(0, 1_000) >= HELD_RECENT as u32);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(count_cpu_list("0-1\n"), Some(2));
        assert_eq!(count_cpu_list("0-3,6,8-9"), Some(7));
        assert_eq!(count_cpu_list("0"), Some(1));
        assert_eq!(count_cpu_list(""), None);
        assert_eq!(count_cpu_list("3-1"), None);
        assert!(online_cpus().unwrap() >= 1);
    }
}
