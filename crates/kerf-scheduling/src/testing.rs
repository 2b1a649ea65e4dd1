//! Small builders for pods, nodes and NodePools used by the tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, ContainerPort, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodAffinity,
    PodAffinityTerm, PodAntiAffinity, PreferredSchedulingTerm, ResourceRequirements, Toleration,
    TopologySpreadConstraint, WeightedPodAffinityTerm,
};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQ;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kerf_api::{NodePool, NodeSelectorRequirementWithMinValues, Operator, Quantity, ResourceList};
use kerf_api::{PodShape, SlimContainer, SlimPod, SlimPodSpec};

use crate::instance::{InstanceType, Offering};
use crate::model::{ExistingNode, NodePoolInput, SchedulingInput};

pub fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

pub fn rl(pairs: &[(&str, &str)]) -> ResourceList {
    pairs.iter().map(|(k, v)| (*k, q(v))).collect()
}

pub fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

pub fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector { match_labels: Some(labels(pairs)), match_expressions: None }
}

pub struct PodBuilder(SlimPod);

pub fn pod(name: &str) -> PodBuilder {
    PodBuilder(SlimPod {
        metadata: ObjectMeta { name: Some(name.into()), namespace: Some("default".into()), ..Default::default() }
            .into(),
        spec: Some(SlimPodSpec::from(PodShape {
            containers: vec![SlimContainer { name: "c".into(), ..Default::default() }],
            ..Default::default()
        })),
        status: None,
    })
}

impl PodBuilder {
    fn spec(&mut self) -> &mut SlimPodSpec {
        self.0.spec.as_mut().unwrap()
    }
    fn affinity(&mut self) -> &mut Affinity {
        self.spec().affinity.get_or_insert_with(Default::default)
    }

    /// The pod's uid and resourceVersion, as the API server sets them.
    pub fn version(mut self, uid: &str, resource_version: &str) -> Self {
        self.0.metadata.uid = Some(uid.into());
        self.0.metadata.resource_version = Some(resource_version.into());
        self
    }

    pub fn label(mut self, k: &str, v: &str) -> Self {
        Arc::make_mut(self.0.metadata.labels.get_or_insert_with(Default::default)).insert(k.into(), v.into());
        self
    }

    pub fn namespace(mut self, ns: &str) -> Self {
        self.0.metadata.namespace = Some(ns.into());
        self
    }

    pub fn owner(mut self, kind: &str, name: &str) -> Self {
        self.0.metadata.owner_references = Some(Arc::new(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(true),
            block_owner_deletion: None,
        }]));
        self
    }

    pub fn request(mut self, resource: &str, quantity: &str) -> Self {
        let c = &mut self.spec().containers[0];
        c.resources
            .get_or_insert_with(ResourceRequirements::default)
            .requests
            .get_or_insert_with(Default::default)
            .insert(resource.into(), KQ(quantity.into()));
        self
    }

    pub fn cpu(self, q: &str) -> Self {
        self.request("cpu", q)
    }

    pub fn memory(self, q: &str) -> Self {
        self.request("memory", q)
    }

    pub fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.spec().node_selector.get_or_insert_with(Default::default).insert(k.into(), v.into());
        self
    }

    /// Adds a required node affinity term (terms are alternatives).
    pub fn required_term(mut self, exprs: &[(&str, &str, &[&str])]) -> Self {
        let term = NodeSelectorTerm {
            match_expressions: Some(
                exprs
                    .iter()
                    .map(|(k, op, vals)| NodeSelectorRequirement {
                        key: k.to_string(),
                        operator: op.to_string(),
                        values: Some(vals.iter().map(|s| s.to_string()).collect()),
                    })
                    .collect(),
            ),
            match_fields: None,
        };
        let na = self.affinity().node_affinity.get_or_insert_with(NodeAffinity::default);
        na.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector { node_selector_terms: vec![] })
            .node_selector_terms
            .push(term);
        self
    }

    pub fn preferred_term(mut self, weight: i32, exprs: &[(&str, &str, &[&str])]) -> Self {
        let term = NodeSelectorTerm {
            match_expressions: Some(
                exprs
                    .iter()
                    .map(|(k, op, vals)| NodeSelectorRequirement {
                        key: k.to_string(),
                        operator: op.to_string(),
                        values: Some(vals.iter().map(|s| s.to_string()).collect()),
                    })
                    .collect(),
            ),
            match_fields: None,
        };
        let na = self.affinity().node_affinity.get_or_insert_with(NodeAffinity::default);
        na.preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PreferredSchedulingTerm { weight, preference: term });
        self
    }

    pub fn toleration(mut self, key: &str, value: Option<&str>, effect: Option<&str>) -> Self {
        self.spec().tolerations.get_or_insert_with(Vec::new).push(Toleration {
            key: Some(key.into()),
            operator: Some(if value.is_some() { "Equal" } else { "Exists" }.into()),
            value: value.map(str::to_string),
            effect: effect.map(str::to_string),
            toleration_seconds: None,
        });
        self
    }

    pub fn spread(self, key: &str, max_skew: i32, sel: &[(&str, &str)]) -> Self {
        self.spread_with(TopologySpreadConstraint {
            topology_key: key.into(),
            max_skew,
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(selector(sel)),
            ..Default::default()
        })
    }

    pub fn spread_with(mut self, c: TopologySpreadConstraint) -> Self {
        self.spec().topology_spread_constraints.get_or_insert_with(Vec::new).push(c);
        self
    }

    pub fn pod_affinity(mut self, key: &str, sel: &[(&str, &str)]) -> Self {
        let t = PodAffinityTerm { topology_key: key.into(), label_selector: Some(selector(sel)), ..Default::default() };
        self.affinity()
            .pod_affinity
            .get_or_insert_with(PodAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(t);
        self
    }

    pub fn preferred_pod_affinity(mut self, weight: i32, key: &str, sel: &[(&str, &str)]) -> Self {
        let t = PodAffinityTerm { topology_key: key.into(), label_selector: Some(selector(sel)), ..Default::default() };
        self.affinity()
            .pod_affinity
            .get_or_insert_with(PodAffinity::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm { weight, pod_affinity_term: t });
        self
    }

    pub fn anti_affinity(mut self, key: &str, sel: &[(&str, &str)]) -> Self {
        let t = PodAffinityTerm { topology_key: key.into(), label_selector: Some(selector(sel)), ..Default::default() };
        self.affinity()
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(t);
        self
    }

    pub fn preferred_anti_affinity(mut self, weight: i32, key: &str, sel: &[(&str, &str)]) -> Self {
        let t = PodAffinityTerm { topology_key: key.into(), label_selector: Some(selector(sel)), ..Default::default() };
        self.affinity()
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm { weight, pod_affinity_term: t });
        self
    }

    pub fn host_port(mut self, port: i32) -> Self {
        self.spec().containers[0].ports.get_or_insert_with(Vec::new).push(ContainerPort {
            container_port: port,
            host_port: Some(port),
            ..Default::default()
        });
        self
    }

    pub fn pvc(mut self, claim: &str) -> Self {
        self.spec().volumes.get_or_insert_with(Vec::new).push(kerf_api::SlimVolume {
            name: claim.into(),
            persistent_volume_claim: Some(k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: None,
            }),
            ..Default::default()
        });
        self
    }

    pub fn build(self) -> Arc<SlimPod> {
        Arc::new(self.0)
    }
}

