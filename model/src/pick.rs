//! How the web server shares its CPUs when the command line does not say: from the
//! architecture the parameters measured (`params::architecture`). An event loop (nginx,
//! HAProxy) is its workers' loops, simulated, one per CPU at most; processes or threads
//! per connection are processor sharing on the host's CPUs; what cannot be told is seed
//! 002's one shared processor. `--discipline` and `--servers`, when given, always win.

use super::{
    input::ServerInput,
    knobs::{DisciplineFrom, Knobs, MAX_SERVERS},
    network::Discipline,
};
use crate::params::v1::ArchitectureKind;

/// What the measurement says: a discipline, its servers, and why, in words.
struct Suggestion {
    discipline: Discipline,
    servers: u32,
    because: String,
}

fn plural(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What the server's measured architecture suggests (None: nothing to go by), and why.
fn suggest(server: &ServerInput) -> (Option<Suggestion>, String) {
    let name = &server.server;
    let Some(a) = server.architecture else {
        let why = match server.from_prometheus {
            true => format!("Prometheus carries no architecture of {name}"),
            false => format!("the parameters do not say how {name} serves (written before hstrace measured it, or by hand)"),
        };
        return (None, why);
    };
    // the CPUs its processes may run on, where fewer than the host's (pinned)
    let cpus = server
        .server_cpus
        .or(server.cpus)
        .map(|c| c.min(server.cpus.unwrap_or(c)).min(MAX_SERVERS));
    let cpus_said = |c: u32| match server.cpus {
        Some(h) if c < h => format!(
            "the {} it may run on (of the host's {h})",
            plural(c, "CPU", "CPUs")
        ),
        _ => format!("the host's {}", plural(c, "CPU", "CPUs")),
    };
    let processes = plural(a.processes, "process", "processes");
    let on_cpus = |what: &str| match cpus {
        Some(c) => (c, format!("{what} on {}", cpus_said(c))),
        None => (
            1,
            format!("{what} on 1 processor (the host's CPUs were not measured)"),
        ),
    };
    let (discipline, servers, because) = match a.kind {
        ArchitectureKind::EventLoop => {
            let workers = a.processes.max(1);
            let servers = cpus.map_or(workers, |c| workers.min(c));
            let capped = if servers < workers {
                format!(", capped at {}", cpus_said(servers))
            } else {
                String::new()
            };
            (
                Discipline::EventLoopSim,
                servers,
                format!(
                    "{name} is an event loop ({} {}, up to {} at once in one){capped}",
                    a.processes,
                    if a.processes == 1 {
                        "single-threaded process"
                    } else {
                        "single-threaded processes"
                    },
                    plural(a.most_at_once, "connection", "connections"),
                ),
            )
        }
        ArchitectureKind::ProcessPerConnection => {
            // measured (docs/model-validation.md, Apache prefork): the kernel runs each
            // child's flight of a few milliseconds mostly to completion on its CPU, a short
            // request waiting behind a whole signature as in an event loop; processor
            // sharing predicted 17-23 % too little from 40 % busy, the simulated loop
            // within 15 % at every point
            let (servers, on) = on_cpus("simulated, each CPU running a flight to completion,");
            (
                Discipline::EventLoopSim,
                servers,
                format!(
                    "{name} serves one connection per process ({processes}, never two connections at once in one): {on}"
                ),
            )
        }
        ArchitectureKind::Threads => {
            let (servers, on) = on_cpus("processor sharing");
            let threads = a.threads.map_or(String::new(), |t| {
                format!(", up to {}", plural(t, "thread", "threads"))
            });
            (
                Discipline::ProcessorSharing,
                servers,
                format!("{name} serves with threads ({processes}{threads}): {on}"),
            )
        }
        ArchitectureKind::Unknown => {
            return (
                None,
                format!(
                "the window cannot tell how {name} serves ({processes}, up to {} at once in one)",
                plural(a.most_at_once, "connection", "connections")
            ),
            )
        }
    };
    (
        Some(Suggestion {
            discipline,
            servers: servers.max(1),
            because,
        }),
        String::new(),
    )
}

/// The knobs with the discipline and servers picked: each given one as given; the rest
/// from the measured architecture, or seed 002's processor sharing on one processor.
/// `because` says which and why, in one line.
pub fn pick(knobs: &Knobs, server: &ServerInput) -> Knobs {
    let (suggestion, none) = suggest(server);
    let mut k = knobs.clone();
    let flags = |k: &Knobs| {
        let mut f = format!("--discipline {}", k.discipline.flag());
        if k.discipline != Discipline::EventLoop {
            f.push_str(&format!(" --servers {}", k.servers));
        }
        f
    };
    match (&suggestion, knobs.discipline_given) {
        (_, true) => {
            k.discipline_from = DisciplineFrom::Given;
            if !k.servers_given {
                // the measured servers where they are of the discipline given
                k.servers = match &suggestion {
                    Some(s) if s.discipline == k.discipline => s.servers,
                    _ => 1,
                };
            }
            let measured = suggestion
                .as_ref()
                .map_or(none.clone(), |s| format!("measured: {}", s.because));
            k.because = format!("{} as given ({measured})", flags(&k));
        }
        (Some(s), false) => {
            k.discipline_from = DisciplineFrom::Measured;
            k.discipline = s.discipline;
            if !k.servers_given {
                k.servers = s.servers;
            }
            k.because = format!("{}: {}", s.because, flags(&k));
        }
        (None, false) => {
            k.discipline_from = DisciplineFrom::Default;
            k.discipline = Discipline::ProcessorSharing;
            if !k.servers_given {
                k.servers = 1;
            }
            k.because = format!("{none}: {} (seed 002's)", flags(&k));
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{input::seed_parameters as seed, params::v1::Architecture};
    use ArchitectureKind::{EventLoop as Loop, ProcessPerConnection, Threads, Unknown};
    use Discipline::{EventLoop, EventLoopSim, ProcessorSharing};

    fn measured(
        kind: ArchitectureKind,
        processes: u32,
        most: u32,
        threads: Option<u32>,
    ) -> ServerInput {
        ServerInput {
            server: "s:443".into(),
            architecture: Some(Architecture {
                kind,
                processes,
                most_at_once: most,
                threads,
            }),
            cpus: Some(2),
            ..seed()
        }
    }

    fn picked(k: &Knobs, s: &ServerInput) -> (Discipline, u32, DisciplineFrom, String) {
        let p = pick(k, s);
        (p.discipline, p.servers, p.discipline_from, p.because)
    }

    #[test]
    fn from_the_measured_architecture() {
        let k = Knobs::default();
        let (d, c, from, why) = picked(&k, &measured(Loop, 2, 14, Some(1)));
        assert_eq!((d, c, from), (EventLoopSim, 2, DisciplineFrom::Measured));
        assert_eq!(why, "s:443 is an event loop (2 single-threaded processes, up to 14 connections at once in one): --discipline event-loop-sim --servers 2");
        // more workers than CPUs: one loop per CPU
        let (d, c, _, why) = picked(&k, &measured(Loop, 8, 30, Some(1)));
        assert_eq!((d, c), (EventLoopSim, 2));
        assert!(why.contains("capped at the host's 2 CPUs"), "{why}");
        let (d, c, from, why) = picked(&k, &measured(ProcessPerConnection, 4, 1, Some(1)));
        assert_eq!((d, c, from), (EventLoopSim, 2, DisciplineFrom::Measured));
        assert!(
            why.contains("one connection per process (4 processes"),
            "{why}"
        );
        assert!(
            why.ends_with("--discipline event-loop-sim --servers 2"),
            "{why}"
        );
        let (d, c, _, why) = picked(&k, &measured(Threads, 1, 20, Some(25)));
        assert_eq!((d, c), (ProcessorSharing, 2));
        assert!(
            why.contains("threads (1 process, up to 25 threads)"),
            "{why}"
        );
        // the host's CPUs unknown: one processor, said so
        let s = ServerInput {
            cpus: None,
            ..measured(Threads, 1, 20, Some(25))
        };
        let (_, c, _, why) = picked(&k, &s);
        assert_eq!(c, 1);
        assert!(why.contains("CPUs were not measured"), "{why}");
        // cannot tell, or nothing measured: seed 002's one processor, as before
        for s in [measured(Unknown, 1, 1, Some(1)), seed()] {
            let (d, c, from, why) = picked(&k, &s);
            assert_eq!((d, c, from), (ProcessorSharing, 1, DisciplineFrom::Default));
            assert!(
                why.ends_with("--discipline processor-sharing --servers 1 (seed 002's)"),
                "{why}"
            );
        }
        let prom = ServerInput {
            from_prometheus: true,
            ..seed()
        };
        assert!(picked(&k, &prom)
            .3
            .starts_with("Prometheus carries no architecture"));
    }

    #[test]
    fn what_is_given_wins() {
        let nginx = measured(Loop, 2, 14, Some(1));
        let given = |d: Option<Discipline>, c: Option<u32>| Knobs {
            discipline: d.unwrap_or(ProcessorSharing),
            discipline_given: d.is_some(),
            servers: c.unwrap_or(1),
            servers_given: c.is_some(),
            ..Knobs::default()
        };
        // --servers alone: the measured discipline with those servers
        let (d, c, from, _) = picked(&given(None, Some(1)), &nginx);
        assert_eq!((d, c, from), (EventLoopSim, 1, DisciplineFrom::Measured));
        // --discipline alone: the measured servers where it is the measured discipline
        let (d, c, from, why) = picked(&given(Some(EventLoopSim), None), &nginx);
        assert_eq!((d, c, from), (EventLoopSim, 2, DisciplineFrom::Given));
        assert!(why.starts_with("--discipline event-loop-sim --servers 2 as given (measured: s:443 is an event loop"), "{why}");
        let (d, c, _, why) = picked(&given(Some(ProcessorSharing), None), &nginx);
        assert_eq!((d, c), (ProcessorSharing, 1));
        assert!(
            why.starts_with("--discipline processor-sharing --servers 1 as given"),
            "{why}"
        );
        // the approximation models one loop
        let (d, c, _, why) = picked(&given(Some(EventLoop), None), &nginx);
        assert_eq!((d, c), (EventLoop, 1));
        assert!(why.starts_with("--discipline event-loop as given"), "{why}");
        // both
        let (d, c, from, _) = picked(&given(Some(ProcessorSharing), Some(7)), &nginx);
        assert_eq!((d, c, from), (ProcessorSharing, 7, DisciplineFrom::Given));
    }
}
