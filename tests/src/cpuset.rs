//! A CPU kept for one test's server, however busy the machine: every other process that can
//! move is confined to the other CPUs for as long as the test holds it. The tests that
//! assert what a stage found on an idle CPU (its caches cold, the CPU woken) create that
//! idleness this way instead of hoping the shared machine leaves them one, and check from
//! `/proc/stat` that the CPU did idle.
//!
//! cgroup v1 (these machines): two cpusets beside the root's tasks, `hstrace-test-alone`
//! (the kept CPU) and `hstrace-test-rest` (the others), and every process of the root
//! cpuset moved into the rest. cgroup v2: `hstrace-test-alone` made a partition root, which
//! takes its CPU from every other cgroup's effective CPUs. Kernel threads bound to a CPU stay
//! where they are (they run for microseconds). Dropping it puts every process back.

use std::{
    fs, io,
    path::{Path, PathBuf},
    thread,
    time::Duration,
};

const V1: &str = "/sys/fs/cgroup/cpuset";
const V2: &str = "/sys/fs/cgroup";

pub struct CpuToItself {
    cpu: usize,
    alone: PathBuf,
    /// cgroup v1 only: where the others were moved, and the root they return to
    rest: Option<(PathBuf, PathBuf)>,
}

impl CpuToItself {
    /// Keep `cpu` for the processes later `admit`ted. Root only.
    pub fn reserve(cpu: usize) -> io::Result<CpuToItself> {
        if Path::new(V1).join("cpuset.cpus").exists() {
            Self::reserve_v1(Path::new(V1), cpu)
        } else if fs::read_to_string(Path::new(V2).join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "cpuset"))
        {
            Self::reserve_v2(Path::new(V2), cpu)
        } else {
            Err(io::Error::other(
                "no cpuset controller (neither /sys/fs/cgroup/cpuset nor cgroup v2's cpuset)",
            ))
        }
    }

    fn reserve_v1(root: &Path, cpu: usize) -> io::Result<CpuToItself> {
        let others = other_cpus(
            &fs::read_to_string(root.join("cpuset.effective_cpus"))?,
            cpu,
        )?;
        let mems = fs::read_to_string(root.join("cpuset.mems"))?;
        let alone = make(root, "hstrace-test-alone", &cpu.to_string(), &mems)?;
        let rest = make(root, "hstrace-test-rest", &others, &mems)?;
        let kept = CpuToItself {
            cpu,
            alone,
            rest: Some((rest.clone(), root.to_path_buf())),
        };
        // twice: a process forked while the first pass ran stays behind in the root
        for _ in 0..2 {
            move_all(root, &rest);
        }
        Ok(kept)
    }

    fn reserve_v2(root: &Path, cpu: usize) -> io::Result<CpuToItself> {
        let subtree = root.join("cgroup.subtree_control");
        if !fs::read_to_string(&subtree)?.contains("cpuset") {
            fs::write(&subtree, "+cpuset")?;
        }
        let alone = root.join("hstrace-test-alone");
        if !alone.exists() {
            fs::create_dir(&alone)?;
        }
        let kept = CpuToItself {
            cpu,
            alone: alone.clone(),
            rest: None,
        };
        fs::write(alone.join("cpuset.cpus"), cpu.to_string())?;
        fs::write(alone.join("cpuset.cpus.partition"), "root")?;
        let state = fs::read_to_string(alone.join("cpuset.cpus.partition"))?;
        if state.trim() != "root" {
            return Err(io::Error::other(format!(
                "CPU {cpu} could not be made a partition of its own: {}",
                state.trim()
            )));
        }
        Ok(kept)
    }

    /// Run every thread of process `pid` on the kept CPU, alone.
    pub fn admit(&self, pid: u32) -> io::Result<()> {
        fs::write(self.alone.join("cgroup.procs"), pid.to_string()).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("cannot move {pid} to CPU {}: {e}", self.cpu),
            )
        })
    }

    /// The kept CPU's idle time so far, in seconds (`/proc/stat`: idle and iowait).
    pub fn idle_seconds(&self) -> f64 {
        idle_seconds(self.cpu)
    }
}

impl Drop for CpuToItself {
    fn drop(&mut self) {
        match &self.rest {
            Some((rest, root)) => {
                move_all(&self.alone, root);
                for _ in 0..2 {
                    move_all(rest, root);
                }
                remove(rest);
            }
            None => {
                let _ = fs::write(self.alone.join("cpuset.cpus.partition"), "member");
                move_all(&self.alone, Path::new(V2));
            }
        }
        remove(&self.alone);
    }
}

/// A v1 cpuset named `name` under `root` with these CPUs and memory nodes.
fn make(root: &Path, name: &str, cpus: &str, mems: &str) -> io::Result<PathBuf> {
    let dir = root.join(name);
    if !dir.exists() {
        fs::create_dir(&dir)?;
    }
    fs::write(dir.join("cpuset.cpus"), cpus)?;
    fs::write(dir.join("cpuset.mems"), mems.trim())?;
    Ok(dir)
}

/// Move every process of cgroup `from` into `to`; the ones that cannot move (kernel threads
/// bound to a CPU) or have ended meanwhile are left.
fn move_all(from: &Path, to: &Path) {
    let Ok(procs) = fs::read_to_string(from.join("cgroup.procs")) else {
        return;
    };
    for pid in procs.lines() {
        let _ = fs::write(to.join("cgroup.procs"), pid);
    }
}

/// Remove a cpuset once its last task has left (an exiting one may take a moment).
fn remove(dir: &Path) {
    for _ in 0..50 {
        if fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
    eprintln!("cannot remove {}: tasks remain", dir.display());
}

/// A CPU list (`0-3,6`) without `cpu`, as a CPU list.
fn other_cpus(list: &str, cpu: usize) -> io::Result<String> {
    let mut others = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let parse = |s: &str| {
            s.parse::<usize>()
                .map_err(|e| io::Error::other(format!("CPU list {list:?}: {e}")))
        };
        others.extend((parse(lo)?..=parse(hi)?).filter(|&c| c != cpu));
    }
    if others.is_empty() {
        return Err(io::Error::other(format!(
            "CPU {cpu} is the only one ({list}): nothing is left for the others"
        )));
    }
    Ok(others
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(","))
}

/// CPU `cpu`'s idle and iowait time from `/proc/stat`, in seconds.
pub fn idle_seconds(cpu: usize) -> f64 {
    let stat = fs::read_to_string("/proc/stat").expect("/proc/stat");
    let name = format!("cpu{cpu}");
    let line = stat
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .unwrap_or_else(|| panic!("no {name} in /proc/stat"));
    // user nice system idle iowait …, in USER_HZ ticks
    let ticks: u64 = line
        .split_whitespace()
        .skip(4)
        .take(2)
        .map(|v| v.parse::<u64>().expect("a tick count"))
        .sum();
    // SAFETY: sysconf has no preconditions
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks as f64 / hz
}

#[cfg(test)]
mod tests {
    use super::other_cpus;

    #[test]
    fn the_other_cpus_of_a_list() {
        assert_eq!(other_cpus("0-1\n", 0).unwrap(), "1");
        assert_eq!(other_cpus("0-3,6", 2).unwrap(), "0,1,3,6");
        assert!(other_cpus("0", 0).is_err());
    }
}
