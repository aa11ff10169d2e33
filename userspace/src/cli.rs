//! The `hstrace` command line: its clap definitions (from which the man pages and shell
//! completions are generated, see tools/), the checks of every option value, and the
//! wiring of each command to the record source and its sink.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use crate::{
    export::{self, ExportFormat},
    model::{self, args, keys, knobs, network::Discipline, ModelFormat, ModelOptions},
    print::Format,
    probes::Uprobes,
    report,
    serve::{self, ServeOptions},
    source::Options,
    targets::Selector,
};
use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    name = "hstrace",
    version,
    about = "Per-stage latency of every TCP + TLS handshake of unmodified, running servers",
    long_about = "Per-stage latency of every TCP + TLS handshake of unmodified, running servers.\n\n\
        hstrace attaches eBPF programs to the kernel (and, optionally, uprobes to OpenSSL) and \
        times each stage of every connection the selected servers accept: the accept queue, \
        waiting for the ClientHello, the server's flights, waiting for the client, queueing \
        inside the server and the first response. It reads only TLS record and handshake \
        headers and the ClientHello/ServerHello, never application data. Needs root (or \
        CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH) and a kernel with BTF.",
    after_help = "Examples:\n  \
        hstrace trace --comm nginx                   one line per connection, live\n  \
        hstrace serve --comm nginx                   metrics on http://127.0.0.1:9725/metrics\n  \
        hstrace export --duration 60 --port 443      the measured stage parameters, once\n  \
        hstrace model --from http://127.0.0.1:9725   response time forecast for more users"
)]
pub struct Cli {
    /// More detail on stderr: which hook each probe group uses (-v), libbpf and verifier detail (-vv), every kernel record as it arrives (-vvv)
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum UprobesArg {
    None,
    Handshake,
    All,
}

#[derive(Clone, Copy, ValueEnum)]
enum BpfBuildArg {
    Auto,
    Full,
    Basic,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum ExportFormatArg {
    Json,
    Csv,
    Table,
}

#[derive(Clone, Copy, ValueEnum)]
enum DisciplineArg {
    /// requests share the processor (threads or processes: Apache, most servers)
    ProcessorSharing,
    /// one event loop (an nginx worker): each flight is answered to completion, in turn
    /// (approximate MVA; one loop only)
    EventLoop,
    /// the event loops as nginx runs them (gated passes over the ready list, one accept
    /// per pass; --servers workers sharing the listeners), by discrete-event simulation
    /// (--seed)
    EventLoopSim,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModelFormatArg {
    Text,
    Json,
    Csv,
}

/// What to trace and how: the same for trace, serve and export.
#[derive(Args)]
struct SourceArgs {
    /// Trace this process and its descendants (a master's workers); repeatable
    #[arg(long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// Trace every process with this name
    #[arg(long, value_name = "NAME")]
    comm: Option<String>,
    /// Trace connections to this listening port
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// Wire only: no uprobes at all (same as --uprobes none)
    #[arg(long)]
    no_uprobes: bool,
    /// OpenSSL functions hooked in the traced processes: none; handshake
    /// (SSL_do_handshake); all (also SSL_read/SSL_write: the library's view of the
    /// first request and response, at a uprobe hit per call) [default: handshake for
    /// trace, export and report, none for serve]
    #[arg(long, value_enum)]
    uprobes: Option<UprobesArg>,
    /// Report a connection idle this long as it stands (a handshake that never
    /// completed: failed, "timeout")
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    idle_timeout: f64,
    /// Connections tracked at once in the kernel; past it, new ones are counted (table_full), not tracked
    #[arg(long, default_value_t = crate::abi::MAX_CONNS, value_name = "N")]
    max_conns: u32,
    /// Pass over the probe-table alternatives that use this hook (an event or kernel
    /// function name, or a family: tracepoint, tp_btf, fentry, kprobe), as on a kernel
    /// without it: the tests run the fallbacks this way
    #[arg(long, value_name = "HOOK", hide = true)]
    avoid_hook: Vec<String>,
    /// Which build of the BPF programs to load: the one the kernel's features allow
    /// (auto), or the basic one, as on a kernel without them: the tests run it this way
    #[arg(long, value_enum, default_value = "auto", hide = true)]
    bpf_build: BpfBuildArg,
    /// Label each connection with the container its server runs in (container_id) and,
    /// on a Kubernetes node, its pod (k8s_pod_name, k8s_namespace_name): read once per
    /// server process from /proc/PID/cgroup and the kubelet's pod log directories
    #[arg(long)]
    container_labels: bool,
    /// With --container-labels: the node's kubelet pod log directory, whose
    /// NAMESPACE_POD_UID subdirectories name the pods (in a container: the node's
    /// /var/log/pods mounted read-only) [default: /var/log/pods]
    #[arg(long, value_name = "DIR", requires = "container_labels")]
    pods_dir: Option<PathBuf>,
}

/// `serve`'s OTLP push: off unless an endpoint is given (here or in the environment).
#[derive(Args)]
#[command(next_help_heading = "OpenTelemetry (OTLP push)")]
struct OtlpArgs {
    /// Also push the metrics as OTLP to an OpenTelemetry Collector at this URL (e.g.
    /// http://127.0.0.1:4318, to which HTTP adds /v1/metrics, as to any URL without a
    /// path; https:// for TLS). Without it,
    /// OTEL_EXPORTER_OTLP_METRICS_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT turns the push on.
    /// OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, OTEL_RESOURCE_ATTRIBUTES and
    /// OTEL_SERVICE_NAME apply. docs/metrics.md#opentelemetry
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<String>,
    /// http/protobuf (default) or grpc [env: OTEL_EXPORTER_OTLP_PROTOCOL]
    #[arg(long, value_name = "PROTOCOL")]
    otlp_protocol: Option<String>,
    /// Seconds between pushes [default: OTEL_METRIC_EXPORT_INTERVAL, else 60]
    #[arg(long, value_name = "SECONDS")]
    otlp_interval: Option<f64>,
    /// The duration histograms: explicit (the Prometheus buckets) or exponential (base-2)
    #[arg(long, value_enum, default_value = "explicit", value_name = "KIND")]
    otlp_histograms: crate::otlp::HistogramKind,
    /// CA certificates (PEM) that sign the collector's certificate, the only ones
    /// trusted; without it, the system's (SSL_CERT_FILE and SSL_CERT_DIR apply)
    #[arg(long, env = "OTEL_EXPORTER_OTLP_CERTIFICATE", value_name = "FILE")]
    otlp_ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS with the collector
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
        value_name = "FILE"
    )]
    otlp_client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM)
    #[arg(long, env = "OTEL_EXPORTER_OTLP_CLIENT_KEY", value_name = "FILE")]
    otlp_client_key: Option<PathBuf>,
}

