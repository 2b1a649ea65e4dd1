//! The scheduling benchmark workload (docs/design.md, "Scheduling benchmark workload"): one NodePool
//! with huge limits, `types` generated instance types, and `pods` pods split evenly into five
//! groups — no constraints, zone spread (maxSkew 1), hostname spread (maxSkew 1), zone self
//! pod-affinity, hostname pod anti-affinity — with seeded random CPU and memory requests.
//!
//! [`consolidation_cluster`] builds the consolidation benchmark's cluster from the same shapes
//! and constraints: existing nodes already holding pods, for `kerf bench consolidation`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, PodAffinity, PodAffinityTerm, PodAntiAffinity, ResourceRequirements, TopologySpreadConstraint,
};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KQ;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kerf_api::labels::{ARCH, CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, OS, ZONE};
use kerf_api::nodepool::{NodeClaimTemplate, NodeClaimTemplateSpec, NodePoolSpec, TemplateMetadata};
use kerf_api::{NodeClassReference, NodePool, Quantity, ResourceList};
use kerf_api::{PodShape, SlimContainer, SlimPod, SlimPodSpec};

use crate::instance::{InstanceType, Offering};
use crate::model::{NodePoolInput, SchedulingInput};

pub const ZONES: [&str; 3] = ["test-zone-a", "test-zone-b", "test-zone-c"];
const CPUS: [&str; 5] = ["100m", "250m", "500m", "1", "1.5"];
const MEMORIES: [&str; 6] = ["100Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi"];

pub use kerf_api::seeded::SplitMix64;

/// Instance type `i`: i+1 vCPU, 2(i+1) GiB, 10(i+1) pods, three zones × spot and on-demand,
/// price proportional to size (on-demand $0.05 per vCPU-hour, spot 30% less).
pub fn instance_types(count: usize) -> Vec<Arc<InstanceType>> {
    (0..count)
        .map(|i| {
            let n = i as i64 + 1;
            let name = format!("bench-{n}x");
            let price = 0.05 * n as f64;
            let mut offerings = Vec::new();
            for z in ZONES {
                offerings.push(Offering {
                    zone: z.into(),
                    capacity_type: "spot".into(),
                    price: price * 0.7,
                    available: true,
                    reservation: None,
                });
                offerings.push(Offering {
                    zone: z.into(),
                    capacity_type: "on-demand".into(),
                    price,
                    available: true,
                    reservation: None,
                });
            }
            Arc::new(InstanceType {
                labels: [(INSTANCE_TYPE, name.as_str()), (ARCH, "amd64"), (OS, "linux")]
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                name,
                capacity: ResourceList::new()
                    .with("cpu", Quantity::from_units(n))
                    .with("memory", Quantity::from_bytes(2 * n * 1024 * 1024 * 1024))
                    .with("pods", Quantity::from_units(10 * n)),
                overhead: ResourceList::new(),
                offerings,
                price_estimated: false,
            })
        })
        .collect()
}

/// A NodePool named `name` over the `default` EC2NodeClass with these requirements and limits
/// and Karpenter's defaults otherwise (the benchmarks' and tests' pools).
pub fn pool(
    name: &str,
    requirements: Vec<kerf_api::NodeSelectorRequirementWithMinValues>,
    limits: Option<ResourceList>,
) -> NodePool {
    NodePool {
        api_version: kerf_api::nodepool::API_VERSION.into(),
        kind: kerf_api::nodepool::KIND.into(),
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: NodePoolSpec {
            template: NodeClaimTemplate {
                metadata: TemplateMetadata::default(),
                spec: NodeClaimTemplateSpec {
                    taints: vec![],
                    startup_taints: vec![],
                    requirements,
                    node_class_ref: NodeClassReference {
                        group: "karpenter.k8s.aws".into(),
                        kind: "EC2NodeClass".into(),
                        name: "default".into(),
                    },
                    expire_after: kerf_api::nodepool::default_expire_after(),
                    termination_grace_period: None,
                },
            },
            disruption: Default::default(),
            limits,
            weight: None,
            replicas: None,
        },
        status: None,
    }
}

