//! The report's `quotas[]` (docs/design.md, "Report"): one entry per CapacityQuota — its
//! limits, what its selected nodes held at the end, the most they held at any sample of the
//! run, and what they held over the run (`timeline`, an entry only where it changed) — in
//! JSON, text and HTML. Peaks and timelines are taken as the report's timeline is
//! ([`QuotaHistory`]).
//!
//! What a quota's nodes hold is its `status.used` (what `kerf controller` writes, launching
//! claims included), or the launched capacity of its nodes before any status was written.

use std::collections::BTreeMap;
use std::fmt::Write;

use kerf_api::{Quantity, ResourceList};
use kerf_controller::quotas::{usage, used_of_limits};
use kerf_controller::state::ClusterState;
use serde::Serialize;
use serde_json::Value;

use crate::report::{Seconds, table};

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QuotaReport {
    pub name: String,
    /// `spec.limits.resources`.
    pub limits: ResourceList,
    /// What the selected nodes held at the end, per limited resource.
    pub used: ResourceList,
    /// The most they held at any moment of the run, per limited resource.
    pub peak_used: ResourceList,
    /// What they held over the run: the first sample and each one that differs from the one
    /// before it.
    pub timeline: Vec<QuotaSample>,
}

/// What a quota's nodes held from `at_seconds` on.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QuotaSample {
    pub at_seconds: Seconds,
    pub used: ResourceList,
}

/// Per quota (by name), the most its selected nodes held of each limited resource so far and
/// what they held over time.
#[derive(Debug, Clone, Default)]
pub struct QuotaHistory(BTreeMap<String, History>);

#[derive(Debug, Clone, Default)]
struct History {
    peak: ResourceList,
    timeline: Vec<QuotaSample>,
}

/// What the nodes `quota` selects hold now, per limited resource: its `status.used` once
/// written, else their launched capacity.
fn used_now(state: &ClusterState, quota: &kerf_api::CapacityQuota) -> ResourceList {
    match quota.status.as_ref().and_then(|s| s.used.as_ref()) {
        Some(u) => used_of_limits(quota, &u.resources),
        None => used_of_limits(quota, &usage(state, quota, |_| ResourceList::new())),
    }
}

/// Each resource of `now` into `peak`, where it is more (or `peak` has none of it).
fn take_max(peak: &mut ResourceList, now: &ResourceList) {
    for (k, v) in now.iter() {
        if !peak.0.contains_key(k) || peak.get(k) < *v {
            peak.set(k.clone(), *v);
        }
    }
}

/// `now` into `timeline` at `seconds`: it replaces a sample of the same instant, and is not
/// kept when it equals the sample before it.
fn record(timeline: &mut Vec<QuotaSample>, seconds: f64, now: ResourceList) {
    if timeline.last().is_some_and(|s| s.at_seconds.0 == seconds) {
        timeline.pop();
    }
    if timeline.last().is_none_or(|s| s.used != now) {
        timeline.push(QuotaSample { at_seconds: Seconds(seconds), used: now });
    }
}

impl QuotaHistory {
    /// Takes what each quota's nodes hold at `seconds` into the peaks and timelines.
    pub fn sample(&mut self, state: &ClusterState, seconds: f64) {
        for q in state.capacity_quotas().values() {
            let now = used_now(state, q);
            let h = self.0.entry(q.name().to_string()).or_default();
            take_max(&mut h.peak, &now);
            record(&mut h.timeline, seconds, now);
        }
    }
}

/// One entry per quota, by name, as of `seconds` (the end of the report).
pub fn quota_reports(state: &ClusterState, history: &QuotaHistory, seconds: f64) -> Vec<QuotaReport> {
    state
        .capacity_quotas()
        .values()
        .map(|q| {
            let used = used_now(state, q);
            let h = history.0.get(q.name()).cloned().unwrap_or_default();
            let mut peak_used = h.peak;
            take_max(&mut peak_used, &used);
            let mut timeline = h.timeline;
            if timeline.last().is_none_or(|s| s.at_seconds.0 <= seconds) {
                record(&mut timeline, seconds, used.clone());
            }
            QuotaReport { name: q.name().to_string(), limits: q.limits().clone(), used, peak_used, timeline }
        })
        .collect()
}

