//! hsload: a closed-loop load generator, the measured side of `cargo xtask validate-model`.
//!
//! N users, each a thread that loops: an exponential think time of mean Z, then one request —
//! TLS with probability p, else plain HTTP to the plain port; a TLS request offers the session
//! the user saved (TLS 1.2 session ID) with probability r, else makes a fresh full handshake —
//! connect, handshake, `GET /`, read the whole response, close. A request's response time runs
//! from the start of connect() to the last byte of the response; its class is what the
//! handshake really was (`SSL_session_reused`), not what was asked for.
//!
//! After `--warmup` seconds, requests that finish within the next `--duration` seconds are
//! counted; stderr says `hsload: measuring` and `hsload: measured` at the window's two ends.
//! One JSON object (`hsload/v1`) goes to stdout.
//!
//! Why TLS 1.2 and session IDs: a 1.2 resumption skips every public-key operation, so
//! resumed and full differ by exactly the server's RSA signature (and the key exchange), and
//! the client decides per connection whether to offer the session it holds, which the
//! server's shared cache accepts (the session exists right after the handshake). In TLS 1.3
//! the ticket comes after the handshake, a resumption still runs an (EC)DHE exchange, and
//! single-use tickets make "offer again" depend on the server's cache settings.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    process::exit,
    sync::Arc,
    thread,
    time::{Duration, Instant},
};

use hstrace_model::sim::{Dist, Rng};
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslMethod, SslOptions, SslSession, SslVerifyMode,
    SslVersion,
};
use serde_json::{json, Map, Value};

const USAGE: &str =
    "usage: hsload --tls-port PORT --plain-port PORT --users N --think-time SECONDS \
    --secure-fraction P --resume-fraction R --warmup SECONDS --duration SECONDS [--seed N] \
    [--host ADDR] [--server-name NAME]";

/// Connect, read and write timeouts: a request that takes longer is an error.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
struct Opts {
    addr_tls: SocketAddr,
    addr_plain: SocketAddr,
    server_name: String,
    users: usize,
    think_s: f64,
    secure: f64,
    resume: f64,
    warmup_s: f64,
    duration_s: f64,
    seed: u64,
}

fn parse_args() -> Result<Opts, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let get = |name: &str| -> Option<String> {
        let i = args.iter().position(|a| a == name)?;
        args.get(i + 1).cloned()
    };
    fn num<T: std::str::FromStr>(name: &str, v: Option<String>) -> Result<T, String> {
        let v = v.ok_or_else(|| format!("{name} is required"))?;
        v.parse().map_err(|_| format!("{name} {v:?}: not a number"))
    }
    let host = get("--host").unwrap_or_else(|| "127.0.0.1".into());
    let tls_port: u16 = num("--tls-port", get("--tls-port"))?;
    let plain_port: u16 = num("--plain-port", get("--plain-port"))?;
    let addr = |port: u16| -> Result<SocketAddr, String> {
        format!("{host}:{port}")
            .parse()
            .map_err(|_| format!("--host {host:?}: not an IP address"))
    };
    let o = Opts {
        addr_tls: addr(tls_port)?,
        addr_plain: addr(plain_port)?,
        server_name: get("--server-name").unwrap_or_else(|| "demo.test".into()),
        users: num("--users", get("--users"))?,
        think_s: num("--think-time", get("--think-time"))?,
        secure: num("--secure-fraction", get("--secure-fraction"))?,
        resume: num("--resume-fraction", get("--resume-fraction"))?,
        warmup_s: num("--warmup", get("--warmup"))?,
        duration_s: num("--duration", get("--duration"))?,
        seed: get("--seed").map_or(Ok(1), |v| num("--seed", Some(v)))?,
    };
    let frac = |name: &str, v: f64| match (0.0..=1.0).contains(&v) {
        true => Ok(()),
        false => Err(format!("{name} {v}: a fraction in [0, 1]")),
    };
    frac("--secure-fraction", o.secure)?;
    frac("--resume-fraction", o.resume)?;
    if o.users == 0 || o.users > 4096 {
        return Err(format!("--users {}: 1 to 4096", o.users));
    }
    if !(o.think_s >= 0.0 && o.warmup_s >= 0.0 && o.duration_s > 0.0) {
        return Err("--think-time and --warmup must be >= 0, --duration > 0".into());
    }
    Ok(o)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    TlsFull,
    TlsResumed,
    Plain,
}

impl Class {
    const ALL: [Class; 3] = [Class::TlsFull, Class::TlsResumed, Class::Plain];

    fn name(self) -> &'static str {
        match self {
            Class::TlsFull => "tls_full",
            Class::TlsResumed => "tls_resumed",
            Class::Plain => "plain",
        }
    }
}

