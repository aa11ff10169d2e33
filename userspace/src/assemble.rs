//! From the ring buffer's raw items to finished records: hellos gathered (a hello that came
//! in pieces put back together) and parsed, joined with their connection's record;
//! connections the sweep already reported not reported twice; every record counted. The
//! only code that decodes the ABI for the sinks. What concerns the traced processes (a
//! fork, whether a process's uprobes tie to its connections) is handed back to the source
//! as a `Seen`.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    hash::{BuildHasherDefault, Hasher},
    io,
};

use crate::{
    abi::{self, Close, Conn, Hello},
    clock::Clock,
    container::Containers,
    record::{build, CloseRecord, Hellos, Record},
    sink::Sink,
    stage::Kind,
    tls::{ClientHello, ServerHello},
};

/// Hashes the pipeline's own keys: connection ids and the server's local addresses. The
/// kernel makes them, not a peer, so SipHash's defence against chosen keys (a tenth of
/// the pipeline's time) buys nothing here; SNI and other peer-chosen strings keep it.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    /// Multiply by 2^64 / golden ratio: spreads sequential ids over the high bits the
    /// table looks at first.
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type Keyed = BuildHasherDefault<KeyHasher>;

/// Records the sweep made for connections the kernel will not report on its own (a
/// connection record boxed: it is 472 of the enum's 480 bytes, a close 56).
#[derive(Debug)]
pub enum Swept {
    Conn(Box<Conn>),
    Close(Close),
}

/// Counts of what came through, for `Health`.
#[derive(Debug, Default, Clone)]
pub struct Counts {
    /// connection records handed to the sink, by kind (`Kind::ALL` order)
    pub by_kind: [u64; 4],
    pub closes: u64,
    /// kernel records of connections the sweep had already reported
    pub duplicates: u64,
    /// ring-buffer items of no known kind or too short
    pub undecodable: u64,
}

/// What an item said about the traced processes, for the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// traced process `parent` forked `pid` (cover it with uprobes now)
    Forked { pid: u32, parent: u32 },
    /// a TLS handshake completed on a connection process `tgid` accepted at `t_accept`;
    /// `tied`: its SSL_do_handshake calls were tied to the connection
    Handshake {
        tgid: u32,
        t_accept: u64,
        tied: bool,
    },
}

/// Decodes, joins and de-duplicates; hands finished records to a sink.
pub struct Pipeline {
    asm: Assembler,
    clock: Clock,
    /// connections reported by the sweep, so a late kernel record is not reported twice
    swept: HashSet<u64, Keyed>,
    swept_order: VecDeque<u64>,
    cap: usize,
    pub counts: Counts,
    /// with `--container-labels`: each record's container, by the server's pid (the
    /// source sets it, and forgets processes no longer traced)
    pub containers: Option<Containers>,
}

impl Pipeline {
    /// `cap`: connections remembered at once (hellos waiting, swept ids), as the kernel's.
    pub fn new(cap: usize) -> Pipeline {
        Pipeline {
            asm: Assembler::new(cap),
            clock: Clock::new(),
            swept: HashSet::default(),
            swept_order: VecDeque::new(),
            cap,
            counts: Counts::default(),
            containers: None,
        }
    }

    /// One ring-buffer item: records to `sink`, what it said of the processes returned.
    pub fn item(&mut self, item: &[u8], sink: &mut dyn Sink) -> io::Result<Option<Seen>> {
        let seen = match abi::record_kind(item) {
            Some(abi::REC_HELLO | abi::REC_HELLO_PART) => abi::read_hello(item).map(|h| {
                self.asm.hello(&h);
                None
            }),
            Some(abi::REC_CONN) => match abi::read_record::<Conn>(item) {
                Some(c) => Some(self.conn(&c, sink)?),
                None => None,
            },
            Some(abi::REC_CLOSE) => match abi::read_record::<Close>(item) {
                Some(c) => Some(self.close(&c, sink).map(|()| None)?),
                None => None,
            },
            Some(abi::REC_FORK) => abi::read_record::<abi::Fork>(item).map(|f| {
                Some(Seen::Forked {
                    pid: f.tgid,
                    parent: f.parent,
                })
            }),
            _ => None,
        };
        // None: not an item of a known kind, or too short for its kind
        Ok(seen.unwrap_or_else(|| {
            self.counts.undecodable += 1;
            None
        }))
    }

