//! The seam every command shares: the record source hands finished records to a sink.
//! `trace` prints them (`print::Printer`), `serve` counts them into metrics and
//! parameters, `export` into parameters only. A sink never sees the raw ABI.

use std::io;

use crate::{
    cold_start::ColdStart,
    health::Health,
    host_cpu::HostCpu,
    params::v1::ColdStartAbsent,
    record::{CloseRecord, Record},
};

pub trait Sink {
    /// A connection's record: its handshake and first request are done, it failed, or it
    /// idled past the timeout.
    fn connection(&mut self, r: &Record) -> io::Result<()>;
    /// A connection ended: its totals.
    fn close(&mut self, c: &CloseRecord) -> io::Result<()>;
    /// About once a second, and once at the end, with the tracer's health.
    fn tick(&mut self, _health: &Health) -> io::Result<()> {
        Ok(())
    }
    /// After each drain of the ring buffer (about every 100 ms when records come).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    /// About once a second: traced process `pid` used `ns` more CPU time since the last
    /// call (its first reading only sets where it starts).
    fn process_cpu(&mut self, _pid: u32, _ns: u64) {}
    /// About once a second, after `process_cpu`: the traced processes' CPUs since the
    /// last call.
    fn host_cpu(&mut self, _h: &HostCpu) {}
    /// Once, when asked for (`source::Options::cold_start`): the cold start measured on a
    /// CPU the traced processes run on.
    fn cold_start(&mut self, _c: &ColdStart) {}
    /// Why there is no cold start (yet): once when the run starts, if asked for one
    /// (`NotYet`), and when its measurement fails (`Failed`).
    fn cold_start_absent(&mut self, _why: ColdStartAbsent) {}
    /// Once, when the run stops tracing: every record is in (the cold start may still
    /// come, when the run waits for it).
    fn stopped(&mut self) {}
}

/// Two sinks fed the same records.
pub struct Both<'a>(pub &'a mut dyn Sink, pub &'a mut dyn Sink);

impl Sink for Both<'_> {
    fn connection(&mut self, r: &Record) -> io::Result<()> {
        self.0.connection(r)?;
        self.1.connection(r)
    }

    fn close(&mut self, c: &CloseRecord) -> io::Result<()> {
        self.0.close(c)?;
        self.1.close(c)
    }

    fn tick(&mut self, health: &Health) -> io::Result<()> {
        self.0.tick(health)?;
        self.1.tick(health)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()?;
        self.1.flush()
    }

    fn process_cpu(&mut self, pid: u32, ns: u64) {
        self.0.process_cpu(pid, ns);
        self.1.process_cpu(pid, ns);
    }

    fn host_cpu(&mut self, h: &HostCpu) {
        self.0.host_cpu(h);
        self.1.host_cpu(h);
    }

    fn cold_start(&mut self, c: &ColdStart) {
        self.0.cold_start(c);
        self.1.cold_start(c);
    }

    fn cold_start_absent(&mut self, why: ColdStartAbsent) {
        self.0.cold_start_absent(why);
        self.1.cold_start_absent(why);
    }

    fn stopped(&mut self) {
        self.0.stopped();
        self.1.stopped();
    }
}
