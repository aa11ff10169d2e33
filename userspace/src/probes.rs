//! The probe table: every BPF program hstrace attaches, what it gives, and what replaces
//! it on kernels that lack its hook. Read this file to know exactly where each timestamp
//! of a record comes from.
//!
//! Groups are tried in order; within a group the first alternative whose programs all load
//! and attach wins. A required group with no working alternative stops hstrace with the
//! reason; an optional one is reported (with `-v`, and in the exit totals) and skipped.

use std::{collections::HashMap, num::NonZeroU32, path::Path};

use anyhow::{anyhow, Context, Result};
use aya::{
    maps::Array,
    programs::{
        uprobe::{UProbeLinkId, UProbeScope},
        Program, UProbe,
    },
    Btf, Ebpf,
};

/// Where a program is attached.
#[derive(Clone, Copy, Debug)]
pub enum Hook {
    /// A tracefs tracepoint (category, event).
    Tracepoint(&'static str, &'static str),
    /// A BTF-typed raw tracepoint.
    BtfTracepoint(&'static str),
    /// fentry/fexit on a kernel function (BPF trampoline).
    FEntry(&'static str),
    FExit(&'static str),
    /// kprobe/kretprobe on a kernel function.
    KProbe(&'static str),
    KRetProbe(&'static str),
}

#[derive(Clone, Copy, Debug)]
pub struct Probe {
    /// Program name in the object (its SEC() in one of ebpf/'s family files).
    pub program: &'static str,
    pub hook: Hook,
}

/// One concern of the tracer and the ways the kernel can provide it, best first.
pub struct Group {
    pub name: &'static str,
    pub required: bool,
    /// What the records lose when no alternative works (optional groups only).
    pub without: &'static str,
    pub alternatives: &'static [&'static [Probe]],
}

const fn tp(program: &'static str, category: &'static str, event: &'static str) -> Probe {
    Probe {
        program,
        hook: Hook::Tracepoint(category, event),
    }
}

const fn p(program: &'static str, hook: Hook) -> Probe {
    Probe { program, hook }
}

/// The kernel-side probes. Timestamps: t_est and close from `tcp_state`, t_accept from
/// `accept`, t_arrive from `arrival`, read and sent times (and every wire byte parsed)
/// from `read` and `send`. On-CPU time (`cpu_ns`) needs no hook of its own: the `read`
/// and `send` programs run in the server's thread and read the scheduler's accounting of
/// it (`se.sum_exec_runtime` and `se.exec_start`, through BTF).
///
/// Tracepoints and trampolines in the kernel come before the syscall tracepoints: a
/// syscall tracepoint is paid by every syscall of every process on the host once any is
/// attached (~20-300 ns each), a hook on a socket function only by the sockets. Reads and
/// writes are hooked at the socket layer's tracepoints where the kernel has them (6.3+),
/// else at inet_recvmsg and inet6_recvmsg (whose arguments have not changed since 4.x;
/// tcp_recvmsg's have) and tcp_sendmsg by a BPF trampoline (fentry/fexit), else at the
/// syscalls.
///
/// A kretprobe comes last, after the syscalls: the kernel keeps max(10, 2 × CPUs) return
/// instances for each, and a thread asleep inside the function (any process's blocking
/// read, send or accept) holds one. Past that, the function's returns are skipped: on a
/// host with more threads asleep in socket reads than that, nearly every read. (Counted:
/// `hook_runs_skipped`, skipped.rs; tests/tests/servers.rs has such a host.) A kprobe
/// without a return (arrival) has no such limit.
pub const GROUPS: &[Group] = &[
    Group {
        name: "tcp_state",
        required: true,
        without: "",
        alternatives: &[
            &[p(
                "set_state_btf",
                Hook::BtfTracepoint("inet_sock_set_state"),
            )],
            &[tp("sock_set_state", "sock", "inet_sock_set_state")],
        ],
    },
    Group {
        name: "accept",
        required: true,
        without: "",
        alternatives: &[
            &[p("accept_fexit", Hook::FExit("inet_csk_accept"))],
            &[
                tp("accept4_exit", "syscalls", "sys_exit_accept4"),
                tp("accept_exit", "syscalls", "sys_exit_accept"),
            ],
            &[p("accept_kretprobe", Hook::KRetProbe("inet_csk_accept"))],
        ],
    },
    Group {
        name: "read",
        required: true,
        without: "",
        alternatives: &[
            &[p("sock_recv", Hook::BtfTracepoint("sock_recv_length"))],
            &[
                p("recv4_fentry", Hook::FEntry("inet_recvmsg")),
                p("recv4_fexit", Hook::FExit("inet_recvmsg")),
                p("recv6_fentry", Hook::FEntry("inet6_recvmsg")),
                p("recv6_fexit", Hook::FExit("inet6_recvmsg")),
            ],
            &[
                tp("read_enter", "syscalls", "sys_enter_read"),
                tp("read_exit", "syscalls", "sys_exit_read"),
                tp("readv_enter", "syscalls", "sys_enter_readv"),
                tp("readv_exit", "syscalls", "sys_exit_readv"),
                tp("recvfrom_enter", "syscalls", "sys_enter_recvfrom"),
                tp("recvfrom_exit", "syscalls", "sys_exit_recvfrom"),
                tp("recvmsg_enter", "syscalls", "sys_enter_recvmsg"),
                tp("recvmsg_exit", "syscalls", "sys_exit_recvmsg"),
            ],
            &[
                p("recv_kprobe", Hook::KProbe("inet_recvmsg")),
                p("recv_kretprobe", Hook::KRetProbe("inet_recvmsg")),
                p("recv_kprobe", Hook::KProbe("inet6_recvmsg")),
                p("recv_kretprobe", Hook::KRetProbe("inet6_recvmsg")),
            ],
        ],
    },
    Group {
        name: "send",
        required: true,
        without: "",
        alternatives: &[
            &[p("sock_send", Hook::BtfTracepoint("sock_send_length"))],
            &[
                p("send_fentry", Hook::FEntry("tcp_sendmsg")),
                p("send_fexit", Hook::FExit("tcp_sendmsg")),
            ],
            &[
                tp("write_enter", "syscalls", "sys_enter_write"),
                tp("write_exit", "syscalls", "sys_exit_write"),
                tp("writev_enter", "syscalls", "sys_enter_writev"),
                tp("writev_exit", "syscalls", "sys_exit_writev"),
                tp("sendto_enter", "syscalls", "sys_enter_sendto"),
                tp("sendto_exit", "syscalls", "sys_exit_sendto"),
                tp("sendmsg_enter", "syscalls", "sys_enter_sendmsg"),
                tp("sendmsg_exit", "syscalls", "sys_exit_sendmsg"),
            ],
            &[
                p("send_kprobe", Hook::KProbe("tcp_sendmsg")),
                p("send_kretprobe", Hook::KRetProbe("tcp_sendmsg")),
            ],
        ],
    },
    Group {
        name: "arrival",
        required: false,
        without: "no t_arrive: wait and queue stages are reported together, ending at the read",
        alternatives: &[
            &[p("data_ready_btf", Hook::BtfTracepoint("sk_data_ready"))],
            &[tp("sock_data_ready", "sock", "sk_data_ready")],
            &[p("data_ready_fentry", Hook::FEntry("tcp_data_ready"))],
            &[p("data_ready_kprobe", Hook::KProbe("tcp_data_ready"))],
        ],
    },
    Group {
        name: "close",
        required: false,
        without:
            "a connection the server closes after a reset closed it ends only at the idle timeout",
        alternatives: &[
            &[p("destroy_btf", Hook::BtfTracepoint("tcp_destroy_sock"))],
            &[tp("tcp_destroy", "tcp", "tcp_destroy_sock")],
            &[tp("close_enter", "syscalls", "sys_enter_close")],
        ],
    },
    Group {
        name: "fork",
        required: false,
        without: "new workers are found by the once-a-second /proc scan instead of at fork",
        alternatives: &[&[p("process_fork", Hook::BtfTracepoint("sched_process_fork"))]],
    },
    Group {
        name: "exec",
        required: false,
        without: "a server selected by --comm and started again is found by the once-a-second /proc scan instead of at exec: its first connections may be missed",
        alternatives: &[&[p("process_exec", Hook::BtfTracepoint("sched_process_exec"))]],
    },
];

/// OpenSSL probes, attached per traced process to its libssl (or to an executable that
/// exports the symbols): (program, symbol). SSL_accept reaches SSL_do_handshake too.
pub const SSL_HANDSHAKE: &[(&str, &str)] = &[
    ("ssl_handshake_enter", "SSL_do_handshake"),
    ("ssl_handshake_exit", "SSL_do_handshake"),
];

/// With `--uprobes all`: the library's view of the first request and response. A uprobe
/// hit per call (~5 us here) is why they are off by default.
pub const SSL_IO: &[(&str, &str)] = &[
    ("ssl_read_enter", "SSL_read"),
    ("ssl_io_exit", "SSL_read"),
    ("ssl_read_ex_enter", "SSL_read_ex"),
    ("ssl_io_exit", "SSL_read_ex"),
    ("ssl_write_enter", "SSL_write"),
    ("ssl_io_exit", "SSL_write"),
    ("ssl_write_ex_enter", "SSL_write_ex"),
    ("ssl_io_exit", "SSL_write_ex"),
];

/// Which OpenSSL functions are hooked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uprobes {
    /// wire only
    None,
    /// SSL_do_handshake (the default)
    Handshake,
    /// SSL_do_handshake, SSL_read, SSL_write and their _ex variants
    All,
}

impl Uprobes {
    pub fn probes(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Uprobes::None => Vec::new(),
            Uprobes::Handshake => SSL_HANDSHAKE.to_vec(),
            Uprobes::All => SSL_HANDSHAKE.iter().chain(SSL_IO).copied().collect(),
        }
    }
}

/// Does the running kernel have this tracefs event?
pub fn tracepoint_exists(category: &str, event: &str) -> bool {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .any(|root| {
            Path::new(root)
                .join("events")
                .join(category)
                .join(event)
                .exists()
        })
}

/// Does the running kernel have `hook` at all (its tracepoint, or the kernel function or
/// BTF tracepoint type in its BTF)? An alternative whose hook is absent is passed over
/// with that said, before any load.
pub fn hook_exists(btf: &Btf, hook: &Hook) -> bool {
    use aya_obj::btf::BtfKind;
    match *hook {
        Hook::Tracepoint(category, event) => tracepoint_exists(category, event),
        Hook::BtfTracepoint(name) => btf
            .id_by_type_name_kind(&format!("btf_trace_{name}"), BtfKind::Typedef)
            .is_ok(),
        Hook::FEntry(f) | Hook::FExit(f) | Hook::KProbe(f) | Hook::KRetProbe(f) => {
            btf.id_by_type_name_kind(f, BtfKind::Func).is_ok()
        }
    }
}

/// Load one program into the kernel (the verifier runs here) without attaching it.
pub fn load(bpf: &mut Ebpf, btf: &Btf, probe: &Probe) -> Result<()> {
    let prog = bpf
        .program_mut(probe.program)
        .ok_or_else(|| anyhow!("program {} missing from the BPF object", probe.program))?;
    let res = match (probe.hook, prog) {
        (Hook::Tracepoint(..), Program::TracePoint(p)) => p.load(),
        (Hook::BtfTracepoint(name), Program::BtfTracePoint(p)) => p.load(name, btf),
        (Hook::FEntry(func), Program::FEntry(p)) => p.load(func, btf),
        (Hook::FExit(func), Program::FExit(p)) => p.load(func, btf),
        (Hook::KProbe(_) | Hook::KRetProbe(_), Program::KProbe(p)) => p.load(),
        (hook, _) => {
            return Err(anyhow!(
                "program {} does not match hook {hook:?}",
                probe.program
            ))
        }
    };
    match res {
        Ok(()) | Err(aya::programs::ProgramError::AlreadyLoaded) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("loading {} ({:?})", probe.program, probe.hook)),
    }
}

fn attach(bpf: &mut Ebpf, btf: &Btf, probe: &Probe) -> Result<()> {
    load(bpf, btf, probe)?;
    let prog = bpf.program_mut(probe.program).expect("loaded above");
    let res = match (probe.hook, prog) {
        (Hook::Tracepoint(cat, ev), Program::TracePoint(p)) => p.attach(cat, ev).map(drop),
        (Hook::BtfTracepoint(_), Program::BtfTracePoint(p)) => p.attach().map(drop),
        (Hook::FEntry(_), Program::FEntry(p)) => p.attach().map(drop),
        (Hook::FExit(_), Program::FExit(p)) => p.attach().map(drop),
        (Hook::KProbe(f) | Hook::KRetProbe(f), Program::KProbe(p)) => p.attach(f, 0).map(drop),
        _ => unreachable!("checked by load"),
    };
    res.with_context(|| format!("attaching {} ({:?})", probe.program, probe.hook))
}

fn unload(bpf: &mut Ebpf, probe: &Probe) {
    if let Some(prog) = bpf.program_mut(probe.program) {
        let _ = match prog {
            Program::TracePoint(p) => p.unload(),
            Program::BtfTracePoint(p) => p.unload(),
            Program::FEntry(p) => p.unload(),
            Program::FExit(p) => p.unload(),
            Program::KProbe(p) => p.unload(),
            _ => Ok(()),
        };
    }
}

/// What was chosen for one group.
#[derive(Debug, Clone)]
pub struct Choice {
    pub group: &'static str,
    /// The hooks of the alternative attached, or None when nothing worked.
    pub hooks: Option<Vec<Hook>>,
    /// Why earlier alternatives (or all of them) failed.
    pub errors: Vec<String>,
}

impl Hook {
    /// The kind of hook, as `--avoid-hook` names a whole family of them: `tracepoint`,
    /// `tp_btf`, `fentry` (fentry and fexit) or `kprobe` (kprobe and kretprobe).
    pub fn family(&self) -> &'static str {
        match self {
            Hook::Tracepoint(..) => "tracepoint",
            Hook::BtfTracepoint(_) => "tp_btf",
            Hook::FEntry(_) | Hook::FExit(_) => "fentry",
            Hook::KProbe(_) | Hook::KRetProbe(_) => "kprobe",
        }
    }

