//! The report's `buffers[]`: one entry per CapacityBuffer — the room it keeps (in pods), how
//! much of it exists on registered nodes, its `Provisioning` condition, and what the room costs
//! (its share of the price of the nodes holding it, shown apart from the workload's cost) — in
//! JSON, text and HTML.

use std::collections::BTreeMap;
use std::fmt::Write;

use kerf_api::capacitybuffer::CONDITION_PROVISIONING;
use kerf_api::{CapacityBuffer, Quantity, ResourceList};
use kerf_cloud::ManualClock;
use kerf_controller::buffer_room::BufferRoom;
use serde::Serialize;
use serde_json::Value;

use crate::report::{NodeReport, Seconds, dollars, human_secs, table};

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BufferReport {
    pub name: String,
    pub namespace: String,
    /// Room desired, in pods (the buffer's resolved replicas; outside its active window it keeps
    /// none, `placed` is 0 and `message` says so).
    pub replicas: i32,
    /// Room that exists on registered nodes, in pods.
    pub placed: usize,
    /// Room on NodeClaims still launching, in pods.
    pub launching: usize,
    /// The `Provisioning` condition's status (`True`, `False`), null before kerf wrote one.
    pub provisioning: Option<String>,
    /// When that condition last changed (seconds of virtual time).
    pub provisioning_since_seconds: Option<Seconds>,
    /// The condition's message (or, when the buffer could not be resolved, why).
    pub message: Option<String>,
    /// The share of the fleet's price the placed room takes: for each chunk, its node's price
    /// times the larger of its CPU and memory share of the node's allocatable.
    pub cost_per_hour: f64,
}

/// The larger of a pod's CPU and memory share of a node's allocatable (0 when it has none).
fn dominant_share(requests: &ResourceList, allocatable: &BTreeMap<String, String>) -> f64 {
    ["cpu", "memory"]
        .iter()
        .filter_map(|r| {
            let alloc = allocatable.get(*r).and_then(|q| Quantity::parse(q).ok())?.as_f64();
            (alloc > 0.0).then(|| requests.get(r).as_f64() / alloc)
        })
        .fold(0.0, f64::max)
        .min(1.0)
}

/// One entry per buffer, in namespace and name order.
pub fn buffer_reports(
    buffers: &BTreeMap<kerf_controller::ObjectKey, CapacityBuffer>,
    room: &BufferRoom,
    nodes: &[NodeReport],
) -> Vec<BufferReport> {
    let by_name: BTreeMap<&str, &NodeReport> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut out = Vec::new();
    for (key, b) in buffers {
        let mut placed = 0;
        let mut launching = 0;
        let mut cost = 0.0;
        for p in room.pods.iter().filter(|p| &p.buffer == key) {
            match (&p.held_on, p.registered) {
                (Some(n), true) => {
                    placed += 1;
                    if let Some(node) = by_name.get(n.as_str()) {
                        let share = dominant_share(&kerf_scheduling::pod_requests(&p.pod), &node.allocatable);
                        cost += share * node.price_per_hour.unwrap_or(0.0);
                    }
                }
                (Some(_), false) => launching += 1,
                (None, _) => {}
            }
        }
        let status = b.status.as_ref();
        let cond = b.condition(CONDITION_PROVISIONING);
        let ready = b.condition(kerf_api::capacitybuffer::CONDITION_READY_FOR_PROVISIONING);
        let message = match ready {
            Some(r) if !r.is_true() => r.message.clone(),
            _ => cond.and_then(|c| c.message.clone()),
        };
        out.push(BufferReport {
            name: b.name().to_string(),
            namespace: b.namespace().to_string(),
            replicas: status.and_then(|s| s.replicas).unwrap_or(0),
            placed,
            launching,
            provisioning: cond.map(|c| c.status.clone()),
            provisioning_since_seconds: cond
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| Seconds((t.0.as_millisecond() - ManualClock::EPOCH_MILLIS) as f64 / 1000.0)),
            message,
            cost_per_hour: dollars(cost),
        });
    }
    out
}

/// The text report's section (nothing when there are no buffers).
pub fn text(out: &mut String, buffers: &[BufferReport], fleet_per_hour: f64) {
    if buffers.is_empty() {
        return;
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "Capacity buffers (room kept for pods that do not exist yet):");
    let rows: Vec<[String; 7]> = buffers
        .iter()
        .map(|b| {
            [
                format!("{}/{}", b.namespace, b.name),
                b.replicas.to_string(),
                b.placed.to_string(),
                b.launching.to_string(),
                b.provisioning.clone().unwrap_or_else(|| "-".to_string()),
                format!("{:.4}", b.cost_per_hour),
                b.message.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(out, &["BUFFER", "PODS", "PLACED", "LAUNCHING", "PROVISIONING", "$/HOUR", "WHY"], &rows);
    let headroom: f64 = buffers.iter().map(|b| b.cost_per_hour).sum();
    let _ = writeln!(
        out,
        "Headroom: ${headroom:.4}/hour of the fleet's ${fleet_per_hour:.4}/hour is room the buffers keep free."
    );
}

/// The HTML report's section (nothing when the report has no buffers).
pub fn html(out: &mut String, r: &Value, esc: fn(&str) -> String) {
    let Some(list) = r["buffers"].as_array().filter(|b| !b.is_empty()) else { return };
    out.push_str("<h2>Capacity buffers</h2>\n");
    let headroom: f64 = list.iter().filter_map(|b| b["costPerHour"].as_f64()).sum();
    let fleet = r["summary"]["costPerHour"].as_f64().unwrap_or(0.0);
    let _ = writeln!(
        out,
        "<p id=\"headroom\">Headroom: ${headroom:.4}/hour of the fleet's ${fleet:.4}/hour is room kept free for pods that do not exist yet.</p>"
    );
    out.push_str(
        "<div class=\"scroll\"><table id=\"buffers\"><thead><tr><th>buffer</th><th>pods</th><th>placed</th>\
<th>launching</th><th>provisioning</th><th>since</th><th>$/hour</th><th>why</th></tr></thead><tbody>\n",
    );
    for b in list {
        let s = |k: &str| b[k].as_str().unwrap_or("—").to_string();
        let n = |k: &str| b[k].as_u64().map_or_else(|| "—".to_string(), |v| v.to_string());
        let since = b["provisioningSinceSeconds"].as_f64().map_or_else(|| "—".to_string(), human_secs);
        let _ = writeln!(
            out,
            "<tr><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.4}</td><td class=\"reason\">{}</td></tr>",
            esc(&s("namespace")),
            esc(&s("name")),
            b["replicas"].as_i64().unwrap_or(0),
            n("placed"),
            n("launching"),
            esc(&s("provisioning")),
            esc(&since),
            b["costPerHour"].as_f64().unwrap_or(0.0),
            esc(&s("message")),
        );
    }
    out.push_str("</tbody></table></div>\n");
}
