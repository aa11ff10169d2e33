//! `--plot FILE.svg`: mean response time against users, a line per class (and the mix as
//! `all`) for each curve, with measured points (`--measured FILE`) as circles. SVG only
//! (plotters without default features: no font libraries).
//!
//! The measured file is CSV with a header: `users,response_s` and optionally `class`
//! (`all`, `tls_full`, `tls_resumed` or `plain`; empty or absent: `all`); other columns are
//! ignored.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use plotters::prelude::*;

use super::report::Report;
use crate::stage::RequestClass;

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

/// A colour per line: the mix dark, each class its own hue, paler for later curves.
fn colour(class: Option<RequestClass>, curve: usize, curves: usize) -> RGBColor {
    let (r, g, b) = match class {
        None => (20, 20, 20),
        Some(RequestClass::TlsFull) => (200, 30, 30),
        Some(RequestClass::TlsResumed) => (20, 140, 40),
        Some(RequestClass::Plain) => (30, 70, 200),
    };
    // later curves mix towards white, up to 60 %
    let t = if curves > 1 {
        0.6 * curve as f64 / (curves - 1) as f64
    } else {
        0.0
    };
    let pale = |v: u8| (f64::from(v) + (255.0 - f64::from(v)) * t) as u8;
    RGBColor(pale(r), pale(g), pale(b))
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

/// Draw the report (and the measured points) to `path` as SVG.
pub fn draw(report: &Report, measured: &[Measured], path: &Path) -> Result<()> {
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
    let mut x_max = 1.0_f64;
    let mut y_max = 0.0_f64;
    for curve in &report.curves {
        for (p, _) in &curve.points {
            x_max = x_max.max(f64::from(p.users));
            for &class in &lines {
                y_max = y_max.max(at(p, class) * 1e3);
            }
        }
    }
    for m in measured {
        x_max = x_max.max(f64::from(m.users));
        y_max = y_max.max(m.response_s * 1e3);
    }
    let y_max = if y_max > 0.0 { y_max * 1.05 } else { 1.0 };
    let draw_err =
        |e: &dyn std::fmt::Display| anyhow!("cannot draw --plot {}: {e}", path.display());
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "{}: mean response time (think time {}; {})",
                report.server,
                report.knobs.think_time(),
                report.knobs.web_server()
            ),
            ("sans-serif", 18),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max * 1.02, 0.0..y_max)
        .map_err(|e| draw_err(&e))?;
    chart
        .configure_mesh()
        .x_desc("users N")
        .y_desc("mean response time (ms)")
        .draw()
        .map_err(|e| draw_err(&e))?;
    let curves = report.curves.len();
    for (i, curve) in report.curves.iter().enumerate() {
        for &class in &lines {
            let c = colour(class, i, curves);
            let label = match curve.secure_fraction {
                Some(p) => format!("p = {p}: {}", name(class)),
                None => name(class).to_owned(),
            };
            let width = if class.is_none() { 3 } else { 2 };
            chart
                .draw_series(LineSeries::new(
                    curve
                        .points
                        .iter()
                        .map(|(p, _)| (f64::from(p.users), at(p, class) * 1e3)),
                    c.stroke_width(width),
                ))
                .map_err(|e| draw_err(&e))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(width))
                });
        }
    }
    for class in std::iter::once(None).chain(RequestClass::ALL.map(Some)) {
        let points: Vec<&Measured> = measured.iter().filter(|m| m.class == class).collect();
        if points.is_empty() {
            continue;
        }
        let c = colour(class, 0, 1);
        chart
            .draw_series(points.iter().map(|m| {
                Circle::new(
                    (f64::from(m.users), m.response_s * 1e3),
                    5,
                    c.stroke_width(2),
                )
            }))
            .map_err(|e| draw_err(&e))?
            .label(format!("measured: {}", name(class)))
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| draw_err(&e))?;
    root.present().map_err(|e| draw_err(&e))?;
    Ok(())
}
