//! Hook runs the kernel skipped: an event hstrace's programs never saw, counted by the
//! kernel itself and read here once a second (the `hook_run_skipped` loss).
//!
//! - A BPF program is not run while another BPF program is running on the same CPU (an
//!   interrupt in the middle of one, say): its `recursion_misses`, in its fdinfo. Counted
//!   for trampolines (fentry/fexit) and BTF tracepoints since Linux 5.12, for kprobes and
//!   tracepoints since 6.7.
//! - A kprobe can miss on its own: a kretprobe whose return instances are all in use
//!   (threads asleep inside the function hold them), or a kprobe hit inside another. Its
//!   perf link's info says how many (`missed`, 6.7+).
//!
//! Older kernels skip runs all the same without counting them: there this reads 0.

use std::{fs, os::fd::RawFd};

/// The fds of the programs and kprobe links this process holds, found once after attach
/// (neither is closed before exit; an fd that no longer is one reads as 0).
#[derive(Debug, Default)]
pub struct Skipped {
    programs: Vec<RawFd>,
    links: Vec<RawFd>,
}

impl Skipped {
    /// Find this process's BPF program and link fds.
    pub fn find() -> Skipped {
        let mut s = Skipped::default();
        let Ok(fds) = fs::read_dir("/proc/self/fd") else {
            return s;
        };
        for fd in fds.flatten() {
            let Some(n) = fd.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            match fs::read_link(fd.path())
                .ok()
                .as_ref()
                .and_then(|t| t.to_str())
            {
                Some("anon_inode:bpf-prog") => s.programs.push(n),
                Some("anon_inode:bpf_link") => s.links.push(n),
                _ => {}
            }
        }
        s
    }

    /// Runs skipped so far, all programs and kprobes summed.
    pub fn count(&self) -> u64 {
        let programs: u64 = self
            .programs
            .iter()
            .filter_map(|fd| fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok())
            .filter_map(|info| recursion_misses(&info))
            .sum();
        let kprobes: u64 = self.links.iter().filter_map(|fd| kprobe_missed(*fd)).sum();
        programs + kprobes
    }
}

/// A program's `recursion_misses` from its fdinfo (`None` before 5.12, or not a program).
fn recursion_misses(fdinfo: &str) -> Option<u64> {
    fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("recursion_misses:"))
        .and_then(|v| v.trim().parse().ok())
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
        let prog = "pos:\t0\nflags:\t02000002\nprog_type:\t26\nprog_id:\t77\nrun_time_ns:\t0\nrun_cnt:\t0\nrecursion_misses:\t5\nverified_insns:\t10\n";
        assert_eq!(recursion_misses(prog), Some(5));
        assert_eq!(recursion_misses("pos:\t0\nflags:\t02\n"), None);
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
