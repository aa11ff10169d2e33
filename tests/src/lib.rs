//! Test support: a throwaway nginx on loopback, the real `hstrace` binary, and the real
//! openssl clients. Everything lives under target/hstrace-tests/ and is stopped on drop.

use std::{
    collections::BTreeSet,
    fs,
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant, SystemTime},
};

use std::os::unix::process::CommandExt;

use serde_json::Value;

pub mod daemon;
pub mod prometheus;
pub mod wire_fuzz;

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The hstrace binary under test (built by `cargo xtask test`).
pub fn hstrace_bin() -> PathBuf {
    let p = std::env::var_os("HSTRACE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/release/hstrace"));
    assert!(
        p.exists(),
        "{} missing: run the tests with `cargo xtask test`",
        p.display()
    );
    p
}

/// A fresh directory for one test.
pub fn work_dir(name: &str) -> PathBuf {
    let d = workspace().join("target/hstrace-tests").join(name);
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Poll `ok` every 20 ms until it holds; panic after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// A self-signed RSA certificate for demo.test.
pub fn make_cert(dir: &Path, bits: u32) -> (PathBuf, PathBuf) {
    make_cert_named(dir, "", bits, &[])
}

/// The same, its files named PREFIXcert.pem and PREFIXkey.pem, with `extra` arguments to
/// `openssl req` (e.g. `-addext` for many subject alternative names: a big certificate).
pub fn make_cert_named(dir: &Path, prefix: &str, bits: u32, extra: &[&str]) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{prefix}cert.pem"));
    let key = dir.join(format!("{prefix}key.pem"));
    let st = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            &format!("rsa:{bits}"),
            "-nodes",
            "-days",
            "2",
        ])
        .args(extra)
        .args(["-subj", "/CN=demo.test", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(st.success(), "openssl req failed");
    (cert, key)
}

/// Which Debian server a `TestServer` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Software {
    Nginx,
    Apache,
    Haproxy,
    /// Node.js: OpenSSL inside the executable, driven through memory BIOs
    Node,
    /// Go's crypto/tls: no OpenSSL at all
    Go,
}

impl Software {
    /// Does the server keep a session-id cache (TLS 1.2 resumption without a ticket)?
    /// Go's crypto/tls has none.
    pub fn resumes_session_ids(self) -> bool {
        self != Software::Go
    }
}

/// A throwaway server (nginx or Apache httpd from Debian's packages) on 127.0.0.1 with a
/// TLS and a plain-HTTP port: its files under target/hstrace-tests/NAME, its access log
/// written as "remote-port protocol reused request-time". Stopped on drop.
pub struct TestServer {
    pub software: Software,
    pub dir: PathBuf,
    /// the TLS port
    pub port: u16,
    /// a plain-HTTP port on the same server
    pub plain_port: u16,
    child: Child,
}

impl TestServer {
    pub fn master_pid(&self) -> u32 {
        self.child.id()
    }

    /// the processes that accept connections
    pub fn worker_pids(&self) -> BTreeSet<u32> {
        match self.software {
            // one process, its threads accept
            Software::Haproxy | Software::Node | Software::Go => {
                BTreeSet::from([self.master_pid()])
            }
            _ => children(self.master_pid()),
        }
    }

