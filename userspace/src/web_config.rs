//! `serve --web.config.file FILE`: the Prometheus exporter-toolkit's web configuration
//! (TLS, mutual TLS, basic auth with bcrypt hashes, response headers), read once at start.
//! Every key the toolkit documents is known here: the few hstrace cannot honour are refused
//! by name, as are unknown ones, so a file never seems to protect more than it does. Any
//! error stops the daemon before it serves: it never starts unprotected.

use std::{
    collections::BTreeMap,
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{anyhow, bail, Context, Result};
use axum::http::{HeaderName, HeaderValue};
use rustls::{
    crypto::{ring as provider, CryptoProvider},
    pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer},
    server::WebPkiClientVerifier,
    RootCertStore, ServerConfig, SupportedCipherSuite, SupportedProtocolVersion,
};
use serde::Deserialize;

/// What the daemon's HTTP server does with the file.
pub struct WebConfig {
    /// TLS, when `tls_server_config` is given
    pub tls: Option<Arc<ServerConfig>>,
    /// user → bcrypt hash; empty: no basic auth
    pub users: BTreeMap<String, String>,
    /// added to every response (`http_server_config.headers`)
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// whom TLS asks for a certificate, for the start line
    pub client_auth: ClientAuth,
}

/// `tls_server_config.client_auth_type`, as far as hstrace honours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    NoClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

// The file, key by key as docs/web-configuration.md of the exporter-toolkit names them.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    http_server_config: Option<HttpFile>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<serde_yaml_ng::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    client_ca_file: Option<String>,
    client_auth_type: Option<String>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// The response headers the toolkit lets the file set.
const HEADERS: [&str; 5] = [
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
];

impl WebConfig {
    /// Read and check `path`; every error is one line naming the file and the key.
    pub fn load(path: &Path) -> Result<WebConfig> {
        Self::load_inner(path).with_context(|| format!("--web.config.file {}", path.display()))
    }

    fn load_inner(path: &Path) -> Result<WebConfig> {
        let text = fs::read_to_string(path).map_err(|e| {
            anyhow!("cannot read it: {e} (give a readable exporter-toolkit web configuration, or drop the option to serve plain HTTP)")
        })?;
        let file = parse(&text)?;
        // relative file names are relative to the file's own directory, as the toolkit's
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let world_readable = mode(path).is_some_and(|m| m & 0o004 != 0);
        build(file, dir, world_readable)
    }

    /// "TLS (client certificates required) and basic auth (2 users)", for the start line.
    pub fn describe(&self) -> String {
        let tls = self.tls.as_ref().map(|_| match self.client_auth {
            ClientAuth::NoClientCert => "TLS".to_owned(),
            ClientAuth::VerifyClientCertIfGiven => {
                "TLS (client certificates verified if given)".to_owned()
            }
            ClientAuth::RequireAndVerifyClientCert => {
                "TLS (client certificates required)".to_owned()
            }
        });
        let auth = (!self.users.is_empty()).then(|| {
            format!(
                "basic auth ({} user{})",
                self.users.len(),
                if self.users.len() == 1 { "" } else { "s" }
            )
        });
        match (tls, auth) {
            (Some(t), Some(a)) => format!("{t} and {a}"),
            (Some(t), None) => t,
            (None, Some(a)) => a,
            (None, None) => "nothing".to_owned(),
        }
    }
}

/// The YAML, its keys checked; nothing read from disk.
fn parse(text: &str) -> Result<File> {
    if text.trim().is_empty() {
        bail!("it is empty, which would serve unprotected: configure tls_server_config and/or basic_auth_users, or drop the option");
    }
    let file: File = serde_yaml_ng::from_str(text)
        .map_err(|e| anyhow!("{e} (the keys are the exporter-toolkit's: docs/deploy.md)"))?;
    if file.rate_limit.is_some() {
        bail!("rate_limit is not supported by hstrace: remove it");
    }
    Ok(file)
}

