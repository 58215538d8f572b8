//! Line charts for the `onepipe bench` figures: PNG through plotters, text with a TrueType font
//! read at run time (plotters' ab_glyph, no system library; docs/DEPENDENCIES.md's trap).

use plotters::style::RGBColor;
use std::path::Path;

/// Where to look for a TrueType font.
const FONT_PATHS: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Reads the font once (`ONEPIPE_FONT`, else the usual places) and registers it with plotters.
pub fn load_font() -> Option<&'static str> {
    static FONT: std::sync::OnceLock<Option<&'static str>> = std::sync::OnceLock::new();
    *FONT.get_or_init(|| {
        let from_env = std::env::var("ONEPIPE_FONT").ok();
        let bytes = from_env
            .iter()
            .map(String::as_str)
            .chain(FONT_PATHS)
            .find_map(|p| std::fs::read(p).ok())?;
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, bytes)
            .ok()?;
        Some("sans-serif")
    })
}

/// One line of a chart: its name and its points.
pub struct Series {
    /// The legend.
    pub name: String,
    /// (x, y) points; y ≤ 0 are left out on a log scale.
    pub points: Vec<(f64, f64)>,
}

/// A chart's words and scales.
pub struct Chart<'a> {
    /// The title.
    pub caption: &'a str,
    /// The axes' descriptions.
    pub x_desc: &'a str,
    /// See `x_desc`.
    pub y_desc: &'a str,
    /// Logarithmic axes.
    pub log_x: bool,
    /// See `log_x`.
    pub log_y: bool,
    /// The legend in the upper left corner (else the lower left).
    pub legend_upper: bool,
}

impl Chart<'_> {
    /// Whether point `(x, y)` can be drawn: a log scale leaves out what is not above 0.
    fn shows(&self, &(x, y): &(f64, f64)) -> bool {
        (!self.log_x || x > 0.0) && (!self.log_y || y > 0.0)
    }

    /// The axes' ranges (x from, x to, y from, y to) for the points of `series` it shows,
    /// with a margin; `None` if it shows none.
    fn axes(&self, series: &[Series]) -> Option<(f64, f64, f64, f64)> {
        let pts: Vec<(f64, f64)> = series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|p| self.shows(p))
            .collect();
        let (x_lo, x_hi, y_lo, y_hi) = pts.iter().fold(
            (f64::MAX, f64::MIN, f64::MAX, f64::MIN),
            |(a, b, c, d), &(x, y)| (a.min(x), b.max(x), c.min(y), d.max(y)),
        );
        if pts.is_empty() {
            return None;
        }
        let (x_lo, x_hi) = if self.log_x {
            (x_lo / 1.25, x_hi * 1.25)
        } else {
            (x_lo.min(0.0), x_hi * 1.05 + 1e-9)
        };
        let (y_lo, y_hi) = if self.log_y {
            (y_lo / 2.0, y_hi * 2.0)
        } else {
            (0.0, y_hi * 1.15 + 1e-9)
        };
        Some((x_lo, x_hi, y_lo, y_hi))
    }
}

/// The series' colors, in order (a bar chart takes the first four).
const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];

