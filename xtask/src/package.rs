//! `cargo xtask package`: the Debian packages, built with dpkg-deb from a tree staged under
//! target/package/:
//! - `hstrace_<version>_<arch>.deb`: the stripped binary, its man pages and completions
//!   (generated from the clap definitions by tools/'s hstrace-docgen), the systemd unit and
//!   its /etc/default file, the dashboards and Prometheus files under /usr/share/hstrace,
//!   README and docs under /usr/share/doc/hstrace;
//! - `hstrace-dbgsym_<version>_<arch>.deb`: the binary's debug info, by build id.
//!
//! The control files and maintainer scripts are deploy/debian/'s.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, ensure, Context, Result};

use crate::{
    template,
    util::{root, run},
};

/// The stripped binary must stay under this (a package an operator downloads, not a
/// debug build): 16.1 MiB with OTLP over both HTTP and gRPC (1.2 MiB of it the tonic
/// stack), with room for growth that a reviewer should notice before it ships.
const MAX_BINARY_BYTES: u64 = 17 * 1024 * 1024;

/// What `package` built.
pub struct Packages {
    pub deb: PathBuf,
    pub dbgsym: PathBuf,
    /// the staged tree of the first (the image takes its binary from it)
    pub tree: PathBuf,
}

/// Build both packages; paths of the .deb files.
pub fn package() -> Result<Packages> {
    run(Command::new("cargo")
        .args(["build", "--release", "-p", "hstrace", "-p", "hstrace-tools"])
        .current_dir(root()))?;
    let version = version()?;
    let arch = output(Command::new("dpkg").arg("--print-architecture"))?;
    let out = root().join("target/package");
    let stage = out.join(format!("hstrace_{version}_{arch}"));
    let dbg_stage = out.join(format!("hstrace-dbgsym_{version}_{arch}"));
    for d in [&stage, &dbg_stage] {
        if d.exists() {
            fs::remove_dir_all(d).with_context(|| d.display().to_string())?;
        }
    }
    let release = root().join("target/release");

    // the binary, stripped, and its debug info apart, found by build id
    let bin = release.join("hstrace");
    let build_id = build_id(&bin)?;
    let debug_file = dbg_stage.join(format!(
        "usr/lib/debug/.build-id/{}/{}.debug",
        &build_id[..2],
        &build_id[2..]
    ));
    fs::create_dir_all(debug_file.parent().unwrap())?;
    run(Command::new("objcopy")
        .args(["--only-keep-debug", "--compress-debug-sections"])
        .arg(&bin)
        .arg(&debug_file))?;
    let shipped = stage.join("usr/bin/hstrace");
    fs::create_dir_all(shipped.parent().unwrap())?;
    run(Command::new("objcopy")
        .args(["--strip-debug", "--strip-unneeded"])
        .arg(&bin)
        .arg(&shipped))?;
    let size = fs::metadata(&shipped)?.len();
    ensure!(
        size <= MAX_BINARY_BYTES,
        "the stripped binary is {:.1} MiB, over the {} MiB a package may ship",
        size as f64 / 1048576.0,
        MAX_BINARY_BYTES / 1048576
    );

    // man pages and completions from the clap definitions
    let generated = out.join("generated");
    let _ = fs::remove_dir_all(&generated);
    run(Command::new(release.join("hstrace-docgen")).arg(&generated))?;
    let man1 = stage.join("usr/share/man/man1");
    fs::create_dir_all(&man1)?;
    for page in fs::read_dir(generated.join("man"))? {
        let page = page?.path();
        let to = man1.join(page.file_name().unwrap());
        fs::copy(&page, &to)?;
        // -n: no name or time in the header, so the same page gives the same bytes
        run(Command::new("gzip").args(["-9", "-n", "-f"]).arg(&to))?;
    }
    let completions = generated.join("completions");
    for (from, to) in [
        (
            "hstrace.bash",
            "usr/share/bash-completion/completions/hstrace",
        ),
        ("_hstrace", "usr/share/zsh/vendor-completions/_hstrace"),
        (
            "hstrace.fish",
            "usr/share/fish/vendor_completions.d/hstrace.fish",
        ),
    ] {
        copy(&completions.join(from), &stage.join(to))?;
    }

    // the service, the operator's dashboards and rules, the manual
    let src = root();
    for (from, to) in [
        (
            "deploy/hstrace.service",
            "lib/systemd/system/hstrace.service",
        ),
        ("deploy/hstrace.default", "etc/default/hstrace"),
        (
            "dashboards/hstrace.json",
            "usr/share/hstrace/dashboards/hstrace.json",
        ),
        (
            "dashboards/provisioning/dashboards.yaml",
            "usr/share/hstrace/grafana/provisioning/dashboards.yaml",
        ),
        (
            "dashboards/provisioning/datasource.yaml",
            "usr/share/hstrace/grafana/provisioning/datasource.yaml",
        ),
        (
            "dashboards/prometheus/rules.yml",
            "usr/share/hstrace/prometheus/rules.yml",
        ),
        (
            "dashboards/prometheus/scrape.yml",
            "usr/share/hstrace/prometheus/scrape.yml",
        ),
        (
            "deploy/kubernetes/daemonset.yaml",
            "usr/share/hstrace/kubernetes/daemonset.yaml",
        ),
        ("deploy/web-config.yml", "usr/share/hstrace/web-config.yml"),
        ("README.md", "usr/share/doc/hstrace/README.md"),
    ] {
        copy(&src.join(from), &stage.join(to))?;
    }
    for doc in fs::read_dir(src.join("docs"))? {
        let doc = doc?.path();
        copy(
            &doc,
            &stage
                .join("usr/share/doc/hstrace/docs")
                .join(doc.file_name().unwrap()),
        )?;
    }
    let copyright = format!(
        "{}{}",
        fs::read_to_string(src.join("deploy/debian/copyright"))?,
        linked_crates()?
    );
    fs::write(stage.join("usr/share/doc/hstrace/copyright"), copyright)?;

    // control files
    let debian = stage.join("DEBIAN");
    fs::create_dir_all(&debian)?;
    for script in ["postinst", "prerm", "postrm"] {
        copy(
            &src.join("deploy/debian").join(script),
            &debian.join(script),
        )?;
        set_mode(&debian.join(script), 0o755)?;
    }
    copy(
        &src.join("deploy/debian/conffiles"),
        &debian.join("conffiles"),
    )?;
    let depends = format!("libc6 (>= {}), libgcc-s1", glibc_needed(&shipped)?);
    let fields = |size: u64| {
        [
            ("VERSION", version.clone()),
            ("ARCH", arch.clone()),
            ("INSTALLED_SIZE", size.to_string()),
            ("DEPENDS", depends.clone()),
            ("BUILD_ID", build_id.clone()),
        ]
    };
    fs::write(
        debian.join("control"),
        template::fill(
            &fs::read_to_string(src.join("deploy/debian/control"))?,
            &fields(kib(&stage)?),
        )?,
    )?;
    fs::write(debian.join("md5sums"), md5sums(&stage)?)?;
    let dbg_debian = dbg_stage.join("DEBIAN");
    fs::create_dir_all(&dbg_debian)?;
    fs::write(
        dbg_debian.join("control"),
        template::fill(
            &fs::read_to_string(src.join("deploy/debian/dbgsym.control"))?,
            &fields(kib(&dbg_stage)?),
        )?,
    )?;

    let deb = out.join(format!("hstrace_{version}_{arch}.deb"));
    let dbgsym = out.join(format!("hstrace-dbgsym_{version}_{arch}.deb"));
    for (tree, file) in [(&stage, &deb), (&dbg_stage, &dbgsym)] {
        normalize_modes(tree)?;
        run(Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(tree)
            .arg(file))?;
    }
    eprintln!(
        "xtask: wrote {} (binary {:.1} MiB) and {}",
        deb.display(),
        size as f64 / 1048576.0,
        dbgsym.display()
    );
    Ok(Packages {
        deb,
        dbgsym,
        tree: stage,
    })
}