fn build(file: File, dir: &Path, file_world_readable: bool) -> Result<WebConfig> {
    let users = file.basic_auth_users.unwrap_or_default();
    for (user, hash) in &users {
        if user.is_empty() || user.contains(':') {
            bail!("basic_auth_users: {user:?} cannot be a user name (empty or holding ':')");
        }
        hash.parse::<bcrypt::HashParts>().map_err(|e| {
            anyhow!("basic_auth_users.{user}: not a bcrypt hash ({e}): make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`")
        })?;
    }
    let mut headers = Vec::new();
    if let Some(http) = file.http_server_config {
        if http.http2 == Some(true) {
            bail!(
                "http_server_config.http2: hstrace serves HTTP/1.1 only: set it false or remove it"
            );
        }
        for (name, value) in http.headers.unwrap_or_default() {
            let Some(known) = HEADERS.iter().find(|h| h.eq_ignore_ascii_case(&name)) else {
                bail!(
                    "http_server_config.headers.{name}: not a header the file may set (one of {})",
                    HEADERS.join(", ")
                );
            };
            if value.is_empty() {
                continue;
            }
            let value = HeaderValue::from_str(&value).map_err(|_| {
                anyhow!("http_server_config.headers.{name}: {value:?} is not a header value")
            })?;
            headers.push((HeaderName::from_static(lower(known)), value));
        }
    }
    let (tls, client_auth) = match file.tls_server_config {
        Some(t) => {
            let (cfg, auth) = tls(t, dir, file_world_readable)?;
            (Some(Arc::new(cfg)), auth)
        }
        None => (None, ClientAuth::NoClientCert),
    };
    if tls.is_none() && users.is_empty() {
        bail!("it configures neither tls_server_config nor basic_auth_users, which would serve unprotected: configure one, or drop the option");
    }
    Ok(WebConfig {
        tls,
        users,
        headers,
        client_auth,
    })
}

