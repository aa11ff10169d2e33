//! The file's keys and what each refusal says. Certificates are made with the openssl CLI.

use std::{fs, os::unix::fs::PermissionsExt, path::PathBuf, process::Command};

use super::*;

/// A fresh directory holding server.crt/server.key (and ca.crt signing them), 0600 key.
fn certs(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("hstrace-web-config-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=test ca",
    ]);
    run(&[
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.crt",
        "-days",
        "1",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
    ]);
    fs::set_permissions(dir.join("server.key"), fs::Permissions::from_mode(0o600)).unwrap();
    dir
}

/// The file's text written into `dir`, loaded; the error as main prints it.
fn load(dir: &Path, yaml: &str) -> Result<WebConfig, String> {
    let path = dir.join("web.yml");
    fs::write(&path, yaml).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    WebConfig::load(&path).map_err(|e| format!("{e:#}"))
}

fn refused(dir: &Path, yaml: &str) -> String {
    match load(dir, yaml) {
        Ok(_) => panic!("accepted:\n{yaml}"),
        Err(e) => {
            assert!(!e.contains('\n'), "not one line: {e}");
            assert!(e.starts_with("--web.config.file "), "{e}");
            e
        }
    }
}

const HASH: &str = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG";

#[test]
fn tls_and_basic_auth_as_the_toolkit_spells_them() {
    let dir = certs("tls");
    let w = load(
        &dir,
        &format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS12\n\
             basic_auth_users:\n  prometheus: '{HASH}'\n\
             http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n"
        ),
    )
    .unwrap();
    assert!(w.tls.is_some());
    assert_eq!(w.users.len(), 1);
    assert_eq!(w.client_auth, ClientAuth::NoClientCert);
    assert_eq!(w.headers.len(), 1);
    assert_eq!(w.headers[0].0, "x-frame-options");
    assert_eq!(w.describe(), "TLS and basic auth (1 user)");
}

#[test]
fn mutual_tls_needs_a_client_ca_and_a_checking_policy() {
    let dir = certs("mtls");
    let base = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let w = load(
        &dir,
        &format!(
            "{base}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
        ),
    )
    .unwrap();
    assert_eq!(w.describe(), "TLS (client certificates required)");
    let w = load(
        &dir,
        &format!("{base}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"),
    )
    .unwrap();
    assert_eq!(w.client_auth, ClientAuth::VerifyClientCertIfGiven);
    let e = refused(&dir, &format!("{base}  client_ca_file: ca.crt\n"));
    assert!(e.contains("no client would be checked"), "{e}");
    let e = refused(
        &dir,
        &format!("{base}  client_auth_type: RequireAndVerifyClientCert\n"),
    );
    assert!(e.contains("needs client_ca_file"), "{e}");
    for insecure in ["RequestClientCert", "RequireAnyClientCert"] {
        let e = refused(
            &dir,
            &format!("{base}  client_auth_type: {insecure}\n  client_ca_file: ca.crt\n"),
        );
        assert!(e.contains("without checking it"), "{e}");
    }
    let e = refused(&dir, &format!("{base}  client_auth_type: Sometimes\n"));
    assert!(e.contains("is not one of"), "{e}");
}

#[test]
fn unknown_and_unsupported_keys_are_refused_by_name() {
    let dir = certs("keys");
    let base = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let e = refused(&dir, &format!("{base}  cert_fiel: x\n"));
    assert!(e.contains("unknown field `cert_fiel`"), "{e}");
    let e = refused(&dir, &format!("{base}basic_auth:\n  a: b\n"));
    assert!(e.contains("unknown field `basic_auth`"), "{e}");
    let e = refused(
        &dir,
        &format!("{base}rate_limit:\n  interval: 1s\n  burst: 20\n"),
    );
    assert!(e.contains("rate_limit is not supported"), "{e}");
    let e = refused(
        &dir,
        &format!("{base}  client_allowed_sans: [prometheus.example]\n"),
    );
    assert!(e.contains("client_allowed_sans is not supported"), "{e}");
    let e = refused(&dir, &format!("{base}http_server_config:\n  http2: true\n"));
    assert!(e.contains("HTTP/1.1 only"), "{e}");
    let e = refused(
        &dir,
        &format!("{base}http_server_config:\n  headers:\n    Server: x\n"),
    );
    assert!(e.contains("not a header the file may set"), "{e}");
    let e = refused(&dir, &format!("{base}  min_version: TLS10\n"));
    assert!(e.contains("TLS12 and TLS13 only"), "{e}");
    let e = refused(
        &dir,
        &format!("{base}  min_version: TLS13\n  max_version: TLS12\n"),
    );
    assert!(e.contains("above max_version"), "{e}");
    let e = refused(
        &dir,
        &format!("{base}  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n"),
    );
    assert!(e.contains("not one hstrace offers"), "{e}");
    let e = refused(&dir, &format!("{base}  curve_preferences: [CurveP521]\n"));
    assert!(e.contains("CurveP521 is not one hstrace offers"), "{e}");
    // the ones it does offer, by Go's names
    let ok = load(
        &dir,
        &format!(
            "{base}  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305]\n  \
             curve_preferences: [X25519, CurveP256]\n  prefer_server_cipher_suites: false\n"
        ),
    );
    assert!(ok.is_ok(), "{:?}", ok.err());
}

