//! What the OTLP push adds to the record path (`cargo xtask bench otlp`): serve's sink fed
//! synthetic records (`hstrace-bench pipeline --serve`, real captured hellos) with the
//! OTLP push off and on, in interleaved pairs whose order swaps each pair. The push points
//! at a closed port: every export fails, which costs the exporter, never the record path.
//!
//! With `--ab OTHER_HSTRACE`, the same for this build and another, side by side: what a
//! change to the hand-over does to it.

use std::path::Path;

use anyhow::{ensure, Result};

use super::{hstrace_numbers, in_turn, median, other_build, range, split, tool};
use crate::util::build_bench;

/// Connections per run: 4 records each, under the OTLP side's queue (64 batches of 256
/// records), so that no record is dropped and every one is counted into the SDK.
const RECORDS: &str = "60000";
/// Where the push goes: the discard port, closed on these machines.
const NOWHERE: &str = "http://127.0.0.1:9";

/// One run of `bench` (an `hstrace-bench`): (the record path thread's CPU, wall time) per
/// connection, in ns.
fn run(bench: &Path, otlp: bool) -> Result<(f64, f64)> {
    let mut args = vec!["pipeline", "--serve", "--records", RECORDS, "--per-conn"];
    if otlp {
        args.extend(["--otlp", NOWHERE]);
    }
    let [cpu, wall] = hstrace_numbers(bench, &args)?;
    Ok((cpu, wall))
}

/// `pairs` interleaved pairs; prints the record path thread's CPU per connection and the
/// wall time per connection, off and on, and their differences.
pub fn otlp_cost(pairs: usize) -> Result<()> {
    let bench = tool(&build_bench()?);
    let (mut cpu_diff, mut wall_diff) = (Vec::new(), Vec::new());
    let (mut cpu_off, mut wall_off) = (Vec::new(), Vec::new());
    for pair in 0..pairs {
        let (off, on) = in_turn(pair, || run(&bench, false), || run(&bench, true))?;
        eprintln!(
            "pair {}: record path CPU {:.0} → {:.0} ns, wall {:.0} → {:.0} ns a connection",
            pair + 1,
            off.0,
            on.0,
            off.1,
            on.1
        );
        cpu_off.push(off.0);
        wall_off.push(off.1);
        cpu_diff.push(on.0 - off.0);
        wall_diff.push(on.1 - off.1);
    }
    let (clo, chi) = range(&cpu_diff);
    let (wlo, whi) = range(&wall_diff);
    println!(
        "OTLP on, per connection ({pairs} interleaved pairs, medians): the record path's own CPU {:.0} ns {:+.0} ns ({clo:+.0}…{chi:+.0}, {}); wall time {:.0} ns {:+.0} ns ({wlo:+.0}…{whi:+.0}), the recorder thread's work beside it included",
        median(cpu_off),
        median(cpu_diff.clone()),
        split(&cpu_diff),
        median(wall_off),
        median(wall_diff),
    );
    Ok(())
}

/// `rounds` rounds of four runs (this build and `other`, an `hstrace` with its
/// `hstrace-bench` beside it, each with the push off and on, in an order that turns each
/// round); prints each build's push cost (on − off, the record path thread's CPU per
/// connection) and this build's minus the other's. Each build's cost is its own on − off:
/// code layout alone moves the whole record path of one build against another's by tens of
/// nanoseconds, on and off alike, and the difference within a build cancels that.
pub fn otlp_cost_ab(other: &Path, rounds: usize) -> Result<()> {
    let this = tool(&build_bench()?);
    let that = tool(&other_build(other)?);
    ensure!(
        that.exists(),
        "{} not found: --ab takes another build's hstrace, with its hstrace-bench beside it",
        that.display()
    );
    let runs = [(&this, false), (&this, true), (&that, false), (&that, true)];
    let (mut this_cost, mut that_cost, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let mut cpu = [0.0; 4];
        for k in 0..runs.len() {
            let i = (round + k) % runs.len();
            let (bench, otlp) = runs[i];
            cpu[i] = run(bench, otlp)?.0;
        }
        let (a, b) = (cpu[1] - cpu[0], cpu[3] - cpu[2]);
        eprintln!(
            "round {}: OTLP on − off {a:+.0} ns (this build), {b:+.0} ns (other) a connection",
            round + 1
        );
        this_cost.push(a);
        that_cost.push(b);
        diff.push(a - b);
    }
    let (lo, hi) = range(&diff);
    println!(
        "OTLP on − off, the record path's own CPU per connection ({rounds} interleaved rounds, medians): this build {:+.0} ns, other {:+.0} ns; this − other {:+.0} ns ({lo:+.0}…{hi:+.0}, {})",
        median(this_cost),
        median(that_cost),
        median(diff.clone()),
        split(&diff),
    );
    Ok(())
}
