//! Compiles the BPF programs in ../ebpf with clang-19 into OUT_DIR; lib.rs embeds the objects.
//! Also tells the build's revision and compiler, for `hstrace_build_info`.

#[path = "../ebpf/compile.rs"]
mod compile;

/// Every file the programs' object is built from.
const HEADERS: &[&str] = &[
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
    "include/woke.h",
    "include/opaque.h",
    "compile.rs",
];

fn main() {
    // the default build, and the one for kernels lacking one of its features (HS_BASIC in
    // ebpf/conn.bpf.h; src/features.rs picks), and the programs that probe those features
    compile::compile_with("hstrace.bpf.c", HEADERS, "hstrace.bpf.o", &[]);
    compile::compile_with(
        "hstrace.bpf.c",
        HEADERS,
        "hstrace-basic.bpf.o",
        &["HS_BASIC"],
    );
    compile::compile_with("features.bpf.c", &["compile.rs"], "features.bpf.o", &[]);
    build_info();
}

/// HSTRACE_REVISION (the git commit, or what a packager sets) and HSTRACE_RUSTC (rustc's
/// version), "unknown" when they cannot be told (a build outside a git checkout).
fn build_info() {
    use std::process::Command;
    println!("cargo:rerun-if-env-changed=HSTRACE_REVISION");
    for git in ["../.git/HEAD", "../.git/refs/heads"] {
        if std::path::Path::new(git).exists() {
            println!("cargo:rerun-if-changed={git}");
        }
    }
    let run = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
    };
    let revision = std::env::var("HSTRACE_REVISION")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| run("git", &["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc = run(&rustc, &["--version"])
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=HSTRACE_REVISION={revision}");
    println!("cargo:rustc-env=HSTRACE_RUSTC={rustc}");
}
