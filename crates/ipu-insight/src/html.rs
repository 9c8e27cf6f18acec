//! `report.html`: one self-contained page (no network: tables in HTML, charts drawn as inline
//! SVG by a small script in the page) with the run's summary, memory (heat maps of every
//! tile's standard and interleaved bytes, the buffers live at a tile's peak with their live
//! ranges), execution per step against the estimate, exchange per tile and per phase, and the
//! planner's finalists.
//!
//! The script sets `data-ok="1"` on `<body>` once it has drawn everything without an error,
//! and `data-error` with the message otherwise; the headless-browser check reads it.

use std::fmt::Write;

use ipu_codegen::view::BuildView;
use serde_json::{Value, json};

use crate::timeline::Timeline;

/// What a report is drawn from: the run's JSON report (`report.json`, or the report of a
/// refused build), the profile's timeline (none for a refused build), the build's view.
pub struct ReportInput<'a> {
    /// `report.json`'s contents.
    pub summary: &'a Value,
    /// The timeline of the run.
    pub timeline: Option<&'a Timeline>,
    /// The build's view.
    pub view: Option<&'a BuildView>,
}

/// Escapes text for HTML.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.6}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

fn row(out: &mut String, k: &str, v: &str) {
    let _ = writeln!(out, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
}

/// The whole page.
pub fn render(input: &ReportInput<'_>) -> String {
    let s = input.summary;
    let model = s["model"].as_str().unwrap_or("?");
    let mut body = String::new();
    let _ = writeln!(
        body,
        "<header><h1>{} <small>on {} (simulator)</small></h1></header>",
        esc(model),
        esc(s["target"].as_str().unwrap_or("?"))
    );
    body.push_str("<nav><a href=\"#summary\">summary</a> <a href=\"#memory\">memory</a> <a href=\"#execution\">execution</a> <a href=\"#exchange\">exchange</a> <a href=\"#planner\">planner</a></nav>\n");
    summary(&mut body, input);
    memory(&mut body, input);
    execution(&mut body, input);
    exchange(&mut body, input);
    planner(&mut body, input);
    let data = data_json(input);
    // `</` cannot end the script element inside the JSON: `<\/` is the same JSON string.
    let data = serde_json::to_string(&data)
        .unwrap_or_default()
        .replace("</", "<\\/");
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{} — ipu report</title>\n<style>{STYLE}</style></head>\n<body>\n{body}<script type=\"application/json\" id=\"report-data\">{data}</script>\n<script>{SCRIPT}</script>\n</body></html>\n",
        esc(model)
    )
}

