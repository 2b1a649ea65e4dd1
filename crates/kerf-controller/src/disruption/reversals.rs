//! Whether a consolidation stuck. A consolidation moves pods on the promise that they land on
//! the remaining nodes (and its replacement); if instead the provisioner has to launch a node
//! for the pods it moved, the decision is undone and, left alone, would be taken again and
//! again — nodes removed and launched for as long as the workload stays as it is.
//!
//! Every consolidation that moves pods is watched from its decision until a while after its
//! nodes are gone ([`SETTLE`]). A NodeClaim the provisioner launches in that time for a pod of
//! an owner the consolidation moved is a reversal: it is recorded (a metric, an event and a
//! warning say so), and the decision's node set — the replacements it launched and the node
//! launched to undo it — is held back from consolidation until the workload shrinks (a pod
//! leaves other than by a disruption). Each reversal removes nodes consolidation may still act
//! on (the decision's candidates are gone) and adds only held ones, so on an unchanged workload
//! reversals cannot go on forever, and neither can consolidation.
//!
//! A hold lives on its NodeClaim (the [`labels::CONSOLIDATION_REVERSED`] annotation: when the
//! decision was undone and when it was taken), so a restarted controller, which rebuilds its
//! state from the cluster, keeps it; it is taken off once the workload shrinks. The watches
//! live on their NodePool (the [`labels::CONSOLIDATION_WATCHES`] annotation), so a controller
//! restarted while a consolidation settles goes on watching it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::cluster::{ClusterApi, EventRecord, Object, Patch};
use kerf_api::{NodeClaim, NodePool, labels};
use kerf_cloud::{CloudProvider, Timestamp};
use serde::{Deserialize, Serialize};

use super::Disruption;
use crate::ctx::Ctx;
use crate::error::ControllerError;

/// The reason of the event recorded on a NodePool when a consolidation of it was undone
/// (docs/design.md, "Events"); `kerf top` reads it.
pub const CONSOLIDATION_REVERSED: &str = "ConsolidationReversed";
use crate::state::ClusterState;
use crate::util;

/// How long after a consolidation's nodes are gone a launch for the pods it moved still counts
/// against it (the moved pods' new copies are scheduled within seconds; a launch batch waits
/// at most a few more).
pub const SETTLE: Duration = Duration::from_secs(120);

/// A consolidation that was undone.
#[derive(Debug, Clone, PartialEq)]
pub struct Reversal {
    /// When the provisioner launched for its pods.
    pub at: Timestamp,
    pub node_pool: String,
    /// When the consolidation was decided, and what it said.
    pub decided_at: Timestamp,
    pub detail: String,
    /// The pods the new launch is for that the consolidation had moved (`namespace/name`).
    pub pods: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Watch {
    /// The consolidation's claims (to know when it is done).
    claims: BTreeSet<String>,
    pools: BTreeSet<String>,
    /// `namespace/Kind/name` of the moved pods' controllers.
    owners: BTreeSet<String>,
    /// The claims it launched to replace its nodes.
    replacements: Vec<String>,
    decided_at: Time,
    detail: String,
    /// Set once its nodes are gone: watched until then.
    until: Option<Time>,
}

impl Watch {
    /// The NodePool whose annotation keeps it.
    fn home(&self) -> Option<&String> {
        self.pools.iter().next()
    }

    fn expired(&self, now: Timestamp) -> bool {
        self.until.as_ref().is_some_and(|u| now > u.0)
    }
}

/// A NodeClaim held back from consolidation: a decision it took part in was undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hold {
    /// When the decision was undone (the launch for the pods it moved).
    pub at: Timestamp,
    /// When the decision was taken.
    pub decided: Timestamp,
}

impl Hold {
    /// The annotation's value: `undone <RFC 3339> decided <RFC 3339>`.
    pub fn annotation(&self) -> String {
        format!("undone {} decided {}", self.at, self.decided)
    }

    /// The hold a claim's annotation records, if it carries a readable one.
    pub fn of(claim: &NodeClaim) -> Option<Hold> {
        let v = claim.metadata.annotations.as_ref()?.get(labels::CONSOLIDATION_REVERSED)?;
        let (at, decided) = v.strip_prefix("undone ")?.split_once(" decided ")?;
        Some(Hold { at: at.parse().ok()?, decided: decided.parse().ok()? })
    }

    /// The workload shrank after the decision was undone: the hold no longer applies.
    pub fn lifted(&self, shrank_at: Option<Timestamp>) -> bool {
        shrank_at.is_some_and(|s| s > self.at)
    }
}

