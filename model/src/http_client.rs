//! GET from a daemon's API or a Prometheus (`export --from`, `model --from`,
//! `model --from-prometheus`): plain HTTP on an address the user gave, through ureq.

use std::time::Duration;

use anyhow::{bail, Context, Result};

/// Who is asked, for the error when nobody answers.
#[derive(Debug, Clone, Copy)]
pub enum Server {
    /// `hstrace serve`
    Daemon,
    /// the Prometheus that scrapes the daemons
    Prometheus,
}

/// The body of `GET base + path` (`base`: http://HOST:PORT) when it answers 200; an error
/// that says who did not answer and what to check, or what it answered instead.
pub fn get(base: &str, path: &str, server: Server) -> Result<String> {
    let (status, body) = get_any(base, path, server)?;
    if status != 200 {
        bail!("{base}{path} answered {status}: {}", body.trim());
    }
    Ok(body)
}

/// The status and body of `GET base + path`, whatever the status (Prometheus says why it
/// refused a query in the body of a 400).
pub fn get_any(base: &str, path: &str, server: Server) -> Result<(u16, String)> {
    let hostport = base
        .strip_prefix("http://")
        .with_context(|| {
            format!("{base:?} is not an http:// address (e.g. http://127.0.0.1:9725)")
        })?
        .trim_end_matches('/');
    let url = format!("http://{hostport}{path}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(5)))
        .timeout_global(Some(Duration::from_secs(30)))
        // a status other than 200 is read and said, not an error of the transport
        .http_status_as_error(false)
        .build()
        .into();
    let mut response = agent.get(&url).call().with_context(|| match server {
        Server::Daemon => format!(
            "no hstrace daemon answered at {base} (is `hstrace serve` running there? its --listen address?)"
        ),
        Server::Prometheus => format!(
            "Prometheus at {base} did not answer: check --from-prometheus (http://HOST:PORT of the Prometheus that scrapes hstrace serve)"
        ),
    })?;
    let status = response.status().as_u16();
    let body = response
        .body_mut()
        .read_to_string()
        .with_context(|| format!("reading the answer of {url}"))?;
    Ok((status, body))
}
