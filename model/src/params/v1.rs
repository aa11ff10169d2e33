//! The `hstrace.parameters/v1` document, as one type that both writes it (`serve`'s
//! `/api/v1/parameters`, `hstrace export`) and reads it (`hstrace model --params` and
//! `--from`). A contract: fields are only ever added (docs/parameters.md). The reader
//! takes hand-written files too: every measured figure but a stage's class and mean may be
//! left out, and fields it does not know are passed over.

use anyhow::{anyhow, bail, Result};
use serde::{Deserialize, Serialize};

use crate::{
    cold_start::ColdStart,
    ordered::Ordered,
    stage::{RequestClass, StageClass},
};

/// The schema name every document carries.
pub const SCHEMA: &str = "hstrace.parameters/v1";

/// One document: the window it covers and its servers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameters {
    /// always `SCHEMA`
    pub schema: String,
    /// the measured window (a hand-written file may have none)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// the host the servers ran on (absent in documents written before it, or by hand)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<Host>,
    pub servers: Vec<ServerParams>,
}

/// The host the document was made on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// CPUs online when the document was made (not a cpuset's share)
    pub cpus: u32,
    /// the CPUs the traced servers' processes may run on (the union of their affinity)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_cpus: Option<u32>,
    /// how many of those CPUs everything but the servers' processes kept busy, on average
    /// over the window: other programs, the kernel's interrupts, hstrace itself. The model
    /// takes it off the servers' capacity. Both absent before the daemon has read the CPUs
    /// twice (and in documents written before them, or by hand)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_cpus: Option<f64>,
    /// what a TLS record's work costs on a CPU the servers run on, back to back and after
    /// pauses (`cold_start`): measured only when asked (`serve`/`export`
    /// `--measure-cold-start`), some 7 s after hstrace began following the servers; absent
    /// otherwise, before that, where it could not be measured (no libcrypto.so.3), and in
    /// documents written before it or by hand
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start: Option<ColdStart>,
    /// why `cold_start` is absent, where it is (absent in documents written before hstrace
    /// said, and beside a cold start)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_start_absent: Option<ColdStartAbsent>,
}

/// Why a document holds no cold start (`host.cold_start_absent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColdStartAbsent {
    /// not asked for: hstrace runs no work of its own unless told `--measure-cold-start`
    NotAsked,
    /// asked for, not measured yet (the first seconds after the servers were first seen)
    NotYet,
    /// asked for, and it could not be measured (stderr said why)
    Failed,
}

impl ColdStartAbsent {
    /// In words, for stderr and the table.
    pub fn words(self) -> &'static str {
        match self {
            ColdStartAbsent::NotAsked => "not measured: hstrace serve and export measure it only when told --measure-cold-start",
            ColdStartAbsent::NotYet => "not measured yet (it takes about 7 s after the servers were first seen)",
            ColdStartAbsent::Failed => "its measurement failed (the daemon's stderr said why)",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// RFC 3339 UTC
    pub start: String,
    pub end: String,
    pub seconds: f64,
}

/// One server (`comm:port` of the listening socket).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerParams {
    pub server: String,
    /// every connection of the server in the window
    #[serde(default)]
    pub connections: u64,
    /// those that failed (in no class)
    #[serde(default)]
    pub failed: u64,
    #[serde(default)]
    pub cache: Cache,
    #[serde(default)]
    pub cpu: Cpu,
    /// how the server holds its connections, told from the window's (absent when it had
    /// none, in documents written before it, or by hand)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<Architecture>,
    /// how long a message waited for a call that woke the server's CPU, by how long the
    /// CPU had slept (shortest first; absent when no call found its CPU idle, or its idle
    /// exits could not be read)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub wakeup_after_idle: Vec<WakeupAfter>,
    pub classes: Classes,
    /// the full TLS handshakes by the key-exchange group they agreed on, most first: what
    /// each group's handshake costs the server (absent when no full handshake's group was
    /// known, and in documents written before it)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_exchange: Vec<GroupParams>,
}

/// The full TLS handshakes of one key-exchange group: how many, the mean of each of their
/// service stages, wall and on-CPU, and of each of their delay stages (the waits for the
/// client: its own key-share work, and the network).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupParams {
    /// the trace records' `tls_group` (`x25519`, `X25519MLKEM768`, `ffdhe`, `rsa`, …)
    pub group: String,
    /// full handshakes with it in the window
    pub count: u64,
    /// its share of the window's full handshakes whose group is known
    pub share: f64,
    /// each service stage's mean wall and on-CPU time with this group, in stage order
    pub stages: Ordered<GroupStage>,
    /// the sum of those stages' means: a full handshake's service demand with this group
    pub service_s: f64,
    /// each delay stage's mean wall time with this group, in stage order (`cpu_mean_s`
    /// null: a delay stage's CPU is not the server's); absent in documents written before
    /// it
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_stages: Option<Ordered<GroupStage>>,
    /// the sum of those stages' means: a full handshake's waits for its client with this
    /// group; absent likewise
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_s: Option<f64>,
}

