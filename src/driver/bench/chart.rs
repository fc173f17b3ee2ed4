//! The SVG chart of `collage bench --plot`.

use super::report::Report;
use crate::pipeline::placements::label_of;

/// A placement's name on the chart (short enough to sit under its bar).
fn chart_label(name: &str, native: &str) -> String {
    match name.split_once(':') {
        _ if name == "collage" => "Collage plan".to_string(),
        _ if name == "tvm" => format!("{native} alone"),
        _ if name == crate::pipeline::onnxruntime::NAME => "ONNX Runtime".to_string(),
        Some(("greedy", t)) => format!("greedy {t}"),
        _ => format!("{name} + {native}"),
    }
}

/// A latency in milliseconds with three significant digits or more.
fn value_label(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

/// The comparison as an SVG bar chart: each placement's median latency with its spread, and its
/// estimated cost as a marker.
pub(super) fn plot_svg(rep: &Report<'_>) -> String {
    use plotters::prelude::*;
    let bars: Vec<(String, f64, f64, Option<f64>, bool)> = rep
        .rows
        .iter()
        .filter_map(|r| {
            let t = r.timing(rep.rows)?;
            Some((
                chart_label(&r.name, &rep.native()),
                t.seconds * 1e3,
                t.spread * t.seconds * 1e3,
                r.estimated.map(|e| e * 1e3),
                r.name == "collage",
            ))
        })
        .collect();
    let model = rep
        .req
        .model
        .file_name()
        .map_or_else(String::new, |f| f.to_string_lossy().to_string());
    let title = match rep.speedup {
        Some(sp) => format!(
            "{model}, {} thread(s): Collage x{:.2} over the best baseline ({})",
            rep.threads,
            sp.baseline_seconds / sp.collage_seconds,
            label_of(&sp.baseline, &rep.native())
        ),
        None => format!("{model}, {} thread(s): end-to-end latency", rep.threads),
    };
    let mut svg = String::new();
    let top = bars
        .iter()
        .map(|b| (b.1 + b.2).max(b.3.unwrap_or(0.0)))
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.4;
    let n = bars.len().max(1);
    {
        let root =
            SVGBackend::with_string(&mut svg, (160 * n as u32 + 200, 560)).into_drawing_area();
        let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
            root.fill(&WHITE)?;
            let mut chart = ChartBuilder::on(&root)
                .caption(&title, ("sans-serif", 20))
                .margin(16)
                .x_label_area_size(60)
                .y_label_area_size(70)
                .build_cartesian_2d((0..n - 1).into_segmented(), 0.0..top)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .y_desc("end-to-end latency (ms), lower is better")
                .x_labels(n)
                .x_label_formatter(&|v| match v {
                    SegmentValue::CenterOf(i) => {
                        bars.get(*i).map_or(String::new(), |b| b.0.clone())
                    }
                    _ => String::new(),
                })
                .draw()?;
            let collage = RGBColor(0x2a, 0x7a, 0xb9);
            let other = RGBColor(0xa0, 0xa0, 0xa0);
            chart
                .draw_series(bars.iter().enumerate().map(|(i, b)| {
                    let color = if b.4 { collage } else { other };
                    let mut r = Rectangle::new(
                        [
                            (SegmentValue::Exact(i), 0.0),
                            (SegmentValue::Exact(i + 1), b.1),
                        ],
                        color.filled(),
                    );
                    r.set_margin(0, 0, 20, 20);
                    r
                }))?
                .label("measured latency (median)")
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], other.filled())
                });
            // The spread: a whisker with caps (no marker in the middle).
            let whisker = BLACK.stroke_width(2);
            chart
                .draw_series(bars.iter().enumerate().map(|(i, b)| {
                    PathElement::new(
                        vec![
                            (SegmentValue::CenterOf(i), (b.1 - b.2).max(0.0)),
                            (SegmentValue::CenterOf(i), b.1 + b.2),
                        ],
                        whisker,
                    )
                }))?
                .label("spread (median absolute deviation)")
                .legend(|(x, y)| {
                    PathElement::new(vec![(x, y - 6), (x, y + 6)], BLACK.stroke_width(2))
                });
            for (i, b) in bars.iter().enumerate() {
                for v in [(b.1 - b.2).max(0.0), b.1 + b.2] {
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((SegmentValue::CenterOf(i), v))
                            + PathElement::new(vec![(-6, 0), (6, 0)], whisker),
                    ))?;
                }
            }
            // The median above each bar.
            let value_style = ("sans-serif", 14).into_font().color(&BLACK).pos(
                plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Bottom,
                ),
            );
            // Above the whisker, or above the estimate's marker when that is higher.
            chart.draw_series(bars.iter().enumerate().map(|(i, b)| {
                let (y, dy) = match b.3 {
                    Some(e) if e > b.1 + b.2 => (e, -14),
                    _ => (b.1 + b.2, -6),
                };
                EmptyElement::at((SegmentValue::CenterOf(i), y))
                    + Text::new(value_label(b.1), (0, dy), value_style.clone())
            }))?;
            chart
                .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                    b.3.map(|e| {
                        TriangleMarker::new((SegmentValue::CenterOf(i), e), 8, RED.filled())
                    })
                }))?
                .label("estimated (sum of measured candidate costs)")
                .legend(|(x, y)| TriangleMarker::new((x + 7, y), 6, RED.filled()));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
            root.present()?;
            Ok(())
        };
        if let Err(e) = draw() {
            drop(e);
        }
    }
    svg
}