fn summary(out: &mut String, input: &ReportInput<'_>) {
    let s = input.summary;
    out.push_str("<section id=\"summary\"><h2>Summary</h2>\n");
    if let Some(e) = s.get("error") {
        let _ = writeln!(
            out,
            "<div class=\"error\"><b>Refused ({})</b>: {}</div>",
            esc(e["kind"].as_str().unwrap_or("?")),
            esc(e["message"].as_str().unwrap_or(""))
        );
        if let Some(fields) = e.as_object() {
            out.push_str("<table class=\"kv\">\n");
            for (k, v) in fields
                .iter()
                .filter(|(k, _)| *k != "message" && *k != "kind")
            {
                row(out, k, &text(v));
            }
            if let (Some(n), Some(a)) = (e["need_bytes"].as_u64(), e["available_bytes"].as_u64()) {
                row(out, "bytes over", &n.saturating_sub(a).to_string());
            }
            out.push_str("</table>\n");
        }
        if let Some(b) = s
            .get("busiest_tile")
            .filter(|b| b["planning_refusal"] == true)
        {
            let _ = writeln!(
                out,
                "<p>Planning refused the graph before any buffer was laid out. Busiest tile at the refused operation: <b>tile {}</b>, {} bytes of live values and the operation's estimated working set, beside {} bytes reserved for code and support data (memory below).</p>",
                text(&b["tile"]),
                text(&b["live_bytes"]),
                text(&b["support_bytes"])
            );
        } else if let Some(b) = s.get("busiest_tile") {
            let _ = writeln!(
                out,
                "<p>Busiest tile of the closest candidate: <b>tile {}</b>, {} bytes live at step {} (standard {} bytes, interleaved {} bytes).</p>",
                text(&b["tile"]),
                text(&b["live_bytes"]),
                text(&b["peak_step"]),
                text(&b["standard_bytes"]),
                text(&b["interleaved_bytes"])
            );
        } else if input.view.is_none() {
            out.push_str("<p>Planning refused the graph before any buffer was laid out: the figures above are the closest mapping's.</p>\n");
        }
    }
    out.push_str("<table class=\"kv\">\n");
    row(out, "model", s["model"].as_str().unwrap_or("?"));
    row(out, "target", s["target"].as_str().unwrap_or("?"));
    let tiles = s.get("tiles_used").or_else(|| s.get("tiles"));
    row(out, "tiles", &tiles.map_or("–".into(), text));
    let dev = &s["device"];
    if dev.is_object() {
        for k in ["cycles", "compute_cycles", "exchange_cycles", "sync_cycles"] {
            row(out, &format!("device {k}"), &text(&dev[k]));
        }
    }
    for k in [
        "on_chip_cycles",
        "host_exchange_cycles",
        "estimated_cycles",
        "final_cycles",
        "efficiency",
        "efficiency_on_chip",
        "amp_mode",
        "compile_ms",
        "package_bytes",
        "reference_precision",
        "seed",
        "iterations",
    ] {
        if let Some(v) = s.get(k) {
            row(out, k, &text(v));
        }
    }
    if let (Some(est), Some(sim)) = (s["estimated_cycles"].as_u64(), s["on_chip_cycles"].as_u64()) {
        let ratio = if est > 0 {
            sim as f64 / est as f64
        } else {
            0.0
        };
        row(
            out,
            "simulated on-chip / planner estimate",
            &format!("{sim} / {est} = {ratio:.3}"),
        );
    }
    out.push_str("</table>\n");
    if let Some(checks) = s["checks"].as_array().filter(|c| !c.is_empty()) {
        out.push_str("<h3>Checks</h3><table><tr><th>output</th><th>elements</th><th>max abs error</th><th>rms error</th><th>min cosine</th><th>atol</th><th>rtol</th><th>min cosine allowed</th><th>result</th></tr>\n");
        for c in checks {
            let pass = c["pass"].as_bool().unwrap_or(false);
            let t = &c["threshold"];
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
                esc(&text(&c["name"])),
                text(&c["count"]),
                text(&c["max_abs_error"]),
                text(&c["rms_error"]),
                text(&c["min_cosine"]),
                text(&t["atol"]),
                text(&t["rtol"]),
                text(&t["min_cosine"]),
                if pass { "pass" } else { "fail" },
                if pass { "PASS" } else { "FAIL" }
            );
        }
        out.push_str("</table>\n");
    }
    if s["phases"].as_array().is_some_and(|p| !p.is_empty()) {
        out.push_str("<h3>Compile time per phase</h3><div id=\"phases\" class=\"chart\"></div>\n");
    }
    out.push_str("</section>\n");
}

fn memory(out: &mut String, input: &ReportInput<'_>) {
    out.push_str("<section id=\"memory\"><h2>Memory</h2>\n");
    let Some(v) = input.view else {
        out.push_str(
            "<p>No memory view: the build's view is not in the run directory.</p></section>\n",
        );
        return;
    };
    let _ = writeln!(
        out,
        "<p>Peak bytes per tile ({} tiles; standard memory {} bytes with code and support data, interleaved {} bytes). Click a tile, or pick one, to see the buffers live at its peak.</p>",
        v.tiles_used, v.standard_capacity_bytes, v.interleaved_capacity_bytes
    );
    if v.planning_refusal {
        out.push_str("<p class=\"why\">Planning refused an operation for memory, so no buffer was laid out: a tile's bytes are the support reserve, the values planned so far that are live at the refused operation (each at its share of the tile; the operation's operands included) and, marked <i>estimate</i>, the refused operation's working set: its closest mapping's need on its busiest tile, drawn on that tile when the operator family names it and on every tile otherwise (a bound there). Steps are the graph's operations; every tile's peak is the refused one.</p>\n");
    }
    out.push_str("<div class=\"maps\"><div><h3>standard</h3><div id=\"heat-standard\" class=\"chart\"></div></div><div><h3>interleaved</h3><div id=\"heat-interleaved\" class=\"chart\"></div></div></div>\n");
    out.push_str("<p><label>tile <input id=\"tile-pick\" type=\"number\" min=\"0\" value=\"0\"></label> <span id=\"tile-summary\"></span></p>\n");
    out.push_str("<div id=\"liveness\" class=\"chart\"></div><div id=\"buffers\"></div>\n");
    out.push_str("</section>\n");
}

