//! The tracer's health: what it reported and every way a connection could have been
//! missed. One value, read by the exit totals (text and a JSON line), `serve`'s
//! `/healthz` and self-metrics, and the tests.

use crate::{json::Object, stage::Kind};

/// A probe group and the hook it got (`None`: unavailable on this kernel).
#[derive(Debug, Clone)]
pub struct ProbeChoice {
    pub group: &'static str,
    pub hook: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Health {
    /// connection records reported, by kind (`Kind::ALL` order)
    pub connections: [u64; 4],
    /// close lines reported
    pub closes: u64,
    /// connections the selected servers accepted, counted in the kernel: each is tracked,
    /// or counted in `table_full` or `accepted_without_socket`
    pub accepted: u64,
    /// connections the kernel accepted and tracked
    pub tracked: u64,
    /// connections accepted while the connection table was full: never tracked
    pub table_full: u64,
    /// connections whose record has not been made yet (in the kernel's map)
    pub in_progress: u64,
    /// connections not closed yet: their close lines are still to come
    pub open: u64,
    /// connection records the ring buffer had no room for
    pub records_lost: u64,
    /// hello captures the ring buffer had no room for
    pub hellos_lost: u64,
    /// hellos whose connection record never came
    pub hellos_unmatched: u64,
    /// pieces of hellos (split over records or reads) not kept: over the tracer's budget
    pub hello_pieces_dropped: u64,
    /// close lines the ring buffer had no room for
    pub closes_lost: u64,
    /// connections evicted from the full table before their record was made
    pub state_evicted: u64,
    /// connections evicted from the full table: their close lines will not come
    pub closes_evicted: u64,
    /// accepted connections whose socket became a new connection's before their end was
    /// seen: their records and close lines are lost
    pub end_missed: u64,
    /// the same, after their records were sent: their close lines are lost
    pub close_missed: u64,
    /// entries left in each per-connection table (counted at exit; empty before)
    pub table_entries: Vec<(&'static str, u64)>,
    /// reads/writes missed because another thread held the same in-flight slot
    pub io_slot_taken: u64,
    /// runs of hstrace's hooks the kernel skipped and counted, for any process's calls
    /// (skipped.rs): not a count of lost connections, an upper bound of lost events
    pub hook_runs_skipped: u64,
    /// connections whose record stream stopped parsing
    pub record_stream_desync: u64,
    /// sockets established while the connection table (`--max-conns`, which sockets
    /// waiting in an accept queue share) was full: their records have no `accept_queue`
    pub accept_queue_unmeasured: u64,
    /// accepted fds whose socket could not be resolved
    pub accepted_without_socket: u64,
    /// kernel records of connections the sweep had already reported (not reported twice)
    pub duplicates: u64,
    /// ring-buffer items that did not decode
    pub undecodable: u64,
    /// processes traced now
    pub traced_processes: u64,
    /// every process `--pid` selected has exited (and the ones it started): nothing
    /// left to trace (`trace` and `export` end; `serve` says so here)
    pub selection_exited: bool,
    /// processes whose libssl could not be hooked (traced from the wire only)
    pub uprobe_attach_failures: u64,
    /// processes whose uprobes tied no call to a connection (memory BIOs, Node.js): their
    /// uprobes were detached, and they are traced from the wire only
    pub uprobes_untied: u64,
    /// the build of the BPF programs loaded (features.rs), and the kernel features its
    /// default build uses that this kernel lacks
    pub bpf_build: &'static str,
    pub kernel_lacks: Vec<&'static str>,
    pub probes: Vec<ProbeChoice>,
}

impl Health {
    pub fn reported(&self) -> u64 {
        self.connections.iter().sum()
    }

    /// Every way a connection record could have been missed, as (cause, count): the
    /// names are `hstrace_lost_total`'s `cause` label values.
    pub fn losses(&self) -> [(&'static str, u64); 11] {
        [
            ("ring_buffer_full", self.records_lost),
            ("hello_ring_buffer_full", self.hellos_lost),
            ("close_ring_buffer_full", self.closes_lost),
            ("state_evicted", self.state_evicted),
            ("table_full", self.table_full),
            ("close_evicted", self.closes_evicted),
            ("io_slot_taken", self.io_slot_taken),
            ("hello_without_record", self.hellos_unmatched),
            ("hello_pieces_over_budget", self.hello_pieces_dropped),
            ("end_missed", self.end_missed),
            ("close_missed", self.close_missed),
        ]
    }

    /// Accepted connections neither reported, in progress, nor lost with a counted cause:
    /// 0 unless hstrace has a bug (reported + in progress + lost = accepted). Meaningful
    /// once the ring buffer has been drained (at exit).
    pub fn unaccounted(&self) -> i64 {
        self.accepted as i64
            - (self.reported()
                + self.in_progress
                + self.records_lost
                + self.state_evicted
                + self.table_full
                + self.end_missed
                + self.accepted_without_socket) as i64
    }

    /// The same for close lines: every tracked connection's close line is reported, still
    /// to come (open), or lost with a counted cause.
    pub fn closes_unaccounted(&self) -> i64 {
        self.tracked as i64
            - (self.closes
                + self.open
                + self.closes_lost
                + self.closes_evicted
                + self.end_missed
                + self.close_missed) as i64
    }

    /// The exit totals, as lines for stderr.
    pub fn text(&self) -> String {
        let kinds: Vec<String> = sorted_kinds()
            .into_iter()
            .filter(|k| self.connections[*k as usize] > 0)
            .map(|k| format!("{} {}", k.name(), self.connections[k as usize]))
            .collect();
        let mut s = format!(
            "hstrace: {} connections ({})\n",
            self.reported(),
            kinds.join(", ")
        );
        s.push_str(&format!(
            "hstrace: accepted {}, tracked {}, still in progress {}, records lost (ring buffer full) {}, accepted while the table was full {}, evicted from the full table {} (their close lines {}), hellos lost {}, hellos without a record {}, close lines lost {}, reads/writes/SSL calls lost to a shared thread slot {}, hook runs the kernel skipped (any process's) {}\n",
            self.accepted,
            self.tracked,
            self.in_progress,
            self.records_lost,
            self.table_full,
            self.state_evicted,
            self.closes_evicted,
            self.hellos_lost,
            self.hellos_unmatched,
            self.closes_lost,
            self.io_slot_taken,
            self.hook_runs_skipped
        ));
        if self.table_full + self.state_evicted > 0 {
            s.push_str(
                "hstrace: more live connections than --max-conns: raise it to trace them all\n",
            );
        }
        if self.end_missed + self.close_missed > 0 {
            s.push_str(&format!(
                "hstrace: {} connections ended unseen (their sockets became new connections before hstrace saw them close): {} records and {} close lines lost; this is a gap in hstrace's hooks on this kernel, please report it with `hstrace trace -v`'s probe lines\n",
                self.end_missed + self.close_missed,
                self.end_missed,
                self.end_missed + self.close_missed
            ));
        }
        if self.hook_runs_skipped > 0 {
            s.push_str(&format!(
                "hstrace: the kernel skipped {} runs of hstrace's hooks, for any process's calls (a BPF program already running on that CPU, or a kretprobe with no free instance): those of traced connections are missing, and their records lack a stage or a request (docs/accounting.md)\n",
                self.hook_runs_skipped
            ));
        }
        if self.accept_queue_unmeasured > 0 {
            s.push_str(&format!(
                "hstrace: {} connections waited to be accepted while --max-conns sockets already did: their accept_queue is not measured (raise --max-conns)\n",
                self.accept_queue_unmeasured
            ));
        }
        for p in &self.probes {
            if p.hook.is_none() {
                s.push_str(&format!(
                    "hstrace: probe group {} was unavailable\n",
                    p.group
                ));
            }
        }
        if !self.kernel_lacks.is_empty() {
            s.push_str(&format!(
                "hstrace: the {} build of the BPF programs ran: this kernel lacks {} (-v says what each costs)\n",
                self.bpf_build,
                self.kernel_lacks.join(", ")
            ));
        }
        s
    }

    /// One JSON object: `{"record": "health", …}` (`trace --format json` prints it on
    /// stderr at exit; `serve` answers it on /healthz).
    pub fn json(&self) -> String {
        let mut out = Vec::with_capacity(1024);
        let mut o = Object::begin(&mut out);
        o.str("record", "health");
        o.object("connections", |m| {
            for k in Kind::ALL {
                m.u64(k.name(), self.connections[k as usize]);
            }
        });
        o.u64("reported", self.reported())
            .u64("closes", self.closes)
            .u64("accepted", self.accepted)
            .u64("tracked", self.tracked)
            .u64("in_progress", self.in_progress)
            .u64("open", self.open);
        o.object("lost", |m| {
            for (cause, n) in self.losses() {
                m.u64(cause, n);
            }
        });
        o.u64("record_stream_desync", self.record_stream_desync)
            .u64("hook_runs_skipped", self.hook_runs_skipped)
            .u64("accept_queue_unmeasured", self.accept_queue_unmeasured)
            .u64("accepted_without_socket", self.accepted_without_socket)
            .u64("duplicates", self.duplicates)
            .u64("undecodable", self.undecodable)
            .u64("traced_processes", self.traced_processes)
            .bool("selection_exited", self.selection_exited)
            .u64("uprobe_attach_failures", self.uprobe_attach_failures)
            .u64("uprobes_untied", self.uprobes_untied);
        o.object("probes", |m| {
            for p in &self.probes {
                m.opt_str(p.group, p.hook.as_deref());
            }
        });
        o.str("bpf_build", self.bpf_build);
        o.strs("kernel_lacks", &self.kernel_lacks);
        if !self.table_entries.is_empty() {
            o.object("tables", |m| {
                for (name, n) in &self.table_entries {
                    m.u64(name, *n);
                }
            });
        }
        o.end();
        String::from_utf8(out).expect("JSON is UTF-8")
    }
}

/// Kinds in the order the totals line prints them (alphabetical, as it always has).
fn sorted_kinds() -> Vec<Kind> {
    let mut k = Kind::ALL.to_vec();
    k.sort_by_key(|k| k.name());
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_print_every_loss_and_parse_as_json() {
        let h = Health {
            connections: [6, 6, 0, 1],
            tracked: 13,
            closes_lost: 2,
            probes: vec![ProbeChoice {
                group: "arrival",
                hook: None,
            }],
            ..Default::default()
        };
        let text = h.text();
        assert!(text.starts_with("hstrace: 13 connections (failed 1, full 6, resumed 6)\n"));
        assert!(text.contains("tracked 13, still in progress 0,"));
        assert!(!text.contains("raise"));
        assert!(text.contains("close lines lost 2,"));
        assert!(text.contains("probe group arrival was unavailable"));
        let v: serde_json::Value = serde_json::from_str(&h.json()).unwrap();
        assert_eq!(v["record"], "health");
        assert_eq!(v["connections"]["full"], 6);
        assert_eq!(v["lost"]["close_ring_buffer_full"], 2);
        assert_eq!(v["probes"]["arrival"], serde_json::Value::Null);
        assert_eq!(v["accept_queue_unmeasured"], 0);
    }

    #[test]
    fn skipped_hook_runs_are_said() {
        let h = Health {
            hook_runs_skipped: 3,
            ..Default::default()
        };
        assert!(h
            .text()
            .contains("hook runs the kernel skipped (any process's) 3\n"));
        assert!(h
            .text()
            .contains("hstrace: the kernel skipped 3 runs of hstrace's hooks"));
        let v: serde_json::Value = serde_json::from_str(&h.json()).unwrap();
        assert_eq!(v["hook_runs_skipped"], 3);
        assert!(v["lost"].get("hook_run_skipped").is_none());
        // (a skipped run loses an event, not a connection: the accounting is unchanged)
        assert_eq!(h.unaccounted(), 0);
    }

    #[test]
    fn unmeasured_accept_queues_are_said() {
        let h = Health {
            accept_queue_unmeasured: 3,
            ..Default::default()
        };
        assert!(h.text().contains(
            "hstrace: 3 connections waited to be accepted while --max-conns sockets already did"
        ));
        let v: serde_json::Value = serde_json::from_str(&h.json()).unwrap();
        assert_eq!(v["accept_queue_unmeasured"], 3);
    }
}
