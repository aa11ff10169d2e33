//! Debian's headless Chromium, for checking a page as a browser sees it: its DOM once
//! parsed, a screenshot; and a one-file HTTP server that records every request it gets, as
//! the page's server and as the browser's proxy, so that a request to any host at all is
//! seen. Chromium runs with a fresh profile and the flags this closed network needs, in a
//! process group of its own, killed when it is done or after a timeout.

use std::{
    fs,
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    os::unix::process::CommandExt,
    path::Path,
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc, Mutex,
    },
    thread,
    time::{Duration, Instant},
};

use crate::util::work_dir;

/// Debian's `chromium` package (`cargo xtask test` installs it).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Headless, no sandbox (root), and as few of Chromium's own connections (updates, sync,
/// network time, QUIC) as flags can stop: on this closed network they are refused, and a
/// page's test must tell them from the page's requests (`CHROMIUMS_OWN`).
const FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-features=NetworkTimeServiceQuerying",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
];

/// Hosts Chromium 156 asks at every start whatever the flags (the on-demand "Optimization
/// Guide On Device Models Manifest" component's update check, and Google accounts): never
/// a page's.
pub const CHROMIUMS_OWN: &[&str] = &["update.googleapis.com", "accounts.google.com"];

/// How long one Chromium run may take before it is killed.
const TIMEOUT: Duration = Duration::from_secs(90);

/// The DOM of `url` once Chromium has loaded it (`--dump-dom`), serialized as HTML.
pub fn dump_dom(url: &str) -> String {
    dump_dom_with(url, &[])
}

/// The same, with Chromium's `extra` flags (e.g. `PageServer::proxy_flags`).
pub fn dump_dom_with(url: &str, extra: &[String]) -> String {
    let args: Vec<String> = ["--dump-dom".to_owned()]
        .into_iter()
        .chain(extra.iter().cloned())
        .collect();
    let out = chromium(&args, url, |_| ());
    String::from_utf8(out).expect("the DOM is UTF-8")
}

/// A `width`×`height` PNG of the top of `url` (the viewport, at one pixel per CSS pixel).
pub fn screenshot(url: &str, png: &Path, width: u32, height: u32) {
    screenshot_with(url, png, width, height, &[])
}

/// The same, with Chromium's `extra` flags.
pub fn screenshot_with(url: &str, png: &Path, width: u32, height: u32, extra: &[String]) {
    let _ = fs::remove_file(png);
    let png = std::path::absolute(png).unwrap();
    let args: Vec<String> = [
        format!("--screenshot={}", png.display()),
        format!("--window-size={width},{height}"),
    ]
    .into_iter()
    .chain(extra.iter().cloned())
    .collect();
    chromium(&args, url, |stderr| {
        assert!(
            png.exists(),
            "chromium wrote no {}:\n{stderr}",
            png.display()
        )
    });
}

