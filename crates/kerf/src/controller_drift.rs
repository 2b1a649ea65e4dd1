//! `kerf bench controller --drift`: every node of the built cluster drifts at once (the
//! EC2NodeClass's AMI selection changes, so each node's image is no longer one the class
//! resolves to: `AMIDrift`) and the controller replaces them within the NodePool's budget of
//! `nodes: 10%`, measured against the budget-bound minimum.
//!
//! The drift ends when no NodeClaim that existed at the change remains and every pod runs. The
//! budget allows `ceil(10%)` of the pool's nodes at a time, so the drift takes at least as many
//! rounds back to back as full budgets need to take every old node. The fleet may change size
//! on the way (replacements sized for the pods they take: a half-empty fleet drifts into fewer
//! nodes, and its budget shrinks with it), so the rounds are counted on a fleet that changes as
//! the drift changed it, evenly: each round's nodes give way to `fleet after / fleet before` as
//! many new ones ([`rounds`]). A round is as long as one replacement on the same run: from the
//! first decision on an old NodeClaim (its `DisruptionReason` condition set) until the first of
//! them is gone (replacement launched and initialized, node drained and deleted). The minimum is
//! `rounds x round`, and the ratio is the drift's time (from the change, so the time to see the
//! drift counts against kerf) over it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::bench_process::http;

/// How long the whole drift may take.
const DRIFT_LIMIT: Duration = Duration::from_secs(3600);

/// The budget the bench's NodePool gives drift (and every other reason).
pub const BUDGET_PERCENT: usize = 10;

/// A drift of every node, as measured.
pub struct Drift {
    pub nodes: usize,
    /// The NodeClaims once the drift is over (all of them new).
    pub nodes_after: usize,
    /// The budget at the change.
    pub budget: usize,
    pub rounds: usize,
    pub round_seconds: f64,
    /// From the change until the first decision on an old NodeClaim.
    pub decided_seconds: f64,
    pub seconds: f64,
}

impl Drift {
    pub fn minimum_seconds(&self) -> f64 {
        self.rounds as f64 * self.round_seconds
    }

    pub fn ratio(&self) -> f64 {
        let min = self.minimum_seconds();
        if min > 0.0 { self.seconds / min } else { 0.0 }
    }
}

/// The rounds of full budgets (`percent` of the fleet's nodes, rounded up) that take all of
/// `nodes` old nodes, when the fleet goes from `nodes` to `after` nodes evenly: each node taken
/// gives way to `after / nodes` new ones, and each round's budget is taken of the fleet as the
/// rounds before left it.
pub fn rounds(nodes: usize, after: usize, percent: usize) -> usize {
    if nodes == 0 {
        return 0;
    }
    let per_node = after as f64 / nodes as f64;
    let (mut left, mut fleet, mut rounds) = (nodes, nodes as f64, 0);
    while left > 0 {
        let budget = ((fleet * percent as f64 / 100.0).ceil() as usize).max(1);
        let taken = budget.min(left);
        left -= taken;
        fleet += taken as f64 * (per_node - 1.0);
        rounds += 1;
    }
    rounds
}

/// The uids of the NodeClaims that exist, and of those drift decided on. By uid, not name: a
/// replacement may be given the name of a claim that is gone (names are generated), and would
/// then pass for the old claim forever.
fn claims(server: &str) -> anyhow::Result<(BTreeSet<String>, BTreeSet<String>)> {
    let (code, body) = http(server, "GET", "/apis/karpenter.sh/v1/nodeclaims", None)?;
    if code != 200 {
        bail!("listing nodeclaims: HTTP {code}: {body}");
    }
    let v: serde_json::Value = serde_json::from_str(&body).context("the nodeclaim list")?;
    let items = v["items"].as_array().map(Vec::as_slice).unwrap_or_default();
    let uid = |c: &serde_json::Value| c["metadata"]["uid"].as_str().map(str::to_string);
    let decided = |c: &&serde_json::Value| {
        let conditions = c["status"]["conditions"].as_array().map(Vec::as_slice).unwrap_or_default();
        conditions.iter().any(|k| k["type"] == "DisruptionReason" && k["status"] == "True" && k["reason"] == "Drifted")
    };
    Ok((items.iter().filter_map(uid).collect(), items.iter().filter(decided).filter_map(uid).collect()))
}

