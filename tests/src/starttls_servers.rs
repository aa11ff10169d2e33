//! Throwaway servers from Debian's packages that speak TLS after a plaintext preamble, each
//! with its files under target/hstrace-tests/NAME (PostgreSQL's data, Postfix's and
//! Dovecot's configuration; Postfix's queue and log must live under /var), stopped on
//! drop: PostgreSQL with `ssl = on` (SSLRequest), Postfix's smtpd with STARTTLS, Dovecot's
//! IMAP and POP3 with STARTTLS. Their own logs say what each connection negotiated.

use std::{
    fs,
    io::{Read, Write},
    net::TcpStream,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::Duration,
};

use crate::{
    fixtures::make_cert,
    util::{free_port, run_ok, wait_for, wait_listening, work_dir},
};

fn chown(path: &Path, user: &str) {
    run_ok(Command::new("chown").arg("-R").arg(user).arg(path));
}

/// PostgreSQL (Debian's, the newest installed) with `ssl = on`, trusting every local user.
pub struct Postgres {
    pub dir: PathBuf,
    pub port: u16,
    bin: PathBuf,
}

impl Postgres {
    pub fn start(name: &str) -> Postgres {
        let dir = work_dir(name);
        let bin = fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL is installed (cargo xtask test installs it)")
            .filter_map(|e| Some(e.ok()?.path().join("bin")))
            .filter(|b| b.join("initdb").exists())
            .max()
            .expect("a PostgreSQL with initdb under /usr/lib/postgresql");
        // the postgres user reaches its files: the test tree is root's
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        make_cert(&dir, 2048);
        chown(&dir, "postgres");
        fs::set_permissions(dir.join("key.pem"), fs::Permissions::from_mode(0o600)).unwrap();
        let data = dir.join("data");
        run_ok(
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(bin.join("initdb"))
                .args(["-A", "trust", "-U", "postgres", "-D"])
                .arg(&data),
        );
        let port = free_port();
        let d = dir.display();
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .unwrap();
        write!(
            conf,
            "\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{d}'\n\
             ssl = on\nssl_cert_file = '{d}/cert.pem'\nssl_key_file = '{d}/key.pem'\n\
             log_connections = on\n"
        )
        .unwrap();
        fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        let pg = Postgres { dir, port, bin };
        run_ok(
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(pg.bin.join("pg_ctl"))
                .args(["-w", "-D"])
                .arg(&data)
                .arg("-l")
                .arg(pg.dir.join("server.log"))
                .arg("start"),
        );
        wait_listening("PostgreSQL", port, Duration::from_secs(30));
        pg
    }

    /// The postmaster: it accepts every connection and forks a backend for each.
    pub fn postmaster_pid(&self) -> u32 {
        let pid = fs::read_to_string(self.dir.join("data/postmaster.pid")).unwrap();
        pid.lines().next().unwrap().trim().parse().unwrap()
    }

    /// `psql` over TCP with `sslmode`, running one query: its output and whether it
    /// succeeded.
    pub fn psql(&self, sslmode: &str) -> (bool, String) {
        let out = Command::new("psql")
            .arg(format!(
                "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode={sslmode}",
                self.port
            ))
            .args([
                "-A",
                "-t",
                "-c",
                "select ssl from pg_stat_ssl where pid = pg_backend_pid()",
            ])
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

    /// Turn TLS on or off without a restart (ssl is reloadable): off, the server answers
    /// an SSLRequest with 'N'.
    pub fn set_ssl(&self, on: bool) {
        let sql = format!("alter system set ssl = {}", if on { "on" } else { "off" });
        run_ok(
            Command::new("runuser")
                .args(["-u", "postgres", "--", "psql", "-h"])
                .arg(&self.dir)
                .arg("-p")
                .arg(self.port.to_string())
                .args(["-q", "-c", &sql, "-c", "select pg_reload_conf()"]),
        );
        // the reload reaches the postmaster's children for new connections at once
        thread::sleep(Duration::from_millis(300));
    }

    /// The server's own log.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-m", "immediate", "-D"])
            .arg(self.dir.join("data"))
            .arg("stop")
            .output();
    }
}

