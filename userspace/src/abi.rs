//! Rust mirror of `ebpf/include/hstrace.h`: the constants both sides use, the records the
//! BPF programs send, the per-connection state the sweep reads, and the counters they keep.
//! The assertions at the bottom fail the build if a layout drifts; the test at the end reads
//! the header and fails if a constant (or a counter's name) differs, or is on one side only.

use std::{
    borrow::Cow,
    mem::{offset_of, size_of},
};

/// The most of a hello the kernel copies: one whole TLS record's plaintext (2^14), enough
/// for post-quantum key shares with the extensions in any order.
pub const HELLO_CAP: usize = 16384;
/// `--max-conns`'s default: the size of `conns`, `fds` and `ssl_socks`, set at load.
pub const MAX_CONNS: u32 = 65536;
pub const MAX_TGIDS: u32 = 4096;
/// Per-thread slots (a read/write or SSL call in flight): one per thread id mod this.
pub const IO_SLOTS: u32 = 65536;
pub const RINGBUF_BYTES: u32 = 8 << 20;
/// The kernel wakes userspace once this much is waiting in the ring buffer.
pub const WAKEUP_BYTES: u32 = 1 << 20;
/// Userspace drains the ring buffer this often on its own (sooner when woken).
pub const DRAIN_MS: u64 = 100;

pub const REC_HELLO: u32 = 1;
pub const REC_CONN: u32 = 2;
pub const REC_CLOSE: u32 = 3;
/// A piece of a hello that did not come in one read (`Hello::offset` >= 4).
pub const REC_HELLO_PART: u32 = 4;
/// A traced process forked a new one (`Fork`): its uprobes are attached at once.
pub const REC_FORK: u32 = 5;

/// The protocol of a connection's plaintext part (`Conn::pre_proto`), told from its first
/// bytes by the kernel (ebpf/starttls.h).
pub const PROTO_NONE: u8 = 0;
pub const PROTO_HTTP: u8 = 1;
pub const PROTO_POSTGRESQL: u8 = 2;
pub const PROTO_SMTP: u8 = 3;
pub const PROTO_FTP: u8 = 4;
pub const PROTO_IMAP: u8 = 5;
pub const PROTO_POP3: u8 = 6;
pub const PROTO_LDAP: u8 = 7;
pub const PROTO_MYSQL: u8 = 8;
pub const PROTO_XMPP: u8 = 9;
/// a "220" banner the client never answered: SMTP or FTP
pub const PROTO_BANNER_220: u8 = 10;

/// How far a plaintext preamble got (`Conn::pre_state`).
pub const PRE_NONE: u8 = 0;
pub const PRE_PLAIN: u8 = 1;
pub const PRE_ASKED: u8 = 2;
pub const PRE_GRANTED: u8 = 3;
pub const PRE_REFUSED: u8 = 4;
pub const PRE_UPGRADED: u8 = 5;
/// Watching a preamble for TLS stops after this many flights or bytes.
pub const PRE_FLIGHTS_MAX: u32 = 16;
pub const PRE_BYTES_MAX: u32 = 16384;

/// `struct hs_fork`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Fork {
    pub rec: u32,
    /// the new process
    pub tgid: u32,
    /// the traced process that forked it
    pub parent: u32,
    pub pad: u32,
}

pub const DIR_IN: u32 = 0;
pub const DIR_OUT: u32 = 1;

pub const OUTCOME_DONE: u8 = 1;
pub const OUTCOME_FAILED: u8 = 2;
pub const OUTCOME_NOT_TLS: u8 = 3;

pub const FAIL_NONE: u8 = 0;
pub const FAIL_CLIENT_CLOSED: u8 = 1;
pub const FAIL_ALERT: u8 = 2;
pub const FAIL_RESET: u8 = 3;
pub const FAIL_NOT_TLS: u8 = 4;
pub const FAIL_SERVER_CLOSED: u8 = 5;
pub const FAIL_SERVER_EXITED: u8 = 6;
pub const FAIL_TIMEOUT: u8 = 7;

pub const PH_HANDSHAKE: u8 = 0;
pub const PH_WAIT_REQUEST: u8 = 1;
pub const PH_REQUEST: u8 = 2;
pub const PH_RESPONSE: u8 = 3;
pub const PH_DONE: u8 = 4;

