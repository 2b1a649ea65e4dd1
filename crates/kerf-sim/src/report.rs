//! The report of a run (docs/design.md, "Report"), and its text and HTML renderings.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub scenario: String,
    pub end_seconds: Seconds,
    pub summary: Summary,
    pub nodes: Vec<NodeReport>,
    pub pods: Vec<PodReport>,
    pub disruptions: Vec<Disruption>,
    /// Nodes node repair rebooted instead of replacing (`RebootForRepair`; left out when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reboots: Vec<Reboot>,
    /// Samples of the fleet: at t=0, at every change, and at the end.
    pub timeline: Vec<Sample>,
    /// One entry per CapacityBuffer (left out when the scenario has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub buffers: Vec<crate::report_buffers::BufferReport>,
    /// One entry per ProvisioningRequest (left out when the scenario has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub provisioning_requests: Vec<crate::report_requests::ProvisioningRequestReport>,
    /// One entry per CapacityQuota (left out when the scenario has none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quotas: Vec<crate::report_quotas::QuotaReport>,
    /// Per NodePool with consolidations: how many were taken and how many of them
    /// `consolidationPolicy: Balanced` would have refused (left out when there were none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub balanced_what_if: Vec<BalancedWhatIf>,
    /// The cluster before and after the controllers ran (`kerf simulate --from-cluster`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<crate::comparison::Comparison>,
}

/// What Balanced would have decided of one pool's consolidations.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BalancedWhatIf {
    pub node_pool: String,
    /// The pool's policy.
    pub policy: String,
    pub consolidations: u64,
    /// Those whose score, as if the pool were Balanced, is below 0.5.
    pub balanced_would_refuse: u64,
    /// $/h those saved (the pool's share).
    pub refused_savings_per_hour: f64,
}

/// Seconds of virtual time: an integer when whole (the simulator's clock has millisecond steps).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seconds(pub f64);

impl Serialize for Seconds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.fract() == 0.0 && self.0.abs() < 9.0e15 {
            s.serialize_i64(self.0 as i64)
        } else {
            s.serialize_f64(self.0)
        }
    }
}

/// Dollars, rounded to 6 decimals so reports stay stable and readable.
pub fn dollars(v: f64) -> f64 {
    // `+ 0.0` turns an empty sum's -0.0 into 0.0.
    (v * 1e6).round() / 1e6 + 0.0
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub pods: usize,
    pub pods_running: usize,
    pub pods_pending: usize,
    pub nodes: usize,
    pub node_claims_launched: usize,
    pub node_claims_terminated: usize,
    pub cost_per_hour: f64,
    pub cost: f64,
    /// Nodes and $/h at the end per capacity type (`on-demand`, `reserved`, `spot`): reserved
    /// capacity, priced as declared, apart from what is bought by the hour.
    pub by_capacity_type: BTreeMap<String, CapacityTypeShare>,
}

/// One capacity type's share of the fleet at the end.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CapacityTypeShare {
    pub nodes: usize,
    pub cost_per_hour: f64,
}

