//! `hstrace export`: the measured stage parameters, once. Either trace for `--duration`
//! (the record source with the estimator as its sink) or ask a running daemon.

use std::{
    io::{Read, Write},
    net::{TcpStream, ToSocketAddrs},
    time::{Duration, Instant, SystemTime},
};

use anyhow::{bail, Context, Result};

use crate::{
    health::Health,
    params::Estimator,
    record::{CloseRecord, Record},
    serve::{add_sample, MAX_SERVERS},
    sink::Sink,
    source::{Options, Source},
    trace::stop_signal,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    Json,
    Csv,
    /// the seed 002 table, for people
    Table,
}

/// The parameter estimator as a sink.
pub struct ParamsSink(pub Estimator);

impl Sink for ParamsSink {
    fn connection(&mut self, r: &Record) -> std::io::Result<()> {
        add_sample(&mut self.0, r);
        Ok(())
    }

    fn close(&mut self, _c: &CloseRecord) -> std::io::Result<()> {
        Ok(())
    }

    fn process_cpu(&mut self, pid: u32, ns: u64) {
        self.0.add_cpu(Instant::now(), pid, ns);
    }
}

/// Trace for `duration` (or until Ctrl-C), then print the parameters of the whole run.
pub async fn traced(opts: Options, duration: Duration, format: ExportFormat) -> Result<()> {
    let source = Source::attach(opts)?;
    eprintln!(
        "hstrace: measuring for {:.0} s; Ctrl-C stops early",
        duration.as_secs_f64()
    );
    let mut sink = ParamsSink(Estimator::new(duration, MAX_SERVERS));
    let health: Health = source.run(&mut sink, stop_signal(Some(duration))).await?;
    eprint!("{}", health.text());
    let p = sink.0.parameters(Instant::now(), SystemTime::now());
    print!(
        "{}",
        match format {
            ExportFormat::Json => p.to_json(),
            ExportFormat::Csv => p.to_csv(),
            ExportFormat::Table => p.text_table(),
        }
    );
    Ok(())
}

/// Ask the daemon at `base` (http://HOST:PORT) for its parameters and print them.
pub fn from_daemon(base: &str, format: ExportFormat) -> Result<()> {
    let path = match format {
        ExportFormat::Json => "/api/v1/parameters",
        ExportFormat::Csv => "/api/v1/parameters?format=csv",
        ExportFormat::Table => {
            bail!("--format table is for --duration: use json or csv with --from")
        }
    };
    print!("{}", http_get(base, path)?);
    Ok(())
}

/// A plain HTTP/1.0 GET (the daemon's own API on a trusted address: no TLS, no redirects).
pub fn http_get(base: &str, path: &str) -> Result<String> {
    let hostport = base
        .strip_prefix("http://")
        .with_context(|| {
            format!("{base:?} is not an http:// address (e.g. http://127.0.0.1:9725)")
        })?
        .trim_end_matches('/');
    let addr = hostport
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {hostport:?}"))?
        .next()
        .with_context(|| format!("{hostport:?} has no address"))?;
    let no_daemon = || {
        format!("no hstrace daemon answered at {base} (is `hstrace serve` running there? its --listen address?)")
    };
    let mut s =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).with_context(no_daemon)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).with_context(no_daemon)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").with_context(no_daemon)?;
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        bail!("{base}{path} answered {status}: {}", body.trim());
    }
    Ok(body.to_owned())
}
