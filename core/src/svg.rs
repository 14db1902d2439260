//! The few SVG pieces duet's reports draw with (the trainer's accuracy plots, the simulator's
//! JCT and utilisation plots): a white canvas, plot axes with round ticks, numeric labels and
//! light grid lines (linear or log10), axis titles, a legend.
//!
//! Ticks fall on round values: linear steps of 1, 2 or 5 times a power of ten, the smallest
//! step that keeps the axis within its number of labels; log axes tick every decade and, lighter,
//! at 2..9 times it (labelled at 2 and 5 too where the axis spans at most two decades).

use std::fmt::Write as _;

/// A `width` x `height` canvas with a white background (close it with `</svg>`).
pub fn open(width: f64, height: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    )
}

/// One tick of an axis: where, and its label (`None` for a minor tick: a lighter grid line).
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    pub value: f64,
    pub label: Option<String>,
}

/// The values an axis spans, and how it spaces and labels them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    pub lo: f64,
    pub hi: f64,
    /// Log10 spacing (`lo` > 0).
    pub log: bool,
    /// Labels as percentages (0.25 reads `25%`).
    pub percent: bool,
}

impl Scale {
    /// `lo..hi` evenly spaced (an empty or reversed range becomes `lo..lo + 1`).
    pub fn linear(lo: f64, hi: f64) -> Scale {
        let hi = if hi > lo && hi.is_finite() {
            hi
        } else {
            lo + 1.0
        };
        Scale {
            lo,
            hi,
            log: false,
            percent: false,
        }
    }

    /// `lo..hi` in log10 spacing, widened to whole decades (at least one); `lo` must be > 0
    /// (smaller values are taken as 1e-12).
    pub fn log(lo: f64, hi: f64) -> Scale {
        let lo = lo.max(1e-12);
        let a = decade_floor(lo);
        let b = decade_ceil(hi.max(lo)).max(a + 1);
        Scale {
            lo: 10f64.powi(a),
            hi: 10f64.powi(b),
            log: true,
            percent: false,
        }
    }

    /// A log scale where the positive values span at least two decades (`hi / lo >= 100`),
    /// otherwise a linear one from zero.
    pub fn auto(lo: f64, hi: f64) -> Scale {
        if lo > 0.0 && hi / lo >= 100.0 {
            Scale::log(lo, hi)
        } else {
            Scale::linear(lo.min(0.0), hi)
        }
    }

    /// The same scale labelled in percent.
    pub fn percent(self) -> Scale {
        Scale {
            percent: true,
            ..self
        }
    }

