//! `hstrace serve --web.config.file` and `--failures-peer`: a real Prometheus scrapes a
//! daemon behind TLS and basic auth (and is refused with a wrong password or without TLS),
//! curl shows mutual TLS, a wrong key file stops the daemon at start with one line, and a
//! real failed handshake is served with as much of its peer as asked. Certificates are made
//! here with the openssl CLI, passwords hashed with htpasswd. Root only: `cargo xtask test`.

use std::{
    fs,
    net::TcpStream,
    os::unix::{fs::PermissionsExt, process::CommandExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use hstrace_tests::{
    clients::s_client,
    daemon::Daemon,
    fixtures::test_pki,
    hstrace::hstrace_bin,
    prometheus::Prometheus,
    servers::Nginx,
    util::{free_port, wait_for},
};
use serde_json::Value;

const PASSWORD: &str = "scrape-me-9725";

fn run(dir: &Path, cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `htpasswd -nbBC 10 "" PASSWORD`, the exporter-toolkit docs' way, minus the ":".
fn bcrypt(dir: &Path, password: &str) -> String {
    run(dir, "htpasswd", &["-nbBC", "10", "", password])
        .trim()
        .trim_start_matches(':')
        .to_owned()
}

fn write_config(dir: &Path, name: &str, yaml: &str) -> String {
    let path = dir.join(name);
    fs::write(&path, yaml).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

/// A real Prometheus scrapes a daemon behind TLS and basic auth; the same target scraped
/// with a wrong password, or without TLS, is down.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn prometheus_scrapes_through_tls_and_basic_auth_and_nothing_else() {
    let dir = test_pki("guard-pki-prometheus");
    let hash = bcrypt(&dir, PASSWORD);
    let config = write_config(
        &dir,
        "web.yml",
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    );
    let nginx = Nginx::start("guard-prometheus", 1);
    let master = nginx.master_pid().to_string();
    let daemon = Daemon::start(&["--pid", &master, "--web.config.file", &config]);
    assert!(
        daemon
            .stderr_seen
            .iter()
            .any(|l| l.contains("serving https://")),
        "{:?}",
        daemon.stderr_seen
    );
    let ca = dir.join("ca.crt").display().to_string();
    let job = |name: &str, scheme: &str, password: &str| {
        format!(
            "  - job_name: {name}\n    scheme: {scheme}\n    tls_config:\n      ca_file: '{ca}'\n    \
             basic_auth:\n      username: prometheus\n      password: '{password}'\n    \
             static_configs:\n      - targets: ['{}']\n",
            daemon.addr
        )
    };
    let prom = Prometheus::start_with_jobs(&format!(
        "{}{}{}",
        job("guarded", "https", PASSWORD),
        job("wrong-password", "https", "not-the-password"),
        job("no-tls", "http", PASSWORD),
    ));
    // each job scraped at least once, and told apart
    let mut last = Vec::new();
    wait_for("every job scraped", Duration::from_secs(60), || {
        last = prom.targets();
        last.len() == 3 && last.iter().all(|t| t["health"] != "unknown")
    });
    let by_job = |job: &str| {
        last.iter()
            .find(|t| t["labels"]["job"] == job)
            .cloned()
            .unwrap_or_else(|| panic!("no {job}: {last:?}"))
    };
    let guarded = by_job("guarded");
    assert_eq!(guarded["health"], "up", "{guarded}");
    let wrong = by_job("wrong-password");
    assert_eq!(wrong["health"], "down", "{wrong}");
    assert!(
        wrong["lastError"].as_str().unwrap().contains("401"),
        "{wrong}"
    );
    let plain = by_job("no-tls");
    assert_eq!(plain["health"], "down", "{plain}");
    // the metrics arrived through the guard
    let v = prom.query("count({job=\"guarded\", __name__=~\"hstrace_.+\"})");
    let n: f64 = v["data"]["result"][0]["value"][1]
        .as_str()
        .unwrap_or("0")
        .parse()
        .unwrap();
    assert!(n > 10.0, "{v}");
    let v = prom.query("count({job=~\"wrong-password|no-tls\", __name__=~\"hstrace_.+\"})");
    assert_eq!(v["data"]["result"], serde_json::json!([]), "{v}");
    // and as curl sees it: 401 with the scheme to use
    let head = curl(&[
        "-sS",
        "-i",
        "--cacert",
        &ca,
        &format!("https://{}/metrics", daemon.addr),
    ]);
    assert!(head.0 && head.1.starts_with("HTTP/1.1 401"), "{head:?}");
    assert!(
        head.1
            .to_ascii_lowercase()
            .contains("www-authenticate: basic"),
        "{head:?}"
    );
    daemon.stop();
}

/// curl: (success, stdout + stderr).
fn curl(args: &[&str]) -> (bool, String) {
    let out = Command::new("curl")
        .args(["--max-time", "10"])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// client_auth_type RequireAndVerifyClientCert: only a certificate from client_ca_file
/// gets an answer, from curl and from a real Prometheus.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn mutual_tls_answers_only_clients_of_the_ca() {
    let dir = test_pki("guard-pki-mtls");
    let config = write_config(
        &dir,
        "web.yml",
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  min_version: TLS13\n",
    );
    let nginx = Nginx::start("guard-mtls", 1);
    let master = nginx.master_pid().to_string();
    let daemon = Daemon::start(&["--pid", &master, "--web.config.file", &config]);
    let url = format!("https://{}/metrics", daemon.addr);
    let p = |f: &str| dir.join(f).display().to_string();
    let (ca, cert, key) = (p("ca.crt"), p("client.crt"), p("client.key"));
    let (ok, out) = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--cacert",
        &ca,
        "--cert",
        &cert,
        "--key",
        &key,
        &url,
    ]);
    assert!(ok && out == "200", "the CA's client: {out}");
    let (ok, out) = curl(&["-sS", "-o", "/dev/null", "--cacert", &ca, &url]);
    assert!(!ok, "no certificate, yet answered: {out}");
    let (s_cert, s_key) = (p("stranger.crt"), p("stranger.key"));
    let (ok, out) = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "--cacert",
        &ca,
        "--cert",
        &s_cert,
        "--key",
        &s_key,
        &url,
    ]);
    assert!(!ok, "another CA's client, yet answered: {out}");
    let (ok, out) = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        "--tls-max",
        "1.2",
        "--cacert",
        &ca,
        "--cert",
        &cert,
        "--key",
        &key,
        &url,
    ]);
    assert!(!ok, "TLS 1.2 below min_version TLS13, yet answered: {out}");
    // plain HTTP to the TLS port: no answer
    let (ok, out) = curl(&[
        "-sS",
        "-o",
        "/dev/null",
        &format!("http://{}/metrics", daemon.addr),
    ]);
    assert!(!ok, "plain HTTP, yet answered: {out}");
    // a real Prometheus, with the client certificate and without
    let job = |name: &str, client: &str| {
        format!(
            "  - job_name: {name}\n    scheme: https\n    tls_config:\n      ca_file: '{ca}'\n{client}    \
             static_configs:\n      - targets: ['{}']\n",
            daemon.addr
        )
    };
    let with_cert = format!("      cert_file: '{cert}'\n      key_file: '{key}'\n");
    let prom = Prometheus::start_with_jobs(&format!(
        "{}{}",
        job("client-cert", &with_cert),
        job("no-client-cert", "")
    ));
    let mut last = Vec::new();
    wait_for("both jobs scraped", Duration::from_secs(60), || {
        last = prom.targets();
        last.len() == 2 && last.iter().all(|t| t["health"] != "unknown")
    });
    for t in &last {
        let want = if t["labels"]["job"] == "client-cert" {
            "up"
        } else {
            "down"
        };
        assert_eq!(t["health"], want, "{t}");
    }
    daemon.stop();
}