/// One finished request.
struct Done {
    class: Class,
    /// the client offered a saved session
    offered: bool,
    end: Instant,
    connect_s: f64,
    response_s: f64,
    /// the think time before it, as it really passed (end of the last request → connect)
    think_s: Option<f64>,
}

/// One user's requests and errors (with the time each error happened).
#[derive(Default)]
struct Log {
    done: Vec<Done>,
    errors: Vec<(Instant, &'static str)>,
}

/// What went wrong, by step: one word each, counted in the output.
type Failure = &'static str;

/// Send `GET /` and read the whole response (by Content-Length, else to EOF); Err unless 200.
fn exchange<S: Read + Write>(s: &mut S, host: &str) -> Result<(), Failure> {
    let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).map_err(|_| "write")?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut body_needed: Option<usize> = None;
    loop {
        if let Some(need) = body_needed {
            if buf.len() >= need {
                return Ok(());
            }
        } else if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..end]).map_err(|_| "response")?;
            let mut lines = head.split("\r\n");
            let status = lines.next().unwrap_or("");
            if status.split(' ').nth(1) != Some("200") {
                return Err("http_status");
            }
            let length = lines.find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            });
            if let Some(len) = length {
                body_needed = Some(end + 4 + len);
                continue;
            }
        }
        match s.read(&mut chunk) {
            Ok(0) if body_needed.is_none() && buf.windows(4).any(|w| w == b"\r\n\r\n") => {
                return Ok(())
            }
            Ok(0) => return Err("short_response"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Err("timeout"),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return Err("timeout"),
            Err(_) => return Err("read"),
        }
    }
}

fn connect(addr: &SocketAddr) -> Result<TcpStream, Failure> {
    let s = TcpStream::connect_timeout(addr, IO_TIMEOUT).map_err(|_| "connect")?;
    let _ = s.set_nodelay(true);
    let _ = s.set_read_timeout(Some(IO_TIMEOUT));
    let _ = s.set_write_timeout(Some(IO_TIMEOUT));
    Ok(s)
}

/// One TLS request; `saved` is the user's session, replaced after every full handshake.
fn tls_request(
    ctx: &SslContext,
    o: &Opts,
    saved: &mut Option<SslSession>,
    offer: bool,
) -> Result<(Class, f64, f64), Failure> {
    let start = Instant::now();
    let tcp = connect(&o.addr_tls)?;
    let connect_s = start.elapsed().as_secs_f64();
    let mut ssl = Ssl::new(ctx).map_err(|_| "client")?;
    ssl.set_hostname(&o.server_name).map_err(|_| "client")?;
    if let (true, Some(session)) = (offer, saved.as_ref()) {
        // SAFETY: the session came from a connection made with this same context
        unsafe { ssl.set_session(session) }.map_err(|_| "client")?;
    }
    let mut stream = ssl.connect(tcp).map_err(|_| "handshake")?;
    let class = match stream.ssl().session_reused() {
        true => Class::TlsResumed,
        false => {
            *saved = stream.ssl().session().map(|s| s.to_owned());
            Class::TlsFull
        }
    };
    exchange(&mut stream, &o.server_name)?;
    let response_s = start.elapsed().as_secs_f64();
    // close_notify, without waiting for the server's (it has closed: Connection: close)
    let _ = stream.shutdown();
    Ok((class, connect_s, response_s))
}

fn plain_request(o: &Opts) -> Result<(Class, f64, f64), Failure> {
    let start = Instant::now();
    let mut tcp = connect(&o.addr_plain)?;
    let connect_s = start.elapsed().as_secs_f64();
    exchange(&mut tcp, &o.server_name)?;
    Ok((Class::Plain, connect_s, start.elapsed().as_secs_f64()))
}

