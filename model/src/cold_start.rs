//! The cold start as figures: what a CPU paid to run a work cold, by how long since it last
//! ran it (`host.cold_start` of the parameters), and the curve the model makes of it. The
//! tracer measures them (hstrace's `cold_start`: libcrypto's work timed on a CPU the servers
//! run on); the model takes the cost beyond back to back out of the window's stages and adds
//! it back by how long each visit had been away (`warm::warm`).

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// One pause's run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ColdRun {
    /// how long the thread slept before each run, seconds (0: back to back)
    pub pause_s: f64,
    /// the work's CPU time, median, seconds
    pub cpu_s: f64,
    /// how many runs after that pause the figures are of (the latest, at most `KEPT`)
    pub runs: u32,
    /// the work's CPU time, mean, seconds: what the curve is made of, as the stages it is
    /// taken out of are means (absent in documents written before hstrace kept it)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_mean_s: Option<f64>,
}

impl ColdRun {
    /// The work's CPU time the curve takes: the mean, else (an older document) the median.
    pub fn cost_s(&self) -> f64 {
        self.cpu_mean_s.unwrap_or(self.cpu_s)
    }
}

/// What was measured, and where (`host.cold_start` of the parameters): the record's work
/// at the top level (as the first documents had it), the handshake's beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColdStart {
    /// the work timed, in words
    pub work: String,
    /// the CPU it ran on
    pub cpu: u32,
    /// back to back first, then each pause, ascending
    pub runs: Vec<ColdRun>,
    /// a full handshake's first flight's work, timed in turn with the record's on the same
    /// CPU (absent in documents written before hstrace timed it)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handshake: Option<ColdWork>,
}

/// Another work's runs, on the same CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ColdWork {
    /// the work timed, in words
    pub work: String,
    /// back to back first, then each pause, ascending
    pub runs: Vec<ColdRun>,
}

impl ColdStart {
    /// The record's CPU beyond its back-to-back cost, by pause: (pause, seconds), from 0
    /// back to back, never below 0 (the model's cold-start curve for every visit).
    pub fn beyond_back_to_back(&self) -> Vec<(f64, f64)> {
        beyond_back_to_back(&self.runs)
    }

    /// The same of the handshake's work (the curve of the visit that sends a full
    /// handshake's first flight), where it was timed.
    pub fn handshake_beyond_back_to_back(&self) -> Option<Vec<(f64, f64)>> {
        self.handshake
            .as_ref()
            .map(|h| beyond_back_to_back(&h.runs))
    }

    /// Whether the runs are what a curve can be made of: back to back first, then pauses
    /// ascending, every time finite and not negative (a hand-written document may hold
    /// anything).
    pub fn check(&self) -> Result<()> {
        check_runs(&self.runs, "host.cold_start's runs")?;
        match &self.handshake {
            Some(h) => check_runs(&h.runs, "host.cold_start.handshake's runs"),
            None => Ok(()),
        }
    }

    /// In words, for stderr: `SHA-256 … cost CPU 0 14.0 µs back to back, 14.9 µs after
    /// 0.2 ms, …; X25519 … 150.2 µs back to back, …`.
    pub fn words(&self) -> String {
        let record = format!(
            "{} cost CPU {}: {}",
            self.work,
            self.cpu,
            runs_words(&self.runs)
        );
        match &self.handshake {
            Some(h) => format!("{record}; {}: {}", h.work, runs_words(&h.runs)),
            None => record,
        }
    }
}

fn beyond_back_to_back(runs: &[ColdRun]) -> Vec<(f64, f64)> {
    let warm = runs.first().map_or(0.0, ColdRun::cost_s);
    runs.iter()
        .map(|r| (r.pause_s, (r.cost_s() - warm).max(0.0)))
        .collect()
}

fn check_runs(runs: &[ColdRun], what: &str) -> Result<()> {
    let ok = runs.first().is_some_and(|r| r.pause_s == 0.0)
        && runs.windows(2).all(|w| w[0].pause_s < w[1].pause_s)
        && runs.iter().all(|r| {
            [r.cpu_s, r.cost_s()]
                .iter()
                .all(|t| t.is_finite() && *t >= 0.0)
                && r.pause_s.is_finite()
        });
    if !ok {
        bail!("{what} must start back to back (pause_s 0), then pauses ascending, each cpu_s and cpu_mean_s a time in seconds");
    }
    Ok(())
}

fn runs_words(runs: &[ColdRun]) -> String {
    runs.iter()
        .map(|r| {
            let us = r.cost_s() * 1e6;
            match r.pause_s {
                0.0 => format!("{us:.1} µs back to back"),
                s => format!("{us:.1} µs after {:.1} ms", s * 1e3),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
