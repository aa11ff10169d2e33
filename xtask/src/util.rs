//! Small helpers every job uses: the workspace root, running a command, the root check,
//! building hstrace, and what a written document says about the machine it ran on.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    thread,
};

use anyhow::{bail, Context, Result};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Run `cmd`, failing unless it succeeds.
pub fn run(cmd: &mut Command) -> Result<()> {
    let st = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !st.success() {
        bail!("{cmd:?} failed ({st})");
    }
    Ok(())
}

/// Fail unless this runs as root, naming the job.
pub fn require_root(what: &str) -> Result<()> {
    // SAFETY: geteuid has no preconditions
    if unsafe { libc::geteuid() } != 0 {
        bail!("`cargo xtask {what}` needs root (it installs packages and loads BPF programs): run it with sudo");
    }
    Ok(())
}

/// `cargo build --release -p hstrace`: the binary's path.
pub fn build() -> Result<PathBuf> {
    run(Command::new("cargo")
        .args(["build", "--release", "-p", "hstrace"])
        .current_dir(root()))?;
    Ok(root().join("target/release/hstrace"))
}

/// `build`, and `hstrace-bench` beside it (the tools crate: the bench's own commands).
pub fn build_bench() -> Result<PathBuf> {
    run(Command::new("cargo")
        .args(["build", "--release", "-p", "hstrace", "-p", "hstrace-tools"])
        .current_dir(root()))?;
    Ok(root().join("target/release/hstrace"))
}

/// The commit checked out (short hash), empty if git cannot say.
pub fn commit() -> Result<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root())
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The running kernel's release.
pub fn kernel() -> String {
    fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// CPUs this process may use.
pub fn cpus() -> usize {
    thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0)
}
