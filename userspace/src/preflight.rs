//! Checks made before anything is loaded, each failing with one line that says what to do.

use std::{fs, path::Path, process::Command};

use anyhow::{bail, Result};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

fn effective_caps() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
        })
        .unwrap_or(0)
}

/// Root, or CAP_BPF + CAP_PERFMON (CAP_SYS_ADMIN covers both on older kernels).
pub fn privileges() -> Result<()> {
    let caps = effective_caps();
    let has = |c: u32| caps & (1 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    let missing: Vec<&str> = [(CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")]
        .iter()
        .filter(|(c, _)| !has(*c))
        .map(|(_, n)| *n)
        .collect();
    bail!(
        "hstrace needs root, or {} (plus CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE to read other processes' /proc): run it with sudo",
        missing.join(" and ")
    )
}

/// The bpf() system call itself: a one-entry map made and closed. Holding CAP_BPF is not
/// enough inside a container whose seccomp profile refuses bpf() without CAP_SYS_ADMIN
/// (podman's and CRI-O's default profiles do): say so, rather than fail later on the first
/// map with a bare "Operation not permitted".
pub fn bpf_syscall() -> Result<()> {
    const BPF_MAP_CREATE: libc::c_long = 0;
    const BPF_MAP_TYPE_ARRAY: u32 = 2;
    // union bpf_attr for BPF_MAP_CREATE: map_type, key_size, value_size, max_entries, the
    // rest zero
    let mut attr = [0u32; 32];
    attr[..4].copy_from_slice(&[BPF_MAP_TYPE_ARRAY, 4, 4, 1]);
    // SAFETY: bpf(2) with a zeroed attr of the size given; the fd it returns is closed
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_MAP_CREATE,
            attr.as_ptr(),
            std::mem::size_of_val(&attr),
        )
    };
    if fd >= 0 {
        // SAFETY: the fd bpf() just returned, ours alone
        unsafe { libc::close(fd as i32) };
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    let seccomp = fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Seccomp:"))?;
            Some(line.split_whitespace().nth(1)? == "2")
        })
        .unwrap_or(false);
    if err.raw_os_error() == Some(libc::EPERM) && seccomp {
        bail!("the bpf() system call is refused ({err}) by a seccomp filter (Seccomp: 2 in /proc/self/status), as a container runtime's default profile does without CAP_SYS_ADMIN: run the container with a profile that allows bpf and perf_event_open (Kubernetes: securityContext.seccompProfile.type: Unconfined, or a Localhost profile; podman and docker: --security-opt seccomp=unconfined)");
    }
    bail!("the bpf() system call fails ({err}): hstrace needs a kernel built with CONFIG_BPF_SYSCALL=y");
}

/// The kernel's BTF, which CO-RE relocations and tp_btf programs need.
pub fn btf() -> Result<()> {
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        bail!("this kernel has no BTF (/sys/kernel/btf/vmlinux is missing): hstrace needs a kernel built with CONFIG_DEBUG_INFO_BTF=y (most distributions' 5.8+ kernels)");
    }
    Ok(())
}

/// Tracepoints are found through tracefs; mount it if nothing has.
pub fn tracefs() -> Result<()> {
    let mounted = |p: &str| Path::new(p).join("events").exists();
    if mounted("/sys/kernel/tracing") || mounted("/sys/kernel/debug/tracing") {
        return Ok(());
    }
    log::info!("tracefs is not mounted: mounting it at /sys/kernel/tracing");
    let ok = Command::new("mount")
        .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok || !mounted("/sys/kernel/tracing") {
        bail!("tracefs is not mounted and mounting it failed: run `mount -t tracefs nodev /sys/kernel/tracing` as root, then retry");
    }
    Ok(())
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; raise it where allowed and
/// carry on where not (newer kernels do not need it).
pub fn memlock() {
    let rlim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: valid pointer to an rlimit
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &rlim) } != 0 {
        log::debug!("could not raise RLIMIT_MEMLOCK (fine on 5.11+ kernels)");
    }
}

const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_SYS_PTRACE: u32 = 19;
/// What a running tracer still needs: read new processes' /proc/PID/maps and fds
/// (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH), BPF and perf events (CAP_BPF, CAP_PERFMON).
const KEPT: [u32; 4] = [CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE, CAP_PERFMON, CAP_BPF];

/// Once loaded and attached, give up every capability but `KEPT` (root's others: mount,
/// network, setuid, modules…), for good: the bounding set too. `uprobes`: keep
/// CAP_SYS_ADMIN as well, to hook the libssl of processes started later (6.18 refuses a
/// uprobe's perf_event_open with EACCES without it, even with CAP_PERFMON: measured).
/// Returns the capabilities kept.
pub fn drop_capabilities(uprobes: bool) -> Result<u64> {
    let keep: u64 =
        KEPT.iter().map(|c| 1u64 << c).sum::<u64>() | (u64::from(uprobes) << CAP_SYS_ADMIN);
    let last_cap: u32 = fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40);
    for cap in (0..=last_cap).filter(|c| keep & (1 << c) == 0) {
        // SAFETY: prctl with integer arguments; failure (no CAP_SETPCAP) is left alone
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut hdr = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capget/capset with a v3 header and two data words, as the kernel expects
    if unsafe { libc::syscall(libc::SYS_capget, &mut hdr, data.as_mut_ptr()) } != 0 {
        bail!("capget: {}", std::io::Error::last_os_error());
    }
    for (i, d) in data.iter_mut().enumerate() {
        let word = (keep >> (32 * i)) as u32;
        d.effective &= word;
        d.permitted &= word;
        d.inheritable &= word;
    }
    // SAFETY: as above
    if unsafe { libc::syscall(libc::SYS_capset, &hdr, data.as_ptr()) } != 0 {
        bail!("capset: {}", std::io::Error::last_os_error());
    }
    Ok(effective_caps())
}