    /// Where `v` lies, 0 at `lo` and 1 at `hi` (outside for values outside the range).
    pub fn fraction(&self, v: f64) -> f64 {
        if self.log {
            (v.max(1e-300).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    /// The axis's ticks: at most `max` labelled ones on a linear axis (at least 2 are asked
    /// for); every decade on a log one, with minor ticks between.
    pub fn ticks(&self, max: usize) -> Vec<Tick> {
        if self.log {
            return log_ticks(self.lo, self.hi, self.percent);
        }
        let step = linear_step(self.lo, self.hi, max.max(2));
        let first = (self.lo / step - 1e-9).ceil() as i64;
        let last = (self.hi / step + 1e-9).floor() as i64;
        let decimals = decimals(step * if self.percent { 100.0 } else { 1.0 });
        (first..=last)
            .map(|k| {
                #[allow(clippy::cast_precision_loss)]
                let value = k as f64 * step;
                Tick {
                    value,
                    label: Some(label(value, decimals, self.percent)),
                }
            })
            .collect()
    }
}

fn decade_floor(v: f64) -> i32 {
    #[allow(clippy::cast_possible_truncation)]
    let d = (v.log10() + 1e-9).floor() as i32;
    d
}

fn decade_ceil(v: f64) -> i32 {
    #[allow(clippy::cast_possible_truncation)]
    let d = (v.log10() - 1e-9).ceil() as i32;
    d
}

/// The smallest step of 1, 2 or 5 times a power of ten with at most `max` multiples in
/// `lo..=hi`.
fn linear_step(lo: f64, hi: f64, max: usize) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let raw = (hi - lo) / (max - 1) as f64;
    let mut step = 10f64.powi(decade_floor(raw) - 1);
    loop {
        for m in [1.0, 2.0, 5.0] {
            let s = step * m;
            let count = (hi / s + 1e-9).floor() - (lo / s - 1e-9).ceil() + 1.0;
            #[allow(clippy::cast_precision_loss)]
            if count <= max as f64 {
                return s;
            }
        }
        step *= 10.0;
    }
}

/// Decimals that show a multiple of `step` exactly.
fn decimals(step: f64) -> usize {
    let mut d = 0;
    while d < 12 && ((step * 10f64.powi(d)).round() - step * 10f64.powi(d)).abs() > 1e-6 {
        d += 1;
    }
    usize::try_from(d).unwrap_or(0)
}

fn label(value: f64, decimals: usize, percent: bool) -> String {
    let v = if percent { value * 100.0 } else { value };
    // No `-0`.
    let v = if v.abs() < 1e-12 { 0.0 } else { v };
    if percent {
        format!("{v:.decimals$}%")
    } else {
        format!("{v:.decimals$}")
    }
}

/// Every decade of `lo..=hi` labelled, 2..9 times each decade as minor ticks (labelled at 2
/// and 5 where the range spans at most two decades). Labels are plain numbers between 0.001
/// and 10,000 and powers of ten (`10⁵`) where any decade lies outside.
fn log_ticks(lo: f64, hi: f64, percent: bool) -> Vec<Tick> {
    let (a, b) = (decade_floor(lo), decade_ceil(hi));
    let scale = if percent { 100.0 } else { 1.0 };
    let plain = (10f64.powi(a) * scale) >= 1e-3 - 1e-15 && (10f64.powi(b) * scale) <= 1e4 + 1e-9;
    let few = b - a <= 2;
    let show = |v: f64| {
        let shown = v * scale;
        let text = if plain {
            let d = decimals(shown);
            format!("{shown:.d$}")
        } else {
            power_of_ten(shown)
        };
        if percent { format!("{text}%") } else { text }
    };
    let mut ticks = Vec::new();
    for d in a..=b {
        for m in 1..10 {
            let value = f64::from(m) * 10f64.powi(d);
            if value < lo * (1.0 - 1e-9) || value > hi * (1.0 + 1e-9) {
                continue;
            }
            let labelled = m == 1 || (few && (m == 2 || m == 5));
            ticks.push(Tick {
                value,
                label: labelled.then(|| show(value)),
            });
        }
    }
    ticks
}

/// `m × 10ⁿ` written with superscript digits (`10⁴`, `2×10⁴`).
fn power_of_ten(v: f64) -> String {
    let n = decade_floor(v);
    let m = (v / 10f64.powi(n)).round();
    let sup: String = n
        .to_string()
        .chars()
        .map(|c| match c {
            '-' => '⁻',
            '0' => '⁰',
            '1' => '¹',
            '2' => '²',
            '3' => '³',
            '4' => '⁴',
            '5' => '⁵',
            '6' => '⁶',
            '7' => '⁷',
            '8' => '⁸',
            _ => '⁹',
        })
        .collect();
    if (m - 1.0).abs() < 1e-9 {
        format!("10{sup}")
    } else {
        format!("{m}×10{sup}")
    }
}

const GRID: &str = "#e6e6e6";
const MINOR_GRID: &str = "#f3f3f3";

/// A plot area inside a canvas and the scales of its two axes.
#[derive(Debug, Clone, PartialEq)]
pub struct Axes {
    /// The plot area: left, top, right and bottom edges in pixels.
    pub left: f64,
    pub top: f64,
    pub right: f64,
    pub bottom: f64,
    pub x: Scale,
    pub y: Scale,
}

impl Axes {
    /// A plot area in a `w` x `h` canvas leaving room for tick labels and axis titles around it.
    pub fn new(w: f64, h: f64, x: Scale, y: Scale) -> Axes {
        Axes {
            left: 70.0,
            top: 20.0,
            right: w - 20.0,
            bottom: h - 50.0,
            x,
            y,
        }
    }

    /// The horizontal pixel of `v`, kept inside the area.
    pub fn px(&self, v: f64) -> f64 {
        self.left + self.x.fraction(v).clamp(0.0, 1.0) * (self.right - self.left)
    }

    /// The vertical pixel of `v`, kept inside the area.
    pub fn py(&self, v: f64) -> f64 {
        self.bottom - self.y.fraction(v).clamp(0.0, 1.0) * (self.bottom - self.top)
    }

    fn x_ticks(&self) -> Vec<Tick> {
        // About one label per 80 pixels.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let max = ((self.right - self.left) / 80.0) as usize + 1;
        self.x.ticks(max)
    }

    fn y_ticks(&self) -> Vec<Tick> {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let max = ((self.bottom - self.top) / 45.0) as usize + 1;
        self.y.ticks(max)
    }

    /// Light grid lines at every tick; drawn first, under the data.
    pub fn grid(&self, svg: &mut String) {
        for t in self.x_ticks() {
            let x = self.px(t.value);
            let colour = if t.label.is_some() { GRID } else { MINOR_GRID };
            let _ = writeln!(
                svg,
                "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"{colour}\"/>",
                self.top, self.bottom
            );
        }
        for t in self.y_ticks() {
            let y = self.py(t.value);
            let colour = if t.label.is_some() { GRID } else { MINOR_GRID };
            let _ = writeln!(
                svg,
                "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"{colour}\"/>",
                self.left, self.right
            );
        }
    }

    /// The area's border, tick marks with their labels, and the axis titles (`x` under the
    /// area, `y` along its left side); drawn after the data.
    pub fn frame(&self, svg: &mut String, x: &str, y: &str) {
        let _ = writeln!(
            svg,
            "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>",
            self.left,
            self.top,
            self.right - self.left,
            self.bottom - self.top
        );
        for t in self.x_ticks() {
            let px = self.px(t.value);
            let len = if t.label.is_some() { 5.0 } else { 3.0 };
            let _ = writeln!(
                svg,
                "<line x1=\"{px:.1}\" y1=\"{}\" x2=\"{px:.1}\" y2=\"{}\" stroke=\"black\"/>",
                self.bottom,
                self.bottom + len
            );
            if let Some(l) = &t.label {
                let _ = writeln!(
                    svg,
                    "<text x=\"{px:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                    self.bottom + 18.0,
                    escape(l)
                );
            }
        }
        for t in self.y_ticks() {
            let py = self.py(t.value);
            let len = if t.label.is_some() { 5.0 } else { 3.0 };
            let _ = writeln!(
                svg,
                "<line x1=\"{}\" y1=\"{py:.1}\" x2=\"{}\" y2=\"{py:.1}\" stroke=\"black\"/>",
                self.left - len,
                self.left
            );
            if let Some(l) = &t.label {
                let _ = writeln!(
                    svg,
                    "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                    self.left - 8.0,
                    py + 4.0,
                    escape(l)
                );
            }
        }
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            f64::midpoint(self.left, self.right),
            self.bottom + 38.0,
            escape(x)
        );
        let cy = f64::midpoint(self.top, self.bottom);
        let _ = writeln!(
            svg,
            "<text x=\"16\" y=\"{cy:.1}\" transform=\"rotate(-90 16 {cy:.1})\" text-anchor=\"middle\">{}</text>",
            escape(y)
        );
    }
}

/// One coloured square and label per `(colour, label)`, downwards from `(x, y)`, on a white
/// box so that grid lines and data do not run through the text.
pub fn legend(svg: &mut String, x: f64, y: f64, entries: &[(&str, &str)]) {
    let widest = entries
        .iter()
        .map(|(_, l)| l.chars().count())
        .max()
        .unwrap_or(0);
    #[allow(clippy::cast_precision_loss)]
    let (bw, bh) = (
        24.0 + 7.0 * widest as f64,
        16.0 * entries.len() as f64 + 6.0,
    );
    let _ = writeln!(
        svg,
        "<rect x=\"{}\" y=\"{}\" width=\"{bw}\" height=\"{bh}\" fill=\"white\" fill-opacity=\"0.85\" stroke=\"#bbb\"/>",
        x - 6.0,
        y - 15.0
    );
    for (i, (colour, label)) in entries.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let yy = y + 16.0 * i as f64;
        let _ = writeln!(
            svg,
            "<rect x=\"{x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{colour}\"/><text x=\"{}\" y=\"{yy}\">{}</text>",
            yy - 9.0,
            x + 14.0,
            escape(label)
        );
    }
}

