//! The seeded workloads of `kerf bench chaos`: a scenario (a node class, one or two NodePools
//! with random budgets, consolidation, expiry and grace periods, a few Deployments, some with
//! PodDisruptionBudgets or do-not-disrupt pods, a DaemonSet applied later) and the random
//! actions a run takes on it (scaling, rollouts, template changes that drift the nodes, manual
//! NodeClaim and Node deletes, spot interruptions). Scenarios go through the scenario loader,
//! so they are checked as any scenario file is.

use std::path::Path;

use serde_json::{Value, json};

use crate::scenario::{self, ObjectRef, Scenario, ScenarioError, Step};
use crate::world::World;
use kerf_api::seeded::SplitMix64;

/// A generated run: the scenario (its steps: the pools, node class and workloads, then the
/// DaemonSet) and the names actions pick from.
pub struct Workload {
    pub scenario: Scenario,
    pub deployments: Vec<String>,
    pub pools: Vec<String>,
}

fn pick<'a, T>(rng: &mut SplitMix64, items: &'a [T]) -> &'a T {
    &items[rng.below(items.len())]
}

fn chance(rng: &mut SplitMix64, percent: usize) -> bool {
    rng.below(100) < percent
}

/// The cloud: four sizes of one family in three zones, spot and on-demand (a small catalog
/// keeps each run fast; what is tested is the controllers' bookkeeping, not type choice).
fn cloud(rng: &mut SplitMix64) -> Value {
    let types: Vec<Value> =
        [("c.large", 2, 4, 0.085), ("c.xlarge", 4, 8, 0.17), ("c.2xlarge", 8, 16, 0.34), ("c.4xlarge", 16, 32, 0.68)]
            .iter()
            .map(|(name, cpu, mem, price)| {
                json!({
                    "name": name,
                    "capacity": {"cpu": cpu.to_string(), "memory": format!("{mem}Gi"), "pods": "58"},
                    "overhead": {"cpu": "100m", "memory": "300Mi"},
                    "price": price,
                })
            })
            .collect();
    json!({
        "region": "us-west-2",
        "zones": ["us-west-2a", "us-west-2b", "us-west-2c"],
        "instanceTypes": types,
        "launchLatency": format!("{}s", 10 + rng.below(50)),
    })
}

fn node_pool(rng: &mut SplitMix64, name: &str) -> Value {
    let options: [&[&str]; 3] = [&["spot", "on-demand"], &["on-demand"], &["spot"]];
    let capacity = *pick(rng, &options);
    let mut template_spec = json!({
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity}],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    });
    if chance(rng, 40) {
        template_spec["expireAfter"] = json!(format!("{}m", 15 + rng.below(30)));
    }
    if chance(rng, 40) {
        template_spec["terminationGracePeriod"] = json!(format!("{}m", 2 + rng.below(8)));
    }
    let mut disruption = json!({
        "consolidationPolicy": pick(rng, &["WhenEmptyOrUnderutilized", "WhenEmpty"]),
        "consolidateAfter": pick(rng, &["0s", "30s", "2m"]),
    });
    if chance(rng, 70) {
        let nodes = pick(rng, &["1", "2", "0", "20%", "50%"]);
        let mut budget = json!({"nodes": nodes});
        if chance(rng, 30) {
            budget["reasons"] = json!([pick(rng, &["Underutilized", "Drifted", "Empty"])]);
        }
        disruption["budgets"] = json!([budget]);
    }
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": template_spec}, "disruption": disruption},
    })
}

fn deployment(rng: &mut SplitMix64, name: &str, pools: &[String]) -> (Value, Option<Value>) {
    let cpu = pick(rng, &["250m", "500m", "1", "1500m", "3"]);
    let mut annotations = json!({});
    if chance(rng, 20) {
        annotations["karpenter.sh/do-not-disrupt"] = json!("true");
    }
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
    });
    if pools.len() > 1 && chance(rng, 40) {
        spec["nodeSelector"] = json!({"karpenter.sh/nodepool": pick(rng, pools)});
    }
    if chance(rng, 30) {
        spec["topologySpreadConstraints"] = json!([{
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": name}},
        }]);
    }
    let dep = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1 + rng.below(10),
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}, "annotations": annotations}, "spec": spec},
        },
    });
    let pdb = chance(rng, 40).then(|| {
        let mut pdb_spec = json!({"selector": {"matchLabels": {"app": name}}});
        if chance(rng, 50) {
            pdb_spec["maxUnavailable"] = json!(1);
        } else {
            pdb_spec["minAvailable"] = json!(pick(rng, &[json!(1), json!("50%")]));
        }
        json!({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": pdb_spec,
        })
    });
    (dep, pdb)
}

