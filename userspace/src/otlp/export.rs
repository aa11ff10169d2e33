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
            if let Some(ca) = &ca {
                for cert in reqwest::Certificate::from_pem_bundle(ca)
                    .context("--otlp-ca-file holds no PEM certificate")?
                {
                    client = client.add_root_certificate(cert);
                }
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
            if ca.is_some() || identity.is_some() {
                let mut tls = ClientTlsConfig::new();
                if let Some(ca) = &ca {
                    tls = tls.ca_certificate(Certificate::from_pem(ca));
                }
                if let Some((cert, key)) = &identity {
                    tls = tls.identity(Identity::from_pem(cert, key));
                }
                b = b.with_tls_config(tls);
            }
            if let Some(e) = &opts.endpoint {
                b = b.with_endpoint(e.clone());
            }
            b.build()
        }
    };
    exporter.context("the OTLP exporter's settings (--otlp-*, OTEL_EXPORTER_OTLP_*)")
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
