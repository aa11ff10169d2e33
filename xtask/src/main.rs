//! Jobs cargo can't do alone. Run as root on a Debian machine:
//!   cargo xtask setup            install what building hstrace needs (apt), nothing else
//!   cargo xtask demo [ARGS]      build, then trace ARGS (e.g. --pid 1234) or, with none, a
//!                                throwaway TLS nginx on loopback driven by real clients
//!                                (installs nginx, openssl, curl, prometheus: a test machine)
//!   cargo xtask test             setup, build, package, then every test (unit, verifier,
//!                                integration; installs the servers and clients they drive)
//!   cargo xtask package          the Debian packages in target/package/
//!   cargo xtask image            the container image localhost/hstrace:<version> (buildah),
//!                                and its OCI archive in target/package/
//!   cargo xtask vmlinux          regenerate ebpf/vmlinux/<arch>/vmlinux.h from this kernel
//!   cargo xtask bench            with/without hstrace side by side: docs/benchmarks.md
//!                                (--cost: that section alone; --cpu: one workload's CPU
//!                                on/off row, printed; --profile: where BPF time goes;
//!                                --ab OTHER_HSTRACE: this build against another)
//!   cargo xtask validate-model   the model's predictions against a loaded nginx:
//!                                docs/model-validation.md (--quick: a short run, printed)

