//! Throwaway servers on 127.0.0.1, each with its files under target/hstrace-tests/NAME and
//! stopped on drop: nginx, Apache httpd, HAProxy (Debian's), the project's Node.js and Go
//! servers (tests/servers), and the C server with OpenSSL linked in statically.

use std::{
    collections::BTreeSet,
    ffi::OsString,
    fs,
    net::TcpStream,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::{
    fixtures::make_cert,
    procs::children,
    util::{free_port, wait_for, wait_listening, work_dir, workspace},
};

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
            Command::new("nginx").args(nginx_args(&dir)),
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
        wait_listening("the server to listen", port, Duration::from_secs(10));
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

/// A throwaway nginx's files, written but not started (`Nginx::files`): for a test that
/// starts it its own way, e.g. in a container.
pub struct NginxFiles {
    pub dir: PathBuf,
    /// the TLS port
    pub port: u16,
    /// a plain-HTTP port on the same server
    pub plain_port: u16,
}

impl NginxFiles {
    /// nginx's arguments: in the foreground, with these files.
    pub fn args(&self) -> Vec<OsString> {
        nginx_args(&self.dir)
    }
}

/// The arguments of the nginx whose files are in `dir`.
fn nginx_args(dir: &Path) -> Vec<OsString> {
    vec![
        "-p".into(),
        dir.into(),
        "-c".into(),
        dir.join("nginx.conf").into(),
        "-e".into(),
        dir.join("error.log").into(),
    ]
}

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
        let files = Nginx::files(name, workers, rsa_bits, tls_extra);
        let mut cmd = Command::new("nginx");
        cmd.args(files.args());
        Nginx::spawn(files, &mut cmd, workers)
    }

    /// Started by `wrapper`, a command that ends by exec'ing its arguments (`nginx` and
    /// nginx's) in the same process, e.g. `unshare --mount`: that process is the master.
    pub fn start_under(name: &str, workers: u32, wrapper: &[&str]) -> TestServer {
        let files = Nginx::files(name, workers, 2048, "");
        let mut cmd = Command::new(wrapper[0]);
        cmd.args(&wrapper[1..]).arg("nginx").args(files.args());
        Nginx::spawn(files, &mut cmd, workers)
    }

    /// `cmd` (which runs nginx with `files`' arguments) started as a test server.
    fn spawn(files: NginxFiles, cmd: &mut Command, workers: u32) -> TestServer {
        TestServer::spawn(
            Software::Nginx,
            files.dir,
            files.port,
            files.plain_port,
            cmd,
            workers as usize,
        )
    }

    /// The files of `start_with`'s nginx, not started.
    pub fn files(name: &str, workers: u32, rsa_bits: u32, tls_extra: &str) -> NginxFiles {
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
        NginxFiles {
            dir,
            port,
            plain_port,
        }
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
        Apache::start_with_mpm(name, mpm, 1, 2048)
    }

    /// The prefork MPM: `children` single-threaded child processes, each serving one
    /// connection at a time, as many as it keeps spare.
    pub fn start_prefork(name: &str, children: u32) -> TestServer {
        Apache::start_prefork_with_key(name, children, 2048)
    }

    /// The same with an RSA certificate of `rsa_bits`.
    pub fn start_prefork_with_key(name: &str, children: u32, rsa_bits: u32) -> TestServer {
        let mpm = format!(
            "LoadModule mpm_prefork_module {{m}}/mod_mpm_prefork.so
StartServers {children}
MinSpareServers {children}
MaxSpareServers {children}
ServerLimit {children}
MaxRequestWorkers {children}"
        );
        Apache::start_with_mpm(name, &mpm, children as usize, rsa_bits)
    }

    /// `mpm`: its LoadModule line (`{m}` is the modules directory) and its settings.
    fn start_with_mpm(name: &str, mpm: &str, children: usize, rsa_bits: u32) -> TestServer {
        let dir = work_dir(name);
        let (cert, key) = make_cert(&dir, rsa_bits);
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
LoadModule dir_module {m}/mod_dir.so
DirectoryIndex index.html
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
        wait_listening("the static TLS server", port, Duration::from_secs(10));
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
