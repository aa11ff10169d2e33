//! The OTLP side's own thread: records counted into the OpenTelemetry SDK's instruments,
//! with OTel's attribute names and the same label bounds as metrics.rs.

use std::{
    borrow::Cow,
    collections::HashMap,
    sync::{
        mpsc::{Receiver, SyncSender},
        Arc,
    },
    time::{Duration, Instant},
};

use opentelemetry::{
    metrics::{BoundCounter, BoundHistogram, Counter, Gauge, Histogram, Meter},
    KeyValue,
};

use super::{
    conn::{Conn, Text},
    series::Cache,
    Msg, OtlpStats,
};
use crate::{
    health::Health,
    metrics::{
        group_label, hrr_cause_index, offered_index, TopLabels, CLIENT_KINDS, HRR_CAUSES,
        MAX_CONTAINERS, OFFERED, OTHER,
    },
    stage::{Kind, Stage},
};

/// The instruments, and the label bounds kept as metrics.rs keeps them.
pub(super) struct Recorder {
    stage: Histogram<f64>,
    handshake: Histogram<f64>,
    stage_cpu: Counter<f64>,
    connections: Counter<u64>,
    failures: Counter<u64>,
    handshakes: Counter<u64>,
    records: Counter<u64>,
    lost: Counter<u64>,
    accepted: Counter<u64>,
    tracked: Counter<u64>,
    uprobe_failures: Counter<u64>,
    uprobes_untied: Counter<u64>,
    accept_queue_unmeasured: Counter<u64>,
    hook_runs_skipped: Counter<u64>,
    sni_folded: Counter<u64>,
    key_exchanges: Counter<u64>,
    hello_retries: Counter<u64>,
    clients: Counter<u64>,
    ja4_folded: Counter<u64>,
    in_progress: Gauge<i64>,
    open: Gauge<i64>,
    traced: Gauge<i64>,
    sni: TopLabels,
    ja4: TopLabels,
    /// containers with attributes of their own, and whether each had a connection in
    /// this label window
    containers: HashMap<String, bool>,
    series: Series,
    window_end: Instant,
    label_window: Duration,
    last: Health,
}

/// A server: process name, port, container (or "other").
type ServerKey = (String, u16, Option<String>);
/// `hstrace.connections`: server, kind, protocol, TLS version, cipher.
type ConnectionKey = (
    u64,
    Kind,
    &'static str,
    &'static str,
    Option<Cow<'static, str>>,
);
/// `hstrace.tls.handshakes`: server, SNI label, kind, resumed, offered, group.
type HandshakeKey = (u64, String, Kind, bool, &'static str, &'static str);