/// The hstrace crate's version (userspace/Cargo.toml).
pub fn version() -> Result<String> {
    let manifest = fs::read_to_string(root().join("userspace/Cargo.toml"))?;
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \"")?.strip_suffix('"'))
        .map(str::to_string)
        .context("no version in userspace/Cargo.toml")
}

/// A command's stdout, trimmed; an error with its stderr if it fails.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Copy `from` (symbolic links followed) to `to`, making `to`'s directory.
pub fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to.parent().unwrap())?;
    fs::copy(from, to).with_context(|| format!("{} -> {}", from.display(), to.display()))?;
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .with_context(|| path.display().to_string())
}

/// Directories 0755, files 0644, except executables (the binary, maintainer scripts),
/// which keep 0755: what dpkg expects whatever the build machine's umask.
fn normalize_modes(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    set_mode(dir, 0o755)?;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            normalize_modes(&path)?;
        } else {
            let exec = fs::metadata(&path)?.permissions().mode() & 0o111 != 0;
            set_mode(&path, if exec { 0o755 } else { 0o644 })?;
        }
    }
    Ok(())
}

/// Every file under `dir` (but DEBIAN/), relative to it, sorted.
fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                if path != base.join("DEBIAN") {
                    walk(base, &path, out)?;
                }
            } else {
                out.push(path.strip_prefix(base)?.to_path_buf());
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// Installed-Size: the files' sizes in KiB, rounded up each, as dpkg-gencontrol counts.
fn kib(dir: &Path) -> Result<u64> {
    files(dir)?
        .iter()
        .map(|f| Ok(fs::metadata(dir.join(f))?.len().div_ceil(1024)))
        .sum()
}

/// DEBIAN/md5sums: `md5  path` for every file but the conffiles.
fn md5sums(dir: &Path) -> Result<String> {
    let mut out = String::new();
    for f in files(dir)? {
        if f.starts_with("etc") {
            continue;
        }
        let sum = output(Command::new("md5sum").arg(dir.join(&f)))?;
        let sum = sum
            .split_whitespace()
            .next()
            .context("md5sum printed nothing")?;
        out.push_str(&format!("{sum}  {}\n", f.display()));
    }
    Ok(out)
}

/// The binary's GNU build id (hex), from `readelf -n`.
fn build_id(bin: &Path) -> Result<String> {
    let notes = output(Command::new("readelf").arg("-n").arg(bin))?;
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .map(str::to_string)
        .with_context(|| format!("{} has no build id", bin.display()))
}

/// The newest glibc symbol version the binary needs (e.g. "2.34"): the libc6 it depends on.
fn glibc_needed(bin: &Path) -> Result<String> {
    let symbols = output(Command::new("objdump").arg("-T").arg(bin))?;
    let newest = symbols
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let parts: Vec<u32> = v
                .split('.')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?;
            Some(parts)
        })
        .max()
        .context("the binary names no glibc symbol version")?;
    Ok(newest
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join("."))
}

