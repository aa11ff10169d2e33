//! Which processes are traced: `--pid` (with its descendants, so a master's workers are
//! included), `--comm`, `--port` (owners of the listening socket), or every process that
//! owns a listening TCP socket. Everything here reads /proc (and the listening sockets from
//! socket diagnostics, `sockdiag`); nothing is cached across scans.

use std::{
    collections::{BTreeSet, HashMap},
    fs,
    io::{BufRead, BufReader},
    path::PathBuf,
};

use anyhow::{bail, Result};

use crate::{clock, sockdiag};

#[derive(Debug, Clone, Default)]
pub struct Selector {
    pub pids: Vec<u32>,
    pub comm: Option<String>,
    pub port: Option<u16>,
}

impl Selector {
    /// No selector: every listening TCP server on the host.
    pub fn is_all(&self) -> bool {
        self.pids.is_empty() && self.comm.is_none() && self.port.is_none()
    }
}

fn all_pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

pub fn comm(pid: u32) -> Option<String> {
    Some(
        fs::read_to_string(format!("/proc/{pid}/comm"))
            .ok()?
            .trim_end()
            .to_string(),
    )
}

/// A process's parent, if it is alive: exists and is not a zombie (an exited process
/// its parent has not reaped yet accepts nothing). One read of /proc/PID/stat.
fn alive_with_parent(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the comm field may hold spaces and parentheses: fields resume after the last ')'
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    fields.next()?.parse().ok()
}

/// The CPU time a process has used so far, all its threads (those that have ended
/// included), ns: the process's CPU-time clock (`clock_getcpuclockid`), the scheduler's own
/// count to the ns. (/proc/PID/stat's user and system time come in clock ticks, 10 ms a
/// reading: too coarse for a process that serves a connection or two between two
/// readings, as each of a prefork server's children does.) None when the process is gone.
pub fn cpu_ns(pid: u32) -> Option<u64> {
    // a clock id holds a pid of up to the kernel's limit (2^22); past it the id would wrap
    // to another clock (pid 0's: this process's)
    if pid == 0 || pid > PID_MAX_LIMIT {
        return None;
    }
    let mut clock: libc::clockid_t = 0;
    // SAFETY: clock is a valid clockid_t for the call to fill
    if unsafe { libc::clock_getcpuclockid(pid as libc::pid_t, &mut clock) } != 0 {
        return None;
    }
    clock::read_ns(clock)
}

/// The kernel's largest pid (PID_MAX_LIMIT on 64-bit).
const PID_MAX_LIMIT: u32 = 1 << 22;

/// When a process started, ns since boot (/proc/PID/stat's start time, in clock ticks).
pub fn started_ns(pid: u32) -> Option<u64> {
    let [start] = stat_fields(pid, [22])?;
    Some(start * clock::tick_ns())
}

/// Fields `at` (numbered from 1, as proc(5) numbers them; numbers, from field 3 on) of
/// /proc/PID/stat, in one read.
fn stat_fields<const K: usize>(pid: u32, at: [usize; K]) -> Option<[u64; K]> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the comm field may hold spaces and parentheses: fields resume after the last ')',
    // with field 3
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let mut out = [0; K];
    for (o, n) in out.iter_mut().zip(at) {
        *o = fields.get(n.checked_sub(3)?)?.parse().ok()?;
    }
    Some(out)
}

pub fn exists(pid: u32) -> bool {
    PathBuf::from(format!("/proc/{pid}")).exists()
}

/// Exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    alive_with_parent(pid).is_some()
}

/// Inodes of listening TCP sockets (IPv4 and IPv6) in hstrace's own network namespace,
/// with their local port: from socket diagnostics (listeners only), else /proc/net/tcp.
fn listening_inodes() -> HashMap<u64, u16> {
    match sockdiag::listening_inodes() {
        Ok(inodes) => inodes,
        Err(e) => {
            log::debug!("sock_diag: {e}; reading /proc/net/tcp");
            listening_inodes_in("/proc/net")
        }
    }
}

