//! `--key-change FROM:TO`: the certificate's key, and the CPU one signature with it takes on
//! this host, measured by `openssl speed` (or given, `--sign-cost`). The server signs once
//! per full handshake (TLS 1.3 CertificateVerify, TLS 1.2 ECDHE ServerKeyExchange), in its
//! first flight: `with_key_change` adds the difference to that stage.

use std::{borrow::Cow, process::Command};

use anyhow::{anyhow, bail, Result};

use super::{args::parse_seconds, input::ServerInput};
use crate::stage::{RequestClass, Stage};

/// A certificate key, by the name `openssl speed` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Rsa2048,
    Rsa3072,
    Rsa4096,
    EcdsaP256,
    EcdsaP384,
    EcdsaP521,
    Ed25519,
    Ed448,
}

impl Key {
    pub const ALL: [Key; 8] = [
        Key::Rsa2048,
        Key::Rsa3072,
        Key::Rsa4096,
        Key::EcdsaP256,
        Key::EcdsaP384,
        Key::EcdsaP521,
        Key::Ed25519,
        Key::Ed448,
    ];

    /// `openssl speed`'s name, and the `+F` line of its `-mr` output that reports the key:
    /// its tag and the key's bits (and, for EdDSA, the name it prints after the bits).
    fn table(self) -> (&'static str, &'static str, u32, Option<&'static str>) {
        match self {
            Key::Rsa2048 => ("rsa2048", "+F2", 2048, None),
            Key::Rsa3072 => ("rsa3072", "+F2", 3072, None),
            Key::Rsa4096 => ("rsa4096", "+F2", 4096, None),
            Key::EcdsaP256 => ("ecdsap256", "+F4", 256, None),
            Key::EcdsaP384 => ("ecdsap384", "+F4", 384, None),
            Key::EcdsaP521 => ("ecdsap521", "+F4", 521, None),
            Key::Ed25519 => ("ed25519", "+F6", 253, Some("Ed25519")),
            Key::Ed448 => ("ed448", "+F6", 456, Some("Ed448")),
        }
    }

    pub fn name(self) -> &'static str {
        self.table().0
    }

    /// A name as `openssl speed` spells it; an unknown one is refused with the list.
    pub fn from_name(flag: &str, s: &str) -> Result<Key> {
        let t = s.trim().to_ascii_lowercase();
        Key::ALL.into_iter().find(|k| k.name() == t).ok_or_else(|| {
            anyhow!(
                "{flag}: {s:?} is not a key hstrace knows: give one of {}",
                Key::ALL.map(Key::name).join(", ")
            )
        })
    }
}

/// `--key-change FROM:TO` (e.g. rsa2048:ecdsap256).
pub fn parse_key_change(s: &str) -> Result<(Key, Key)> {
    let (from, to) = s.split_once(':').ok_or_else(|| {
        anyhow!("--key-change {s:?} is not FROM:TO: give e.g. --key-change rsa2048:ecdsap256 (the certificate's key today, then the one to predict)")
    })?;
    Ok((
        Key::from_name("--key-change", from)?,
        Key::from_name("--key-change", to)?,
    ))
}

/// `--sign-cost KEY=TIME,...` (e.g. rsa2048=0.24ms,rsa4096=1.7ms): each key's CPU per
/// signature, measured elsewhere.
pub fn parse_sign_costs(s: &str) -> Result<Vec<(Key, f64)>> {
    s.split(',')
        .map(|pair| {
            let (key, time) = pair.split_once('=').ok_or_else(|| {
                anyhow!("--sign-cost {s:?}: {pair:?} is not KEY=TIME: give e.g. --sign-cost rsa2048=0.24ms,rsa4096=1.7ms")
            })?;
            let key = Key::from_name("--sign-cost", key)?;
            let t = parse_seconds("--sign-cost", time)?;
            if t <= 0.0 {
                bail!("--sign-cost {s:?}: a signature takes some time: give {} more than 0", key.name());
            }
            Ok((key, t))
        })
        .collect()
}

