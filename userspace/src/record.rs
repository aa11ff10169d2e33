//! One connection's record: the kernel's timestamps joined with its parsed ClientHello and
//! ServerHello, classified (version, cipher, kind, resumption) and cut into the stages of
//! the BRIEF's stage table. This file is where every stage is computed.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    fmt::Write as _,
    net::Ipv6Addr,
};

use crate::{
    abi::{self, Close, Conn, Hello},
    json::Object,
    tls::{self, ClientHello, ServerHello},
};

/// Stage names, in wire order, with their class: service (the server works), queue (a
/// message waits for the server), delay (the server waits for the client and network).
pub const STAGES: &[(&str, &str)] = &[
    ("accept_queue", "queue"),
    ("wait_client_hello", "delay"),
    ("client_hello_queue", "queue"),
    ("server_flight_1", "service"),
    ("wait_client_flight_2", "delay"),
    ("client_flight_2_queue", "queue"),
    ("server_flight_2", "service"),
    ("wait_request", "delay"),
    ("request_queue", "queue"),
    ("response", "service"),
];

/// The class of a stage name from `STAGES`.
pub fn stage_class(name: &str) -> &'static str {
    STAGES
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("unknown", |(_, c)| c)
}

/// A finished connection, as printed (the JSON field names are a documented contract).
#[derive(Debug)]
pub struct Record {
    /// "connection" (the other line is "close")
    pub record: &'static str,
    pub time: String,
    pub conn_id: u64,
    pub pid: u32,
    pub comm: String,
    pub local: String,
    pub peer: String,
    pub protocol: &'static str,
    pub tls_version: Option<&'static str>,
    pub cipher: Option<String>,
    pub sni: Option<String>,
    pub alpn: Option<String>,
    pub alpn_offered: Vec<String>,
    pub kind: &'static str,
    pub resumption_offered: bool,
    pub resumption: Option<&'static str>,
    pub handshake_ns: Option<u64>,
    pub stages_ns: Stages,
    /// on-CPU time of the server thread during each service stage (the rest of the stage
    /// it was runnable, blocked or serving other connections)
    pub cpu_ns: Stages,
    /// with --uprobes all: what SSL_read/SSL_write saw of the first request and response
    pub library: Option<Library>,
    pub failure: Option<&'static str>,
    pub failed_in: Option<&'static str>,
    pub alert: Option<Alert>,
    /// Where t_hs_done came from: "ssl" (SSL_do_handshake returned 1) or "wire".
    pub hs_done_from: Option<&'static str>,
    pub ssl_calls: u32,
    pub ssl_ns: u64,
    /// Parsing gaps worth knowing about (hello not captured, truncated, stream desync).
    pub notes: Vec<&'static str>,
}

/// The library's view of the first request and response: plaintext bytes SSL_read and
/// SSL_write returned while each was in progress, and the time spent inside them.
#[derive(Debug)]
pub struct Library {
    pub request_bytes: u64,
    pub request_ns: u64,
    pub response_bytes: u64,
    pub response_ns: u64,
}

#[derive(Debug)]
pub struct Alert {
    pub from: &'static str,
    pub level: u8,
    pub description: u8,
}

/// Stages that happened, in wire order, as (name, nanoseconds).
#[derive(Debug, Default)]
pub struct Stages(pub Vec<(&'static str, u64)>);

impl Stages {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
    }
}

/// The line printed when a connection ends (JSON only): its totals.
#[derive(Debug)]
pub struct CloseRecord {
    pub record: &'static str,
    pub time: String,
    pub conn_id: u64,
    pub pid: u32,
    /// request/response exchanges after the handshake (HTTP/1.x: requests)
    pub exchanges: u32,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration_ns: Option<u64>,
}

/// The fields both lines open with.
fn line_head<'a>(
    out: &'a mut Vec<u8>,
    record: &str,
    time: &str,
    conn_id: u64,
    pid: u32,
) -> Object<'a> {
    let mut o = Object::begin(out);
    o.str("record", record)
        .str("time", time)
        .u64("conn_id", conn_id)
        .u64("pid", pid.into());
    o
}

