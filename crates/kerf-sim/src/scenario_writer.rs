//! The scenario writer: a cluster's objects, as `kerf snapshot` lists them, written as a
//! scenario file (docs/design.md, "Scenario file") that reproduces the cluster: every Node
//! under `nodes` (those a NodeClaim owns with that claim, so kerf manages them; the rest
//! unmanaged), then one `apply` of the NodePools, EC2NodeClasses, storage, priority classes,
//! PodDisruptionBudgets, DaemonSets, Deployments and every live pod, bound where it runs.
//!
//! Only what scheduling and disruption read is written: requests and limits, host ports,
//! selectors, affinity, tolerations, spread, priority, volumes that claim storage, owners and
//! the annotations kerf and Karpenter read. Container images, commands, environment, probes,
//! other volumes (Secrets, ConfigMaps) and other annotations are left out; Secrets and
//! ConfigMaps are never listed at all.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec, Deployment, DeploymentSpec, ReplicaSet};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Namespace, Node, PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeSpec, Pod, PodSpec, PodTemplate, PodTemplateSpec, Volume,
};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kerf_api::{
    CapacityBuffer, CapacityQuota, EC2NodeClass, NodeClaim, NodeOverlay, NodePool, ProvisioningRequest, labels,
};
use serde_json::{Value, json};

/// What `kerf snapshot` lists from a cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterObjects {
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    pub namespaces: Vec<Namespace>,
    pub deployments: Vec<Deployment>,
    pub replica_sets: Vec<ReplicaSet>,
    pub daemon_sets: Vec<DaemonSet>,
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
    pub priority_classes: Vec<PriorityClass>,
    pub persistent_volume_claims: Vec<PersistentVolumeClaim>,
    pub persistent_volumes: Vec<PersistentVolume>,
    pub storage_classes: Vec<StorageClass>,
    pub runtime_classes: Vec<RuntimeClass>,
    pub node_pools: Vec<NodePool>,
    pub node_claims: Vec<NodeClaim>,
    pub node_classes: Vec<EC2NodeClass>,
    /// Only those a CapacityBuffer or a live ProvisioningRequest refers to are written.
    pub pod_templates: Vec<PodTemplate>,
    pub capacity_buffers: Vec<CapacityBuffer>,
    /// Written before the NodePools (the prices their types are shown at).
    pub node_overlays: Vec<NodeOverlay>,
    /// Only those not yet Failed, BookingExpired or CapacityRevoked are written (without status:
    /// the simulation answers them again).
    pub provisioning_requests: Vec<ProvisioningRequest>,
    /// Written without status (the simulation sums what their nodes hold again).
    pub capacity_quotas: Vec<CapacityQuota>,
}

/// What the written scenario holds, for the command's summary line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    pub nodes: usize,
    /// Nodes written with their NodeClaim (kerf manages them).
    pub managed_nodes: usize,
    pub pods: usize,
    pub bound_pods: usize,
    pub workloads: usize,
    /// Pods left out (finished, or being deleted).
    pub skipped_pods: usize,
}

/// Annotations kerf or Karpenter read; every other annotation is left out (they can carry
/// whole manifests, e.g. `kubectl.kubernetes.io/last-applied-configuration`).
fn kept_annotation(key: &str) -> bool {
    ["karpenter.sh/", "karpenter.k8s.aws/", "kerf.sh/", "compatibility.karpenter.sh/"]
        .iter()
        .any(|p| key.starts_with(p))
        || key == "cluster-autoscaler.kubernetes.io/safe-to-evict"
}

fn annotations(a: Option<&BTreeMap<String, String>>) -> Option<BTreeMap<String, String>> {
    let kept: BTreeMap<String, String> =
        a.into_iter().flatten().filter(|(k, _)| kept_annotation(k)).map(|(k, v)| (k.clone(), v.clone())).collect();
    (!kept.is_empty()).then_some(kept)
}

/// Name, namespace, labels and the annotations kept.
fn meta(m: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: m.name.clone(),
        namespace: m.namespace.clone(),
        labels: m.labels.clone().filter(|l| !l.is_empty()),
        annotations: annotations(m.annotations.as_ref()),
        ..ObjectMeta::default()
    }
}