/// One service (or delay) stage of one group's full handshakes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GroupStage {
    pub count: u64,
    pub mean_s: f64,
    /// null where no on-CPU time was read
    pub cpu_mean_s: Option<f64>,
}

/// The messages (and accepts) of a server whose handler call found its CPU had been idle
/// since one of the traced servers' handlers last ran there, over one range of how long the
/// CPU had slept before the message came: the CPU's wake-up, then the server's way to its
/// read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WakeupAfter {
    /// the mean sleep of the range's messages, seconds
    pub idle_s: f64,
    pub count: u64,
    /// their mean wait (their queue stages'), seconds
    pub mean_s: f64,
}

/// How a server holds its connections (`params::architecture`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Architecture {
    pub kind: ArchitectureKind,
    /// distinct processes that accepted the server's connections in the window
    pub processes: u32,
    /// the most connections one of them held at once (accept → the record's end)
    pub most_at_once: u32,
    /// the most threads among them when the document was made; absent when none could
    /// be read (all gone)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
}

/// The kinds of server architecture hstrace tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArchitectureKind {
    /// single-threaded processes each holding several connections at once (nginx, HAProxy)
    EventLoop,
    /// never more than one connection at once per process, several processes (Apache
    /// prefork)
    ProcessPerConnection,
    /// multi-threaded processes (Apache worker/event, Node with a pool)
    Threads,
    /// the window cannot tell (one process that never held two connections at once); a
    /// kind a later hstrace adds reads as this
    #[serde(other)]
    Unknown,
}

impl ArchitectureKind {
    pub fn name(self) -> &'static str {
        match self {
            ArchitectureKind::EventLoop => "event_loop",
            ArchitectureKind::ProcessPerConnection => "process_per_connection",
            ArchitectureKind::Threads => "threads",
            ArchitectureKind::Unknown => "unknown",
        }
    }
}

/// The session cache: handshakes whose client offered resumption, and those resumed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cache {
    pub offered: u64,
    pub accepted: u64,
    /// accepted / offered; null when nothing was offered
    pub hit_ratio: Option<f64>,
    /// resumed / (full + resumed); null without TLS handshakes
    pub resumption_rate: Option<f64>,
}

/// The CPU of the processes that accepted the server's connections, per connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Cpu {
    /// each process's CPU time over the window divided among all the connections it
    /// accepted, averaged over this server's connections
    pub per_connection_s: Option<f64>,
    /// the same less the connections' service stages: accepting, closing, logging, the
    /// event loop's own work
    pub outside_stages_s: Option<f64>,
    /// the server thread's median on-CPU time across one of a connection's waits for its
    /// client between two service stages (the trace lines' `wait_cpu_ns`): at low load, an
    /// event loop's cost of going to sleep and waking once. Part of `outside_stages_s`.
    /// Absent when no wait was read (and in documents written before it)
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_wait_s: Option<f64>,
    /// such waits per connection (their CPU is `per_wait_s` × this); absent likewise
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits_per_connection: Option<f64>,
}

/// The three request classes, each always present.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classes {
    pub tls_full: ClassParams,
    pub tls_resumed: ClassParams,
    pub plain: ClassParams,
}

impl Classes {
    pub fn get(&self, class: RequestClass) -> &ClassParams {
        match class {
            RequestClass::TlsFull => &self.tls_full,
            RequestClass::TlsResumed => &self.tls_resumed,
            RequestClass::Plain => &self.plain,
        }
    }

    /// Each class with its parameters, in `RequestClass::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = (RequestClass, &ClassParams)> {
        RequestClass::ALL.into_iter().map(|c| (c, self.get(c)))
    }
}

/// One request class of a server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassParams {
    /// its part of the server's classified connections
    pub share: f64,
    #[serde(default)]
    pub count: u64,
    #[serde(default)]
    pub rate_per_s: f64,
    /// each stage seen, in wire order
    pub stages: StageMap,
    /// the sums of the stages' means by stage class
    #[serde(default)]
    pub demand_s: Demand,
}