/// `cpu 62/64, nodes 3/10`: each limited resource, used against its limit.
fn against(used: &ResourceList, limits: &ResourceList) -> String {
    limits.iter().map(|(k, l)| format!("{k} {}/{l}", used.get(k))).collect::<Vec<_>>().join(", ")
}

/// The text report's section (nothing when there are no quotas).
pub fn text(out: &mut String, quotas: &[QuotaReport]) {
    if quotas.is_empty() {
        return;
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Capacity quotas (used of limit):");
    let rows: Vec<[String; 3]> = quotas
        .iter()
        .map(|q| [q.name.clone(), against(&q.used, &q.limits), against(&q.peak_used, &q.limits)])
        .collect();
    table(out, &["QUOTA", "AT THE END", "PEAK"], &rows);
}

/// A `{resource: quantity}` object of the JSON report as `k v/limit, ...`.
fn against_json(used: &Value, limits: &Value) -> String {
    let Some(limits) = limits.as_object() else { return String::new() };
    limits
        .iter()
        .map(|(k, l)| format!("{k} {}/{}", used[k].as_str().unwrap_or("0"), l.as_str().unwrap_or("")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The HTML report's section (nothing when the report has no quotas).
pub fn html(out: &mut String, r: &Value, esc: fn(&str) -> String) {
    let Some(list) = r["quotas"].as_array().filter(|b| !b.is_empty()) else { return };
    out.push_str("<h2>Capacity quotas</h2>\n");
    out.push_str(
        "<div class=\"scroll\"><table id=\"capacity-quotas\"><thead><tr><th>quota</th><th>used of limit at the end</th>\
<th>peak</th></tr></thead><tbody>\n",
    );
    for q in list {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(q["name"].as_str().unwrap_or_default()),
            esc(&against_json(&q["used"], &q["limits"])),
            esc(&against_json(&q["peakUsed"], &q["limits"])),
        );
    }
    out.push_str("</tbody></table></div>\n");
    charts(out, list, r["endSeconds"].as_f64().unwrap_or(0.0), esc);
}

/// A quantity of the JSON report as a number (0 when it is not one).
fn number(v: &Value) -> f64 {
    v.as_str().and_then(|s| Quantity::parse(s).ok()).map_or(0.0, |q| q.as_f64())
}

/// One chart per quota with a timeline: each limited resource's use as a percentage of its
/// limit over virtual time (limits of zero are left out: no share of them is defined).
fn charts(out: &mut String, list: &[Value], end: f64, esc: fn(&str) -> String) {
    let with_timeline: Vec<&Value> =
        list.iter().filter(|q| q["timeline"].as_array().is_some_and(|t| !t.is_empty())).collect();
    if with_timeline.is_empty() {
        return;
    }
    out.push_str("<div class=\"charts\">\n");
    for q in with_timeline {
        let name = q["name"].as_str().unwrap_or_default();
        let samples = q["timeline"].as_array().map(Vec::as_slice).unwrap_or_default();
        let ts: Vec<f64> = samples.iter().map(|s| s["atSeconds"].as_f64().unwrap_or(0.0)).collect();
        let colors = ["#2a7d46", "#2f5fb3", "#c2410c", "#7c3aed", "#0e7490", "#a16207"];
        let series: Vec<(String, Vec<f64>)> = q["limits"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, l)| {
                let limit = number(l);
                (limit > 0.0)
                    .then(|| (k.clone(), samples.iter().map(|s| 100.0 * number(&s["used"][k]) / limit).collect()))
            })
            .collect();
        let series: Vec<(&str, &[f64], &str)> =
            series.iter().zip(colors.iter().cycle()).map(|((k, ys), c)| (k.as_str(), ys.as_slice(), *c)).collect();
        crate::report_html::chart(
            out,
            &format!("chart-quota-{}", esc(name)),
            &format!("CapacityQuota {name}: % of limit used"),
            &ts,
            &series,
            end,
            false,
        );
    }
    out.push_str("</div>\n");
}
