//! `cargo xtask vm-test`: hstrace's root tests inside Debian's own kernels (5.10, 6.1,
//! 6.12, 7.x), booted under qemu by virtme-ng over this machine's root filesystem, so that
//! the programs are checked by the verifiers and hooks of the kernels users run, not only
//! by this machine's. Everything it fetches and leaves is under target/vm/: a private apt
//! state (the machine's own sources are never touched), the kernels' packages and their
//! extracted trees, virtme-ng in a venv, each kernel's logs (the verifier's logs among
//! them) and results.json.
//!
//! Each kernel boots once and runs a generated script (target/vm/out/LABEL/run.sh) that
//! runs each test binary of `TESTS` in turn, its output and exit code written to
//! target/vm/out/LABEL/; nothing is read back from the VM's console but the boot log.

use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead, BufReader, Write},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

mod docs;

use crate::{
    setup::{setup_test_machine, TEST_PACKAGES, VM_PACKAGES},
    util::{build, commit, require_root, root, run},
};

/// The kernels: (label, the Debian suite whose `linux-image-amd64` is that kernel). The
/// exact version is resolved from the suite's metapackage on every refresh of the lists.
pub const KERNELS: &[(&str, &str)] = &[
    ("5.10", "bullseye"),
    ("6.1", "bookworm"),
    ("6.12", "trixie"),
    ("7.x", "sid"),
];

/// What runs inside each kernel: (test target, its tests by exact name; none: all of its
/// tests). Each binary runs with `--test-threads=1 --include-ignored`.
pub const TESTS: &[(&str, &[&str])] = &[
    // every BPF program variant of both builds through this kernel's verifier, each log
    // kept (userspace/tests/verifier.rs)
    ("verifier", &[]),
    // nginx's six handshake kinds and failures (TLS 1.2/1.3 full, resumed by session id
    // and ticket, plain HTTP, failed) on the hooks this kernel offers first, with the
    // uprobes; then with each hook family forced: kernel functions by fentry and by
    // kprobe, the syscall tracepoints, and the basic build (tests/tests/servers.rs)
    (
        "servers",
        &[
            "six_handshake_kinds_and_failures_with_uprobes",
            "six_kinds_through_fentry",
            "six_kinds_through_kprobes",
            "six_kinds_through_the_syscall_hooks",
            "six_kinds_in_the_basic_build",
            // a process per connection, tied by fork (Apache prefork), and a server
            // traced from the wire alone (HAProxy, with --no-uprobes)
            "apache_prefork_six_kinds_both_probe_modes",
            "haproxy_wire_only",
            // more threads asleep in reads than a kretprobe has return instances: the
            // syscall hooks chosen before kprobes, and kprobes' skipped runs counted
            "threads_asleep_in_reads",
        ],
    ),
    // TLS after a plaintext preamble: PostgreSQL's SSLRequest (tests/tests/starttls.rs)
    (
        "starttls",
        &["postgresql_tls_after_its_ssl_request_in_both_probe_modes"],
    ),
    // TLS 1.2's key-exchange group read from the ServerKeyExchange, against s_client's
    // view (tests/tests/hellos.rs)
    (
        "hellos",
        &["tls12_key_exchanges_are_named_as_the_client_saw_them"],
    ),
    // the daemon scraped by a real Prometheus, every dashboard panel's query answered
    // (tests/tests/serve.rs)
    (
        "serve",
        &["serve_counts_every_connection_and_prometheus_answers_every_panel"],
    ),
    // the accounting under a flood past --max-conns: the full table's refusals and the
    // sweep's evictions counted, the sums exact (tests/tests/accounting.rs)
    (
        "accounting",
        &["a_flood_past_max_conns_is_counted_and_survived"],
    ),
    // hook runs, BPF time and nginx's CPU per connection (resumed TLS 1.2, resumed TLS
    // 1.3, plain keep-alive) on the hooks this kernel offers first; its figures go to
    // $out/kernel_cost.json, and with --docs into docs/kernels.md
    // (tests/tests/kernel_cost.rs)
    ("kernel_cost", &["hook_runs_per_connection"]),
];

/// The packages whose test targets `TESTS` names: the binary's own (the verifier test)
/// and the integration tests'.
const TEST_PACKAGES_OF_VM: &[&str] = &["hstrace", "hstrace-tests"];

/// The test of `TESTS` whose figures `--docs` writes, also run on the host with `--docs`.
const COST_TEST: (&str, &str) = ("kernel_cost", "hook_runs_per_connection");
/// Where that test writes its figures (its env var), in each kernel's output directory.
const COST_OUT_ENV: &str = "HSTRACE_KERNEL_COST_OUT";
const COST_FILE: &str = "kernel_cost.json";
/// The page `--docs` rewrites, between its markers.
const DOC: &str = "docs/kernels.md";

/// The virtme-ng release the harness was written against (from PyPI, in target/vm/venv).
const VIRTME_NG: &str = "1.42";

/// Guest memory and CPUs.
const VM_MEMORY: &str = "2G";
const VM_CPUS: &str = "2";

/// One test binary's bound inside the VM, under TCG (time there runs ~10x slower than on
/// the host: the servers subset took 50 s, the verifier 30 s in 7.2) and under KVM. A
/// kernel's VM is killed after `BOOT_ALLOWANCE` plus these (and a minute each) for every
/// binary of `TESTS`: 3 + 6 x 11 = 69 min under TCG at worst (a whole run takes 5-6).
const TEST_TIMEOUT_TCG: Duration = Duration::from_secs(10 * 60);
const TEST_TIMEOUT_KVM: Duration = Duration::from_secs(5 * 60);

/// Booting (about 25 s under TCG), and the script's own work besides the tests.
const BOOT_ALLOWANCE: Duration = Duration::from_secs(3 * 60);

/// How long `--mode auto` lets KVM try to boot a kernel that does nothing.
const KVM_PROBE_TIMEOUT: Duration = Duration::from_secs(45);

/// How old the private apt lists may be before they are fetched again.
const LISTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// How qemu runs the guests.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Mode {
    /// KVM if a kernel boots with it within 45 s here, TCG otherwise
    Auto,
    /// qemu's emulator: slow, works everywhere
    Tcg,
    /// hardware virtualisation
    Kvm,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Tcg => "tcg",
            Mode::Kvm => "kvm",
        }
    }
}

/// What a run added up to.
#[derive(Debug, Default)]
pub struct Totals {
    /// tests passed, over every kernel
    pub passed: u64,
    /// tests failed, plus one per test binary that timed out or crashed and one per
    /// kernel that could not be fetched or booted
    pub failed: u64,
}

/// `cargo xtask vm-test`: the matrix, failing unless every test passed in every kernel.
/// `docs`: every kernel (`kernels` empty), `COST_TEST` run on the host too, then the
/// generated parts of docs/kernels.md rewritten from the run (even when a test failed:
/// the page says which).
pub fn vm_test(kernels: &[String], mode: Mode, extra: &[String], docs: bool) -> Result<()> {
    if docs && !kernels.is_empty() {
        bail!("--docs runs every kernel: it takes no --kernel");
    }
    let run = run_matrix(kernels, mode, extra, docs)?;
    if docs {
        let path = root().join(DOC);
        let page = fs::read_to_string(&path).with_context(|| format!("reading {DOC}"))?;
        fs::write(&path, docs::rewrite(&page, &run)?)?;
        println!("vm-test: rewrote the generated parts of {DOC}");
    }
    if run.totals.failed > 0 {
        bail!(
            "{} failures in the kernels' VMs: see the table above and target/vm/results.json",
            run.totals.failed
        );
    }
    Ok(())
}

