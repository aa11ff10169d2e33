//! The throwaway nginx the demo, the bench, the soak and fuzz-wire run against: daemonized,
//! TLS and plain HTTP on loopback, access log off, under target/NAME.

use std::{
    fs,
    path::PathBuf,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Result};
use hstrace_tests::fixtures::make_cert;

use crate::util::{root, run};

/// A throwaway TLS nginx under target/NAME, stopped on drop.
pub struct DemoNginx {
    pub dir: PathBuf,
    pub pid: u32,
}

impl DemoNginx {
    /// nginx in `target/NAME` with `workers` workers, TLS on `port` and plain HTTP on
    /// `plain_port`, access log off (it would be the bottleneck of a benchmark).
    pub fn start(name: &str, workers: u32, port: u16, plain_port: u16) -> Result<DemoNginx> {
        DemoNginx::start_with(name, workers, port, &[plain_port], "")
    }

    /// The same with plain HTTP on each of `plain_ports`, each `listen` followed by
    /// `listen_options` (e.g. "reuseport": the kernel spreads connections over the workers).
    pub fn start_with(
        name: &str,
        workers: u32,
        port: u16,
        plain_ports: &[u16],
        listen_options: &str,
    ) -> Result<DemoNginx> {
        let dir = root().join("target").join(name);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("tmp"))?;
        make_cert(&dir, 2048);
        let d = dir.display();
        let plain_listens: String = plain_ports
            .iter()
            .map(|p| format!("    listen 127.0.0.1:{p} {listen_options};\n"))
            .collect();
        fs::write(
            dir.join("nginx.conf"),
            format!(
                "daemon on;\nworker_processes {workers};\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 worker_rlimit_nofile 20000;\nevents {{ worker_connections 18000; }}\nhttp {{\n  access_log off;\n  \
                 client_body_temp_path {d}/tmp/b; proxy_temp_path {d}/tmp/p; fastcgi_temp_path {d}/tmp/f;\n  \
                 uwsgi_temp_path {d}/tmp/u; scgi_temp_path {d}/tmp/s;\n  ssl_protocols TLSv1.2 TLSv1.3;\n  \
                 ssl_session_cache shared:SSL:1m;\n  ssl_session_tickets on;\n  server {{\n    \
                 listen 127.0.0.1:{port} ssl;\n    server_name demo.test;\n    ssl_certificate {d}/cert.pem;\n    \
                 ssl_certificate_key {d}/key.pem;\n    location / {{ return 200 \"hello from hstrace\\n\"; }}\n  }}\n  \
                 server {{\n{plain_listens}    location / {{ return 200 \"hello\\n\"; }}\n  }}\n}}\n"
            ),
        )?;
        run(Command::new("nginx")
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .arg("-e")
            .arg(dir.join("error.log")))?;
        let pidfile = dir.join("nginx.pid");
        let start = Instant::now();
        while !pidfile.exists() {
            if start.elapsed() > Duration::from_secs(10) {
                bail!(
                    "the demo nginx did not start: see {}",
                    dir.join("error.log").display()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        let pid = fs::read_to_string(&pidfile)?.trim().parse()?;
        Ok(DemoNginx { dir, pid })
    }
}

impl Drop for DemoNginx {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.pid.to_string()).status();
    }
}