/// The consolidations being watched, the reversals seen, and the holds not yet written.
#[derive(Debug, Default)]
pub struct Reversals {
    watching: Vec<Watch>,
    pub(crate) records: Vec<Reversal>,
    /// NodeClaim → the hold still to be written on it (see [`Manager::persist_holds`]).
    unwritten: BTreeMap<String, Hold>,
    /// The workload shrink the last sweep for lifted holds looked at.
    lifted_checked: Option<Timestamp>,
    /// NodePools whose watches annotation must be written again.
    unsaved: BTreeSet<String>,
    /// The watches kept on the NodePools were read (once per process).
    loaded: bool,
}

impl Reversals {
    /// Starts watching a consolidation of `claims` (in `pools`) that moves pods of `owners`
    /// and launched `replacements`.
    pub(crate) fn watch(
        &mut self,
        claims: impl IntoIterator<Item = String>,
        pools: impl IntoIterator<Item = String>,
        owners: BTreeSet<String>,
        replacements: Vec<String>,
        decided_at: Timestamp,
        detail: &str,
    ) {
        if owners.is_empty() {
            return;
        }
        let w = Watch {
            claims: claims.into_iter().collect(),
            pools: pools.into_iter().collect(),
            owners,
            replacements,
            decided_at: Time(decided_at),
            detail: detail.to_string(),
            until: None,
        };
        self.unsaved.extend(w.home().cloned());
        self.watching.push(w);
    }

    /// The consolidation of `claims` is done (its nodes are gone) at `now`, or was abandoned
    /// (`abandoned`: nothing moved, nothing to watch).
    pub(crate) fn finished(&mut self, claims: &[String], now: Timestamp, abandoned: bool) {
        let first = claims.first();
        let unsaved = &mut self.unsaved;
        if abandoned {
            self.watching.retain(|w| {
                let keep = first.is_none_or(|c| !w.claims.contains(c));
                if !keep {
                    unsaved.extend(w.home().cloned());
                }
                keep
            });
            return;
        }
        for w in &mut self.watching {
            if w.until.is_none() && first.is_some_and(|c| w.claims.contains(c)) {
                w.until = Some(Time(util::after(now, SETTLE)));
                unsaved.extend(w.home().cloned());
            }
        }
    }

    /// The provisioner launched `claim` of `pool` at `now` for `pods` (`namespace/name` and
    /// owner key each). Returns the reversal this makes, if it undoes a watched consolidation
    /// (the latest one that moved pods of those owners).
    pub(crate) fn launched(
        &mut self,
        claim: &str,
        pool: &str,
        pods: &[(String, String)],
        now: Timestamp,
    ) -> Option<Reversal> {
        self.watching.retain(|w| !w.expired(now));
        // The latest consolidation that moved pods of these owners is the one undone.
        let hits = |w: &Watch| -> Vec<String> {
            pods.iter().filter(|(_, owner)| w.owners.contains(owner)).map(|(p, _)| p.clone()).collect()
        };
        let i = self.watching.iter().rposition(|w| !hits(w).is_empty())?;
        let w = self.watching.remove(i);
        self.unsaved.extend(w.home().cloned());
        let node_pool = if w.pools.contains(pool) {
            pool.to_string()
        } else {
            w.pools.iter().next().cloned().unwrap_or_else(|| pool.to_string())
        };
        let r = Reversal { at: now, node_pool, decided_at: w.decided_at.0, detail: w.detail.clone(), pods: hits(&w) };
        for c in w.replacements.iter().map(String::as_str).chain([claim]) {
            self.unwritten.insert(c.to_string(), Hold { at: now, decided: w.decided_at.0 });
        }
        self.records.push(r.clone());
        Some(r)
    }

    /// Why consolidation leaves `claim`'s node alone while it runs pods, if it does: it belongs
    /// to a decision that was undone, and the workload has not shrunk since (`shrank_at`).
    pub(crate) fn held_back(&self, claim: &NodeClaim, shrank_at: Option<Timestamp>) -> Option<String> {
        let Hold { at, decided } = self.unwritten.get(claim.name()).copied().or_else(|| Hold::of(claim))?;
        if (Hold { at, decided }).lifted(shrank_at) {
            return None;
        }
        Some(format!(
            "the consolidation decided at {decided} was undone at {at} (pods it moved needed a new node) and this node took part; kerf leaves it alone until the workload changes"
        ))
    }

