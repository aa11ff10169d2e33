//! Compiles the BPF programs in ../ebpf with clang-19 into OUT_DIR; lib.rs embeds the object.

#[path = "../ebpf/compile.rs"]
mod compile;

fn main() {
    compile::compile(
        "hstrace.bpf.c",
        &[
            "conn.bpf.h",
            "wire.bpf.h",
            "preamble.bpf.h",
            "starttls.h",
            "task.bpf.h",
            "tcp.bpf.h",
            "io.bpf.h",
            "proc.bpf.h",
            "ssl.bpf.h",
            "include/hstrace.h",
            "compile.rs",
        ],
        "hstrace.bpf.o",
    );
}
