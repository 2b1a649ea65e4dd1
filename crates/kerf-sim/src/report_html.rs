//! The HTML report: one self-contained page for an operator (no external scripts, styles or
//! fonts), rendered from the report's JSON form so that every field the report carries shows up:
//! the summary, capacity by NodePool / instance type / zone / capacity type, pending pods grouped
//! by reason, disruptions, charts over virtual time, and a node table sorted by clicking its
//! headers (names in natural order, numbers numerically; `#sort=COLUMN` or `#sort=-COLUMN` in
//! the address sorts on load).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use crate::report::human_secs;

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em 2em;color:#1d2430;background:#fff}\
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;margin:1.6em 0 .4em;border-bottom:1px solid #dde2ea;padding-bottom:.2em}\
.cards{display:flex;flex-wrap:wrap;gap:.8em;margin:1em 0}\
.card{border:1px solid #dde2ea;border-radius:6px;padding:.5em .9em;min-width:7em}\
.card dt{font-size:80%;color:#5a6578}.card dd{margin:0;font-size:1.4em;font-weight:600;font-variant-numeric:tabular-nums}\
.card.bad dd{color:#b3261e}\
.groups{display:flex;flex-wrap:wrap;gap:1.5em;align-items:flex-start}\
.scroll{overflow-x:auto;max-width:100%}\
table{border-collapse:collapse;font-size:88%}\
th,td{padding:.25em .7em;text-align:left;white-space:nowrap;border-bottom:1px solid #e6e9ef}\
th{background:#f4f6f9;font-weight:600}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}\
table.sortable th{cursor:pointer;user-select:none}table.sortable th:hover{background:#e8ecf2}\
th[aria-sort=ascending]::after{content:' \\25B2';font-size:75%}th[aria-sort=descending]::after{content:' \\25BC';font-size:75%}\
td.reason{white-space:normal;min-width:30em;max-width:60em}\
.charts{display:flex;flex-wrap:wrap;gap:1.5em}figure{margin:0}figcaption{font-weight:600;margin-bottom:.2em}\
.muted{color:#5a6578}.no{color:#b3261e}\
";

/// Sorting of the node table: by the clicked column, natural order for text (so `ip-10-0-4`
/// comes before `ip-10-0-11`), numeric order for cells that carry `data-v`.
const SCRIPT: &str = r#"
(function () {
  function key(td) { var v = td.getAttribute('data-v'); return v === null ? td.textContent : parseFloat(v); }
  function sortBy(table, col, desc) {
    var tbody = table.tBodies[0];
    var rows = Array.prototype.slice.call(tbody.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]), c;
      if (typeof x === 'number' && typeof y === 'number') { c = x - y; }
      else { c = String(x).localeCompare(String(y), undefined, {numeric: true, sensitivity: 'base'}); }
      return desc ? -c : c;
    });
    rows.forEach(function (r) { tbody.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      if (i === col) { th.setAttribute('aria-sort', desc ? 'descending' : 'ascending'); }
      else { th.removeAttribute('aria-sort'); }
    });
  }
  Array.prototype.forEach.call(document.querySelectorAll('table.sortable'), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, i) {
      th.addEventListener('click', function () {
        sortBy(table, i, th.getAttribute('aria-sort') === 'ascending');
      });
    });
  });
  var m = /(?:^#|&)sort=(-?)([\w-]+)/.exec(location.hash);
  var nodes = document.getElementById('nodes');
  if (m && nodes) {
    Array.prototype.forEach.call(nodes.tHead.rows[0].cells, function (th, i) {
      if (th.getAttribute('data-col') === m[2]) { sortBy(nodes, i, m[1] === '-'); }
    });
  }
})();
"#;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn num_of(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

/// A JSON value as table text: lists joined, `null` as a dash.
fn cell_text(v: &Value) -> String {
    match v {
        Value::Null => "—".to_string(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Array(a) if a.is_empty() => "—".to_string(),
        Value::Array(a) => a.iter().map(cell_text).collect::<Vec<_>>().join(", "),
        Value::Object(o) => o.iter().map(|(k, v)| format!("{k}={}", cell_text(v))).collect::<Vec<_>>().join(", "),
    }
}

/// Renders the report (its JSON form) as one HTML page.
pub fn render(report: &Value) -> String {
    let title = esc(str_of(report, "scenario").unwrap_or(""));
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>kerf simulate: {title}</title>\n<style>{STYLE}</style></head><body>\n\
<h1>Scenario {title}</h1>\n<p class=\"muted\">Report after {} of virtual time.</p>\n",
        human_secs(num_of(report, "endSeconds"))
    );
    summary(&mut out, report);
    before_after(&mut out, report);
    capacity(&mut out, report);
    pending(&mut out, report);
    crate::report_buffers::html(&mut out, report, esc);
    crate::report_requests::html(&mut out, report, esc);
    crate::report_quotas::html(&mut out, report, esc);
    disruptions(&mut out, report);
    reboots_and_what_if(&mut out, report);
    charts(&mut out, report);
    nodes(&mut out, report);
    let _ = write!(out, "<script>{SCRIPT}</script>\n</body></html>\n");
    out
}

fn summary(out: &mut String, r: &Value) {
    let s = &r["summary"];
    let card = |out: &mut String, id: &str, label: &str, value: String, bad: bool| {
        let class = if bad { "card bad" } else { "card" };
        let _ = write!(out, "<dl class=\"{class}\"><dt>{label}</dt><dd id=\"summary-{id}\">{value}</dd></dl>");
    };
    out.push_str("<div class=\"cards\" id=\"summary\">");
    let int = |k: &str| s.get(k).and_then(Value::as_u64).unwrap_or(0);
    card(out, "nodes", "Nodes", int("nodes").to_string(), false);
    card(out, "pods", "Pods", int("pods").to_string(), false);
    card(out, "running", "Running", int("podsRunning").to_string(), false);
    card(out, "pending", "Pending", int("podsPending").to_string(), int("podsPending") > 0);
    card(out, "launched", "NodeClaims launched", int("nodeClaimsLaunched").to_string(), false);
    card(out, "terminated", "NodeClaims terminated", int("nodeClaimsTerminated").to_string(), false);
    card(out, "cost-per-hour", "$/hour at the end", format!("{:.4}", num_of(s, "costPerHour")), false);
    card(out, "cost", "$ over the run", format!("{:.4}", num_of(s, "cost")), false);
    // Reserved capacity (priced as declared) apart from what is bought by the hour.
    if let Some(shares) = s["byCapacityType"].as_object().filter(|m| m.contains_key("reserved")) {
        for (ct, share) in shares {
            let value = format!("{} ({:.4}/h)", share["nodes"].as_u64().unwrap_or(0), num_of(share, "costPerHour"));
            card(out, &format!("capacity-{}", esc(ct)), &format!("{} nodes", esc(ct)), value, false);
        }
    }
    out.push_str("</div>\n");
}

/// Before / after (`kerf simulate --from-cluster`): cost now and after, savings, by NodePool,
/// and the nodes whose price is unknown.
fn before_after(out: &mut String, r: &Value) {
    let c = &r["comparison"];
    if !c.is_object() {
        return;
    }
    let (b, a) = (&c["before"], &c["after"]);
    let _ = write!(
        out,
        "<h2>Before / after</h2>\n<p class=\"muted\">The cluster as the snapshot found it, and after {} of kerf's controllers.</p>\n",
        human_secs(num_of(r, "endSeconds"))
    );
    let saved = num_of(c, "savingsPerHour");
    let now = num_of(b, "costPerHour");
    let pct = if now > 0.0 { saved / now * 100.0 } else { 0.0 };
    out.push_str("<div class=\"cards\" id=\"before-after-summary\">");
    for (id, label, value, bad) in [
        ("now", "$/hour now", format!("{now:.4}"), false),
        ("after", "$/hour after", format!("{:.4}", num_of(a, "costPerHour")), false),
        ("savings", "Savings $/hour", format!("{saved:.4}"), saved < 0.0),
        ("savings-percent", "Savings", format!("{pct:.1}%"), saved < 0.0),
        ("nodes", "Nodes now → after", format!("{} → {}", num_of(b, "nodes"), num_of(a, "nodes")), false),
        ("pending", "Pending after", format!("{}", num_of(a, "podsPending")), num_of(a, "podsPending") > 0.0),
    ] {
        let class = if bad { "card bad" } else { "card" };
        let _ =
            write!(out, "<dl class=\"{class}\"><dt>{label}</dt><dd id=\"before-after-{id}\">{}</dd></dl>", esc(&value));
    }
    out.push_str("</div>\n<table id=\"before-after\"><thead><tr><th>NodePool</th><th class=\"num\">Nodes now</th><th class=\"num\">Nodes after</th><th class=\"num\">$/hour now</th><th class=\"num\">$/hour after</th><th class=\"num\">Savings $/hour</th></tr></thead><tbody>\n");
    for p in c["byNodePool"].as_array().into_iter().flatten() {
        let priced = !p["nodePool"].is_null();
        let money = |k: &str| if priced { format!("{:.4}", num_of(p, k)) } else { "not priced".to_string() };
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            esc(str_of(p, "nodePool").unwrap_or("(unmanaged)")),
            num_of(p, "nodesBefore"),
            num_of(p, "nodesAfter"),
            money("costPerHourBefore"),
            money("costPerHourAfter"),
            money("savingsPerHour"),
        );
    }
    out.push_str("</tbody></table>\n");
    if let Some(list) = c["unpricedNodes"].as_array().filter(|l| !l.is_empty()) {
        out.push_str("<p>Price unknown (left out of every sum):</p><ul id=\"unpriced\">");
        for u in list {
            let _ = write!(
                out,
                "<li>{}: {}</li>",
                esc(str_of(u, "name").unwrap_or("")),
                esc(str_of(u, "reason").unwrap_or(""))
            );
        }
        out.push_str("</ul>\n");
    }
}

/// Nodes, pods and $/hour grouped by one node field.
fn capacity(out: &mut String, r: &Value) {
    let Some(nodes) = r["nodes"].as_array().filter(|n| !n.is_empty()) else { return };
    out.push_str("<h2>Capacity</h2>\n<div class=\"groups\">\n");
    for (id, key, label) in [
        ("by-pool", "nodePool", "NodePool"),
        ("by-type", "instanceType", "instance type"),
        ("by-zone", "zone", "zone"),
        ("by-capacity", "capacityType", "capacity type"),
    ] {
        let mut groups: BTreeMap<String, (usize, u64, f64)> = BTreeMap::new();
        for n in nodes {
            let g = groups.entry(str_of(n, key).unwrap_or("(unmanaged)").to_string()).or_default();
            g.0 += 1;
            g.1 += n["pods"].as_u64().unwrap_or(0);
            g.2 += num_of(n, "pricePerHour");
        }
        let _ = write!(
            out,
            "<table id=\"{id}\"><thead><tr><th>{label}</th><th class=\"num\">nodes</th><th class=\"num\">pods</th><th class=\"num\">$/hour</th></tr></thead><tbody>"
        );
        for (k, (count, pods, price)) in &groups {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{count}</td><td class=\"num\">{pods}</td><td class=\"num\">{price:.4}</td></tr>",
                esc(k)
            );
        }
        out.push_str("</tbody></table>\n");
    }
    out.push_str("</div>\n");
}

