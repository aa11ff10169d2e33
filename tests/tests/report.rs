//! `hstrace report`: one self-contained HTML page of a traced window (`--duration`) or of
//! a running daemon (`--from`), checked as a browser sees it. Debian's headless Chromium
//! loads it from a server that records every request, and is Chromium's proxy so that a
//! request to any host is seen too; its DOM has every section with a drawing in it; the
//! waterfall's numbers are the embedded parameters' own; a screenshot of it is not blank.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use hstrace_tests::{
    chromium::{dump_dom_with, PageServer},
    clients::{drive_mix, Mix},
    daemon::Daemon,
    hstrace::hstrace_bin,
    page::{
        assert_not_blank, by_id, close_of, external_references, has_drawing, load_offline, tags,
        text_of, Tag,
    },
    servers::Nginx,
    util::{wait_for, work_dir},
};
use serde_json::Value;

/// The page's sections, each `<section id=…>`.
const SECTIONS: &[&str] = &[
    "waterfall",
    "distributions",
    "cache",
    "key-exchange",
    "failures",
    "parameters",
    "forecast",
    "accounting",
];

/// One page may weigh this much, data and drawings included.
const MAX_BYTES: u64 = 500 * 1024;

/// Waterfall means against the parameters' (float formatting aside, they are equal).
const TOLERANCE: f64 = 1e-6;

/// A traced window, two pages of it from two `hstrace report` runs at once: by default,
/// every port of the busiest process (the TLS and the plain-HTTP port of one nginx), and
/// `--server` the TLS port alone. Each loads offline with every section, holds the
/// parameters of its ports only, and its waterfall is those parameters; the counts are the
/// client mix's; the first one's screenshot is a picture, not a blank page.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn report_of_a_traced_window() {
    let nginx = Nginx::start("report-run", 1);
    let dir = work_dir("report-run-pages");
    let master = nginx.master_pid().to_string();
    let (tls, plain) = (
        format!("nginx:{}", nginx.port),
        format!("nginx:{}", nginx.plain_port),
    );
    let both_page = dir.join("both/report.html");
    let tls_page = dir.join("tls/report.html");
    for d in ["both", "tls"] {
        fs::create_dir_all(dir.join(d)).unwrap();
    }
    let base = ["report", "--duration", "8", "--pid", &master, "-o"];
    let mut both_run = Run::spawn(&[&base[..], &[both_page.to_str().unwrap()]].concat());
    let mut tls_run =
        Run::spawn(&[&base[..], &[tls_page.to_str().unwrap(), "--server", &tls]].concat());
    both_run.wait_for("measuring for");
    tls_run.wait_for("measuring for");
    let mix = drive_mix(&nginx, 2);
    both_run.finish(Duration::from_secs(60));
    tls_run.finish(Duration::from_secs(60));

    let page = Page::load(&both_page);
    page.assert_servers(&[&tls, &plain]);
    assert_mix(page.server(&tls), &mix, &page.params);
    // every full handshake of the mix agreed on x25519 (TLS 1.3's key share, TLS 1.2's
    // ECDHE ServerKeyExchange): one group, all of them, in the key-exchange table
    let kx = &page.server(&tls)["key_exchange"];
    assert_eq!(kx[0]["group"], "x25519", "{kx}");
    assert_eq!(kx[0]["count"].as_u64(), Some(mix.full), "{kx}");
    assert_eq!(kx.as_array().map(Vec::len), Some(1), "{kx}");
    assert_eq!(
        page.server(&plain)["classes"]["plain"]["count"].as_u64(),
        Some(mix.plain),
        "{}",
        page.params
    );
    page.assert_waterfall_is_the_parameters();
    page.assert_not_blank(&dir.join("both/report.png"));

    let page = Page::load(&tls_page);
    page.assert_servers(&[&tls]);
    assert_mix(page.server(&tls), &mix, &page.params);
    page.assert_waterfall_is_the_parameters();
}

/// From a running `hstrace serve`: the page of its window loads offline with every
/// section, its counts are the client mix's and its waterfall its parameters.
#[test]
#[ignore = "needs root: run `sudo cargo xtask test`"]
fn report_from_a_running_daemon() {
    let nginx = Nginx::start("report-from", 1);
    let daemon = Daemon::start(&["--pid", &nginx.master_pid().to_string()]);
    let mix = drive_mix(&nginx, 1);
    let total = mix.tls() + mix.plain + mix.failed;
    wait_for(
        "the daemon to report every connection",
        Duration::from_secs(15),
        || {
            let health: Value = serde_json::from_str(&daemon.get("/healthz")).unwrap();
            health["reported"].as_u64() == Some(total)
        },
    );
    let file = work_dir("report-from-page").join("report.html");
    Run::spawn(&[
        "report",
        "--from",
        &daemon.url(),
        "-o",
        file.to_str().unwrap(),
    ])
    .finish(Duration::from_secs(60));
    let page = Page::load(&file);
    let tls = format!("nginx:{}", nginx.port);
    page.assert_servers(&[&tls, &format!("nginx:{}", nginx.plain_port)]);
    assert_mix(page.server(&tls), &mix, &page.params);
    page.assert_waterfall_is_the_parameters();
}