/// Postfix's smtpd on two ports of its own: `port` offers STARTTLS, `port_no_tls` does not
/// (its STARTTLS is refused). Its queue and log under /var (Postfix's rule).
pub struct Postfix {
    pub conf: PathBuf,
    pub port: u16,
    pub port_no_tls: u16,
    pub log: PathBuf,
    queue: PathBuf,
}

impl Postfix {
    pub fn start(name: &str) -> Postfix {
        let dir = work_dir(name);
        make_cert(&dir, 2048);
        let (port, port_no_tls) = (free_port(), free_port());
        let queue = PathBuf::from(format!("/var/spool/hstrace-{name}"));
        let data = PathBuf::from(format!("/var/lib/hstrace-{name}"));
        let log = PathBuf::from(format!("/var/log/hstrace-{name}.log"));
        let _ = fs::remove_dir_all(&queue);
        let _ = fs::remove_file(&log);
        fs::create_dir_all(&queue).unwrap();
        fs::create_dir_all(&data).unwrap();
        chown(&data, "postfix");
        let conf = dir.join("postfix");
        fs::create_dir_all(&conf).unwrap();
        let d = dir.display();
        fs::write(
            conf.join("main.cf"),
            format!(
                "compatibility_level = 3.6\nqueue_directory = {q}\ndata_directory = {data}\n\
                 command_directory = /usr/sbin\ndaemon_directory = /usr/lib/postfix/sbin\n\
                 mail_owner = postfix\nsetgid_group = postdrop\ninet_interfaces = 127.0.0.1\n\
                 inet_protocols = ipv4\nmyhostname = mail.test\nmydestination = mail.test\n\
                 mynetworks = 127.0.0.0/8\nmaillog_file = {log}\nsmtpd_tls_cert_file = {d}/cert.pem\n\
                 smtpd_tls_key_file = {d}/key.pem\nsmtpd_tls_security_level = may\n\
                 smtpd_tls_loglevel = 1\nmulti_instance_name = hstrace-{name}\n\
                 smtpd_banner = $myhostname ESMTP\nbiff = no\n",
                q = queue.display(),
                data = data.display(),
                log = log.display(),
            ),
        )
        .unwrap();
        // Debian's services, the smtp listener moved to our ports
        let master = fs::read_to_string("/etc/postfix/master.cf")
            .expect("Postfix is installed (cargo xtask test installs it)");
        let mut lines: Vec<String> = master
            .lines()
            .filter(|l| !l.starts_with("smtp      inet"))
            .map(str::to_string)
            .collect();
        lines.push(format!("{port} inet n - n - - smtpd"));
        lines.push(format!(
            "{port_no_tls} inet n - n - - smtpd -o smtpd_tls_security_level=none"
        ));
        fs::write(conf.join("master.cf"), lines.join("\n") + "\n").unwrap();
        let pf = Postfix {
            conf,
            port,
            port_no_tls,
            log,
            queue,
        };
        run_ok(Command::new("postfix").arg("-c").arg(&pf.conf).arg("check"));
        let st = Command::new("postfix")
            .arg("-c")
            .arg(&pf.conf)
            .arg("start")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(
            st.success(),
            "postfix did not start: see {}",
            pf.log.display()
        );
        wait_listening("Postfix", port, Duration::from_secs(30));
        pf
    }

