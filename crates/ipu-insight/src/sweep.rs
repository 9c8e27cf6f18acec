//! The summary of a sweep (`ipu sweep`): one row per point of the grid, as CSV and as a
//! self-contained HTML page (the table and an inline SVG chart of cycles and efficiency
//! against the swept parameter; no script, no network).

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::html::esc;

/// The summary file names under the sweep's directory.
pub const SUMMARY_CSV: &str = "summary.csv";
/// The HTML summary.
pub const SUMMARY_HTML: &str = "summary.html";
/// What a finished point leaves in its directory; a point with one is skipped on resume.
pub const POINT_JSON: &str = "point.json";

/// One finished point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// Its parameters in grid order: `(key, value)`.
    pub params: Vec<(String, String)>,
    /// Its directory's name.
    pub dir: String,
    /// `PASS` or `FAIL` (a refused build or a failed check).
    pub result: String,
    /// Simulated cycles of the `run` call.
    pub cycles: Option<u64>,
    /// Its on-chip part (without host exchange).
    pub on_chip_cycles: Option<u64>,
    /// The matmuls' MACs against the AMP's peak over the on-chip cycles.
    pub efficiency_on_chip: Option<f64>,
    /// Peak bytes of standard memory on the busiest tile.
    pub peak_standard_bytes: Option<u64>,
    /// Peak bytes of interleaved memory on the busiest tile.
    pub peak_interleaved_bytes: Option<u64>,
    /// Compile time.
    pub compile_ms: Option<u64>,
    /// The planner's estimate of `run`.
    pub estimated_cycles: Option<u64>,
    /// The placed program's cost.
    pub final_cycles: Option<u64>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Wall-clock milliseconds of the point (build, run, check).
    pub wall_ms: u64,
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or(String::new(), |x| x.to_string())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The CSV summary: a header, then one row per point.
pub fn csv(keys: &[String], points: &[SweepPoint]) -> String {
    let mut o = String::new();
    let mut header: Vec<String> = keys.to_vec();
    header.extend(
        [
            "result",
            "cycles",
            "on_chip_cycles",
            "efficiency_on_chip",
            "peak_standard_bytes",
            "peak_interleaved_bytes",
            "compile_ms",
            "estimated_cycles",
            "final_cycles",
            "wall_ms",
            "dir",
            "error",
        ]
        .map(String::from),
    );
    let _ = writeln!(o, "{}", header.join(","));
    for p in points {
        let mut row: Vec<String> = p.params.iter().map(|(_, v)| csv_field(v)).collect();
        row.extend([
            p.result.clone(),
            opt(&p.cycles),
            opt(&p.on_chip_cycles),
            p.efficiency_on_chip
                .map_or(String::new(), |e| format!("{e:.4}")),
            opt(&p.peak_standard_bytes),
            opt(&p.peak_interleaved_bytes),
            opt(&p.compile_ms),
            opt(&p.estimated_cycles),
            opt(&p.final_cycles),
            p.wall_ms.to_string(),
            csv_field(&p.dir),
            csv_field(p.error.as_deref().unwrap_or("")),
        ]);
        let _ = writeln!(o, "{}", row.join(","));
    }
    o
}

/// The label of a point on the chart: the values of the parameters that vary.
fn label(keys: &[String], varying: &[bool], p: &SweepPoint) -> String {
    let parts: Vec<String> = p
        .params
        .iter()
        .zip(varying)
        .filter(|(_, v)| **v)
        .map(|((k, v), _)| {
            if keys.iter().filter(|x| *x == k).count() == 1
                && varying.iter().filter(|v| **v).count() == 1
            {
                v.clone()
            } else {
                format!("{k}={v}")
            }
        })
        .collect();
    if parts.is_empty() {
        p.dir.clone()
    } else {
        parts.join(" ")
    }
}

