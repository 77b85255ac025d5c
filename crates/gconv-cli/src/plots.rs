//! Charts, each as PNG and SVG: `gconv validate`'s (the efficiency histogram, predicted
//! against measured time, efficiency by problem class) and `gconv net report`'s.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::Context;
use gconv_heuristic::validate::{by_class, summarize, Outcome};
use gconv_net::TuningFile;
use plotters::coord::Shift;
use plotters::prelude::*;

/// DejaVu Sans (its licence beside it): the charts render the same on every machine, with no
/// system font needed.
const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const SIZE: (u32, u32) = (900, 600);
/// Points of the scatter at most, evenly taken: enough to see the spread, small as SVG.
const MAX_POINTS: usize = 5000;

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .unwrap_or_else(|_| panic!("the embedded font is a valid TrueType font"));
    });
}

/// The charts, by file name.
const CHARTS: [&str; 3] = ["efficiency-histogram", "predicted-vs-measured", "efficiency-by-class"];

fn draw<DB: DrawingBackend>(chart: &str, area: &DrawingArea<DB, Shift>, outcomes: &[Outcome]) -> anyhow::Result<()> {
    match chart {
        "efficiency-histogram" => histogram(area, outcomes),
        "predicted-vs-measured" => scatter(area, outcomes),
        _ => classes(area, outcomes),
    }
}

/// Writes the three charts into `dir` and returns their paths.
pub fn validation(outcomes: &[Outcome], dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for chart in CHARTS {
        written.extend(png_and_svg(
            dir,
            chart,
            |area| draw(chart, area, outcomes),
            |area| draw(chart, area, outcomes),
        )?);
    }
    Ok(written)
}

