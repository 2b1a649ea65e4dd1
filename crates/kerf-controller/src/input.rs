//! The scheduling core's input, built from the cluster: existing nodes with the pods bound or
//! nominated to them, in-flight NodeClaims at their likely type, NodePools with their instance
//! types and usage, DaemonSets, volumes and namespaces. Provisioning, disruption and the
//! CapacityBuffer reconciler all build it here, from the informer cache and the published
//! nominations, so each sees the cluster the same way.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kerf_scheduling::volume_limits::default_storage_class;

use kerf_api::SlimPod;
use kerf_api::pod_facts;
use kerf_api::{NodeClaim, NodePool, ResourceList, labels};
use kerf_cloud::CloudProvider;
use kerf_scheduling::{ExistingNode, InstanceType, NodePoolInput, PreferencePolicy, Requirements, SchedulingInput};

use crate::claims::in_flight;
use crate::published::Published;
use crate::state::{ClusterState, ObjectKey};
use crate::util;

/// The capacity a NodeClaim that has not launched yet will most likely have: its
/// [`likely_type`]'s among its pool's types (empty when none is known).
pub(crate) fn likely_capacity(claim: &NodeClaim, types: &TypesByPool) -> ResourceList {
    let pool = util::claim_pool(claim);
    let its = pool.and_then(|p| types.get(p)).map(Vec::as_slice).unwrap_or_default();
    likely_type(claim, its).map(|t| t.capacity.clone()).unwrap_or_default()
}

/// A registered node's EBS attach limit when its allocatable states none (kubelets do not
/// report it; the EBS CSI driver keeps it in a CSINode object kerf does not read): its
/// NodeClaim's, else its instance type's in its pool (docs/design.md, "Volume attach limits").
/// Nodes of neither keep no limit.
fn attach_limit_from_type(
    allocatable: &mut ResourceList,
    node: &k8s_openapi::api::core::v1::Node,
    claim: Option<&NodeClaim>,
    types: &TypesByPool,
) {
    use kerf_api::resources::ATTACHABLE_VOLUMES_EBS;
    if allocatable.0.contains_key(ATTACHABLE_VOLUMES_EBS) {
        return;
    }
    let from_claim = claim.and_then(|c| c.status.as_ref()?.allocatable.0.get(ATTACHABLE_VOLUMES_EBS).copied());
    let node_labels = node.metadata.labels.as_ref();
    let from_type = || {
        let pool = node_labels?.get(labels::NODE_POOL)?;
        let name = node_labels?.get(labels::INSTANCE_TYPE)?;
        let t = types.get(pool)?.iter().find(|t| &t.name == name)?;
        t.capacity.0.contains_key(ATTACHABLE_VOLUMES_EBS).then(|| t.allocatable_of(ATTACHABLE_VOLUMES_EBS))
    };
    if let Some(q) = from_claim.or_else(from_type) {
        allocatable.set(ATTACHABLE_VOLUMES_EBS, q);
    }
}

/// Instance types per NodePool, fetched once per provisioning pass.
pub(crate) type TypesByPool = BTreeMap<String, Vec<Arc<InstanceType>>>;

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

/// Instance types of every live NodePool (static ones too: their in-flight claims need a
/// likely type). Pools whose types cannot be listed are left out, with a warning.
pub(crate) async fn instance_types_by_pool<P: CloudProvider>(
    cloud: &P,
    state: &ClusterState,
    published: &mut Published,
) -> TypesByPool {
    let mut out = TypesByPool::new();
    let before = std::mem::take(&mut published.pool_errors);
    for (name, pool) in state.node_pools() {
        if pool.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match cloud.instance_types(pool, state.node_class_for(pool)).await {
            Ok(types) => {
                out.insert(name.clone(), types);
            }
            Err(e) => {
                tracing::warn!(NodePool = %name, error = %e, "skipping nodepool: cannot list instance types");
                published.pool_errors.insert(name.clone(), e.to_string());
            }
        }
    }
    if published.pool_errors != before {
        published.pool_status_stale = true;
    }
    out
}

/// The cluster as the scheduling core is shown it: the informer cache and what the provisioner
/// published (nominations, NodePools whose types could not be listed).
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub state: &'a ClusterState,
    pub published: &'a Published,
    pub preference_policy: PreferencePolicy,
}

