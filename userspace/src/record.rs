//! One connection's record: the kernel's timestamps joined with its parsed ClientHello and
//! ServerHello and classified (version, cipher, kind, resumption, failure). This file is
//! where a connection is classified; `stage` cuts its timeline, `print` writes it.

use std::{borrow::Cow, fmt, net::Ipv6Addr, sync::Arc};

use crate::{
    abi::{self, Close, Conn},
    clock::{self, Clock},
    container::Container,
    stage::{self, Kind, Resumption, Stage, Stages},
    tls::{self, ClientHello, ServerHello},
};

/// A finished connection (printed by `print`, counted by `metrics` and `params`; the JSON
/// field names are a documented contract).
#[derive(Debug)]
pub struct Record {
    /// "connection" (the other line is "close")
    pub record: &'static str,
    /// when the record was made, ns since the Unix epoch (`time()` writes it; the
    /// daemon never does)
    pub wall_ns: i128,
    pub conn_id: u64,
    pub pid: u32,
    pub comm: String,
    /// the server's end (its port is the listening one)
    pub local: Endpoint,
    pub peer: Endpoint,
    pub protocol: &'static str,
    /// the protocol of the plaintext part, told from its first bytes: a preamble before
    /// TLS (smtp, postgresql, …), or a plain connection's (http, …)
    pub app_protocol: Option<&'static str>,
    /// a preamble watched for TLS: "upgraded", "refused", "granted" (no ClientHello
    /// came), "asked" (no answer) or "not_asked"
    pub starttls: Option<&'static str>,
    pub tls_version: Option<&'static str>,
    pub cipher: Option<Cow<'static, str>>,
    pub sni: Option<String>,
    pub alpn: Option<String>,
    pub alpn_offered: Vec<String>,
    /// the key exchange's group (`tls::group_label`): the ServerHello's key share in TLS
    /// 1.3 (the HelloRetryRequest's when only that was seen); "none" for a resumption with
    /// no key exchange (TLS 1.3 psk_ke, a TLS 1.2 abbreviated handshake); None when not
    /// known (a TLS 1.2 full handshake: its ServerKeyExchange is not read)
    pub tls_group: Option<Cow<'static, str>>,
    /// why the server sent a HelloRetryRequest: "no_acceptable_share" (it asked for
    /// another group's share), "cookie" (only a cookie), "other"
    pub hrr_cause: Option<&'static str>,
    /// the client offered a post-quantum group (`tls::is_post_quantum`) in supported_groups
    pub pq_offered: Option<bool>,
    /// the size of the client's (first) ClientHello, handshake header included
    pub client_hello_bytes: Option<u32>,
    /// the client's JA4 fingerprint, of its first ClientHello (`ja4`)
    pub ja4: Option<String>,
    pub kind: Kind,
    pub resumption_offered: bool,
    pub resumption: Option<Resumption>,
    /// TLS 1.3 0-RTT: the first request came as early data with the ClientHello, and the
    /// server answered it (its request stages follow `server_flight_1`)
    pub early_data: bool,
    /// what the client offered, when it did (a ticket, a PSK, or a session id)
    pub offered: Option<Resumption>,
    pub handshake_ns: Option<u64>,
    /// from the accept to when the record was made (`wall_ns`): how long the process held
    /// the connection so far (not printed; the parameters' architecture counts overlaps)
    pub held_ns: Option<u64>,
    pub stages_ns: Stages,
    /// on-CPU time of the server thread during each service stage (the rest of the stage
    /// it was runnable, blocked or serving other connections)
    pub cpu_ns: Stages,
    /// on-CPU time of the server thread across each wait for the client between two
    /// service stages (`stage::wait_cpu`), keyed by the wait's delay stage
    pub wait_cpu_ns: Stages,
    /// the service stages of `cpu_ns` that began on a CPU idle since a service stage last
    /// ended on it (`stage::idle_before`); None: not known
    pub idle_before: Option<Vec<Stage>>,
    /// the queue stages whose message was taken by a call that woke its CPU, with how long
    /// the CPU had slept (`stage::wakeups`; not printed: the parameters' wake-up curve)
    pub wakeups: Vec<stage::Wakeup>,
    /// with --uprobes all: what SSL_read/SSL_write saw of the first request and response
    pub library: Option<Library>,
    pub failure: Option<&'static str>,
    pub failed_in: Option<Stage>,
    pub alert: Option<Alert>,
    /// Where t_hs_done came from: "ssl" (SSL_do_handshake returned 1) or "wire".
    pub hs_done_from: Option<&'static str>,
    pub ssl_calls: u32,
    pub ssl_ns: u64,
    /// Parsing gaps worth knowing about (hello not captured, truncated, stream desync).
    pub notes: Vec<&'static str>,
    /// With `--container-labels`: the container the server (`pid`) runs in, and its
    /// Kubernetes pod when known (filled by the record source; None outside a container)
    pub container: Option<Arc<Container>>,
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

#[derive(Debug, Clone, Copy)]
pub struct Alert {
    pub from: &'static str,
    pub level: u8,
    pub description: u8,
}

/// The line printed when a connection ends (JSON only): its totals.
#[derive(Debug)]
pub struct CloseRecord {
    pub record: &'static str,
    pub wall_ns: i128,
    pub conn_id: u64,
    pub pid: u32,
    /// request/response exchanges after the handshake (HTTP/1.x: requests)
    pub exchanges: u32,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration_ns: Option<u64>,
    /// With `--container-labels`: the server's container, as on its connection record
    pub container: Option<Arc<Container>>,
}

impl CloseRecord {
    pub fn time(&self) -> String {
        clock::rfc3339_utc(self.wall_ns)
    }