/// Changes the AMI selection of the EC2NodeClass `class` to `alias`, then waits until every
/// NodeClaim that existed has gone and `all_run()` holds.
pub fn measure(
    server: &str,
    class: &str,
    alias: &str,
    mut all_run: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<Drift> {
    let (old, _) = claims(server)?;
    let nodes = old.len();
    let budget = (nodes * BUDGET_PERCENT).div_ceil(100).max(1);
    let path = format!("/apis/karpenter.k8s.aws/v1/ec2nodeclasses/{class}");
    let patch = format!(r#"{{"spec":{{"amiSelectorTerms":[{{"alias":"{alias}"}}]}}}}"#);
    let start = Instant::now();
    let (code, body) = http(server, "PATCH", &path, Some(("application/merge-patch+json", &patch)))?;
    if code != 200 {
        bail!("changing the AMI selection of EC2NodeClass {class}: HTTP {code}: {body}");
    }
    let (mut first_decided, mut first_gone): (Option<Duration>, Option<Duration>) = (None, None);
    // Old claims seen decided for drift (not those a consolidation took).
    let mut drifting: BTreeSet<String> = BTreeSet::new();
    let mut reported = Instant::now();
    let mut nodes_after;
    loop {
        let (now, decided) = claims(server)?;
        nodes_after = now.len();
        let at = start.elapsed();
        drifting.extend(decided.into_iter().filter(|c| old.contains(c)));
        if first_decided.is_none() && !drifting.is_empty() {
            first_decided = Some(at);
        }
        if first_gone.is_none() && drifting.iter().any(|c| !now.contains(c)) {
            first_gone = Some(at);
        }
        let left = old.iter().filter(|c| now.contains(*c)).count();
        if left == 0 && all_run()? {
            break;
        }
        if reported.elapsed() >= Duration::from_secs(30) {
            eprintln!("drift: {left} of {nodes} old nodes left at {:.0}s", start.elapsed().as_secs_f64());
            reported = Instant::now();
        }
        if start.elapsed() > DRIFT_LIMIT {
            bail!("drift: {left} of {nodes} drifted nodes still there after {}s", DRIFT_LIMIT.as_secs());
        }
        // Closely until the first round ends (it sets the minimum), then every 2 s (each look
        // lists every NodeClaim: thousands of them).
        std::thread::sleep(Duration::from_millis(if first_gone.is_none() { 500 } else { 2000 }));
    }
    let seconds = start.elapsed().as_secs_f64();
    let (Some(decided), Some(gone)) = (first_decided, first_gone) else {
        bail!("drift: no drifted NodeClaim was seen decided, then gone (the round could not be measured)");
    };
    let (decided_seconds, round_seconds) = (decided.as_secs_f64(), (gone - decided).as_secs_f64());
    let rounds = rounds(nodes, nodes_after, BUDGET_PERCENT);
    Ok(Drift { nodes, nodes_after, budget, rounds, round_seconds, decided_seconds, seconds })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_that_keeps_its_size_drifts_in_nodes_over_budget_rounds() {
        assert_eq!(rounds(4285, 4285, 10), 10);
        assert_eq!(rounds(1000, 1000, 10), 10);
        assert_eq!(rounds(7, 7, 10), 7, "a budget of one node at a time");
        assert_eq!(rounds(0, 0, 10), 0);
    }

    #[test]
    fn a_fleet_that_shrinks_as_it_drifts_takes_more_rounds_of_its_shrinking_budget() {
        // Half-empty nodes replaced by full ones: 4,285 become 2,700, and a budget of 10% of
        // the fleet as it shrinks takes more rounds than ten.
        let shrinking = rounds(4285, 2700, 10);
        assert!((11..=14).contains(&shrinking), "{shrinking}");
        // A fleet that grows has a growing budget.
        assert!(rounds(1000, 1500, 10) <= 10);
    }
}
