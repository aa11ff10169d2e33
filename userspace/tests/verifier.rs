//! Every program of the probe table passes the kernel's verifier, in both builds of the
//! programs (features.rs), including the fentry/fexit and kprobe variants that are only
//! attached on kernels without tracepoints. A hook the running kernel does not have at all
//! (a tracepoint added later, a kernel function renamed) is passed over and listed; every
//! required group must still have an alternative that verifies. Needs root (run through
//! `cargo xtask test`, and inside each kernel of `cargo xtask vm-test`).
//!
//! With HSTRACE_VERIFIER_LOG_DIR set, each program's verifier log (the whole log of a
//! refused program; the instructions verified of an accepted one) is written there as
//! `<build>.<program>.log`: the VM matrix keeps them as artifacts. HSTRACE_VERIFIER_ONLY
//! (program names, comma-separated) narrows the run to those programs, for working on one.

use std::{fs, path::PathBuf};

use aya::{
    programs::{ProgramError, UProbe},
    Btf, EbpfLoader,
};
use hstrace::{
    features::{self, Build},
    probes::{self, Hook},
};

fn loader(build: Build) -> aya::Ebpf {
    EbpfLoader::new()
        .load(build.object())
        .expect("the BPF object loads (maps, BTF)")
}

/// Some kernels (these test machines among them) refuse BPF trampoline programs with
/// EPERM before the verifier runs: no verifier log at all. That is the kernel lacking the
/// feature, not the program failing; any verifier complaint still fails the test. The
/// fentry/fexit bodies are the same functions as the kprobe variants', which do verify.
fn refused_before_verification(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<ProgramError>(),
        Some(ProgramError::LoadError { io_error, verifier_log })
            if io_error.raw_os_error() == Some(libc::EPERM) && verifier_log.to_string().trim().is_empty()
    )
}

/// Where to keep the logs, if anywhere.
fn log_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("HSTRACE_VERIFIER_LOG_DIR")?);
    fs::create_dir_all(&dir).expect("the verifier log directory");
    Some(dir)
}

fn keep_log(dir: &Option<PathBuf>, build: Build, program: &str, text: &str) {
    if let Some(dir) = dir {
        let path = dir.join(format!("{}.{program}.log", build.name()));
        fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}

/// Is `program` in the run (HSTRACE_VERIFIER_ONLY)?
fn wanted(program: &str) -> bool {
    std::env::var("HSTRACE_VERIFIER_ONLY")
        .map(|only| only.split(',').any(|p| p == program))
        .unwrap_or(true)
}

/// The last `n` bytes of a verifier's complaint: it says why at the end.
fn tail(msg: &str, n: usize) -> &str {
    let at = msg
        .char_indices()
        .map(|(i, _)| i)
        .find(|i| msg.len() - i <= n)
        .unwrap_or(0);
    &msg[at..]
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn every_program_variant_verifies() {
    let btf = Btf::from_sys_fs().expect("kernel BTF");
    let kernel = features::probe().expect("the feature probes load");
    let logs = log_dir();
    let mut failures = Vec::new();
    let mut refused = Vec::new();
    let mut absent = Vec::new();
    let mut verified = 0;
    let mut summary = Vec::new();
    for build in [Build::Full, Build::Basic] {
        if build == Build::Full && kernel.build() != Build::Full {
            summary.push(format!(
                "full build not tried: the kernel lacks {:?}",
                kernel.missing
            ));
            continue;
        }
        // the groups with an alternative whose every program verified
        let mut groups_ok = Vec::new();
        for group in probes::GROUPS {
            for alt in group.alternatives {
                let mut alt_ok = true;
                for probe in alt.iter().filter(|p| wanted(p.program)) {
                    if !probes::hook_exists(&btf, &probe.hook) {
                        absent.push(format!("{}: {}", probe.program, probe.hook.name()));
                        alt_ok = false;
                        continue;
                    }
                    // a fresh object per program: one failure must not hide another
                    let mut bpf = loader(build);
                    match probes::load(&mut bpf, &btf, probe) {
                        Ok(()) => {
                            verified += 1;
                            let info = bpf.program(probe.program).unwrap().info();
                            let insns = info.ok().and_then(|i| i.verified_instruction_count());
                            keep_log(
                                &logs,
                                build,
                                probe.program,
                                &format!(
                                    "verified ({:?}); instructions verified: {insns:?}\n",
                                    probe.hook
                                ),
                            );
                        }
                        Err(e) => {
                            alt_ok = false;
                            let trampoline = matches!(probe.hook, Hook::FEntry(_) | Hook::FExit(_));
                            let msg = format!("{e:#}");
                            keep_log(&logs, build, probe.program, &msg);
                            if trampoline && refused_before_verification(&e) {
                                refused.push(probe.program);
                            } else {
                                failures.push(format!(
                                    "{} build, {}: …{}",
                                    build.name(),
                                    probe.program,
                                    tail(&msg, 2000)
                                ));
                            }
                        }
                    }
                }
                if alt_ok && !groups_ok.contains(&group.name) {
                    groups_ok.push(group.name);
                }
            }
            let narrowed = std::env::var_os("HSTRACE_VERIFIER_ONLY").is_some();
            if group.required && !narrowed && !groups_ok.contains(&group.name) {
                failures.push(format!(
                    "{} build: no alternative of required group {} verifies on this kernel",
                    build.name(),
                    group.name
                ));
            }
        }
        let mut bpf = loader(build);
        for (name, _) in probes::Uprobes::All.probes() {
            if !wanted(name) {
                continue;
            }
            let p: &mut UProbe = bpf.program_mut(name).unwrap().try_into().unwrap();
            match p.load() {
                Ok(()) => verified += 1,
                Err(ProgramError::AlreadyLoaded) => {}
                Err(e) => {
                    let msg = format!("{e:#}");
                    keep_log(&logs, build, name, &msg);
                    failures.push(format!(
                        "{} build, {name}: …{}",
                        build.name(),
                        tail(&msg, 2000)
                    ));
                }
            }
        }
        summary.push(format!(
            "{} build: groups verified {groups_ok:?}",
            build.name()
        ));
    }
    absent.sort();
    absent.dedup();
    eprintln!(
        "verified {verified} programs; {}; hooks not in this kernel: {absent:?}; refused by this kernel before verification: {refused:?}",
        summary.join("; ")
    );
    assert!(
        failures.is_empty(),
        "programs that failed to load:\n{}",
        failures.join("\n")
    );
    if std::env::var_os("HSTRACE_VERIFIER_ONLY").is_none() {
        assert!(verified >= 25, "only {verified} programs verified");
    }
}

/// The objects users load hold the product only: every program in them is one the probe
/// table or the OpenSSL uprobes name (the bench's empty programs live in ebpf/bench.bpf.c).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn every_program_in_the_object_is_in_the_probe_table() {
    for build in [Build::Full, Build::Basic] {
        let bpf = loader(build);
        let mut named: Vec<&str> = probes::all_probes().map(|p| p.program).collect();
        named.extend(probes::Uprobes::All.probes().iter().map(|(name, _)| *name));
        let stray: Vec<&str> = bpf
            .programs()
            .map(|(name, _)| name)
            .filter(|name| !named.contains(name))
            .collect();
        assert!(
            stray.is_empty(),
            "{} build: programs no probe names: {stray:?}",
            build.name()
        );
    }
}
