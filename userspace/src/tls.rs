//! Parsing of TLS ClientHello / ServerHello handshake messages.
//!
//! The bytes come from a server's own socket reads and writes, so they start at
//! the 4-byte handshake header (type, 24-bit length) with the record header
//! already stripped. The capture is capped (`abi::HELLO_CAP`, 16 KiB: one whole
//! record's plaintext), so a message may be cut; the parsers never panic, and
//! report a cut inside the extensions as a partial result (`truncated: true`) rather
//! than an error, because the fields a tracer needs most (versions, cipher suites,
//! session id) come first.
//!
//! Only what a handshake tracer needs is decoded: SNI, ALPN, supported_versions,
//! session_ticket, pre_shared_key, and what the key exchange and the client's
//! fingerprint (`ja4.rs`) need: supported_groups, key_share, signature_algorithms and
//! the extension types in order. GREASE values (RFC 8701) are dropped from the client's
//! lists, since they are random placeholders and not real offers.

use std::borrow::Cow;

use crate::abi::{HRR_RANDOM, HT_CLIENT_HELLO, HT_SERVER_HELLO};

const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
const EXT_SESSION_TICKET: u16 = 35;
const EXT_PRE_SHARED_KEY: u16 = 41;
const EXT_SUPPORTED_VERSIONS: u16 = 43;
const EXT_SUPPORTED_GROUPS: u16 = 10;
const EXT_SIGNATURE_ALGORITHMS: u16 = 13;
const EXT_KEY_SHARE: u16 = 51;
const EXT_COOKIE: u16 = 44;

/// server_name entry type for a DNS host name (RFC 6066 section 3).
const SNI_HOST_NAME: u8 = 0;

/// Why a hello could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The handshake type byte is not the one asked for (e.g. a Certificate).
    WrongType(u8),
    /// The capture ended inside the header or the fixed part of the message.
    Truncated,
    /// The bytes contradict the TLS encoding (a length runs past its container, ...).
    Malformed(&'static str),
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::WrongType(t) => write!(f, "unexpected handshake type {t}"),
            ParseError::Truncated => write!(f, "hello truncated before its fixed fields ended"),
            ParseError::Malformed(what) => write!(f, "malformed hello: {what}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// What a client offered, as seen by the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientHello {
    /// ClientHello.legacy_version (0x0303 for TLS 1.2 and 1.3 clients).
    pub legacy_version: u16,
    /// legacy_session_id: a resumption offer in TLS <= 1.2, 32 random bytes from a TLS 1.3 client.
    pub session_id: Vec<u8>,
    /// Offered cipher suites in client order, GREASE removed (SCSVs kept).
    pub cipher_suites: Vec<u16>,
    /// server_name extension (0), first host_name entry.
    pub sni: Option<String>,
    /// application_layer_protocol_negotiation (16), in client order, GREASE removed.
    pub alpn: Vec<String>,
    /// supported_versions (43), client form (a list), GREASE removed.
    pub supported_versions: Vec<u16>,
    /// session_ticket (35) present: its data length (0 = empty = only "supports tickets").
    pub session_ticket_len: Option<usize>,
    /// pre_shared_key (41) present: a TLS 1.3 resumption (or external PSK) offer.
    pub psk: bool,
    /// The extension types in the client's order, GREASE removed.
    pub extensions: Vec<u16>,
    /// supported_groups (10), in client order, GREASE removed.
    pub supported_groups: Vec<u16>,
    /// key_share (51): the groups the client sent a share for, in its order, GREASE removed.
    pub key_share_groups: Vec<u16>,
    /// signature_algorithms (13), in client order.
    pub signature_algorithms: Vec<u16>,
    /// The message's length, handshake header included (the whole hello, not the capture).
    pub len: usize,
    /// The capture ended before the extensions did: an absent extension may just be cut off.
    pub truncated: bool,
}

/// What the server chose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerHello {
    /// ServerHello.legacy_version (0x0303 for TLS 1.2 and 1.3).
    pub legacy_version: u16,
    /// Negotiated version: supported_versions (43, server form: one u16) or legacy_version.
    pub version: u16,
    /// Echo of the client's session id (TLS <= 1.2: equal to it means resumption).
    pub session_id: Vec<u8>,
    /// The selected cipher suite.
    pub cipher: u16,
    /// pre_shared_key (41) in a ServerHello: TLS 1.3 resumption accepted.
    pub psk: bool,
    /// ALPN (16) choice; TLS 1.2 only, in TLS 1.3 it is in the encrypted EncryptedExtensions.
    pub alpn: Option<String>,
    /// session_ticket (35) in a ServerHello: (TLS 1.2) a NewSessionTicket will follow.
    pub session_ticket_ext: bool,
    /// random is the RFC 8446 HelloRetryRequest value: the client must send a second ClientHello.
    pub hello_retry_request: bool,
    /// key_share (51): the group of the server's share; in a HelloRetryRequest, the group
    /// it asks the client for (None in a HelloRetryRequest that only asks for a cookie).
    pub key_share_group: Option<u16>,
    /// cookie (44) in a HelloRetryRequest.
    pub cookie: bool,
    /// The capture ended before the extensions did.
    pub truncated: bool,
}

