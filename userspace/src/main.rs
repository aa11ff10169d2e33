//! `hstrace`: parse the command line, set the log level, run the command (cli.rs).

use clap::Parser;
use hstrace::cli::{self, Cli};

fn main() {
    let cli = Cli::parse();
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        // -vvv: every kernel record as it arrives, before it is joined and cut into stages
        _ => "trace",
    };
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or(format!("hstrace={level}")),
    )
    .format_timestamp(None)
    .format_target(false)
    .init();
    if let Err(e) = cli::run(cli) {
        eprintln!("hstrace: {e:#}");
        std::process::exit(1);
    }
}
