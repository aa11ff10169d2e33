//! The one record source every command shares: check, load and attach; follow the
//! selected processes; drain the ring buffer; sweep idle connections; account for every
//! connection. It hands finished records and its `Health` to a sink.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    future::Future,
    io,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};
use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf},
    Btf, Ebpf, EbpfLoader,
};
use tokio::io::unix::AsyncFd;

use crate::{
    abi,
    assemble::{Pipeline, Seen},
    clock, cold_start,
    container::Containers,
    features::{self, Feature},
    health::{Health, ProbeChoice},
    host_cpu,
    params::v1::ColdStartAbsent,
    preflight, probes,
    sink::Sink,
    skipped::Skipped,
    sweep::{self, Census, Evicted, Tables},
    targets::{self, Selector},
    ties::{self, Ties},
    unhooked::Unhooked,
};

/// A look at the host's CPUs: when (and on the boot clock, as processes' start times are),
/// and each CPU's busy time then.
struct HostLook {
    at: Instant,
    boot_ns: u64,
    busy: Vec<(u32, u64)>,
}

/// What to trace and how: the options `trace`, `serve` and `export` share.
#[derive(Debug, Clone)]
pub struct Options {
    pub selector: Selector,
    pub uprobes: probes::Uprobes,
    pub max_conns: u32,
    /// A connection idle this long is reported as it stands (failed: timeout, if its
    /// handshake never completed).
    pub idle_timeout: Duration,
    /// Probe-table alternatives using these hooks are passed over (`--avoid-hook`).
    pub avoid_hooks: Vec<String>,
    /// Load this build of the programs, not the one the kernel's features allow
    /// (`--bpf-build`).
    pub bpf_build: Option<features::Build>,
    /// End `run` when every process `--pid` selected (and every one it started) has
    /// exited (trace, export); a daemon keeps running and says so in its health.
    pub end_when_selection_exits: bool,
    /// Label each record with the server's container and Kubernetes pod
    /// (`--container-labels`; container.rs)
    pub container_labels: bool,
    /// Where the kubelet keeps its pods' log directories, which name them (`--pods-dir`)
    pub pods_dir: PathBuf,
    /// Measure the cold start once on a CPU the traced processes run on, for the
    /// parameters (serve, export)
    pub cold_start: cold_start::Want,
}

/// Features by name, for a log line.
fn names(features: &[Feature]) -> String {
    features
        .iter()
        .map(|f| f.name())
        .collect::<Vec<_>>()
        .join(", ")
}