/// A whole run: its totals, each kernel's outcome, the host's (`--docs`), when it ended
/// and how long it took.
struct Run {
    totals: Totals,
    kernels: Vec<KernelResult>,
    host: Option<HostResult>,
    commit: String,
    seconds: u64,
}

/// Install what it needs, build the test binaries and hstrace, fetch the `kernels`
/// (labels of `KERNELS`; none: all), run `TESTS` in each under qemu in `mode`, print a
/// table and a closing `vm-test: N passed, M failed` line, write target/vm/results.json.
/// `extra`: the test binaries' own arguments; any filter among them replaces the table's
/// test names (every binary of the table runs with those filters). Errors only when the
/// run could not start (setup, build, the archive out of reach); a kernel that fails is
/// counted in the totals, and the other kernels still run.
pub fn matrix(kernels: &[String], mode: Mode, extra: &[String]) -> Result<Totals> {
    Ok(run_matrix(kernels, mode, extra, false)?.totals)
}

/// `matrix`, and with `host` `COST_TEST` on this machine first (its figures beside the
/// kernels'); the whole run's outcome.
fn run_matrix(kernels: &[String], mode: Mode, extra: &[String], host: bool) -> Result<Run> {
    let chosen = choose_kernels(kernels)?;
    require_root("vm-test")?;
    setup_test_machine(&[TEST_PACKAGES, VM_PACKAGES].concat())?;
    let vng = virtme_ng()?;
    let binaries = build_tests()?;
    let hstrace = build()?;
    let apt = Apt::new()?;
    let started = Instant::now();
    let mut host = if host {
        Some(run_host(&binaries, &hstrace)?)
    } else {
        None
    };
    let mut mode = mode;
    let mut results = Vec::new();
    for &(label, suite) in &chosen {
        let result = match fetch_kernel(&apt, label, suite) {
            Ok(kernel) => {
                if mode == Mode::Auto {
                    mode = probe_kvm(&vng, &kernel)?;
                }
                run_kernel(&vng, &kernel, mode, &binaries, &hstrace, extra)?
            }
            Err(e) => KernelResult::unfetched(label, &e),
        };
        results.push(result);
    }
    // a host that was never quiet before the kernels may be after them
    if let Some(h) = &host {
        if h.disturbed() {
            eprintln!("vm-test: host: {} again, after the kernels", COST_TEST.0);
            let again = run_host(&binaries, &hstrace)?;
            if again.spread() < h.spread() {
                host = Some(again);
            }
        }
    }
    let seconds = started.elapsed();
    let totals = report(&results, host.as_ref(), seconds)?;
    Ok(Run {
        totals,
        kernels: results,
        host,
        commit: commit().unwrap_or_default(),
        seconds: seconds.as_secs(),
    })
}

/// The `KERNELS` entries of `labels`, in the table's order; all of them for none.
fn choose_kernels(labels: &[String]) -> Result<Vec<(&'static str, &'static str)>> {
    for l in labels {
        if !KERNELS.iter().any(|(k, _)| k == l) {
            let known: Vec<&str> = KERNELS.iter().map(|(k, _)| *k).collect();
            bail!("no kernel {l:?}: vm-test knows {}", known.join(", "));
        }
    }
    Ok(KERNELS
        .iter()
        .copied()
        .filter(|(k, _)| labels.is_empty() || labels.iter().any(|l| l == k))
        .collect())
}

/// target/vm/.
fn vm_dir() -> PathBuf {
    root().join("target/vm")
}

/// A path relative to the workspace root when it is inside it (for the table and the
/// JSON: the CI artifacts are read from there).
fn shown(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

// ---------------------------------------------------------------------------------------
// virtme-ng

/// target/vm/venv/bin/vng, virtme-ng `VIRTME_NG` from PyPI installed there first if it
/// is not yet (into a venv of Debian's python3, never the system's site-packages).
fn virtme_ng() -> Result<PathBuf> {
    let venv = vm_dir().join("venv");
    let vng = venv.join("bin/vng");
    let version = |vng: &Path| {
        vng_command(vng)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let wanted = format!("virtme-ng {VIRTME_NG}");
    if version(&vng) == wanted {
        return Ok(vng);
    }
    eprintln!(
        "vm-test: installing virtme-ng {VIRTME_NG} into {}",
        shown(&venv)
    );
    let _ = fs::remove_dir_all(&venv);
    fs::create_dir_all(vm_dir())?;
    run(Command::new("/usr/bin/python3")
        .arg("-m")
        .arg("venv")
        .arg(&venv))
    .context("making a Python venv (Debian's python3-venv) for virtme-ng")?;
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "--disable-pip-version-check"])
        .arg(format!("virtme-ng=={VIRTME_NG}")))
    .with_context(|| {
        format!(
            "installing virtme-ng {VIRTME_NG} from PyPI failed: vm-test needs pypi.org \
             (pip honours https_proxy and PIP_INDEX_URL), or target/vm/venv from an earlier run"
        )
    })?;
    let got = version(&vng);
    if got != wanted {
        bail!("{} says {got:?}, not {wanted:?}", vng.display());
    }
    Ok(vng)
}

/// `vng` as it must be started: vng runs `virtme-run` by name, so the venv's bin comes
/// first on PATH (or another virtme-run, e.g. a user's own, would boot the guest).
fn vng_command(vng: &Path) -> Command {
    let bin = vng.parent().expect("vng is in a directory");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![bin.to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    let mut cmd = Command::new(vng);
    cmd.env("PATH", std::env::join_paths(dirs).expect("PATH joins"));
    cmd
}

// ---------------------------------------------------------------------------------------
// the test binaries

/// A test binary of `TESTS`: its path, and its package's directory (cargo runs a test
/// binary there).
struct TestBinary {
    path: PathBuf,
    dir: PathBuf,
}

/// A package's name from cargo's package id: `path+file:///w/tests#hstrace-tests@0.1.0`,
/// or `path+file:///w/hstrace#0.1.0` when the directory has the package's name.
fn package_name(id: &str) -> &str {
    let (path, name) = id.rsplit_once('#').unwrap_or((id, ""));
    match name.split_once('@') {
        Some((name, _)) => name,
        None => path.rsplit('/').next().unwrap_or(""),
    }
}

/// `cargo test --release --workspace --no-run`: the binaries of `TESTS`' targets.
fn build_tests() -> Result<BTreeMap<&'static str, TestBinary>> {
    let out = Command::new("cargo")
        .args([
            "test",
            "--release",
            "--workspace",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(root())
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the test binaries failed ({})", out.status);
    }
    let mut found = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" || msg["profile"]["test"] != true {
            continue;
        }
        let kinds = msg["target"]["kind"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !kinds.iter().any(|k| k == "test") {
            continue;
        }
        // the product's tests only: the tools package has test targets of the same names
        if !TEST_PACKAGES_OF_VM.contains(&package_name(msg["package_id"].as_str().unwrap_or(""))) {
            continue;
        }
        let name = msg["target"]["name"].as_str().unwrap_or_default();
        let Some(&(target, _)) = TESTS.iter().find(|(t, _)| *t == name) else {
            continue;
        };
        let (Some(exe), Some(manifest)) =
            (msg["executable"].as_str(), msg["manifest_path"].as_str())
        else {
            continue;
        };
        let bin = TestBinary {
            path: PathBuf::from(exe),
            dir: Path::new(manifest)
                .parent()
                .unwrap_or(&root())
                .to_path_buf(),
        };
        if found.insert(target, bin).is_some() {
            bail!("two test targets are named {target}: vm-test's TESTS cannot tell them apart");
        }
    }
    for (target, _) in TESTS {
        if !found.contains_key(target) {
            bail!("no test target {target} in the workspace (vm.rs's TESTS names it)");
        }
    }
    Ok(found)
}

