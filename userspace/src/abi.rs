//! Rust mirror of `ebpf/include/hstrace.h`: the records the BPF programs send and the
//! counters they keep. The assertions at the bottom fail the build if the two drift.

use std::{
    borrow::Cow,
    mem::{offset_of, size_of},
};

/// The most of a hello the kernel copies: one whole TLS record's plaintext (2^14), enough
/// for post-quantum key shares with the extensions in any order.
pub const HELLO_CAP: usize = 16384;
pub const MAX_CONNS: u32 = 65536;
pub const MAX_TGIDS: u32 = 4096;
pub const RINGBUF_BYTES: u32 = 8 << 20;
/// Userspace drains the ring buffer this often (the kernel wakes it sooner when full).
pub const DRAIN_MS: u64 = 100;

pub const REC_HELLO: u32 = 1;
pub const REC_CONN: u32 = 2;
pub const REC_CLOSE: u32 = 3;
/// A piece of a hello that did not come in one read (`Hello::offset` >= 4).
pub const REC_HELLO_PART: u32 = 4;
/// A traced process forked a new one (`Fork`): its uprobes are attached at once.
pub const REC_FORK: u32 = 5;

/// `struct hs_fork`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Fork {
    pub rec: u32,
    pub tgid: u32,
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

/// The `settings` map's bit: no attached hook reads the fds table.
pub const SET_NO_FDS: u32 = 1;

pub const F_UPROBE: u32 = 1 << 0;
pub const F_HS_DONE_SSL: u32 = 1 << 1;
pub const F_DESYNC: u32 = 1 << 2;
pub const F_EST_SEEN: u32 = 1 << 3;
pub const F_SSLV2_HELLO: u32 = 1 << 8;
pub const F_HRR: u32 = 1 << 9;
/// TLS 1.3 0-RTT: the first request came as early data with the ClientHello.
pub const F_EARLY_DATA: u32 = 1 << 10;
/// The connection ended as its record was made: the record is its close too
/// (`Conn::close`), and no close record follows.
pub const F_CLOSED: u32 = 1 << 12;

pub const RT_CCS: u32 = 1 << 0;
pub const RT_ALERT: u32 = 1 << 1;
pub const RT_HANDSHAKE: u32 = 1 << 2;
pub const RT_APPDATA: u32 = 1 << 3;

pub const FLIGHTS: usize = 4;
pub const FL_C1: usize = 0;
pub const FL_S1: usize = 1;
pub const FL_C2: usize = 2;
pub const FL_S2: usize = 3;

/// Handshake message types of ClientHello and ServerHello (`hs_types` has 1 << type).
pub const HT_CLIENT_HELLO: u32 = 1;
pub const HT_SERVER_HELLO: u32 = 2;
/// Handshake message type of Certificate, as a bit of `hs_types`.
pub const HT_CERTIFICATE: u32 = 11;

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
    pub pad1: [u8; 7],
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

/// Counters kept by the BPF side, by index into the per-CPU `counters` map.
pub const COUNTERS: [(u32, &str); 13] = [
    (0, "connections_tracked"),
    (1, "records_sent"),
    (2, "records_dropped"),
    (3, "hellos_dropped"),
    (4, "record_stream_desync"),
    (5, "accepted_while_table_full"),
    (6, "accepted_fd_without_socket"),
    (7, "close_records_dropped"),
    (8, "io_slot_taken"),
    (9, "connections_accepted"),
    (10, "listens_seen"),
    (11, "arrivals_after_read"),
    (12, "established_while_est_table_full"),
];
pub const C_CONNS: u32 = 0;
pub const C_RECORDS_DROPPED: u32 = 2;
pub const C_HELLOS_DROPPED: u32 = 3;
pub const C_DESYNC: u32 = 4;
pub const C_TABLE_FULL: u32 = 5;
pub const C_NO_SOCK: u32 = 6;
pub const C_CLOSES_DROPPED: u32 = 7;
pub const C_IO_SLOT_TAKEN: u32 = 8;
pub const C_ACCEPTED: u32 = 9;
pub const C_LISTENS: u32 = 10;
pub const C_EST_FULL: u32 = 12;

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

// The C layout, checked at compile time (offsets from ebpf/include/hstrace.h).
const _: () = {
    assert!(size_of::<HelloHeader>() == 32);
    assert!(offset_of!(HelloHeader, cap_len) == 20);
    assert!(offset_of!(HelloHeader, offset) == 24);
    assert!(size_of::<Conn>() == 472);
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
    assert!(size_of::<ConnState>() == 632);
    assert!(offset_of!(ConnState, st) == 472);
    assert!(offset_of!(ConnState, fkey) == 600);
    assert!(offset_of!(ConnState, ssl) == 608);
    assert!(offset_of!(ConnState, emitted) == 617);
    assert!(offset_of!(ConnState, exchanges) == 624);
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
