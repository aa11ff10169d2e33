//! The OTLP exporter for the chosen protocol and TLS, and the wrapper that counts its
//! failures for `/metrics` and `/healthz`.

use std::{path::PathBuf, sync::atomic::Ordering, time::Duration};

#[cfg(not(feature = "otlp-grpc"))]
use anyhow::bail;
use anyhow::{Context, Result};
#[cfg(feature = "otlp-grpc")]
use opentelemetry_otlp::WithTonicConfig;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::{
    error::OTelSdkResult,
    metrics::{data::ResourceMetrics, exporter::PushMetricExporter, Temporality},
};

use super::{OtlpOptions, OtlpStats, Protocol};

fn read(path: &PathBuf, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

/// The exporter for `opts.protocol`, with TLS from the CA file and client certificate.
pub(super) fn build_exporter(opts: &OtlpOptions) -> Result<opentelemetry_otlp::MetricExporter> {
    let ca = opts
        .ca_file
        .as_ref()
        .map(|p| read(p, "--otlp-ca-file"))
        .transpose()?;
    let identity = match (&opts.client_cert, &opts.client_key) {
        (Some(c), Some(k)) => Some((
            read(c, "--otlp-client-cert")?,
            read(k, "--otlp-client-key")?,
        )),
        _ => None,
    };
    let b = opentelemetry_otlp::MetricExporter::builder().with_temporality(Temporality::Cumulative);
    let exporter = match opts.protocol {
        Protocol::HttpProtobuf => {
            let mut client = reqwest::Client::builder().timeout(opts.timeout);
            // the CA file's certificates only, as over gRPC; without it, the system's
            if let Some(ca) = &ca {
                client = client.tls_certs_only(
                    reqwest::Certificate::from_pem_bundle(ca)
                        .context("--otlp-ca-file holds no PEM certificate")?,
                );
            }
            if let Some((cert, key)) = &identity {
                let pem = [cert.as_slice(), b"\n", key.as_slice()].concat();
                client = client.identity(reqwest::Identity::from_pem(&pem).context(
                    "--otlp-client-cert/--otlp-client-key: not a PEM certificate and key",
                )?);
            }
            let client = client.build().context("building the OTLP HTTP client")?;
            let mut b = b
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_http_client(client)
                .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                .with_timeout(opts.timeout);
            if let Some(e) = &opts.endpoint {
                b = b.with_endpoint(e.clone());
            }
            b.build()
        }
        #[cfg(not(feature = "otlp-grpc"))]
        Protocol::Grpc => bail!(
            "this hstrace was built without OTLP over gRPC (--no-default-features; the default build has it): \
             use --otlp-protocol http/protobuf, which every OpenTelemetry Collector's OTLP receiver takes"
        ),
        #[cfg(feature = "otlp-grpc")]
        Protocol::Grpc => {
            use opentelemetry_otlp::tonic_types::transport::{
                Certificate, ClientTlsConfig, Identity,
            };
            let mut b = b
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc)
                .with_timeout(opts.timeout);
            // tonic trusts no certificate unless told: the CA file's, else (over TLS
            // only, since tonic loads them even for a plain endpoint and a host may have
            // none) the system's, as reqwest does over HTTP
            let system_roots = ca.is_none() && grpc_over_tls(&opts.url(), grpc_insecure());
            let mut tls = match &ca {
                Some(ca) => Some(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca))),
                None if system_roots => Some(ClientTlsConfig::new().with_native_roots()),
                None => None,
            };
            if let Some((cert, key)) = &identity {
                let with = tls.unwrap_or_else(ClientTlsConfig::new);
                tls = Some(with.identity(Identity::from_pem(cert, key)));
            }
            if let Some(tls) = tls {
                b = b.with_tls_config(tls);
            }
            if let Some(e) = &opts.endpoint {
                b = b.with_endpoint(e.clone());
            }
            let built = b.build();
            if system_roots {
                return built.context(
                    "the OTLP exporter's settings: over gRPC with TLS and no --otlp-ca-file, the \
                     collector's certificate is checked against the system's CA certificates \
                     (install ca-certificates, set SSL_CERT_FILE, or give --otlp-ca-file)",
                );
            }
            built
        }
    };
    exporter.context("the OTLP exporter's settings (--otlp-*, OTEL_EXPORTER_OTLP_*)")
}

/// Whether gRPC to `url` runs over TLS, by the OTLP exporter spec's rule that
/// opentelemetry-otlp applies: an `https://` URL, or one with no scheme unless insecure.
#[cfg(feature = "otlp-grpc")]
fn grpc_over_tls(url: &str, insecure: bool) -> bool {
    match url.split_once("://") {
        Some((scheme, _)) if !scheme.contains(['/', '?', '#']) => {
            scheme.eq_ignore_ascii_case("https")
        }
        _ => !insecure,
    }
}

/// `OTEL_EXPORTER_OTLP_METRICS_INSECURE`, else `OTEL_EXPORTER_OTLP_INSECURE`, read as
/// opentelemetry-otlp reads them.
#[cfg(feature = "otlp-grpc")]
fn grpc_insecure() -> bool {
    std::env::var("OTEL_EXPORTER_OTLP_METRICS_INSECURE")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_INSECURE"))
        .is_ok_and(|v| v.eq_ignore_ascii_case("true"))
}

#[cfg(all(test, feature = "otlp-grpc"))]
mod tests {
    use super::grpc_over_tls;

    #[test]
    fn grpc_runs_over_tls_by_the_scheme_or_else_unless_insecure() {
        assert!(grpc_over_tls("https://collector:4317", true));
        assert!(grpc_over_tls("HTTPS://collector:4317", false));
        assert!(!grpc_over_tls("http://collector:4317", false));
        assert!(!grpc_over_tls("unix:///run/otel.sock", false));
        assert!(grpc_over_tls("collector:4317", false));
        assert!(!grpc_over_tls("collector:4317", true));
        // a "://" after the path starts is no scheme
        assert!(grpc_over_tls("collector:4317/p://q", false));
    }
}

/// The OTLP exporter, counting its failures: one log line when exports start failing,
/// one when they get through again. The SDK's periodic reader calls it from a thread of
/// its own, one export at a time; the exporter's I/O runs on a one-worker tokio runtime.
pub(super) struct Counted {
    pub(super) inner: opentelemetry_otlp::MetricExporter,
    pub(super) rt: tokio::runtime::Runtime,
    pub(super) stats: OtlpStats,
    pub(super) endpoint: String,
    pub(super) interval: Duration,
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counted({})", self.endpoint)
    }
}

impl PushMetricExporter for Counted {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.rt.block_on(self.inner.export(metrics));
        let stats = &self.stats;
        stats.exports.inc();
        match &result {
            Ok(()) => {
                if stats.failing.swap(false, Ordering::Relaxed) {
                    eprintln!(
                        "hstrace: OTLP export to {} works again ({} failed exports so far)",
                        self.endpoint,
                        stats.export_failures.get()
                    );
                }
            }
            Err(e) => {
                stats.export_failures.inc();
                *stats.last_error.lock().expect("otlp error lock") = Some(e.to_string());
                if !stats.failing.swap(true, Ordering::Relaxed) {
                    eprintln!(
                        "hstrace: OTLP export to {} failed: {e}; the metrics stay on /metrics, exports \
                         are retried every {:?} and counted in hstrace_otlp_export_failures_total (is \
                         the collector up, and the endpoint, protocol and TLS settings right?)",
                        self.endpoint, self.interval
                    );
                }
            }
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}