/// The check of a page's requests is not blind: a page that asks for a stylesheet's font
/// on another host, an image of its own server and a script elsewhere is caught, by the
/// recording server and by the reading of the file alike.
#[test]
#[ignore = "needs Debian's chromium: run `sudo cargo xtask test`"]
fn a_page_that_fetches_is_caught() {
    let file = work_dir("report-fetching-page").join("report.html");
    fs::write(
        &file,
        "<!doctype html><html><head><meta charset=utf-8><link rel=\"icon\" href=\"data:,\">\
         <style>@font-face{font-family:F;src:url(https://fonts.gstatic.com/f.woff2)}\
         body{font-family:F}</style><script src=\"http://cdn.example.com/a.js\"></script>\
         </head><body><img src=\"/logo.png\"><p>text</p></body></html>",
    )
    .unwrap();
    let server = PageServer::start("/report.html", &file);
    dump_dom_with(&server.url(), &server.proxy_flags());
    let got = server.page_requests();
    for want in [
        "/report.html",
        "/logo.png",
        "GET http://cdn.example.com/a.js",
        "CONNECT fonts.gstatic.com:443",
    ] {
        assert!(got.iter().any(|r| r == want), "{want} not seen: {got:?}");
    }
    let found = external_references(&fs::read_to_string(&file).unwrap());
    assert_eq!(found.len(), 3, "{found:?}");
}

/// `hstrace ARGS` running, what it says on stderr kept in a file.
struct Run {
    child: Child,
    args: Vec<String>,
    stderr: PathBuf,
}

impl Run {
    fn spawn(args: &[&str]) -> Run {
        static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let stderr = std::env::temp_dir().join(format!(
            "hstrace-report-test-{}-{n}.stderr",
            std::process::id()
        ));
        let child = Command::new(hstrace_bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Run {
            child,
            args: args.iter().map(|a| a.to_string()).collect(),
            stderr,
        }
    }

    /// Wait until it says `what` (e.g. that it has attached and measures); panics if it
    /// exits first or takes 30 s.
    fn wait_for(&mut self, what: &str) {
        let start = Instant::now();
        while !fs::read_to_string(&self.stderr)
            .unwrap_or_default()
            .contains(what)
        {
            let exited = self.child.try_wait().unwrap();
            if exited.is_some() || start.elapsed() > Duration::from_secs(30) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "hstrace {:?} never said {what:?} ({exited:?}):\n{}",
                    self.args,
                    fs::read_to_string(&self.stderr).unwrap_or_default()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until it exits (killed after `timeout`); panics unless it succeeded.
    fn finish(mut self, timeout: Duration) {
        let start = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break Some(st);
            }
            if start.elapsed() > timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            thread::sleep(Duration::from_millis(100));
        };
        let said = fs::read_to_string(&self.stderr).unwrap_or_default();
        match status {
            None => panic!(
                "hstrace {:?} hung: killed after {timeout:?}\n{said}",
                self.args
            ),
            Some(st) => assert!(st.success(), "hstrace {:?}: {st}\n{said}", self.args),
        }
    }
}

impl Drop for Run {
    /// Not left tracing (attached) into the next test when this one fails.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_file(&self.stderr);
    }
}

/// The TLS server's parameters count what the mix made.
fn assert_mix(s: &Value, mix: &Mix, params: &Value) {
    let count = |class: &str| s["classes"][class]["count"].as_u64();
    assert_eq!(count("tls_full"), Some(mix.full), "{params}");
    assert_eq!(count("tls_resumed"), Some(mix.resumed), "{params}");
    assert_eq!(s["failed"].as_u64(), Some(mix.failed), "{params}");
}

/// A report as Chromium loaded it: the file, its DOM's tags, the embedded parameters.
struct Page {
    file: PathBuf,
    dom: String,
    tags: Vec<Tag>,
    params: Value,
}

