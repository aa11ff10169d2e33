//! `hstrace trace`: load, attach, follow the selected processes, print one record per
//! connection, and account for every connection at exit.

use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
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
    record::{Assembler, Clock, Record},
    targets::{self, Selector},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub selector: Selector,
    pub format: Format,
    pub duration: Option<Duration>,
    pub uprobes: bool,
    pub max_conns: u32,
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
    by_kind: BTreeMap<String, u64>,
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
        let choices = probes::attach_kernel_probes(&mut bpf, &btf)?;
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
        let mut ssl = probes::SslProbes::default();
        if opts.uprobes {
            ssl.load(&mut bpf)?;
        }
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
    /// exited ones. Returns the records of connections their exit left behind.
    pub fn rescan(&mut self) -> Vec<Conn> {
        let mut gone = Vec::new();
        let want = targets::resolve(&self.opts.selector);
        for pid in &want {
            if self.tgids.get(pid, 0).is_err() {
                if let Err(e) = self.tgids.insert(pid, 1, 0) {
                    log::warn!("cannot trace pid {pid}: {e} (more than --max-processes?)");
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
            } else if self.opts.uprobes && !self.ssl.is_attached(*pid) && !self.warned.contains(pid)
            {
                self.attach_ssl(*pid);
            }
        }
        if gone.is_empty() {
            Vec::new()
        } else {
            self.sweep_exited(&gone)
        }
    }

    /// Connections of exited servers that the kernel never saw closed: send their
    /// records from here, so none is lost without a word.
    fn sweep_exited(&mut self, gone: &[u32]) -> Vec<Conn> {
        let Some(map) = self.bpf.map_mut("conns") else {
            return Vec::new();
        };
        let Ok(mut conns) = BpfHashMap::<_, u64, abi::ConnState>::try_from(map) else {
            return Vec::new();
        };
        let now = monotonic_ns();
        let mut out = Vec::new();
        let mut stale = Vec::new();
        for (sk, state) in conns.iter().filter_map(|e| e.ok()) {
            let Some(mut c) = abi::read_record::<Conn>(&state) else {
                continue;
            };
            if !gone.contains(&c.tgid) {
                continue;
            }
            stale.push(sk);
            if state[abi::CONN_EMITTED_OFFSET] == 0 {
                c.t_end = now;
                if c.t_hs_done != 0 {
                    c.outcome = abi::OUTCOME_DONE;
                } else {
                    c.outcome = abi::OUTCOME_FAILED;
                    c.failure = abi::FAIL_SERVER_EXITED;
                }
                out.push(c);
            }
        }
        for sk in stale {
            let _ = conns.remove(&sk);
        }
        out
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
        let clock = Clock::new();
        let mut asm = Assembler::new(self.opts.max_conns as usize);
        let mut totals = Totals::default();
        let stdout = io::stdout();
        let mut out = io::BufWriter::new(stdout.lock());
        let mut rescan = tokio::time::interval(Duration::from_secs(1));
        let deadline = self.opts.duration.map(|d| tokio::time::Instant::now() + d);
        let stop = async move {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(stop);
        let format = self.opts.format;
        let emit = |rec: Record, totals: &mut Totals, out: &mut dyn Write| -> io::Result<()> {
            *totals.by_kind.entry(rec.kind.to_string()).or_default() += 1;
            match format {
                Format::Json => serde_json::to_writer(&mut *out, &rec).map_err(io::Error::other)?,
                Format::Text => out.write_all(rec.text().as_bytes())?,
            }
            out.write_all(b"\n")
        };
        let drain = |ring: &mut RingBuf<MapData>,
                     asm: &mut Assembler,
                     totals: &mut Totals,
                     out: &mut dyn Write|
         -> io::Result<()> {
            while let Some(item) = ring.next() {
                match abi::record_kind(&item) {
                    Some(abi::REC_HELLO) => {
                        if let Some(h) = abi::read_record::<Hello>(&item) {
                            asm.hello(&h);
                        }
                    }
                    Some(abi::REC_CONN) => {
                        if let Some(c) = abi::read_record::<Conn>(&item) {
                            let rec = asm.conn(&c, &clock);
                            emit(rec, totals, out)?;
                        }
                    }
                    _ => log::warn!("unknown record kind in the ring buffer"),
                }
            }
            out.flush()
        };
        let res: Result<()> = loop {
            tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard?;
                    if let Err(e) = drain(guard.get_inner_mut(), &mut asm, &mut totals, &mut out) {
                        break Err(e.into());
                    }
                    guard.clear_ready();
                }
                _ = rescan.tick() => {
                    let left = self.rescan();
                    let res = left.iter().try_for_each(|c| emit(asm.conn(c, &clock), &mut totals, &mut out));
                    if let Err(e) = res.and_then(|_| out.flush()) {
                        break Err(e.into());
                    }
                }
                _ = tokio::signal::ctrl_c() => break Ok(()),
                _ = &mut stop => break Ok(()),
            }
        };
        // the records already in the ring buffer
        let _ = drain(ring.get_mut(), &mut asm, &mut totals, &mut out);
        if let Err(e) = &res {
            if e.downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
            {
                return Ok(());
            }
        }
        self.report(&totals, &asm);
        res
    }

    /// Totals on stderr: what was printed, and every connection that was not.
    fn report(&self, totals: &Totals, asm: &Assembler) {
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
        let in_progress = self.in_progress_count();
        eprintln!(
            "hstrace: tracked {tracked}, still in progress {in_progress}, records lost (ring buffer full) {dropped}, hellos lost {hellos}, hellos without a record {}, state evicted {evicted}",
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