impl View<'_> {
    /// Builds the scheduling core's input from cluster state, the room CapacityBuffers and
    /// ProvisioningRequest bookings keep held on the nodes that hold it (what disruption and every other what-if must keep).
    pub(crate) fn scheduling_input(
        &self,
        pending: &[(ObjectKey, Arc<SlimPod>)],
        types: &TypesByPool,
    ) -> SchedulingInput {
        self.scheduling_input_with(pending, types, true)
    }

    /// [`Self::scheduling_input`], with the buffers' room on its nodes or (`with_room` false:
    /// the provisioner places it itself, the buffer reconciler finds where it fits) without.
    pub(crate) fn scheduling_input_with(
        &self,
        pending: &[(ObjectKey, Arc<SlimPod>)],
        types: &TypesByPool,
        with_room: bool,
    ) -> SchedulingInput {
        let state = self.state;
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

        let mut nominated: BTreeMap<&str, Vec<Arc<SlimPod>>> = BTreeMap::new();
        for ((ns, name), claim) in &self.published.nominations.by_pod {
            if let Some(pod) = state.pod(ns, name) {
                nominated.entry(claim.as_str()).or_default().push(pod.clone());
            }
        }
        // Pods that hold room on a node without being bound there: pending pods nominated to it
        // (kube-scheduler keeps their room) and DaemonSet pods meant for it. The pods being
        // placed now and those nominated to a claim are counted where they are placed.
        let placing: BTreeSet<&ObjectKey> = pending.iter().map(|(k, _)| k).collect();
        let mut held: BTreeMap<&str, Vec<Arc<SlimPod>>> = BTreeMap::new();
        for (key, pod) in state.unbound_pods() {
            if placing.contains(key)
                || self.published.nominations.contains(key)
                || pod.metadata.deletion_timestamp.is_some()
                || pod_facts::terminal(pod)
            {
                continue;
            }
            let node = util::nominated_node(pod)
                .or_else(|| util::daemon_node(pod).filter(|_| pod_facts::daemonset_owner(pod).is_some()));
            if let Some(n) = node {
                held.entry(n).or_default().push(pod.clone());
            }
        }

        let daemonset_pods: Vec<Arc<SlimPod>> = state
            .daemonsets()
            .values()
            .filter_map(|ds| {
                let template = ds.spec.as_ref()?.template.clone();
                let mut metadata = template.metadata.unwrap_or_default();
                metadata.namespace = ds.metadata.namespace.clone();
                metadata.name = ds.metadata.name.clone();
                Some(Arc::new(SlimPod {
                    metadata: metadata.into(),
                    spec: template.spec.as_ref().map(kerf_api::SlimPodSpec::from),
                    status: None,
                }))
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
            // Pods nominated to the node's claim hold their room there after the claim is
            // initialized too, until they bind or their nomination lapses: kube-scheduler keeps
            // it for them, so other pods planned into it would find none.
            if let Some(claim) = state.claim_for_node(node) {
                let waiting = nominated.remove(claim.name()).unwrap_or_default();
                n.pods.extend(waiting.into_iter().filter(|p| util::pod_node_name(p).is_none()));
            }
            existing.push(n);
        }
        if with_room && !(self.published.buffer_room.is_empty() && self.published.booked_room.is_empty()) {
            let mut room = self.published.room_held();
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
            ebs_claims: Arc::new(self.ebs_claims()),
            // Every pod's namespace exists in the cluster even if its watch event has not
            // arrived yet, so each one gets at least its metadata.name label.
            namespace_labels: kerf_scheduling::namespace_labels(
                state.namespaces().values(),
                state.pods().map(|p| p.metadata.namespace.as_deref().unwrap_or_default()),
            ),
            unavailable_node_pools,
            placed_last: 0,
            preference_policy: self.preference_policy,
            quotas: crate::quotas::inputs(state, |c| likely_capacity(c, types)),
        }
    }

    /// Why `pool` cannot launch anything now (Karpenter's NodeClassReady rule, or its instance
    /// types could not be listed), if so.
    pub(crate) fn pool_unavailable(&self, pool: &NodePool, types: &TypesByPool) -> Option<String> {
        if let Some(problem) = self.state.node_class_problem(pool) {
            return Some(problem.message);
        }
        if types.contains_key(pool.name()) {
            return None;
        }
        Some(
            self.published
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
        let state = self.state;
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
                        None => default_storage_class(state.storage_classes().values()),
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

    /// The claims (`namespace/claim`) whose volume attaches as an EBS volume: bound to an EBS
    /// volume, or provisioned by an EBS StorageClass (docs/design.md, "Volume attach limits").
    fn ebs_claims(&self) -> BTreeSet<String> {
        let state = self.state;
        let classes = state.storage_classes();
        let class = |name: Option<&str>| match name {
            Some(n) => classes.get(n),
            None => default_storage_class(classes.values()),
        };
        state
            .pvcs()
            .iter()
            .filter(|(_, pvc)| {
                let volume = pvc.spec.as_ref().and_then(|s| s.volume_name.as_deref()).and_then(|v| state.pvs().get(v));
                let ebs_volume = volume.and_then(|pv| pv.spec.as_ref()).is_some_and(|s| {
                    s.aws_elastic_block_store.is_some()
                        || s.csi.as_ref().is_some_and(|c| c.driver == kerf_scheduling::volume_limits::EBS_CSI_DRIVER)
                });
                ebs_volume || kerf_scheduling::volume_limits::claim_attaches_ebs(pvc, class)
            })
            .map(|((ns, name), _)| format!("{ns}/{name}"))
            .collect()
    }

    /// The claims of `pending` pods whose volume cannot be resolved, with why: the claim does
    /// not exist, or it is unbound and names a StorageClass that does not exist. Karpenter does
    /// not provision for such pods, and kube-scheduler would not bind them anywhere. Generic
    /// ephemeral volumes are left out: their claim is created with the pod.
    fn unresolvable_volumes(&self, pending: &[(ObjectKey, Arc<SlimPod>)]) -> BTreeMap<String, String> {
        let state = self.state;
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
        nominated: Vec<Arc<SlimPod>>,
        daemonsets: &[Arc<SlimPod>],
    ) -> ExistingNode {
        let state = self.state;
        let pool = util::claim_pool(claim).map(str::to_string);
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
        } else if let Some(n) = node {
            attach_limit_from_type(&mut allocatable, n, Some(claim), types);
        }
        if allocatable.is_empty() {
            let empty = Vec::new();
            let its = pool.as_ref().and_then(|p| types.get(p)).unwrap_or(&empty);
            allocatable = likely_type(claim, its).map(|t| t.allocatable()).unwrap_or_default();
        }
        let mut pods: Vec<Arc<SlimPod>> = match node.and_then(|n| n.metadata.name.as_deref()) {
            Some(n) => state.pods_on_node(n).filter(|p| !pod_facts::terminal(p)).cloned().collect(),
            None => Vec::new(),
        };
        pods.extend(nominated);
        let present: BTreeSet<(Option<String>, String)> = pods
            .iter()
            .filter_map(|p| Some((p.metadata.namespace.clone(), pod_facts::daemonset_owner(p)?.to_string())))
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
            labels: node_labels.into(),
            taints: claim.spec.taints.clone(),
            allocatable: Arc::new(allocatable),
            pods,
            in_flight: true,
            schedulable: true,
            pool_usage: Arc::new(ClusterState::claim_usage(claim, |c| likely_capacity(c, types))),
        }
    }

    fn existing_node(&self, name: &str, node: &k8s_openapi::api::core::v1::Node, types: &TypesByPool) -> ExistingNode {
        let state: &ClusterState = self.state;
        let node_labels = state.node_labels(name);
        let claim = state.claim_for_node(node);
        let claim_deleting = claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        let cordoned = node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
        let mut allocatable = util::node_allocatable(node);
        attach_limit_from_type(&mut allocatable, node, claim, types);
        ExistingNode {
            name: name.to_string(),
            node_pool: node_labels.get(labels::NODE_POOL).cloned(),
            taints: util::node_taints(node),
            allocatable: Arc::new(allocatable),
            pods: state.pods_on_node(name).filter(|p| !pod_facts::terminal(p)).cloned().collect(),
            in_flight: false,
            schedulable: !cordoned && node.metadata.deletion_timestamp.is_none() && !claim_deleting,
            labels: node_labels,
            pool_usage: Arc::new(
                claim.map(|c| ClusterState::claim_usage(c, |c| likely_capacity(c, types))).unwrap_or_default(),
            ),
        }
    }
}

