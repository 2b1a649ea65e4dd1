//! Before and after: the cluster as a snapshot found it against the cluster after kerf's
//! controllers ran on it (`kerf simulate --from-cluster`). Cost now and after, and savings by
//! NodePool; nodes whose price is unknown are named and left out of every sum, never guessed;
//! nodes kerf does not manage are counted but not priced (they stay as they are).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::report::{NodeReport, Report, dollars};

/// `comparison` in the JSON report.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    pub before: Fleet,
    pub after: Fleet,
    /// `before.costPerHour - after.costPerHour` (negative: kerf would spend more).
    pub savings_per_hour: f64,
    /// One row per NodePool with nodes before or after, then one (`nodePool: null`) for the
    /// nodes no NodePool manages.
    pub by_node_pool: Vec<PoolChange>,
    /// Nodes (before or after) whose price is unknown, and why.
    pub unpriced_nodes: Vec<UnpricedNode>,
}

/// The fleet at one moment.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    pub nodes: usize,
    pub pods_running: usize,
    pub pods_pending: usize,
    /// The summed price of the managed nodes whose price is known.
    pub cost_per_hour: f64,
    /// Nodes no NodePool manages (not priced).
    pub unmanaged_nodes: usize,
    /// Managed nodes whose price is unknown (not in `costPerHour`).
    pub unpriced_nodes: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PoolChange {
    pub node_pool: Option<String>,
    pub nodes_before: usize,
    pub nodes_after: usize,
    pub cost_per_hour_before: f64,
    pub cost_per_hour_after: f64,
    pub savings_per_hour: f64,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UnpricedNode {
    pub name: String,
    pub node_pool: Option<String>,
    pub instance_type: Option<String>,
    pub reason: String,
}

fn fleet(r: &Report) -> Fleet {
    let managed = |n: &&NodeReport| n.node_pool.is_some();
    Fleet {
        nodes: r.nodes.len(),
        pods_running: r.summary.pods_running,
        pods_pending: r.summary.pods_pending,
        cost_per_hour: dollars(r.nodes.iter().filter(managed).filter_map(|n| n.price_per_hour).sum()),
        unmanaged_nodes: r.nodes.iter().filter(|n| n.node_pool.is_none()).count(),
        unpriced_nodes: r.nodes.iter().filter(managed).filter(|n| n.price_unknown.is_some()).count(),
    }
}

impl Comparison {
    /// Compares the report taken before the controllers ran with the one taken after.
    pub fn new(before: &Report, after: &Report) -> Comparison {
        let (b, a) = (fleet(before), fleet(after));
        let mut pools: BTreeMap<Option<String>, PoolChange> = BTreeMap::new();
        for (nodes, is_after) in [(&before.nodes, false), (&after.nodes, true)] {
            for n in nodes {
                let row = pools.entry(n.node_pool.clone()).or_insert_with(|| PoolChange {
                    node_pool: n.node_pool.clone(),
                    nodes_before: 0,
                    nodes_after: 0,
                    cost_per_hour_before: 0.0,
                    cost_per_hour_after: 0.0,
                    savings_per_hour: 0.0,
                });
                let price = if n.node_pool.is_some() { n.price_per_hour.unwrap_or(0.0) } else { 0.0 };
                if is_after {
                    row.nodes_after += 1;
                    row.cost_per_hour_after += price;
                } else {
                    row.nodes_before += 1;
                    row.cost_per_hour_before += price;
                }
            }
        }
        // Managed pools first (by name), the unmanaged row last.
        let mut by_node_pool: Vec<PoolChange> = pools
            .into_values()
            .map(|mut p| {
                p.cost_per_hour_before = dollars(p.cost_per_hour_before);
                p.cost_per_hour_after = dollars(p.cost_per_hour_after);
                p.savings_per_hour = dollars(p.cost_per_hour_before - p.cost_per_hour_after);
                p
            })
            .collect();
        by_node_pool.sort_by_key(|p| (p.node_pool.is_none(), p.node_pool.clone()));
        let mut unpriced: BTreeMap<String, UnpricedNode> = BTreeMap::new();
        for n in before.nodes.iter().chain(&after.nodes) {
            if let Some(reason) = &n.price_unknown {
                unpriced.entry(n.name.clone()).or_insert_with(|| UnpricedNode {
                    name: n.name.clone(),
                    node_pool: n.node_pool.clone(),
                    instance_type: n.instance_type.clone(),
                    reason: reason.clone(),
                });
            }
        }
        Comparison {
            savings_per_hour: dollars(b.cost_per_hour - a.cost_per_hour),
            before: b,
            after: a,
            by_node_pool,
            unpriced_nodes: unpriced.into_values().collect(),
        }
    }

    /// The before / after section of the text report.
    pub fn to_text(&self, after: &str) -> String {
        let mut out = String::new();
        let (b, a) = (&self.before, &self.after);
        let _ = writeln!(out, "Before / after ({after} of kerf's controllers on the snapshot):");
        let _ = writeln!(
            out,
            "  now:   {} nodes, ${:.4}/hour, {} pods running, {} pending",
            b.nodes, b.cost_per_hour, b.pods_running, b.pods_pending
        );
        let _ = writeln!(
            out,
            "  after: {} nodes, ${:.4}/hour, {} pods running, {} pending",
            a.nodes, a.cost_per_hour, a.pods_running, a.pods_pending
        );
        let pct = if b.cost_per_hour > 0.0 { self.savings_per_hour / b.cost_per_hour * 100.0 } else { 0.0 };
        let _ = writeln!(
            out,
            "  savings: ${:.4}/hour ({pct:.1}%), ${:.2} a month of 730 hours",
            self.savings_per_hour,
            self.savings_per_hour * 730.0
        );
        let rows: Vec<[String; 6]> = self
            .by_node_pool
            .iter()
            .map(|p| {
                let priced = p.node_pool.is_some();
                let money = |v: f64| if priced { format!("{v:.4}") } else { "not priced".to_string() };
                [
                    p.node_pool.clone().unwrap_or_else(|| "(unmanaged)".to_string()),
                    p.nodes_before.to_string(),
                    p.nodes_after.to_string(),
                    money(p.cost_per_hour_before),
                    money(p.cost_per_hour_after),
                    money(p.savings_per_hour),
                ]
            })
            .collect();
        if !rows.is_empty() {
            crate::report::table(
                &mut out,
                &["NODEPOOL", "NODES NOW", "NODES AFTER", "$/HOUR NOW", "$/HOUR AFTER", "SAVINGS $/HOUR"],
                &rows,
            );
        }
        if b.unmanaged_nodes > 0 {
            let _ = writeln!(
                out,
                "  {} node(s) no NodePool manages stay as they are and are not priced.",
                b.unmanaged_nodes
            );
        }
        if !self.unpriced_nodes.is_empty() {
            let _ = writeln!(out, "  Price unknown (left out of every sum):");
            for u in &self.unpriced_nodes {
                let _ = writeln!(out, "    {}: {}", u.name, u.reason);
            }
        }
        out
    }
}