/// The copyright file's last paragraph: every Rust crate linked into the binary (hstrace's
/// normal dependencies, transitively), with its version and license.
fn linked_crates() -> Result<String> {
    let meta = output(
        Command::new("cargo")
            .args(["metadata", "--format-version", "1", "--filter-platform"])
            .arg(format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
            .current_dir(root()),
    )?;
    let meta: serde_json::Value = serde_json::from_str(&meta)?;
    let packages: BTreeMap<&str, &serde_json::Value> = meta["packages"]
        .as_array()
        .context("cargo metadata: no packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .context("cargo metadata: no resolve")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let start = packages
        .iter()
        .find(|(_, p)| p["name"] == "hstrace")
        .map(|(id, _)| *id)
        .context("cargo metadata: no hstrace package")?;
    // walk the normal (not build, not dev) dependency edges
    let mut seen = BTreeSet::new();
    let mut todo = vec![start];
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].is_null());
            if normal {
                todo.extend(dep["pkg"].as_str());
            }
        }
    }
    seen.remove(start);
    // the workspace's own crates (hstrace-model) are hstrace's source, under its own paragraph
    seen.retain(|id| !packages[id]["source"].is_null());
    let mut lines: Vec<String> = seen
        .iter()
        .map(|id| {
            let p = packages[id];
            format!(
                " {} {}: {}",
                p["name"].as_str().unwrap_or("?"),
                p["version"].as_str().unwrap_or("?"),
                p["license"].as_str().unwrap_or("see the crate's source")
            )
        })
        .collect();
    lines.sort();
    Ok(format!(
        "\nFiles: usr/bin/hstrace (statically linked Rust crates)\n\
         Copyright: the crates' authors, as each crate's source on crates.io says\n\
         License: various\n\
         Comment: Each crate linked into the binary, its version and its license\n \
         (SPDX expression; the license texts are in each crate's source):\n{}\n",
        lines.join("\n")
    ))
}
