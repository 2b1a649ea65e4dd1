//! The drift hash annotations kerf owns (see `kerf_api::hash`): the current hash and kerf's hash
//! version on each NodePool (`karpenter.sh/nodepool-hash`, `-version`) and EC2NodeClass
//! (`karpenter.k8s.aws/ec2nodeclass-hash`, `-version`), and the hashes on NodeClaims stamped by
//! another algorithm, stamped again with the current hash and kerf's version.
//!
//! Karpenter writes its own values under the same keys, and its hash function is not kerf's.
//! Taking over from Karpenter, every class and pool carries Karpenter's values and every claim
//! Karpenter's hash: the owners' annotations are replaced by kerf's (the node class status and
//! NodePool reconcilers write them), and the claims are stamped again by the NodeClaim
//! lifecycle, so that drift compares kerf's hash with kerf's hash and nothing is replaced for
//! the change of algorithm alone. Everything here is read from the objects themselves, so a
//! restarted controller (or one that took over midway) goes on where the last one stopped.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::cluster::{ClusterApi, Object, Patch};
use kerf_api::hash::{EC2NODECLASS_HASH_VERSION as CLASS_VERSION, NODEPOOL_HASH_VERSION as POOL_VERSION};
use kerf_api::labels::{NODECLASS_HASH, NODECLASS_HASH_VERSION, NODEPOOL_HASH, NODEPOOL_HASH_VERSION};
use kerf_api::nodeclaim::CONDITION_DRIFTED;
use kerf_api::{EC2NodeClass, NodeClaim, NodePool};
use kerf_cloud::CloudProvider;
use serde_json::{Map, Value};

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::state::ClusterState;

/// The merge patch that sets `wanted` among `annotations` (`None` when they already carry it).
fn annotations_patch(annotations: Option<&BTreeMap<String, String>>, wanted: &[(&str, &str)]) -> Option<Value> {
    let changed: Map<String, Value> = wanted
        .iter()
        .filter(|(k, v)| annotations.and_then(|a| a.get(*k)).map(String::as_str) != Some(*v))
        .map(|(k, v)| ((*k).to_string(), Value::String((*v).to_string())))
        .collect();
    (!changed.is_empty()).then(|| serde_json::json!({ "metadata": { "annotations": changed } }))
}

/// The patch that puts the class's current hash and kerf's hash version on it, if it lacks them.
pub(crate) fn node_class_patch(class: &EC2NodeClass) -> Option<Value> {
    let hash = class.static_hash();
    annotations_patch(
        class.metadata.annotations.as_ref(),
        &[(NODECLASS_HASH, &hash), (NODECLASS_HASH_VERSION, CLASS_VERSION)],
    )
}

/// The patch that puts the pool's current template hash and kerf's hash version on it, if it
/// lacks them.
pub(crate) fn node_pool_patch(pool: &NodePool) -> Option<Value> {
    let hash = pool.template_hash();
    annotations_patch(
        pool.metadata.annotations.as_ref(),
        &[(NODEPOOL_HASH, &hash), (NODEPOOL_HASH_VERSION, POOL_VERSION)],
    )
}

/// The resourceVersion of each owner found carrying kerf's hash annotations, so that an owner
/// not changed since is not hashed again on every pass (a cache: empty after a restart).
#[derive(Debug, Default, Clone)]
pub(crate) struct Stamped(BTreeMap<String, String>);

impl Stamped {
    /// Whether `name` was found stamped at `resource_version` (unknown versions never were).
    pub(crate) fn is_current(&self, name: &str, resource_version: Option<&String>) -> bool {
        resource_version.is_some_and(|rv| self.0.get(name) == Some(rv))
    }

    /// `name` carries kerf's annotations at `resource_version`.
    pub(crate) fn mark(&mut self, name: &str, resource_version: Option<&String>) {
        match resource_version {
            Some(rv) => self.0.insert(name.to_string(), rv.clone()),
            None => self.0.remove(name),
        };
    }

    /// Forgets owners that are gone.
    pub(crate) fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.0.retain(|name, _| keep(name));
    }
}