/// The chart: on-chip cycles as bars (left axis), efficiency on chip as a line (right axis),
/// one position per point, labelled by the swept parameters.
fn chart(keys: &[String], points: &[SweepPoint]) -> String {
    let varying: Vec<bool> = (0..keys.len())
        .map(|i| {
            points
                .iter()
                .map(|p| p.params.get(i).map(|x| &x.1))
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 1
        })
        .collect();
    let (w, h, left, right, top, bottom) = (
        (120 + 70 * points.len()).max(480) as f64,
        320.0,
        80.0,
        60.0,
        20.0,
        90.0,
    );
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let cycles_max = points
        .iter()
        .filter_map(|p| p.on_chip_cycles)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let eff_max = points
        .iter()
        .filter_map(|p| p.efficiency_on_chip)
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let step = plot_w / points.len().max(1) as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        s,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{y}" stroke="#444"/><line x1="{left}" y1="{y}" x2="{x}" y2="{y}" stroke="#444"/><line x1="{x}" y1="{top}" x2="{x}" y2="{y}" stroke="#444"/>"##,
        y = top + plot_h,
        x = left + plot_w
    );
    for i in 0..=4 {
        let f = i as f64 / 4.0;
        let y = top + plot_h * (1.0 - f);
        let _ = write!(
            s,
            r##"<text x="{}" y="{}" text-anchor="end">{:.0}</text><text x="{}" y="{}">{:.1} %</text><line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/>"##,
            left - 4.0,
            y + 4.0,
            cycles_max * f,
            left + plot_w + 4.0,
            y + 4.0,
            100.0 * eff_max * f,
            left + plot_w
        );
    }
    let mut line = Vec::new();
    for (i, p) in points.iter().enumerate() {
        let x = left + step * i as f64;
        if let Some(c) = p.on_chip_cycles {
            let bh = plot_h * c as f64 / cycles_max;
            let fill = if p.result == "PASS" {
                "#4e79a7"
            } else {
                "#e15759"
            };
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{fill}"><title>{}: {c} cycles on chip</title></rect>"#,
                x + step * 0.15,
                top + plot_h - bh,
                step * 0.7,
                bh,
                esc(&p.dir)
            );
        }
        if let Some(e) = p.efficiency_on_chip {
            line.push(format!(
                "{:.1},{:.1}",
                x + step / 2.0,
                top + plot_h * (1.0 - e / eff_max)
            ));
        }
        let _ = write!(
            s,
            r#"<text transform="translate({:.1},{:.1}) rotate(35)">{}</text>"#,
            x + step / 2.0 - 4.0,
            top + plot_h + 14.0,
            esc(&label(keys, &varying, p))
        );
    }
    if !line.is_empty() {
        let _ = write!(
            s,
            r##"<polyline points="{}" fill="none" stroke="#f28e2b" stroke-width="2"/>"##,
            line.join(" ")
        );
        for pt in &line {
            let (x, y) = pt.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(s, r##"<circle cx="{x}" cy="{y}" r="3" fill="#f28e2b"/>"##);
        }
    }
    let _ = write!(
        s,
        r##"<text x="{left}" y="12">on-chip cycles (bars)</text><text x="{}" y="12" text-anchor="end" fill="#f28e2b">efficiency on chip (line)</text></svg>"##,
        left + plot_w
    );
    s
}

/// The HTML summary: the sweep's title, the chart, the table.
pub fn html(title: &str, keys: &[String], points: &[SweepPoint]) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{t}</title><style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}td.l,th.l{{text-align:left}}.FAIL{{color:#c00}}</style></head><body><h1>{t}</h1><p>{n} points</p>",
        t = esc(title),
        n = points.len()
    );
    o.push_str(&chart(keys, points));
    o.push_str("<table><tr>");
    for k in keys {
        let _ = write!(o, "<th class=\"l\">{}</th>", esc(k));
    }
    for h in [
        "result",
        "cycles",
        "on-chip cycles",
        "efficiency on chip",
        "peak standard bytes",
        "peak interleaved bytes",
        "compile ms",
        "estimate",
        "placed cost",
        "wall ms",
    ] {
        let _ = write!(o, "<th>{h}</th>");
    }
    o.push_str("<th class=\"l\">artifacts</th><th class=\"l\">error</th></tr>");
    for p in points {
        o.push_str("<tr>");
        for (_, v) in &p.params {
            let _ = write!(o, "<td class=\"l\">{}</td>", esc(v));
        }
        let eff = p
            .efficiency_on_chip
            .map_or(String::new(), |e| format!("{:.1} %", 100.0 * e));
        let _ = write!(
            o,
            "<td class=\"{r}\">{r}</td><td>{}</td><td>{}</td><td>{eff}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\"><a href=\"{d}/report.html\">{d}</a></td><td class=\"l\">{}</td></tr>",
            opt(&p.cycles),
            opt(&p.on_chip_cycles),
            opt(&p.peak_standard_bytes),
            opt(&p.peak_interleaved_bytes),
            opt(&p.compile_ms),
            opt(&p.estimated_cycles),
            opt(&p.final_cycles),
            p.wall_ms,
            esc(p.error.as_deref().unwrap_or("")),
            r = esc(&p.result),
            d = esc(&p.dir),
        );
    }
    o.push_str("</table></body></html>\n");
    o
}