pub struct Source {
    bpf: Ebpf,
    /// the build of the programs loaded, and what the kernel lacks of the default one's
    build: features::Build,
    kernel_lacks: Vec<Feature>,
    ssl: probes::SslProbes,
    tgids: BpfHashMap<MapData, u32, u8>,
    counters: PerCpuArray<MapData, u64>,
    opts: Options,
    /// processes found unable to take uprobes, looked at again once they exec another
    /// program; and the programs said to have no libssl, each said once
    unhooked: Unhooked,
    uprobe_attach_failures: u64,
    /// processes whose uprobes tied no call to a connection (see `ties`)
    uprobes_untied: u64,
    pub choices: Vec<probes::Choice>,
    tables: Tables,
    census: Census,
    /// every connection the sweep evicted so far
    evicted: Evicted,
    /// entries left in each per-connection table, counted at the end of `run`
    table_entries: Vec<(&'static str, u64)>,
    /// what `selection_exited` found at the last rescan
    exited: bool,
    /// the kernel's counts of hook runs it skipped
    skipped: Skipped,
    /// the ring buffer's items to finished records
    pipe: Pipeline,
    /// what the records said of the traced processes: forks, and whether each process's
    /// uprobes tie its calls to its connections
    procs: Processes,
    /// the last full look for the selected processes
    resolved: Option<Resolved>,
    /// each traced process's CPU time (ns) at the last look, for the sinks' CPU figures
    cpu_seen: HashMap<u32, u64>,
    /// the last look at the host's CPUs
    host_seen: Option<HostLook>,
    /// the cold start's measurement, when asked for (`Options::cold_start`)
    cold_start: Option<cold_start::Background>,
    /// the kernel's `listen_ports` bitmap, and the ports set in it so far
    listen_ports: Array<MapData, u64>,
    ports_marked: HashSet<u16>,
    /// the traced processes and the kernel's count of new listening sockets when their
    /// ports were last looked up: the socket table (every socket on the host, TIME_WAIT
    /// ones included) is read again only when either changed
    ports_looked: Option<(BTreeSet<u32>, u64)>,
    /// with `--container-labels`: the processes traced at the last tick, whose containers
    /// are remembered a tick longer (records of a process come up to a drain after it
    /// exited)
    traced_before: HashSet<u32>,
}

/// What the source learns of the traced processes from the ring buffer.
#[derive(Default)]
struct Processes {
    /// processes the kernel saw forked by traced ones since the source last looked, with
    /// their parents
    forked: Vec<(u32, u32)>,
    /// whether the uprobes of each process tie its calls to its connections
    ties: Ties,
}

/// Forked processes remembered between two looks of the source.
const FORKED_MAX: usize = 1024;

impl Processes {
    fn saw(&mut self, seen: Option<Seen>) {
        match seen {
            // more than a scan's worth waiting: the next scan finds them
            Some(Seen::Forked { pid, parent }) if self.forked.len() < FORKED_MAX => {
                self.forked.push((pid, parent))
            }
            Some(Seen::Handshake {
                tgid,
                t_accept,
                tied,
            }) => self.ties.handshake(tgid, t_accept, tied),
            _ => {}
        }
    }
}

/// When `targets::resolve` last looked through /proc (a look at every process's fds for
/// `--port`: ~15 ms of CPU on a quiet host), and the kernel's count of sockets that had
/// started listening by then.
struct Resolved {
    at: Instant,
    listens: u64,
}

/// A full look for the selected processes at least this often, even when the kernel's
/// hooks say nothing changed (a process renamed, a hook that missed an event).
const RESOLVE_EVERY: Duration = Duration::from_secs(10);

impl Source {
    /// Check, load and attach everything; returns once the selected processes are traced.
    pub fn attach(opts: Options) -> Result<Source> {
        preflight::privileges()?;
        // before the first map: kernels before 5.11 count it against RLIMIT_MEMLOCK
        preflight::memlock();
        preflight::bpf_syscall()?;
        preflight::btf()?;
        preflight::tracefs()?;
        targets::check(&opts.selector)?;
        for w in targets::warnings(&opts.selector) {
            eprintln!("hstrace: {w}");
        }

        // the build of the programs this kernel's BPF features allow (or the one asked for)
        let features = features::probe()?;
        let build = opts.bpf_build.unwrap_or(features.build());
        match &features.missing[..] {
            [] => log::info!(
                "BPF build: {} (the kernel has every feature it uses)",
                build.name()
            ),
            missing => {
                log::info!(
                    "BPF build: {} (the kernel lacks {})",
                    build.name(),
                    names(missing)
                );
                for f in missing {
                    log::info!("kernel lacks {f} (since {}): {}", f.since(), f.limit());
                }
            }
        }
        // no selector, or --port alone: every process that accepts (on that port) is
        // traced from its first accept, whoever it is
        let sel = &opts.selector;
        let all = sel.is_all() || (sel.pids.is_empty() && sel.comm.is_none());
        let port = sel.port.unwrap_or(0);
        let mut comm = [0u8; 16];
        if let Some(name) = &sel.comm {
            comm[..name.len()].copy_from_slice(name.as_bytes());
        }
        let mut bpf = EbpfLoader::new()
            .override_global("targ_all", &(all as u8), true)
            .override_global("targ_port", &port, true)
            .override_global("targ_comm", &comm, true)
            .override_global(
                "targ_uprobes",
                &((opts.uprobes != probes::Uprobes::None) as u8),
                true,
            )
            .map_max_entries("conns", opts.max_conns)
            .map_max_entries("fds", opts.max_conns)
            .map_max_entries("ssl_socks", opts.max_conns)
            .load(build.object())
            .with_context(|| format!("loading the BPF object ({} build)", build.name()))?;
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
        let settings_word = probes::settings(&choices);
        if settings_word != 0 {
            let mut settings: Array<_, u32> =
                Array::try_from(bpf.map_mut("settings").context("map settings")?)?;
            settings.set(0, settings_word, 0)?;
        }
        let ssl = probes::SslProbes::load(&mut bpf, opts.uprobes)?;
        let tgids =
            BpfHashMap::try_from(bpf.take_map("traced_tgids").context("map traced_tgids")?)?;
        let counters = PerCpuArray::try_from(bpf.take_map("counters").context("map counters")?)?;
        let listen_ports =
            Array::try_from(bpf.take_map("listen_ports").context("map listen_ports")?)?;
        let tables = Tables::take(&mut bpf)?;
        let max_conns = opts.max_conns as usize;
        let cold_start =
            (opts.cold_start != cold_start::Want::No).then(cold_start::Background::default);
        let mut s = Source {
            bpf,
            build,
            kernel_lacks: features.missing,
            ssl,
            tgids,
            counters,
            opts,
            unhooked: Unhooked::default(),
            uprobe_attach_failures: 0,
            uprobes_untied: 0,
            choices,
            tables,
            census: Census::default(),
            evicted: Evicted::default(),
            table_entries: Vec::new(),
            exited: false,
            // (every kernel-side program is loaded and attached by now)
            skipped: Skipped::find(),
            pipe: Pipeline::new(max_conns),
            procs: Processes::default(),
            resolved: None,
            cpu_seen: HashMap::new(),
            host_seen: None,
            cold_start,
            listen_ports,
            ports_marked: HashSet::new(),
            ports_looked: None,
            traced_before: HashSet::new(),
        };
        if s.opts.container_labels {
            s.pipe.containers = Some(Containers::new(s.opts.pods_dir.clone()));
        }
        s.rescan();
        // loaded and attached: keep only what following new processes needs
        match preflight::drop_capabilities(s.ssl.enabled()) {
            Ok(kept) => log::info!("capabilities kept after attach: {kept:#x}"),
            Err(e) => log::warn!("could not drop capabilities after attach: {e:#}"),
        }
        Ok(s)
    }

