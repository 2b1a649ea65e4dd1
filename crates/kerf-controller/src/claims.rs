//! NodeClaims made from a NodePool's template: one builder for the provisioner's claims, static
//! pools' claims and disruption's replacements, so each carries the same labels, annotations
//! (the hashes drift is detected against), owner and template fields; and when a claim counts
//! as in flight.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kerf_api::nodeclaim::{NodeClaimSpec, ResourceRequirements};
use kerf_api::{NodeClaim, NodePool, NodeSelectorRequirementWithMinValues, ResourceList, Taint, labels};
use kerf_scheduling::NewNodeClaim;

use crate::state::ClusterState;
use crate::util::SplitMix64;

/// A fresh, unused claim name for a pool: `<pool>-<5 lowercase alnum>`.
pub(crate) fn claim_name(state: &ClusterState, names: &mut SplitMix64, pool: &str) -> String {
    loop {
        let name = format!("{pool}-{}", names.suffix(5));
        if state.node_claim(&name).is_none() {
            return name;
        }
    }
}

/// A NodeClaim for `pool` with the given requirements and requests.
pub(crate) fn claim_from_pool(
    state: &ClusterState,
    names: &mut SplitMix64,
    pool: &NodePool,
    requirements: Vec<NodeSelectorRequirementWithMinValues>,
    extra_labels: &BTreeMap<String, String>,
    taints: (Vec<Taint>, Vec<Taint>),
    requests: ResourceList,
) -> NodeClaim {
    let template = &pool.spec.template;
    // The hashes drift is detected against: the pool template's and the node class's.
    let mut annotations = template.metadata.annotations.clone();
    annotations.insert(labels::NODEPOOL_HASH.to_string(), pool.template_hash());
    annotations.insert(labels::NODEPOOL_HASH_VERSION.to_string(), kerf_api::hash::NODEPOOL_HASH_VERSION.to_string());
    if let Some(class) = state.node_class_for(pool) {
        annotations.insert(labels::NODECLASS_HASH.to_string(), class.static_hash());
        annotations
            .insert(labels::NODECLASS_HASH_VERSION.to_string(), kerf_api::hash::EC2NODECLASS_HASH_VERSION.to_string());
    }
    let mut claim_labels = template.metadata.labels.clone();
    claim_labels.extend(extra_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    claim_labels.insert(labels::NODE_POOL.to_string(), pool.name().to_string());
    let owner = OwnerReference {
        api_version: kerf_api::nodepool::API_VERSION.to_string(),
        kind: kerf_api::nodepool::KIND.to_string(),
        name: pool.name().to_string(),
        uid: pool.metadata.uid.clone().unwrap_or_default(),
        block_owner_deletion: Some(true),
        controller: None,
    };
    NodeClaim {
        api_version: kerf_api::nodeclaim::API_VERSION.to_string(),
        kind: kerf_api::nodeclaim::KIND.to_string(),
        metadata: ObjectMeta {
            name: Some(claim_name(state, names, pool.name())),
            labels: Some(claim_labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: NodeClaimSpec {
            taints: taints.0,
            startup_taints: taints.1,
            requirements,
            resources: ResourceRequirements { requests },
            node_class_ref: template.spec.node_class_ref.clone(),
            expire_after: template.spec.expire_after,
            termination_grace_period: template.spec.termination_grace_period,
        }
        .into(),
        status: None,
    }
}

pub(crate) fn new_claim(
    state: &ClusterState,
    names: &mut SplitMix64,
    pool: &NodePool,
    new: &NewNodeClaim,
) -> NodeClaim {
    claim_from_pool(
        state,
        names,
        pool,
        new.node_requirements(),
        &new.labels,
        (new.taints.clone(), new.startup_taints.clone()),
        new.requests.clone(),
    )
}

/// A claim is in flight until it is initialized; deleting claims are not (they take no pods).
pub(crate) fn in_flight(claim: &NodeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_none() && !claim.is_condition_true(kerf_api::nodeclaim::CONDITION_INITIALIZED)
}
