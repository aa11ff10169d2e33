//! hstrace: an eBPF tracer of the stages of every TCP + TLS handshake of unmodified servers.
//!
//! - `probes`: the probe table (every hook, and what replaces it on other kernels)
//! - `abi`: the records the BPF programs send (mirror of ebpf/include/hstrace.h)
//! - `tls`: ClientHello / ServerHello parsing
//! - `record`: one connection's record: classification and stages
//! - `json`: the JSON lines the records are printed as
//! - `targets`: which processes are traced
//! - `preflight`: privilege and kernel-feature checks, with what to do when one fails
//! - `trace`: the `hstrace trace` command

pub mod abi;
pub mod json;
pub mod preflight;
pub mod probes;
pub mod record;
pub mod targets;
pub mod tls;
pub mod trace;

/// The compiled BPF object (built from ../ebpf by build.rs).
pub static BPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/hstrace.bpf.o"));