    pub fn comm(&self) -> &'static str {
        match self.software {
            Software::Nginx => "nginx",
            Software::Apache => "apache2",
            Software::Haproxy => "haproxy",
            Software::Node => "node",
            Software::Go => "go_tls_server",
        }
    }

    /// From the server's own access log: was each TLS request's session resumed?
    pub fn resumed_log(&self) -> Vec<bool> {
        // nginx's $ssl_session_reused is "r"; Apache's %{SSL_SESSION_RESUMED}x "Resumed";
        // HAProxy's ssl_fc_is_resumed 1; Node's and Go's test servers write "r"
        let word = match self.software {
            Software::Nginx | Software::Node | Software::Go => "r",
            Software::Apache => "Resumed",
            Software::Haproxy => "1",
        };
        tls_log_lines(&self.dir.join("access.log"))
            .iter()
            .map(|f| f[2] == word)
            .collect()
    }

    /// From the server's own access log: each TLS request's time, in ms.
    pub fn request_times_ms(&self) -> Vec<f64> {
        // nginx's $request_time is in seconds (ms resolution), Apache's %D in µs,
        // HAProxy's %Tt, Node's and Go's in ms
        let ms_per_unit = match self.software {
            Software::Nginx => 1000.0,
            Software::Apache => 0.001,
            Software::Haproxy | Software::Node | Software::Go => 1.0,
        };
        let lines = tls_log_lines(&self.dir.join("access.log"));
        lines
            .iter()
            .map(|f| f[3].parse::<f64>().unwrap() * ms_per_unit)
            .collect()
    }

    /// Stop the server and start it again from the same files: a new master process
    /// (nginx only).
    pub fn restart(&mut self) {
        assert!(
            matches!(self.software, Software::Nginx),
            "restart: nginx only"
        );
        let workers = self.worker_pids().len();
        // SAFETY: plain kill(2) on our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        wait_for("the port to be free", Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", self.port)).is_err()
        });
        let dir = self.dir.clone();
        let again = TestServer::spawn(
            Software::Nginx,
            dir.clone(),
            self.port,
            self.plain_port,
            Command::new("nginx")
                .arg("-p")
                .arg(&dir)
                .arg("-c")
                .arg(dir.join("nginx.conf"))
                .arg("-e")
                .arg(dir.join("error.log")),
            workers,
        );
        // the new master replaces the old, which is already gone
        let old = std::mem::replace(self, again);
        std::mem::forget(old);
    }

    /// Spawn `cmd` (the server in the foreground) and wait until it listens and has
    /// `workers` worker processes.
    fn spawn(
        software: Software,
        dir: PathBuf,
        port: u16,
        plain_port: u16,
        cmd: &mut Command,
        workers: usize,
    ) -> Self {
        // HAProxy logs to its stdout: that is its access log
        let stdout = match software {
            Software::Haproxy => Stdio::from(fs::File::create(dir.join("access.log")).unwrap()),
            _ => Stdio::null(),
        };
        // a group of its own: Apache prefork signals its whole process group on a
        // graceful restart, which must not reach the test
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{software:?} ({e}): `cargo xtask setup` installs it"));
        let server = TestServer {
            software,
            dir,
            port,
            plain_port,
            child,
        };
        wait_for("the server to listen", Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        wait_for("its workers", Duration::from_secs(10), || {
            server.worker_pids().len() == workers
        });
        server
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Fields of the access-log lines ("remote-port protocol reused request-time") of
/// requests that came over TLS.
fn tls_log_lines(path: &Path) -> Vec<Vec<String>> {
    let log = fs::read_to_string(path).unwrap_or_default();
    log.lines()
        .map(|l| l.split(' ').map(String::from).collect::<Vec<_>>())
        .filter(|f| f.len() > 3 && f[1].starts_with("TLS"))
        .collect()
}

/// A throwaway nginx: own prefix, self-signed cert, shared session cache and tickets on,
/// TLS 1.2 and 1.3.
pub struct Nginx;

impl Nginx {
    pub fn start(name: &str, workers: u32) -> TestServer {
        Nginx::start_with_key(name, workers, 2048)
    }

    /// With an RSA certificate of `rsa_bits`.
    pub fn start_with_key(name: &str, workers: u32, rsa_bits: u32) -> TestServer {
        Nginx::start_with(name, workers, rsa_bits, "")
    }

    /// With `tls_extra` (directives) in the TLS server block. When it has `listen` lines of
    /// its own (`$port` is the TLS port), they replace the default one.
    pub fn start_with(name: &str, workers: u32, rsa_bits: u32, tls_extra: &str) -> TestServer {
        let dir = work_dir(name);
        let (cert, key) = make_cert(&dir, rsa_bits);
        let port = free_port();
        let plain_port = free_port();
        let d = dir.display();
        fs::create_dir_all(dir.join("tmp")).unwrap();
        let tls_extra = tls_extra.replace("$port", &port.to_string());
        let listen = if tls_extra.contains("listen ") {
            String::new()
        } else {
            format!("listen 127.0.0.1:{port} ssl;")
        };
        let certificate = if tls_extra.contains("ssl_certificate ") {
            String::new()
        } else {
            format!(
                "ssl_certificate {};\n        ssl_certificate_key {};",
                cert.display(),
                key.display()
            )
        };
        let conf = format!(
            r#"daemon off;
master_process on;
worker_processes {workers};
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 1024; }}
http {{
    log_format hs '$remote_port $ssl_protocol $ssl_session_reused $request_time';
    access_log {d}/access.log hs;
    client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy;
    fastcgi_temp_path {d}/tmp/fcgi; uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:1m;
    ssl_session_tickets on;
    server {{
        listen 127.0.0.1:{plain_port};
        location / {{ return 200 "plain\n"; }}
    }}
    server {{
        {listen}
        server_name demo.test;
        {certificate}
        {tls_extra}
        location / {{ return 200 "ok\n"; }}
    }}
}}
"#
        );
        fs::write(dir.join("nginx.conf"), conf).unwrap();
        let mut cmd = Command::new("nginx");
        cmd.arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"));
        cmd.arg("-e").arg(dir.join("error.log"));
        TestServer::spawn(
            Software::Nginx,
            dir,
            port,
            plain_port,
            &mut cmd,
            workers as usize,
        )
    }
}

