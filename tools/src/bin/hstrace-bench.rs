//! `hstrace-bench`: the figures of `cargo xtask bench` that need hstrace's insides. Each
//! command prints one number (`pipeline --per-conn` two; or holds its programs until
//! stopped).

use anyhow::Result;
use clap::{Parser, Subcommand};
use hstrace_tools::bench::{self, HookSet};

#[derive(Parser)]
#[command(
    name = "hstrace-bench",
    about = "hstrace's own figures for `cargo xtask bench`"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Connections per second the userspace pipeline sustains on synthetic records (4
    /// ring-buffer records each)
    Pipeline {
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Through serve's sinks (metrics and parameters) instead of JSON lines
        #[arg(long)]
        serve: bool,
        /// With --serve: the daemon's OTLP push on too, to this URL (the record path
        /// then also hands each record to the OTLP side's queue of 16,384; keep
        /// --records / 4 under that to measure no drops)
        #[arg(long, value_name = "URL")]
        otlp: Option<String>,
        /// Print, per connection in ns, the CPU the record path's own thread spent and
        /// the wall time (two numbers), instead of connections per second
        #[arg(long)]
        per_conn: bool,
    },
    /// Milliseconds one idle sweep takes over N live connections
    Sweep {
        #[arg(long, default_value_t = 65536)]
        conns: u32,
    },
    /// Nanoseconds kernel.bpf_stats_enabled adds to each program run, from an empty
    /// program on sock_recv_length
    StatsFloor {
        #[arg(long, default_value_t = 200_000)]
        calls: u32,
    },
    /// Empty programs at the hooks `hstrace trace` attaches, held until stopped: what the
    /// hooks and the counting cost under a load
    HooksAlone {
        /// all of them, only the syscall tracepoints, all but those, or only those no
        /// connection fires (a control)
        #[arg(long, value_enum, default_value_t = HookSet::All)]
        hooks: HookSet,
    },
}

fn main() {
    if let Err(e) = run(Cli::parse()) {
        eprintln!("hstrace-bench: {e:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Pipeline {
            records,
            serve,
            otlp,
            per_conn,
        } => {
            let run = bench::pipeline(records, serve, otlp)?;
            if per_conn {
                println!("{:.0} {:.0}", run.thread_cpu_ns_per_conn, 1e9 / run.per_sec)
            } else {
                println!("{:.0}", run.per_sec)
            }
        }
        Command::Sweep { conns } => println!("{:.1}", bench::sweep_ms(conns)?),
        Command::StatsFloor { calls } => println!("{:.1}", bench::stats_floor_ns(calls)?),
        Command::HooksAlone { hooks } => bench::hooks_alone(hooks)?,
    }
    Ok(())
}