/// One chart as `<name>.png` and `<name>.svg` in `dir`: the same drawing on each backend.
fn png_and_svg(
    dir: &Path,
    name: &str,
    on_png: impl Fn(&DrawingArea<BitMapBackend<'_>, Shift>) -> anyhow::Result<()>,
    on_svg: impl Fn(&DrawingArea<SVGBackend<'_>, Shift>) -> anyhow::Result<()>,
) -> anyhow::Result<[PathBuf; 2]> {
    register_font();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let png = dir.join(format!("{name}.png"));
    {
        let area = BitMapBackend::new(&png, SIZE).into_drawing_area();
        on_png(&area)?;
        area.present().map_err(|e| anyhow::anyhow!("cannot write {}: {e}", png.display()))?;
    }
    let svg = dir.join(format!("{name}.svg"));
    {
        let area = SVGBackend::new(&svg, SIZE).into_drawing_area();
        on_svg(&area)?;
        area.present().map_err(|e| anyhow::anyhow!("cannot write {}: {e}", svg.display()))?;
    }
    Ok([png, svg])
}

/// `gconv net report`'s chart: each distinct layer shape's time (x its count, all directions)
/// in each setting, as grouped bars.
pub fn network(file: &TuningFile, dir: &Path) -> anyhow::Result<[PathBuf; 2]> {
    png_and_svg(dir, "layers-by-setting", |area| layer_bars(area, file), |area| layer_bars(area, file))
}

fn layer_bars<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, file: &TuningFile) -> anyhow::Result<()> {
    area.fill(&WHITE).map_err(plot_error)?;
    let shapes = file.settings.first().map_or(0, |s| s.shapes.len());
    let time = |s: usize, i: usize| -> f64 {
        let shape = &file.settings[s].shapes[i];
        shape.choices.iter().filter_map(|c| c.ms).sum::<f64>() * shape.count as f64
    };
    let top = (0..file.settings.len())
        .flat_map(|s| (0..shapes).map(move |i| (s, i)))
        .map(|(s, i)| time(s, i))
        .fold(0.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{}: time per distinct layer shape (x count), by setting", file.network.name),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d(0.0..shapes.max(1) as f64, 0.0..top.max(1e-6))
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("distinct layer shape (network order)")
        .y_desc("ms")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(plot_error)?;
    let width = 0.8 / file.settings.len().max(1) as f64;
    for (s, setting) in file.settings.iter().enumerate() {
        let colour = Palette99::pick(s).mix(0.85);
        let bars = (0..shapes).map(|i| {
            let x = i as f64 + 0.1 + s as f64 * width;
            Rectangle::new([(x, 0.0), (x + width, time(s, i))], colour.filled())
        });
        chart
            .draw_series(bars)
            .map_err(plot_error)?
            .label(setting.setting.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(plot_error)?;
    Ok(())
}

fn plot_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("drawing a chart failed: {e:?}")
}

fn histogram<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, outcomes: &[Outcome]) -> anyhow::Result<()> {
    area.fill(&WHITE).map_err(plot_error)?;
    // 2%-wide bins from 0 to 100%.
    let mut bins = [0u32; 50];
    for o in outcomes {
        bins[((o.efficiency() * 50.0) as usize).min(49)] += 1;
    }
    let top = f64::from(*bins.iter().max().unwrap_or(&1)) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("Model pick efficiency (oracle time / pick time), {} problems", outcomes.len()),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..100.0, 0.0..top)
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("efficiency %")
        .y_desc("problems")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(plot_error)?;
    let bars = bins.iter().enumerate().map(|(i, &n)| {
        Rectangle::new([(i as f64 * 2.0, 0.0), (i as f64 * 2.0 + 2.0, f64::from(n))], BLUE.mix(0.7).filled())
    });
    chart.draw_series(bars).map_err(plot_error)?;
    Ok(())
}

fn scatter<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, outcomes: &[Outcome]) -> anyhow::Result<()> {
    area.fill(&WHITE).map_err(plot_error)?;
    let all: Vec<(f64, f64)> = outcomes
        .iter()
        .flat_map(|o| o.predictions.iter().map(|&(predicted, measured)| (measured, predicted)))
        .collect();
    let step = all.len().div_ceil(MAX_POINTS).max(1);
    let points: Vec<(f64, f64)> = all.into_iter().step_by(step).collect();
    let (lo, hi) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &(m, p)| (lo.min(m).min(p), hi.max(m).max(p)));
    let (lo, hi) = if lo < hi { (lo * 0.8, hi * 1.25) } else { (1e-3, 1e3) };
    let mut chart = ChartBuilder::on(area)
        .caption(format!("Predicted against measured time ({} of the candidates)", points.len()), ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(65)
        .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
        .map_err(plot_error)?;
    chart
        .configure_mesh()
        .x_desc("measured ms")
        .y_desc("predicted ms")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(plot_error)?;
    chart.draw_series(LineSeries::new([(lo, lo), (hi, hi)], BLACK.mix(0.5))).map_err(plot_error)?;
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 2, RED.mix(0.35).filled()))).map_err(plot_error)?;
    Ok(())
}

fn classes<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, outcomes: &[Outcome]) -> anyhow::Result<()> {
    area.fill(&WHITE).map_err(plot_error)?;
    let groups: Vec<(&str, f64, f64, usize)> = by_class(outcomes)
        .into_iter()
        .filter_map(|(class, group)| summarize(&group).map(|s| (class, 100.0 * s.mean, 100.0 * s.p10, s.problems)))
        .collect();
    let mut chart = ChartBuilder::on(area)
        .caption("Efficiency by class: mean (blue) and P10 (orange)", ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..groups.len() as f64, 0.0..105.0)
        .map_err(plot_error)?;
    let names: Vec<String> = groups.iter().map(|(c, _, _, n)| format!("{c} ({n})")).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("efficiency %")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(plot_error)?;
    let orange = RGBColor(230, 140, 30);
    for (i, (_, mean, p10, _)) in groups.iter().enumerate() {
        let x = i as f64;
        chart
            .draw_series([Rectangle::new([(x + 0.15, 0.0), (x + 0.5, *mean)], BLUE.mix(0.7).filled())])
            .map_err(plot_error)?;
        chart.draw_series([Rectangle::new([(x + 0.5, 0.0), (x + 0.85, *p10)], orange.filled())]).map_err(plot_error)?;
    }
    Ok(())
}
