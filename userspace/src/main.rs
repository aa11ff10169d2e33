//! The `hstrace` command line: parses and checks options, then wires a command.

use std::{net::SocketAddr, time::Duration};

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use hstrace::{
    export::{self, ExportFormat},
    print::Format,
    probes::Uprobes,
    serve::{self, ServeOptions},
    source::Options,
    targets::Selector,
};

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

#[derive(Clone, Copy, ValueEnum)]
enum ExportFormatArg {
    Json,
    Csv,
    Table,
}

/// What to trace and how: the same for trace, serve and export.
#[derive(Args)]
struct SourceArgs {
    /// Trace this process and its descendants (a master's workers); repeatable
    #[arg(long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// Trace every process with this name
    #[arg(long, value_name = "NAME")]
    comm: Option<String>,
    /// Trace connections to this listening port
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
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
}

#[derive(Subcommand)]
enum Command {
    /// Connections per second the userspace pipeline sustains on synthetic records (4
    /// ring-buffer records each; for `cargo xtask bench`)
    #[command(hide = true)]
    BenchPipeline {
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Through serve's sinks (metrics and parameters) instead of JSON lines
        #[arg(long)]
        serve: bool,
    },
    /// Milliseconds one idle sweep takes over N live connections (for `cargo xtask bench`)
    #[command(hide = true)]
    BenchSweep {
        #[arg(long, default_value_t = 65536)]
        conns: u32,
    },
    /// Print one record per finished connection handshake, live
    Trace {
        #[command(flatten)]
        source: SourceArgs,
        /// Stop after this many seconds (default: until Ctrl-C)
        #[arg(long, value_name = "SECONDS")]
        duration: Option<f64>,
        /// text: one readable line per connection; json: one JSON object per line
        #[arg(long, value_enum, default_value = "text")]
        format: FormatArg,
    },
    /// The daemon: Prometheus metrics, health and the measured stage parameters over HTTP
    Serve {
        #[command(flatten)]
        source: SourceArgs,
        /// Address to answer on (loopback by default: put it on another address only
        /// behind your network policy)
        #[arg(long, default_value = "127.0.0.1:9725", value_name = "ADDR:PORT")]
        listen: String,
        /// The parameters cover the last this many seconds
        #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
        window: f64,
        /// SNI label values kept in the metrics; the rest are counted as "other"
        #[arg(long, default_value_t = 50, value_name = "N")]
        max_sni: usize,
    },
    /// Print the measured stage parameters once: trace for --duration, or ask a daemon
    Export {
        #[command(flatten)]
        source: SourceArgs,
        /// Trace this many seconds, then print the parameters of the whole run
        #[arg(long, value_name = "SECONDS", conflicts_with = "from")]
        duration: Option<f64>,
        /// Ask the `hstrace serve` at this address instead (e.g. http://127.0.0.1:9725)
        #[arg(long, value_name = "URL")]
        from: Option<String>,
        /// json (hstrace.parameters/v1), csv (a row per server, class and stage), table
        #[arg(long, value_enum, default_value = "json")]
        format: ExportFormatArg,
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

/// Seconds from the command line, checked: finite, positive, at most a year.
fn seconds(flag: &str, v: f64) -> Result<Duration> {
    if !v.is_finite() || v <= 0.0 || v > 365.0 * 86400.0 {
        bail!("{flag} {v} is not a number of seconds between 0 and one year: give e.g. {flag} 60");
    }
    Ok(Duration::from_secs_f64(v))
}

impl SourceArgs {
    fn options(self) -> Result<Options> {
        if self.max_conns < 16 || self.max_conns > 1 << 22 {
            bail!(
                "--max-conns {} is out of range: give between 16 and {} (default {})",
                self.max_conns,
                1 << 22,
                hstrace::abi::MAX_CONNS
            );
        }
        Ok(Options {
            selector: Selector {
                pids: self.pids,
                comm: self.comm,
                port: self.port,
            },
            uprobes: match (self.no_uprobes, self.uprobes) {
                (true, _) | (_, UprobesArg::None) => Uprobes::None,
                (_, UprobesArg::Handshake) => Uprobes::Handshake,
                (_, UprobesArg::All) => Uprobes::All,
            },
            max_conns: self.max_conns,
            idle_timeout: seconds("--idle-timeout", self.idle_timeout)?,
            avoid_hooks: self.avoid_hook,
        })
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::BenchPipeline { records, serve } => {
            println!("{:.0}", hstrace::bench::pipeline(records, serve)?);
            Ok(())
        }
        Command::BenchSweep { conns } => {
            println!("{:.1}", hstrace::bench::sweep_ms(conns)?);
            Ok(())
        }
        Command::Trace {
            source,
            duration,
            format,
        } => {
            let opts = source.options()?;
            let duration = duration.map(|d| seconds("--duration", d)).transpose()?;
            let format = match format {
                FormatArg::Text => Format::Text,
                FormatArg::Json => Format::Json,
            };
            runtime()?.block_on(hstrace::trace::run(opts, format, duration))
        }
        Command::Serve {
            source,
            listen,
            window,
            max_sni,
        } => {
            let opts = source.options()?;
            let listen: SocketAddr = listen.parse().map_err(|_| {
                anyhow::anyhow!(
                    "--listen {listen:?} is not an address:port (e.g. 127.0.0.1:9725 or [::1]:9725)"
                )
            })?;
            if max_sni > 10_000 {
                bail!("--max-sni {max_sni} is too many series: give at most 10000 (default 50)");
            }
            serve::run(
                opts,
                ServeOptions {
                    listen,
                    window: seconds("--window", window)?,
                    max_sni,
                },
            )
        }
        Command::Export {
            source,
            duration,
            from,
            format,
        } => {
            let format = match format {
                ExportFormatArg::Json => ExportFormat::Json,
                ExportFormatArg::Csv => ExportFormat::Csv,
                ExportFormatArg::Table => ExportFormat::Table,
            };
            match (from, duration) {
                (Some(url), _) => export::from_daemon(&url, format),
                (None, Some(d)) => {
                    let d = seconds("--duration", d)?;
                    let opts = source.options()?;
                    runtime()?.block_on(export::traced(opts, d, format))
                }
                (None, None) => bail!(
                    "say where the parameters come from: --duration SECONDS (trace now) or --from http://HOST:PORT (a running hstrace serve)"
                ),
            }
        }
    }
}
