//! `kerf controller --cloud kwok` killed with SIGKILL at seeded random moments while kubectl
//! scales a Deployment up and down against `kerf serve --controllers none`, restarted each
//! time: once it settles, every NodeClaim has its Node and every kerf Node its NodeClaim, every
//! pod runs, no node keeps the `karpenter.sh/disrupted` taint, and scaling to zero removes
//! everything.

#[macro_use]
mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::controller::{Controller, words};
use common::*;

const MANIFESTS: &str = concat!(
    demo_node_class!(),
    r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m"]}
        - {key: karpenter.k8s.aws/instance-cpu, operator: In, values: ["2", "4"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 2s
    budgets:
      - nodes: "100%"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: inflate
spec:
  replicas: 0
  selector:
    matchLabels: {app: inflate}
  template:
    metadata:
      labels: {app: inflate}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: inflate
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {cpu: "1"}
"#
);

/// The run's random numbers (SplitMix64 on a fixed seed, so a failure replays).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

fn names(s: &Served, kind: &str) -> BTreeSet<String> {
    words(s, &["get", kind, "-o", "jsonpath={.items[*].metadata.name}"])
}

fn running_pods(s: &Served) -> usize {
    words(s, &["get", "pods", "--field-selector", "status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"])
        .len()
}

fn tainted_nodes(s: &Served) -> String {
    kubectl_ok(
        s,
        &["get", "nodes", "-o", r#"jsonpath={range .items[*]}{.metadata.name} {.spec.taints[*].key}{"\n"}{end}"#],
    )
    .lines()
    .filter(|l| l.contains("karpenter.sh/disrupted"))
    .collect::<Vec<_>>()
    .join(", ")
}

#[test]
fn a_controller_killed_30_times_while_the_workload_changes_leaks_no_node_loses_no_pod_and_leaves_no_taint() {
    let s = Served::start("ctrl-crash", &["--controllers", "none", "--speed", "10"]);
    let path = write(&s.dir, "manifests.yaml", MANIFESTS);
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    let mut rng = Rng(23);
    let mut c = Controller::start(&s, "0", &[]);
    for i in 1..=30 {
        if rng.below(3) == 0 {
            let replicas = format!("--replicas={}", rng.below(10));
            kubectl_ok(&s, &["scale", "deployment", "inflate", &replicas]);
        }
        // Killed anywhere: while it lists, launches, drains or deletes.
        std::thread::sleep(Duration::from_millis(100 + rng.below(1500)));
        let _ = c.child.kill();
        let _ = c.child.wait();
        c = Controller::start(&s, &i.to_string(), &[]);
    }

    // Settled: 6 pods run on nodes kerf launched, one Node per NodeClaim (kwok names a Node
    // after its NodeClaim), nothing tainted.
    kubectl_ok(&s, &["scale", "deployment", "inflate", "--replicas=6"]);
    eventually(150, "6 running pods on as many nodes as NodeClaims, no disrupted taint", || {
        let (claims, nodes) = (names(&s, "nodeclaims"), names(&s, "nodes"));
        (running_pods(&s) == 6 && !claims.is_empty() && claims == nodes && tainted_nodes(&s).is_empty()).then_some(())
    });
    let ids = words(&s, &["get", "nodes", "-o", "jsonpath={.items[*].spec.providerID}"]);
    assert!(ids.iter().all(|id| id.starts_with("kwok://")), "{ids:?}");

    kubectl_ok(&s, &["scale", "deployment", "inflate", "--replicas=0"]);
    eventually(150, "no nodes and no nodeclaims at zero", || {
        (names(&s, "nodes").is_empty() && names(&s, "nodeclaims").is_empty()).then_some(())
    });
    assert!(c.stop().success());
}

fn holder(s: &Served) -> String {
    kubectl_ok(
        s,
        &["get", "lease", "-n", "kube-system", "karpenter-leader-election", "-o", "jsonpath={.spec.holderIdentity}"],
    )
}

/// NodeClaims a controller created, from its metrics (0 when it created none).
fn created(c: &Controller) -> f64 {
    c.metrics()
        .lines()
        .filter(|l| l.starts_with("karpenter_nodeclaims_created_total{"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

fn ready_as(c: &Controller, role: &str, secs: u64) {
    eventually(secs, &format!("readyz {role}"), || {
        let (code, body) = c.readyz();
        (code == 200 && body.contains(role)).then_some(())
    });
}

#[test]
fn leaders_killed_three_times_hand_over_and_only_the_lease_holder_ever_creates_a_nodeclaim() {
    let s = Served::start("ctrl-leaders", &["--controllers", "none", "--speed", "10"]);
    let path = write(&s.dir, "manifests.yaml", MANIFESTS);
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    let mut leader = Controller::start(&s, "l0", &["--leader-elect"]);
    ready_as(&leader, "ok: leader", 30);
    let mut standby = Controller::start(&s, "s0", &["--leader-elect"]);
    ready_as(&standby, "ok: standby", 30);
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut launched = 0.0;
    for (round, replicas) in [3, 7, 2].into_iter().enumerate() {
        kubectl_ok(&s, &["scale", "deployment", "inflate", &format!("--replicas={replicas}")]);
        eventually(90, &format!("{replicas} running pods"), || (running_pods(&s) == replicas).then_some(()));
        seen.extend(names(&s, "nodeclaims"));
        assert!(holder(&s).ends_with(&format!("_{}", leader.pid())), "round {round}: lease held by the leader");
        assert_eq!(created(&standby), 0.0, "round {round}: the standby created a NodeClaim");
        launched += created(&leader);
        // The leader dies holding the lease; the standby leads once it expires, a new standby joins.
        let _ = leader.child.kill();
        let _ = leader.child.wait();
        ready_as(&standby, "ok: leader", 25);
        leader = standby;
        standby = Controller::start(&s, &format!("s{}", round + 1), &["--leader-elect"]);
        ready_as(&standby, "ok: standby", 30);
    }
    kubectl_ok(&s, &["scale", "deployment", "inflate", "--replicas=5"]);
    eventually(90, "5 running pods, one Node per NodeClaim", || {
        let (claims, nodes) = (names(&s, "nodeclaims"), names(&s, "nodes"));
        (running_pods(&s) == 5 && claims == nodes).then_some(())
    });
    seen.extend(names(&s, "nodeclaims"));
    assert_eq!(created(&standby), 0.0, "the last standby created a NodeClaim");
    launched += created(&leader);
    // Every NodeClaim ever seen was created by a process while it held the lease, once.
    assert!(launched >= seen.len() as f64, "{launched} created by leaders, {} seen: {seen:?}", seen.len());
    assert!(leader.stop().success());
}

/// `karpenter_nodeclaims_created_total` of a controller, waiting until its metrics answer.
fn created_by(c: &Controller) -> f64 {
    eventually(10, "the controller's metrics", || c.metrics().contains("# TYPE").then_some(()));
    created(c)
}

/// Waits until `pods` pods run, on nodes that are exactly the NodeClaims' (kwok names a Node
/// after its claim; a Node without a claim is a leaked instance, a claim without a Node an
/// orphan), for a few seconds in a row; the NodeClaims.
fn settled_on_claims(s: &Served, pods: usize, what: &str) -> BTreeSet<String> {
    let mut last: Option<(BTreeSet<String>, std::time::Instant)> = None;
    eventually(60, what, || {
        let (claims, nodes) = (names(s, "nodeclaims"), names(s, "nodes"));
        if running_pods(s) != pods || claims.is_empty() || claims != nodes {
            last = None;
            return None;
        }
        match &last {
            Some((seen, since)) if *seen == claims && since.elapsed() >= Duration::from_secs(3) => Some(claims),
            Some((seen, _)) if *seen == claims => None,
            _ => {
                last = Some((claims, std::time::Instant::now()));
                None
            }
        }
    })
}

#[test]
fn an_api_server_killed_and_restarted_under_the_controller_gets_capacity_again_with_no_claim_from_memory() {
    // A restarted `kerf serve` keeps nothing: it starts from its scenario again, with the
    // node class, the pool and five pending pods, and none of the NodeClaims and Nodes
    // (the kwok cloud's instances) of before.
    let dir = std::env::temp_dir().join(format!("kerf-serve-restart-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scenario dir");
    let workload = MANIFESTS.replace("replicas: 0", "replicas: 5");
    write(&dir, "manifests.yaml", &workload);
    let scenario = write(&dir, "restart.yaml", "name: restart\nsteps:\n  - apply: manifests.yaml\n");
    let scenario = scenario.to_str().expect("utf-8 path");
    let mut s = Served::start("serve-restart", &[scenario, "--controllers", "none", "--speed", "10"]);
    let c = Controller::start(&s, "0", &[]);
    let first = settled_on_claims(&s, 5, "5 pods running on the first server");

    // Killed once everything runs: the new server's pods get capacity again, on new claims
    // only (none re-created from what the controller knew), as many as the first time.
    s.kill();
    s.restart(1);
    let second = settled_on_claims(&s, 5, "5 pods running after the first restart");
    assert!(first.is_disjoint(&second), "claims of the lost server came back: {first:?} {second:?}");
    assert_eq!(second.len(), first.len(), "the same plan for the same pods: {first:?} {second:?}");
    assert_eq!(created_by(&c), (first.len() + second.len()) as f64, "a claim was created twice");

    // Killed while launching for a scale-up: what was launched on the lost server is gone
    // with it, the controller launches for the new server's pods and nothing else.
    kubectl_ok(&s, &["scale", "deployment", "inflate", "--replicas=9"]);
    std::thread::sleep(Duration::from_millis(400));
    s.kill();
    let before = created_by(&c);
    s.restart(2);
    let third = settled_on_claims(&s, 5, "5 pods running after the second restart");
    assert!(third.is_disjoint(&first) && third.is_disjoint(&second), "{third:?}");
    assert_eq!(third.len(), first.len(), "the same plan for the same pods: {third:?}");
    assert_eq!(created_by(&c), before + third.len() as f64, "claims created after the second restart: {third:?}");
    assert!(tainted_nodes(&s).is_empty(), "{}", tainted_nodes(&s));
    assert!(c.stop().success());
    let _ = std::fs::remove_dir_all(&dir);
}
