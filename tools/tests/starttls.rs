//! The kernel's recognizer of plaintext preambles (ebpf/starttls.h), the same C compiled
//! for the host: each protocol told from its first bytes, the client's request for TLS,
//! the server's answer, and what ends the watching. Needs no root. (How many flights and
//! bytes are watched is the BPF side's: tests/tests/starttls.rs.)

use hstrace::abi::*;
use hstrace_tools::starttls::Preamble;

/// A conversation: the first bytes of each flight, (server?, bytes), from the first.
fn talk(flights: &[(bool, &[u8])]) -> Preamble {
    let (server, first) = flights[0];
    let mut p = Preamble::first(server, first);
    for (server, bytes) in &flights[1..] {
        assert!(p.watch, "stopped watching before {bytes:?}: {p:?}");
        p.flight(*server, bytes);
    }
    p
}

const SSL_REQUEST: &[u8] = &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
const STARTUP: &[u8] = &[0, 0, 0, 0x29, 0, 3, 0, 0, b'u', b's', b'e', b'r'];
/// LDAP ExtendedRequest StartTLS, message 1 (RFC 4511 4.14)
const LDAP_STARTTLS: &[u8] = &[
    0x30, 0x1d, 0x02, 0x01, 0x01, 0x77, 0x18, 0x80, 0x16, b'1', b'.', b'3', b'.', b'6', b'.', b'1',
];
const LDAP_BIND: &[u8] = &[0x30, 0x0c, 0x02, 0x01, 0x01, 0x60, 0x07, 0x02, 0x01, 0x03];

fn ldap_result(code: u8) -> Vec<u8> {
    vec![
        0x30, 0x0c, 0x02, 0x01, 0x01, 0x78, 0x07, 0x0a, 0x01, code, 0x04, 0x00,
    ]
}

#[test]
fn postgresql_asks_at_once_and_s_grants_n_refuses() {
    let p = Preamble::first(false, SSL_REQUEST);
    assert_eq!(
        (p.proto, p.state, p.watch),
        (PROTO_POSTGRESQL, PRE_ASKED, true)
    );
    let granted = talk(&[(false, SSL_REQUEST), (true, b"S")]);
    assert_eq!((granted.state, granted.watch), (PRE_GRANTED, true));
    // refused: the client goes on in plain text, and TLS can no longer come
    let refused = talk(&[(false, SSL_REQUEST), (true, b"N")]);
    assert_eq!(refused.state, PRE_REFUSED);
    let mut then = refused;
    then.flight(false, STARTUP);
    assert!(!then.watch);
    // a StartupMessage first: plain PostgreSQL, nothing to watch
    let plain = Preamble::first(false, STARTUP);
    assert_eq!(
        (plain.proto, plain.state, plain.watch),
        (PROTO_POSTGRESQL, PRE_PLAIN, false)
    );
    // GSSENCRequest (5680) asks for no TLS
    let gss = Preamble::first(false, &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30]);
    assert_eq!((gss.proto, gss.watch), (PROTO_POSTGRESQL, false));
}

#[test]
fn smtp_after_its_banner_and_ehlo() {
    let granted = talk(&[
        (true, b"220 mail.test ESMTP"),
        (false, b"EHLO client.test\r\n"),
        (true, b"250-mail.test\r\n250-PIPE"),
        (false, b"STARTTLS\r\n"),
        (true, b"220 2.0.0 Ready to start TLS\r\n"),
    ]);
    assert_eq!(
        (granted.proto, granted.state, granted.watch),
        (PROTO_SMTP, PRE_GRANTED, true)
    );
    let refused = talk(&[
        (true, b"220 mail.test ESMTP"),
        (false, b"ehlo c\r\n"),
        (true, b"250 mail.test\r\n"),
        (false, b"starttls\r\n"),
        (true, b"454 4.7.0 TLS not available\r\n"),
    ]);
    assert_eq!(refused.state, PRE_REFUSED);
    let not_asked = talk(&[
        (true, b"220-mail.test ESMTP"),
        (false, b"HELO c\r\n"),
        (true, b"250 mail.test\r\n"),
        (false, b"MAIL FROM:<a@b>\r\n"),
    ]);
    assert_eq!(
        (not_asked.proto, not_asked.state, not_asked.watch),
        (PROTO_SMTP, PRE_PLAIN, true)
    );
    // "STARTTLSX" is not the command
    let mut p = talk(&[
        (true, b"220 x"),
        (false, b"EHLO c\r\n"),
        (true, b"250 x\r\n"),
    ]);
    p.flight(false, b"STARTTLSX\r\n");
    assert_eq!(p.state, PRE_PLAIN);
}

#[test]
fn a_220_banner_is_ftp_when_the_client_says_so() {
    let ftp = talk(&[
        (true, b"220 (vsFTPd 3.0.3)\r\n"),
        (false, b"AUTH TLS\r\n"),
        (true, b"234 Proceed with negotiation.\r\n"),
    ]);
    assert_eq!((ftp.proto, ftp.state), (PROTO_FTP, PRE_GRANTED));
    let plain = talk(&[(true, b"220 ftp ready\r\n"), (false, b"USER anonymous\r\n")]);
    assert_eq!((plain.proto, plain.state), (PROTO_FTP, PRE_PLAIN));
    // an unanswered banner stays undecided; something else answering it is not watched
    let p = Preamble::first(true, b"220 hello\r\n");
    assert_eq!((p.proto, p.watch), (PROTO_BANNER_220, true));
    let other = talk(&[(true, b"220 x\r\n"), (false, b"\x16\x03\x01garbage")]);
    assert!(!other.watch);
}