fn lower(known: &'static str) -> &'static str {
    match known {
        "Content-Security-Policy" => "content-security-policy",
        "X-Frame-Options" => "x-frame-options",
        "X-Content-Type-Options" => "x-content-type-options",
        "X-XSS-Protection" => "x-xss-protection",
        _ => "strict-transport-security",
    }
}

/// `tls_server_config` as a rustls server configuration (ring's cryptography).
fn tls(t: TlsFile, dir: &Path, file_world_readable: bool) -> Result<(ServerConfig, ClientAuth)> {
    if let Some(sans) = &t.client_allowed_sans {
        if !sans.is_empty() {
            bail!("tls_server_config.client_allowed_sans is not supported by hstrace: remove it and give a client_ca_file that signs only the clients you allow");
        }
    }
    // the certificate and key, inline or from files (not both)
    let cert = pem("cert", t.cert, t.cert_file, dir)?.ok_or_else(|| {
        anyhow!("tls_server_config needs cert_file (the server's certificate, PEM)")
    })?;
    if t.key.is_some() && file_world_readable {
        bail!("tls_server_config.key is inline, and the file is readable by every user: chmod o-r it, or give key_file");
    }
    let (key_name, key_pem) = match (t.key, t.key_file) {
        (Some(_), Some(_)) => bail!("tls_server_config: give key or key_file, not both"),
        (Some(k), None) => ("key".to_owned(), k.into_bytes()),
        (None, Some(f)) => {
            let path = dir.join(f);
            (format!("key_file {}", path.display()), key_file(&path)?)
        }
        (None, None) => bail!("tls_server_config needs key_file (the server's private key, PEM)"),
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert.bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            anyhow!(
                "tls_server_config.{}: not a PEM certificate ({e:?})",
                cert.name
            )
        })?;
    if certs.is_empty() {
        bail!(
            "tls_server_config.{}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            cert.name
        );
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        anyhow!("tls_server_config.{key_name}: holds no PEM private key ({e:?}; give the PEM of an RSA or EC key, -----BEGIN PRIVATE KEY-----)")
    })?;
    let provider = Arc::new(crypto(&t.cipher_suites, &t.curve_preferences)?);
    provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|e| anyhow!("tls_server_config.{key_name}: holds no usable private key ({e}): give the PEM of an RSA or EC key"))?;
    let versions = versions(t.min_version.as_deref(), t.max_version.as_deref())?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| anyhow!("tls_server_config: {e}"))?;
    // who must show a certificate, checked against whose CA
    let ca = pem("client_ca", t.client_ca, t.client_ca_file, dir)?;
    let auth = match t.client_auth_type.as_deref().unwrap_or("NoClientCert") {
        "" | "NoClientCert" => ClientAuth::NoClientCert,
        "VerifyClientCertIfGiven" => ClientAuth::VerifyClientCertIfGiven,
        "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerifyClientCert,
        insecure @ ("RequestClientCert" | "RequireAnyClientCert") => bail!(
            "tls_server_config.client_auth_type {insecure} accepts any certificate without checking it, which hstrace does not do: use RequireAndVerifyClientCert with client_ca_file"
        ),
        other => bail!(
            "tls_server_config.client_auth_type {other:?} is not one of NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert"
        ),
    };
    let builder = match (auth, ca) {
        (ClientAuth::NoClientCert, None) => builder.with_no_client_auth(),
        (ClientAuth::NoClientCert, Some(_)) => bail!(
            "tls_server_config: a client CA is given but client_auth_type is NoClientCert, so no client would be checked: set client_auth_type: RequireAndVerifyClientCert"
        ),
        (_, None) => bail!(
            "tls_server_config.client_auth_type {auth:?} needs client_ca_file (the CA that signs the clients' certificates)"
        ),
        (_, Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&ca.bytes) {
                let c = c.map_err(|e| anyhow!("tls_server_config.{}: not a PEM certificate ({e:?})", ca.name))?;
                roots
                    .add(c)
                    .map_err(|e| anyhow!("tls_server_config.{}: {e}", ca.name))?;
            }
            if roots.is_empty() {
                bail!("tls_server_config.{}: holds no PEM certificate", ca.name);
            }
            let mut v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            if auth == ClientAuth::VerifyClientCertIfGiven {
                v = v.allow_unauthenticated();
            }
            builder.with_client_cert_verifier(
                v.build()
                    .map_err(|e| anyhow!("tls_server_config.{}: {e}", ca.name))?,
            )
        }
    };
    let mut cfg = builder.with_single_cert(certs, key).map_err(|e| {
        anyhow!("tls_server_config: the certificate and key do not go together ({e}): check cert_file and key_file")
    })?;
    cfg.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((cfg, auth))
}

/// PEM text given inline (`name`) or in a file (`name_file`), not both; with its key's name.
struct Pem {
    name: String,
    bytes: Vec<u8>,
}

fn pem(
    name: &str,
    inline: Option<String>,
    file: Option<String>,
    dir: &Path,
) -> Result<Option<Pem>> {
    Ok(match (inline, file) {
        (Some(_), Some(_)) => bail!("tls_server_config: give {name} or {name}_file, not both"),
        (Some(text), None) => Some(Pem {
            name: name.to_owned(),
            bytes: text.into_bytes(),
        }),
        (None, Some(f)) => {
            let path = dir.join(&f);
            let bytes = fs::read(&path).map_err(|e| {
                anyhow!(
                    "tls_server_config.{name}_file {}: cannot read it: {e}",
                    path.display()
                )
            })?;
            Some(Pem {
                name: format!("{name}_file {}", path.display()),
                bytes,
            })
        }
        (None, None) => None,
    })
}