/// The benchmark's NodePool: no requirements beyond the defaults, huge limits.
pub fn node_pool() -> NodePool {
    pool(
        "default",
        vec![kerf_api::NodeSelectorRequirementWithMinValues {
            key: CAPACITY_TYPE.into(),
            operator: kerf_api::Operator::In,
            values: vec!["spot".into(), "on-demand".into()],
            min_values: None,
        }],
        Some(
            ResourceList::new()
                .with("cpu", Quantity::from_units(1_000_000_000))
                .with("memory", Quantity::from_bytes(i64::MAX / 4)),
        ),
    )
}

fn selector(group: &str) -> LabelSelector {
    LabelSelector { match_labels: Some([("app".to_string(), group.to_string())].into()), match_expressions: None }
}

fn bench_pod(i: usize, group: usize, rng: &mut SplitMix64) -> SlimPod {
    let names = ["generic", "zone-spread", "host-spread", "zone-affinity", "host-anti-affinity"];
    let app = format!("bench-{}", names[group]);
    let cpu = CPUS[rng.below(CPUS.len())];
    let mem = MEMORIES[rng.below(MEMORIES.len())];
    let mut spec = PodShape {
        containers: vec![SlimContainer {
            name: "app".into(),
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), KQ(cpu.into())), ("memory".to_string(), KQ(mem.into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let spread = |key: &str| TopologySpreadConstraint {
        topology_key: key.into(),
        max_skew: 1,
        when_unsatisfiable: "DoNotSchedule".into(),
        label_selector: Some(selector(&app)),
        ..Default::default()
    };
    let term = |key: &str| PodAffinityTerm {
        topology_key: key.into(),
        label_selector: Some(selector(&app)),
        ..Default::default()
    };
    match group {
        1 => spec.topology_spread_constraints = Some(vec![spread(ZONE)]),
        2 => spec.topology_spread_constraints = Some(vec![spread(HOSTNAME)]),
        3 => {
            spec.affinity = Some(Affinity {
                pod_affinity: Some(PodAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![term(ZONE)]),
                    ..Default::default()
                }),
                ..Default::default()
            })
        }
        4 => {
            spec.affinity = Some(Affinity {
                pod_anti_affinity: Some(PodAntiAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![term(HOSTNAME)]),
                    ..Default::default()
                }),
                ..Default::default()
            })
        }
        _ => {}
    }
    SlimPod {
        metadata: ObjectMeta {
            name: Some(format!("{app}-{i}")),
            namespace: Some("default".into()),
            labels: Some([("app".to_string(), app.clone())].into()),
            ..Default::default()
        }
        .into(),
        spec: Some(SlimPodSpec::from(spec)),
        status: None,
    }
}

/// The benchmark input: `pods` pods (five equal groups, the remainder in the first groups)
/// against `types` instance types, drawn from `seed`.
pub fn workload(pods: usize, types: usize, seed: u64) -> SchedulingInput {
    let mut rng = SplitMix64::new(seed);
    let pods = (0..pods).map(|i| Arc::new(bench_pod(i, i * 5 / pods.max(1), &mut rng))).collect();
    SchedulingInput {
        node_pools: vec![NodePoolInput {
            node_pool: Arc::new(node_pool()),
            instance_types: instance_types(types),
            in_use: ResourceList::new(),
        }],
        pods,
        ..Default::default()
    }
}