    /// The event or kernel function hooked.
    pub fn name(&self) -> &'static str {
        match *self {
            Hook::Tracepoint(_, name)
            | Hook::BtfTracepoint(name)
            | Hook::FEntry(name)
            | Hook::FExit(name)
            | Hook::KProbe(name)
            | Hook::KRetProbe(name) => name,
        }
    }
}

/// The hooks `choices` attached for `group`.
fn hooks_of<'a>(choices: &'a [Choice], group: &'a str) -> impl Iterator<Item = &'a Hook> {
    choices
        .iter()
        .filter(move |c| c.group == group)
        .flat_map(|c| c.hooks.iter().flatten())
}

/// Does an attached hook look connections up by fd (the `fds` table)? Only the syscall
/// alternatives of the read, send and close groups do: in the kernel a hook names the
/// socket itself, and accept then leaves the table alone.
pub fn fds_read(choices: &[Choice]) -> bool {
    ["read", "send", "close"]
        .iter()
        .flat_map(|g| hooks_of(choices, g))
        .any(|h| matches!(h, Hook::Tracepoint("syscalls", _)))
}

/// The `settings` word the BPF programs read once the probes are attached: whether a hook
/// reads the fds table, and if one does while accept is hooked in the kernel (which
/// returns a socket, not an fd), that each connection's fd is learned at its first read or
/// write.
pub fn settings(choices: &[Choice]) -> u32 {
    let accept_in_kernel =
        hooks_of(choices, "accept").any(|h| !matches!(h, Hook::Tracepoint("syscalls", _)));
    match (fds_read(choices), accept_in_kernel) {
        (false, _) => crate::abi::SET_NO_FDS,
        (true, true) => crate::abi::SET_LAZY_FD,
        (true, false) => 0,
    }
}