/// A key file that can't be read, isn't a key, or that every user may read: hstrace says
/// so in one line at start, exits non-zero and never listens.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn a_bad_key_file_stops_the_daemon_with_one_line() {
    let dir = test_pki("guard-pki-bad-keys");
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    fs::copy(dir.join("server.key"), dir.join("open.key")).unwrap();
    fs::set_permissions(dir.join("open.key"), fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(
        dir.join("garbage.key"),
        "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    fs::set_permissions(dir.join("garbage.key"), fs::Permissions::from_mode(0o600)).unwrap();
    let cfg = |name: &str, key: &str| {
        let path = dir.join(name);
        fs::write(
            &path,
            format!("tls_server_config:\n  cert_file: server.crt\n  key_file: {key}\n"),
        )
        .unwrap();
        // readable by the unprivileged user of the first case
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        path
    };
    let cases: [(&str, PathBuf, Option<u32>, &str); 4] = [
        // root may read any file (as may CAP_DAC_READ_SEARCH): unreadable as nobody
        (
            "unreadable",
            cfg("unreadable.yml", "server.key"),
            Some(65534),
            "server.key: cannot read it: Permission denied",
        ),
        (
            "malformed",
            cfg("malformed.yml", "garbage.key"),
            None,
            "garbage.key: holds no usable private key",
        ),
        (
            "world-readable",
            cfg("open.yml", "open.key"),
            None,
            "open.key is readable by every user (mode 0644)",
        ),
        (
            "unknown key",
            {
                let p = dir.join("typo.yml");
                fs::write(
                    &p,
                    "tls_server_config:\n  cert_file: server.crt\n  keyfile: server.key\n",
                )
                .unwrap();
                p
            },
            None,
            "unknown field `keyfile`",
        ),
    ];
    for (what, config, uid, says) in cases {
        let port = free_port();
        let mut cmd = Command::new(hstrace_bin());
        cmd.args([
            "serve",
            "--comm",
            "nginx",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--web.config.file",
        ])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
        if let Some(uid) = uid {
            cmd.uid(uid).gid(65534);
        }
        let mut child = cmd.spawn().unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{what}: hstrace started with {}", config.display());
            }
            assert!(
                TcpStream::connect(("127.0.0.1", port)).is_err(),
                "{what}: something answers on the daemon's port"
            );
            thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(!status.success(), "{what}: exit {status}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: not one line: {err}");
        assert!(
            lines[0].starts_with("hstrace: --web.config.file "),
            "{what}: {err}"
        );
        assert!(lines[0].contains(says), "{what}: {err}");
    }
}

