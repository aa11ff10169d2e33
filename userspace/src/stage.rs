//! The arithmetic that cuts a connection's timeline into stages, on-CPU times and
//! wake-ups. The stages' names and classes (the only spelling of them in the code) are
//! the model crate's (`hstrace_model::stage`), used here as `crate::stage`.

use crate::abi::{self, Conn, FL_C1, FL_C2, FL_S1};

pub use hstrace_model::stage::{Kind, RequestClass, Resumption, Stage, StageClass};

/// The stages that happened, in wire order, with their nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct Stages(pub Vec<(Stage, u64)>);

impl Stages {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, stage: Stage) -> Option<u64> {
        self.0.iter().find(|(s, _)| *s == stage).map(|(_, v)| *v)
    }
}

/// Where a connection is with a HelloRetryRequest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// none was sent
    None,
    /// the server sent one; the second ClientHello never came (its flights are the
    /// retry round)
    Pending,
    /// the second ClientHello came: the round is in the `*_retry_*` fields, the flights
    /// are those after it
    Done,
}

pub fn retry(c: &Conn) -> Retry {
    if c.flags & abi::F_HRR == 0 {
        Retry::None
    } else if c.t_retry_read == 0 {
        Retry::Pending
    } else {
        Retry::Done
    }
}

/// `b - a` when both happened and in that order.
pub fn span(a: u64, b: u64) -> Option<u64> {
    (a != 0 && b != 0 && b >= a).then(|| b - a)
}

/// Waiting for a message that may have arrived before the server looked (then the wait
/// is 0 and the queue starts when the server could have read it): (wait, queue).
fn wait_and_queue(from: u64, arrive: u64, read: u64) -> (Option<u64>, Option<u64>) {
    if arrive != 0 && read != 0 {
        let arrive = arrive.max(from);
        (span(from, arrive), span(arrive, read))
    } else {
        (span(from, read), None)
    }
}

/// Cut the connection's timeline into stages (only those that happened): the one place
/// a stage's time is computed.
pub fn stages(c: &Conn) -> Stages {
    let mut out = Vec::with_capacity(Stage::ALL.len());
    let mut push = |stage, v: Option<u64>| {
        if let Some(v) = v {
            out.push((stage, v));
        }
    };
    let end = c.t_hs_done;
    push(Stage::AcceptQueue, span(c.t_est, c.t_accept));
    // a plaintext preamble (STARTTLS and its kin): its three sums, then TLS from where it
    // ended (or, for a connection that stayed plain, nothing more: its record was made
    // when it could no longer switch)
    if had_preamble(c) {
        push(Stage::PreambleWait, Some(c.pre_wait_ns));
        push(Stage::PreambleQueue, Some(c.pre_queue_ns));
        push(Stage::PreambleService, Some(c.pre_service_ns));
        if c.outcome == abi::OUTCOME_NOT_TLS {
            return Stages(out);
        }
    }
    // the first request: after the handshake, or from accept() on a plain-text stream
    let request_from = if c.outcome == abi::OUTCOME_NOT_TLS {
        c.t_accept
    } else {
        end
    };
    // a request read before the handshake completed (sent right behind the client's
    // Finished) is acted on once it has: it waited 0 and queued 0
    let req_read = if c.t_req_read != 0 {
        c.t_req_read.max(request_from)
    } else {
        0
    };
    let request = |push: &mut dyn FnMut(Stage, Option<u64>)| {
        let (wait, queue) = wait_and_queue(request_from, c.t_req_arrive, req_read);
        push(Stage::WaitRequest, wait);
        push(Stage::RequestQueue, queue);
        push(Stage::Response, span(req_read, c.t_resp_last));
    };
    if c.outcome == abi::OUTCOME_NOT_TLS {
        request(&mut push);
        return Stages(out);
    }
    let read_ch = c.t_first[FL_C1];
    // the first ClientHello: kept apart once a second one came after a retry
    let retry = retry(c);
    let (arrive_ch, read_first) = match retry {
        Retry::Done => (c.t_retry_arrive, c.t_retry_read),
        _ => (c.t_arrive[FL_C1], read_ch),
    };
    let (wait, queue) = wait_and_queue(tls_start(c), arrive_ch, read_first);
    push(Stage::WaitClientHello, wait);
    push(Stage::ClientHelloQueue, queue);
    match retry {
        Retry::None => {}
        // the first flights were the retry round, and nothing came after it
        Retry::Pending => {
            push(Stage::HelloRetry, span(read_ch, c.t_last[FL_S1]));
            return Stages(out);
        }
        Retry::Done => {
            push(Stage::HelloRetry, span(c.t_retry_read, c.t_retry_sent));
            let (wait, queue) = wait_and_queue(c.t_retry_sent, c.t_arrive[FL_C1], read_ch);
            push(Stage::WaitClientHello2, wait);
            push(Stage::ClientHello2Queue, queue);
        }
    }
    let sent_s1 = c.t_last[FL_S1];
    if done_at_first_flight(c) {
        // 0-RTT: the call that sent the flight returned with the handshake done; a
        // Finished read after it came with or behind the early request
        push(Stage::ServerFlight1, span(read_ch, end));
        request(&mut push);
        return Stages(out);
    }
    push(Stage::ServerFlight1, span(read_ch, sent_s1));
    let read_c2 = c.t_first[FL_C2];
    let (wait, queue) = wait_and_queue(sent_s1, c.t_arrive[FL_C2], read_c2);
    push(Stage::WaitClientFlight2, wait);
    push(Stage::ClientFlight2Queue, queue);
    push(Stage::ServerFlight2, span(read_c2, end));
    if end != 0 {
        request(&mut push);
    }
    Stages(out)
}

