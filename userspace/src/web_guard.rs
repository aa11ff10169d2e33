//! What `--web.config.file` puts in front of serve's HTTP routes: TLS (rustls) on the
//! listener, basic auth checked against bcrypt hashes, and the configured response headers.
//! Without the file, the routes are served as plain HTTP, as before.

use std::{
    collections::HashSet,
    io,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{
    extract::{Request, State},
    http::{header, HeaderName, HeaderValue, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    Router,
};
use base64::Engine;
use tokio::{net::TcpStream, sync::mpsc};
use tokio_rustls::{server::TlsStream, TlsAcceptor};

use crate::web_config::WebConfig;

/// A client gets this long for its TLS handshake
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// TLS handshakes in progress at once; past it, new connections wait in the kernel's queue
const MAX_HANDSHAKES: usize = 64;
/// verified credentials remembered, so a scrape does not pay bcrypt's cost every time
const AUTH_CACHE: usize = 64;

/// Serve `app` on `listener`, behind what `web` configures (nothing without it).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    web: Option<Arc<WebConfig>>,
) -> io::Result<()> {
    let Some(web) = web else {
        return axum::serve(listener, app).await;
    };
    let mut app = app;
    if !web.users.is_empty() {
        let auth = Arc::new(Auth {
            web: web.clone(),
            verified: Mutex::new(HashSet::new()),
        });
        app = app.layer(middleware::from_fn_with_state(auth, basic_auth));
    }
    if !web.headers.is_empty() {
        app = app.layer(middleware::from_fn_with_state(web.clone(), add_headers));
    }
    match &web.tls {
        None => axum::serve(listener, app).await,
        Some(tls) => {
            axum::serve(
                TlsListener::new(listener, TlsAcceptor::from(tls.clone())),
                app,
            )
            .await
        }
    }
}

/// TCP connections, each handed on once its TLS handshake is done: a slow or failing
/// client's handshake runs in its own task and never holds up the others.
struct TlsListener {
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    fn new(tcp: tokio::net::TcpListener, acceptor: TlsAcceptor) -> TlsListener {
        let local = tcp
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (tx, ready) = mpsc::channel(MAX_HANDSHAKES);
        let slots = Arc::new(tokio::sync::Semaphore::new(MAX_HANDSHAKES));
        tokio::spawn(async move {
            loop {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (stream, peer) = match tcp.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        // out of fds, most likely: wait, as axum's own listener does
                        log::warn!("http listener: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            drop(permit);
                            let _ = tx.send((tls, peer)).await;
                        }
                        // a client without TLS, or with a certificate the CA did not sign
                        Ok(Err(e)) => log::info!("TLS handshake with {peer} failed: {e}"),
                        Err(_) => log::info!("TLS handshake with {peer} timed out"),
                    }
                });
            }
        });
        TlsListener { ready, local }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // the accepting task ended (it does not): serve nothing more
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }
}

/// The users and the credentials already verified (their SHA-256, never the password).
struct Auth {
    web: Arc<WebConfig>,
    verified: Mutex<HashSet<[u8; 32]>>,
}

impl Auth {
    async fn check(self: &Arc<Auth>, user: String, password: String) -> bool {
        let key = {
            let mut d = ring::digest::Context::new(&ring::digest::SHA256);
            d.update(user.as_bytes());
            d.update(&[0]);
            d.update(password.as_bytes());
            let mut k = [0u8; 32];
            k.copy_from_slice(d.finish().as_ref());
            k
        };
        if self.verified.lock().expect("auth cache").contains(&key) {
            return true;
        }
        // an unknown user costs as much as a known one: the answer's time tells nothing
        let (known, hash) = match self.web.users.get(&user) {
            Some(h) => (true, h.clone()),
            None => (
                false,
                self.web.users.values().next().cloned().unwrap_or_default(),
            ),
        };
        // bcrypt takes tens of ms by design: off the HTTP thread's event loop
        let ok =
            tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
                .await
                .unwrap_or(false)
                && known;
        if ok {
            let mut v = self.verified.lock().expect("auth cache");
            if v.len() >= AUTH_CACHE {
                v.clear();
            }
            v.insert(key);
        }
        ok
    }
}

/// `Authorization: Basic …` checked against basic_auth_users; 401 otherwise.
async fn basic_auth(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(credentials);
    let ok = match given {
        Some((user, password)) => auth.check(user, password).await,
        None => false,
    };
    match ok {
        true => next.run(req).await,
        false => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"hstrace\"")],
            "Unauthorized\n",
        )
            .into_response(),
    }
}

/// The user and password of a `Basic` Authorization header.
fn credentials(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

async fn add_headers(State(web): State<Arc<WebConfig>>, req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    for (name, value) in &web.headers {
        res.headers_mut()
            .insert::<HeaderName>(name.clone(), HeaderValue::clone(value));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::credentials;

    #[test]
    fn reads_basic_credentials() {
        // "alice:s3cr:et" — a password may hold ':'
        assert_eq!(
            credentials("Basic YWxpY2U6czNjcjpldA=="),
            Some(("alice".into(), "s3cr:et".into()))
        );
        assert_eq!(
            credentials("basic YWxpY2U6czNjcjpldA=="),
            Some(("alice".into(), "s3cr:et".into()))
        );
        assert_eq!(credentials("Bearer YWxpY2U6czNjcjpldA=="), None);
        assert_eq!(credentials("Basic !!!"), None);
        // no ':' at all
        assert_eq!(credentials("Basic YWxpY2U="), None);
    }
}
