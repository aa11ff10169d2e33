//! Compiles the BPF programs in ../ebpf with clang-19 into OUT_DIR; main.rs embeds the object.

use std::{env, path::PathBuf, process::Command};

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../ebpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("hstrace.bpf.o");
    let clang = env::var("HSTRACE_CLANG").unwrap_or_else(|_| "clang-19".into());
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").unwrap().as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        other => panic!("hstrace: no vmlinux.h for target arch {other}"),
    };

    for f in [
        "hstrace.bpf.c",
        "conn.bpf.h",
        "wire.bpf.h",
        "include/hstrace.h",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        root.join("vmlinux").join(arch).join("vmlinux.h").display()
    );
    println!("cargo:rerun-if-env-changed=HSTRACE_CLANG");

    let status = Command::new(&clang)
        .args(["-g", "-O2", "-target", "bpfel", "-Wall", "-Werror"])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .arg("-I").arg(root.join("include"))
        .arg("-I").arg(root.join("vmlinux").join(arch))
        .arg("-c").arg(root.join("hstrace.bpf.c"))
        .arg("-o").arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!("hstrace: cannot run {clang} ({e}): install it with `cargo xtask setup` (apt-get install clang-19 libbpf-dev)")
        });
    assert!(
        status.success(),
        "hstrace: {clang} failed to compile ebpf/hstrace.bpf.c"
    );
}