/// The cold start's measurement, for serve and export: off unless asked.
#[derive(Args)]
struct ColdStartFlag {
    /// Also time the cold start on a CPU the servers run on, for `hstrace model`
    /// (host.cold_start): a thread of hstrace's loads the host's libcrypto and runs SHA-256,
    /// AES-128-GCM, X25519 and ECDSA P-256 there, after pauses of up to 200 ms, for about
    /// 7 s, then every 6 s for as long as it runs (export: once). Its CPU: a few seconds an
    /// hour on the servers' CPUs (2 s in the run docs/cost.md names). Off by default:
    /// hstrace runs no work of its own on the host; `hstrace model --cold-start measure`
    /// times the same on a host you choose
    #[arg(long)]
    measure_cold_start: bool,
}

// one value, parsed once per process: its largest variant (`model`'s knobs) costs nothing
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Print one line per connection of the selected servers, live
    ///
    /// Each line: the connection's TLS version, cipher, SNI, kind (full, resumed, plain,
    /// failed) and every stage's duration.
    #[command(after_help = "Examples:\n  \
        hstrace trace --comm nginx\n  \
        hstrace trace --port 443 --format json --duration 60 > conns.ndjson\n  \
        hstrace trace --pid 1234 --uprobes none\n\n\
        The JSON lines are a contract: fields are only ever added (see docs/trace-records.md). \
        At exit the tracer's own accounting (every accepted connection reported, in progress \
        or lost with its cause) is printed on stderr.")]
    Trace {
        #[command(flatten)]
        source: SourceArgs,
        /// Stop after this many seconds (default: until Ctrl-C)
        #[arg(long, value_name = "SECONDS")]
        duration: Option<f64>,
        /// text: one readable line per connection; json: one JSON object per line
        #[arg(long, value_enum, default_value = "text")]
        format: FormatArg,
    },
    /// The daemon: Prometheus metrics, health and the measured stage parameters over HTTP
    ///
    /// Answers /metrics (OpenMetrics), /healthz (the tracer's accounting, JSON) and
    /// /api/v1/parameters (hstrace.parameters/v1). Wire only unless told --uprobes.
    #[command(after_help = "Examples:\n  \
        hstrace serve --comm nginx\n  \
        hstrace serve --port 443 --listen 0.0.0.0:9725\n\n\
        Run it as a service: the package's hstrace.service reads its options from \
        HSTRACE_ARGS in /etc/default/hstrace.")]
    Serve {
        #[command(flatten)]
        source: SourceArgs,
        /// Address to answer on (loopback by default: put it on another address only
        /// behind your network policy)
        #[arg(long, default_value = "127.0.0.1:9725", value_name = "ADDR:PORT")]
        listen: String,
        /// The parameters cover the last this many seconds
        #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
        window: f64,
        /// SNI label values kept in the metrics; the rest are counted as "other"
        #[arg(long, default_value_t = 50, value_name = "N")]
        max_sni: usize,
        /// Clients' JA4 fingerprints kept as label values in the metrics; the rest are
        /// counted as "other"
        #[arg(long, default_value_t = 50, value_name = "N")]
        max_ja4: usize,
        /// Every this many seconds, the SNI names and JA4 fingerprints with the most
        /// connections keep their series and the others' are removed (a scanner's names
        /// give way to real ones), as are those of containers without connections
        /// (--container-labels)
        #[arg(long, default_value_t = 600.0, value_name = "SECONDS")]
        label_window: f64,
        /// Failed handshakes kept for /api/v1/failures (the oldest go first)
        #[arg(long, default_value_t = 100, value_name = "N")]
        recent_failures: usize,
        /// How much of a failed handshake's peer address /api/v1/failures shows: full
        /// (address and port), prefix (its /24 or /48 network) or none. A client's address
        /// is personal data under most privacy rules
        #[arg(long, value_enum, default_value = "prefix", value_name = "DETAIL")]
        failures_peer: crate::failures::PeerDetail,
        /// TLS, mutual TLS and basic auth for every path, from a Prometheus
        /// exporter-toolkit web configuration file (tls_server_config, basic_auth_users with
        /// bcrypt hashes, http_server_config.headers); read at start, a wrong file stops the
        /// daemon. docs/deploy.md#guarding-the-endpoints
        #[arg(long = "web.config.file", value_name = "FILE")]
        web_config_file: Option<std::path::PathBuf>,
        #[command(flatten)]
        cold_start: ColdStartFlag,
        #[command(flatten)]
        otlp: OtlpArgs,
    },
    /// Print the measured stage parameters once: trace for --duration, or ask a daemon
    ///
    /// Per server and request class (full TLS, resumed TLS, plain): each stage's mean and
    /// percentiles, and the session cache's hit ratio (hstrace.parameters/v1).
    #[command(after_help = "Examples:\n  \
        hstrace export --duration 60 --comm nginx > params.json\n  \
        hstrace export --from http://127.0.0.1:9725 --format table")]
    Export {
        #[command(flatten)]
        source: SourceArgs,
        /// Trace this many seconds, then print the parameters of the whole run
        #[arg(long, value_name = "SECONDS", conflicts_with = "from")]
        duration: Option<f64>,
        /// Ask the `hstrace serve` at this address instead (e.g. http://127.0.0.1:9725)
        #[arg(long, value_name = "URL")]
        from: Option<String>,
        /// json (hstrace.parameters/v1), csv (a row per server, class and stage), table
        #[arg(long, value_enum, default_value = "json")]
        format: ExportFormatArg,
        #[command(flatten)]
        cold_start: ColdStartFlag,
    },
    /// Write one self-contained HTML page of where a server's handshakes spend their time
    ///
    /// A stage waterfall per kind of connection (TLS 1.2 / 1.3, full / resumed / failed,
    /// plain), each stage's distribution, the session cache, the failures, the measured
    /// parameters, the model's forecast and the tracer's own accounting: traced for
    /// --duration, or read from a running `hstrace serve`. No script, nothing fetched:
    /// open it anywhere, print it, attach it to a ticket.
    #[command(after_help = "Examples:\n  \
        hstrace report --duration 60 --comm nginx -o report.html\n  \
        hstrace report --from http://127.0.0.1:9725 --duration 60 -o report.html\n  \
        hstrace report --from http://127.0.0.1:9725   (the daemon's totals since it started)")]
    Report {
        #[command(flatten)]
        source: SourceArgs,
        /// Trace this many seconds (with --from: read the daemon's counters over them)
        #[arg(long, value_name = "SECONDS")]
        duration: Option<f64>,
        /// Read the `hstrace serve` at this address instead of tracing
        /// (e.g. http://127.0.0.1:9725)
        #[arg(long, value_name = "URL")]
        from: Option<String>,
        /// The server to report (`comm:port`, e.g. nginx:443; default: the one with the
        /// most connections)
        #[arg(long, value_name = "SERVER")]
        server: Option<String>,
        /// Where to write the page
        #[arg(
            short = 'o',
            long,
            value_name = "FILE",
            default_value = "hstrace-report.html"
        )]
        output: PathBuf,
    },
    /// Forecast throughput and response time for N users from what hstrace measured
    ///
    /// Give it a window hstrace measured (a daemon, `hstrace export`'s file, or Prometheus)
    /// and user counts: it answers how many requests a second the server will serve and how
    /// long each will take with that many users. Each request's service stages are demand
    /// on the server's CPUs, its waits for the client a delay. It picks how the server
    /// shares its CPUs from what it measured (an nginx event loop, Apache's processes) and
    /// says which; --discipline and --servers change it. What-if knobs: the hit ratio, the
    /// TLS share, a faster CPU, a costlier stage, another certificate key. How far a
    /// forecast from a quiet window holds: docs/model-validation.md.
    #[command(after_help = "Examples:\n  \
        hstrace model --from http://127.0.0.1:9725 --users 1..400\n  \
        hstrace model --params params.json --hit-ratio 0.9 --plot forecast.svg\n  \
        hstrace model --params params.json --key-change rsa2048:ecdsap256   (another certificate)\n\n\
        The model: docs/model.md; against loaded servers: docs/model-validation.md.")]
    Model {
        /// A hstrace.parameters/v1 file (`hstrace export`'s JSON, or written by hand)
        #[arg(long, value_name = "FILE")]
        params: Option<String>,
        /// Ask the `hstrace serve` at this address (e.g. http://127.0.0.1:9725)
        #[arg(long, value_name = "URL")]
        from: Option<String>,
        /// PromQL over the daemons' metrics in this Prometheus, summed across hosts
        /// (e.g. http://prom:9090)
        #[arg(long, value_name = "URL")]
        from_prometheus: Option<String>,
        /// With --from-prometheus: the seconds the stage means and class shares cover
        #[arg(
            long,
            default_value_t = 300.0,
            value_name = "SECONDS",
            allow_negative_numbers = true
        )]
        window: f64,
        /// The server (`comm:port`, e.g. nginx:443; default: the one with the most
        /// connections). Ports of one server, comma-separated (nginx:443,nginx:80), are one
        /// web server: their shares and stage means weighted by connections
        #[arg(long, value_name = "SERVER")]
        server: Option<String>,
        /// User counts: 1,10,50 or 1..400 (every integer) or 1..400:10 (every 10th, and
        /// 400); default: 1 to twice N* in about 50 steps
        #[arg(long, value_name = "LIST", allow_hyphen_values = true)]
        users: Option<String>,
        /// Mean think time between a user's requests (2s, 500ms, or seconds)
        #[arg(
            long,
            default_value = "2s",
            value_name = "TIME",
            allow_hyphen_values = true
        )]
        think_time: String,
        /// The share of requests that are TLS, full : resumed kept; a list (0.1,0.2,0.3)
        /// gives one curve each
        #[arg(long, value_name = "P[,P…]", allow_hyphen_values = true)]
        secure_fraction: Option<String>,
        /// The share of TLS requests that resume a session (the TLS share kept)
        #[arg(long, value_name = "R", allow_negative_numbers = true)]
        hit_ratio: Option<f64>,
        /// Divide every service demand by K (a K times faster CPU): the service stages and
        /// the server's measured CPU outside them
        #[arg(
            long,
            default_value_t = 1.0,
            value_name = "K",
            allow_negative_numbers = true
        )]
        cpu_speedup: f64,
        /// CPUs that other work keeps busy on the servers' CPUs (other programs, interrupts,
        /// hstrace): the servers run on what is left [default: as measured over the
        /// parameters' window (host.other_cpus), held at every load; 0 without it]
        #[arg(long, value_name = "CPUS", allow_negative_numbers = true)]
        other_cpus: Option<f64>,
        /// Multiply one stage's mean by K wherever it occurs (e.g. server_flight_2=4 for a
        /// costlier key; 0: the stage takes no time); repeatable
        #[arg(long, value_name = "STAGE=K", allow_hyphen_values = true)]
        scale_stage: Vec<String>,
        /// Predict response times if the server's certificate had another key: FROM is its
        /// key today (the one the parameters were measured with), TO the one to try, e.g.
        /// rsa2048:rsa4096 or
        /// rsa2048:ecdsap256 (rsa2048, rsa3072, rsa4096, ecdsap256, ecdsap384, ecdsap521,
        /// ed25519, ed448). Each full handshake pays one signature more or less: what one
        /// costs with each key is measured by running `openssl speed` here, about 2 s a key,
        /// so run it on the server's host (or one with the same CPU)
        #[arg(long, value_name = "FROM:TO")]
        key_change: Option<String>,
        /// Predict response times if every full handshake agreed on this key-exchange
        /// group (e.g. X25519MLKEM768): its measured service stages and waits for the
        /// client (the parameters' key_exchange) replace the full handshakes' of all
        /// groups. Measure some clients that negotiate it first
        #[arg(long, value_name = "GROUP")]
        group: Option<String>,
        /// With --key-change: each key's CPU per signature, measured elsewhere, instead of
        /// running openssl speed here (e.g. rsa2048=0.24ms,rsa4096=1.7ms)
        #[arg(long, value_name = "KEY=TIME,...")]
        sign_cost: Option<String>,
        /// Processors of the web server: CPUs shared by all requests (processor-sharing),
        /// or nginx workers, each an event loop on its own CPU (event-loop-sim)
        /// [default: as measured: an event loop's worker processes (at most the CPUs the
        /// server may run on), those CPUs for processes or threads per connection, else 1]
        #[arg(long, value_name = "C", allow_negative_numbers = true)]
        servers: Option<i64>,
        /// How the web server shares its CPUs (event-loop: approximate MVA, one loop;
        /// event-loop-sim: simulated, with a 95 % confidence half-width) [default: as
        /// measured: event-loop-sim for an event loop (nginx, HAProxy) and for a process
        /// per connection (Apache prefork: each CPU runs a flight to completion),
        /// processor-sharing for threads and when the parameters cannot tell (or come from
        /// Prometheus); said on stderr, and in the JSON's because]
        #[arg(long, value_enum)]
        discipline: Option<DisciplineArg>,
        /// The seed of --discipline event-loop-sim (the same seed, the same answer)
        #[arg(long, default_value_t = 1, value_name = "SEED")]
        seed: u32,
        /// The server's CPU per request that no stage measures (accepting, closing,
        /// logging): with processor-sharing each request's demand, with event-loop-sim
        /// shared among each request's handler calls [default: the parameters'
        /// cpu.outside_stages_s (event-loop-sim: less what its sleeps cost), else 0]
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        overhead: Option<String>,
        /// With event-loop-sim: the worker's CPU each time it goes to sleep in epoll_wait
        /// and is woken, paid by a handler call that finds it asleep (every one at low
        /// load, few under load) [default: the parameters' measured cpu.per_wait_s where
        /// the server was at low load, else 0]
        #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
        sleep_cpu: Option<String>,
        /// With event-loop-sim: how long a worker asleep in epoll_wait takes to run after
        /// an event (its CPU waking up): one TIME, or by how long it slept, IDLE=TIME,...
        /// (e.g. 1ms=50us,200ms=300us; interpolated on log(idle) between them)
        /// [default: with event-loop-sim, measured: the parameters' wakeup_after_idle (the
        /// live server's waits by how long its CPU slept), else its queue waits after an
        /// idle CPU, less --sleep-cpu; else 0]
        #[arg(long, value_name = "TIME|IDLE=TIME,...", allow_hyphen_values = true)]
        wakeup: Option<String>,
        /// With event-loop-sim: the CPU a stage pays when it runs cold, beyond its warm
        /// cost, by how long since it last ran on that CPU (SINCE=TIME,..., e.g.
        /// 1ms=2us,25ms=40us,200ms=60us): a one-user window's stages ran cold, a loaded
        /// server's run warm. By default the parameters' host.cold_start, which serve and
        /// export measure when told --measure-cold-start, on a CPU the servers run on, back
        /// to back and after pauses of 0.2 ms to 0.2 s: a TLS record's work (SHA-256 and
        /// AES-128-GCM over 16 KiB, the host's libcrypto), every visit's, and a full
        /// handshake's first flight's (X25519, an ECDSA P-256 signature and the record), the
        /// signing visit's. `measure` times the same here, on the first CPU hstrace may run
        /// on (about 7 s; on a host like the servers', which they need not share); a curve
        /// given is every visit's; `none` leaves it out. Without any, the forecast takes
        /// each stage as measured at every load and says so. Needs the parameters'
        /// rate_per_s (not from Prometheus) [default: the parameters']
        #[arg(
            long,
            value_name = "measure|none|SINCE=TIME,...",
            allow_hyphen_values = true
        )]
        cold_start: Option<String>,
        /// text (a table), json (hstrace.model/v1), csv (per curve and N: the whole mix's
        /// row, class all, then a row per class)
        #[arg(long, value_enum, default_value = "text")]
        format: ModelFormatArg,
        /// Draw response time against users per class to this SVG file
        #[arg(long, value_name = "FILE.svg")]
        plot: Option<PathBuf>,
        /// Measured points to draw on the --plot (CSV: users,response_s[,class])
        #[arg(long, value_name = "FILE")]
        measured: Option<PathBuf>,
    },
}