/// Writes kerf's hash annotations on every live owner in `owners` (the pools or the classes of
/// the cluster state) whose annotations differ (`patch_of` says how), skipping owners `stamped`
/// found current at their resourceVersion. `what` names the write in logs and errors.
pub(crate) async fn stamp_owners<K, P, C>(
    cx: &mut Ctx<'_, P, C>,
    stamped: &mut Stamped,
    owners: fn(&ClusterState) -> &BTreeMap<String, K>,
    patch_of: fn(&K) -> Option<Value>,
    what: &str,
) -> Result<(), ControllerError>
where
    K: Object<Meta = ObjectMeta>,
    P: CloudProvider,
    C: ClusterApi,
{
    let all = owners(cx.state);
    stamped.retain(|name| all.contains_key(name));
    let mut stale: Vec<(String, Value)> = Vec::new();
    for (name, owner) in all.iter().filter(|(_, o)| o.meta().deletion_timestamp.is_none()) {
        let rv = owner.meta().resource_version.as_ref();
        if stamped.is_current(name, rv) {
            continue;
        }
        match patch_of(owner) {
            Some(patch) => stale.push((name.clone(), patch)),
            None => stamped.mark(name, rv),
        }
    }
    for (name, patch) in stale {
        let written = cx.api.patch::<K>(None, &name, &Patch::Merge(patch)).await;
        if let Some(updated) = cx.pass.soft(what, written)? {
            tracing::debug!(kind = K::KIND, name = %name, "{what}: written");
            stamped.mark(&name, updated.meta().resource_version.as_ref());
            cx.state.record(updated.into_any());
        }
    }
    Ok(())
}

/// Whether a claim carries a hash version that is not kerf's (or none): one the NodeClaim
/// lifecycle stamps again once its owners are known.
pub(crate) fn needs_restamp(claim: &NodeClaim) -> bool {
    if claim.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let a = claim.metadata.annotations.as_ref();
    let version = |k: &str| a.and_then(|a| a.get(k)).map(String::as_str);
    version(NODEPOOL_HASH_VERSION) != Some(POOL_VERSION) || version(NODECLASS_HASH_VERSION) != Some(CLASS_VERSION)
}

/// One hash a claim carries: where it is kept and the version kerf compares.
struct HashKind {
    hash: &'static str,
    version_key: &'static str,
    version: &'static str,
}

const POOL_HASH: HashKind = HashKind { hash: NODEPOOL_HASH, version_key: NODEPOOL_HASH_VERSION, version: POOL_VERSION };
const CLASS_HASH: HashKind =
    HashKind { hash: NODECLASS_HASH, version_key: NODECLASS_HASH_VERSION, version: CLASS_VERSION };

