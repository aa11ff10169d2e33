//! hstrace: an eBPF tracer of the stages of every TCP + TLS handshake of unmodified servers.
//! A record flows one way: kernel hooks → `source` → `assemble` → `record` → a sink.
//!
//! The kernel side and what it sends:
//! - `probes`: the probe table (every hook, and what replaces it on other kernels)
//! - `abi`: the records and state the BPF programs share (mirror of ebpf/include/hstrace.h)
//! - `preflight`: privilege and kernel-feature checks, with what to do when one fails
//! - `features`: which BPF features the kernel has, and so which build of the programs loads
//! - `targets`: which processes are traced (`sockdiag`: the host's listening sockets)
//! - `ties`: whether a process's OpenSSL calls can be tied to its connections
//! - `container`: which container (and Kubernetes pod) a traced process runs in
//! - `host_cpu`: the CPUs the traced processes may use, and how busy they were
//! - `cold_start`: what a CPU the servers run on pays to run a TLS record's work cold
//!
//! One record source, many sinks:
//! - `source`: load, attach, follow processes (forks, ties), drain, sweep, account (`Health`)
//! - `assemble`: ring-buffer items to finished records (hellos gathered, parsed and joined,
//!   duplicates dropped); what they say of processes goes back to the source
//! - `sweep`: connections the kernel will not report on its own (idle, server exited)
//! - `sink`: what every consumer of records implements
//!
//! What a record is:
//! - `tls`: ClientHello / ServerHello parsing, the key-exchange groups' names
//! - `ja4`: the client's JA4 fingerprint, from its parsed ClientHello
//! - `stage`: the arithmetic that cuts a timeline into stages (the names: the model crate's)
//! - `record`: one connection classified (version, cipher, kind, resumption, failure)
//! - `clock`: the kernel's clock and RFC 3339 times
//!
//! The contracts, one type each:
//! - `lines`: the `trace` JSON lines (written by `print`, by hand, held to the types)
//! - `params::v1`: `hstrace.parameters/v1` (written by `params::Estimator`, read by `model`)
//! - `ordered`: a JSON object that keeps its keys' order (the stages, in wire order)
//!   (both the model crate's, which reads the one and needs nothing of the tracer)
//!
//! The sinks and commands:
//! - `print` + `json`: the JSON and text lines (`trace`'s printer)
//! - `health`: the tracer's own accounting
//! - `metrics`: `serve`'s Prometheus metrics (every name, label and bound)
//! - `self_cost`: what the daemon itself costs (`process_*`, its BPF programs' run time)
//! - `failures`: `serve`'s last failed handshakes (`/api/v1/failures`)
//! - `web_config` + `web_guard`: `serve --web.config.file`, TLS and basic auth in front of
//!   the daemon's routes
//! - `params`: the parameter estimator (a sink) and the parameters' CSV and table
//! - `report`: `hstrace report`, one HTML page of a window (its own sink, `report::gather`)
//! - `trace`, `serve`, `export`: the commands (`serve::Daemon`: the daemon's sink and
//!   state); `cli`: the command line that wires them
//! - `signal`: when a command stops; `http_client`: GET from a daemon or a Prometheus
//! - `model`: the queueing model of a secure web server (Lin, Wong, Kou), solved from the
//!   parameters (`hstrace model`): the `hstrace-model` crate (model/), no BPF

pub mod abi;
pub mod assemble;
pub mod cli;
pub mod clock;
pub mod cold_start;
pub mod container;
pub mod export;
pub mod failures;
pub mod features;
pub mod health;
pub mod host_cpu;
pub mod ja4;
pub mod json;
pub mod lines;
pub mod metrics;
pub mod otlp;
pub mod params;
pub mod preflight;
pub mod print;
pub mod probes;
pub mod record;
pub mod report;
pub mod self_cost;
pub mod serve;
pub mod signal;
pub mod sink;
pub mod skipped;
pub mod sockdiag;
pub mod source;
pub mod stage;
pub mod sweep;
pub mod targets;
pub mod ties;
pub mod tls;
pub mod trace;
pub mod unhooked;
pub mod web_config;
pub mod web_guard;

// the model's crate, and what it shares with the tracer, under their old paths
pub use hstrace_model as model;
pub use hstrace_model::{http_client, ordered};

/// The compiled BPF object (built from ../ebpf by build.rs): the default build.
pub static BPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/hstrace.bpf.o"));

/// The same programs built for kernels that lack a feature of the default build
/// (`features::Build::Basic`).
pub static BPF_OBJECT_BASIC: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/hstrace-basic.bpf.o"));

/// The feature probes' programs (ebpf/features.bpf.c).
pub static FEATURES_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/features.bpf.o"));