/// Attach every group of the probe table, best alternative first, passing over those
/// that use a hook named in `avoid`, or a hook of a family named there (Hook::family).
pub fn attach_kernel_probes(bpf: &mut Ebpf, btf: &Btf, avoid: &[String]) -> Result<Vec<Choice>> {
    let mut choices = Vec::new();
    for group in GROUPS {
        let mut choice = Choice {
            group: group.name,
            hooks: None,
            errors: Vec::new(),
        };
        for alt in group.alternatives {
            if let Some(p) = alt.iter().find(|p| {
                avoid
                    .iter()
                    .any(|a| a == p.hook.name() || a == p.hook.family())
            }) {
                choice.errors.push(format!(
                    "{} ({}) avoided (--avoid-hook)",
                    p.hook.name(),
                    p.hook.family()
                ));
                continue;
            }
            if let Some(p) = alt.iter().find(|p| !hook_exists(btf, &p.hook)) {
                choice
                    .errors
                    .push(format!("{} is not in this kernel", p.hook.name()));
                continue;
            }
            let mut failed = None;
            for probe in alt.iter() {
                if let Err(e) = attach(bpf, btf, probe) {
                    // the verifier's whole log behind -vv; its reason in the message
                    log::debug!("{e:#}");
                    failed = Some(refusal(probe, &e));
                    break;
                }
            }
            match failed {
                None => {
                    choice.hooks = Some(alt.iter().map(|p| p.hook).collect());
                    break;
                }
                Some(e) => {
                    alt.iter().for_each(|p| unload(bpf, p));
                    choice.errors.push(e);
                }
            }
        }
        if choice.hooks.is_none() && group.required {
            return Err(anyhow!(
                "no way to hook '{}' on this kernel: {}",
                group.name,
                choice.errors.join("; ")
            ));
        }
        choices.push(choice);
    }
    Ok(choices)
}

