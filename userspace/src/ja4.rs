//! The client's JA4 fingerprint (FoxIO's JA4 specification, for TLS over TCP), computed
//! from the ClientHello the tracer already parsed (`tls::ClientHello`): nothing more is
//! read in the kernel for it.
//!
//! `t13d1516h2_8daaf6152771_e5627efa2ab1`: the protocol (`t`), the highest version offered,
//! `d` with an SNI (`i` without), the counts of cipher suites and extensions (GREASE left
//! out, at most 99), the first and last characters of the first ALPN value; then the first
//! 12 hex digits of the SHA-256 of the cipher suites sorted, and of the extensions sorted
//! (SNI and ALPN left out: they are in the first part) followed by the signature algorithms
//! in the client's order. `ja4_o` hashes both lists in the client's order instead, SNI and
//! ALPN included.

use ring::digest::{digest, SHA256};

use crate::tls::ClientHello;

const EXT_SERVER_NAME: u16 = 0x0000;
const EXT_ALPN: u16 = 0x0010;
const EXT_SUPPORTED_VERSIONS: u16 = 0x002b;

/// JA4 of a ClientHello; None when its capture was cut (an extension may be missing).
pub fn ja4(ch: &ClientHello) -> Option<String> {
    if ch.truncated {
        return None;
    }
    let mut ciphers = ch.cipher_suites.clone();
    ciphers.sort_unstable();
    let mut exts: Vec<u16> = ch
        .extensions
        .iter()
        .copied()
        .filter(|&e| e != EXT_SERVER_NAME && e != EXT_ALPN)
        .collect();
    exts.sort_unstable();
    Some(format!(
        "{}_{}_{}",
        prefix(ch),
        hash12(&hex_list(&ciphers)),
        hash12(&with_signatures(&exts, &ch.signature_algorithms))
    ))
}

/// JA4 with both lists in the client's own order (SNI and ALPN kept): `ja4_o`.
pub fn ja4_original(ch: &ClientHello) -> Option<String> {
    if ch.truncated {
        return None;
    }
    Some(format!(
        "{}_{}_{}",
        prefix(ch),
        hash12(&hex_list(&ch.cipher_suites)),
        hash12(&with_signatures(&ch.extensions, &ch.signature_algorithms))
    ))
}

/// The first part: `t13d1516h2`.
fn prefix(ch: &ClientHello) -> String {
    let version = if ch.extensions.contains(&EXT_SUPPORTED_VERSIONS) {
        ch.supported_versions.iter().copied().max().unwrap_or(0)
    } else {
        ch.legacy_version
    };
    let sni = if ch.extensions.contains(&EXT_SERVER_NAME) {
        'd'
    } else {
        'i'
    };
    format!(
        "t{}{sni}{:02}{:02}{}",
        version_code(version),
        ch.cipher_suites.len().min(99),
        ch.extensions.len().min(99),
        alpn_code(ch.alpn.first().map(String::as_bytes))
    )
}

fn version_code(v: u16) -> &'static str {
    match v {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0200 => "s2",
        0x0100 => "s1",
        _ => "00",
    }
}

/// The first and last characters of the first ALPN value; of its hex form when either is
/// not an ASCII letter or digit; `00` without ALPN.
fn alpn_code(first: Option<&[u8]>) -> String {
    let Some(v) = first.filter(|v| !v.is_empty()) else {
        return "00".into();
    };
    let (a, z) = (v[0], v[v.len() - 1]);
    if a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric() {
        return format!("{}{}", a as char, z as char);
    }
    let hex: String = v.iter().map(|b| format!("{b:02x}")).collect();
    let (a, z) = (hex.as_bytes()[0], hex.as_bytes()[hex.len() - 1]);
    format!("{}{}", a as char, z as char)
}

/// `002f,0035,…`: lower-case 4-digit hex, comma-separated.
fn hex_list(v: &[u16]) -> String {
    v.iter()
        .map(|x| format!("{x:04x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The extensions' list, then `_` and the signature algorithms when there are any.
fn with_signatures(exts: &[u16], sigs: &[u16]) -> String {
    let mut s = hex_list(exts);
    if !sigs.is_empty() {
        s.push('_');
        s.push_str(&hex_list(sigs));
    }
    s
}

/// The first 12 hex digits of the SHA-256 of `s`; twelve zeros for an empty list.
fn hash12(s: &str) -> String {
    if s.is_empty() {
        return "000000000000".into();
    }
    digest(&SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello with these lists (what the parser leaves, GREASE already out).
    fn hello(ciphers: &[u16], exts: &[u16], sigs: &[u16], alpn: &[&str]) -> ClientHello {
        ClientHello {
            legacy_version: 0x0303,
            cipher_suites: ciphers.to_vec(),
            extensions: exts.to_vec(),
            signature_algorithms: sigs.to_vec(),
            supported_versions: vec![0x0304, 0x0303],
            alpn: alpn.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    const CIPHERS: &[u16] = &[
        0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014,
        0x009c, 0x009d, 0x002f, 0x0035,
    ];
    const SIGS: &[u16] = &[
        0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
    ];

    /// The specification's own example (JA4.txt of FoxIO's repository).
    #[test]
    fn the_specifications_example() {
        let exts = [
            0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005, 0x0023, 0x0012,
            0x002b, 0xff01, 0x000b, 0x000a, 0x0015,
        ];
        let ch = hello(CIPHERS, &exts, SIGS, &["h2", "http/1.1"]);
        assert_eq!(ja4(&ch).unwrap(), "t13d1516h2_8daaf6152771_e5627efa2ab1");
        assert_eq!(
            ja4_original(&ch).unwrap(),
            "t13d1516h2_acb858a92679_18f69afefd3d"
        );
        // no signature algorithms: the list ends without an underscore
        let ch = hello(CIPHERS, &exts, &[], &["h2"]);
        assert!(ja4(&ch).unwrap().ends_with("_6d807ffa2a79"));
    }

    /// A Chrome 143 ClientHello as a public fingerprinting service reported it (its raw
    /// lists and its JA4 and JA4_o).
    #[test]
    fn a_browsers_hello() {
        let exts = [
            0x002d, 0x0033, 0x0010, 0xfe0d, 0x0017, 0x44cd, 0x0000, 0x000b, 0x000a, 0x002b, 0xff01,
            0x0023, 0x0012, 0x0005, 0x000d, 0x001b,
        ];
        let ch = hello(CIPHERS, &exts, SIGS, &["h2", "http/1.1"]);
        assert_eq!(ja4(&ch).unwrap(), "t13d1516h2_8daaf6152771_d8a2da3f94cd");
        assert_eq!(
            ja4_original(&ch).unwrap(),
            "t13d1516h2_acb858a92679_f96a17c57971"
        );
    }

    #[test]
    fn the_first_part() {
        // no SNI, no ALPN, TLS 1.2 only (no supported_versions)
        let mut ch = hello(&[0xc02f], &[0x000a, 0x000d], SIGS, &[]);
        ch.supported_versions.clear();
        assert!(ja4(&ch).unwrap().starts_with("t12i010200_"));
        // ALPN "http/1.1" gives h1; a value that does not begin and end in a letter or
        // digit gives its hex form's first and last digits
        assert_eq!(alpn_code(Some(b"http/1.1")), "h1");
        assert_eq!(alpn_code(Some(&[0xab, 0x01])), "a1");
        assert_eq!(alpn_code(Some(b"")), "00");
        // a cut hello has no fingerprint
        ch.truncated = true;
        assert_eq!(ja4(&ch), None);
        // no cipher suites: twelve zeros
        assert_eq!(hash12(""), "000000000000");
    }
}
