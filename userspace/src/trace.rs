//! `hstrace trace`: the record source with the printer as its sink; totals at exit.

use std::{io, time::Duration};

use anyhow::Result;

use crate::{
    print::{Format, Printer},
    source::{Options, Source},
};

/// Trace until Ctrl-C or `duration`: records on stdout, totals on stderr (and, with
/// `Format::Json`, the same totals as one JSON line).
pub async fn run(opts: Options, format: Format, duration: Option<Duration>) -> Result<()> {
    let source = Source::attach(opts)?;
    eprintln!("hstrace: tracing; Ctrl-C stops and prints totals");
    let stdout = io::stdout();
    let mut printer = Printer::new(format, stdout.lock());
    match source.run(&mut printer, stop_signal(duration)).await {
        Ok(health) => {
            eprint!("{}", health.text());
            if format == Format::Json {
                eprintln!("{}", health.json());
            }
            Ok(())
        }
        // the reader went away (`| head`): nothing left to say
        Err(e)
            if e.downcast_ref::<io::Error>()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Completes on Ctrl-C, SIGTERM, or after `duration`.
pub async fn stop_signal(duration: Option<Duration>) {
    let deadline = async {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
        _ = deadline => {}
    }
}
