//! How records are printed: the JSON lines (a documented contract, whose types are in
//! lines.rs: its tests hold this writer to them), the text line, and the printer sink
//! `trace` uses.

use std::{
    fmt::Write as _,
    io::{self, Write},
};

use crate::{
    container::Container,
    health::Health,
    json::Object,
    record::{CloseRecord, Record},
    sink::Sink,
    stage::{Stage, Stages},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Writes one line per connection (JSON: and one per close) to `out`.
pub struct Printer<W: Write> {
    format: Format,
    out: io::BufWriter<W>,
    /// the line being written
    buf: Vec<u8>,
}

impl<W: Write> Printer<W> {
    pub fn new(format: Format, w: W) -> Self {
        Printer {
            format,
            out: io::BufWriter::new(w),
            buf: Vec::with_capacity(4096),
        }
    }
}

impl<W: Write> Sink for Printer<W> {
    fn connection(&mut self, r: &Record) -> io::Result<()> {
        self.buf.clear();
        match self.format {
            Format::Json => r.json(&mut self.buf),
            Format::Text => self.buf.extend_from_slice(r.text().as_bytes()),
        }
        self.buf.push(b'\n');
        self.out.write_all(&self.buf)
    }

    /// Close lines are JSON only: text mode shows one line per connection.
    fn close(&mut self, c: &CloseRecord) -> io::Result<()> {
        if self.format == Format::Text {
            return Ok(());
        }
        self.buf.clear();
        c.json(&mut self.buf);
        self.buf.push(b'\n');
        self.out.write_all(&self.buf)
    }

    fn tick(&mut self, _health: &Health) -> io::Result<()> {
        self.out.flush()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// The fields both lines open with.
fn line_head<'a>(
    out: &'a mut Vec<u8>,
    record: &str,
    time: &str,
    conn_id: u64,
    pid: u32,
) -> Object<'a> {
    let mut o = Object::begin(out);
    o.str("record", record)
        .str("time", time)
        .u64("conn_id", conn_id)
        .u64("pid", pid.into());
    o
}

impl Record {
    /// The JSON line, fields in this order: `null` when unknown, the optional ones left
    /// out when absent or empty.
    pub fn json(&self, out: &mut Vec<u8>) {
        let (time, local, peer) = (self.time(), self.local.to_string(), self.peer.to_string());
        let mut o = line_head(out, self.record, &time, self.conn_id, self.pid);
        o.str("comm", &self.comm)
            .str("local", &local)
            .str("peer", &peer)
            .str("protocol", self.protocol);
        if let Some(p) = self.app_protocol {
            o.str("app_protocol", p);
        }
        if let Some(s) = self.starttls {
            o.str("starttls", s);
        }
        o.opt_str("tls_version", self.tls_version)
            .opt_str("cipher", self.cipher.as_deref())
            .opt_str("sni", self.sni.as_deref())
            .opt_str("alpn", self.alpn.as_deref());
        if !self.alpn_offered.is_empty() {
            o.strs("alpn_offered", &self.alpn_offered);
        }
        if let Some(g) = &self.tls_group {
            o.str("tls_group", g);
        }
        if let Some(c) = self.hrr_cause {
            o.str("hrr_cause", c);
        }
        if let Some(p) = self.pq_offered {
            o.bool("pq_offered", p);
        }
        if let Some(n) = self.client_hello_bytes {
            o.u64("client_hello_bytes", n.into());
        }
        if let Some(j) = &self.ja4 {
            o.str("ja4", j);
        }
        o.str("kind", self.kind.name())
            .bool("resumption_offered", self.resumption_offered);
        if let Some(r) = self.resumption {
            o.str("resumption", r.name());
        }
        if self.early_data {
            o.bool("early_data", true);
        }
        if let Some(h) = self.handshake_ns {
            o.u64("handshake_ns", h);
        }
        o.object("stages_ns", |m| stages_json(&self.stages_ns, m));
        if !self.cpu_ns.is_empty() {
            o.object("cpu_ns", |m| stages_json(&self.cpu_ns, m));
        }
        if !self.wait_cpu_ns.is_empty() {
            o.object("wait_cpu_ns", |m| stages_json(&self.wait_cpu_ns, m));
        }
        if let Some(idle) = &self.idle_before {
            o.strs("idle_before", idle.iter().map(|s| s.name()));
        }
        if let Some(l) = &self.library {
            o.object("library", |m| {
                m.u64("request_bytes", l.request_bytes)
                    .u64("request_ns", l.request_ns)
                    .u64("response_bytes", l.response_bytes)
                    .u64("response_ns", l.response_ns);
            });
        }
        // service / queue / delay of each stage present
        o.object("stage_classes", |m| {
            for (s, _) in &self.stages_ns.0 {
                m.str(s.name(), s.class().name());
            }
        });
        if let Some(f) = self.failure {
            o.str("failure", f);
        }
        if let Some(f) = self.failed_in {
            o.str("failed_in", f.name());
        }
        if let Some(a) = &self.alert {
            o.object("alert", |m| {
                m.str("from", a.from)
                    .u64("level", a.level.into())
                    .u64("description", a.description.into());
            });
        }
        o.opt_str("hs_done_from", self.hs_done_from)
            .u64("ssl_calls", self.ssl_calls.into())
            .u64("ssl_ns", self.ssl_ns);
        if !self.notes.is_empty() {
            o.strs("notes", &self.notes);
        }
        if let Some(c) = &self.container {
            container_json(c, &mut o);
        }
        o.end();
    }
}

/// `container_id`, and the pod's `k8s_pod_name` and `k8s_namespace_name` when known.
fn container_json(c: &Container, o: &mut Object) {
    o.str("container_id", &c.id);
    if let Some(p) = &c.pod {
        o.str("k8s_pod_name", &p.name)
            .str("k8s_namespace_name", &p.namespace);
    }
}

fn stages_json(stages: &Stages, m: &mut Object) {
    for (s, v) in &stages.0 {
        m.u64(s.name(), *v);
    }
}

impl CloseRecord {
    /// The JSON line; `duration_ns` left out when the accept time is unknown.
    pub fn json(&self, out: &mut Vec<u8>) {
        let time = self.time();
        let mut o = line_head(out, self.record, &time, self.conn_id, self.pid);
        o.u64("exchanges", self.exchanges.into())
            .u64("bytes_in", self.bytes_in)
            .u64("bytes_out", self.bytes_out);
        if let Some(d) = self.duration_ns {
            o.u64("duration_ns", d);
        }
        if let Some(c) = &self.container {
            container_json(c, &mut o);
        }
        o.end();
    }
}

fn dur(ns: u64) -> String {
    match ns {
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{:.1}us", n as f64 / 1e3),
        n => format!("{:.2}ms", n as f64 / 1e6),
    }
}

impl Record {
    /// One readable line: who, what, and the timeline of stages.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} {}[{}] {} -> {} ",
            &self.time()[11..26],
            self.comm,
            self.pid,
            self.peer,
            self.local
        );
        if let Some(v) = self.tls_version {
            let _ = write!(s, "TLS{v} ");
        }
        s.push_str(self.kind.name());
        if let Some(r) = self.resumption {
            let _ = write!(s, "({})", r.name());
        }
        if let Some(f) = self.failure {
            let _ = write!(s, "({f} in {})", self.failed_in.map_or("?", Stage::name));
        }
        for (k, v) in [
            ("app", self.app_protocol),
            ("starttls", self.starttls),
            ("cipher", self.cipher.as_deref()),
            ("sni", self.sni.as_deref()),
            ("alpn", self.alpn.as_deref()),
            ("group", self.tls_group.as_deref()),
            ("hrr", self.hrr_cause),
        ] {
            if let Some(v) = v {
                let _ = write!(s, " {k}={v}");
            }
        }
        if let Some(c) = &self.container {
            // the short id, as `docker ps` and `crictl ps` show it
            let _ = write!(s, " container={}", &c.id[..c.id.len().min(12)]);
            if let Some(p) = &c.pod {
                let _ = write!(s, " pod={}/{}", p.namespace, p.name);
            }
        }
        if let Some(h) = self.handshake_ns {
            let _ = write!(s, " handshake={}", dur(h));
        }
        let timeline: Vec<String> = self
            .stages_ns
            .0
            .iter()
            .map(|(k, v)| format!("{} {}", k.name(), dur(*v)))
            .collect();
        if !timeline.is_empty() {
            let _ = write!(s, " | {}", timeline.join(" > "));
        }
        s
    }
}
