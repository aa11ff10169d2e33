//! Throwaway servers from Debian's packages whose TLS sits off the common path, each with
//! its files under target/hstrace-tests/NAME, stopped on drop: Mosquitto (MQTT over TLS:
//! one `SSL_accept`, the handshake finished inside `SSL_read`), MariaDB (TLS after its
//! greeting; a plaintext error packet after a client's alert) and vsftpd (explicit TLS
//! with AUTH TLS, a child forked per connection). Their own logs say what each connection
//! did.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::Duration,
};

use crate::{
    fixtures::make_cert,
    util::{free_port, run_ok, wait_for, wait_listening, work_dir},
};

/// Whether a client succeeded, and what it printed (stdout, then stderr).
fn succeeded_and_said(out: &Output) -> (bool, String) {
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// `path` and what is under it belong to `user` (the server drops to it).
fn chown(path: &Path, user: &str) {
    run_ok(Command::new("chown").arg("-R").arg(user).arg(path));
}

/// The server's pid from its pid file.
fn read_pid(file: &Path) -> u32 {
    wait_for(
        &format!("{}", file.display()),
        Duration::from_secs(30),
        || fs::read_to_string(file).is_ok_and(|s| s.trim().parse::<u32>().is_ok()),
    );
    fs::read_to_string(file).unwrap().trim().parse().unwrap()
}

fn kill(pid: u32) {
    // SAFETY: plain kill(2) on a process the test started
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
}

/// Mosquitto with a TLS listener, logging every connection.
pub struct Mosquitto {
    pub dir: PathBuf,
    pub port: u16,
    pid: u32,
}

impl Mosquitto {
    pub fn start(name: &str) -> Mosquitto {
        let dir = work_dir(name);
        make_cert(&dir, 2048);
        let port = free_port();
        let d = dir.display();
        fs::write(
            dir.join("mosquitto.conf"),
            format!(
                "listener {port} 127.0.0.1\ncertfile {d}/cert.pem\nkeyfile {d}/key.pem\n\
                 allow_anonymous true\nlog_dest file {d}/mosquitto.log\nlog_type all\n\
                 connection_messages true\npid_file {d}/mosquitto.pid\n"
            ),
        )
        .unwrap();
        // it drops to the mosquitto user before it writes its log and pid file
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        chown(&dir, "mosquitto");
        run_ok(
            Command::new("mosquitto")
                .arg("-c")
                .arg(dir.join("mosquitto.conf"))
                .arg("-d"),
        );
        wait_listening("Mosquitto", port, Duration::from_secs(30));
        let pid = read_pid(&dir.join("mosquitto.pid"));
        Mosquitto { dir, port, pid }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `mosquitto_pub` over TLS to `port` (the broker's, or a proxy's in front of it),
    /// publishing one message: whether it succeeded, and what it printed.
    pub fn publish(&self, port: u16) -> (bool, String) {
        let out = Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-d"])
            .arg("--cafile")
            .arg(self.dir.join("cert.pem"))
            .args(["--insecure", "-t", "hstrace/test", "-m", "hello"])
            .output()
            .expect("mosquitto_pub (mosquitto-clients)");
        succeeded_and_said(&out)
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("mosquitto.log")).unwrap_or_default()
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        kill(self.pid);
    }
}

/// MariaDB (Debian's) with TLS, its data in a fresh directory, root without a password.
pub struct Mariadb {
    pub dir: PathBuf,
    pub port: u16,
    child: Child,
}

impl Mariadb {
    pub fn start(name: &str) -> Mariadb {
        let dir = work_dir(name);
        make_cert(&dir, 2048);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        let data = dir.join("data");
        chown(&dir, "mysql");
        run_ok(
            Command::new("mariadb-install-db")
                .args([
                    "--no-defaults",
                    "--user=mysql",
                    "--auth-root-authentication-method=normal",
                ])
                .arg(format!("--datadir={}", data.display())),
        );
        let port = free_port();
        let d = dir.display();
        fs::write(
            dir.join("my.cnf"),
            format!(
                "[mariadbd]\ndatadir={d}/data\nport={port}\nbind-address=127.0.0.1\n\
                 socket={d}/mysqld.sock\npid-file={d}/mysqld.pid\nlog-error={d}/error.log\n\
                 ssl-cert={d}/cert.pem\nssl-key={d}/key.pem\nuser=mysql\nlog_warnings=4\n"
            ),
        )
        .unwrap();
        let child = Command::new("mariadbd")
            .arg(format!("--defaults-file={d}/my.cnf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd (mariadb-server)");
        wait_listening("MariaDB", port, Duration::from_secs(60));
        Mariadb { dir, port, child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The `mariadb` client over TLS, asking the server which TLS version the session
    /// has: (succeeded, the version it printed or what went wrong).
    pub fn query_tls_version(&self) -> (bool, String) {
        let out = Command::new("mariadb")
            .args([
                "-h",
                "127.0.0.1",
                "-P",
                &self.port.to_string(),
                "-u",
                "root",
                "--ssl",
            ])
            .args(["-N", "-B", "-e", "show status like 'Ssl_version'"])
            .output()
            .expect("mariadb (mariadb-client)");
        succeeded_and_said(&out)
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("error.log")).unwrap_or_default()
    }
}

impl Drop for Mariadb {
    fn drop(&mut self) {
        kill(self.child.id());
        let _ = self.child.wait();
    }
}

/// vsftpd standalone on its own port, explicit TLS (AUTH TLS) allowed, anonymous logins,
/// a child forked for each connection.
pub struct Vsftpd {
    pub dir: PathBuf,
    pub port: u16,
    child: Child,
}

impl Vsftpd {
    pub fn start(name: &str) -> Vsftpd {
        let dir = work_dir(name);
        make_cert(&dir, 2048);
        let port = free_port();
        let d = dir.display();
        // its secure_chroot_dir must exist and not be writable by others
        fs::create_dir_all(dir.join("empty")).unwrap();
        fs::set_permissions(dir.join("empty"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(
            dir.join("vsftpd.conf"),
            format!(
                "listen=YES\nlisten_address=127.0.0.1\nlisten_port={port}\nbackground=NO\n\
                 anonymous_enable=YES\nlocal_enable=NO\nssl_enable=YES\nallow_anon_ssl=YES\n\
                 force_local_logins_ssl=NO\nforce_local_data_ssl=NO\nforce_anon_logins_ssl=NO\n\
                 force_anon_data_ssl=NO\nrsa_cert_file={d}/cert.pem\nrsa_private_key_file={d}/key.pem\n\
                 secure_chroot_dir={d}/empty\nanon_root={d}/empty\nvsftpd_log_file={d}/vsftpd.log\n\
                 xferlog_enable=YES\nlog_ftp_protocol=YES\ndebug_ssl=YES\nseccomp_sandbox=NO\n\
                 require_ssl_reuse=NO\n"
            ),
        )
        .unwrap();
        let child = Command::new("vsftpd")
            .arg(dir.join("vsftpd.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("vsftpd");
        wait_listening("vsftpd", port, Duration::from_secs(30));
        Vsftpd { dir, port, child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("vsftpd.log")).unwrap_or_default()
    }
}

impl Drop for Vsftpd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