fn owners(m: &ObjectMeta) -> Option<Vec<OwnerReference>> {
    let refs: Vec<OwnerReference> = m
        .owner_references
        .iter()
        .flatten()
        .map(|o| OwnerReference { uid: String::new(), block_owner_deletion: None, ..o.clone() })
        .collect();
    (!refs.is_empty()).then_some(refs)
}

/// A container as scheduling sees it: its name, requests and limits (requests default to
/// limits), host ports and sidecar restart policy.
fn container(c: &Container) -> Container {
    let ports: Vec<ContainerPort> = c.ports.iter().flatten().filter(|p| p.host_port.is_some()).cloned().collect();
    Container {
        name: c.name.clone(),
        resources: c.resources.clone().map(|mut r| {
            r.claims = None;
            r
        }),
        ports: (!ports.is_empty()).then_some(ports),
        restart_policy: c.restart_policy.clone(),
        ..Container::default()
    }
}

/// The pod spec fields scheduling, binding and draining read.
fn pod_spec(s: &PodSpec) -> PodSpec {
    let volumes: Vec<Volume> = s
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.persistent_volume_claim.is_some())
        .map(|v| Volume {
            name: v.name.clone(),
            persistent_volume_claim: v.persistent_volume_claim.clone(),
            ..Volume::default()
        })
        .collect();
    PodSpec {
        containers: s.containers.iter().map(container).collect(),
        init_containers: s.init_containers.as_ref().map(|cs| cs.iter().map(container).collect()),
        node_name: s.node_name.clone(),
        node_selector: s.node_selector.clone(),
        affinity: s.affinity.clone(),
        tolerations: s.tolerations.clone(),
        topology_spread_constraints: s.topology_spread_constraints.clone(),
        priority_class_name: s.priority_class_name.clone(),
        preemption_policy: s.preemption_policy.clone(),
        runtime_class_name: s.runtime_class_name.clone(),
        overhead: s.overhead.clone(),
        scheduler_name: s.scheduler_name.clone(),
        host_network: s.host_network,
        restart_policy: s.restart_policy.clone(),
        termination_grace_period_seconds: s.termination_grace_period_seconds,
        volumes: (!volumes.is_empty()).then_some(volumes),
        ..PodSpec::default()
    }
}

fn template(t: &PodTemplateSpec) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: t.metadata.as_ref().map(|m| ObjectMeta {
            labels: m.labels.clone(),
            annotations: annotations(m.annotations.as_ref()),
            ..ObjectMeta::default()
        }),
        spec: t.spec.as_ref().map(pod_spec),
    }
}

/// JSON without nulls, empty maps and empty lists, for the node entries this module builds
/// (objects keep their empty values: an empty selector means something).
fn compact(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| match v {
                    Value::Null => false,
                    Value::Object(m) => !m.is_empty(),
                    Value::Array(a) => !a.is_empty(),
                    _ => true,
                })
                .collect(),
        ),
        other => other,
    }
}

/// An object's JSON (the types leave unset fields out).
fn to_value<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap_or(Value::Null)
}

/// Whether a pod is gone or going: finished, or being deleted.
fn finished(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some() || kerf_api::pod_facts::terminal(p)
}

/// The region most nodes are labelled with.
fn region(nodes: &[Node]) -> Option<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for n in nodes {
        if let Some(r) = n.metadata.labels.as_ref().and_then(|l| l.get(labels::REGION)) {
            *counts.entry(r.as_str()).or_default() += 1;
        }
    }
    counts.into_iter().max_by_key(|(_, c)| *c).map(|(r, _)| r.to_string())
}

fn quantities(q: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>) -> Value {
    Value::Object(q.into_iter().flatten().map(|(k, v)| (k.clone(), Value::String(v.0.clone()))).collect())
}