/// The consolidation benchmark's cluster: `nodes` existing nodes of the benchmark's instance
/// types, each holding `pods_per_node` pods of the scheduling workload's shapes and
/// constraints, with the benchmark's NodePool (`types` instance types) for replacements.
/// Node `i` is in zone `i mod 3`, bought as spot. Its pods: a hostname anti-affinity pod on even
/// nodes, a hostname spread pod on every third node, and for the other slots in turn an
/// unconstrained pod, a zone spread pod and (in the first zone; elsewhere unconstrained) a zone
/// affinity pod. Every node is the smallest type with 0%, 10%, 20% or 30% (in turn) of its pods'
/// CPU and memory to spare, and takes no more pods than it holds (as a max-pods setting would
/// make it; with spare room anywhere, a cluster this size absorbs any one node's pods and every
/// candidate would be trivially deletable): a candidate's pods need a new node, and it is
/// replaceable when a cheaper one holds them. Returns the input (no pending
/// pods) and each node's hourly price, by node.
pub fn consolidation_cluster(
    nodes: usize,
    pods_per_node: usize,
    types: usize,
    seed: u64,
) -> (SchedulingInput, Vec<f64>) {
    consolidation_cluster_filled(nodes, pods_per_node, types, seed, 1.0)
}

/// [`consolidation_cluster`] with nodes filled to `fill` (0 < fill <= 1) of their allocatable:
/// below 1 each node is the smallest type whose CPU and memory are at least the pods' requests
/// divided by `fill`, and it takes up to `pods_per_node / fill` pods (rounded up), so pods can
/// move between nodes. `fill` 1 is [`consolidation_cluster`]'s full nodes.
pub fn consolidation_cluster_filled(
    nodes: usize,
    pods_per_node: usize,
    types: usize,
    seed: u64,
    fill: f64,
) -> (SchedulingInput, Vec<f64>) {
    let full = fill >= 1.0;
    let max_pods = if full { pods_per_node as i64 } else { (pods_per_node as f64 / fill).ceil() as i64 };
    use crate::model::ExistingNode;
    let mut rng = SplitMix64::new(seed);
    let catalog = instance_types(types);
    let mut existing = Vec::with_capacity(nodes);
    let mut prices = Vec::with_capacity(nodes);
    let mut next = 0usize;
    for n in 0..nodes {
        let zone = ZONES[n % ZONES.len()];
        let name = format!("bench-node-{n}");
        let mut pods = Vec::with_capacity(pods_per_node);
        for slot in 0..pods_per_node {
            let group = match slot {
                0 if n % 2 == 0 => 4,
                1 if n % 3 == 0 => 2,
                _ => match slot % 3 {
                    0 => 0,
                    1 => 1,
                    _ if zone == ZONES[0] => 3,
                    _ => 0,
                },
            };
            let mut p = bench_pod(next, group, &mut rng);
            next += 1;
            if let Some(spec) = p.spec.as_mut() {
                spec.node_name = Some(kerf_api::slim_pod::node_name(&name));
            }
            pods.push(Arc::new(p));
        }
        let requested: ResourceList = pods.iter().fold(ResourceList::new(), |mut acc, p| {
            acc.add(&crate::pod::pod_requests(p));
            acc
        });
        // Full: 0%, 10%, 20% or 30% to spare, in turn; else the requests are `fill` of the node.
        let scaled = |v: i64| {
            if full { v * (10 + (n % 4) as i64) / 10 } else { (v as f64 / fill).ceil() as i64 }
        };
        let cpu_milli = scaled(requested.get("cpu").milli_ceil());
        let mem = scaled(requested.get("memory").value_ceil());
        let fits = |t: &InstanceType| {
            let a = t.allocatable();
            a.get("cpu").milli_ceil() >= cpu_milli
                && a.get("memory").value_ceil() >= mem
                && a.get("pods").value_ceil() >= pods_per_node as i64
        };
        let Some(t) = catalog.iter().find(|t| fits(t)).or(catalog.last()) else { break };
        let price = t
            .offerings
            .iter()
            .filter(|o| o.zone == zone && o.capacity_type == "spot")
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min);
        prices.push(price);
        let labels: std::collections::BTreeMap<String, String> = [
            (HOSTNAME, name.as_str()),
            (ZONE, zone),
            (CAPACITY_TYPE, "spot"),
            (INSTANCE_TYPE, t.name.as_str()),
            (ARCH, "amd64"),
            (OS, "linux"),
            (kerf_api::labels::NODE_POOL, "default"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        existing.push(ExistingNode {
            name,
            node_pool: Some("default".into()),
            labels: labels.into(),
            taints: Vec::new(),
            allocatable: Arc::new(t.allocatable().with("pods", Quantity::from_units(max_pods))),
            pods,
            in_flight: false,
            schedulable: true,
            pool_usage: Arc::new(t.capacity.clone()),
        });
    }
    // The nodes hold their capacity of the pool's limits.
    let mut in_use = existing.iter().fold(ResourceList::new(), |mut acc, n| {
        acc.add(&n.pool_usage);
        acc
    });
    in_use.set("nodes", Quantity::from_units(existing.len() as i64));
    let input = SchedulingInput {
        node_pools: vec![NodePoolInput { node_pool: Arc::new(node_pool()), instance_types: catalog, in_use }],
        existing_nodes: existing,
        ..Default::default()
    };
    (input, prices)
}

/// Hourly cost of a result's new claims: each at its cheapest compatible offering.
pub fn claims_cost(result: &crate::model::SchedulingResult) -> f64 {
    result
        .new_node_claims
        .iter()
        .map(|c| {
            let zone = c.labels.get(ZONE);
            let ct = c.labels.get(CAPACITY_TYPE);
            c.instance_types
                .first()
                .and_then(|t| {
                    t.offerings
                        .iter()
                        .filter(|o| {
                            o.available && zone.is_none_or(|z| *z == o.zone) && ct.is_none_or(|x| *x == o.capacity_type)
                        })
                        .map(|o| o.price)
                        .min_by(f64::total_cmp)
                })
                .unwrap_or(0.0)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_is_seeded_and_split_into_five_groups() {
        let a = workload(50, 10, 7);
        let b = workload(50, 10, 7);
        assert_eq!(a.pods.len(), 50);
        assert_eq!(a.pods, b.pods);
        let apps: std::collections::BTreeMap<String, usize> = a.pods.iter().fold(Default::default(), |mut m, p| {
            *m.entry(crate::pod::labels(p)["app"].clone()).or_default() += 1;
            m
        });
        assert_eq!(apps.values().copied().collect::<Vec<_>>(), vec![10; 5]);
        let t = &a.node_pools[0].instance_types[3];
        assert_eq!(t.capacity.get("cpu"), Quantity::from_units(4));
        assert_eq!(t.capacity.get("memory"), Quantity::parse("8Gi").unwrap());
        assert_eq!(t.capacity.get("pods"), Quantity::from_units(40));
        assert_eq!(t.offerings.len(), 6);
    }

    #[test]
    fn consolidation_cluster_holds_the_asked_pods_and_respects_its_constraints() {
        let (input, prices) = consolidation_cluster(30, 10, 50, 1);
        assert_eq!(input.existing_nodes.len(), 30);
        assert_eq!(prices.len(), 30);
        assert!(input.existing_nodes.iter().all(|n| n.pods.len() == 10));
        let mut ctx = crate::SchedulingContext::new(input.clone());
        let names: Vec<String> = ctx.node_names().map(str::to_string).collect();
        for name in &names {
            let w = ctx.without_nodes(&[name.as_str()]).unwrap();
            assert_eq!(w.pods.len(), 10, "{name}");
            let placed = w.placements.len() + w.new_node_claims.iter().map(|c| c.claim.pods.len()).sum::<usize>();
            assert_eq!(placed + w.unplaced.len(), 10, "{name}");
        }
    }

    #[test]
    fn every_benchmark_pod_is_placed() {
        let input = workload(500, 50, 1);
        let r = crate::scheduler::schedule(&input);
        assert!(r.errors.is_empty(), "{:?}", r.errors.first());
        let placed: usize = r.new_node_claims.iter().map(|c| c.pods.len()).sum();
        assert_eq!(placed, 500);
    }
}