/// One real failed handshake (a client that rejects nginx's certificate), read from four
/// daemons: --failures-peer full, prefix, none, and the default (prefix).
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn failures_show_the_peer_as_much_as_asked() {
    let nginx = Nginx::start("guard-failures-peer", 1);
    let master = nginx.master_pid().to_string();
    let modes = [Some("full"), Some("prefix"), Some("none"), None];
    let daemons: Vec<Daemon> = modes
        .iter()
        .map(|m| {
            let mut args = vec!["--pid", master.as_str()];
            if let Some(m) = m {
                args.extend(["--failures-peer", m]);
            }
            Daemon::start(&args)
        })
        .collect();
    let out = s_client(nginx.port, &["-tls1_2", "-verify_return_error"]);
    assert!(!out.contains("New, TLS"), "the client accepted it: {out}");
    for (mode, daemon) in modes.iter().zip(&daemons) {
        let mut v = Value::Null;
        wait_for("the failed handshake", Duration::from_secs(30), || {
            v = serde_json::from_str(&daemon.get("/api/v1/failures")).unwrap();
            v["failures"].as_array().is_some_and(|f| !f.is_empty())
        });
        let f = &v["failures"][0];
        assert_eq!(f["error_type"], "alert", "{mode:?}: {v}");
        assert_eq!(v["peer_detail"], mode.unwrap_or("prefix"), "{v}");
        match mode.unwrap_or("prefix") {
            "full" => {
                let peer = f["peer"].as_str().unwrap();
                let port: u16 = peer
                    .strip_prefix("127.0.0.1:")
                    .unwrap_or_else(|| panic!("{v}"))
                    .parse()
                    .unwrap();
                assert!(port > 0 && port != nginx.port, "{v}");
            }
            "prefix" => assert_eq!(f["peer"], "127.0.0.0/24", "{v}"),
            _ => assert!(f["peer"].is_null(), "{v}"),
        }
        // the server's own end is not the client's
        assert_eq!(f["local"], format!("127.0.0.1:{}", nginx.port), "{v}");
    }
    for d in daemons {
        d.stop();
    }
}
