//! The provisioner: batches pods kube-scheduler could not place, runs the scheduling core
//! against existing nodes, in-flight NodeClaims and NodePools, and creates NodeClaims.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kerf_api::nodeclaim::{NodeClaimSpec, ResourceRequirements};
use kerf_api::{NodeClaim, NodePool, NodeSelectorRequirementWithMinValues, ResourceList, Taint, labels};
use kerf_cloud::CloudProvider;
use kerf_scheduling::{
    ExistingNode, InstanceType, NewNodeClaim, NodePoolInput, Requirements, SchedulingContext, SchedulingInput,
    SchedulingResult,
};

use crate::manager::{ControllerError, Manager, Pass};
use crate::state::{ClusterState, ObjectKey};
use crate::util;
use kerf_api::cluster::{ApiError, ClusterApi, EventRecord, Object};

/// The capacity a NodeClaim that has not launched yet will most likely have: its
/// [`likely_type`]'s among its pool's types (empty when none is known).
fn likely_capacity(claim: &NodeClaim, types: &TypesByPool) -> ResourceList {
    let pool = claim.metadata.labels.as_ref().and_then(|l| l.get(labels::NODE_POOL));
    let its = pool.and_then(|p| types.get(p)).map(Vec::as_slice).unwrap_or_default();
    likely_type(claim, its).map(|t| t.capacity.clone()).unwrap_or_default()
}

/// Instance types per NodePool, fetched once per provisioning pass.
pub(crate) type TypesByPool = BTreeMap<String, Vec<Arc<InstanceType>>>;

/// `a, b, c, d, e and 7 other(s)`: the first five names of a list, as log lines show them.
pub(crate) fn first_five(names: &[String]) -> String {
    first_five_of(names.iter().cloned(), names.len())
}

/// [`first_five`] of `total` names, only the first five of which are produced.
pub(crate) fn first_five_of(names: impl Iterator<Item = String>, total: usize) -> String {
    let shown = names.take(5).collect::<Vec<_>>().join(", ");
    if total > 5 { format!("{shown} and {} other(s)", total - 5) } else { shown }
}

fn pod_name(key: &ObjectKey) -> String {
    format!("{}/{}", key.0, key.1)
}

/// The type a not-yet-launched claim will most likely become: the cheapest available type of
/// the pool whose labels the claim's requirements allow (its `node.kubernetes.io/instance-type`
/// requirement included); when none is available, the cheapest allowed type at any price.
pub(crate) fn likely_type<'a>(claim: &NodeClaim, types: &'a [Arc<InstanceType>]) -> Option<&'a Arc<InstanceType>> {
    let reqs = Requirements::from_node_selector(&claim.spec.requirements);
    let allowed =
        || types.iter().filter(|t| reqs.iter().all(|(k, r)| t.labels.get(k).is_none_or(|v| r.matches(Some(v)))));
    let cheapest = |available: bool| {
        allowed()
            .filter_map(|t| {
                let price = if available {
                    t.cheapest_available().map(|o| o.price)
                } else {
                    t.offerings.iter().map(|o| o.price).min_by(f64::total_cmp)
                };
                price.map(|p| (p, t))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)))
            .map(|(_, t)| t)
    };
    cheapest(true).or_else(|| cheapest(false))
}

/// Labels a claim's node will carry: its own labels plus single-valued requirements.
pub(crate) fn claim_labels(claim: &NodeClaim) -> BTreeMap<String, String> {
    let mut out = Requirements::from_node_selector(&claim.spec.requirements).single_valued_labels();
    for (k, v) in claim.metadata.labels.iter().flatten() {
        out.insert(k.clone(), v.clone());
    }
    out
}

/// A claim is in flight until it is initialized; deleting claims are not (they take no pods).
pub(crate) fn in_flight(claim: &NodeClaim) -> bool {
    claim.metadata.deletion_timestamp.is_none() && !claim.is_condition_true(kerf_api::nodeclaim::CONDITION_INITIALIZED)
}

impl<P: CloudProvider> Manager<P> {
    /// Whether kerf should provision for this pod: kube-scheduler marked it unschedulable, it is
    /// not terminating, not a DaemonSet's, and not already nominated to an in-flight claim.
    fn provisionable(&self, key: &ObjectKey, pod: &Pod) -> bool {
        pod.metadata.deletion_timestamp.is_none()
            && util::marked_unschedulable(pod)
            && !util::owned_by_daemonset(pod)
            && !self.provisioning.nominations.contains(key)
    }