    /// Follow the selection: trace new processes (new workers after a reload, a server
    /// started again), forget exited ones (returned).
    pub fn rescan(&mut self) -> Vec<u32> {
        let mut gone = Vec::new();
        let resolving = self.resolve_due();
        let want = if resolving {
            self.resolved = Some(Resolved {
                at: Instant::now(),
                listens: self.counter(abi::C_LISTENS),
            });
            targets::resolve(&self.opts.selector)
        } else {
            BTreeSet::new()
        };
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
        if resolving {
            // the socket table is read only when the processes or the listening sockets
            // changed since it last was
            let looked = self.resolved.as_ref().map(|r| (traced.clone(), r.listens));
            if looked != self.ports_looked {
                self.mark_listen_ports(&traced);
                self.ports_looked = looked;
            }
        }
        for pid in &traced {
            if !targets::alive(*pid) {
                let _ = self.tgids.remove(pid);
                self.ssl.detach(&mut self.bpf, *pid);
                self.procs.ties.forget(*pid);
                self.unhooked.forget(*pid);
                gone.push(*pid);
            } else {
                // exec'd since it was found without libssl: look again
                self.unhooked.exec_since(*pid, &executable(*pid));
                if self.wants_uprobes(*pid) {
                    self.attach_ssl(*pid, false);
                }
            }
        }
        gone
    }

    /// Forget the containers of processes traced neither now nor at the last tick (the
    /// sweep has reported their last connections by then).
    fn forget_containers(&mut self) {
        let Some(known) = self.pipe.containers.as_mut() else {
            return;
        };
        let traced: HashSet<u32> = self.tgids.keys().filter_map(|k| k.ok()).collect();
        let before = &self.traced_before;
        known.retain(|pid| traced.contains(&pid) || before.contains(&pid));
        self.traced_before = traced;
    }

