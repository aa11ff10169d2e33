//! `serve`'s recent failures: the last connections that failed before their handshake
//! completed, in a bounded ring, served newest first at `/api/v1/failures`. Each holds what
//! the record says of the failure (when, which server, the peer, SNI, TLS version, the
//! stage it died in, the error type, the first alert); never application data. The peer
//! is shown as the operator chose (`--failures-peer`): its network by default.

use std::{
    collections::VecDeque,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

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
    /// as `PeerDetail` says; None: not shown
    peer: Option<String>,
    sni: Option<String>,
    tls_version: Option<&'static str>,
    stage: Option<&'static str>,
    error_type: &'static str,
    alert: Option<Alert>,
    /// accept() to the failure, when both ends are known
    duration_ns: u64,
}

/// How much of a failed handshake's peer address `/api/v1/failures` shows. A client's
/// address is personal data under most privacy rules; its network is what tells a scanner's
/// or a broken client population's failures apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PeerDetail {
    /// address and port
    Full,
    /// the network only: a /24 of IPv4, a /48 of IPv6 (the port dropped)
    #[default]
    Prefix,
    /// no peer at all
    None,
}

impl PeerDetail {
    pub fn name(self) -> &'static str {
        match self {
            PeerDetail::Full => "full",
            PeerDetail::Prefix => "prefix",
            PeerDetail::None => "none",
        }
    }

    /// `peer` written as this detail allows.
    pub fn show(self, peer: &crate::record::Endpoint) -> Option<String> {
        match self {
            PeerDetail::Full => Some(peer.to_string()),
            PeerDetail::Prefix => Some(prefix(peer.ip())),
            PeerDetail::None => None,
        }
    }
}

/// "203.0.113.0/24", "2001:db8:1::/48"; an IPv4 client of an IPv6 socket as IPv4.
fn prefix(ip: IpAddr) -> String {
    let v4 = |a: Ipv4Addr| {
        let [a, b, c, _] = a.octets();
        format!("{a}.{b}.{c}.0/24")
    };
    match ip {
        IpAddr::V4(a) => v4(a),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(m) => v4(m),
            None => {
                let s = a.segments();
                format!("{}/48", Ipv6Addr::new(s[0], s[1], s[2], 0, 0, 0, 0, 0))
            }
        },
    }
}

/// The last `cap` failed handshakes.
pub struct RecentFailures {
    ring: VecDeque<Failure>,
    cap: usize,
    peer: PeerDetail,
    /// failures seen since the daemon started (kept or not)
    seen: u64,
}

impl RecentFailures {
    pub fn new(cap: usize, peer: PeerDetail) -> RecentFailures {
        RecentFailures {
            ring: VecDeque::with_capacity(cap.min(1024)),
            cap,
            peer,
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
            peer: self.peer.show(&r.peer),
            sni: r.sni.clone(),
            tls_version: r.tls_version,
            stage: r.failed_in.map(|s| s.name()),
            error_type: r.failure.unwrap_or("unknown"),
            alert: r.alert,
            duration_ns: r.stages_ns.0.iter().map(|(_, ns)| ns).sum(),
        });
    }

    /// `{"failures_seen": …, "kept": …, "peer_detail": …, "failures": [newest first, at
    /// most `limit`]}`.
    pub fn json(&self, limit: usize) -> String {
        let mut out = Vec::with_capacity(256 * self.ring.len().min(limit) + 64);
        let mut o = Object::begin(&mut out);
        o.u64("failures_seen", self.seen)
            .u64("kept", self.cap as u64)
            .str("peer_detail", self.peer.name())
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
                .opt_str("peer", self.peer.as_deref())
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
        let mut f = RecentFailures::new(3, PeerDetail::Full);
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
        assert_eq!(v["peer_detail"], "full");
        let one: serde_json::Value = serde_json::from_str(&f.json(1)).unwrap();
        assert_eq!(one["failures"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn keeping_none_still_counts() {
        let mut f = RecentFailures::new(0, PeerDetail::Full);
        f.push(&failed(1, None));
        let v: serde_json::Value = serde_json::from_str(&f.json(10)).unwrap();
        assert_eq!(v["failures_seen"], 1);
        assert_eq!(v["failures"].as_array().unwrap().len(), 0);
    }

    #[test]
    fn the_peer_as_much_as_asked() {
        let v6 = |s: &str| {
            let ip: Ipv6Addr = s.parse().unwrap();
            crate::record::Endpoint::new(10, ip.octets(), 51234)
        };
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[203, 0, 113, 77]);
        let v4 = crate::record::Endpoint::new(2, a, 51234);
        assert_eq!(PeerDetail::Full.show(&v4).unwrap(), "203.0.113.77:51234");
        assert_eq!(PeerDetail::Prefix.show(&v4).unwrap(), "203.0.113.0/24");
        assert_eq!(PeerDetail::None.show(&v4), None);
        let e = v6("2001:db8:1:2:3:4:5:6");
        assert_eq!(
            PeerDetail::Full.show(&e).unwrap(),
            "[2001:db8:1:2:3:4:5:6]:51234"
        );
        assert_eq!(PeerDetail::Prefix.show(&e).unwrap(), "2001:db8:1::/48");
        assert_eq!(
            PeerDetail::Prefix.show(&v6("::ffff:198.51.100.9")).unwrap(),
            "198.51.100.0/24"
        );
        for (detail, peer) in [
            (PeerDetail::Full, serde_json::json!("0.0.0.0:50000")),
            (PeerDetail::Prefix, serde_json::json!("0.0.0.0/24")),
            (PeerDetail::None, serde_json::Value::Null),
        ] {
            let mut f = RecentFailures::new(2, detail);
            f.push(&failed(1, None));
            let v: serde_json::Value = serde_json::from_str(&f.json(10)).unwrap();
            assert_eq!(v["peer_detail"], detail.name());
            assert_eq!(v["failures"][0]["peer"], peer, "{detail:?}");
        }
    }
}