impl Summary {
    /// The nodes and $/h of each capacity type among `nodes` (unmanaged nodes without the
    /// label are left out).
    pub fn shares(nodes: &[NodeReport]) -> BTreeMap<String, CapacityTypeShare> {
        let mut out: BTreeMap<String, CapacityTypeShare> = BTreeMap::new();
        for n in nodes {
            if let Some(ct) = &n.capacity_type {
                let share = out.entry(ct.clone()).or_default();
                share.nodes += 1;
                share.cost_per_hour = dollars(share.cost_per_hour + n.price_per_hour.unwrap_or(0.0));
            }
        }
        out
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub name: String,
    pub node_pool: Option<String>,
    pub node_claim: Option<String>,
    pub instance_type: Option<String>,
    pub capacity_type: Option<String>,
    /// The capacity reservation the node runs in: its `karpenter.k8s.aws/capacity-reservation-id`,
    /// or the `open` reservation EC2 put its on-demand instance in (without the
    /// `ReservedCapacity` gate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_reservation_id: Option<String>,
    pub zone: Option<String>,
    pub price_per_hour: Option<f64>,
    /// Why the price of a managed node is unknown (`pricePerHour` is then null).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price_unknown: Option<String>,
    /// `pricePerHour` derives from an estimated catalog price (written only when true).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub price_estimated: bool,
    /// What the cloud lists the node's offering at, written only when a NodeOverlay made
    /// `pricePerHour` differ from it (docs/design.md, "NodeOverlay").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub list_price_per_hour: Option<f64>,
    /// The NodeOverlays applied to the node: the one that set its price and those that added
    /// capacity, in precedence order (written only when there is one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub node_overlays: Vec<String>,
    pub ready: bool,
    pub pods: usize,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub taints: Vec<kerf_api::Taint>,
    pub allocatable: BTreeMap<String, String>,
    pub requested: BTreeMap<String, String>,
    /// For a managed node not being disrupted: why kerf would not remove or replace it now.
    pub disruption_blocked: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    pub owner: String,
    pub node: Option<String>,
    pub phase: String,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// When the decision was taken (the node tainted `karpenter.sh/disrupted`).
    pub at_seconds: Seconds,
    /// When its instance was gone; `None` while it drains.
    pub terminated_seconds: Option<Seconds>,
    pub node_claim: String,
    pub node: Option<String>,
    pub node_pool: Option<String>,
    pub instance_type: Option<String>,
    pub reason: String,
    /// NodeClaims launched to replace it.
    pub replacements: Vec<String>,
    pub detail: String,
    /// The Balanced score of a consolidation in a `Balanced` pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
}

/// A node node repair rebooted.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Reboot {
    /// When the reboot was issued.
    pub at_seconds: Seconds,
    pub node_claim: String,
    pub node: String,
    pub node_pool: String,
    /// The condition it was rebooted for (`AcceleratedHardwareReady`).
    pub condition: String,
    pub detail: String,
}

/// The fleet at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    #[serde(rename = "atSeconds", serialize_with = "as_seconds")]
    pub seconds: f64,
    pub nodes: usize,
    pub pods_running: usize,
    pub pods_pending: usize,
    pub cost_per_hour: f64,
}

fn as_seconds<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    Seconds(*v).serialize(s)
}

