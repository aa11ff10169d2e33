//! Mutated real handshakes on the wire: the kernel side's parser fuzzed end to end. Each
//! case is one TCP connection to a real TLS server carrying a real ClientHello (the
//! captured fixtures) cut, re-framed or corrupted, then closed, reset or read until the
//! server gives up. Deterministic: case `i` of seed `s` is always the same bytes.
//! Used by a test (a small fixed-seed slice) and by `cargo xtask fuzz-wire` (thousands).

use std::{
    collections::BTreeMap,
    io::{Read, Write},
    net::TcpStream,
    sync::atomic::{AtomicUsize, Ordering},
    thread,
    time::Duration,
};

use crate::{clients::reset_on_close, fixtures::client_hello_record};

/// The ClientHellos the mutations start from (userspace/tests/fixtures/hello).
const FIXTURES: [&str; 5] = [
    "tls12_full.client_hello.hex",
    "tls12_sessid.client_hello.hex",
    "tls12_ticket.client_hello.hex",
    "tls13_full.client_hello.hex",
    "tls13_psk.client_hello.hex",
];

/// Every mutation, by name (`Case::mutation`).
pub const MUTATIONS: [&str; 17] = [
    "intact",
    "truncated",
    "split",
    "record_length",
    "handshake_length",
    "one_byte_records",
    "sslv2_hello",
    "random_bytes",
    "zero_length_records",
    "byte_flips",
    "record_overflow",
    "early_close",
    "reset",
    "plain_http",
    "preamble_then_hello",
    "preamble_flood",
    "plaintext_after_alert",
];

/// The first messages of protocols that switch to TLS later (the kernel watches their
/// preamble: ebpf/preamble.bpf.h): PostgreSQL's SSLRequest, LDAP's StartTLS, an XMPP
/// stream header, a MySQL-style SSLRequest packet.
const PREAMBLES: [&[u8]; 4] = [
    &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f],
    &[
        0x30, 0x1d, 0x02, 0x01, 0x01, 0x77, 0x18, 0x80, 0x16, b'1', b'.', b'3', b'.', b'6', b'.',
        b'1', b'.', b'4', b'.', b'1', b'.', b'1', b'4', b'6', b'6', b'.', b'2', b'0', b'0', b'3',
        b'7',
    ],
    b"<?xml version='1.0'?><stream:stream to='x'>",
    &[32, 0, 0, 1, 0x85, 0xae, 0xff, 0x01],
];

/// How the client leaves.
#[derive(Debug, Clone, Copy)]
pub enum End {
    /// read what the server sends until it closes or goes quiet, then close
    Read,
    /// close at once (FIN)
    Close,
    /// reset at once (RST: SO_LINGER 0)
    Reset,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub mutation: &'static str,
    /// written one after another, each its own write
    pub pieces: Vec<Vec<u8>>,
    pub end: End,
}

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// in lo..hi (hi > lo)
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo) as u64) as usize
    }
}

/// Case `i` of `seed`.
pub fn case(seed: u64, i: usize) -> Case {
    let mut rng = Rng::new(seed ^ (i as u64).wrapping_mul(0x1000_0000_01b3));
    let hello = client_hello_record(FIXTURES[rng.range(0, FIXTURES.len())]);
    let mutation = MUTATIONS[i % MUTATIONS.len()];
    let end = match rng.range(0, 3) {
        0 => End::Read,
        1 => End::Close,
        _ => End::Reset,
    };
    let n = hello.len();
    let one = |b: Vec<u8>| vec![b];
    let (pieces, end) = match mutation {
        "intact" => (one(hello), End::Read),
        "truncated" => (one(hello[..rng.range(1, n)].to_vec()), end),
        "split" => {
            let at = rng.range(1, n);
            (vec![hello[..at].to_vec(), hello[at..].to_vec()], end)
        }
        "record_length" => {
            let mut h = hello;
            let len = rng.next() as u16;
            h[3..5].copy_from_slice(&len.to_be_bytes());
            (one(h), end)
        }
        "handshake_length" => {
            let mut h = hello;
            let len = rng.next().to_be_bytes();
            h[6..9].copy_from_slice(&len[..3]);
            (one(h), end)
        }
        "one_byte_records" => {
            // legal: a handshake message may be spread over records of any size
            let framed = hello[5..]
                .iter()
                .flat_map(|b| [22, 3, 1, 0, 1, *b])
                .collect();
            (one(framed), End::Read)
        }
        "sslv2_hello" => (one(sslv2_client_hello(&mut rng)), end),
        "random_bytes" => {
            let len = rng.range(1, 600);
            (one((0..len).map(|_| rng.next() as u8).collect()), end)
        }
        "zero_length_records" => {
            let mut h: Vec<u8> = (0..rng.range(1, 4))
                .flat_map(|_| [22, 3, 1, 0, 0])
                .collect();
            if rng.range(0, 2) == 1 {
                h.extend_from_slice(&hello);
            }
            (one(h), end)
        }
        "byte_flips" => {
            let mut h = hello;
            for _ in 0..rng.range(1, 9) {
                let at = rng.range(0, n);
                h[at] ^= 1 << rng.range(0, 8);
            }
            (one(h), end)
        }
        "record_overflow" => {
            let mut h = hello;
            h[3..5].copy_from_slice(&[0xff, 0xff]);
            (one(h), End::Read)
        }
        "early_close" => (one(hello[..rng.range(0, n)].to_vec()), End::Close),
        "reset" => (one(hello[..rng.range(0, n)].to_vec()), End::Reset),
        "plain_http" => (one(b"GET / HTTP/1.0\r\n\r\n".to_vec()), End::Read),
        // a preamble, then (in a later write) the ClientHello, whole or cut
        "preamble_then_hello" => {
            let pre = PREAMBLES[rng.range(0, PREAMBLES.len())].to_vec();
            (vec![pre, hello[..rng.range(1, n + 1)].to_vec()], end)
        }
        // a preamble, then more bytes than the kernel watches one for (16 KiB)
        "preamble_flood" => {
            let mut pieces = vec![PREAMBLES[rng.range(0, PREAMBLES.len())].to_vec()];
            for _ in 0..rng.range(1, 24) {
                pieces.push((0..1024).map(|_| rng.next() as u8).collect());
            }
            (pieces, end)
        }
        // the ClientHello, then (each in a later write) a plaintext alert that ends TLS
        // (a fatal unknown_ca, or a close_notify) and plain text that looks like a record
        // header but is none: a MySQL error packet (`16 00 00 02 ff`), as MariaDB writes
        // after a client's alert
        "plaintext_after_alert" => {
            let alert = if rng.range(0, 2) == 0 {
                [2, 48]
            } else {
                [1, 0]
            };
            let mut plain = vec![
                0x16, 0, 0, 2, 0xff, 0x15, 0x04, b'#', b'0', b'8', b'S', b'0', b'1',
            ];
            plain.extend_from_slice(b"Bad handshake");
            (
                vec![hello, vec![21, 3, 3, 0, 2, alert[0], alert[1]], plain],
                End::Read,
            )
        }
        _ => unreachable!("every mutation is listed"),
    };
    Case {
        mutation,
        pieces,
        end,
    }
}

