//! The what-if knobs, as given, and where each came from (given, measured, the
//! parameters'): each knob changes only what it names (`whatif` makes the network of them).

use anyhow::Result;

use super::{
    args::parse_idle_curve,
    keys::KeyChange,
    network::{ColdStartCurves, Discipline, IdleCurve},
};
use crate::cold_start::ColdStart;

/// Web-server processors at most.
pub const MAX_SERVERS: u32 = 1024;

/// The knobs, as given.
#[derive(Debug, Clone, PartialEq)]
pub struct Knobs {
    /// Z, seconds
    pub think_s: f64,
    /// c
    pub servers: u32,
    /// `--servers` was given; otherwise `pick` takes them from the measured architecture
    pub servers_given: bool,
    /// the share of TLS requests that resume (the TLS share unchanged)
    pub hit_ratio: Option<f64>,
    /// divides every service demand
    pub cpu_speedup: f64,
    /// `--other-cpus`: how many of the servers' CPUs other work keeps busy (None: as
    /// measured, the parameters' `host.other_cpus`)
    pub other_cpus: Option<f64>,
    /// the CPUs the servers share beside that work (None: a whole CPU each); made by
    /// `model::effective_knobs`
    pub cpus_left: Option<f64>,
    /// (stage, factor): multiplies that stage's mean in every class that has it
    pub scale_stages: Vec<(String, f64)>,
    /// how the web server shares its processor
    pub discipline: Discipline,
    /// `--discipline` was given; otherwise `pick` takes it from the measured architecture
    pub discipline_given: bool,
    /// where the discipline and servers came from (`pick`)
    pub discipline_from: DisciplineFrom,
    /// why, in one line (`pick`; empty before it)
    pub because: String,
    /// the seed of `--discipline event-loop-sim`
    pub seed: u64,
    /// `--overhead`: the web server's CPU per request that no stage measures, seconds
    pub overhead_s: f64,
    /// `--overhead` was given; otherwise event-loop-sim takes the parameters' measured
    /// CPU outside the stages (`ServerInput::outside_stages_s`) where they have it
    pub overhead_given: bool,
    /// `--wakeup`: how long an idle worker takes to run after an event, by how long it slept
    pub wakeup: IdleCurve,
    /// `--wakeup` was given; otherwise event-loop-sim takes it from the parameters' queue
    /// stages, when they were measured at low load
    pub wakeup_given: bool,
    /// `--sleep-cpu`: the worker's CPU each time it goes to sleep and wakes, seconds
    pub sleep_cpu_s: f64,
    /// `--sleep-cpu` was given; otherwise event-loop-sim takes the parameters' measured
    /// CPU across a wait (`ServerInput::per_wait_s`)
    pub sleep_cpu_given: bool,
    /// `--cold-start`: the CPU a visit pays beyond its warm cost, by how long since it
    /// last ran on its CPU (a full handshake's first flight's own, where measured)
    pub cold_start: ColdStartCurves,
    /// `--cold-start` was given (a curve, `measure` or `none`); otherwise event-loop-sim
    /// takes the parameters' `host.cold_start`
    pub cold_start_given: bool,
    /// the runs `cold_start` was made of: `--cold-start measure`'s, or the parameters'
    pub cold_start_measured: Option<ColdStart>,
    /// where `cold_start` came from
    pub cold_start_from: ColdStartFrom,
    /// `--key-change`: another certificate key, and what a signature costs with each
    pub key_change: Option<KeyChange>,
    /// `--group`: every full handshake on this key-exchange group (`group::with_group`)
    pub group: Option<String>,
}

impl Default for Knobs {
    fn default() -> Knobs {
        Knobs {
            think_s: 2.0,
            servers: 1,
            servers_given: false,
            hit_ratio: None,
            cpu_speedup: 1.0,
            other_cpus: None,
            cpus_left: None,
            scale_stages: Vec::new(),
            discipline: Discipline::ProcessorSharing,
            discipline_given: false,
            discipline_from: DisciplineFrom::Default,
            because: String::new(),
            seed: 1,
            overhead_s: 0.0,
            overhead_given: false,
            wakeup: IdleCurve::default(),
            wakeup_given: false,
            sleep_cpu_s: 0.0,
            sleep_cpu_given: false,
            cold_start: ColdStartCurves::default(),
            cold_start_given: false,
            cold_start_measured: None,
            cold_start_from: ColdStartFrom::None,
            key_change: None,
            group: None,
        }
    }
}

impl Knobs {
    /// What every service demand is divided by: `--cpu-speedup`, and the share of a CPU
    /// each server runs at beside the other work on its CPUs (`cpu_share`).
    pub fn speed(&self) -> f64 {
        self.cpu_speedup * self.cpu_share()
    }

    /// The share of a CPU each server runs at beside the other work on its CPUs, where the
    /// solver takes it as one figure: the CPUs left shared by all the servers, at most a
    /// whole one each. The simulation shares them among the workers busy at each moment
    /// instead (`Network::cpus_left`): 1 here.
    pub fn cpu_share(&self) -> f64 {
        match (self.discipline, self.cpus_left) {
            (Discipline::EventLoopSim, _) | (_, None) => 1.0,
            (_, Some(left)) => (left / f64::from(self.servers.max(1))).min(1.0),
        }
    }

    /// The think time for people: 0.196 s, 2 s.
    pub fn think_time(&self) -> String {
        let s = format!("{:.3}", self.think_s);
        format!("{} s", s.trim_end_matches('0').trim_end_matches('.'))
    }

