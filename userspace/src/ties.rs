//! Are a process's OpenSSL uprobes tied to its connections?
//!
//! An `SSL_do_handshake` call is tied to a connection by the socket it reads or writes
//! while it runs. Servers that run OpenSSL over memory BIOs (Node.js, Python's asyncio)
//! make no socket I/O inside their calls, and Node.js drives handshakes through
//! `SSL_read`/`SSL_write` without ever calling `SSL_do_handshake`: their uprobes cost a
//! trap per call and tie nothing. Once the first `JUDGED_AFTER` handshakes a process
//! accepted after its uprobes were attached have all completed with no call tied, the
//! process is judged untied: the source says so once, detaches its uprobes and traces it
//! from the wire alone. A single tied handshake ends the watch for good.

use std::collections::HashMap;

/// Completed handshakes with no call tied before a process is judged untied.
pub const JUDGED_AFTER: u32 = 5;

/// Processes with uprobes attached, still watched (at most the traced processes).
#[derive(Debug, Default)]
pub struct Ties {
    watched: HashMap<u32, Watch>,
}

#[derive(Debug)]
struct Watch {
    /// when the uprobes were attached (CLOCK_MONOTONIC ns): connections accepted before
    /// may have made their calls unseen
    attached_ns: u64,
    untied: u32,
}

impl Ties {
    /// `pid`'s uprobes were attached at `now_ns`.
    pub fn attached(&mut self, pid: u32, now_ns: u64) {
        self.watched.insert(
            pid,
            Watch {
                attached_ns: now_ns,
                untied: 0,
            },
        );
    }

    /// `pid` exited or its uprobes were detached.
    pub fn forget(&mut self, pid: u32) {
        self.watched.remove(&pid);
    }

    /// A TLS handshake of `pid`, accepted at `t_accept`, completed; `tied`: a library
    /// call was tied to it.
    pub fn handshake(&mut self, pid: u32, t_accept: u64, tied: bool) {
        let Some(w) = self.watched.get_mut(&pid) else {
            return;
        };
        if tied {
            self.watched.remove(&pid);
        } else if t_accept >= w.attached_ns {
            w.untied += 1;
        }
    }

    /// Processes judged untied since the last call, each returned once.
    pub fn judged_untied(&mut self) -> Vec<u32> {
        let pids: Vec<u32> = self
            .watched
            .iter()
            .filter(|(_, w)| w.untied >= JUDGED_AFTER)
            .map(|(pid, _)| *pid)
            .collect();
        pids.iter().for_each(|pid| self.forget(*pid));
        pids
    }

    /// Processes still watched.
    #[cfg(test)]
    fn watched(&self) -> usize {
        self.watched.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judged_once_after_enough_untied_handshakes() {
        let mut t = Ties::default();
        t.attached(7, 1000);
        for i in 0..JUDGED_AFTER {
            assert!(t.judged_untied().is_empty(), "judged after {i}");
            t.handshake(7, 2000, false);
        }
        assert_eq!(t.judged_untied(), vec![7]);
        assert!(t.judged_untied().is_empty(), "said once");
        assert_eq!(t.watched(), 0);
    }

    #[test]
    fn one_tied_handshake_ends_the_watch() {
        let mut t = Ties::default();
        t.attached(7, 1000);
        for _ in 0..JUDGED_AFTER - 1 {
            t.handshake(7, 2000, false);
        }
        t.handshake(7, 2000, true);
        for _ in 0..10 * JUDGED_AFTER {
            t.handshake(7, 2000, false);
        }
        assert!(t.judged_untied().is_empty());
    }

    #[test]
    fn connections_accepted_before_the_attach_do_not_count() {
        let mut t = Ties::default();
        t.attached(7, 1000);
        for _ in 0..10 * JUDGED_AFTER {
            t.handshake(7, 999, false);
        }
        t.handshake(8, 2000, false); // not watched
        assert!(t.judged_untied().is_empty());
        assert_eq!(t.watched(), 1);
    }
}