// ---------------------------------------------------------------------------------------
// the kernels, from Debian's archive

/// A private apt state under target/vm/apt: Debian's suites of `KERNELS`, the machine's
/// own sources and lists untouched.
struct Apt {
    dir: PathBuf,
}

impl Apt {
    /// The state, its lists fetched unless they are younger than a day.
    fn new() -> Result<Apt> {
        let dir = vm_dir().join("apt");
        for d in ["lists/partial", "cache/archives/partial"] {
            fs::create_dir_all(dir.join(d))?;
        }
        let keyring = "/usr/share/keyrings/debian-archive-keyring.gpg";
        if !Path::new(keyring).exists() {
            bail!("{keyring} missing: install Debian's debian-archive-keyring");
        }
        let sources: String = KERNELS
            .iter()
            .map(|(_, suite)| {
                format!("deb [signed-by={keyring}] http://deb.debian.org/debian {suite} main\n")
            })
            .collect();
        let list = dir.join("sources.list");
        let stamp = dir.join("updated");
        if fs::read_to_string(&list).ok().as_deref() != Some(sources.as_str()) {
            fs::write(&list, &sources)?;
            let _ = fs::remove_file(&stamp);
        }
        let apt = Apt { dir };
        let age = fs::metadata(&stamp)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok());
        if age.is_none_or(|a| a > LISTS_MAX_AGE) {
            eprintln!("vm-test: fetching the package lists of Debian's {}", {
                let s: Vec<&str> = KERNELS.iter().map(|(_, s)| *s).collect();
                s.join(", ")
            });
            let updated = Command::new("apt-get")
                .args(apt.options())
                .args(["-q", "update"])
                .stdout(std::io::stderr())
                .status();
            match updated {
                Ok(st) if st.success() => fs::write(&stamp, "")?,
                _ if apt.has_lists() => eprintln!(
                    "vm-test: warning: apt-get update failed; using the lists fetched earlier"
                ),
                _ => bail!(
                    "apt-get update of deb.debian.org failed: vm-test needs Debian's archive \
                     (apt honours http_proxy and Acquire::http::Proxy), or a target/vm/ from \
                     an earlier run"
                ),
            }
        }
        Ok(apt)
    }

    /// The options that make apt-get and apt-cache use this state only.
    fn options(&self) -> Vec<String> {
        let d = self.dir.display();
        [
            format!("Dir::Etc::sourcelist={d}/sources.list"),
            "Dir::Etc::sourceparts=-".into(),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::Cache={d}/cache"),
            "APT::Get::List-Cleanup=0".into(),
            // the Packages files only: no AppStream metadata, no translations
            "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false".into(),
            "Acquire::Languages=none".into(),
            // downloads into target/vm/debs, which _apt may not be able to write
            "APT::Sandbox::User=root".into(),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect()
    }

    fn has_lists(&self) -> bool {
        fs::read_dir(self.dir.join("lists"))
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with("_Packages.lz4"))
            })
            .unwrap_or(false)
    }

    /// `apt-cache ARGS`' output.
    fn cache(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("apt-cache")
            .args(self.options())
            .args(args)
            .output()
            .context("running apt-cache")?;
        if !out.status.success() {
            bail!(
                "apt-cache {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The Depends of `pkg=version` (the first stanza), each as (name, version if `=`).
    fn depends(&self, pkg: &str, version: &str) -> Result<Vec<(String, Option<String>)>> {
        let show = self.cache(&["show", &format!("{pkg}={version}")])?;
        let line = show
            .lines()
            .take_while(|l| !l.is_empty())
            .find_map(|l| l.strip_prefix("Depends:"))
            .unwrap_or("");
        Ok(parse_depends(line))
    }
}

/// A Depends field's packages, each alternative's first: (name, version if pinned by `=`).
fn parse_depends(field: &str) -> Vec<(String, Option<String>)> {
    field
        .split(',')
        .filter_map(|dep| {
            let first = dep.split('|').next()?.trim();
            let name = first.split_whitespace().next()?.to_string();
            let version = first
                .split_once("(=")
                .and_then(|(_, v)| v.split(')').next())
                .map(|v| v.trim().to_string());
            Some((name, version))
        })
        .collect()
}

/// The version of `pkg` in `suite` from `apt-cache madison`'s table.
fn madison_version(madison: &str, suite: &str) -> Option<String> {
    let tag = format!(" {suite}/main ");
    madison.lines().find_map(|l| {
        let cols: Vec<&str> = l.split('|').map(str::trim).collect();
        (cols.len() == 3 && format!(" {} ", cols[2]).contains(&tag)).then(|| cols[1].to_string())
    })
}

/// A kernel ready to boot.
struct Kernel {
    label: &'static str,
    /// its `uname -r`, as its packages name it
    release: String,
    vmlinuz: PathBuf,
    /// the packages it came from (name=version)
    packages: Vec<String>,
}

/// The packages (name=version) that hold `suite`'s current kernel image and modules, and
/// the release they name.
fn resolve(apt: &Apt, suite: &str) -> Result<(String, Vec<String>)> {
    let meta = "linux-image-amd64";
    let madison = apt.cache(&["madison", meta])?;
    let version = madison_version(&madison, suite)
        .with_context(|| format!("no {meta} in {suite} in the lists"))?;
    let (image, image_version) = apt
        .depends(meta, &version)?
        .into_iter()
        .find(|(name, _)| name.starts_with("linux-image-"))
        .with_context(|| format!("{meta} {version} depends on no linux-image-*"))?;
    let image_version = image_version.unwrap_or(version);
    let release = image["linux-image-".len()..].to_string();
    let deps = apt.depends(&image, &image_version)?;
    // sid splits the image: the kernel in linux-binary-*, its modules in linux-modules-*;
    // the older suites' -unsigned package holds both
    let split: Vec<String> = deps
        .iter()
        .filter(|(n, _)| n.starts_with("linux-binary-") || n.starts_with("linux-modules-"))
        .map(|(n, v)| format!("{n}={}", v.as_deref().unwrap_or(&image_version)))
        .collect();
    let packages = if split.is_empty() {
        vec![format!("{image}-unsigned={image_version}")]
    } else {
        split
    };
    Ok((release, packages))
}

/// `label`'s kernel from `suite`, downloaded and extracted into target/vm/kernels/LABEL
/// unless the packages there are already the current ones (or the lists cannot say which
/// are current: then the ones there).
fn fetch_kernel(apt: &Apt, label: &'static str, suite: &str) -> Result<Kernel> {
    let tree = vm_dir().join("kernels").join(label);
    let record = tree.join(".packages");
    let had = fs::read_to_string(&record).ok();
    let (release, packages) = match resolve(apt, suite) {
        Ok(r) => r,
        Err(e) => match &had {
            Some(had) => {
                eprintln!("vm-test: warning: {label}: {e:#}; using the kernel fetched earlier");
                let mut lines = had.lines().map(str::to_string);
                let release = lines.next().unwrap_or_default();
                (release, lines.collect())
            }
            None => return Err(e.context(format!("resolving {suite}'s kernel"))),
        },
    };
    let wanted = format!("{release}\n{}\n", packages.join("\n"));
    if had.as_deref() != Some(wanted.as_str()) {
        eprintln!("vm-test: {label}: fetching {}", packages.join(" "));
        let debs = vm_dir().join("debs").join(label);
        let _ = fs::remove_dir_all(&debs);
        fs::create_dir_all(&debs)?;
        let st = Command::new("apt-get")
            .args(apt.options())
            .args(["-q", "download"])
            .args(&packages)
            .current_dir(&debs)
            .stdout(std::io::stderr())
            .status()
            .context("running apt-get download")?;
        if !st.success() {
            bail!(
                "apt-get download {} failed ({st}): is deb.debian.org reachable?",
                packages.join(" ")
            );
        }
        let _ = fs::remove_dir_all(&tree);
        fs::create_dir_all(&tree)?;
        for deb in fs::read_dir(&debs)? {
            let deb = deb?.path();
            run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tree))?;
        }
        fs::write(&record, &wanted)?;
    }
    let vmlinuz = find_vmlinuz(&tree, &release)
        .with_context(|| format!("no vmlinuz for {release} in {}", shown(&tree)))?;
    Ok(Kernel {
        label,
        release,
        vmlinuz,
        packages,
    })
}

