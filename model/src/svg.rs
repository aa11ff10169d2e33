//! hstrace's one drawing layer: the charts of `hstrace report` and `hstrace model --plot`,
//! hand-written SVG: pure functions from plain data to one self-contained `<svg>` element
//! each (no script, no font or file fetched, no reference outside the element), for an
//! HTML page that holds several of them and prints, or for a file of its own.
//!
//! What every builder does the same way:
//! * `id` prefixes the ids the chart defines (its fill patterns). It is reduced to
//!   `[A-Za-z0-9_-]`, starting with a letter, and must be unique in the page.
//! * Every text the caller gives is XML-escaped (`& < > " '`; characters XML forbids become
//!   U+FFFD); coordinates carry at most one decimal.
//! * Colours are Okabe–Ito: service #0072B2 (blue, solid), queue #E69F00 (orange, hatched),
//!   delay #BBBBBB (light grey), on-CPU a dark blue band: four different greys in print,
//!   and the queue's hatch tells it apart without colour. Lines differ by colour, dash
//!   pattern and point marker (a series may choose its own, e.g. a colour per request
//!   class and a dash per curve); bars by colour and fill pattern.
//! * Time axes read in ms, in µs when the whole range is under 1 ms (and in s past 100 s),
//!   with ticks at 1, 2, 5 × 10^k.
//! * A value that is negative, NaN or infinite counts as 0 (a marker or point whose
//!   position is not finite is left out); nothing non-finite reaches the output. Input
//!   with nothing to draw gives the frame and a centred "no data".
//! * Output is bounded: at most [`MAX_ROWS`] × [`MAX_SEGMENTS`] stages in a waterfall,
//!   [`MAX_BUCKETS`] bars in a distribution, [`MAX_SERIES`] lines of at most
//!   [`MAX_POINTS`] points, [`MAX_BARS`] bars; what is left out is said in a footnote.

use std::cmp::Ordering;
use std::fmt::{self, Write};

/// A waterfall draws at most this many rows…
pub const MAX_ROWS: usize = 16;
/// …of at most this many stages each.
pub const MAX_SEGMENTS: usize = 20;
/// A distribution draws at most this many bars (adjacent buckets are merged beyond).
pub const MAX_BUCKETS: usize = 100;
/// A line chart draws at most this many series (twice the palette: the second eight
/// take other dashes)…
pub const MAX_SERIES: usize = 16;
/// …each of at most this many points (evenly thinned beyond, first and last kept).
pub const MAX_POINTS: usize = 400;
/// A bar chart draws at most this many bars in all (groups are cut beyond).
pub const MAX_BARS: usize = 240;
/// A line's points get markers when it has at most this many.
const MAX_MARKED_POINTS: usize = 60;

const SERVICE: &str = "#0072B2";
const QUEUE: &str = "#E69F00";
const DELAY: &str = "#BBBBBB";
const CPU: &str = "#00304D";
const INK: &str = "#222222";
const MUTED: &str = "#555555";
const GRID: &str = "#DDDDDD";
const FRAME: &str = "#999999";

/// Okabe–Ito, ordered so that neighbours differ most (yellow, weak on white, last).
const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000", "#F0E442",
];
/// One dash pattern per series, so lines differ without colour.
const DASHES: [&str; 8] = [
    "", "6 3", "2 3", "8 3 2 3", "4 2 1 2", "10 4", "1 2", "6 2 2 2",
];

/// A stage's class, as the page colours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Service,
    Queue,
    Delay,
}

impl Class {
    /// The class's name as the parameters and metrics spell it.
    pub fn name(self) -> &'static str {
        match self {
            Class::Service => "service",
            Class::Queue => "queue",
            Class::Delay => "delay",
        }
    }

    /// The `fill` of this class in the chart whose id prefix is `pid`.
    fn fill(self, pid: &str) -> String {
        match self {
            Class::Service => SERVICE.to_string(),
            Class::Queue => format!("url(#{pid}-queue)"),
            Class::Delay => DELAY.to_string(),
        }
    }
}

impl From<crate::stage::StageClass> for Class {
    fn from(c: crate::stage::StageClass) -> Class {
        match c {
            crate::stage::StageClass::Service => Class::Service,
            crate::stage::StageClass::Queue => Class::Queue,
            crate::stage::StageClass::Delay => Class::Delay,
        }
    }
}

/// One stage of a waterfall row.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub stage: String,
    pub class: Class,
    pub mean_s: f64,
    pub p90_s: f64,
    /// on-CPU time of the server thread in this stage (service stages), mean
    pub cpu_s: Option<f64>,
    /// connections of the row that had this stage (its mean is over them)
    pub count: u64,
}

/// One kind of connection (e.g. "TLS 1.3 full"), its stages in wire order, and how many
/// connections it averages.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub label: String,
    pub connections: u64,
    pub segments: Vec<Segment>,
}

/// A latency distribution: `counts[i]` connections in `(edges_s[i-1], edges_s[i]]`, the
/// first bucket from 0. Edges must ascend; a bucket whose edge does not (or is not a
/// positive finite number) is merged into the next one. Counts past the last edge are
/// drawn as one overflow bucket "> last edge".
#[derive(Debug, Clone, PartialEq)]
pub struct Distribution {
    pub title: String,
    pub class: Class,
    pub edges_s: Vec<f64>,
    pub counts: Vec<u64>,
    /// vertical markers, e.g. ("p50", 0.001), drawn dashed with their label and value
    pub markers: Vec<(String, f64)>,
}

/// One series of a [`LineChart`]: its points (x, y) in drawing order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    /// its colour, dash and marker; None: by its place among the series
    pub look: Option<Look>,
    /// a line through the points, or the points alone
    pub draw: Draw,
}

/// How a series looks: the palette's colour `colour` and the dash and point marker of
/// `pattern` (each taken modulo how many there are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    pub colour: usize,
    pub pattern: usize,
}

impl Look {
    /// The look of the `i`th series when it names none: each of the first eight its own
    /// colour, dash and marker; the next eight the same colours with other dashes.
    fn nth(i: usize) -> Look {
        Look {
            colour: i,
            pattern: i + i / PALETTE.len(),
        }
    }

    fn colour(self) -> &'static str {
        PALETTE[self.colour % PALETTE.len()]
    }

    fn dash(self) -> &'static str {
        DASHES[self.pattern % DASHES.len()]
    }
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Draw {
    /// a line through the points, each point marked when there are at most 60
    #[default]
    Line,
    /// the points alone, every one marked hollow (e.g. measured points against a curve)
    Points,
}

/// Lines over x, e.g. the hit ratio over time or the response time against users.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LineChart {
    pub title: String,
    /// with its unit, e.g. "time (s)"
    pub x_label: String,
    /// with its unit, e.g. "response time (ms)"
    pub y_label: String,
    pub series: Vec<Series>,
    /// a vertical line at x with its label, e.g. (12.0, "now: 12 users")
    pub marker: Option<(f64, String)>,
    /// top of the y axis; None: the data's maximum rounded up to a nice number
    pub y_max: Option<f64>,
    /// how to print y ticks: e.g. percent for ratios
    pub y_percent: bool,
    /// the plot's height in px; None: 200 (a chart among others on a page)
    pub plot_height: Option<f64>,
    /// a line under the chart, e.g. the settings it was drawn with
    pub note: Option<String>,
}

/// Grouped bars: per group one bar per member, in the members' order.
#[derive(Debug, Clone, PartialEq)]
pub struct Bars {
    pub title: String,
    /// with its unit
    pub y_label: String,
    pub members: Vec<String>,
    /// each group's label and its values, one per member (missing ones count as 0)
    pub groups: Vec<(String, Vec<f64>)>,
}

// ---------------------------------------------------------------------------------------
// Small helpers

/// `write!` into a String, which cannot fail.
macro_rules! w {
    ($out:expr, $($arg:tt)*) => {{
        let _ = write!($out, $($arg)*);
    }};
}

/// A coordinate, printed with at most one decimal (never NaN or inf).
#[derive(Clone, Copy)]
struct P(f64);

impl fmt::Display for P {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = if self.0.is_finite() {
            self.0.clamp(-1e7, 1e7)
        } else {
            0.0
        };
        let t = (v * 10.0).round() as i64;
        let (sign, a) = if t < 0 { ("-", -t) } else { ("", t) };
        if a % 10 == 0 {
            write!(f, "{sign}{}", a / 10)
        } else {
            write!(f, "{sign}{}.{}", a / 10, a % 10)
        }
    }
}

/// A data value as an attribute: the shortest form that reads back to the same f64.
struct Exact(f64);

impl fmt::Display for Exact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:e}", self.0)
    }
}

/// XML-escape `s` for text and attribute values alike (the page's HTML uses it too).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// `s` cut to `max` characters, an ellipsis marking the cut.
fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// Roughly how wide `s` is in px at `font_px` (sans-serif averages ~0.6 em a character).
fn text_px(s: &str, font_px: f64) -> f64 {
    s.chars().count() as f64 * font_px * 0.6
}

/// A value as drawn: negative, NaN and inf count as 0, and no value above 1e300 (so sums
/// and nice roundings stay finite).
fn clean(v: f64) -> f64 {
    if v.is_finite() && v > 0.0 {
        v.min(1e300)
    } else {
        0.0
    }
}

/// `id` reduced to a valid XML id prefix.
fn sanitize_id(id: &str) -> String {
    let mut s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if !s.starts_with(|c: char| c.is_ascii_alphabetic()) {
        s.insert(0, 'c');
    }
    s
}

/// The smallest of 1, 2, 5 × 10^k that is ≥ `raw`.
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let base = 10f64.powf(raw.log10().floor());
    let m = raw / base;
    let n = if m <= 1.0 + 1e-9 {
        1.0
    } else if m <= 2.0 + 1e-9 {
        2.0
    } else if m <= 5.0 + 1e-9 {
        5.0
    } else {
        10.0
    };
    n * base
}

/// `v` rounded to 12 significant digits: 6 × 0.2 is 1.2, not 1.2000000000000002.
fn snap(v: f64) -> f64 {
    format!("{v:.11e}").parse().unwrap_or(v)
}

/// An axis from 0 covering `max` in about `target` nice steps: (axis top, step).
fn zero_axis(max: f64, target: usize) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max.min(1e300)
    } else {
        1.0
    };
    let step = nice_step(max / target as f64);
    let n = (max / step - 1e-9).ceil().max(1.0);
    (snap(n * step), step)
}

/// A nice axis covering `[min, max]`: (low, high, step). A zero-width range is widened.
fn span_axis(min: f64, max: f64, target: usize) -> (f64, f64, f64) {
    let (mut a, mut b) = (min.clamp(-1e300, 1e300), max.clamp(-1e300, 1e300));
    if b.partial_cmp(&a) != Some(Ordering::Greater) {
        let pad = if a == 0.0 { 1.0 } else { a.abs() * 0.5 };
        b = a + pad;
        a = if a >= 0.0 && a - pad < 0.0 {
            0.0
        } else {
            a - pad
        };
    }
    let step = nice_step((b - a) / target as f64);
    let lo = snap((a / step + 1e-9).floor() * step);
    let mut hi = snap((b / step - 1e-9).ceil() * step);
    if hi.partial_cmp(&lo) != Some(Ordering::Greater) {
        hi = lo + step;
    }
    (lo, hi, step)
}

