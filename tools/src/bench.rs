//! Figures for `cargo xtask bench` that need hstrace's insides: `hstrace-bench`'s commands.

use std::time::Duration;

use anyhow::{Context, Result};
use aya::EbpfLoader;

use hstrace::{
    abi::{self, Conn, ConnState, Hello},
    assemble::Pipeline,
    clock::{monotonic_ns, thread_cpu_ns},
    print::{Format, Printer},
    serve::{Daemon, ServeOptions},
    sink::Sink,
    stage::Kind,
    sweep, tls,
};

/// What the userspace pipeline sustained: connections per second (wall), and the CPU
/// the record path's own thread spent per connection (what other threads of the
/// process, such as the OTLP recorder, spend beside it is not in it).
pub struct PipelineRun {
    pub per_sec: f64,
    pub thread_cpu_ns_per_conn: f64,
}

/// Connections per second the userspace pipeline (hello parsing, classification, stages,
/// and the sink: JSON lines, or `serve`'s metrics and parameters) sustains on one core,
/// fed synthetic records built from real captured hellos at full speed. Each connection
/// is 4 ring-buffer records (ClientHello, ServerHello, connection, close). An error if
/// they did not all come out as the full TLS 1.3 handshakes they are.
pub fn pipeline_connections_per_sec(n: u64, sink: Option<&mut dyn Sink>) -> Result<PipelineRun> {
    let mut printer = Printer::new(Format::Json, std::io::sink());
    let sink = sink.unwrap_or(&mut printer);
    let hello = |dir: u32, hex: &str| -> Hello<'static> {
        let bytes = tls::unhex(hex).expect("fixture is hex");
        Hello {
            dir,
            conn_id: 0,
            msg_len: bytes.len() as u32,
            offset: 0,
            data: bytes.into(),
        }
    };
    let mut ch = hello(
        abi::DIR_IN,
        include_str!("../../userspace/tests/fixtures/hello/tls13_full.client_hello.hex"),
    );
    let mut sh = hello(
        abi::DIR_OUT,
        include_str!("../../userspace/tests/fixtures/hello/tls13_full.server_hello.hex"),
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
    let mut pipe = Pipeline::new(65536);
    let cpu_before = thread_cpu_ns()?;
    let start = std::time::Instant::now();
    for id in 1..=n {
        ch.conn_id = id;
        sh.conn_id = id;
        c.conn_id = id;
        pipe.hello(&ch);
        pipe.hello(&sh);
        pipe.conn(&c, sink)?;
        pipe.close(&close(id), sink)?;
    }
    let per_sec = n as f64 / start.elapsed().as_secs_f64();
    let thread_cpu_ns_per_conn = (thread_cpu_ns()? - cpu_before) as f64 / n as f64;
    let full = pipe.reported(Kind::Full);
    if full != n || pipe.counts.by_kind.iter().sum::<u64>() != n || pipe.pending() != 0 {
        anyhow::bail!(
            "the pipeline made {:?} (full, resumed, plain, failed) of {n} full handshakes ({} hellos left unmatched)",
            pipe.counts.by_kind,
            pipe.pending()
        );
    }
    Ok(PipelineRun {
        per_sec,
        thread_cpu_ns_per_conn,
    })
}

/// `pipeline_connections_per_sec` through trace's JSON printer, or through serve's
/// sinks (metrics and parameters, as the daemon feeds them); with `otlp`, the daemon
/// also hands every record to its OTLP side (pushing to that URL once a minute).
pub fn pipeline(n: u64, serve: bool, otlp: Option<String>) -> Result<PipelineRun> {
    if !serve {
        return pipeline_connections_per_sec(n, None);
    }
    // `serve` always answers HTTP from a thread of its own, so its record path never
    // runs glibc malloc's single-threaded fast path (no locks while a process has one
    // thread). A bench process with one thread would: the first thread started (OTLP's
    // recorder) would then look ~0.25 µs a connection dearer than it is.
    std::thread::Builder::new()
        .name("http-stand-in".into())
        .spawn(|| loop {
            std::thread::park();
        })?;
    // the daemon's own sink, as `hstrace serve` runs it with its defaults
    let daemon = match otlp {
        None => Daemon::new(&ServeOptions::default()),
        Some(url) => Daemon::start(&ServeOptions {
            otlp: hstrace::otlp::OtlpOptions::resolve(
                Some(url),
                None,
                Some(60.0),
                hstrace::otlp::HistogramKind::Explicit,
                None,
                None,
                None,
            )?,
            ..ServeOptions::default()
        })?,
    };
    let run = pipeline_connections_per_sec(n, Some(&mut daemon.sink()))?;
    // and what a scrape then costs: it must hold the counts of all n connections
    let text = daemon.metrics_text()?;
    anyhow::ensure!(
        text.contains(&format!(
            "hstrace_records_total{{record=\"connection\"}} {n}"
        )),
        "the metrics did not count every connection"
    );
    // with OTLP on: whether its queue kept up (a dropped record costs the record path less)
    if let Some(line) = text
        .lines()
        .find(|l| l.starts_with("hstrace_otlp_records_dropped_total"))
    {
        eprintln!("{line}");
    }
    Ok(run)
}