pub fn node(name: &str, label_pairs: &[(&str, &str)], alloc: &[(&str, &str)]) -> ExistingNode {
    let mut l = labels(label_pairs);
    l.insert(kerf_api::labels::HOSTNAME.into(), name.into());
    ExistingNode {
        name: name.into(),
        node_pool: None,
        labels: l.into(),
        taints: vec![],
        allocatable: Arc::new(rl(alloc)),
        pods: vec![],
        in_flight: false,
        schedulable: true,
        pool_usage: Default::default(),
    }
}

pub fn req(key: &str, op: Operator, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.into(),
        operator: op,
        values: values.iter().map(|s| s.to_string()).collect(),
        min_values: None,
    }
}

pub fn node_pool(name: &str, reqs: Vec<NodeSelectorRequirementWithMinValues>) -> NodePool {
    crate::bench::pool(name, reqs, None)
}

/// An instance type with `cpu` cores, `mem` of memory, `pods` pods, offered spot and on-demand in
/// each zone at `price` (spot 0.7×).
pub fn instance_type(name: &str, cpu: &str, mem: &str, pods: &str, price: f64, zones: &[&str]) -> InstanceType {
    let mut offerings = Vec::new();
    for z in zones {
        offerings.push(Offering {
            zone: z.to_string(),
            capacity_type: "on-demand".into(),
            price,
            available: true,
            reservation: None,
        });
        offerings.push(Offering {
            zone: z.to_string(),
            capacity_type: "spot".into(),
            price: price * 0.7,
            available: true,
            reservation: None,
        });
    }
    InstanceType {
        name: name.into(),
        labels: labels(&[
            ("node.kubernetes.io/instance-type", name),
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/os", "linux"),
        ]),
        capacity: rl(&[("cpu", cpu), ("memory", mem), ("pods", pods)]),
        overhead: ResourceList::new(),
        offerings,
        price_estimated: false,
    }
}

/// A cluster of `nodes` with one NodePool `default` of two types (small: 2 CPUs, large: 8 CPUs)
/// in zones a, b and c.
pub fn small_large_cluster(nodes: Vec<ExistingNode>) -> SchedulingInput {
    const ZONES: [&str; 3] = ["a", "b", "c"];
    SchedulingInput {
        node_pools: vec![NodePoolInput {
            node_pool: Arc::new(node_pool("default", vec![])),
            instance_types: vec![
                Arc::new(instance_type("small", "2", "4Gi", "20", 0.10, &ZONES)),
                Arc::new(instance_type("large", "8", "16Gi", "80", 0.40, &ZONES)),
            ],
            in_use: ResourceList::new(),
        }],
        existing_nodes: nodes,
        ..Default::default()
    }
}