/// The private key's file: refused when every user may read it, or when it can't be read.
fn key_file(path: &PathBuf) -> Result<Vec<u8>> {
    let shown = path.display();
    if let Some(m) = mode(path) {
        if m & 0o004 != 0 {
            bail!(
                "tls_server_config.key_file {shown} is readable by every user (mode {:04o}): `chmod o-rwx` it (hstrace reads it as root)",
                m & 0o7777
            );
        }
    }
    fs::read(path).map_err(|e| {
        anyhow!("tls_server_config.key_file {shown}: cannot read it: {e} (hstrace reads it at start, before it drops its privileges)")
    })
}

fn mode(path: &Path) -> Option<u32> {
    fs::metadata(path).ok().map(|m| m.permissions().mode())
}

/// min_version and max_version: TLS12 (the default minimum) and TLS13; rustls has no older.
fn versions(
    min: Option<&str>,
    max: Option<&str>,
) -> Result<Vec<&'static SupportedProtocolVersion>> {
    fn rank(key: &str, v: &str) -> Result<u8> {
        match v {
            "TLS12" => Ok(12),
            "TLS13" => Ok(13),
            "TLS10" | "TLS11" => {
                bail!("tls_server_config.{key} {v}: hstrace offers TLS12 and TLS13 only")
            }
            other => bail!("tls_server_config.{key} {other:?} is not TLS12 or TLS13"),
        }
    }
    let lo = min.map_or(Ok(12), |v| rank("min_version", v))?;
    let hi = max.map_or(Ok(13), |v| rank("max_version", v))?;
    if lo > hi {
        bail!("tls_server_config: min_version is above max_version");
    }
    Ok(
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)]
            .into_iter()
            .filter(|(v, _)| (lo..=hi).contains(v))
            .map(|(_, p)| p)
            .collect(),
    )
}

/// ring's provider, its TLS 1.2 suites and its groups narrowed to the file's lists (by Go's
/// names: the toolkit's `cipher_suites` only concern TLS 1.2, as Go's do).
fn crypto(suites: &Option<Vec<String>>, curves: &Option<Vec<String>>) -> Result<CryptoProvider> {
    let mut p = provider::default_provider();
    if let Some(names) = suites.as_ref().filter(|n| !n.is_empty()) {
        let tls12: Vec<_> = provider::ALL_CIPHER_SUITES
            .iter()
            .filter(|s| matches!(s, SupportedCipherSuite::Tls12(_)))
            .collect();
        let mut chosen: Vec<_> = provider::ALL_CIPHER_SUITES
            .iter()
            .filter(|s| matches!(s, SupportedCipherSuite::Tls13(_)))
            .copied()
            .collect();
        for name in names {
            // Go spells ChaCha20's suites both with and without the _SHA256
            let want = if name.ends_with("POLY1305") {
                format!("{name}_SHA256")
            } else {
                name.clone()
            };
            let s = tls12
                .iter()
                .find(|s| format!("{:?}", s.suite()) == want)
                .ok_or_else(|| {
                    let known: Vec<String> =
                        tls12.iter().map(|s| format!("{:?}", s.suite())).collect();
                    anyhow!(
                        "tls_server_config.cipher_suites: {name} is not one hstrace offers ({})",
                        known.join(", ")
                    )
                })?;
            chosen.push(**s);
        }
        p.cipher_suites = chosen;
    }
    if let Some(names) = curves.as_ref().filter(|n| !n.is_empty()) {
        let mut groups = Vec::new();
        for name in names {
            let g = match name.as_str() {
                "X25519" => provider::kx_group::X25519,
                "CurveP256" => provider::kx_group::SECP256R1,
                "CurveP384" => provider::kx_group::SECP384R1,
                other => bail!(
                    "tls_server_config.curve_preferences: {other} is not one hstrace offers (X25519, CurveP256, CurveP384)"
                ),
            };
            groups.push(g);
        }
        p.kx_groups = groups;
    }
    Ok(p)
}

#[cfg(test)]
mod tests;