/// Why `probe` failed, in a line: for a program the verifier refused, the reason it gives
/// at the end of its log (the whole log is printed with `-vv`), never the log itself.
pub fn refusal(probe: &Probe, e: &anyhow::Error) -> String {
    use aya::programs::ProgramError;
    let refused = e
        .chain()
        .find_map(|c| match c.downcast_ref::<ProgramError>() {
            Some(ProgramError::LoadError {
                io_error,
                verifier_log,
            }) => Some((io_error.to_string(), verifier_log.to_string())),
            _ => None,
        });
    let Some((io_error, log)) = refused else {
        return format!("{e:#}");
    };
    // the verifier's last words before its statistics
    let reason = log
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| {
            !l.is_empty()
                && !l.starts_with("verification time")
                && !l.starts_with("stack depth")
                && !l.starts_with("processed ")
                && !l.starts_with(':')
        })
        .unwrap_or("no reason given");
    format!(
        "{} ({} {}) refused by the kernel's verifier ({io_error}): {reason}",
        probe.program,
        probe.hook.family(),
        probe.hook.name()
    )
}

/// A file as the kernel knows it (device, inode): one libssl however it is reached.
type FileId = (u64, u64);

fn file_id(path: &Path) -> Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).with_context(|| path.display().to_string())?;
    Ok((m.dev(), m.ino()))
}