use std::{
    env, fs,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

mod bench;
mod image;
mod package;
mod soak;
mod validate;

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
const DEMO_PACKAGES: &[&str] = &["nginx", "openssl", "curl", "prometheus"];

/// What the test suite adds on a test machine: the servers and clients it drives (gcc and
/// libssl-dev build the statically linked test server, hsload links libssl), man-db and
/// systemd for checking the package as an operator would use it. (The benches, the soak
/// and the fuzzers use the same.)
const TEST_PACKAGES: &[&str] = &[
    "nginx",
    "openssl",
    "curl",
    "util-linux",
    "apache2",
    "haproxy",
    "libssl-dev",
    "nghttp2-client",
    "prometheus",
    "man-db",
    "systemd",
];

/// What building the container image and running it needs (`cargo xtask image`, and the
/// test suite, which does both): buildah builds it, podman runs it with Debian's runc.
const IMAGE_PACKAGES: &[&str] = &["podman", "buildah", "runc"];

/// Runtimes of the project's own test servers (tests/servers), with the Debian package
/// installed when none is found: (commands that will do, package).
const RUNTIMES: &[(&[&str], &str)] = &[
    (&["node"], "nodejs"),
    (&["go", "/usr/local/go/bin/go"], "golang-go"),
];

/// Can one of `commands` be started at all? (Its exit status does not matter.)
fn runtime_found(commands: &[&str]) -> bool {
    commands
        .iter()
        .any(|c| Command::new(c).arg("--version").output().is_ok())
}

fn main() {
    if let Err(e) = xtask() {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn xtask() -> Result<()> {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("setup") => setup(),
        Some("demo") => demo(&args[1..]),
        Some("test") => test(&args[1..]),
        Some("vmlinux") => vmlinux(),
        Some("package") => {
            setup()?;
            package::package().map(|_| ())
        }
        Some("image") => {
            setup()?;
            install_missing(IMAGE_PACKAGES)?;
            image::image(&package::package()?).map(|_| ())
        }
        Some("bench") if args.get(1).map(String::as_str) == Some("serve-memory") => {
            bench_serve_memory()
        }
        Some("hold-connections") => bench::hold_connections(&args[1..]),
        Some("bench") => bench(&args[1..]),
        Some("validate-model") => validate_model(&args[1..]),
        Some("fuzz-wire") => fuzz_wire(&args[1..]),
        Some("soak") => soak(&args[1..]),
        Some("fuzz-parsers") => fuzz_parsers(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask setup | demo [hstrace trace args] | test [cargo test args] | package | image | bench [--cost | --cpu [--workload N] | --profile [--seconds N] | --ab OTHER_HSTRACE [--workload N] [--pairs N]] | validate-model [--quick] | fuzz-wire [--cases N] [--seed S] | fuzz-parsers [--runs N] | soak [--minutes M] | vmlinux");
            std::process::exit(2);
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Result<()> {
    let st = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !st.success() {
        bail!("{cmd:?} failed ({st})");
    }
    Ok(())
}

fn installed(pkg: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", pkg])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
        .unwrap_or(false)
}

fn require_root(what: &str) -> Result<()> {
    // SAFETY: geteuid has no preconditions
    if unsafe { libc::geteuid() } != 0 {
        bail!("`cargo xtask {what}` needs root (it installs packages and loads BPF programs): run it with sudo");
    }
    Ok(())
}

/// `cargo xtask setup`: what building needs, nothing else (no server, no client).
fn setup() -> Result<()> {
    require_root("setup")?;
    install_missing(BUILD_PACKAGES)
}

/// A machine that runs hstrace: what building needs, and `packages`, the servers and
/// clients a job drives (on a test machine only, never a production host: README says so).
/// Tracefs mounted.
fn setup_test_machine(packages: &[&str]) -> Result<()> {
    setup()?;
    install_missing(packages)?;
    if !Path::new("/sys/kernel/tracing/events").exists()
        && !Path::new("/sys/kernel/debug/tracing/events").exists()
    {
        run(Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]))?;
    }
    Ok(())
}

/// Install those of `packages` that are not installed yet.
fn install_missing(packages: &[&str]) -> Result<()> {
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

fn build() -> Result<PathBuf> {
    run(Command::new("cargo")
        .args(["build", "--release", "-p", "hstrace"])
        .current_dir(root()))?;
    Ok(root().join("target/release/hstrace"))
}

/// `build`, and `hstrace-bench` beside it (the tools crate: the bench's own commands).
fn build_bench() -> Result<PathBuf> {
    run(Command::new("cargo")
        .args(["build", "--release", "-p", "hstrace", "-p", "hstrace-tools"])
        .current_dir(root()))?;
    Ok(root().join("target/release/hstrace"))
}

fn test(extra: &[String]) -> Result<()> {
    setup_test_machine(&[TEST_PACKAGES, IMAGE_PACKAGES].concat())?;
    let runtimes: Vec<&str> = RUNTIMES
        .iter()
        .filter(|(commands, _)| !runtime_found(commands))
        .map(|(_, pkg)| *pkg)
        .collect();
    apt_install(&runtimes)?;
    let bin = build()?;
    // the packages and the image as an operator installs them (tests/tests/package.rs,
    // tests/tests/image.rs)
    let packages = package::package()?;
    let image = image::image(&packages)?;
    // one at a time: the tests share the kernel and load BPF programs; every test binary
    // runs even after one fails, so a run reports every failure
    let mut child = Command::new("cargo")
        .args(["test", "--release", "--workspace", "--no-fail-fast"])
        .args(extra)
        .args(["--", "--test-threads=1"])
        .env("HSTRACE_BIN", &bin)
        .env("HSTRACE_DEB", &packages.deb)
        .env("HSTRACE_DBGSYM_DEB", &packages.dbgsym)
        .env("HSTRACE_IMAGE", &image.name)
        .env("HSTRACE_IMAGE_ARCHIVE", &image.archive)
        .env("CONTAINERS_CONF", image::containers_conf()?)
        .current_dir(root())
        .stdout(Stdio::piped())
        .spawn()
        .context("running cargo test")?;
    // pass the output through, adding up every test binary's result line
    let (mut passed, mut failed) = (0u64, 0u64);
    for line in BufReader::new(child.stdout.take().expect("piped")).lines() {
        let line = line?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            let count = |word: &str| -> u64 {
                rest.split(';')
                    .find_map(|part| {
                        part.trim()
                            .strip_suffix(word)?
                            .trim()
                            .rsplit(' ')
                            .next()?
                            .parse()
                            .ok()
                    })
                    .unwrap_or(0)
            };
            passed += count("passed");
            failed += count("failed");
        }
    }
    let status = child.wait()?;
    // one closing line for the whole suite
    println!("tests: {passed} passed, {failed} failed");
    if !status.success() {
        bail!("cargo test failed ({status})");
    }
    Ok(())
}

fn vmlinux() -> Result<()> {
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

/// A throwaway TLS nginx on 127.0.0.1:8443 under target/demo.
struct DemoNginx {
    dir: PathBuf,
    pid: u32,
}

impl DemoNginx {
    /// nginx in `target/NAME` with `workers` workers, TLS on `port` and plain HTTP on
    /// `plain_port`, access log off (it would be the bottleneck of a benchmark).
    fn start(name: &str, workers: u32, port: u16, plain_port: u16) -> Result<DemoNginx> {
        DemoNginx::start_with(name, workers, port, &[plain_port], "")
    }

    /// The same with plain HTTP on each of `plain_ports`, each `listen` followed by
    /// `listen_options` (e.g. "reuseport": the kernel spreads connections over the workers).
    fn start_with(
        name: &str,
        workers: u32,
        port: u16,
        plain_ports: &[u16],
        listen_options: &str,
    ) -> Result<DemoNginx> {
        let dir = root().join("target").join(name);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("tmp"))?;
        hstrace_tests::make_cert(&dir, 2048);
        let d = dir.display();
        let plain_listens: String = plain_ports
            .iter()
            .map(|p| format!("    listen 127.0.0.1:{p} {listen_options};\n"))
            .collect();
        fs::write(
            dir.join("nginx.conf"),
            format!(
                "daemon on;\nworker_processes {workers};\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 worker_rlimit_nofile 20000;\nevents {{ worker_connections 18000; }}\nhttp {{\n  access_log off;\n  \
                 client_body_temp_path {d}/tmp/b; proxy_temp_path {d}/tmp/p; fastcgi_temp_path {d}/tmp/f;\n  \
                 uwsgi_temp_path {d}/tmp/u; scgi_temp_path {d}/tmp/s;\n  ssl_protocols TLSv1.2 TLSv1.3;\n  \
                 ssl_session_cache shared:SSL:1m;\n  ssl_session_tickets on;\n  server {{\n    \
                 listen 127.0.0.1:{port} ssl;\n    server_name demo.test;\n    ssl_certificate {d}/cert.pem;\n    \
                 ssl_certificate_key {d}/key.pem;\n    location / {{ return 200 \"hello from hstrace\\n\"; }}\n  }}\n  \
                 server {{\n{plain_listens}    location / {{ return 200 \"hello\\n\"; }}\n  }}\n}}\n"
            ),
        )?;
        run(Command::new("nginx")
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log")))?;
        let pidfile = dir.join("nginx.pid");
        let start = Instant::now();
        while !pidfile.exists() {
            if start.elapsed() > Duration::from_secs(10) {
                bail!(
                    "the demo nginx did not start: see {}",
                    dir.join("error.log").display()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        let pid = fs::read_to_string(&pidfile)?.trim().parse()?;
        Ok(DemoNginx { dir, pid })
    }
}

impl Drop for DemoNginx {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
    }
}

/// Only the daemon-memory row of the bench: serve's RSS with many live connections.
fn bench_serve_memory() -> Result<()> {
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build()?;
    let m = bench::serve_rss_with_live_connections(&bin)?;
    println!(
        "serve's peak RSS: {:.1} MiB with {} idle connections open (tracked {}, {} in the map), {:.1} MiB with none",
        m.live_kib as f64 / 1024.0,
        bench::LIVE_CONNS,
        m.tracked,
        m.open,
        m.idle_kib as f64 / 1024.0
    );
    Ok(())
}

/// Throughput with and without hstrace, side by side in one run: docs/benchmarks.md.
fn bench(args: &[String]) -> Result<()> {
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build_bench()?;
    let nginx = DemoNginx::start("bench", 1, 18443, 18080)?;
    let syscall_exe = bench::build_c(&nginx.dir, "syscall_cost", &[])?;
    let uprobe_exe = bench::build_c(&nginx.dir, "uprobe_cost", &["-lssl", "-lcrypto"])?;
    let target = bench::BenchNginx {
        master: nginx.pid,
        tls_port: 18443,
        plain_port: 18080,
    };
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(root())
        .output()?;
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_string();
    if args.iter().any(|a| a == "--profile") {
        let secs = flag(args, "--seconds", 40)?;
        // perf is for this alone: installed here, not by setup
        if !installed("linux-perf") {
            apt_install(&["linux-perf"])?;
        }
        return bench::profile::run(&bin, &target, secs, &nginx.dir.join("perf.data"));
    }
    if let Some(other) = args.iter().skip_while(|a| *a != "--ab").nth(1) {
        let other = fs::canonicalize(other).with_context(|| {
            format!("--ab {other}: an hstrace binary built from another commit")
        })?;
        return bench::cost::ab(
            &bin,
            &other,
            &target,
            flag(args, "--workload", 0)?,
            flag(args, "--pairs", 4)?,
        );
    }
    if args.iter().any(|a| a == "--cpu") {
        // one workload's CPU on/off row, printed: for trying a change, writes nothing
        let n: usize = flag(args, "--workload", 2)?;
        let w = bench::workload(n)?;
        let c = bench::cost::cpu_on_off(&bin, nginx.pid, &w.cmd(&target))?;
        println!("| workload | off | empty programs | default | wire only | empty programs on/off | default on/off | wire only on/off | uprobes in nginx |");
        print!("{}", bench::cost::cpu_row(w.name, &c));
        let split = bench::cost::cpu_split(&bin, nginx.pid, &w.cmd(&target))?;
        println!("\n| empty programs at | CPU per connection | on/off |");
        print!("{}", bench::cost::split_rows(&split));
        return Ok(());
    }
    if args.iter().any(|a| a == "--cost") {
        // the cost section alone, in place: the rest of the page stays as the last full run
        let section = bench::cost::section(&bin, &target, &uprobe_exe)?;
        let section = section.replacen(
            "(also part of the full bench).",
            &format!(
                "(also part of the full bench; this section from commit {commit}, run alone)."
            ),
            1,
        );
        let path = root().join("docs/benchmarks.md");
        let old = fs::read_to_string(&path).unwrap_or_default();
        fs::write(&path, bench::cost::replace_section(&old, &section))?;
        eprintln!("xtask: wrote the cost section of docs/benchmarks.md");
        return Ok(());
    }
    let table = bench::run(&bin, &target, &syscall_exe, &uprobe_exe)?;
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let doc = format!(
        "# Benchmarks\n\nWritten by `cargo xtask bench` (commit {}, kernel {}, {} CPUs). The machines are \
         shared and noisy: compare rows of one run, not runs.\n\n{table}",
        commit,
        kernel.trim(),
        thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
    );
    fs::create_dir_all(root().join("docs"))?;
    // the soak's section (`cargo xtask soak`) stays until the soak runs again
    let old = fs::read_to_string(root().join("docs/benchmarks.md")).unwrap_or_default();
    let doc = format!("{doc}{}", soak::section(&old).unwrap_or(""));
    fs::write(root().join("docs/benchmarks.md"), doc)?;
    eprintln!("xtask: wrote docs/benchmarks.md");
    Ok(())
}

/// The value after `name` in `args`, or `default` when `name` is not there (a value that
/// is missing or does not parse is an error).
fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T> {
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{name} takes a number, e.g. {name} 10")),
        None => Ok(default),
    }
}

/// `hstrace serve` under mixed load for a while: the "Soak" section of docs/benchmarks.md.
fn soak(args: &[String]) -> Result<()> {
    require_root("soak")?;
    let minutes: f64 = flag(args, "--minutes", 10.0)?;
    if !(minutes > 0.0 && minutes <= 24.0 * 60.0) {
        bail!("--minutes takes a number of minutes up to a day, e.g. --minutes 10");
    }
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build()?;
    let section = soak::soak(&bin, minutes)?;
    print!("{section}");
    soak::write_section(&root().join("docs/benchmarks.md"), &section)?;
    eprintln!("xtask: wrote the Soak section of docs/benchmarks.md");
    Ok(())
}

/// libFuzzer's coverage instrumentation, as cargo-fuzz passes it, on the stable toolchain;
/// with overflow checks and debug assertions, so an arithmetic overflow is a crash too.
const FUZZ_RUSTFLAGS: &str = "--cfg fuzzing -Cpasses=sancov-module \
    -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
    -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares \
    -Cdebug-assertions -Coverflow-checks";

/// The userspace parsers under libFuzzer (fuzz/, hstrace_tools::fuzz::one), from the captured
/// hellos: N executions (default 10 M), failing on any crash, hang or overflow.
fn fuzz_parsers(args: &[String]) -> Result<()> {
    let runs: u64 = flag(args, "--runs", 10_000_000)?;
    setup()?;
    let target = format!("{}-unknown-linux-gnu", env::consts::ARCH);
    let out = root().join("target/fuzz");
    // --target keeps the instrumentation out of build scripts
    run(Command::new("cargo")
        .args(["build", "--release", "--target", &target])
        .current_dir(root().join("fuzz"))
        .env(
            "RUSTFLAGS",
            FUZZ_RUSTFLAGS
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        )
        .env("CARGO_TARGET_DIR", &out))?;
    let bin = out.join(&target).join("release");
    let corpus = root().join("target/fuzz-corpus");
    let artifacts = root().join("target/fuzz-artifacts");
    fs::create_dir_all(&artifacts)?;
    // the fuzzer seeds an empty corpus itself (fuzz/fuzz_targets/parsers.rs)
    fs::create_dir_all(&corpus)?;
    let start = Instant::now();
    let res = Command::new(bin.join("parsers"))
        .arg(&corpus)
        .arg(format!("-runs={runs}"))
        .args([
            "-max_len=4096",
            "-timeout=5",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
        ])
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .output()?;
    let log = String::from_utf8_lossy(&res.stderr);
    let stat = |k: &str| {
        log.lines()
            .find_map(|l| l.strip_prefix(&format!("stat::{k}:")))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    println!(
        "fuzz-parsers: {} executions in {:.0} s ({} per s), {} corpus units added, peak RSS {} MB",
        stat("number_of_executed_units"),
        start.elapsed().as_secs_f64(),
        stat("average_exec_per_sec"),
        stat("new_units_added"),
        stat("peak_rss_mb"),
    );
    if !res.status.success() {
        let why: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains("panicked") || l.contains("ERROR") || l.contains("Test unit written")
            })
            .collect();
        bail!("the fuzzer found an input that fails:\n{}", why.join("\n"));
    }
    println!(
        "fuzz-parsers: 0 crashes, 0 hangs (corpus in {})",
        corpus.display()
    );
    Ok(())
}

/// The kernel side fuzzed end to end: mutated real handshakes (tests/src/wire_fuzz.rs) to
/// a real nginx under `hstrace trace`, in rounds of 1,000. After each round hstrace must
/// still run and nginx still serve; at the end hstrace must exit within 30 s with every
/// connection accounted for and every kernel table empty.
fn fuzz_wire(args: &[String]) -> Result<()> {
    require_root("fuzz-wire")?;
    let cases: usize = flag(args, "--cases", 20_000)?;
    let seed: u64 = flag(args, "--seed", 1)?;
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build()?;
    let nginx = DemoNginx::start("fuzz-wire", 2, 18543, 18580)?;
    let mut tracer = Command::new(&bin)
        .args(["trace", "--format", "json", "--pid", &nginx.pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = BufReader::new(tracer.stderr.take().expect("piped"));
    thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let ready = rx
        .recv_timeout(Duration::from_secs(30))
        .context("hstrace did not start")?;
    anyhow::ensure!(ready.contains("tracing"), "hstrace: {ready}");
    let start = Instant::now();
    let mut made = std::collections::BTreeMap::new();
    let url = format!("https://127.0.0.1:{}/", 18543);
    for first in (0..cases).step_by(1000) {
        let round = hstrace_tests::wire_fuzz::run(18543, seed, first, 1000.min(cases - first), 16);
        for (k, v) in round {
            *made.entry(k).or_insert(0usize) += v;
        }
        anyhow::ensure!(tracer.try_wait()?.is_none(), "hstrace exited mid-run");
        hstrace_tests::curl(&[], std::slice::from_ref(&url));
        eprintln!(
            "xtask: fuzz-wire: {} cases, {:.0} s",
            first + 1000.min(cases - first),
            start.elapsed().as_secs_f64()
        );
    }
    let secs = start.elapsed().as_secs_f64();
    thread::sleep(Duration::from_secs(1));
    // SAFETY: plain kill(2) on our own child
    unsafe { libc::kill(tracer.id() as i32, libc::SIGINT) };
    let stop = Instant::now();
    while tracer.try_wait()?.is_none() {
        anyhow::ensure!(
            stop.elapsed() < Duration::from_secs(30),
            "hstrace hangs at exit"
        );
        thread::sleep(Duration::from_millis(100));
    }
    let health: serde_json::Value = rx
        .try_iter()
        .find(|l| l.starts_with("{\"record\":\"health\""))
        .context("hstrace printed no health line")
        .and_then(|l| Ok(serde_json::from_str(&l)?))?;
    let sent: usize = made.values().sum();
    println!("fuzz-wire: seed {seed}, {sent} connections in {secs:.0} s, by mutation: {made:?}");
    println!("hstrace's health: {health}");
    hstrace_tests::assert_accounted(&health, true);
    // the rounds' curls are connections too
    let expected = sent + cases.div_ceil(1000);
    anyhow::ensure!(
        health["accepted"].as_u64() == Some(expected as u64),
        "hstrace counted {} accepted connections, {expected} were made",
        health["accepted"]
    );
    println!("fuzz-wire: every connection accounted for, every table empty, nginx still serving");
    Ok(())
}

/// Seed 002's model against a loaded nginx: docs/model-validation.md (`--quick`: a short
/// run that only prints).
fn validate_model(args: &[String]) -> Result<()> {
    require_root("validate-model")?;
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build()?;
    run(Command::new("cargo")
        .args([
            "build",
            "--release",
            "-p",
            "hstrace-tests",
            "--features",
            "load",
            "--bin",
            "hsload",
        ])
        .current_dir(root()))?;
    let hsload = root().join("target/release/hsload");
    let quick = args.iter().any(|a| a == "--quick");
    let plan = if quick {
        validate::Plan::quick()
    } else {
        validate::Plan::full()
    };
    validate::run(&bin, &hsload, &root(), &plan, !quick)
}

/// One client connection of the demo mix; session files are named relative to `dir`.
fn client(port: u16, dir: &Path, args: &[&str]) -> Result<()> {
    let paths: Vec<String> = args
        .iter()
        .map(|a| match a.starts_with('-') {
            true => a.to_string(),
            false => dir.join(a).display().to_string(),
        })
        .collect();
    let args: Vec<&str> = paths.iter().map(String::as_str).collect();
    hstrace_tests::s_client(port, &args);
    Ok(())
}

/// The demo's client mix: TLS 1.2 and 1.3, full and resumed (session id, ticket, PSK),
/// plain HTTP, and one handshake that fails.
fn drive_demo_mix(port: u16, plain_port: u16, dir: &Path) -> Result<()> {
    for _ in 0..2 {
        client(port, dir, &["-tls1_2", "-no_ticket", "-sess_out", "id12"])?;
        client(port, dir, &["-tls1_2", "-no_ticket", "-sess_in", "id12"])?;
        client(port, dir, &["-tls1_2", "-sess_out", "tk12"])?;
        client(port, dir, &["-tls1_2", "-sess_in", "tk12"])?;
        client(port, dir, &["-tls1_3", "-sess_out", "ps13"])?;
        client(port, dir, &["-tls1_3", "-sess_in", "ps13"])?;
        run(Command::new("curl")
            .args(["-s", "-o", "/dev/null"])
            .arg(format!("http://127.0.0.1:{plain_port}/")))?;
    }
    client(port, dir, &["-tls1_1"])
}

fn demo(args: &[String]) -> Result<()> {
    // a server of the user's own (--pid, --comm, --port): nothing to install but the build
    let own = !args.is_empty() && args[0] != "--serve";
    setup_test_machine(if own { &[] } else { DEMO_PACKAGES })?;
    let bin = build()?;
    if args.first().map(String::as_str) == Some("--serve") {
        return demo_serve(&bin);
    }
    if !args.is_empty() {
        // trace what the user named, until Ctrl-C
        return run(Command::new(&bin).arg("trace").args(args));
    }
    let (port, plain_port) = (8443, 8080);
    let nginx = DemoNginx::start("demo", 2, port, plain_port)?;
    eprintln!(
        "xtask: demo nginx (master pid {}) on https://127.0.0.1:{port} and http://127.0.0.1:{plain_port}, config in {}",
        nginx.pid,
        nginx.dir.display()
    );
    let pid = nginx.pid.to_string();
    let mut tracer = Command::new(&bin)
        .args(["trace", "--pid", &pid, "--duration", "7"])
        .spawn()?;
    // the seed 002 table of this run, measured by a second tracer beside the first
    let params = Command::new(&bin)
        .args([
            "export",
            "--pid",
            &pid,
            "--duration",
            "7",
            "--format",
            "table",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    thread::sleep(Duration::from_secs(3));
    eprintln!("xtask: driving TLS 1.2 and 1.3 handshakes, full and resumed, plain HTTP, and one that fails");
    drive_demo_mix(port, plain_port, &nginx.dir)?;
    let st = tracer.wait()?;
    if !st.success() {
        bail!("hstrace trace failed ({st})");
    }
    let out = params.wait_with_output()?;
    if !out.status.success() {
        bail!("hstrace export failed ({})", out.status);
    }
    println!("\nThe measured stage parameters of this run (hstrace export --format table):\n");
    print!("{}", String::from_utf8_lossy(&out.stdout));
    Ok(())
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// The production shape on one machine: the demo nginx, `hstrace serve` and a real
/// Prometheus scraping it with the shipped rules, until Ctrl-C.
fn demo_serve(bin: &Path) -> Result<()> {
    let (port, plain_port, listen, prom_port) = (8443, 8080, "127.0.0.1:9725", 9090);
    let nginx = DemoNginx::start("demo-serve", 2, port, plain_port)?;
    let dir = nginx.dir.clone();
    // SAFETY: the handler only stores to an atomic
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let mut serve = Command::new(bin)
        .args(["serve", "--pid", &nginx.pid.to_string(), "--listen", listen])
        .spawn()?;
    let rules = root().join("dashboards/prometheus/rules.yml");
    let prom = hstrace_tests::prometheus::Prometheus::start_on(
        prom_port,
        &[listen.to_owned()],
        std::slice::from_ref(&rules),
        "2s",
    );
    thread::sleep(Duration::from_secs(3));
    let server = format!("nginx:{port}");
    println!(
        "\nhstrace serve:  http://{listen}/metrics  http://{listen}/api/v1/parameters  http://{listen}/healthz\n\
         Prometheus:     http://127.0.0.1:{prom_port}  (rules from {rules})\n\
         demo nginx:     https://127.0.0.1:{port}  http://127.0.0.1:{plain_port}\n\n\
         Ask Prometheus (curl -sG http://127.0.0.1:{prom_port}/api/v1/query --data-urlencode 'query=...'):\n\
         \x20 what is my cache hit ratio?   hstrace:cache_hit_ratio:rate5m{{server=\"{server}\"}}\n\
         \x20 resumption rate?              hstrace:resumption_rate:rate5m{{server=\"{server}\"}}\n\
         \x20 which stage is slow (p90)?    topk(3, hstrace:stage_duration_seconds:p90_rate5m{{server=\"{server}\"}})\n\
         \x20 where the time goes?          sum by (stage_class) (rate(hstrace_stage_duration_seconds_sum[5m]))\n\n\
         A client mix runs every 10 s. Ctrl-C stops everything.\n",
        rules = rules.display()
    );
    // the first mix once Prometheus has a sample from before it, so rates have an increase
    let mut last = Instant::now() - Duration::from_secs(5);
    while !STOP.load(std::sync::atomic::Ordering::Relaxed) {
        if last.elapsed() >= Duration::from_secs(10) {
            drive_demo_mix(port, plain_port, &dir)?;
            last = Instant::now();
        }
        thread::sleep(Duration::from_millis(200));
    }
    eprintln!("\nxtask: stopping");
    // SAFETY: plain kill(2) on our own child (it may have had the SIGINT already)
    unsafe { libc::kill(serve.id() as i32, libc::SIGINT) };
    let _ = serve.wait();
    drop(prom);
    Ok(())
}