    /// A hello, as the kernel sends it (for the pipeline benchmark).
    pub fn hello(&mut self, h: &Hello) {
        self.asm.hello(h);
    }

    /// A connection's record (with its close, when it carries one).
    pub fn conn(&mut self, c: &Conn, sink: &mut dyn Sink) -> io::Result<Option<Seen>> {
        let seen = self.conn_record(c, sink)?;
        if let Some(close) = c.close() {
            self.close(&close, sink)?;
        }
        Ok(seen)
    }

    fn conn_record(&mut self, c: &Conn, sink: &mut dyn Sink) -> io::Result<Option<Seen>> {
        log::trace!("{c:?}");
        if self.swept.contains(&c.conn_id) {
            self.counts.duplicates += 1;
            return Ok(None);
        }
        let mut rec = self.asm.conn(c, &self.clock);
        if let Some(k) = &mut self.containers {
            rec.container = k.lookup(rec.pid);
        }
        self.counts.by_kind[rec.kind as usize] += 1;
        sink.connection(&rec)?;
        // a TLS handshake that completed
        Ok(
            matches!(rec.kind, Kind::Full | Kind::Resumed).then_some(Seen::Handshake {
                tgid: c.tgid,
                t_accept: c.t_accept,
                tied: c.flags & abi::F_UPROBE != 0,
            }),
        )
    }

    pub fn close(&mut self, c: &Close, sink: &mut dyn Sink) -> io::Result<()> {
        self.counts.closes += 1;
        let mut close = CloseRecord::new(c, &self.clock);
        if let Some(k) = &mut self.containers {
            close.container = k.lookup(close.pid);
        }
        sink.close(&close)
    }

    /// A record the sweep made.
    pub fn swept(&mut self, s: Swept, sink: &mut dyn Sink) -> io::Result<Option<Seen>> {
        match s {
            // (the sweep's own closes come as Swept::Close)
            Swept::Conn(c) => {
                let seen = self.conn_record(&c, sink)?;
                if self.swept_order.len() >= self.cap {
                    if let Some(old) = self.swept_order.pop_front() {
                        self.swept.remove(&old);
                    }
                }
                self.swept.insert(c.conn_id);
                self.swept_order.push_back(c.conn_id);
                Ok(seen)
            }
            Swept::Close(c) => self.close(&c, sink).map(|()| None),
        }
    }

    /// Hellos whose connection record never came (evicted, lost).
    pub fn hellos_unmatched(&self) -> u64 {
        self.asm.hellos_unmatched
    }

    /// Pieces of hellos not kept for want of room.
    pub fn hello_pieces_dropped(&self) -> u64 {
        self.asm.hello_pieces_dropped
    }

    /// Hellos waiting for their connection's record.
    pub fn pending(&self) -> usize {
        self.asm.pending()
    }

    pub fn reported(&self, kind: Kind) -> u64 {
        self.counts.by_kind[kind as usize]
    }
}

/// Gathers each connection's hellos and joins them with its record, and remembers which
/// local addresses carry TLS. Hellos arrive first; a connection whose record never comes
/// (evicted, lost) is forgotten oldest-first past `cap`.
pub struct Assembler {
    hellos: HashMap<u64, Gathered, Keyed>,
    order: VecDeque<u64>,
    cap: usize,
    /// (family, address, port)
    tls_addrs: HashSet<(u16, [u8; 16], u16), Keyed>,
    pub hellos_unmatched: u64,
    /// bytes held for hellos still in pieces, at most PIECE_BYTES_MAX
    piece_bytes: usize,
    /// pieces of hellos not kept for want of room (their hello is reported truncated)
    pub hello_pieces_dropped: u64,
}