fn execution(out: &mut String, input: &ReportInput<'_>) {
    out.push_str("<section id=\"execution\"><h2>Execution</h2>\n");
    let Some(t) = input.timeline else {
        out.push_str("<p>No execution: the run has no profile (a refused build does not run).</p></section>\n");
        return;
    };
    out.push_str("<p>Cycles of every step of <code>run</code> on the slowest tile, stacked compute / sync / exchange; the mark is the compiler's estimate.</p><div id=\"steps-chart\" class=\"chart\"></div>\n");
    out.push_str("<table><tr><th>step</th><th>kind</th><th>name</th><th>cycles</th><th>compute</th><th>sync</th><th>exchange</th><th>estimate</th><th>bytes</th><th>worker occupancy</th><th>bank conflicts</th><th>kernels</th></tr>\n");
    for s in &t.steps {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"small\">{}</td></tr>",
            s.index,
            esc(&s.kind),
            esc(&s.name),
            s.cycles,
            s.compute_cycles,
            s.sync_cycles,
            s.exchange_cycles,
            s.estimated_cycles.map_or("–".into(), |e| e.to_string()),
            s.bytes,
            s.occupancy
                .map_or("–".into(), |o| format!("{:.1}%", o * 100.0)),
            s.bank_conflicts,
            esc(&s.kernels.join(", "))
        );
    }
    out.push_str("</table>\n");
    out.push_str("<h3>Bank conflicts by kernel</h3>\n");
    if t.kernel_conflicts.is_empty() {
        out.push_str("<p>None: no issue loaded twice from one memory element.</p>\n");
    } else {
        out.push_str("<p>Loads of one issue beyond the first from one memory element, all tiles and calls; each cost its context a barrel slot.</p><table><tr><th>kernel</th><th>conflicts</th></tr>\n");
        for (k, n) in &t.kernel_conflicts {
            let _ = writeln!(out, "<tr><td>{}</td><td>{n}</td></tr>", esc(k));
        }
        out.push_str("</table>\n");
    }
    out.push_str("</section>\n");
}

fn exchange(out: &mut String, input: &ReportInput<'_>) {
    out.push_str("<section id=\"exchange\"><h2>Exchange</h2>\n");
    let Some(v) = input.view else {
        out.push_str("<p>No exchange view.</p></section>\n");
        return;
    };
    if v.planning_refusal {
        out.push_str("<p>No exchange view: planning refused the graph before any exchange was laid out.</p></section>\n");
        return;
    }
    out.push_str("<p>Bytes each tile sends and receives in the exchange phases of <code>run</code>.</p><div id=\"exchange-chart\" class=\"chart\"></div>\n");
    let cycles_of = |i: usize| {
        input
            .timeline
            .filter(|t| t.matched_view)
            .and_then(|t| t.steps.get(i.checked_sub(v.init_steps)?))
            .map(|s| s.cycles)
    };
    let mut phases: Vec<(usize, &ipu_codegen::view::StepView)> = v
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.kind != "compute" && s.bytes > 0)
        .collect();
    phases.sort_by_key(|(i, s)| (std::cmp::Reverse(s.bytes), *i));
    out.push_str("<h3>Busiest phases</h3><table><tr><th>step</th><th>kind</th><th>name</th><th>bytes</th><th>copies</th><th>tiles</th><th>estimate</th><th>simulated cycles</th><th>bytes per cycle</th></tr>\n");
    for (i, s) in phases.iter().take(12) {
        let sim = cycles_of(*i);
        let _ = writeln!(
            out,
            "<tr><td>{i}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.kind),
            esc(&s.name),
            s.bytes,
            s.copies,
            s.tiles,
            s.estimated_cycles.map_or("–".into(), |e| e.to_string()),
            sim.map_or("–".into(), |c| c.to_string()),
            sim.filter(|&c| c > 0).map_or("–".into(), |c| format!(
                "{:.1}",
                s.bytes as f64 / c as f64
            ))
        );
    }
    out.push_str("</table></section>\n");
}

