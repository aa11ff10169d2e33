//! The container image of the DaemonSet (`cargo xtask image`), run the way a cluster runs
//! it: podman (with Debian's runc), in the host's PID and network namespaces, the kernel's
//! BTF, tracefs and bpffs mounted, tracing a real nginx on the host and serving /metrics.
//! Once privileged, once with only the DaemonSet's capabilities and a read-only root file
//! system. `cargo xtask test` builds the image first and names it in HSTRACE_IMAGE (and
//! its OCI archive in HSTRACE_IMAGE_ARCHIVE, the podman settings in CONTAINERS_CONF).

use std::{
    path::PathBuf,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use hstrace_tests::{
    clients::{drive_mix, Mix},
    daemon::Scrape,
    http,
    podman::{podman, podman_ok},
    servers::{Nginx, TestServer},
    util::free_port,
};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the tests with `cargo xtask test`, which builds the image")
    })
}

/// The mounts and namespaces of deploy/kubernetes/daemonset.yaml, in podman's words (the
/// host's network too, so that the test reaches /metrics on loopback).
const AS_A_DAEMONSET: &[&str] = &[
    "--pid=host",
    "--network=host",
    "-v",
    "/sys/kernel/btf:/sys/kernel/btf:ro",
    "-v",
    "/sys/kernel/tracing:/sys/kernel/tracing:ro",
];

/// A container started detached, removed on drop.
struct Container(String);

impl Container {
    fn start(options: &[&str], args: &[&str]) -> Container {
        let image = var("HSTRACE_IMAGE");
        let mut all = vec!["run", "-d"];
        all.extend(options);
        all.extend(AS_A_DAEMONSET);
        all.push(&image);
        all.extend(args);
        Container(podman_ok(&all))
    }

    fn logs(&self) -> String {
        let out = podman(&["logs", &self.0]);
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout)
    }

    /// SIGTERM, as a kubelet stops a pod: the exit code.
    fn stop(&self) -> i64 {
        podman_ok(&["stop", "-t", "20", &self.0]);
        podman_ok(&["inspect", "--format", "{{.State.ExitCode}}", &self.0])
            .parse()
            .unwrap()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", &self.0]);
    }
}

/// Wait until the daemon in `c` answers /healthz on `addr`.
fn wait_serving(c: &Container, addr: &str) {
    let start = Instant::now();
    while http::try_get(addr, "/healthz").is_none_or(|(status, _)| status != 200) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the container did not serve /healthz:\n{}",
            c.logs()
        );
        thread::sleep(Duration::from_millis(200));
    }
}

/// Scrape `addr` until it counted `made` connections (records come within about a
/// second of the connection's end, the tracer's own counts at its next tick).
fn scrape_until(c: &Container, addr: &str, made: u64) -> Scrape {
    let start = Instant::now();
    loop {
        let (_, body) = http::try_get(addr, "/metrics").expect("/metrics");
        let scrape = Scrape::parse(&body);
        let counted = |name| scrape.sum(name, &[]) as u64 >= made;
        if (counted("hstrace_connections_total") && counted("hstrace_connections_accepted_total"))
            || start.elapsed() > Duration::from_secs(20)
        {
            return scrape;
        }
        thread::sleep(Duration::from_millis(250));
        assert!(
            podman_ok(&["inspect", "--format", "{{.State.Running}}", &c.0]) == "true",
            "the container exited:\n{}",
            c.logs()
        );
    }
}