    /// Hand the sink what each traced process ran since the last look (the parameters'
    /// CPU outside the stages), then what the CPUs they may use did meanwhile (the work of
    /// everything else on them); exited processes are forgotten. A process first seen at
    /// this look counts with its whole CPU time if it started since the last (a fork of
    /// the server); one that was traced already but is new to this look makes the look
    /// hand no CPUs' figure (its CPU since the last look is in the CPUs' busy time, not in
    /// what the processes were seen to run). A process that exited since the last look took
    /// its last CPU with it: the other work is over-stated by that.
    fn feed_cpu(&mut self, sink: &mut dyn Sink) {
        let traced: Vec<u32> = self.tgids.keys().filter_map(|k| k.ok()).collect();
        self.cpu_seen.retain(|pid, _| traced.contains(pid));
        let last_look = self.host_seen.as_ref().map(|l| l.boot_ns);
        let boot_ns = clock::boottime_ns();
        let mut unseen = false;
        let mut traced_ns = 0;
        let mut on = BTreeSet::new();
        let mut each = Vec::new();
        for &pid in &traced {
            let Some(now) = targets::cpu_ns(pid) else {
                continue;
            };
            match self.cpu_seen.insert(pid, now) {
                Some(before) => {
                    let ns = now.saturating_sub(before);
                    traced_ns += ns;
                    sink.process_cpu(pid, ns);
                }
                // new to the looks: all its CPU is since the last one if it started since
                None => match (last_look, targets::started_ns(pid)) {
                    (Some(last), Some(start)) if start >= last => {
                        traced_ns += now;
                        sink.process_cpu(pid, now);
                    }
                    _ => unseen = true,
                },
            }
            if let Some(allowed) = host_cpu::allowed(pid) {
                on.extend(&allowed);
                each.push(allowed);
            }
        }
        let cpu = cold_start::cpu_of_most(&each);
        if let Some(measured) = self.cold_start.as_mut().and_then(|b| b.poll(cpu)) {
            pass_cold_start(measured, sink);
        }
        let Some(busy) = host_cpu::busy_ns() else {
            return;
        };
        let at = Instant::now();
        let since_last = self
            .host_seen
            .as_ref()
            .filter(|_| !unseen && !on.is_empty())
            .map(|last| host_cpu::HostCpu {
                span_ns: at.duration_since(last.at).as_nanos() as u64,
                cpus: on.len() as u32,
                busy_ns: host_cpu::busy_between(&last.busy, &busy, &on),
                traced_ns,
            });
        self.host_seen = Some(HostLook { at, boot_ns, busy });
        if let Some(h) = since_last {
            sink.host_cpu(&h);
        }
    }

    /// Tell the kernel the ports the traced processes listen on (--pid, --comm: with --port
    /// or no selector it knows them), so that their connections are followed from the
    /// three-way handshake on, before any accept. Bits are only ever added.
    fn mark_listen_ports(&mut self, traced: &BTreeSet<u32>) {
        let sel = &self.opts.selector;
        if sel.port.is_some() || sel.is_all() {
            return;
        }
        for port in targets::listening_ports(traced) {
            if !self.ports_marked.insert(port) {
                continue;
            }
            let word = u32::from(port >> 6);
            let bits = self.listen_ports.get(&word, 0).unwrap_or(0) | 1u64 << (port & 63);
            if let Err(e) = self.listen_ports.set(word, bits, 0) {
                log::warn!("cannot mark listening port {port}: {e}");
            }
        }
    }

    /// Must the next rescan look through /proc? Once a second only where the kernel does
    /// not follow the selection itself: the fork hook traces a traced process's children
    /// (`--pid`, `--comm`), the exec hook a program named by `--comm`, and with `--port` or
    /// no selector every process is traced from its first accept (the look then finds a
    /// new server early, for its uprobes: it follows the kernel's count of new listening
    /// sockets). Otherwise every RESOLVE_EVERY.
    fn resolve_due(&self) -> bool {
        let Some(last) = &self.resolved else {
            return true;
        };
        if last.at.elapsed() >= RESOLVE_EVERY {
            return true;
        }
        let hooked = |group: &str| {
            self.choices
                .iter()
                .any(|c| c.group == group && c.hooks.is_some())
        };
        let sel = &self.opts.selector;
        (!sel.pids.is_empty() && !hooked("fork"))
            || (sel.comm.is_some() && !(hooked("fork") && hooked("exec")))
            || self.counter(abi::C_LISTENS) != last.listens
    }

