//! `hstrace model`: seed 002's closed queueing network of a secure web server (Lin, Wong,
//! Kou, §3.2), fed with the stage means hstrace measured, solved exactly by mean value
//! analysis for any number of users and what-if knobs.
//!
//! A crate of its own, with no BPF, no async runtime and no root: `hstrace` (the tracer)
//! uses it as `hstrace::model`, and the validation's load generator takes its random
//! numbers. What the tracer writes and the model reads lives here too, so the model needs
//! nothing of the tracer:
//! - `params`: `hstrace.parameters/v1`, the contract (`params::v1`)
//! - `stage`: the stages', kinds' and request classes' names and classes
//! - `cold_start`: the cold start's figures (the tracer measures them)
//! - `ordered`: a JSON object that keeps its keys' order (the stages, in wire order)
//! - `http_client`: GET from a daemon or a Prometheus
//! - `svg`: the one drawing layer, hand-written SVG charts (`hstrace report`'s and `plot`'s)
//!
//! The model:
//! - `input`: the parameters (a `hstrace.parameters/v1` file, a daemon, Prometheus)
//! - `args`: the option values (users, times, curves, fractions), each bad one refused
//! - `knobs`: the what-if knobs as given, and where each came from
//! - `keys`: `--key-change`'s keys, what a signature costs (`openssl speed`), and the
//!   signing stage with the new key
//! - `demand`: each class's service and delay demand, its visits, and the class mix
//! - `route`: each class's route through server and client, for the simulation
//! - `warm`: the cold start the window's visits held, taken out at the window's rates
//! - `whatif`: the network for one curve, the knobs applied to the measured parameters
//! - `pick`: the discipline and servers from the measured architecture, unless given
//! - `network`: the network every solver solves, its solution, the bounds and N*
//! - `mva`: exact MVA (processor sharing, one processor or c) and the event-loop
//!   approximation
//! - `sim`: nginx's event loops (one per worker) by discrete-event simulation
//! - `ctmc` (tests only): the exact Markov chain, the check where product form holds
//! - `report`: the table, JSON (`hstrace.model/v1`) and CSV
//! - `plot`: the SVG picture (a `svg` line chart), measured points overlaid
//!
//! The model: a user thinks (mean Z), then makes a request of class tls_full, tls_resumed
//! or plain with the measured shares. Its service stages (`server_flight_1`,
//! `server_flight_2`, `response`: the server working) are demand at a processor-sharing
//! web server (or, `--discipline`, one event loop: approximate MVA, or the loops nginx's
//! workers run, simulated; by default as the server's measured architecture says); its
//! delay stages (waiting for the client and the network) at an
//! infinite-server delay centre. Each stage's wall-clock `mean_s` is its demand, as seed
//! 002 measured its stages with one user on an idle server: measure at low load, or the
//! service stages carry time the thread spent on other connections. Queue stages are never
//! an input: queueing is what the model predicts.

pub mod args;
pub mod cold_start;
pub mod demand;
pub mod group;
pub mod http_client;
pub mod input;
pub mod keys;
pub mod knobs;
pub mod mva;
pub mod network;
pub mod ordered;
pub mod params;
pub mod pick;
pub mod plot;
pub mod report;
pub mod route;
pub mod sim;
pub mod stage;
pub mod svg;
pub mod warm;
pub mod whatif;

#[cfg(test)]
mod ctmc;

use std::path::PathBuf;

use anyhow::{bail, Result};

use self::{
    input::ServerInput,
    keys::Key,
    knobs::{ColdStartFrom, Knobs},
    network::{Discipline, Network, Solution},
    report::{Curve, Report},
};

/// The solution at each of `users` (sorted, each once), in that order, by the solver of
/// the network's discipline. The model needs no root and no BPF: it is plain arithmetic
/// on the parameters.
pub fn solve_at(net: &Network, users: &[u32]) -> Vec<Solution> {
    match net.discipline {
        Discipline::ProcessorSharing => mva::processor_sharing(net, users),
        Discipline::EventLoop => mva::event_loop(net, users),
        Discipline::EventLoopSim => sim::solve_at(net, users),
    }
}

/// User counts by default: 1 to twice N*, in about this many steps.
const DEFAULT_STEPS: f64 = 50.0;