/// Bytes held at once for hellos coming in pieces (a hello in 1-byte records, from many
/// clients that never finish it, must not grow the tracer without bound).
const PIECE_BYTES_MAX: usize = 16 << 20;

/// Local addresses remembered as carrying TLS (one per listening socket in practice).
const MAX_TLS_ADDRS: usize = 4096;

impl Assembler {
    pub fn new(cap: usize) -> Assembler {
        Assembler {
            hellos: HashMap::default(),
            order: VecDeque::new(),
            cap,
            tls_addrs: HashSet::default(),
            hellos_unmatched: 0,
            piece_bytes: 0,
            hello_pieces_dropped: 0,
        }
    }

    pub fn hello(&mut self, h: &Hello) {
        let id = h.conn_id;
        if h.offset != 0 && self.piece_bytes + h.data.len() > PIECE_BYTES_MAX {
            self.hello_pieces_dropped += 1;
            return;
        }
        if !self.hellos.contains_key(&id) {
            while self.hellos.len() >= self.cap {
                let Some(old) = self.order.pop_front() else {
                    break;
                };
                if let Some(gone) = self.hellos.remove(&old) {
                    self.piece_bytes -= gone.piece_bytes();
                    self.hellos_unmatched += 1;
                }
            }
            self.order.push_back(id);
        }
        let hellos = self.hellos.entry(id).or_default();
        let before = hellos.piece_bytes();
        hellos.add(h);
        self.piece_bytes = self.piece_bytes + hellos.piece_bytes() - before;
    }

    fn conn(&mut self, c: &Conn, clock: &Clock) -> Record {
        let gathered = self.hellos.remove(&c.conn_id).unwrap_or_default();
        self.piece_bytes -= gathered.piece_bytes();
        let hellos = gathered.finish();
        // ids whose record came are still queued in `order`: trim them now and then
        if self.order.len() > 2 * self.cap.max(self.hellos.len()) {
            let live = &self.hellos;
            self.order.retain(|id| live.contains_key(id));
        }
        let local = (c.family, c.saddr, c.sport);
        // the server called SSL_do_handshake on it: a TLS port, whatever came in
        let ssl = c.flags & abi::F_UPROBE != 0;
        let known = self.tls_addrs.contains(&local);
        let plain_port = !ssl && !known;
        if !known
            && (ssl || c.outcome != abi::OUTCOME_NOT_TLS && c.rec_types[abi::FL_C1] != 0)
            && self.tls_addrs.len() < MAX_TLS_ADDRS
        {
            self.tls_addrs.insert(local);
        }
        build(c, hellos, clock, plain_port)
    }

    pub fn pending(&self) -> usize {
        self.hellos.len()
    }
}

/// A connection's hellos, parsed as they arrive (the raw bytes are not kept, except those
/// of a hello still coming in pieces).
#[derive(Debug, Default)]
struct Gathered {
    parsed: Hellos,
    /// a hello coming in pieces, by direction: the message so far, header included
    pieces: [Vec<u8>; 2],
    /// its length, 4-byte header included
    piece_len: [u32; 2],
}

impl Gathered {
    /// Parse a captured hello, or add a piece of one; a later hello of the same direction
    /// (after a HelloRetryRequest) replaces the earlier.
    fn add(&mut self, h: &Hello) {
        if h.offset != 0 {
            self.add_piece(h);
        } else if h.dir == abi::DIR_IN {
            let earlier = self
                .parsed
                .client
                .replace(ClientHello::parse(h.bytes(), h.msg_len as usize));
            if let Some(Ok(first)) = earlier {
                self.parsed.first_client.get_or_insert(first);
            }
        } else {
            let earlier = self
                .parsed
                .server
                .replace(ServerHello::parse(h.bytes(), h.msg_len as usize));
            if let Some(Ok(hrr)) =
                earlier.filter(|e| e.as_ref().is_ok_and(|s| s.hello_retry_request))
            {
                self.parsed.retry_request = Some(hrr);
            }
        }
    }