/// Serve from the image with `options`, trace `nginx`, drive `rounds` of the mix: what
/// /metrics counted, checked against what was made, and a clean exit on SIGTERM.
fn traces_and_serves(options: &[&str], nginx: &TestServer, rounds: u32) {
    let addr = format!("127.0.0.1:{}", free_port());
    let master = nginx.master_pid().to_string();
    let c = Container::start(
        options,
        &[
            "serve",
            "--pid",
            &master,
            "--listen",
            &addr,
            "--measure-cold-start",
        ],
    );
    wait_serving(&c, &addr);
    let mix: Mix = drive_mix(nginx, rounds);
    let made = mix.tls() + mix.plain + mix.failed;
    let scrape = scrape_until(&c, &addr, made);
    let kind = |k: &str| scrape.sum("hstrace_connections_total", &[("kind", k)]) as u64;
    assert_eq!(
        (kind("full"), kind("resumed"), kind("plain"), kind("failed")),
        (mix.full, mix.resumed, mix.plain, mix.failed),
        "{}\n{}",
        scrape.text,
        c.logs()
    );
    assert!(
        scrape.sum("hstrace_traced_processes", &[]) >= 1.0,
        "{}",
        scrape.text
    );
    assert_eq!(
        scrape.sum("hstrace_connections_accepted_total", &[]) as u64,
        made
    );
    // the image carries the libcrypto the cold start is timed on: asked for, the
    // parameters have it within seconds of the daemon's start
    let start = Instant::now();
    let host = loop {
        let (_, body) = http::try_get(&addr, "/api/v1/parameters").expect("/api/v1/parameters");
        let doc: serde_json::Value = serde_json::from_str(&body).unwrap();
        if !doc["host"]["cold_start"].is_null() || start.elapsed() > Duration::from_secs(20) {
            break doc["host"].clone();
        }
        thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(
        host["cold_start"]["runs"].as_array().map(Vec::len),
        Some(6),
        "{host}\n{}",
        c.logs()
    );
    assert_eq!(c.stop(), 0, "{}", c.logs());
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn the_image_holds_the_binary_its_libraries_and_licenses_only() {
    let image = var("HSTRACE_IMAGE");
    let config = podman_ok(&["image", "inspect", "--format", "{{json .Config}}", &image]);
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(
        config["Entrypoint"],
        serde_json::json!(["/usr/bin/hstrace"])
    );
    assert_eq!(
        config["Cmd"],
        serde_json::json!(["serve", "--listen", "0.0.0.0:9725"])
    );
    assert_eq!(config["User"], "0:0");
    assert!(config["ExposedPorts"]["9725/tcp"].is_object(), "{config}");
    // every file: the binary, the libraries ldd names, copyright files; no shell
    let id = podman_ok(&["create", &image]);
    let out = Command::new("sh")
        .args(["-c", &format!("podman --runtime runc export {id} | tar -t")])
        .output()
        .unwrap();
    podman_ok(&["rm", &id]);
    let files: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.ends_with('/'))
        .map(str::to_string)
        .collect();
    assert!(files.contains(&"usr/bin/hstrace".to_string()), "{files:?}");
    assert!(
        files.contains(&"usr/share/doc/hstrace/copyright".to_string()),
        "{files:?}"
    );
    let unexpected: Vec<&String> = files
        .iter()
        .filter(|f| {
            !(f.as_str() == "usr/bin/hstrace"
                || f.starts_with("usr/share/doc/")
                || f.starts_with("lib/")
                || f.starts_with("lib64/")
                || f.starts_with("usr/lib/")
                // what podman itself makes in every container
                || ["etc/hostname", "etc/hosts", "etc/resolv.conf", "run/.containerenv"]
                    .contains(&f.as_str()))
        })
        .collect();
    assert!(unexpected.is_empty(), "unexpected files: {unexpected:?}");
    assert!(!files.iter().any(|f| f.ends_with("bin/sh")), "{files:?}");
    // the archive the image is shipped as loads
    let archive = PathBuf::from(var("HSTRACE_IMAGE_ARCHIVE"));
    let loaded = podman_ok(&["load", "-i", &archive.display().to_string()]);
    assert!(loaded.contains("Loaded image"), "{loaded}");
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn the_daemonset_runs_this_image_with_the_capabilities_tested_here() {
    let yaml = std::fs::read_to_string(
        hstrace_tests::util::workspace().join("deploy/kubernetes/daemonset.yaml"),
    )
    .unwrap();
    let image = var("HSTRACE_IMAGE");
    let named: Vec<&str> = yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .collect();
    assert_eq!(named, [image.as_str()], "the DaemonSet's image");
    for needed in [
        "hostPID: true",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "drop: [\"ALL\"]",
        "- BPF ",
        "- PERFMON ",
        "- SYS_PTRACE ",
        "- DAC_READ_SEARCH ",
        "path: /sys/kernel/btf",
        "path: /sys/kernel/tracing",
        // --container-labels names pods from the kubelet's directories (docs/containers.md)
        "\"--container-labels\"",
        "path: /var/log/pods",
    ] {
        assert!(yaml.contains(needed), "the DaemonSet lacks {needed:?}");
    }
}

#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn the_image_run_privileged_in_the_hosts_pid_namespace_traces_a_host_nginx() {
    let nginx = Nginx::start("image-privileged", 2);
    // bpffs as well, as many tracers' DaemonSets mount it (hstrace pins nothing)
    traces_and_serves(
        &["--privileged", "-v", "/sys/fs/bpf:/sys/fs/bpf"],
        &nginx,
        2,
    );
}

/// deploy/kubernetes/daemonset.yaml's security context: no privileges but the four
/// capabilities, no new privileges, a read-only root file system. podman's default seccomp
/// profile (containers-common's, CRI-O's too) refuses bpf() without CAP_SYS_ADMIN, and
/// hstrace says so and what to change; with the profile off, the same container traces.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn the_image_with_only_the_daemonsets_capabilities_traces_or_names_the_seccomp_filter() {
    const CAPS: &[&str] = &[
        "--cap-drop=all",
        "--cap-add=CAP_BPF,CAP_PERFMON,CAP_SYS_PTRACE,CAP_DAC_READ_SEARCH",
        "--security-opt=no-new-privileges",
        "--read-only",
    ];
    let image = var("HSTRACE_IMAGE");
    let mut refused = vec!["run", "--rm"];
    refused.extend(CAPS);
    refused.extend(AS_A_DAEMONSET);
    refused.extend([image.as_str(), "trace", "--duration", "1"]);
    let out = podman(&refused);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("refused") && said.contains("seccomp") && said.contains("Unconfined"),
        "{said}"
    );
    let nginx = Nginx::start("image-caps", 1);
    let options: Vec<&str> = CAPS
        .iter()
        .copied()
        .chain(["--security-opt", "seccomp=unconfined"])
        .collect();
    traces_and_serves(&options, &nginx, 1);
}
