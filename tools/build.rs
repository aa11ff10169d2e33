//! Compiles the bench-only BPF programs (ebpf/bench.bpf.c) into OUT_DIR for hstrace-bench,
//! and ebpf/starttls.h for the host, for its unit tests (tools/tests/starttls.rs).

#[path = "../ebpf/compile.rs"]
mod compile;

fn main() {
    compile::compile("bench.bpf.c", &["compile.rs"], "bench.bpf.o");
    println!("cargo:rerun-if-changed=src/starttls_host.c");
    println!("cargo:rerun-if-changed=../ebpf/starttls.h");
    println!("cargo:rerun-if-changed=../ebpf/include/hstrace.h");
    println!("cargo:rerun-if-changed=../ebpf/include/opaque.h");
    cc::Build::new()
        .file("src/starttls_host.c")
        .include("../ebpf")
        .include("../ebpf/include")
        .warnings_into_errors(true)
        .compile("starttls_host");
}
