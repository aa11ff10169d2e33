//! tests/go/pqtls: a TLS 1.3 server and client from Go's crypto/tls alone (X25519MLKEM768
//! first by default), with the key-exchange groups each one may use chosen per run, and
//! the client saying which group Go negotiated.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
};

use serde_json::Value;

use crate::util::{free_port, work_dir, workspace};

/// A Go toolchain: from PATH, or where the Go project's tarball puts it.
fn go() -> &'static str {
    ["go", "/usr/local/go/bin/go"]
        .into_iter()
        .find(|g| Command::new(g).arg("version").output().is_ok())
        .expect("no Go toolchain: `cargo xtask setup` installs Debian's golang-go")
}

/// target/go/pqtls, built once per test process (Go's build cache in target/go-cache
/// makes that cheap).
pub fn pqtls_exe() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(build).clone()
}

fn build() -> PathBuf {
    let exe = workspace().join("target/go/pqtls");
    let st = Command::new(go())
        .args(["build", "-o"])
        .arg(&exe)
        .arg(".")
        .current_dir(workspace().join("tests/go/pqtls"))
        .env("GOCACHE", workspace().join("target/go-cache"))
        .env("GOFLAGS", "-buildvcs=false")
        .env("GOTOOLCHAIN", "local")
        .status()
        .expect("go build");
    assert!(st.success(), "building tests/go/pqtls failed");
    exe
}

/// `pqtls server` on a free port, TLS 1.3 only, key exchange by `groups` ("default" or
/// a comma list, see tests/go/pqtls/main.go). Killed on drop.
pub struct GoPqServer {
    pub port: u16,
    child: Child,
}

impl GoPqServer {
    pub fn start(name: &str, groups: &str) -> GoPqServer {
        let dir = work_dir(name);
        let (cert, key) = crate::fixtures::make_cert(&dir, 2048);
        let port = free_port();
        let mut child = Command::new(pqtls_exe())
            .arg("server")
            .arg(port.to_string())
            .arg(&cert)
            .arg(&key)
            .arg(groups)
            .stdout(Stdio::piped())
            .spawn()
            .expect("pqtls server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "listening", "pqtls server");
        GoPqServer { port, child }
    }
}

impl Drop for GoPqServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `pqtls client` connection to 127.0.0.1:port with `groups`: what Go says of it
/// ({"port", "curve_id", "curve", "version", "did_resume"}).
pub fn go_client(port: u16, groups: &str) -> Value {
    let out = Command::new(pqtls_exe())
        .arg("client")
        .arg(format!("127.0.0.1:{port}"))
        .arg(groups)
        .output()
        .expect("pqtls client");
    assert!(
        out.status.success(),
        "pqtls client {groups}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("pqtls client prints JSON")
}