/// The kernel image in an extracted tree: boot/vmlinuz-R (up to trixie) or
/// usr/lib/modules/R/vmlinuz (sid). virtme-ng finds the modules beside it.
fn find_vmlinuz(tree: &Path, release: &str) -> Option<PathBuf> {
    [
        tree.join(format!("boot/vmlinuz-{release}")),
        tree.join(format!("usr/lib/modules/{release}/vmlinuz")),
        tree.join(format!("lib/modules/{release}/vmlinuz")),
    ]
    .into_iter()
    .find(|p| p.exists())
}

// ---------------------------------------------------------------------------------------
// booting

/// How a VM ended.
enum Ended {
    /// vng exited (with 255 even when the guest's command succeeded: results are read from
    /// files)
    Exited,
    /// killed by the host after the deadline
    TimedOut,
}

/// Boot `vmlinuz` with vng (KVM if `kvm`), running `command` in the guest with `rwdirs`
/// (guest path, host path) writable, vng's output (the guest console) to `log`. Lines of
/// the console starting with "vm-test" are echoed as they come. Killed after `timeout`.
fn boot(
    vng: &Path,
    vmlinuz: &Path,
    kvm: bool,
    rwdirs: &[(PathBuf, PathBuf)],
    command: &str,
    log: &Path,
    timeout: Duration,
) -> Result<Ended> {
    let mut cmd = vng_command(vng);
    cmd.arg("--verbose");
    if !kvm {
        // one host thread runs both vCPUs in turn: with a thread each, a kernel patching
        // its own code (a static key flipped as a uprobe or tracepoint attaches) while the
        // other vCPU runs it hit int3 in __schedule (7.2 panicked so, 2026-11-29)
        cmd.arg("--disable-kvm")
            .arg("--qemu-opts=-accel tcg,thread=single");
    }
    cmd.args(["-m", VM_MEMORY, "--cpus", VM_CPUS]);
    for (guest, host) in rwdirs {
        cmd.arg(format!("--rwdir={}={}", guest.display(), host.display()));
    }
    cmd.arg("-r").arg(vmlinuz).arg("--").arg(command);
    let file = fs::File::create(log)?;
    cmd.current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // no controlling terminal, as in CI; its own session, so that a timeout kills qemu
    // and vng together
    // SAFETY: setsid is async-signal-safe
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", vng.display()))?;
    // both of vng's streams (the console comes on one of them) into the log
    let tees = [
        tee(child.stdout.take().expect("piped"), file.try_clone()?),
        tee(child.stderr.take().expect("piped"), file),
    ];
    let deadline = Instant::now() + timeout;
    let ended = loop {
        if child.try_wait()?.is_some() {
            break Ended::Exited;
        }
        if Instant::now() > deadline {
            // SAFETY: kill has no memory preconditions; the group is the child's session
            let group = -(child.id() as i32);
            unsafe { libc::kill(group, libc::SIGKILL) };
            let _ = child.wait();
            // qemu is vng's grandchild: gone before the next VM starts
            for _ in 0..50 {
                // SAFETY: as above; signal 0 only asks whether the group still exists
                if unsafe { libc::kill(group, 0) } != 0 {
                    break;
                }
                thread::sleep(Duration::from_millis(100));
            }
            break Ended::TimedOut;
        }
        thread::sleep(Duration::from_millis(200));
    };
    for t in tees {
        let _ = t.join();
    }
    Ok(ended)
}

/// Copy `from` into `log` line by line, echoing the script's own "vm-test" lines.
fn tee(from: impl std::io::Read + Send + 'static, mut log: fs::File) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        for line in BufReader::new(from).split(b'\n').map_while(Result::ok) {
            let mut line = line;
            line.push(b'\n');
            let _ = log.write_all(&line);
            let text = String::from_utf8_lossy(&line);
            if text.starts_with("vm-test") {
                eprintln!("  {}", text.trim_end());
            }
        }
    })
}

/// `--mode auto`: does `kernel` boot under KVM here within `KVM_PROBE_TIMEOUT`? The answer
/// holds for the rest of the run.
fn probe_kvm(vng: &Path, kernel: &Kernel) -> Result<Mode> {
    if !Path::new("/dev/kvm").exists() {
        eprintln!("vm-test: no /dev/kvm: qemu emulates (TCG)");
        return Ok(Mode::Tcg);
    }
    let out = vm_dir().join("out/kvm-probe");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out)?;
    let marker = out.join("booted");
    eprintln!(
        "vm-test: trying KVM with {} (up to {} s)",
        kernel.release,
        KVM_PROBE_TIMEOUT.as_secs()
    );
    let command = format!("echo kvm > {}", sh_quote(&marker.display().to_string()));
    let ended = boot(
        vng,
        &kernel.vmlinuz,
        true,
        &[(out.clone(), out.clone())],
        &command,
        &out.join("vng.log"),
        KVM_PROBE_TIMEOUT,
    )?;
    let mode = if marker.exists() {
        Mode::Kvm
    } else {
        Mode::Tcg
    };
    let why = match (mode, ended) {
        (Mode::Kvm, _) => "it booted".to_string(),
        (_, Ended::TimedOut) => {
            format!("KVM did not boot within {} s", KVM_PROBE_TIMEOUT.as_secs())
        }
        _ => format!(
            "KVM failed ({}: {})",
            shown(&out.join("vng.log")),
            last_line(&out.join("vng.log"))
        ),
    };
    eprintln!("vm-test: qemu mode {} for this run: {why}", mode.name());
    Ok(mode)
}