    /// How the web server serves, in words.
    pub fn web_server(&self) -> String {
        match (self.discipline, self.servers) {
            (Discipline::EventLoop, _) => "one event loop, each flight answered in turn".into(),
            (Discipline::EventLoopSim, 1) => format!(
                "one event loop (nginx's: gated passes, one accept per pass), simulated, seed {}",
                self.seed
            ),
            (Discipline::EventLoopSim, c) => format!(
                "{c} event loops sharing the listeners (nginx's workers: gated passes, one accept per pass), simulated, seed {}",
                self.seed
            ),
            (_, 1) => "1 processor shared by all requests".into(),
            (_, c) => format!("{c} processors shared by all requests"),
        }
    }
}

/// Where the discipline and the servers the model uses came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DisciplineFrom {
    /// `--discipline` (and `--servers`) as given
    Given,
    /// from the server's measured architecture
    Measured,
    /// nothing measured to go by: processor sharing on one processor, as seed 002
    #[default]
    Default,
}

impl DisciplineFrom {
    pub fn name(self) -> &'static str {
        match self {
            DisciplineFrom::Given => "given",
            DisciplineFrom::Measured => "measured",
            DisciplineFrom::Default => "default",
        }
    }
}

impl Knobs {
    /// The cold start measured (`--cold-start measure`, or the parameters'): its curve, the
    /// cost beyond back to back, with the runs it was made of and where they came from.
    pub fn take_cold_start(&mut self, measured: ColdStart, from: ColdStartFrom) {
        self.cold_start = ColdStartCurves {
            record: IdleCurve::curve(measured.beyond_back_to_back()),
            handshake: measured
                .handshake_beyond_back_to_back()
                .map_or_else(IdleCurve::default, IdleCurve::curve),
        };
        self.cold_start_measured = Some(measured);
        self.cold_start_from = from;
    }
}

/// `--cold-start` as given.
#[derive(Debug, Clone, PartialEq)]
pub enum ColdStartArg {
    /// left out: the parameters' `host.cold_start`, with event-loop-sim
    Parameters,
    /// `none`: not simulated
    None,
    /// `measure`: timed on the model's host, by `model::run`
    Measure,
    /// `SINCE=TIME,...`: one curve for every visit
    Given(IdleCurve),
}

impl ColdStartArg {
    pub fn parse(arg: Option<&str>) -> Result<ColdStartArg> {
        Ok(match arg {
            None => ColdStartArg::Parameters,
            Some("none") => ColdStartArg::None,
            Some("measure") => ColdStartArg::Measure,
            Some(curve) => ColdStartArg::Given(parse_idle_curve("--cold-start", curve)?),
        })
    }

    /// Sets `knobs`' cold start as asked (a curve given is taken here; the parameters' and
    /// a measured one once the discipline is known); whether to measure it.
    pub fn apply(self, knobs: &mut Knobs) -> bool {
        knobs.cold_start_given = self != ColdStartArg::Parameters;
        match self {
            ColdStartArg::Given(curve) => {
                knobs.cold_start = ColdStartCurves::every_visit(curve);
                knobs.cold_start_from = ColdStartFrom::Given;
                false
            }
            ColdStartArg::Measure => true,
            ColdStartArg::Parameters | ColdStartArg::None => false,
        }
    }
}

/// Where the model's cold start came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColdStartFrom {
    /// none: not simulated, `--cold-start none`, or none measured
    None,
    /// `--cold-start SINCE=TIME,...`
    Given,
    /// `--cold-start measure`, on the model's host
    Measured,
    /// the parameters' `host.cold_start`, measured where the servers ran
    Parameters,
}

impl ColdStartFrom {
    pub fn name(self) -> &'static str {
        match self {
            ColdStartFrom::None => "none",
            ColdStartFrom::Given => "given",
            ColdStartFrom::Measured => "measured",
            ColdStartFrom::Parameters => "parameters",
        }
    }
}

/// The loop's own knobs given to another discipline.
pub const NOT_SIMULATED: &str = "--wakeup, --sleep-cpu and --cold-start are parts of the simulated event loop: give --discipline event-loop-sim";

#[cfg(test)]
mod tests {
    use super::*;

    /// `--cold-start` left out, none, measure or a curve: what the knobs then hold and
    /// whether the model measures it.
    #[test]
    fn the_cold_start_argument_sets_the_knobs() {
        let set = |arg: Option<&str>| {
            let mut knobs = Knobs::default();
            let measure = ColdStartArg::parse(arg).unwrap().apply(&mut knobs);
            (knobs, measure)
        };
        let (k, measure) = set(None);
        assert!(!k.cold_start_given && !measure && k.cold_start.is_zero());
        assert_eq!(k.cold_start_from, ColdStartFrom::None);
        let (k, measure) = set(Some("none"));
        assert!(k.cold_start_given && !measure && k.cold_start.is_zero());
        assert_eq!(k.cold_start_from, ColdStartFrom::None);
        let (k, measure) = set(Some("measure"));
        assert!(k.cold_start_given && measure && k.cold_start.is_zero());
        let (k, measure) = set(Some("1ms=2us,200ms=60us"));
        assert!(k.cold_start_given && !measure);
        assert_eq!(k.cold_start_from, ColdStartFrom::Given);
        assert!((k.cold_start.record.after(0.2) - 60e-6).abs() < 1e-12);
        assert!(k.cold_start.handshake.is_zero());
        assert!(ColdStartArg::parse(Some("soon")).is_err());
    }
}