/// Did the connection open with a plaintext preamble that was watched for TLS?
pub fn had_preamble(c: &Conn) -> bool {
    c.pre_flights != 0
}

/// Where TLS begins: accept(), or the end of a plaintext preamble (the server's go-ahead).
pub fn tls_start(c: &Conn) -> u64 {
    if c.t_tls_start != 0 {
        c.t_tls_start
    } else {
        c.t_accept
    }
}

/// TLS 1.3 0-RTT: a server that accepts early data may answer it right after its first
/// flight (with uprobes, SSL_do_handshake returns then), so the handshake, as far as
/// serving goes, was done before any second client flight was read.
fn done_at_first_flight(c: &Conn) -> bool {
    let read_c2 = c.t_first[FL_C2];
    c.t_hs_done != 0 && (read_c2 == 0 || read_c2 > c.t_hs_done)
}

/// On-CPU time of the server thread during the service stages that happened (never more
/// than the stage: the CPU clock and the stage's timestamps are read a few hundred ns
/// apart).
pub fn cpu(c: &Conn, wall: &Stages) -> Stages {
    let mut out = Vec::with_capacity(4);
    // with a retry pending, the first flights are its round (the retry fields are 0 then)
    let first = match retry(c) {
        Retry::Pending => Stage::HelloRetry,
        _ => Stage::ServerFlight1,
    };
    // the flight's service ends where the handshake call returned (wire only: at its
    // last write, whose reading is that write's)
    let sent_s1 = if done_at_first_flight(c) && c.t_hs_done != c.t_last[FL_S1] {
        c.cpu_hs_done
    } else {
        c.cpu_last[FL_S1]
    };
    for (stage, a, b) in [
        (Stage::HelloRetry, c.cpu_retry_read, c.cpu_retry_sent),
        (first, c.cpu_first[FL_C1], sent_s1),
        (Stage::ServerFlight2, c.cpu_first[FL_C2], c.cpu_hs_done),
        (Stage::Response, c.cpu_req_read, c.cpu_resp_last),
    ] {
        if let (Some(v), Some(wall)) = (span(a, b), wall.get(stage)) {
            out.push((stage, v.min(wall)));
        }
    }
    Stages(out)
}