/// Where a traced process's uprobes are: on its file for it alone (`links`), or on a
/// library hooked for every process that maps it (`links` empty).
struct Attached {
    file: FileId,
    path: std::path::PathBuf,
    links: Vec<(&'static str, UProbeLinkId)>,
}

/// The OpenSSL uprobes of the traced processes. Each process gets its own (others mapping
/// the same file are not slowed), until a traced process forks children: a child serves
/// at once (a PostgreSQL backend reads its SSLRequest as it starts), long before uprobes
/// of its own could be attached (~20 ms a process), so its parent's shared libssl is then
/// hooked for every process that maps it, the programs leaving at once for one that is not
/// traced, and every child is covered from birth.
pub struct SslProbes {
    probes: Vec<(&'static str, &'static str)>,
    procs: HashMap<u32, Attached>,
    /// libraries hooked for every process that maps them
    host_wide: HashMap<FileId, Vec<(&'static str, UProbeLinkId)>>,
}

fn uprobe<'a>(bpf: &'a mut Ebpf, name: &str) -> Result<&'a mut UProbe> {
    Ok(bpf
        .program_mut(name)
        .ok_or_else(|| anyhow!("program {name} missing from the BPF object"))?
        .try_into()?)
}

impl SslProbes {
    /// Load the programs of `mode` (none for `Uprobes::None`).
    pub fn load(bpf: &mut Ebpf, mode: Uprobes) -> Result<SslProbes> {
        let probes = mode.probes();
        for (name, _) in &probes {
            match uprobe(bpf, name)?.load() {
                Ok(()) | Err(aya::programs::ProgramError::AlreadyLoaded) => {}
                Err(e) => return Err(e).with_context(|| format!("loading {name}")),
            }
        }
        Ok(SslProbes {
            probes,
            procs: HashMap::new(),
            host_wide: HashMap::new(),
        })
    }

    pub fn enabled(&self) -> bool {
        !self.probes.is_empty()
    }