/// The `settings` map's bits: no attached hook reads the fds table; a connection's fd is
/// learned at its first read or write (accept is hooked in the kernel); a libssl's uprobes
/// fire for every process that maps it.
pub const SET_NO_FDS: u32 = 1;
pub const SET_LAZY_FD: u32 = 2;
pub const SET_SSL_ALL_PROCS: u32 = 4;

pub const F_UPROBE: u32 = 1 << 0;
pub const F_HS_DONE_SSL: u32 = 1 << 1;
pub const F_DESYNC: u32 = 1 << 2;
pub const F_EST_SEEN: u32 = 1 << 3;
pub const F_PEER_FIN: u32 = 1 << 4;
pub const F_READ_EOF: u32 = 1 << 5;
pub const F_READ_RESET: u32 = 1 << 6;
pub const F_PEER_RESET: u32 = 1 << 7;
pub const F_SSLV2_HELLO: u32 = 1 << 8;
pub const F_HRR: u32 = 1 << 9;
/// TLS 1.3 0-RTT: the first request came as early data with the ClientHello.
pub const F_EARLY_DATA: u32 = 1 << 10;
/// SSL_do_handshake does not say when the handshake ends (it returned 1 before the
/// client's second flight, or the server finished the handshake in SSL_read): the wire
/// says.
pub const F_WIRE_ENDS: u32 = 1 << 11;
/// The connection ended as its record was made: the record is its close too
/// (`Conn::close`), and no close record follows.
pub const F_CLOSED: u32 = 1 << 12;

/// `Conn::idle_before`: the service stages whose first read found the CPU had been idle
/// since a service stage last ended on it; `IDLE_KNOWN`: the CPU's idle mark was read.
pub const IDLE_FLIGHT1: u8 = 1 << 0;
pub const IDLE_FLIGHT2: u8 = 1 << 1;
pub const IDLE_RESPONSE: u8 = 1 << 2;
pub const IDLE_RETRY: u8 = 1 << 3;
pub const IDLE_KNOWN: u8 = 1 << 7;

/// `Conn::woke`: the handler calls that took a message of the client's (or the connection
/// from the accept queue), by slot.
pub const WOKE_ACCEPT: usize = 0;
pub const WOKE_FLIGHT1: usize = 1;
pub const WOKE_FLIGHT2: usize = 2;
pub const WOKE_RESPONSE: usize = 3;
pub const WOKE_RETRY: usize = 4;
pub const WOKE_CALLS: usize = 5;

/// A `Conn::woke` code as ns (the middle of the span it stands for); None for 0. The code
/// is 1 + 8 x log2 of the time in whole units of 1,024 ns, the three bits below the
/// leading one its fraction (ebpf/include/woke.h); 255, the last, stands for 1.75 x 2^31
/// units (64 minutes) and longer.
pub fn woke_ns(code: u8) -> Option<u64> {
    let q = u32::from(code.checked_sub(1)?);
    let (msb, frac) = (q / 8, f64::from(q % 8));
    // below 8 units the code is exact; above, the middle of its eighth of an octave
    let units = if msb < 3 {
        (8.0 + frac) * f64::from(1u32 << msb) / 8.0
    } else {
        (8.5 + frac) * 2f64.powi(msb as i32 - 3)
    };
    Some((units * 1024.0) as u64)
}

pub const RT_CCS: u32 = 1 << 0;
pub const RT_ALERT: u32 = 1 << 1;
pub const RT_HANDSHAKE: u32 = 1 << 2;
pub const RT_APPDATA: u32 = 1 << 3;

pub const FLIGHTS: usize = 4;
pub const FL_C1: usize = 0;
pub const FL_S1: usize = 1;
pub const FL_C2: usize = 2;
pub const FL_S2: usize = 3;

/// TLS handshake message types (RFC 8446 section 4): the first byte of a captured hello,
/// and a bit (1 << type) of `Conn::hs_types`.
pub const HT_CLIENT_HELLO: u8 = 1;
/// A ServerHello's type, and a HelloRetryRequest's (which is a ServerHello).
pub const HT_SERVER_HELLO: u8 = 2;
pub const HT_CERTIFICATE: u8 = 11;