    fn provisionable_pods(&self) -> Vec<(ObjectKey, Arc<Pod>)> {
        self.state
            .unbound_pods()
            .filter(|(k, p)| self.provisionable(k, p))
            .map(|(k, p)| (k.clone(), p.clone()))
            .collect()
    }

    /// Drops nominations to claims that are gone or going, or whose node has been initialized
    /// for a full batch window (the pod should have been bound by then; if not, it is
    /// provisioned again). Pod-side ends are handled as watch events arrive.
    fn expire_nominations(&mut self, pass: &mut Pass) {
        let grace = self.options.batch_max;
        let mut expired = Vec::new();
        for claim_name in self.provisioning.nominations.by_claim.keys() {
            let Some(claim) = self.state.node_claim(claim_name) else {
                expired.push(claim_name.clone());
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() {
                expired.push(claim_name.clone());
                continue;
            }
            let conditions = claim.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
            if let Some(since) = util::true_since(conditions, kerf_api::nodeclaim::CONDITION_INITIALIZED) {
                let expires = util::after(since, grace);
                if pass.now >= expires {
                    expired.push(claim_name.clone());
                } else {
                    pass.wake_at(expires);
                }
            }
        }
        for claim in expired {
            self.provisioning.nominations.remove_claim(&claim);
        }
    }

    /// Instance types of every live NodePool (static ones too: their in-flight claims need a
    /// likely type). Pools whose types cannot be listed are left out, with a warning.
    pub(crate) async fn instance_types_by_pool(&mut self) -> TypesByPool {
        let mut out = TypesByPool::new();
        let before = std::mem::take(&mut self.provisioning.pool_errors);
        for (name, pool) in self.state.node_pools() {
            if pool.metadata.deletion_timestamp.is_some() {
                continue;
            }
            match self.cloud.instance_types(pool, self.state.node_class_for(pool)).await {
                Ok(types) => {
                    out.insert(name.clone(), types);
                }
                Err(e) => {
                    tracing::warn!(NodePool = %name, error = %e, "skipping nodepool: cannot list instance types");
                    self.provisioning.pool_errors.insert(name.clone(), e.to_string());
                }
            }
        }
        if self.provisioning.pool_errors != before {
            self.pools.status_stale = true;
        }
        out
    }

    /// One provisioning pass, then every pending pod's `status.nominatedNodeName` brought in
    /// line with the plan.
    pub(crate) async fn provision<C: ClusterApi>(&mut self, api: &C, pass: &mut Pass) -> Result<(), ControllerError> {
        self.provision_batch(api, pass).await?;
        self.provisioning.nominations.write(api, &self.state, pass).await
    }

    async fn provision_batch<C: ClusterApi>(&mut self, api: &C, pass: &mut Pass) -> Result<(), ControllerError> {
        self.expire_nominations(pass);
        // Buffer room held nowhere opens a window like a new pending pod (once per change).
        let room = self.state.buffer_room();
        let room_short = room.short();
        let room_new = room_short && self.provisioning.batch.room_seen != Some(room.generation);
        self.provisioning.batch.room_seen = Some(room.generation);
        // Rescan the pending pods only when a pod or a nomination changed since the last scan.
        let generation = (self.state.pod_generation(), self.provisioning.nominations.generation);
        let mut has_new = false;
        if self.provisioning.batch.observed != Some(generation) {
            let mut count = 0;
            for (k, p) in self.state.unbound_pods() {
                if self.provisionable(k, p) {
                    count += 1;
                    has_new |= !self.provisioning.batch.seen.contains(k);
                }
            }
            // Every pending pod already seen and as many as before: the set is unchanged.
            if has_new || count != self.provisioning.batch.seen.len() {
                let seen = self.provisionable_pods().into_iter().map(|(k, _)| k).collect();
                self.provisioning.batch.seen = seen;
            }
            self.provisioning.batch.observed = Some(generation);
        }
        has_new |= room_new;
        if self.provisioning.batch.seen.is_empty() && !room_short {
            self.provisioning.batch.started = None;
            self.provisioning.batch.last_trigger = None;
            self.provisioning.batch.dirty = false;
            self.provisioning.batch.retry_at = None;
            return Ok(());
        }
        if let Some(retry) = self.provisioning.batch.retry_at {
            if pass.now >= retry {
                self.provisioning.batch.retry_at = None;
                self.provisioning.batch.dirty = true;
            } else {
                pass.wake_at(retry);
            }
        }
        if has_new || self.provisioning.batch.dirty {
            self.provisioning.batch.dirty = false;
            self.provisioning.batch.started.get_or_insert(pass.now);
            self.provisioning.batch.last_trigger = Some(pass.now);
        }
        let (Some(started), Some(last)) = (self.provisioning.batch.started, self.provisioning.batch.last_trigger)
        else {
            // No open window: these pods were already tried and nothing changed since.
            return Ok(());
        };
        let closes = util::after(last, self.options.batch_idle).min(util::after(started, self.options.batch_max));
        if pass.now < closes {
            pass.wake_at(closes);
            return Ok(());
        }
        self.provisioning.batch.started = None;
        self.provisioning.batch.last_trigger = None;

        let pending = self.provisionable_pods();
        let pods = first_five_of(pending.iter().map(|(k, _)| pod_name(k)), pending.len());
        let room: Vec<Arc<Pod>> = self.state.buffer_room().pods.iter().map(|p| Arc::clone(&p.pod)).collect();
        if !pending.is_empty() {
            tracing::info!(pods = %pods, count = pending.len(), "found provisionable pod(s)");
        }
        if !room.is_empty() {
            tracing::info!(count = room.len(), "placing capacity buffer room after the pending pods");
        }

        let types = self.instance_types_by_pool().await;
        // The buffers' room is placed last, by pods the result's indices past `pending` name
        // (no nomination, no event: they exist only here).
        let mut input = self.scheduling_input_with(&pending, &types, false);
        input.placed_last = room.len();
        input.pods.extend(room);
        let result = SchedulingContext::with_facts(input.clone(), &self.pod_facts).place_pending();
        let applied = self.apply_scheduling_result(api, pass, &pending, &input, result).await;
        if applied.is_err() {
            // The window is closed and the pods already seen: without this, the pods whose
            // claims were not created before the failure would wait for an unrelated change.
            self.provisioning.batch.dirty = true;
        }
        applied
    }

    /// Builds the scheduling core's input from cluster state, the CapacityBuffers' room held on
    /// the nodes that hold it (what disruption and every other what-if must keep).
    pub(crate) fn scheduling_input(&self, pending: &[(ObjectKey, Arc<Pod>)], types: &TypesByPool) -> SchedulingInput {
        self.scheduling_input_with(pending, types, true)
    }

    /// [`Self::scheduling_input`], with the buffers' room on its nodes or (`with_room` false:
    /// the provisioner places it itself, the buffer reconciler finds where it fits) without.
    pub(crate) fn scheduling_input_with(
        &self,
        pending: &[(ObjectKey, Arc<Pod>)],
        types: &TypesByPool,
        with_room: bool,
    ) -> SchedulingInput {
        let state = &self.state;
        // Pools that provision for pods; those that cannot now are named in explanations.
        let mut unavailable_node_pools = BTreeMap::new();
        for (name, pool) in state.node_pools() {
            if pool.metadata.deletion_timestamp.is_some() || pool.spec.replicas.is_some() {
                continue;
            }
            if let Some(why) = self.pool_unavailable(pool, types) {
                unavailable_node_pools.insert(name.clone(), why);
            }
        }
        let node_pools = state
            .node_pools()
            .iter()
            .filter(|(_, p)| p.metadata.deletion_timestamp.is_none() && p.spec.replicas.is_none())
            .filter(|(name, _)| !unavailable_node_pools.contains_key(*name))
            .filter_map(|(name, pool)| {
                let its = types.get(name)?;
                Some(NodePoolInput {
                    node_pool: Arc::new(pool.clone()),
                    instance_types: its.clone(),
                    in_use: self.pool_usage(name, types),
                })
            })
            .collect();

        let mut nominated: BTreeMap<&str, Vec<Arc<Pod>>> = BTreeMap::new();
        for ((ns, name), claim) in &self.provisioning.nominations.by_pod {
            if let Some(pod) = state.pod(ns, name) {
                nominated.entry(claim.as_str()).or_default().push(pod.clone());
            }
        }
        // Pods that hold room on a node without being bound there: pending pods nominated to it
        // (kube-scheduler keeps their room) and DaemonSet pods meant for it. The pods being
        // placed now and those nominated to a claim are counted where they are placed.
        let placing: BTreeSet<&ObjectKey> = pending.iter().map(|(k, _)| k).collect();
        let mut held: BTreeMap<&str, Vec<Arc<Pod>>> = BTreeMap::new();
        for (key, pod) in state.unbound_pods() {
            if placing.contains(key)
                || self.provisioning.nominations.contains(key)
                || pod.metadata.deletion_timestamp.is_some()
                || util::pod_terminal(pod)
            {
                continue;
            }
            let node =
                util::nominated_node(pod).or_else(|| util::daemon_node(pod).filter(|_| util::owned_by_daemonset(pod)));
            if let Some(n) = node {
                held.entry(n).or_default().push(pod.clone());
            }
        }

        let daemonset_pods: Vec<Arc<Pod>> = state
            .daemonsets()
            .values()
            .filter_map(|ds| {
                let template = ds.spec.as_ref()?.template.clone();
                let mut metadata = template.metadata.unwrap_or_default();
                metadata.namespace = ds.metadata.namespace.clone();
                metadata.name = ds.metadata.name.clone();
                Some(Arc::new(Pod { metadata, spec: template.spec, status: None }))
            })
            .collect();

        let mut existing = Vec::new();
        let mut in_flight_nodes = BTreeSet::new();
        for (name, claim) in state.node_claims() {
            if !in_flight(claim) {
                continue;
            }
            let node_name = state.node_for_claim(claim).and_then(|n| n.metadata.name.as_deref());
            let mut holding = nominated.remove(name.as_str()).unwrap_or_default();
            holding.extend(node_name.and_then(|n| held.remove(n)).unwrap_or_default());
            existing.push(self.in_flight_node(claim, types, holding, &daemonset_pods));
            if let Some(n) = node_name {
                in_flight_nodes.insert(n.to_string());
            }
        }
        for (name, node) in state.nodes() {
            if in_flight_nodes.contains(name) {
                continue;
            }
            let mut n = self.existing_node(name, node, types);
            n.pods.extend(held.remove(name.as_str()).unwrap_or_default());
            existing.push(n);
        }
        if with_room && !state.buffer_room().is_empty() {
            let mut room = state.buffer_room().held();
            for n in &mut existing {
                n.pods.extend(room.remove(n.name.as_str()).unwrap_or_default());
            }
        }

        SchedulingInput {
            node_pools,
            existing_nodes: existing,
            daemonset_pods,
            pods: pending.iter().map(|(_, p)| p.clone()).collect(),
            volume_requirements: self.volume_requirements(),
            unresolvable_volumes: self.unresolvable_volumes(pending),
            // Every pod's namespace exists in the cluster even if its watch event has not
            // arrived yet, so each one gets at least its metadata.name label.
            namespace_labels: kerf_scheduling::namespace_labels(
                state.namespaces().values(),
                state.pods().keys().map(|(ns, _)| ns.as_str()),
            ),
            unavailable_node_pools,
            placed_last: 0,
        }
    }

    /// Why `pool` cannot launch anything now (Karpenter's NodeClassReady rule, or its instance
    /// types could not be listed), if so.
    pub(crate) fn pool_unavailable(&self, pool: &NodePool, types: &TypesByPool) -> Option<String> {
        if let Some(problem) = crate::nodeclass::node_class_problem(&self.state, pool) {
            return Some(problem.message);
        }
        if types.contains_key(pool.name()) {
            return None;
        }
        Some(
            self.provisioning
                .pool_errors
                .get(pool.name())
                .cloned()
                .unwrap_or_else(|| "its instance types are unknown".to_string()),
        )
    }

    /// Where each PersistentVolumeClaim's volume can be used: a bound claim's volume node
    /// affinity, or for an unbound claim of a WaitForFirstConsumer class, the class's allowed
    /// topologies. Keyed `namespace/claim`.
    fn volume_requirements(&self) -> BTreeMap<String, Vec<Requirements>> {
        let state = &self.state;
        let mut out = BTreeMap::new();
        for ((ns, name), pvc) in state.pvcs() {
            let spec = pvc.spec.as_ref();
            let terms: Vec<Requirements> = match spec.and_then(|s| s.volume_name.as_deref()).filter(|v| !v.is_empty()) {
                Some(volume) => state
                    .pvs()
                    .get(volume)
                    .and_then(|pv| pv.spec.as_ref()?.node_affinity.as_ref()?.required.as_ref())
                    .map(|sel| sel.node_selector_terms.iter().map(Requirements::from_node_selector_term).collect())
                    .unwrap_or_default(),
                None => spec
                    .and_then(|s| match s.storage_class_name.as_deref() {
                        Some(c) => state.storage_classes().get(c),
                        None => default_storage_class(state.storage_classes()),
                    })
                    .filter(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
                    .and_then(|c| c.allowed_topologies.as_ref())
                    .map(|terms| {
                        terms
                            .iter()
                            .map(|t| {
                                let mut reqs = Requirements::new();
                                for e in t.match_label_expressions.iter().flatten() {
                                    reqs.add(
                                        &e.key,
                                        kerf_scheduling::Requirement::new(kerf_api::Operator::In, &e.values),
                                    );
                                }
                                reqs
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            };
            if !terms.is_empty() {
                out.insert(format!("{ns}/{name}"), terms);
            }
        }
        out
    }

    /// The claims of `pending` pods whose volume cannot be resolved, with why: the claim does
    /// not exist, or it is unbound and names a StorageClass that does not exist. Karpenter does
    /// not provision for such pods, and kube-scheduler would not bind them anywhere. Generic
    /// ephemeral volumes are left out: their claim is created with the pod.
    fn unresolvable_volumes(&self, pending: &[(ObjectKey, Arc<Pod>)]) -> BTreeMap<String, String> {
        let state = &self.state;
        let mut out = BTreeMap::new();
        for (_, pod) in pending {
            let found = kerf_scheduling::volume_binding::unresolvable_claims(
                pod,
                |ns, name| state.pvcs().get(&(ns.to_string(), name.to_string())),
                |class| state.storage_classes().contains_key(class),
            );
            for u in found {
                out.entry(u.key()).or_insert_with(|| u.explain());
            }
        }
        out
    }

    /// Capacity a pool's claims hold, not-yet-launched claims counted at their likely type.
    pub(crate) fn pool_usage(&self, pool: &str, types: &TypesByPool) -> ResourceList {
        self.state.pool_usage(pool, |c| likely_capacity(c, types))
    }

    /// An in-flight claim as the scheduler sees it: its node's (or likely type's) allocatable,
    /// the pods bound or nominated to it, and the room of every DaemonSet that will run a pod
    /// on it but has none there yet (its pods are created once the node exists).
    fn in_flight_node(
        &self,
        claim: &NodeClaim,
        types: &TypesByPool,
        nominated: Vec<Arc<Pod>>,
        daemonsets: &[Arc<Pod>],
    ) -> ExistingNode {
        let state = &self.state;
        let pool = claim.metadata.labels.as_ref().and_then(|l| l.get(labels::NODE_POOL)).cloned();
        let node = state.node_for_claim(claim);
        let mut node_labels = claim_labels(claim);
        if let Some(n) = node {
            for (k, v) in n.metadata.labels.iter().flatten() {
                node_labels.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        node_labels.entry(labels::HOSTNAME.to_string()).or_insert_with(|| claim.name().to_string());
        let mut allocatable = node.map(util::node_allocatable).unwrap_or_default();
        if allocatable.is_empty() {
            allocatable = claim.status.as_ref().map(|s| s.allocatable.clone()).unwrap_or_default();
        }
        if allocatable.is_empty() {
            let empty = Vec::new();
            let its = pool.as_ref().and_then(|p| types.get(p)).unwrap_or(&empty);
            allocatable = likely_type(claim, its).map(|t| t.allocatable()).unwrap_or_default();
        }
        let mut pods: Vec<Arc<Pod>> = match node.and_then(|n| n.metadata.name.as_deref()) {
            Some(n) => state.pods_on_node(n).filter(|p| !util::pod_terminal(p)).cloned().collect(),
            None => Vec::new(),
        };
        pods.extend(nominated);
        let present: BTreeSet<(Option<String>, String)> = pods
            .iter()
            .filter_map(|p| Some((p.metadata.namespace.clone(), kerf_scheduling::pod::daemonset_owner(p)?.to_string())))
            .collect();
        let host = node.and_then(|n| n.metadata.name.as_deref()).unwrap_or(claim.name());
        for template in daemonsets {
            let id = (template.metadata.namespace.clone(), template.metadata.name.clone().unwrap_or_default());
            if !present.contains(&id)
                && kerf_scheduling::pod::daemon_runs_on(template, host, &node_labels, &claim.spec.taints)
            {
                pods.push(template.clone());
            }
        }
        ExistingNode {
            name: claim.name().to_string(),
            node_pool: pool,
            labels: node_labels,
            taints: claim.spec.taints.clone(),
            allocatable,
            pods,
            in_flight: true,
            schedulable: true,
            pool_usage: ClusterState::claim_usage(claim, |c| likely_capacity(c, types)),
        }
    }

    fn existing_node(&self, name: &str, node: &k8s_openapi::api::core::v1::Node, types: &TypesByPool) -> ExistingNode {
        let state: &ClusterState = &self.state;
        let node_labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
        let claim = state.claim_for_node(node);
        let claim_deleting = claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
        ExistingNode {
            name: name.to_string(),
            node_pool: node_labels.get(labels::NODE_POOL).cloned(),
            taints: util::node_taints(node),
            allocatable: util::node_allocatable(node),
            pods: state.pods_on_node(name).filter(|p| !util::pod_terminal(p)).cloned().collect(),
            in_flight: false,
            schedulable: !cordoned && node.metadata.deletion_timestamp.is_none() && !claim_deleting,
            labels: node_labels,
            pool_usage: claim.map(|c| ClusterState::claim_usage(c, |c| likely_capacity(c, types))).unwrap_or_default(),
        }
    }

    async fn apply_scheduling_result<C: ClusterApi>(
        &mut self,
        api: &C,
        pass: &mut Pass,
        pending: &[(ObjectKey, Arc<Pod>)],
        input: &SchedulingInput,
        result: SchedulingResult,
    ) -> Result<(), ControllerError> {
        // Pods placed on in-flight claims are nominated to them; pods placed on existing nodes
        // are nominated to those nodes (kube-scheduler binds them).
        let in_flight_names: BTreeSet<&str> =
            input.existing_nodes.iter().filter(|n| n.in_flight).map(|n| n.name.as_str()).collect();
        for (key, _) in pending {
            self.provisioning.nominations.on_nodes.remove(key);
        }
        for placement in &result.placements {
            let Some((key, _)) = pending.get(placement.pod) else { continue };
            if in_flight_names.contains(placement.node.as_str()) {
                self.nominate(api, key, &placement.node).await;
            } else {
                self.provisioning.nominations.on_nodes.insert(key.clone(), placement.node.clone());
            }
        }

        if !result.new_node_claims.is_empty() {
            let pods: usize = result.new_node_claims.iter().map(|c| c.pods.len()).sum();
            tracing::info!(nodeclaims = result.new_node_claims.len(), pods, "computed new nodeclaim(s) to fit pod(s)");
        }
        for new in &result.new_node_claims {
            let Some(pool) = self.state.node_pool(&new.node_pool).cloned() else { continue };
            let claim = self.new_claim(&pool, new);
            let created = match api.create(claim).await {
                Err(ApiError::Invalid { message, .. }) => {
                    // Retrying the same claim cannot help: tell its pods why they stay pending.
                    tracing::error!(NodePool = %new.node_pool, error = %message, "failed creating nodeclaim");
                    for &i in &new.pods {
                        if let Some((key, _)) = pending.get(i) {
                            api.record_event(EventRecord {
                                kind: "Pod",
                                name: pod_name(key),
                                type_: "Warning",
                                reason: "FailedScheduling".to_string(),
                                message: format!(
                                    "NodePool {}: the NodeClaim for this pod was rejected: {message}",
                                    new.node_pool
                                ),
                            })
                            .await;
                        }
                    }
                    continue;
                }
                other => other,
            };
            let Some(created) = pass.soft("creating nodeclaim", created)? else {
                // Its pods stay pending and already seen: make the next pass try them again.
                self.provisioning.batch.dirty = true;
                continue;
            };
            let its: Vec<String> = new.instance_types.iter().map(|t| t.name.clone()).collect();
            tracing::info!(
                NodePool = %new.node_pool,
                NodeClaim = %created.name(),
                requests = %new.requests,
                "instance-types" = %first_five(&its),
                "created nodeclaim"
            );
            let claim_name = created.name().to_string();
            self.state.record(created.into_any());
            for &i in &new.pods {
                if let Some((key, _)) = pending.get(i) {
                    self.nominate(api, key, &claim_name).await;
                }
            }
            let for_pods: Vec<(String, String)> = new
                .pods
                .iter()
                .filter_map(|&i| pending.get(i))
                .filter_map(|(key, pod)| Some((pod_name(key), util::owner_key(pod)?)))
                .collect();
            if let Some(r) = self.disruption.reversals.launched(&claim_name, &new.node_pool, &for_pods, pass.now) {
                tracing::warn!(
                    NodePool = %r.node_pool,
                    NodeClaim = %claim_name,
                    decided = %r.decided_at,
                    pods = %r.pods.join(", "),
                    "consolidation undone: pods it moved needed a new node; its replacement and this node are left alone until the workload changes"
                );
                api.record_event(EventRecord {
                    kind: kerf_api::nodepool::KIND,
                    name: r.node_pool.clone(),
                    type_: "Warning",
                    reason: "ConsolidationReversed".to_string(),
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

        self.provisioning.batch.retry_at =
            (!result.errors.is_empty()).then(|| util::after(pass.now, crate::manager::UNSCHEDULABLE_RETRY_AFTER));
        if let Some(retry) = self.provisioning.batch.retry_at {
            pass.wake_at(retry);
        }
        for (i, err) in &result.errors {
            let Some((key, _)) = pending.get(*i) else { continue };
            tracing::info!(pod = %pod_name(key), reason = %err.reason, "could not schedule pod: {}", err.message);
            api.record_event(EventRecord {
                kind: "Pod",
                name: pod_name(key),
                type_: "Warning",
                reason: "FailedScheduling".to_string(),
                message: err.message.clone(),
            })
            .await;
        }
        Ok(())
    }

    async fn nominate<C: ClusterApi>(&mut self, api: &C, pod: &ObjectKey, claim: &str) {
        self.provisioning.nominations.insert(pod.clone(), claim);
        api.record_event(EventRecord {
            kind: "Pod",
            name: pod_name(pod),
            type_: "Normal",
            reason: "Nominated".to_string(),
            message: format!("Pod should schedule on: nodeclaim/{claim}"),
        })
        .await;
    }

    /// A fresh, unused claim name for a pool: `<pool>-<5 lowercase alnum>`.
    pub(crate) fn claim_name(&mut self, pool: &str) -> String {
        loop {
            let name = format!("{pool}-{}", self.rng.suffix(5));
            if self.state.node_claim(&name).is_none() {
                return name;
            }
        }
    }

    /// A NodeClaim for `pool` with the given requirements and requests.
    pub(crate) fn claim_from_pool(
        &mut self,
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
        annotations
            .insert(labels::NODEPOOL_HASH_VERSION.to_string(), kerf_api::hash::NODEPOOL_HASH_VERSION.to_string());
        if let Some(class) = self.state.node_class_for(pool) {
            annotations.insert(labels::NODECLASS_HASH.to_string(), class.static_hash());
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
                name: Some(self.claim_name(pool.name())),
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
            },
            status: None,
        }
    }

    pub(crate) fn new_claim(&mut self, pool: &NodePool, new: &NewNodeClaim) -> NodeClaim {
        self.claim_from_pool(
            pool,
            new.node_requirements(),
            &new.labels,
            (new.taints.clone(), new.startup_taints.clone()),
            new.requests.clone(),
        )
    }
}

/// The StorageClass a claim without `storageClassName` gets, as the DefaultStorageClass admission
/// plugin picks it: among classes annotated as default, the most recently created (then by name).
/// An explicit empty `storageClassName` means "no class" and never reaches here.
fn default_storage_class(
    classes: &BTreeMap<String, k8s_openapi::api::storage::v1::StorageClass>,
) -> Option<&k8s_openapi::api::storage::v1::StorageClass> {
    const DEFAULT: [&str; 2] =
        ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"];
    classes
        .values()
        .filter(|c| {
            c.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| DEFAULT.iter().any(|k| a.get(*k).is_some_and(|v| v == "true")))
        })
        .max_by(|a, b| {
            let created =
                |c: &k8s_openapi::api::storage::v1::StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
            created(a).cmp(&created(b)).then_with(|| b.metadata.name.cmp(&a.metadata.name))
        })
}