/// One stage's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageParams {
    pub class: StageClass,
    /// connections that had the stage
    #[serde(default)]
    pub count: u64,
    /// the exact mean
    pub mean_s: f64,
    /// percentiles from an HDR histogram (≤ 1 % relative error)
    #[serde(default)]
    pub p50_s: f64,
    #[serde(default)]
    pub p90_s: f64,
    #[serde(default)]
    pub p99_s: f64,
    /// the mean on-CPU time of a service stage; null for the others, or when unknown
    #[serde(default)]
    pub cpu_mean_s: Option<f64>,
    /// a service stage's on-CPU figures split by what its CPU did before it: idle since a
    /// service stage last ended there (the trace lines' `idle_before`: cold caches, a wake
    /// from an idle state), or busy with another one. Under load the second grows, and a
    /// stage costs less. Counts of the stages read each way and their mean on-CPU time;
    /// absent when unknown (and in documents written before them)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_idle: Option<CpuAfter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_busy: Option<CpuAfter>,
    /// a queue stage's waits split the same way by the service stage that read the message:
    /// after an idle CPU, the server waking up to it; after a busy one, the server finishing
    /// other work first. Counts and mean waits; absent when unknown (and in documents
    /// written before them)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_after_idle: Option<WaitAfter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_after_busy: Option<WaitAfter>,
}

/// A service stage's on-CPU time over the stages that began with their CPU idle, or busy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuAfter {
    pub count: u64,
    pub cpu_mean_s: f64,
}

/// A queue stage's wait over the messages read by a service stage that began with its CPU
/// idle, or busy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WaitAfter {
    pub count: u64,
    pub mean_s: f64,
}

/// The ranges of sleeps `wakeup_after_idle` keeps apart: sleeps shorter than 64 µs, then
/// each 4 times the last (64 µs × 4ᵏ: to 256 µs, 1.02 ms, 4.1 ms, 16.4 ms, 65.5 ms, 262 ms,
/// 1.05 s), and the longer.
pub const WAKE_BINS: usize = 9;

/// The longest sleep `wakeup_after_idle` takes as it was, seconds (4 times the last range's
/// start): one longer (a night without traffic) counts as this long, or it alone would make
/// the last range's mean.
pub const LONGEST_SLEEP_S: f64 = 64e-6 * 16_384.0 * 4.0;

/// The bin of a sleep of `asleep_s` seconds (`WAKE_BINS`).
pub fn wake_bin(asleep_s: f64) -> usize {
    let mut edge = 64e-6;
    let mut bin = 0;
    while bin + 1 < WAKE_BINS && asleep_s >= edge {
        edge *= 4.0;
        bin += 1;
    }
    bin
}

impl WakeupAfter {
    /// Wake-ups of several windows or ports together (the CPUs they share): each range of
    /// sleeps (`wake_bin`) the count-weighted means of those in it, shortest first.
    pub fn pooled<'a>(all: impl IntoIterator<Item = &'a WakeupAfter>) -> Vec<WakeupAfter> {
        let mut bins = [(0.0, 0u64, 0.0); WAKE_BINS];
        for w in all {
            let b = &mut bins[wake_bin(w.idle_s)];
            b.0 += w.idle_s * w.count as f64;
            b.1 += w.count;
            b.2 += w.mean_s * w.count as f64;
        }
        bins.into_iter()
            .filter(|b| b.1 > 0)
            .map(|(idle, count, mean)| WakeupAfter {
                idle_s: idle / count as f64,
                count,
                mean_s: mean / count as f64,
            })
            .collect()
    }
}

/// The per-request service demand, queueing and delay the queueing model takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Demand {
    pub service: f64,
    pub queue: f64,
    pub delay: f64,
}

impl Demand {
    pub fn add(&mut self, class: StageClass, s: f64) {
        match class {
            StageClass::Service => self.service += s,
            StageClass::Queue => self.queue += s,
            StageClass::Delay => self.delay += s,
        }
    }
}

/// A class's stages by name, in wire order. A name is hstrace's stage name, or, in a
/// hand-written file, a stage hstrace has no name for.
pub type StageMap = Ordered<StageParams>;