/// ServerHello.random of a HelloRetryRequest: SHA-256("HelloRetryRequest") (RFC 8446 4.1.3).
pub const HRR_RANDOM: [u8; 32] = [
    0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91,
    0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
];

/// The fixed start of a captured hello (`struct hs_hello`); its `cap_len` bytes follow.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HelloHeader {
    pub rec: u32,
    pub dir: u32,
    pub conn_id: u64,
    /// the whole handshake message's length, its 4-byte header included
    pub msg_len: u32,
    pub cap_len: u32,
    /// where the captured bytes start in the message: 0 for a whole hello
    /// (`REC_HELLO`), 4 and on for a piece (`REC_HELLO_PART`)
    pub offset: u32,
    pub pad: u32,
}

/// A captured ClientHello or ServerHello: the ring buffer carries only the bytes captured.
#[derive(Clone, Debug, Default)]
pub struct Hello<'a> {
    pub dir: u32,
    pub conn_id: u64,
    pub msg_len: u32,
    /// where `data` starts in the message: 0 for a whole hello (its handshake header
    /// first), 4 and on for a piece of one that came in several reads
    pub offset: u32,
    /// borrowed from the ring buffer (parsed where it lies), owned once put together
    /// from pieces
    pub data: Cow<'a, [u8]>,
}

/// A hello ring-buffer item: its header, then `cap_len` bytes (at most HELLO_CAP).
pub fn read_hello(item: &[u8]) -> Option<Hello<'_>> {
    let h: HelloHeader = read_record(item)?;
    let data = item.get(size_of::<HelloHeader>()..)?;
    let cap = (h.cap_len as usize).min(HELLO_CAP);
    Some(Hello {
        dir: h.dir,
        conn_id: h.conn_id,
        msg_len: h.msg_len,
        offset: h.offset,
        data: Cow::Borrowed(data.get(..cap)?),
    })
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Conn {
    pub rec: u32,
    pub tgid: u32,
    pub conn_id: u64,
    pub comm: [u8; 16],
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub family: u16,
    pub outcome: u8,
    pub failure: u8,
    pub flags: u32,
    pub alert_level: u8,
    pub alert_desc: u8,
    pub alert_dir: u8,
    pub fail_flight: u8,
    pub t_est: u64,
    pub t_accept: u64,
    pub t_arrive: [u64; FLIGHTS],
    pub t_first: [u64; FLIGHTS],
    pub t_last: [u64; FLIGHTS],
    pub t_hs_done: u64,
    pub t_end: u64,
    pub rec_types: [u32; FLIGHTS],
    pub hs_types: [u32; FLIGHTS],
    pub ssl_calls: u32,
    /// with `F_CLOSED`: request/response exchanges after the handshake
    pub exchanges: u32,
    pub ssl_ns: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub t_req_arrive: u64,
    pub t_req_read: u64,
    pub t_resp_first: u64,
    pub t_resp_last: u64,
    pub phase: u8,
    pub idle_before: u8,
    /// each handler call (`WOKE_*`) that found its CPU idle since a traced server's handler
    /// last ran there: how long before, coded (`woke_ns`); 0: it did not, or not known
    pub woke: [u8; WOKE_CALLS],
    pub pad1: u8,
    pub cpu_first: [u64; FLIGHTS],
    pub cpu_last: [u64; FLIGHTS],
    pub cpu_hs_done: u64,
    pub cpu_req_read: u64,
    pub cpu_resp_last: u64,
    pub lib_req_bytes: u64,
    pub lib_req_ns: u64,
    pub lib_resp_bytes: u64,
    pub lib_resp_ns: u64,
    /// a HelloRetryRequest's round (`F_HRR`), once the second ClientHello came: the first
    /// ClientHello's arrival and read, the retry flight's last write; the flights above
    /// are those after it
    pub t_retry_arrive: u64,
    pub t_retry_read: u64,
    pub t_retry_sent: u64,
    pub cpu_retry_read: u64,
    pub cpu_retry_sent: u64,
    /// a plaintext preamble (STARTTLS, PostgreSQL's SSLRequest) or a plain connection of
    /// a known protocol: its time, server answering / messages queued / waiting for the
    /// client, summed over its exchanges; `t_tls_start`: its last write or read, after
    /// which the ClientHello came (`PRE_UPGRADED`)
    pub t_tls_start: u64,
    pub pre_service_ns: u64,
    pub pre_queue_ns: u64,
    pub pre_wait_ns: u64,
    pub pre_proto: u8,
    pub pre_state: u8,
    pub pre_flights: u8,
    /// TLS 1.2: the first 3 body bytes of the server's ServerKeyExchange (an ECDHE one's
    /// curve_type, 3 for named_curve, and its named group), zero when not read
    pub ske_head: [u8; 3],
    pub pad2: [u8; 2],
}

