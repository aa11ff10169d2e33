//! The `trace --format json` lines as types: the contract scripts rely on
//! (docs/trace-records.md), fields only ever added. A program reads the lines with these;
//! `print.rs` writes them by hand, straight into a buffer, because through serde the keys'
//! escaping was a fifth of the pipeline's time, and the tests below hold that writer to
//! these types field for field.

use serde::{Deserialize, Serialize};

use crate::{
    ordered::Ordered,
    stage::{Kind, Resumption, StageClass},
};

/// `"record": "connection"`: a connection's handshake and first exchange, made when its
/// first response is complete, or it failed, closed or idled past `--idle-timeout`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionLine {
    /// "connection"
    pub record: String,
    /// when the record was made, RFC 3339 UTC
    pub time: String,
    pub conn_id: u64,
    /// the server process that accepted the connection
    pub pid: u32,
    pub comm: String,
    /// server and client address:port
    pub local: String,
    pub peer: String,
    /// "tls" or "plain"
    pub protocol: String,
    /// the protocol of the plaintext part, when told from its first bytes: a preamble
    /// before TLS (smtp, imap, pop3, ftp, postgresql, mysql, ldap, xmpp) or a plain
    /// connection's (those, or http)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// for a plaintext preamble watched for TLS: upgraded, refused, granted, asked or
    /// not_asked
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starttls: Option<String>,
    pub tls_version: Option<String>,
    pub cipher: Option<String>,
    pub sni: Option<String>,
    pub alpn: Option<String>,
    /// TLS 1.3: the client's ALPN offer, when it offered more than one protocol
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alpn_offered: Vec<String>,
    /// the key exchange's group (IANA name, or "0x…"; "none": a resumption without one)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_group: Option<String>,
    /// why the server sent a HelloRetryRequest
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hrr_cause: Option<String>,
    /// the client offered a post-quantum group
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pq_offered: Option<bool>,
    /// the size of the client's (first) ClientHello
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_hello_bytes: Option<u32>,
    /// the client's JA4 fingerprint
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ja4: Option<String>,
    pub kind: Kind,
    pub resumption_offered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumption: Option<Resumption>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub early_data: bool,
    /// accept() → handshake complete
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake_ns: Option<u64>,
    /// the stages that happened, in wire order
    pub stages_ns: Ordered<u64>,
    /// on-CPU time of the server thread in each service stage
    #[serde(default, skip_serializing_if = "Ordered::is_empty")]
    pub cpu_ns: Ordered<u64>,
    /// on-CPU time of the server thread across each wait for the client between two
    /// service stages, keyed by the wait's delay stage
    #[serde(default, skip_serializing_if = "Ordered::is_empty")]
    pub wait_cpu_ns: Ordered<u64>,
    /// the service stages of `cpu_ns` whose first read found the CPU had been idle since a
    /// service stage last ran on it (cold caches, a wake from an idle state); absent when
    /// the CPU's idle mark cannot be read
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_before: Option<Vec<String>>,
    /// with `--uprobes all`: what SSL_read/SSL_write saw of the first exchange
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<LibraryLine>,
    pub stage_classes: Ordered<StageClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_in: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<AlertLine>,
    /// "ssl" or "wire"; null for plain and failed connections
    pub hs_done_from: Option<String>,
    pub ssl_calls: u32,
    pub ssl_ns: u64,
    /// what could not be read (client_hello_missing, record_stream_desync, …)
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// with `--container-labels`: the id of the container the server runs in (64 hex
    /// digits); absent outside a container and without the flag
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// with `--container-labels` on a Kubernetes node: the server's pod, when its
    /// directory in the kubelet's pod log directory was found
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s_pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s_namespace_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LibraryLine {
    pub request_bytes: u64,
    pub request_ns: u64,
    pub response_bytes: u64,
    pub response_ns: u64,
}

/// The first plaintext alert seen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlertLine {
    /// "server" or "client"
    pub from: String,
    pub level: u8,
    pub description: u8,
}

