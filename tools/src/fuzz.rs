//! One input of the parser fuzzer (`cargo xtask fuzz-parsers`, the `fuzz/` crate): every
//! way userspace reads bytes that came off the wire or out of the ring buffer. The first
//! byte picks the parser; none may panic, hang or grow without bound on any input.

use std::io;

use hstrace::{
    assemble::Pipeline,
    print::{Format, Printer},
    sink::Both,
    tls::{ClientHello, ServerHello},
};

pub fn one(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 3 {
        // a captured hello: the bytes after the handshake header may be cut anywhere
        0 | 1 => {
            for msg_len in [rest.len(), rest.len() / 2] {
                if pick % 3 == 0 {
                    if let Ok(ch) = ClientHello::parse(rest, msg_len) {
                        let _ = (ch.offers_tls13(), ch.offers_resumption());
                    }
                } else {
                    let _ = ServerHello::parse(rest, msg_len);
                }
            }
        }
        // ring-buffer items (each a 2-byte little-endian length, then the item) through
        // the whole pipeline: ABI decoding, hello joining, records, JSON and text lines
        _ => {
            let mut pipe = Pipeline::new(16);
            let mut json = Printer::new(Format::Json, io::sink());
            let mut text = Printer::new(Format::Text, io::sink());
            let mut rest = rest;
            while rest.len() >= 2 {
                let n = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
                let (item, next) = rest[2..].split_at(n);
                let _ = pipe.item(item, &mut Both(&mut json, &mut text));
                rest = next;
            }
        }
    }
}

/// The captured hellos (userspace/tests/fixtures/hello): (ClientHello, ServerHello).
const HELLOS: [(&str, &str); 5] = [
    (
        include_str!("../../userspace/tests/fixtures/hello/tls12_full.client_hello.hex"),
        include_str!("../../userspace/tests/fixtures/hello/tls12_full.server_hello.hex"),
    ),
    (
        include_str!("../../userspace/tests/fixtures/hello/tls12_sessid.client_hello.hex"),
        include_str!("../../userspace/tests/fixtures/hello/tls12_sessid.server_hello.hex"),
    ),
    (
        include_str!("../../userspace/tests/fixtures/hello/tls12_ticket.client_hello.hex"),
        include_str!("../../userspace/tests/fixtures/hello/tls12_ticket.server_hello.hex"),
    ),
    (
        include_str!("../../userspace/tests/fixtures/hello/tls13_full.client_hello.hex"),
        include_str!("../../userspace/tests/fixtures/hello/tls13_full.server_hello.hex"),
    ),
    (
        include_str!("../../userspace/tests/fixtures/hello/tls13_psk.client_hello.hex"),
        include_str!("../../userspace/tests/fixtures/hello/tls13_psk.server_hello.hex"),
    ),
];

/// The fuzzer's seeds: each captured hello for its parser, and each pair as the ring
/// buffer hands it over (both hellos, the connection record, its close line).
pub fn seeds() -> Vec<Vec<u8>> {
    use hstrace::abi::{self, Close, Conn, HelloHeader};
    fn bytes<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: plain-old-data ABI structs, read as the bytes they are
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
    }
    let item = |rec: u32, dir: u32, msg_len: usize, offset: usize, data: &[u8]| {
        let h = HelloHeader {
            rec,
            dir,
            conn_id: 1,
            msg_len: msg_len as u32,
            cap_len: data.len() as u32,
            offset: offset as u32,
            pad: 0,
        };
        [bytes(&h), data.to_vec()].concat()
    };
    let hello = |dir: u32, msg: &[u8]| vec![item(abi::REC_HELLO, dir, msg.len(), 0, msg)];
    // as the kernel sends a hello that came in several records: the body in pieces
    let pieces = |dir: u32, msg: &[u8]| -> Vec<Vec<u8>> {
        (4..msg.len())
            .step_by(97)
            .map(|at| {
                let end = (at + 97).min(msg.len());
                item(abi::REC_HELLO_PART, dir, msg.len(), at, &msg[at..end])
            })
            .collect()
    };
    let mut out = Vec::new();
    for (ch, sh) in HELLOS {
        let (ch, sh) = (
            hstrace::tls::unhex(ch).expect("fixture"),
            hstrace::tls::unhex(sh).expect("fixture"),
        );
        out.push([&[0u8][..], &ch].concat());
        out.push([&[1u8][..], &sh].concat());
        let conn = Conn {
            rec: abi::REC_CONN,
            conn_id: 1,
            ..Default::default()
        };
        let close = Close {
            rec: abi::REC_CLOSE,
            conn_id: 1,
            ..Default::default()
        };
        for client in [hello(abi::DIR_IN, &ch), pieces(abi::DIR_IN, &ch)] {
            let mut items = vec![2u8];
            for item in [
                client,
                hello(abi::DIR_OUT, &sh),
                vec![bytes(&conn), bytes(&close)],
            ]
            .concat()
            {
                items.extend_from_slice(&(item.len() as u16).to_le_bytes());
                items.extend_from_slice(&item);
            }
            out.push(items);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed-seed slice of `cargo xtask fuzz-parsers`, without its coverage guidance:
    /// every seed, and 4,000 deterministic mutations of each (bit flips, cuts, inserted
    /// bytes, another parser), through every parser.
    #[test]
    fn a_fixed_seed_slice_of_the_parser_fuzzer() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let seeds = seeds();
        assert_eq!(seeds.len(), 20);
        for seed in &seeds {
            one(seed);
            for _ in 0..4000 {
                let mut m = seed.clone();
                match next() % 4 {
                    0 => {
                        for _ in 0..1 + next() % 8 {
                            let at = (next() as usize) % m.len();
                            m[at] ^= 1 << (next() % 8);
                        }
                    }
                    1 => m.truncate(1 + (next() as usize) % m.len()),
                    2 => {
                        let at = (next() as usize) % m.len();
                        let junk: Vec<u8> = (0..1 + next() % 64).map(|_| next() as u8).collect();
                        m.splice(at..at, junk);
                    }
                    _ => m[0] = next() as u8,
                }
                one(&m);
            }
        }
    }
}