// SAFETY: plain old data, every bit pattern valid, layout fixed by repr(C).
unsafe impl aya::Pod for Conn {}

impl Conn {
    /// The close a record with `F_CLOSED` carries: the connection ended at `t_end`, with
    /// these totals.
    pub fn close(&self) -> Option<Close> {
        (self.flags & F_CLOSED != 0).then_some(Close {
            rec: REC_CLOSE,
            tgid: self.tgid,
            conn_id: self.conn_id,
            t_accept: self.t_accept,
            t_close: self.t_end,
            exchanges: self.exchanges,
            pad: 0,
            bytes_in: self.bytes_in,
            bytes_out: self.bytes_out,
        })
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Close {
    pub rec: u32,
    pub tgid: u32,
    pub conn_id: u64,
    pub t_accept: u64,
    pub t_close: u64,
    pub exchanges: u32,
    pub pad: u32,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Counters kept by the BPF side: indexes into the per-CPU `counters` map (what each
/// counts is said in the header).
pub const C_CONNS: u32 = 0;
pub const C_RECORDS: u32 = 1;
pub const C_RECORDS_DROPPED: u32 = 2;
pub const C_HELLOS_DROPPED: u32 = 3;
pub const C_DESYNC: u32 = 4;
pub const C_TABLE_FULL: u32 = 5;
pub const C_NO_SOCK: u32 = 6;
pub const C_CLOSES_DROPPED: u32 = 7;
pub const C_IO_SLOT_TAKEN: u32 = 8;
pub const C_ACCEPTED: u32 = 9;
pub const C_LISTENS: u32 = 10;
pub const C_LATE_ARRIVAL: u32 = 11;
pub const C_EST_FULL: u32 = 12;
pub const C_END_MISSED: u32 = 13;
pub const C_CLOSE_MISSED: u32 = 14;
pub const C_MAX: usize = 15;

/// Each counter with the name it is logged under, as the header names it.
pub const COUNTERS: [(u32, &str); C_MAX] = [
    (C_CONNS, "connections_tracked"),
    (C_RECORDS, "records_sent"),
    (C_RECORDS_DROPPED, "records_dropped"),
    (C_HELLOS_DROPPED, "hellos_dropped"),
    (C_DESYNC, "record_stream_desync"),
    (C_TABLE_FULL, "accepted_while_table_full"),
    (C_NO_SOCK, "accepted_fd_without_socket"),
    (C_CLOSES_DROPPED, "close_records_dropped"),
    (C_IO_SLOT_TAKEN, "io_slot_taken"),
    (C_ACCEPTED, "connections_accepted"),
    (C_LISTENS, "listens_seen"),
    (C_LATE_ARRIVAL, "arrivals_after_read"),
    (C_EST_FULL, "established_while_est_table_full"),
    (C_END_MISSED, "ended_unseen"),
    (C_CLOSE_MISSED, "closed_unseen"),
];

/// One direction of a connection's TLS record stream (`struct hs_stream`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Stream {
    pub rec_left: u32,
    pub rec_len: u32,
    pub msg_left: u32,
    pub msg_len: u32,
    pub hello_left: u16,
    pub hello_off: u16,
    pub hdr: [u8; 16],
    pub body: [u8; 8],
    pub hdr_have: u8,
    pub body_have: u8,
    pub rec_type: u8,
    pub ccs: u8,
    pub desync: u8,
    pub pad: [u8; 3],
}

/// The kernel's per-connection state (`struct hs_conn_state`, the `conns` map's values):
/// read from userspace only to sweep up connections that never end on their own.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConnState {
    /// the record as it stands; `r.outcome` is how it ends if it ends now
    pub r: Conn,
    pub st: [Stream; 2],
    pub arrive_pending: u64,
    pub last_arrive: u64,
    pub done_at: u64,
    pub fkey: u64,
    /// the SSL object whose calls map to this connection (`ssl_socks`), 0 until known
    pub ssl: u64,
    pub flight: i8,
    /// the record was sent: from here on only bytes and exchanges are counted
    pub emitted: u8,
    pub wire_done: u8,
    pub not_tls: u8,
    pub arrival_missed: u8,
    pub first_rec_done: u8,
    pub client_fin: u8,
    pub fin_len: u8,
    pub exchanges: u32,
    /// the process whose SSL object `ssl` is (with it, the key of `ssl_socks`)
    pub ssl_tgid: u32,
    /// a preamble being watched for TLS
    pub pre_watch: u8,
    pub pre_dir: u8,
    /// accepted in the kernel: its fd is still to be learned at a read or write
    pub learn_fd: u8,
    pub pad3: [u8; 5],
    pub pre_in_start: u64,
    pub pre_last_out: u64,
    pub pre_last_in: u64,
}

// SAFETY: plain old data, every bit pattern valid, layout fixed by repr(C).
unsafe impl aya::Pod for ConnState {}

/// The key of `ssl_socks`: an SSL object of a process (`struct ssl_key`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SslKey {
    pub tgid: u32,
    pub pad: u32,
    pub ssl: u64,
}

// SAFETY: plain old data, every bit pattern valid, layout fixed by repr(C).
unsafe impl aya::Pod for SslKey {}

impl Hello<'_> {
    /// The captured bytes of the message (handshake header included).
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }
}

