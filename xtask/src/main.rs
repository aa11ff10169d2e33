//! `cargo xtask <job>`: the jobs cargo can't do alone, run as root on a Debian test
//! machine. This file only defines the command line (clap) and hands each job to its file;
//! `cargo xtask help <job>` says what a job does and takes.

use std::path::PathBuf;

use anyhow::{ensure, Result};
use clap::{Args, Parser, Subcommand};

mod bench;
mod demo;
mod fuzz;
mod image;
mod nginx;
mod package;
mod report_screenshot;
mod setup;
mod soak;
mod template;
mod test;
mod util;
mod validate;
mod vm;
mod vmlinux;

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "hstrace's jobs beside cargo (as root, on a Debian test machine)"
)]
struct Cli {
    #[command(subcommand)]
    job: Job,
}

#[derive(Subcommand)]
enum Job {
    /// Install what building hstrace needs (apt), nothing else
    Setup,
    /// Build, then trace TRACE_ARGS (e.g. --pid 1234) or, with none, a throwaway TLS nginx
    /// on loopback driven by real clients (installs nginx, openssl, curl, prometheus: a test
    /// machine)
    Demo {
        /// The demo nginx with `hstrace serve` and a real Prometheus, until Ctrl-C
        #[arg(long, conflicts_with = "trace_args")]
        serve: bool,
        /// `hstrace trace`'s options for a server of your own (--pid, --comm, --port, ...)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        trace_args: Vec<String>,
    },
    /// Setup, build, package, image, then every test, one at a time (unit, verifier,
    /// integration, the root ones included; installs the servers and clients they drive)
    Test {
        /// cargo test's arguments (e.g. --test accuracy, a test's name), then after `--`
        /// the test binaries' own
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        cargo_test_args: Vec<String>,
    },
    /// docs/report.png: the top of an `hstrace report` page of the demo nginx under the
    /// demo's client mix, drawn by headless Chromium (installs nginx, openssl, curl,
    /// chromium: a test machine)
    ReportScreenshot,
    /// The Debian packages in target/package/
    Package,
    /// The container image localhost/hstrace:<version> (buildah), and its OCI archive in
    /// target/package/
    Image,
    /// Regenerate ebpf/vmlinux/<arch>/vmlinux.h from this kernel
    Vmlinux,
    /// With/without hstrace side by side: docs/benchmarks.md
    Bench(BenchArgs),
    /// The model's predictions against loaded servers: docs/model-validation.md
    ValidateModel {
        /// A short run, printed, nothing written
        #[arg(long)]
        quick: bool,
        /// Only these parts (nginx-1, nginx-2, apache-prefork, whatif, whatif-group),
        /// printed, nothing written; whatif-group alone writes its section of
        /// docs/model-validation.md
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
    },
    /// Mutated real ClientHellos to nginx under `hstrace trace`, every connection accounted
    /// for
    FuzzWire {
        /// Cases (one connection each)
        #[arg(long, default_value_t = 20_000)]
        cases: usize,
        /// Which cases: the same seed sends the same bytes
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// The userspace parsers under libFuzzer (fuzz/)
    FuzzParsers {
        /// Executions
        #[arg(long, default_value_t = 10_000_000)]
        runs: u64,
    },
    /// `hstrace serve` under mixed load: the Soak section of docs/benchmarks.md
    Soak {
        /// How long, up to a day
        #[arg(long, default_value_t = 10.0)]
        minutes: f64,
    },
    /// The root tests inside Debian's own kernels (5.10, 6.1, 6.12, 7.x) under qemu, over
    /// this machine's root filesystem: a table per kernel and target/vm/results.json
    /// (installs qemu, fetches the kernels and virtme-ng into target/vm/)
    VmTest {
        /// Only these kernels
        #[arg(long = "kernel", value_name = "LABEL", value_delimiter = ',',
              value_parser = clap::builder::PossibleValuesParser::new(vm::KERNELS.iter().map(|k| k.0)))]
        kernels: Vec<String>,
        /// How qemu runs them: auto tries KVM once and falls back to TCG
        #[arg(long, value_enum, default_value = "auto")]
        mode: vm::Mode,
        /// Every kernel, the cost test on this machine too, then rewrite docs/kernels.md's
        /// generated parts (the hooks chosen, the cost per connection, the last run)
        #[arg(long, conflicts_with = "kernels")]
        docs: bool,
        /// After `--`, the test binaries' own arguments: filters (replacing vm.rs's test
        /// names), --nocapture, ...
        #[arg(last = true)]
        extra: Vec<String>,
    },
    /// The bench's helper: open COUNT connections to 127.0.0.1 over PORTS, say "held", keep
    /// them open until stdin closes
    #[command(hide = true)]
    HoldConnections {
        count: usize,
        #[arg(required = true)]
        ports: Vec<u16>,
    },
}

