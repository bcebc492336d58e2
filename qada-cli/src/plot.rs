//! PNG figures: per-head heat maps (the paper's Figure 7) and quality-against-sparsity curves
//! (Figure 4). Text uses a font compiled into the binary, so no system font is needed.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::common::CliResult;

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            epaint_default_fonts::UBUNTU_LIGHT,
        );
    });
}

fn err(e: impl std::fmt::Display) -> Box<dyn std::error::Error> {
    format!("plotting: {e}").into()
}

/// Two `n_layers x n_heads` maps side by side (values in [0, 1], NaN drawn grey).
pub fn heatmaps(
    path: &Path,
    title: &str,
    maps: [(&str, &[f64]); 2],
    n_layers: usize,
    n_heads: usize,
) -> CliResult<()> {
    register_font();
    let root = BitMapBackend::new(path, (1000, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 24)).map_err(err)?;
    let (main, legend) = root.split_horizontally(900);
    let panels = main.split_evenly((1, 2));
    for (panel, (name, values)) in panels.iter().zip(maps) {
        let mut chart = ChartBuilder::on(panel)
            .caption(name, ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(40)
            .build_cartesian_2d(0..n_heads, 0..n_layers)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("head")
            .y_desc("layer")
            .x_labels(n_heads)
            .y_labels(n_layers.min(16))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(
                (0..n_layers)
                    .flat_map(|l| (0..n_heads).map(move |h| (l, h)))
                    .map(|(l, h)| {
                        let v = values.get(l * n_heads + h).copied().unwrap_or(f64::NAN);
                        let color = if v.is_finite() {
                            ViridisRGB::get_color(v.clamp(0.0, 1.0))
                        } else {
                            RGBColor(200, 200, 200)
                        };
                        Rectangle::new([(h, l), (h + 1, l + 1)], color.filled())
                    }),
            )
            .map_err(err)?;
    }
    let mut bar = ChartBuilder::on(&legend)
        .margin_top(80)
        .margin_bottom(60)
        .y_label_area_size(40)
        .caption("long freq.", ("sans-serif", 14))
        .build_cartesian_2d(0..1, 0.0..1.0)
        .map_err(err)?;
    bar.configure_mesh()
        .disable_mesh()
        .disable_x_axis()
        .draw()
        .map_err(err)?;
    bar.draw_series((0..100).map(|i| {
        let v = i as f64 / 100.0;
        Rectangle::new([(0, v), (1, v + 0.01)], ViridisRGB::get_color(v).filled())
    }))
    .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// A series: name and points `(sparsity, metric)`.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A metric against a share in `[0, 1]` (sparsity, or K/V bytes relative to dense), one line
/// per method.
pub fn curves(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> CliResult<()> {
    register_font();
    let pts = series
        .iter()
        .flat_map(|s| s.points.iter())
        .filter(|p| p.1.is_finite());
    let (mut lo, mut hi) = pts.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
        (a.min(p.1), b.max(p.1))
    });
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    let pad = ((hi - lo) * 0.08).max(1e-3);
    let root = BitMapBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.02f64..1.02f64, (lo - pad)..(hi + pad))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let mut pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let style = ShapeStyle::from(&color).stroke_width(2);
        if pts.len() > 1 {
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(err)?
                .label(s.name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(err)?;
        } else {
            chart
                .draw_series(pts.iter().map(|&p| Cross::new(p, 7, style)))
                .map_err(err)?
                .label(s.name.clone())
                .legend(move |(x, y)| Cross::new((x + 10, y), 5, style));
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