/// Reads a record of type `T` from the start of a ring-buffer item, if it is long enough.
pub fn read_record<T: Copy>(bytes: &[u8]) -> Option<T> {
    (bytes.len() >= size_of::<T>())
        // SAFETY: length checked; read_unaligned copes with the ring buffer's 8-byte alignment
        .then(|| unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// The record kind in the first four bytes of a ring-buffer item.
pub fn record_kind(bytes: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?))
}

// The C layout, checked at compile time (the header's _Static_asserts check the same sizes).
const _: () = {
    assert!(size_of::<Fork>() == 16);
    assert!(size_of::<HelloHeader>() == 32);
    assert!(offset_of!(HelloHeader, cap_len) == 20);
    assert!(offset_of!(HelloHeader, offset) == 24);
    assert!(size_of::<Conn>() == 512);
    assert!(offset_of!(Conn, t_tls_start) == 472);
    assert!(offset_of!(Conn, pre_proto) == 504);
    assert!(offset_of!(Conn, t_retry_arrive) == 432);
    assert!(offset_of!(Conn, cpu_first) == 312);
    assert!(offset_of!(Conn, t_req_arrive) == 272);
    assert!(offset_of!(Conn, phase) == 304);
    assert!(size_of::<Close>() == 56);
    assert!(offset_of!(Conn, comm) == 16);
    assert!(offset_of!(Conn, sport) == 64);
    assert!(offset_of!(Conn, flags) == 72);
    assert!(offset_of!(Conn, t_est) == 80);
    assert!(offset_of!(Conn, t_arrive) == 96);
    assert!(offset_of!(Conn, t_hs_done) == 192);
    assert!(offset_of!(Conn, rec_types) == 208);
    assert!(offset_of!(Conn, ssl_calls) == 240);
    assert!(offset_of!(Conn, bytes_out) == 264);
    assert!(size_of::<Stream>() == 52);
    assert!(size_of::<ConnState>() == 704);
    assert!(offset_of!(ConnState, st) == 512);
    assert!(offset_of!(ConnState, fkey) == 640);
    assert!(offset_of!(ConnState, ssl) == 648);
    assert!(offset_of!(ConnState, emitted) == 657);
    assert!(offset_of!(ConnState, exchanges) == 664);
    assert!(offset_of!(ConnState, ssl_tgid) == 668);
    assert!(offset_of!(ConnState, pre_in_start) == 680);
    assert!(size_of::<SslKey>() == 16);
};

