//! What a test starts from: throwaway certificates and the captured ClientHellos.

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use crate::util::{work_dir, workspace};

/// A self-signed RSA certificate for demo.test.
pub fn make_cert(dir: &Path, bits: u32) -> (PathBuf, PathBuf) {
    make_cert_named(dir, "", bits, &[])
}

/// The same, its files named PREFIXcert.pem and PREFIXkey.pem, with `extra` arguments to
/// `openssl req` (e.g. `-addext` for many subject alternative names: a big certificate).
pub fn make_cert_named(dir: &Path, prefix: &str, bits: u32, extra: &[&str]) -> (PathBuf, PathBuf) {
    let newkey = format!("rsa:{bits}");
    self_signed(dir, prefix, &["-newkey", &newkey], extra)
}

/// A self-signed certificate with an ECDSA P-256 key, PREFIXcert.pem and PREFIXkey.pem.
pub fn make_ecdsa_cert(dir: &Path, prefix: &str) -> (PathBuf, PathBuf) {
    let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];
    self_signed(dir, prefix, &key, &[])
}

/// `openssl req -x509` with `key` (how to make the key) and `extra`, for CN=demo.test.
fn self_signed(dir: &Path, prefix: &str, key: &[&str], extra: &[&str]) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{prefix}cert.pem"));
    let key_file = dir.join(format!("{prefix}key.pem"));
    let st = Command::new("openssl")
        .args(["req", "-x509"])
        .args(key)
        .args(["-nodes", "-days", "2"])
        .args(extra)
        .args(["-subj", "/CN=demo.test", "-keyout"])
        .arg(&key_file)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(st.success(), "openssl req failed");
    (cert, key_file)
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

/// A TLS extension: (type, body).
pub type Extension = (u16, Vec<u8>);

/// A ClientHello message (handshake header included) taken apart: the bytes before its
/// extensions, and its extensions in order.
pub fn split_client_hello(msg: &[u8]) -> (Vec<u8>, Vec<Extension>) {
    let mut at = 4 + 2 + 32;
    at += 1 + msg[at] as usize; // session id
    at += 2 + u16::from_be_bytes([msg[at], msg[at + 1]]) as usize; // cipher suites
    at += 1 + msg[at] as usize; // compression methods
    let head = msg[..at].to_vec();
    let end = at + 2 + u16::from_be_bytes([msg[at], msg[at + 1]]) as usize;
    let mut exts = Vec::new();
    let mut p = at + 2;
    while p < end {
        let ty = u16::from_be_bytes([msg[p], msg[p + 1]]);
        let len = u16::from_be_bytes([msg[p + 2], msg[p + 3]]) as usize;
        exts.push((ty, msg[p + 4..p + 4 + len].to_vec()));
        p += 4 + len;
    }
    (head, exts)
}

/// The record carrying a ClientHello made of `head` and `exts`, its lengths recomputed.
pub fn client_hello_record_of(head: &[u8], exts: &[Extension]) -> Vec<u8> {
    let mut body: Vec<u8> = Vec::new();
    for (ty, data) in exts {
        body.extend_from_slice(&ty.to_be_bytes());
        body.extend_from_slice(&(data.len() as u16).to_be_bytes());
        body.extend_from_slice(data);
    }
    let mut msg = head.to_vec();
    msg.extend_from_slice(&(body.len() as u16).to_be_bytes());
    msg.extend_from_slice(&body);
    let len = (msg.len() - 4) as u32;
    msg[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
    let mut rec = vec![22, 3, 1];
    rec.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    rec.extend_from_slice(&msg);
    rec
}

/// A test PKI in a fresh work directory NAME: a CA (ca.crt); server.crt/server.key
/// signed by it for the server (127.0.0.1), client.crt/client.key for a client, and
/// stranger.crt/stranger.key from another CA; all keys 0600.
pub fn test_pki(name: &str) -> PathBuf {
    let dir = work_dir(name);
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    for ca in ["ca", "other-ca"] {
        let mut a = vec!["req", "-x509"];
        a.extend(ec);
        let (key, crt, subj) = (
            format!("{ca}.key"),
            format!("{ca}.crt"),
            format!("/CN=hstrace test {ca}"),
        );
        a.extend(["-keyout", &key, "-out", &crt, "-days", "2", "-subj", &subj]);
        openssl_in(&dir, &a);
    }
    fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (who, ca, ext) in [
        ("server", "ca", "server.ext"),
        ("client", "ca", "client.ext"),
        ("stranger", "other-ca", "client.ext"),
    ] {
        let (key, csr, crt) = (
            format!("{who}.key"),
            format!("{who}.csr"),
            format!("{who}.crt"),
        );
        let subj = format!("/CN={who}");
        let mut a = vec!["req"];
        a.extend(ec);
        a.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl_in(&dir, &a);
        let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        openssl_in(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_crt,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                ext,
            ],
        );
    }
    for f in fs::read_dir(&dir).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|e| e == "key") {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
    dir
}

/// `openssl ARGS` in `dir`; panics with its stderr unless it succeeds.
fn openssl_in(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