/// The network namespace of process `pid` ("self": hstrace's), as its /proc link names it.
fn netns(pid: &str) -> Option<PathBuf> {
    fs::read_link(format!("/proc/{pid}/ns/net")).ok()
}

/// The same in process `pid`'s network namespace `ns`: ours through socket diagnostics,
/// any other (or an unknown one) from its /proc/PID/net/tcp.
fn listening_inodes_of(pid: u32, ns: Option<&PathBuf>) -> HashMap<u64, u16> {
    if ns.is_some_and(|n| Some(n) == netns("self").as_ref()) {
        listening_inodes()
    } else {
        listening_inodes_in(&format!("/proc/{pid}/net"))
    }
}

/// The same from the socket table whose /proc/…/net is `net` (every socket on the host
/// is in it: read only where socket diagnostics cannot answer).
fn listening_inodes_in(net: &str) -> HashMap<u64, u16> {
    let mut out = HashMap::new();
    for file in [format!("{net}/tcp"), format!("{net}/tcp6")] {
        // line by line: the table lists every socket on the host (a busy one: tens of MB)
        let Ok(file) = fs::File::open(file) else {
            continue;
        };
        for line in BufReader::new(file).lines().skip(1) {
            let Ok(line) = line else { break };
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let port = f[1]
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if let (Some(port), Ok(inode)) = (port, f[9].parse()) {
                out.insert(inode, port);
            }
        }
    }
    out
}

/// The ports of `inodes` that `pid` holds a socket of.
fn ports_held(pid: u32, inodes: &HashMap<u64, u16>) -> BTreeSet<u16> {
    let mut out = BTreeSet::new();
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for fd in dir.flatten() {
        let Ok(link) = fs::read_link(fd.path()) else {
            continue;
        };
        let link = link.to_string_lossy();
        let inode = link
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'));
        if let Some(port) = inode
            .and_then(|i| i.parse().ok())
            .and_then(|i: u64| inodes.get(&i))
        {
            out.insert(*port);
        }
    }
    out
}

/// Processes holding a listening TCP socket, with the ports they listen on.
pub fn listeners() -> HashMap<u32, BTreeSet<u16>> {
    let inodes = listening_inodes();
    all_pids()
        .into_iter()
        .map(|pid| (pid, ports_held(pid, &inodes)))
        .filter(|(_, ports)| !ports.is_empty())
        .collect()
}

/// What the selector will likely miss, one line each: a `--pid` whose process and
/// children listen on no TCP port (hstrace sees the connections a server accepts; a
/// server still starting is traced once it listens, so this warns, not fails).
pub fn warnings(sel: &Selector) -> Vec<String> {
    let mut out = Vec::new();
    for &pid in &sel.pids {
        let tree = resolve(&Selector {
            pids: vec![pid],
            ..Selector::default()
        });
        // each process's own network namespace (a server in a container)
        let listens = tree.iter().any(|&p| {
            let inodes = listening_inodes_of(p, netns(&p.to_string()).as_ref());
            !ports_held(p, &inodes).is_empty()
        });
        if !listens {
            out.push(format!(
                "pid {pid} ({}) and its children listen on no TCP port: nothing is traced until they do. A server's pid is its master's (`pgrep -o nginx`), or select by --port",
                comm(pid).unwrap_or_default()
            ));
        }
    }
    out
}

/// The processes the selector names right now. `--pid` includes descendants.
pub fn resolve(sel: &Selector) -> BTreeSet<u32> {
    let mut set = BTreeSet::new();
    if !sel.pids.is_empty() {
        // every live process with its parent: zombies are neither selected nor descended
        let parents: Vec<(u32, u32)> = all_pids()
            .into_iter()
            .filter_map(|p| Some((p, alive_with_parent(p)?)))
            .collect();
        let mut frontier: Vec<u32> = sel
            .pids
            .iter()
            .copied()
            .filter(|p| parents.iter().any(|(c, _)| c == p))
            .collect();
        while let Some(p) = frontier.pop() {
            if set.insert(p) {
                frontier.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
            }
        }
    }
    if let Some(name) = &sel.comm {
        set.extend(
            all_pids()
                .into_iter()
                .filter(|p| comm(*p).as_deref() == Some(name.as_str())),
        );
    }
    if let Some(port) = sel.port {
        set.extend(
            listeners()
                .into_iter()
                .filter(|(_, ports)| ports.contains(&port))
                .map(|(p, _)| p),
        );
    }
    if sel.is_all() {
        set.extend(listeners().into_keys());
    }
    set.remove(&std::process::id());
    set
}