    /// Selected by `--pid` alone, and none of those processes or their children is left:
    /// the last rescan traced every live one, so nothing traced means none.
    fn selection_exited(&self) -> bool {
        let sel = &self.opts.selector;
        !sel.pids.is_empty()
            && sel.comm.is_none()
            && sel.port.is_none()
            && self.tgids.keys().next().is_none()
    }

    /// Attach `pid`'s uprobes; false if it has no libssl to attach them to (then it is
    /// looked at again only once it has exec'd another program). `newborn`: a child just
    /// forked, which may be about to exec its program: a failure is looked at again at
    /// the next rescan, and neither said nor counted yet.
    fn attach_ssl(&mut self, pid: u32, newborn: bool) -> bool {
        let name = targets::comm(pid).unwrap_or_default();
        // read before the lookup: an exec that comes during it counts as one since
        let exe = executable(pid);
        let mut errors = Vec::new();
        let start = std::time::Instant::now();
        let mut candidates = targets::ssl_candidates(pid);
        // an executable found without the symbols before is not read for them again (a
        // child forked per connection runs its parent's)
        if self.unhooked.said(&exe) {
            candidates.retain(|t| !t.ends_with("exe"));
        }
        for target in candidates {
            match self.ssl.attach(&mut self.bpf, pid, &target) {
                Ok(()) => {
                    log::info!(
                        "pid {pid} ({name}): SSL_do_handshake uprobes on {} ({:.1} ms)",
                        target.display(),
                        start.elapsed().as_secs_f64() * 1e3
                    );
                    self.procs.ties.attached(pid, clock::monotonic_ns());
                    return true;
                }
                Err(e) => errors.push(format!("{}: {e:#}", target.display())),
            }
        }
        if newborn {
            self.unhooked.newborn_failed(pid);
            log::debug!(
                "pid {pid} ({name}), just forked: no libssl yet: {}",
                errors.join("; ")
            );
            return false;
        }
        self.uprobe_attach_failures += 1;
        let shown = exe
            .as_deref()
            .map(|e| e.display().to_string())
            .unwrap_or_default();
        if self.unhooked.failed(pid, exe) {
            log::warn!(
                "pid {pid} ({name}) has no libssl with SSL_do_handshake: tracing it from the wire only, as with --no-uprobes (said once for {shown})"
            );
        }
        log::debug!("pid {pid}: {}", errors.join("; "));
        false
    }

    /// Processes whose uprobes tie nothing to their connections: say so once, and trace
    /// them from the wire alone (their uprobes only cost a trap per call).
    fn detach_untied(&mut self) {
        for pid in self.procs.ties.judged_untied() {
            let name = targets::comm(pid).unwrap_or_default();
            log::info!(
                "pid {pid} ({name}): none of its first {} handshakes made socket I/O inside SSL_do_handshake (OpenSSL over memory BIOs, or handshakes driven by SSL_read/SSL_write, as in Node.js): its uprobes are detached, and it is traced from the wire alone, as with --no-uprobes",
                ties::JUDGED_AFTER
            );
            self.ssl.detach(&mut self.bpf, pid);
            self.unhooked.untied(pid, executable(pid));
            self.uprobes_untied += 1;
        }
    }

    /// Cover the processes that traced ones forked, as soon as the kernel says: a child
    /// serves within milliseconds (a PostgreSQL backend, a prefork server's worker), so its
    /// parent's libssl is hooked for every process that maps it (SslProbes::cover_child);
    /// one that maps none of its parent's is attached to on its own.
    fn attach_forked(&mut self) {
        for (pid, parent) in std::mem::take(&mut self.procs.forked) {
            if !self.wants_uprobes(pid) {
                continue;
            }
            let start = Instant::now();
            match self.ssl.cover_child(&mut self.bpf, pid, parent) {
                (true, widened) => {
                    if widened {
                        let name = targets::comm(parent).unwrap_or_default();
                        log::info!(
                            "pid {parent} ({name}) forks children that serve at once: its libssl's uprobes now fire for every process that maps it (and leave at once in one not traced; attached in {:.1} ms, the first child's handshakes before that are timed from the wire)",
                            start.elapsed().as_secs_f64() * 1e3
                        );
                    }
                    self.procs.ties.attached(pid, clock::monotonic_ns());
                }
                // a child that execs its program (Postfix's master starting smtpd) maps
                // that program's libssl only once the exec and the dynamic loader are
                // done, which may be after this look: it is looked at again at the next
                // rescan, whatever it runs then
                (false, _) if targets::alive(pid) => {
                    self.attach_ssl(pid, true);
                }
                (false, _) => {}
            }
        }
    }