const DAEMONSET: &str = "node-agent";

/// The scenario of run `seed`.
pub fn generate(seed: u64) -> Result<Workload, ScenarioError> {
    let mut rng = SplitMix64::new(seed);
    let pools: Vec<String> = (0..1 + rng.below(2)).map(|i| format!("pool-{i}")).collect();
    let mut base = vec![json!({
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole-chaos",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "chaos"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "chaos"}}],
        },
    })];
    for p in &pools {
        base.push(node_pool(&mut rng, p));
    }
    let deployments: Vec<String> = (0..2 + rng.below(3)).map(|i| format!("app-{i}")).collect();
    for d in &deployments {
        let (dep, pdb) = deployment(&mut rng, d, &pools);
        base.push(dep);
        base.extend(pdb);
    }
    let daemonset = json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DAEMONSET},
        "spec": {
            "selector": {"matchLabels": {"app": DAEMONSET}},
            "template": {
                "metadata": {"labels": {"app": DAEMONSET}},
                "spec": {"containers": [{"name": "agent", "image": "pause", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
            },
        },
    });
    let doc = json!({
        "name": format!("chaos-{seed}"),
        "cloud": cloud(&mut rng),
        "steps": [{"apply": base}, {"apply": [daemonset]}],
    });
    let scenario = scenario::parse(Path::new(&format!("chaos-{seed}.yaml")), &doc.to_string())?;
    Ok(Workload { scenario, deployments, pools })
}

fn object(kind: &str, name: impl ToString) -> ObjectRef {
    ObjectRef { kind: kind.to_string(), name: name.to_string(), namespace: "default".to_string() }
}

/// One random action on the running cluster (`None`: only let time pass). The DaemonSet step
/// of the scenario is applied once, at a random point.
pub fn action(
    rng: &mut SplitMix64,
    w: &Workload,
    world: &World,
    daemonset_applied: &mut bool,
    revision: usize,
) -> Option<Step> {
    let managed: Vec<&String> = world
        .nodes
        .iter()
        .filter(|(_, n)| n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(kerf_api::labels::NODE_POOL)))
        .map(|(name, _)| name)
        .collect();
    match rng.below(100) {
        0..=29 => {
            let d = pick(rng, &w.deployments);
            let replicas = if chance(rng, 15) { 0 } else { 1 + rng.below(14) as i32 };
            Some(Step::Scale { target: object("Deployment", d), replicas })
        }
        30..=41 => Some(Step::Rollout(object("Deployment", pick(rng, &w.deployments)))),
        42..=47 if !*daemonset_applied => {
            *daemonset_applied = true;
            w.scenario.steps.get(1).cloned()
        }
        48..=55 => Some(Step::Patch {
            target: object("NodePool", pick(rng, &w.pools)),
            merge: json!({"spec": {"template": {"metadata": {"labels": {"chaos-revision": revision.to_string()}}}}}),
        }),
        56..=62 if !world.claims.is_empty() => {
            let claims: Vec<&String> = world.claims.keys().collect();
            Some(Step::Delete(object("NodeClaim", pick(rng, &claims))))
        }
        63..=68 if !managed.is_empty() => Some(Step::Delete(object("Node", pick(rng, &managed)))),
        69..=76 => {
            let spot: Vec<&String> = managed
                .iter()
                .copied()
                .filter(|n| {
                    world
                        .nodes
                        .get(*n)
                        .and_then(|n| n.metadata.labels.as_ref())
                        .and_then(|l| l.get(kerf_api::labels::CAPACITY_TYPE))
                        == Some(&"spot".to_string())
                })
                .collect();
            (!spot.is_empty()).then(|| Step::Interrupt { node: pick(rng, &spot).to_string() })
        }
        _ => None,
    }
}