/// `cargo xtask bench`: the whole page, or one of its parts.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct BenchArgs {
    #[command(subcommand)]
    part: Option<BenchPart>,
    /// Only the "Cost per operation" section, written in place
    #[arg(long, group = "mode")]
    cost: bool,
    /// One workload's CPU on/off row and the split of the hooks' cost, printed (--workload,
    /// default 2)
    #[arg(long, group = "mode")]
    cpu: bool,
    /// Where the BPF programs' time goes (perf), by program and by source line
    #[arg(long, group = "mode")]
    profile: bool,
    /// This build's BPF time per operation against OTHER_HSTRACE's, in interleaved pairs
    /// (--workload, default 0)
    #[arg(long, group = "mode", value_name = "OTHER_HSTRACE")]
    ab: Option<PathBuf>,
    /// The workload of --cpu, --profile or --ab, by number (0: new TLS 1.2 handshakes, ...)
    #[arg(long, value_name = "N")]
    workload: Option<usize>,
    /// Seconds --profile records
    #[arg(long, value_name = "N", default_value_t = 40, requires = "profile")]
    seconds: u32,
    /// Pairs of --ab
    #[arg(long, value_name = "N", default_value_t = 4, requires = "ab")]
    pairs: usize,
    /// The hstrace mode --ab runs both builds in: default (trace), wire-only (trace
    /// --uprobes none), uprobes-all, serve
    #[arg(
        long,
        value_name = "MODE",
        default_value = "wire-only",
        requires = "ab"
    )]
    ab_mode: String,
}

#[derive(Subcommand)]
enum BenchPart {
    /// Only the daemon's RSS with 65,536 live connections, printed
    ServeMemory,
    /// Only what the OTLP push adds to serve's record path per connection (its own
    /// thread's CPU, and wall time), in interleaved pairs, printed
    Otlp {
        /// Pairs (with --ab: rounds of both builds off and on; 50 take two minutes)
        #[arg(long, value_name = "N", default_value_t = 7)]
        pairs: usize,
        /// This build's push cost against OTHER_HSTRACE's (its hstrace-bench beside it)
        #[arg(long, value_name = "OTHER_HSTRACE")]
        ab: Option<PathBuf>,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli.job) {
        eprintln!("xtask: {e:#}");
        std::process::exit(1);
    }
}