/// Seconds from the command line, checked: finite, positive, at most a year.
fn seconds(flag: &str, v: f64) -> Result<Duration> {
    if !v.is_finite() || v <= 0.0 || v > 365.0 * 86400.0 {
        // 1e300 as 1e300, not three hundred digits
        let v = if v.abs() >= 1e9 {
            format!("{v:e}")
        } else {
            v.to_string()
        };
        bail!("{flag} {v} is not a number of seconds between 0 and one year: give e.g. {flag} 60");
    }
    Ok(Duration::from_secs_f64(v))
}

impl SourceArgs {
    /// The options, with `uprobes` unless --uprobes or --no-uprobes says otherwise.
    fn options(self, uprobes: Uprobes) -> Result<Options> {
        if self.max_conns < 16 || self.max_conns > 1 << 22 {
            bail!(
                "--max-conns {} is out of range: give between 16 and {} (default {})",
                self.max_conns,
                1 << 22,
                crate::abi::MAX_CONNS
            );
        }
        if let Some(name) = &self.comm {
            if name.is_empty() || name.len() > 15 {
                bail!(
                    "--comm '{name}' cannot be a process name: the kernel keeps at most 15 bytes of one (see `ps -eo comm`)"
                );
            }
        }
        if let Some(dir) = &self.pods_dir {
            if !dir.is_dir() {
                bail!(
                    "--pods-dir {}: no such directory. Give the directory where the kubelet keeps its pods' logs (/var/log/pods on the node; in a container, where the node's is mounted)",
                    dir.display()
                );
            }
        }
        Ok(Options {
            selector: Selector {
                pids: self.pids,
                comm: self.comm,
                port: self.port,
            },
            uprobes: match (self.no_uprobes, self.uprobes) {
                (true, _) | (_, Some(UprobesArg::None)) => Uprobes::None,
                (_, Some(UprobesArg::Handshake)) => Uprobes::Handshake,
                (_, Some(UprobesArg::All)) => Uprobes::All,
                (false, None) => uprobes,
            },
            max_conns: self.max_conns,
            idle_timeout: seconds("--idle-timeout", self.idle_timeout)?,
            avoid_hooks: self.avoid_hook,
            bpf_build: match self.bpf_build {
                BpfBuildArg::Auto => None,
                BpfBuildArg::Full => Some(crate::features::Build::Full),
                BpfBuildArg::Basic => Some(crate::features::Build::Basic),
            },
            end_when_selection_exits: true,
            container_labels: self.container_labels,
            pods_dir: self
                .pods_dir
                .unwrap_or_else(|| PathBuf::from(crate::container::PODS_DIR)),
            cold_start: crate::cold_start::Want::No,
        })
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Run the command `cli` names.
pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Trace {
            source,
            duration,
            format,
        } => {
            let opts = source.options(Uprobes::Handshake)?;
            let duration = duration.map(|d| seconds("--duration", d)).transpose()?;
            let format = match format {
                FormatArg::Text => Format::Text,
                FormatArg::Json => Format::Json,
            };
            runtime()?.block_on(crate::trace::run(opts, format, duration))
        }
        Command::Serve {
            source,
            listen,
            window,
            max_sni,
            max_ja4,
            label_window,
            recent_failures,
            failures_peer,
            web_config_file,
            cold_start,
            otlp,
        } => {
            // wire only: the daemon's metrics all come from the wire, and SSL_do_handshake's
            // two uprobe round trips per handshake are a third of what hstrace costs one
            // (docs/cost.md); --uprobes handshake asks for them
            let opts = Options {
                end_when_selection_exits: false,
                cold_start: match cold_start.measure_cold_start {
                    true => crate::cold_start::Want::Background,
                    false => crate::cold_start::Want::No,
                },
                ..source.options(Uprobes::None)?
            };
            let listen: SocketAddr = listen.parse().map_err(|_| {
                anyhow::anyhow!(
                    "--listen {listen:?} is not an address:port (e.g. 127.0.0.1:9725 or [::1]:9725)"
                )
            })?;
            if max_sni > 10_000 {
                bail!("--max-sni {max_sni} is too many series: give at most 10000 (default 50)");
            }
            if max_ja4 > 10_000 {
                bail!("--max-ja4 {max_ja4} is too many series: give at most 10000 (default 50)");
            }
            if recent_failures > 100_000 {
                bail!("--recent-failures {recent_failures} is too many to keep in memory: give at most 100000 (default 100)");
            }
            serve::run(
                opts,
                ServeOptions {
                    listen,
                    window: seconds("--window", window)?,
                    max_sni,
                    max_ja4,
                    label_window: seconds("--label-window", label_window)?,
                    recent_failures,
                    failures_peer,
                    web_config: web_config_file,
                    otlp: crate::otlp::OtlpOptions::resolve(
                        otlp.otlp_endpoint,
                        otlp.otlp_protocol,
                        otlp.otlp_interval,
                        otlp.otlp_histograms,
                        otlp.otlp_ca_file,
                        otlp.otlp_client_cert,
                        otlp.otlp_client_key,
                    )?,
                },
            )
        }
        Command::Export {
            source,
            duration,
            from,
            format,
            cold_start,
        } => {
            let format = match format {
                ExportFormatArg::Json => ExportFormat::Json,
                ExportFormatArg::Csv => ExportFormat::Csv,
                ExportFormatArg::Table => ExportFormat::Table,
            };
            match (from, duration) {
                (Some(_), _) if cold_start.measure_cold_start => bail!(
                    "--measure-cold-start is for --duration: the daemon at --from measures it when it runs with --measure-cold-start"
                ),
                (Some(url), _) => export::from_daemon(&url, format),
                (None, Some(d)) => {
                    let d = seconds("--duration", d)?;
                    let opts = Options {
                        cold_start: match cold_start.measure_cold_start {
                            true => crate::cold_start::Want::BeforeTheEnd,
                            false => crate::cold_start::Want::No,
                        },
                        ..source.options(Uprobes::Handshake)?
                    };
                    runtime()?.block_on(export::traced(opts, d, format))
                }
                (None, None) => bail!(
                    "say where the parameters come from: --duration SECONDS (trace now) or --from http://HOST:PORT (a running hstrace serve)"
                ),
            }
        }
        Command::Report {
            source,
            duration,
            from,
            server,
            output,
        } => {
            let duration = duration.map(|d| seconds("--duration", d)).transpose()?;
            match (from, duration) {
                (Some(url), d) => report::from_daemon(&url, d, server.as_deref(), &output),
                (None, Some(d)) => {
                    let opts = source.options(Uprobes::Handshake)?;
                    runtime()?.block_on(report::traced(opts, d, server.as_deref(), &output))
                }
                (None, None) => bail!(
                    "say what to report: --duration SECONDS (trace now) or --from http://HOST:PORT (a running hstrace serve)"
                ),
            }
        }
        Command::Model {
            params,
            from,
            from_prometheus,
            window,
            server,
            users,
            think_time,
            secure_fraction,
            hit_ratio,
            cpu_speedup,
            other_cpus,
            scale_stage,
            key_change,
            group,
            sign_cost,
            servers,
            discipline,
            seed,
            overhead,
            sleep_cpu,
            wakeup,
            cold_start,
            format,
            plot,
            measured,
        } => {
            let source = match (params, from, from_prometheus) {
                (Some(f), None, None) => model::Source::File(f),
                (None, Some(u), None) => model::Source::Daemon(u),
                (None, None, Some(u)) => model::Source::Prometheus {
                    url: u,
                    window_s: seconds("--window", window)?.as_secs().max(1),
                },
                _ => bail!(
                    "give exactly one of --params FILE, --from http://HOST:PORT (a running hstrace serve) or --from-prometheus http://HOST:PORT"
                ),
            };
            if let Some(servers) =
                servers.filter(|s| !(1..=i64::from(knobs::MAX_SERVERS)).contains(s))
            {
                bail!(
                    "--servers {servers} is not a number of processors: give 1 to {}",
                    knobs::MAX_SERVERS
                );
            }
            let mut knobs = knobs::Knobs {
                think_s: args::parse_seconds("--think-time", &think_time)?,
                servers: servers.map_or(1, |s| s as u32),
                servers_given: servers.is_some(),
                hit_ratio: hit_ratio
                    .map(|r| args::check_fraction("--hit-ratio", r))
                    .transpose()?,
                cpu_speedup: args::check_factor("--cpu-speedup", cpu_speedup)?,
                other_cpus: other_cpus
                    .map(|o| args::check_cpus("--other-cpus", o))
                    .transpose()?,
                cpus_left: None,
                scale_stages: scale_stage
                    .iter()
                    .map(|s| args::parse_scale(s))
                    .collect::<Result<_>>()?,
                discipline: match discipline {
                    None | Some(DisciplineArg::ProcessorSharing) => Discipline::ProcessorSharing,
                    Some(DisciplineArg::EventLoop) => Discipline::EventLoop,
                    Some(DisciplineArg::EventLoopSim) => Discipline::EventLoopSim,
                },
                discipline_given: discipline.is_some(),
                discipline_from: Default::default(),
                because: String::new(),
                seed: u64::from(seed),
                overhead_s: overhead
                    .as_deref()
                    .map(|o| args::parse_seconds("--overhead", o))
                    .transpose()?
                    .unwrap_or(0.0),
                overhead_given: overhead.is_some(),
                wakeup: args::parse_idle_curve("--wakeup", wakeup.as_deref().unwrap_or("0"))?,
                wakeup_given: wakeup.is_some(),
                sleep_cpu_s: sleep_cpu
                    .as_deref()
                    .map(|o| args::parse_seconds("--sleep-cpu", o))
                    .transpose()?
                    .unwrap_or(0.0),
                sleep_cpu_given: sleep_cpu.is_some(),
                // set below (--cold-start)
                cold_start: Default::default(),
                cold_start_given: false,
                cold_start_measured: None,
                cold_start_from: knobs::ColdStartFrom::None,
                // measured by model::run, once the parameters are read
                key_change: None,
                group,
            };
            let measure_cold_start =
                knobs::ColdStartArg::parse(cold_start.as_deref())?.apply(&mut knobs);
            model::run(ModelOptions {
                source,
                server,
                users: users.map(|u| args::parse_users(&u)).transpose()?,
                secure_fractions: match secure_fraction {
                    Some(p) => args::parse_fractions("--secure-fraction", &p)?,
                    None => Vec::new(),
                },
                knobs,
                key_change: key_change.map(|k| keys::parse_key_change(&k)).transpose()?,
                sign_costs: match sign_cost {
                    Some(s) => keys::parse_sign_costs(&s)?,
                    None => Vec::new(),
                },
                // the measurement is the tracer's (libcrypto on a pinned thread), not the model's
                measure_cold_start: measure_cold_start
                    .then_some(crate::cold_start::measure as fn() -> _),
                format: match format {
                    ModelFormatArg::Text => ModelFormat::Text,
                    ModelFormatArg::Json => ModelFormat::Json,
                    ModelFormatArg::Csv => ModelFormat::Csv,
                },
                plot,
                measured,
            })
        }
    }
}