    /// Reads the watches kept on the NodePools, once per process (a restarted controller goes
    /// on watching what the one before it decided). Unreadable or expired ones are dropped.
    pub(crate) fn load(&mut self, state: &ClusterState, now: Timestamp) {
        if std::mem::replace(&mut self.loaded, true) {
            return;
        }
        for pool in state.node_pools().values() {
            let Some(v) = pool.metadata.annotations.as_ref().and_then(|a| a.get(labels::CONSOLIDATION_WATCHES)) else {
                continue;
            };
            match serde_json::from_str::<Vec<Watch>>(v) {
                Ok(ws) => {
                    for w in ws {
                        if !w.expired(now) && !self.watching.contains(&w) {
                            self.watching.push(w);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(NodePool = %pool.name(), error = %e, "ignoring an unreadable consolidation watch annotation");
                    self.unsaved.insert(pool.name().to_string());
                }
            }
        }
    }

    /// The annotation value `pool` should carry now: its live watches (`None`: none).
    fn annotation_for(&self, pool: &str, now: Timestamp) -> Option<String> {
        let mine: Vec<&Watch> =
            self.watching.iter().filter(|w| w.home().is_some_and(|h| h == pool) && !w.expired(now)).collect();
        if mine.is_empty() {
            return None;
        }
        serde_json::to_string(&mine).ok()
    }

    /// Whether a consolidation is still being watched (a pass with one must not be skipped).
    pub fn watching(&self) -> bool {
        !self.watching.is_empty()
    }
}

/// A merge patch that sets (or, with `None`, removes) one annotation.
fn annotation_patch(key: &str, value: Option<&str>) -> Patch {
    Patch::Merge(serde_json::json!({ "metadata": { "annotations": { key: value } } }))
}

impl Disruption {
    /// Writes the watches of the NodePools whose watches changed onto them; a write that fails
    /// is tried again next pass.
    pub(crate) async fn persist_watches<P, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        for name in std::mem::take(&mut self.reversals.unsaved) {
            let Some(pool) = cx.state.node_pool(&name).filter(|p| p.metadata.deletion_timestamp.is_none()) else {
                continue;
            };
            let want = self.reversals.annotation_for(&name, cx.pass.now);
            let has = pool.metadata.annotations.as_ref().and_then(|a| a.get(labels::CONSOLIDATION_WATCHES));
            if has == want.as_ref() {
                continue;
            }
            // A merge patch of the one annotation: a concurrent change of the pool (its status,
            // a user's apply) is neither overwritten nor a conflict.
            let patch = annotation_patch(labels::CONSOLIDATION_WATCHES, want.as_deref());
            match cx
                .pass
                .soft("recording consolidation watches", cx.api.patch::<NodePool>(None, &name, &patch).await)?
            {
                Some(updated) => cx.state.record(updated.into_any()),
                None => {
                    self.reversals.unsaved.insert(name);
                }
            }
        }
        Ok(())
    }

    /// The claims the provisioner launched for pods since the last pass: one that undoes a
    /// watched consolidation is a reversal (a warning, an event, its nodes held back).
    pub(crate) async fn note_launches<P, C: ClusterApi>(&mut self, cx: &mut Ctx<'_, P, C>) {
        for launch in std::mem::take(&mut cx.published.pod_launches) {
            let claim_name = &launch.claim;
            let Some(r) = self.reversals.launched(claim_name, &launch.node_pool, &launch.pods, launch.at) else {
                continue;
            };
            tracing::warn!(
                NodePool = %r.node_pool,
                NodeClaim = %claim_name,
                decided = %r.decided_at,
                pods = %r.pods.join(", "),
                "consolidation undone: pods it moved needed a new node; its replacement and this node are left alone until the workload changes"
            );
            cx.api
                .record_event(EventRecord {
                    kind: kerf_api::nodepool::KIND,
                    name: r.node_pool.clone(),
                    uid: cx.state.uid_of(kerf_api::nodepool::KIND, &r.node_pool),
                    type_: "Warning",
                    reason: CONSOLIDATION_REVERSED.to_string(),
                    message: format!(
                        "NodeClaim {claim_name} launched for pod(s) {} that the consolidation decided at {} moved ({}); its nodes are left alone until the workload changes",
                        r.pods.join(", "),
                        r.decided_at,
                        r.detail
                    ),
                })
                .await;
        }
    }

    /// Writes new holds onto their NodeClaims, and takes off those a shrinking workload lifted
    /// (else a restart would bring them back). A write that fails is tried again next pass.
    pub(crate) async fn persist_holds<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let shrank = self.workload_shrank_at;
        for (name, hold) in std::mem::take(&mut self.reversals.unwritten) {
            let Some(claim) = cx.state.node_claim(&name).filter(|c| c.metadata.deletion_timestamp.is_none()) else {
                continue;
            };
            if hold.lifted(shrank) || Hold::of(claim) == Some(hold) {
                continue;
            }
            let patch = annotation_patch(labels::CONSOLIDATION_REVERSED, Some(&hold.annotation()));
            match cx
                .pass
                .soft("recording a consolidation hold", cx.api.patch::<NodeClaim>(None, &name, &patch).await)?
            {
                Some(updated) => cx.state.record(updated.into_any()),
                None => {
                    self.reversals.unwritten.insert(name, hold);
                }
            }
        }
        if shrank.is_none() || self.reversals.lifted_checked == shrank {
            return Ok(());
        }
        let lifted: Vec<String> = cx
            .state
            .node_claims()
            .values()
            .filter(|c| c.metadata.deletion_timestamp.is_none() && Hold::of(c).is_some_and(|h| h.lifted(shrank)))
            .map(|c| c.name().to_string())
            .collect();
        let mut done = true;
        let patch = annotation_patch(labels::CONSOLIDATION_REVERSED, None);
        for name in lifted {
            match cx.pass.soft("lifting a consolidation hold", cx.api.patch::<NodeClaim>(None, &name, &patch).await)? {
                Some(updated) => cx.state.record(updated.into_any()),
                None => done = false,
            }
        }
        if done {
            self.reversals.lifted_checked = shrank;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn claim(name: &str) -> NodeClaim {
        let spec = serde_json::json!({"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}});
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "spec": spec})).unwrap()
    }

    fn owners(o: &[&str]) -> BTreeSet<String> {
        o.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_launch_for_a_moved_pod_while_watched_is_a_reversal_and_holds_its_nodes_back() {
        let mut r = Reversals::default();
        r.watch(
            ["c1".to_string()],
            ["pool".to_string()],
            owners(&["default/ReplicaSet/web"]),
            vec!["r1".to_string()],
            t(100),
            "moved",
        );
        r.finished(&["c1".to_string()], t(150), false);
        let pods = vec![("default/web-x".to_string(), "default/ReplicaSet/web".to_string())];
        let got = r.launched("n1", "pool", &pods, t(160)).expect("a reversal");
        assert_eq!(got.pods, vec!["default/web-x".to_string()]);
        // The replacement and the node launched to undo the decision are held back.
        assert!(r.held_back(&claim("r1"), None).is_some_and(|m| m.contains("undone")));
        assert!(r.held_back(&claim("n1"), None).is_some());
        assert!(r.held_back(&claim("other"), None).is_none());
        // Counted once per consolidation.
        assert!(r.launched("n2", "pool", &pods, t(161)).is_none());
        // The workload shrinking afterwards lifts the hold.
        assert!(r.held_back(&claim("r1"), Some(t(170))).is_none());
        assert!(r.held_back(&claim("r1"), Some(t(90))).is_some());
    }

    #[test]
    fn launches_for_other_owners_or_after_the_settle_time_are_not_reversals() {
        let mut r = Reversals::default();
        r.watch(
            ["c1".to_string()],
            ["pool".to_string()],
            owners(&["default/ReplicaSet/web"]),
            vec!["r1".to_string()],
            t(100),
            "moved",
        );
        let other = vec![("default/db-x".to_string(), "default/StatefulSet/db".to_string())];
        assert!(r.launched("n1", "pool", &other, t(110)).is_none());
        r.finished(&["c1".to_string()], t(150), false);
        let late = vec![("default/web-x".to_string(), "default/ReplicaSet/web".to_string())];
        assert!(r.launched("n1", "pool", &late, t(150 + SETTLE.as_secs() as i64 + 1)).is_none());
        assert!(r.held_back(&claim("n1"), None).is_none());
        assert!(!r.watching());
    }

    #[test]
    fn an_abandoned_consolidation_is_not_watched() {
        let mut r = Reversals::default();
        r.watch(
            ["c1".to_string()],
            ["pool".to_string()],
            owners(&["default/ReplicaSet/web"]),
            vec!["r1".to_string()],
            t(100),
            "moved",
        );
        r.finished(&["c1".to_string()], t(120), true);
        let pods = vec![("default/web-x".to_string(), "default/ReplicaSet/web".to_string())];
        assert!(r.launched("n1", "pool", &pods, t(130)).is_none());
    }

    #[test]
    fn a_hold_written_as_an_annotation_reads_back_the_same() {
        let hold = Hold { at: t(160), decided: t(100) };
        let mut c = claim("r1");
        c.metadata.annotations = Some([(labels::CONSOLIDATION_REVERSED.to_string(), hold.annotation())].into());
        assert_eq!(Hold::of(&c), Some(hold));
        let r = Reversals::default();
        assert!(r.held_back(&c, None).is_some_and(|m| m.contains("undone")));
        assert!(r.held_back(&c, Some(t(161))).is_none());
        c.metadata.annotations = Some([(labels::CONSOLIDATION_REVERSED.to_string(), "garbled".to_string())].into());
        assert_eq!(Hold::of(&c), None);
    }
}