    pub fn new(c: &Close, clock: &Clock) -> CloseRecord {
        CloseRecord {
            record: "close",
            wall_ns: clock.wall_ns(c.t_close),
            conn_id: c.conn_id,
            pid: c.tgid,
            exchanges: c.exchanges,
            bytes_in: c.bytes_in,
            bytes_out: c.bytes_out,
            duration_ns: stage::span(c.t_accept, c.t_close),
            container: None,
        }
    }
}

impl Record {
    /// RFC 3339 UTC with microseconds.
    pub fn time(&self) -> String {
        clock::rfc3339_utc(self.wall_ns)
    }

    /// The label a server is known by in metrics and parameters: `comm:port` of the
    /// listening socket.
    pub fn server(&self) -> String {
        format!("{}:{}", self.comm, self.local.port)
    }
}

#[cfg(test)]
impl Record {
    /// A record of `kind` from nginx:443, TLS 1.3, with every stage of the table (for
    /// the sinks' unit tests: they read only what is present).
    pub(crate) fn fixture(kind: Kind) -> Record {
        Record {
            record: "connection",
            wall_ns: 0,
            conn_id: 1,
            pid: 1,
            comm: "nginx".into(),
            local: Endpoint::new(2, [0; 16], 443),
            peer: Endpoint::new(2, [0; 16], 50_000),
            protocol: "tls",
            app_protocol: None,
            starttls: None,
            tls_version: Some("1.3"),
            cipher: Some(Cow::Borrowed("TLS_AES_128_GCM_SHA256")),
            sni: None,
            alpn: None,
            alpn_offered: Vec::new(),
            tls_group: None,
            hrr_cause: None,
            pq_offered: None,
            client_hello_bytes: None,
            ja4: None,
            kind,
            resumption_offered: false,
            resumption: None,
            early_data: false,
            offered: None,
            handshake_ns: Some(1_000_000),
            held_ns: Some(5_000_000),
            stages_ns: Stages(Stage::ALL.iter().map(|s| (*s, 1_000)).collect()),
            cpu_ns: Stages(
                Stage::ALL
                    .iter()
                    .filter(|s| s.has_cpu())
                    .map(|s| (*s, 500))
                    .collect(),
            ),
            wait_cpu_ns: Stages(Vec::new()),
            idle_before: None,
            wakeups: Vec::new(),
            library: None,
            failure: None,
            failed_in: None,
            alert: None,
            hs_done_from: None,
            ssl_calls: 0,
            ssl_ns: 0,
            notes: Vec::new(),
            container: None,
        }
    }
}

/// One end of a connection: written out ("1.2.3.4:443", "[::1]:443") only where a line
/// is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    family: u16,
    addr: [u8; 16],
    pub port: u16,
}