/// Pending pods, one row per distinct reason.
fn pending(out: &mut String, r: &Value) {
    let pods: Vec<&Value> =
        r["pods"].as_array().map(|p| p.iter().filter(|p| p["phase"] != "Running").collect()).unwrap_or_default();
    out.push_str("<h2>Pending pods</h2>\n");
    if pods.is_empty() {
        out.push_str("<p id=\"pending-none\">Every pod is running.</p>\n");
        return;
    }
    let mut by_reason: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for p in pods {
        by_reason.entry(str_of(p, "reason").unwrap_or("not scheduled yet").to_string()).or_default().push(p);
    }
    let mut groups: Vec<(String, Vec<&Value>)> = by_reason.into_iter().collect();
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    out.push_str(
        "<div class=\"scroll\"><table id=\"pending\"><thead><tr><th class=\"num\">pods</th><th>owners</th><th>examples</th><th>why</th></tr></thead><tbody>\n",
    );
    for (reason, pods) in groups {
        let mut owners: Vec<&str> =
            pods.iter().map(|p| str_of(p, "owner").filter(|o| !o.is_empty()).unwrap_or("(bare pod)")).collect();
        owners.dedup();
        owners.sort_unstable();
        owners.dedup();
        let examples: Vec<String> = pods
            .iter()
            .take(3)
            .map(|p| format!("{}/{}", str_of(p, "namespace").unwrap_or(""), str_of(p, "name").unwrap_or("")))
            .collect();
        let more = if pods.len() > 3 { format!(" and {} more", pods.len() - 3) } else { String::new() };
        let _ = writeln!(
            out,
            "<tr><td class=\"num\">{}</td><td>{}</td><td>{}{more}</td><td class=\"reason\">{}</td></tr>",
            pods.len(),
            esc(&owners.join(", ")),
            esc(&examples.join(", ")),
            esc(&reason)
        );
    }
    out.push_str("</tbody></table></div>\n");
}