/// Text made safe inside an SVG element.
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(ticks: &[Tick]) -> Vec<&str> {
        ticks.iter().filter_map(|t| t.label.as_deref()).collect()
    }

    #[test]
    fn linear_ticks_are_round_steps_within_the_range() {
        let t = Scale::linear(0.0, 1.11).ticks(7);
        assert_eq!(
            labels(&t),
            ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"],
            "{t:?}"
        );
        assert!((t[3].value - 0.6).abs() < 1e-12);
        // Fewer labels allowed: a coarser 1-2-5 step.
        assert_eq!(
            labels(&Scale::linear(0.0, 1.11).ticks(3)),
            ["0.0", "0.5", "1.0"]
        );
        // Neither end need be round; negative values keep their sign, zero none.
        assert_eq!(
            labels(&Scale::linear(-0.3, 0.45).ticks(8)),
            ["-0.3", "-0.2", "-0.1", "0.0", "0.1", "0.2", "0.3", "0.4"]
        );
        assert_eq!(
            labels(&Scale::linear(40.9, 65.3).ticks(7)),
            ["45", "50", "55", "60", "65"]
        );
        assert_eq!(
            labels(&Scale::linear(0.0, 12_000.0).ticks(6)),
            ["0", "5000", "10000"]
        );
    }

    #[test]
    fn percent_labels_scale_the_values() {
        let t = Scale::linear(0.0, 0.5).percent().ticks(6);
        assert_eq!(labels(&t), ["0%", "10%", "20%", "30%", "40%", "50%"]);
        assert_eq!(
            labels(&Scale::linear(0.0, 0.05).percent().ticks(6)),
            ["0%", "1%", "2%", "3%", "4%", "5%"]
        );
    }

    #[test]
    fn log_ticks_label_decades_and_mark_what_lies_between() {
        let s = Scale::log(0.8, 3000.0);
        assert_eq!((s.lo, s.hi), (0.1, 10_000.0));
        let t = s.ticks(7);
        assert_eq!(labels(&t), ["0.1", "1", "10", "100", "1000", "10000"]);
        // 1..9 times each of the five decades, then the last one's end.
        assert_eq!(t.len(), 5 * 9 + 1);
        assert!(
            t.iter()
                .any(|t| (t.value - 3000.0).abs() < 1e-9 && t.label.is_none())
        );
        // Ticks at the data's own range, not widened: only what lies inside.
        let inside = log_ticks(0.8, 3000.0, false);
        assert_eq!(labels(&inside), ["1", "10", "100", "1000"]);
        let ends = (inside[0].value, inside[inside.len() - 1].value);
        assert!(
            (ends.0 - 0.8).abs() < 1e-12 && (ends.1 - 3000.0).abs() < 1e-9,
            "{ends:?}"
        );
        // Two decades or fewer: 2 and 5 labelled as well.
        assert_eq!(
            labels(&Scale::log(1.0, 100.0).ticks(7)),
            ["1", "2", "5", "10", "20", "50", "100"]
        );
        // Decades beyond 10,000: powers of ten throughout.
        assert_eq!(
            labels(&Scale::log(1.0, 2e6).ticks(7)),
            ["10⁰", "10¹", "10²", "10³", "10⁴", "10⁵", "10⁶", "10⁷"]
        );
        assert_eq!(power_of_ten(2e-3), "2×10⁻³");
    }

    #[test]
    fn auto_picks_log_only_where_values_span_decades() {
        assert!(Scale::auto(2.0, 5000.0).log);
        assert!(!Scale::auto(2.0, 150.0).log);
        assert!(!Scale::auto(0.0, 5000.0).log);
        assert_eq!(Scale::auto(2.0, 150.0).lo, 0.0);
    }

    #[test]
    fn axes_map_values_into_their_area() {
        let a = Axes::new(
            500.0,
            400.0,
            Scale::linear(0.0, 2.0),
            Scale::log(1.0, 1000.0),
        );
        assert_eq!(a.px(0.0), a.left);
        assert_eq!(a.px(2.0), a.right);
        assert_eq!(a.px(9.0), a.right, "clamped");
        assert_eq!(a.py(1.0), a.bottom);
        assert!((a.py(10f64.powf(1.5)) - f64::midpoint(a.top, a.bottom)).abs() < 1e-9);
    }

    #[test]
    fn pieces_make_one_well_formed_picture() {
        let mut svg = open(300.0, 200.0);
        let axes = Axes::new(
            300.0,
            200.0,
            Scale::linear(0.0, 1.0),
            Scale::linear(0.0, 1.0),
        );
        axes.grid(&mut svg);
        axes.frame(&mut svg, "time", "a < b");
        legend(&mut svg, 20.0, 20.0, &[("#000", "x & y")]);
        svg.push_str("</svg>\n");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a &lt; b") && svg.contains("x &amp; y"));
        // Background, frame, legend box and one legend square.
        assert_eq!(svg.matches("<rect").count(), 4);
        // Labelled ticks on both axes, each with a grid line and a tick mark.
        let x_labels = axes.x_ticks().len();
        let y_labels = axes.y_ticks().len();
        assert!(x_labels >= 3 && y_labels >= 3, "{x_labels} {y_labels}");
        assert_eq!(svg.matches("<line").count(), 2 * (x_labels + y_labels));
        assert!(svg.contains(">0.5</text>") || svg.contains(">0.4</text>"));
    }
}