impl HashKind {
    /// The annotations that stamp the claim again, when its version of this hash is not kerf's:
    /// kerf's version, and the owner's current hash. A claim already marked `Drifted` (by
    /// Karpenter, before the hand-over) keeps the hash it has, so it stays drifted under kerf's
    /// version, as Karpenter's own re-stamping keeps it.
    fn restamp(&self, claim: &NodeClaim, current: impl FnOnce() -> String, out: &mut Vec<(&'static str, String)>) {
        let annotations = claim.metadata.annotations.as_ref();
        if annotations.and_then(|a| a.get(self.version_key)).is_some_and(|v| v == self.version) {
            return;
        }
        out.push((self.version_key, self.version.to_string()));
        if !claim.is_condition_true(CONDITION_DRIFTED) {
            out.push((self.hash, current()));
        }
    }
}

/// The owners' current hashes, worked out once per pass for the claims that need them.
#[derive(Default)]
pub(crate) struct CurrentHashes {
    pools: BTreeMap<String, String>,
    classes: BTreeMap<String, String>,
}

impl CurrentHashes {
    /// The merge patch that stamps `claim` again (kerf's versions and the owners' current
    /// hashes); `None` when it carries kerf's versions already, or its owners are not known
    /// (a claim of a deleted pool or class is left as it is).
    pub(crate) fn restamp(&mut self, state: &ClusterState, claim: &NodeClaim) -> Option<Value> {
        if claim.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let mut wanted: Vec<(&'static str, String)> = Vec::new();
        let pool = crate::util::claim_pool(claim).and_then(|p| state.node_pool(p));
        if let Some(pool) = pool {
            let pools = &mut self.pools;
            POOL_HASH.restamp(
                claim,
                || pools.entry(pool.name().to_string()).or_insert_with(|| pool.template_hash()).clone(),
                &mut wanted,
            );
        }
        let class_ref = &claim.spec.node_class_ref;
        let class = (class_ref.kind == kerf_api::ec2nodeclass::KIND)
            .then(|| state.node_classes().get(&class_ref.name))
            .flatten();
        if let Some(class) = class {
            let classes = &mut self.classes;
            CLASS_HASH.restamp(
                claim,
                || classes.entry(class.name().to_string()).or_insert_with(|| class.static_hash()).clone(),
                &mut wanted,
            );
        }
        let wanted: Vec<(&str, &str)> = wanted.iter().map(|(k, v)| (*k, v.as_str())).collect();
        annotations_patch(claim.metadata.annotations.as_ref(), &wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> NodePool {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default", "annotations": {NODEPOOL_HASH: "6211418271557431962", NODEPOOL_HASH_VERSION: "v3"}},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []
            }}}
        }))
        .unwrap()
    }

    fn class() -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default", "annotations": {NODECLASS_HASH: "5417227131932473233", NODECLASS_HASH_VERSION: "v4"}},
            "spec": {"role": "R"}
        }))
        .unwrap()
    }

    fn claim(annotations: Value, drifted: bool) -> NodeClaim {
        let conditions = if drifted {
            serde_json::json!([{"type": "Drifted", "status": "True", "reason": "Drifted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        } else {
            serde_json::json!([])
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default-abcde", "labels": {kerf_api::labels::NODE_POOL: "default"}, "annotations": annotations},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}, "requirements": []},
            "status": {"conditions": conditions}
        }))
        .unwrap()
    }

    fn state() -> ClusterState {
        let mut s = ClusterState::new();
        s.record(kerf_api::cluster::Object::into_any(pool()));
        s.record(kerf_api::cluster::Object::into_any(class()));
        s
    }

    #[test]
    fn owners_carrying_karpenters_hashes_get_kerfs_and_then_need_nothing() {
        let p = pool();
        let patch = node_pool_patch(&p).expect("Karpenter's v3 value is replaced");
        let a = &patch["metadata"]["annotations"];
        assert_eq!(
            (a[NODEPOOL_HASH].as_str(), a[NODEPOOL_HASH_VERSION].as_str()),
            (Some(&*p.template_hash()), Some("kerf-1"))
        );
        let mut stamped = serde_json::to_value(&p).unwrap();
        kerf_api::cluster::Patch::Merge(patch).apply(&mut stamped).unwrap();
        assert_eq!(node_pool_patch(&serde_json::from_value(stamped).unwrap()), None);

        let c = class();
        let patch = node_class_patch(&c).expect("Karpenter's v4 value is replaced");
        let a = &patch["metadata"]["annotations"];
        assert_eq!(
            (a[NODECLASS_HASH].as_str(), a[NODECLASS_HASH_VERSION].as_str()),
            (Some(&*c.static_hash()), Some("kerf-1"))
        );
    }

    #[test]
    fn a_claim_of_another_hash_version_is_stamped_with_the_current_hashes() {
        let s = state();
        let mut current = CurrentHashes::default();
        let karpenters = claim(
            serde_json::json!({NODEPOOL_HASH: "1", NODEPOOL_HASH_VERSION: "v3", NODECLASS_HASH: "2", NODECLASS_HASH_VERSION: "v4"}),
            false,
        );
        let patch = current.restamp(&s, &karpenters).expect("stamped again");
        assert_eq!(
            patch,
            serde_json::json!({"metadata": {"annotations": {
                NODEPOOL_HASH: pool().template_hash(), NODEPOOL_HASH_VERSION: "kerf-1",
                NODECLASS_HASH: class().static_hash(), NODECLASS_HASH_VERSION: "kerf-1",
            }}})
        );
        // An older kerf's claim (hashes without a version) is stamped the same way.
        let unversioned = claim(serde_json::json!({NODEPOOL_HASH: "1", NODECLASS_HASH: "2"}), false);
        assert_eq!(current.restamp(&s, &unversioned), Some(patch));
        // kerf's own claim (even with a stale hash: that is drift) is left alone.
        let ours = claim(
            serde_json::json!({NODEPOOL_HASH: "1", NODEPOOL_HASH_VERSION: "kerf-1", NODECLASS_HASH: "2", NODECLASS_HASH_VERSION: "kerf-1"}),
            false,
        );
        assert_eq!(current.restamp(&s, &ours), None);
    }

    #[test]
    fn a_claim_karpenter_marked_drifted_keeps_its_hashes_and_so_stays_drifted() {
        let s = state();
        let drifted = claim(
            serde_json::json!({NODEPOOL_HASH: "1", NODEPOOL_HASH_VERSION: "v3", NODECLASS_HASH: "2", NODECLASS_HASH_VERSION: "v4"}),
            true,
        );
        assert_eq!(
            CurrentHashes::default().restamp(&s, &drifted),
            Some(
                serde_json::json!({"metadata": {"annotations": {NODEPOOL_HASH_VERSION: "kerf-1", NODECLASS_HASH_VERSION: "kerf-1"}}})
            )
        );
    }

    #[test]
    fn a_claim_whose_owners_are_gone_or_that_is_deleting_is_left_alone() {
        let annotations = serde_json::json!({NODEPOOL_HASH: "1", NODEPOOL_HASH_VERSION: "v3"});
        assert_eq!(CurrentHashes::default().restamp(&ClusterState::new(), &claim(annotations.clone(), false)), None);
        let mut deleting = serde_json::to_value(claim(annotations, false)).unwrap();
        deleting["metadata"]["deletionTimestamp"] = Value::from("2026-01-01T00:00:00Z");
        assert_eq!(CurrentHashes::default().restamp(&state(), &serde_json::from_value(deleting).unwrap()), None);
    }
}
