//! When a command stops: Ctrl-C, SIGTERM (systemd, a kubelet), or the end of `--duration`.

use std::{future::Future, time::Duration};

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Completes on Ctrl-C, SIGTERM, or after `duration`. The signals are taken from the
/// call on, not from the first poll: a command says it is tracing (what a script or a
/// test waits for before it signals) only after it can stop cleanly. Call it inside the
/// runtime.
pub fn stop_signal(duration: Option<Duration>) -> impl Future<Output = ()> {
    let interrupt = signal(SignalKind::interrupt());
    let terminate = signal(SignalKind::terminate());
    async move {
        let deadline = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = received(interrupt) => {}
            _ = received(terminate) => {}
            _ = deadline => {}
        }
    }
}

/// The first delivery of a signal whose handler was installed (never, where it could not
/// be: the other ways to stop remain).
async fn received(signal: std::io::Result<Signal>) {
    match signal {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}