/// A throwaway HAProxy (Debian's, OpenSSL from libssl3) answering HTTP itself: one
/// process, one thread, its session cache and tickets on by default. It reads a TLS
/// record's header and its body in separate reads. Its access log (stdout) is written as
/// "client-port protocol resumed total-time".
pub struct Haproxy;

impl Haproxy {
    pub fn start(name: &str) -> TestServer {
        let dir = work_dir(name);
        let (cert, key) = make_cert(&dir, 2048);
        let pem = dir.join("server.pem");
        let both = [fs::read(&cert).unwrap(), fs::read(&key).unwrap()].concat();
        fs::write(&pem, both).unwrap();
        let (port, plain_port) = (free_port(), free_port());
        let conf = format!(
            r#"global
    log stdout format raw local0
    nbthread 1
defaults
    mode http
    log global
    option httplog
    log-format "%cp %sslv %[ssl_fc_is_resumed] %Tt"
    timeout connect 5s
    timeout client 10s
    timeout server 10s
frontend tls
    bind 127.0.0.1:{port} ssl crt {pem} alpn h2,http/1.1
    http-request return status 200 content-type text/plain string "ok"
frontend plain
    bind 127.0.0.1:{plain_port}
    http-request return status 200 content-type text/plain string "plain"
"#,
            pem = pem.display()
        );
        fs::write(dir.join("haproxy.cfg"), conf).unwrap();
        let mut cmd = Command::new("haproxy");
        cmd.arg("-db").arg("-f").arg(dir.join("haproxy.cfg"));
        TestServer::spawn(Software::Haproxy, dir, port, plain_port, &mut cmd, 1)
    }
}

/// A throwaway Node.js HTTPS server (tests/servers/node_tls_server.js): one process,
/// OpenSSL statically inside the `node` executable, driven through memory BIOs. Session
/// ids and tickets both resume.
pub struct Node;

impl Node {
    pub fn start(name: &str) -> TestServer {
        let dir = work_dir(name);
        let (cert, key) = make_cert(&dir, 2048);
        let (port, plain_port) = (free_port(), free_port());
        let mut cmd = Command::new("node");
        cmd.arg(workspace().join("tests/servers/node_tls_server.js"));
        server_args(&mut cmd, &dir, port, plain_port, &cert, &key);
        TestServer::spawn(Software::Node, dir, port, plain_port, &mut cmd, 1)
    }
}

/// A throwaway Go HTTPS server (tests/servers/go_tls_server.go, built here): crypto/tls,
/// no OpenSSL at all, so hstrace sees it from the wire only. Tickets resume; there is no
/// session-id cache.
pub struct GoServer;

impl GoServer {
    pub fn start(name: &str) -> TestServer {
        let dir = work_dir(name);
        let exe = dir.join("go_tls_server");
        // Go from PATH, or where the Go project's tarball puts it
        let go = ["go", "/usr/local/go/bin/go"]
            .into_iter()
            .find(|g| Command::new(g).arg("version").output().is_ok())
            .expect("no Go toolchain: `cargo xtask setup` installs Debian's golang-go");
        let st = Command::new(go)
            .args(["build", "-o"])
            .arg(&exe)
            .arg(workspace().join("tests/servers/go_tls_server.go"))
            .env("GOCACHE", workspace().join("target/go-cache"))
            .env("GOFLAGS", "-buildvcs=false")
            .status()
            .expect("go build");
        assert!(st.success(), "building the Go TLS server failed");
        let (cert, key) = make_cert(&dir, 2048);
        let (port, plain_port) = (free_port(), free_port());
        let mut cmd = Command::new(&exe);
        server_args(&mut cmd, &dir, port, plain_port, &cert, &key);
        TestServer::spawn(Software::Go, dir, port, plain_port, &mut cmd, 1)
    }
}

/// The arguments of the project's own test servers: TLS_PORT PLAIN_PORT CERT KEY LOG.
fn server_args(cmd: &mut Command, dir: &Path, port: u16, plain: u16, cert: &Path, key: &Path) {
    cmd.arg(port.to_string())
        .arg(plain.to_string())
        .arg(cert)
        .arg(key)
        .arg(dir.join("access.log"));
}

/// A throwaway Apache httpd (event MPM, mod_ssl): one child process with worker threads,
/// shared session cache and tickets on.
pub struct Apache;

impl Apache {
    /// The event MPM: one child process with 8 worker threads.
    pub fn start(name: &str) -> TestServer {
        let mpm = "LoadModule mpm_event_module {m}/mod_mpm_event.so
StartServers 1
ServerLimit 1
ThreadsPerChild 8
MaxRequestWorkers 8";
        Apache::start_with_mpm(name, mpm, 1)
    }