// ---------------------------------------------------------------------------------------
// one kernel

/// One test binary's outcome in one kernel.
struct TargetResult {
    target: &'static str,
    log: PathBuf,
    passed: u64,
    failed: u64,
    /// its failures: failed tests by name, or what happened to the binary
    failures: Vec<String>,
}

/// One kernel's outcome.
struct KernelResult {
    label: &'static str,
    release: String,
    packages: Vec<String>,
    mode: Option<Mode>,
    seconds: f64,
    /// the guest's uptime when the script started: how long the kernel took to boot
    boot_seconds: Option<f64>,
    features: BTreeMap<String, String>,
    targets: Vec<TargetResult>,
    /// what went wrong besides the tests: not fetched, not booted, killed
    problems: Vec<String>,
    /// the tail of the log that tells why, for problems and crashed binaries
    tails: Vec<(String, String)>,
    /// what `COST_TEST` wrote, when it passed
    kernel_cost: Option<Value>,
    out: Option<PathBuf>,
}

impl KernelResult {
    fn unfetched(label: &'static str, e: &anyhow::Error) -> KernelResult {
        KernelResult {
            label,
            release: String::new(),
            packages: Vec::new(),
            mode: None,
            seconds: 0.0,
            boot_seconds: None,
            features: BTreeMap::new(),
            targets: Vec::new(),
            problems: vec![format!("kernel not fetched: {e:#}")],
            tails: Vec::new(),
            kernel_cost: None,
            out: None,
        }
    }

    fn passed(&self) -> u64 {
        self.targets.iter().map(|t| t.passed).sum()
    }

    fn failures(&self) -> Vec<String> {
        let mut all = self.problems.clone();
        for t in &self.targets {
            all.extend(t.failures.iter().map(|f| format!("{}: {f}", t.target)));
        }
        all
    }

    /// failed tests, and one for each binary or boot problem no test failure accounts for
    fn failed(&self) -> u64 {
        let tests: u64 = self
            .targets
            .iter()
            .map(|t| t.failed.max(t.failures.len() as u64))
            .sum();
        tests + self.problems.len() as u64
    }
}

/// The test binaries' arguments: the table's exact names, or the user's filters instead.
fn test_args(names: &[&str], extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "--test-threads=1".to_string(),
        "--include-ignored".to_string(),
    ];
    let filtered = extra.iter().any(|a| !a.starts_with('-'));
    if !filtered && !names.is_empty() {
        args.push("--exact".into());
        args.extend(names.iter().map(|n| n.to_string()));
    }
    args.extend(extra.iter().cloned());
    args
}

/// Shell-quote one word.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The script the guest runs: what the kernel offers, then each test binary in turn.
fn script(
    kernel: &Kernel,
    out: &Path,
    binaries: &BTreeMap<&'static str, TestBinary>,
    hstrace: &Path,
    extra: &[String],
    timeout: Duration,
) -> String {
    let q = |p: &Path| sh_quote(&p.display().to_string());
    let o = q(out);
    let mut s = format!(
        "#!/bin/sh\n\
         # Generated by `cargo xtask vm-test` (xtask/src/vm.rs): runs inside Debian's {release}\n\
         # kernel ({label}), booted by virtme-ng over the host's root filesystem; writes to\n\
         # {o} only.\n\
         out={o}\n\
         export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n\
         export HSTRACE_BIN={bin}\n\
         export HSTRACE_VERIFIER_LOG_DIR=\"$out/verifier\"\n\
         export {cost_env}=\"$out/{cost_file}\"\n\
         export RUST_BACKTRACE=1\n\
         cut -d' ' -f1 /proc/uptime > \"$out/uptime\"\n\
         uname -r > \"$out/release\"\n\
         echo \"vm-test[{label}]: $(uname -r) booted in $(cat \"$out/uptime\") s\"\n\
         t=/sys/kernel/tracing\n\
         [ -d $t/events ] || mount -t tracefs nodev $t\n\
         # the tests' own files on the guest's own tmpfs: a shared directory refuses mmap\n\
         # (Prometheus) and other users' writes (PostgreSQL's initdb)\n\
         mkdir -p {work} && mount -t tmpfs -o mode=0755 hstrace-tests {work}\n\
         has() {{ if [ -e \"$1\" ]; then echo yes; else echo no; fi; }}\n\
         {{\n\
         echo \"release $(uname -r)\"\n\
         echo \"btf $(has /sys/kernel/btf/vmlinux)\"\n\
         echo \"tracefs $(has $t/events)\"\n\
         echo \"kprobes $(has $t/kprobe_events)\"\n\
         echo \"uprobes $(has $t/uprobe_events)\"\n\
         echo \"ftrace_functions $(wc -l < $t/available_filter_functions 2>/dev/null || echo 0)\"\n\
         echo \"syscall_tracepoints $(has $t/events/syscalls)\"\n\
         echo \"sock_recv_length $(has $t/events/sock/sock_recv_length)\"\n\
         echo \"sock_send_length $(has $t/events/sock/sock_send_length)\"\n\
         echo \"sk_data_ready $(has $t/events/sock/sk_data_ready)\"\n\
         echo \"tcp_sendmsg_locked $(has $t/events/tcp/tcp_sendmsg_locked)\"\n\
         echo \"inet_sock_set_state $(has $t/events/sock/inet_sock_set_state)\"\n\
         echo \"lsm $(cat /sys/kernel/security/lsm 2>/dev/null)\"\n\
         echo \"unprivileged_bpf_disabled $(cat /proc/sys/kernel/unprivileged_bpf_disabled 2>/dev/null)\"\n\
         }} > \"$out/features\"\n",
        release = kernel.release,
        label = kernel.label,
        bin = q(hstrace),
        cost_env = COST_OUT_ENV,
        cost_file = COST_FILE,
        work = q(&root().join("target/hstrace-tests")),
    );
    for (target, names) in TESTS {
        let bin = &binaries[target];
        let args: Vec<String> = test_args(names, extra)
            .iter()
            .map(|a| sh_quote(a))
            .collect();
        s += &format!(
            "echo \"vm-test[{label}]: running {target}\"\n\
             cd {dir}\n\
             timeout -k 30 {secs} {exe} {args} > \"$out/{target}.log\" 2>&1\n\
             echo $? > \"$out/{target}.rc\"\n\
             echo \"vm-test[{label}]: {target} exited $(cat \"$out/{target}.rc\")\"\n",
            label = kernel.label,
            dir = q(&bin.dir),
            secs = timeout.as_secs(),
            exe = q(&bin.path),
            args = args.join(" "),
        );
    }
    s += "echo done > \"$out/done\"\n";
    s
}

