//! The report's `quotas[]` (docs/design.md, "Report"): one entry per CapacityQuota — its
//! limits, what its selected nodes held at the end, and the most they held at any sample of
//! the run — in JSON, text and HTML. The peaks are taken as the timeline is ([`QuotaPeaks`]).

use std::collections::BTreeMap;
use std::fmt::Write;

use kerf_api::ResourceList;
use kerf_controller::quotas::{usage, used_of_limits};
use kerf_controller::state::ClusterState;
use serde::Serialize;
use serde_json::Value;

use crate::report::table;

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
}

/// Per quota (by name), the most its selected nodes held of each limited resource so far.
#[derive(Debug, Clone, Default)]
pub struct QuotaPeaks(BTreeMap<String, ResourceList>);

/// What the nodes `quota` selects hold now, per limited resource (launched capacity).
fn used_now(state: &ClusterState, quota: &kerf_api::CapacityQuota) -> ResourceList {
    used_of_limits(quota, &usage(state, quota, |_| ResourceList::new()))
}

/// Each resource of `now` into `peak`, where it is more (or `peak` has none of it).
fn take_max(peak: &mut ResourceList, now: &ResourceList) {
    for (k, v) in now.iter() {
        if !peak.0.contains_key(k) || peak.get(k) < *v {
            peak.set(k.clone(), *v);
        }
    }
}

impl QuotaPeaks {
    /// Takes what each quota's nodes hold now into the peaks.
    pub fn sample(&mut self, state: &ClusterState) {
        for q in state.capacity_quotas().values() {
            let now = used_now(state, q);
            take_max(self.0.entry(q.name().to_string()).or_default(), &now);
        }
    }
}

/// One entry per quota, by name.
pub fn quota_reports(state: &ClusterState, peaks: &QuotaPeaks) -> Vec<QuotaReport> {
    state
        .capacity_quotas()
        .values()
        .map(|q| {
            let used = used_now(state, q);
            let mut peak_used = peaks.0.get(q.name()).cloned().unwrap_or_default();
            take_max(&mut peak_used, &used);
            QuotaReport { name: q.name().to_string(), limits: q.limits().clone(), used, peak_used }
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
}
