//! The parameters for other readers than a program: CSV (a row per server × class ×
//! stage, for spreadsheets) and a table for people, both from the `hstrace.parameters/v1`
//! document.

use super::v1::Parameters;

/// One row per server × class × stage, the class's numbers repeated on each row.
pub fn csv(p: &Parameters) -> String {
    let mut w = csv::Writer::from_writer(Vec::new());
    let header = [
        "window_end",
        "window_seconds",
        "server",
        "connections",
        "failed",
        "hit_ratio",
        "resumption_rate",
        "class",
        "share",
        "class_count",
        "rate_per_s",
        "stage",
        "stage_class",
        "count",
        "mean_s",
        "p50_s",
        "p90_s",
        "p99_s",
        "cpu_mean_s",
    ];
    let _ = w.write_record(header);
    let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
    let (end, seconds) = p
        .window
        .as_ref()
        .map_or((String::new(), String::new()), |w| {
            (w.end.clone(), w.seconds.to_string())
        });
    for s in &p.servers {
        for (class, c) in s.classes.iter() {
            for (stage, st) in &c.stages.0 {
                let _ = w.write_record([
                    end.clone(),
                    seconds.clone(),
                    s.server.clone(),
                    s.connections.to_string(),
                    s.failed.to_string(),
                    opt(s.cache.hit_ratio),
                    opt(s.cache.resumption_rate),
                    class.name().into(),
                    c.share.to_string(),
                    c.count.to_string(),
                    c.rate_per_s.to_string(),
                    stage.clone(),
                    st.class.name().into(),
                    st.count.to_string(),
                    st.mean_s.to_string(),
                    st.p50_s.to_string(),
                    st.p90_s.to_string(),
                    st.p99_s.to_string(),
                    opt(st.cpu_mean_s),
                ]);
            }
        }
    }
    String::from_utf8(w.into_inner().unwrap_or_default()).expect("CSV is UTF-8")
}

/// The stage table for people (the layout of Lin, Wong and Kou's Figs. 4–7): per server
/// and class, each stage's class, count and times in ms.
pub fn table(p: &Parameters) -> String {
    let mut s = match &p.window {
        Some(w) => format!("window {} .. {} ({:.1} s)\n", w.start, w.end, w.seconds),
        None => String::new(),
    };
    if let Some(h) = &p.host {
        s.push_str(&format!("host: {} CPUs", h.cpus));
        if let Some(c) = h.server_cpus {
            s.push_str(&format!(", the servers may use {c}"));
        }
        if let Some(o) = h.other_cpus {
            s.push_str(&format!(", other work {o:.2} CPUs"));
        }
        s.push('\n');
        match (&h.cold_start, h.cold_start_absent) {
            (Some(c), _) => s.push_str(&format!("cold start: {}\n", c.words())),
            (None, Some(why)) => s.push_str(&format!("cold start: {}\n", why.words())),
            (None, None) => {}
        }
    }
    let ms = |v: f64| format!("{:.3}", v * 1e3);
    for sv in &p.servers {
        s.push_str(&format!(
            "\n{}: {} connections, {} failed; resumption offered {}, accepted {} (hit ratio {}, resumption rate {})\n",
            sv.server,
            sv.connections,
            sv.failed,
            sv.cache.offered,
            sv.cache.accepted,
            sv.cache.hit_ratio.map_or("-".into(), |r| format!("{r:.2}")),
            sv.cache.resumption_rate.map_or("-".into(), |r| format!("{r:.2}")),
        ));
        for (class, c) in sv.classes.iter().filter(|(_, c)| c.count > 0) {
            s.push_str(&format!(
                "  {} ({} connections, share {:.2}, {:.2}/s)\n    {:<22} {:<8} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
                class.name(),
                c.count,
                c.share,
                c.rate_per_s,
                "stage", "class", "count", "mean ms", "p50 ms", "p90 ms", "p99 ms", "cpu ms"
            ));
            for (stage, st) in &c.stages.0 {
                s.push_str(&format!(
                    "    {:<22} {:<8} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}\n",
                    stage,
                    st.class.name(),
                    st.count,
                    ms(st.mean_s),
                    ms(st.p50_s),
                    ms(st.p90_s),
                    ms(st.p99_s),
                    st.cpu_mean_s.map_or("-".into(), ms),
                ));
            }
            s.push_str(&format!(
                "    demand: service {} ms, queue {} ms, delay {} ms\n",
                ms(c.demand_s.service),
                ms(c.demand_s.queue),
                ms(c.demand_s.delay)
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        cold_start::{ColdRun, ColdStart, ColdWork},
        params::v1::Host,
    };

    /// The table's head says what the host had: its CPUs, the servers', the other work
    /// and the cold start, each only when measured.
    #[test]
    fn the_table_says_what_the_host_had() {
        let text = include_str!("../../../examples/seed002-parameters.json");
        let mut p = Parameters::from_json(text, "seed").unwrap();
        p.host = Some(Host {
            cpus: 2,
            server_cpus: None,
            other_cpus: None,
            cold_start: None,
            cold_start_absent: None,
        });
        let t = table(&p);
        assert!(t.contains("host: 2 CPUs\n"), "{t}");
        assert!(!t.contains("cold start"), "{t}");
        // in words, the mean (what the model takes), the median beside it in the document
        let run = |pause_s, us: f64| ColdRun {
            pause_s,
            cpu_s: 0.9 * us * 1e-6,
            runs: 100,
            cpu_mean_s: Some(us * 1e-6),
        };
        p.host = Some(Host {
            cpus: 2,
            server_cpus: Some(1),
            other_cpus: Some(0.25),
            cold_start: Some(ColdStart {
                work: "SHA-256".into(),
                cpu: 1,
                runs: vec![run(0.0, 14.0), run(0.2, 69.4)],
                handshake: Some(ColdWork {
                    work: "X25519".into(),
                    runs: vec![run(0.0, 131.2), run(0.2, 331.2)],
                }),
            }),
            cold_start_absent: None,
        });
        let t = table(&p);
        assert!(
            t.contains("host: 2 CPUs, the servers may use 1, other work 0.25 CPUs\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "cold start: SHA-256 cost CPU 1: 14.0 µs back to back, 69.4 µs after 200.0 ms; X25519: 131.2 µs back to back, 331.2 µs after 200.0 ms\n"
            ),
            "{t}"
        );
    }
}