    /// The prefork MPM: `children` single-threaded child processes, each serving one
    /// connection at a time, as many as it keeps spare.
    pub fn start_prefork(name: &str, children: u32) -> TestServer {
        let mpm = format!(
            "LoadModule mpm_prefork_module {{m}}/mod_mpm_prefork.so
StartServers {children}
MinSpareServers {children}
MaxSpareServers {children}
ServerLimit {children}
MaxRequestWorkers {children}"
        );
        Apache::start_with_mpm(name, &mpm, children as usize)
    }

    /// `mpm`: its LoadModule line (`{m}` is the modules directory) and its settings.
    fn start_with_mpm(name: &str, mpm: &str, children: usize) -> TestServer {
        let dir = work_dir(name);
        let (cert, key) = make_cert(&dir, 2048);
        let (port, plain_port) = (free_port(), free_port());
        let www = dir.join("www");
        fs::create_dir_all(&www).unwrap();
        fs::write(www.join("index.html"), "ok\n").unwrap();
        // the workers run as www-data: let them read the document root
        let _ = Command::new("chmod")
            .args(["-R", "a+rX"])
            .arg(&dir)
            .status();
        let d = dir.display();
        let m = "/usr/lib/apache2/modules";
        let conf = format!(
            r#"ServerName demo.test
DefaultRuntimeDir {d}
PidFile {d}/httpd.pid
ErrorLog {d}/error.log
LogLevel info
User www-data
Group www-data
Listen 127.0.0.1:{port}
Listen 127.0.0.1:{plain_port}
{mpm}
LoadModule authz_core_module {m}/mod_authz_core.so
LoadModule socache_shmcb_module {m}/mod_socache_shmcb.so
LoadModule ssl_module {m}/mod_ssl.so
LogFormat "%{{remote}}p %{{SSL_PROTOCOL}}x %{{SSL_SESSION_RESUMED}}x %D" hs
CustomLog {d}/access.log hs
DocumentRoot {d}/www
<Directory {d}/www>
    Require all granted
</Directory>
SSLSessionCache shmcb:{d}/ssl_scache(512000)
SSLSessionTickets on
SSLProtocol -all +TLSv1.2 +TLSv1.3
<VirtualHost 127.0.0.1:{port}>
    SSLEngine on
    SSLCertificateFile {cert}
    SSLCertificateKeyFile {key}
</VirtualHost>
"#,
            cert = cert.display(),
            key = key.display(),
            mpm = mpm.replace("{m}", m),
        );
        fs::write(dir.join("httpd.conf"), conf).unwrap();
        let mut cmd = Command::new("apache2");
        cmd.arg("-f")
            .arg(dir.join("httpd.conf"))
            .arg("-DFOREGROUND");
        TestServer::spawn(Software::Apache, dir, port, plain_port, &mut cmd, children)
    }
}

/// A blocking TLS server with OpenSSL linked in statically (tests/servers), so the
/// executable itself exports SSL_do_handshake. Built with the system cc and libssl-dev.
pub struct StaticTlsServer {
    pub port: u16,
    child: Child,
}

