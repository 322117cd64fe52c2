//! PNG plots: latency per change index (propagation), and values per category with one
//! line per series (traffic).

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, Result, anyhow};
use plotters::prelude::*;

/// The font read at run time (plotters' ab_glyph text needs one registered).
pub(crate) const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

const WIDTH: u32 = 1200;
const HEIGHT: u32 = 700;

/// One series: its name and (change index, latency ms or None when it timed out).
pub(crate) struct Series<'a> {
    pub(crate) name: &'a str,
    pub(crate) points: Vec<(usize, Option<f64>)>,
}

fn register_font() -> Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = std::fs::read(FONT).map_err(|e| format!("reading {FONT}: {e}"))?;
        // plotters keeps fonts for the life of the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{FONT} is not a usable font"))
    })
    .clone()
    .map_err(|e| anyhow!(e))
}

/// Draws `series` to a PNG at `path`. Timed-out changes are drawn as crosses on the top
/// edge.
pub(crate) fn latency_png(
    path: &Path,
    title: &str,
    y_desc: &str,
    series: &[Series<'_>],
) -> Result<()> {
    register_font()?;
    let mut rgb = vec![255u8; (WIDTH * HEIGHT * 3) as usize];
    draw(&mut rgb, title, y_desc, series).map_err(|e| anyhow!("drawing the plot: {e}"))?;
    write_png(path, &rgb)
}

fn write_png(path: &Path, rgb: &[u8]) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), WIDTH, HEIGHT);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header()?;
    writer.write_image_data(rgb)?;
    writer.finish()?;
    Ok(())
}

/// One line of a category chart: a value per category (None: no point).
pub(crate) struct CategorySeries {
    pub(crate) name: String,
    pub(crate) values: Vec<Option<f64>>,
}

/// The y axis of a category chart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum YScale {
    /// From 0, linear.
    Linear,
    /// Powers of ten (values ≤ 0 are not drawn).
    Log,
}

/// Draws one line per series over evenly spaced categories `labels` to a PNG at `path`.
pub(crate) fn category_png(
    path: &Path,
    title: &str,
    axes: (&str, &str, YScale),
    labels: &[String],
    series: &[CategorySeries],
) -> Result<()> {
    register_font()?;
    let mut rgb = vec![255u8; (WIDTH * HEIGHT * 3) as usize];
    draw_categories(&mut rgb, title, axes, labels, series)
        .map_err(|e| anyhow!("drawing the chart: {e}"))?;
    write_png(path, &rgb)
}

fn draw_categories(
    rgb: &mut [u8],
    title: &str,
    (x_desc, y_desc, scale): (&str, &str, YScale),
    labels: &[String],
    series: &[CategorySeries],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::with_buffer(rgb, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    // On a log scale the chart plots log10(v) and labels ticks with 10^y.
    let map = |v: f64| match scale {
        YScale::Linear => Some(v),
        YScale::Log => (v > 0.0).then(|| v.log10()),
    };
    let mapped: Vec<f64> = series
        .iter()
        .flat_map(|s| s.values.iter().flatten().copied())
        .filter_map(map)
        .collect();
    let top = mapped.iter().copied().fold(f64::MIN, f64::max);
    let bottom = mapped.iter().copied().fold(f64::MAX, f64::min);
    let (y_min, y_max) = match scale {
        YScale::Linear if top > 0.0 => (0.0, top * 1.15),
        YScale::Linear => (0.0, 1.0),
        YScale::Log if !mapped.is_empty() => (bottom.floor(), top.ceil().max(bottom.floor() + 1.0)),
        YScale::Log => (0.0, 1.0),
    };
    let n = labels.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), y_min..y_max)?;
    let label_of = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels(n)
        .x_label_formatter(&label_of)
        .y_label_formatter(&|y| match scale {
            YScale::Linear => format!("{y:.0}"),
            YScale::Log => {
                // Three significant digits: ticks between powers of ten (1.58, 2.51, ...)
                // rounded to whole numbers read as 2, 3, ... and misplaced every point.
                let v = 10f64.powf(*y);
                if v >= 100.0 {
                    format!("{v:.0}")
                } else if v >= 10.0 {
                    format!("{v:.1}")
                } else if v >= 1.0 {
                    format!("{v:.2}")
                } else {
                    format!("{v:.3}")
                }
            }
        })
        .label_style(("sans-serif", 14))
        .draw()?;
    for (idx, s) in series.iter().enumerate() {
        let color = COLORS[idx % COLORS.len()];
        let pts: Vec<(f64, f64)> = s
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.and_then(map).map(|v| (i as f64, v)))
            .collect();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}

// Eight distinct colours: `weir-bench scale` draws six series on one chart.
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];

fn draw(
    rgb: &mut [u8],
    title: &str,
    y_desc: &str,
    series: &[Series<'_>],
) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::with_buffer(rgb, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0 + 1))
        .max()
        .unwrap_or(1);
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().filter_map(|p| p.1))
        .fold(0.0f64, f64::max);
    let y_max = if top > 0.0 { top * 1.1 } else { 1.0 };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..(n.max(2) - 1) as f64, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("change index")
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style(("sans-serif", 14))
        .draw()?;
    for (idx, s) in series.iter().enumerate() {
        let color = COLORS[idx % COLORS.len()];
        let ok: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter_map(|&(x, y)| y.map(|y| (x as f64, y)))
            .collect();
        chart
            .draw_series(LineSeries::new(ok.iter().copied(), color.stroke_width(2)))?
            .label(s.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart.draw_series(ok.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
        chart.draw_series(
            s.points
                .iter()
                .filter(|p| p.1.is_none())
                .map(|&(x, _)| Cross::new((x as f64, y_max), 6, color.stroke_width(2))),
        )?;
    }
    chart
        .configure_series_labels()
        .label_font(("sans-serif", 16))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_png() {
        if !Path::new(FONT).exists() {
            // The plot needs the system font; the bench reports the missing font instead.
            assert!(register_font().is_err());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.png");
        let series = [
            Series {
                name: "add",
                points: vec![(0, Some(3.0)), (1, Some(5.0)), (2, None)],
            },
            Series {
                name: "remove",
                points: vec![(0, Some(1.0)), (1, Some(2.0)), (2, Some(1.5))],
            },
        ];
        latency_png(&path, "test", "ms", &series).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");

        let cat = dir.path().join("c.png");
        let labels: Vec<String> = ["1", "16", "64"].map(String::from).to_vec();
        let lines = [CategorySeries {
            name: "weir".into(),
            values: vec![Some(10.0), None, Some(30.0)],
        }];
        category_png(&cat, "t", ("x", "y", YScale::Linear), &labels, &lines).unwrap();
        assert_eq!(&std::fs::read(&cat).unwrap()[1..4], b"PNG");
        category_png(&cat, "t", ("x", "y", YScale::Log), &labels, &lines).unwrap();
        assert_eq!(&std::fs::read(&cat).unwrap()[1..4], b"PNG");
    }
}
