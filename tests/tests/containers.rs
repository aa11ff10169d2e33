//! `--container-labels`: each record carries the container its server runs in, and on a
//! Kubernetes node its pod, read from the server's cgroup and the kubelet's pod log
//! directories (docs/containers.md). A real podman container, and a FAKE kubelet layout
//! (no kubelet can run here: no cluster, no CRI runtime for it to drive). Root only; run
//! with `cargo xtask test`.

use std::{
    fs,
    path::{Path, PathBuf},
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use hstrace_tests::{
    assert::str_field,
    clients::{curl, s_client},
    daemon::Daemon,
    hstrace::{hstrace_run, Hstrace, Traced},
    podman::{podman, podman_ok},
    servers::Nginx,
    util::{wait_listening, work_dir},
};
use serde_json::Value;

/// Connections to `port`: a TLS 1.3 and a TLS 1.2 handshake with s_client, and two
/// requests over one curl connection. Returns how many connections were made.
fn connect(port: u16) -> usize {
    let out = s_client(port, &["-tls1_3"]);
    assert!(out.contains("New, TLSv1.3"), "{out}");
    let out = s_client(port, &["-tls1_2"]);
    assert!(out.contains("New, TLSv1.2"), "{out}");
    let url = format!("https://127.0.0.1:{port}/");
    assert_eq!(curl(&[], &[url.clone(), url]), "ok\nok\n");
    3
}

/// The lines, connection and close, of connections to `port`.
fn lines_of(traced: &Traced, port: u16) -> Vec<&Value> {
    let local = format!("127.0.0.1:{port}");
    let mine: Vec<u64> = traced
        .records
        .iter()
        .filter(|r| str_field(r, "local") == Some(local.as_str()))
        .filter_map(|r| r["conn_id"].as_u64())
        .collect();
    traced
        .records
        .iter()
        .chain(&traced.closes)
        .filter(|r| r["conn_id"].as_u64().is_some_and(|id| mine.contains(&id)))
        .collect()
}

/// `serve` of `port` with `args` while `connect` runs: the labels of its connection
/// series (every connection counted under them).
fn serve_labels(args: &[&str], port: u16) -> Vec<std::collections::BTreeMap<String, String>> {
    let p = port.to_string();
    let mut all = vec!["--port", p.as_str()];
    all.extend(args);
    let daemon = Daemon::start(&all);
    let made = connect(port) as f64;
    let mut m = daemon.scrape();
    let deadline = Instant::now() + Duration::from_secs(15);
    while m.sum("hstrace_connections_total", &[]) < made {
        assert!(
            Instant::now() < deadline,
            "not every connection counted:\n{}",
            m.text
        );
        thread::sleep(Duration::from_millis(200));
        m = daemon.scrape();
    }
    daemon.stop();
    m.samples
        .into_iter()
        .filter(|(n, ..)| n == "hstrace_connections_total")
        .map(|(_, l, _)| l)
        .collect()
}

/// Trace `port` with `args` while `connect` runs: the lines of its connections, checked
/// to be one connection and one close line for each.
fn trace(args: &[&str], port: u16) -> (Traced, usize) {
    let p = port.to_string();
    let mut all = vec!["--port", p.as_str()];
    all.extend(args);
    let tracer = Hstrace::start(&all);
    let made = connect(port);
    let traced = tracer.stop();
    assert!(traced.success, "{}", traced.stderr);
    let n = lines_of(&traced, port).len();
    assert_eq!(n, 2 * made, "{:?}\n{}", traced.records, traced.stderr);
    (traced, made)
}

/// nginx in a podman container of its own (own mount, PID, UTS and IPC namespaces, own
/// cgroup), pulling no image: its root file system is the host's, under an overlay
/// (`--rootfs /:O`), with its files bind-mounted; the host's network, so the test reaches
/// it on loopback. Removed on drop.
struct PodmanNginx {
    id: String,
    port: u16,
}

impl PodmanNginx {
    fn start(name: &str) -> PodmanNginx {
        let files = Nginx::files(name, 2, 2048, "");
        let dir = files.dir.display().to_string();
        let volume = format!("{dir}:{dir}");
        let nginx_args: Vec<String> = files
            .args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let mut args = vec![
            "run",
            "-d",
            "--network",
            "host",
            "-v",
            &volume,
            "--rootfs",
            "/:O",
            "nginx",
        ];
        args.extend(nginx_args.iter().map(String::as_str));
        let id = podman_ok(&args);
        let server = PodmanNginx {
            id,
            port: files.port,
        };
        wait_listening(
            "nginx in its container to listen",
            server.port,
            Duration::from_secs(20),
        );
        server
    }

    /// The id podman gives it (64 hex digits).
    fn id(&self) -> String {
        podman_ok(&["inspect", "--format", "{{.Id}}", &self.id])
    }
}

impl Drop for PodmanNginx {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-t", "5", &self.id]);
    }
}