/// The ticks lo, lo + step, … ≤ hi (at most 50).
fn ticks(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let n = ((hi - lo) / step + 1e-6).floor().clamp(0.0, 50.0) as usize;
    (0..=n).map(|i| snap(lo + i as f64 * step)).collect()
}

/// `s` without trailing zeros after a decimal point.
fn trim_zeros(mut s: String) -> String {
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    s
}

/// Scientific notation, 3 significant digits: "1.23e6".
fn sci(v: f64) -> String {
    let s = format!("{v:.2e}");
    match s.split_once('e') {
        Some((m, e)) => format!("{}e{e}", trim_zeros(m.to_string())),
        None => s,
    }
}

/// A value for people: 3 significant digits, whole numbers in full up to a million.
fn sig3(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        return sci(v);
    }
    let d = (2.0 - a.log10().floor()).clamp(0.0, 6.0) as usize;
    let s = trim_zeros(format!("{v:.d$}"));
    if s == "-0" {
        "0".into()
    } else {
        s
    }
}

/// A tick label on a linear axis of step `step`.
fn tick_label(v: f64, step: f64) -> String {
    if v.abs() < step * 1e-6 {
        return "0".into();
    }
    if !(1e-4..1e6).contains(&step) {
        return sci(v);
    }
    let d = (-step.log10().floor()).clamp(0.0, 6.0) as usize;
    trim_zeros(format!("{v:.d$}"))
}

/// The time unit of an axis whose range ends at `max_s`.
#[derive(Clone, Copy)]
struct Unit {
    name: &'static str,
    per_s: f64,
}

fn time_unit(max_s: f64) -> Unit {
    if max_s < 1e-3 {
        Unit {
            name: "µs",
            per_s: 1e6,
        }
    } else if max_s >= 100.0 {
        Unit {
            name: "s",
            per_s: 1.0,
        }
    } else {
        Unit {
            name: "ms",
            per_s: 1e3,
        }
    }
}

/// A duration for people, in the unit that suits it: "0.85 ms", "120 µs", "1.5 s".
fn fmt_dur(s: f64) -> String {
    let s = clean(s);
    if s == 0.0 {
        "0 ms".into()
    } else if s >= 1.0 {
        format!("{} s", sig3(s))
    } else if s >= 1e-4 {
        format!("{} ms", sig3(s * 1e3))
    } else {
        format!("{} µs", sig3(s * 1e6))
    }
}

/// The `<svg>` start tag, its `<title>` and a white background (for dark pages and print).
fn open(out: &mut String, w: f64, h: f64, title: &str, aria: &str) {
    w!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" width="{}" role="img" aria-label="{}" font-family="sans-serif" font-size="11" fill="{INK}">"#,
        P(w),
        P(h),
        P(w),
        esc(aria)
    );
    w!(out, "<title>{}</title>", esc(title));
    w!(
        out,
        r#"<rect width="{}" height="{}" fill="white"/>"#,
        P(w),
        P(h)
    );
}

/// The chart's visible title, top left.
fn heading(out: &mut String, w: f64, title: &str) {
    let max = ((w - 20.0) / text_px("x", 13.0)).max(4.0) as usize;
    w!(
        out,
        r#"<text x="10" y="18" font-size="13" font-weight="bold">{}</text>"#,
        esc(&clip(title, max))
    );
}

/// A frame with the title and a centred "no data".
fn no_data(w: f64, h: f64, title: &str) -> String {
    let mut out = String::new();
    open(&mut out, w, h, title, &format!("{title}: no data"));
    w!(
        out,
        r#"<rect x="0.5" y="0.5" width="{}" height="{}" fill="none" stroke="{FRAME}"/>"#,
        P(w - 1.0),
        P(h - 1.0)
    );
    heading(&mut out, w, title);
    w!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle" font-size="13" fill="{MUTED}">no data</text></svg>"#,
        P(w / 2.0),
        P(h / 2.0 + 8.0)
    );
    out
}

/// The queue class's hatch, `#{pid}-queue`.
fn queue_pattern(out: &mut String, pid: &str) {
    w!(
        out,
        r#"<pattern id="{pid}-queue" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)"><rect width="6" height="6" fill="{QUEUE}"/><path d="M1 0V6" stroke="black" stroke-opacity="0.45" stroke-width="2"/></pattern>"#
    );
}

/// Text with a white halo, readable over bars and lines.
const HALO: &str =
    r#"paint-order="stroke" stroke="white" stroke-width="3" stroke-linejoin="round""#;

/// A rotated y-axis label centred on the plot's height.
fn y_axis_label(out: &mut String, x: f64, y_mid: f64, label: &str, plot_h: f64) {
    let max = (plot_h / text_px("x", 11.0)).max(4.0) as usize;
    w!(
        out,
        r#"<text transform="translate({} {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        P(x),
        P(y_mid),
        esc(&clip(label, max))
    );
}

/// Horizontal grid lines and labels of a linear y axis.
fn y_ticks(
    out: &mut String,
    left: f64,
    right: f64,
    y_of: impl Fn(f64) -> f64,
    tks: &[f64],
    label: impl Fn(f64) -> String,
) {
    for &t in tks {
        let y = y_of(t);
        w!(
            out,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{GRID}"/><text x="{}" y="{}" text-anchor="end" font-size="10">{}</text>"#,
            P(left),
            P(y),
            P(right),
            P(y),
            P(left - 4.0),
            P(y + 3.5),
            esc(&label(t))
        );
    }
}

/// A legend laid out left to right from (x0, y0), wrapping at `right`: each item's swatch
/// is written by `swatch(out, x, y_middle, i)` in a 24 px slot before its label.
/// Returns the y of the last legend line.
fn legend(
    out: &mut String,
    x0: f64,
    y0: f64,
    right: f64,
    labels: &[String],
    mut swatch: impl FnMut(&mut String, f64, f64, usize),
) -> f64 {
    let (mut x, mut y) = (x0, y0);
    for (i, l) in labels.iter().enumerate() {
        let l = clip(l, 40);
        let wd = 28.0 + text_px(&l, 10.0) + 14.0;
        if x > x0 && x + wd > right {
            x = x0;
            y += 15.0;
        }
        swatch(out, x, y - 3.5, i);
        w!(
            out,
            r#"<text x="{}" y="{}" font-size="10">{}</text>"#,
            P(x + 28.0),
            P(y),
            esc(&l)
        );
        x += wd;
    }
    y
}

/// How many legend lines `legend` will use.
fn legend_lines(x0: f64, right: f64, labels: &[String]) -> usize {
    let (mut x, mut lines) = (x0, 1);
    for l in labels {
        let wd = 28.0 + text_px(&clip(l, 40), 10.0) + 14.0;
        if x > x0 && x + wd > right {
            x = x0;
            lines += 1;
        }
        x += wd;
    }
    lines
}

fn footnote(out: &mut String, x: f64, y: f64, notes: &[String]) {
    if !notes.is_empty() {
        w!(
            out,
            r#"<text x="{}" y="{}" font-size="10" fill="{MUTED}">{}</text>"#,
            P(x),
            P(y),
            esc(&notes.join("; "))
        );
    }
}

// ---------------------------------------------------------------------------------------
// The stage waterfall

