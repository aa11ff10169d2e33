//! The once-a-second sweep over the kernel's connection table: the connections the kernel
//! will not report on its own, because their server exited without closing them or they
//! went idle, and room for new ones when the table fills. The kernel keeps each
//! connection's outcome current (`r.outcome`); the sweep adds only why it ended one
//! (timeout, server exited).

use std::time::Duration;

use anyhow::{Context, Result};
use aya::{
    maps::{HashMap as BpfHashMap, MapData},
    Ebpf,
};

use crate::{
    abi::{self, ConnState, SslKey},
    assemble::Swept,
    clock::monotonic_ns,
};

/// bpf_map_update_elem's flag: only an entry that still exists (the kernel may have
/// forgotten the connection since the sweep read it: do not bring it back).
const BPF_EXIST: u64 = 2;

/// The kernel's per-connection tables: the connection (`conns`: from the handshake's last
/// ACK, `t_accept` 0 while its socket waits in the accept queue), its fd (`fds`) and its
/// SSL object (`ssl_socks`). The sweep reads `conns` and forgets an accepted connection
/// from all three, as the kernel's `drop_conn` does; a socket still in an accept queue is
/// the kernel's alone (it goes at accept or when the socket closes).
pub struct Tables {
    /// The connection table (the bench fills it from userspace)
    pub conns: BpfHashMap<MapData, u64, ConnState>,
    fds: BpfHashMap<MapData, u64, u64>,
    ssl_socks: BpfHashMap<MapData, SslKey, u64>,
}

/// Is this entry a socket still waiting in an accept queue (no process has it yet)?
fn queued(state: &ConnState) -> bool {
    state.r.t_accept == 0
}

impl Tables {
    pub fn take(bpf: &mut Ebpf) -> Result<Tables> {
        let mut take = |name: &str| bpf.take_map(name).with_context(|| format!("map {name}"));
        Ok(Tables {
            conns: BpfHashMap::try_from(take("conns")?)?,
            fds: BpfHashMap::try_from(take("fds")?)?,
            ssl_socks: BpfHashMap::try_from(take("ssl_socks")?)?,
        })
    }

    /// Forget connection `sk`: its state, its fd and its SSL object (unless a later
    /// connection has them).
    fn forget(&mut self, sk: u64, state: &ConnState) {
        if state.fkey != 0 && self.fds.get(&state.fkey, 0).ok() == Some(sk) {
            let _ = self.fds.remove(&state.fkey);
        }
        let k = SslKey {
            tgid: state.ssl_tgid,
            pad: 0,
            ssl: state.ssl,
        };
        if state.ssl != 0 && self.ssl_socks.get(&k, 0).ok() == Some(sk) {
            let _ = self.ssl_socks.remove(&k);
        }
        let _ = self.conns.remove(&sk);
    }

    /// Connection `conn_id`'s entry at `sk` as the kernel holds it now. None once the
    /// kernel has ended it since the sweep read it, and None when the socket already
    /// carries a newer connection (freed and reused in between): that entry is not the
    /// sweep's to overwrite or forget. (A window of one map read remains, not a pass's.)
    fn current(&self, sk: u64, conn_id: u64) -> Option<ConnState> {
        self.conns
            .get(&sk, 0)
            .ok()
            .filter(|s| !queued(s) && s.r.conn_id == conn_id)
    }

    /// Count the accepted connections in the table, changing nothing.
    pub fn census(&self) -> Census {
        let mut c = Census::default();
        for (_, state) in self.conns.iter().filter_map(|e| e.ok()) {
            if queued(&state) {
                continue;
            }
            c.open += 1;
            c.in_progress += u64::from(state.emitted == 0);
        }
        c
    }

    /// Entries in each table now, by name (all 0 once every connection has closed):
    /// `conns` as accepted connections and `conns_queued`, sockets in an accept queue.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        let (mut accepted, mut waiting) = (0, 0);
        for (_, state) in self.conns.iter().filter_map(|e| e.ok()) {
            if queued(&state) {
                waiting += 1;
            } else {
                accepted += 1;
            }
        }
        vec![
            ("conns", accepted),
            ("conns_queued", waiting),
            ("fds", self.fds.keys().count() as u64),
            ("ssl_socks", self.ssl_socks.keys().count() as u64),
        ]
    }
}

/// A response is complete when the server reads again, or after this long without.
pub const RESPONSE_IDLE: Duration = Duration::from_secs(1);

/// What one pass found: records to report, how many connections are in progress, and
/// how many it evicted to keep room.
pub struct Sweep {
    pub records: Vec<Swept>,
    pub census: Census,
    pub evicted: Evicted,
}

/// Connections in the kernel's table.
#[derive(Debug, Default, Clone, Copy)]
pub struct Census {
    /// whose record has not been made yet
    pub in_progress: u64,
    /// not closed yet (their close line is still to come)
    pub open: u64,
}

/// Connections the sweep forgot to make room, each counted once.
#[derive(Debug, Default, Clone, Copy)]
pub struct Evicted {
    /// before their record was made (handshakes in flight, idle longest): records lost
    pub unreported: u64,
    /// every evicted connection: their close lines are lost
    pub closes: u64,
}

/// When the table holds more than 7/8 of its capacity, the sweep evicts down to 3/4:
/// room for a second's worth of new connections (more in one second are counted by the
/// kernel as accepted while the table was full).
fn eviction_bounds(capacity: u64) -> (u64, u64) {
    (capacity - capacity / 8, capacity - capacity / 4)
}