    /// Postfix's master (it listens; smtpd processes it starts accept).
    pub fn master_pid(&self) -> u32 {
        fs::read_to_string(self.queue.join("pid/master.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Postfix {
    fn drop(&mut self) {
        let _ = Command::new("postfix")
            .arg("-c")
            .arg(&self.conf)
            .arg("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = fs::remove_dir_all(&self.queue);
    }
}

/// Dovecot's IMAP and POP3 with STARTTLS (`imap_port`, `pop3_port`), or without TLS at all
/// (a STARTTLS is then refused with BAD), any password accepted.
pub struct Dovecot {
    pub dir: PathBuf,
    pub imap_port: u16,
    pub pop3_port: u16,
}

impl Dovecot {
    pub fn start(name: &str, tls: bool) -> Dovecot {
        let dir = work_dir(name);
        make_cert(&dir, 2048);
        let (imap_port, pop3_port) = (free_port(), free_port());
        let d = dir.display();
        fs::create_dir_all(dir.join("run")).unwrap();
        fs::create_dir_all(dir.join("state")).unwrap();
        fs::write(
            dir.join("dovecot.conf"),
            format!(
                "protocols = imap pop3\nlisten = 127.0.0.1\nbase_dir = {d}/run\n\
                 state_dir = {d}/state\nlog_path = {d}/dovecot.log\nssl = {ssl}\n\
                 ssl_cert = <{d}/cert.pem\nssl_key = <{d}/key.pem\n\
                 disable_plaintext_auth = no\nauth_mechanisms = plain\n\
                 passdb {{\n  driver = static\n  args = password=pass\n}}\n\
                 userdb {{\n  driver = static\n  args = uid=nobody gid=nogroup home={d}/home/%u\n}}\n\
                 mail_location = maildir:{d}/home/%u/Maildir\n\
                 service imap-login {{\n  inet_listener imap {{\n    address = 127.0.0.1\n    port = {imap_port}\n  }}\n  \
                 inet_listener imaps {{\n    port = 0\n  }}\n}}\n\
                 service pop3-login {{\n  inet_listener pop3 {{\n    address = 127.0.0.1\n    port = {pop3_port}\n  }}\n  \
                 inet_listener pop3s {{\n    port = 0\n  }}\n}}\n",
                ssl = if tls { "yes" } else { "no" },
            ),
        )
        .unwrap();
        // (it forks a daemon that would hold piped output open: its own log says it all)
        let st = Command::new("dovecot")
            .arg("-c")
            .arg(dir.join("dovecot.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("dovecot is installed (cargo xtask test installs it)");
        assert!(
            st.success(),
            "dovecot did not start: see {}",
            dir.join("dovecot.log").display()
        );
        wait_listening("Dovecot", imap_port, Duration::from_secs(30));
        wait_for("Dovecot's master.pid", Duration::from_secs(30), || {
            dir.join("run/master.pid").exists()
        });
        Dovecot {
            dir,
            imap_port,
            pop3_port,
        }
    }

    pub fn master_pid(&self) -> u32 {
        fs::read_to_string(self.dir.join("run/master.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("dovecot.log")).unwrap_or_default()
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        let _ = Command::new("doveadm")
            .arg("-c")
            .arg(self.dir.join("dovecot.conf"))
            .arg("stop")
            .output();
    }
}

/// `openssl s_client -starttls PROTOCOL` to 127.0.0.1:`port` with `args`, sending `lines`
/// once TLS is up (the connection's own protocol, e.g. "QUIT"), then waiting for the
/// server to close: what it printed.
pub fn starttls_client(protocol: &str, port: u16, args: &[&str], lines: &str) -> String {
    let mut child = Command::new("openssl")
        .args(["s_client", "-starttls", protocol, "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .args(["-ign_eof", "-servername", "mail.test"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl");
    let mut stdin = child.stdin.take().unwrap();
    let lines = lines.to_string();
    let writer = thread::spawn(move || {
        // after the handshake: s_client reads its stdin only once TLS is up
        thread::sleep(Duration::from_millis(300));
        let _ = stdin.write_all(lines.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A plaintext conversation with the server at 127.0.0.1:`port`: read its banner (when
/// `banner`), then for each line send it and read the answer. The answers.
pub fn plain_conversation(port: u16, banner: bool, lines: &[&str]) -> Vec<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answers = Vec::new();
    let read = |s: &mut TcpStream| {
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    if banner {
        answers.push(read(&mut s));
    }
    for line in lines {
        s.write_all(line.as_bytes()).unwrap();
        answers.push(read(&mut s));
    }
    answers
}
