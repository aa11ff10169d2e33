//! `--plot FILE.svg`: mean response time against users, a line per class (and the mix as
//! `all`) for each curve, with measured points (`--measured FILE`) as hollow circles:
//! a line chart of `svg`, the drawing layer `hstrace report` draws with, in its look
//! (a colour per class, a dash per curve).
//!
//! The measured file is CSV with a header: `users,response_s` and optionally `class`
//! (`all`, `tls_full`, `tls_resumed` or `plain`; empty or absent: `all`); other columns are
//! ignored.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use super::report::Report;
use crate::{
    stage::RequestClass,
    svg::{self, Draw, LineChart, Look, Series, MAX_SERIES},
};

/// One measured mean response time.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub users: u32,
    pub response_s: f64,
    /// None: the whole mix
    pub class: Option<RequestClass>,
}

/// The measured points in `path` (format above).
pub fn read_measured(path: &Path) -> Result<Vec<Measured>> {
    let shown = path.display();
    let mut r = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_path(path)
        .with_context(|| format!("cannot read --measured {shown}"))?;
    let header = r
        .headers()
        .with_context(|| format!("--measured {shown} has no CSV header"))?
        .clone();
    let col = |name: &str| header.iter().position(|h| h == name);
    let (Some(users), Some(response)) = (col("users"), col("response_s")) else {
        bail!("--measured {shown} needs a CSV header with users,response_s (and optionally class)");
    };
    let class = col("class");
    let mut out = Vec::new();
    for (line, row) in r.records().enumerate() {
        let row = row.with_context(|| format!("--measured {shown}: row {}", line + 2))?;
        let bad = |what: &str| anyhow!("--measured {shown} row {}: {what}", line + 2);
        let users: u32 = row
            .get(users)
            .and_then(|v| v.parse().ok())
            .filter(|&n| n > 0)
            .ok_or_else(|| bad("users is not a positive whole number"))?;
        let response_s: f64 = row
            .get(response)
            .and_then(|v| v.parse().ok())
            .filter(|v: &f64| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| bad("response_s is not a number of seconds"))?;
        let class = match class.and_then(|i| row.get(i)).unwrap_or("") {
            "" | "all" => None,
            name => Some(
                RequestClass::ALL
                    .into_iter()
                    .find(|c| c.name() == name)
                    .ok_or_else(|| {
                        bad(&format!(
                            "class {name:?} is not all, tls_full, tls_resumed or plain"
                        ))
                    })?,
            ),
        };
        out.push(Measured {
            users,
            response_s,
            class,
        });
    }
    Ok(out)
}

/// A class's colour in the drawing layer's palette: the mix black, full handshakes
/// vermillion, resumed green, plain blue (the old plot's hues, in Okabe–Ito).
fn colour(class: Option<RequestClass>) -> usize {
    match class {
        None => 6,
        Some(RequestClass::TlsFull) => 4,
        Some(RequestClass::TlsResumed) => 2,
        Some(RequestClass::Plain) => 0,
    }
}

fn name(class: Option<RequestClass>) -> &'static str {
    class.map_or("all", RequestClass::name)
}

/// Refuse, before any work, a `--plot` path whose directory does not exist (drawing would
/// find out only at the end, in the SVG backend's words).
pub fn check_path(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        bail!(
            "cannot write --plot {}: there is no directory {} (create it, or give another path)",
            path.display(),
            dir.display()
        );
    }
    Ok(())
}