impl Record {
    /// The JSON line, fields in this order: `null` when unknown, the optional ones left
    /// out when absent or empty.
    pub fn json(&self, out: &mut Vec<u8>) {
        let mut o = line_head(out, self.record, &self.time, self.conn_id, self.pid);
        o.str("comm", &self.comm)
            .str("local", &self.local)
            .str("peer", &self.peer)
            .str("protocol", self.protocol)
            .opt_str("tls_version", self.tls_version)
            .opt_str("cipher", self.cipher.as_deref())
            .opt_str("sni", self.sni.as_deref())
            .opt_str("alpn", self.alpn.as_deref());
        if !self.alpn_offered.is_empty() {
            o.strs("alpn_offered", &self.alpn_offered);
        }
        o.str("kind", self.kind)
            .bool("resumption_offered", self.resumption_offered);
        if let Some(r) = self.resumption {
            o.str("resumption", r);
        }
        if let Some(h) = self.handshake_ns {
            o.u64("handshake_ns", h);
        }
        o.object("stages_ns", |m| self.stages_ns.json(m));
        if !self.cpu_ns.is_empty() {
            o.object("cpu_ns", |m| self.cpu_ns.json(m));
        }
        if let Some(l) = &self.library {
            o.object("library", |m| {
                m.u64("request_bytes", l.request_bytes)
                    .u64("request_ns", l.request_ns)
                    .u64("response_bytes", l.response_bytes)
                    .u64("response_ns", l.response_ns);
            });
        }
        // service / queue / delay of each stage present
        o.object("stage_classes", |m| {
            for (k, _) in &self.stages_ns.0 {
                m.str(k, stage_class(k));
            }
        });
        if let Some(f) = self.failure {
            o.str("failure", f);
        }
        if let Some(f) = self.failed_in {
            o.str("failed_in", f);
        }
        if let Some(a) = &self.alert {
            o.object("alert", |m| {
                m.str("from", a.from)
                    .u64("level", a.level.into())
                    .u64("description", a.description.into());
            });
        }
        o.opt_str("hs_done_from", self.hs_done_from)
            .u64("ssl_calls", self.ssl_calls.into())
            .u64("ssl_ns", self.ssl_ns);
        if !self.notes.is_empty() {
            o.strs("notes", &self.notes);
        }
        o.end();
    }
}

impl Stages {
    fn json(&self, m: &mut Object) {
        for (k, v) in &self.0 {
            m.u64(k, *v);
        }
    }
}

impl CloseRecord {
    /// The JSON line; `duration_ns` left out when the accept time is unknown.
    pub fn json(&self, out: &mut Vec<u8>) {
        let mut o = line_head(out, self.record, &self.time, self.conn_id, self.pid);
        o.u64("exchanges", self.exchanges.into())
            .u64("bytes_in", self.bytes_in)
            .u64("bytes_out", self.bytes_out);
        if let Some(d) = self.duration_ns {
            o.u64("duration_ns", d);
        }
        o.end();
    }
}

/// "1.2.3.4:443" or "[::1]:443" (IPv4 written by hand: `format!` made this an eighth of
/// the pipeline's time).
fn addr(family: u16, bytes: &[u8; 16], port: u16) -> String {
    if family == 10 {
        return format!("[{}]:{port}", Ipv6Addr::from(*bytes));
    }
    let mut s = String::with_capacity(21);
    let mut digits = itoa::Buffer::new();
    for (i, octet) in bytes[..4].iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        s.push_str(digits.format(*octet));
    }
    s.push(':');
    s.push_str(digits.format(port));
    s
}

fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// `b - a` when both happened and in that order.
fn span(a: u64, b: u64) -> Option<u64> {
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

/// Cut the connection's timeline into stages (only those that happened).
pub fn stages(c: &Conn) -> Stages {
    let mut out = Vec::with_capacity(10); // the most a connection has
    let mut push = |name, v: Option<u64>| {
        if let Some(v) = v {
            out.push((name, v));
        }
    };
    use abi::{FL_C1, FL_C2, FL_S1};
    let end = c.t_hs_done;
    push("accept_queue", span(c.t_est, c.t_accept));
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
    let request = |push: &mut dyn FnMut(&'static str, Option<u64>)| {
        let (wait, queue) = wait_and_queue(request_from, c.t_req_arrive, req_read);
        push("wait_request", wait);
        push("request_queue", queue);
        push("response", span(req_read, c.t_resp_last));
    };
    if c.outcome == abi::OUTCOME_NOT_TLS {
        request(&mut push);
        return Stages(out);
    }
    let read_ch = c.t_first[FL_C1];
    let (wait, queue) = wait_and_queue(c.t_accept, c.t_arrive[FL_C1], read_ch);
    push("wait_client_hello", wait);
    push("client_hello_queue", queue);
    let sent_s1 = c.t_last[FL_S1];
    push("server_flight_1", span(read_ch, sent_s1));
    let read_c2 = c.t_first[FL_C2];
    let (wait, queue) = wait_and_queue(sent_s1, c.t_arrive[FL_C2], read_c2);
    push("wait_client_flight_2", wait);
    push("client_flight_2_queue", queue);
    push("server_flight_2", span(read_c2, end));
    if end != 0 {
        request(&mut push);
    }
    Stages(out)
}

/// On-CPU time of the server thread during the service stages.
pub fn cpu(c: &Conn) -> Stages {
    use abi::{FL_C1, FL_C2, FL_S1};
    let mut out = Vec::with_capacity(3);
    for (name, a, b) in [
        ("server_flight_1", c.cpu_first[FL_C1], c.cpu_last[FL_S1]),
        ("server_flight_2", c.cpu_first[FL_C2], c.cpu_hs_done),
        ("response", c.cpu_req_read, c.cpu_resp_last),
    ] {
        if let Some(v) = span(a, b) {
            out.push((name, v));
        }
    }
    Stages(out)
}

/// The stage a failed connection was in when it ended, from the flight in progress: a
/// server that answered with an alert failed in its own flight; one that sent a flight
/// and heard nothing back was waiting for the client.
fn failed_in(c: &Conn) -> &'static str {
    let server_alert = c.alert_level != 0 && c.alert_dir as u32 == abi::DIR_OUT;
    match c.fail_flight.checked_sub(1).map(usize::from) {
        None => "wait_client_hello",
        // the client's flight never completed a record: still waiting for it
        Some(abi::FL_C1) if c.t_first[abi::FL_C1] == 0 => "wait_client_hello",
        Some(abi::FL_C1) => "server_flight_1",
        Some(abi::FL_S1) if server_alert => "server_flight_1",
        Some(abi::FL_S1) => "wait_client_flight_2",
        Some(abi::FL_C2) if c.t_first[abi::FL_C2] == 0 => "wait_client_flight_2",
        _ => "server_flight_2",
    }
}

fn failure_name(f: u8) -> &'static str {
    match f {
        abi::FAIL_CLIENT_CLOSED => "client_closed",
        abi::FAIL_ALERT => "alert",
        abi::FAIL_RESET => "reset",
        abi::FAIL_NOT_TLS => "not_tls",
        abi::FAIL_SERVER_CLOSED => "server_closed",
        abi::FAIL_SERVER_EXITED => "server_exited",
        abi::FAIL_TIMEOUT => "timeout",
        _ => "unknown",
    }
}

/// Wall-clock time of a CLOCK_MONOTONIC timestamp.
pub struct Clock {
    /// realtime - monotonic, in ns
    offset: i128,
}

impl Clock {
    pub fn new() -> Clock {
        let now = |id| {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: valid pointer to a timespec
            unsafe { libc::clock_gettime(id, &mut ts) };
            ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
        };
        Clock {
            offset: now(libc::CLOCK_REALTIME) - now(libc::CLOCK_MONOTONIC),
        }
    }

