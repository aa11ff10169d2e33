//! `cargo xtask image`: the container image of the DaemonSet, `localhost/hstrace:<version>`,
//! built with buildah from nothing but files of this machine (no registry is needed or
//! reached): the package's stripped /usr/bin/hstrace, the shared libraries it links (from
//! Debian's libc6 and libgcc-s1) and the one it loads at run time (libssl3's libcrypto,
//! which the cold start is timed on) and their copyright files. No shell, no package manager:
//! the entrypoint is hstrace itself, `serve` on 0.0.0.0:9725 unless told otherwise.
//! Also written as an OCI archive, target/package/hstrace-image_<version>.tar, for
//! `podman load` or `skopeo copy` to a registry.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use crate::{
    package::{self, copy, output},
    util::{root, run},
};

/// What `image` built.
pub struct Image {
    /// `localhost/hstrace:<version>`, in the machine's container storage
    pub name: String,
    /// the same image as an OCI archive
    pub archive: PathBuf,
}

/// The containers.conf podman and buildah are run with here (hstrace_tests::podman says
/// why).
pub fn containers_conf() -> Result<PathBuf> {
    hstrace_tests::podman::containers_conf().context("writing target/package/containers.conf")
}

/// Build the package's tree (for its stripped binary), then the image from it.
pub fn image(packages: &package::Packages) -> Result<Image> {
    let version = package::version()?;
    let name = format!("localhost/hstrace:{version}");
    let out = root().join("target/package");
    let rootfs = out.join("image-rootfs");
    if rootfs.exists() {
        fs::remove_dir_all(&rootfs)?;
    }

    // the binary as the package ships it, and its libraries where the loader looks
    let bin = packages.tree.join("usr/bin/hstrace");
    copy(&bin, &rootfs.join("usr/bin/hstrace"))?;
    copy(
        &packages.tree.join("usr/share/doc/hstrace/copyright"),
        &rootfs.join("usr/share/doc/hstrace/copyright"),
    )?;
    for lib in libraries(&bin)?
        .into_iter()
        .chain([run_time_library(RUN_TIME_LIBRARY)?])
    {
        copy(&lib, &rootfs.join(lib.strip_prefix("/")?))?;
        // the Debian package the library came from, and its copyright file
        let owner = output(Command::new("dpkg-query").arg("-S").arg(&lib))?;
        let owner = owner
            .split(':')
            .next()
            .context("dpkg-query -S printed nothing")?;
        let doc = Path::new("/usr/share/doc").join(owner).join("copyright");
        if doc.exists() {
            copy(&doc, &rootfs.join(doc.strip_prefix("/")?))?;
        }
    }

    let conf = containers_conf()?;
    let buildah = |args: &[&str]| -> Result<String> {
        output(
            Command::new("buildah")
                .args(args)
                .env("CONTAINERS_CONF", &conf),
        )
    };
    let container = buildah(&["from", "scratch"])?;
    let built = (|| -> Result<()> {
        buildah(&["copy", &container, &rootfs.display().to_string(), "/"])?;
        buildah(&[
            "config",
            "--entrypoint",
            r#"["/usr/bin/hstrace"]"#,
            "--cmd",
            r#"["serve", "--listen", "0.0.0.0:9725"]"#,
            "--user",
            "0:0",
            "--port",
            "9725/tcp",
            "--label",
            "org.opencontainers.image.title=hstrace",
            "--label",
            &format!("org.opencontainers.image.version={version}"),
            "--label",
            "org.opencontainers.image.licenses=MIT OR Apache-2.0 (BPF programs: GPL-2.0-only OR MIT)",
            "--label",
            "org.opencontainers.image.description=Per-stage latency of every TLS handshake of unmodified servers (eBPF): run privileged or with CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, in the host's PID namespace",
            &container,
        ])?;
        buildah(&["commit", "--format", "oci", "--rm", &container, &name])?;
        Ok(())
    })();
    if built.is_err() {
        let _ = buildah(&["rm", &container]);
    }
    built?;

    let archive = out.join(format!("hstrace-image_{version}.tar"));
    let _ = fs::remove_file(&archive);
    run(Command::new("podman")
        .args(["save", "--format", "oci-archive", "-o"])
        .arg(&archive)
        .arg(&name)
        .env("CONTAINERS_CONF", &conf))?;
    eprintln!("xtask: built {name} and wrote {}", archive.display());
    Ok(Image { name, archive })
}

/// What hstrace loads at run time (`dlopen`), not named by `ldd`: the libcrypto it times
/// the host's cold start on (userspace/src/cold_start.rs).
const RUN_TIME_LIBRARY: &str = "libcrypto.so.3";

/// Where the loader finds `name` for this machine's architecture (`ldconfig -p`, whose
/// lines name it: `libcrypto.so.3 (libc6,x86-64) => /lib/...`; a multiarch host has others).
fn run_time_library(name: &str) -> Result<PathBuf> {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "x86-64",
        "aarch64" => "AArch64",
        other => other,
    };
    let cache = output(Command::new("ldconfig").arg("-p"))?;
    cache
        .lines()
        .filter(|l| l.trim_start().starts_with(&format!("{name} ")) && l.contains(arch))
        .filter_map(|l| l.split(" => ").nth(1))
        .map(|p| PathBuf::from(p.trim()))
        .next()
        .with_context(|| format!("no {name} on this machine (ldconfig -p): install libssl3, whose libcrypto the image carries"))?
        // (through /lib → /usr/lib, where its package installed it and dpkg knows it)
        .canonicalize()
        .with_context(|| format!("cannot resolve {name}'s path"))
}

/// The shared libraries `bin` loads, the dynamic loader among them (from `ldd`).
fn libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    let ldd = output(Command::new("ldd").arg(bin))?;
    let libs: Vec<PathBuf> = ldd
        .lines()
        .filter_map(|l| l.split_whitespace().find(|w| w.starts_with('/')))
        .map(PathBuf::from)
        .collect();
    if libs.is_empty() {
        bail!("ldd found no libraries for {}:\n{ldd}", bin.display());
    }
    Ok(libs)
}
