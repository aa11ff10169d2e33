//! The once-a-second sweep over the kernel's connection map: the connections the kernel
//! will not report on its own, because their server exited without closing them or they
//! went idle. The kernel keeps each connection's outcome current (`r.outcome`); the sweep
//! adds only why it ended one (timeout, server exited).

use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, MapData};

use crate::{
    abi::{self, ConnState},
    assemble::Swept,
    clock::monotonic_ns,
};

/// A response is complete when the server reads again, or after this long without.
pub const RESPONSE_IDLE: Duration = Duration::from_secs(1);

/// What one pass found: records to report, and how many connections are in progress.
pub struct Sweep {
    pub records: Vec<Swept>,
    pub census: Census,
}

/// Connections in the kernel's map.
#[derive(Debug, Default, Clone, Copy)]
pub struct Census {
    /// whose record has not been made yet
    pub in_progress: u64,
    /// not closed yet (their close line is still to come)
    pub open: u64,
}

/// Count the connections in the map, changing nothing.
pub fn census(conns: &BpfHashMap<&MapData, u64, ConnState>) -> Census {
    let mut c = Census::default();
    for (_, state) in conns.iter().filter_map(|e| e.ok()) {
        c.open += 1;
        c.in_progress += u64::from(state.emitted == 0);
    }
    c
}

/// Connections whose server exited (`gone`: reported and forgotten, with their close),
/// and those idle past `idle_timeout` (reported, then only counted by the kernel until
/// they close). A response is complete when the server reads again; one whose server
/// does not (it handed the connection back to an event loop) is reported once it has been
/// idle for RESPONSE_IDLE.
pub fn sweep(
    conns: &mut BpfHashMap<&mut MapData, u64, ConnState>,
    gone: &[u32],
    idle_timeout: Duration,
) -> Sweep {
    let now = monotonic_ns();
    let idle_limit = idle_timeout.as_nanos() as u64;
    let response_idle = RESPONSE_IDLE.min(idle_timeout).as_nanos() as u64;
    let mut records = Vec::new();
    let mut exited = Vec::new();
    let mut idle = Vec::new();
    let mut census = Census::default();
    for (sk, state) in conns.iter().filter_map(|e| e.ok()) {
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
        if !exit && !expired {
            continue;
        }
        if unreported {
            let mut r = *c;
            r.t_end = now;
            if r.outcome == abi::OUTCOME_FAILED {
                r.failure = if exit {
                    abi::FAIL_SERVER_EXITED
                } else {
                    abi::FAIL_TIMEOUT
                };
            }
            records.push(Swept::Conn(r));
            census.in_progress -= 1;
        }
        if exit {
            census.open -= 1;
            exited.push(sk);
            records.push(Swept::Close(abi::Close {
                rec: abi::REC_CLOSE,
                tgid: c.tgid,
                conn_id: c.conn_id,
                t_accept: c.t_accept,
                t_close: now,
                bytes_in: c.bytes_in,
                bytes_out: c.bytes_out,
                ..Default::default()
            }));
        } else {
            idle.push((sk, state));
        }
    }
    for sk in exited {
        let _ = conns.remove(&sk);
    }
    // reported here: the kernel only counts bytes and exchanges from now on
    for (sk, mut state) in idle {
        state.emitted = 1;
        state.r.phase = abi::PH_DONE;
        let _ = conns.insert(sk, state, 0);
    }
    Sweep { records, census }
}