impl Report {
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
        s.push('\n');
        s
    }

    pub fn to_text(&self) -> String {
        let s = &self.summary;
        let mut out = String::new();
        let _ = writeln!(out, "Scenario {} ran {} of virtual time.", self.scenario, human_secs(self.end_seconds.0));
        let _ = writeln!(out);
        let not_ready = self.nodes.iter().filter(|n| !n.ready).count();
        let _ = writeln!(
            out,
            "Nodes: {}{} (NodeClaims launched {}, terminated {})",
            s.nodes,
            if not_ready > 0 { format!(", {not_ready} not ready") } else { String::new() },
            s.node_claims_launched,
            s.node_claims_terminated
        );
        // Group nodes by pool / instance type / zone / capacity type.
        // (pool, instance type, zone, capacity type) -> (nodes, $/h, pods)
        type Group = (String, String, String, String);
        let mut groups: BTreeMap<Group, (usize, f64, usize)> = BTreeMap::new();
        for n in &self.nodes {
            let g = groups
                .entry((
                    n.node_pool.clone().unwrap_or_else(|| "(unmanaged)".to_string()),
                    n.instance_type.clone().unwrap_or_else(|| "-".to_string()),
                    n.zone.clone().unwrap_or_else(|| "-".to_string()),
                    n.capacity_type.clone().unwrap_or_else(|| "-".to_string()),
                ))
                .or_default();
            g.0 += 1;
            g.1 += n.price_per_hour.unwrap_or(0.0);
            g.2 += n.pods;
        }
        if !groups.is_empty() {
            let rows: Vec<[String; 7]> = groups
                .iter()
                .map(|((pool, it, zone, ct), (count, price, pods))| {
                    [
                        pool.clone(),
                        it.clone(),
                        zone.clone(),
                        ct.clone(),
                        count.to_string(),
                        pods.to_string(),
                        format!("{price:.4}"),
                    ]
                })
                .collect();
            table(&mut out, &["NODEPOOL", "INSTANCE TYPE", "ZONE", "CAPACITY", "NODES", "PODS", "$/HOUR"], &rows);
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "Pods: {} ({} running, {} pending)", s.pods, s.pods_running, s.pods_pending);
        let mut owners: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for p in &self.pods {
            let o =
                owners.entry(if p.owner.is_empty() { "(bare pods)".to_string() } else { p.owner.clone() }).or_default();
            if p.phase == "Running" {
                o.0 += 1;
            } else {
                o.1 += 1;
            }
        }
        if !owners.is_empty() {
            let rows: Vec<[String; 3]> =
                owners.iter().map(|(o, (r, p))| [o.clone(), r.to_string(), p.to_string()]).collect();
            table(&mut out, &["OWNER", "RUNNING", "PENDING"], &rows);
        }
        let pending: Vec<&PodReport> = self.pods.iter().filter(|p| p.phase != "Running").collect();
        if !pending.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(out, "Pending pods and why:");
            // Pods of one workload usually share a reason: show each distinct reason once.
            let mut by_reason: BTreeMap<(String, String), Vec<&PodReport>> = BTreeMap::new();
            for p in &pending {
                by_reason
                    .entry((p.owner.clone(), p.reason.clone().unwrap_or_else(|| "not scheduled yet".to_string())))
                    .or_default()
                    .push(p);
            }
            for ((_, reason), pods) in by_reason {
                let first = pods[0];
                if pods.len() == 1 {
                    let _ = writeln!(out, "  {}/{}: {reason}", first.namespace, first.name);
                } else {
                    let _ = writeln!(out, "  {}/{} and {} more: {reason}", first.namespace, first.name, pods.len() - 1);
                }
            }
        }
        if self.timeline.len() > 1 {
            let _ = writeln!(out);
            let _ = writeln!(out, "Timeline:");
            // At most a dozen rows: every change for short runs, evenly picked ones for long runs.
            let picks: Vec<&Sample> = if self.timeline.len() <= 12 {
                self.timeline.iter().collect()
            } else {
                let n = self.timeline.len();
                (0..12).map(|i| &self.timeline[i * (n - 1) / 11]).collect()
            };
            let rows: Vec<[String; 5]> = picks
                .iter()
                .map(|p| {
                    [
                        human_secs(p.seconds),
                        p.nodes.to_string(),
                        p.pods_running.to_string(),
                        p.pods_pending.to_string(),
                        format!("{:.4}", p.cost_per_hour),
                    ]
                })
                .collect();
            table(&mut out, &["AT", "NODES", "PODS BOUND", "PODS PENDING", "$/HOUR"], &rows);
        }
        if !self.disruptions.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(out, "Disruptions:");
            for d in &self.disruptions {
                let gone = match d.terminated_seconds {
                    Some(t) => format!(", gone at {}", human_secs(t.0)),
                    None => ", still draining".to_string(),
                };
                let replaced = if d.replacements.is_empty() {
                    String::new()
                } else {
                    format!("; replaced by {}", d.replacements.join(", "))
                };
                let _ = writeln!(
                    out,
                    "  at {}: NodeClaim {} (node {}, {}) — {}{gone}{replaced}{}",
                    human_secs(d.at_seconds.0),
                    d.node_claim,
                    d.node.as_deref().unwrap_or("-"),
                    d.instance_type.as_deref().unwrap_or("-"),
                    d.reason,
                    if d.detail.is_empty() { String::new() } else { format!(": {}", d.detail) },
                );
            }
        }
        if !self.reboots.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(out, "Reboots (node repair):");
            for r in &self.reboots {
                let _ = writeln!(
                    out,
                    "  at {}: NodeClaim {} (node {}): {}",
                    human_secs(r.at_seconds.0),
                    r.node_claim,
                    r.node,
                    r.detail
                );
            }
        }
        let blocked: Vec<&NodeReport> = self.nodes.iter().filter(|n| n.disruption_blocked.is_some()).collect();
        if !blocked.is_empty() {
            let _ = writeln!(out);
            let _ = writeln!(out, "Nodes kerf does not disrupt, and why:");
            for n in blocked {
                let _ = writeln!(out, "  {}: {}", n.name, n.disruption_blocked.as_deref().unwrap_or_default());
            }
        }
        crate::report_buffers::text(&mut out, &self.buffers, s.cost_per_hour);
        crate::report_requests::text(&mut out, &self.provisioning_requests);
        crate::report_quotas::text(&mut out, &self.quotas);
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Cost: ${:.4}/hour at the end; ${:.4} over the {} run.",
            s.cost_per_hour,
            s.cost,
            human_secs(self.end_seconds.0)
        );
        if s.by_capacity_type.contains_key(kerf_api::labels::CAPACITY_TYPE_RESERVED) {
            let shares: Vec<String> = s
                .by_capacity_type
                .iter()
                .map(|(ct, share)| format!("{ct} {} node(s) ${:.4}/hour", share.nodes, share.cost_per_hour))
                .collect();
            let _ = writeln!(out, "By capacity type (reserved as declared): {}.", shares.join(", "));
        }
        if let Some(c) = &self.comparison {
            let _ = writeln!(out);
            out.push_str(&c.to_text(&human_secs(self.end_seconds.0)));
        }
        out
    }

    /// One self-contained page for an operator (see [`crate::report_html`]).
    pub fn to_html(&self) -> String {
        let mut value = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        // Samples not (yet) in the JSON form are handed to the page in the contract's shape.
        if let Some(obj) = value.as_object_mut()
            && !obj.contains_key("timeline")
        {
            let samples: Vec<serde_json::Value> = self
                .timeline
                .iter()
                .map(|p| {
                    serde_json::json!({"atSeconds": p.seconds, "nodes": p.nodes, "podsRunning": p.pods_running,
                                       "podsPending": p.pods_pending, "costPerHour": p.cost_per_hour})
                })
                .collect();
            obj.insert("timeline".to_string(), serde_json::Value::Array(samples));
        }
        crate::report_html::render(&value)
    }
}

