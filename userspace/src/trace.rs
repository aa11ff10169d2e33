//! `hstrace trace`: the record source with the printer as its sink; totals at exit.

use std::{io, time::Duration};

use anyhow::Result;

use crate::{
    print::{Format, Printer},
    signal::stop_signal,
    source::{Options, Source},
};

/// Trace until Ctrl-C or `duration`: records on stdout, totals on stderr (and, with
/// `Format::Json`, the same totals as one JSON line).
pub async fn run(opts: Options, format: Format, duration: Option<Duration>) -> Result<()> {
    let source = Source::attach(opts)?;
    let stop = stop_signal(duration);
    eprintln!("hstrace: tracing; Ctrl-C stops and prints totals");
    let stdout = io::stdout();
    let mut printer = Printer::new(format, stdout.lock());
    match source.run(&mut printer, stop).await {
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
