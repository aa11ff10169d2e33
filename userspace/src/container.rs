//! Which container a traced server runs in (`--container-labels`): the container's id from
//! the process's cgroup (/proc/PID/cgroup), and where the host runs Kubernetes, the pod's
//! name and namespace from the kubelet's log directory (`/var/log/pods/NS_NAME_UID/`,
//! `--pods-dir`). Nothing else is asked: no container runtime's socket, no Kubernetes API.
//! docs/containers.md says what is read from where, and the bounds.

use std::{
    collections::{HashMap, VecDeque},
    fs,
    io::Read,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

/// The container a process runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// the runtime's id: 64 lowercase hex digits (as `docker ps --no-trunc`, `podman
    /// inspect`, `crictl ps` print it)
    pub id: String,
    /// its Kubernetes pod, when the host runs a kubelet and the pod's log directory was found
    pub pod: Option<Pod>,
}

/// A Kubernetes pod, as the kubelet's log directory names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub name: String,
    pub namespace: String,
    /// metadata.uid (with `-`, as the API writes it)
    pub uid: String,
}

/// What a process's cgroup path says: its container's id and, under a kubelet, its pod's uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupIds {
    pub id: String,
    pub pod_uid: Option<String>,
}

/// The kubelet's log directory, where each pod has `NAMESPACE_NAME_UID/`.
pub const PODS_DIR: &str = "/var/log/pods";

/// Processes whose container is remembered at once: as many as the kernel traces
/// (`abi::MAX_TGIDS`). Past it, the one remembered longest is forgotten (and read again
/// from /proc if a connection of it comes).
pub const MAX_PIDS: usize = 4096;

/// Bytes of /proc/PID/cgroup read (a real one is a few hundred; the rest is not looked at).
const CGROUP_BYTES_MAX: u64 = 64 << 10;

/// Entries of the pods directory looked at per search (a node runs at most a few hundred
/// pods; the kubelet removes the directories of deleted ones).
const POD_DIRS_MAX: usize = 16_384;

/// Looks for a pod's directory that was not there yet (a pod whose containers start before
/// the kubelet made it, a tracer that started first): this many more, the n-th 2^(n-1) s
/// after the first (1, 2, 4, … 32 s: about a minute), each when a connection of the
/// process comes. Then the container is reported without its pod.
const POD_RETRIES: u32 = 6;

/// The container id and pod uid in the text of /proc/PID/cgroup: the unified hierarchy's
/// line (`0::/path`) first, then the v1 hierarchies' (`N:controllers:/path`) in order; the
/// first path that names a container. None for a process outside any container, or text
/// that is not a cgroup file.
pub fn parse_cgroup(text: &str) -> Option<CgroupIds> {
    let mut v2 = None;
    let mut v1 = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(hier), Some(controllers), Some(path)) =
            (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if hier == "0" && controllers.is_empty() {
            v2 = Some(path);
        } else {
            v1.push(path);
        }
    }
    v2.into_iter().chain(v1).find_map(parse_path)
}

/// The container id and pod uid in one cgroup path: the innermost component that names a
/// container (a container inside a container is the inner one), and the pod of a path
/// under the kubelet's `kubepods` cgroup.
pub fn parse_path(path: &str) -> Option<CgroupIds> {
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let at = components.iter().rposition(|c| container_id(c).is_some())?;
    let id = container_id(components[at])?.to_string();
    let pod_uid = components[..at]
        .iter()
        .position(|c| c.contains("kubepods"))
        .and_then(|k| components[k..at].iter().rev().find_map(|c| pod_uid(c)));
    Some(CgroupIds { id, pod_uid })
}

/// The runtimes' names for a container's cgroup: `<prefix>-<id>.scope` under systemd,
/// `<prefix>-<id>` or the bare id under cgroupfs. (Not `libpod-conmon-<id>` nor
/// `crio-conmon-<id>`: the runtime's monitor, outside the container.)
const RUNTIME_PREFIXES: &[&str] = &["docker", "libpod", "crio", "cri-containerd", "containerd"];