/// The service stages with an on-CPU figure (`cpu`) whose first read found the CPU had
/// been idle since a service stage last ended on it (whatever the connection): their
/// caches were cold and the CPU woke from an idle state. None when the CPU's idle mark
/// could not be read.
pub fn idle_before(c: &Conn, cpu: &Stages) -> Option<Vec<Stage>> {
    if c.idle_before & abi::IDLE_KNOWN == 0 {
        return None;
    }
    let first = match retry(c) {
        Retry::Pending => Stage::HelloRetry,
        _ => Stage::ServerFlight1,
    };
    let bits = [
        (abi::IDLE_RETRY, Stage::HelloRetry),
        (abi::IDLE_FLIGHT1, first),
        (abi::IDLE_FLIGHT2, Stage::ServerFlight2),
        (abi::IDLE_RESPONSE, Stage::Response),
    ];
    Some(
        bits.into_iter()
            .filter(|(bit, s)| c.idle_before & bit != 0 && cpu.get(*s).is_some())
            .map(|(_, s)| s)
            .collect(),
    )
}

/// A message (or a connection in the accept queue) taken by a handler call that found its
/// CPU had been idle since a traced server's handler last ran there: what the wait cost
/// after how long the CPU slept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wakeup {
    /// the queue stage the message waited in (the accept queue for an accept)
    pub queue: Stage,
    /// how long the CPU had slept when the message came: from the last handler call on it
    /// (within an eighth, `abi::woke_ns`) to the message's arrival
    pub asleep_ns: u64,
    /// the message's wait (the queue stage): the CPU waking, then the server's own way to
    /// its read
    pub wait_ns: u64,
}

/// Each queue stage of `stages` whose message its reader took after its CPU had idled
/// (`Conn::woke`); empty when the CPU's idle mark could not be read. Left out: the
/// ClientHello after a plaintext preamble (no hook marks the preamble's calls: the CPU's
/// last call would be the accept), and a wait longer than the distance to the last call
/// beyond the coding's eighth (the message came before that call: no sleep of the CPU's
/// held it).
pub fn wakeups(c: &Conn, stages: &Stages) -> Vec<Wakeup> {
    let slot = |queue: Stage| match queue {
        Stage::AcceptQueue => Some(abi::WOKE_ACCEPT),
        Stage::ClientHelloQueue if had_preamble(c) => None,
        // the first ClientHello's read moved to the retry's slot once the second came
        Stage::ClientHelloQueue if retry(c) == Retry::Done => Some(abi::WOKE_RETRY),
        Stage::ClientHelloQueue | Stage::ClientHello2Queue => Some(abi::WOKE_FLIGHT1),
        Stage::ClientFlight2Queue => Some(abi::WOKE_FLIGHT2),
        Stage::RequestQueue => Some(abi::WOKE_RESPONSE),
        _ => None,
    };
    stages
        .0
        .iter()
        .filter_map(|&(queue, wait_ns)| {
            let ago = abi::woke_ns(c.woke[slot(queue)?])?;
            (wait_ns <= ago + ago / 8).then(|| Wakeup {
                queue,
                asleep_ns: ago.saturating_sub(wait_ns),
                wait_ns,
            })
        })
        .collect()
}

/// On-CPU time of the server thread across each of the connection's waits for its client
/// between two service stages, keyed by the wait's delay stage: from the end of one
/// service stage (its last write) to the start of the next (its first read), through the
/// delay and queue stages between. An event loop's own work is there: going back to its
/// loop and to sleep, waking, dispatching the event; under load, other connections' work
/// too. A wait whose readings are missing, or were taken on different threads (a
/// reading that goes backwards), is left out.
pub fn wait_cpu(c: &Conn, wall: &Stages) -> Stages {
    let mut out = Vec::with_capacity(3);
    let sent_s1 = if done_at_first_flight(c) && c.t_hs_done != c.t_last[FL_S1] {
        c.cpu_hs_done
    } else {
        c.cpu_last[FL_S1]
    };
    for (stage, a, b) in [
        (
            Stage::WaitClientHello2,
            c.cpu_retry_sent,
            c.cpu_first[FL_C1],
        ),
        (Stage::WaitClientFlight2, sent_s1, c.cpu_first[FL_C2]),
        (Stage::WaitRequest, c.cpu_hs_done, c.cpu_req_read),
    ] {
        if wall.get(stage).is_none() {
            continue;
        }
        if let Some(v) = span(a, b) {
            out.push((stage, v));
        }
    }
    Stages(out)
}

