//! The `hstrace` command line.

use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};
use hstrace::{print::Format, probes::Uprobes, source::Options, targets::Selector};

#[derive(Parser)]
#[command(
    name = "hstrace",
    version,
    about = "Per-stage latency of every TCP + TLS handshake of unmodified servers"
)]
struct Cli {
    /// More detail on stderr: which hook each probe group uses (-v), libbpf and verifier detail (-vv)
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum UprobesArg {
    None,
    Handshake,
    All,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Connections per second the userspace pipeline sustains on synthetic records (4
    /// ring-buffer records each; for `cargo xtask bench`)
    #[command(hide = true)]
    BenchPipeline {
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
    },
    /// Milliseconds one idle sweep takes over N live connections (for `cargo xtask bench`)
    #[command(hide = true)]
    BenchSweep {
        #[arg(long, default_value_t = 65536)]
        conns: u32,
    },
    /// Print one record per finished connection handshake, live
    Trace {
        /// Trace this process and its descendants (a master's workers); repeatable
        #[arg(long = "pid", value_name = "PID")]
        pids: Vec<u32>,
        /// Trace every process with this name
        #[arg(long, value_name = "NAME")]
        comm: Option<String>,
        /// Trace connections to this listening port
        #[arg(long, value_name = "PORT")]
        port: Option<u16>,
        /// Stop after this many seconds (default: until Ctrl-C)
        #[arg(long, value_name = "SECONDS")]
        duration: Option<f64>,
        /// text: one readable line per connection; json: one JSON object per line
        #[arg(long, value_enum, default_value = "text")]
        format: FormatArg,
        /// Wire only: no uprobes at all (same as --uprobes none)
        #[arg(long)]
        no_uprobes: bool,
        /// OpenSSL functions hooked in the traced processes: none; handshake
        /// (SSL_do_handshake); all (also SSL_read/SSL_write: the library's view of the
        /// first request and response, at a uprobe hit per call)
        #[arg(long, value_enum, default_value = "handshake")]
        uprobes: UprobesArg,
        /// Report a connection idle this long as it stands (a handshake that never
        /// completed: failed, "timeout")
        #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
        idle_timeout: f64,
        /// Connections tracked at once in the kernel (LRU maps)
        #[arg(long, default_value_t = hstrace::abi::MAX_CONNS, value_name = "N")]
        max_conns: u32,
        /// Pass over the probe-table alternatives that use this hook (an event or kernel
        /// function name), as on a kernel without it: the tests run the fallbacks this way
        #[arg(long, value_name = "HOOK", hide = true)]
        avoid_hook: Vec<String>,
    },
}

fn main() {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or(format!("hstrace={level}")),
    )
    .format_timestamp(None)
    .format_target(false)
    .init();
    if let Err(e) = run(cli) {
        eprintln!("hstrace: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::BenchPipeline { records } => {
            println!(
                "{:.0}",
                hstrace::bench::pipeline_connections_per_sec(records, None)?
            );
            Ok(())
        }
        Command::BenchSweep { conns } => {
            println!("{:.1}", hstrace::bench::sweep_ms(conns)?);
            Ok(())
        }
        Command::Trace {
            pids,
            comm,
            port,
            duration,
            format,
            no_uprobes,
            uprobes,
            max_conns,
            idle_timeout,
            avoid_hook,
        } => {
            let opts = Options {
                selector: Selector { pids, comm, port },
                uprobes: match (no_uprobes, uprobes) {
                    (true, _) | (_, UprobesArg::None) => Uprobes::None,
                    (_, UprobesArg::Handshake) => Uprobes::Handshake,
                    (_, UprobesArg::All) => Uprobes::All,
                },
                max_conns,
                idle_timeout: Duration::from_secs_f64(idle_timeout),
                avoid_hooks: avoid_hook,
            };
            let format = match format {
                FormatArg::Text => Format::Text,
                FormatArg::Json => Format::Json,
            };
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(hstrace::trace::run(
                opts,
                format,
                duration.map(Duration::from_secs_f64),
            ))
        }
    }
}
