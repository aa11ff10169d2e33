//! Real clients and raw exchanges: openssl s_client and s_time, curl, bytes written to a
//! port as they are or a few at a time, a reset on close, and the mix of every kind of
//! connection.

use std::{
    io::{Read, Write},
    net::TcpStream,
    process::{Child, Command, Stdio},
    thread,
    time::Duration,
};

use crate::servers::TestServer;

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

/// `openssl s_client` to 127.0.0.1:port with nothing on stdin, waiting for the server to
/// close: the only request is the one its `args` send (`-early_data FILE`).
pub fn s_client_early_only(port: u16, args: &[&str]) -> String {
    let mut child = s_client_child(port, args);
    drop(child.stdin.take());
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