    pub fn is_attached(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// Attach `target` (a libssl, or an executable exporting the symbols) in `scope`. The
    /// SSL_do_handshake pair is required; SSL_read/SSL_write ones a library lacks (older
    /// ones have no _ex) are skipped.
    fn attach_in(
        &self,
        bpf: &mut Ebpf,
        target: &Path,
        scope: UProbeScope,
    ) -> Result<Vec<(&'static str, UProbeLinkId)>> {
        let mut links = Vec::new();
        for (name, symbol) in self.probes.iter().copied() {
            match uprobe(bpf, name)?.attach(symbol, target, scope) {
                Ok(link) => links.push((name, link)),
                Err(e) if SSL_HANDSHAKE.iter().any(|(_, s)| *s == symbol) => {
                    detach_all(bpf, links);
                    return Err(e.into());
                }
                Err(e) => log::debug!("no {symbol} in {}: {e}", target.display()),
            }
        }
        Ok(links)
    }

    /// Attach to `pid` in `target`: for that process alone, unless the file is already
    /// hooked for every process.
    pub fn attach(&mut self, bpf: &mut Ebpf, pid: u32, target: &Path) -> Result<()> {
        let file = file_id(target)?;
        let links = if self.host_wide.contains_key(&file) {
            Vec::new()
        } else {
            let scope = UProbeScope::OneProcess(NonZeroU32::new(pid).context("pid 0")?);
            self.attach_in(bpf, target, scope)?
        };
        self.procs.insert(
            pid,
            Attached {
                file,
                path: target.to_path_buf(),
                links,
            },
        );
        Ok(())
    }

    /// `child`, which traced process `parent` forked, maps its parent's library: covered
    /// if that library is hooked for every process, or once it is made so here (a shared
    /// library only; an executable with OpenSSL inside keeps its per-process uprobes).
    /// Returns whether the child is covered, and whether this call hooked a library for
    /// every process.
    pub fn cover_child(&mut self, bpf: &mut Ebpf, child: u32, parent: u32) -> (bool, bool) {
        let Some(p) = self.procs.get(&parent) else {
            return (false, false);
        };
        let (file, path) = (p.file, p.path.clone());
        let mut widened = false;
        if !self.host_wide.contains_key(&file) {
            if path.ends_with("exe") {
                return (false, false);
            }
            // the programs check the process from the first hit in another one
            if let Err(e) = add_setting(bpf, crate::abi::SET_SSL_ALL_PROCS) {
                log::debug!("{}: no uprobes for every process: {e:#}", path.display());
                return (false, false);
            }
            match self.attach_in(bpf, &path, UProbeScope::AllProcesses) {
                Ok(links) => {
                    self.host_wide.insert(file, links);
                    widened = true;
                }
                Err(e) => {
                    log::debug!("{}: no uprobes for every process: {e:#}", path.display());
                    return (false, false);
                }
            }
            // the per-process ones on that file are now doubles
            for a in self.procs.values_mut().filter(|a| a.file == file) {
                detach_all(bpf, std::mem::take(&mut a.links));
            }
        }
        self.procs.insert(
            child,
            Attached {
                file,
                path,
                links: Vec::new(),
            },
        );
        (true, widened)
    }

    /// Detach from a process that exited or is no longer selected (a library hooked for
    /// every process stays hooked while hstrace runs).
    pub fn detach(&mut self, bpf: &mut Ebpf, pid: u32) {
        if let Some(a) = self.procs.remove(&pid) {
            detach_all(bpf, a.links);
        }
    }
}

/// Set `bit` in the `settings` word the BPF programs read (HS_SET_*).
fn add_setting(bpf: &mut Ebpf, bit: u32) -> Result<()> {
    let mut settings: Array<_, u32> =
        Array::try_from(bpf.map_mut("settings").context("map settings")?)?;
    let word = settings.get(&0, 0)?;
    settings.set(0, word | bit, 0)?;
    Ok(())
}

fn detach_all(bpf: &mut Ebpf, links: Vec<(&'static str, UProbeLinkId)>) {
    for (name, link) in links {
        if let Ok(p) = uprobe(bpf, name) {
            let _ = p.detach(link);
        }
    }
}

/// Every program variant of the table, for the load-everything verifier test.
pub fn all_probes() -> impl Iterator<Item = &'static Probe> {
    GROUPS
        .iter()
        .flat_map(|g| g.alternatives.iter().flat_map(|a| a.iter()))
}