/// Milliseconds one sweep takes over `n` live connections that all stay (nothing idle,
/// nothing exited, the table half full: the steady state it costs every second), beside
/// n/8 sockets waiting in an accept queue since the clock began (the kernel's alone: never
/// reported, evicted or counted as connections), median of 9. Loads the BPF object,
/// attaches nothing, fills the table from userspace.
pub fn sweep_ms(n: u32) -> Result<f64> {
    let mut bpf = EbpfLoader::new()
        .map_max_entries("conns", 2 * n)
        .load(hstrace::BPF_OBJECT)
        .context("loading the BPF object")?;
    let mut tables = sweep::Tables::take(&mut bpf)?;
    // reported, and accepted just now: nothing to take
    let state = ConnState {
        emitted: 1,
        r: Conn {
            phase: abi::PH_DONE,
            t_accept: monotonic_ns(),
            ..Default::default()
        },
        ..Default::default()
    };
    for i in 0..n as u64 {
        tables
            .conns
            .insert(0xffff_0000_0000_0000 | (i << 10), state, 0)?;
    }
    // in an accept queue: no process, no record, idle for as long as the clock has run
    let queued = ConnState {
        r: Conn {
            t_est: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    for i in 0..u64::from(n / 8) {
        tables
            .conns
            .insert(0xfffe_0000_0000_0000 | (i << 10), queued, 0)?;
    }
    let mut times = Vec::new();
    for _ in 0..9 {
        let start = std::time::Instant::now();
        let swept = sweep::sweep(&mut tables, &[], Duration::from_secs(3600), 2 * n);
        times.push(start.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(
            swept.records.is_empty() && swept.evicted.closes == 0,
            "the sweep took live connections, or sockets still in an accept queue"
        );
        anyhow::ensure!(
            swept.census.open == u64::from(n) && swept.census.in_progress == 0,
            "the sweep counted sockets in an accept queue as connections: {:?}",
            swept.census
        );
    }
    let entries = tables.entries();
    anyhow::ensure!(
        entries.contains(&("conns", u64::from(n)))
            && entries.contains(&("conns_queued", u64::from(n / 8))),
        "table entries {entries:?}"
    );
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}

/// What kernel.bpf_stats_enabled adds to the run time it reports for each program run
/// (two clock reads around the program, and the counting): the mean run time of a program
/// that does nothing, attached to sock_recv_length while this process makes `calls`
/// loopback TCP reads. Turns the counting on for the measurement and restores it after.
pub fn stats_floor_ns(calls: u32) -> Result<f64> {
    use std::io::{Read, Write};
    const STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

    let mut bpf = EbpfLoader::new()
        .load(crate::BENCH_OBJECT)
        .context("loading the bench's BPF object")?;
    let btf = aya::Btf::from_sys_fs().context("reading the kernel's BTF")?;
    let prog: &mut aya::programs::BtfTracePoint = bpf
        .program_mut("stats_floor")
        .context("no stats_floor program in the object")?
        .try_into()?;
    prog.load("sock_recv_length", &btf)?;
    prog.attach()?;
    let was = std::fs::read_to_string(STATS).context(STATS)?;
    std::fs::write(STATS, "1").context("enabling kernel.bpf_stats_enabled")?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let mut tx = std::net::TcpStream::connect(listener.local_addr()?)?;
    let (mut rx, _) = listener.accept()?;
    let mut b = [0u8; 1];
    for _ in 0..calls {
        tx.write_all(&b)?;
        rx.read_exact(&mut b)?;
    }
    let info = prog.info()?;
    std::fs::write(STATS, was.trim()).context("restoring kernel.bpf_stats_enabled")?;
    anyhow::ensure!(
        info.run_count() >= calls as u64,
        "the empty program ran {} times for {calls} reads",
        info.run_count()
    );
    Ok(info.run_time().as_nanos() as f64 / info.run_count() as f64)
}

/// Which of `trace`'s hooks `hooks_alone` holds. A syscall tracepoint (accept's, where
/// the kernel offers no fexit) sends every syscall of every process down the kernel's
/// traced-syscall path, so its cost lands on calls it never runs for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HookSet {
    All,
    /// only the tracepoints in the syscalls category
    Syscalls,
    /// every hook but those
    NotSyscalls,
    /// only the hooks no connection fires (new processes, execs): a control, attached
    /// and held like the others, for what holding hooks costs where they never run
    Quiet,
}

impl HookSet {
    fn holds(self, hook: &hstrace::probes::Hook) -> bool {
        use hstrace::probes::Hook;
        let syscall = matches!(hook, Hook::Tracepoint("syscalls", _));
        match self {
            HookSet::All => true,
            HookSet::Syscalls => syscall,
            HookSet::NotSyscalls => !syscall,
            HookSet::Quiet => matches!(
                hook,
                Hook::BtfTracepoint("sched_process_fork" | "sched_process_exec")
            ),
        }
    }
}

/// An empty program at each hook `trace` attaches on this kernel (found by attaching the
/// real programs once; `set` picks among them), held until this process is stopped:
/// under a load, their program runs and run time are what the hooks and the counting
/// cost before any of hstrace's own work. Says "hstrace: tracing" on stderr once
/// attached, as `trace` does, and stops on Ctrl-C or SIGTERM.
pub fn hooks_alone(set: HookSet) -> Result<()> {
    use aya::programs::{BtfTracePoint, TracePoint};
    use hstrace::probes::{attach_kernel_probes, Hook};

    let btf = aya::Btf::from_sys_fs().context("reading the kernel's BTF")?;
    // which hooks: hstrace's own programs, attached once as `trace` would (their maps
    // kept small, they are never used)
    let chosen: Vec<Hook> = {
        let mut bpf = EbpfLoader::new()
            .map_max_entries("conns", 64)
            .map_max_entries("events", 4096)
            .load(hstrace::BPF_OBJECT)
            .context("loading the BPF object")?;
        attach_kernel_probes(&mut bpf, &btf, &[])?
            .into_iter()
            .flat_map(|c| c.hooks.into_iter().flatten())
            .filter(|h| set.holds(h))
            .collect()
    };
    let mut held = Vec::new();
    for hook in &chosen {
        // the bench object once per program: a BTF tracepoint program is loaded for one hook
        let mut bpf = EbpfLoader::new()
            .load(crate::BENCH_OBJECT)
            .context("loading the bench's BPF object")?;
        match *hook {
            Hook::BtfTracepoint(event) => {
                let prog: &mut BtfTracePoint = bpf
                    .program_mut("stats_floor")
                    .context("no stats_floor program in the object")?
                    .try_into()?;
                prog.load(event, &btf)?;
                prog.attach()?;
            }
            Hook::Tracepoint(category, event) => {
                let prog: &mut TracePoint = bpf
                    .program_mut("stats_floor_tp")
                    .context("no stats_floor_tp program in the object")?
                    .try_into()?;
                prog.load()?;
                prog.attach(category, event)?;
            }
            other => anyhow::bail!("no empty program for {other:?}: only tracepoints have one"),
        }
        held.push(bpf);
    }
    anyhow::ensure!(
        !chosen.is_empty(),
        "no hooks of the set {set:?} on this kernel: nothing to hold"
    );
    let names: Vec<&str> = chosen.iter().map(|h| h.name()).collect();
    // until Ctrl-C or SIGTERM, by handler (a shell's background job inherits SIGINT
    // ignored), taken before it says it is attached: a signal sent on that line is not lost
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let stop = hstrace::signal::stop_signal(None);
            eprintln!("hstrace: tracing (empty programs at {})", names.join(", "));
            stop.await
        });
    drop(held);
    Ok(())
}