fn planner(out: &mut String, input: &ReportInput<'_>) {
    out.push_str("<section id=\"planner\"><h2>Planner</h2>\n");
    let Some(v) = input.view.filter(|v| !v.finalists.is_empty()) else {
        out.push_str("<p>No finalists recorded.</p></section>\n");
        return;
    };
    out.push_str("<p>Per operation with a choice, the finalists in the planner's order; the first was selected.</p>\n");
    let mut i = 0;
    while i < v.finalists.len() {
        let op = &v.finalists[i].op;
        let group: Vec<_> = v.finalists[i..]
            .iter()
            .take_while(|f| &f.op == op)
            .collect();
        i += group.len();
        if group[0].candidates <= 1 {
            continue;
        }
        let w = group[0];
        let why = match group.get(1) {
            Some(r) => {
                let dc = r.estimated_cycles as i64 - w.estimated_cycles as i64;
                let dm = r.peak_tile_bytes as i64 - w.peak_tile_bytes as i64;
                format!(
                    "of {} candidates, the winner's estimate is {} cycles {} than the runner-up's and its peak {} bytes {}{}",
                    w.candidates,
                    dc.abs(),
                    if dc >= 0 { "fewer" } else { "more" },
                    dm.abs(),
                    if dm >= 0 { "lower" } else { "higher" },
                    if w.mapping.contains("modelled_cycles") {
                        " (flash attention ranks by the cycles modelled from each candidate's tile program)"
                    } else {
                        ""
                    }
                )
            }
            None => format!("the only finalist of {} candidates", w.candidates),
        };
        let _ = writeln!(
            out,
            "<h3>{}</h3><p class=\"why\">{}</p><table><tr><th></th><th>mapping</th><th>estimated cycles</th><th>exchange cycles</th><th>peak bytes per tile</th><th>tiles</th></tr>",
            esc(op),
            esc(&why)
        );
        for (k, f) in group.iter().enumerate() {
            let _ = writeln!(
                out,
                "<tr class=\"{}\"><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                if k == 0 { "winner" } else { "" },
                if k == 0 { "selected" } else { "" },
                esc(&f.mapping),
                f.estimated_cycles,
                f.estimated_exchange_cycles,
                f.peak_tile_bytes,
                f.tiles
            );
        }
        out.push_str("</table>\n");
    }
    out.push_str("</section>\n");
}