/// The chart of the report (and the measured points): per curve a line per class, in
/// the class's colour and the curve's dash; the measured points of each class alone,
/// hollow circles in its colour. When more lines than the chart draws would be needed,
/// the last curves are left out, and both the chart and stderr say so.
pub fn chart(report: &Report, measured: &[Measured]) -> LineChart {
    let lines: Vec<Option<RequestClass>> = std::iter::once(None)
        .chain(
            RequestClass::ALL
                .into_iter()
                .filter(|c| report.measured[c.index()])
                .map(Some),
        )
        .collect();
    let at = |p: &super::network::Solution, class: Option<RequestClass>| match class {
        None => p.response_s,
        Some(c) => p.class_response_s[c.index()],
    };
    let points: Vec<Series> = std::iter::once(None)
        .chain(RequestClass::ALL.map(Some))
        .filter_map(|class| {
            let pts: Vec<(f64, f64)> = measured
                .iter()
                .filter(|m| m.class == class)
                .map(|m| (f64::from(m.users), m.response_s * 1e3))
                .collect();
            (!pts.is_empty()).then(|| Series {
                label: format!("measured: {}", name(class)),
                points: pts,
                look: Some(Look {
                    colour: colour(class),
                    pattern: 0,
                }),
                draw: Draw::Points,
            })
        })
        .collect();
    let fit = (MAX_SERIES - points.len()) / lines.len();
    let mut notes = vec![format!(
        "think time {}; {}",
        report.knobs.think_time(),
        report.knobs.web_server()
    )];
    if report.curves.len() > fit {
        let left_out = format!(
            "{} of {} curves drawn (at most {MAX_SERIES} series: the table has every one)",
            fit,
            report.curves.len()
        );
        eprintln!("hstrace: --plot: {left_out}");
        notes.push(left_out);
    }
    let mut series: Vec<Series> = Vec::with_capacity(MAX_SERIES);
    for (i, curve) in report.curves.iter().take(fit).enumerate() {
        for &class in &lines {
            series.push(Series {
                label: match curve.secure_fraction {
                    Some(p) => format!("p = {p}: {}", name(class)),
                    None => name(class).to_owned(),
                },
                points: curve
                    .points
                    .iter()
                    .map(|(p, _)| (f64::from(p.users), at(p, class) * 1e3))
                    .collect(),
                look: Some(Look {
                    colour: colour(class),
                    pattern: i,
                }),
                draw: Draw::Line,
            });
        }
    }
    series.extend(points);
    LineChart {
        title: format!("{}: mean response time against users", report.server),
        x_label: "users N".into(),
        y_label: "mean response time (ms)".into(),
        series,
        plot_height: Some(360.0),
        note: Some(notes.join("; ")),
        ..Default::default()
    }
}

/// Draw the report (and the measured points) to `path` as SVG.
pub fn draw(report: &Report, measured: &[Measured], path: &Path) -> Result<()> {
    let picture = svg::line_chart("plot", &chart(report, measured));
    std::fs::write(path, picture + "\n")
        .with_context(|| format!("cannot write --plot {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{build, input::seed_parameters as seed, knobs::Knobs};

    /// Seed 002's Fig. 8 with measured points: a line per curve and class (the class's
    /// colour, the curve's dash), then the points alone; and, past what the chart draws,
    /// the last curves left out, said under it.
    #[test]
    fn fig_8_with_measured_points() {
        let fig8 = |fractions: &[f64], users: &[u32]| {
            build(
                &seed(),
                "seed".into(),
                &Knobs::default(),
                fractions,
                Some(users),
            )
            .unwrap()
        };
        let r = fig8(&[0.1, 0.2, 0.3], &[1, 100, 200]);
        let measured = [
            Measured {
                users: 100,
                response_s: 0.007,
                class: None,
            },
            Measured {
                users: 100,
                response_s: 0.02,
                class: Some(RequestClass::TlsFull),
            },
        ];
        let c = chart(&r, &measured);
        let labels: Vec<&str> = c.series.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels.len(), 3 * 3 + 2, "{labels:?}");
        assert_eq!(labels[0], "p = 0.1: all");
        assert_eq!(labels[8], "p = 0.3: plain");
        assert_eq!(&labels[9..], ["measured: all", "measured: tls_full"]);
        let look = |i: usize| c.series[i].look.unwrap();
        assert_eq!(look(0).colour, look(3).colour, "a class one colour");
        assert_ne!(look(0).pattern, look(3).pattern, "a curve one dash");
        assert_eq!(look(9).colour, look(0).colour);
        assert_eq!(c.series[9].draw, Draw::Points);
        assert_eq!(c.series[10].points, [(100.0, 20.0)]);
        assert_eq!(c.series[1].points.len(), 3);
        let note = c.note.as_deref().unwrap();
        assert!(note.starts_with("think time 2 s; "), "{note}");
        let svg = svg::line_chart("t", &c);
        assert_eq!(svg.matches("<polyline").count(), 9);

        let many = fig8(&[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], &[1, 100]);
        let c = chart(&many, &measured);
        assert_eq!(c.series.len(), 3 * 4 + 2);
        assert!(
            c.note.as_deref().unwrap().contains("4 of 6 curves drawn"),
            "{:?}",
            c.note
        );
    }
}
