//! A PodDisruptionBudget's status as the disruption controller keeps it (`currentHealthy`,
//! `desiredHealthy`, `disruptionsAllowed`, `expectedPods`, the `DisruptionAllowed` condition),
//! worked out from the counts the store keeps for the Eviction API whenever a budget is read, so
//! `kubectl get pdb` and `describe pdb` show what evictions will meet.

use serde_json::{Value, json};

use crate::cluster::SimCluster;

/// `pdb` (a PodDisruptionBudget as JSON) with the status its counts give now.
pub fn with_status(cluster: &SimCluster, mut pdb: Value) -> Value {
    let m = &pdb["metadata"];
    let (Some(ns), Some(name)) = (m["namespace"].as_str(), m["name"].as_str()) else { return pdb };
    let Some(s) = cluster.budget_status(ns, name) else { return pdb };
    let allowed = s.allowed().max(0);
    let (condition, reason) = if allowed > 0 { ("True", "SufficientPods") } else { ("False", "InsufficientPods") };
    let since = pdb
        .pointer("/status/conditions/0/lastTransitionTime")
        .cloned()
        .filter(|_| pdb.pointer("/status/conditions/0/status").and_then(Value::as_str) == Some(condition));
    let since = since.unwrap_or_else(|| pdb["metadata"]["creationTimestamp"].clone());
    pdb["status"] = json!({
        "observedGeneration": pdb["metadata"]["generation"],
        "currentHealthy": s.healthy,
        "desiredHealthy": s.desired_healthy,
        "disruptionsAllowed": allowed,
        "expectedPods": s.expected,
        "conditions": [{"type": "DisruptionAllowed", "status": condition, "reason": reason, "message": "",
            "observedGeneration": pdb["metadata"]["generation"], "lastTransitionTime": since}],
    });
    pdb
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kerf_api::clock::ManualClock;

    use super::*;
    use crate::kinds;
    use crate::rest::{Filter, Rest};

    #[test]
    fn a_budget_read_shows_its_healthy_pods_and_the_disruptions_they_allow() {
        let r = Rest::new(Arc::new(SimCluster::new(ManualClock::new(), 1)));
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
        let kind = kinds::by_kind("PodDisruptionBudget").unwrap();
        r.create(kind, Some("default"), pdb).unwrap();
        let status = |r: &Rest| r.get(kind, Some("default"), "web").unwrap()["status"].clone();
        assert_eq!(status(&r)["disruptionsAllowed"], 0);
        assert_eq!(status(&r)["conditions"][0]["reason"], "InsufficientPods");
        for name in ["a", "b"] {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c"}]},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
            let obj = r.decode(kinds::by_kind("Pod").unwrap(), Some("default"), pod).unwrap();
            r.cluster.create_stored("Pod", obj).unwrap();
        }
        let s = status(&r);
        assert_eq!(
            (&s["currentHealthy"], &s["desiredHealthy"], &s["disruptionsAllowed"], &s["expectedPods"]),
            (&json!(2), &json!(1), &json!(1), &json!(2))
        );
        assert_eq!(s["conditions"][0]["status"], "True");
        let (listed, _) = r.list(kind, &Filter::default());
        assert_eq!(listed[0]["status"], s, "a list shows the same");
    }
}