#[cfg(test)]
mod attach_limit_tests {
    use kerf_api::resources::ATTACHABLE_VOLUMES_EBS;
    use kerf_api::{InstanceType, Quantity};

    use super::*;

    fn node(attach: Option<&str>) -> k8s_openapi::api::core::v1::Node {
        let mut alloc = serde_json::json!({"cpu": "2"});
        if let Some(a) = attach {
            alloc[ATTACHABLE_VOLUMES_EBS] = serde_json::json!(a);
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {labels::NODE_POOL: "default", labels::INSTANCE_TYPE: "t3.large"}},
            "status": {"allocatable": alloc}
        }))
        .unwrap()
    }

    fn pool_types() -> TypesByPool {
        let t = InstanceType {
            name: "t3.large".into(),
            labels: BTreeMap::new(),
            capacity: ResourceList::new().with(ATTACHABLE_VOLUMES_EBS, Quantity::from_units(26)),
            overhead: ResourceList::new(),
            offerings: Vec::new(),
            price_estimated: false,
        };
        BTreeMap::from([("default".to_string(), vec![Arc::new(t)])])
    }

    #[test]
    fn a_node_without_an_attach_limit_takes_its_claims_then_its_types() {
        let limit = |node: &k8s_openapi::api::core::v1::Node, claim: Option<&NodeClaim>, types: &TypesByPool| {
            let mut a = util::node_allocatable(node);
            attach_limit_from_type(&mut a, node, claim, types);
            a.0.get(ATTACHABLE_VOLUMES_EBS).map(|q| q.value_ceil())
        };
        let claim: NodeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "c1"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"allocatable": {ATTACHABLE_VOLUMES_EBS: "25"}}
        }))
        .unwrap();
        assert_eq!(limit(&node(Some("20")), Some(&claim), &pool_types()), Some(20), "the node's own");
        assert_eq!(limit(&node(None), Some(&claim), &pool_types()), Some(25), "its claim's");
        assert_eq!(limit(&node(None), None, &pool_types()), Some(26), "its type's");
        assert_eq!(limit(&node(None), None, &TypesByPool::new()), None, "none known: no limit");
    }
}