fn si(v: f64) -> String {
    if v >= 1e6 {
        // 1.5M, not 2M: axes in millions step by halves.
        format!("{:.1}M", v / 1e6).replace(".0M", "M")
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if v >= 10.0 || v == v.round() {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Draws `series` on a 960×640 PNG at `path`.
pub fn line_chart(
    path: &Path,
    c: &Chart,
    series: &[Series],
    font: &'static str,
) -> Result<(), String> {
    let panel = Panel {
        chart: c,
        series,
        legend_right: false,
    };
    line_charts(path, &[panel], 1, font)
}

/// One chart of a multi-panel figure ([`line_charts`]).
pub struct Panel<'a> {
    /// The chart's words and scales.
    pub chart: &'a Chart<'a>,
    /// Its lines.
    pub series: &'a [Series],
    /// The legend in the right corner (upper or lower as `chart.legend_upper` says), else the
    /// left one.
    pub legend_right: bool,
}

/// Draws one line chart per panel on a PNG at `path`: `cols` panels of 960×640 side by side per
/// row, in the order given (a multi-panel figure such as PLATO's Fig. 8).
pub fn line_charts(
    path: &Path,
    panels: &[Panel],
    cols: usize,
    font: &'static str,
) -> Result<(), String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    if panels.is_empty() || panels.iter().any(|p| p.chart.axes(p.series).is_none()) {
        return Err(format!("{}: nothing to draw", path.display()));
    }
    let cols = cols.clamp(1, panels.len());
    let rows = panels.len().div_ceil(cols);
    let root = BitMapBackend::new(path, (960 * cols as u32, 640 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((rows, cols));
    for (p, area) in panels.iter().zip(&areas) {
        draw_line_chart(area, p, font).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Draws `panel` on `area`; its chart must show something of its series.
fn draw_line_chart<DB: plotters::prelude::DrawingBackend>(
    area: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
    font: &'static str,
) -> Result<(), String> {
    use plotters::prelude::*;
    let (c, series) = (panel.chart, panel.series);
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let keep = |p: &(f64, f64)| c.shows(p);
    let Some((x_lo, x_hi, y_lo, y_hi)) = c.axes(series) else {
        return Err("nothing to draw".to_string());
    };
    let colors = COLORS;
    macro_rules! draw {
        ($x:expr, $y:expr) => {{
            let mut chart = ChartBuilder::on(area)
                .caption(c.caption, (font, 22))
                .margin(16)
                .x_label_area_size(48)
                .y_label_area_size(80)
                .build_cartesian_2d($x, $y)
                .map_err(|e| err(&e))?;
            chart
                .configure_mesh()
                .x_desc(c.x_desc)
                .y_desc(c.y_desc)
                .label_style((font, 15))
                .x_label_formatter(&|x| si(*x))
                .y_label_formatter(&|y| si(*y))
                .draw()
                .map_err(|e| err(&e))?;
            for (i, s) in series.iter().enumerate() {
                let color = colors[i % colors.len()];
                let points: Vec<(f64, f64)> = s.points.iter().copied().filter(keep).collect();
                chart
                    .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                    .map_err(|e| err(&e))?
                    .label(s.name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
                    .map_err(|e| err(&e))?;
            }
            chart
                .configure_series_labels()
                .label_font((font, 15))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(match (c.legend_upper, panel.legend_right) {
                    (true, false) => SeriesLabelPosition::UpperLeft,
                    (false, false) => SeriesLabelPosition::LowerLeft,
                    (true, true) => SeriesLabelPosition::UpperRight,
                    (false, true) => SeriesLabelPosition::LowerRight,
                })
                .draw()
                .map_err(|e| err(&e))?;
        }};
    }
    match (c.log_x, c.log_y) {
        (true, true) => draw!((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale()),
        (true, false) => draw!((x_lo..x_hi).log_scale(), y_lo..y_hi),
        (false, true) => draw!(x_lo..x_hi, (y_lo..y_hi).log_scale()),
        (false, false) => draw!(x_lo..x_hi, y_lo..y_hi),
    }
    Ok(())
}

/// One series of a bar chart: its name and one value per group.
pub struct Bars {
    /// The legend.
    pub name: String,
    /// A value per group, in the groups' order.
    pub values: Vec<f64>,
}

/// The top of a bar chart's y axis: room above the highest bar for its value.
fn bars_top(series: &[Bars]) -> f64 {
    series
        .iter()
        .flat_map(|s| s.values.iter().copied())
        .fold(0.0f64, f64::max)
        * 1.2
        + 1e-9
}

/// The value written over a bar.
fn bar_label(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else {
        si(v)
    }
}

/// Draws grouped bars on a 960×640 PNG at `path`: a group per entry of `groups` (its label under
/// it), a bar per series in each, side by side, with each bar's value over it.
pub fn bar_chart(
    path: &Path,
    caption: &str,
    y_desc: &str,
    groups: &[String],
    series: &[Bars],
    font: &'static str,
) -> Result<(), String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    if groups.is_empty() || series.is_empty() {
        return Err(format!("{}: nothing to draw", path.display()));
    }
    let y_hi = bars_top(series);
    let n = groups.len();
    let root = BitMapBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let colors = &COLORS[..4];
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, (font, 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0.0..y_hi)
        .map_err(|e| err(&e))?;
    let label = |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < n {
            groups[i as usize].clone()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&label)
        .y_desc(y_desc)
        .y_label_formatter(&|y| si(*y))
        .label_style((font, 15))
        .draw()
        .map_err(|e| err(&e))?;
    let width = 0.8 / series.len() as f64;
    for (k, s) in series.iter().enumerate() {
        let color = colors[k % colors.len()];
        let x0 = |i: usize| i as f64 - 0.4 + k as f64 * width;
        chart
            .draw_series(s.values.iter().enumerate().map(|(i, &v)| {
                Rectangle::new([(x0(i), 0.0), (x0(i) + width * 0.92, v)], color.filled())
            }))
            .map_err(|e| err(&e))?
            .label(s.name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled()));
        chart
            .draw_series(s.values.iter().enumerate().map(|(i, &v)| {
                Text::new(
                    bar_label(v),
                    (x0(i) + width * 0.1, v + y_hi * 0.035),
                    (font, 13).into_font(),
                )
            }))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .label_font((font, 15))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