/// An SSLv2-format ClientHello (RFC 6101 appendix E.2), as old scanners still send.
fn sslv2_client_hello(rng: &mut Rng) -> Vec<u8> {
    let specs: Vec<u8> = [0x00, 0x00, 0x2f, 0x00, 0x00, 0x35, 0x00, 0x00, 0x0a].to_vec();
    let challenge: Vec<u8> = (0..16).map(|_| rng.next() as u8).collect();
    let mut body = vec![1, 3, 1];
    body.extend_from_slice(&(specs.len() as u16).to_be_bytes());
    body.extend_from_slice(&0u16.to_be_bytes());
    body.extend_from_slice(&(challenge.len() as u16).to_be_bytes());
    body.extend_from_slice(&specs);
    body.extend_from_slice(&challenge);
    let mut out = (0x8000u16 | body.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

/// Play one case against `port`. Returns false if the connection could not be made.
pub fn play(port: u16, case: &Case) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_nodelay(true);
    for (k, p) in case.pieces.iter().enumerate() {
        if k > 0 {
            // its own segment, and most likely its own read on the server
            thread::sleep(Duration::from_millis(2));
        }
        if s.write_all(p).is_err() {
            break;
        }
    }
    match case.end {
        End::Read => {
            let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
            let mut buf = [0u8; 4096];
            while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
        }
        End::Close => {}
        End::Reset => {
            let _ = reset_on_close(&s);
        }
    }
    true
}

/// Cases `first..first + count` of `seed` against `port`, `parallel` at a time: how many
/// connections were made, by mutation.
pub fn run(
    port: u16,
    seed: u64,
    first: usize,
    count: usize,
    parallel: usize,
) -> BTreeMap<&'static str, usize> {
    let next = AtomicUsize::new(first);
    let made: Vec<BTreeMap<&'static str, usize>> = thread::scope(|scope| {
        let workers: Vec<_> = (0..parallel.max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut made = BTreeMap::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= first + count {
                            break made;
                        }
                        let c = case(seed, i);
                        if play(port, &c) {
                            *made.entry(c.mutation).or_insert(0) += 1;
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a fuzz worker panicked"))
            .collect()
    });
    let mut total = BTreeMap::new();
    for m in made {
        for (k, v) in m {
            *total.entry(k).or_insert(0) += v;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_deterministic_and_cover_every_mutation() {
        let a: Vec<_> = (0..28).map(|i| case(7, i).pieces).collect();
        let b: Vec<_> = (0..28).map(|i| case(7, i).pieces).collect();
        assert_eq!(a, b);
        let names: std::collections::BTreeSet<_> = (0..28).map(|i| case(7, i).mutation).collect();
        assert_eq!(names.len(), MUTATIONS.len());
    }

    #[test]
    fn the_sslv2_hello_frames_itself() {
        let h = sslv2_client_hello(&mut Rng::new(1));
        let len = (u16::from_be_bytes([h[0], h[1]]) & 0x7fff) as usize;
        assert_eq!(len, h.len() - 2);
        assert_eq!(h[2], 1, "CLIENT-HELLO");
    }
}