/// A real container: nginx started by podman (Debian's, with runc). With the flag, every
/// line of its connections carries the id podman reports, and no pod (no kubelet); without
/// it, none carries a container field.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_podman_containers_connections_carry_its_id() {
    let nginx = PodmanNginx::start("containers-podman");
    let id = nginx.id();
    assert_eq!(id.len(), 64, "{id}");
    let (traced, made) = trace(&["--container-labels"], nginx.port);
    let lines = lines_of(&traced, nginx.port);
    for l in &lines {
        assert_eq!(str_field(l, "container_id"), Some(id.as_str()), "{l}");
        assert!(
            l.get("k8s_pod_name").is_none() && l.get("k8s_namespace_name").is_none(),
            "{l}"
        );
    }
    assert_eq!(lines.len(), 2 * made);

    let (traced, _) = trace(&[], nginx.port);
    for l in lines_of(&traced, nginx.port) {
        assert!(
            l.get("container_id").is_none() && l.get("k8s_pod_name").is_none(),
            "{l}"
        );
    }

    // serve's series: the same id, no pod labels; and none without the flag
    for labels in serve_labels(&["--container-labels"], nginx.port) {
        assert_eq!(labels.get("container_id"), Some(&id), "{labels:?}");
        assert!(!labels.contains_key("k8s_pod_name"), "{labels:?}");
    }
    for labels in serve_labels(&[], nginx.port) {
        assert!(!labels.contains_key("container_id"), "{labels:?}");
    }
}

/// Where the unified (v2) cgroup hierarchy is mounted: /sys/fs/cgroup on a v2-only host,
/// /sys/fs/cgroup/unified on a hybrid one (these test hosts).
fn unified_hierarchy() -> PathBuf {
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    mounts
        .lines()
        .find_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mount_point = left.split(' ').nth(4)?;
            (right.split(' ').next() == Some("cgroup2")).then(|| PathBuf::from(mount_point))
        })
        .expect("no cgroup2 file system is mounted")
}

/// A pod's cgroups as the kubelet (systemd cgroup driver) and containerd make them, under
/// the unified hierarchy: kubepods.slice/kubepods-besteffort.slice/
/// kubepods-besteffort-pod<uid with _>.slice/cri-containerd-<id>.scope. Removed on drop:
/// processes still in them moved back to the root first.
struct FakePodCgroup {
    /// outermost first
    dirs: Vec<PathBuf>,
}

impl FakePodCgroup {
    fn create(uid: &str, id: &str) -> FakePodCgroup {
        let root = unified_hierarchy();
        let mut dirs = Vec::new();
        let mut at = root.clone();
        for part in [
            "kubepods.slice".to_string(),
            "kubepods-besteffort.slice".to_string(),
            format!("kubepods-besteffort-pod{}.slice", uid.replace('-', "_")),
            format!("cri-containerd-{id}.scope"),
        ] {
            at = at.join(part);
            if !at.exists() {
                fs::create_dir(&at).unwrap_or_else(|e| {
                    panic!("creating cgroup {}: {e} (needs root)", at.display())
                });
                dirs.push(at.clone());
            }
        }
        FakePodCgroup { dirs }
    }

    fn leaf(&self) -> &Path {
        self.dirs.last().expect("the container's cgroup is new")
    }
}