/// `"record": "close"`: a connection ended, with its totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloseLine {
    /// "close"
    pub record: String,
    pub time: String,
    pub conn_id: u64,
    pub pid: u32,
    /// request/response exchanges after the handshake
    pub exchanges: u32,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// accept() → close; left out when the accept was not seen
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ns: Option<u64>,
    /// with `--container-labels`: as on the connection line
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s_pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub k8s_namespace_name: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde::de::DeserializeOwned;
    use serde_json::Value;

    use super::*;
    use crate::{
        abi::{self, test_conn as conn, Close},
        clock::Clock,
        container::{Container, Pod},
        record::{build, CloseRecord, Hellos},
        stage::{Stage, Stages},
    };

    /// A container in a Kubernetes pod.
    fn in_a_pod() -> Option<Arc<Container>> {
        Some(Arc::new(Container {
            id: "ab".repeat(32),
            pod: Some(Pod {
                name: "web-0".into(),
                namespace: "shop".into(),
                uid: "2f8e7a1c-5b3d-4e6f-9a0b-1c2d3e4f5a6b".into(),
            }),
        }))
    }

    /// A line print.rs wrote reads as the type `T`, and the type writes back the same JSON:
    /// no field the writer puts is missing from the type, none is spelled differently,
    /// every value reads as the type says.
    fn same_as_the_type<T: DeserializeOwned + Serialize>(line: &[u8]) -> T {
        let written: Value = serde_json::from_slice(line).expect("the writer writes JSON");
        let typed: T = serde_json::from_value(written.clone())
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(line)));
        assert_eq!(serde_json::to_value(&typed).unwrap(), written);
        typed
    }

    #[test]
    fn the_connection_writer_and_the_type_agree() {
        // every optional field present
        let mut c = conn();
        c.outcome = abi::OUTCOME_FAILED;
        c.failure = abi::FAIL_ALERT;
        c.alert_level = 2;
        c.alert_desc = 40;
        c.lib_req_ns = 1;
        c.comm = *b"a\"b\\c\0\0\0\0\0\0\0\0\0\0\0";
        let mut r = build(&c, Hellos::default(), &Clock::new(), false);
        r.alpn_offered = vec!["h2".into(), "http/1.1".into()];
        r.tls_group = Some("X25519MLKEM768".into());
        r.hrr_cause = Some("no_acceptable_share");
        r.pq_offered = Some(true);
        r.client_hello_bytes = Some(1_813);
        r.ja4 = Some("t13d1516h2_8daaf6152771_e5627efa2ab1".into());
        r.resumption = Some(Resumption::Psk);
        r.early_data = true;
        r.handshake_ns = Some(5);
        r.cpu_ns = Stages(vec![(Stage::ServerFlight1, 3)]);
        r.wait_cpu_ns = Stages(vec![(Stage::WaitClientFlight2, 4)]);
        r.idle_before = Some(vec![Stage::ServerFlight1]);
        r.app_protocol = Some("smtp");
        r.starttls = Some("refused");
        r.container = in_a_pod();
        let mut line = Vec::new();
        r.json(&mut line);
        let typed: ConnectionLine = same_as_the_type(&line);
        assert_eq!(typed.comm, "a\"b\\c");
        assert_eq!(
            (
                typed.container_id.as_deref(),
                typed.k8s_pod_name.as_deref(),
                typed.k8s_namespace_name.as_deref()
            ),
            (Some("ab".repeat(32).as_str()), Some("web-0"), Some("shop"))
        );
        assert_eq!(typed.kind, Kind::Failed);
        assert_eq!(
            typed.stage_classes.get("wait_client_hello"),
            Some(&StageClass::Delay)
        );
        assert!(typed.library.is_some() && !typed.notes.is_empty());
        let alert = typed.alert.expect("an alert");
        assert_eq!(
            (alert.from.as_str(), alert.level, alert.description),
            ("client", 2, 40)
        );
        assert_eq!(typed.stages_ns.get("accept_queue"), Some(&100));
        // every optional field absent: a completed handshake with nothing to add
        let mut c = conn();
        c.flags |= abi::F_HS_DONE_SSL;
        let r = build(&c, Hellos::default(), &Clock::new(), false);
        line.clear();
        r.json(&mut line);
        let typed: ConnectionLine = same_as_the_type(&line);
        assert_eq!(typed.hs_done_from.as_deref(), Some("ssl"));
        assert!(typed.failure.is_none() && typed.alert.is_none());
        assert!(typed.container_id.is_none() && typed.k8s_pod_name.is_none());
    }

    #[test]
    fn the_close_writer_and_the_type_agree() {
        for t_accept in [1, 0] {
            let mut close = CloseRecord::new(
                &Close {
                    t_accept,
                    t_close: 2,
                    exchanges: 3,
                    ..Default::default()
                },
                &Clock::new(),
            );
            // every optional field present, then absent
            if t_accept != 0 {
                close.container = in_a_pod();
            }
            let mut line = Vec::new();
            close.json(&mut line);
            let typed: CloseLine = same_as_the_type(&line);
            assert_eq!(
                (
                    typed.exchanges,
                    typed.duration_ns.is_some(),
                    typed.k8s_namespace_name.is_some()
                ),
                (3, t_accept != 0, t_accept != 0)
            );
        }
    }
}