/// The stage a failed connection was in when it ended, from the flight in progress: a
/// server that answered with an alert failed in its own flight; one that sent a flight
/// and heard nothing back was waiting for the client.
pub fn failed_in(c: &Conn) -> Stage {
    let server_alert = c.alert_level != 0 && c.alert_dir as u32 == abi::DIR_OUT;
    let not_tls = c.outcome == abi::OUTCOME_NOT_TLS;
    match retry(c) {
        // the retry flight was sent, and the second ClientHello never came
        Retry::Pending if server_alert => return Stage::HelloRetry,
        Retry::Pending => return Stage::WaitClientHello2,
        // after the retry round, waiting for a ClientHello is waiting for the second
        Retry::Done => {
            let at = failed_in_flights(c, server_alert, not_tls);
            return if at == Stage::WaitClientHello {
                Stage::WaitClientHello2
            } else {
                at
            };
        }
        Retry::None => {}
    }
    failed_in_flights(c, server_alert, not_tls)
}

/// `failed_in` from the flight in progress.
fn failed_in_flights(c: &Conn, server_alert: bool, not_tls: bool) -> Stage {
    match c.fail_flight.checked_sub(1).map(usize::from) {
        None => Stage::WaitClientHello,
        // the client's first bytes were no ClientHello: the server either answered them
        // (an alert, nginx's plain-HTTP error page) or was still waiting for one
        Some(FL_C1) if not_tls => Stage::WaitClientHello,
        Some(_) if not_tls => Stage::ServerFlight1,
        // the client's flight never completed a record: still waiting for it
        Some(FL_C1) if c.t_first[FL_C1] == 0 => Stage::WaitClientHello,
        // records, but no ClientHello began in them (a lone zero-length record): the
        // server was still waiting for it
        Some(FL_C1) if c.hs_types[FL_C1] & (1 << abi::HT_CLIENT_HELLO) == 0 => {
            Stage::WaitClientHello
        }
        Some(FL_C1) => Stage::ServerFlight1,
        Some(FL_S1) if server_alert => Stage::ServerFlight1,
        Some(FL_S1) => Stage::WaitClientFlight2,
        Some(FL_C2) if c.t_first[FL_C2] == 0 => Stage::WaitClientFlight2,
        // the client answered the server's flight with nothing but an alert (it rejected
        // the certificate): it ended the handshake while the server waited for it
        Some(FL_C2) if c.rec_types[FL_C2] == abi::RT_ALERT => Stage::WaitClientFlight2,
        _ => Stage::ServerFlight2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_in_is_the_stage_the_connection_was_in() {
        let mut c = conn();
        // a lone zero-length record: records, no ClientHello, and the client left
        c.fail_flight = FL_C1 as u8 + 1;
        c.hs_types[FL_C1] = 0;
        assert_eq!(failed_in(&c), Stage::WaitClientHello);
        c.hs_types[FL_C1] = 1 << abi::HT_CLIENT_HELLO;
        assert_eq!(failed_in(&c), Stage::ServerFlight1);
        // the client answered the server's first flight with an alert alone
        c.fail_flight = FL_C2 as u8 + 1;
        c.rec_types[FL_C2] = abi::RT_ALERT;
        assert_eq!(failed_in(&c), Stage::WaitClientFlight2);
        c.rec_types[FL_C2] = abi::RT_HANDSHAKE | abi::RT_CCS;
        assert_eq!(failed_in(&c), Stage::ServerFlight2);
        // not TLS: the server answered (plain HTTP's error page), or was still waiting
        c.outcome = abi::OUTCOME_NOT_TLS;
        assert_eq!(failed_in(&c), Stage::ServerFlight1);
        c.fail_flight = FL_C1 as u8 + 1;
        assert_eq!(failed_in(&c), Stage::WaitClientHello);
    }

    use crate::abi::test_conn as conn;

    /// The stages after accept() add up to the handshake.
    fn assert_partitions_the_handshake(c: &Conn, s: &Stages) {
        let inside: u64 =
            s.0.iter()
                .filter(|(n, _)| *n != Stage::AcceptQueue)
                .map(|(_, v)| v)
                .sum();
        assert_eq!(inside, c.t_hs_done - c.t_accept);
    }

    #[test]
    fn stages_partition_the_handshake() {
        let c = conn();
        let s = stages(&c);
        assert_eq!(s.get(Stage::AcceptQueue), Some(100));
        // the ClientHello came before accept(): no wait, queued from accept to read
        assert_eq!(s.get(Stage::WaitClientHello), Some(0));
        assert_eq!(s.get(Stage::ClientHelloQueue), Some(100));
        assert_eq!(s.get(Stage::ServerFlight1), Some(600));
        assert_eq!(s.get(Stage::WaitClientFlight2), Some(300));
        assert_eq!(s.get(Stage::ClientFlight2Queue), Some(100));
        assert_eq!(s.get(Stage::ServerFlight2), Some(400));
        assert_partitions_the_handshake(&c, &s);
    }

    #[test]
    fn a_hello_retry_round_has_stages_of_its_own() {
        // the retry round: ClientHello 1 arrives at 250, is read at 300, the retry is
        // sent at 400; the second ClientHello arrives at 450 and is read at 500
        let mut c = conn();
        c.flags |= abi::F_HRR;
        (c.t_retry_arrive, c.t_retry_read, c.t_retry_sent) = (250, 300, 400);
        (c.cpu_retry_read, c.cpu_retry_sent) = (10, 90);
        c.t_arrive[FL_C1] = 450;
        c.t_first[FL_C1] = 500;
        let s = stages(&c);
        assert_eq!(s.get(Stage::WaitClientHello), Some(50));
        assert_eq!(s.get(Stage::ClientHelloQueue), Some(50));
        assert_eq!(s.get(Stage::HelloRetry), Some(100));
        assert_eq!(s.get(Stage::WaitClientHello2), Some(50));
        assert_eq!(s.get(Stage::ClientHello2Queue), Some(50));
        assert_eq!(s.get(Stage::ServerFlight1), Some(400));
        assert_partitions_the_handshake(&c, &s);
        assert_eq!(cpu(&c, &s).get(Stage::HelloRetry), Some(80));
        // the retry was sent and the second ClientHello never came
        let mut c = conn();
        c.flags |= abi::F_HRR;
        c.outcome = abi::OUTCOME_FAILED;
        c.fail_flight = FL_S1 as u8 + 1;
        (c.t_first[FL_C2], c.t_hs_done) = (0, 0);
        let s = stages(&c);
        assert_eq!(s.get(Stage::HelloRetry), Some(600));
        assert_eq!(s.get(Stage::ServerFlight1), None);
        assert_eq!(failed_in(&c), Stage::WaitClientHello2);
    }

    #[test]
    fn an_early_request_follows_the_first_flight() {
        // 0-RTT with uprobes: SSL_do_handshake returned at 1_000, after the first flight
        // (sent by 900); the early request and the client's Finished were read at 1_300
        let mut c = conn();
        c.flags |= abi::F_EARLY_DATA;
        c.t_hs_done = 1_000;
        (c.t_req_arrive, c.t_req_read, c.t_resp_last) = (150, 1_300, 1_800);
        (c.cpu_first[FL_C1], c.cpu_last[FL_S1], c.cpu_hs_done) = (1_000, 1_300, 1_450);
        let s = stages(&c);
        assert_eq!(s.get(Stage::ServerFlight1), Some(700));
        assert_eq!(s.get(Stage::WaitClientFlight2), None);
        assert_eq!(s.get(Stage::ClientFlight2Queue), None);
        assert_eq!(s.get(Stage::ServerFlight2), None);
        // the request came with the ClientHello: it queued from the handshake's end
        assert_eq!(s.get(Stage::WaitRequest), Some(0));
        assert_eq!(s.get(Stage::RequestQueue), Some(300));
        assert_eq!(s.get(Stage::Response), Some(500));
        assert_eq!(cpu(&c, &s).get(Stage::ServerFlight1), Some(450));
        // from the wire: the handshake ends with the flight's last write, before any read
        // of the Finished
        (c.t_first[FL_C2], c.t_hs_done) = (0, 900);
        let s = stages(&c);
        assert_eq!(s.get(Stage::ServerFlight1), Some(600));
        assert_eq!(cpu(&c, &s).get(Stage::ServerFlight1), Some(300));
        let inside: u64 = [
            Stage::WaitClientHello,
            Stage::ClientHelloQueue,
            Stage::ServerFlight1,
        ]
        .iter()
        .filter_map(|st| s.get(*st))
        .sum();
        assert_eq!(inside, c.t_hs_done - c.t_accept);
    }

    #[test]
    fn stages_without_arrival_end_at_the_read() {
        let mut c = conn();
        c.t_arrive = [0; 4];
        let s = stages(&c);
        assert_eq!(s.get(Stage::WaitClientHello), Some(100));
        assert_eq!(s.get(Stage::ClientHelloQueue), None);
        assert_eq!(s.get(Stage::WaitClientFlight2), Some(400));
    }

    /// A queue stage's message is read by the service stage that answers it; the accept's
    /// and the preamble's by none with an idle mark.
    #[test]
    fn each_queue_is_read_by_the_service_stage_that_answers_it() {
        let plain = [(Stage::ClientHelloQueue, 1), (Stage::ServerFlight1, 1)];
        let retried = [
            (Stage::ClientHelloQueue, 1),
            (Stage::HelloRetry, 1),
            (Stage::ClientHello2Queue, 1),
            (Stage::ServerFlight1, 1),
        ];
        // a retry whose own stage was not timed
        let untimed = [
            (Stage::ClientHelloQueue, 1),
            (Stage::ClientHello2Queue, 1),
            (Stage::ServerFlight1, 1),
        ];
        for (queue, stages, reader) in [
            (
                Stage::ClientHelloQueue,
                &plain[..],
                Some(Stage::ServerFlight1),
            ),
            (Stage::ClientHelloQueue, &retried, Some(Stage::HelloRetry)),
            (Stage::ClientHelloQueue, &untimed, Some(Stage::HelloRetry)),
            (
                Stage::ClientHello2Queue,
                &retried,
                Some(Stage::ServerFlight1),
            ),
            (
                Stage::ClientFlight2Queue,
                &plain,
                Some(Stage::ServerFlight2),
            ),
            (Stage::RequestQueue, &plain, Some(Stage::Response)),
            (Stage::AcceptQueue, &plain, None),
            (Stage::PreambleQueue, &plain, None),
            (Stage::ServerFlight1, &plain, None),
        ] {
            assert_eq!(queue.read_by(stages), reader, "{queue:?} in {stages:?}");
        }
    }

    /// Each bit names the stage that began with the read it was set at; a stage without an
    /// on-CPU figure is not listed; without the known bit, nothing is known.
    #[test]
    fn idle_before_names_the_stages_its_bits_mark() {
        let mut c = conn();
        (c.cpu_first[FL_C1], c.cpu_last[FL_S1]) = (1_000, 1_100);
        (c.cpu_first[FL_C2], c.cpu_hs_done) = (2_000, 2_050);
        c.idle_before = abi::IDLE_FLIGHT1 | abi::IDLE_RESPONSE;
        let cpu_ns = cpu(&c, &stages(&c));
        assert_eq!(idle_before(&c, &cpu_ns), None);
        c.idle_before |= abi::IDLE_KNOWN;
        // the response has no on-CPU reading here
        assert_eq!(idle_before(&c, &cpu_ns), Some(vec![Stage::ServerFlight1]));
        c.idle_before = abi::IDLE_KNOWN | abi::IDLE_FLIGHT2;
        assert_eq!(idle_before(&c, &cpu_ns), Some(vec![Stage::ServerFlight2]));
        c.idle_before = abi::IDLE_KNOWN;
        assert_eq!(idle_before(&c, &cpu_ns), Some(vec![]));
        // a retry still pending: the first flight read was the retry's
        c.flags |= abi::F_HRR;
        c.idle_before = abi::IDLE_KNOWN | abi::IDLE_FLIGHT1;
        (c.t_first[FL_C2], c.t_hs_done, c.cpu_first[FL_C2]) = (0, 0, 0);
        c.outcome = abi::OUTCOME_FAILED;
        c.fail_flight = FL_S1 as u8 + 1;
        let cpu_ns = cpu(&c, &stages(&c));
        assert_eq!(idle_before(&c, &cpu_ns), Some(vec![Stage::HelloRetry]));
    }

    /// Each queue stage whose reader's call found the CPU idle: the accept's own slot, the
    /// others by the call that read their message (a retry's first ClientHello by the
    /// retry's slot once the second came, whichever of its stages were timed; the first
    /// flight's while the retry is pending); its sleep is the time since the last handler
    /// call less its wait (nothing within the coding's eighth past it; left out beyond, and
    /// for a ClientHello after a plaintext preamble).
    #[test]
    fn wakeups_pair_each_queue_with_its_readers_call() {
        let code_1ms = 1 + 8 * 9 + 7; // ~1 ms (992 units of 1,024 ns)
        let one_ms = abi::woke_ns(code_1ms).unwrap();
        let stages = Stages(vec![
            (Stage::AcceptQueue, 100_000),
            (Stage::ClientHelloQueue, 50_000),
            (Stage::ServerFlight1, 900_000),
            (Stage::ClientFlight2Queue, 1_050_000),
            (Stage::ServerFlight2, 100_000),
            (Stage::RequestQueue, 10_000),
            (Stage::Response, 200_000),
        ]);
        let mut c = conn();
        assert_eq!(wakeups(&c, &stages), vec![]);
        for slot in [
            abi::WOKE_ACCEPT,
            abi::WOKE_FLIGHT1,
            abi::WOKE_FLIGHT2,
            abi::WOKE_RESPONSE,
        ] {
            c.woke[slot] = code_1ms;
        }
        let w = |queue, wait_ns: u64| Wakeup {
            queue,
            asleep_ns: one_ms.saturating_sub(wait_ns),
            wait_ns,
        };
        assert_eq!(
            wakeups(&c, &stages),
            vec![
                w(Stage::AcceptQueue, 100_000),
                w(Stage::ClientHelloQueue, 50_000),
                // a wait past the distance, within the coding's eighth: slept for nothing
                Wakeup {
                    asleep_ns: 0,
                    ..w(Stage::ClientFlight2Queue, 1_050_000)
                },
                w(Stage::RequestQueue, 10_000),
            ]
        );
        // a wait well past it: the message came before the CPU's last call, left out
        let mut late = stages.clone();
        late.0[3].1 = 2_000_000;
        assert!(wakeups(&c, &late)
            .iter()
            .all(|w| w.queue != Stage::ClientFlight2Queue));
        // after a plaintext preamble the ClientHello's distance spans the preamble
        c.pre_flights = 2;
        assert!(wakeups(&c, &stages)
            .iter()
            .all(|w| w.queue != Stage::ClientHelloQueue));
        // a retry: its first ClientHello read by the retry's call, the second by flight 1's
        let retried = Stages(vec![
            (Stage::ClientHelloQueue, 50_000),
            (Stage::HelloRetry, 300_000),
            (Stage::ClientHello2Queue, 20_000),
            (Stage::ServerFlight1, 900_000),
        ]);
        let mut c = conn();
        c.flags |= abi::F_HRR;
        c.t_retry_read = 400;
        c.woke[abi::WOKE_RETRY] = code_1ms;
        assert_eq!(
            wakeups(&c, &retried),
            vec![w(Stage::ClientHelloQueue, 50_000)]
        );
        c.woke = [0; abi::WOKE_CALLS];
        c.woke[abi::WOKE_FLIGHT1] = code_1ms;
        assert_eq!(
            wakeups(&c, &retried),
            vec![w(Stage::ClientHello2Queue, 20_000)]
        );
        // even with none of the retry's own stages timed
        let untimed = Stages(vec![retried.0[0], retried.0[3]]);
        assert_eq!(wakeups(&c, &untimed), vec![]);
        // still pending: the one ClientHello read so far is in the first flight's slot
        c.t_retry_read = 0;
        let pending = Stages(retried.0[..2].to_vec());
        assert_eq!(
            wakeups(&c, &pending),
            vec![w(Stage::ClientHelloQueue, 50_000)]
        );
    }

    #[test]
    fn cpu_is_bounded_by_the_stage() {
        let mut c = conn();
        c.cpu_first[FL_C1] = 1_000;
        c.cpu_last[FL_S1] = 5_000;
        let wall = stages(&c);
        assert_eq!(cpu(&c, &wall).0, vec![(Stage::ServerFlight1, 600)]);
    }
}