/// How the signature costs were had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostSource {
    /// `openssl speed` on this host
    OpensslSpeed,
    /// `--sign-cost`
    Given,
}

impl CostSource {
    pub fn name(self) -> &'static str {
        match self {
            CostSource::OpensslSpeed => "openssl speed",
            CostSource::Given => "--sign-cost",
        }
    }
}

/// `--key-change`: the certificate's key today and the one to predict, and the CPU seconds
/// one signature takes with each.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyChange {
    pub from: Key,
    pub to: Key,
    pub from_sign_s: f64,
    pub to_sign_s: f64,
    pub source: CostSource,
}

impl KeyChange {
    /// What a full handshake's signature costs more (less, if negative) with the new key.
    pub fn added_s(&self) -> f64 {
        self.to_sign_s - self.from_sign_s
    }
}

/// The change from `from` to `to`, its costs from `given` when it names both keys, else
/// measured by `openssl speed` on this host.
pub fn key_change(from: Key, to: Key, given: &[(Key, f64)]) -> Result<KeyChange> {
    let find = |k: Key| given.iter().rev().find(|(g, _)| *g == k).map(|(_, t)| *t);
    let (from_sign_s, to_sign_s, source) = if given.is_empty() {
        let keys = if from == to {
            vec![from]
        } else {
            vec![from, to]
        };
        let s = measure(&keys)?;
        (
            s[0],
            *s.last().expect("one key at least"),
            CostSource::OpensslSpeed,
        )
    } else {
        match (find(from), find(to)) {
            (Some(f), Some(t)) => (f, t, CostSource::Given),
            (f, _) => {
                let missing = if f.is_none() { from } else { to };
                bail!(
                    "--sign-cost gives no time for {}: give both keys of --key-change (or leave --sign-cost out, and openssl speed measures them)",
                    missing.name()
                );
            }
        }
    };
    Ok(KeyChange {
        from,
        to,
        from_sign_s,
        to_sign_s,
        source,
    })
}