impl Endpoint {
    pub fn new(family: u16, addr: [u8; 16], port: u16) -> Endpoint {
        Endpoint { family, addr, port }
    }

    /// The address, without the port.
    pub fn ip(&self) -> std::net::IpAddr {
        if self.family == 10 {
            return Ipv6Addr::from(self.addr).into();
        }
        std::net::Ipv4Addr::new(self.addr[0], self.addr[1], self.addr[2], self.addr[3]).into()
    }
}

/// IPv4 written by hand: `format!` made this an eighth of the pipeline's time.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.family == 10 {
            return write!(f, "[{}]:{}", Ipv6Addr::from(self.addr), self.port);
        }
        let mut digits = itoa::Buffer::new();
        for (i, octet) in self.addr[..4].iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            f.write_str(digits.format(*octet))?;
        }
        f.write_str(":")?;
        f.write_str(digits.format(self.port))
    }
}

fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The name of a plaintext protocol (`Conn::pre_proto`); None when not told.
pub fn app_protocol_name(p: u8) -> Option<&'static str> {
    Some(match p {
        abi::PROTO_HTTP => "http",
        abi::PROTO_POSTGRESQL => "postgresql",
        abi::PROTO_SMTP => "smtp",
        abi::PROTO_FTP => "ftp",
        abi::PROTO_IMAP => "imap",
        abi::PROTO_POP3 => "pop3",
        abi::PROTO_LDAP => "ldap",
        abi::PROTO_MYSQL => "mysql",
        abi::PROTO_XMPP => "xmpp",
        _ => return None,
    })
}

/// How far a watched preamble got (`Conn::pre_state`).
fn starttls_name(state: u8) -> &'static str {
    match state {
        abi::PRE_UPGRADED => "upgraded",
        abi::PRE_REFUSED => "refused",
        abi::PRE_GRANTED => "granted",
        abi::PRE_ASKED => "asked",
        _ => "not_asked",
    }
}

pub(crate) fn failure_name(f: u8) -> &'static str {
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

/// A connection's hellos as parsed (assemble.rs gathers and parses them): the latest of
/// each direction, if one came.
#[derive(Debug, Default)]
pub struct Hellos {
    pub client: Option<Result<ClientHello, tls::ParseError>>,
    pub server: Option<Result<ServerHello, tls::ParseError>>,
    /// after a HelloRetryRequest: the client's first ClientHello (the one its fingerprint
    /// and size are of) and the HelloRetryRequest, which `client` and `server` replaced
    pub first_client: Option<ClientHello>,
    pub retry_request: Option<ServerHello>,
}

/// The key exchange's group: TLS 1.3's from the ServerHello's key share (a HelloRetryRequest
/// names the group the share then came in); TLS 1.2's from the suite and the
/// ServerKeyExchange (`tls12_key_exchange`); "none" when a resumption exchanged no key
/// (TLS 1.3 psk_ke: a pre_shared_key and no key share; TLS 1.2's abbreviated handshake);
/// None when not seen.
fn key_exchange_group(
    sh: Option<&ServerHello>,
    retry: Option<&ServerHello>,
    version: Option<u16>,
    resumed: bool,
    ske_head: [u8; 3],
) -> Option<Cow<'static, str>> {
    let real = sh.filter(|s| !s.hello_retry_request);
    if let Some(g) = real.and_then(|s| s.key_share_group) {
        return Some(tls::group_label(g));
    }
    match version {
        Some(0x0304) if real.is_some_and(|s| s.psk && !s.truncated) => Some("none".into()),
        Some(0x0304) => retry.and_then(|r| r.key_share_group).map(tls::group_label),
        Some(_) if resumed => Some("none".into()),
        Some(_) => tls12_key_exchange(real?.cipher, ske_head),
        None => None,
    }
}