/// Which connections go first when the table is too full: those already reported (only
/// their byte counts and close line are still owed) before handshakes in flight, and
/// within each, the one idle longest. Returns the keys and connection ids to evict.
fn eviction_order(mut live: Vec<(bool, u64, u64, u64)>, excess: usize) -> Vec<(u64, u64)> {
    // (unreported, last activity, key, connection): false < true, older < newer
    live.sort_unstable();
    live.into_iter()
        .take(excess)
        .map(|(_, _, sk, id)| (sk, id))
        .collect()
}

/// Connections whose server exited (`gone`: reported and forgotten, with their close),
/// and those idle past `idle_timeout` (reported, then only counted by the kernel until
/// they close). A response is complete when the server reads again; one whose server
/// does not (it handed the connection back to an event loop) is reported once it has been
/// idle for RESPONSE_IDLE. Then, if the table is nearly full (`capacity`: its size,
/// --max-conns; sockets in an accept queue take room too, but only the kernel forgets
/// them), the accepted connections `eviction_order` picks are forgotten and counted.
pub fn sweep(t: &mut Tables, gone: &[u32], idle_timeout: Duration, capacity: u32) -> Sweep {
    let now = monotonic_ns();
    let idle_limit = idle_timeout.as_nanos() as u64;
    let response_idle = RESPONSE_IDLE.min(idle_timeout).as_nanos() as u64;
    let mut records = Vec::new();
    let mut exited = Vec::new();
    let mut idle = Vec::new();
    // (unreported, last activity, key, connection) of every connection that stays
    let mut live = Vec::new();
    let mut census = Census::default();
    // entries of sockets in an accept queue: they take room, but are not connections yet
    let mut waiting = 0;
    for (sk, state) in t.conns.iter().filter_map(|e| e.ok()) {
        if queued(&state) {
            waiting += 1;
            continue;
        }
        let c = &state.r;
        let unreported = state.emitted == 0;
        census.open += 1;
        census.in_progress += u64::from(unreported);
        let last = [c.t_accept, c.t_hs_done, c.t_req_read, c.t_resp_last]
            .into_iter()
            .chain(c.t_last)
            .max()
            .unwrap_or(0);
        let quiet = now.saturating_sub(last);
        let exit = gone.contains(&c.tgid);
        let expired = unreported
            && (quiet >= idle_limit || (c.phase == abi::PH_RESPONSE && quiet >= response_idle));
        if !exit {
            live.push((unreported && !expired, last, sk, c.conn_id));
        }
        if !exit && !expired {
            continue;
        }
        if unreported {
            let mut r = *c;
            r.t_end = now;
            // (the kernel may be making this record right now, with its close: this one
            // is the sweep's, and its close is the kernel's)
            r.flags &= !abi::F_CLOSED;
            if r.outcome == abi::OUTCOME_FAILED {
                r.failure = if exit {
                    abi::FAIL_SERVER_EXITED
                } else {
                    abi::FAIL_TIMEOUT
                };
            }
            records.push(Swept::Conn(Box::new(r)));
            census.in_progress -= 1;
        }
        if exit {
            census.open -= 1;
            exited.push((sk, state));
            records.push(Swept::Close(abi::Close {
                rec: abi::REC_CLOSE,
                tgid: c.tgid,
                conn_id: c.conn_id,
                t_accept: c.t_accept,
                t_close: now,
                exchanges: state.exchanges,
                bytes_in: c.bytes_in,
                bytes_out: c.bytes_out,
                ..Default::default()
            }));
        } else {
            idle.push((sk, state));
        }
    }
    // each read again just before it is changed: the pass's copy is as old as the pass
    for (sk, state) in &exited {
        if let Some(now) = t.current(*sk, state.r.conn_id) {
            t.forget(*sk, &now);
        }
    }
    // reported here: the kernel only counts bytes and exchanges from now on
    for (sk, state) in idle {
        if let Some(mut now) = t.current(sk, state.r.conn_id) {
            now.emitted = 1;
            now.r.phase = abi::PH_DONE;
            let _ = t.conns.insert(sk, now, BPF_EXIST);
        }
    }
    let mut evicted = Evicted::default();
    let (high, low) = eviction_bounds(u64::from(capacity));
    if census.open + waiting > high {
        let excess = (census.open + waiting).saturating_sub(low) as usize;
        for (sk, conn_id) in eviction_order(live, excess) {
            // (the kernel may have ended it meanwhile: then it is not evicted)
            let Some(state) = t.current(sk, conn_id) else {
                continue;
            };
            t.forget(sk, &state);
            census.open -= 1;
            evicted.closes += 1;
            if state.emitted == 0 {
                census.in_progress = census.in_progress.saturating_sub(1);
                evicted.unreported += 1;
            }
        }
    }
    Sweep {
        records,
        census,
        evicted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_connections_go_before_handshakes_in_flight_oldest_first() {
        // (unreported, last activity, key, connection)
        let live = vec![
            (true, 10, 1, 11),  // a handshake idle since t=10
            (false, 50, 2, 12), // reported, idle since t=50
            (true, 5, 3, 13),   // the oldest handshake
            (false, 20, 4, 14), // reported, idle longest
            (true, 90, 5, 15),
        ];
        let keys = |v: Vec<(u64, u64)>| v.into_iter().map(|(sk, _)| sk).collect::<Vec<_>>();
        assert_eq!(
            eviction_order(live.clone(), 3),
            vec![(4, 14), (2, 12), (3, 13)]
        );
        assert_eq!(keys(eviction_order(live.clone(), 0)), Vec::<u64>::new());
        assert_eq!(keys(eviction_order(live, 9)), vec![4, 2, 3, 1, 5]);
    }

    #[test]
    fn eviction_keeps_an_eighth_free_and_makes_a_quarter() {
        assert_eq!(eviction_bounds(65536), (57344, 49152));
        assert_eq!(eviction_bounds(64), (56, 48));
        // the smallest --max-conns
        assert_eq!(eviction_bounds(16), (14, 12));
    }
}