/// Where the parameters come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// a `hstrace.parameters/v1` file
    File(String),
    /// a running `hstrace serve` (http://HOST:PORT)
    Daemon(String),
    /// PromQL over the daemons' metrics, over the last `window_s` seconds
    Prometheus { url: String, window_s: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFormat {
    Text,
    Json,
    Csv,
}

#[derive(Debug, Clone)]
pub struct ModelOptions {
    pub source: Source,
    /// which server (default: the one with the most connections)
    pub server: Option<String>,
    /// user counts (default: 1 to 2 N*)
    pub users: Option<Vec<u32>>,
    /// one curve per value; empty: one curve with the measured mix
    pub secure_fractions: Vec<f64>,
    pub knobs: Knobs,
    /// `--key-change FROM:TO`: the certificate's key today, and the one to predict
    pub key_change: Option<(Key, Key)>,
    /// `--sign-cost`: each key's CPU per signature, instead of measuring it
    pub sign_costs: Vec<(Key, f64)>,
    /// `--cold-start measure`: how to measure the cold start on this host (the tracer's
    /// `cold_start::measure`, libcrypto timed on a CPU: not the model's to do)
    pub measure_cold_start: Option<fn() -> Result<cold_start::ColdStart>>,
    pub format: ModelFormat,
    pub plot: Option<PathBuf>,
    pub measured: Option<PathBuf>,
}

/// The model of `server`'s parameters under `knobs`, one curve per secure fraction.
pub fn build(
    server: &ServerInput,
    source: String,
    knobs: &Knobs,
    secure_fractions: &[f64],
    users: Option<&[u32]>,
) -> Result<Report> {
    let base = whatif::network(server, knobs, None)?;
    let nets = if secure_fractions.is_empty() {
        vec![(None, base.clone())]
    } else {
        secure_fractions
            .iter()
            .map(|&p| Ok((Some(p), whatif::network(server, knobs, Some(p))?)))
            .collect::<Result<Vec<_>>>()?
    };
    let mut users: Vec<u32> = match users {
        Some(u) => u.to_vec(),
        None => {
            let n_star = nets.iter().map(|(_, n)| n.n_star()).fold(1.0, f64::max);
            let top = (2.0 * n_star).ceil().min(f64::from(args::MAX_USERS)) as u32;
            let step = ((f64::from(top) / DEFAULT_STEPS).ceil() as u32).max(1);
            let mut u: Vec<u32> = (1..=top).step_by(step as usize).collect();
            if u.last() != Some(&top) {
                u.push(top);
            }
            u
        }
    };
    users.sort_unstable();
    users.dedup();
    if knobs.discipline == Discipline::EventLoopSim {
        if let Some(&n) = users.last().filter(|&&n| n > sim::MAX_USERS) {
            bail!(
                "--discipline event-loop-sim simulates up to {} users, not {n}: give fewer --users (or --discipline event-loop, the approximation)",
                sim::MAX_USERS
            );
        }
    }
    let curves = nets
        .into_iter()
        .map(|(secure_fraction, network)| {
            let points = solve_at(&network, &users)
                .into_iter()
                .map(|s| {
                    let b = network.bounds(s.users);
                    (s, b)
                })
                .collect();
            Curve {
                secure_fraction,
                network,
                points,
            }
        })
        .collect();
    Ok(Report {
        server: server.server.clone(),
        source,
        knobs: knobs.clone(),
        key_change_s: knobs
            .key_change
            .as_ref()
            .map(|k| keys::key_changed_s(server, k))
            .transpose()?,
        group_s: knobs
            .group
            .as_deref()
            .map(|g| group::demand_s(server, g))
            .transpose()?,
        measured: server.classes.each_ref().map(|c| c.measured()),
        base,
        curves,
    })
}

/// The knobs a run uses. The simulated event loop takes what the parameters measured of
/// the worker's CPU outside its stages, unless `--overhead` / `--sleep-cpu` say otherwise:
/// its CPU per sleep (`cpu.per_wait_s`), paid each time a handler call finds the worker
/// asleep, and the rest of `cpu.outside_stages_s` per request. The measured window's
/// sleeps per request are its handler calls (an accept and each visit) times the chance
/// the worker was idle (1 − its busy share): with one user every call sleeps, under load
/// few do, which is why the CPU outside the stages falls with load.
/// Processor sharing takes the whole of `cpu.outside_stages_s` as each request's demand
/// (nothing sleeps there to share it); the event-loop approximation is seed 002's network
/// of the stages alone. `--cpu-speedup` K divides what was measured of that CPU as it
/// divides the stages (a K times faster CPU runs all of the server's code faster); a
/// figure given on the command line is taken as it is, and the wake-up, a wait, is not
/// CPU. So does the share of a CPU the servers run at beside the other work on their CPUs
/// (`cpu_share`).
fn effective_knobs(knobs: &Knobs, server: &ServerInput) -> Knobs {
    let mut k = measured_knobs(knobs, server);
    k.other_cpus = k.other_cpus.or(server.other_cpus);
    k.cpus_left = cpus_left(&k, server);
    if !k.overhead_given {
        k.overhead_s /= k.speed();
    }
    if !k.sleep_cpu_given {
        k.sleep_cpu_s /= k.speed();
    }
    k
}

/// The CPUs the server's processes may use (the servers', else the host's) less the other
/// work on them (`--other-cpus`, else as measured; a tenth of them at least); None without
/// such work (none measured, or 0), when each server has a whole processor as ever. Measured
/// work is taken as the window had it: a forecast holds it at every load.
fn cpus_left(k: &Knobs, server: &ServerInput) -> Option<f64> {
    let other = k.other_cpus.filter(|&o| o > 0.0)?;
    let cpus = f64::from(
        server
            .server_cpus
            .or(server.cpus)
            .unwrap_or(k.servers)
            .max(1),
    );
    Some((cpus - other).max(MIN_LEFT * cpus))
}

/// The least share of the CPUs `cpus_left` leaves the servers.
const MIN_LEFT: f64 = 0.1;

/// `effective_knobs` on the CPU it was measured on.
fn measured_knobs(knobs: &Knobs, server: &ServerInput) -> Knobs {
    let mut k = knobs.clone();
    if k.discipline == Discipline::ProcessorSharing && !k.overhead_given {
        k.overhead_s = server.outside_stages_s.unwrap_or(0.0);
    }
    if k.discipline != Discipline::EventLoopSim {
        return k;
    }
    // a wait's CPU is a sleep's only where the worker was mostly idle: under load it
    // holds other connections' work too, and few calls find the worker asleep
    let low_load = busy_per_process(server).is_some_and(|b| b <= LOW_LOAD);
    if !k.sleep_cpu_given {
        k.sleep_cpu_s = server.per_wait_s.filter(|_| low_load).unwrap_or(0.0);
    }
    if !k.overhead_given {
        let outside = server.outside_stages_s.unwrap_or(0.0);
        k.overhead_s = (outside - k.sleep_cpu_s * measured_sleeps(server, &k)).max(0.0);
    }
    if !k.wakeup_given {
        if let Some(curve) = measured_wakeup(server, k.sleep_cpu_s) {
            k.wakeup = curve;
        } else if let Some(q) = idle_queue(server, &k) {
            k.wakeup = network::IdleCurve::constant((q - k.sleep_cpu_s).max(0.0));
        }
    }
    k
}

/// The wake-up by how long the worker slept, as the window measured it on the live server
/// (`wakeup_after_idle`): each range of sleeps with at least `IDLE_WAITS` waits a point,
/// its waits' mean less the CPU a sleep costs (`sleep_cpu_s`, paid apart). None with fewer
/// than two such points (a window whose every call slept about as long): `idle_queue` then.
fn measured_wakeup(server: &ServerInput, sleep_cpu_s: f64) -> Option<network::IdleCurve> {
    let points: Vec<(f64, f64)> = server
        .wakeup_after_idle
        .iter()
        .filter(|w| w.count >= IDLE_WAITS)
        .map(|w| (w.idle_s, (w.mean_s - sleep_cpu_s).max(0.0)))
        .collect();
    (points.len() >= 2 && points.windows(2).all(|w| w[0].0 < w[1].0))
        .then(|| network::IdleCurve::curve(points))
}

/// The share of the window one of the server's processes was on CPU: the server's, over
/// the processes the architecture counted (each an event loop on its own CPU).
fn busy_per_process(server: &ServerInput) -> Option<f64> {
    let processes = server.architecture.map_or(1, |a| a.processes.max(1));
    server.busy.map(|b| b / f64::from(processes))
}

/// Busy at most this share of the window, a server's queue stages are its worker waking
/// up, not requests waiting for each other.
const LOW_LOAD: f64 = 0.25;

/// The mean wait of a message for an idle worker, measured: the queue stage before each
/// visit of the routes (not the accept's, nor a continuation's), weighted by the classes'
/// shares; each is the worker waking (the CPU's, then the loop's) up to the read. Where the
/// window split a queue by what its reader found (`idle_wait`, at least `IDLE_WAITS` of
/// them), the waits of the messages read after an idle CPU, at any load; else the whole
/// mean where the window was at low load, when nearly every message found the worker idle.
/// None when neither tells.
fn idle_queue(server: &ServerInput, k: &Knobs) -> Option<f64> {
    let low_load = busy_per_process(server).is_some_and(|b| b <= LOW_LOAD);
    let (mut sum, mut n) = (0.0, 0.0);
    for c in &server.classes {
        for step in route::route(c, k) {
            let network::Step::Visit { queue: Some(q), .. } = step else {
                continue;
            };
            let Some(m) = c.stages.iter().find(|m| m.name == q) else {
                continue;
            };
            let wait = match m.idle_wait {
                Some((count, mean)) if count >= IDLE_WAITS => mean,
                _ if low_load => m.mean_s,
                _ => continue,
            };
            sum += c.share * wait;
            n += c.share;
        }
    }
    (n > 0.0).then(|| sum / n)
}

/// The fewest idle waits of a queue stage whose mean `idle_queue` takes.
const IDLE_WAITS: u64 = 20;

/// The sleeps per request of the measured window: each class's handler calls (an accept
/// and each visit of its route), weighted by the measured shares, times the chance the
/// worker was idle when one came.
fn measured_sleeps(server: &ServerInput, k: &Knobs) -> f64 {
    let calls: f64 = server
        .classes
        .iter()
        .map(|c| {
            let steps = route::route(c, k);
            c.share
                * steps
                    .iter()
                    .filter(|s| !matches!(s, network::Step::Delay { .. }))
                    .count() as f64
        })
        .sum();
    calls * (1.0 - busy_per_process(server).unwrap_or(0.0))
}

/// What stderr says when the simulated loop forecasts without a cold-start figure: why the
/// parameters hold none, what the forecast does instead, what that costs, and how to get one.
fn without_cold_start(why: Option<crate::params::v1::ColdStartAbsent>) -> String {
    use crate::params::v1::ColdStartAbsent;
    let why = match why {
        Some(ColdStartAbsent::NotAsked) => "the daemon was not told --measure-cold-start",
        Some(ColdStartAbsent::NotYet) => "the daemon had not measured it yet",
        Some(ColdStartAbsent::Failed) => "its measurement failed",
        None => "written by an hstrace that did not measure it, or by hand",
    };
    format!(
        "hstrace: forecasting without a cold-start figure (the parameters hold none: {why}): \
         each stage is taken as measured at every load, so a forecast from a quiet window, \
         whose stages ran cold, predicts too long a response time under load ({}; \
         docs/model.md). `--cold-start measure` times it here, on a host like the servers'",
        WITHOUT_COLD_START_COST
    )
}

/// What forecasting without the cold start cost in the whole validation (docs/model.md
/// says how it was measured).
const WITHOUT_COLD_START_COST: &str =
    "in the model's validation it made the forecast response time up to 51 % longer near 80 % busy, \
     and 14 of 34 points missed by more than 15 %, against 12 with the cold start";

pub fn run(opts: ModelOptions) -> Result<()> {
    if opts.measured.is_some() && opts.plot.is_none() {
        bail!("--measured draws points on the picture: give --plot FILE.svg too");
    }
    if let Some(path) = &opts.plot {
        plot::check_path(path)?;
    }
    let measured = match &opts.measured {
        Some(path) => plot::read_measured(path)?,
        None => Vec::new(),
    };
    let want = opts.server.as_deref();
    let (server, source) = match &opts.source {
        Source::File(path) => (input::from_file(path, want)?, path.clone()),
        Source::Daemon(url) => (input::from_daemon(url, want)?, url.clone()),
        Source::Prometheus { url, window_s } => (
            input::from_prometheus(url, want, *window_s)?,
            format!("{url}, last {window_s} s"),
        ),
    };
    let mut knobs = opts.knobs.clone();
    if opts.key_change.is_none() && !opts.sign_costs.is_empty() {
        bail!("--sign-cost is what a signature costs with --key-change's keys: give --key-change FROM:TO too");
    }
    if let Some((from, to)) = opts.key_change {
        // a server with nothing to change is told before openssl runs for seconds
        keys::signing_stage_s(&server)?;
        knobs.key_change = Some(keys::key_change(from, to, &opts.sign_costs)?);
    }
    let given_other = knobs.other_cpus.is_some();
    let mut knobs = effective_knobs(&pick::pick(&knobs, &server), &server);
    if let Some(measure) = opts.measure_cold_start {
        // refused before seconds of measuring, as network() would after them
        if knobs.discipline != Discipline::EventLoopSim {
            bail!("{}", knobs::NOT_SIMULATED);
        }
        warm::cold_start_rates(&server)?;
        let measured = measure()?;
        eprintln!("hstrace: --cold-start measure: {}", measured.words());
        knobs.take_cold_start(measured, ColdStartFrom::Measured);
    } else if !knobs.cold_start_given && knobs.discipline == Discipline::EventLoopSim {
        match (&server.cold_start, server.from_prometheus) {
            (Some(c), _) => match c
                .check()
                .and_then(|_| warm::cold_start_rates(&server).map(drop))
            {
                Ok(()) => {
                    eprintln!("hstrace: the cold start the parameters hold: {}", c.words());
                    knobs.take_cold_start(c.clone(), ColdStartFrom::Parameters);
                }
                Err(e) => eprintln!("hstrace: the parameters' cold start is left out: {e:#}"),
            },
            (None, false) => eprintln!("{}", without_cold_start(server.cold_start_absent)),
            // (Prometheus has neither the cold start nor the rates it needs)
            (None, true) => {}
        }
    }
    if let (Some(other), Some(left)) = (knobs.other_cpus, knobs.cpus_left) {
        if left < f64::from(knobs.servers) {
            let from = if given_other {
                "--other-cpus"
            } else {
                "measured"
            };
            let servers = match knobs.servers {
                1 => "server shares".to_owned(),
                c => format!("{c} servers share"),
            };
            eprintln!("hstrace: other work keeps {other:.2} CPUs busy ({from}): the {servers} the {left:.2} CPUs left");
        }
    }
    let report = build(
        &server,
        source,
        &knobs,
        &opts.secure_fractions,
        opts.users.as_deref(),
    )?;
    if let Some(line) = report.key_change_line() {
        eprintln!("hstrace: {line}");
    }
    if let Some(path) = &opts.plot {
        plot::draw(&report, &measured, path)?;
    }
    // the text's reader is told on stderr (an error stays one line); JSON says it in
    // `discipline_from` and `because`
    if opts.format == ModelFormat::Text {
        eprintln!("hstrace: {}", knobs.because);
    }
    print!(
        "{}",
        match opts.format {
            ModelFormat::Text => report.text(),
            ModelFormat::Json => report.to_json(),
            ModelFormat::Csv => report.to_csv(),
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::seed_parameters as seed;
    use serde_json::Value;

    /// The model is arithmetic on the parameters: its crate needs no BPF, no async runtime
    /// and nothing of the tracer; its modules import each other one way (no circle), and
    /// the solvers share `network` and none imports another.
    #[test]
    fn the_model_stands_apart_and_its_modules_import_one_way() {
        let manifest = include_str!("../Cargo.toml");
        let deps = manifest.split("[dependencies]").nth(1).unwrap();
        for name in ["aya", "tokio", "hstrace ", "hstrace=", "libbpf"] {
            assert!(
                !deps.lines().any(|l| l.starts_with(name)),
                "the model crate depends on {name}"
            );
        }
        let files = [
            ("lib", include_str!("lib.rs")),
            ("stage", include_str!("stage.rs")),
            ("params", include_str!("params.rs")),
            ("cold_start", include_str!("cold_start.rs")),
            ("ordered", include_str!("ordered.rs")),
            ("http_client", include_str!("http_client.rs")),
            ("input", include_str!("input.rs")),
            ("args", include_str!("args.rs")),
            ("keys", include_str!("keys.rs")),
            ("knobs", include_str!("knobs.rs")),
            ("pick", include_str!("pick.rs")),
            ("demand", include_str!("demand.rs")),
            ("route", include_str!("route.rs")),
            ("warm", include_str!("warm.rs")),
            ("whatif", include_str!("whatif.rs")),
            ("network", include_str!("network.rs")),
            ("mva", include_str!("mva.rs")),
            ("sim", include_str!("sim.rs")),
            ("ctmc", include_str!("ctmc.rs")),
            ("report", include_str!("report.rs")),
            ("plot", include_str!("plot.rs")),
        ];
        let names: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
        // the modules each file's own code (not its tests) names after `super::`/`crate::`,
        // `use crate::{a::{..}, b}` giving a and b
        let imports = |text: &str| -> std::collections::BTreeSet<String> {
            let code = text.split("#[cfg(test)]").next().unwrap();
            let mut out = std::collections::BTreeSet::new();
            for prefix in ["super::", "crate::"] {
                for (at, _) in code.match_indices(prefix) {
                    let rest = &code[at + prefix.len()..];
                    let mut heads = vec![String::new()];
                    if let Some(inner) = rest.strip_prefix('{') {
                        let mut depth = 0;
                        for c in inner.chars() {
                            match c {
                                '{' => depth += 1,
                                '}' if depth == 0 => break,
                                '}' => depth -= 1,
                                ',' if depth == 0 => heads.push(String::new()),
                                c if depth == 0 => heads.last_mut().unwrap().push(c),
                                _ => {}
                            }
                        }
                    } else {
                        heads[0] = rest.to_owned();
                    }
                    for head in heads {
                        let head: String = head
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if names.contains(&head.as_str()) {
                            out.insert(head);
                        }
                    }
                }
            }
            out
        };
        let graph: Vec<(&str, std::collections::BTreeSet<String>)> =
            files.iter().map(|(n, t)| (*n, imports(t))).collect();
        for (name, text) in files {
            let code = text.split("#[cfg(test)]").next().unwrap();
            assert!(!code.contains("aya"), "{name}.rs mentions aya");
        }
        // no circle: take away, again and again, the modules that import none left
        let mut left: Vec<&(&str, std::collections::BTreeSet<String>)> =
            graph.iter().filter(|(n, _)| *n != "lib").collect();
        while !left.is_empty() {
            let names_left: Vec<&str> = left.iter().map(|(n, _)| *n).collect();
            let before = left.len();
            left.retain(|(n, deps)| {
                deps.iter()
                    .any(|d| d != n && names_left.contains(&d.as_str()))
            });
            assert!(
                left.len() < before,
                "the model's modules import each other in a circle among {names_left:?}"
            );
        }
        for solver in ["mva", "sim", "ctmc", "network"] {
            let deps = &graph.iter().find(|(n, _)| *n == solver).unwrap().1;
            for other in ["mva", "sim", "ctmc"] {
                assert!(
                    other == solver || !deps.contains(other),
                    "{solver} imports {other}"
                );
            }
        }
    }

    /// The simulated loop and processor sharing take the measured CPU outside the
    /// stages; --overhead wins; the event-loop approximation stays the stages alone.
    #[test]
    fn the_simulation_takes_the_measured_cpu_outside_the_stages() {
        let text = include_str!("../../examples/seed002-parameters.json").replacen(
            "\"server\": \"seed002:443\",",
            "\"server\": \"seed002:443\", \"cpu\": {\"outside_stages_s\": 0.0004},",
            1,
        );
        let server = input::pick(input::parse_parameters(&text, "t").unwrap(), None, "t").unwrap();
        assert_eq!(server.outside_stages_s, Some(4e-4));
        let sim = Knobs {
            discipline: Discipline::EventLoopSim,
            ..Knobs::default()
        };
        assert_eq!(effective_knobs(&sim, &server).overhead_s, 4e-4);
        let given = Knobs {
            overhead_s: 1e-4,
            overhead_given: true,
            ..sim.clone()
        };
        assert_eq!(effective_knobs(&given, &server).overhead_s, 1e-4);
        // a CPU twice as fast runs the measured CPU outside the stages twice as fast, not
        // a figure given
        let faster = Knobs {
            cpu_speedup: 2.0,
            ..sim.clone()
        };
        assert_eq!(effective_knobs(&faster, &server).overhead_s, 2e-4);
        let faster_given = Knobs {
            cpu_speedup: 2.0,
            ..given.clone()
        };
        assert_eq!(effective_knobs(&faster_given, &server).overhead_s, 1e-4);
        let ps_faster = Knobs {
            cpu_speedup: 2.0,
            ..Knobs::default()
        };
        assert_eq!(effective_knobs(&ps_faster, &server).overhead_s, 2e-4);
        // and the CPU per sleep, but not the wake-up (a wait)
        let sleepy = ServerInput {
            per_wait_s: Some(3e-5),
            busy: Some(0.01),
            ..server.clone()
        };
        let (slow, fast) = (
            effective_knobs(&sim, &sleepy),
            effective_knobs(&faster, &sleepy),
        );
        assert_eq!((slow.sleep_cpu_s, fast.sleep_cpu_s), (3e-5, 1.5e-5));
        assert!((slow.overhead_s - 2.0 * fast.overhead_s).abs() < 1e-15);
        assert_eq!(slow.wakeup, fast.wakeup);
        // processor sharing: all of it, every request's demand
        let ps = effective_knobs(&Knobs::default(), &server);
        assert_eq!(ps.overhead_s, 4e-4);
        let stages = whatif::network(&server, &Knobs::default(), None).unwrap();
        let with = whatif::network(&server, &ps, None).unwrap();
        for c in 0..3 {
            let measured = server.classes[c].measured();
            let added = with.service_s[c] - stages.service_s[c];
            assert!(
                (added - if measured { 4e-4 } else { 0.0 }).abs() < 1e-15,
                "{c}"
            );
        }
        assert!((with.service_demand() - stages.service_demand() - 4e-4).abs() < 1e-15);
        let approx = Knobs {
            discipline: Discipline::EventLoop,
            ..Knobs::default()
        };
        assert_eq!(effective_knobs(&approx, &server).overhead_s, 0.0);
        assert_eq!(effective_knobs(&sim, &seed()).overhead_s, 0.0);
        // with a cold start and the window's rates (full handshakes, with their accepts,
        // one every 3 s on one worker), the record's curve after that long, 0.1 ms, is
        // taken out of the measured CPU outside the stages; out of a figure given, nothing
        let accepting = text.replacen(
            "\"connection_setup\":",
            "\"accept_queue\": {\"class\": \"queue\", \"mean_s\": 0.0001}, \"connection_setup\":",
            1,
        );
        let mut rated =
            input::pick(input::parse_parameters(&accepting, "t").unwrap(), None, "t").unwrap();
        for c in &mut rated.classes {
            c.rate_per_s = Some(1.0 / 3.0);
        }
        let cold = Knobs {
            cold_start: network::ColdStartCurves::every_visit(network::IdleCurve::constant(1e-4)),
            cold_start_given: true,
            ..effective_knobs(&sim, &rated)
        };
        let net = whatif::network(&rated, &cold, None).unwrap();
        assert!((net.overhead_cold.paid_s - 1e-4).abs() < 1e-15, "{net:?}");
        assert!((net.warm_overhead_s() - 3e-4).abs() < 1e-15);
        let given = Knobs {
            overhead_given: true,
            ..cold
        };
        let net = whatif::network(&rated, &given, None).unwrap();
        assert_eq!(net.overhead_cold, network::OverheadCold::default());
        assert_eq!(net.warm_overhead_s(), 4e-4);
        // two ports of one server: each connection pays its own port's
        let server = ServerInput {
            connections: 100.0,
            ..server
        };
        let mut other = server.clone();
        other.server = "seed002:80".into();
        other.connections = 300.0;
        other.outside_stages_s = Some(0.0);
        let merged = input::merge(vec![server.clone(), other.clone()], "t").unwrap();
        assert!((merged.outside_stages_s.unwrap() - 1e-4).abs() < 1e-15);
        other.outside_stages_s = None;
        assert_eq!(
            input::merge(vec![server, other], "t")
                .unwrap()
                .outside_stages_s,
            None
        );
        // a negative figure is refused
        let bad = text.replace("0.0004", "-1");
        let err = input::parse_parameters(&bad, "t").unwrap_err().to_string();
        assert!(err.contains("negative"), "{err}");
    }

    /// Fig. 8's setting: h = 2 s, p = 0.1, 0.2, 0.3, mean response time over all requests.
    #[test]
    fn seed_002_fig_8_shape() {
        // p = 0.1 saturates at N* ≈ 573: solve to well past 1.5 N*
        let users: Vec<u32> = (1..=1000).collect();
        let r = build(
            &seed(),
            "seed".into(),
            &Knobs::default(),
            &[0.1, 0.2, 0.3],
            Some(&users),
        )
        .unwrap();
        for (i, curve) in r.curves.iter().enumerate() {
            let net = &curve.network;
            let resp: Vec<f64> = curve.points.iter().map(|(s, _)| s.response_s).collect();
            // N = 1: the sum of the stage means of the mix
            let p = curve.secure_fraction.unwrap();
            let one = p * (14.916e-3 + 19.336e-3) + (1.0 - p) * (2.233e-3 + 0.094e-3);
            assert!((resp[0] - one).abs() < 1e-15, "{} vs {one}", resp[0]);
            // monotone, and convex (to rounding: on the asymptote each step is D_max):
            // flat, then the knee, then N · D_max − Z
            assert!(resp.windows(2).all(|w| w[1] > w[0]));
            for (k, w) in resp.windows(3).enumerate() {
                assert!(
                    w[2] - w[1] >= w[1] - w[0] - 1e-12 * w[2],
                    "p={p} N={}: {w:?}",
                    k + 2
                );
            }
            let n_star = net.n_star();
            let at = |n: f64| resp[n.round() as usize - 1];
            assert!(
                at(0.5 * n_star) < 2.0 * resp[0],
                "p={p}: flat well below N*"
            );
            assert!(at(n_star) > 3.0 * resp[0], "p={p}: the knee is near N*");
            let n = 1.5 * n_star;
            let asymptote = n.round() * net.bottleneck_demand() - net.think_s;
            assert!(
                (at(n) - asymptote).abs() < 0.05 * asymptote,
                "p={p}: on the asymptote past N*"
            );
            // a larger p costs more at every N
            if i > 0 {
                let prev = &r.curves[i - 1].points;
                assert!(curve
                    .points
                    .iter()
                    .zip(prev)
                    .all(|(a, b)| a.0.response_s > b.0.response_s));
                assert!(n_star < r.curves[i - 1].network.n_star());
            }
        }
    }

    #[test]
    fn json_has_the_schema_the_validation_reads() {
        let r = build(
            &seed(),
            "seed".into(),
            &Knobs::default(),
            &[],
            Some(&[1, 10]),
        )
        .unwrap();
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["schema"], "hstrace.model/v1");
        assert_eq!(v["server"], "seed002:443");
        assert_eq!(v["think_time_s"], 2.0);
        assert_eq!(v["servers"], 1);
        assert_eq!(v["mix"]["plain"], 0.8);
        assert!((v["demand_s"]["tls_full"]["service"].as_f64().unwrap() - 14.916e-3).abs() < 1e-12);
        assert!(v["n_star"].as_f64().unwrap() > 1.0);
        let c = &v["curves"][0];
        assert_eq!(c["secure_fraction"], Value::Null);
        let p = &c["points"][1];
        assert_eq!(p["users"], 10);
        for k in ["throughput_per_s", "response_s", "utilisation"] {
            assert!(p[k].is_f64(), "{k}");
        }
        assert!(p["classes"]["tls_full"]["response_s"].is_f64());
        assert_eq!(p["classes"]["tls_resumed"]["response_s"], Value::Null);
        assert!(p["bounds"]["throughput_max_per_s"].is_f64());
        assert!(p["bounds"]["response_min_s"].is_f64());
        let csv = r.to_csv();
        assert_eq!(csv.lines().count(), 1 + 2 * 4);
        assert!(csv.lines().nth(1).unwrap().starts_with(",1,all,1,"));
    }

    /// --key-change: the knobs say which keys, what each signs in, and what the full
    /// handshake's first flight became; the demand the rest of the JSON shows has it.
    #[test]
    fn json_says_what_the_key_change_did() {
        use keys::{CostSource, KeyChange};
        let plain = build(&seed(), "seed".into(), &Knobs::default(), &[], Some(&[1])).unwrap();
        let v: Value = serde_json::from_str(&plain.to_json()).unwrap();
        assert_eq!(v["knobs"]["key_change"], Value::Null);
        assert_eq!(plain.key_change_line(), None);
        let k = Knobs {
            key_change: Some(KeyChange {
                from: Key::Rsa2048,
                to: Key::Rsa4096,
                from_sign_s: 0.25e-3,
                to_sign_s: 1.75e-3,
                source: CostSource::Given,
            }),
            ..Knobs::default()
        };
        let r = build(&seed(), "seed".into(), &k, &[], Some(&[1])).unwrap();
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        let kc = &v["knobs"]["key_change"];
        assert_eq!(
            (&kc["from"], &kc["to"]),
            (&"rsa2048".into(), &"rsa4096".into())
        );
        assert_eq!(kc["sign_s"]["rsa2048"], 0.25e-3);
        assert_eq!(kc["sign_s"]["rsa4096"], 1.75e-3);
        assert_eq!(kc["measured_by"], "--sign-cost");
        // the seed's server_flight_1: 0.480 ms
        assert_eq!(kc["server_flight_1_s"]["measured"], 0.48e-3);
        let added = kc["server_flight_1_added_s"].as_f64().unwrap();
        assert!((added - 1.5e-3).abs() < 1e-15, "{kc}");
        let demand = |v: &Value, c: &str| v["demand_s"][c]["service"].as_f64().unwrap();
        let before: Value = serde_json::from_str(&plain.to_json()).unwrap();
        assert!((demand(&v, "tls_full") - demand(&before, "tls_full") - added).abs() < 1e-15);
        assert_eq!(demand(&v, "plain"), demand(&before, "plain"));
        assert_eq!(
            r.key_change_line().unwrap(),
            "--sign-cost: rsa2048 signs in 0.250 ms, rsa4096 in 1.750 ms: a full handshake's server_flight_1 +1.500 ms (0.480 → 1.980 ms)"
        );
        assert!(r.text().contains(
            "key rsa2048 → rsa4096 (a full handshake's server_flight_1 0.480 → 1.980 ms)"
        ));
        // floored: the line says so
        let mut cheap = k.clone();
        let kc = cheap.key_change.as_mut().unwrap();
        (kc.from_sign_s, kc.to_sign_s) = (1e-3, 0.0);
        let r = build(&seed(), "seed".into(), &cheap, &[], Some(&[1])).unwrap();
        let line = r.key_change_line().unwrap();
        assert!(
            line.ends_with(
                "-0.480 ms (0.480 → 0.000 ms: floored at 0, the signatures differ by 1.000 ms)"
            ),
            "{line}"
        );
    }

    /// --group: the knobs say what the group's stages made of a full handshake's service
    /// demand and its waits for the client, and the demands the rest of the JSON shows have
    /// both; from parameters without the groups' delay stages, that the waits stayed.
    #[test]
    fn json_and_text_say_what_the_group_did() {
        use crate::{
            ordered::Ordered,
            params::v1::{GroupParams, GroupStage},
            stage::Stage,
        };
        let stage = |name: Stage, mean_s| {
            let st = GroupStage {
                count: 5,
                mean_s,
                cpu_mean_s: None,
            };
            (name.name().to_owned(), st)
        };
        let mut server = seed();
        let hybrid = GroupParams {
            group: "X25519MLKEM768".into(),
            count: 5,
            share: 1.0,
            stages: Ordered(vec![stage(Stage::ServerFlight1, 1.48e-3)]),
            service_s: 1.48e-3,
            delay_stages: Some(Ordered(vec![stage(Stage::WaitClientFlight2, 13.407e-3)])),
            delay_s: Some(13.407e-3),
        };
        server.key_exchange = vec![hybrid.clone()];
        let k = Knobs {
            group: Some("X25519MLKEM768".into()),
            ..Knobs::default()
        };
        let plain = build(&seed(), "seed".into(), &Knobs::default(), &[], Some(&[1])).unwrap();
        let before: Value = serde_json::from_str(&plain.to_json()).unwrap();
        assert_eq!(before["knobs"]["group"], Value::Null);
        let demand = |v: &Value, k: &str| v["demand_s"]["tls_full"][k].as_f64().unwrap();
        let r = build(&server, "seed".into(), &k, &[], Some(&[1])).unwrap();
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        let g = &v["knobs"]["group"];
        assert_eq!(g["delays_from"], "group");
        // the seed's wait_client_flight_2: 12.407 ms, 1 ms more with the group
        let (m, w) = (
            &g["full_delay_s"]["measured"],
            &g["full_delay_s"]["with_group"],
        );
        assert!(
            (w.as_f64().unwrap() - m.as_f64().unwrap() - 1e-3).abs() < 1e-12,
            "{g}"
        );
        assert!((demand(&v, "delay") - demand(&before, "delay") - 1e-3).abs() < 1e-12);
        assert!((demand(&v, "service") - demand(&before, "service") - 1e-3).abs() < 1e-12);
        assert!(
            r.text().contains(
                "every full handshake on X25519MLKEM768 (its service stages 14.916 → 15.916 ms, its waits for the client 19.336 → 20.336 ms)"
            ),
            "{}",
            r.text()
        );
        // an older document: the service stages only, and the text says what is missing
        server.key_exchange = vec![GroupParams {
            delay_stages: None,
            delay_s: None,
            ..hybrid
        }];
        let r = build(&server, "seed".into(), &k, &[], Some(&[1])).unwrap();
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        let g = &v["knobs"]["group"];
        assert_eq!(g["delays_from"], "window");
        assert_eq!(g["full_delay_s"]["with_group"], Value::Null);
        assert_eq!(demand(&v, "delay"), demand(&before, "delay"));
        assert!((demand(&v, "service") - demand(&before, "service") - 1e-3).abs() < 1e-12);
        assert!(
            r.text().contains("its waits for the client stay as measured, 19.336 ms: these parameters hold no per-group delay stages (an older hstrace wrote them)"),
            "{}",
            r.text()
        );
    }

    #[test]
    fn the_simulation_reports_its_error_and_queue_stages() {
        let k = Knobs {
            discipline: Discipline::EventLoopSim,
            think_s: 0.5,
            ..Knobs::default()
        };
        let r = build(&seed(), "seed".into(), &k, &[], Some(&[1, 40])).unwrap();
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["discipline"], "event_loop_sim");
        assert_eq!(v["seed"], 1);
        let p = &v["curves"][0]["points"][1];
        assert!(p["ci95"]["response_s"].as_f64().unwrap() > 0.0);
        assert!(p["ci95"]["throughput_per_s"].as_f64().unwrap() > 0.0);
        assert!(p["classes"]["tls_full"]["response_ci95_s"].is_f64());
        assert_eq!(p["classes"]["tls_resumed"]["response_ci95_s"], Value::Null);
        // seed 002 measured no queue stages: no named waits to predict
        assert!(p["classes"]["tls_full"]["queue_s"]
            .as_object()
            .unwrap()
            .is_empty());
        assert!(r.text().contains("± ms"));
        // an exact discipline has no error to report
        let exact = build(&seed(), "seed".into(), &Knobs::default(), &[], Some(&[40])).unwrap();
        let v: Value = serde_json::from_str(&exact.to_json()).unwrap();
        assert_eq!(v["curves"][0]["points"][0]["ci95"], Value::Null);
        assert_eq!(v["seed"], Value::Null);
        // too many users to simulate: one clear line
        let e = build(&seed(), "seed".into(), &k, &[], Some(&[sim::MAX_USERS + 1]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("event-loop-sim") && e.contains("--users"), "{e}");
    }

    #[test]
    fn default_users_reach_past_the_knee() {
        let r = build(&seed(), "seed".into(), &Knobs::default(), &[], None).unwrap();
        let users: Vec<u32> = r.curves[0].points.iter().map(|(s, _)| s.users).collect();
        assert_eq!(users[0], 1);
        assert!(f64::from(*users.last().unwrap()) >= 2.0 * r.base.n_star());
        assert!(users.len() <= 52);
    }

    /// Other work on the servers' CPUs: measured, or given (which wins); the CPUs left
    /// are the servers' (the host's where not measured) less it, a tenth at least; the
    /// approximations run each server at its share of them, the simulation shares them
    /// among the workers busy at each moment.
    #[test]
    fn other_work_leaves_the_servers_fewer_cpus() {
        let server = ServerInput {
            cpus: Some(4),
            server_cpus: Some(2),
            other_cpus: Some(0.5),
            ..seed()
        };
        let ps = Knobs {
            servers: 2,
            ..Knobs::default()
        };
        let k = effective_knobs(&ps, &server);
        assert_eq!((k.other_cpus, k.cpus_left), (Some(0.5), Some(1.5)));
        assert_eq!(k.cpu_share(), 0.75);
        // a demand takes 1 / 0.75 as long
        let net = whatif::network(&server, &k, None).unwrap();
        let whole = whatif::network(&server, &ps, None).unwrap();
        assert!((net.service_s[0] * 0.75 - whole.service_s[0]).abs() < 1e-12);
        assert_eq!(net.cpus_left, None);
        // given: wins, and the floor
        let given = Knobs {
            other_cpus: Some(3.0),
            ..ps.clone()
        };
        assert_eq!(effective_knobs(&given, &server).cpus_left, Some(0.2));
        // the host's CPUs where the servers' are not measured; none without a figure
        let host_only = ServerInput {
            server_cpus: None,
            ..server.clone()
        };
        assert_eq!(effective_knobs(&ps, &host_only).cpus_left, Some(3.5));
        assert_eq!(effective_knobs(&ps, &seed()).cpus_left, None);
        // none: as without a figure, each server a whole processor
        let none = Knobs {
            other_cpus: Some(0.0),
            servers: 8,
            ..ps.clone()
        };
        assert_eq!(effective_knobs(&none, &server).cpus_left, None);
        assert_eq!(effective_knobs(&ps, &seed()).cpu_share(), 1.0);
        // one server with a CPU left whole: full speed
        let one = effective_knobs(&Knobs::default(), &server);
        assert_eq!(one.cpu_share(), 1.0);
        // the simulation: the network carries the CPUs left, the demands stay whole
        let sim = Knobs {
            servers: 2,
            discipline: Discipline::EventLoopSim,
            ..Knobs::default()
        };
        let k = effective_knobs(&sim, &server);
        assert_eq!(k.cpu_share(), 1.0);
        assert_eq!(
            whatif::network(&server, &k, None).unwrap().cpus_left,
            Some(1.5)
        );
    }
    /// The simulation's wake-up, unless given: the live server's, by how long its CPU slept,
    /// where two ranges of sleeps hold `IDLE_WAITS` waits each (less the CPU of a sleep);
    /// else one time from the queue stages (`idle_queue`). Two ports pool their ranges.
    #[test]
    fn the_wakeup_is_the_measured_curve_where_it_has_two_points() {
        let sim = Knobs {
            discipline: Discipline::EventLoopSim,
            ..Knobs::default()
        };
        let w = |idle_s, count, mean_s| crate::params::v1::WakeupAfter {
            idle_s,
            count,
            mean_s,
        };
        let server = ServerInput {
            per_wait_s: Some(1e-5),
            busy: Some(0.01),
            wakeup_after_idle: vec![w(1e-4, 50, 6e-5), w(2e-3, 19, 9e-5), w(0.2, 30, 3e-4)],
            connections: 100.0,
            ..seed()
        };
        let k = effective_knobs(&sim, &server);
        assert_eq!(k.sleep_cpu_s, 1e-5);
        let got = k.wakeup.points();
        assert_eq!(got.len(), 2, "{got:?}");
        for (&(idle, wake), want) in got.iter().zip([(1e-4, 5e-5), (0.2, 2.9e-4)]) {
            assert!((idle - want.0).abs() < 1e-15 && (wake - want.1).abs() < 1e-15);
        }
        // one range with enough waits: not a curve
        let few = ServerInput {
            wakeup_after_idle: vec![w(1e-4, 50, 6e-5), w(0.2, 19, 3e-4)],
            ..server.clone()
        };
        assert!(effective_knobs(&sim, &few).wakeup.points().len() <= 1);
        // given: as given
        let given = Knobs {
            wakeup: network::IdleCurve::constant(1e-3),
            wakeup_given: true,
            ..sim.clone()
        };
        assert_eq!(
            effective_knobs(&given, &server).wakeup,
            network::IdleCurve::constant(1e-3)
        );
        // two ports: the same range pooled by counts, the others kept
        let mut other = server.clone();
        other.server = "seed002:80".into();
        other.wakeup_after_idle = vec![w(3e-4 / 2.0, 50, 1e-4)];
        let merged = input::merge(vec![server, other], "t").unwrap();
        let pooled = merged.wakeup_after_idle;
        assert_eq!(pooled.len(), 3, "{pooled:?}");
        assert_eq!(pooled[0].count, 100);
        assert!((pooled[0].idle_s - 1.25e-4).abs() < 1e-15);
        assert!((pooled[0].mean_s - 8e-5).abs() < 1e-15);
        assert_eq!(
            (pooled[1], pooled[2]),
            (w(2e-3, 19, 9e-5), w(0.2, 30, 3e-4))
        );
    }
}