impl Parameters {
    /// The document as JSON, one line.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string(self).expect("the parameters serialize");
        s.push('\n');
        s
    }

    /// Read a document; `origin` (a file name, a URL) names it in errors, with the path of
    /// the field at fault.
    pub fn from_json(text: &str, origin: &str) -> Result<Parameters> {
        let hint = "give the hstrace.parameters/v1 JSON that `hstrace export` or a daemon's /api/v1/parameters writes (docs/parameters.md)";
        #[derive(Deserialize)]
        struct Head {
            schema: Option<String>,
        }
        let head: Head = serde_json::from_str(text)
            .map_err(|e| anyhow!("{origin} is not a JSON object ({e}): {hint}"))?;
        let schema = head.schema.as_deref().unwrap_or("none");
        if schema != SCHEMA {
            bail!("{origin} has schema {schema:?}, not {SCHEMA:?}: {hint}");
        }
        let mut de = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut de)
            .map_err(|e| anyhow!("{origin}: {}: {}: {hint}", e.path(), e.inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the daemon wrote in a real run reads back, and writes out as the same JSON.
    #[test]
    fn a_real_document_reads_and_writes_back_the_same() {
        let text = include_str!("../../../examples/parameters.json");
        let p = Parameters::from_json(text, "examples/parameters.json").unwrap();
        assert_eq!(p.servers.len(), 2);
        let tls = &p.servers[1].classes.tls_full;
        assert!(!tls.stages.0.is_empty());
        // wire order kept
        assert_eq!(tls.stages.0[0].0, "accept_queue");
        // (numbers compared as numbers: the daemon that wrote it spelled 1.0 "1")
        fn floats(v: serde_json::Value) -> serde_json::Value {
            use serde_json::Value;
            match v {
                Value::Number(n) => n.as_f64().map_or(Value::Null, Value::from),
                Value::Array(a) => Value::Array(a.into_iter().map(floats).collect()),
                Value::Object(o) => {
                    Value::Object(o.into_iter().map(|(k, v)| (k, floats(v))).collect())
                }
                v => v,
            }
        }
        let written: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
        let mut original: serde_json::Value = serde_json::from_str(text).unwrap();
        // the file was written before `cpu` was added (fields are only ever added): an old
        // document reads, and is written back with the new field unknown
        for s in original["servers"].as_array_mut().unwrap() {
            assert!(s.get("cpu").is_none());
            s["cpu"] = serde_json::json!({"per_connection_s": null, "outside_stages_s": null});
        }
        assert_eq!(floats(written), floats(original));
    }

    /// A hand-written file: no window, no counts, a stage hstrace has no name for.
    #[test]
    fn a_hand_written_file_reads() {
        let text = include_str!("../../../examples/seed002-parameters.json");
        let p = Parameters::from_json(text, "seed").unwrap();
        let full = &p.servers[0].classes.tls_full;
        assert_eq!(full.share, 0.2);
        assert!(full.stages.0.iter().any(|(n, _)| n == "server_finish"));
        assert_eq!(p.window, None);
        assert_eq!(p.servers[0].cpu, Cpu::default());
        assert_eq!((p.host, p.servers[0].architecture), (None, None));
    }

    /// The host and the architecture read and write back; a kind this hstrace does not
    /// know reads as unknown.
    #[test]
    fn host_and_architecture() {
        let text = include_str!("../../../examples/seed002-parameters.json").replacen(
            "\"server\": \"seed002:443\",",
            "\"server\": \"seed002:443\", \"architecture\": {\"kind\": \"event_loop\", \"processes\": 2, \"most_at_once\": 14, \"threads\": 1},",
            1,
        );
        let text = text.replacen("{", "{\"host\": {\"cpus\": 8},", 1);
        let p = Parameters::from_json(&text, "t").unwrap();
        assert_eq!(
            p.host,
            Some(Host {
                cpus: 8,
                server_cpus: None,
                other_cpus: None,
                cold_start: None,
                cold_start_absent: None,
            })
        );
        let a = p.servers[0].architecture.unwrap();
        assert_eq!(
            (a.kind, a.processes, a.most_at_once, a.threads),
            (ArchitectureKind::EventLoop, 2, 14, Some(1))
        );
        let v: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
        assert_eq!(v["host"]["cpus"], 8);
        assert_eq!(v["servers"][0]["architecture"]["kind"], "event_loop");
        let later = text.replace("\"event_loop\"", "\"actors\"");
        let p = Parameters::from_json(&later, "t").unwrap();
        assert_eq!(
            p.servers[0].architecture.unwrap().kind,
            ArchitectureKind::Unknown
        );
    }

    #[test]
    fn errors_name_the_document_and_the_field() {
        let e = Parameters::from_json(r#"{"schema":"other/v2","servers":[]}"#, "f").unwrap_err();
        assert!(
            e.to_string().contains("not \"hstrace.parameters/v1\""),
            "{e}"
        );
        let e = Parameters::from_json("[1]", "f").unwrap_err();
        assert!(e.to_string().starts_with("f is not a JSON object"), "{e}");
        let e = Parameters::from_json(
            r#"{"schema":"hstrace.parameters/v1","servers":[{"server":"a:1","classes":{"tls_full":{"share":1,"stages":{}}}}]}"#,
            "f",
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("f: servers[0].classes: missing field `tls_resumed`"),
            "{e}"
        );
        let e = Parameters::from_json(
            r#"{"schema":"hstrace.parameters/v1","servers":[{"server":"a:1","classes":{
              "tls_full":{"share":1,"stages":{"response":{"class":"cpu","mean_s":0.1}}},
              "tls_resumed":{"share":0,"stages":{}},"plain":{"share":0,"stages":{}}}}]}"#,
            "f",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains(
                "servers[0].classes.tls_full.stages.response.class: unknown variant `cpu`"
            ),
            "{e}"
        );
    }
}