/// A TLS 1.2 (or older) full handshake's key exchange, from the suite the ServerHello
/// chose: ECDHE's named group from the ServerKeyExchange's first bytes (curve_type 3,
/// named_curve, then the group; None when they were not read), `ffdhe` for DHE (TLS 1.2
/// names no group for it), `rsa` for RSA key transport; None for any other suite.
fn tls12_key_exchange(cipher: u16, ske_head: [u8; 3]) -> Option<Cow<'static, str>> {
    let suite = tls::cipher_name(cipher)?;
    if suite.starts_with("TLS_ECDHE_") {
        let [curve_type, hi, lo] = ske_head;
        (curve_type == 3).then(|| tls::group_label(u16::from_be_bytes([hi, lo])))
    } else if suite.starts_with("TLS_DHE_") {
        Some("ffdhe".into())
    } else if suite.starts_with("TLS_RSA_") {
        Some("rsa".into())
    } else {
        None
    }
}

/// Build the printed record from the kernel's record and the hellos captured for it.
/// `plain_port`: the connection's local address has never carried TLS, so a stream that
/// is not TLS is plain text (HTTP) rather than a failed TLS connection.
pub fn build(c: &Conn, hellos: Hellos, clock: &Clock, plain_port: bool) -> Record {
    let mut notes = Vec::new();
    let retry_request = hellos.retry_request;
    let mut ch = hellos.client.and_then(|r| {
        if r.is_err() {
            notes.push("client_hello_unparsed");
        }
        r.ok()
    });
    let mut sh = hellos.server.and_then(|r| {
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
    // plain text: on an address that never carried TLS, or a protocol told from its
    // first bytes that is not HTTP (a STARTTLS protocol that stayed plain, PostgreSQL
    // without its SSLRequest), whatever its address carries otherwise
    let app_protocol = app_protocol_name(c.pre_proto);
    let preamble = stage::had_preamble(c);
    let plain = not_tls && (plain_port || preamble || app_protocol.is_some_and(|p| p != "http"));
    // a hello that was on the wire (its flight completed a record) but not captured
    let tls = !not_tls;
    if c.flags & abi::F_SSLV2_HELLO != 0 {
        // the old format has no extensions: nothing in it to parse
        notes.push("client_hello_sslv2");
    } else if tls && ch.is_none() && c.t_first[abi::FL_C1] != 0 {
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
        Kind::Plain
    } else if !done {
        Kind::Failed
    } else if resumed {
        Kind::Resumed
    } else {
        Kind::Full
    };
    let resumption = (kind == Kind::Resumed).then(|| match (version, &ch) {
        (Some(0x0304), _) => Resumption::Psk,
        (_, Some(h)) if h.session_ticket_len.unwrap_or(0) > 0 => Resumption::Ticket,
        _ => Resumption::SessionId,
    });
    let offer = ch.as_ref().filter(|h| h.offers_resumption()).map(|h| {
        if h.psk {
            Resumption::Psk
        } else if h.session_ticket_len.unwrap_or(0) > 0 {
            Resumption::Ticket
        } else {
            Resumption::SessionId
        }
    });
    let first_client = hellos.first_client.as_ref().or(ch.as_ref());
    let client_hello_bytes = first_client.map(|h| h.len.min(u32::MAX as usize) as u32);
    let ja4 = first_client.and_then(crate::ja4::ja4);
    let pq_offered = ch
        .as_ref()
        .filter(|h| !h.truncated || !h.supported_groups.is_empty())
        .map(|h| h.supported_groups.iter().any(|&g| tls::is_post_quantum(g)));
    let retry = retry_request
        .as_ref()
        .or(sh.as_ref().filter(|s| s.hello_retry_request));
    let hrr_cause = retry.map(|r| match (r.key_share_group, r.cookie) {
        (Some(_), _) => "no_acceptable_share",
        (None, true) => "cookie",
        (None, false) => "other",
    });
    let tls_group = key_exchange_group(sh.as_ref(), retry, version, resumed, c.ske_head);
    // ALPN: the ServerHello has it in TLS 1.2; in 1.3 it is in the encrypted
    // EncryptedExtensions, so report the client's offer when it was a single protocol
    // (the hellos' strings are moved into the record, not copied)
    let offered = ch
        .as_mut()
        .map(|h| std::mem::take(&mut h.alpn))
        .unwrap_or_default();
    let alpn = match (sh.as_mut(), version) {
        (Some(s), Some(v)) if v < 0x0304 => s.alpn.take(),
        (_, Some(0x0304)) if done && offered.len() == 1 => offered.first().cloned(),
        _ => None,
    };
    let failure = match (done || plain, not_tls) {
        (true, _) => None,
        (false, true) => Some("not_tls"),
        (false, false) => Some(failure_name(c.failure)),
    };
    let stages_ns = stage::stages(c);
    let cpu_ns = stage::cpu(c, &stages_ns);
    Record {
        record: "connection",
        wall_ns: clock.wall_ns(c.t_end),
        conn_id: c.conn_id,
        pid: c.tgid,
        comm: c_str(&c.comm),
        local: Endpoint::new(c.family, c.saddr, c.sport),
        peer: Endpoint::new(c.family, c.daddr, c.dport),
        protocol: if plain { "plain" } else { "tls" },
        app_protocol,
        starttls: preamble.then(|| starttls_name(c.pre_state)),
        tls_version: version.and_then(tls::version_name),
        cipher: sh.as_ref().map(|s| tls::cipher_label(s.cipher)),
        sni: ch.as_mut().and_then(|h| h.sni.take()),
        alpn,
        alpn_offered: if offered.len() > 1 {
            offered
        } else {
            Vec::new()
        },
        tls_group,
        hrr_cause,
        pq_offered,
        client_hello_bytes,
        ja4,
        kind,
        resumption_offered: offer.is_some(),
        resumption,
        early_data: c.flags & abi::F_EARLY_DATA != 0 && done,
        offered: offer,
        handshake_ns: done
            .then(|| stage::span(stage::tls_start(c), c.t_hs_done))
            .flatten(),
        held_ns: stage::span(c.t_accept, c.t_end),
        idle_before: stage::idle_before(c, &cpu_ns),
        wakeups: stage::wakeups(c, &stages_ns),
        cpu_ns,
        wait_cpu_ns: stage::wait_cpu(c, &stages_ns),
        stages_ns,
        library: (c.lib_req_ns > 0 || c.lib_resp_ns > 0).then_some(Library {
            request_bytes: c.lib_req_bytes,
            request_ns: c.lib_req_ns,
            response_bytes: c.lib_resp_bytes,
            response_ns: c.lib_resp_ns,
        }),
        failed_in: failure.map(|_| stage::failed_in(c)),
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
        container: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::abi::test_conn as conn;

    #[test]
    fn tls12_key_exchange_from_the_suite_and_the_server_key_exchange() {
        // ECDHE: curve_type 3 (named_curve), then the group
        assert_eq!(
            tls12_key_exchange(0xC02F, [3, 0, 29]).as_deref(),
            Some("x25519")
        );
        assert_eq!(
            tls12_key_exchange(0xC02C, [3, 0, 24]).as_deref(),
            Some("secp384r1")
        );
        assert_eq!(
            tls12_key_exchange(0xC02F, [3, 0x11, 0xEE]).as_deref(),
            Some("0x11EE")
        );
        // not read, or an explicit curve: unknown
        assert_eq!(tls12_key_exchange(0xC02F, [0, 0, 0]), None);
        assert_eq!(tls12_key_exchange(0xC02F, [1, 0, 29]), None);
        // DHE and RSA key transport, whatever the bytes
        assert_eq!(
            tls12_key_exchange(0x009E, [1, 0, 0]).as_deref(),
            Some("ffdhe")
        );
        assert_eq!(
            tls12_key_exchange(0x009C, [0, 0, 0]).as_deref(),
            Some("rsa")
        );
        // a suite without a name says nothing
        assert_eq!(tls12_key_exchange(0xFFFE, [3, 0, 29]), None);
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
        assert_eq!(r.kind, Kind::Failed);
        assert_eq!(r.failure, Some("client_closed"));
        assert_eq!(r.failed_in, Some(Stage::WaitClientFlight2));
        assert_eq!(r.handshake_ns, None);
    }

    #[test]
    fn addresses_print_as_host_port() {
        let mut v4 = [0u8; 16];
        v4[..4].copy_from_slice(&[10, 0, 255, 7]);
        assert_eq!(Endpoint::new(2, v4, 443).to_string(), "10.0.255.7:443");
        assert_eq!(Endpoint::new(2, [0; 16], 0).to_string(), "0.0.0.0:0");
        let v6 = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(
            Endpoint::new(10, v6, 65535).to_string(),
            "[2001:db8::1]:65535"
        );
    }
}