impl Page {
    /// Check the file (its size, nothing it would fetch), load it in Chromium from a
    /// server that records every request (only the page's own may come), and check its
    /// sections.
    fn load(file: &Path) -> Page {
        let dom = load_offline(file, "/report.html", MAX_BYTES);
        let tags = tags(&dom);
        for id in SECTIONS {
            let i = by_id(&tags, id).unwrap_or_else(|| panic!("no #{id} in the DOM"));
            assert_eq!(tags[i].name, "section", "#{id}");
            let inside = &tags[i + 1..close_of(&tags, i)];
            if *id == "key-exchange" {
                assert!(
                    inside.iter().any(|t| t.name == "table"),
                    "no table in #{id}"
                );
                continue;
            }
            if *id == "parameters" {
                assert!(
                    inside.iter().any(|t| t.name == "table"),
                    "no table in #{id}"
                );
                assert!(
                    inside
                        .iter()
                        .any(|t| t.attr("id") == Some("parameters-json")),
                    "no #parameters-json in #{id}"
                );
                continue;
            }
            assert!(has_drawing(inside), "no SVG with a mark in #{id}");
        }
        let pre = by_id(&tags, "parameters-json").unwrap();
        let text = text_of(&dom, &tags, pre);
        let params: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("#parameters-json is not JSON ({e}): {text}"));
        assert_eq!(params["schema"], "hstrace.parameters/v1", "{params}");
        Page {
            file: file.to_owned(),
            dom,
            tags,
            params,
        }
    }

    /// The parameters of `server`.
    fn server(&self, server: &str) -> &Value {
        self.servers()
            .iter()
            .find(|s| s["server"] == server)
            .unwrap_or_else(|| panic!("no {server} in the page's parameters: {}", self.params))
    }

    fn servers(&self) -> &Vec<Value> {
        self.params["servers"].as_array().expect("servers")
    }

    /// The page's parameters are of `servers`, no other.
    fn assert_servers(&self, servers: &[&str]) {
        let got: BTreeSet<&str> = self
            .servers()
            .iter()
            .map(|s| s["server"].as_str().unwrap())
            .collect();
        let want: BTreeSet<&str> = servers.iter().copied().collect();
        assert_eq!(got, want, "the page's servers");
    }

    /// The waterfall is the embedded parameters of the page's servers together: the rows of
    /// each request class hold the class's connections and its stages, each stage's class,
    /// and, combined (each bar weighted by its connections with the stage), its mean; the
    /// failed rows are the failures.
    fn assert_waterfall_is_the_parameters(&self) {
        let rows = waterfall_rows(&self.tags);
        assert!(
            !rows.is_empty(),
            "no waterfall rect in {}",
            self.file.display()
        );
        let servers = self.servers();
        let failed: u64 = rows
            .iter()
            .filter(|r| request_class(&r.label).is_none())
            .map(|r| r.connections)
            .sum();
        let measured_failed: u64 = servers.iter().map(|s| s["failed"].as_u64().unwrap()).sum();
        assert_eq!(failed, measured_failed, "the failed rows' connections");
        for class in ["tls_full", "tls_resumed", "plain"] {
            let mine: Vec<&Row> = rows
                .iter()
                .filter(|r| request_class(&r.label) == Some(class))
                .collect();
            let connections: u64 = mine.iter().map(|r| r.connections).sum();
            let count: u64 = servers
                .iter()
                .map(|s| s["classes"][class]["count"].as_u64().unwrap())
                .sum();
            assert_eq!(
                connections,
                count,
                "{class}: the connections of the rows {:?}",
                mine.iter().map(|r| &r.label).collect::<Vec<_>>()
            );
            // each stage over the servers: (count, count × mean, class)
            let mut measured: BTreeMap<&str, (u64, f64, &str)> = BTreeMap::new();
            for s in servers {
                for (stage, p) in s["classes"][class]["stages"].as_object().unwrap() {
                    let n = p["count"].as_u64().unwrap();
                    let e = measured.entry(stage).or_insert((0, 0.0, ""));
                    e.0 += n;
                    e.1 += n as f64 * p["mean_s"].as_f64().unwrap();
                    e.2 = p["class"].as_str().unwrap();
                }
            }
            let drawn: BTreeSet<&str> = mine
                .iter()
                .flat_map(|r| r.bars.iter().map(|b| b.stage.as_str()))
                .collect();
            let measured_names: BTreeSet<&str> = measured.keys().copied().collect();
            assert_eq!(drawn, measured_names, "{class}: stages drawn, measured");
            for (stage, (n, sum, stage_class)) in measured {
                let bars: Vec<(u64, &Bar)> = mine
                    .iter()
                    .filter_map(|r| {
                        let b = r.bars.iter().find(|b| b.stage == stage)?;
                        // a bar is the mean over the row's connections with the stage
                        Some((b.count.unwrap_or(r.connections), b))
                    })
                    .collect();
                let weight: u64 = bars.iter().map(|(w, _)| w).sum();
                assert_eq!(
                    weight, n,
                    "{class} {stage}: the bars' connections against the stage's count"
                );
                let mean =
                    bars.iter().map(|(w, b)| *w as f64 * b.mean_s).sum::<f64>() / weight as f64;
                let want = sum / n as f64;
                assert!(
                    (mean - want).abs() <= TOLERANCE * mean.abs().max(want.abs()) + 1e-15,
                    "{class} {stage}: waterfall {mean} s, parameters {want} s ({:?})",
                    bars.iter()
                        .map(|(w, b)| format!("{} ×{w}: {}", b.row, b.mean_s))
                        .collect::<Vec<_>>()
                );
                for (_, b) in &bars {
                    assert_eq!(
                        b.class, stage_class,
                        "{class} {stage}: {}'s data-class",
                        b.row
                    );
                }
            }
        }
    }

    /// A 1280×2400 screenshot of the page is a picture (`page::assert_not_blank`); the
    /// DOM it came from is kept beside it, for whoever looks at it.
    fn assert_not_blank(&self, png: &Path) {
        assert_not_blank(&self.file, "/report.html", png, (1280, 2400));
        fs::write(png.with_extension("dom.html"), &self.dom).unwrap();
    }
}