/// The TCP ports processes `pids` listen on, each in its own network namespace (whose
/// socket table is read once).
pub fn listening_ports(pids: &BTreeSet<u32>) -> BTreeSet<u16> {
    let mut tables: HashMap<PathBuf, HashMap<u64, u16>> = HashMap::new();
    let mut out = BTreeSet::new();
    for pid in pids {
        let Some(ns) = netns(&pid.to_string()) else {
            continue;
        };
        let inodes = tables
            .entry(ns.clone())
            .or_insert_with(|| listening_inodes_of(*pid, Some(&ns)));
        out.extend(ports_held(*pid, inodes));
    }
    out
}

/// Fail early, with what to do, when a selector names nothing that exists.
pub fn check(sel: &Selector) -> Result<()> {
    for pid in &sel.pids {
        if !exists(*pid) {
            bail!(
                "no process with pid {pid}: is the server running? (find it with `pgrep -a nginx`)"
            );
        }
    }
    if let Some(name) = &sel.comm {
        if !all_pids()
            .into_iter()
            .any(|p| comm(p).as_deref() == Some(name.as_str()))
        {
            bail!("no running process is named '{name}': start the server, or check the name with `ps -eo comm | sort -u`");
        }
    }
    if let Some(port) = sel.port {
        if !listening_inodes().values().any(|p| *p == port) {
            bail!("nothing is listening on TCP port {port}: start the server, or check the port with `ss -ltnp`");
        }
    }
    Ok(())
}

/// Where `pid`'s SSL_do_handshake lives: its mapped libssl, else its own executable
/// (servers built with OpenSSL linked in). Paths go through /proc/PID/root so a server
/// in another mount namespace works too.
pub fn ssl_candidates(pid: u32) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) {
        for line in maps.lines() {
            let Some(path) = line.split_whitespace().nth(5) else {
                continue;
            };
            let file = path.rsplit('/').next().unwrap_or(path);
            if file.starts_with("libssl.so") {
                let p = PathBuf::from(format!("/proc/{pid}/root{path}"));
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }
    out.push(PathBuf::from(format!("/proc/{pid}/exe")));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::boottime_ns;

    /// This process: the 30 ms of CPU a thread ran before it ended stay in the process's CPU
    /// time, read to the ns; the process started before now on the boot clock (a tick's
    /// rounding down at most); a process that is not there has neither.
    #[test]
    fn a_process_cpu_time_and_start() {
        let me = std::process::id();
        let before = cpu_ns(me).unwrap();
        std::thread::spawn(|| while clock::thread_cpu_ns().unwrap() < 30_000_000 {})
            .join()
            .unwrap();
        let after = cpu_ns(me).unwrap();
        assert!(
            after - before >= 30_000_000,
            "{before} → {after}: an ended thread's CPU is the process's"
        );
        assert_ne!(
            after % clock::tick_ns(),
            0,
            "{after}: to the ns, not in ticks"
        );
        let started = started_ns(me).unwrap();
        assert!(started > 0 && started <= boottime_ns());
        assert_eq!(
            stat_fields(me, [2]),
            None,
            "field 2, the comm, is not a number"
        );
        assert_eq!(cpu_ns(u32::MAX >> 1), None);
        assert_eq!(cpu_ns(PID_MAX_LIMIT - 1), None, "no such process");
        assert_eq!(started_ns(u32::MAX >> 1), None);
    }
}
