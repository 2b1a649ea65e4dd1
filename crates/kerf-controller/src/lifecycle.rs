//! The NodeClaim lifecycle: launch, registration, initialization and liveness. (Removal is the
//! termination controller's.)
//!
//! Each claim that needs something has a turn of the pass ([`Turn`]); turns run a few at a time,
//! so a burst of a thousand new claims launches in the time of a few dozen round trips to the
//! cloud and the API server instead of one after another.

use futures_util::stream::{self, StreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kerf_api::nodeclaim::{
    CONDITION_INITIALIZED, CONDITION_LAUNCHED, CONDITION_READY, CONDITION_REGISTERED, NodeClaimStatus,
};
use kerf_api::shared::set_condition;
use kerf_api::{NodeClaim, Taint, TaintEffect, labels};
use kerf_cloud::{CloudError, CloudProvider, Timestamp};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::marks::{add_finalizer, has_finalizer, remove_finalizer};
use crate::options::Options;
use crate::pass::{IN_FLIGHT, LAUNCH_RETRY_AFTER, Pass};
use crate::patches::{changes, metadata_changes, pinned, status_changes};
use crate::util;
use kerf_api::cluster::{AnyObject, ClusterApi, EventRecord, Object, Patch, WatchEvent};

/// Taints the kubelet or node lifecycle controller put on a node that is not ready yet.
const EPHEMERAL_TAINTS: &[&str] = &[
    labels::NODE_NOT_READY_TAINT_KEY,
    labels::NODE_UNREACHABLE_TAINT_KEY,
    labels::UNREGISTERED_TAINT_KEY,
    "node.cloudprovider.kubernetes.io/uninitialized",
];

fn same_taint(a: &Taint, b: &Taint) -> bool {
    a.key == b.key && a.effect == b.effect
}

fn conditions(claim: &NodeClaim) -> &[kerf_api::Condition] {
    claim.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default()
}

fn created_at(claim: &NodeClaim) -> Option<Timestamp> {
    claim.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

/// The node as registration leaves it: the claim's labels, annotations (the NodePool
/// template's among them, `karpenter.sh/do-not-disrupt` included) and taints synced on, the
/// unregistered taint off, the termination finalizer and an owner reference to the claim on.
fn registered_node(node: &Node, claim: &NodeClaim) -> Node {
    let mut node = node.clone();
    let node_labels = node.metadata.labels.get_or_insert_with(Default::default);
    for (k, v) in claim.metadata.labels.iter().flatten() {
        node_labels.insert(k.clone(), v.clone());
    }
    node_labels.insert(labels::REGISTERED.to_string(), "true".to_string());
    if let Some(claim_annotations) = claim.metadata.annotations.as_ref().filter(|a| !a.is_empty()) {
        let node_annotations = node.metadata.annotations.get_or_insert_with(Default::default);
        for (k, v) in claim_annotations {
            node_annotations.insert(k.clone(), v.clone());
        }
    }
    add_finalizer(&mut node.metadata);
    let owners = node.metadata.owner_references.get_or_insert_with(Vec::new);
    if !owners.iter().any(|o| o.kind == kerf_api::nodeclaim::KIND && o.name == claim.name()) {
        owners.push(OwnerReference {
            api_version: kerf_api::nodeclaim::API_VERSION.to_string(),
            kind: kerf_api::nodeclaim::KIND.to_string(),
            name: claim.name().to_string(),
            uid: claim.metadata.uid.clone().unwrap_or_default(),
            block_owner_deletion: Some(true),
            controller: None,
        });
    }
    // A node labelled do-not-sync-taints keeps the taints it registered with.
    let sync_taints = node.metadata.labels.as_ref().and_then(|l| l.get(labels::DO_NOT_SYNC_TAINTS)).map(String::as_str)
        != Some("true");
    let spec = node.spec.get_or_insert_with(Default::default);
    let mut taints: Vec<Taint> = spec
        .taints
        .iter()
        .flatten()
        .filter_map(Taint::from_core)
        .filter(|t| t.key != labels::UNREGISTERED_TAINT_KEY)
        .collect();
    if sync_taints {
        for t in claim.spec.taints.iter().chain(&claim.spec.startup_taints) {
            if !taints.iter().any(|x| same_taint(x, t)) {
                taints.push(t.clone());
            }
        }
    }
    // Keep taints with effects kerf does not model as they were.
    let unknown = spec.taints.iter().flatten().filter(|t| TaintEffect::parse(&t.effect).is_none()).cloned();
    let mut core: Vec<_> = taints.iter().map(Taint::to_core).collect();
    core.extend(unknown);
    spec.taints = (!core.is_empty()).then_some(core);
    node
}

/// Why a registered node is not initialized yet, if it is not.
fn not_initialized_because(node: &Node, claim: &NodeClaim) -> Option<String> {
    if !util::node_ready(node) {
        return Some("node is not ready".to_string());
    }
    let taints = util::node_taints(node);
    if let Some(t) = taints.iter().find(|t| claim.spec.startup_taints.iter().any(|s| same_taint(s, t))) {
        return Some(format!("startup taint {t} is still on the node"));
    }
    if let Some(t) = taints.iter().find(|t| EPHEMERAL_TAINTS.contains(&t.key.as_str())) {
        return Some(format!("taint {t} is still on the node"));
    }
    let allocatable = util::node_allocatable(node);
    let requested = claim.spec.resources.requests.iter().filter(|(k, q)| util::is_extended_resource(k) && !q.is_zero());
    for (name, _) in requested {
        if allocatable.get(name).is_zero() {
            return Some(format!("resource {name} is not registered"));
        }
    }
    None
}

/// Writes `status` as the claim's: a merge patch of what changed from the claim as read (its
/// metadata and spec, and status fields the patch does not name, stay as the API server has
/// them). `None` when the write failed softly (the claim is gone; it is retried).
async fn write_status<P: CloudProvider, C: ClusterApi>(
    cx: &mut Turn<'_, P, C>,
    claim: &NodeClaim,
    status: &NodeClaimStatus,
) -> Result<Option<NodeClaim>, ControllerError> {
    let Some(patch) = status_changes(claim.status.as_ref(), status)? else { return Ok(Some(claim.clone())) };
    let written = cx.api.patch_status::<NodeClaim>(None, claim.name(), &Patch::Merge(patch)).await;
    cx.pass.soft("updating nodeclaim status", written)
}

/// Where a claim is in its lifecycle: what its turn of a pass does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Finalize,
    Launch,
    Register,
    Initialize,
}

impl Stage {
    fn of(claim: &NodeClaim) -> Option<Stage> {
        if claim.metadata.deletion_timestamp.is_some() {
            Some(Stage::Finalize)
        } else if !claim.is_condition_true(CONDITION_LAUNCHED) {
            Some(Stage::Launch)
        } else if !claim.is_condition_true(CONDITION_REGISTERED) {
            Some(Stage::Register)
        } else if !claim.is_condition_true(CONDITION_INITIALIZED) {
            Some(Stage::Initialize)
        } else {
            None
        }
    }
}

/// A change to the informer cache a turn leaves for its pass to make.
enum Effect {
    Record(AnyObject),
    Forget(AnyObject),
}

/// One claim's turn of a lifecycle pass: what it may use (the API, the cloud, the claim's node
/// as the pass read it, an instance an earlier pass launched for it without recording it) and
/// what it leaves for the pass to take in once it is over (the objects the API server answered
/// with, when to wake, a launch to remember, a launch retry). Turns of different claims read
/// and write different objects, so a pass runs [`IN_FLIGHT`] of them at once and takes in what
/// they leave in the claims' order.
struct Turn<'a, P, C> {
    api: &'a C,
    cloud: &'a P,
    options: &'a Options,
    pass: Pass,
    /// Shared with the informer cache: a pass hands every claim needing work a turn up front,
    /// and a burst of thousands of launches would otherwise copy each claim and node at once.
    node: Option<Arc<Node>>,
    /// Taken from [`crate::ctx::Published::unrecorded_launches`]; what is left here goes back.
    unrecorded: Option<NodeClaim>,
    launches: u64,
    /// The earliest time to try a failed launch again, read from and written back to
    /// [`Lifecycle`]'s memory.
    retry_at: Option<Timestamp>,
    effects: Vec<Effect>,
}