pub(crate) fn table<const N: usize>(out: &mut String, header: &[&str; N], rows: &[[String; N]]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut l = String::from("  ");
        for (i, c) in cells.iter().enumerate() {
            l.push_str(c);
            if i + 1 < cells.len() {
                l.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        l
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for r in rows {
        let _ = writeln!(out, "{}", line(r.iter().map(String::as_str).collect()));
    }
}

/// A time in seconds as people read it: `90s` is `1m30s`; `2m`, `1h`, `1h5m0s`.
pub(crate) fn human_secs(s: f64) -> String {
    let total = s.round() as i64;
    let (h, m, sec) = (total / 3600, (total % 3600) / 60, total % 60);
    match (h, m, sec) {
        (0, 0, s) => format!("{s}s"),
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, 0) => format!("{h}h"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report {
            scenario: "t".to_string(),
            end_seconds: Seconds(120.0),
            summary: Summary {
                pods: 1,
                pods_running: 0,
                pods_pending: 1,
                nodes: 0,
                node_claims_launched: 0,
                node_claims_terminated: 0,
                cost_per_hour: 0.0,
                cost: 0.0,
                by_capacity_type: BTreeMap::new(),
            },
            nodes: vec![],
            pods: vec![PodReport {
                namespace: "default".to_string(),
                name: "p<1>".to_string(),
                owner: String::new(),
                node: None,
                phase: "Pending".to_string(),
                reason: Some("no instance type in NodePool default has resource vpc.amazonaws.com/pod-eni".to_string()),
            }],
            disruptions: vec![],
            reboots: vec![],
            timeline: vec![
                Sample { seconds: 0.0, nodes: 0, pods_pending: 1, pods_running: 0, cost_per_hour: 0.0 },
                Sample { seconds: 60.0, nodes: 2, pods_pending: 1, pods_running: 0, cost_per_hour: 0.2 },
            ],
            buffers: Vec::new(),
            provisioning_requests: Vec::new(),
            quotas: Vec::new(),
            balanced_what_if: Vec::new(),
            comparison: None,
        }
    }

    #[test]
    fn whole_seconds_serialize_as_integers() {
        let json = report().to_json();
        assert!(json.contains("\"endSeconds\": 120,"), "{json}");
    }

    #[test]
    fn html_report_is_self_contained_with_escaped_names_and_three_charts() {
        let html = report().to_html();
        assert_eq!(html.matches("<svg").count(), 3);
        assert!(!html.contains("src=") && !html.contains("href="), "no external assets");
        assert!(html.contains("p&lt;1&gt;"));
    }

    fn node(name: &str, pool: Option<&str>, price: Option<f64>) -> NodeReport {
        NodeReport {
            name: name.to_string(),
            node_pool: pool.map(str::to_string),
            node_claim: None,
            instance_type: Some("m5.large".to_string()),
            capacity_type: None,
            capacity_reservation_id: None,
            zone: None,
            price_per_hour: price,
            price_unknown: None,
            price_estimated: false,
            list_price_per_hour: None,
            node_overlays: Vec::new(),
            ready: true,
            pods: 1,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            taints: vec![],
            allocatable: BTreeMap::new(),
            requested: BTreeMap::new(),
            disruption_blocked: None,
        }
    }

    #[test]
    fn before_and_after_show_savings_by_nodepool_in_text_html_and_json() {
        let mut before = report();
        before.nodes =
            vec![node("a", Some("web"), Some(1.0)), node("b", Some("web"), Some(0.5)), node("m", None, None)];
        let mut after = report();
        after.nodes = vec![node("c", Some("web"), Some(0.9)), node("m", None, None)];
        after.comparison = Some(crate::comparison::Comparison::new(&before, &after));
        let c = after.comparison.as_ref().unwrap();
        assert_eq!((c.before.cost_per_hour, c.after.cost_per_hour, c.savings_per_hour), (1.5, 0.9, 0.6));
        assert_eq!(c.by_node_pool.len(), 2);
        assert_eq!((c.by_node_pool[0].nodes_before, c.by_node_pool[0].nodes_after), (2, 1));
        assert_eq!(c.by_node_pool[1].node_pool, None, "the unmanaged row comes last");
        let text = after.to_text();
        assert!(text.contains("savings: $0.6000/hour (40.0%)"), "{text}");
        let html = after.to_html();
        assert!(html.contains("<dd id=\"before-after-savings\">0.6000</dd>"), "{html}");
        assert!(html.contains(
            "<td>(unmanaged)</td><td class=\"num\">1</td><td class=\"num\">1</td><td class=\"num\">not priced</td>"
        ));
        assert!(after.to_json().contains("\"savingsPerHour\": 0.6"));
        assert!(!report().to_json().contains("comparison"), "left out of ordinary reports");
    }

    #[test]
    fn text_report_lists_pending_reason() {
        let text = report().to_text();
        assert!(text.contains("Pods: 1 (0 running, 1 pending)"), "{text}");
        assert!(text.contains("vpc.amazonaws.com/pod-eni"), "{text}");
    }
}