/// The container id one path component names: `docker-<id>.scope`, `libpod-<id>`,
/// `crio-<id>.scope`, `cri-containerd-<id>.scope`, or a bare `<id>` (Docker's and
/// containerd's cgroupfs layout), `<id>` being 64 hex digits.
fn container_id(component: &str) -> Option<&str> {
    let c = component.strip_suffix(".scope").unwrap_or(component);
    if is_hex64(c) {
        return Some(c);
    }
    let (prefix, id) = c.rsplit_once('-')?;
    (RUNTIME_PREFIXES.contains(&prefix) && is_hex64(id)).then_some(id)
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The pod uid one component under `kubepods` names: `kubepods-besteffort-pod<uid>.slice`
/// (the systemd cgroup driver, `_` in place of the uid's `-`) or `pod<uid>` (cgroupfs),
/// written back with `-`. A static pod's uid is a 32-digit hash, without dashes.
fn pod_uid(component: &str) -> Option<String> {
    let c = component.strip_suffix(".slice").unwrap_or(component);
    let uid = match c.strip_prefix("pod") {
        Some(uid) => uid,
        None if c.contains("kubepods") => c.rsplit_once("-pod")?.1,
        None => return None,
    };
    let ok = (32..=36).contains(&uid.len())
        && uid
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b'-' || b == b'_');
    ok.then(|| uid.replace('_', "-"))
}

/// A pod from the name of its log directory, `NAMESPACE_NAME_UID` (namespaces and pod
/// names are DNS names: they hold no `_`). None for any other name.
pub fn parse_pod_dir(name: &str) -> Option<Pod> {
    let mut parts = name.splitn(3, '_');
    let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let dns = |s: &str| {
        !s.is_empty()
            && s.len() <= 253
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    };
    let uid_ok = !uid.is_empty()
        && uid.len() <= 64
        && uid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    (dns(namespace) && dns(pod) && uid_ok).then(|| Pod {
        name: pod.to_string(),
        namespace: namespace.to_string(),
        uid: uid.to_string(),
    })
}

/// The pod whose log directory in `dir` ends in `_<uid>`; None when there is none (yet),
/// or the directory cannot be read.
pub fn find_pod(dir: &Path, uid: &str) -> Option<Pod> {
    let suffix = format!("_{uid}");
    fs::read_dir(dir)
        .ok()?
        .take(POD_DIRS_MAX)
        .filter_map(Result::ok)
        .find_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            if !name.ends_with(&suffix) {
                return None;
            }
            parse_pod_dir(name).filter(|p| p.uid == uid)
        })
}