/// A node's entry under `nodes`: with its NodeClaim when one names it (by provider ID).
fn node_entry(n: &Node, claims: &BTreeMap<&str, &NodeClaim>) -> (Value, bool) {
    let spec = n.spec.clone().unwrap_or_default();
    let status = n.status.clone().unwrap_or_default();
    let mut entry = json!({
        "name": n.metadata.name.clone().unwrap_or_default(),
        "labels": n.metadata.labels.clone().unwrap_or_default(),
        "annotations": annotations(n.metadata.annotations.as_ref()).unwrap_or_default(),
        "taints": spec.taints.iter().flatten().filter_map(kerf_api::Taint::from_core).collect::<Vec<_>>(),
        "capacity": quantities(status.capacity.as_ref()),
        "allocatable": quantities(status.allocatable.as_ref().or(status.capacity.as_ref())),
        "providerID": spec.provider_id.clone(),
    });
    let claim = spec.provider_id.as_deref().and_then(|p| claims.get(p)).filter(|_| {
        n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(labels::NODE_POOL))
            && n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(labels::ZONE))
    });
    if let Some(c) = claim {
        // Its creation time gives it its age in the simulation (expireAfter, consolidation).
        let claim_meta = ObjectMeta { creation_timestamp: c.metadata.creation_timestamp.clone(), ..meta(&c.metadata) };
        entry["nodeClaim"] = json!({
            "apiVersion": kerf_api::nodeclaim::API_VERSION,
            "kind": kerf_api::nodeclaim::KIND,
            "metadata": to_value(&claim_meta),
            "spec": to_value(&c.spec),
        });
    }
    (compact(entry), claim.is_some())
}

