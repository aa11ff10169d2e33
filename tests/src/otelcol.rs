//! A real OpenTelemetry Collector, built from the Collector's Go modules (the OTLP receiver
//! and an exporter writing OTLP JSON lines, every module at one release), and what it
//! received.
//!
//! Built once per test run: `cargo xtask test` builds it at its start and hands the binary
//! to every test binary in `HSTRACE_OTELCOL`; without it (a plain `cargo test`) a test
//! binary builds it on first use, once. Each build writes the source (otelcol/source.rs)
//! into a fresh target/otelcol/src, lets `go mod tidy` resolve it from the Go module proxy
//! and `go build`s it there; Go's build cache makes a rebuild take seconds.

mod source;

use std::{
    collections::BTreeMap,
    fs,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use serde_json::Value;

use crate::util::{free_port, wait_listening, work_dir, workspace};

/// The collector's binary: `HSTRACE_OTELCOL` when set, else built once by this process.
pub fn otelcol_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("HSTRACE_OTELCOL") {
        Some(p) => PathBuf::from(p),
        None => build(),
    })
    .clone()
}

/// Write the source into a fresh target/otelcol/src, `go mod tidy` and `go build` it into
/// target/otelcol/otelcol (through a temporary name: a test that runs at the same time
/// never sees half a binary), and return the binary's path.
pub fn build() -> PathBuf {
    let dir = workspace().join("target/otelcol");
    let src = dir.join("src");
    let _ = fs::remove_dir_all(&src);
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("go.mod"), source::go_mod()).unwrap();
    fs::write(src.join("main.go"), source::MAIN_GO).unwrap();
    let go = ["go", "/usr/local/go/bin/go"]
        .into_iter()
        .find(|g| Command::new(g).arg("version").output().is_ok())
        .expect("no Go toolchain: `cargo xtask setup` installs Debian's golang-go");
    let bin = dir.join("otelcol");
    let tmp = dir.join(format!("otelcol.tmp{}", std::process::id()));
    let steps: [&[&str]; 2] = [
        &["mod", "tidy"],
        &["build", "-o", tmp.to_str().unwrap(), "."],
    ];
    for args in steps {
        let out = Command::new(go)
            .args(args)
            .current_dir(&src)
            .env("GOCACHE", workspace().join("target/go-cache"))
            .env("GOFLAGS", "-buildvcs=false")
            .output()
            .expect("go");
        assert!(
            out.status.success(),
            "`go {}` of the OpenTelemetry Collector {} in {} failed; its modules come from \
             the Go module proxy:\n{}",
            args.join(" "),
            source::RELEASE,
            src.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::rename(&tmp, &bin).unwrap();
    bin
}

/// TLS on the collector's receivers: its certificate and key, and the CA its clients'
/// certificates must come from (mutual TLS).
pub struct CollectorTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: PathBuf,
}

/// A running collector: OTLP/HTTP and OTLP/gRPC on loopback, every request written as a
/// line of OTLP JSON to `out`. Killed on drop.
pub struct Collector {
    child: Option<Child>,
    pub dir: PathBuf,
    pub http_port: u16,
    pub grpc_port: u16,
    pub out: PathBuf,
}

impl Collector {
    pub fn start(name: &str, tls: Option<CollectorTls>) -> Collector {
        let dir = work_dir(name);
        let (http_port, grpc_port) = (free_port(), free_port());
        let out = dir.join("metrics.jsonl");
        let tls = match &tls {
            None => String::new(),
            Some(t) => format!(
                "\n        tls:\n          cert_file: {}\n          key_file: {}\n          client_ca_file: {}",
                t.cert.display(),
                t.key.display(),
                t.client_ca.display()
            ),
        };
        let config = format!(
            "receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{http_port}{tls}
      grpc:
        endpoint: 127.0.0.1:{grpc_port}{tls}
exporters:
  jsonlines:
    path: {}
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    metrics:
      receivers: [otlp]
      exporters: [jsonlines]
",
            out.display()
        );
        fs::write(dir.join("config.yaml"), config).unwrap();
        let mut c = Collector {
            child: None,
            dir,
            http_port,
            grpc_port,
            out,
        };
        c.resume();
        c
    }