/// /proc/PID/cgroup, at most CGROUP_BYTES_MAX of it; None when the process is gone.
fn read_cgroup(pid: u32) -> Option<String> {
    let mut text = String::new();
    fs::File::open(format!("/proc/{pid}/cgroup"))
        .ok()?
        .take(CGROUP_BYTES_MAX)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// One process's container, as far as it is known.
struct Entry {
    container: Option<Arc<Container>>,
    /// its pod's directory is still looked for
    pending: Option<Pending>,
}

struct Pending {
    uid: String,
    /// looks made since the first
    tries: u32,
    next: Instant,
}

/// Each traced process's container: read from /proc once per process, on its first
/// connection; remembered until the process is no longer traced (`retain`, `forget`), at
/// most MAX_PIDS at once.
pub struct Containers {
    pods_dir: PathBuf,
    entries: HashMap<u32, Entry>,
    /// pids in the order they were first looked up (some since forgotten), for forgetting
    /// the oldest past MAX_PIDS
    order: VecDeque<u32>,
    /// processes forgotten to stay within MAX_PIDS
    pub evicted: u64,
    /// a pod's directory was not found: said once
    warned: bool,
}

impl Containers {
    pub fn new(pods_dir: PathBuf) -> Containers {
        Containers {
            pods_dir,
            entries: HashMap::new(),
            order: VecDeque::new(),
            evicted: 0,
            warned: false,
        }
    }

    /// The container of process `pid`; None outside any container (or once it is gone).
    pub fn lookup(&mut self, pid: u32) -> Option<Arc<Container>> {
        self.lookup_with(pid, Instant::now(), read_cgroup)
    }

    fn lookup_with(
        &mut self,
        pid: u32,
        now: Instant,
        read: impl FnOnce(u32) -> Option<String>,
    ) -> Option<Arc<Container>> {
        if let Some(e) = self.entries.get_mut(&pid) {
            if e.pending.as_ref().is_some_and(|p| now >= p.next) {
                self.look_again(pid, now);
            }
            return self.entries.get(&pid).and_then(|e| e.container.clone());
        }
        // a process already gone is not remembered: nothing would forget it
        let text = read(pid)?;
        let entry = match parse_cgroup(&text) {
            None => Entry {
                container: None,
                pending: None,
            },
            Some(ids) => {
                let pod = ids
                    .pod_uid
                    .as_deref()
                    .and_then(|uid| find_pod(&self.pods_dir, uid));
                let pending = match (&pod, ids.pod_uid) {
                    (None, Some(uid)) => {
                        // no directory at all: said now, not after the retries
                        if !self.pods_dir.is_dir() {
                            self.unnamed(pid, &uid);
                        }
                        Some(Pending {
                            uid,
                            tries: 0,
                            next: now + Duration::from_secs(1),
                        })
                    }
                    _ => None,
                };
                log::debug!(
                    "pid {pid}: container {}{}",
                    ids.id,
                    pod.as_ref()
                        .map(|p| format!(", pod {}/{}", p.namespace, p.name))
                        .unwrap_or_default()
                );
                Entry {
                    container: Some(Arc::new(Container { id: ids.id, pod })),
                    pending,
                }
            }
        };
        let found = entry.container.clone();
        self.insert(pid, entry);
        found
    }

    /// Look for the pod's directory of `pid`'s container again.
    fn look_again(&mut self, pid: u32, now: Instant) {
        let Some(e) = self.entries.get_mut(&pid) else {
            return;
        };
        let Some(p) = e.pending.as_mut() else {
            return;
        };
        if let Some(pod) = find_pod(&self.pods_dir, &p.uid) {
            if let Some(c) = &e.container {
                e.container = Some(Arc::new(Container {
                    id: c.id.clone(),
                    pod: Some(pod),
                }));
            }
            e.pending = None;
            return;
        }
        p.tries += 1;
        if p.tries < POD_RETRIES {
            p.next = now + Duration::from_secs(1 << p.tries);
            return;
        }
        let uid = std::mem::take(&mut p.uid);
        e.pending = None;
        self.unnamed(pid, &uid);
    }

    /// Say (once) that a pod could not be named, and what to do.
    fn unnamed(&mut self, pid: u32, uid: &str) {
        if self.warned {
            return;
        }
        self.warned = true;
        let dir = self.pods_dir.display();
        let found = if self.pods_dir.is_dir() {
            format!("{dir}/ has no directory *_{uid}")
        } else {
            format!("there is no {dir}/")
        };
        log::warn!(
            "pid {pid} runs in Kubernetes pod {uid}, but {found} (the kubelet's pod log directory, which names the pod): its records carry the container id without pod name and namespace. Mount the node's /var/log/pods into hstrace's container (deploy/kubernetes/daemonset.yaml does), or say where the node's is with --pods-dir"
        );
    }

    fn insert(&mut self, pid: u32, entry: Entry) {
        while self.entries.len() >= MAX_PIDS {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if self.entries.remove(&old).is_some() {
                self.evicted += 1;
            }
        }
        // pids forgotten are still queued in `order`: trim them now and then
        if self.order.len() >= 2 * MAX_PIDS {
            let live = &self.entries;
            self.order.retain(|p| live.contains_key(p));
        }
        self.entries.insert(pid, entry);
        self.order.push_back(pid);
    }

    /// Forget every process `keep` does not hold (those no longer traced).
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.entries.retain(|pid, _| keep(*pid));
    }

    /// Forget process `pid` (it exited).
    pub fn forget(&mut self, pid: u32) {
        self.entries.remove(&pid);
    }

    /// Processes remembered now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UID: &str = "2f8e7a1c-5b3d-4e6f-9a0b-1c2d3e4f5a6b";
    const UID_: &str = "2f8e7a1c_5b3d_4e6f_9a0b_1c2d3e4f5a6b";

    fn ids(pod_uid: Option<&str>) -> Option<CgroupIds> {
        Some(CgroupIds {
            id: ID.to_string(),
            pod_uid: pod_uid.map(str::to_string),
        })
    }

    #[test]
    fn docker_podman_crio_and_containerd_name_their_containers() {
        for text in [
            // Docker, systemd driver (unified hierarchy only)
            format!("0::/system.slice/docker-{ID}.scope\n"),
            // Docker, cgroupfs driver, hybrid hierarchies (the unified line says nothing)
            format!("12:memory:/docker/{ID}\n1:name=systemd:/docker/{ID}\n0::/\n"),
            // rootful podman, systemd and cgroupfs managers (the latter on these test hosts)
            format!("0::/machine.slice/libpod-{ID}.scope/container\n"),
            format!("4:memory:/libpod_parent/libpod-{ID}\n0::/libpod_parent/libpod-{ID}\n"),
            // rootless podman
            format!(
                "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope\n"
            ),
            // CRI-O and containerd outside Kubernetes
            format!("0::/system.slice/crio-{ID}.scope\n"),
            format!("0::/system.slice/cri-containerd-{ID}.scope\n"),
        ] {
            assert_eq!(parse_cgroup(&text), ids(None), "{text}");
        }
    }

    #[test]
    fn kubepods_under_both_cgroup_drivers_name_the_pod() {
        for text in [
            // systemd driver: the uid with `_`
            format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope\n"),
            format!("0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-{ID}.scope\n"),
            // cgroupfs driver: the uid with `-`, a bare id (containerd) or crio-<id>
            format!("0::/kubepods/burstable/pod{UID}/{ID}\n"),
            format!("11:cpu,cpuacct:/kubepods/pod{UID}/crio-{ID}\n0::/\n"),
            // kind: a node in a Docker container, seen from the host
            format!("0::/system.slice/docker-{}.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope\n", "f".repeat(64)),
            // a tracer in its own cgroup namespace sees the path from its own cgroup
            format!("0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope\n"),
        ] {
            assert_eq!(parse_cgroup(&text), ids(Some(UID)), "{text}");
        }
        // a static pod's uid is a hash without dashes
        let hash = "e3b0c44298fc1c149afbf4c8996fb924";
        let text = format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{hash}.slice/cri-containerd-{ID}.scope");
        assert_eq!(parse_cgroup(&text), ids(Some(hash)));
        // a pod's cgroup with no container (the kubelet's own view of it): nothing
        assert_eq!(
            parse_cgroup(&format!("0::/kubepods.slice/kubepods-pod{UID_}.slice\n")),
            None
        );
    }

    #[test]
    fn host_processes_monitors_and_garbage_name_nothing() {
        for text in [
            "0::/system.slice/nginx.service\n".to_string(),
            "0::/init.scope\n".to_string(),
            "0::/user.slice/user-0.slice/session-3.scope\n".to_string(),
            "0::/\n".to_string(),
            // these test hosts: a v1 memory cgroup named by a 32-digit hash
            "4:memory:/process_api/5215d4597de9ae5492e62d5c471548fe\n0::/\n".to_string(),
            // the runtime's monitor, beside the container
            format!("0::/machine.slice/libpod-conmon-{ID}.scope\n"),
            format!("0::/system.slice/crio-conmon-{ID}.scope\n"),
            // an id of the wrong length or case, an unknown prefix
            format!("0::/docker/{}\n", &ID[..63]),
            format!("0::/docker/{}\n", ID.to_uppercase()),
            format!("0::/system.slice/lxc-{ID}.scope\n"),
            String::new(),
            "not a cgroup file".to_string(),
            "::::\n\0\u{fffd}\n0:\n".to_string(),
            "x".repeat(100_000),
        ] {
            assert_eq!(parse_cgroup(&text), None, "{text:.80}");
        }
        // the innermost container of nested ones
        let outer = "a".repeat(64);
        assert_eq!(
            parse_cgroup(&format!("0::/docker/{outer}/docker/{ID}\n")),
            ids(None)
        );
    }

    #[test]
    fn pod_directories_name_namespace_pod_and_uid() {
        assert_eq!(
            parse_pod_dir(&format!("kube-system_coredns-5d78c9869d-x2v4q_{UID}")),
            Some(Pod {
                name: "coredns-5d78c9869d-x2v4q".into(),
                namespace: "kube-system".into(),
                uid: UID.into(),
            })
        );
        for bad in [
            "",
            "default",
            "default_web",
            &format!("_web_{UID}"),
            &format!("default__{UID}"),
            "default_web_",
            &format!("Default_web_{UID}"),
            &format!("default_web\n_{UID}"),
            &format!("default_web_{UID}/.."),
        ] {
            assert_eq!(parse_pod_dir(bad), None, "{bad:?}");
        }
    }

    /// A fresh directory under the system's temporary one.
    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("hstrace-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_pod_found_later_is_looked_for_a_bounded_number_of_times() {
        let dir = temp_dir("pods-later");
        let mut k = Containers::new(dir.clone());
        let cgroup = format!("0::/kubepods/besteffort/pod{UID}/{ID}\n");
        let t0 = Instant::now();
        let mut reads = 0;
        let mut look = |k: &mut Containers, at: u64| {
            k.lookup_with(7, t0 + Duration::from_secs(at), |_| {
                reads += 1;
                Some(cgroup.clone())
            })
        };
        let c = look(&mut k, 0).expect("a container");
        assert_eq!((c.id.as_str(), c.pod.is_none()), (ID, true));
        // the kubelet makes the pod's directory: found at the next look that is due
        fs::create_dir(dir.join(format!("shop_web-0_{UID}"))).unwrap();
        assert!(look(&mut k, 0).unwrap().pod.is_none(), "not due yet");
        let c = look(&mut k, 1).unwrap();
        let pod = c.pod.as_ref().expect("found");
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str()),
            ("shop", "web-0")
        );
        assert_eq!(reads, 1, "/proc is read once per process");
        fs::remove_dir_all(&dir).unwrap();

        // never made: given up after POD_RETRIES looks, at 1, 2, 4, … s
        let mut k = Containers::new(dir.clone());
        let mut at = 0;
        k.lookup_with(8, t0, |_| Some(cgroup.clone()));
        for n in 0..POD_RETRIES {
            assert!(k.entries[&8].pending.is_some());
            at += 1 << n;
            k.lookup_with(8, t0 + Duration::from_secs(at), |_| unreachable!());
        }
        assert!(k.entries[&8].pending.is_none() && k.warned);
        assert_eq!(k.lookup(8).unwrap().id, ID);
    }

    #[test]
    fn processes_are_remembered_within_the_bound_and_forgotten() {
        let mut k = Containers::new(PathBuf::from("/nonexistent"));
        let t = Instant::now();
        let text = format!("0::/docker/{ID}\n");
        for pid in 0..MAX_PIDS as u32 + 10 {
            assert!(k.lookup_with(pid, t, |_| Some(text.clone())).is_some());
        }
        assert_eq!((k.len(), k.evicted), (MAX_PIDS, 10));
        // the oldest went first
        assert!(!k.entries.contains_key(&9) && k.entries.contains_key(&10));
        // a process gone before its first look is not remembered; one outside any
        // container is, as None
        assert_eq!(k.lookup_with(1 << 30, t, |_| None), None);
        assert!(!k.entries.contains_key(&(1 << 30)));
        k.retain(|pid| pid < 100);
        assert_eq!(k.len(), 90);
        k.forget(50);
        assert_eq!(k.len(), 89);
        assert_eq!(k.lookup_with(5, t, |_| Some("0::/\n".into())), None);
        assert!(k.entries.contains_key(&5));
        assert!(k.order.len() <= 2 * MAX_PIDS);
    }

    #[test]
    fn this_process_reads_as_a_cgroup_file() {
        // whatever this host runs the tests in: read and parsed without error
        let text = read_cgroup(std::process::id()).expect("/proc/self/cgroup");
        let _ = parse_cgroup(&text);
        assert!(read_cgroup(u32::MAX).is_none());
    }
}
