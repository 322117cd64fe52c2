//! A PNG plot of latency per change index, one series per operation.

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
pub(crate) fn latency_png(path: &Path, title: &str, series: &[Series<'_>]) -> Result<()> {
    register_font()?;
    let mut rgb = vec![255u8; (WIDTH * HEIGHT * 3) as usize];
    draw(&mut rgb, title, series).map_err(|e| anyhow!("drawing the plot: {e}"))?;
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut enc = png::Encoder::new(std::io::BufWriter::new(file), WIDTH, HEIGHT);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header()?;
    writer.write_image_data(&rgb)?;
    writer.finish()?;
    Ok(())
}

fn draw(
    rgb: &mut [u8],
    title: &str,
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
        .y_desc("ms from rename/unlink to the new state over HTTPS")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style(("sans-serif", 14))
        .draw()?;
    let colors = [
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
    ];
    for (idx, s) in series.iter().enumerate() {
        let color = colors[idx % colors.len()];
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
        latency_png(&path, "test", &series).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
    }
}