    /// A piece of a hello that came over several records or reads, in order: the first
    /// (offset 4) starts the message, with its handshake header rebuilt; it is parsed once
    /// it is all here (or all that is kept, `abi::HELLO_CAP`). A piece out of place (one
    /// before it was lost) is not added: what came is parsed at the end, as truncated.
    fn add_piece(&mut self, h: &Hello) {
        let d = (h.dir & 1) as usize;
        let buf = &mut self.pieces[d];
        if h.offset == 4 {
            let ty = if h.dir == abi::DIR_IN {
                abi::HT_CLIENT_HELLO
            } else {
                abi::HT_SERVER_HELLO
            };
            let len = h.msg_len.saturating_sub(4).to_be_bytes();
            buf.clear();
            buf.extend_from_slice(&[ty, len[1], len[2], len[3]]);
            self.piece_len[d] = h.msg_len;
        } else if buf.is_empty() || h.offset as usize != buf.len() {
            return;
        }
        let room = abi::HELLO_CAP.saturating_sub(buf.len());
        buf.extend_from_slice(&h.data[..h.data.len().min(room)]);
        if buf.len() >= (self.piece_len[d] as usize).min(abi::HELLO_CAP) {
            self.whole(d);
        }
    }

    /// The hello in pieces of direction `d`, parsed as far as it came.
    fn whole(&mut self, d: usize) {
        let h = Hello {
            dir: d as u32,
            msg_len: self.piece_len[d],
            data: std::mem::take(&mut self.pieces[d]).into(),
            ..Default::default()
        };
        self.add(&h);
    }

    /// The connection's record came: a hello still in pieces is parsed as far as it came.
    fn finish(mut self) -> Hellos {
        for d in 0..2 {
            if !self.pieces[d].is_empty() {
                self.whole(d);
            }
        }
        self.parsed
    }