/// The request class of a waterfall row: "TLS 1.3 full" → tls_full, "TLS 1.2 resumed" →
/// tls_resumed, "plain"; None for a failed row.
fn request_class(label: &str) -> Option<&'static str> {
    if label == "plain" {
        Some("plain")
    } else if label.ends_with(" full") {
        Some("tls_full")
    } else if label.ends_with(" resumed") {
        Some("tls_resumed")
    } else {
        assert!(label.ends_with(" failed"), "a waterfall row {label:?}");
        None
    }
}

/// One waterfall bar: a `<rect data-row data-stage …>`.
struct Bar {
    row: String,
    stage: String,
    class: String,
    mean_s: f64,
    /// the row's connections that had the stage (`data-count`, when the page says it)
    count: Option<u64>,
}

/// One waterfall row: its bars, drawn one after another.
struct Row {
    label: String,
    connections: u64,
    bars: Vec<Bar>,
}

/// The rows of the `#waterfall` section's SVG: consecutive rects of one data-row, a new
/// row where a stage comes again.
fn waterfall_rows(tags: &[Tag]) -> Vec<Row> {
    let i = by_id(tags, "waterfall").expect("#waterfall");
    let mut rows: Vec<Row> = Vec::new();
    for t in &tags[i + 1..close_of(tags, i)] {
        if t.name != "rect" || t.closing || t.attr("data-row").is_none() {
            continue;
        }
        let get = |a: &str| {
            t.attr(a)
                .unwrap_or_else(|| panic!("a waterfall rect without {a}: {:?}", t.attrs))
                .to_owned()
        };
        let number = |a: &str| {
            get(a)
                .parse::<f64>()
                .unwrap_or_else(|e| panic!("{a}={:?}: {e}", get(a)))
        };
        let bar = Bar {
            row: get("data-row"),
            stage: get("data-stage"),
            class: get("data-class"),
            mean_s: number("data-mean-s"),
            count: t.attr("data-count").map(|c| {
                c.parse()
                    .unwrap_or_else(|e| panic!("data-count={c:?}: {e}"))
            }),
        };
        let _p90 = number("data-p90-s");
        let connections = get("data-connections")
            .parse::<u64>()
            .unwrap_or_else(|e| panic!("data-connections: {e}"));
        match rows.last_mut() {
            Some(r) if r.label == bar.row && r.bars.iter().all(|b| b.stage != bar.stage) => {
                assert_eq!(
                    r.connections, connections,
                    "row {}'s data-connections",
                    r.label
                );
                r.bars.push(bar);
            }
            _ => rows.push(Row {
                label: bar.row.clone(),
                connections,
                bars: vec![bar],
            }),
        }
    }
    rows
}

#[test]
fn the_waterfall_reading_reads_chromiums_dom() {
    let dom = "<!DOCTYPE html><html><head><style>a>b{x:url(#g)}</style></head><body>\
               <section id=\"waterfall\"><svg><rect data-row=\"TLS 1.3 full\" data-stage=\"a\" \
               data-class=\"service\" data-mean-s=\"1e-4\" data-p90-s=\"2e-4\" \
               data-connections=\"3\"></rect><rect data-row=\"TLS 1.3 full\" data-stage=\"b\" \
               data-class=\"delay\" data-mean-s=\"0.5\" data-p90-s=\"1\" data-connections=\"3\">\
               </rect><rect data-row=\"plain\" data-stage=\"a\" data-class=\"service\" \
               data-mean-s=\"2\" data-p90-s=\"2\" data-connections=\"1\"/></svg></section>\
               <pre id=\"p\">{\"a\":\"x &amp; &lt;y&gt;\"}<span>!</span></pre></body></html>";
    let t = tags(dom);
    let rows = waterfall_rows(&t);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (rows[0].label.as_str(), rows[0].connections),
        ("TLS 1.3 full", 3)
    );
    assert_eq!(rows[0].bars.len(), 2);
    assert_eq!(rows[1].bars[0].mean_s, 2.0);
}
