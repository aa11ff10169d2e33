//! `serve`'s recent failures: the last connections that failed before their handshake
//! completed, in a bounded ring, served newest first at `/api/v1/failures`. Each holds what
//! the record says of the failure (when, which server, the peer, SNI, TLS version, the
//! stage it died in, the error type, the first alert); never application data.

use std::collections::VecDeque;

use crate::{
    json::{Array, Object},
    record::{Alert, Record},
    stage::Kind,
    tls::alert_name,
};

/// One failed handshake, as served.
struct Failure {
    time: String,
    conn_id: u64,
    pid: u32,
    process: String,
    server_port: u16,
    local: String,
    peer: String,
    sni: Option<String>,
    tls_version: Option<&'static str>,
    stage: Option<&'static str>,
    error_type: &'static str,
    alert: Option<Alert>,
    /// accept() to the failure, when both ends are known
    duration_ns: u64,
}

/// The last `cap` failed handshakes.
pub struct RecentFailures {
    ring: VecDeque<Failure>,
    cap: usize,
    /// failures seen since the daemon started (kept or not)
    seen: u64,
}

impl RecentFailures {
    pub fn new(cap: usize) -> RecentFailures {
        RecentFailures {
            ring: VecDeque::with_capacity(cap.min(1024)),
            cap,
            seen: 0,
        }
    }

    /// Keep `r` if it is a failed handshake, dropping the oldest when full.
    pub fn push(&mut self, r: &Record) {
        if r.kind != Kind::Failed {
            return;
        }
        self.seen += 1;
        if self.cap == 0 {
            return;
        }
        if self.ring.len() == self.cap {
            self.ring.pop_front();
        }
        self.ring.push_back(Failure {
            time: r.time(),
            conn_id: r.conn_id,
            pid: r.pid,
            process: r.comm.clone(),
            server_port: r.local.port,
            local: r.local.to_string(),
            peer: r.peer.to_string(),
            sni: r.sni.clone(),
            tls_version: r.tls_version,
            stage: r.failed_in.map(|s| s.name()),
            error_type: r.failure.unwrap_or("unknown"),
            alert: r.alert,
            duration_ns: r.stages_ns.0.iter().map(|(_, ns)| ns).sum(),
        });
    }

    /// `{"failures_seen": …, "kept": …, "failures": [newest first, at most `limit`]}`.
    pub fn json(&self, limit: usize) -> String {
        let mut out = Vec::with_capacity(256 * self.ring.len().min(limit) + 64);
        let mut o = Object::begin(&mut out);
        o.u64("failures_seen", self.seen)
            .u64("kept", self.cap as u64)
            .array("failures", |a| {
                for f in self.ring.iter().rev().take(limit) {
                    f.json(a);
                }
            });
        o.end();
        out.push(b'\n');
        String::from_utf8(out).expect("the JSON writer writes UTF-8")
    }
}

impl Failure {
    fn json(&self, a: &mut Array) {
        a.object(|o: &mut Object| {
            o.str("time", &self.time)
                .u64("conn_id", self.conn_id)
                .u64("pid", self.pid.into())
                .str("process_executable_name", &self.process)
                .u64("server_port", self.server_port.into())
                .str("local", &self.local)
                .str("peer", &self.peer)
                .opt_str("sni", self.sni.as_deref())
                .opt_str("tls_version", self.tls_version)
                .opt_str("stage", self.stage)
                .str("error_type", self.error_type)
                .u64("duration_ns", self.duration_ns);
            match &self.alert {
                Some(al) => {
                    o.object("alert", |m| {
                        m.str("from", al.from)
                            .u64("level", al.level.into())
                            .u64("description", al.description.into())
                            .opt_str("name", alert_name(al.description));
                    });
                }
                None => {
                    o.opt_str("alert", None);
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::Stage;

    fn failed(conn_id: u64, alert: Option<u8>) -> Record {
        Record {
            conn_id,
            sni: Some("shop.example".into()),
            failure: Some(if alert.is_some() { "alert" } else { "timeout" }),
            failed_in: Some(Stage::ServerFlight1),
            alert: alert.map(|description| Alert {
                from: "server",
                level: 2,
                description,
            }),
            ..Record::fixture(Kind::Failed)
        }
    }

    #[test]
    fn keeps_the_last_failures_newest_first() {
        let mut f = RecentFailures::new(3);
        f.push(&Record::fixture(Kind::Full));
        for id in 1..=5 {
            f.push(&failed(id, (id == 5).then_some(70)));
        }
        assert_eq!(f.ring.len(), 3);
        let v: serde_json::Value = serde_json::from_str(&f.json(usize::MAX)).unwrap();
        assert_eq!(v["failures_seen"], 5);
        assert_eq!(v["kept"], 3);
        let ids: Vec<_> = v["failures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["conn_id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, [5, 4, 3]);
        let newest = &v["failures"][0];
        assert_eq!(newest["error_type"], "alert");
        assert_eq!(newest["stage"], "server_flight_1");
        assert_eq!(newest["sni"], "shop.example");
        assert_eq!(newest["process_executable_name"], "nginx");
        assert_eq!(newest["server_port"], 443);
        assert_eq!(newest["alert"]["name"], "protocol_version");
        assert!(v["failures"][1]["alert"].is_null());
        let one: serde_json::Value = serde_json::from_str(&f.json(1)).unwrap();
        assert_eq!(one["failures"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn keeping_none_still_counts() {
        let mut f = RecentFailures::new(0);
        f.push(&failed(1, None));
        let v: serde_json::Value = serde_json::from_str(&f.json(10)).unwrap();
        assert_eq!(v["failures_seen"], 1);
        assert_eq!(v["failures"].as_array().unwrap().len(), 0);
    }
}
