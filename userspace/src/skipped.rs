//! Hook runs the kernel skipped: events hstrace's programs never saw, counted by the
//! kernel itself and read once a second (`hook_runs_skipped`).
//!
//! - A program's `recursion_misses`, in its fdinfo: runs skipped because it was already
//!   running on that CPU (fentry/fexit since Linux 5.12, BTF tracepoints since about 6.2:
//!   an interrupt in the middle of it), and for kprobes and tracepoints since 6.7, because
//!   any such program was (or a `bpf()` map update was in progress there).
//! - A kprobe's own misses, in its perf link's info (`missed`, 6.7+): a kretprobe whose
//!   return instances are all in use (threads asleep inside the function hold them), or a
//!   kprobe hit inside another.
//!
//! Both count every process's calls, not only the traced connections': the sum is an upper
//! bound of the events traced connections lost. Older kernels skip runs all the same
//! without counting them: there this reads 0.

use std::{cell::Cell, collections::BTreeSet, fs, os::fd::RawFd};

use crate::self_cost::fdinfo_field;

/// The programs and kprobe links this process holds, found once after attach (neither is
/// closed before exit), each with the highest count read from it: a read that fails, or
/// a kernel count that lost an update made on two CPUs at once, never takes the sum back.
#[derive(Debug, Default)]
pub struct Skipped {
    programs: Vec<(RawFd, Cell<u64>)>,
    links: Vec<(RawFd, Cell<u64>)>,
}

impl Skipped {
    /// Find this process's BPF programs (each once, by its id) and links.
    pub fn find() -> Skipped {
        let mut s = Skipped::default();
        let Ok(fds) = fs::read_dir("/proc/self/fd") else {
            return s;
        };
        let mut ids = BTreeSet::new();
        for fd in fds.flatten() {
            let Some(n) = fd.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            match fs::read_link(fd.path())
                .ok()
                .as_ref()
                .and_then(|t| t.to_str())
            {
                Some("anon_inode:bpf-prog") => {
                    let id = fdinfo(n).and_then(|i| fdinfo_field(&i, "prog_id:"));
                    if id.is_some_and(|id| ids.insert(id)) {
                        s.programs.push((n, Cell::new(0)));
                    }
                }
                Some("anon_inode:bpf_link") => s.links.push((n, Cell::new(0))),
                _ => {}
            }
        }
        s
    }

    /// Runs skipped so far, all programs and kprobes summed.
    pub fn count(&self) -> u64 {
        let programs = self.programs.iter().map(|(fd, last)| {
            highest(
                last,
                fdinfo(*fd).and_then(|i| fdinfo_field(&i, "recursion_misses:")),
            )
        });
        let kprobes = self
            .links
            .iter()
            .map(|(fd, last)| highest(last, kprobe_missed(*fd)));
        programs.chain(kprobes).sum()
    }
}

/// The highest of `last` and `now` (kept in `last`).
fn highest(last: &Cell<u64>, now: Option<u64>) -> u64 {
    last.set(last.get().max(now.unwrap_or(0)));
    last.get()
}

fn fdinfo(fd: RawFd) -> Option<String> {
    fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()
}

/// `bpf_link_info` up to its perf_event kprobe's `missed` (UAPI since 6.7; the kernel
/// fills what it knows and leaves the rest 0).
#[repr(C)]
#[derive(Default)]
struct PerfLinkInfo {
    link_type: u32,
    id: u32,
    prog_id: u32,
    _pad: u32,
    perf_event_type: u32,
    _pad2: u32,
    func_name: u64,
    name_len: u32,
    offset: u32,
    addr: u64,
    missed: u64,
    cookie: u64,
}

const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_LINK_TYPE_PERF_EVENT: u32 = 7;
const BPF_PERF_EVENT_KPROBE: u32 = 3;
const BPF_PERF_EVENT_KRETPROBE: u32 = 4;

/// The misses of the kprobe or kretprobe behind link `fd` (`None`: another kind of link,
/// or a kernel that does not say).
fn kprobe_missed(fd: RawFd) -> Option<u64> {
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let mut info = PerfLinkInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: fd as u32,
        info_len: size_of::<PerfLinkInfo>() as u32,
        info: &mut info as *mut PerfLinkInfo as u64,
    };
    // SAFETY: the kernel writes at most `info_len` bytes into `info`, which outlives the
    // call; `attr` is the size the command reads
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &mut attr as *mut InfoAttr,
            size_of::<InfoAttr>() as u32,
        )
    };
    let kprobe = [BPF_PERF_EVENT_KPROBE, BPF_PERF_EVENT_KRETPROBE].contains(&info.perf_event_type);
    (r == 0 && info.link_type == BPF_LINK_TYPE_PERF_EVENT && kprobe).then_some(info.missed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misses_are_read_from_a_programs_fdinfo() {
        // (`recursion_misses:` is there since 5.12)
        let prog = "pos:\t0\nflags:\t02000002\nprog_type:\t26\nprog_id:\t77\nrun_time_ns:\t0\nrun_cnt:\t0\nrecursion_misses:\t5\nverified_insns:\t10\n";
        assert_eq!(fdinfo_field(prog, "recursion_misses:"), Some(5));
        assert_eq!(fdinfo_field(prog, "prog_id:"), Some(77));
        assert_eq!(
            fdinfo_field("pos:\t0\nflags:\t02\n", "recursion_misses:"),
            None
        );
    }

    #[test]
    fn a_count_never_goes_back() {
        let last = Cell::new(0);
        assert_eq!(highest(&last, Some(7)), 7);
        assert_eq!(highest(&last, None), 7);
        assert_eq!(highest(&last, Some(6)), 7);
        assert_eq!(highest(&last, Some(9)), 9);
    }

    #[test]
    fn the_link_info_layout_is_the_kernels() {
        // (bpf_link_info: the union starts 8-aligned; perf_event.kprobe.missed at 48)
        assert_eq!(std::mem::offset_of!(PerfLinkInfo, perf_event_type), 16);
        assert_eq!(std::mem::offset_of!(PerfLinkInfo, func_name), 24);
        assert_eq!(std::mem::offset_of!(PerfLinkInfo, missed), 48);
    }

    #[test]
    fn a_fd_that_is_no_link_reads_as_nothing() {
        let f = fs::File::open("/proc/self/stat").unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(kprobe_missed(f.as_raw_fd()), None);
    }
}