/// The stage waterfall: one horizontal bar per row on ONE shared time axis (ms), each row's
/// stages laid end to end by their MEANS, coloured by class; the on-CPU part of a stage as
/// a darker inner band (same start, width cpu_s, at most the stage's mean); each stage's
/// p90 a thin whisker from the stage's start to start + p90 just under the bar (alternate
/// stages on two heights, so overlapping whiskers stay apart). Row label and
/// "n = connections" at the left, total mean at the right. Rows with no segments are
/// skipped.
///
/// Each stage's `<rect>` carries `data-row`, `data-stage`, `data-class`, `data-mean-s`,
/// `data-p90-s`, `data-cpu-s` (when given), `data-count` (connections with the stage),
/// `data-connections` (the row's); the values are the inputs
/// as drawn (negative or non-finite ones as 0) in the shortest `{:e}` form that reads back
/// to the same f64. Its `<title>` is the hover text.
pub fn waterfall(id: &str, rows: &[Row]) -> String {
    const TITLE: &str = "Stage waterfall: mean time of each stage, laid end to end";
    const W: f64 = 760.0;
    const LEFT: f64 = 190.0;
    const RIGHT: f64 = W - 80.0;
    const TOP: f64 = 50.0;
    const ROW_H: f64 = 34.0;
    const BAR_H: f64 = 14.0;

    let pid = sanitize_id(id);
    let all: Vec<&Row> = rows.iter().filter(|r| !r.segments.is_empty()).collect();
    if all.is_empty() {
        return no_data(W, 140.0, TITLE);
    }
    let shown = &all[..all.len().min(MAX_ROWS)];
    let mut notes = Vec::new();
    if all.len() > shown.len() {
        notes.push(format!("{} more rows not shown", all.len() - shown.len()));
    }
    let cut_rows = shown
        .iter()
        .filter(|r| r.segments.len() > MAX_SEGMENTS)
        .count();
    if cut_rows > 0 {
        notes.push(format!(
            "{cut_rows} rows show only their first {MAX_SEGMENTS} stages (total includes all)"
        ));
    }

    // The axis covers every bar and every whisker.
    let mut max_s = 0f64;
    for r in shown {
        let mut cum = 0f64;
        for s in r.segments.iter().take(MAX_SEGMENTS) {
            max_s = max_s.max(cum + clean(s.p90_s));
            cum += clean(s.mean_s);
        }
        max_s = max_s.max(cum);
    }
    let unit = time_unit(max_s);
    let (axis_u, step_u) = zero_axis(max_s * unit.per_s, 6);
    let plot_w10 = (RIGHT - LEFT) * 10.0;
    // x in tenths of a px, so that stage i+1 starts exactly where stage i ends.
    let x10 = |s: f64| -> i64 {
        let f = (s * unit.per_s / axis_u).clamp(0.0, 1.0);
        (LEFT * 10.0 + f * plot_w10).round() as i64
    };
    let px = |t: i64| P(t as f64 / 10.0);

    let axis_y = TOP + shown.len() as f64 * ROW_H + 2.0;
    let h = axis_y + 40.0 + if notes.is_empty() { 0.0 } else { 16.0 };
    let mut out = String::with_capacity(4096 + shown.len() * 4096);
    open(
        &mut out,
        W,
        h,
        TITLE,
        &format!(
            "Stage waterfall of {} kinds of connection, time in {}",
            shown.len(),
            unit.name
        ),
    );
    out.push_str("<defs>");
    queue_pattern(&mut out, &pid);
    out.push_str("</defs>");
    heading(&mut out, W, TITLE);

    // Legend.
    let items: Vec<String> = [
        "service",
        "queue",
        "delay",
        "on CPU",
        "p90 (whisker from stage start)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    legend(
        &mut out,
        10.0,
        37.0,
        W - 10.0,
        &items,
        |o, x, y, i| match i {
            0..=2 => {
                let c = [Class::Service, Class::Queue, Class::Delay][i];
                w!(
                    o,
                    r#"<rect x="{}" y="{}" width="22" height="10" fill="{}" stroke="{MUTED}" stroke-width="0.5"/>"#,
                    P(x),
                    P(y - 5.0),
                    c.fill(&pid)
                );
            }
            3 => w!(
                o,
                r#"<rect x="{}" y="{}" width="22" height="10" fill="{SERVICE}"/><rect x="{}" y="{}" width="14" height="4" fill="{CPU}"/>"#,
                P(x),
                P(y - 5.0),
                P(x),
                P(y - 2.0)
            ),
            _ => w!(
                o,
                r#"<path d="M{} {}h20m0 -2.5v5" stroke="black" stroke-width="1.2" fill="none"/>"#,
                P(x),
                P(y)
            ),
        },
    );

    // Grid and axis.
    for t in ticks(0.0, axis_u, step_u) {
        let x = px(x10(t / unit.per_s));
        w!(
            out,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{GRID}"/><text x="{x}" y="{}" text-anchor="middle" font-size="10">{}</text>"#,
            P(TOP),
            P(axis_y),
            P(axis_y + 14.0),
            tick_label(t, step_u)
        );
    }
    w!(
        out,
        r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{INK}"/><text x="{}" y="{}" text-anchor="middle">time ({})</text>"#,
        P(LEFT),
        P(axis_y),
        P(RIGHT),
        P(axis_y),
        P((LEFT + RIGHT) / 2.0),
        P(axis_y + 32.0),
        unit.name
    );

    for (i, r) in shown.iter().enumerate() {
        let bar_y = TOP + i as f64 * ROW_H + 4.0;
        let row = esc(&r.label);
        w!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end" font-size="12">{}<title>{row}</title></text><text x="{}" y="{}" text-anchor="end" font-size="10" fill="{MUTED}">n = {}</text>"#,
            P(LEFT - 8.0),
            P(bar_y + 11.0),
            esc(&clip(&r.label, 24)),
            P(LEFT - 8.0),
            P(bar_y + 24.0),
            r.connections
        );
        let mut cum = 0f64;
        let (mut bands, mut whiskers) = (String::new(), String::new());
        w!(out, r#"<g stroke="white" stroke-width="0.5">"#);
        for (j, s) in r.segments.iter().take(MAX_SEGMENTS).enumerate() {
            let (mean, p90) = (clean(s.mean_s), clean(s.p90_s));
            let cpu = s.cpu_s.map(clean);
            let (x0, x1) = (x10(cum), x10(cum + mean));
            let stage = esc(&s.stage);
            w!(
                out,
                r#"<rect x="{}" y="{}" width="{}" height="{BAR_H}" fill="{}" data-row="{row}" data-stage="{stage}" data-class="{}" data-mean-s="{}" data-p90-s="{}""#,
                px(x0),
                P(bar_y),
                px(x1 - x0),
                s.class.fill(&pid),
                s.class.name(),
                Exact(mean),
                Exact(p90)
            );
            if let Some(c) = cpu {
                w!(out, r#" data-cpu-s="{}""#, Exact(c));
            }
            w!(out, r#" data-count="{}""#, s.count);
            w!(
                out,
                r#" data-connections="{}"><title>{stage} ({}): mean {}, p90 {}"#,
                r.connections,
                s.class.name(),
                fmt_dur(mean),
                fmt_dur(p90)
            );
            if let Some(c) = cpu {
                w!(out, ", on CPU {}", fmt_dur(c));
            }
            out.push_str("</title></rect>");
            if let Some(c) = cpu.filter(|&c| c > 0.0) {
                let xc = x10(cum + c.min(mean));
                w!(
                    bands,
                    r#"<rect class="cpu" x="{}" y="{}" width="{}" height="6"/>"#,
                    px(x0),
                    P(bar_y + 4.0),
                    px(xc - x0)
                );
            }
            if p90 > 0.0 {
                let xe = x10(cum + p90);
                let wy = bar_y + BAR_H + 3.0 + (j % 2) as f64 * 3.5;
                w!(
                    whiskers,
                    r#"<path class="p90" d="M{} {}H{}m0 -2v4"/>"#,
                    px(x0),
                    P(wy),
                    px(xe)
                );
            }
            cum += mean;
        }
        let end = x10(cum);
        let total: f64 = r.segments.iter().map(|s| clean(s.mean_s)).sum();
        w!(
            out,
            r#"</g><g fill="{CPU}">{bands}</g><g stroke="black" fill="none">{whiskers}</g><rect x="{}" y="{}" width="{}" height="{BAR_H}" fill="none" stroke="{MUTED}" stroke-width="0.5"/><text x="{}" y="{}" font-size="11">{}<title>total mean</title></text>"#,
            px(x10(0.0)),
            P(bar_y),
            px(end - x10(0.0)),
            P(end as f64 / 10.0 + 5.0),
            P(bar_y + 11.0),
            fmt_dur(total)
        );
    }
    footnote(&mut out, 10.0, axis_y + 52.0, &notes);
    out.push_str("</svg>");
    out
}

// ---------------------------------------------------------------------------------------
// A distribution on a log time axis

struct Bucket {
    /// drawn from (the first bucket's true lower edge is 0, the overflow's is open)
    lo: f64,
    hi: f64,
    count: u64,
    first: bool,
    overflow: bool,
}

/// A latency distribution on a log time axis, bars per bucket (buckets with no
/// connection draw nothing; the axis spans from the first bucket with connections to the
/// last, and the markers), about 360 × 172. The first bucket, (0, edges_s[0]], is drawn
/// one bucket-width (on the log axis) below its edge. Markers are dashed lines with their
/// label and value. Each bar's `<rect>` carries `data-lo-s` (0 for the first bucket),
/// `data-hi-s` (the overflow's is its lower edge too), `data-count`.
pub fn distribution(id: &str, d: &Distribution) -> String {
    const W: f64 = 360.0;
    const H: f64 = 172.0;
    const LEFT: f64 = 46.0;
    const RIGHT: f64 = W - 12.0;
    const TOP: f64 = 42.0;
    const BOTTOM: f64 = 128.0;

    let pid = sanitize_id(id);
    // Buckets with valid, ascending edges; counts under a bad edge go to the next bucket.
    let mut buckets: Vec<Bucket> = Vec::new();
    let (mut prev, mut carry, mut over) = (0f64, 0u64, 0u64);
    for (i, &c) in d.counts.iter().enumerate() {
        match d.edges_s.get(i) {
            Some(&e) if e.is_finite() && e > prev && e <= 1e300 => {
                buckets.push(Bucket {
                    lo: prev,
                    hi: e,
                    count: carry.saturating_add(c),
                    first: buckets.is_empty(),
                    overflow: false,
                });
                carry = 0;
                prev = e;
            }
            Some(_) => carry = carry.saturating_add(c),
            None => over = over.saturating_add(c),
        }
    }
    over = over.saturating_add(carry);
    let total = buckets.iter().fold(over, |a, b| a.saturating_add(b.count));
    if buckets.is_empty() || total == 0 {
        return no_data(W, H, &d.title);
    }
    // The ratio of neighbouring edges at each end: how wide the open ends are drawn.
    let n = buckets.len();
    let ratio = |a: f64, b: f64| (b / a).clamp(1.2, 1000.0);
    let (r_lo, r_hi) = if n >= 2 {
        (
            ratio(buckets[0].hi, buckets[1].hi),
            ratio(buckets[n - 2].hi, buckets[n - 1].hi),
        )
    } else {
        (10.0, 10.0)
    };
    buckets[0].lo = buckets[0].hi / r_lo;
    if over > 0 {
        let e = buckets[n - 1].hi;
        buckets.push(Bucket {
            lo: e,
            hi: (e * r_hi).min(1e300),
            count: over,
            first: false,
            overflow: true,
        });
    }
    // The axis spans the buckets with connections only (histograms often have many
    // empty buckets at both ends).
    let first = buckets.iter().position(|b| b.count > 0).unwrap_or(0);
    let last = buckets
        .iter()
        .rposition(|b| b.count > 0)
        .unwrap_or(buckets.len() - 1);
    buckets.truncate(last + 1);
    buckets.drain(..first);
    // Merge neighbours beyond MAX_BUCKETS bars.
    if buckets.len() > MAX_BUCKETS {
        let k = buckets.len().div_ceil(MAX_BUCKETS);
        buckets = buckets
            .chunks(k)
            .map(|c| Bucket {
                lo: c[0].lo,
                hi: c[c.len() - 1].hi,
                count: c.iter().fold(0u64, |a, b| a.saturating_add(b.count)),
                first: c[0].first,
                overflow: c[0].overflow,
            })
            .collect();
    }

    let markers: Vec<(&str, f64)> = d
        .markers
        .iter()
        .filter(|m| m.1.is_finite() && m.1 > 0.0 && m.1 <= 1e300)
        .take(10)
        .map(|m| (m.0.as_str(), m.1))
        .collect();
    let mut xa = buckets[0].lo.log10();
    let mut xb = buckets[buckets.len() - 1].hi.log10();
    for &(_, v) in &markers {
        xa = xa.min(v.log10());
        xb = xb.max(v.log10());
    }
    if xb - xa < 1e-6 {
        xa -= 0.5;
        xb += 0.5;
    }
    let unit = time_unit(10f64.powf(xb));
    let x_of = |s: f64| LEFT + ((s.log10() - xa) / (xb - xa)).clamp(0.0, 1.0) * (RIGHT - LEFT);

    let max_count = buckets.iter().map(|b| b.count).max().unwrap_or(0) as f64;
    let (mut y_top, mut y_step) = zero_axis(max_count, 4);
    if y_step < 1.0 {
        y_step = 1.0;
        y_top = max_count.ceil().max(1.0);
    }
    let y_of = |c: f64| BOTTOM - (c / y_top).clamp(0.0, 1.0) * (BOTTOM - TOP);

    let mut out = String::with_capacity(4096 + buckets.len() * 200);
    open(
        &mut out,
        W,
        H,
        &d.title,
        &format!(
            "{}: distribution of {total} connections, time in {} on a log scale",
            d.title, unit.name
        ),
    );
    out.push_str("<defs>");
    queue_pattern(&mut out, &pid);
    out.push_str("</defs>");
    heading(&mut out, W, &d.title);
    let mut items = vec![format!("{} time", d.class.name())];
    if !markers.is_empty() {
        items.push("percentiles".to_string());
    }
    legend(&mut out, LEFT, 33.0, RIGHT, &items, |o, x, y, i| {
        if i == 0 {
            w!(
                o,
                r#"<rect x="{}" y="{}" width="22" height="10" fill="{}" stroke="{MUTED}" stroke-width="0.5"/>"#,
                P(x),
                P(y - 5.0),
                d.class.fill(&pid)
            );
        } else {
            w!(
                o,
                r#"<path d="M{} {}h22" stroke="black" stroke-dasharray="4 3"/>"#,
                P(x),
                P(y)
            );
        }
    });

    // y axis
    y_ticks(
        &mut out,
        LEFT,
        RIGHT,
        y_of,
        &ticks(0.0, y_top, y_step),
        |t| tick_label(t, y_step),
    );
    y_axis_label(
        &mut out,
        12.0,
        (TOP + BOTTOM) / 2.0,
        "connections",
        BOTTOM - TOP,
    );

    // x axis: decades, thinned or filled with 2 and 5 to get 2 to 6 labels.
    let shift = unit.per_s.log10();
    let (ua, ub) = (xa + shift, xb + shift);
    let (k0, k1) = ((ua - 1e-9).ceil() as i64, (ub + 1e-9).floor() as i64);
    let mut tks: Vec<f64> = Vec::new();
    if k1 - k0 + 1 >= 2 {
        let stride = ((k1 - k0 + 1) as usize).div_ceil(6).max(1);
        tks.extend((k0..=k1).step_by(stride).map(|k| 10f64.powi(k as i32)));
    } else {
        for k in (ua.floor() as i64)..=(ub.ceil() as i64) {
            for m in [1.0, 2.0, 5.0] {
                let v = m * 10f64.powi(k as i32);
                let l = v.log10();
                if l >= ua - 1e-9 && l <= ub + 1e-9 {
                    tks.push(v);
                }
            }
        }
    }
    for &t in &tks {
        let x = P(x_of(t / unit.per_s));
        w!(
            out,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{INK}"/><text x="{x}" y="{}" text-anchor="middle" font-size="10">{}</text>"#,
            P(BOTTOM),
            P(BOTTOM + 4.0),
            P(BOTTOM + 15.0),
            sig3(t)
        );
    }
    w!(
        out,
        r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{INK}"/><text x="{}" y="{}" text-anchor="middle">time ({}, log scale)</text>"#,
        P(LEFT),
        P(BOTTOM),
        P(RIGHT),
        P(BOTTOM),
        P((LEFT + RIGHT) / 2.0),
        P(BOTTOM + 32.0),
        unit.name
    );

    // Bars.
    let fill = d.class.fill(&pid);
    for b in buckets.iter().filter(|b| b.count > 0) {
        let (x0, x1) = (x_of(b.lo), x_of(b.hi));
        let y = y_of(b.count as f64);
        let range = if b.first {
            format!("≤ {}", fmt_dur(b.hi))
        } else if b.overflow {
            format!("> {}", fmt_dur(b.lo))
        } else {
            format!("{} – {}", fmt_dur(b.lo), fmt_dur(b.hi))
        };
        w!(
            out,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{fill}" stroke="white" stroke-width="0.5" data-lo-s="{}" data-hi-s="{}" data-count="{}"><title>{}: {} connections</title></rect>"#,
            P(x0),
            P(y),
            P(x1 - x0),
            P(BOTTOM - y),
            Exact(if b.first { 0.0 } else { b.lo }),
            Exact(if b.overflow { b.lo } else { b.hi }),
            b.count,
            esc(&range),
            b.count
        );
    }

    // Markers, then their labels (over every line) on three staggered lines.
    let mut labels = String::new();
    for (i, &(label, v)) in markers.iter().enumerate() {
        let x = x_of(v);
        let text = format!("{} {}", clip(label, 20), fmt_dur(v));
        let ty = TOP + 9.0 + (i % 3) as f64 * 10.0;
        let (tx, anchor) = if x + 3.0 + text_px(&text, 9.0) > RIGHT {
            (x - 3.0, "end")
        } else {
            (x + 3.0, "start")
        };
        w!(
            out,
            r#"<line class="marker" x1="{}" y1="{}" x2="{}" y2="{}" stroke="black" stroke-dasharray="4 3"/>"#,
            P(x),
            P(TOP),
            P(x),
            P(BOTTOM)
        );
        w!(
            labels,
            r#"<text x="{}" y="{}" text-anchor="{anchor}" font-size="9" {HALO}>{}</text>"#,
            P(tx),
            P(ty),
            esc(&text)
        );
    }
    out.push_str(&labels);
    out.push_str("</svg>");
    out
}

// ---------------------------------------------------------------------------------------
// Lines

/// The point marker of pattern `i` centred at (x, y): circle, square, triangle, diamond;
/// filled, or `hollow` (white inside, the colour around).
fn point_marker(
    out: &mut String,
    (i, colour, hollow): (usize, &str, bool),
    x: f64,
    y: f64,
    attrs: &str,
) {
    let d = match i % 4 {
        0 => format!("M{} {}a3 3 0 1 0 6 0a3 3 0 1 0 -6 0z", P(x - 3.0), P(y)),
        1 => format!("M{} {}h5.6v5.6h-5.6z", P(x - 2.8), P(y - 2.8)),
        2 => format!("M{} {}l3.5 6h-7z", P(x), P(y - 3.5)),
        _ => format!("M{} {}l3.5 3.5l-3.5 3.5l-3.5 -3.5z", P(x), P(y - 3.5)),
    };
    if hollow {
        w!(
            out,
            r#"<path d="{d}" fill="white" stroke="{colour}" stroke-width="1.5"{attrs}/>"#
        );
    } else {
        w!(
            out,
            r#"<path d="{d}" fill="{colour}" stroke="white" stroke-width="0.5"{attrs}/>"#
        );
    }
}

/// Lines over x, each series its own colour, dash pattern and point marker (points get
/// markers when a series has at most 60; a `Draw::Points` series is its markers alone,
/// hollow). y runs from 0 to `y_max` (values above are drawn at the top) or to the data's
/// maximum rounded up to a nice number; x spans the data (and the marker). Each
/// `<polyline>` carries `data-series`; each marker `class="point"`, `data-series`, and
/// `data-x`, `data-y`: the point as drawn, in the shortest `{:e}` form that reads back to
/// the same f64.
pub fn line_chart(id: &str, c: &LineChart) -> String {
    const W: f64 = 640.0;
    const LEFT: f64 = 64.0;
    const RIGHT: f64 = W - 20.0;

    let plot_h = c
        .plot_height
        .filter(|h| h.is_finite())
        .map_or(200.0, |h| h.clamp(100.0, 1000.0));

    let _ = sanitize_id(id); // lines use no pattern; the prefix is kept for symmetry
    let mut notes: Vec<String> = c.note.iter().cloned().collect();
    if c.series.len() > MAX_SERIES {
        notes.push(format!(
            "{} more series not shown",
            c.series.len() - MAX_SERIES
        ));
    }
    // Points with a finite x and y; y below 0 counts as 0.
    let series: Vec<Shown> = c
        .series
        .iter()
        .take(MAX_SERIES)
        .enumerate()
        .map(|(i, s)| {
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| p.0.is_finite() && p.1.is_finite())
                .map(|&(x, y)| (x.clamp(-1e300, 1e300), clean(y)))
                .collect();
            // a line thinned keeps its shape; points alone are each a datum
            if s.draw == Draw::Points && pts.len() > MAX_POINTS {
                notes.push(format!(
                    "{MAX_POINTS} of the {} points of {} shown",
                    pts.len(),
                    clip(&s.label, 40)
                ));
            }
            (s, s.look.unwrap_or(Look::nth(i)), thin(pts, MAX_POINTS))
        })
        .collect();
    let all = || series.iter().flat_map(|s| s.2.iter());
    if all().next().is_none() {
        return no_data(W, 280.0, &c.title);
    }
    let marker = c
        .marker
        .as_ref()
        .filter(|m| m.0.is_finite() && m.0.abs() <= 1e300);
    let (mut x_min, mut x_max) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
        (a.min(p.0), b.max(p.0))
    });
    if let Some(m) = marker {
        x_min = x_min.min(m.0);
        x_max = x_max.max(m.0);
    }
    let (x_lo, x_hi, x_step) = span_axis(x_min, x_max, 6);
    let y_data = all().fold(0f64, |a, p| a.max(p.1));
    let (y_top, y_step) = match c.y_max.filter(|v| v.is_finite() && *v > 0.0) {
        Some(m) => {
            let m = m.min(1e300);
            (m, nice_step(m / 5.0))
        }
        None => zero_axis(y_data, 5),
    };

    let labels: Vec<String> = series.iter().map(|s| s.0.label.clone()).collect();
    let lines = legend_lines(10.0, W - 10.0, &labels);
    let top = 40.0 + lines as f64 * 15.0;
    let bottom = top + plot_h;
    let foot = wrap(
        &notes.join("; "),
        ((W - 20.0) / text_px("x", 10.0)) as usize,
    );
    let h = bottom + 46.0 + foot.len() as f64 * 14.0;
    let x_of = |x: f64| LEFT + ((x - x_lo) / (x_hi - x_lo)).clamp(0.0, 1.0) * (RIGHT - LEFT);
    let y_of = |y: f64| bottom - (y / y_top).clamp(0.0, 1.0) * plot_h;

    let mut out = String::with_capacity(4096 + series.len() * MAX_POINTS * 12);
    let names = labels.join(", ");
    open(
        &mut out,
        W,
        h,
        &c.title,
        &format!(
            "{}: {} against {} ({})",
            c.title,
            c.y_label,
            c.x_label,
            clip(&names, 200)
        ),
    );
    heading(&mut out, W, &c.title);
    legend(&mut out, 10.0, 37.0, W - 10.0, &labels, |o, x, y, i| {
        let (s, look, _) = &series[i];
        let points_only = s.draw == Draw::Points;
        if !points_only {
            w!(
                o,
                r#"<path d="M{} {}h24" stroke="{}" stroke-width="2" fill="none"{}/>"#,
                P(x),
                P(y),
                look.colour(),
                dash_attr(look.dash())
            );
        }
        let marker = (look.pattern, look.colour(), points_only);
        point_marker(o, marker, x + 12.0, y, "");
    });

    let pct = c.y_percent;
    let y_label_of = |t: f64| {
        if pct {
            format!("{}%", tick_label(t * 100.0, y_step * 100.0))
        } else {
            tick_label(t, y_step)
        }
    };
    y_ticks(
        &mut out,
        LEFT,
        RIGHT,
        y_of,
        &ticks(0.0, y_top, y_step),
        y_label_of,
    );
    y_axis_label(&mut out, 14.0, (top + bottom) / 2.0, &c.y_label, plot_h);
    for t in ticks(x_lo, x_hi, x_step) {
        let x = P(x_of(t));
        w!(
            out,
            r#"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="{INK}"/><text x="{x}" y="{}" text-anchor="middle" font-size="10">{}</text>"#,
            P(bottom),
            P(bottom + 4.0),
            P(bottom + 15.0),
            tick_label(t, x_step)
        );
    }
    w!(
        out,
        r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{INK}"/><line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{INK}"/><text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        P(LEFT),
        P(bottom),
        P(RIGHT),
        P(bottom),
        P(LEFT),
        P(top),
        P(LEFT),
        P(bottom),
        P((LEFT + RIGHT) / 2.0),
        P(bottom + 32.0),
        esc(&clip(&c.x_label, 90))
    );

    // lines first, points alone over them
    let mut order: Vec<&Shown> = series.iter().collect();
    order.sort_by_key(|s| s.0.draw == Draw::Points);
    for (s, look, pts) in order {
        if pts.is_empty() {
            continue;
        }
        let colour = look.colour();
        let label = esc(&s.label);
        let points_only = s.draw == Draw::Points;
        if !points_only {
            w!(
                out,
                r#"<polyline fill="none" stroke="{colour}" stroke-width="2" stroke-linejoin="round"{} data-series="{label}" points=""#,
                dash_attr(look.dash())
            );
            for (k, &(x, y)) in pts.iter().enumerate() {
                if k > 0 {
                    out.push(' ');
                }
                w!(out, "{},{}", P(x_of(x)), P(y_of(y)));
            }
            w!(out, r#""><title>{label}</title></polyline>"#);
        }
        if points_only || pts.len() <= MAX_MARKED_POINTS {
            for &(x, y) in pts {
                let attrs = format!(
                    r#" class="point" data-series="{label}" data-x="{}" data-y="{}""#,
                    Exact(x),
                    Exact(y)
                );
                point_marker(
                    &mut out,
                    (look.pattern, colour, points_only),
                    x_of(x),
                    y_of(y),
                    &attrs,
                );
            }
        }
    }

    if let Some((mx, text)) = marker {
        let x = x_of(*mx);
        let text = clip(text, 60);
        let (tx, anchor) = if x + 4.0 + text_px(&text, 10.0) > RIGHT {
            (x - 4.0, "end")
        } else {
            (x + 4.0, "start")
        };
        w!(
            out,
            r#"<line class="marker" x1="{}" y1="{}" x2="{}" y2="{}" stroke="black" stroke-dasharray="5 3"/><text x="{}" y="{}" text-anchor="{anchor}" font-size="10" {HALO}>{}</text>"#,
            P(x),
            P(top),
            P(x),
            P(bottom),
            P(tx),
            P(top + 12.0),
            esc(&text)
        );
    }
    for (k, line) in foot.into_iter().enumerate() {
        footnote(&mut out, 10.0, bottom + 50.0 + k as f64 * 14.0, &[line]);
    }
    out.push_str("</svg>");
    out
}