/// Each instrument's series, bound once (series.rs), keyed by the server's id and the
/// labels past it (the `&'static str`s are the attribute values themselves).
struct Series {
    next_server: u64,
    servers: Cache<ServerKey, (u64, Arc<[KeyValue]>)>,
    last_server: Option<(ServerKey, u64, Arc<[KeyValue]>)>,
    stage: Cache<(u64, Stage, Kind, &'static str), BoundHistogram<f64>>,
    stage_cpu: Cache<(u64, Stage, Kind, &'static str), BoundCounter<f64>>,
    connections: Cache<ConnectionKey, BoundCounter<u64>>,
    failures: Cache<(u64, &'static str, Stage), BoundCounter<u64>>,
    hello_retries: Cache<(u64, &'static str), BoundCounter<u64>>,
    clients: Cache<(u64, String, Kind), BoundCounter<u64>>,
    handshake: Cache<(u64, Kind, &'static str), BoundHistogram<f64>>,
    handshakes: Cache<HandshakeKey, BoundCounter<u64>>,
    key_exchanges: Cache<(u64, Kind, &'static str, &'static str), BoundCounter<u64>>,
}

impl Series {
    fn new() -> Series {
        Series {
            next_server: 0,
            servers: Cache::new(),
            last_server: None,
            stage: Cache::new(),
            stage_cpu: Cache::new(),
            connections: Cache::new(),
            failures: Cache::new(),
            hello_retries: Cache::new(),
            clients: Cache::new(),
            handshake: Cache::new(),
            handshakes: Cache::new(),
            key_exchanges: Cache::new(),
        }
    }
}

/// A server's attributes and then `extra`.
fn with<const N: usize>(server: &[KeyValue], extra: [KeyValue; N]) -> Vec<KeyValue> {
    server.iter().cloned().chain(extra).collect()
}

impl Recorder {
    pub(super) fn new(
        meter: &Meter,
        max_sni: usize,
        max_ja4: usize,
        label_window: Duration,
        stats: &OtlpStats,
    ) -> Recorder {
        let failures = stats.export_failures.clone();
        meter
            .u64_observable_counter("hstrace.otlp.export.failures")
            .with_description("OTLP exports that failed (the collector down, slow or refusing)")
            .with_unit("{export}")
            .with_callback(move |o| o.observe(failures.get(), &[]))
            .build();
        let dropped = stats.records_dropped.clone();
        meter
            .u64_observable_counter("hstrace.otlp.records.dropped")
            .with_description("Records the OTLP side dropped because its queue was full")
            .with_unit("{record}")
            .with_callback(move |o| o.observe(dropped.get(), &[]))
            .build();
        let count = |name: &'static str, unit: &'static str, description: &'static str| {
            meter
                .u64_counter(name)
                .with_unit(unit)
                .with_description(description)
                .build()
        };
        let gauge = |name: &'static str, unit: &'static str, description: &'static str| {
            meter
                .i64_gauge(name)
                .with_unit(unit)
                .with_description(description)
                .build()
        };
        Recorder {
            stage: meter
                .f64_histogram("hstrace.stage.duration")
                .with_unit("s")
                .with_description("Time of each stage of a connection")
                .build(),
            handshake: meter
                .f64_histogram("hstrace.handshake.duration")
                .with_unit("s")
                .with_description("accept() to handshake complete, of completed TLS handshakes")
                .build(),
            stage_cpu: meter
                .f64_counter("hstrace.stage.cpu")
                .with_unit("s")
                .with_description("On-CPU time of the server thread during service stages")
                .build(),
            connections: count(
                "hstrace.connections",
                "{connection}",
                "Connections reported, by how they went and what they spoke",
            ),
            failures: count(
                "hstrace.failures",
                "{connection}",
                "Connections that failed before their handshake completed",
            ),
            handshakes: count(
                "hstrace.tls.handshakes",
                "{handshake}",
                "Completed TLS handshakes, by SNI, kind and what the client offered to resume with",
            ),
            records: count(
                "hstrace.records",
                "{record}",
                "Records reported (connection lines and close lines)",
            ),
            lost: count(
                "hstrace.lost",
                "{record}",
                "Connection records, hellos or close lines lost, by cause",
            ),
            accepted: count(
                "hstrace.connections.accepted",
                "{connection}",
                "Connections the selected servers accepted",
            ),
            tracked: count(
                "hstrace.connections.tracked",
                "{connection}",
                "Connections the kernel side accepted and tracked",
            ),
            uprobe_failures: count(
                "hstrace.uprobe.attach_failures",
                "{process}",
                "Processes whose libssl could not be hooked",
            ),
            uprobes_untied: count(
                "hstrace.uprobes.untied",
                "{process}",
                "Processes whose uprobes tied no OpenSSL call to a connection",
            ),
            accept_queue_unmeasured: count(
                "hstrace.accept_queue.unmeasured",
                "{connection}",
                "Connections reported without an accept_queue stage",
            ),
            hook_runs_skipped: count(
                "hstrace.hook_runs.skipped",
                "{run}",
                "Runs of hstrace's hooks the kernel skipped, for any process's calls",
            ),
            sni_folded: count(
                "hstrace.sni.folded",
                "{handshake}",
                "TLS handshakes whose SNI was counted as \"other\"",
            ),
            key_exchanges: count(
                "hstrace.tls.key_exchanges",
                "{handshake}",
                "Completed TLS handshakes by the key-exchange group agreed and whether the client offered a post-quantum group",
            ),
            hello_retries: count(
                "hstrace.tls.hello_retries",
                "{handshake}",
                "HelloRetryRequests sent, by cause",
            ),
            clients: count(
                "hstrace.tls.clients",
                "{connection}",
                "TLS connections by the JA4 fingerprint of their ClientHello",
            ),
            ja4_folded: count(
                "hstrace.ja4.folded",
                "{connection}",
                "TLS connections whose JA4 was counted as \"other\"",
            ),
            in_progress: gauge(
                "hstrace.connections.in_progress",
                "{connection}",
                "Connections whose record has not been made yet",
            ),
            open: gauge(
                "hstrace.connections.open",
                "{connection}",
                "Tracked connections not closed yet",
            ),
            traced: gauge(
                "hstrace.traced_processes",
                "{process}",
                "Processes traced now",
            ),
            sni: TopLabels::new(max_sni),
            ja4: TopLabels::new(max_ja4),
            containers: HashMap::new(),
            series: Series::new(),
            window_end: Instant::now() + label_window,
            label_window,
            last: Health::default(),
        }
    }

    /// Until the daemon stops (the channel to answer it), or its end of the channel goes;
    /// each batch emptied goes back to the record path on `spares` (dropped when enough
    /// are there).
    pub(super) fn run(
        mut self,
        rx: Receiver<Msg>,
        spares: SyncSender<Vec<Conn>>,
    ) -> Option<SyncSender<()>> {
        while let Ok(m) = rx.recv() {
            match m {
                Msg::Stop(done) => return Some(done),
                Msg::Batch(mut b) => {
                    let n = b.conns.len() as u64;
                    for c in b.conns.drain(..) {
                        self.connection(c);
                    }
                    let _ = spares.try_send(b.conns);
                    let record = |r| [KeyValue::new("hstrace.record", r)];
                    self.records.add(n, &record("connection"));
                    self.records.add(b.closes, &record("close"));
                }
                Msg::Tick(h) => self.tick(&h),
            }
        }
        None
    }

    /// Which server: `process.executable.name`, `server.port` and its container, folded
    /// into `container.id="other"` past `MAX_CONTAINERS` as metrics.rs does; its id and
    /// attributes.
    fn server(&mut self, c: &Conn) -> (u64, Arc<[KeyValue]>) {
        let container = c.container.as_ref().map(|ct| {
            if let Some(active) = self.containers.get_mut(&ct.id) {
                *active = true;
                ct.id.as_str()
            } else if self.containers.len() < MAX_CONTAINERS {
                self.containers.insert(ct.id.clone(), true);
                ct.id.as_str()
            } else {
                OTHER
            }
        });
        // most records come from the server the one before came from
        if let Some(((comm, port, ct), id, attrs)) = &self.series.last_server {
            if comm == c.comm.as_str() && *port == c.port && ct.as_deref() == container {
                return (*id, attrs.clone());
            }
        }
        let key = (
            c.comm.as_str().to_owned(),
            c.port,
            container.map(str::to_owned),
        );
        let next = &mut self.series.next_server;
        let (id, attrs) = self.series.servers.get(key.clone(), || {
            let mut a = vec![
                KeyValue::new("process.executable.name", c.comm.as_str().to_owned()),
                KeyValue::new("server.port", i64::from(c.port)),
            ];
            if let Some(id) = container {
                a.push(KeyValue::new("container.id", id.to_owned()));
                let pod = c.container.as_ref().and_then(|ct| ct.pod.as_ref());
                if let Some(p) = pod.filter(|_| id != OTHER) {
                    a.push(KeyValue::new("k8s.namespace.name", p.namespace.clone()));
                    a.push(KeyValue::new("k8s.pod.name", p.name.clone()));
                }
            }
            *next += 1;
            (*next, a.into())
        });
        let (id, attrs) = (*id, attrs.clone());
        self.series.last_server = Some((key, id, attrs.clone()));
        (id, attrs)
    }

    fn connection(&mut self, mut c: Conn) {
        let (id, server) = self.server(&c);
        let kind = c.kind;
        let k = kind.name();
        let group = group_label(c.tls_group.as_deref(), kind);
        let s = &mut self.series;
        for (stage, ns) in c.stages_ns.iter() {
            s.stage
                .get((id, stage, kind, group), || {
                    self.stage.bind(&with(
                        &server,
                        [
                            KeyValue::new("hstrace.stage", stage.name()),
                            KeyValue::new("hstrace.stage.class", stage.class().name()),
                            KeyValue::new("hstrace.kind", k),
                            KeyValue::new("hstrace.tls.group", group),
                        ],
                    ))
                })
                .record(ns as f64 * 1e-9);
        }
        for (stage, ns) in c.cpu_ns.iter() {
            s.stage_cpu
                .get((id, stage, kind, group), || {
                    self.stage_cpu.bind(&with(
                        &server,
                        [
                            KeyValue::new("hstrace.stage", stage.name()),
                            KeyValue::new("hstrace.kind", k),
                            KeyValue::new("hstrace.tls.group", group),
                        ],
                    ))
                })
                .add(ns as f64 * 1e-9);
        }
        let tls_version = c.tls_version.unwrap_or("none");
        let app = c.app.unwrap_or("none");
        let cipher = c.cipher.take();
        s.connections
            .get((id, kind, app, tls_version, cipher.clone()), || {
                self.connections.bind(&with(
                    &server,
                    [
                        KeyValue::new("hstrace.kind", k),
                        KeyValue::new("network.protocol.name", app),
                        KeyValue::new("tls.protocol.version", tls_version),
                        KeyValue::new("tls.cipher", cipher.as_deref().unwrap_or("none").to_owned()),
                    ],
                ))
            })
            .add(1);
        if let Some((reason, stage)) = c.failure {
            s.failures
                .get((id, reason, stage), || {
                    self.failures.bind(&with(
                        &server,
                        [
                            KeyValue::new("error.type", reason),
                            KeyValue::new("hstrace.stage", stage.name()),
                        ],
                    ))
                })
                .add(1);
        }
        if let Some(cause) = c.hrr_cause {
            let cause = HRR_CAUSES[hrr_cause_index(cause)];
            s.hello_retries
                .get((id, cause), || {
                    self.hello_retries
                        .bind(&with(&server, [KeyValue::new("hstrace.cause", cause)]))
                })
                .add(1);
        }
        if CLIENT_KINDS.contains(&kind) {
            let ja4 = self
                .ja4
                .label(c.ja4.as_ref().map(Text::as_str))
                .into_owned();
            if ja4 == OTHER {
                self.ja4_folded.add(1, &[]);
            }
            s.clients
                .get((id, ja4.clone(), kind), || {
                    self.clients.bind(&with(
                        &server,
                        [
                            KeyValue::new("hstrace.tls.client.ja4", ja4),
                            KeyValue::new("hstrace.kind", k),
                        ],
                    ))
                })
                .add(1);
        }
        let resumed = match kind {
            Kind::Full => false,
            Kind::Resumed => true,
            Kind::Plain | Kind::Failed => return,
        };
        if let Some(h) = c.handshake_ns {
            s.handshake
                .get((id, kind, tls_version), || {
                    self.handshake.bind(&with(
                        &server,
                        [
                            KeyValue::new("hstrace.kind", k),
                            KeyValue::new("tls.protocol.version", tls_version),
                        ],
                    ))
                })
                .record(h as f64 * 1e-9);
        }
        let sni = self
            .sni
            .label(c.sni.as_ref().map(Text::as_str))
            .into_owned();
        if sni == OTHER {
            self.sni_folded.add(1, &[]);
        }
        let offer = OFFERED[offered_index(c.offered.or(if resumed { c.resumption } else { None }))];
        s.handshakes
            .get((id, sni.clone(), kind, resumed, offer, group), || {
                self.handshakes.bind(&with(
                    &server,
                    [
                        KeyValue::new("server.address", sni),
                        KeyValue::new("hstrace.kind", k),
                        KeyValue::new("tls.resumed", resumed),
                        KeyValue::new("hstrace.tls.resumption_offered", offer),
                        KeyValue::new("hstrace.tls.group", group),
                    ],
                ))
            })
            .add(1);
        let pq = c.pq_offered;
        s.key_exchanges
            .get((id, kind, group, pq), || {
                self.key_exchanges.bind(&with(
                    &server,
                    [
                        KeyValue::new("hstrace.kind", k),
                        KeyValue::new("hstrace.tls.group", group),
                        KeyValue::new("hstrace.tls.post_quantum_offered", pq),
                    ],
                ))
            })
            .add(1);
    }

    /// The tracer's totals as counter increments since the last tick, as metrics.rs
    /// turns them; the label window's end re-ranks SNI names and frees containers.
    fn tick(&mut self, h: &Health) {
        let last = &self.last;
        for ((cause, now), (_, before)) in h.losses().into_iter().zip(last.losses()) {
            self.lost.add(
                now.saturating_sub(before),
                &[KeyValue::new("hstrace.cause", cause)],
            );
        }
        self.accepted
            .add(h.accepted.saturating_sub(last.accepted), &[]);
        self.tracked
            .add(h.tracked.saturating_sub(last.tracked), &[]);
        self.uprobe_failures.add(
            h.uprobe_attach_failures
                .saturating_sub(last.uprobe_attach_failures),
            &[],
        );
        self.uprobes_untied
            .add(h.uprobes_untied.saturating_sub(last.uprobes_untied), &[]);
        self.accept_queue_unmeasured.add(
            h.accept_queue_unmeasured
                .saturating_sub(last.accept_queue_unmeasured),
            &[],
        );
        self.hook_runs_skipped.add(
            h.hook_runs_skipped.saturating_sub(last.hook_runs_skipped),
            &[],
        );
        self.in_progress.record(h.in_progress as i64, &[]);
        self.open.record(h.open as i64, &[]);
        self.traced.record(h.traced_processes as i64, &[]);
        self.last = h.clone();
        let now = Instant::now();
        if now >= self.window_end {
            self.sni.rotate();
            self.ja4.rotate();
            self.containers.retain(|_, active| std::mem::take(active));
            self.window_end = now + self.label_window;
        }
    }
}