#[test]
fn a_file_that_protects_nothing_is_refused() {
    let dir = certs("nothing");
    let e = refused(&dir, "");
    assert!(e.contains("is empty"), "{e}");
    let e = refused(&dir, "http_server_config:\n  http2: false\n");
    assert!(
        e.contains("neither tls_server_config nor basic_auth_users"),
        "{e}"
    );
    let e = refused(&dir, "basic_auth_users:\n  alice: plaintext\n");
    assert!(
        e.contains("basic_auth_users.alice: not a bcrypt hash"),
        "{e}"
    );
    let e = refused(&dir, "tls_server_config:\n  key_file: server.key\n");
    assert!(e.contains("needs cert_file"), "{e}");
    let e = refused(&dir, "tls_server_config:\n  cert_file: server.crt\n");
    assert!(e.contains("needs key_file"), "{e}");
    let e = refused(&dir, "tls_server_config: [\n");
    assert!(e.starts_with("--web.config.file "), "{e}");
    // basic auth alone is accepted (as the toolkit does); serve warns that it is in clear
    assert!(load(&dir, &format!("basic_auth_users:\n  alice: '{HASH}'\n")).is_ok());
    let missing = WebConfig::load(&dir.join("absent.yml")).map_err(|e| format!("{e:#}"));
    assert!(missing.err().unwrap().contains("cannot read it"));
}

#[test]
fn key_files_world_readable_malformed_missing_or_mismatched() {
    let dir = certs("key-files");
    let yaml = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    fs::set_permissions(dir.join("server.key"), fs::Permissions::from_mode(0o644)).unwrap();
    let e = refused(&dir, yaml);
    assert!(e.contains("is readable by every user (mode 0644)"), "{e}");
    fs::set_permissions(dir.join("server.key"), fs::Permissions::from_mode(0o640)).unwrap();
    assert!(
        load(&dir, yaml).is_ok(),
        "group-readable (ssl-cert) is fine"
    );
    fs::write(dir.join("bad.key"), "not a key\n").unwrap();
    fs::set_permissions(dir.join("bad.key"), fs::Permissions::from_mode(0o600)).unwrap();
    let e = refused(
        &dir,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: bad.key\n",
    );
    assert!(e.contains("holds no PEM private key"), "{e}");
    let e = refused(
        &dir,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: gone.key\n",
    );
    assert!(e.contains("gone.key: cannot read it: No such file"), "{e}");
    let e = refused(
        &dir,
        "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n",
    );
    assert!(e.contains("holds no PEM certificate"), "{e}");
    let e = refused(
        &dir,
        "tls_server_config:\n  cert_file: ca.crt\n  key_file: server.key\n",
    );
    assert!(e.contains("do not go together"), "{e}");
    // an inline key in a file anyone can read
    let key = fs::read_to_string(dir.join("server.key"))
        .unwrap()
        .replace('\n', "\n    ");
    let path = dir.join("inline.yml");
    fs::write(
        &path,
        format!("tls_server_config:\n  cert_file: server.crt\n  key: |\n    {key}\n"),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let e = format!("{:#}", WebConfig::load(&path).err().unwrap());
    assert!(
        e.contains("key is inline, and the file is readable by every user"),
        "{e}"
    );
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    assert!(WebConfig::load(&path).is_ok());
}

#[test]
fn the_shipped_example_uses_only_known_keys() {
    let file = parse(include_str!("../../../deploy/web-config.yml")).unwrap();
    let tls = file.tls_server_config.expect("the example configures TLS");
    assert!(tls.cert_file.is_some() && tls.key_file.is_some());
}

#[test]
fn a_pem_block_that_is_not_a_key_is_named_so() {
    let dir = certs("garbage-der");
    fs::write(
        dir.join("g.key"),
        "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    fs::set_permissions(dir.join("g.key"), fs::Permissions::from_mode(0o600)).unwrap();
    let e = refused(
        &dir,
        "tls_server_config:\n  cert_file: server.crt\n  key_file: g.key\n",
    );
    assert!(e.contains("g.key: holds no usable private key"), "{e}");
}
