//! What a test starts from: throwaway certificates and the captured ClientHellos.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use crate::util::workspace;

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