/// Boot `kernel` in `mode` and run every test binary of `TESTS` in it.
fn run_kernel(
    vng: &Path,
    kernel: &Kernel,
    mode: Mode,
    binaries: &BTreeMap<&'static str, TestBinary>,
    hstrace: &Path,
    extra: &[String],
) -> Result<KernelResult> {
    let out = vm_dir().join("out").join(kernel.label);
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(out.join("verifier"))?;
    // the tests' own files (tests/src/util.rs's work_dir) go to target/hstrace-tests/,
    // read-only in the guest: the script mounts a tmpfs there (the mount point must exist
    // on the host: the guest's /work is not an overlay)
    fs::create_dir_all(root().join("target/hstrace-tests"))?;
    let per_test = if mode == Mode::Kvm {
        TEST_TIMEOUT_KVM
    } else {
        TEST_TIMEOUT_TCG
    };
    let script_path = out.join("run.sh");
    fs::write(
        &script_path,
        script(kernel, &out, binaries, hstrace, extra, per_test),
    )?;
    let deadline = BOOT_ALLOWANCE + (per_test + Duration::from_secs(60)) * TESTS.len() as u32;
    eprintln!(
        "vm-test: {}: booting {} under {} (the host gives up after {} min)",
        kernel.label,
        kernel.release,
        mode.name(),
        deadline.as_secs().div_ceil(60)
    );
    let log = out.join("vng.log");
    let started = Instant::now();
    let ended = boot(
        vng,
        &kernel.vmlinuz,
        mode == Mode::Kvm,
        &[(out.clone(), out.clone())],
        &format!("sh {}", sh_quote(&script_path.display().to_string())),
        &log,
        deadline,
    )?;
    let seconds = started.elapsed().as_secs_f64();
    let read = |name: &str| fs::read_to_string(out.join(name)).ok();
    let release = read("release").map(|r| r.trim().to_string());
    let mut result = KernelResult {
        label: kernel.label,
        release: release.clone().unwrap_or_else(|| kernel.release.clone()),
        packages: kernel.packages.clone(),
        mode: Some(mode),
        seconds,
        boot_seconds: read("uptime").and_then(|u| u.trim().parse().ok()),
        features: read("features")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        targets: Vec::new(),
        problems: Vec::new(),
        tails: Vec::new(),
        kernel_cost: read_cost(&out.join(COST_FILE)),
        out: Some(out.clone()),
    };
    if release.is_none() {
        result.problems.push(match ended {
            Ended::TimedOut => format!("did not boot: killed after {:.0} s", seconds),
            Ended::Exited => "did not boot (the script never ran)".to_string(),
        });
        result.tails.push((shown(&log), tail(&log, 25)));
        return Ok(result);
    }
    if matches!(ended, Ended::TimedOut) {
        result.problems.push(format!(
            "VM killed after {seconds:.0} s (the host's deadline)"
        ));
        result.tails.push((shown(&log), tail(&log, 15)));
    }
    for (target, _) in TESTS {
        let log = out.join(format!("{target}.log"));
        let text = fs::read_to_string(&log).unwrap_or_default();
        let rc: Option<i32> = read(&format!("{target}.rc")).and_then(|r| r.trim().parse().ok());
        let (passed, failed) = result_counts(&text);
        let mut failures = failed_tests(&text);
        let broken = match rc {
            None => Some("did not finish (the VM ended first)".to_string()),
            Some(124 | 137) => Some(format!(
                "timed out after {} s{}",
                per_test.as_secs(),
                running_test(&text)
                    .map(|t| format!(" in {t}"))
                    .unwrap_or_default()
            )),
            Some(0) => None,
            Some(rc) if failures.is_empty() => {
                Some(format!("exited {rc} without naming a failed test"))
            }
            Some(_) => None,
        };
        if let Some(b) = broken {
            failures.push(b);
            result.tails.push((shown(&log), tail(&log, 15)));
        } else if !failures.is_empty() {
            // why each named test failed, so that CI's output alone says it
            let why = failure_sections(&text, &failures);
            if !why.is_empty() {
                result.tails.push((shown(&log), why));
            }
        }
        result.targets.push(TargetResult {
            target,
            log,
            passed,
            failed,
            failures,
        });
    }
    Ok(result)
}