impl<P, C> Turn<'_, P, C> {
    fn record(&mut self, obj: AnyObject) {
        self.effects.push(Effect::Record(obj));
    }
}

/// The NodeClaim lifecycle reconciler: its memory is when to retry failed launches, and which
/// claims carry a drift hash of another algorithm than kerf's (taken from watch events, so a
/// restarted controller finds them again in its first list).
#[derive(Debug, Default)]
pub(crate) struct Lifecycle {
    /// NodeClaim → earliest time to retry a failed launch.
    launch_retry: BTreeMap<String, Timestamp>,
    /// Claims to stamp again with kerf's hashes (see [`crate::hashes`]).
    unstamped: BTreeSet<String>,
}

impl Lifecycle {
    /// A claim gone from the cluster is not retried; a claim stamped by another hash algorithm
    /// is noted to be stamped again.
    pub fn observe(&mut self, event: &WatchEvent) {
        match event {
            WatchEvent::Deleted(AnyObject::NodeClaim(c)) => {
                self.launch_retry.remove(c.name());
                self.unstamped.remove(c.name());
            }
            WatchEvent::Applied(AnyObject::NodeClaim(c)) => {
                if crate::hashes::needs_restamp(c) {
                    self.unstamped.insert(c.name().to_string());
                } else {
                    self.unstamped.remove(c.name());
                }
            }
            _ => {}
        }
    }

    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let stamped = self.restamp(cx).await;
        let lifecycle = self.advance(cx).await;
        stamped.and(lifecycle)
    }

    /// Stamps claims that carry Karpenter's drift hashes (or an older kerf's) again with the
    /// owners' current hashes and kerf's hash versions: a metadata patch of those annotations
    /// only. A claim whose owners are not known yet is tried again on the next pass.
    async fn restamp<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        if self.unstamped.is_empty() {
            return Ok(());
        }
        let mut current = crate::hashes::CurrentHashes::default();
        let mut patches = Vec::new();
        for name in &self.unstamped {
            let Some(claim) = cx.state.node_claim(name) else { continue };
            if let Some(patch) = current.restamp(cx.state, claim) {
                patches.push((name.clone(), patch));
            }
        }
        let api = cx.api;
        let mut written = stream::iter(patches)
            .map(|(name, patch)| async move {
                let r = api.patch::<NodeClaim>(None, &name, &Patch::Merge(patch)).await;
                (name, r)
            })
            .buffered(IN_FLIGHT);
        let mut restamped = 0usize;
        while let Some((name, r)) = written.next().await {
            if let Some(updated) = cx.pass.soft("stamping nodeclaim hashes", r)? {
                tracing::debug!(NodeClaim = %name, "stamped nodeclaim with kerf's drift hashes");
                restamped += 1;
                if !crate::hashes::needs_restamp(&updated) {
                    self.unstamped.remove(&name);
                }
                cx.state.record(updated.into_any());
            }
        }
        if restamped > 0 {
            tracing::info!(
                nodeclaims = restamped,
                "stamped nodeclaims of another drift hash version with kerf's hashes"
            );
        }
        Ok(())
    }

    /// Launch, registration, initialization and finalization, a turn per claim that needs one.
    async fn advance<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        // Initialized claims need nothing from the lifecycle: skip them without copying.
        let mut turns = Vec::new();
        for (name, claim) in cx.state.node_claims() {
            let Some(stage) = Stage::of(claim) else { continue };
            let unrecorded = match stage {
                Stage::Finalize | Stage::Launch => cx.published.unrecorded_launches.remove(name),
                Stage::Register | Stage::Initialize => None,
            };
            let turn = Turn {
                api: cx.api,
                cloud: cx.cloud,
                options: cx.options,
                pass: Pass::new(cx.pass.now),
                node: cx.state.shared_node_for_claim(claim).cloned(),
                unrecorded,
                launches: 0,
                retry_at: self.launch_retry.get(name).copied(),
                effects: Vec::new(),
            };
            turns.push((stage, Arc::clone(claim), turn));
        }
        let mut done = stream::iter(turns)
            .map(|(stage, claim, mut turn)| async move {
                // The turn's own copy, made as it starts (a few turns run at once).
                let claim = Arc::unwrap_or_clone(claim);
                let name = claim.name().to_string();
                let r = match stage {
                    Stage::Finalize => finalize_claim(&mut turn, claim).await,
                    Stage::Launch => launch(&mut turn, claim).await,
                    Stage::Register => register(&mut turn, claim).await,
                    Stage::Initialize => initialize(&mut turn, claim).await,
                };
                (name, turn, r)
            })
            .buffered(IN_FLIGHT);
        // Each claim on its own: one whose write fails does not hold back the others (the
        // first failure is reported once every claim had its turn).
        let mut failed = None;
        while let Some((name, turn, r)) = done.next().await {
            for effect in turn.effects {
                match effect {
                    Effect::Record(obj) => cx.state.record(obj),
                    Effect::Forget(obj) => cx.state.forget(&obj),
                }
            }
            cx.pass.wake = util::earliest(cx.pass.wake, turn.pass.wake);
            cx.pass.progressed |= turn.pass.progressed;
            cx.published.launches += turn.launches;
            if let Some(launched) = turn.unrecorded {
                cx.published.unrecorded_launches.insert(name.clone(), launched);
            }
            match turn.retry_at {
                Some(retry) => self.launch_retry.insert(name, retry),
                None => self.launch_retry.remove(&name),
            };
            if let Err(e) = r {
                failed.get_or_insert(e);
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

/// A NodeClaim being deleted: its Node is deleted first (the Node's termination drains it and
/// deletes the instance); once the Node is gone, the instance is deleted if it is still
/// there and the claim's finalizer is removed.
async fn finalize_claim<P: CloudProvider, C: ClusterApi>(
    cx: &mut Turn<'_, P, C>,
    claim: NodeClaim,
) -> Result<(), ControllerError> {
    if !has_finalizer(&claim.metadata) {
        return Ok(());
    }
    let name = claim.name().to_string();
    if let Some(node) = cx.node.clone() {
        if node.metadata.deletion_timestamp.is_none() {
            let node_name = node.metadata.name.clone().unwrap_or_default();
            cx.pass.soft("deleting node", cx.api.delete::<Node>(None, &node_name).await)?;
        }
        return Ok(());
    }
    // An instance launched but never recorded on the claim is remembered until it is deleted.
    let instance = match cx.unrecorded.clone() {
        Some(launched) => Some(launched),
        None => claim.provider_id().is_some().then(|| claim.clone()),
    };
    if let Some(instance) = instance {
        match cx.cloud.delete(&instance).await {
            Ok(()) | Err(CloudError::NotFound(_)) => cx.unrecorded = None,
            Err(e) => {
                tracing::error!(NodeClaim = %name, error = %e, "failed terminating instance");
                cx.pass.wake_after(LAUNCH_RETRY_AFTER);
                return Ok(());
            }
        }
    }
    // The finalizers are a list others edit too: the write is pinned to the claim as read.
    let mut released = claim.metadata.clone();
    remove_finalizer(&mut released);
    let Some(patch) = metadata_changes(&claim.metadata, &released)?.map(|p| pinned(&claim.metadata, p)) else {
        return Ok(());
    };
    let gone = cx.api.patch::<NodeClaim>(None, &name, &patch).await;
    if let Some(gone) = cx.pass.soft("removing nodeclaim finalizer", gone)? {
        tracing::info!(NodeClaim = %name, "deleted nodeclaim");
        // Deleting and without finalizers: the API server has removed it.
        cx.effects.push(Effect::Forget(gone.into_any()));
        cx.retry_at = None;
    }
    Ok(())
}

async fn launch<P: CloudProvider, C: ClusterApi>(
    cx: &mut Turn<'_, P, C>,
    claim: NodeClaim,
) -> Result<(), ControllerError> {
    let name = claim.name().to_string();
    if let Some(created) = created_at(&claim) {
        let deadline = util::after(created, cx.options.registration_ttl);
        if cx.pass.now >= deadline {
            tracing::info!(NodeClaim = %name, "deleting nodeclaim: not launched within the registration ttl");
            cx.pass.soft("deleting nodeclaim", cx.api.delete::<NodeClaim>(None, &name).await)?;
            return Ok(());
        }
    }
    if let Some(retry) = cx.retry_at {
        if cx.pass.now < retry {
            cx.pass.wake_at(retry);
            return Ok(());
        }
        cx.retry_at = None;
    }
    let mut claim = claim;
    if !has_finalizer(&claim.metadata) {
        let mut finalized = claim.metadata.clone();
        add_finalizer(&mut finalized);
        if let Some(patch) = metadata_changes(&claim.metadata, &finalized)?.map(|p| pinned(&claim.metadata, p)) {
            let written = cx.api.patch::<NodeClaim>(None, &name, &patch).await;
            let Some(updated) = cx.pass.soft("adding finalizer", written)? else { return Ok(()) };
            cx.record(updated.clone().into_any());
            claim = updated;
        }
    }
    // An instance launched on an earlier pass whose status write was lost is not launched twice.
    let launched = match cx.unrecorded.take() {
        Some(launched) => Ok(launched),
        None => {
            // Even a launch that reports failure may have left an instance.
            cx.launches += 1;
            cx.cloud.create(&claim).await
        }
    };
    match launched {
        Ok(launched) => record_launch(cx, claim, launched).await,
        Err(CloudError::InsufficientCapacity(msg)) => {
            tracing::error!(NodeClaim = %name, error = %format!("insufficient capacity: {msg}"), "failed launching nodeclaim");
            cx.api
                .record_event(EventRecord {
                    kind: kerf_api::nodeclaim::KIND,
                    name: name.clone(),
                    uid: claim.metadata.uid.clone(),
                    type_: "Warning",
                    reason: "InsufficientCapacityError".to_string(),
                    message: format!("NodeClaim {name} event: creating instance, insufficient capacity, {msg}"),
                })
                .await;
            // The provider marked the offering unavailable: delete the claim so its pods are
            // provisioned again against the remaining offerings.
            cx.pass.soft("deleting nodeclaim", cx.api.delete::<NodeClaim>(None, &name).await)?;
            Ok(())
        }
        Err(e) => {
            tracing::error!(NodeClaim = %name, error = %e, "failed launching nodeclaim");
            let mut status = claim.status.clone().unwrap_or_default();
            set_condition(
                &mut status.conditions,
                util::condition(CONDITION_LAUNCHED, false, "LaunchFailed", &e.to_string(), cx.pass.now),
            );
            if claim.status.as_ref() != Some(&status)
                && let Some(updated) = write_status(cx, &claim, &status).await?
            {
                cx.record(updated.into_any());
            }
            let retry = util::after(cx.pass.now, LAUNCH_RETRY_AFTER);
            cx.retry_at = Some(retry);
            cx.pass.wake_at(retry);
            Ok(())
        }
    }
}

/// Writes what the cloud launched onto the claim: its labels (instance type, zone, capacity
/// type) and its status (provider ID, capacity, allocatable), Launched=True.
async fn record_launch<P: CloudProvider, C: ClusterApi>(
    cx: &mut Turn<'_, P, C>,
    mut claim: NodeClaim,
    launched: NodeClaim,
) -> Result<(), ControllerError> {
    let name = claim.name().to_string();
    let mut labelled = claim.metadata.clone();
    let claim_labels = labelled.labels.get_or_insert_with(Default::default);
    for (k, v) in launched.metadata.labels.iter().flatten() {
        claim_labels.insert(k.clone(), v.clone());
    }
    if labelled.labels != claim.metadata.labels
        && let Some(patch) = metadata_changes(&claim.metadata, &labelled)?
    {
        let written = cx.api.patch::<NodeClaim>(None, &name, &Patch::Merge(patch)).await;
        let Some(updated) = cx.pass.soft("labelling nodeclaim", written)? else {
            cx.unrecorded = Some(launched);
            return Ok(());
        };
        claim = updated;
    }
    let mut status: NodeClaimStatus = launched.status.clone().unwrap_or_default();
    let mut conds = claim.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default();
    set_condition(&mut conds, util::condition(CONDITION_LAUNCHED, true, "Launched", "", cx.pass.now));
    status.conditions = conds;
    let Some(updated) = write_status(cx, &claim, &status).await? else {
        cx.unrecorded = Some(launched);
        return Ok(());
    };
    let l = updated.metadata.labels.clone().unwrap_or_default();
    let get = |k: &str| l.get(k).cloned().unwrap_or_default();
    tracing::info!(
        NodeClaim = %updated.name(),
        "provider-id" = %updated.provider_id().unwrap_or_default(),
        "instance-type" = %get(labels::INSTANCE_TYPE),
        zone = %get(labels::ZONE),
        "capacity-type" = %get(labels::CAPACITY_TYPE),
        allocatable = %updated.status.as_ref().map(|s| s.allocatable.to_string()).unwrap_or_default(),
        "launched nodeclaim"
    );
    cx.pass.wake_after(cx.options.registration_ttl);
    cx.record(updated.into_any());
    Ok(())
}

async fn register<P: CloudProvider, C: ClusterApi>(
    cx: &mut Turn<'_, P, C>,
    claim: NodeClaim,
) -> Result<(), ControllerError> {
    let name = claim.name().to_string();
    let Some(node) = cx.node.clone() else {
        // Liveness: a launched claim whose node never joins is deleted.
        let launched_at = util::true_since(conditions(&claim), CONDITION_LAUNCHED).unwrap_or(cx.pass.now);
        let deadline = util::after(launched_at, cx.options.registration_ttl);
        if cx.pass.now >= deadline {
            tracing::info!(
                NodeClaim = %name,
                ttl = ?cx.options.registration_ttl,
                "deleting nodeclaim: node did not register within the registration ttl"
            );
            cx.pass.soft("deleting nodeclaim", cx.api.delete::<NodeClaim>(None, &name).await)?;
        } else {
            cx.pass.wake_at(deadline);
        }
        return Ok(());
    };
    if node.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let node_name = node.metadata.name.clone().unwrap_or_default();
    // Registration writes the node's finalizers, owner references and taints, lists the
    // kubelet and other controllers edit too: pinned to the node as read.
    let synced = registered_node(&node, &claim);
    if let Some(patch) = changes(&*node, &synced)?.map(|p| pinned(&node.metadata, p)) {
        let written = cx.api.patch::<Node>(None, &node_name, &patch).await;
        let Some(updated) = cx.pass.soft("registering node", written)? else { return Ok(()) };
        let updated = Arc::new(updated);
        cx.node = Some(Arc::clone(&updated));
        cx.record(AnyObject::Node(updated));
    }
    let mut status = claim.status.clone().unwrap_or_default();
    status.node_name = Some(node_name.clone());
    set_condition(&mut status.conditions, util::condition(CONDITION_REGISTERED, true, "Registered", "", cx.pass.now));
    let Some(updated) = write_status(cx, &claim, &status).await? else {
        return Ok(());
    };
    tracing::info!(NodeClaim = %name, Node = %node_name, "registered nodeclaim");
    cx.record(updated.clone().into_any());
    // The node may already be ready: initialize in the same pass.
    initialize(cx, updated).await
}

async fn initialize<P: CloudProvider, C: ClusterApi>(
    cx: &mut Turn<'_, P, C>,
    claim: NodeClaim,
) -> Result<(), ControllerError> {
    let Some(node) = cx.node.clone() else { return Ok(()) };
    if node.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    if let Some(why) = not_initialized_because(&node, &claim) {
        tracing::debug!(NodeClaim = %claim.name(), reason = %why, "nodeclaim not initialized yet");
        return Ok(());
    }
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let allocatable = util::node_allocatable(&node);
    if node.metadata.labels.as_ref().and_then(|l| l.get(labels::INITIALIZED)).map(String::as_str) != Some("true") {
        let patch = serde_json::json!({ "metadata": { "labels": { labels::INITIALIZED: "true" } } });
        let written = cx.api.patch::<Node>(None, &node_name, &Patch::Merge(patch)).await;
        let Some(updated) = cx.pass.soft("labelling node initialized", written)? else {
            return Ok(());
        };
        let updated = Arc::new(updated);
        cx.node = Some(Arc::clone(&updated));
        cx.record(AnyObject::Node(updated));
    }
    let mut status = claim.status.clone().unwrap_or_default();
    set_condition(&mut status.conditions, util::condition(CONDITION_INITIALIZED, true, "Initialized", "", cx.pass.now));
    set_condition(&mut status.conditions, util::condition(CONDITION_READY, true, "Ready", "", cx.pass.now));
    let Some(updated) = write_status(cx, &claim, &status).await? else {
        return Ok(());
    };
    tracing::info!(NodeClaim = %updated.name(), Node = %node_name, allocatable = %allocatable, "initialized nodeclaim");
    cx.record(updated.into_any());
    Ok(())
}
