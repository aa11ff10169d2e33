//! Compiles the bench-only BPF programs (ebpf/bench.bpf.c) into OUT_DIR for hstrace-bench.

#[path = "../ebpf/compile.rs"]
mod compile;

fn main() {
    compile::compile("bench.bpf.c", &["compile.rs"], "bench.bpf.o");
}