/// The passed and failed counts of every `test result:` line.
fn result_counts(log: &str) -> (u64, u64) {
    let count = |rest: &str, word: &str| -> u64 {
        rest.split(';')
            .filter_map(|part| part.trim().strip_suffix(word))
            .filter_map(|n| n.trim().rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    log.lines()
        .filter_map(|l| l.trim_start().strip_prefix("test result: "))
        .fold((0, 0), |(p, f), rest| {
            (p + count(rest, "passed"), f + count(rest, "failed"))
        })
}

/// The failed tests' names: libtest's closing `failures:` list, or its `... FAILED`
/// lines when the list is missing.
fn failed_tests(log: &str) -> Vec<String> {
    let lines: Vec<&str> = log.lines().collect();
    let mut names = Vec::new();
    // the last "failures:" is the list of names, one per indented line
    if let Some(at) = lines.iter().rposition(|l| l.trim_end() == "failures:") {
        for l in &lines[at + 1..] {
            match l.strip_prefix("    ") {
                Some(name) if !name.trim().is_empty() => names.push(name.trim().to_string()),
                _ => break,
            }
        }
    }
    if names.is_empty() {
        for l in &lines {
            if let Some(rest) = l.strip_prefix("test ") {
                if let Some(name) = rest.strip_suffix(" ... FAILED") {
                    names.push(name.to_string());
                }
            }
        }
    }
    names.dedup();
    names
}

/// What libtest printed for each failed test of `names` (its `---- NAME stdout ----`
/// section: the panic and its message), each cut to `FAILURE_LINES` lines of at most
/// `FAILURE_LINE_CHARS` characters.
fn failure_sections(log: &str, names: &[String]) -> String {
    const FAILURE_LINES: usize = 30;
    const FAILURE_LINE_CHARS: usize = 600;
    let lines: Vec<&str> = log.lines().collect();
    let mut out = Vec::new();
    for name in names {
        let head = format!("---- {name} stdout ----");
        let Some(at) = lines.iter().position(|l| l.trim_end() == head) else {
            continue;
        };
        out.push(head.clone());
        let body = lines[at + 1..]
            .iter()
            .take_while(|l| !l.starts_with("---- ") && l.trim_end() != "failures:");
        for l in body.take(FAILURE_LINES) {
            out.push(match l.char_indices().nth(FAILURE_LINE_CHARS) {
                Some((cut, _)) => format!("{} …", &l[..cut]),
                None => l.to_string(),
            });
        }
    }
    out.join("\n")
}

/// The test libtest had started and not finished when the log ends.
fn running_test(log: &str) -> Option<String> {
    let last = log.lines().rev().find(|l| l.starts_with("test "))?;
    let name = last
        .strip_prefix("test ")?
        .trim_end()
        .strip_suffix(" ...")?;
    Some(name.to_string())
}

/// The last `n` lines of a file.
fn tail(path: &Path, n: usize) -> String {
    let text = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn last_line(path: &Path) -> String {
    tail(path, 1)
}

// ---------------------------------------------------------------------------------------
// the host

/// `COST_TEST` on this machine (`--docs`): its figures beside the kernels'.
struct HostResult {
    release: String,
    passed: u64,
    failed: u64,
    failures: Vec<String>,
    kernel_cost: Option<Value>,
    log: PathBuf,
    seconds: f64,
}

impl HostResult {
    /// No attempt was quiet: other work's runs are in the figures.
    fn disturbed(&self) -> bool {
        self.kernel_cost
            .as_ref()
            .is_some_and(|c| c["disturbed"] == true)
    }

    /// How far apart the rounds of its figures were (infinite without figures).
    fn spread(&self) -> f64 {
        self.kernel_cost
            .as_ref()
            .and_then(|c| c["rounds_spread"].as_f64())
            .unwrap_or(f64::INFINITY)
    }
}

/// Attempts of `COST_TEST` on the host, `HOST_WAIT` apart, until its rounds agree: every
/// run of hstrace's programs on the machine is counted, and another job's connections on
/// this shared machine (a bench, another test) fire them too.
const HOST_TRIES: usize = 5;
const HOST_WAIT: Duration = Duration::from_secs(60);
/// How far apart a workload's rounds may be (the most runs per connection over the
/// fewest, less one) for an attempt to count as quiet: a VM's agree within 2 %.
const HOST_QUIET_SPREAD: f64 = 0.05;

/// The widest spread of runs per connection between the rounds of any workload of a
/// `COST_FILE`.
fn rounds_spread(cost: &Value) -> f64 {
    cost["workloads"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            let runs: Vec<f64> = w["rounds"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["runs_per_conn"].as_f64())
                .collect();
            let (lo, hi) = runs.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), r| {
                (lo.min(*r), hi.max(*r))
            });
            if lo > 0.0 {
                hi / lo - 1.0
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0, f64::max)
}

/// `COST_TEST` on the host until an attempt is quiet (`HOST_TRIES` at most): the quiet
/// one, else the least disturbed one, marked so.
fn run_host(binaries: &BTreeMap<&'static str, TestBinary>, hstrace: &Path) -> Result<HostResult> {
    let mut best: Option<(f64, HostResult)> = None;
    for attempt in 1..=HOST_TRIES {
        let mut got = run_host_once(binaries, hstrace)?;
        let Some(cost) = &mut got.kernel_cost else {
            return Ok(got);
        };
        let spread = rounds_spread(cost);
        cost["attempt"] = json!(attempt);
        cost["rounds_spread"] = json!(spread);
        if spread <= HOST_QUIET_SPREAD {
            return Ok(got);
        }
        eprintln!(
            "vm-test: host: the rounds differ by {:.0} %: other work ran beside the test{}",
            spread * 100.0,
            if attempt < HOST_TRIES {
                format!("; again in {} s", HOST_WAIT.as_secs())
            } else {
                String::new()
            }
        );
        if best.as_ref().is_none_or(|(s, _)| spread < *s) {
            best = Some((spread, got));
        }
        if attempt < HOST_TRIES {
            thread::sleep(HOST_WAIT);
        }
    }
    let (_, mut got) = best.expect("an attempt");
    if let Some(cost) = &mut got.kernel_cost {
        cost["disturbed"] = json!(true);
    }
    Ok(got)
}

/// Run `COST_TEST` here once, as the VMs do, its figures to target/vm/out/host/.
fn run_host_once(
    binaries: &BTreeMap<&'static str, TestBinary>,
    hstrace: &Path,
) -> Result<HostResult> {
    let out = vm_dir().join("out/host");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out)?;
    let (target, test) = COST_TEST;
    let bin = &binaries[target];
    let log = out.join(format!("{target}.log"));
    let file = fs::File::create(&log)?;
    let release = crate::util::kernel();
    eprintln!("vm-test: host: running {target} {test} in {release}");
    let started = Instant::now();
    let status = Command::new(&bin.path)
        .args(test_args(&[test], &[]))
        .current_dir(&bin.dir)
        .env("HSTRACE_BIN", hstrace)
        .env(COST_OUT_ENV, out.join(COST_FILE))
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
        .with_context(|| format!("running {}", bin.path.display()))?;
    let text = fs::read_to_string(&log).unwrap_or_default();
    let (passed, failed) = result_counts(&text);
    let mut failures = failed_tests(&text);
    if !status.success() && failures.is_empty() {
        failures.push(format!("{target} {status} without naming a failed test"));
    }
    eprintln!(
        "vm-test: host: {target} {}",
        if failures.is_empty() {
            "passed"
        } else {
            "FAILED"
        }
    );
    Ok(HostResult {
        release,
        passed,
        failed: failed.max(failures.len() as u64),
        failures,
        kernel_cost: read_cost(&out.join(COST_FILE)),
        log,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// A `COST_FILE`, if the test wrote one (it does when it passed).
fn read_cost(path: &Path) -> Option<Value> {
    serde_json::from_str(&fs::read_to_string(path).ok()?).ok()
}

// ---------------------------------------------------------------------------------------
// the report

/// Print the table (a row per kernel, its failures under it; the host's `COST_TEST`), each
/// kernel's hook runs per connection, and the closing line; write target/vm/results.json.
fn report(
    results: &[KernelResult],
    host: Option<&HostResult>,
    elapsed: Duration,
) -> Result<Totals> {
    let mut totals = Totals::default();
    println!();
    println!(
        "{:<6} {:<26} {:<4} {:>8} {:>6} {:>6} {:>6}",
        "kernel", "release", "mode", "seconds", "boot", "passed", "failed"
    );
    for r in results {
        let mode = r.mode.map(Mode::name).unwrap_or("-");
        println!(
            "{:<6} {:<26} {:<4} {:>8.0} {:>6} {:>6} {:>6}",
            r.label,
            if r.release.is_empty() {
                "-"
            } else {
                &r.release
            },
            mode,
            r.seconds,
            r.boot_seconds
                .map(|b| format!("{b:.0}"))
                .unwrap_or_else(|| "-".into()),
            r.passed(),
            r.failed()
        );
        for f in r.failures() {
            println!("         FAILED {f}");
        }
        totals.passed += r.passed();
        totals.failed += r.failed();
    }
    if let Some(h) = host {
        println!(
            "{:<6} {:<26} {:<4} {:>8.0} {:>6} {:>6} {:>6}",
            "host", h.release, "-", h.seconds, "-", h.passed, h.failed
        );
        for f in &h.failures {
            println!("         FAILED {}: {f}", COST_TEST.0);
        }
        totals.passed += h.passed;
        totals.failed += h.failed;
    }
    let costs: Vec<(&str, &Value)> = results
        .iter()
        .filter_map(|r| Some((r.label, r.kernel_cost.as_ref()?)))
        .chain(host.and_then(|h| Some(("host", h.kernel_cost.as_ref()?))))
        .collect();
    if !costs.is_empty() {
        println!("\nhook runs per connection (BPF µs, nginx CPU µs per connection: compare within a row)");
        for (label, cost) in costs {
            let cells: Vec<String> = cost["workloads"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|w| {
                    format!(
                        "{} {:.1} ({:.1}, {:.1})",
                        w["name"].as_str().unwrap_or("?"),
                        w["runs_per_conn"].as_f64().unwrap_or(f64::NAN),
                        w["bpf_ns_per_conn"].as_f64().unwrap_or(f64::NAN) / 1e3,
                        w["server_cpu_ns_per_conn"].as_f64().unwrap_or(f64::NAN) / 1e3,
                    )
                })
                .collect();
            println!(
                "{label:<6} {:<6} {}",
                cost["bpf_build"].as_str().unwrap_or("?"),
                cells.join("; ")
            );
        }
    }
    for r in results {
        for (path, tail) in &r.tails {
            println!("\n{} — the end of {path}:", r.label);
            for l in tail.lines() {
                println!("  | {l}");
            }
        }
    }
    let kernels: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut logs = serde_json::Map::new();
            if let Some(out) = &r.out {
                logs.insert("vm".into(), json!(shown(&out.join("vng.log"))));
                logs.insert("script".into(), json!(shown(&out.join("run.sh"))));
                logs.insert("verifier_logs".into(), json!(shown(&out.join("verifier"))));
            }
            for t in &r.targets {
                logs.insert(t.target.into(), json!(shown(&t.log)));
            }
            json!({
                "label": r.label,
                "release": r.release,
                "packages": r.packages,
                "mode": r.mode.map(Mode::name),
                "seconds": (r.seconds * 10.0).round() / 10.0,
                "boot_seconds": r.boot_seconds,
                "passed": r.passed(),
                "failed": r.failed(),
                "failures": r.failures(),
                "targets": r.targets.iter().map(|t| json!({
                    "target": t.target,
                    "passed": t.passed,
                    "failed": t.failed,
                    "failures": t.failures,
                })).collect::<Vec<_>>(),
                "features": r.features,
                "kernel_cost": r.kernel_cost,
                "logs": logs,
            })
        })
        .collect();
    let host = host.map(|h| {
        json!({
            "release": h.release,
            "seconds": (h.seconds * 10.0).round() / 10.0,
            "passed": h.passed,
            "failed": h.failed,
            "failures": h.failures,
            "kernel_cost": h.kernel_cost,
            "logs": { COST_TEST.0: shown(&h.log) },
        })
    });
    let doc = json!({
        "commit": commit().unwrap_or_default(),
        "seconds": elapsed.as_secs(),
        "passed": totals.passed,
        "failed": totals.failed,
        "kernels": kernels,
        "host": host,
    });
    let path = vm_dir().join("results.json");
    fs::write(&path, serde_json::to_string_pretty(&doc)? + "\n")?;
    println!("\nresults: {} (logs under target/vm/out/)", shown(&path));
    println!(
        "vm-test: {} passed, {} failed",
        totals.passed, totals.failed
    );
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_is_named_from_its_id() {
        assert_eq!(
            package_name("path+file:///w/tests#hstrace-tests@0.1.0"),
            "hstrace-tests"
        );
        assert_eq!(package_name("path+file:///w/hstrace#0.1.0"), "hstrace");
    }

    #[test]
    fn the_archive_answers_are_read() {
        let madison = "\
linux-image-amd64 |   7.2.13-1 | http://deb.debian.org/debian sid/main amd64 Packages
linux-image-amd64 | 6.12.117-1 | http://deb.debian.org/debian trixie/main amd64 Packages
linux-image-amd64 |  6.1.176-1 | http://deb.debian.org/debian bookworm/main amd64 Packages";
        assert_eq!(
            madison_version(madison, "bookworm").as_deref(),
            Some("6.1.176-1")
        );
        assert_eq!(madison_version(madison, "sid").as_deref(), Some("7.2.13-1"));
        assert_eq!(madison_version(madison, "bullseye"), None);
        let deps = parse_depends(
            " dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, \
             linux-binary-7.2.13+deb14-amd64 (= 7.2.13-1), linux-modules-7.2.13+deb14-amd64 (= 7.2.13-1)",
        );
        assert_eq!(deps[0], ("dracut".into(), None));
        assert_eq!(
            deps[1],
            (
                "linux-binary-7.2.13+deb14-amd64".into(),
                Some("7.2.13-1".into())
            )
        );
        assert_eq!(deps.len(), 3);
    }

    #[test]
    fn a_test_log_is_read() {
        let log = "\
running 2 tests
test a ... ok
test six_kinds ... FAILED

failures:

---- six_kinds stdout ----
thread 'six_kinds' panicked

failures:
    six_kinds

test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 3 filtered out; finished in 9.00s
";
        assert_eq!(result_counts(log), (1, 1));
        assert_eq!(failed_tests(log), ["six_kinds"]);
        assert_eq!(
            failure_sections(log, &failed_tests(log)),
            "---- six_kinds stdout ----\nthread 'six_kinds' panicked\n"
        );
        assert_eq!(failure_sections(log, &["a".to_string()]), "");
        assert_eq!(running_test(log), None);
        assert_eq!(
            running_test("running 2 tests\ntest a ... ok\ntest b ... \n").as_deref(),
            Some("b")
        );
        let no_list = "test x ... FAILED\ntest result: FAILED. 0 passed; 1 failed;";
        assert_eq!(failed_tests(no_list), ["x"]);
        assert_eq!(result_counts("test result: ok. 7 passed; 0 failed"), (7, 0));
    }

    #[test]
    fn filters_replace_the_tables_names() {
        assert_eq!(
            test_args(&["a", "b"], &[]),
            ["--test-threads=1", "--include-ignored", "--exact", "a", "b"]
        );
        assert_eq!(
            test_args(&["a"], &["--nocapture".into()]),
            [
                "--test-threads=1",
                "--include-ignored",
                "--exact",
                "a",
                "--nocapture"
            ]
        );
        assert_eq!(
            test_args(&["a"], &["six".into()]),
            ["--test-threads=1", "--include-ignored", "six"]
        );
        assert_eq!(
            test_args(&[], &[]),
            ["--test-threads=1", "--include-ignored"]
        );
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn the_rounds_spread_is_the_widest_of_any_workload() {
        let w = |runs: &[f64]| json!({"rounds": runs.iter().map(|r| json!({"runs_per_conn": r})).collect::<Vec<_>>()});
        let cost = json!({"workloads": [w(&[55.1, 55.1, 54.2]), w(&[36.0, 36.0])]});
        assert!((rounds_spread(&cost) - (55.1 / 54.2 - 1.0)).abs() < 1e-9);
        let noisy = json!({"workloads": [w(&[36.0, 36.0]), w(&[3435.6, 6649.4])]});
        assert!(rounds_spread(&noisy) > HOST_QUIET_SPREAD);
        assert_eq!(
            rounds_spread(&json!({"workloads": [w(&[0.0, 1.0])]})),
            f64::INFINITY
        );
    }

    #[test]
    fn every_kernel_is_chosen_by_default_and_unknown_ones_refused() {
        assert_eq!(choose_kernels(&[]).unwrap().len(), KERNELS.len());
        assert_eq!(
            choose_kernels(&["6.1".into()]).unwrap(),
            [("6.1", "bookworm")]
        );
        assert!(choose_kernels(&["4.19".into()]).is_err());
    }
}