impl Drop for FakePodCgroup {
    fn drop(&mut self) {
        let root = unified_hierarchy();
        let start = Instant::now();
        for dir in self.dirs.iter().rev() {
            // the server's workers may take a moment to exit after its master
            while fs::remove_dir(dir).is_err() && start.elapsed() < Duration::from_secs(10) {
                for pid in fs::read_to_string(dir.join("cgroup.procs"))
                    .unwrap_or_default()
                    .lines()
                {
                    let _ = fs::write(root.join("cgroup.procs"), pid);
                }
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Kubernetes, with a FAKE kubelet layout: no kubelet can run here (no cluster, no CRI
/// runtime for it to drive), so the test makes what a kubelet and containerd would leave
/// on a node: the pod's cgroups under the unified hierarchy (systemd driver's names) and the
/// pod's log directory `<namespace>_<pod>_<uid>/` in a directory given as --pods-dir. nginx
/// runs in that cgroup and in a mount namespace of its own (unshare). Every line of its
/// connections carries the container id, pod name and namespace.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_pods_connections_carry_its_name_and_namespace() {
    // ids of this run: a uid as the API server writes them, a containerd container id
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let pid = u64::from(std::process::id());
    let uid = format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        t as u32,
        (t >> 32) as u16,
        pid & 0xfff,
        (t >> 48) & 0xfff,
        t & 0xffff_ffff_ffff
    );
    let id = format!("{t:016x}{pid:016x}").repeat(2);
    let (namespace, pod) = ("shop", "web-7c9d8f6b5-x2v4q");

    let pods = work_dir("containers-pods");
    let pod_dir = pods.join(format!("{namespace}_{pod}_{uid}"));
    fs::create_dir_all(pod_dir.join("nginx")).unwrap();
    fs::write(pod_dir.join("nginx/0.log"), "").unwrap();

    let cgroup = FakePodCgroup::create(&uid, &id);
    let procs = cgroup.leaf().join("cgroup.procs");
    // the shell moves itself into the pod's cgroup, then becomes nginx in a mount
    // namespace of its own
    let script = r#"echo $$ > "$0" && exec unshare --mount --propagation private -- "$@""#;
    let nginx = Nginx::start_under(
        "containers-k8s",
        2,
        &["sh", "-c", script, &procs.display().to_string()],
    );
    let in_cgroup = fs::read_to_string(&procs).unwrap();
    assert!(
        in_cgroup
            .lines()
            .any(|p| p == nginx.master_pid().to_string()),
        "{in_cgroup}"
    );
    assert_ne!(
        fs::read_link(format!("/proc/{}/ns/mnt", nginx.master_pid())).unwrap(),
        fs::read_link("/proc/self/ns/mnt").unwrap(),
        "nginx has a mount namespace of its own"
    );

    let pods_dir = pods.display().to_string();
    let (traced, _) = trace(&["--container-labels", "--pods-dir", &pods_dir], nginx.port);
    for l in lines_of(&traced, nginx.port) {
        assert_eq!(
            (
                str_field(l, "container_id"),
                str_field(l, "k8s_pod_name"),
                str_field(l, "k8s_namespace_name")
            ),
            (Some(id.as_str()), Some(pod), Some(namespace)),
            "{l}"
        );
    }
    for labels in serve_labels(&["--container-labels", "--pods-dir", &pods_dir], nginx.port) {
        let get = |k: &str| labels.get(k).map(String::as_str);
        assert_eq!(
            (
                get("container_id"),
                get("k8s_pod_name"),
                get("k8s_namespace_name")
            ),
            (Some(id.as_str()), Some(pod), Some(namespace)),
            "{labels:?}"
        );
    }
    drop(nginx);
    drop(cgroup);
}

/// --pods-dir is read only with --container-labels, and must exist: both said before
/// anything is loaded.
#[test]
#[ignore = "needs the release build of hstrace: run `sudo cargo xtask test`"]
fn pods_dir_mistakes_are_named() {
    let (ok, err) = hstrace_run(&["trace", "--pods-dir", "/tmp"]);
    assert!(!ok && err.contains("--container-labels"), "{err}");
    let (ok, err) = hstrace_run(&[
        "trace",
        "--container-labels",
        "--pods-dir",
        "/nonexistent/pods",
    ]);
    assert!(
        !ok && err.contains("--pods-dir /nonexistent/pods: no such directory"),
        "{err}"
    );
}
