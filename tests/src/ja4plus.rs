//! ja4plus (PyPI), an implementation of JA4 independent of hstrace's: tests/ja4/capture.py
//! reads loopback and fingerprints each client's first ClientHello to a port, and this
//! compares its fingerprints with hstrace's records, client port by client port.

use std::{
    collections::BTreeMap,
    io::{BufRead, BufReader},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use crate::util::{venv_python, workspace};

/// tests/ja4/capture.py running on loopback for one server port.
pub struct Ja4Capture {
    child: Child,
    lines: mpsc::Receiver<String>,
    /// client port → ja4plus's line for it, everything read so far
    pub seen: BTreeMap<u16, Value>,
}

impl Ja4Capture {
    /// Start capturing ClientHellos to `port` and wait until the socket is open.
    pub fn start(port: u16) -> Ja4Capture {
        let mut child = Command::new(venv_python())
            .arg(workspace().join("tests/ja4/capture.py"))
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("ja4plus capture");
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        match lines.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.contains("\"ready\"") => {}
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("ja4plus capture did not start: {other:?}");
            }
        }
        Ja4Capture {
            child,
            lines,
            seen: BTreeMap::new(),
        }
    }

    /// The client ports fingerprinted since the last call, waiting (up to 10 s) until
    /// there are at least `at_least`.
    pub fn new_ports(&mut self, at_least: usize) -> Vec<u16> {
        let mut new = Vec::new();
        let start = Instant::now();
        loop {
            let wait = if new.len() >= at_least {
                Duration::from_millis(300)
            } else {
                Duration::from_secs(10).saturating_sub(start.elapsed())
            };
            match self.lines.recv_timeout(wait) {
                Ok(line) => {
                    let v: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("capture.py printed {line:?}: {e}"));
                    let port = v["port"].as_u64().expect("a port") as u16;
                    new.push(port);
                    self.seen.insert(port, v);
                }
                Err(_) => return new,
            }
        }
    }
}

impl Drop for Ja4Capture {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on our own child
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// The client port of a record's `peer` ("127.0.0.1:38522").
pub fn peer_port(record: &Value) -> Option<u16> {
    record["peer"].as_str()?.rsplit(':').next()?.parse().ok()
}

/// Every way hstrace's records and ja4plus disagree, one message each naming both
/// values: a record whose `ja4` is not ja4plus's for its client port, a record with no
/// `ja4`, a port ja4plus saw that no record has. `clients` names each port's client.
pub fn ja4_mismatches(
    records: &[Value],
    ja4plus: &BTreeMap<u16, Value>,
    clients: &BTreeMap<u16, String>,
) -> Vec<String> {
    let name = |p: u16| clients.get(&p).map_or("an unknown client", String::as_str);
    let mut out = Vec::new();
    let mut matched = std::collections::BTreeSet::new();
    for r in records {
        let Some(port) = peer_port(r) else {
            out.push(format!("a record with no client port: {r}"));
            continue;
        };
        let ours = r["ja4"].as_str();
        match ja4plus.get(&port) {
            None => out.push(format!(
                "{} (port {port}): hstrace says ja4 {ours:?}, ja4plus saw no ClientHello",
                name(port)
            )),
            Some(theirs) => {
                matched.insert(port);
                let want = theirs["ja4"].as_str();
                if ours != want {
                    out.push(format!(
                        "{} (port {port}): hstrace says ja4 {ours:?}, ja4plus says {want:?} \
                         (ja4plus's raw form {})",
                        name(port),
                        theirs["raw"]
                    ));
                }
            }
        }
    }
    for (port, theirs) in ja4plus {
        if !matched.contains(port) {
            out.push(format!(
                "{} (port {port}): ja4plus says {}, hstrace printed no record",
                name(*port),
                theirs["ja4"]
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn theirs(port: u16, ja4: &str) -> (u16, Value) {
        (port, json!({"port": port, "ja4": ja4, "raw": "t13d_raw"}))
    }

    #[test]
    fn equal_fingerprints_are_no_mismatch() {
        let records = [json!({"peer": "127.0.0.1:40000", "ja4": "t13d1516h2_a_b"})];
        let seen = BTreeMap::from([theirs(40000, "t13d1516h2_a_b")]);
        assert!(ja4_mismatches(&records, &seen, &BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_mismatch_names_the_client_and_both_values() {
        let records = [
            json!({"peer": "127.0.0.1:40000", "ja4": "t13d1516h2_a_b"}),
            json!({"peer": "127.0.0.1:40001"}),
        ];
        let seen = BTreeMap::from([
            theirs(40000, "t13d1517h2_a_c"),
            theirs(40001, "t13i0000h2_x_y"),
            theirs(40002, "t12d_only_theirs"),
        ]);
        let clients = BTreeMap::from([(40000, "curl".to_owned())]);
        let got = ja4_mismatches(&records, &seen, &clients);
        assert_eq!(got.len(), 3, "{got:#?}");
        assert!(got[0].starts_with("curl (port 40000)"), "{}", got[0]);
        assert!(got[0].contains("\"t13d1516h2_a_b\""), "{}", got[0]);
        assert!(got[0].contains("\"t13d1517h2_a_c\""), "{}", got[0]);
        assert!(got[0].contains("t13d_raw"), "{}", got[0]);
        assert!(
            got[1].contains("None") && got[1].contains("t13i0000h2_x_y"),
            "{}",
            got[1]
        );
        assert!(got[2].contains("t12d_only_theirs") && got[2].contains("no record"));
    }
}