    /// Uprobes are on, `pid` has none yet, and it was not found unable to take them.
    fn wants_uprobes(&self, pid: u32) -> bool {
        self.ssl.enabled() && !self.ssl.is_attached(pid) && !self.unhooked.contains(pid)
    }

    /// One pass of the sweep (see `sweep::sweep`).
    fn sweep(&mut self, gone: &[u32], sink: &mut dyn Sink) -> io::Result<()> {
        let found = sweep::sweep(
            &mut self.tables,
            gone,
            self.opts.idle_timeout,
            self.opts.max_conns,
        );
        self.census = found.census;
        // said once, when it first happens, not only in the totals at exit
        if self.evicted.closes == 0 && found.evicted.closes > 0 {
            eprintln!(
                "hstrace: the connection table is full (--max-conns {}): the connections idle longest are evicted, each counted (state_evicted, close_evicted); raise --max-conns to trace them all",
                self.opts.max_conns
            );
        }
        self.evicted.unreported += found.evicted.unreported;
        self.evicted.closes += found.evicted.closes;
        for s in found.records {
            self.procs.saw(self.pipe.swept(s, sink)?);
        }
        Ok(())
    }

    fn counter(&self, idx: u32) -> u64 {
        self.counters
            .get(&idx, 0)
            .map(|v| v.iter().sum())
            .unwrap_or(0)
    }

    /// The tracer's health now (`census`: the last count of the kernel's map).
    fn health(&self) -> Health {
        let pipe = &self.pipe;
        Health {
            connections: pipe.counts.by_kind,
            closes: pipe.counts.closes,
            accepted: self.counter(abi::C_ACCEPTED),
            tracked: self.counter(abi::C_CONNS),
            table_full: self.counter(abi::C_TABLE_FULL),
            in_progress: self.census.in_progress,
            open: self.census.open,
            records_lost: self.counter(abi::C_RECORDS_DROPPED),
            hellos_lost: self.counter(abi::C_HELLOS_DROPPED),
            hellos_unmatched: pipe.hellos_unmatched(),
            hello_pieces_dropped: pipe.hello_pieces_dropped(),
            closes_lost: self.counter(abi::C_CLOSES_DROPPED),
            state_evicted: self.evicted.unreported,
            closes_evicted: self.evicted.closes,
            end_missed: self.counter(abi::C_END_MISSED),
            close_missed: self.counter(abi::C_CLOSE_MISSED),
            table_entries: self.table_entries.clone(),
            io_slot_taken: self.counter(abi::C_IO_SLOT_TAKEN),
            hook_runs_skipped: self.skipped.count(),
            record_stream_desync: self.counter(abi::C_DESYNC),
            accept_queue_unmeasured: self.counter(abi::C_EST_FULL),
            accepted_without_socket: self.counter(abi::C_NO_SOCK),
            duplicates: pipe.counts.duplicates,
            undecodable: pipe.counts.undecodable,
            traced_processes: self.tgids.keys().filter(|k| k.is_ok()).count() as u64,
            selection_exited: self.exited,
            uprobe_attach_failures: self.uprobe_attach_failures,
            uprobes_untied: self.uprobes_untied,
            bpf_build: self.build.name(),
            kernel_lacks: self.kernel_lacks.iter().map(|f| f.name()).collect(),
            probes: self
                .choices
                .iter()
                .map(|c| ProbeChoice {
                    group: c.group,
                    hook: c
                        .hooks
                        .as_ref()
                        .map(|h| h.iter().map(|h| h.name()).collect::<Vec<_>>().join(",")),
                })
                .collect(),
        }
    }

