//! What the OTLP push adds to the record path (`cargo xtask bench otlp`): serve's sink fed
//! synthetic records (`hstrace-bench pipeline --serve`, real captured hellos) with the
//! OTLP push off and on, in interleaved pairs whose order swaps each pair. The push points
//! at a closed port: every export fails, which costs the exporter, never the record path.

use anyhow::Result;

use super::{hstrace_numbers, in_turn, median, range, split, tool};
use crate::util::build_bench;

/// Connections per run: 4 records each, under the OTLP side's queue (64 batches of 256
/// records), so that no record is dropped and every one is counted into the SDK.
const RECORDS: &str = "60000";
/// Where the push goes: the discard port, closed on these machines.
const NOWHERE: &str = "http://127.0.0.1:9";

/// `pairs` interleaved pairs; prints the record path thread's CPU per connection and the
/// wall time per connection, off and on, and their differences.
pub fn otlp_cost(pairs: usize) -> Result<()> {
    let bench = tool(&build_bench()?);
    // one run: (the record path thread's CPU, wall time) per connection, in ns
    let run = |otlp: bool| -> Result<(f64, f64)> {
        let mut args = vec!["pipeline", "--serve", "--records", RECORDS, "--per-conn"];
        if otlp {
            args.extend(["--otlp", NOWHERE]);
        }
        let [cpu, wall] = hstrace_numbers(&bench, &args)?;
        Ok((cpu, wall))
    };
    let (mut cpu_diff, mut wall_diff) = (Vec::new(), Vec::new());
    let (mut cpu_off, mut wall_off) = (Vec::new(), Vec::new());
    for pair in 0..pairs {
        let (off, on) = in_turn(pair, || run(false), || run(true))?;
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
