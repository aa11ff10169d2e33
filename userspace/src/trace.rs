//! `hstrace trace`: load, attach, follow the selected processes, print one record per
//! connection, and account for every connection at exit.

use std::{
    collections::{BTreeMap, BTreeSet, HashSet, VecDeque},
    io::{self, Write},
    time::Duration,
};

use anyhow::{Context, Result};
use aya::{
    maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    Btf, Ebpf, EbpfLoader,
};
use tokio::io::unix::AsyncFd;

use crate::{
    abi::{self, Conn, Hello},
    preflight, probes,
    record::{Assembler, Clock, CloseRecord, Record},
    targets::{self, Selector},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// What the sweep found: records the kernel will not send.
enum Swept {
    Conn(Conn),
    Close(abi::Close),
}

/// A response is complete when the server reads again, or after this long without.
const RESPONSE_IDLE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
pub struct Options {
    pub selector: Selector,
    pub format: Format,
    pub duration: Option<Duration>,
    pub uprobes: probes::Uprobes,
    pub max_conns: u32,
    /// A connection idle this long is reported as it stands (failed: timeout, if its
    /// handshake never completed).
    pub idle_timeout: Duration,
    /// Probe-table alternatives using these hooks are passed over (`--avoid-hook`).
    pub avoid_hooks: Vec<String>,
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Counts by outcome, printed at exit.
#[derive(Default)]
struct Totals {
    by_kind: BTreeMap<&'static str, u64>,
    /// kernel records of connections the sweep had already reported
    duplicates: u64,
}

/// Turns ring-buffer records (and the sweep's) into printed lines.
struct Output<W: Write> {
    format: Format,
    asm: Assembler,
    clock: Clock,
    totals: Totals,
    /// connections reported by the sweep, so a late kernel record is not printed twice
    swept: HashSet<u64>,
    swept_order: VecDeque<u64>,
    cap: usize,
    out: io::BufWriter<W>,
    /// the line being written
    buf: Vec<u8>,
}

impl<W: Write> Output<W> {
    fn new(format: Format, cap: usize, w: W) -> Self {
        Output {
            format,
            asm: Assembler::new(cap),
            clock: Clock::new(),
            totals: Totals::default(),
            swept: HashSet::new(),
            swept_order: VecDeque::new(),
            cap,
            out: io::BufWriter::new(w),
            buf: Vec::with_capacity(4096),
        }
    }

    /// One line: JSON, or in text mode the record's `text` (none: not printed in text).
    fn line<T>(
        &mut self,
        rec: &T,
        json: fn(&T, &mut Vec<u8>),
        text: Option<fn(&T) -> String>,
    ) -> io::Result<()> {
        self.buf.clear();
        match (self.format, text) {
            (Format::Json, _) => json(rec, &mut self.buf),
            (Format::Text, Some(text)) => self.buf.extend_from_slice(text(rec).as_bytes()),
            (Format::Text, None) => return Ok(()),
        }
        self.buf.push(b'\n');
        self.out.write_all(&self.buf)
    }

    fn conn(&mut self, c: &Conn) -> io::Result<()> {
        if self.swept.contains(&c.conn_id) {
            self.totals.duplicates += 1;
            return Ok(());
        }
        let rec = self.asm.conn(c, &self.clock);
        *self.totals.by_kind.entry(rec.kind).or_default() += 1;
        self.line(&rec, Record::json, Some(Record::text))
    }

    /// Close lines are JSON only: text mode shows one line per connection.
    fn close(&mut self, c: &abi::Close) -> io::Result<()> {
        let rec = self.asm.close(c, &self.clock);
        self.line(&rec, CloseRecord::json, None)
    }

    fn swept(&mut self, s: Swept) -> io::Result<()> {
        match s {
            Swept::Conn(c) => {
                self.conn(&c)?;
                if self.swept_order.len() >= self.cap {
                    if let Some(old) = self.swept_order.pop_front() {
                        self.swept.remove(&old);
                    }
                }
                self.swept.insert(c.conn_id);
                self.swept_order.push_back(c.conn_id);
                Ok(())
            }
            Swept::Close(c) => self.close(&c),
        }
    }

    fn drain(&mut self, ring: &mut RingBuf<MapData>) -> io::Result<()> {
        while let Some(item) = ring.next() {
            match abi::record_kind(&item) {
                Some(abi::REC_HELLO) => {
                    if let Some(h) = abi::read_record::<Hello>(&item) {
                        self.asm.hello(&h);
                    }
                }
                Some(abi::REC_CONN) => {
                    if let Some(c) = abi::read_record::<Conn>(&item) {
                        self.conn(&c)?;
                    }
                }
                Some(abi::REC_CLOSE) => {
                    if let Some(c) = abi::read_record::<abi::Close>(&item) {
                        self.close(&c)?;
                    }
                }
                _ => log::warn!("unknown record kind in the ring buffer"),
            }
        }
        self.flush()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

pub struct Tracer {
    bpf: Ebpf,
    ssl: probes::SslProbes,
    tgids: BpfHashMap<MapData, u32, u8>,
    counters: PerCpuArray<MapData, u64>,
    opts: Options,
    /// processes already told about (no libssl, attach errors), to say it once
    warned: HashSet<u32>,
    pub choices: Vec<probes::Choice>,
}

impl Tracer {
    /// Check, load and attach everything; returns once the selected processes are traced.
    pub fn attach(opts: Options) -> Result<Tracer> {
        preflight::privileges()?;
        preflight::btf()?;
        preflight::tracefs()?;
        preflight::memlock();
        targets::check(&opts.selector)?;

        // accept is hooked at the syscall where the kernel has that tracepoint; otherwise
        // in the kernel, and each connection's fd is learned at its first read or write
        let lazy_fd = !probes::tracepoint_exists("syscalls", "sys_exit_accept4");
        let all = opts.selector.is_all();
        let port = opts.selector.port.unwrap_or(0);
        let mut bpf = EbpfLoader::new()
            .override_global("targ_all", &(all as u8), true)
            .override_global("targ_port", &port, true)
            .override_global("targ_lazy_fd", &(lazy_fd as u8), true)
            .map_max_entries("conns", opts.max_conns)
            .map_max_entries("fds", opts.max_conns)
            .map_max_entries("est_socks", opts.max_conns)
            .map_max_entries("ssl_socks", opts.max_conns)
            .load(crate::BPF_OBJECT)
            .context("loading the BPF object")?;
        let btf = Btf::from_sys_fs().context("reading the kernel's BTF")?;
        let choices = probes::attach_kernel_probes(&mut bpf, &btf, &opts.avoid_hooks)?;
        for c in &choices {
            match &c.hooks {
                Some(h) => log::info!("probe group {}: {:?}", c.group, h),
                None => {
                    let g = probes::GROUPS
                        .iter()
                        .find(|g| g.name == c.group)
                        .expect("from the table");
                    log::warn!(
                        "probe group {} unavailable ({}): {}",
                        c.group,
                        c.errors.join("; "),
                        g.without
                    );
                }
            }
            for e in &c.errors {
                log::debug!("probe group {}: alternative failed: {e}", c.group);
            }
        }
        let ssl = probes::SslProbes::load(&mut bpf, opts.uprobes)?;
        let tgids =
            BpfHashMap::try_from(bpf.take_map("traced_tgids").context("map traced_tgids")?)?;
        let counters = PerCpuArray::try_from(bpf.take_map("counters").context("map counters")?)?;
        let mut t = Tracer {
            bpf,
            ssl,
            tgids,
            counters,
            opts,
            warned: HashSet::new(),
            choices,
        };
        t.rescan();
        Ok(t)
    }

    /// Follow the selection: trace new processes (new workers after a reload), forget
    /// exited ones (returned).
    pub fn rescan(&mut self) -> Vec<u32> {
        let mut gone = Vec::new();
        let want = targets::resolve(&self.opts.selector);
        for pid in &want {
            if self.tgids.get(pid, 0).is_err() {
                if let Err(e) = self.tgids.insert(pid, 1, 0) {
                    log::warn!(
                        "cannot trace pid {pid}: {e} (more than {} processes?)",
                        abi::MAX_TGIDS
                    );
                }
            }
        }
        // the kernel adds processes too (forks of traced ones; every acceptor with no selector)
        let traced: BTreeSet<u32> = self.tgids.keys().filter_map(|k| k.ok()).collect();
        for pid in &traced {
            if !targets::exists(*pid) {
                let _ = self.tgids.remove(pid);
                self.ssl.detach(&mut self.bpf, *pid);
                self.warned.remove(pid);
                gone.push(*pid);
            } else if self.ssl.enabled()
                && !self.ssl.is_attached(*pid)
                && !self.warned.contains(pid)
            {
                self.attach_ssl(*pid);
            }
        }
        gone
    }

    /// Connections the kernel has not reported and will not soon: those of servers that
    /// exited without closing them (reported and forgotten, with their close), and those
    /// idle too long (reported, then only counted by the kernel until they close). A
    /// response is complete when the server reads again; one whose server does not (it
    /// handed the connection back to an event loop) is reported once it has been idle
    /// for RESPONSE_IDLE.
    fn sweep(&mut self, gone: &[u32]) -> Vec<Swept> {
        let Some(map) = self.bpf.map_mut("conns") else {
            return Vec::new();
        };
        let Ok(mut conns) = BpfHashMap::<_, u64, abi::ConnState>::try_from(map) else {
            return Vec::new();
        };
        sweep_conns(&mut conns, gone, self.opts.idle_timeout)
    }

    fn attach_ssl(&mut self, pid: u32) {
        let name = targets::comm(pid).unwrap_or_default();
        let mut errors = Vec::new();
        for target in targets::ssl_candidates(pid) {
            match self.ssl.attach(&mut self.bpf, pid, &target) {
                Ok(()) => {
                    log::info!(
                        "pid {pid} ({name}): SSL_do_handshake uprobes on {}",
                        target.display()
                    );
                    return;
                }
                Err(e) => errors.push(format!("{}: {e:#}", target.display())),
            }
        }
        self.warned.insert(pid);
        log::warn!(
            "pid {pid} ({name}) has no libssl with SSL_do_handshake: tracing it from the wire only, as with --no-uprobes"
        );
        log::debug!("pid {pid}: {}", errors.join("; "));
    }

    fn counter(&self, idx: u32) -> u64 {
        self.counters
            .get(&idx, 0)
            .map(|v| v.iter().sum())
            .unwrap_or(0)
    }

    /// Run until Ctrl-C or --duration; print records to stdout, totals to stderr.
    pub async fn run(mut self) -> Result<()> {
        let ring = RingBuf::try_from(self.bpf.take_map("events").context("map events")?)?;
        // SAFETY: the ring buffer owns its map fd, which stays open and the same while the
        // AsyncFd owns the ring buffer
        let mut ring =
            unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
                .map_err(|e| anyhow::anyhow!("registering the ring buffer with tokio: {e}"))?;
        let stdout = io::stdout();
        let mut out = Output::new(
            self.opts.format,
            self.opts.max_conns as usize,
            stdout.lock(),
        );
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        // the kernel wakes us only when records pile up: drain on a timer too
        let mut drain = tokio::time::interval(Duration::from_millis(abi::DRAIN_MS));
        let deadline = self.opts.duration.map(|d| tokio::time::Instant::now() + d);
        let stop = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(stop);
        let res: Result<()> = loop {
            let step = tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard?;
                    let r = out.drain(guard.get_inner_mut());
                    guard.clear_ready();
                    r
                }
                _ = drain.tick() => out.drain(ring.get_mut()),
                _ = tick.tick() => {
                    let gone = self.rescan();
                    self.sweep(&gone).into_iter().try_for_each(|s| out.swept(s)).and_then(|_| out.flush())
                }
                _ = tokio::signal::ctrl_c() => break Ok(()),
                _ = &mut stop => break Ok(()),
            };
            if let Err(e) = step {
                break Err(e.into());
            }
        };
        // the records already in the ring buffer
        let _ = out.drain(ring.get_mut());
        if let Err(e) = &res {
            if e.downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            {
                return Ok(());
            }
        }
        self.report(&out);
        res
    }

    /// Totals on stderr: what was printed, and every connection that was not.
    fn report<W: Write>(&self, out: &Output<W>) {
        let (totals, asm) = (&out.totals, &out.asm);
        let printed: u64 = totals.by_kind.values().sum();
        let kinds: Vec<String> = totals
            .by_kind
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        eprintln!("hstrace: {printed} connections ({})", kinds.join(", "));
        let tracked = self.counter(abi::C_CONNS);
        let dropped = self.counter(abi::C_RECORDS_DROPPED);
        let hellos = self.counter(abi::C_HELLOS_DROPPED);
        let evicted = self.counter(abi::C_CONN_EVICTED);
        let closes = self.counter(abi::C_CLOSES_DROPPED);
        let slots = self.counter(abi::C_IO_SLOT_TAKEN);
        let in_progress = self.in_progress_count();
        eprintln!(
            "hstrace: tracked {tracked}, still in progress {in_progress}, records lost (ring buffer full) {dropped}, hellos lost {hellos}, hellos without a record {}, close lines lost {closes}, state evicted {evicted}, reads/writes lost to a shared thread slot {slots}",
            asm.hellos_unmatched
        );
        for (idx, name) in abi::COUNTERS {
            log::debug!("counter {name} = {}", self.counter(idx));
        }
        for c in &self.choices {
            if c.hooks.is_none() {
                eprintln!("hstrace: probe group {} was unavailable", c.group);
            }
        }
    }

    /// Connections still in flight in the kernel.
    fn in_progress_count(&self) -> usize {
        let Some(map) = self.bpf.map("conns") else {
            return 0;
        };
        BpfHashMap::<_, u64, [u8; abi::CONN_STATE_BYTES]>::try_from(map)
            .map(|m| m.keys().filter(|k| k.is_ok()).count())
            .unwrap_or(0)
    }
}

/// Connections per second the userspace pipeline (hello parsing, classification, stages,
/// JSON) sustains on one core, fed synthetic records built from real captured hellos at
/// full speed: what `cargo xtask bench` reports. Each connection is 4 ring-buffer records
/// (ClientHello, ServerHello, connection, close) and 2 JSON lines. An error if they did
/// not all come out as the full TLS 1.3 handshakes they are.
pub fn pipeline_connections_per_sec(n: u64) -> Result<f64> {
    fn hello(dir: u32, hex: &str) -> Hello {
        let bytes: Vec<u8> = hex
            .split_whitespace()
            .collect::<String>()
            .as_bytes()
            .chunks(2)
            .filter_map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
            .collect();
        let mut h = Hello {
            rec: abi::REC_HELLO,
            dir,
            conn_id: 0,
            msg_len: bytes.len() as u32,
            cap_len: 0,
            data: [0; abi::HELLO_CAP],
        };
        let len = bytes.len().min(abi::HELLO_CAP);
        h.data[..len].copy_from_slice(&bytes[..len]);
        h.cap_len = len as u32;
        h
    }
    let mut ch = hello(
        abi::DIR_IN,
        include_str!("../tests/fixtures/hello/tls13_full.client_hello.hex"),
    );
    let mut sh = hello(
        abi::DIR_OUT,
        include_str!("../tests/fixtures/hello/tls13_full.server_hello.hex"),
    );
    let mut c = Conn {
        rec: abi::REC_CONN,
        tgid: 1,
        comm: *b"nginx\0\0\0\0\0\0\0\0\0\0\0",
        saddr: [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        daddr: [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        sport: 443,
        dport: 40000,
        family: 2,
        outcome: abi::OUTCOME_DONE,
        t_est: 1_000,
        t_accept: 2_000,
        t_arrive: [1_500, 0, 9_000, 0],
        t_first: [3_000, 4_000, 9_500, 10_000],
        t_last: [3_100, 8_000, 9_600, 11_000],
        t_hs_done: 11_500,
        t_end: 20_000,
        rec_types: [
            abi::RT_HANDSHAKE,
            abi::RT_HANDSHAKE | abi::RT_APPDATA,
            abi::RT_APPDATA,
            abi::RT_APPDATA,
        ],
        t_req_arrive: 12_000,
        t_req_read: 12_500,
        t_resp_first: 13_000,
        t_resp_last: 14_000,
        ..Default::default()
    };
    let close = |id| abi::Close {
        rec: abi::REC_CLOSE,
        conn_id: id,
        t_accept: 2_000,
        t_close: 30_000,
        exchanges: 1,
        ..Default::default()
    };
    let mut out = Output::new(Format::Json, 65536, io::sink());
    let start = std::time::Instant::now();
    for id in 1..=n {
        ch.conn_id = id;
        sh.conn_id = id;
        c.conn_id = id;
        out.asm.hello(&ch);
        out.asm.hello(&sh);
        out.conn(&c).expect("sink");
        out.close(&close(id)).expect("sink");
    }
    let per_sec = n as f64 / start.elapsed().as_secs_f64();
    let full = out.totals.by_kind.get("full").copied().unwrap_or(0);
    if full != n || out.totals.by_kind.len() != 1 || out.asm.pending() != 0 {
        anyhow::bail!(
            "the pipeline made {:?} of {n} full handshakes ({} hellos left unmatched)",
            out.totals.by_kind,
            out.asm.pending()
        );
    }
    Ok(per_sec)
}

/// One pass of the sweep over the kernel's connection map (see `Tracer::sweep`).
fn sweep_conns(
    conns: &mut BpfHashMap<&mut MapData, u64, abi::ConnState>,
    gone: &[u32],
    idle_timeout: Duration,
) -> Vec<Swept> {
    let now = monotonic_ns();
    let idle_limit = idle_timeout.as_nanos() as u64;
    let response_idle = RESPONSE_IDLE.min(idle_timeout).as_nanos() as u64;
    let mut out = Vec::new();
    let mut exited = Vec::new();
    let mut idle = Vec::new();
    for (sk, state) in conns.iter().filter_map(|e| e.ok()) {
        let Some(mut c) = abi::read_record::<Conn>(&state) else {
            continue;
        };
        let unreported = state[abi::CONN_EMITTED_OFFSET] == 0;
        let last = [c.t_accept, c.t_hs_done, c.t_req_read, c.t_resp_last]
            .into_iter()
            .chain(c.t_last)
            .max()
            .unwrap_or(0);
        let quiet = now.saturating_sub(last);
        let exit = gone.contains(&c.tgid);
        let expired = unreported
            && (quiet >= idle_limit || (c.phase == abi::PH_RESPONSE && quiet >= response_idle));
        if !exit && !expired {
            continue;
        }
        if unreported {
            c.t_end = now;
            c.outcome = if state[abi::CONN_NOT_TLS_OFFSET] != 0 {
                abi::OUTCOME_NOT_TLS
            } else if c.phase != abi::PH_HANDSHAKE {
                abi::OUTCOME_DONE
            } else {
                c.failure = if exit {
                    abi::FAIL_SERVER_EXITED
                } else {
                    abi::FAIL_TIMEOUT
                };
                abi::OUTCOME_FAILED
            };
            out.push(Swept::Conn(c));
        }
        if exit {
            exited.push(sk);
            out.push(Swept::Close(abi::Close {
                rec: abi::REC_CLOSE,
                tgid: c.tgid,
                conn_id: c.conn_id,
                t_accept: c.t_accept,
                t_close: now,
                bytes_in: c.bytes_in,
                bytes_out: c.bytes_out,
                ..Default::default()
            }));
        } else {
            idle.push((sk, state));
        }
    }
    for sk in exited {
        let _ = conns.remove(&sk);
    }
    // reported here: the kernel only counts bytes and exchanges from now on
    for (sk, mut state) in idle {
        state[abi::CONN_EMITTED_OFFSET] = 1;
        state[abi::CONN_PHASE_OFFSET] = abi::PH_DONE;
        let _ = conns.insert(sk, state, 0);
    }
    out
}

/// Milliseconds one sweep takes over `n` live connections that all stay (nothing idle,
/// nothing exited: the steady state it costs every second), median of 9. Loads the BPF
/// object, attaches nothing, fills the map from userspace; for `cargo xtask bench`.
pub fn sweep_ms(n: u32) -> Result<f64> {
    let mut bpf = EbpfLoader::new()
        .map_max_entries("conns", n)
        .load(crate::BPF_OBJECT)
        .context("loading the BPF object")?;
    let mut conns =
        BpfHashMap::<_, u64, abi::ConnState>::try_from(bpf.map_mut("conns").context("map conns")?)?;
    // reported, and accepted just now: nothing to take
    let mut state = [0u8; abi::CONN_STATE_BYTES];
    state[abi::CONN_EMITTED_OFFSET] = 1;
    state[abi::CONN_PHASE_OFFSET] = abi::PH_DONE;
    let t_accept = std::mem::offset_of!(Conn, t_accept);
    state[t_accept..t_accept + 8].copy_from_slice(&monotonic_ns().to_ne_bytes());
    for i in 0..n as u64 {
        conns.insert(0xffff_0000_0000_0000 | (i << 10), state, 0)?;
    }
    let mut times = Vec::new();
    for _ in 0..9 {
        let start = std::time::Instant::now();
        let swept = sweep_conns(&mut conns, &[], Duration::from_secs(3600));
        times.push(start.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(swept.is_empty(), "the sweep took live connections");
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}