/// The seconds of CPU one signature takes with each of `keys`, by `openssl speed -seconds 1
/// -mr` (about 2 s a key: a second of signing, one of verifying). Its rates are per second
/// of the process's user CPU, not of the clock (no `-elapsed`): on a busy host the clock
/// would count the time others had the CPU, which is not what a signature costs.
pub fn measure(keys: &[Key]) -> Result<Vec<f64>> {
    let mut cmd = Command::new("openssl");
    cmd.args(["speed", "-seconds", "1", "-mr"])
        .args(keys.iter().map(|k| k.name()));
    let out = cmd.output().map_err(|e| {
        anyhow!("--key-change measures each key's signature with `openssl speed`, but openssl could not run ({e}): install the openssl command-line tool, or give --sign-cost KEY=TIME,... measured on the server's host")
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        let why = why.lines().find(|l| !l.starts_with('+')).unwrap_or("");
        bail!(
            "`openssl speed -seconds 1 -mr {}` failed ({}{why}): give --sign-cost KEY=TIME,... instead",
            keys.iter().map(|k| k.name()).collect::<Vec<_>>().join(" "),
            out.status
        );
    }
    parse_speed(&stdout, keys)
}

/// Each key's seconds per signature from `openssl speed -mr`'s output: the `+F` line of the
/// key (its tag and bits, see `Key::table`) gives signatures and verifications a second;
/// fields after those (a later OpenSSL's) are ignored.
pub fn parse_speed(out: &str, keys: &[Key]) -> Result<Vec<f64>> {
    keys.iter()
        .map(|&key| {
            let (name, tag, bits, alg) = key.table();
            let bits = bits.to_string();
            let rate = out.lines().find_map(|line| {
                let f: Vec<&str> = line.trim().split(':').collect();
                // tag, index, bits, [name], sign/s, verify/s
                let at = if alg.is_some() { 4 } else { 3 };
                if f.len() < at + 2 || f[0] != tag || f[2] != bits {
                    return None;
                }
                if alg.is_some_and(|a| f[3] != a) {
                    return None;
                }
                Some(f[at].parse::<f64>().ok())
            });
            match rate {
                Some(Some(r)) if r.is_finite() && r > 0.0 => Ok(1.0 / r),
                Some(_) => bail!("openssl speed printed no usable signing rate for {name} (its {tag} line for {bits} bits): give --sign-cost KEY=TIME,... instead"),
                None => bail!("openssl speed printed no {tag} line for {name} ({bits} bits) in its -mr output: give --sign-cost KEY=TIME,... instead"),
            }
        })
        .collect()
}

/// The stage a certificate's key signs in: the server's first flight of a full handshake
/// (TLS 1.3 CertificateVerify, TLS 1.2 ECDHE ServerKeyExchange). A resumed handshake and a
/// plain request sign nothing.
const SIGNING: (RequestClass, Stage) = (RequestClass::TlsFull, Stage::ServerFlight1);

/// The signing stage's measured mean, or why `--key-change` has nothing to change.
pub fn signing_stage_s(server: &ServerInput) -> Result<f64> {
    let (class, stage) = SIGNING;
    server.classes[class.index()]
        .stages
        .iter()
        .find(|m| m.name == stage.name())
        .map(|m| m.mean_s)
        .ok_or_else(|| {
            anyhow!(
                "--key-change: server {} has no {} measured for {} handshakes, the stage the key signs in: measure full TLS handshakes first (or model another --server)",
                server.server,
                stage.name(),
                class.name()
            )
        })
}

/// `--key-change`: the signing stage's mean (measured, and with the new key): one
/// signature's difference added, not a factor (the rest of the flight, the key exchange and
/// the records, does not change with the certificate's key), never below zero.
pub fn key_changed_s(server: &ServerInput, k: &KeyChange) -> Result<(f64, f64)> {
    let measured = signing_stage_s(server)?;
    Ok((measured, (measured + k.added_s()).max(0.0)))
}

/// The server's input as measured with `--key-change`'s new key: the signing stage's mean
/// changed, nothing else. What every discipline's network is made of.
pub fn with_key_change<'a>(
    server: &'a ServerInput,
    key_change: Option<&KeyChange>,
) -> Result<Cow<'a, ServerInput>> {
    let Some(k) = key_change else {
        return Ok(Cow::Borrowed(server));
    };
    let (_, with_key) = key_changed_s(server, k)?;
    let (class, stage) = SIGNING;
    let mut changed = server.clone();
    for m in &mut changed.classes[class.index()].stages {
        if m.name == stage.name() {
            m.mean_s = with_key;
        }
    }
    Ok(Cow::Owned(changed))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `openssl speed -seconds 1 -mr rsa2048 rsa4096 ecdsap256 ed25519`'s stdout on the
    /// development host (OpenSSL 3.0.19, AMD EPYC); its `+DTP`/`+R` lines go to stderr.
    const SPEED: &str = "+F2:2:2048:4140.659341:61917.045455
+F2:4:4096:249.462366:16543.010753
+F4:3:256:51605.319149:16983.870968
+F6:0:253:Ed25519:27453.333333:10015.151515
";

    /// ... and `openssl speed -seconds 1 -mr ecdsap521 ed448`'s.
    const SPEED_MORE: &str = "+F4:5:521:3826.881720:2032.222222