    /// Stop it (SIGKILL: as a crashed or unreachable collector).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it again on the same ports and file.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "the collector runs already");
        let log = fs::File::create(self.dir.join("otelcol.log")).unwrap();
        let child = Command::new(otelcol_bin())
            .arg("--config")
            .arg(self.dir.join("config.yaml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("the collector's binary");
        self.child = Some(child);
        let timeout = Duration::from_secs(20);
        wait_listening(
            "the collector's OTLP/HTTP receiver",
            self.http_port,
            timeout,
        );
        wait_listening(
            "the collector's OTLP/gRPC receiver",
            self.grpc_port,
            timeout,
        );
    }

    pub fn http_url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.http_port)
    }

    pub fn grpc_url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}", self.grpc_port)
    }

    /// The data points of the last request received from the sender whose resource
    /// has `service.name` = `service` (each request holds the sender's whole cumulative
    /// state), or none yet.
    pub fn last_export(&self, service: &str) -> Option<Export> {
        let text = fs::read_to_string(&self.out).unwrap_or_default();
        text.lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| Export::parse(&v))
            .find(|e| e.resource.get("service.name").map(String::as_str) == Some(service))
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One OTLP data point, flattened.
#[derive(Debug, Clone)]
pub struct Point {
    pub metric: String,
    pub unit: String,
    pub attrs: BTreeMap<String, String>,
    pub value: PointValue,
}

#[derive(Debug, Clone)]
pub enum PointValue {
    /// a sum's or gauge's value
    Number(f64),
    /// an explicit-bucket histogram: per-bucket (not cumulative) counts
    Histogram {
        count: u64,
        sum: f64,
        bounds: Vec<f64>,
        counts: Vec<u64>,
    },
    /// a base-2 exponential histogram
    Exponential { count: u64, sum: f64 },
}

/// One request: the resource's attributes and its points.
#[derive(Debug, Clone)]
pub struct Export {
    pub resource: BTreeMap<String, String>,
    pub points: Vec<Point>,
}

/// An attribute value as text (`true`, `443`, `TLS_AES_128_GCM_SHA256`).
fn attr_value(v: &Value) -> String {
    for k in ["stringValue", "intValue", "boolValue", "doubleValue"] {
        match &v[k] {
            Value::Null => continue,
            Value::String(s) => return s.clone(),
            other => return other.to_string(),
        }
    }
    v.to_string()
}

fn attrs(list: &Value) -> BTreeMap<String, String> {
    list.as_array()
        .map(|a| {
            a.iter()
                .map(|kv| {
                    (
                        kv["key"].as_str().unwrap_or("").to_owned(),
                        attr_value(&kv["value"]),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// OTLP JSON writes 64-bit integers as strings.
fn u64_of(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

fn f64_of(v: &Value) -> f64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(f64::NAN),
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        _ => 0.0,
    }
}

impl Export {
    fn parse(v: &Value) -> Option<Export> {
        let rm = v["resourceMetrics"].as_array()?.first()?;
        let resource = attrs(&rm["resource"]["attributes"]);
        let mut points = Vec::new();
        for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
            for m in sm["metrics"].as_array().into_iter().flatten() {
                let metric = m["name"].as_str().unwrap_or("").to_owned();
                let unit = m["unit"].as_str().unwrap_or("").to_owned();
                let mut push = |p: &Value, value: PointValue| {
                    points.push(Point {
                        metric: metric.clone(),
                        unit: unit.clone(),
                        attrs: attrs(&p["attributes"]),
                        value,
                    })
                };
                for kind in ["sum", "gauge"] {
                    for p in m[kind]["dataPoints"].as_array().into_iter().flatten() {
                        let n = if p["asInt"].is_null() {
                            f64_of(&p["asDouble"])
                        } else {
                            u64_of(&p["asInt"]) as f64
                        };
                        push(p, PointValue::Number(n));
                    }
                }
                for p in m["histogram"]["dataPoints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let list = |k: &str| p[k].as_array().cloned().unwrap_or_default();
                    push(
                        p,
                        PointValue::Histogram {
                            count: u64_of(&p["count"]),
                            sum: f64_of(&p["sum"]),
                            bounds: list("explicitBounds").iter().map(f64_of).collect(),
                            counts: list("bucketCounts").iter().map(u64_of).collect(),
                        },
                    );
                }
                for p in m["exponentialHistogram"]["dataPoints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    push(
                        p,
                        PointValue::Exponential {
                            count: u64_of(&p["count"]),
                            sum: f64_of(&p["sum"]),
                        },
                    );
                }
            }
        }
        Some(Export { resource, points })
    }

    /// The points of `metric`.
    pub fn of<'a>(&'a self, metric: &'a str) -> impl Iterator<Item = &'a Point> + 'a {
        self.points.iter().filter(move |p| p.metric == metric)
    }

    /// The sum of `metric`'s number points (or histogram counts).
    pub fn total(&self, metric: &str) -> f64 {
        self.of(metric)
            .map(|p| match &p.value {
                PointValue::Number(n) => *n,
                PointValue::Histogram { count, .. } | PointValue::Exponential { count, .. } => {
                    *count as f64
                }
            })
            .sum()
    }
}