/// The data the page's script draws: compact arrays (one number per tile) and, per tile, the
/// buffers at its peak as `[name, op, bytes, interleaved, first, last, address or -1,
/// estimate]` (estimate 1: a planning refusal's estimated working set, not a buffer).
fn data_json(input: &ReportInput<'_>) -> Value {
    let s = input.summary;
    let phases = s["phases"].clone();
    let steps = input.timeline.map(|t| {
        t.steps
            .iter()
            .map(|s| {
                json!([
                    s.index,
                    s.kind,
                    s.name,
                    s.compute_cycles,
                    s.sync_cycles,
                    s.exchange_cycles,
                    s.estimated_cycles
                ])
            })
            .collect::<Vec<_>>()
    });
    let view = input.view.map(|v| {
        let col = |f: &dyn Fn(&ipu_codegen::view::TileMemory) -> u64| {
            v.tiles.iter().map(f).collect::<Vec<u64>>()
        };
        let buffers: Vec<Value> = v
            .tiles
            .iter()
            .map(|t| {
                json!(
                    t.buffers
                        .iter()
                        .map(|b| json!([
                            b.name,
                            b.op,
                            b.bytes,
                            u8::from(b.interleaved),
                            b.first,
                            b.last,
                            b.address.map_or(-1, i64::from),
                            u8::from(b.estimate)
                        ]))
                        .collect::<Vec<_>>()
                )
            })
            .collect();
        json!({
            "tiles": col(&|t| t.tile as u64),
            "standard": col(&|t| t.standard_bytes as u64),
            "interleaved": col(&|t| t.interleaved_bytes as u64),
            "support": col(&|t| t.support_bytes as u64),
            "peak_step": col(&|t| t.peak_step as u64),
            "exchange_in": col(&|t| t.exchange_in_bytes),
            "exchange_out": col(&|t| t.exchange_out_bytes),
            "standard_capacity": v.standard_capacity_bytes,
            "interleaved_capacity": v.interleaved_capacity_bytes,
            "steps": v.steps.iter().map(|s| format!("{} {}", s.kind, s.name)).collect::<Vec<_>>(),
            "init_steps": v.init_steps,
            "names": v.names,
            "buffers": buffers,
            "placed": v.placed,
            "planning": v.planning_refusal,
        })
    });
    let busiest = input
        .view
        .and_then(ipu_codegen::view::busiest_tile)
        .map(|t| t.tile);
    json!({"phases": phases, "steps": steps, "view": view, "busiest": busiest})
}

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,sans-serif;margin:0 24px 40px;color:#222;background:#fff}
header h1{margin:16px 0 4px;font-size:22px} header small{color:#666;font-weight:normal}
nav a{margin-right:12px} section{margin-top:24px} h2{border-bottom:1px solid #ccc;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0} td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}
th{background:#f4f4f4} table.kv th{text-align:left} td.small{font-size:11px;text-align:left;max-width:420px}
.pass{color:#176b1b;font-weight:bold} .fail{color:#b00020;font-weight:bold}
.error{background:#fde7ea;border:1px solid #b00020;padding:8px;margin:8px 0}
.maps{display:flex;gap:24px;flex-wrap:wrap} .chart svg{display:block} .why{color:#444}
tr.winner td{background:#eef7ee} code{font-size:12px}
svg text{font:11px system-ui,sans-serif;fill:#333} .tile:hover{stroke:#000;stroke-width:1}
"#;

const SCRIPT: &str = r#"
(function(){
'use strict';
function fail(m){document.body.setAttribute('data-error',String(m));var d=document.createElement('div');d.className='error';d.textContent='report script error: '+m;document.body.insertBefore(d,document.body.firstChild);}
window.addEventListener('error',function(e){fail(e.message);});
var NS='http://www.w3.org/2000/svg';
function el(n,a,p){var e=document.createElementNS(NS,n);for(var k in a)e.setAttribute(k,a[k]);if(p)p.appendChild(e);return e;}
function svg(w,h,host){var s=el('svg',{width:w,height:h,viewBox:'0 0 '+w+' '+h});host.appendChild(s);return s;}
function txt(s,x,y,t,a){var e=el('text',Object.assign({x:x,y:y},a||{}),s);e.textContent=t;return e;}
function fmt(n){return n>=1e6?(n/1e6).toFixed(2)+'M':n>=1e3?(n/1e3).toFixed(1)+'k':String(n);}
function heat(f){f=Math.max(0,Math.min(1,f));var r=Math.round(255*Math.min(1,2*f)),g=Math.round(255*Math.min(1,2*(1-f)));return 'rgb('+r+','+g+',60)';}
try{
var D=JSON.parse(document.getElementById('report-data').textContent);
// Compile time per phase.
var ph=document.getElementById('phases');
if(ph&&D.phases){var P=D.phases,mx=1;P.forEach(function(p){mx=Math.max(mx,p.elapsed_ms);});
 var s=svg(640,18*P.length+4,ph);P.forEach(function(p,i){txt(s,150,14+18*i,p.name,{'text-anchor':'end'});
 el('rect',{x:156,y:3+18*i,width:Math.max(1,420*p.elapsed_ms/mx),height:13,fill:'#5b8def'},s);txt(s,160+420*p.elapsed_ms/mx,14+18*i,p.elapsed_ms+' ms');});}
var V=D.view;
if(V){
 var n=V.tiles.length,cols=Math.ceil(Math.sqrt(n*2)),rows=Math.ceil(n/cols),c=Math.max(4,Math.min(12,Math.floor(480/cols)));
 var pick=document.getElementById('tile-pick');
 function map(id,vals,cap){var host=document.getElementById(id);var s=svg(Math.max(cols*c+2,240),rows*c+24,host);
  for(var i=0;i<n;i++){var r=el('rect',{x:1+(i%cols)*c,y:1+Math.floor(i/cols)*c,width:c-1,height:c-1,fill:heat(vals[i]/Math.max(1,cap)),'class':'tile'},s);
   r.setAttribute('data-tile',V.tiles[i]);var t=el('title',{},r);t.textContent='tile '+V.tiles[i]+': '+vals[i]+' of '+cap+' bytes';
   r.addEventListener('click',function(e){show(+e.target.getAttribute('data-tile'));});}
  var mx=0;for(var j=0;j<n;j++)mx=Math.max(mx,vals[j]);txt(s,1,rows*c+16,'busiest '+fmt(mx)+' of '+fmt(cap)+' bytes ('+(100*mx/Math.max(1,cap)).toFixed(1)+'%)');}
 map('heat-standard',V.standard,V.standard_capacity);map('heat-interleaved',V.interleaved,V.interleaved_capacity);
 function show(tile){var i=V.tiles.indexOf(tile);if(i<0)return;pick.value=tile;
  var B=V.buffers[i],ps=V.peak_step[i],S=V.steps.length;
  document.getElementById('tile-summary').textContent='tile '+tile+': standard '+V.standard[i]+' bytes (code and support '+V.support[i]+'), interleaved '+V.interleaved[i]+' bytes; '+B.length+(V.planning?' values and estimates live at the refused operation, ':' buffers live at its peak, ')+'step '+ps+' ('+(V.steps[ps]||'')+')';
  var host=document.getElementById('liveness');host.innerHTML='';var W=720,L=220,h=14,s=svg(W+L+10,h*B.length+34,host),dx=W/Math.max(1,S);
  for(var k=0;k<S;k++){if(S<=40||k%Math.ceil(S/40)==0)txt(s,L+k*dx+dx/2,10,String(k),{'text-anchor':'middle'});}
  el('rect',{x:L+ps*dx,y:14,width:Math.max(1,dx),height:h*B.length+4,fill:'#fff3c4'},s);
  if(V.init_steps>0)el('line',{x1:L+V.init_steps*dx,y1:12,x2:L+V.init_steps*dx,y2:h*B.length+18,stroke:'#999','stroke-dasharray':'3 2'},s);
  B.forEach(function(b,j){var y=16+h*j;var nm=V.names[b[0]];txt(s,L-4,y+10,(nm.length>34?nm.slice(0,33)+'…':nm)+' '+fmt(b[2]),{'text-anchor':'end'});
   var r=el('rect',{x:L+b[4]*dx,y:y,width:Math.max(2,(b[5]-b[4]+1)*dx),height:h-2,fill:b[7]?'#f4a261':b[3]?'#c77dff':'#5b8def'},s);var t=el('title',{},r);t.textContent=nm+' ('+V.names[b[1]]+'): '+b[2]+' bytes'+(b[7]?' (estimate)':'')+', steps '+b[4]+'..'+b[5];});
  var tb='<table><tr><th>'+(V.planning?'value':'buffer')+'</th><th>operation</th><th>bytes</th><th>region</th><th>live steps</th><th>address</th></tr>';
  B.forEach(function(b){tb+='<tr><td style="text-align:left">'+esc(V.names[b[0]])+(b[7]?' <i>estimate</i>':'')+'</td><td style="text-align:left">'+esc(V.names[b[1]])+'</td><td>'+b[2]+'</td><td>'+(b[3]?'interleaved':'standard')+'</td><td>'+b[4]+'..'+b[5]+'</td><td>'+(b[6]<0?'–':'0x'+b[6].toString(16))+'</td></tr>';});
  document.getElementById('buffers').innerHTML=tb+'</table>';}
 function esc(x){return String(x).replace(/[&<>"']/g,function(ch){return {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#39;'}[ch];});}
 pick.max=V.tiles[n-1];pick.addEventListener('change',function(){show(+pick.value);});
 show(D.busiest==null?V.tiles[0]:D.busiest);
 // Exchange bytes per tile.
 var xh=document.getElementById('exchange-chart');
 if(xh){var mx=1;for(var q=0;q<n;q++)mx=Math.max(mx,V.exchange_in[q],V.exchange_out[q]);var W2=Math.max(300,Math.min(1000,n*2)),H=160,s2=svg(W2+60,H+30,xh);
  function line(vals,color){var d='';for(var q=0;q<n;q++){d+=(q?'L':'M')+(50+q*W2/Math.max(1,n-1)).toFixed(1)+' '+(H-H*vals[q]/mx+5).toFixed(1);}el('path',{d:d,fill:'none',stroke:color,'stroke-width':1},s2);}
  el('line',{x1:50,y1:H+5,x2:50+W2,y2:H+5,stroke:'#999'},s2);txt(s2,46,12,fmt(mx),{'text-anchor':'end'});txt(s2,46,H+5,'0',{'text-anchor':'end'});
  line(V.exchange_out,'#e76f51');line(V.exchange_in,'#2a9d8f');txt(s2,50,H+24,'tile '+V.tiles[0]);txt(s2,50+W2,H+24,'tile '+V.tiles[n-1],{'text-anchor':'end'});
  txt(s2,W2/2,H+24,'out (sent)',{fill:'#e76f51'});txt(s2,W2/2+80,H+24,'in (received)',{fill:'#2a9d8f'});}
}
// Steps, stacked compute / sync / exchange, estimate marks.
var sh=document.getElementById('steps-chart');
if(sh&&D.steps){var T=D.steps,mx=1;T.forEach(function(t){mx=Math.max(mx,t[3]+t[4]+t[5],t[6]||0);});
 var bw=Math.max(8,Math.min(48,Math.floor(900/T.length))),H=200,s3=svg(T.length*bw+120,H+60,sh);
 T.forEach(function(t,i){var x=60+i*bw,y=H+10;[[t[3],'#5b8def','compute'],[t[4],'#bbbbbb','sync'],[t[5],'#f4a261','exchange']].forEach(function(p){var hh=H*p[0]/mx;y-=hh;var r=el('rect',{x:x,y:y,width:bw-2,height:hh,fill:p[1]},s3);var tt=el('title',{},r);tt.textContent='step '+t[0]+' '+t[1]+' '+t[2]+': '+p[2]+' '+p[0]+' cycles';});
  if(t[6]!=null){var ey=H+10-H*t[6]/mx;el('line',{x1:x-1,y1:ey,x2:x+bw-1,y2:ey,stroke:'#000','stroke-width':2},s3);}
  if(T.length<=60)txt(s3,x+bw/2,H+24,String(t[0]),{'text-anchor':'middle'});});
 txt(s3,56,14,fmt(mx),{'text-anchor':'end'});txt(s3,56,H+10,'0',{'text-anchor':'end'});
 txt(s3,60,H+44,'■ compute',{fill:'#5b8def'});txt(s3,150,H+44,'■ sync',{fill:'#999'});txt(s3,220,H+44,'■ exchange',{fill:'#f4a261'});txt(s3,320,H+44,'— estimate');}
document.body.setAttribute('data-ok','1');
}catch(e){fail(e&&e.stack?e.stack:e);}
})();
"#;
