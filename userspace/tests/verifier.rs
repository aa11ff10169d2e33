//! Every program of the probe table passes the kernel's verifier, including the
//! fentry/fexit and kprobe variants that are only attached on kernels without
//! tracepoints. Needs root (run through `cargo xtask test`).

use aya::{
    programs::{ProgramError, UProbe},
    Btf, EbpfLoader,
};
use hstrace::probes::{self, Hook};

fn loader() -> aya::Ebpf {
    EbpfLoader::new()
        .load(hstrace::BPF_OBJECT)
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

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn every_program_variant_verifies() {
    let btf = Btf::from_sys_fs().expect("kernel BTF");
    let mut failures = Vec::new();
    let mut refused = Vec::new();
    let mut verified = 0;
    for probe in probes::all_probes() {
        // a fresh object per program: one failure must not hide another
        let mut bpf = loader();
        match probes::load(&mut bpf, &btf, probe) {
            Ok(()) => verified += 1,
            Err(e) => {
                let trampoline = matches!(probe.hook, Hook::FEntry(_) | Hook::FExit(_));
                if trampoline && refused_before_verification(&e) {
                    refused.push(probe.program);
                } else {
                    // the verifier says why at the end of its log
                    let msg = format!("{e:#}");
                    let tail = msg
                        .char_indices()
                        .map(|(i, _)| i)
                        .find(|i| msg.len() - i <= 2000)
                        .unwrap_or(0);
                    failures.push(format!("{}: …{}", probe.program, &msg[tail..]));
                }
            }
        }
    }
    let mut bpf = loader();
    for (name, _) in probes::Uprobes::All.probes() {
        let p: &mut UProbe = bpf.program_mut(name).unwrap().try_into().unwrap();
        match p.load() {
            Ok(()) => verified += 1,
            Err(ProgramError::AlreadyLoaded) => {}
            Err(e) => failures.push(format!("{name}: {e:#}")),
        }
    }
    eprintln!(
        "verified {verified} programs; refused by this kernel before verification: {refused:?}"
    );
    assert!(
        failures.is_empty(),
        "programs that failed to load:\n{}",
        failures.join("\n")
    );
    assert!(verified >= 25, "only {verified} programs verified");
}

/// The object users load holds the product only: every program in it is one the probe
/// table or the OpenSSL uprobes name (the bench's empty programs live in ebpf/bench.bpf.c).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn every_program_in_the_object_is_in_the_probe_table() {
    let bpf = loader();
    let mut named: Vec<&str> = probes::all_probes().map(|p| p.program).collect();
    named.extend(probes::Uprobes::All.probes().iter().map(|(name, _)| *name));
    let stray: Vec<&str> = bpf
        .programs()
        .map(|(name, _)| name)
        .filter(|name| !named.contains(name))
        .collect();
    assert!(stray.is_empty(), "programs no probe names: {stray:?}");
}
