//! `cargo xtask vmlinux`: ebpf/vmlinux/<arch>/vmlinux.h regenerated from the running
//! kernel's BTF (bpftool).

use std::{env, fs, process::Command};

use anyhow::{bail, Result};

use crate::util::root;

pub fn vmlinux() -> Result<()> {
    let arch = match env::consts::ARCH {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        a => bail!("no vmlinux.h layout for {a}"),
    };
    let out = Command::new("bpftool")
        .args([
            "btf",
            "dump",
            "file",
            "/sys/kernel/btf/vmlinux",
            "format",
            "c",
        ])
        .output()?;
    if !out.status.success() {
        bail!("bpftool failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let path = root().join("ebpf/vmlinux").join(arch).join("vmlinux.h");
    fs::write(&path, out.stdout)?;
    eprintln!("xtask: wrote {}", path.display());
    Ok(())
}