impl StaticTlsServer {
    pub fn start(name: &str) -> StaticTlsServer {
        let dir = work_dir(name);
        let exe = dir.join("static_tls_server");
        let st = Command::new("cc")
            .arg("-O2")
            .arg(workspace().join("tests/servers/static_tls_server.c"))
            .arg("-o")
            .arg(&exe)
            .args([
                "-Wl,-Bstatic",
                "-lssl",
                "-lcrypto",
                "-Wl,-Bdynamic",
                "-ldl",
                "-lpthread",
            ])
            .status()
            .expect("cc");
        assert!(
            st.success(),
            "building the static TLS server failed (needs libssl-dev)"
        );
        let (cert, key) = make_cert(&dir, 2048);
        let port = free_port();
        let child = Command::new(&exe)
            .arg(port.to_string())
            .arg(&cert)
            .arg(&key)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        wait_for("the static TLS server", Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        StaticTlsServer { port, child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for StaticTlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Direct children of `pid`.
pub fn children(pid: u32) -> BTreeSet<u32> {
    let mut out = BTreeSet::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.insert(p);
        }
    }
    out
}

/// The real hstrace binary, running `trace --format json ARGS`.
pub struct Hstrace {
    child: Child,
    stdout: thread::JoinHandle<Vec<String>>,
    stderr: mpsc::Receiver<String>,
    stderr_seen: Vec<String>,
}

pub struct Traced {
    /// one "connection" record per connection
    pub records: Vec<Value>,
    /// one "close" record per connection, with its totals
    pub closes: Vec<Value>,
    pub stderr: String,
    /// the exit totals' JSON line (`{"record": "health", …}`), Null if none was printed
    pub health: Value,
    pub success: bool,
}

impl Hstrace {
    /// Start and wait until it says it is tracing.
    pub fn start(args: &[&str]) -> Hstrace {
        let mut cmd = Command::new(hstrace_bin());
        cmd.args(["trace", "--format", "json"]).args(args);
        Hstrace::start_command(cmd)
    }

    /// The same, started by `cmd` (e.g. under `setpriv`), which must run
    /// `hstrace trace --format json …` in the end.
    pub fn start_command(mut cmd: Command) -> Hstrace {
        cmd.stdout(Stdio::piped());
        let (mut child, stderr, stderr_seen) = spawn_until_ready(&mut cmd, "hstrace: tracing");
        let out = child.stdout.take().unwrap();
        let stdout =
            thread::spawn(move || BufReader::new(out).lines().map_while(Result::ok).collect());
        Hstrace {
            child,
            stdout,
            stderr,
            stderr_seen,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ctrl-C, then every record it printed and what it said at exit.
    pub fn stop(mut self) -> Traced {
        // let the last connections' TCP close reach the kernel side
        thread::sleep(Duration::from_millis(500));
        // SAFETY: plain kill(2) on our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().unwrap();
        let lines = self.stdout.join().unwrap();
        self.stderr_seen.extend(self.stderr.iter());
        let (closes, records) = lines
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))
            })
            .partition(|r| r["record"] == "close");
        let health = self
            .stderr_seen
            .iter()
            .find(|l| l.starts_with("{\"record\":\"health\""))
            .map(|l| serde_json::from_str(l).expect("the health line is JSON"))
            .unwrap_or(Value::Null);
        Traced {
            records,
            closes,
            stderr: self.stderr_seen.join("\n"),
            health,
            success: status.success(),
        }
    }
}

/// Spawn `cmd` (hstrace) with stderr read on a thread, and wait until a line contains
/// `ready`: the child, the rest of its stderr, and the lines seen so far.
pub fn spawn_until_ready(
    cmd: &mut Command,
    ready: &str,
) -> (Child, mpsc::Receiver<String>, Vec<String>) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hstrace binary");
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let start = Instant::now();
    let failure = loop {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(line) => {
                let done = line.contains(ready);
                seen.push(line);
                if done {
                    return (child, rx, seen);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                break format!("hstrace exited before {ready:?}");
            }
        }
        if start.elapsed() >= Duration::from_secs(30) {
            break format!("hstrace did not say {ready:?}");
        }
    };
    // not left running (still attached) into the next test
    let _ = child.kill();
    let _ = child.wait();
    panic!("{failure}:\n{}", seen.join("\n"))
}