/// `text` in lines of at most `max` characters, broken at spaces (a longer word is cut);
/// at most 4 lines, an ellipsis marking what is left out. None for an empty text.
fn wrap(text: &str, max: usize) -> Vec<String> {
    let max = max.max(8);
    let mut out: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        let word = clip(word, max);
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > max {
            out.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(&word);
    }
    if !line.is_empty() {
        out.push(line);
    }
    if out.len() > 4 {
        out.truncate(4);
        let last = clip(&out[3], max.saturating_sub(1));
        out[3] = format!("{}…", last.trim_end_matches('…'));
    }
    out
}

/// A series as a line chart draws it: its look, and its points with finite values,
/// thinned.
type Shown<'a> = (&'a Series, Look, Vec<(f64, f64)>);

fn dash_attr(dash: &str) -> String {
    if dash.is_empty() {
        String::new()
    } else {
        format!(r#" stroke-dasharray="{dash}""#)
    }
}

/// At most `max` of `pts`, evenly spaced, the first and the last kept.
fn thin(pts: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    if pts.len() <= max || max < 2 {
        return pts;
    }
    let n = pts.len();
    (0..max).map(|k| pts[k * (n - 1) / (max - 1)]).collect()
}

// ---------------------------------------------------------------------------------------
// Grouped bars

/// Member `j`'s fill pattern `#{pid}-m{j}`: its colour, solid, hatched or dotted (j mod 3),
/// so neighbouring members differ without colour.
fn member_pattern(out: &mut String, pid: &str, j: usize) {
    let colour = PALETTE[j % PALETTE.len()];
    match j % 3 {
        0 => w!(
            out,
            r#"<pattern id="{pid}-m{j}" patternUnits="userSpaceOnUse" width="6" height="6"><rect width="6" height="6" fill="{colour}"/></pattern>"#
        ),
        1 => w!(
            out,
            r#"<pattern id="{pid}-m{j}" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)"><rect width="6" height="6" fill="{colour}"/><path d="M1 0V6" stroke="black" stroke-opacity="0.45" stroke-width="2"/></pattern>"#
        ),
        _ => w!(
            out,
            r#"<pattern id="{pid}-m{j}" patternUnits="userSpaceOnUse" width="5" height="5"><rect width="5" height="5" fill="{colour}"/><circle cx="2.5" cy="2.5" r="1.1" fill="white" fill-opacity="0.8"/></pattern>"#
        ),
    }
}

/// Grouped bars: per group one bar per member, a legend of members, each bar's value above
/// it (in a smaller font when the bar is narrow, left out when too narrow; always in its
/// hover title). Each bar's `<rect>` carries `data-group`, `data-member`, `data-value`.
pub fn bars(id: &str, b: &Bars) -> String {
    const W: f64 = 640.0;
    const LEFT: f64 = 64.0;
    const RIGHT: f64 = W - 20.0;
    const PLOT_H: f64 = 180.0;

    let pid = sanitize_id(id);
    let m = b.members.len().min(MAX_BARS);
    if m == 0 || b.groups.is_empty() {
        return no_data(W, 280.0, &b.title);
    }
    let g = b.groups.len().min((MAX_BARS / m).max(1));
    let mut notes = Vec::new();
    if b.members.len() > m {
        notes.push(format!("{} more members not shown", b.members.len() - m));
    }
    if b.groups.len() > g {
        notes.push(format!("{} more groups not shown", b.groups.len() - g));
    }
    let groups = &b.groups[..g];
    let value = |gi: usize, j: usize| groups[gi].1.get(j).copied().map(clean).unwrap_or(0.0);
    let max = (0..g)
        .flat_map(|gi| (0..m).map(move |j| (gi, j)))
        .fold(0f64, |a, (gi, j)| a.max(value(gi, j)));
    let (y_top, y_step) = zero_axis(max, 5);

    let members: Vec<String> = b.members[..m].to_vec();
    let lines = legend_lines(10.0, W - 10.0, &members);
    let top = 40.0 + lines as f64 * 15.0 + 14.0;
    let bottom = top + PLOT_H;
    let h = bottom + 34.0 + if notes.is_empty() { 0.0 } else { 14.0 };
    let y_of = |v: f64| bottom - (v / y_top).clamp(0.0, 1.0) * PLOT_H;
    let group_w = (RIGHT - LEFT) / g as f64;
    let bar_w = group_w * 0.8 / m as f64;

    let mut out = String::with_capacity(4096 + g * m * 300);
    open(
        &mut out,
        W,
        h,
        &b.title,
        &format!(
            "{}: {} for {} groups, bars per {}",
            b.title,
            b.y_label,
            g,
            clip(&members.join(", "), 200)
        ),
    );
    out.push_str("<defs>");
    for j in 0..m {
        member_pattern(&mut out, &pid, j);
    }
    out.push_str("</defs>");
    heading(&mut out, W, &b.title);
    legend(&mut out, 10.0, 37.0, W - 10.0, &members, |o, x, y, j| {
        w!(
            o,
            r#"<rect x="{}" y="{}" width="22" height="10" fill="url(#{pid}-m{j})" stroke="{MUTED}" stroke-width="0.5"/>"#,
            P(x),
            P(y - 5.0)
        );
    });
    y_ticks(
        &mut out,
        LEFT,
        RIGHT,
        y_of,
        &ticks(0.0, y_top, y_step),
        |t| tick_label(t, y_step),
    );
    y_axis_label(&mut out, 14.0, (top + bottom) / 2.0, &b.y_label, PLOT_H);
    w!(
        out,
        r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{INK}"/>"#,
        P(LEFT),
        P(bottom),
        P(RIGHT),
        P(bottom)
    );

    for (gi, (label, _)) in groups.iter().enumerate() {
        let gx = LEFT + gi as f64 * group_w;
        let group = esc(label);
        let max_chars = ((group_w - 4.0) / text_px("x", 10.0)).max(3.0) as usize;
        w!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="10">{}<title>{group}</title></text>"#,
            P(gx + group_w / 2.0),
            P(bottom + 14.0),
            esc(&clip(label, max_chars))
        );
        for j in 0..m {
            let v = value(gi, j);
            let x = gx + group_w * 0.1 + j as f64 * bar_w;
            let y = y_of(v);
            let member = esc(&b.members[j]);
            let shown = sig3(v);
            w!(
                out,
                r#"<rect x="{}" y="{}" width="{}" height="{}" fill="url(#{pid}-m{j})" stroke="{MUTED}" stroke-width="0.5" data-group="{group}" data-member="{member}" data-value="{}"><title>{group}, {member}: {shown}</title></rect>"#,
                P(x),
                P(y),
                P(bar_w),
                P(bottom - y),
                Exact(v)
            );
            let fs = (bar_w / (0.6 * shown.chars().count() as f64)).min(10.0);
            if fs >= 6.0 {
                w!(
                    out,
                    r#"<text class="value" x="{}" y="{}" text-anchor="middle" font-size="{}">{shown}</text>"#,
                    P(x + bar_w / 2.0),
                    P(y - 3.0),
                    P(fs)
                );
            }
        }
    }
    footnote(&mut out, 10.0, bottom + 30.0, &notes);
    out.push_str("</svg>");
    out
}