/// Bounds-checked big-endian reader over a slice.
///
/// `cut` says whether the slice ends because the capture did (running out of bytes
/// is then `Truncated`) or because the message did (running out is `Malformed`).
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    cut: bool,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], cut: bool) -> Self {
        Reader { buf, pos: 0, cut }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        if n > self.remaining() {
            return Err(if self.cut {
                ParseError::Truncated
            } else {
                ParseError::Malformed("length runs past the end of the message")
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, ParseError> {
        Ok(self.bytes(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, ParseError> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// An opaque vector with a 1-byte length prefix (`opaque x<0..2^8-1>`).
    fn vec8(&mut self) -> Result<&'a [u8], ParseError> {
        let n = self.u8()? as usize;
        self.bytes(n)
    }

    /// An opaque vector with a 2-byte length prefix (`opaque x<0..2^16-1>`).
    fn vec16(&mut self) -> Result<&'a [u8], ParseError> {
        let n = self.u16()? as usize;
        self.bytes(n)
    }
}

/// Turns "the capture ended here" into `None`, keeping real errors.
fn unless_cut<T>(r: Result<T, ParseError>) -> Result<Option<T>, ParseError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(ParseError::Truncated) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A hello's whole length from its handshake header (4 + the 24-bit length), or what was
/// captured when the header itself was cut.
fn hello_len(msg: &[u8], msg_len: usize) -> usize {
    match msg.get(..4) {
        Some(h) => 4 + u32::from_be_bytes([0, h[1], h[2], h[3]]) as usize,
        None => msg.len().min(msg_len),
    }
}

/// Checks the handshake header and returns a reader over the (possibly cut) body.
///
/// `msg_len` is the real length of the data the capture came from: bytes of `msg`
/// past it are not data (a fixed-size capture buffer may be passed whole).
fn open_body(msg: &[u8], msg_len: usize, want: u8) -> Result<Reader<'_>, ParseError> {
    let data = &msg[..msg.len().min(msg_len)];
    let Some(&msg_type) = data.first() else {
        return Err(ParseError::Truncated);
    };
    if msg_type != want {
        return Err(ParseError::WrongType(msg_type));
    }
    if data.len() < 4 {
        return Err(ParseError::Truncated);
    }
    let body_len = u32::from_be_bytes([0, data[1], data[2], data[3]]) as usize;
    let end = 4 + body_len;
    // Fewer bytes than the header announces: capped capture, or the message continues
    // in a later read. Either way the rest is unknown, not wrong.
    let cut = data.len() < end;
    Ok(Reader::new(&data[4..end.min(data.len())], cut))
}

/// One extension; `complete` is false for the last one when the capture cut its data.
struct Extension<'a> {
    ext_type: u16,
    declared_len: usize,
    data: &'a [u8],
    complete: bool,
}

/// Splits the extensions block. Returns the extensions seen and whether the
/// capture ended before the block did.
fn split_extensions<'a>(r: &mut Reader<'a>) -> Result<(Vec<Extension<'a>>, bool), ParseError> {
    let mut exts = Vec::with_capacity(24); // browsers send 15–20

    // No extensions block at all is legal before TLS 1.3 (or the capture ended here).
    if r.is_empty() {
        return Ok((exts, r.cut));
    }
    let Some(block_len) = unless_cut(r.u16())? else {
        return Ok((exts, true));
    };
    let block_len = block_len as usize;
    let block_cut = block_len > r.remaining();
    if block_cut && !r.cut {
        return Err(ParseError::Malformed(
            "extensions length runs past the end of the message",
        ));
    }
    let block = r.bytes(block_len.min(r.remaining()))?;

    let mut er = Reader::new(block, block_cut);
    while !er.is_empty() {
        let Some(ext_type) = unless_cut(er.u16())? else {
            return Ok((exts, true));
        };
        let Some(declared_len) = unless_cut(er.u16())? else {
            return Ok((exts, true));
        };
        let declared_len = declared_len as usize;
        if declared_len <= er.remaining() {
            let data = er.bytes(declared_len)?;
            exts.push(Extension {
                ext_type,
                declared_len,
                data,
                complete: true,
            });
        } else if block_cut {
            let data = er.bytes(er.remaining())?;
            exts.push(Extension {
                ext_type,
                declared_len,
                data,
                complete: false,
            });
            return Ok((exts, true));
        } else {
            return Err(ParseError::Malformed(
                "extension length runs past the extensions block",
            ));
        }
    }
    Ok((exts, block_cut))
}

/// GREASE cipher suites, versions, extension types, groups: 0x0A0A, 0x1A1A, ... 0xFAFA (RFC 8701).
fn is_grease(v: u16) -> bool {
    v & 0x0F0F == 0x0A0A && v >> 8 == v & 0xFF
}

/// GREASE ALPN identifiers are the two-byte strings 0x0A0A ... 0xFAFA (RFC 8701 section 2).
fn is_grease_alpn(name: &[u8]) -> bool {
    name.len() == 2 && is_grease(u16::from_be_bytes([name[0], name[1]]))
}

/// A list of u16 (cipher suites, versions): even length, GREASE dropped.
fn u16_list(bytes: &[u8], what: &'static str) -> Result<Vec<u16>, ParseError> {
    if !bytes.len().is_multiple_of(2) {
        return Err(ParseError::Malformed(what));
    }
    Ok(bytes
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .filter(|v| !is_grease(*v))
        .collect())
}

/// A list of u16 inside a vector of 2-byte length (supported_groups, signature_algorithms).
fn u16_vec16(data: &[u8], what: &'static str) -> Result<Vec<u16>, ParseError> {
    let list = Reader::new(data, false)
        .vec16()
        .map_err(|_| ParseError::Malformed(what))?;
    u16_list(list, what)
}

/// A client's key_share: KeyShareEntry client_shares<0..2^16-1>, each { NamedGroup group;
/// opaque key_exchange<1..2^16-1> }: the groups, GREASE removed.
fn key_share_groups(data: &[u8]) -> Result<Vec<u16>, ParseError> {
    let bad = |_| ParseError::Malformed("key_share extension");
    let mut list = Reader::new(Reader::new(data, false).vec16().map_err(bad)?, false);
    let mut groups = Vec::new();
    while !list.is_empty() {
        let group = list.u16().map_err(bad)?;
        list.vec16().map_err(bad)?;
        if !is_grease(group) {
            groups.push(group);
        }
    }
    Ok(groups)
}

/// server_name: ServerNameList = { NameType name_type; HostName host_name<1..2^16-1> }<1..2^16-1>.
fn parse_sni(data: &[u8]) -> Result<Option<String>, ParseError> {
    let bad = |_| ParseError::Malformed("server_name extension");
    let mut r = Reader::new(data, false);
    let mut list = Reader::new(r.vec16().map_err(bad)?, false);
    while !list.is_empty() {
        let name_type = list.u8().map_err(bad)?;
        let name = list.vec16().map_err(bad)?;
        if name_type == SNI_HOST_NAME {
            return Ok(Some(String::from_utf8_lossy(name).into_owned()));
        }
    }
    Ok(None)
}

/// ALPN: ProtocolNameList = ProtocolName protocol_name_list<2..2^16-1>, ProtocolName<1..2^8-1>.
fn parse_alpn(data: &[u8]) -> Result<Vec<String>, ParseError> {
    let bad = |_| ParseError::Malformed("ALPN extension");
    let mut r = Reader::new(data, false);
    let mut list = Reader::new(r.vec16().map_err(bad)?, false);
    let mut names = Vec::new();
    while !list.is_empty() {
        let name = list.vec8().map_err(bad)?;
        if !is_grease_alpn(name) {
            names.push(String::from_utf8_lossy(name).into_owned());
        }
    }
    Ok(names)
}

impl ClientHello {
    /// Parses a ClientHello starting at its handshake header.
    ///
    /// `msg_len` is the real length of the captured data (bytes of `msg` past it are
    /// ignored). A cut before the cipher suites end is `Err(Truncated)`; a later cut
    /// gives `Ok` with `truncated: true`.
    pub fn parse(msg: &[u8], msg_len: usize) -> Result<ClientHello, ParseError> {
        let mut r = open_body(msg, msg_len, HT_CLIENT_HELLO)?;
        let legacy_version = r.u16()?;
        let _random = r.bytes(32)?;
        let session_id = r.vec8()?;
        if session_id.len() > 32 {
            return Err(ParseError::Malformed("session id longer than 32 bytes"));
        }
        let cipher_suites = u16_list(r.vec16()?, "odd cipher suites length")?;
        let mut ch = ClientHello {
            legacy_version,
            session_id: session_id.to_vec(),
            cipher_suites,
            len: hello_len(msg, msg_len),
            ..Default::default()
        };
        // legacy_compression_methods: nothing to keep, but a cut here is only "truncated".
        if unless_cut(r.vec8())?.is_none() {
            ch.truncated = true;
            return Ok(ch);
        }

        let (exts, truncated) = split_extensions(&mut r)?;
        ch.truncated = truncated;
        for ext in exts {
            if !is_grease(ext.ext_type) {
                ch.extensions.push(ext.ext_type);
            }
            // A cut extension still tells its presence and length, nothing more.
            if !ext.complete {
                match ext.ext_type {
                    EXT_SESSION_TICKET => ch.session_ticket_len = Some(ext.declared_len),
                    EXT_PRE_SHARED_KEY => ch.psk = true,
                    _ => {}
                }
                continue;
            }
            match ext.ext_type {
                EXT_SERVER_NAME => ch.sni = parse_sni(ext.data)?,
                EXT_ALPN => ch.alpn = parse_alpn(ext.data)?,
                EXT_SUPPORTED_VERSIONS => {
                    let list = Reader::new(ext.data, false)
                        .vec8()
                        .map_err(|_| ParseError::Malformed("supported_versions extension"))?;
                    ch.supported_versions = u16_list(list, "supported_versions extension")?;
                }
                EXT_SESSION_TICKET => ch.session_ticket_len = Some(ext.data.len()),
                EXT_PRE_SHARED_KEY => ch.psk = true,
                EXT_SUPPORTED_GROUPS => {
                    ch.supported_groups = u16_vec16(ext.data, "supported_groups extension")?
                }
                EXT_SIGNATURE_ALGORITHMS => {
                    ch.signature_algorithms = u16_vec16(ext.data, "signature_algorithms extension")?
                }
                EXT_KEY_SHARE => ch.key_share_groups = key_share_groups(ext.data)?,
                _ => {}
            }
        }
        Ok(ch)
    }

    /// The client offers TLS 1.3 (supported_versions contains 0x0304).
    pub fn offers_tls13(&self) -> bool {
        self.supported_versions.contains(&0x0304)
    }

    /// A real resumption offer: a non-empty ticket, a pre_shared_key, or a non-empty
    /// session id from a client that does NOT offer TLS 1.3 (a 1.3 client fills legacy_session_id
    /// with 32 random bytes for middlebox compatibility; an empty ticket ext only says "supported").
    ///
    /// Limitation: a 1.3-capable client resuming a 1.2 session by id alone is not
    /// recognised, because its id cannot be told apart from the random one.
    pub fn offers_resumption(&self) -> bool {
        self.session_ticket_len.is_some_and(|n| n > 0)
            || self.psk
            || (!self.session_id.is_empty() && !self.offers_tls13())
    }
}

impl ServerHello {
    /// Parses a ServerHello (or HelloRetryRequest) starting at its handshake header.
    ///
    /// Same truncation rules as [`ClientHello::parse`]: a cut before the cipher suite
    /// ends is `Err(Truncated)`, a later cut gives `Ok` with `truncated: true`.
    pub fn parse(msg: &[u8], msg_len: usize) -> Result<ServerHello, ParseError> {
        let mut r = open_body(msg, msg_len, HT_SERVER_HELLO)?;
        let legacy_version = r.u16()?;
        let random = r.bytes(32)?;
        let session_id = r.vec8()?;
        if session_id.len() > 32 {
            return Err(ParseError::Malformed("session id longer than 32 bytes"));
        }
        let cipher = r.u16()?;
        let mut sh = ServerHello {
            legacy_version,
            version: legacy_version,
            session_id: session_id.to_vec(),
            cipher,
            hello_retry_request: random == HRR_RANDOM,
            ..Default::default()
        };
        // legacy_compression_method
        if unless_cut(r.u8())?.is_none() {
            sh.truncated = true;
            return Ok(sh);
        }

        let (exts, truncated) = split_extensions(&mut r)?;
        sh.truncated = truncated;
        for ext in exts {
            match ext.ext_type {
                // Presence alone carries the meaning of these two.
                EXT_PRE_SHARED_KEY => sh.psk = true,
                EXT_SESSION_TICKET => sh.session_ticket_ext = true,
                _ if !ext.complete => {}
                EXT_SUPPORTED_VERSIONS => {
                    let v = Reader::new(ext.data, false)
                        .u16()
                        .map_err(|_| ParseError::Malformed("supported_versions extension"))?;
                    sh.version = v;
                }
                EXT_ALPN => sh.alpn = parse_alpn(ext.data)?.into_iter().next(),
                // (a ServerHello's KeyShareEntry, or a HelloRetryRequest's selected_group:
                // both begin with the group)
                EXT_KEY_SHARE => {
                    sh.key_share_group = Some(
                        Reader::new(ext.data, false)
                            .u16()
                            .map_err(|_| ParseError::Malformed("key_share extension"))?,
                    )
                }
                EXT_COOKIE => sh.cookie = true,
                _ => {}
            }
        }
        Ok(sh)
    }
}

/// Short name of a protocol version, as used in "TLS 1.2" (or "ssl3").
pub fn version_name(v: u16) -> Option<&'static str> {
    match v {
        0x0300 => Some("ssl3"),
        0x0301 => Some("1.0"),
        0x0302 => Some("1.1"),
        0x0303 => Some("1.2"),
        0x0304 => Some("1.3"),
        _ => None,
    }
}