/// Run hstrace to completion, no input: its exit status and output.
pub fn hstrace_output(args: &[&str]) -> std::process::Output {
    Command::new(hstrace_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Run hstrace to completion (for argument and error checks).
pub fn hstrace_run(args: &[&str]) -> (bool, String) {
    let out = hstrace_output(args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `openssl s_client` to 127.0.0.1:port with SNI demo.test and ALPN http/1.1, sending one
/// HTTP/1.0 request and waiting for the server to close (so TLS 1.3 tickets are read).
pub fn s_client(port: u16, args: &[&str]) -> String {
    let mut child = s_client_child(port, args);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"GET / HTTP/1.0\r\nHost: demo.test\r\n\r\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `openssl s_client` to 127.0.0.1:port (SNI demo.test, ALPN http/1.1, `ARGS`), its stdin
/// and output piped: it waits on stdin until it is written to or closed.
pub fn s_client_child(port: u16, args: &[&str]) -> Child {
    Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-servername",
            "demo.test",
        ])
        .args(["-alpn", "http/1.1", "-ign_eof"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl")
}

/// curl fetching `urls` over one keep-alive connection (-k: the certificate is self-signed).
pub fn curl(args: &[&str], urls: &[String]) -> String {
    let out = Command::new("curl")
        .args(["-sk", "--http1.1"])
        .args(args)
        .args(urls)
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl {urls:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The accounting of a `health` line (trace's exit totals): every accepted connection is
/// reported, in progress or lost with its cause counted; every tracked one's close line is
/// reported, still to come or lost with its cause; and (`closed`: every connection has
/// closed) every per-connection table in the kernel is empty again.
pub fn assert_accounted(h: &Value, closed: bool) {
    let n = |path: &[&str]| {
        path.iter()
            .fold(h, |v, k| &v[*k])
            .as_u64()
            .unwrap_or_else(|| panic!("no {path:?} in {h}"))
    };
    assert_eq!(
        n(&["accepted"]),
        n(&["reported"])
            + n(&["in_progress"])
            + n(&["lost", "ring_buffer_full"])
            + n(&["lost", "state_evicted"])
            + n(&["lost", "table_full"])
            + n(&["accepted_without_socket"]),
        "accepted = reported + in progress + lost: {h}"
    );
    assert_eq!(
        n(&["tracked"]),
        n(&["closes"])
            + n(&["open"])
            + n(&["lost", "close_ring_buffer_full"])
            + n(&["lost", "close_evicted"]),
        "tracked = close lines + open + lost: {h}"
    );
    if closed {
        assert_eq!(n(&["open"]), 0, "{h}");
        for (table, entries) in h["tables"].as_object().expect("table entries at exit") {
            assert_eq!(entries.as_u64(), Some(0), "entries left in {table}: {h}");
        }
    }
}

/// What `drive_mix` made: connections by kind.
pub struct Mix {
    pub full: u64,
    pub resumed: u64,
    pub plain: u64,
    pub failed: u64,
}

impl Mix {
    pub fn tls(&self) -> u64 {
        self.full + self.resumed
    }
}

/// Full and resumed TLS 1.2 (session id, ticket) and 1.3 (PSK) handshakes, plain HTTP,
/// and two failures, each on its own connection (`rounds` times the first three; the
/// session files go to the server's directory).
pub fn drive_mix(server: &TestServer, rounds: u32) -> Mix {
    let port = server.port;
    let sess = |f: &str| server.dir.join(f).display().to_string();
    let mut mix = Mix {
        full: 0,
        resumed: 0,
        plain: 0,
        failed: 0,
    };
    for i in 0..rounds {
        for (j, (base, extra)) in [
            (&["-tls1_3"][..], &[][..]),
            (&["-tls1_2"][..], &["-no_ticket"][..]),
            (&["-tls1_2"][..], &[][..]),
        ]
        .into_iter()
        .enumerate()
        {
            let file = sess(&format!("s{i}-{j}.sess"));
            let mut args: Vec<&str> = base.iter().chain(extra).copied().collect();
            let new = s_client(port, &[&args[..], &["-sess_out", &file]].concat());
            assert!(new.contains("New, TLS"), "{args:?}: {new}");
            args.extend(["-sess_in", &file]);
            let again = s_client(port, &args);
            assert!(again.contains("Reused, TLS"), "{args:?}: {again}");
            mix.full += 1;
            mix.resumed += 1;
        }
        curl(&[], &[format!("http://127.0.0.1:{}/", server.plain_port)]);
        mix.plain += 1;
    }
    // TLS 1.1 is refused with an alert; plain HTTP on the TLS port is not TLS
    assert!(!s_client(port, &["-tls1_1"]).contains("New, TLS"));
    raw_exchange(port, b"GET / HTTP/1.0\r\n\r\n");
    mix.failed += 2;
    mix
}

/// A parameters document without its `rate_per_s` fields.
pub fn without_rates(mut v: Value) -> Value {
    match &mut v {
        Value::Object(m) => {
            m.remove("rate_per_s");
            for x in m.values_mut() {
                *x = without_rates(x.take());
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                *x = without_rates(x.take());
            }
        }
        _ => {}
    }
    v
}

/// A process stopped (SIGSTOP) until this is dropped (SIGCONT): connections queue in its
/// accept queue meanwhile. Continued even when the test panics, or nginx's master would
/// wait for the stopped worker forever when the test's server is dropped.
pub struct Stopped(i32);

impl Stopped {
    pub fn new(pid: u32) -> Stopped {
        // SAFETY: plain kill(2) on a process the test started
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        Stopped(pid as i32)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// Make `s`'s close send a reset, not a FIN (SO_LINGER with a zero timeout).
pub fn reset_on_close(s: &TcpStream) -> std::io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket the caller owns, with a struct linger of the size given
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(s),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Connect, write `bytes`, read what comes back until close or 2 s, close.
pub fn raw_exchange(port: u16, bytes: &[u8]) -> Vec<u8> {
    dribble_exchange(port, bytes, bytes.len().max(1))
}

/// Connect and send `bytes` in pieces of `piece` bytes, each its own TCP segment, so the
/// server's reads see record headers and bodies cut anywhere; then read the answer until
/// close or 2 s, and close.
pub fn dribble_exchange(port: u16, bytes: &[u8], piece: usize) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    for chunk in bytes.chunks(piece) {
        s.write_all(chunk).unwrap();
        if chunk.len() < bytes.len() {
            thread::sleep(Duration::from_millis(2));
        }
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// A TCP proxy on 127.0.0.1 in front of `target` that holds the client's `flight`-th
/// flight (1: its first bytes; 2: its first bytes after the server's first answer; …)
/// for `delay` before passing it on: a known network delay on loopback, where there is
/// no netem. One connection at a time; it stops when dropped.
///
/// It also measures, as ground truth, how long the server waited on the wire for each
/// client flight after its first: from the proxy's read of the last bytes of the server's
/// previous flight to its write of the flight's first bytes to the server (delay
/// included). That is the server's wait for the client, less two loopback hops.
pub struct DelayProxy {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    waits: std::sync::Arc<std::sync::Mutex<Vec<(u32, Duration)>>>,
}

impl DelayProxy {
    pub fn start(target: u16, flight: u32, delay: Duration) -> DelayProxy {
        Self::spawn(target, flight, delay, false)
    }

    /// The same, passing on everything the client sent during the delay in one write: a
    /// TLS 1.3 client's Finished and its request then reach the server in one segment.
    pub fn merging(target: u16, flight: u32, delay: Duration) -> DelayProxy {
        Self::spawn(target, flight, delay, true)
    }

    fn spawn(target: u16, flight: u32, delay: Duration, merge: bool) -> DelayProxy {
        use std::sync::{
            atomic::{AtomicBool, AtomicU32, Ordering},
            Arc,
        };
        let (listener, port) = proxy_listener();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let waits = Arc::new(std::sync::Mutex::new(Vec::new()));
        let measured = waits.clone();
        thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                client.set_nodelay(true).unwrap();
                let server = TcpStream::connect(("127.0.0.1", target)).unwrap();
                server.set_nodelay(true).unwrap();
                // flights: odd while the client speaks, even while the server does
                let turn = Arc::new(AtomicU32::new(0));
                let last_down = Arc::new(std::sync::Mutex::new(None::<SystemTime>));
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (t, down, measured) = (turn.clone(), last_down.clone(), measured.clone());
                let up = thread::spawn(move || {
                    let mut buf = [0u8; 16384];
                    while let Ok(mut n) = c_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if t.load(Ordering::SeqCst) % 2 == 0 {
                            let f = t.fetch_add(1, Ordering::SeqCst) / 2 + 1;
                            if f == flight {
                                thread::sleep(delay);
                                if merge {
                                    c_in.set_nonblocking(true).unwrap();
                                    while let Ok(m) = c_in.read(&mut buf[n..]) {
                                        if m == 0 {
                                            break;
                                        }
                                        n += m;
                                    }
                                    c_in.set_nonblocking(false).unwrap();
                                }
                            }
                            if let Some(since) = *down.lock().unwrap() {
                                let wait = SystemTime::now().duration_since(since);
                                measured.lock().unwrap().push((f, wait.unwrap_or_default()));
                            }
                        }
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(std::net::Shutdown::Write);
                });
                let (s_in, mut c_out) = (server, client);
                stamp_reads(&s_in);
                let mut buf = [0u8; 16384];
                while let Ok((n, arrived)) = recv_stamped(&s_in, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    *last_down.lock().unwrap() = Some(arrived);
                    if turn.load(Ordering::SeqCst) % 2 == 1 {
                        turn.fetch_add(1, Ordering::SeqCst);
                    }
                    if c_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = c_out.shutdown(std::net::Shutdown::Write);
                let _ = up.join();
            }
        });
        DelayProxy { port, stop, waits }
    }

    /// The measured wait for the client's `flight`-th flight (2 or later) on the last
    /// connection that reached it.
    pub fn wait_for(&self, flight: u32) -> Option<Duration> {
        let waits = self.waits.lock().unwrap();
        waits
            .iter()
            .rev()
            .find(|(f, _)| *f == flight)
            .map(|(_, d)| *d)
    }
}

/// Asks the kernel to stamp every read from `s` with the receive time (SO_TIMESTAMPNS).
fn stamp_reads(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: a valid socket and an int option of the right size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &on as *const _ as *const libc::c_void,
            std::mem::size_of_val(&on) as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_TIMESTAMPNS: {}", std::io::Error::last_os_error());
}

/// One read from a socket set up by `stamp_reads`, with the kernel's receive time of the
/// last bytes read: on loopback, the moment the peer wrote them, however late this thread
/// is scheduled to read them.
fn recv_stamped(s: &TcpStream, buf: &mut [u8]) -> std::io::Result<(usize, SystemTime)> {
    use std::os::fd::AsRawFd;
    let fd = s.as_raw_fd();
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 16];
    // SAFETY: msghdr is plain data; every pointer in it outlives the call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: as above.
    let n = unsafe { libc::recvmsg(fd, &mut msg, 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut arrived = SystemTime::now();
    // SAFETY: the CMSG macros walk the control buffer the kernel just filled.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                arrived =
                    SystemTime::UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, arrived))
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A TCP proxy on 127.0.0.1 in front of `target` that passes everything through, except
/// that it cuts the body of the client's first record (its ClientHello) into records of
/// `piece` bytes each, sent in one write. Legal TLS: a real client's handshake completes
/// through it. Serves connections one after another until dropped.
pub struct ReframeProxy {
    pub port: u16,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    served: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ReframeProxy {
    pub fn start(target: u16, piece: usize) -> ReframeProxy {
        use std::sync::{
            atomic::{AtomicBool, AtomicUsize, Ordering},
            Arc,
        };
        let (listener, port) = proxy_listener();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let served = Arc::new(AtomicUsize::new(0));
        let counted = served.clone();
        thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                let Ok((client, _)) = listener.accept() else {
                    thread::sleep(Duration::from_millis(5));
                    continue;
                };
                Self::serve(client, target, piece);
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        ReframeProxy { port, stop, served }
    }

    /// Connections served and closed so far.
    pub fn served(&self) -> usize {
        self.served.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn serve(mut client: TcpStream, target: u16, piece: usize) {
        {
            client.set_nonblocking(false).unwrap();
            let mut server = TcpStream::connect(("127.0.0.1", target)).unwrap();
            let mut header = [0u8; 5];
            if client.read_exact(&mut header).is_err() {
                return;
            }
            let mut body = vec![0u8; u16::from_be_bytes([header[3], header[4]]) as usize];
            if client.read_exact(&mut body).is_err() {
                return;
            }
            let mut out = Vec::new();
            for chunk in body.chunks(piece.max(1)) {
                out.extend_from_slice(&header[..3]);
                out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
                out.extend_from_slice(chunk);
            }
            if server.write_all(&out).is_err() {
                return;
            }
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let up = thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut s_out);
                let _ = s_out.shutdown(std::net::Shutdown::Write);
            });
            let _ = std::io::copy(&mut server, &mut client);
            let _ = client.shutdown(std::net::Shutdown::Write);
            let _ = up.join();
        }
    }
}

impl Drop for ReframeProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A real captured ClientHello (handshake message) wrapped in a TLS record.
pub fn client_hello_record(fixture: &str) -> Vec<u8> {
    let path = workspace()
        .join("userspace/tests/fixtures/hello")
        .join(fixture);
    let hex: String = fs::read_to_string(&path)
        .unwrap()
        .split_whitespace()
        .collect();
    let msg: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let mut rec = vec![22, 3, 1, (msg.len() >> 8) as u8, msg.len() as u8];
    rec.extend_from_slice(&msg);
    rec
}

pub fn str_field<'a>(r: &'a Value, k: &str) -> Option<&'a str> {
    r.get(k).and_then(Value::as_str)
}

/// A test proxy's listener on a free loopback port, non-blocking so its accept loop can
/// see that it was stopped.
fn proxy_listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// Each of `stages` is in the record's `stages_ns` (`what` names the record on failure).
pub fn assert_has_stages(r: &Value, stages: &[&str], what: &str) {
    let have = r["stages_ns"].as_object().expect("stages_ns");
    for s in stages {
        assert!(have.contains_key(*s), "no {s}: {what}");
    }
}

/// Every stage present is >= 0, and the stages between accept and the end of the
/// handshake add up to handshake_ns (within 1 ms). accept_queue lies before accept() and
/// the request stages after the handshake, so they are not part of it.
pub fn check_stages(r: &Value) {
    let stages = r["stages_ns"]
        .as_object()
        .unwrap_or_else(|| panic!("no stages_ns: {r}"));
    let mut inside = 0u64;
    for (k, v) in stages {
        let v = v
            .as_u64()
            .unwrap_or_else(|| panic!("stage {k} is not a non-negative integer: {r}"));
        if !["accept_queue", "wait_request", "request_queue", "response"].contains(&k.as_str()) {
            inside += v;
        }
    }
    if let Some(hs) = r["handshake_ns"].as_u64() {
        assert!(hs > 0, "handshake_ns 0: {r}");
        assert!(
            inside <= hs + 1_000_000,
            "handshake stages {inside} > handshake_ns {hs} + 1 ms: {r}"
        );
        assert!(
            inside + 1_000_000 >= hs,
            "handshake stages {inside} leave more than 1 ms of handshake_ns {hs} unaccounted: {r}"
        );
    }
}

/// `openssl s_time -new` against `port` for `secs` seconds: its own count of the
/// connections it made.
pub fn s_time(port: u16, secs: u32) -> u64 {
    let out = Command::new("openssl")
        .args([
            "s_time",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-new",
            "-time",
            &secs.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "s_time: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("connections in") && l.contains("real seconds"));
    line.and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no connection count from s_time:\n{text}"))
}
