//! serve's memory with many live connections (`cargo xtask bench serve-memory`, and a row of
//! the full bench): idle connections held open by child processes (`cargo xtask
//! hold-connections`), each a live connection in hstrace's maps.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::Path,
    process::{Child, ChildStdout, Command, Stdio},
    thread,
    time::Duration,
};

use anyhow::{Context, Result};
use hstrace_tests::http;

use super::{Tracer, SERVE, SERVE_ADDR};
use crate::{
    nginx::DemoNginx,
    setup::{setup_test_machine, TEST_PACKAGES},
    util::build,
};

/// Only the daemon-memory row of the bench: serve's RSS with many live connections.
pub fn serve_memory() -> Result<()> {
    setup_test_machine(TEST_PACKAGES)?;
    let bin = build()?;
    let m = serve_rss_with_live_connections(&bin)?;
    println!(
        "serve's peak RSS: {:.1} MiB with {} idle connections open (tracked {}, {} in the map), {:.1} MiB with none",
        m.live_kib as f64 / 1024.0,
        LIVE_CONNS,
        m.tracked,
        m.open,
        m.idle_kib as f64 / 1024.0
    );
    Ok(())
}

/// Live connections held for the memory row: the default --max-conns.
pub const LIVE_CONNS: usize = 65_536;
/// No process here may hold more than 20,000 files (the sandbox's hard limit; root cannot
/// raise it without CAP_SYS_RESOURCE): the memory row's connections are held by this many
/// client processes, and its nginx has as many workers (`reuseport` spreads them).
pub const HOLDERS: usize = 5;
/// Connecting slows down sharply once more than about half of a destination's 28,232
/// client ports (`ip_local_port_range`) are in use: the held connections go to eight.
const MEMORY_PORTS: [u16; 8] = [18091, 18092, 18093, 18094, 18095, 18096, 18097, 18098];

/// serve's peak RSS with many live connections.
pub struct LiveMemory {
    /// peak RSS (KiB) before the connections were opened
    pub idle_kib: u64,
    /// and while they were open
    pub live_kib: u64,
    /// connections the kernel tracked, and those in its map (/healthz: `tracked`, `open`)
    pub tracked: u64,
    pub open: u64,
}

/// serve's peak RSS before and while `LIVE_CONNS` idle plain-HTTP connections to an nginx
/// of its own are open (each a live connection in hstrace's maps).
pub fn serve_rss_with_live_connections(bin: &Path) -> Result<LiveMemory> {
    let nginx = DemoNginx::start_with(
        "bench-memory",
        HOLDERS as u32,
        18490,
        &MEMORY_PORTS,
        "reuseport",
    )?;
    let daemon = Tracer::start(bin, nginx.pid, &[SERVE])?;
    thread::sleep(Duration::from_secs(2));
    let (_, before) = daemon.usage();
    let mut holders = (0..HOLDERS)
        .map(|i| {
            let count = LIVE_CONNS / HOLDERS + usize::from(i < LIVE_CONNS % HOLDERS);
            Holder::start(count)
        })
        .collect::<Result<Vec<_>>>()?;
    for h in &mut holders {
        h.wait_held()?;
    }
    // a sweep (once a second) has seen them all
    thread::sleep(Duration::from_secs(3));
    let (_, with) = daemon.usage();
    let (_, body) =
        http::try_get(SERVE_ADDR, "/healthz").context("serve does not answer /healthz")?;
    let health: serde_json::Value = serde_json::from_str(&body)?;
    let count = |k: &str| health[k].as_u64().context("/healthz without {k}");
    let live = LiveMemory {
        idle_kib: before,
        live_kib: with,
        tracked: count("tracked")?,
        open: count("open")?,
    };
    drop(holders);
    daemon.stop();
    Ok(live)
}

/// A child process (`xtask hold-connections`) holding idle connections open until dropped.
struct Holder {
    child: Child,
    said: BufReader<ChildStdout>,
}

impl Holder {
    fn start(count: usize) -> Result<Holder> {
        let ports: Vec<String> = MEMORY_PORTS.iter().map(u16::to_string).collect();
        let mut child = Command::new(std::env::current_exe()?)
            .arg("hold-connections")
            .arg(count.to_string())
            .args(&ports)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("xtask hold-connections")?;
        let out = child.stdout.take().expect("piped");
        Ok(Holder {
            child,
            said: BufReader::new(out),
        })
    }

    /// Until the child says it holds all its connections (or fails).
    fn wait_held(&mut self) -> Result<()> {
        let mut line = String::new();
        self.said.read_line(&mut line)?;
        anyhow::ensure!(
            line.trim() == "held",
            "a connection holder failed (see its message above)"
        );
        Ok(())
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // closing its stdin is its signal to close the connections and exit
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// `xtask hold-connections COUNT PORT...`: open COUNT connections to 127.0.0.1, spread
/// over the ports, say "held", and keep them open until stdin closes.
pub fn hold_connections(count: usize, ports: &[u16]) -> Result<()> {
    anyhow::ensure!(!ports.is_empty(), "hold-connections COUNT PORT...");
    // the soft limit up to the hard one
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let held = (0..count)
        .map(|i| TcpStream::connect(("127.0.0.1", ports[i % ports.len()])))
        .collect::<std::io::Result<Vec<_>>>()
        .with_context(|| format!("opening {count} connections (file limit {})", lim.rlim_cur))?;
    println!("held");
    std::io::stdout().flush()?;
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(held);
    Ok(())
}