/// Every disruption with every field it carries (columns in the order the fields first appear).
fn disruptions(out: &mut String, r: &Value) {
    out.push_str("<h2>Disruptions</h2>\n");
    let Some(list) = r["disruptions"].as_array().filter(|d| !d.is_empty()) else {
        out.push_str("<p id=\"disruptions-none\">No node was disrupted.</p>\n");
        return;
    };
    object_table(out, "disruptions", list);
}

/// The report's `reboots[]` and `balancedWhatIf[]`, each a table when it has entries.
fn reboots_and_what_if(out: &mut String, r: &Value) {
    if let Some(list) = r["reboots"].as_array().filter(|l| !l.is_empty()) {
        out.push_str("<h2>Reboots</h2>\n<p class=\"muted\">Nodes node repair rebooted before replacing them.</p>\n");
        object_table(out, "reboots", list);
    }
    if let Some(list) = r["balancedWhatIf"].as_array().filter(|l| !l.is_empty()) {
        out.push_str(
            "<h2>What Balanced would do</h2>\n<p class=\"muted\">Per NodePool, the consolidations taken and how many \
             consolidationPolicy Balanced would have refused, with their savings.</p>\n",
        );
        object_table(out, "balanced-what-if", list);
    }
}

/// A table of objects: one column per field any of them has, in first-seen order; times
/// (`...Seconds`) in words.
fn object_table(out: &mut String, id: &str, list: &[Value]) {
    let mut columns: Vec<&str> = Vec::new();
    for d in list {
        if let Some(o) = d.as_object() {
            for k in o.keys() {
                if !columns.contains(&k.as_str()) {
                    columns.push(k);
                }
            }
        }
    }
    let _ = write!(out, "<div class=\"scroll\"><table id=\"{id}\"><thead><tr>");
    for c in &columns {
        let _ = write!(out, "<th>{}</th>", esc(c));
    }
    out.push_str("</tr></thead><tbody>\n");
    for d in list {
        out.push_str("<tr>");
        for c in &columns {
            let v = &d[*c];
            let text = match (c.ends_with("Seconds"), v.as_f64()) {
                (true, Some(s)) => human_secs(s),
                _ => cell_text(v),
            };
            let class = if *c == "detail" { " class=\"reason\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", esc(&text));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

/// Charts of the timeline (nodes, pods, cost over virtual time); without one, the current
/// fleet by instance type.
fn charts(out: &mut String, r: &Value) {
    let end = num_of(r, "endSeconds");
    let samples = r["timeline"].as_array().filter(|t| !t.is_empty());
    out.push_str("<h2>Over time</h2>\n<div class=\"charts\">\n");
    match samples {
        Some(t) => {
            let ts: Vec<f64> = t.iter().map(|s| num_of(s, "atSeconds")).collect();
            let series = |k: &str| t.iter().map(|s| num_of(s, k)).collect::<Vec<f64>>();
            chart(out, "chart-nodes", "Nodes", &ts, &[("nodes", &series("nodes"), "#2a7d46")], end, false);
            chart(
                out,
                "chart-pods",
                "Pods",
                &ts,
                &[("running", &series("podsRunning"), "#2f5fb3"), ("pending", &series("podsPending"), "#c2410c")],
                end,
                false,
            );
            chart(
                out,
                "chart-cost",
                "Fleet cost ($/hour)",
                &ts,
                &[("$/hour", &series("costPerHour"), "#7c3aed")],
                end,
                true,
            );
        }
        None => out.push_str("<p class=\"muted\">This report has no timeline.</p>\n"),
    }
    out.push_str("</div>\n");
}

/// Round tick step for a range: 1, 2 or 5 times a power of ten.
fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = (max / ticks).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    let m = if n <= 1.0 {
        1.0
    } else if n <= 2.0 {
        2.0
    } else if n <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// A step chart with labelled axes (value ticks, time ticks) as inline SVG.
pub(crate) fn chart(
    out: &mut String,
    id: &str,
    title: &str,
    ts: &[f64],
    series: &[(&str, &[f64], &str)],
    end: f64,
    money: bool,
) {
    const W: f64 = 460.0;
    const H: f64 = 220.0;
    const L: f64 = 56.0;
    const R: f64 = 12.0;
    const T: f64 = 12.0;
    const B: f64 = 40.0;
    let max_v = series.iter().flat_map(|(_, ys, _)| ys.iter().copied()).fold(0.0_f64, f64::max);
    let step_v = if money { nice_step(max_v.max(0.01), 4.0) } else { nice_step(max_v.max(1.0), 4.0).max(1.0) };
    let top = (max_v / step_v).ceil().max(1.0) * step_v;
    let max_t = end.max(ts.last().copied().unwrap_or(0.0)).max(1.0);
    let step_t = nice_step(max_t, 5.0);
    let x = |t: f64| L + (W - L - R) * t / max_t;
    let y = |v: f64| T + (H - T - B) * (1.0 - v / top);
    let _ = write!(
        out,
        "<figure id=\"{id}\"><figcaption>{}</figcaption><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"{}\" font-size=\"11\" fill=\"#1d2430\">",
        esc(title),
        esc(title)
    );
    // Value axis with grid lines.
    let mut v = 0.0;
    while v <= top + step_v / 2.0 {
        let label = if money { format!("{v:.2}") } else { format!("{v:.0}") };
        let _ = write!(
            out,
            "<line x1=\"{L}\" y1=\"{yy:.1}\" x2=\"{xr}\" y2=\"{yy:.1}\" stroke=\"#e6e9ef\"/><text class=\"ytick\" x=\"{lx}\" y=\"{ty:.1}\" text-anchor=\"end\">{label}</text>",
            yy = y(v),
            xr = W - R,
            lx = L - 6.0,
            ty = y(v) + 4.0
        );
        v += step_v;
    }
    // Time axis.
    let mut t = 0.0;
    while t <= max_t + 1e-9 {
        let _ = write!(
            out,
            "<line x1=\"{xx:.1}\" y1=\"{b}\" x2=\"{xx:.1}\" y2=\"{b4}\" stroke=\"#8a94a6\"/><text class=\"xtick\" x=\"{xx:.1}\" y=\"{tl}\" text-anchor=\"middle\">{}</text>",
            human_secs(t),
            xx = x(t),
            b = H - B,
            b4 = H - B + 4.0,
            tl = H - B + 16.0
        );
        t += step_t;
    }
    let _ = write!(
        out,
        "<line x1=\"{L}\" y1=\"{b}\" x2=\"{xr}\" y2=\"{b}\" stroke=\"#8a94a6\"/><line x1=\"{L}\" y1=\"{T}\" x2=\"{L}\" y2=\"{b}\" stroke=\"#8a94a6\"/>\
<text x=\"{mid}\" y=\"{lab}\" text-anchor=\"middle\" class=\"muted\">virtual time</text>",
        b = H - B,
        xr = W - R,
        mid = L + (W - L - R) / 2.0,
        lab = H - 6.0
    );
    for (k, (name, ys, color)) in series.iter().enumerate() {
        let mut path = String::new();
        for (i, (t, v)) in ts.iter().zip(ys.iter()).enumerate() {
            if i == 0 {
                let _ = write!(path, "M{:.1},{:.1}", x(*t), y(*v));
            } else {
                let _ = write!(path, " H{:.1} V{:.1}", x(*t), y(*v));
            }
        }
        if !path.is_empty() {
            let _ = write!(path, " H{:.1}", x(max_t));
        }
        let _ = write!(
            out,
            "<path d=\"{path}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\
<rect x=\"{lx:.1}\" y=\"{ly}\" width=\"10\" height=\"3\" fill=\"{color}\"/><text x=\"{tx:.1}\" y=\"{ty}\">{}</text>",
            esc(name),
            lx = L + 8.0 + 90.0 * k as f64,
            ly = T + 2.0,
            tx = L + 22.0 + 90.0 * k as f64,
            ty = T + 7.0
        );
    }
    out.push_str("</svg></figure>\n");
}

/// The node table, sortable by any column.
fn nodes(out: &mut String, r: &Value) {
    out.push_str("<h2>Nodes</h2>\n");
    let Some(nodes) = r["nodes"].as_array().filter(|n| !n.is_empty()) else {
        out.push_str("<p>No nodes.</p>\n");
        return;
    };
    let blocked = nodes.iter().any(|n| n.get("disruptionBlocked").is_some());
    let mut cols: Vec<(&str, &str, bool)> = vec![
        ("name", "name", false),
        ("nodePool", "NodePool", false),
        ("nodeClaim", "NodeClaim", false),
        ("instanceType", "instance type", false),
        ("zone", "zone", false),
        ("capacityType", "capacity", false),
        ("pricePerHour", "$/hour", true),
        ("ready", "ready", false),
        ("pods", "pods", true),
        ("cpu", "cpu requested / allocatable", true),
        ("memory", "memory requested / allocatable", true),
    ];
    if nodes.iter().any(|n| n.get("capacityReservationId").is_some()) {
        cols.insert(6, ("capacityReservationId", "reservation", false));
    }
    if blocked {
        cols.push(("disruptionBlocked", "kept because", false));
    }
    out.push_str("<p class=\"muted\">Click a column header to sort.</p><div class=\"scroll\"><table id=\"nodes\" class=\"sortable\"><thead><tr>");
    for (key, label, num) in &cols {
        let class = if *num { " class=\"num\"" } else { "" };
        let _ = write!(out, "<th data-col=\"{key}\"{class}>{}</th>", esc(label));
    }
    out.push_str("</tr></thead><tbody>\n");
    for n in nodes {
        out.push_str("<tr>");
        for (key, _, _) in &cols {
            match *key {
                "pricePerHour" => match n[*key].as_f64() {
                    // An estimated catalog price is shown as such (≈, with a tooltip).
                    Some(p) if n["priceEstimated"].as_bool() == Some(true) => {
                        let _ = write!(out, "<td class=\"num\" data-v=\"{p}\" title=\"estimated price\">≈{p:.4}</td>");
                    }
                    // A price a NodeOverlay set says so, with the list price and the overlays.
                    Some(p) if n["listPricePerHour"].is_f64() => {
                        let list = n["listPricePerHour"].as_f64().unwrap_or(p);
                        let names: Vec<&str> =
                            n["nodeOverlays"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
                        let title = esc(&format!("list price {list:.4} $/h; NodeOverlay {}", names.join(", ")));
                        let _ = write!(out, "<td class=\"num\" data-v=\"{p}\" title=\"{title}\">{p:.4}°</td>");
                    }
                    Some(p) => {
                        let _ = write!(out, "<td class=\"num\" data-v=\"{p}\">{p:.4}</td>");
                    }
                    None => out.push_str("<td class=\"num\" data-v=\"-1\">—</td>"),
                },
                "pods" => {
                    let p = n["pods"].as_u64().unwrap_or(0);
                    let _ = write!(out, "<td class=\"num\" data-v=\"{p}\">{p}</td>");
                }
                "ready" => {
                    let ready = n["ready"].as_bool().unwrap_or(false);
                    let class = if ready { "" } else { " class=\"no\"" };
                    let _ = write!(out, "<td{class}>{}</td>", if ready { "yes" } else { "no" });
                }
                "cpu" | "memory" => {
                    let req = n["requested"][*key].as_str().unwrap_or("0");
                    let alloc = n["allocatable"][*key].as_str().unwrap_or("—");
                    let share = match (kerf_api::Quantity::parse(req), kerf_api::Quantity::parse(alloc)) {
                        (Ok(a), Ok(b)) if b.as_f64() > 0.0 => a.as_f64() / b.as_f64(),
                        _ => 0.0,
                    };
                    let _ = write!(
                        out,
                        "<td class=\"num\" data-v=\"{share:.6}\">{} / {} ({:.0}%)</td>",
                        esc(req),
                        esc(alloc),
                        share * 100.0
                    );
                }
                _ => {
                    let v = &n[*key];
                    let text = match v {
                        Value::Null if *key == "nodePool" => "(unmanaged)".to_string(),
                        other => cell_text(other),
                    };
                    let _ = write!(out, "<td>{}</td>", esc(&text));
                }
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody></table></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_steps_are_round_numbers() {
        assert_eq!(nice_step(100.0, 4.0), 50.0);
        assert_eq!(nice_step(7.0, 4.0), 2.0);
        assert_eq!(nice_step(300.0, 5.0), 100.0);
        assert!((nice_step(0.34, 4.0) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn every_disruption_field_becomes_a_column() {
        let r = serde_json::json!({
            "scenario": "t", "endSeconds": 60, "summary": {}, "nodes": [], "pods": [],
            "disruptions": [{"atSeconds": 30, "nodeClaim": "a", "reason": "Empty", "replacements": ["b", "c"], "detail": "x<y"}]
        });
        let html = render(&r);
        for h in ["<th>atSeconds</th>", "<th>replacements</th>", "<th>detail</th>"] {
            assert!(html.contains(h), "{h}");
        }
        assert!(html.contains("<td>30s</td>") && html.contains("<td>b, c</td>") && html.contains("x&lt;y"));
        assert!(!html.contains("src=") && !html.contains("href=") && !html.contains("@import"), "nothing external");
    }

    #[test]
    fn reboots_and_the_balanced_what_if_get_tables_when_they_have_entries() {
        let mut r = serde_json::json!({
            "scenario": "t", "endSeconds": 60, "summary": {}, "nodes": [], "pods": [], "disruptions": [],
            "reboots": [{"atSeconds": 300, "nodeClaim": "a", "condition": "Ready"}],
            "balancedWhatIf": [{"nodePool": "p", "consolidations": 4, "balancedWouldRefuse": 3}]
        });
        let html = render(&r);
        assert!(html.contains("<table id=\"reboots\">") && html.contains("<td>5m</td>"), "{html}");
        assert!(html.contains("<table id=\"balanced-what-if\">") && html.contains("<th>balancedWouldRefuse</th>"));
        r["reboots"] = serde_json::json!([]);
        r["balancedWhatIf"] = serde_json::Value::Null;
        let html = render(&r);
        assert!(!html.contains("Reboots") && !html.contains("What Balanced would do"));
    }

    #[test]
    fn a_price_a_node_overlay_set_names_the_list_price_and_the_overlay() {
        let node = |name: &str, extra: serde_json::Value| {
            let mut n = serde_json::json!({"name": name, "nodePool": "p", "pricePerHour": 0.0714, "pods": 1});
            if let (Some(n), Some(extra)) = (n.as_object_mut(), extra.as_object()) {
                n.extend(extra.clone());
            }
            n
        };
        let r = serde_json::json!({
            "scenario": "t", "endSeconds": 60, "summary": {}, "pods": [], "disruptions": [],
            "nodes": [
                node("overlaid", serde_json::json!({"listPricePerHour": 0.102, "nodeOverlays": ["m5-plan"]})),
                node("listed", serde_json::json!({})),
            ]
        });
        let html = render(&r);
        assert!(html.contains("title=\"list price 0.1020 $/h; NodeOverlay m5-plan\">0.0714°</td>"), "{html}");
        assert_eq!(html.matches('°').count(), 1, "only the overlaid node is marked");
    }
}