fn run(job: Job) -> Result<()> {
    match job {
        Job::Setup => setup::setup(),
        Job::Demo { serve, trace_args } => demo::demo(serve, &trace_args),
        Job::Test { cargo_test_args } => test::test(&cargo_test_args),
        Job::ReportScreenshot => report_screenshot::report_screenshot(),
        Job::Package => {
            setup::setup()?;
            package::package().map(drop)
        }
        Job::Image => {
            setup::setup()?;
            setup::install_missing(setup::IMAGE_PACKAGES)?;
            image::image(&package::package()?).map(drop)
        }
        Job::Vmlinux => vmlinux::vmlinux(),
        Job::Bench(b) => {
            ensure!(
                b.workload.is_none() || b.cpu || b.profile || b.ab.is_some(),
                "--workload picks the workload of --cpu, --profile or --ab"
            );
            let mode = if let Some(part) = b.part {
                return match part {
                    BenchPart::ServeMemory => bench::memory::serve_memory(),
                    BenchPart::Otlp { pairs, ab: None } => bench::otlp::otlp_cost(pairs),
                    BenchPart::Otlp {
                        pairs,
                        ab: Some(other),
                    } => bench::otlp::otlp_cost_ab(&other, pairs),
                };
            } else if b.profile {
                bench::Mode::Profile {
                    seconds: b.seconds,
                    workload: b.workload.unwrap_or(0),
                }
            } else if let Some(other) = b.ab {
                bench::Mode::Ab {
                    other,
                    workload: b.workload.unwrap_or(0),
                    pairs: b.pairs,
                    mode: b.ab_mode.replace('-', " "),
                }
            } else if b.cpu {
                bench::Mode::Cpu {
                    workload: b.workload.unwrap_or(2),
                }
            } else if b.cost {
                bench::Mode::Cost
            } else {
                bench::Mode::Full
            };
            bench::bench(mode)
        }
        Job::ValidateModel { quick, only } => validate::validate_model(quick, &only),
        Job::FuzzWire { cases, seed } => fuzz::fuzz_wire(cases, seed),
        Job::FuzzParsers { runs } => fuzz::fuzz_parsers(runs),
        Job::Soak { minutes } => soak::soak(minutes),
        Job::VmTest {
            kernels,
            mode,
            docs,
            extra,
        } => vm::vm_test(&kernels, mode, &extra, docs),
        Job::HoldConnections { count, ports } => bench::memory::hold_connections(count, &ports),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Job {
        let args = ["cargo xtask"].into_iter().chain(line.split_whitespace());
        Cli::try_parse_from(args)
            .unwrap_or_else(|e| panic!("cargo xtask {line}: {e}"))
            .job
    }

    /// The command lines README.md and docs/ show, as they are written.
    #[test]
    fn the_documented_command_lines_parse() {
        assert!(matches!(
            parse("demo --comm nginx"),
            Job::Demo { serve: false, trace_args } if trace_args == ["--comm", "nginx"]
        ));
        assert!(matches!(
            parse("demo --pid 1234 -v"),
            Job::Demo { serve: false, trace_args } if trace_args == ["--pid", "1234", "-v"]
        ));
        assert!(
            matches!(parse("demo --serve"), Job::Demo { serve: true, trace_args } if trace_args.is_empty())
        );
        assert!(
            matches!(parse("demo"), Job::Demo { serve: false, trace_args } if trace_args.is_empty())
        );
        assert!(matches!(
            parse("test --test servers six_kinds_through_the_syscall_hooks -- --nocapture"),
            Job::Test { cargo_test_args } if cargo_test_args
                == ["--test", "servers", "six_kinds_through_the_syscall_hooks", "--", "--nocapture"]
        ));
        assert!(
            matches!(parse("test"), Job::Test { cargo_test_args } if cargo_test_args.is_empty())
        );
        assert!(matches!(parse("bench"), Job::Bench(b) if !b.cost && b.part.is_none()));
        assert!(matches!(parse("bench --cost"), Job::Bench(b) if b.cost));
        assert!(
            matches!(parse("bench --cpu --workload 3"), Job::Bench(b) if b.cpu && b.workload == Some(3))
        );
        assert!(
            matches!(parse("bench --profile --seconds 10"), Job::Bench(b) if b.profile && b.seconds == 10)
        );
        assert!(
            matches!(parse("bench --profile --workload 2"), Job::Bench(b) if b.profile && b.workload == Some(2))
        );
        assert!(matches!(
            parse("bench --ab /tmp/other --workload 3 --pairs 6"),
            Job::Bench(b) if b.ab.is_some() && b.workload == Some(3) && b.pairs == 6 && b.ab_mode == "wire-only"
        ));
        assert!(matches!(
            parse("bench --ab /tmp/other --ab-mode serve"),
            Job::Bench(b) if b.ab.is_some() && b.ab_mode == "serve"
        ));
        assert!(matches!(parse("bench serve-memory"), Job::Bench(b) if b.part.is_some()));
        assert!(matches!(
            parse("bench otlp --pairs 3"),
            Job::Bench(b) if matches!(b.part, Some(BenchPart::Otlp { pairs: 3, ab: None }))
        ));
        assert!(matches!(
            parse("bench otlp --ab /tmp/other/hstrace --pairs 50"),
            Job::Bench(b) if matches!(&b.part, Some(BenchPart::Otlp { pairs: 50, ab: Some(p) }) if p == std::path::Path::new("/tmp/other/hstrace"))
        ));
        assert!(matches!(
            parse("hold-connections 10 18091 18092"),
            Job::HoldConnections { count: 10, ports } if ports == [18091, 18092]
        ));
        assert!(matches!(
            parse("validate-model --quick"),
            Job::ValidateModel { quick: true, ref only } if only.is_empty()
        ));
        assert!(matches!(
            parse("validate-model --only nginx-2,whatif"),
            Job::ValidateModel { quick: false, ref only } if only == &["nginx-2", "whatif"]
        ));
        assert!(matches!(
            parse("fuzz-wire --cases 20000"),
            Job::FuzzWire {
                cases: 20000,
                seed: 1
            }
        ));
        assert!(matches!(
            parse("fuzz-wire --seed 7"),
            Job::FuzzWire {
                cases: 20_000,
                seed: 7
            }
        ));
        assert!(matches!(
            parse("fuzz-parsers --runs 10000000"),
            Job::FuzzParsers { runs: 10_000_000 }
        ));
        assert!(matches!(parse("soak --minutes 10"), Job::Soak { minutes } if minutes == 10.0));
        assert!(matches!(
            parse("vm-test"),
            Job::VmTest { ref kernels, mode: vm::Mode::Auto, ref extra, .. } if kernels.is_empty() && extra.is_empty()
        ));
        assert!(matches!(
            parse("vm-test --kernel 6.1,7.x --mode tcg -- six_handshake --nocapture"),
            Job::VmTest { ref kernels, mode: vm::Mode::Tcg, ref extra, .. }
                if kernels == &["6.1", "7.x"] && extra == &["six_handshake", "--nocapture"]
        ));
        assert!(matches!(
            parse("vm-test --kernel 5.10 --kernel 6.12 --mode kvm"),
            Job::VmTest { ref kernels, mode: vm::Mode::Kvm, .. } if kernels == &["5.10", "6.12"]
        ));
        assert!(matches!(
            parse("vm-test --docs"),
            Job::VmTest { ref kernels, docs: true, .. } if kernels.is_empty()
        ));
        assert!(matches!(
            parse("vm-test --kernel 6.1 -- hook_runs_per_connection"),
            Job::VmTest { docs: false, ref extra, .. } if extra == &["hook_runs_per_connection"]
        ));
        for line in ["setup", "package", "image", "vmlinux", "report-screenshot"] {
            parse(line);
        }
        // a mode at a time, and their options only with them
        for wrong in [
            "bench --cost --cpu",
            "bench --seconds 10",
            "bench --pairs 3",
            "demo --serve --pid 1",
            "bench serve-memory --cost",
            "fuzz-wire --cases many",
            "vm-test --kernel 4.19",
            "vm-test --mode fast",
            "vm-test --docs --kernel 6.1",
        ] {
            let args = ["cargo xtask"].into_iter().chain(wrong.split_whitespace());
            assert!(Cli::try_parse_from(args).is_err(), "{wrong} parsed");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
