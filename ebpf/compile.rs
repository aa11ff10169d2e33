//! How a build script compiles one of ebpf/'s programs into OUT_DIR with clang-19, shared
//! by userspace/build.rs (the object users load) and tools/build.rs (the bench's).

use std::{env, path::PathBuf, process::Command};

/// Compile `ebpf/<source>` (which includes `headers`, relative to ebpf/) to
/// `OUT_DIR/<object>`, printing cargo's rerun rules.
#[allow(dead_code)] // (tools/build.rs calls this one, userspace/build.rs the other)
pub fn compile(source: &str, headers: &[&str], object: &str) {
    compile_with(source, headers, object, &[]);
}

/// The same, with preprocessor `defines` (`-D` each): one source, several builds.
pub fn compile_with(source: &str, headers: &[&str], object: &str, defines: &[&str]) {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join("../ebpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join(object);
    let clang = env::var("HSTRACE_CLANG").unwrap_or_else(|_| "clang-19".into());
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").unwrap().as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        other => panic!("hstrace: no vmlinux.h for target arch {other}"),
    };

    for f in std::iter::once(source).chain(headers.iter().copied()) {
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
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg("-I").arg(root.join("include"))
        .arg("-I").arg(root.join("vmlinux").join(arch))
        .arg("-c").arg(root.join(source))
        .arg("-o").arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!("hstrace: cannot run {clang} ({e}): install it with `cargo xtask setup` (apt-get install clang-19 libbpf-dev)")
        });
    assert!(
        status.success(),
        "hstrace: {clang} failed to compile ebpf/{source}"
    );
}