    /// RFC 3339 UTC with microseconds, e.g. 2026-11-22T01:08:27.123456Z (written digit by
    /// digit: two per connection, and `format!` was a seventh of the pipeline's time).
    pub fn rfc3339(&self, mono_ns: u64) -> String {
        let ns = mono_ns as i128 + self.offset;
        let secs = ns.div_euclid(1_000_000_000) as i64;
        let micros = (ns.rem_euclid(1_000_000_000) / 1000) as u64;
        let (days, sod) = (secs.div_euclid(86400), secs.rem_euclid(86400) as u64);
        let (y, m, d) = civil_from_days(days);
        let mut b = *b"0000-00-00T00:00:00.000000Z";
        let fields: [(usize, usize, u64); 7] = [
            (0, 4, y.clamp(0, 9999) as u64),
            (5, 2, m as u64),
            (8, 2, d as u64),
            (11, 2, sod / 3600),
            (14, 2, sod % 3600 / 60),
            (17, 2, sod % 60),
            (20, 6, micros),
        ];
        for (at, width, mut v) in fields {
            for i in (at..at + width).rev() {
                b[i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        }
        std::str::from_utf8(&b).expect("ASCII digits").to_owned()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A connection's hellos, parsed as they arrive (the raw bytes are not kept).
#[derive(Debug, Default)]
pub struct Hellos {
    pub client: Option<Result<ClientHello, tls::ParseError>>,
    pub server: Option<Result<ServerHello, tls::ParseError>>,
}

impl Hellos {
    /// Parse a captured hello; a later one of the same direction (after a
    /// HelloRetryRequest) replaces the earlier.
    pub fn add(&mut self, h: &Hello) {
        if h.dir == abi::DIR_IN {
            self.client = Some(ClientHello::parse(h.bytes(), h.msg_len as usize));
        } else {
            self.server = Some(ServerHello::parse(h.bytes(), h.msg_len as usize));
        }
    }
}

/// Build the printed record from the kernel's record and the hellos captured for it.
/// `plain_port`: the connection's local address has never carried TLS, so a stream that
/// is not TLS is plain text (HTTP) rather than a failed TLS connection.
pub fn build(c: &Conn, hellos: Hellos, clock: &Clock, plain_port: bool) -> Record {
    let mut notes = Vec::new();
    let ch = hellos.client.and_then(|r| {
        if r.is_err() {
            notes.push("client_hello_unparsed");
        }
        r.ok()
    });
    let sh = hellos.server.and_then(|r| {
        if r.is_err() {
            notes.push("server_hello_unparsed");
        }
        r.ok()
    });
    if ch.as_ref().is_some_and(|h| h.truncated) {
        notes.push("client_hello_truncated");
    }
    let not_tls = c.outcome == abi::OUTCOME_NOT_TLS;
    if c.flags & abi::F_DESYNC != 0 && !not_tls {
        notes.push("record_stream_desync");
    }
    let done = c.outcome == abi::OUTCOME_DONE;
    let plain = not_tls && plain_port;
    // a hello that was on the wire (its flight completed a record) but not captured
    let tls = !not_tls;
    if tls && ch.is_none() && c.t_first[abi::FL_C1] != 0 {
        notes.push("client_hello_missing");
    }
    if tls && sh.is_none() && c.t_first[abi::FL_S1] != 0 {
        notes.push("server_hello_missing");
    }
    let tls13_wire = c.rec_types[abi::FL_S1] & abi::RT_APPDATA != 0;
    let version = sh
        .as_ref()
        .map(|s| s.version)
        .or(done.then_some(if tls13_wire { 0x0304 } else { 0x0303 }));
    let resumed = match (&sh, version) {
        (Some(s), Some(0x0304)) => s.psk,
        // TLS 1.2: the server echoed the session and went straight to ChangeCipherSpec,
        // with no Certificate in its first flight
        (_, Some(_)) => {
            c.hs_types[abi::FL_S1] & (1 << abi::HT_CERTIFICATE) == 0
                && c.rec_types[abi::FL_S1] & abi::RT_CCS != 0
        }
        _ => false,
    };
    let kind = if plain {
        "plain"
    } else if !done {
        "failed"
    } else if resumed {
        "resumed"
    } else {
        "full"
    };
    let resumption = (kind == "resumed").then(|| match (version, &ch) {
        (Some(0x0304), _) => "psk",
        (_, Some(h)) if h.session_ticket_len.unwrap_or(0) > 0 => "ticket",
        _ => "session_id",
    });
    // ALPN: the ServerHello has it in TLS 1.2; in 1.3 it is in the encrypted
    // EncryptedExtensions, so report the client's offer when it was a single protocol
    let offered = ch.as_ref().map(|h| h.alpn.clone()).unwrap_or_default();
    let alpn = match (&sh, version) {
        (Some(s), Some(v)) if v < 0x0304 => s.alpn.clone(),
        (_, Some(0x0304)) if done && offered.len() == 1 => offered.first().cloned(),
        _ => None,
    };
    let failure = match (done || plain, not_tls) {
        (true, _) => None,
        (false, true) => Some("not_tls"),
        (false, false) => Some(failure_name(c.failure)),
    };
    let stages_ns = stages(c);
    Record {
        record: "connection",
        time: clock.rfc3339(c.t_end),
        conn_id: c.conn_id,
        pid: c.tgid,
        comm: c_str(&c.comm),
        local: addr(c.family, &c.saddr, c.sport),
        peer: addr(c.family, &c.daddr, c.dport),
        protocol: if plain { "plain" } else { "tls" },
        tls_version: version.and_then(tls::version_name),
        cipher: sh.as_ref().map(|s| tls::cipher_label(s.cipher)),
        sni: ch.as_ref().and_then(|h| h.sni.clone()),
        alpn,
        alpn_offered: if offered.len() > 1 {
            offered
        } else {
            Vec::new()
        },
        kind,
        resumption_offered: ch.as_ref().is_some_and(|h| h.offers_resumption()),
        resumption,
        handshake_ns: done.then(|| span(c.t_accept, c.t_hs_done)).flatten(),
        cpu_ns: {
            // only for stages that happened (a plain stream has no flights), and never
            // more than the stage: the CPU clock and the stage's timestamps are read a
            // few hundred ns apart
            let mut cpu = cpu(c);
            cpu.0.retain_mut(|(k, v)| match stages_ns.get(k) {
                Some(wall) => {
                    *v = (*v).min(wall);
                    true
                }
                None => false,
            });
            cpu
        },
        stages_ns,
        library: (c.lib_req_ns + c.lib_resp_ns > 0).then_some(Library {
            request_bytes: c.lib_req_bytes,
            request_ns: c.lib_req_ns,
            response_bytes: c.lib_resp_bytes,
            response_ns: c.lib_resp_ns,
        }),
        failed_in: failure.map(|_| failed_in(c)),
        failure,
        alert: (c.alert_level != 0).then_some(Alert {
            from: if c.alert_dir as u32 == abi::DIR_OUT {
                "server"
            } else {
                "client"
            },
            level: c.alert_level,
            description: c.alert_desc,
        }),
        hs_done_from: done.then_some(if c.flags & abi::F_HS_DONE_SSL != 0 {
            "ssl"
        } else {
            "wire"
        }),
        ssl_calls: c.ssl_calls,
        ssl_ns: c.ssl_ns,
        notes,
    }
}

fn dur(ns: u64) -> String {
    match ns {
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{:.1}us", n as f64 / 1e3),
        n => format!("{:.2}ms", n as f64 / 1e6),
    }
}

impl Record {
    /// One readable line: who, what, and the timeline of stages.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} {}[{}] {} -> {} ",
            &self.time[11..26],
            self.comm,
            self.pid,
            self.peer,
            self.local
        );
        if let Some(v) = self.tls_version {
            let _ = write!(s, "TLS{v} ");
        }
        s.push_str(self.kind);
        if let Some(r) = self.resumption {
            let _ = write!(s, "({r})");
        }
        if let Some(f) = self.failure {
            let _ = write!(s, "({f} in {})", self.failed_in.unwrap_or("?"));
        }
        for (k, v) in [
            ("cipher", &self.cipher),
            ("sni", &self.sni),
            ("alpn", &self.alpn),
        ] {
            if let Some(v) = v {
                let _ = write!(s, " {k}={v}");
            }
        }
        if let Some(h) = self.handshake_ns {
            let _ = write!(s, " handshake={}", dur(h));
        }
        let timeline: Vec<String> = self
            .stages_ns
            .0
            .iter()
            .map(|(k, v)| format!("{k} {}", dur(*v)))
            .collect();
        if !timeline.is_empty() {
            let _ = write!(s, " | {}", timeline.join(" > "));
        }
        s
    }
}

/// Joins hellos with their connection's record, and remembers which local addresses
/// carry TLS. Hellos arrive first; a connection whose record never comes (evicted, lost)
/// is forgotten oldest-first past `cap`.
pub struct Assembler {
    hellos: HashMap<u64, Hellos>,
    order: VecDeque<u64>,
    cap: usize,
    /// (family, address, port)
    tls_addrs: HashSet<(u16, [u8; 16], u16)>,
    pub hellos_unmatched: u64,
}

/// Local addresses remembered as carrying TLS (one per listening socket in practice).
const MAX_TLS_ADDRS: usize = 4096;

impl Assembler {
    pub fn new(cap: usize) -> Assembler {
        Assembler {
            hellos: HashMap::new(),
            order: VecDeque::new(),
            cap,
            tls_addrs: HashSet::new(),
            hellos_unmatched: 0,
        }
    }

    pub fn hello(&mut self, h: &Hello) {
        let id = h.conn_id;
        if !self.hellos.contains_key(&id) {
            while self.hellos.len() >= self.cap {
                let Some(old) = self.order.pop_front() else {
                    break;
                };
                if self.hellos.remove(&old).is_some() {
                    self.hellos_unmatched += 1;
                }
            }
            self.order.push_back(id);
        }
        self.hellos.entry(id).or_default().add(h);
    }

    pub fn conn(&mut self, c: &Conn, clock: &Clock) -> Record {
        let hellos = self.hellos.remove(&c.conn_id).unwrap_or_default();
        // ids whose record came are still queued in `order`: trim them now and then
        if self.order.len() > 2 * self.cap.max(self.hellos.len()) {
            let live = &self.hellos;
            self.order.retain(|id| live.contains_key(id));
        }
        let local = (c.family, c.saddr, c.sport);
        let plain_port = !self.tls_addrs.contains(&local);
        if c.outcome != abi::OUTCOME_NOT_TLS
            && c.rec_types[abi::FL_C1] != 0
            && self.tls_addrs.len() < MAX_TLS_ADDRS
        {
            self.tls_addrs.insert(local);
        }
        build(c, hellos, clock, plain_port)
    }

    pub fn close(&self, c: &Close, clock: &Clock) -> CloseRecord {
        CloseRecord {
            record: "close",
            time: clock.rfc3339(c.t_close),
            conn_id: c.conn_id,
            pid: c.tgid,
            exchanges: c.exchanges,
            bytes_in: c.bytes_in,
            bytes_out: c.bytes_out,
            duration_ns: span(c.t_accept, c.t_close),
        }
    }

    pub fn pending(&self) -> usize {
        self.hellos.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_413), (2025, 11, 21));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        let epoch = Clock { offset: 0 };
        assert_eq!(epoch.rfc3339(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(
            epoch.rfc3339(1_795_312_107_123_456_789),
            "2026-11-22T01:48:27.123456Z"
        );
        let later = Clock {
            offset: 86_399_999_999_000,
        };
        assert_eq!(later.rfc3339(0), "1970-01-01T23:59:59.999999Z");
    }

    fn conn() -> Conn {
        let mut c = Conn {
            outcome: abi::OUTCOME_DONE,
            t_est: 100,
            t_accept: 200,
            ..Default::default()
        };
        c.t_arrive = [150, 0, 1_200, 0];
        c.t_first = [300, 500, 1_300, 1_500];
        c.t_last = [310, 900, 1_350, 1_600];
        c.t_hs_done = 1_700;
        c
    }

    #[test]
    fn stages_partition_the_handshake() {
        let c = conn();
        let s = stages(&c);
        assert_eq!(s.get("accept_queue"), Some(100));
        // the ClientHello came before accept(): no wait, queued from accept to read
        assert_eq!(s.get("wait_client_hello"), Some(0));
        assert_eq!(s.get("client_hello_queue"), Some(100));
        assert_eq!(s.get("server_flight_1"), Some(600));
        assert_eq!(s.get("wait_client_flight_2"), Some(300));
        assert_eq!(s.get("client_flight_2_queue"), Some(100));
        assert_eq!(s.get("server_flight_2"), Some(400));
        let inside: u64 =
            s.0.iter()
                .filter(|(n, _)| *n != "accept_queue")
                .map(|(_, v)| v)
                .sum();
        assert_eq!(inside, c.t_hs_done - c.t_accept);
    }

    #[test]
    fn stages_without_arrival_end_at_the_read() {
        let mut c = conn();
        c.t_arrive = [0; 4];
        let s = stages(&c);
        assert_eq!(s.get("wait_client_hello"), Some(100));
        assert_eq!(s.get("client_hello_queue"), None);
        assert_eq!(s.get("wait_client_flight_2"), Some(400));
    }

    #[test]
    fn failed_connection_names_its_stage() {
        let mut c = conn();
        c.outcome = abi::OUTCOME_FAILED;
        c.failure = abi::FAIL_CLIENT_CLOSED;
        c.t_first[abi::FL_C2] = 0;
        c.t_hs_done = 0;
        c.fail_flight = abi::FL_S1 as u8 + 1;
        let r = build(&c, Hellos::default(), &Clock::new(), false);
        assert_eq!(r.kind, "failed");
        assert_eq!(r.failure, Some("client_closed"));
        assert_eq!(r.failed_in, Some("wait_client_flight_2"));
        assert_eq!(r.handshake_ns, None);
    }

    /// The JSON field names are a documented contract (README, "Output"): every one, with
    /// the optional ones present (compared sorted: serde_json's map sorts them).
    #[test]
    fn json_lines_carry_the_documented_fields() {
        let keys = |line: &[u8]| -> Vec<String> {
            let v: serde_json::Value = serde_json::from_slice(line).expect("valid JSON");
            v.as_object().unwrap().keys().cloned().collect()
        };
        let sorted = |names: &str| {
            let mut k: Vec<String> = names.split_whitespace().map(String::from).collect();
            k.sort();
            k
        };
        let mut c = conn();
        c.outcome = abi::OUTCOME_FAILED;
        c.failure = abi::FAIL_ALERT;
        c.alert_level = 2;
        c.alert_desc = 40;
        c.lib_req_ns = 1;
        c.comm = *b"a\"b\\c\0\0\0\0\0\0\0\0\0\0\0";
        let mut r = build(&c, Hellos::default(), &Clock::new(), false);
        r.alpn_offered = vec!["h2".into(), "http/1.1".into()];
        r.resumption = Some("psk");
        r.handshake_ns = Some(5);
        r.cpu_ns = Stages(vec![("server_flight_1", 3)]);
        let mut line = Vec::new();
        r.json(&mut line);
        assert_eq!(
            keys(&line),
            sorted(
                "record time conn_id pid comm local peer protocol tls_version cipher sni alpn \
                 alpn_offered kind resumption_offered resumption handshake_ns stages_ns cpu_ns \
                 library stage_classes failure failed_in alert hs_done_from ssl_calls ssl_ns \
                 notes",
            )
        );
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["comm"], "a\"b\\c");
        assert_eq!(
            v["alert"],
            serde_json::json!({"from": "client", "level": 2, "description": 40})
        );
        assert_eq!(v["stage_classes"]["wait_client_hello"], "delay");
        assert_eq!(v["stages_ns"]["accept_queue"], 100);
        let close = Assembler::new(1).close(
            &Close {
                t_accept: 1,
                t_close: 2,
                ..Default::default()
            },
            &Clock::new(),
        );
        line.clear();
        close.json(&mut line);
        assert_eq!(
            keys(&line),
            sorted("record time conn_id pid exchanges bytes_in bytes_out duration_ns")
        );
    }

    #[test]
    fn addresses_print_as_host_port() {
        let mut v4 = [0u8; 16];
        v4[..4].copy_from_slice(&[10, 0, 255, 7]);
        assert_eq!(addr(2, &v4, 443), "10.0.255.7:443");
        assert_eq!(addr(2, &[0; 16], 0), "0.0.0.0:0");
        let v6 = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(addr(10, &v6, 65535), "[2001:db8::1]:65535");
    }

    #[test]
    fn assembler_is_bounded() {
        let mut a = Assembler::new(2);
        let clock = Clock::new();
        for id in 1..=5u64 {
            let h = Hello {
                rec: 1,
                dir: 0,
                conn_id: id,
                msg_len: 0,
                cap_len: 0,
                data: [0; abi::HELLO_CAP],
            };
            a.hello(&h);
        }
        assert_eq!(a.pending(), 2);
        assert_eq!(a.hellos_unmatched, 3);
        let c = Conn {
            conn_id: 5,
            outcome: abi::OUTCOME_FAILED,
            ..Default::default()
        };
        a.conn(&c, &clock);
        assert_eq!(a.pending(), 1);
    }
}
