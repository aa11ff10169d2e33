//! What xtask runs beside the product, never shipped with it: the bench's own commands
//! (`hstrace-bench`, with the bench-only BPF programs of ebpf/bench.bpf.c), the inputs of
//! the parser fuzzer (the `fuzz/` crate, `cargo xtask fuzz-parsers`), and the kernel's
//! preamble recognizer (ebpf/starttls.h) compiled for the host, for its unit tests.

pub mod bench;
pub mod fuzz;
pub mod starttls;

/// The bench-only BPF object (ebpf/bench.bpf.c, built by build.rs): empty programs.
pub static BENCH_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/bench.bpf.o"));