/// Run Chromium headless on `url` with a fresh profile and `args`; its stdout. Panics when
/// it fails or runs past `TIMEOUT` (killed, with every process it started), and with what
/// it said when `check`, given its stderr, does.
fn chromium(args: &[String], url: &str, check: impl FnOnce(&str)) -> Vec<u8> {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} missing: `cargo xtask test` installs Debian's chromium"
    );
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let dir = work_dir(&format!(
        "chromium-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let profile = dir.join("profile");
    fs::create_dir_all(&profile).unwrap();
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(CHROMIUM)
        .args(FLAGS)
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        // its renderers, zygote and GPU process in its group: all killed together
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(fs::File::create(&out_path).unwrap())
        .stderr(fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{CHROMIUM}: {e}"));
    let group = child.id() as i32;
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if start.elapsed() > TIMEOUT {
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    // whatever is left of it, hung or not
    // SAFETY: kill(2) on the process group Chromium leads, which this function started
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = child.wait();
    let stderr = fs::read_to_string(&err_path).unwrap_or_default();
    match status {
        None => panic!("chromium {args:?} {url} hung: killed after {TIMEOUT:?}\n{stderr}"),
        Some(st) if !st.success() => panic!("chromium {args:?} {url} failed ({st}):\n{stderr}"),
        Some(_) => {}
    }
    check(&stderr);
    let out = fs::read(&out_path).unwrap();
    let _ = fs::remove_dir_all(&dir);
    out
}

/// An HTTP server on 127.0.0.1 that serves one file at one path and records every request
/// it gets; also a proxy for Chromium (`proxy_flags`), which then sends it every request
/// to any host, loopback included, where it is recorded and refused. Stopped on drop.
pub struct PageServer {
    addr: SocketAddr,
    path: String,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl PageServer {
    /// Serve `file` at `path` (e.g. "/report.html").
    pub fn start(path: &str, file: &Path) -> PageServer {
        let body = fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let content_type = content_type(file);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let page = Arc::new(Page {
            addr,
            path: path.to_owned(),
            body,
            content_type,
        });
        let thread = {
            let (requests, stop) = (requests.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((conn, _)) => {
                            let (requests, page) = (requests.clone(), page.clone());
                            // one thread a connection: Chromium keeps idle ones open
                            thread::spawn(move || page.answer(conn, &requests));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        };
        PageServer {
            addr,
            path: path.to_owned(),
            requests,
            stop,
            thread: Some(thread),
        }
    }

    /// The page's URL.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.path)
    }

    /// Chromium's flags that make this server its proxy for every request, to loopback too.
    pub fn proxy_flags(&self) -> Vec<String> {
        vec![
            format!("--proxy-server=http://{}", self.addr),
            // Chromium goes direct to loopback unless told not to
            "--proxy-bypass-list=<-loopback>".to_owned(),
        ]
    }

    /// Every request so far, in order: a path of this server ("/report.html"), or the
    /// method and target of any other ("CONNECT fonts.gstatic.com:443",
    /// "GET http://example.com/x").
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// `requests` less Chromium's own (to `CHROMIUMS_OWN`): what the page asked for.
    pub fn page_requests(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| !chromiums_own(r))
            .collect()
    }
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Page {
    addr: SocketAddr,
    path: String,
    body: Vec<u8>,
    content_type: &'static str,
}

impl Page {
    /// Read one request's head from `conn`, record it, answer (the page, or 404), close.
    fn answer(&self, mut conn: TcpStream, requests: &Mutex<Vec<String>>) {
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
        let mut head = Vec::new();
        let mut buf = [0u8; 4096];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        if head.is_empty() {
            // a connection opened ahead of time and never used
            return;
        }
        let text = String::from_utf8_lossy(&head);
        let mut words = text.lines().next().unwrap_or("").split_whitespace();
        let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        // a proxy's request names the host: one for this server is its path
        let own = format!("http://{}", self.addr);
        let local = target.strip_prefix(&own).unwrap_or(target);
        let mine = method == "GET" && local.starts_with('/');
        requests.lock().unwrap().push(if mine {
            local.to_owned()
        } else {
            format!("{method} {target}")
        });
        let response = if mine && local == self.path {
            let mut r = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                self.content_type,
                self.body.len()
            )
            .into_bytes();
            r.extend_from_slice(&self.body);
            r
        } else {
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
        };
        let _ = conn.write_all(&response);
    }
}

/// Is `request` (as `PageServer::requests` has it) one of Chromium's own?
fn chromiums_own(request: &str) -> bool {
    let Some((_, target)) = request.split_once(' ') else {
        return false;
    };
    let host = target
        .trim_start_matches("http://")
        .split(['/', ':'])
        .next()
        .unwrap_or("");
    CHROMIUMS_OWN.contains(&host)
}

fn content_type(file: &Path) -> &'static str {
    match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("json") => "application/json",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        _ => "application/octet-stream",
    }
}