/// One user until `stop`: think, request, repeat. A think time that would end after `stop`
/// ends the user instead.
fn user(ctx: Arc<SslContext>, o: Opts, index: usize, stop: Instant) -> Log {
    // the model's own generator (SplitMix64), a stream per user
    let mut rng = Rng::new(o.seed, index as u32 + 1);
    let mut log = Log::default();
    let mut saved: Option<SslSession> = None;
    let mut last_end: Option<Instant> = None;
    loop {
        let think = Duration::from_secs_f64(rng.draw(o.think_s, Dist::Exponential));
        let wake = Instant::now() + think;
        if wake >= stop {
            return log;
        }
        thread::sleep(think);
        let started = Instant::now();
        let think_s = last_end.map(|e| started.duration_since(e).as_secs_f64());
        let secure = rng.uniform() < o.secure;
        let offer = secure && saved.is_some() && rng.uniform() < o.resume;
        let result = match secure {
            true => tls_request(&ctx, &o, &mut saved, offer),
            false => plain_request(&o),
        };
        let end = Instant::now();
        last_end = Some(end);
        match result {
            Ok((class, connect_s, response_s)) => log.done.push(Done {
                class,
                offered: offer,
                end,
                connect_s,
                response_s,
                think_s,
            }),
            Err(what) => {
                // a failed TLS connection may have left the saved session unusable
                if secure {
                    saved = None;
                }
                log.errors.push((end, what));
            }
        }
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// mean and percentiles of `v` (sorted here), null when empty
fn summary(mut v: Vec<f64>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1];
    json!({"mean": mean(&v), "p50": q(0.5), "p90": q(0.9), "p99": q(0.99)})
}

fn main() {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("hsload: {e}\n{USAGE}");
            exit(2);
        }
    };
    let ctx = {
        let mut b = SslContextBuilder::new(SslMethod::tls_client()).expect("an SSL context");
        // the server's certificate is a throwaway self-signed one
        b.set_verify(SslVerifyMode::NONE);
        b.set_min_proto_version(Some(SslVersion::TLS1_2))
            .and_then(|_| b.set_max_proto_version(Some(SslVersion::TLS1_2)))
            .expect("TLS 1.2");
        // resumption by session ID only: no ticket is offered or asked for
        b.set_options(SslOptions::NO_TICKET);
        Arc::new(b.build())
    };
    let begin = Instant::now();
    let from = begin + Duration::from_secs_f64(o.warmup_s);
    let to = from + Duration::from_secs_f64(o.duration_s);
    let threads: Vec<_> = (0..o.users)
        .map(|i| {
            let (ctx, o) = (ctx.clone(), o.clone());
            thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || user(ctx, o, i, to))
                .expect("a user thread")
        })
        .collect();
    thread::sleep(from.saturating_duration_since(Instant::now()));
    eprintln!("hsload: measuring");
    thread::sleep(to.saturating_duration_since(Instant::now()));
    eprintln!("hsload: measured");
    let logs: Vec<Log> = threads
        .into_iter()
        .map(|t| t.join().expect("a user thread"))
        .collect();

    let inside = |t: &Instant| *t >= from && *t < to;
    let done: Vec<&Done> = logs
        .iter()
        .flat_map(|l| &l.done)
        .filter(|d| inside(&d.end))
        .collect();
    let mut error_kinds = Map::new();
    for (_, what) in logs
        .iter()
        .flat_map(|l| &l.errors)
        .filter(|(t, _)| inside(t))
    {
        let n = error_kinds.get(*what).and_then(Value::as_u64).unwrap_or(0);
        error_kinds.insert((*what).into(), json!(n + 1));
    }
    let errors: u64 = error_kinds.values().filter_map(Value::as_u64).sum();
    let n = done.len();
    let mut classes = Map::new();
    for class in Class::ALL {
        let of: Vec<&&Done> = done.iter().filter(|d| d.class == class).collect();
        classes.insert(
            class.name().into(),
            json!({
                "requests": of.len(),
                "share": if n > 0 { of.len() as f64 / n as f64 } else { 0.0 },
                "response_s": summary(of.iter().map(|d| d.response_s).collect()),
                "connect_s": summary(of.iter().map(|d| d.connect_s).collect()),
            }),
        );
    }
    let tls = done.iter().filter(|d| d.class != Class::Plain).count();
    let offered = done.iter().filter(|d| d.offered).count();
    let accepted = done
        .iter()
        .filter(|d| d.offered && d.class == Class::TlsResumed)
        .count();
    let thinks: Vec<f64> = done.iter().filter_map(|d| d.think_s).collect();
    let out = json!({
        "schema": "hsload/v1",
        "users": o.users,
        "think_time_s": o.think_s,
        "secure_fraction": o.secure,
        "resume_fraction": o.resume,
        "warmup_s": o.warmup_s,
        "duration_s": o.duration_s,
        "requests": n,
        "throughput_per_s": n as f64 / o.duration_s,
        "response_s": summary(done.iter().map(|d| d.response_s).collect()),
        "connect_s": summary(done.iter().map(|d| d.connect_s).collect()),
        "classes": classes,
        "measured_secure_fraction": if n > 0 { tls as f64 / n as f64 } else { 0.0 },
        "resumption": {"offered": offered, "accepted": accepted},
        "think_time_measured_s": mean(&thinks),
        "errors": errors,
        "error_kinds": error_kinds,
    });
    println!("{out}");
}