/// Writes the scenario `name` that reproduces `objects` as they were at `taken_at` (the
/// scenario's `start`: t=0 is that instant); the YAML text and what it holds.
pub fn write(
    name: &str,
    taken_at: kerf_cloud::Timestamp,
    objects: &ClusterObjects,
) -> Result<(String, Written), serde_yaml_ng::Error> {
    let mut written = Written::default();
    let claims: BTreeMap<&str, &NodeClaim> = objects
        .node_claims
        .iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| c.provider_id().map(|p| (p, c)))
        .collect();
    let mut nodes = Vec::new();
    for n in &objects.nodes {
        let (entry, managed) = node_entry(n, &claims);
        written.nodes += 1;
        written.managed_nodes += usize::from(managed);
        nodes.push(entry);
    }
    let mut apply: Vec<Value> = Vec::new();
    let mut push = |kind: &str, api_version: &str, mut v: Value| {
        if let Value::Object(m) = &mut v {
            m.insert("apiVersion".to_string(), json!(api_version));
            m.insert("kind".to_string(), json!(kind));
        }
        apply.push(v);
    };
    // Namespaces that exist, and those pods name (the default ones need no object).
    let mut namespaces: BTreeSet<String> = BTreeSet::new();
    for ns in &objects.namespaces {
        if let Some(n) = &ns.metadata.name {
            namespaces.insert(n.clone());
            if n != "default" {
                push("Namespace", "v1", json!({"metadata": to_value(&meta(&ns.metadata))}));
            }
        }
    }
    for pc in &objects.priority_classes {
        let kept = PriorityClass { metadata: meta(&pc.metadata), ..pc.clone() };
        push("PriorityClass", "scheduling.k8s.io/v1", strip_type(to_value(&kept)));
    }
    for sc in &objects.storage_classes {
        let kept = StorageClass {
            metadata: meta(&sc.metadata),
            provisioner: sc.provisioner.clone(),
            volume_binding_mode: sc.volume_binding_mode.clone(),
            allowed_topologies: sc.allowed_topologies.clone(),
            ..StorageClass::default()
        };
        push("StorageClass", "storage.k8s.io/v1", strip_type(to_value(&kept)));
    }
    for rc in &objects.runtime_classes {
        let kept = RuntimeClass { metadata: meta(&rc.metadata), ..rc.clone() };
        push("RuntimeClass", "node.k8s.io/v1", strip_type(to_value(&kept)));
    }
    for pv in &objects.persistent_volumes {
        let s = pv.spec.clone().unwrap_or_default();
        let kept = PersistentVolume {
            metadata: meta(&pv.metadata),
            spec: Some(PersistentVolumeSpec {
                capacity: s.capacity,
                access_modes: s.access_modes,
                node_affinity: s.node_affinity,
                storage_class_name: s.storage_class_name,
                claim_ref: s.claim_ref.map(|mut r| {
                    r.uid = None;
                    r.resource_version = None;
                    r
                }),
                volume_mode: s.volume_mode,
                ..PersistentVolumeSpec::default()
            }),
            status: None,
        };
        push("PersistentVolume", "v1", strip_type(to_value(&kept)));
    }
    for pvc in &objects.persistent_volume_claims {
        let s = pvc.spec.clone().unwrap_or_default();
        let kept = PersistentVolumeClaim {
            metadata: meta(&pvc.metadata),
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: s.access_modes,
                resources: s.resources,
                storage_class_name: s.storage_class_name,
                volume_name: s.volume_name,
                volume_mode: s.volume_mode,
                selector: s.selector,
                ..PersistentVolumeClaimSpec::default()
            }),
            status: None,
        };
        push("PersistentVolumeClaim", "v1", strip_type(to_value(&kept)));
    }
    for nc in &objects.node_classes {
        let mut spec = nc.spec.clone();
        // Boot scripts can carry credentials; the simulated cloud boots nothing.
        spec.user_data = None;
        let mut object = json!({"metadata": to_value(&meta(&nc.metadata)), "spec": to_value(&spec)});
        // What the cluster resolved the class to: the simulated account answers with it while
        // the class keeps this spec (docs/design.md, "A node class's recorded status").
        if let Some(status) = nc.status.as_ref().and_then(|s| s.resolved()) {
            object["status"] = to_value(&status);
        }
        push(kerf_api::ec2nodeclass::KIND, kerf_api::ec2nodeclass::API_VERSION, object);
    }
    for o in &objects.node_overlays {
        push(
            kerf_api::nodeoverlay::KIND,
            kerf_api::nodeoverlay::API_VERSION,
            json!({"metadata": to_value(&meta(&o.metadata)), "spec": to_value(&o.spec)}),
        );
    }
    for q in &objects.capacity_quotas {
        push(
            kerf_api::capacityquota::KIND,
            kerf_api::capacityquota::API_VERSION,
            json!({"metadata": to_value(&meta(&q.metadata)), "spec": to_value(&q.spec)}),
        );
    }
    for np in &objects.node_pools {
        push(
            kerf_api::nodepool::KIND,
            kerf_api::nodepool::API_VERSION,
            json!({"metadata": to_value(&meta(&np.metadata)), "spec": to_value(&np.spec)}),
        );
    }
    for pdb in &objects.pod_disruption_budgets {
        let kept = PodDisruptionBudget { metadata: meta(&pdb.metadata), spec: pdb.spec.clone(), status: None };
        push("PodDisruptionBudget", "policy/v1", strip_type(to_value(&kept)));
    }
    for ds in &objects.daemon_sets {
        let Some(s) = &ds.spec else { continue };
        let kept = DaemonSet {
            metadata: meta(&ds.metadata),
            spec: Some(DaemonSetSpec {
                selector: s.selector.clone(),
                template: template(&s.template),
                update_strategy: s.update_strategy.clone(),
                ..DaemonSetSpec::default()
            }),
            status: None,
        };
        written.workloads += 1;
        push("DaemonSet", "apps/v1", strip_type(to_value(&kept)));
    }
    for d in &objects.deployments {
        let Some(s) = &d.spec else { continue };
        let kept = Deployment {
            metadata: meta(&d.metadata),
            spec: Some(DeploymentSpec {
                replicas: s.replicas,
                selector: s.selector.clone(),
                strategy: s.strategy.clone(),
                template: template(&s.template),
                ..DeploymentSpec::default()
            }),
            status: None,
        };
        written.workloads += 1;
        push("Deployment", "apps/v1", strip_type(to_value(&kept)));
    }
    // Buffers after the workloads their `scalableRef` may name; a PodTemplate only when a
    // buffer refers to it (templates no buffer uses say nothing about scheduling).
    let live_requests: Vec<&ProvisioningRequest> = objects
        .provisioning_requests
        .iter()
        .filter(|r| {
            use kerf_api::provisioningrequest::State;
            !matches!(r.state(), State::Failed | State::BookingExpired | State::CapacityRevoked)
        })
        .collect();
    let mut referenced: BTreeSet<(&str, &str)> = objects
        .capacity_buffers
        .iter()
        .filter_map(|b| Some((b.namespace(), b.spec.pod_template_ref.as_ref()?.name.as_str())))
        .collect();
    for r in &live_requests {
        referenced.extend(r.spec.pod_sets.iter().map(|s| (r.namespace(), s.pod_template_ref.name.as_str())));
    }
    for pt in &objects.pod_templates {
        let ns = pt.metadata.namespace.as_deref().unwrap_or("default");
        let name = pt.metadata.name.as_deref().unwrap_or_default();
        if !referenced.contains(&(ns, name)) {
            continue;
        }
        let kept = PodTemplate { metadata: meta(&pt.metadata), template: pt.template.as_ref().map(template) };
        push("PodTemplate", "v1", strip_type(to_value(&kept)));
    }
    for b in &objects.capacity_buffers {
        push(
            kerf_api::capacitybuffer::KIND,
            kerf_api::capacitybuffer::API_VERSION,
            json!({"metadata": to_value(&meta(&b.metadata)), "spec": to_value(&b.spec)}),
        );
    }
    for r in &live_requests {
        push(
            kerf_api::provisioningrequest::KIND,
            kerf_api::provisioningrequest::API_VERSION,
            json!({"metadata": to_value(&meta(&r.metadata)), "spec": to_value(&r.spec)}),
        );
    }
    for p in &objects.pods {
        if finished(p) {
            written.skipped_pods += 1;
            continue;
        }
        let Some(spec) = &p.spec else {
            written.skipped_pods += 1;
            continue;
        };
        let mut m = meta(&p.metadata);
        m.owner_references = owners(&p.metadata);
        if let Some(ns) = &m.namespace
            && !namespaces.contains(ns)
            && ns != "default"
        {
            namespaces.insert(ns.clone());
            push("Namespace", "v1", json!({"metadata": {"name": ns}}));
        }
        let kept = Pod { metadata: m, spec: Some(pod_spec(spec)), status: None };
        written.pods += 1;
        written.bound_pods += usize::from(spec.node_name.is_some());
        push("Pod", "v1", strip_type(to_value(&kept)));
    }
    let mut cloud = serde_json::Map::new();
    if let Some(r) = region(&objects.nodes) {
        cloud.insert("region".to_string(), json!(r));
    }
    let mut steps = Vec::new();
    if !apply.is_empty() {
        steps.push(json!({"apply": apply}));
    }
    // The contract's order: name, start, cloud, nodes, steps.
    let mut scenario = serde_yaml_ng::Mapping::new();
    let mut set = |k: &str, v: Value| -> Result<(), serde_yaml_ng::Error> {
        scenario.insert(serde_yaml_ng::Value::String(k.to_string()), serde_yaml_ng::to_value(v)?);
        Ok(())
    };
    set("name", json!(name))?;
    set("start", json!(taken_at.to_string()))?;
    if !cloud.is_empty() {
        set("cloud", Value::Object(cloud))?;
    }
    set("nodes", Value::Array(nodes))?;
    set("steps", Value::Array(steps))?;
    let body = serde_yaml_ng::to_string(&scenario)?;
    Ok((format!("{HEADER}{body}"), written))
}

const HEADER: &str = "# Written by `kerf snapshot`: the cluster's nodes and what runs on them, as a kerf scenario.\n\
# `kerf simulate FILE --for 30m` runs kerf's controllers on it and reports before / after;\n\
# `--apply NODEPOOL.yaml` first applies a changed NodePool (a what-if).\n";

/// The k8s-openapi types write their own `apiVersion` and `kind`; `push` sets them once.
fn strip_type(mut v: Value) -> Value {
    if let Value::Object(m) = &mut v {
        m.remove("apiVersion");
        m.remove("kind");
    }
    v
}
