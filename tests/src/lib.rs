//! Test support for the integration tests (tests/tests/) and for xtask's jobs: throwaway
//! servers on loopback, the real `hstrace` binary, real clients, proxies, assertions.
//! Everything lives under target/hstrace-tests/ and is stopped on drop. This crate never
//! depends on the `hstrace` crate: xtask uses it, and must build before `cargo xtask setup`
//! has installed clang.

/// Assertions on what hstrace printed: stages, the accounting, JSON readers.
pub mod assert;
/// Debian's headless Chromium: a page's DOM, a screenshot, a server that records requests.
pub mod chromium;
/// openssl s_client and s_time, curl, raw exchanges, the mix of every kind.
pub mod clients;
/// A CPU kept for one test's server while the rest of the machine runs on the others.
pub mod cpuset;
/// A real `hstrace serve` and its metrics.
pub mod daemon;
/// Throwaway certificates and the captured ClientHellos.
pub mod fixtures;
/// A TLS 1.3 server and client from Go's crypto/tls alone, post-quantum hybrids first.
pub mod go_pqtls;
/// The real `hstrace` binary: `trace` until Ctrl-C, or run to completion.
pub mod hstrace;
/// The one HTTP/1.0 GET.
pub mod http;
/// ja4plus (PyPI), an independent JA4, compared with hstrace's record by record.
pub mod ja4plus;
/// A real OpenTelemetry Collector built from its Go modules, and what it received.
pub mod otelcol;
/// A page or a picture as Chromium sees it, and the checks every drawing passes there.
pub mod page;
/// podman with Debian's runc and this sandbox's containers.conf.
pub mod podman;
/// Children, CPU time, memory and CPU affinity of processes; stopped processes.
pub mod procs;
/// A real Prometheus, promtool, the dashboard's queries.
pub mod prometheus;
/// The delaying and the re-framing proxy.
pub mod proxies;
/// Mosquitto, MariaDB and vsftpd: TLS off the common path.
pub mod quirky_servers;
/// nginx, Apache, HAProxy, Node.js, Go and the static C server.
pub mod servers;
/// PostgreSQL, Postfix and Dovecot: TLS after a plaintext preamble; their clients.
pub mod starttls_servers;
/// The workspace, fresh directories, free ports, waiting, a median.
pub mod util;
/// Mutated real handshakes on the wire (`cargo xtask fuzz-wire`, the soak, a test).
pub mod wire_fuzz;
