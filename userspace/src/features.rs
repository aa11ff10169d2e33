//! Which BPF features the running kernel has, and so which build of hstrace's programs it
//! loads. Each feature is probed by loading one tiny program that uses it
//! (ebpf/features.bpf.c): the kernel's verifier accepting it is the answer. Never told from
//! the kernel's version: distributions backport BPF (RHEL 9's 5.14 has most of 6.x's).
//!
//! One source, two builds (HS_BASIC in ebpf/conn.bpf.h): the default needs every feature
//! below; the basic build needs none, and each missing feature costs what `Feature::limit`
//! says. docs/kernels.md lists which kernels load which.

use std::fmt;

use anyhow::{Context, Result};
use aya::{programs::TracePoint, EbpfLoader};

/// A BPF feature the default build uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feature {
    BpfLoop,
    AtomicFetch,
    TaskBtf,
    TaskPtRegs,
    GlobalPointerArgs,
}

impl Feature {
    pub const ALL: [Feature; 5] = [
        Feature::BpfLoop,
        Feature::AtomicFetch,
        Feature::TaskBtf,
        Feature::TaskPtRegs,
        Feature::GlobalPointerArgs,
    ];

    /// Its name in `-v`, `/healthz` and `hstrace_probe_info{group="kernel_lacks"}`.
    pub fn name(self) -> &'static str {
        match self {
            Feature::BpfLoop => "bpf_loop",
            Feature::AtomicFetch => "atomic_fetch",
            Feature::TaskBtf => "task_btf",
            Feature::TaskPtRegs => "task_pt_regs",
            Feature::GlobalPointerArgs => "global_pointer_args",
        }
    }

    /// The program of ebpf/features.bpf.c that probes it.
    fn program(self) -> &'static str {
        match self {
            Feature::BpfLoop => "has_bpf_loop",
            Feature::AtomicFetch => "has_atomic_fetch",
            Feature::TaskBtf => "has_task_btf",
            Feature::TaskPtRegs => "has_task_pt_regs",
            Feature::GlobalPointerArgs => "has_global_pointer_args",
        }
    }

    /// The mainline kernel that brought it (for the reader: the probe decides).
    pub fn since(self) -> &'static str {
        match self {
            Feature::BpfLoop => "5.17",
            Feature::AtomicFetch => "5.12",
            Feature::TaskBtf => "5.11",
            Feature::TaskPtRegs => "5.15",
            Feature::GlobalPointerArgs => "5.12",
        }
    }

    /// What the basic build does without it, as the operator should know it.
    pub fn limit(self) -> &'static str {
        match self {
            Feature::BpfLoop => "no bpf_loop: a read or write is walked for at most 32 TLS record and message headers (a longer one stops its connection's parse, counted as record_stream_desync)",
            Feature::AtomicFetch => "no atomic exchange: an arrival racing the server's first read of a flight may be taken for the next flight's (rare)",
            Feature::TaskBtf => "no BTF-typed task: the thread's CPU time and syscall are read by helper calls (slower, same figures)",
            Feature::TaskPtRegs => "no bpf_task_pt_regs: the thread's syscall is read from the top of its kernel stack (16 KiB stacks: kernels with KASAN are not supported)",
            Feature::GlobalPointerArgs => "no global functions with pointer arguments: the parser's functions are verified at each call (a slower load)",
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which build of the programs is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Build {
    /// Every feature of `Feature::ALL`.
    Full,
    /// None of them (HS_BASIC).
    Basic,
}

impl Build {
    pub fn name(self) -> &'static str {
        match self {
            Build::Full => "full",
            Build::Basic => "basic",
        }
    }

    /// The compiled object of this build.
    pub fn object(self) -> &'static [u8] {
        match self {
            Build::Full => crate::BPF_OBJECT,
            Build::Basic => crate::BPF_OBJECT_BASIC,
        }
    }
}

/// What the probes found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Features {
    /// The features of `Feature::ALL` the kernel refused, in that order.
    pub missing: Vec<Feature>,
}

impl Features {
    /// The build these features can load: the default one only when none is missing.
    pub fn build(&self) -> Build {
        if self.missing.is_empty() {
            Build::Full
        } else {
            Build::Basic
        }
    }
}

/// Probe every feature by loading its program (root, or CAP_BPF and CAP_PERFMON, as for
/// the programs themselves).
pub fn probe() -> Result<Features> {
    let mut bpf = EbpfLoader::new()
        .load(crate::FEATURES_OBJECT)
        .context("loading the feature probes' BPF object")?;
    let mut missing = Vec::new();
    for f in Feature::ALL {
        let prog: &mut TracePoint = bpf
            .program_mut(f.program())
            .with_context(|| format!("program {} missing from the feature probes", f.program()))?
            .try_into()?;
        if let Err(e) = prog.load() {
            log::debug!("kernel feature {f} (since {}) refused: {e:#}", f.since());
            missing.push(f);
        }
    }
    Ok(Features { missing })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_missing_feature_takes_the_basic_build() {
        assert_eq!(Features { missing: vec![] }.build(), Build::Full);
        for f in Feature::ALL {
            assert_eq!(Features { missing: vec![f] }.build(), Build::Basic, "{f}");
        }
    }
}
