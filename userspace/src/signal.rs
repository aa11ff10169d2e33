//! When a command stops: Ctrl-C, SIGTERM (systemd, a kubelet), or the end of `--duration`.

use std::time::Duration;

/// Completes on Ctrl-C, SIGTERM, or after `duration`.
pub async fn stop_signal(duration: Option<Duration>) {
    let deadline = async {
        match duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
        _ = deadline => {}
    }
}