+F6:1:456:Ed448:5271.428571:4638.461538
";

    #[test]
    fn reads_openssl_speeds_rates() {
        let keys = [Key::Rsa2048, Key::Rsa4096, Key::EcdsaP256, Key::Ed25519];
        let s = parse_speed(SPEED, &keys).unwrap();
        let want = [4140.659341, 249.462366, 51605.319149, 27453.333333].map(|r| 1.0 / r);
        assert_eq!(s, want);
        // in any order asked, each its own line
        let s = parse_speed(SPEED, &[Key::Ed25519, Key::Rsa2048]).unwrap();
        assert_eq!(s, [want[3], want[0]]);
        let s = parse_speed(SPEED_MORE, &[Key::Ed448, Key::EcdsaP521]).unwrap();
        assert_eq!(s, [1.0 / 5271.428571, 1.0 / 3826.88172]);
        // a later OpenSSL's extra fields after verify/s are ignored; blanks and CRs too
        let s = parse_speed("\r\n+F2:2:2048:4000.0:60000.0:1.5:2.5\r\n", &[Key::Rsa2048]).unwrap();
        assert_eq!(s, [1.0 / 4000.0]);
    }

    #[test]
    fn openssl_output_it_cannot_read_is_refused() {
        for (out, key, says) in [
            ("", Key::Rsa2048, "no +F2 line for rsa2048"),
            (
                "speed: Unknown algorithm rsa2048\n",
                Key::Rsa2048,
                "no +F2 line",
            ),
            // the 4096-bit line does not answer for 2048 bits, nor ECDSA's 256 for Ed25519
            (SPEED, Key::Rsa3072, "no +F2 line for rsa3072 (3072 bits)"),
            (SPEED_MORE, Key::Ed25519, "no +F6 line for ed25519"),
            (
                "+F2:2:2048:fast:60000\n",
                Key::Rsa2048,
                "no usable signing rate",
            ),
            (
                "+F2:2:2048:0.000000:60000\n",
                Key::Rsa2048,
                "no usable signing rate",
            ),
            (
                "+F2:2:2048:inf:60000\n",
                Key::Rsa2048,
                "no usable signing rate",
            ),
            ("+F2:2:2048\n", Key::Rsa2048, "no +F2 line"),
            (
                "+F6:0:253:Ed448:27453.3:10015.1\n",
                Key::Ed25519,
                "no +F6 line",
            ),
        ] {
            let e = parse_speed(out, &[key]).unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains("--sign-cost"),
                "{out:?}: {e}"
            );
        }
    }

    #[test]
    fn key_names_and_costs() {
        assert_eq!(
            parse_key_change("rsa2048:ECDSAP256").unwrap(),
            (Key::Rsa2048, Key::EcdsaP256)
        );
        for k in Key::ALL {
            assert_eq!(Key::from_name("-", k.name()).unwrap(), k);
        }
        let e = parse_key_change("rsa2048:rsa8192").unwrap_err().to_string();
        assert!(
            e.contains("\"rsa8192\" is not a key")
                && e.contains(
                    "rsa2048, rsa3072, rsa4096, ecdsap256, ecdsap384, ecdsap521, ed25519, ed448"
                ),
            "{e}"
        );
        let e = parse_key_change("rsa2048").unwrap_err().to_string();
        assert!(e.contains("is not FROM:TO"), "{e}");
        let given = parse_sign_costs("rsa2048=0.24ms, rsa4096=1.7ms,ed25519=40us").unwrap();
        assert_eq!(given.len(), 3);
        assert!((given[1].1 - 1.7e-3).abs() < 1e-15);
        // given both: no openssl, the given figures
        let k = key_change(Key::Rsa2048, Key::Rsa4096, &given).unwrap();
        assert_eq!(k.source, CostSource::Given);
        assert!((k.added_s() - (1.7e-3 - 0.24e-3)).abs() < 1e-15);
        let e = key_change(Key::Rsa2048, Key::EcdsaP256, &given)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no time for ecdsap256"), "{e}");
        for bad in ["rsa2048", "rsa2048=0", "rsa2048=fast", "dsa=1ms"] {
            let e = parse_sign_costs(bad).unwrap_err().to_string();
            assert!(e.contains("--sign-cost"), "{bad}: {e}");
        }
    }
}