    /// Bytes held for hellos still in pieces.
    fn piece_bytes(&self) -> usize {
        self.pieces.iter().map(Vec::capacity).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assembler_is_bounded() {
        let mut a = Assembler::new(2);
        let clock = Clock::new();
        for id in 1..=5u64 {
            let h = Hello {
                conn_id: id,
                ..Default::default()
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

    /// What a sink was handed: connection ids, and closes as (id, pid, exchanges, bytes
    /// in, bytes out, duration).
    #[derive(Default)]
    #[allow(clippy::type_complexity)]
    struct Seen(Vec<u64>, Vec<(u64, u32, u32, u64, u64, Option<u64>)>);

    impl Sink for Seen {
        fn connection(&mut self, r: &Record) -> io::Result<()> {
            self.0.push(r.conn_id);
            Ok(())
        }
        fn close(&mut self, c: &CloseRecord) -> io::Result<()> {
            self.1.push((
                c.conn_id,
                c.pid,
                c.exchanges,
                c.bytes_in,
                c.bytes_out,
                c.duration_ns,
            ));
            Ok(())
        }
    }

    /// A record the kernel made as the connection ended carries its close: the sink gets
    /// both, the close with the totals, and a close alone still comes after a record
    /// made earlier. A record the sweep already reported is not reported again, but the
    /// close it carries is.
    #[test]
    fn a_record_made_at_the_end_carries_its_close() {
        let mut p = Pipeline::new(16);
        let mut seen = Seen::default();
        let ended = Conn {
            conn_id: 7,
            tgid: 42,
            outcome: abi::OUTCOME_FAILED,
            flags: abi::F_CLOSED,
            t_accept: 1_000,
            t_end: 5_000,
            exchanges: 1,
            bytes_in: 300,
            bytes_out: 4_000,
            ..Default::default()
        };
        p.conn(&ended, &mut seen).unwrap();
        assert_eq!(seen.0, vec![7]);
        assert_eq!(seen.1.len(), 1);
        assert_eq!(seen.1[0], (7, 42, 1, 300, 4_000, Some(4_000)));
        // reported earlier: its close comes on its own
        let open = Conn {
            conn_id: 8,
            outcome: abi::OUTCOME_FAILED,
            ..Default::default()
        };
        p.conn(&open, &mut seen).unwrap();
        assert_eq!((seen.0.len(), seen.1.len()), (2, 1));
        // swept first, then the kernel's record with its close
        p.swept(
            Swept::Conn(Box::new(Conn {
                conn_id: 9,
                ..ended
            })),
            &mut seen,
        )
        .unwrap();
        p.conn(
            &Conn {
                conn_id: 9,
                ..ended
            },
            &mut seen,
        )
        .unwrap();
        assert_eq!(seen.0, vec![7, 8, 9]);
        assert_eq!(seen.1.iter().map(|c| c.0).collect::<Vec<_>>(), vec![7, 9]);
        assert_eq!((p.counts.duplicates, p.counts.closes), (1, 2));
    }

    /// A hello as the kernel sends it when it came in several records or reads: its body
    /// in pieces of `size` bytes, in order, `skip` of them lost.
    fn in_pieces(msg: &[u8], size: usize, skip: Option<usize>) -> Gathered {
        let mut h = Gathered::default();
        for (i, at) in (4..msg.len()).step_by(size).enumerate() {
            if Some(i) == skip {
                continue;
            }
            h.add(&Hello {
                dir: abi::DIR_IN,
                conn_id: 1,
                msg_len: msg.len() as u32,
                offset: at as u32,
                data: msg[at..(at + size).min(msg.len())].to_vec().into(),
            });
        }
        h
    }

    #[test]
    fn a_hello_in_pieces_parses_as_the_whole() {
        let msg = crate::tls::unhex(include_str!(
            "../tests/fixtures/hello/tls13_psk.client_hello.hex"
        ))
        .unwrap();
        let whole = ClientHello::parse(&msg, msg.len()).unwrap();
        for size in [1, 7, 300, msg.len()] {
            let g = in_pieces(&msg, size, None);
            assert_eq!(g.piece_bytes(), 0, "nothing held once parsed");
            let ch = g.finish().client.expect("parsed").expect("parses");
            assert_eq!(
                (ch.sni.clone(), ch.psk, ch.truncated),
                (whole.sni.clone(), whole.psk, false),
                "pieces of {size}"
            );
        }
        // a piece lost: the rest cannot be placed, and what came is parsed as truncated
        let h = in_pieces(&msg, 50, Some(3)).finish();
        assert!(h.client.expect("parsed").is_ok_and(|ch| ch.truncated));
        // a piece that does not start a hello, with nothing before it, is not kept
        let mut g = Gathered::default();
        g.add(&Hello {
            dir: abi::DIR_IN,
            msg_len: 100,
            offset: 40,
            data: vec![0; 10].into(),
            ..Default::default()
        });
        assert!(g.finish().client.is_none());
    }

    #[test]
    fn a_hello_in_pieces_is_kept_up_to_the_cap() {
        // a 20,000-byte hello: parsed once HELLO_CAP bytes are in, the rest not held
        let msg_len = 20_000usize;
        let mut h = Gathered::default();
        let mut at = 4;
        while at < msg_len {
            h.add(&Hello {
                dir: abi::DIR_IN,
                msg_len: msg_len as u32,
                offset: at as u32,
                data: vec![0; 1000].into(),
                ..Default::default()
            });
            at += 1000;
            assert!(h.piece_bytes() <= 2 * abi::HELLO_CAP);
        }
        assert!(h.parsed.client.is_some(), "parsed at the cap");
        assert_eq!(h.piece_bytes(), 0);
    }
}