/// A completed TLS handshake's record with every flight timed (for unit tests).
#[cfg(test)]
pub fn test_conn() -> Conn {
    Conn {
        outcome: OUTCOME_DONE,
        t_est: 100,
        t_accept: 200,
        t_arrive: [150, 0, 1_200, 0],
        t_first: [300, 500, 1_300, 1_500],
        t_last: [310, 900, 1_350, 1_600],
        t_hs_done: 1_700,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// `(name, value)` of each listed constant of this file.
    macro_rules! rust_twins {
        ($($name:ident),* $(,)?) => {
            [$((stringify!($name), as_u64($name))),*]
        };
    }

    fn as_u64<T: TryInto<u64>>(v: T) -> u64 {
        v.try_into().ok().expect("a constant that fits a u64")
    }

    fn source(path: &str) -> String {
        let path = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// A #define's value as the header writes it: a number (decimal or hex, with C's
    /// integer suffixes) or `(a << b)` of two.
    fn value(text: &str) -> Option<u64> {
        let text = text.trim();
        let text = text
            .strip_prefix('(')
            .and_then(|t| t.strip_suffix(')'))
            .unwrap_or(text);
        if let Some((a, b)) = text.split_once("<<") {
            return value(a)?.checked_shl(value(b)?.try_into().ok()?);
        }
        let digits = text.trim_end_matches(['U', 'L', 'u', 'l']);
        match digits.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => digits.parse().ok(),
        }
    }

    /// One `#define` of the header: its name, its value, and the quoted name at the start
    /// of its comment (a counter's), if any.
    struct Define {
        name: String,
        value: u64,
        quoted: Option<String>,
    }

    /// Every `#define` of ebpf/include/hstrace.h but its include guard.
    fn header_defines() -> Vec<Define> {
        let header = source("../ebpf/include/hstrace.h");
        let mut defines = Vec::new();
        for line in header.lines() {
            let Some(rest) = line.strip_prefix("#define ") else {
                continue;
            };
            let (name, rest) = rest.split_once([' ', '\t']).unwrap_or((rest, ""));
            if name == "HSTRACE_H" {
                continue;
            }
            let (text, comment) = rest.split_once("/*").unwrap_or((rest, ""));
            let value = value(text).unwrap_or_else(|| {
                panic!("hstrace.h: #define {name} {text}: not a number or a shift, which this test cannot read")
            });
            let quoted = comment
                .trim_start()
                .strip_prefix('"')
                .and_then(|c| c.split_once('"'))
                .map(|(q, _)| q.to_string());
            defines.push(Define {
                name: name.to_string(),
                value,
                quoted,
            });
        }
        defines
    }

    /// A `woke` code is 1 + 8 log2 of the units of 1,024 ns, an eighth of an octave a
    /// step: exact below 8 units, the middle of its step above, within an eighth of any
    /// value in it.
    #[test]
    fn woke_codes_read_as_nanoseconds() {
        assert_eq!(woke_ns(0), None);
        // 1 unit (and anything shorter, which the BPF side counts as 1): 0 octaves
        assert_eq!(woke_ns(1), Some(1_024));
        // 3 units: one octave, the bit below the leading one set
        assert_eq!(woke_ns(1 + 8 + 4), Some(3 * 1_024));
        // about 1 ms, 977 units = 0b1111010001: 9 octaves, the three bits below 111, so
        // 960 to 1,023 units, read as their middle
        assert_eq!(woke_ns(1 + 8 * 9 + 7), Some(992 * 1_024));
        // the longest: 1.75 x 2^31 units (64 minutes) and more
        assert!(woke_ns(255).unwrap() > 3_800_000_000_000);
    }

    /// The C side's coding (ebpf/include/woke.h, compiled for this host with the clang the
    /// BPF programs are built with) reads back within an eighth, exact below 8 units of
    /// 1,024 ns, and keeps the order of the times it codes.
    #[test]
    fn the_c_coding_reads_back_within_an_eighth() {
        let dir = std::env::temp_dir().join(format!("hstrace-woke-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c, exe) = (dir.join("woke.c"), dir.join("woke"));
        let header = format!("{}/../ebpf/include/woke.h", env!("CARGO_MANIFEST_DIR"));
        std::fs::write(
            &c,
            format!(
                "#include <stdio.h>\n#include <stdlib.h>\n#include \"{header}\"\n\
                 int main(int argc, char **argv) {{\n\
                 for (int i = 1; i < argc; i++)\n\
                 printf(\"%u\\n\", hs_woke_code(strtoull(argv[i], 0, 10)));\n\
                 return 0;\n}}\n"
            ),
        )
        .unwrap();
        let clang = std::env::var("HSTRACE_CLANG").unwrap_or_else(|_| "clang-19".into());
        let built = std::process::Command::new(&clang)
            .args(["-O2", "-Wall", "-Werror", "-o"])
            .arg(&exe)
            .arg(&c)
            .status()
            .unwrap_or_else(|e| panic!("{clang}: {e} (cargo xtask setup installs it)"));
        assert!(built.success(), "{clang} could not compile woke.h");
        // nanoseconds: whole units, and times between them
        let times: Vec<u64> = [0, 1, 2, 3, 7, 8, 9, 15, 100, 999, 1000, 4097, 65_535]
            .into_iter()
            .chain((0..40).map(|i| 3u64.pow(i / 2) * (1 + u64::from(i % 2))))
            .chain([3_758_096_384, 1 << 40])
            .map(|units| units * 1_024)
            .chain([
                1,
                1_023,
                1_025,
                999_999,
                7 * 1_024 + 1_023,
                1 << 62,
                u64::MAX,
            ])
            .collect();
        let out = std::process::Command::new(&exe)
            .args(times.iter().map(u64::to_string))
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let codes: Vec<u8> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        assert_eq!(codes.len(), times.len());
        for (&ns, &code) in times.iter().zip(&codes) {
            let back = woke_ns(code).unwrap() as f64 / 1_024.0;
            let units = (ns >> 10).max(1) as f64;
            if units < 8.0 {
                assert_eq!(back, units, "{ns} ns: code {code}");
            } else if code < 255 {
                assert!(
                    (back / units - 1.0).abs() <= 1.0 / 8.0,
                    "{ns} ns: code {code}, {back}"
                );
            } else {
                assert!(units >= 1.75 * 2f64.powi(31), "{ns} ns: code {code}");
            }
        }
        let mut sorted: Vec<(u64, u8)> = times.iter().copied().zip(codes).collect();
        sorted.sort();
        assert!(sorted.windows(2).all(|w| w[0].1 <= w[1].1), "{sorted:?}");
    }

    /// Every constant shared with the C side has one definition in the header and its
    /// twin here (the same name less HS_), with the same value; counters have the same
    /// names. Fails on a constant defined on one side only.
    #[test]
    fn header_constants_match_abi_rs() {
        #[rustfmt::skip]
        let twins: BTreeMap<&str, u64> = rust_twins!(
            HELLO_CAP, MAX_CONNS, MAX_TGIDS, IO_SLOTS, RINGBUF_BYTES, WAKEUP_BYTES, DRAIN_MS,
            REC_HELLO, REC_CONN, REC_CLOSE, REC_HELLO_PART, REC_FORK,
            DIR_IN, DIR_OUT,
            OUTCOME_DONE, OUTCOME_FAILED, OUTCOME_NOT_TLS,
            FAIL_NONE, FAIL_CLIENT_CLOSED, FAIL_ALERT, FAIL_RESET, FAIL_NOT_TLS,
            FAIL_SERVER_CLOSED, FAIL_SERVER_EXITED, FAIL_TIMEOUT,
            F_UPROBE, F_HS_DONE_SSL, F_DESYNC, F_EST_SEEN, F_PEER_FIN, F_READ_EOF,
            F_READ_RESET, F_PEER_RESET, F_SSLV2_HELLO, F_HRR, F_EARLY_DATA, F_WIRE_ENDS,
            F_CLOSED,
            IDLE_FLIGHT1, IDLE_FLIGHT2, IDLE_RESPONSE, IDLE_RETRY, IDLE_KNOWN,
            WOKE_ACCEPT, WOKE_FLIGHT1, WOKE_FLIGHT2, WOKE_RESPONSE, WOKE_RETRY, WOKE_CALLS,
            PH_HANDSHAKE, PH_WAIT_REQUEST, PH_REQUEST, PH_RESPONSE, PH_DONE,
            SET_NO_FDS, SET_LAZY_FD, SET_SSL_ALL_PROCS,
            RT_CCS, RT_ALERT, RT_HANDSHAKE, RT_APPDATA,
            FLIGHTS, FL_C1, FL_S1, FL_C2, FL_S2,
            HT_CLIENT_HELLO, HT_SERVER_HELLO, HT_CERTIFICATE,
            PROTO_NONE, PROTO_HTTP, PROTO_POSTGRESQL, PROTO_SMTP, PROTO_FTP, PROTO_IMAP,
            PROTO_POP3, PROTO_LDAP, PROTO_MYSQL, PROTO_XMPP, PROTO_BANNER_220,
            PRE_NONE, PRE_PLAIN, PRE_ASKED, PRE_GRANTED, PRE_REFUSED, PRE_UPGRADED,
            PRE_FLIGHTS_MAX, PRE_BYTES_MAX,
            C_CONNS, C_RECORDS, C_RECORDS_DROPPED, C_HELLOS_DROPPED, C_DESYNC,
            C_TABLE_FULL, C_NO_SOCK, C_CLOSES_DROPPED, C_IO_SLOT_TAKEN, C_ACCEPTED,
            C_LISTENS, C_LATE_ARRIVAL, C_EST_FULL, C_END_MISSED, C_CLOSE_MISSED, C_MAX,
        )
        .into_iter()
        .collect();
        // (HS_HRR_RANDOM_<i>: word i of HRR_RANDOM, little-endian, as the BPF side compares)
        let hrr: Vec<u64> = HRR_RANDOM
            .chunks(8)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
            .collect();

        let mut seen = BTreeSet::new();
        let mut counters = Vec::new();
        for d in header_defines() {
            let rust = d.name.strip_prefix("HS_").unwrap_or(&d.name).to_string();
            let (want, twin) = match rust.strip_prefix("HRR_RANDOM_") {
                Some(i) => (
                    i.parse::<usize>().ok().and_then(|i| hrr.get(i).copied()),
                    format!("HRR_RANDOM (little-endian word {i})"),
                ),
                None => (twins.get(rust.as_str()).copied(), rust.clone()),
            };
            let want = want.unwrap_or_else(|| {
                panic!(
                    "hstrace.h defines {}, which abi.rs does not mirror: add `{rust}` to abi.rs \
                     and to this test (or, if only the BPF side uses it, move it to a .bpf.h)",
                    d.name
                )
            });
            assert_eq!(
                d.value, want,
                "hstrace.h's {} differs from abi.rs's {twin}",
                d.name
            );
            if rust.starts_with("C_") && rust != "C_MAX" {
                let name = d.quoted.unwrap_or_else(|| {
                    panic!(
                        "hstrace.h: counter {} has no quoted name in its comment",
                        d.name
                    )
                });
                counters.push((d.value as u32, name));
            }
            assert!(seen.insert(rust), "hstrace.h defines {} twice", d.name);
        }

        for name in twins.keys() {
            assert!(
                seen.contains(*name),
                "abi.rs's {name} has no HS_{name} (or {name}) in hstrace.h"
            );
        }
        for i in 0..hrr.len() {
            assert!(
                seen.contains(&format!("HRR_RANDOM_{i}")),
                "hstrace.h lacks HS_HRR_RANDOM_{i}"
            );
        }
        // every numeric constant of this file is one of the twins above
        let abi = source("src/abi.rs");
        for line in abi.lines() {
            let Some((name, ty)) = line
                .strip_prefix("pub const ")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let numeric = [
                "u8", "u16", "u32", "u64", "usize", "i8", "i16", "i32", "i64",
            ]
            .contains(&ty.split('=').next().unwrap().trim());
            assert!(
                !numeric || twins.contains_key(name),
                "abi.rs's {name} is not tied to hstrace.h: add it to the header and to this test"
            );
        }

        counters.sort();
        let names: Vec<(u32, String)> = COUNTERS.iter().map(|&(i, n)| (i, n.to_string())).collect();
        assert_eq!(
            counters, names,
            "hstrace.h's counters and abi.rs's COUNTERS differ"
        );
    }
}