    /// Run until `stop` completes: records to `sink`, its health once a second and at
    /// the end (returned).
    pub async fn run(
        mut self,
        sink: &mut dyn Sink,
        stop: impl Future<Output = ()>,
    ) -> Result<Health> {
        let ring = RingBuf::try_from(self.bpf.take_map("events").context("map events")?)?;
        // SAFETY: the ring buffer owns its map fd, which stays open and the same while the
        // AsyncFd owns the ring buffer
        let mut ring =
            unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
                .map_err(|e| anyhow::anyhow!("registering the ring buffer with tokio: {e}"))?;
        if self.cold_start.is_some() {
            sink.cold_start_absent(ColdStartAbsent::NotYet);
        }
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        // the kernel wakes us only when records pile up: drain on a timer too
        let mut drain = tokio::time::interval(Duration::from_millis(abi::DRAIN_MS));
        tokio::pin!(stop);
        let res: io::Result<()> = loop {
            let step = tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard?;
                    let r = drain_ring(guard.get_inner_mut(), &mut self.pipe, &mut self.procs, sink);
                    guard.clear_ready();
                    r
                }
                _ = drain.tick() => drain_ring(ring.get_mut(), &mut self.pipe, &mut self.procs, sink),
                _ = tick.tick() => {
                    let gone = self.rescan();
                    let exited = self.selection_exited();
                    if exited && !self.exited {
                        let pids: Vec<String> =
                            self.opts.selector.pids.iter().map(u32::to_string).collect();
                        eprintln!(
                            "hstrace: pid {} exited, and every process it started: nothing left to trace{} (--comm or --port follows a server across restarts)",
                            pids.join(", "),
                            if self.opts.end_when_selection_exits { "" } else { "; serving on" }
                        );
                    }
                    self.exited = exited;
                    if exited && self.opts.end_when_selection_exits {
                        break Ok(());
                    }
                    self.detach_untied();
                    self.feed_cpu(sink);
                    let swept = self.sweep(&gone, sink);
                    self.forget_containers();
                    swept.and_then(|_| sink.tick(&self.health()))
                }
                _ = &mut stop => break Ok(()),
            };
            self.attach_forked();
            if let Err(e) = step {
                break Err(e);
            }
        };
        // the records already in the ring buffer
        let last = drain_ring(ring.get_mut(), &mut self.pipe, &mut self.procs, sink);
        self.detach_untied();
        sink.stopped();
        if let (Some(b), cold_start::Want::BeforeTheEnd) =
            (self.cold_start.as_mut(), self.opts.cold_start)
        {
            if b.first_pending() {
                eprintln!("hstrace: finishing the cold start's measurement (a few seconds)");
            } else if !b.started() {
                eprintln!("hstrace: no cold start in the parameters: no traced process was seen to measure it where it runs");
            }
            if let Some(measured) = b.finish() {
                pass_cold_start(measured, sink);
            }
        }
        self.census = self.tables.census();
        self.table_entries = self.tables.entries();
        let health = self.health();
        for (idx, name) in abi::COUNTERS {
            log::debug!("counter {name} = {}", self.counter(idx));
        }
        res.and(last)
            .and_then(|_| sink.tick(&health))
            .map_err(anyhow::Error::from)?;
        Ok(health)
    }
}

/// The cold start's measurement to the sink; why none, to the user.
fn pass_cold_start(measured: Result<cold_start::ColdStart>, sink: &mut dyn Sink) {
    match measured {
        // (in words in the log once, by the measurement, when it first comes)
        Ok(c) => sink.cold_start(&c),
        Err(e) => {
            eprintln!(
                "hstrace: no cold start in the parameters ({e:#}); hstrace model forecasts without it"
            );
            sink.cold_start_absent(ColdStartAbsent::Failed);
        }
    }
}

/// The program `pid` runs (what /proc/PID/exe names).
fn executable(pid: u32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

fn drain_ring(
    ring: &mut RingBuf<MapData>,
    pipe: &mut Pipeline,
    procs: &mut Processes,
    sink: &mut dyn Sink,
) -> io::Result<()> {
    while let Some(item) = ring.next() {
        procs.saw(pipe.item(&item, sink)?);
    }
    sink.flush()
}
