//! The stage model as names: every stage with its name and class, every kind of
//! connection, request class and resumption mechanism. The names here are the only
//! spelling of them in the code (the JSON lines, the metrics' label values, the parameters
//! JSON and the dashboards all use them); the tracer cuts a connection's timeline into
//! these stages (hstrace's `stage`).

/// What a stage's time is: the server working, a message waiting for the server, or the
/// server waiting for the client and the network (seed 002's web-server and delay-server
/// stages, with queueing split out).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum StageClass {
    Service,
    Queue,
    Delay,
}

impl StageClass {
    pub const ALL: [StageClass; 3] = [StageClass::Service, StageClass::Queue, StageClass::Delay];

    pub fn name(self) -> &'static str {
        match self {
            StageClass::Service => "service",
            StageClass::Queue => "queue",
            StageClass::Delay => "delay",
        }
    }
}

/// A stage of one connection, in wire order (docs/stages.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stage {
    AcceptQueue,
    PreambleWait,
    PreambleQueue,
    PreambleService,
    WaitClientHello,
    ClientHelloQueue,
    HelloRetry,
    WaitClientHello2,
    ClientHello2Queue,
    ServerFlight1,
    WaitClientFlight2,
    ClientFlight2Queue,
    ServerFlight2,
    WaitRequest,
    RequestQueue,
    Response,
}

impl Stage {
    /// Every stage, in wire order.
    pub const ALL: [Stage; 16] = [
        Stage::AcceptQueue,
        Stage::PreambleWait,
        Stage::PreambleQueue,
        Stage::PreambleService,
        Stage::WaitClientHello,
        Stage::ClientHelloQueue,
        Stage::HelloRetry,
        Stage::WaitClientHello2,
        Stage::ClientHello2Queue,
        Stage::ServerFlight1,
        Stage::WaitClientFlight2,
        Stage::ClientFlight2Queue,
        Stage::ServerFlight2,
        Stage::WaitRequest,
        Stage::RequestQueue,
        Stage::Response,
    ];

    /// The stage table: name and class of each stage, in wire order.
    pub fn name(self) -> &'static str {
        self.info().0
    }

    pub fn class(self) -> StageClass {
        self.info().1
    }

    fn info(self) -> (&'static str, StageClass) {
        use StageClass::*;
        match self {
            Stage::AcceptQueue => ("accept_queue", Queue),
            Stage::PreambleWait => ("preamble_wait", Delay),
            Stage::PreambleQueue => ("preamble_queue", Queue),
            Stage::PreambleService => ("preamble_service", Service),
            Stage::WaitClientHello => ("wait_client_hello", Delay),
            Stage::ClientHelloQueue => ("client_hello_queue", Queue),
            Stage::HelloRetry => ("hello_retry", Service),
            Stage::WaitClientHello2 => ("wait_client_hello_2", Delay),
            Stage::ClientHello2Queue => ("client_hello_2_queue", Queue),
            Stage::ServerFlight1 => ("server_flight_1", Service),
            Stage::WaitClientFlight2 => ("wait_client_flight_2", Delay),
            Stage::ClientFlight2Queue => ("client_flight_2_queue", Queue),
            Stage::ServerFlight2 => ("server_flight_2", Service),
            Stage::WaitRequest => ("wait_request", Delay),
            Stage::RequestQueue => ("request_queue", Queue),
            Stage::Response => ("response", Service),
        }
    }

    pub fn from_name(name: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Position in `ALL` (for per-stage arrays).
    pub fn index(self) -> usize {
        self as usize
    }

    /// Is the server thread's on-CPU time read for this stage (`cpu_ns`)? Every service
    /// stage but the preamble's, which sums several answers whose CPU is not read.
    pub fn has_cpu(self) -> bool {
        self.class() == StageClass::Service && self != Stage::PreambleService
    }

    /// The service stage whose first read ends this queue stage, among a connection's
    /// `stages`: the message queued is the one that stage answers (the first ClientHello's
    /// is the retry's where the server asked for another, even where the retry's own stage
    /// was not timed). None for the accept queue and the preamble's, which no stage with
    /// an idle mark reads.
    pub fn read_by(self, stages: &[(Stage, u64)]) -> Option<Stage> {
        match self {
            // a retry, whichever of its stages were timed
            Stage::ClientHelloQueue
                if stages.iter().any(|(s, _)| {
                    matches!(
                        s,
                        Stage::HelloRetry | Stage::WaitClientHello2 | Stage::ClientHello2Queue
                    )
                }) =>
            {
                Some(Stage::HelloRetry)
            }
            Stage::ClientHelloQueue | Stage::ClientHello2Queue => Some(Stage::ServerFlight1),
            Stage::ClientFlight2Queue => Some(Stage::ServerFlight2),
            Stage::RequestQueue => Some(Stage::Response),
            _ => None,
        }
    }
}

/// How a connection went.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// a TLS handshake with a certificate (no session resumed)
    Full,
    /// a TLS handshake that resumed a session (id, ticket or PSK)
    Resumed,
    /// plain HTTP: the seed model's type-2 request
    Plain,
    /// ended before its handshake completed
    Failed,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Full, Kind::Resumed, Kind::Plain, Kind::Failed];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Full => "full",
            Kind::Resumed => "resumed",
            Kind::Plain => "plain",
            Kind::Failed => "failed",
        }
    }

    /// The request class of seed 002's model this kind of connection is (failed ones are
    /// counted, not a class).
    pub fn class(self) -> Option<RequestClass> {
        match self {
            Kind::Full => Some(RequestClass::TlsFull),
            Kind::Resumed => Some(RequestClass::TlsResumed),
            Kind::Plain => Some(RequestClass::Plain),
            Kind::Failed => None,
        }
    }
}

/// The request classes of the queueing model (`hstrace.parameters/v1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RequestClass {
    TlsFull,
    TlsResumed,
    Plain,
}

impl RequestClass {
    pub const ALL: [RequestClass; 3] = [
        RequestClass::TlsFull,
        RequestClass::TlsResumed,
        RequestClass::Plain,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RequestClass::TlsFull => "tls_full",
            RequestClass::TlsResumed => "tls_resumed",
            RequestClass::Plain => "plain",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// How a resumed session was found.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Resumption {
    SessionId,
    Ticket,
    Psk,
}

impl Resumption {
    /// Every mechanism, in declaration order (`index`).
    pub const ALL: [Resumption; 3] = [Resumption::SessionId, Resumption::Ticket, Resumption::Psk];

    /// Position in `ALL` (for per-mechanism arrays).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The mechanism named `name` (`name()`'s spelling).
    pub fn from_name(name: &str) -> Option<Resumption> {
        Resumption::ALL.into_iter().find(|r| r.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Resumption::SessionId => "session_id",
            Resumption::Ticket => "ticket",
            Resumption::Psk => "psk",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stage_table_round_trips() {
        for (i, s) in Stage::ALL.into_iter().enumerate() {
            assert_eq!(s.index(), i);
            assert_eq!(Stage::from_name(s.name()), Some(s));
        }
        assert_eq!(Stage::from_name("nope"), None);
        // every service stage's CPU is read but the preamble's
        assert!(Stage::ALL
            .into_iter()
            .all(|s| s.has_cpu()
                == (s.class() == StageClass::Service && s != Stage::PreambleService)));
        let service: Vec<&str> = Stage::ALL
            .into_iter()
            .filter(|s| s.class() == StageClass::Service)
            .map(Stage::name)
            .collect();
        assert_eq!(
            service,
            [
                "preamble_service",
                "hello_retry",
                "server_flight_1",
                "server_flight_2",
                "response"
            ]
        );
    }
}