// ---------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    /// One element of a parsed document.
    #[derive(Debug)]
    struct El {
        name: String,
        attrs: Vec<(String, String)>,
        /// its own text (not its children's), unescaped
        text: String,
        parent: Option<usize>,
    }

    impl El {
        fn attr(&self, k: &str) -> Option<&str> {
            self.attrs.iter().find(|a| a.0 == k).map(|a| a.1.as_str())
        }
    }

    fn unescape(s: &str) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('&') {
            out.push_str(&rest[..i]);
            let end = rest[i..].find(';').ok_or(format!("bare & in {s:?}"))? + i;
            let ent = &rest[i + 1..end];
            match ent {
                "amp" => out.push('&'),
                "lt" => out.push('<'),
                "gt" => out.push('>'),
                "quot" => out.push('"'),
                "apos" => out.push('\''),
                _ => return Err(format!("unknown entity &{ent}; in {s:?}")),
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn is_name_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == ':' || c == '.'
    }

    /// A strict little XML parser for what these builders write: elements, attributes in
    /// double quotes, text, the five entities. Fails on anything not well-formed, on a raw
    /// `<`, `>` or `&` in text or attribute values, on duplicate attributes, on more than
    /// one root.
    fn parse(xml: &str) -> Result<Vec<El>, String> {
        let mut els: Vec<El> = Vec::new();
        let mut stack: Vec<usize> = Vec::new();
        let mut roots = 0;
        let mut i = 0;
        while i < xml.len() {
            let rest = &xml[i..];
            if let Some(r) = rest.strip_prefix("</") {
                let end = r.find('>').ok_or("unclosed end tag")?;
                let name = &r[..end];
                let top = stack.pop().ok_or(format!("</{name}> without a start"))?;
                if els[top].name != name {
                    return Err(format!("</{name}> closes <{}>", els[top].name));
                }
                i += 2 + end + 1;
            } else if let Some(r) = rest.strip_prefix('<') {
                let name: String = r.chars().take_while(|&c| is_name_char(c)).collect();
                if name.is_empty() {
                    return Err(format!("bad tag at {i}: {:?}", &rest[..rest.len().min(20)]));
                }
                if stack.is_empty() {
                    roots += 1;
                }
                let mut j = 1 + name.len();
                let mut attrs: Vec<(String, String)> = Vec::new();
                let self_closing;
                loop {
                    let r = &rest[j..];
                    let ws = r.len() - r.trim_start().len();
                    let r = r.trim_start();
                    j += ws;
                    if r.starts_with("/>") {
                        self_closing = true;
                        j += 2;
                        break;
                    }
                    if r.starts_with('>') {
                        self_closing = false;
                        j += 1;
                        break;
                    }
                    if ws == 0 {
                        return Err(format!("no space before attribute in <{name}>"));
                    }
                    let an: String = r.chars().take_while(|&c| is_name_char(c)).collect();
                    if an.is_empty() {
                        return Err(format!(
                            "bad attribute in <{name}>: {:?}",
                            &r[..r.len().min(20)]
                        ));
                    }
                    let r2 = &r[an.len()..];
                    let v = r2
                        .strip_prefix("=\"")
                        .ok_or(format!("attribute {an} not =\"…\""))?;
                    let end = v.find('"').ok_or(format!("unclosed value of {an}"))?;
                    let raw = &v[..end];
                    if raw.contains('<') || raw.contains('>') {
                        return Err(format!("raw < or > in {an}={raw:?}"));
                    }
                    if attrs.iter().any(|a| a.0 == an) {
                        return Err(format!("duplicate {an} in <{name}>"));
                    }
                    attrs.push((an.clone(), unescape(raw)?));
                    j += an.len() + 2 + end + 1;
                }
                els.push(El {
                    name,
                    attrs,
                    text: String::new(),
                    parent: stack.last().copied(),
                });
                if !self_closing {
                    stack.push(els.len() - 1);
                }
                i += j;
            } else {
                let end = rest.find('<').unwrap_or(rest.len());
                let raw = &rest[..end];
                if raw.contains('>') {
                    return Err(format!("raw > in text {raw:?}"));
                }
                let t = unescape(raw)?;
                match stack.last() {
                    Some(&top) => els[top].text.push_str(&t),
                    None if t.trim().is_empty() => {}
                    None => return Err(format!("text outside the root: {t:?}")),
                }
                i += end;
            }
        }
        if let Some(&top) = stack.last() {
            return Err(format!("<{}> not closed", els[top].name));
        }
        if roots != 1 {
            return Err(format!("{roots} root elements"));
        }
        Ok(els)
    }

    /// What every chart must be: well-formed, the root's attributes, a `<title>` first, no
    /// NaN or inf, coordinates with at most one decimal, ids unique and every `url(#…)`
    /// defined in the same chart. Returns the elements.
    fn check_common(svg: &str) -> Vec<El> {
        let els = parse(svg).unwrap_or_else(|e| panic!("not well-formed: {e}\n{svg}"));
        let root = &els[0];
        assert_eq!(root.name, "svg");
        assert_eq!(root.attr("xmlns"), Some("http://www.w3.org/2000/svg"));
        assert_eq!(root.attr("role"), Some("img"));
        assert_eq!(root.attr("font-family"), Some("sans-serif"));
        for k in ["viewBox", "width", "aria-label"] {
            assert!(root.attr(k).is_some_and(|v| !v.is_empty()), "no {k}");
        }
        assert_eq!(els[1].name, "title");
        assert_eq!(els[1].parent, Some(0));
        let lower = svg.to_ascii_lowercase();
        assert!(
            !lower.contains("nan") && !lower.contains("inf"),
            "NaN or inf in {svg}"
        );
        for e in &els {
            for (k, v) in &e.attrs {
                if [
                    "x", "y", "width", "height", "x1", "x2", "y1", "y2", "cx", "cy", "r",
                ]
                .contains(&k.as_str())
                {
                    let ok = v.parse::<f64>().is_ok()
                        && v.split_once('.').is_none_or(|(_, d)| d.len() == 1);
                    assert!(ok, "{k}={v:?} in <{}>", e.name);
                }
                if k == "points" || k == "d" {
                    for num in v.split(|c: char| !(c.is_ascii_digit() || c == '.')) {
                        if let Some((_, d)) = num.split_once('.') {
                            assert!(d.len() <= 1, "{k}={v:?}");
                        }
                    }
                }
            }
        }
        let ids: Vec<&str> = els.iter().filter_map(|e| e.attr("id")).collect();
        let mut uniq = ids.clone();
        uniq.sort();
        uniq.dedup();
        assert_eq!(ids.len(), uniq.len(), "duplicate ids");
        for e in &els {
            for (_, v) in &e.attrs {
                if let Some(r) = v.strip_prefix("url(#") {
                    let id = r.trim_end_matches(')');
                    assert!(ids.contains(&id), "url(#{id}) not defined");
                }
            }
        }
        els
    }

    fn data_rects<'a>(els: &'a [El], key: &str) -> Vec<&'a El> {
        els.iter()
            .filter(|e| e.name == "rect" && e.attr(key).is_some())
            .collect()
    }

    fn num(e: &El, k: &str) -> f64 {
        e.attr(k)
            .unwrap_or_else(|| panic!("no {k}"))
            .parse()
            .unwrap()
    }

    fn texts(els: &[El]) -> Vec<&str> {
        els.iter()
            .filter(|e| e.name == "text")
            .map(|e| e.text.as_str())
            .collect()
    }

    fn seg(stage: &str, class: Class, mean_s: f64, p90_s: f64, cpu_s: Option<f64>) -> Segment {
        Segment {
            stage: stage.into(),
            class,
            mean_s,
            p90_s,
            cpu_s,
            count: 3,
        }
    }

    fn rows() -> Vec<Row> {
        vec![
            Row {
                label: "TLS 1.3 <&> full".into(),
                connections: 35,
                segments: vec![
                    seg("accept_queue", Class::Queue, 0.000121_2, 0.000_3, None),
                    seg("wait_client_hello", Class::Delay, 2.36e-5, 4.1e-5, None),
                    seg(
                        "server_flight_1",
                        Class::Service,
                        0.00085,
                        0.0012,
                        Some(0.0008),
                    ),
                    seg(
                        "wait_client_flight_2",
                        Class::Delay,
                        0.000143_8,
                        0.000_21,
                        None,
                    ),
                    seg("response", Class::Service, 4.9e-5, 7.7e-5, Some(4.17e-5)),
                ],
            },
            Row {
                label: "empty kind".into(),
                connections: 3,
                segments: vec![],
            },
            Row {
                label: "TLS 1.2 resumed".into(),
                connections: 12,
                segments: vec![
                    seg("accept_queue", Class::Queue, 4.4416e-5, 9.1e-5, None),
                    seg(
                        "server_flight_1",
                        Class::Service,
                        0.00019362416666666665,
                        0.000281,
                        Some(0.00019362416666666665),
                    ),
                ],
            },
        ]
    }

    #[test]
    fn waterfall_fixed_input() {
        let rows = rows();
        let svg = waterfall("wf", &rows);
        let els = check_common(&svg);
        let rects = data_rects(&els, "data-stage");
        assert_eq!(rects.len(), 7, "one rect per stage of the non-empty rows");
        // Attributes read back exactly, row by row, stage by stage.
        let inputs: Vec<(&Row, &Segment)> = rows
            .iter()
            .flat_map(|r| r.segments.iter().map(move |s| (r, s)))
            .collect();
        for (e, (r, s)) in rects.iter().zip(&inputs) {
            assert_eq!(e.attr("data-row"), Some(r.label.as_str()));
            assert_eq!(e.attr("data-stage"), Some(s.stage.as_str()));
            assert_eq!(e.attr("data-class"), Some(s.class.name()));
            assert_eq!(num(e, "data-mean-s"), s.mean_s);
            assert_eq!(num(e, "data-p90-s"), s.p90_s);
            assert_eq!(
                e.attr("data-cpu-s").map(|v| v.parse::<f64>().unwrap()),
                s.cpu_s
            );
            assert_eq!(num(e, "data-connections"), r.connections as f64);
        }
        // Stages laid end to end: x of stage i+1 = x of stage i + its width.
        for row in ["TLS 1.3 <&> full", "TLS 1.2 resumed"] {
            let rs: Vec<&&El> = rects
                .iter()
                .filter(|e| e.attr("data-row") == Some(row))
                .collect();
            for p in rs.windows(2) {
                let end = num(p[0], "x") + num(p[0], "width");
                assert!(
                    (num(p[1], "x") - end).abs() < 0.051,
                    "{row}: {end} vs {}",
                    num(p[1], "x")
                );
                assert_eq!(num(p[0], "y"), num(p[1], "y"));
            }
            assert_eq!(
                num(rs[0], "x"),
                190.0,
                "every row starts at the axis origin"
            );
        }
        // Widths proportional to means: one shared axis.
        let w_sf1 = num(rects[2], "width");
        let w_resp = num(rects[4], "width");
        assert!((w_sf1 / w_resp - 0.00085 / 4.9e-5).abs() < 0.2 * 0.00085 / 4.9e-5);
        // Classes: fills, queue hatched via this chart's own pattern.
        assert_eq!(rects[0].attr("fill"), Some("url(#wf-queue)"));
        assert_eq!(rects[1].attr("fill"), Some(DELAY));
        assert_eq!(rects[2].attr("fill"), Some(SERVICE));
        // CPU bands and whiskers: one per stage with cpu / p90.
        assert_eq!(
            els.iter()
                .filter(|e| e.attr("class") == Some("cpu"))
                .count(),
            3
        );
        assert_eq!(
            els.iter()
                .filter(|e| e.attr("class") == Some("p90"))
                .count(),
            7
        );
        // Hover text.
        let titles: Vec<&str> = els
            .iter()
            .filter(|e| {
                e.name == "title"
                    && e.parent
                        .is_some_and(|p| els[p].attr("data-stage").is_some())
            })
            .map(|e| e.text.as_str())
            .collect();
        assert_eq!(
            titles[2],
            "server_flight_1 (service): mean 0.85 ms, p90 1.2 ms, on CPU 0.8 ms"
        );
        assert_eq!(
            titles[1],
            "wait_client_hello (delay): mean 23.6 µs, p90 41 µs"
        );
        // Labels (escaped in the source), n =, totals, legend, axis.
        assert!(svg.contains("TLS 1.3 &lt;&amp;&gt; full"));
        assert!(!svg.contains("TLS 1.3 <&> full"));
        let t = texts(&els);
        for want in [
            "TLS 1.3 <&> full",
            "TLS 1.2 resumed",
            "n = 35",
            "n = 12",
            "time (ms)",
            "service",
            "queue",
            "delay",
            "on CPU",
        ] {
            assert!(t.contains(&want), "no text {want:?} in {t:?}");
        }
        assert!(
            !t.contains(&"empty kind"),
            "rows without stages are skipped"
        );
        assert!(t.contains(&"1.19 ms"), "total mean of row 1: {t:?}");
        assert!(t.contains(&"0.238 ms"), "total mean of row 2: {t:?}");
        assert!(t.iter().any(|s| s.starts_with("p90")));
        // Ticks 0, 0.2, … 1.2 ms.
        for tick in ["0", "0.5", "1", "1.5"] {
            assert!(t.contains(&tick), "no tick {tick}");
        }
    }

    #[test]
    fn waterfall_empty_and_bad_values() {
        for rows in [
            vec![],
            vec![Row {
                label: "x".into(),
                connections: 0,
                segments: vec![],
            }],
        ] {
            let svg = waterfall("e", &rows);
            let els = check_common(&svg);
            assert!(texts(&els).contains(&"no data"));
            assert!(data_rects(&els, "data-stage").is_empty());
        }
        let rows = vec![Row {
            label: "bad".into(),
            connections: 1,
            segments: vec![
                seg(
                    "a",
                    Class::Service,
                    f64::NAN,
                    f64::INFINITY,
                    Some(f64::NEG_INFINITY),
                ),
                seg("b", Class::Queue, -1.0, -2.0, Some(-0.0)),
                seg("c", Class::Delay, 0.0, 0.0, None),
            ],
        }];
        let svg = waterfall("bad", &rows);
        let els = check_common(&svg);
        let rects = data_rects(&els, "data-stage");
        assert_eq!(rects.len(), 3);
        for r in &rects {
            assert_eq!(num(r, "data-mean-s"), 0.0);
            assert_eq!(num(r, "width"), 0.0);
        }
        // A single tiny stage: the axis in µs.
        let one = vec![Row {
            label: "one".into(),
            connections: 1,
            segments: vec![seg("s", Class::Service, 2.5e-4, 4e-4, None)],
        }];
        let els = check_common(&waterfall("one", &one));
        assert!(texts(&els).contains(&"time (µs)"));
        // Huge values: seconds, finite, still on the chart.
        let huge = vec![Row {
            label: "huge".into(),
            connections: 1,
            segments: vec![
                seg("s", Class::Service, 1e6, 1e300, None),
                seg("t", Class::Delay, 1e-9, 1e-9, None),
            ],
        }];
        let els = check_common(&waterfall("huge", &huge));
        assert!(texts(&els).contains(&"time (s)"));
        let r = data_rects(&els, "data-stage");
        assert!(num(r[0], "x") + num(r[0], "width") <= 680.0);
    }

    #[test]
    fn waterfall_output_is_bounded() {
        let row = Row {
            label: format!("TLS 1.3 full <{}>", "r".repeat(300)),
            connections: 1,
            segments: (0..100)
                .map(|i| seg(&format!("s{i}"), Class::Service, 1e-4, 2e-4, Some(5e-5)))
                .collect(),
        };
        let mut rows = vec![row; 100];
        for (i, r) in rows.iter_mut().enumerate() {
            r.label = if i == 0 {
                r.label.clone()
            } else {
                format!("TLS 1.3 full #{i}")
            };
        }
        let svg = waterfall("big", &rows);
        let els = check_common(&svg);
        assert_eq!(
            data_rects(&els, "data-stage").len(),
            MAX_ROWS * MAX_SEGMENTS
        );
        assert!(svg.len() < 250_000, "{} bytes", svg.len());
        let t = texts(&els);
        assert!(
            t.iter().any(|t| t.contains("84 more rows not shown")),
            "{t:?}"
        );
        assert!(t.iter().any(|t| t.contains("first 20 stages")), "{t:?}");
        assert!(
            t.iter().any(|t| t.ends_with("rrr…")),
            "long labels are clipped"
        );
    }

    fn dist() -> Distribution {
        Distribution {
            title: "server_flight_1 <full> & 'more'".into(),
            class: Class::Service,
            edges_s: vec![0.0005, 0.001, 0.002, 0.005, 0.01],
            counts: vec![3, 0, 5, 2, 1],
            markers: vec![("p50".into(), 0.0015), ("p90".into(), 0.004)],
        }
    }

    #[test]
    fn distribution_fixed_input() {
        let d = dist();
        let svg = distribution("d1", &d);
        let els = check_common(&svg);
        let bars = data_rects(&els, "data-count");
        assert_eq!(bars.len(), 4, "one bar per bucket with connections");
        let counts: Vec<f64> = bars.iter().map(|b| num(b, "data-count")).collect();
        assert_eq!(counts, [3.0, 5.0, 2.0, 1.0]);
        assert_eq!(num(bars[0], "data-lo-s"), 0.0);
        assert_eq!(num(bars[0], "data-hi-s"), 0.0005);
        assert_eq!(num(bars[1], "data-lo-s"), 0.001);
        assert_eq!(num(bars[1], "data-hi-s"), 0.002);
        // Left to right, not overlapping; equal ratios draw equally wide on a log axis.
        for p in bars.windows(2) {
            assert!(num(p[0], "x") + num(p[0], "width") <= num(p[1], "x") + 0.05);
        }
        assert!((num(bars[0], "width") - num(bars[1], "width")).abs() < 0.2);
        // The tallest bar reaches highest.
        assert!(num(bars[1], "height") > num(bars[0], "height"));
        assert_eq!(
            els.iter()
                .filter(|e| e.attr("class") == Some("marker"))
                .count(),
            2
        );
        let t = texts(&els);
        for want in [
            "p50 1.5 ms",
            "p90 4 ms",
            "time (ms, log scale)",
            "connections",
            "server_flight_1 <full> & 'more'",
            "1",
            "10",
            "percentiles",
        ] {
            assert!(t.contains(&want), "no text {want:?} in {t:?}");
        }
        assert!(svg.contains("server_flight_1 &lt;full&gt; &amp; &apos;more&apos;"));
        assert!(svg.contains(r#"viewBox="0 0 360 172""#));
        // A queue distribution uses its own hatch, distinct from another chart's.
        let q = distribution(
            "d2",
            &Distribution {
                class: Class::Queue,
                ..dist()
            },
        );
        check_common(&q);
        assert!(q.contains("url(#d2-queue)") && !q.contains("d1-queue"));
    }

    #[test]
    fn distribution_edge_cases() {
        let empty = Distribution {
            title: "t".into(),
            class: Class::Delay,
            edges_s: vec![],
            counts: vec![],
            markers: vec![],
        };
        let zero = Distribution {
            edges_s: vec![0.001],
            counts: vec![0],
            ..empty.clone()
        };
        for d in [&empty, &zero] {
            let els = check_common(&distribution("e", d));
            assert!(texts(&els).contains(&"no data"));
        }
        // A single bucket, a bad marker: µs axis.
        let one = Distribution {
            edges_s: vec![0.0001],
            counts: vec![7],
            markers: vec![
                ("bad".into(), f64::NAN),
                ("neg".into(), -1.0),
                ("p50".into(), 5e-5),
            ],
            ..empty.clone()
        };
        let els = check_common(&distribution("one", &one));
        assert_eq!(data_rects(&els, "data-count").len(), 1);
        assert_eq!(
            els.iter()
                .filter(|e| e.attr("class") == Some("marker"))
                .count(),
            1
        );
        assert!(texts(&els).contains(&"time (µs, log scale)"));
        // Bad edges fold into the next bucket; counts past the edges are one overflow bar.
        let bad = Distribution {
            edges_s: vec![0.001, f64::NAN, 0.0005, 0.004],
            counts: vec![1, 2, 3, 4, 5, 6],
            ..empty.clone()
        };
        let els = check_common(&distribution("bad", &bad));
        let b = data_rects(&els, "data-count");
        let counts: Vec<f64> = b.iter().map(|e| num(e, "data-count")).collect();
        assert_eq!(counts, [1.0, 9.0, 11.0]);
        assert_eq!(
            b[2].attr("data-lo-s"),
            Some("4e-3"),
            "the overflow starts at the last edge"
        );
        // The metrics' buckets (10 µs · 2^k and the rest), used from 0.32 to 5.12 ms only:
        // the axis spans those.
        let metrics = Distribution {
            edges_s: (0..23).map(|k| 10e-6 * f64::from(1u32 << k)).collect(),
            counts: (0..24).map(|k| u64::from((6..=9).contains(&k))).collect(),
            ..empty.clone()
        };
        let els = check_common(&distribution("m", &metrics));
        let b = data_rects(&els, "data-count");
        assert_eq!(b.len(), 4);
        assert_eq!(num(b[0], "x"), 46.0);
        assert_eq!(num(b[3], "x") + num(b[3], "width"), 348.0);
        assert_eq!(num(b[0], "data-lo-s"), 0.00032);
        let t = texts(&els);
        assert!(
            t.contains(&"1") && t.contains(&"2") && t.contains(&"time (ms, log scale)"),
            "{t:?}"
        );
        // Only the overflow has connections.
        let over = Distribution {
            edges_s: vec![0.001, 0.002],
            counts: vec![0, 0, 4],
            ..empty.clone()
        };
        let els = check_common(&distribution("o", &over));
        let b = data_rects(&els, "data-count");
        assert_eq!(b.len(), 1);
        assert_eq!(num(b[0], "data-lo-s"), 0.002);
        // Thousands of buckets over a huge range: merged, bounded.
        let many = Distribution {
            edges_s: (0..5000).map(|i| 1e-9 * 1.01f64.powi(i)).collect(),
            counts: vec![u64::MAX / 2; 5000],
            ..empty
        };
        let svg = distribution("many", &many);
        let els = check_common(&svg);
        let n = data_rects(&els, "data-count").len();
        assert!(n <= MAX_BUCKETS && n > 50, "{n}");
        assert!(svg.len() < 60_000);
    }

    fn lines() -> LineChart {
        LineChart {
            title: "Hit ratio <over> time".into(),
            x_label: "time (s)".into(),
            y_label: "hit ratio".into(),
            series: vec![
                Series {
                    label: "session id & ticket".into(),
                    points: vec![(0.0, 0.5), (10.0, 0.75), (20.0, 0.9)],
                    ..Default::default()
                },
                Series {
                    label: "psk".into(),
                    points: vec![(0.0, 0.1), (20.0, 0.2)],
                    ..Default::default()
                },
                Series {
                    label: "none".into(),
                    points: vec![],
                    ..Default::default()
                },
            ],
            marker: Some((12.0, "now: 12 users".into())),
            y_max: Some(1.0),
            y_percent: true,
            ..Default::default()
        }
    }

    #[test]
    fn line_chart_fixed_input() {
        let c = lines();
        let svg = line_chart("l1", &c);
        let els = check_common(&svg);
        let polys: Vec<&El> = els.iter().filter(|e| e.name == "polyline").collect();
        assert_eq!(polys.len(), 2, "one polyline per series with points");
        assert_eq!(polys[0].attr("data-series"), Some("session id & ticket"));
        assert_ne!(polys[0].attr("stroke"), polys[1].attr("stroke"));
        assert_ne!(
            polys[0].attr("stroke-dasharray"),
            polys[1].attr("stroke-dasharray")
        );
        assert_eq!(polys[0].attr("points").unwrap().split(' ').count(), 3);
        assert_eq!(
            els.iter()
                .filter(|e| e.attr("class") == Some("point"))
                .count(),
            5
        );
        // (20, 0.9) sits at 90% of the height of the plot, at its right end.
        let pts: Vec<(f64, f64)> = polys[0]
            .attr("points")
            .unwrap()
            .split(' ')
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        assert_eq!(pts[2].0, 620.0);
        assert!(pts[0].0 < pts[1].0 && pts[1].1 < pts[0].1);
        let t = texts(&els);
        for want in [
            "0%",
            "100%",
            "time (s)",
            "hit ratio",
            "now: 12 users",
            "session id & ticket",
            "psk",
            "none",
            "Hit ratio <over> time",
        ] {
            assert!(t.contains(&want), "no text {want:?} in {t:?}");
        }
        assert!(svg.contains("session id &amp; ticket"));
        assert_eq!(
            els.iter()
                .filter(|e| e.attr("class") == Some("marker"))
                .count(),
            1
        );
    }

    #[test]
    fn line_chart_edge_cases() {
        let empty = LineChart {
            series: vec![],
            marker: None,
            y_max: None,
            y_percent: false,
            ..lines()
        };
        let nopoints = LineChart {
            series: vec![Series {
                label: "a".into(),
                points: vec![(f64::NAN, 1.0), (1.0, f64::INFINITY)],
                ..Default::default()
            }],
            ..empty.clone()
        };
        for c in [&empty, &nopoints] {
            let els = check_common(&line_chart("e", c));
            assert!(texts(&els).contains(&"no data"));
        }
        // A single point, y negative: drawn at 0, with its marker.
        let single = LineChart {
            series: vec![Series {
                label: "a".into(),
                points: vec![(5.0, -3.0)],
                ..Default::default()
            }],
            ..empty.clone()
        };
        let els = check_common(&line_chart("s", &single));
        assert_eq!(els.iter().filter(|e| e.name == "polyline").count(), 1);
        assert_eq!(
            els.iter()
                .filter(|e| e.attr("class") == Some("point"))
                .count(),
            1
        );
        // Huge ranges, many points, many series: bounded and finite.
        let big = LineChart {
            series: (0..20)
                .map(|s| Series {
                    label: format!("s{s}"),
                    points: (0..10_000)
                        .map(|i| (i as f64 * 1e250, (i * s) as f64 * 1e290))
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            marker: Some((f64::INFINITY, "x".into())),
            ..empty
        };
        let svg = line_chart("big", &big);
        let els = check_common(&svg);
        let polys: Vec<&El> = els.iter().filter(|e| e.name == "polyline").collect();
        assert_eq!(polys.len(), MAX_SERIES);
        assert!(polys
            .iter()
            .all(|p| p.attr("points").unwrap().split(' ').count() == MAX_POINTS));
        assert!(svg.len() < 200_000, "{}", svg.len());
        assert!(texts(&els)
            .iter()
            .any(|t| t.contains("4 more series not shown")));
        // every series drawn looks like no other
        let looks: std::collections::BTreeSet<(Option<&str>, Option<&str>)> = polys
            .iter()
            .map(|p| (p.attr("stroke"), p.attr("stroke-dasharray")))
            .collect();
        assert_eq!(looks.len(), MAX_SERIES);
    }

    /// Curves and measured points, as `hstrace model --plot` draws them: a look per series
    /// chosen by the caller, points alone hollow and over the lines, each marker's data
    /// the point given; a taller plot and a note under it.
    #[test]
    fn line_chart_points_and_looks() {
        let look = |colour, pattern| Some(Look { colour, pattern });
        let c = LineChart {
            title: "web:443: mean response time".into(),
            x_label: "users N".into(),
            y_label: "mean response time (ms)".into(),
            series: vec![
                Series {
                    label: "p = 0.1: all".into(),
                    points: vec![(1.0, 5.5), (100.0, 6.25), (200.0, 7.375)],
                    look: look(6, 0),
                    draw: Draw::Line,
                },
                Series {
                    label: "p = 0.2: all".into(),
                    points: vec![(1.0, 8.5), (100.0, 10.0), (200.0, 13.0)],
                    look: look(6, 1),
                    draw: Draw::Line,
                },
                Series {
                    label: "measured: all".into(),
                    points: vec![(50.0, 6.0), (150.0, -1.0)],
                    look: look(6, 2),
                    draw: Draw::Points,
                },
            ],
            plot_height: Some(320.0),
            note: Some("think time 2 s".into()),
            ..Default::default()
        };
        let svg = line_chart("m", &c);
        let els = check_common(&svg);
        let polys: Vec<&El> = els.iter().filter(|e| e.name == "polyline").collect();
        assert_eq!(polys.len(), 2, "points alone have no line");
        assert_eq!(polys[0].attr("stroke"), Some(PALETTE[6]));
        assert_eq!(polys[1].attr("stroke"), Some(PALETTE[6]));
        assert_ne!(
            polys[0].attr("stroke-dasharray"),
            polys[1].attr("stroke-dasharray")
        );
        let points: Vec<&El> = els
            .iter()
            .filter(|e| e.attr("class") == Some("point"))
            .collect();
        assert_eq!(points.len(), 8);
        let measured: Vec<(f64, f64)> = points
            .iter()
            .filter(|p| p.attr("data-series") == Some("measured: all"))
            .map(|p| (num(p, "data-x"), num(p, "data-y")))
            .collect();
        assert_eq!(measured, [(50.0, 6.0), (150.0, 0.0)]);
        let last = points.last().unwrap();
        assert_eq!(last.attr("data-series"), Some("measured: all"), "on top");
        assert_eq!(last.attr("fill"), Some("white"), "hollow");
        assert_eq!(last.attr("stroke"), Some(PALETTE[6]));
        assert_eq!(
            points[0].attr("fill"),
            Some(PALETTE[6]),
            "a curve's: filled"
        );
        assert!(points
            .iter()
            .any(|p| (num(p, "data-x"), num(p, "data-y")) == (200.0, 7.375)));
        assert!(texts(&els).contains(&"think time 2 s"));
        // points alone are never thinned unsaid
        let many = LineChart {
            series: vec![Series {
                label: "measured".into(),
                points: (0..1000).map(|i| (f64::from(i), 1.0)).collect(),
                draw: Draw::Points,
                ..Default::default()
            }],
            ..Default::default()
        };
        let thinned = check_common(&line_chart("n", &many));
        assert!(
            texts(&thinned).contains(&"400 of the 1000 points of measured shown"),
            "{:?}",
            texts(&thinned)
        );
        // the taller plot: the axis from top to bottom spans 320 px
        let span = els
            .iter()
            .filter(|e| {
                e.name == "line" && e.attr("x1") == Some("64") && e.attr("x2") == Some("64")
            })
            .map(|e| num(e, "y2") - num(e, "y1"))
            .fold(0.0, f64::max);
        assert_eq!(span, 320.0);
    }

    fn bar_chart() -> Bars {
        Bars {
            title: "Resumption".into(),
            y_label: "handshakes".into(),
            members: vec!["offered".into(), "accepted".into()],
            groups: vec![
                ("session id <&>".into(), vec![30.0, 28.0]),
                ("ticket".into(), vec![12.0]),
            ],
        }
    }

    #[test]
    fn bars_fixed_input() {
        let b = bar_chart();
        let svg = bars("b1", &b);
        let els = check_common(&svg);
        let r = data_rects(&els, "data-value");
        assert_eq!(r.len(), 4);
        let vals: Vec<f64> = r.iter().map(|e| num(e, "data-value")).collect();
        assert_eq!(vals, [30.0, 28.0, 12.0, 0.0]);
        assert_eq!(r[0].attr("data-group"), Some("session id <&>"));
        assert_eq!(r[1].attr("data-member"), Some("accepted"));
        assert_ne!(r[0].attr("fill"), r[1].attr("fill"));
        assert_eq!(
            r[0].attr("fill"),
            r[2].attr("fill"),
            "a member looks the same in every group"
        );
        assert!(num(r[0], "height") > num(r[1], "height") && num(r[3], "height") == 0.0);
        let t = texts(&els);
        for want in [
            "30",
            "28",
            "12",
            "0",
            "offered",
            "accepted",
            "session id <&>",
            "ticket",
            "handshakes",
            "Resumption",
        ] {
            assert!(t.contains(&want), "no text {want:?} in {t:?}");
        }
        assert_eq!(
            els.iter()
                .filter(|e| e.attr("class") == Some("value"))
                .count(),
            4
        );
        assert!(svg.contains("session id &lt;&amp;&gt;"));
    }

    #[test]
    fn bars_edge_cases() {
        for b in [
            Bars {
                groups: vec![],
                ..bar_chart()
            },
            Bars {
                members: vec![],
                ..bar_chart()
            },
        ] {
            let els = check_common(&bars("e", &b));
            assert!(texts(&els).contains(&"no data"));
        }
        let bad = Bars {
            groups: vec![("g".into(), vec![f64::NAN, -5.0, 1e308])],
            ..bar_chart()
        };
        let els = check_common(&bars("bad", &bad));
        let vals: Vec<f64> = data_rects(&els, "data-value")
            .iter()
            .map(|e| num(e, "data-value"))
            .collect();
        assert_eq!(vals, [0.0, 0.0]);
        let many = Bars {
            members: (0..7).map(|i| format!("m{i}")).collect(),
            groups: (0..500)
                .map(|g| (format!("group {g}"), vec![g as f64; 7]))
                .collect(),
            ..bar_chart()
        };
        let svg = bars("many", &many);
        let els = check_common(&svg);
        assert!(data_rects(&els, "data-value").len() <= MAX_BARS);
        assert!(svg.len() < 200_000);
    }

    #[test]
    fn wrap_breaks_at_spaces_and_is_bounded() {
        assert!(wrap("", 20).is_empty());
        assert_eq!(
            wrap("think time 2 s; 1 processor", 16),
            ["think time 2 s;", "1 processor"]
        );
        assert_eq!(wrap("abcdefghijklmnopqrstuvwxyz", 10), ["abcdefghi…"]);
        let long = wrap(&"word ".repeat(100), 20);
        assert_eq!(long.len(), 4);
        assert!(long.iter().all(|l| l.chars().count() <= 20), "{long:?}");
        assert!(long[3].ends_with('…'));
    }

    #[test]
    fn helpers() {
        assert_eq!(
            esc(r#"<a href="x">&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&apos;&lt;/a&gt;"
        );
        assert_eq!(esc("a\u{1}b\nc"), "a\u{FFFD}b c");
        assert_eq!(sanitize_id("chart 1"), "chart_1");
        assert_eq!(sanitize_id("1x"), "c1x");
        assert_eq!(sanitize_id(""), "c");
        assert_eq!(P(12.345).to_string(), "12.3");
        assert_eq!(P(-0.04).to_string(), "0");
        assert_eq!(P(-1.25).to_string(), "-1.3");
        assert_eq!(P(f64::NAN).to_string(), "0");
        assert_eq!(P(7.0).to_string(), "7");
        for (raw, want) in [
            (0.3, 0.5),
            (1.0, 1.0),
            (1.1, 2.0),
            (3.0, 5.0),
            (7.0, 10.0),
            (0.0021, 0.005),
        ] {
            assert!(
                (nice_step(raw) - want).abs() < 1e-12,
                "{raw} -> {}",
                nice_step(raw)
            );
        }
        assert_eq!(zero_axis(1.19, 6), (1.2, 0.2));
        assert_eq!(zero_axis(0.0, 5), (1.0, 0.2));
        assert_eq!(span_axis(1.0, 50.0, 6), (0.0, 50.0, 10.0));
        assert_eq!(span_axis(5.0, 5.0, 6).0, 2.0);
        assert_eq!(sig3(0.85), "0.85");
        assert_eq!(sig3(1234.6), "1235");
        assert_eq!(sig3(2e7), "2e7");
        assert_eq!(sig3(1.234e-5), "1.23e-5");
        assert_eq!(tick_label(0.6000000000000001, 0.2), "0.6");
        assert_eq!(fmt_dur(0.00085), "0.85 ms");
        assert_eq!(fmt_dur(2.5e-5), "25 µs");
        assert_eq!(fmt_dur(1.5), "1.5 s");
        assert_eq!(
            Exact(0.00019362416666666665)
                .to_string()
                .parse::<f64>()
                .unwrap(),
            0.00019362416666666665
        );
        assert_eq!(
            thin((0..10).map(|i| (i as f64, 0.0)).collect(), 4)
                .iter()
                .map(|p| p.0)
                .collect::<Vec<_>>(),
            [0.0, 3.0, 6.0, 9.0]
        );
        assert_eq!(Class::from(crate::stage::StageClass::Queue), Class::Queue);
    }
}