/// The name of a TLS alert description (RFC 8446 §6 and the TLS 1.2 ones it keeps).
pub fn alert_name(description: u8) -> Option<&'static str> {
    Some(match description {
        0 => "close_notify",
        10 => "unexpected_message",
        20 => "bad_record_mac",
        22 => "record_overflow",
        40 => "handshake_failure",
        42 => "bad_certificate",
        43 => "unsupported_certificate",
        44 => "certificate_revoked",
        45 => "certificate_expired",
        46 => "certificate_unknown",
        47 => "illegal_parameter",
        48 => "unknown_ca",
        49 => "access_denied",
        50 => "decode_error",
        51 => "decrypt_error",
        70 => "protocol_version",
        71 => "insufficient_security",
        80 => "internal_error",
        86 => "inappropriate_fallback",
        90 => "user_canceled",
        109 => "missing_extension",
        110 => "unsupported_extension",
        112 => "unrecognized_name",
        113 => "bad_certificate_status_response",
        115 => "unknown_psk_identity",
        116 => "certificate_required",
        120 => "no_application_protocol",
        _ => return None,
    })
}

/// IANA names of the cipher suites a server is likely to see: all TLS 1.3 suites, and
/// the (EC)DHE / RSA suites that OpenSSL 3 and the major browsers offer. Checked
/// against `openssl ciphers -V -stdname` and the IANA TLS Cipher Suites registry.
const CIPHER_SUITES: &[(u16, &str)] = &[
    // TLS 1.3 (RFC 8446, RFC 8998, RFC 9150)
    (0x1301, "TLS_AES_128_GCM_SHA256"),
    (0x1302, "TLS_AES_256_GCM_SHA384"),
    (0x1303, "TLS_CHACHA20_POLY1305_SHA256"),
    (0x1304, "TLS_AES_128_CCM_SHA256"),
    (0x1305, "TLS_AES_128_CCM_8_SHA256"),
    (0x00C6, "TLS_SM4_GCM_SM3"),
    (0x00C7, "TLS_SM4_CCM_SM3"),
    (0xC0B4, "TLS_SHA256_SHA256"),
    (0xC0B5, "TLS_SHA384_SHA384"),
    // ECDHE-ECDSA
    (0xC02B, "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
    (0xC02C, "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"),
    (0xCCA9, "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"),
    (0xC023, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256"),
    (0xC024, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384"),
    (0xC009, "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA"),
    (0xC00A, "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA"),
    (0xC0AC, "TLS_ECDHE_ECDSA_WITH_AES_128_CCM"),
    (0xC0AD, "TLS_ECDHE_ECDSA_WITH_AES_256_CCM"),
    (0xC0AE, "TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8"),
    (0xC0AF, "TLS_ECDHE_ECDSA_WITH_AES_256_CCM_8"),
    (0xC008, "TLS_ECDHE_ECDSA_WITH_3DES_EDE_CBC_SHA"),
    (0xC007, "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA"),
    // ECDHE-RSA
    (0xC02F, "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    (0xC030, "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    (0xCCA8, "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
    (0xC027, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256"),
    (0xC028, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384"),
    (0xC013, "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA"),
    (0xC014, "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA"),
    (0xC012, "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA"),
    (0xC011, "TLS_ECDHE_RSA_WITH_RC4_128_SHA"),
    // DHE-RSA
    (0x009E, "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256"),
    (0x009F, "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384"),
    (0xCCAA, "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
    (0x0067, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256"),
    (0x006B, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256"),
    (0x0033, "TLS_DHE_RSA_WITH_AES_128_CBC_SHA"),
    (0x0039, "TLS_DHE_RSA_WITH_AES_256_CBC_SHA"),
    (0xC09E, "TLS_DHE_RSA_WITH_AES_128_CCM"),
    (0xC09F, "TLS_DHE_RSA_WITH_AES_256_CCM"),
    (0x0016, "TLS_DHE_RSA_WITH_3DES_EDE_CBC_SHA"),
    // DHE-DSS
    (0x00A2, "TLS_DHE_DSS_WITH_AES_128_GCM_SHA256"),
    (0x00A3, "TLS_DHE_DSS_WITH_AES_256_GCM_SHA384"),
    (0x0040, "TLS_DHE_DSS_WITH_AES_128_CBC_SHA256"),
    (0x006A, "TLS_DHE_DSS_WITH_AES_256_CBC_SHA256"),
    (0x0032, "TLS_DHE_DSS_WITH_AES_128_CBC_SHA"),
    (0x0038, "TLS_DHE_DSS_WITH_AES_256_CBC_SHA"),
    // RSA key exchange
    (0x009C, "TLS_RSA_WITH_AES_128_GCM_SHA256"),
    (0x009D, "TLS_RSA_WITH_AES_256_GCM_SHA384"),
    (0x003C, "TLS_RSA_WITH_AES_128_CBC_SHA256"),
    (0x003D, "TLS_RSA_WITH_AES_256_CBC_SHA256"),
    (0x002F, "TLS_RSA_WITH_AES_128_CBC_SHA"),
    (0x0035, "TLS_RSA_WITH_AES_256_CBC_SHA"),
    (0xC09C, "TLS_RSA_WITH_AES_128_CCM"),
    (0xC09D, "TLS_RSA_WITH_AES_256_CCM"),
    (0x000A, "TLS_RSA_WITH_3DES_EDE_CBC_SHA"),
    (0x0005, "TLS_RSA_WITH_RC4_128_SHA"),
    (0x0004, "TLS_RSA_WITH_RC4_128_MD5"),
    // Signalling values that appear in cipher suite lists
    (0x00FF, "TLS_EMPTY_RENEGOTIATION_INFO_SCSV"),
    (0x5600, "TLS_FALLBACK_SCSV"),
    (0x0000, "TLS_NULL_WITH_NULL_NULL"),
];

/// IANA name of a cipher suite, if it is one of the commonly seen ones.
pub fn cipher_name(id: u16) -> Option<&'static str> {
    CIPHER_SUITES
        .iter()
        .find(|(code, _)| *code == id)
        .map(|(_, name)| *name)
}

/// The key-exchange groups hstrace names (the TLS Supported Groups registry): every
/// other code point is printed as its number.
pub const GROUPS: [(u16, &str); 26] = [
    (22, "secp256k1"),
    (23, "secp256r1"),
    (24, "secp384r1"),
    (25, "secp521r1"),
    (26, "brainpoolP256r1"),
    (27, "brainpoolP384r1"),
    (28, "brainpoolP512r1"),
    (29, "x25519"),
    (30, "x448"),
    (31, "brainpoolP256r1tls13"),
    (32, "brainpoolP384r1tls13"),
    (33, "brainpoolP512r1tls13"),
    (41, "curveSM2"),
    (0x0100, "ffdhe2048"),
    (0x0101, "ffdhe3072"),
    (0x0102, "ffdhe4096"),
    (0x0103, "ffdhe6144"),
    (0x0104, "ffdhe8192"),
    (0x0200, "MLKEM512"),
    (0x0201, "MLKEM768"),
    (0x0202, "MLKEM1024"),
    (0x11EB, "SecP256r1MLKEM768"),
    (0x11EC, "X25519MLKEM768"),
    (0x11ED, "SecP384r1MLKEM1024"),
    (0x6399, "X25519Kyber768Draft00"),
    (0x639A, "SecP256r1Kyber768Draft00"),
];

/// IANA name of a key-exchange group, if `GROUPS` has it.
pub fn group_name(id: u16) -> Option<&'static str> {
    GROUPS
        .iter()
        .find(|(code, _)| *code == id)
        .map(|(_, name)| *name)
}

/// A group's IANA name, or its code as "0x11EE" when the name is unknown.
pub fn group_label(id: u16) -> Cow<'static, str> {
    match group_name(id) {
        Some(n) => Cow::Borrowed(n),
        None => Cow::Owned(format!("0x{id:04X}")),
    }
}

/// A post-quantum key exchange: ML-KEM alone, or a hybrid of ML-KEM (or its Kyber draft)
/// with a classical curve.
pub fn is_post_quantum(id: u16) -> bool {
    matches!(id, 0x0200..=0x0202 | 0x11EB..=0x11ED | 0x6399 | 0x639A)
}

/// IANA name of a cipher suite, or its code as "0xC030" when the name is unknown.
pub fn cipher_label(id: u16) -> Cow<'static, str> {
    match cipher_name(id) {
        Some(name) => Cow::Borrowed(name),
        None => Cow::Owned(format!("0x{id:04X}")),
    }
}

/// The bytes of a hex dump (whitespace ignored), as the captured hello fixtures are kept.
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    let digits: Vec<u8> = s
        .bytes()
        .filter(|c| !c.is_ascii_whitespace())
        .map(|c| (c as char).to_digit(16).map(|d| d as u8))
        .collect::<Option<_>>()?;
    digits
        .len()
        .is_multiple_of(2)
        .then(|| digits.chunks(2).map(|p| p[0] << 4 | p[1]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TLS12_FULL_CH: &str = include_str!("../tests/fixtures/hello/tls12_full.client_hello.hex");
    const TLS12_FULL_SH: &str = include_str!("../tests/fixtures/hello/tls12_full.server_hello.hex");
    const TLS12_SESSID_CH: &str =
        include_str!("../tests/fixtures/hello/tls12_sessid.client_hello.hex");
    const TLS12_SESSID_SH: &str =
        include_str!("../tests/fixtures/hello/tls12_sessid.server_hello.hex");
    const TLS12_TICKET_CH: &str =
        include_str!("../tests/fixtures/hello/tls12_ticket.client_hello.hex");
    const TLS12_TICKET_SH: &str =
        include_str!("../tests/fixtures/hello/tls12_ticket.server_hello.hex");
    const TLS13_FULL_CH: &str = include_str!("../tests/fixtures/hello/tls13_full.client_hello.hex");
    const TLS13_FULL_SH: &str = include_str!("../tests/fixtures/hello/tls13_full.server_hello.hex");
    const TLS13_PSK_CH: &str = include_str!("../tests/fixtures/hello/tls13_psk.client_hello.hex");
    const TLS13_PSK_SH: &str = include_str!("../tests/fixtures/hello/tls13_psk.server_hello.hex");
    const TLS13_HRR_SH: &str = include_str!("../tests/fixtures/hello/tls13_hrr.server_hello.hex");
    const TLS13_HRR_CH2: &str = include_str!("../tests/fixtures/hello/tls13_hrr.client_hello2.hex");

    const ALL_CH: &[&str] = &[
        TLS12_FULL_CH,
        TLS12_SESSID_CH,
        TLS12_TICKET_CH,
        TLS13_FULL_CH,
        TLS13_PSK_CH,
        TLS13_HRR_CH2,
    ];
    const ALL_SH: &[&str] = &[
        TLS12_FULL_SH,
        TLS12_SESSID_SH,
        TLS12_TICKET_SH,
        TLS13_FULL_SH,
        TLS13_PSK_SH,
        TLS13_HRR_SH,
    ];

    /// OpenSSL 3.0's default TLS 1.2 client cipher list, as captured.
    const OPENSSL_TLS12_SUITES: &[u16] = &[
        0xC02C, 0xC030, 0x009F, 0xCCA9, 0xCCA8, 0xCCAA, 0xC02B, 0xC02F, 0x009E, 0xC024, 0xC028,
        0x006B, 0xC023, 0xC027, 0x0067, 0xC00A, 0xC014, 0x0039, 0xC009, 0xC013, 0x0033, 0x009D,
        0x009C, 0x003D, 0x003C, 0x0035, 0x002F, 0x00FF,
    ];

    fn unhex(s: &str) -> Vec<u8> {
        super::unhex(s).expect("a hex dump")
    }

    fn ch(fixture: &str) -> ClientHello {
        let b = unhex(fixture);
        ClientHello::parse(&b, b.len()).expect("fixture ClientHello parses")
    }

    fn sh(fixture: &str) -> ServerHello {
        let b = unhex(fixture);
        ServerHello::parse(&b, b.len()).expect("fixture ServerHello parses")
    }

    /// The key exchange as OpenSSL 3.0 offers and takes it: X25519 first, a share for it
    /// alone; a server that takes only P-256 asks for it in a HelloRetryRequest.
    #[test]
    fn groups_shares_and_signatures() {
        let c = ch(TLS13_FULL_CH);
        assert_eq!(
            &c.supported_groups[..3],
            &[29, 23, 30],
            "x25519, secp256r1, x448"
        );
        assert_eq!(c.key_share_groups, vec![29]);
        assert!(!c.signature_algorithms.is_empty());
        assert!(c.extensions.contains(&EXT_KEY_SHARE) && c.extensions.contains(&0));
        assert_eq!(c.len, unhex(TLS13_FULL_CH).len());
        assert_eq!(sh(TLS13_FULL_SH).key_share_group, Some(29));
        // TLS 1.2: no key_share either way
        assert!(ch(TLS12_FULL_CH).key_share_groups.is_empty());
        assert_eq!(sh(TLS12_FULL_SH).key_share_group, None);
        // the retry asks for secp256r1, and the second ClientHello sends its share
        let hrr = sh(TLS13_HRR_SH);
        assert!(hrr.hello_retry_request);
        assert_eq!(hrr.key_share_group, Some(23));
        assert_eq!(ch(TLS13_HRR_CH2).key_share_groups, vec![23]);
        assert_eq!(group_label(0x11EC), "X25519MLKEM768");
        assert_eq!(group_label(0x11EE), "0x11EE");
        assert!(is_post_quantum(0x11EC) && is_post_quantum(0x0201) && !is_post_quantum(29));
    }

    fn assert_common_client(c: &ClientHello) {
        assert_eq!(c.legacy_version, 0x0303);
        assert_eq!(c.sni.as_deref(), Some("demo.test"));
        assert_eq!(c.alpn, vec!["http/1.1".to_string()]);
        assert!(!c.truncated);
    }

    #[test]
    fn tls12_full_handshake() {
        let c = ch(TLS12_FULL_CH);
        assert_common_client(&c);
        assert!(c.session_id.is_empty());
        assert_eq!(c.cipher_suites, OPENSSL_TLS12_SUITES);
        assert!(c.supported_versions.is_empty());
        assert!(!c.offers_tls13());
        assert_eq!(
            c.session_ticket_len,
            Some(0),
            "empty ticket ext: tickets supported"
        );
        assert!(!c.psk);
        assert!(
            !c.offers_resumption(),
            "no session id, empty ticket: a full handshake"
        );

        let s = sh(TLS12_FULL_SH);
        assert_eq!(s.legacy_version, 0x0303);
        assert_eq!(s.version, 0x0303);
        assert_eq!(version_name(s.version), Some("1.2"));
        assert!(s.session_id.is_empty());
        assert_eq!(s.cipher, 0xC030);
        assert_eq!(
            cipher_label(s.cipher),
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
        );
        assert_eq!(s.alpn.as_deref(), Some("http/1.1"));
        assert!(s.session_ticket_ext, "server will send a NewSessionTicket");
        assert!(!s.psk);
        assert!(!s.hello_retry_request);
        assert!(!s.truncated);
    }

    #[test]
    fn tls12_resumed_by_session_id() {
        let c = ch(TLS12_SESSID_CH);
        assert_common_client(&c);
        assert_eq!(c.session_id.len(), 32);
        assert_eq!(c.cipher_suites, OPENSSL_TLS12_SUITES);
        assert_eq!(c.session_ticket_len, None, "-no_ticket: no ticket ext");
        assert!(!c.psk);
        assert!(c.offers_resumption());

        let s = sh(TLS12_SESSID_SH);
        assert_eq!(s.version, 0x0303);
        assert_eq!(s.session_id, c.session_id, "echoed id = session resumed");
        assert_eq!(s.cipher, 0xC030);
        assert_eq!(s.alpn.as_deref(), Some("http/1.1"));
        assert!(!s.session_ticket_ext);
        assert!(!s.psk);
        assert!(!s.truncated);
    }

    #[test]
    fn tls12_resumed_by_ticket() {
        let c = ch(TLS12_TICKET_CH);
        assert_common_client(&c);
        // RFC 5077 3.4: a client offering a ticket may send a fresh session id to
        // recognise the server's acceptance by its echo.
        assert_eq!(c.session_id.len(), 32);
        assert_eq!(c.session_ticket_len, Some(176));
        assert!(!c.psk);
        assert!(c.offers_resumption());

        let s = sh(TLS12_TICKET_SH);
        assert_eq!(s.version, 0x0303);
        assert_eq!(s.session_id, c.session_id);
        assert_eq!(s.cipher, 0xC030);
        assert_eq!(s.alpn.as_deref(), Some("http/1.1"));
        assert!(
            !s.session_ticket_ext,
            "ticket accepted, no new one announced"
        );
        assert!(!s.psk);
    }

    #[test]
    fn tls13_full_handshake() {
        let c = ch(TLS13_FULL_CH);
        assert_common_client(&c);
        assert_eq!(c.session_id.len(), 32, "middlebox-compatibility random id");
        assert_eq!(c.cipher_suites, [0x1302, 0x1303, 0x1301, 0x00FF]);
        assert_eq!(c.supported_versions, [0x0304]);
        assert!(c.offers_tls13());
        assert_eq!(c.session_ticket_len, Some(0));
        assert!(!c.psk);
        assert!(
            !c.offers_resumption(),
            "random 1.3 session id is not a resumption offer"
        );

        let s = sh(TLS13_FULL_SH);
        assert_eq!(s.legacy_version, 0x0303);
        assert_eq!(s.version, 0x0304);
        assert_eq!(version_name(s.version), Some("1.3"));
        assert_eq!(s.session_id, c.session_id);
        assert_eq!(s.cipher, 0x1302);
        assert_eq!(cipher_name(s.cipher), Some("TLS_AES_256_GCM_SHA384"));
        assert!(!s.psk);
        assert_eq!(s.alpn, None, "1.3 ALPN is in EncryptedExtensions");
        assert!(!s.session_ticket_ext);
        assert!(!s.hello_retry_request);
        assert!(!s.truncated);
    }

    #[test]
    fn tls13_resumed_by_psk() {
        let c = ch(TLS13_PSK_CH);
        assert_common_client(&c);
        assert_eq!(c.supported_versions, [0x0304]);
        assert!(c.psk);
        assert!(c.offers_resumption());

        let s = sh(TLS13_PSK_SH);
        assert_eq!(s.version, 0x0304);
        assert_eq!(s.session_id, c.session_id);
        assert_eq!(s.cipher, 0x1302);
        assert!(s.psk, "server accepted the PSK");
        assert!(!s.hello_retry_request);
    }

    #[test]
    fn tls13_hello_retry_request() {
        let s = sh(TLS13_HRR_SH);
        assert!(s.hello_retry_request);
        assert_eq!(s.version, 0x0304);
        assert_eq!(s.cipher, 0x1302);
        assert!(!s.psk);

        let c2 = ch(TLS13_HRR_CH2);
        assert_common_client(&c2);
        assert_eq!(c2.session_id, s.session_id);
        assert!(c2.offers_tls13());
        assert!(!c2.offers_resumption());
    }

    #[test]
    fn wrong_type_and_empty() {
        let c = unhex(TLS12_FULL_CH);
        let s = unhex(TLS12_FULL_SH);
        assert_eq!(
            ServerHello::parse(&c, c.len()),
            Err(ParseError::WrongType(1))
        );
        assert_eq!(
            ClientHello::parse(&s, s.len()),
            Err(ParseError::WrongType(2))
        );
        assert_eq!(
            ClientHello::parse(&[11, 0, 0, 0], 4),
            Err(ParseError::WrongType(11))
        );
        assert_eq!(ClientHello::parse(&[], 0), Err(ParseError::Truncated));
        assert_eq!(ServerHello::parse(&[2, 0], 2), Err(ParseError::Truncated));
        // msg_len 0: nothing of the buffer is data.
        assert_eq!(ClientHello::parse(&c, 0), Err(ParseError::Truncated));
    }

    /// Every prefix of a real hello: the fixed part cut is Err(Truncated), anything
    /// later is Ok(truncated) with fields that agree with the full parse.
    #[test]
    fn every_prefix_of_client_hellos() {
        for fixture in ALL_CH {
            let full_bytes = unhex(fixture);
            let full = ch(fixture);
            // header + version + random + session id + cipher suites
            let fixed_end =
                4 + 2 + 32 + 1 + full.session_id.len() + 2 + 2 * full.cipher_suites.len();
            for len in 0..full_bytes.len() {
                for real_len in [full_bytes.len(), len] {
                    match ClientHello::parse(&full_bytes[..len], real_len) {
                        Err(e) => {
                            assert_eq!(e, ParseError::Truncated, "len {len}");
                            assert!(len < fixed_end, "len {len} should parse partially");
                        }
                        Ok(p) => {
                            assert!(len >= fixed_end, "len {len}");
                            assert!(p.truncated, "len {len}");
                            assert_eq!(p.legacy_version, full.legacy_version);
                            assert_eq!(p.session_id, full.session_id);
                            assert_eq!(p.cipher_suites, full.cipher_suites);
                            assert!(p.sni.is_none() || p.sni == full.sni, "len {len}");
                            assert!(p.alpn.is_empty() || p.alpn == full.alpn, "len {len}");
                            assert!(
                                p.supported_versions.is_empty()
                                    || p.supported_versions == full.supported_versions
                            );
                            assert!(
                                p.session_ticket_len.is_none()
                                    || p.session_ticket_len == full.session_ticket_len
                            );
                            assert!(!p.psk || full.psk);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_prefix_of_server_hellos() {
        for fixture in ALL_SH {
            let full_bytes = unhex(fixture);
            let full = sh(fixture);
            let fixed_end = 4 + 2 + 32 + 1 + full.session_id.len() + 2;
            for len in 0..full_bytes.len() {
                for real_len in [full_bytes.len(), len] {
                    match ServerHello::parse(&full_bytes[..len], real_len) {
                        Err(e) => {
                            assert_eq!(e, ParseError::Truncated, "len {len}");
                            assert!(len < fixed_end, "len {len} should parse partially");
                        }
                        Ok(p) => {
                            assert!(len >= fixed_end && p.truncated, "len {len}");
                            assert_eq!(p.session_id, full.session_id);
                            assert_eq!(p.cipher, full.cipher);
                            assert_eq!(p.hello_retry_request, full.hello_retry_request);
                            assert!(p.version == full.version || p.version == full.legacy_version);
                            assert!(p.alpn.is_none() || p.alpn == full.alpn);
                            assert!(!p.psk || full.psk);
                        }
                    }
                }
            }
        }
    }

    /// A cut inside the ticket extension's data still reports its declared length.
    #[test]
    fn cut_inside_ticket_extension() {
        let b = unhex(TLS12_TICKET_CH);
        let at = b
            .windows(4)
            .position(|w| w == [0x00, 0x23, 0x00, 0xB0])
            .expect("ticket ext");
        let c = ClientHello::parse(&b[..at + 4 + 10], b.len()).unwrap();
        assert!(c.truncated);
        assert_eq!(c.session_ticket_len, Some(176));
        assert!(c.offers_resumption());
        assert_eq!(c.sni.as_deref(), Some("demo.test"));
        assert!(c.alpn.is_empty(), "ALPN comes after the cut");
    }

    /// Bytes past `msg_len` (a fixed-size capture buffer) are not part of the message.
    #[test]
    fn bytes_past_msg_len_are_ignored() {
        for fixture in ALL_CH {
            let mut b = unhex(fixture);
            let n = b.len();
            b.resize(1536, 0xEE);
            assert_eq!(ClientHello::parse(&b, n).unwrap(), ch(fixture));
        }
        let mut b = unhex(TLS13_PSK_SH);
        let n = b.len();
        b.extend_from_slice(&[0x0B, 0x00, 0x03, 0x1A]); // next handshake message in the same write
        assert_eq!(ServerHello::parse(&b, n).unwrap(), sh(TLS13_PSK_SH));
        // A following message in the same buffer is outside the 24-bit length anyway.
        assert_eq!(ServerHello::parse(&b, b.len()).unwrap(), sh(TLS13_PSK_SH));
    }

    /// Builds a ClientHello from parts (for GREASE, big and malformed cases).
    fn build_client_hello(session_id: &[u8], suites: &[u16], exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[0x42; 32]);
        body.push(session_id.len() as u8);
        body.extend_from_slice(session_id);
        body.extend_from_slice(&((suites.len() * 2) as u16).to_be_bytes());
        for s in suites {
            body.extend_from_slice(&s.to_be_bytes());
        }
        body.extend_from_slice(&[1, 0]); // compression: null
        let mut block = Vec::new();
        for (t, data) in exts {
            block.extend_from_slice(&t.to_be_bytes());
            block.extend_from_slice(&(data.len() as u16).to_be_bytes());
            block.extend_from_slice(data);
        }
        body.extend_from_slice(&(block.len() as u16).to_be_bytes());
        body.extend_from_slice(&block);
        let mut msg = vec![HT_CLIENT_HELLO];
        msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend_from_slice(&body);
        msg
    }

    fn sni_ext(host: &str) -> (u16, Vec<u8>) {
        let mut entry = vec![SNI_HOST_NAME];
        entry.extend_from_slice(&(host.len() as u16).to_be_bytes());
        entry.extend_from_slice(host.as_bytes());
        let mut data = (entry.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&entry);
        (EXT_SERVER_NAME, data)
    }

    fn alpn_ext(names: &[&[u8]]) -> (u16, Vec<u8>) {
        let mut list = Vec::new();
        for n in names {
            list.push(n.len() as u8);
            list.extend_from_slice(n);
        }
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        (EXT_ALPN, data)
    }

    /// Browsers put GREASE in suites, extensions, versions and ALPN; it must vanish.
    #[test]
    fn grease_is_dropped() {
        let b = build_client_hello(
            &[7; 32],
            &[0x3A3A, 0x1301, 0x1302, 0xC02B],
            &[
                (0x0A0A, vec![]),
                sni_ext("demo.test"),
                alpn_ext(&[&[0x5A, 0x5A], b"h2", b"http/1.1"]),
                (
                    EXT_SUPPORTED_VERSIONS,
                    vec![6, 0xCA, 0xCA, 0x03, 0x04, 0x03, 0x03],
                ),
                (0xFAFA, vec![0]),
            ],
        );
        let c = ClientHello::parse(&b, b.len()).unwrap();
        assert_eq!(c.cipher_suites, [0x1301, 0x1302, 0xC02B]);
        assert_eq!(c.supported_versions, [0x0304, 0x0303]);
        assert_eq!(c.alpn, ["h2", "http/1.1"]);
        assert_eq!(c.sni.as_deref(), Some("demo.test"));
        assert!(c.offers_tls13());
        assert!(!c.offers_resumption());
        assert!(!c.truncated);
        assert!(is_grease(0x0A0A) && is_grease(0xFAFA) && !is_grease(0x0A1A) && !is_grease(0x1301));
    }

    /// A ClientHello cut short by a capture (here at 1,536 bytes; the kernel cuts at
    /// `abi::HELLO_CAP`): fields after the cut are unknown, and `truncated` says so.
    #[test]
    fn capture_limit_cuts_late_extensions() {
        let b = build_client_hello(
            &[],
            &[0x1301],
            &[
                sni_ext("demo.test"),
                (21 /* padding */, vec![0; 2000]),
                (EXT_PRE_SHARED_KEY, vec![0; 40]),
            ],
        );
        assert!(b.len() > 1536);
        let c = ClientHello::parse(&b[..1536], b.len()).unwrap();
        assert!(c.truncated);
        assert_eq!(c.sni.as_deref(), Some("demo.test"));
        assert!(!c.psk, "pre_shared_key lies past the capture");
        let full = ClientHello::parse(&b, b.len()).unwrap();
        assert!(full.psk && !full.truncated);
    }

    #[test]
    fn malformed_lengths_in_complete_messages() {
        // Session id length 33.
        let mut b = build_client_hello(&[1; 33], &[0x1301], &[]);
        assert_eq!(
            ClientHello::parse(&b, b.len()),
            Err(ParseError::Malformed("session id longer than 32 bytes"))
        );
        // Extension length pointing past its block, in a message that is all there.
        b = build_client_hello(&[], &[0x1301], &[sni_ext("demo.test")]);
        let n = b.len();
        let ext_len_at = n - sni_ext("demo.test").1.len() - 2;
        b[ext_len_at] = 0x10;
        assert!(matches!(
            ClientHello::parse(&b, n),
            Err(ParseError::Malformed(_))
        ));
        // Inner SNI list length wrong.
        b = build_client_hello(
            &[],
            &[0x1301],
            &[(EXT_SERVER_NAME, vec![0, 9, 0, 0, 1, b'x'])],
        );
        assert_eq!(
            ClientHello::parse(&b, b.len()),
            Err(ParseError::Malformed("server_name extension"))
        );
        // Odd cipher suite length.
        b = build_client_hello(&[], &[0x1301], &[]);
        b[4 + 2 + 32 + 1 + 1] = 3;
        assert!(matches!(
            ClientHello::parse(&b, b.len()),
            Err(ParseError::Malformed(_))
        ));
        // A 24-bit length larger than the data is a cut (the message may continue in a
        // later read), not an error; here the extensions block itself is complete.
        let mut s = unhex(TLS12_FULL_SH);
        s[1] = 0x7F;
        let p = ServerHello::parse(&s, s.len()).unwrap();
        assert_eq!(
            p,
            ServerHello {
                truncated: false,
                ..sh(TLS12_FULL_SH)
            }
        );
    }

    /// A TLS 1.2 hello may have no extensions block at all.
    #[test]
    fn no_extensions_block() {
        let mut b = build_client_hello(&[], &[0x002F], &[]);
        b.truncate(b.len() - 2); // drop the (empty) extensions length
        let body_len = (b.len() - 4) as u32;
        b[1..4].copy_from_slice(&body_len.to_be_bytes()[1..]);
        let c = ClientHello::parse(&b, b.len()).unwrap();
        assert_eq!(c.cipher_suites, [0x002F]);
        assert!(!c.truncated);
        assert_eq!(c.sni, None);
    }

    struct XorShift(u64);
    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Random bytes (with a plausible type byte) and random corruptions of real
    /// hellos never panic.
    #[test]
    fn garbage_never_panics() {
        let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
        for i in 0..20_000 {
            let len = (rng.next() % 600) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            if let Some(first) = b.first_mut() {
                *first = if i % 2 == 0 {
                    HT_CLIENT_HELLO
                } else {
                    HT_SERVER_HELLO
                };
            }
            let real_len = (rng.next() % 2000) as usize;
            let _ = ClientHello::parse(&b, real_len);
            let _ = ServerHello::parse(&b, real_len);
            let _ = ClientHello::parse(&b, usize::MAX);
        }
        let fixtures: Vec<Vec<u8>> = ALL_CH.iter().chain(ALL_SH).map(|f| unhex(f)).collect();
        for _ in 0..50_000 {
            let mut b = fixtures[(rng.next() % fixtures.len() as u64) as usize].clone();
            for _ in 0..1 + rng.next() % 4 {
                let at = (rng.next() % b.len() as u64) as usize;
                b[at] = rng.next() as u8;
            }
            let cut = (rng.next() % (b.len() as u64 + 1)) as usize;
            let _ = ClientHello::parse(&b[..cut], b.len());
            let _ = ServerHello::parse(&b[..cut], b.len());
            let _ = ClientHello::parse(&b, b.len());
            let _ = ServerHello::parse(&b, b.len());
        }
    }

    #[test]
    fn names() {
        assert_eq!(version_name(0x0300), Some("ssl3"));
        assert_eq!(version_name(0x0301), Some("1.0"));
        assert_eq!(version_name(0x0302), Some("1.1"));
        assert_eq!(version_name(0x0303), Some("1.2"));
        assert_eq!(version_name(0x0304), Some("1.3"));
        assert_eq!(version_name(0x7F1C), None);
        assert_eq!(cipher_name(0x1301), Some("TLS_AES_128_GCM_SHA256"));
        assert_eq!(
            cipher_name(0xC030),
            Some("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384")
        );
        assert_eq!(
            cipher_name(0xCCA8),
            Some("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256")
        );
        assert_eq!(
            cipher_label(0xC030),
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"
        );
        assert_eq!(cipher_label(0xC0FF), "0xC0FF");
        assert_eq!(cipher_label(0x0A0A), "0x0A0A");
    }

    #[test]
    fn cipher_table_is_consistent() {
        for (i, (code, name)) in CIPHER_SUITES.iter().enumerate() {
            assert!(name.starts_with("TLS_"), "{name}");
            for (code2, name2) in &CIPHER_SUITES[i + 1..] {
                assert_ne!(code, code2, "duplicate code {code:#06x}");
                assert_ne!(name, name2, "duplicate name {name}");
            }
        }
        // Everything OpenSSL offered in the captures has a name.
        for fixture in ALL_CH {
            for s in ch(fixture).cipher_suites {
                assert!(cipher_name(s).is_some(), "{s:#06x} unnamed");
            }
        }
    }
}