#[test]
fn imap_skips_the_tag() {
    let granted = talk(&[
        (true, b"* OK [CAPABILITY IMAP4rev1] ready"),
        (false, b"a1 CAPABILITY\r\n"),
        (true, b"* CAPABILITY IMAP4rev1 STARTTLS"),
        (false, b"a2 STARTTLS\r\n"),
        (true, b"a2 OK Begin TLS negotiation"),
    ]);
    assert_eq!((granted.proto, granted.state), (PROTO_IMAP, PRE_GRANTED));
    let refused = talk(&[
        (true, b"* OK ready"),
        (false, b"tag7 starttls extra\r\n"),
        (true, b"tag7 BAD Unexpected arguments"),
    ]);
    assert_eq!(refused.state, PRE_REFUSED);
    // an untagged line first is not the answer
    let mut p = talk(&[(true, b"* OK ready"), (false, b"a STARTTLS\r\n")]);
    p.flight(true, b"* BYE going away");
    assert_eq!(p.state, PRE_ASKED);
    assert_eq!(Preamble::first(true, b"* PREAUTH hi").proto, PROTO_IMAP);
}

#[test]
fn pop3_xmpp_and_ldap() {
    let pop3 = talk(&[
        (true, b"+OK Dovecot ready."),
        (false, b"STLS\r\n"),
        (true, b"+OK Begin TLS"),
    ]);
    assert_eq!((pop3.proto, pop3.state), (PROTO_POP3, PRE_GRANTED));
    let pop3_refused = talk(&[
        (true, b"+OK ready"),
        (false, b"stls\r\n"),
        (true, b"-ERR not now"),
    ]);
    assert_eq!(pop3_refused.state, PRE_REFUSED);
    let xmpp = talk(&[
        (false, b"<?xml version='1.0'?><stream:stream"),
        (true, b"<?xml version='1.0'?><stream"),
        (false, b"<starttls xmlns='urn:ietf"),
        (true, b"<proceed xmlns='urn:ietf"),
    ]);
    assert_eq!((xmpp.proto, xmpp.state), (PROTO_XMPP, PRE_GRANTED));
    let ldap = talk(&[(false, LDAP_STARTTLS), (true, &ldap_result(0))]);
    assert_eq!((ldap.proto, ldap.state), (PROTO_LDAP, PRE_GRANTED));
    let ldap_refused = talk(&[(false, LDAP_STARTTLS), (true, &ldap_result(2))]);
    assert_eq!(ldap_refused.state, PRE_REFUSED);
    // a bind first: LDAP in plain text, still watched (StartTLS may come)
    let bind = Preamble::first(false, LDAP_BIND);
    assert_eq!(
        (bind.proto, bind.state, bind.watch),
        (PROTO_LDAP, PRE_PLAIN, true)
    );
}

#[test]
fn mysql_asks_with_a_32_byte_packet_and_no_answer() {
    // greeting: length 0x4a, sequence 0, protocol 10
    let greeting: &[u8] = &[0x4a, 0, 0, 0, 10, b'8', b'.', b'0'];
    let p = Preamble::first(true, greeting);
    assert_eq!((p.proto, p.watch), (PROTO_MYSQL, true));
    let asked = talk(&[(true, greeting), (false, &[32, 0, 0, 1, 0x85, 0xae])]);
    assert_eq!((asked.state, asked.watch), (PRE_ASKED, true));
    let plain = talk(&[(true, greeting), (false, &[0x55, 0, 0, 1, 0x85, 0xa6])]);
    assert!(!plain.watch);
}

#[test]
fn http_and_unknown_bytes_are_not_watched() {
    for req in [
        &b"GET / HTTP/1.1\r\n"[..],
        b"post /x HTTP/1.0",
        b"PRI * HTTP/2.0\r\n",
    ] {
        let p = Preamble::first(false, req);
        assert_eq!((p.proto, p.watch), (PROTO_HTTP, false), "{req:?}");
    }
    for junk in [&b"\x00\x01\x02\x03"[..], b"SSH-2.0-OpenSSH", b"", b"G"] {
        let client = Preamble::first(false, junk);
        assert_eq!(
            (client.proto, client.watch),
            (PROTO_NONE, false),
            "{junk:?}"
        );
    }
    let ssh = Preamble::first(true, b"SSH-2.0-OpenSSH_9.2\r\n");
    assert_eq!((ssh.proto, ssh.watch), (PROTO_NONE, false));
}

/// Any bytes of any length, first or later, in either direction: no protocol outside the
/// table, no state outside the table, and a refused or granted request stays answered.
#[test]
fn every_input_gives_a_known_protocol_and_state() {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let seeds: [&[u8]; 6] = [
        SSL_REQUEST,
        b"220 mail ESMTP",
        b"* OK ready",
        b"+OK ready",
        LDAP_STARTTLS,
        b"<?xml version",
    ];
    for _ in 0..20_000 {
        let seed = seeds[(next() % seeds.len() as u64) as usize];
        let mut first = seed.to_vec();
        for _ in 0..next() % 4 {
            let at = (next() as usize) % first.len();
            first[at] = next() as u8;
        }
        first.truncate((next() % 17) as usize);
        let mut p = Preamble::first(next() % 2 == 0, &first);
        for _ in 0..8 {
            if !p.watch {
                break;
            }
            let before = p.state;
            let bytes: Vec<u8> = (0..next() % 17).map(|_| next() as u8).collect();
            p.flight(next() % 2 == 0, &bytes);
            assert!(
                p.proto <= PROTO_BANNER_220 && p.state <= PRE_UPGRADED,
                "{p:?}"
            );
            if matches!(before, PRE_GRANTED | PRE_REFUSED) {
                assert!(p.state == before, "{before} became {}", p.state);
            }
        }
    }
}
