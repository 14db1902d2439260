//! The few SVG pieces duet's reports draw with (the trainer's accuracy plots, the simulator's
//! JCT and utilisation plots): a white canvas, the plot frame, axis titles, a legend.

use std::fmt::Write as _;

/// A `width` x `height` canvas with a white background (close it with `</svg>`).
pub fn open(width: f64, height: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    )
}

/// The plot area's border: a `w` x `h` figure with margin `m`.
pub fn frame(svg: &mut String, w: f64, h: f64, m: f64) {
    let _ = writeln!(
        svg,
        "<rect x=\"{m}\" y=\"{m}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>",
        w - 2.0 * m,
        h - 2.0 * m
    );
}

/// The horizontal axis title under a `w` x `h` figure and the vertical one along its left side.
pub fn axis_titles(svg: &mut String, w: f64, h: f64, x: &str, y: &str) {
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
        w / 2.0,
        h - 15.0,
        escape(x)
    );
    let _ = writeln!(
        svg,
        "<text x=\"15\" y=\"{}\" transform=\"rotate(-90 15 {})\" text-anchor=\"middle\">{}</text>",
        h / 2.0,
        h / 2.0,
        escape(y)
    );
}

/// One coloured square and label per `(colour, label)`, downwards from `(x, y)`.
pub fn legend(svg: &mut String, x: f64, y: f64, entries: &[(&str, &str)]) {
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

    #[test]
    fn pieces_make_one_well_formed_picture() {
        let mut svg = open(100.0, 80.0);
        frame(&mut svg, 100.0, 80.0, 10.0);
        axis_titles(&mut svg, 100.0, 80.0, "time", "a < b");
        legend(&mut svg, 20.0, 20.0, &[("#000", "x & y")]);
        svg.push_str("</svg>\n");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert!(svg.contains("a &lt; b") && svg.contains("x &amp; y"));
        assert_eq!(svg.matches("<rect").count(), 3);
    }
}
