//! `cargo xtask setup`, and what each job installs on a test machine: the Debian package
//! lists, installing what is missing, tracefs mounted.

use std::{fs, path::Path, process::Command};

use anyhow::{Context, Result};

use hstrace_tests::util::installed;

use crate::util::{require_root, root, run};

/// Debian packages that building hstrace needs, and nothing else: `cargo xtask setup`
/// installs these (clang and llvm compile the BPF programs, libbpf-dev has their headers,
/// bpftool regenerates vmlinux.h, pkg-config and gcc link the Rust binary).
const BUILD_PACKAGES: &[&str] = &[
    "clang-19",
    "llvm-19",
    "libbpf-dev",
    "bpftool",
    "gcc",
    "pkg-config",
];

/// What the demo adds on a test machine: a TLS server, its clients, and a Prometheus for
/// `demo --serve`.
pub const DEMO_PACKAGES: &[&str] = &["nginx", "openssl", "curl", "prometheus"];

/// What the test suite adds on a test machine: the servers and clients it drives (gcc and
/// libssl-dev build the statically linked test server, hsload links libssl), man-db and
/// systemd for checking the package as an operator would use it. (The benches, the soak
/// and the fuzzers use the same.)
pub const TEST_PACKAGES: &[&str] = &[
    "nginx",
    "openssl",
    "curl",
    // htpasswd: bcrypt hashes for --web.config.file's basic_auth_users (tests/tests/guard.rs)
    "apache2-utils",
    "util-linux",
    "apache2",
    "haproxy",
    "libssl-dev",
    "nghttp2-client",
    "prometheus",
    "man-db",
    "systemd",
    // TLS after a plaintext preamble (tests/tests/starttls.rs): psql is the client
    "postgresql",
    "postgresql-client",
    "postfix",
    "dovecot-imapd",
    "dovecot-pop3d",
    // TLS off the common path (tests/tests/quirky_servers.rs): a handshake finished in
    // SSL_read, plaintext after an alert, children forked per connection
    "mosquitto",
    "mosquitto-clients",
    "mariadb-server",
    "mariadb-client",
    "vsftpd",
    // the tests' PyPI packages' venv (tests/python/requirements.txt), and Java's TLS as
    // a client (tests/tests/ja4.rs: run as a single source file, which needs the JDK's
    // compiler)
    "python3-venv",
    "openjdk-17-jdk-headless",
];

/// What checks a page as a browser sees it (tests/tests/report.rs, `cargo xtask
/// report-screenshot`): Debian's Chromium, run headless.
pub const BROWSER_PACKAGES: &[&str] = &["chromium"];

/// What building the container image and running it needs (`cargo xtask image`, and the
/// test suite, which does both): buildah builds it, podman runs it with Debian's runc.
pub const IMAGE_PACKAGES: &[&str] = &["podman", "buildah", "runc"];

/// What `cargo xtask vm-test` adds: qemu boots Debian's kernels, virtme-ng (from PyPI,
/// into a venv of Debian's python3) needs kmod's depmod and busybox for its initramfs, and
/// apt checks the archive's signatures with Debian's keyring.
pub const VM_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "kmod",
    "busybox-static",
    "python3-venv",
    "debian-archive-keyring",
];

/// Runtimes of the project's own test servers (tests/servers), with the Debian package
/// installed when none is found: (commands that will do, package).
const RUNTIMES: &[(&[&str], &str)] = &[
    (&["node"], "nodejs"),
    (&["go", "/usr/local/go/bin/go"], "golang-go"),
];

/// `cargo xtask setup`: what building needs, nothing else (no server, no client).
pub fn setup() -> Result<()> {
    require_root("setup")?;
    install_missing(BUILD_PACKAGES)
}

/// A machine that runs hstrace: what building needs, and `packages`, the servers and
/// clients a job drives (on a test machine only, never a production host: README says so).
/// Tracefs mounted.
pub fn setup_test_machine(packages: &[&str]) -> Result<()> {
    setup()?;
    install_missing(packages)?;
    if !Path::new("/sys/kernel/tracing/events").exists()
        && !Path::new("/sys/kernel/debug/tracing/events").exists()
    {
        run(Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]))?;
    }
    Ok(())
}

/// The runtimes of the project's own test servers, each from Debian unless one is found.
pub fn install_runtimes() -> Result<()> {
    let missing: Vec<&str> = RUNTIMES
        .iter()
        .filter(|(commands, _)| !runtime_found(commands))
        .map(|(_, pkg)| *pkg)
        .collect();
    apt_install(&missing)
}

/// The tests' Python packages (ja4plus, tlslite-ng) and what they need, at the versions
/// tests/python/requirements.txt pins: into target/python/venv, a venv of Debian's python3
/// (never the system's site-packages), again only when that file changes.
pub fn install_python_packages() -> Result<()> {
    let requirements = root().join("tests/python/requirements.txt");
    let venv = root().join("target/python/venv");
    let installed_from = venv.join("installed-requirements.txt");
    let wanted = fs::read(&requirements)?;
    if fs::read(&installed_from).is_ok_and(|had| had == wanted) {
        return Ok(());
    }
    eprintln!("xtask: installing tests/python/requirements.txt into target/python/venv");
    let _ = fs::remove_dir_all(&venv);
    run(Command::new("/usr/bin/python3")
        .args(["-m", "venv"])
        .arg(&venv))
    .context("making a Python venv (Debian's python3-venv) for the tests")?;
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "--disable-pip-version-check", "-r"])
        .arg(&requirements))
    .context(
        "installing tests/python/requirements.txt from PyPI failed: the tests need pypi.org \
         (pip honours https_proxy and PIP_INDEX_URL), or target/python/venv from an earlier run",
    )?;
    fs::write(&installed_from, wanted)?;
    Ok(())
}

/// Can one of `commands` be started at all? (Its exit status does not matter.)
fn runtime_found(commands: &[&str]) -> bool {
    commands
        .iter()
        .any(|c| Command::new(c).arg("--version").output().is_ok())
}

/// Install those of `packages` that are not installed yet.
pub fn install_missing(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages.iter().copied().filter(|p| !installed(p)).collect();
    apt_install(&missing)
}

/// Install Debian packages `missing` (none: nothing to do).
fn apt_install(missing: &[&str]) -> Result<()> {
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    run(Command::new("apt-get").args(["update", "-q"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}
