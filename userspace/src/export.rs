//! `hstrace export`: the measured stage parameters, once. Either trace for `--duration`
//! (the record source with the estimator as its sink) or ask a running daemon.

use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;

use crate::{
    health::Health,
    http_client,
    params::{format, Estimator, Parameters, MAX_SERVERS},
    signal::stop_signal,
    source::{Options, Source},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Json,
    Csv,
    /// the stage table, for people
    Table,
}

/// Trace for `duration` (or until Ctrl-C), then print the parameters of the whole run.
pub async fn traced(opts: Options, duration: Duration, format: ExportFormat) -> Result<()> {
    let source = Source::attach(opts)?;
    let stop = stop_signal(Some(duration));
    eprintln!(
        "hstrace: measuring for {:.0} s; Ctrl-C stops early",
        duration.as_secs_f64()
    );
    let mut estimator = Estimator::for_run(duration, MAX_SERVERS);
    let health: Health = source.run(&mut estimator, stop).await?;
    eprint!("{}", health.text());
    let p = estimator.parameters(Instant::now(), SystemTime::now());
    print!(
        "{}",
        match format {
            ExportFormat::Json => p.to_json(),
            ExportFormat::Csv => format::csv(&p),
            ExportFormat::Table => format::table(&p),
        }
    );
    Ok(())
}

/// Ask the daemon at `base` (http://HOST:PORT) for its parameters and print them.
pub fn from_daemon(base: &str, format: ExportFormat) -> Result<()> {
    let get = |path| http_client::get(base, path, http_client::Server::Daemon);
    let text = match format {
        ExportFormat::Json => get("/api/v1/parameters")?,
        ExportFormat::Csv => get("/api/v1/parameters?format=csv")?,
        // the daemon's JSON, laid out as --duration's table
        ExportFormat::Table => {
            format::table(&Parameters::from_json(&get("/api/v1/parameters")?, base)?)
        }
    };
    print!("{text}");
    Ok(())
}
