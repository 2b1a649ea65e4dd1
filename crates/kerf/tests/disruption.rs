//! Disruption and termination through `kerf simulate`: each method and rule on a small cluster of
//! custom instance types (exact prices), asserting the reasons, the timing, the final fleet and
//! its cost, and that every pod ends Running.

mod common;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// Four on-demand sizes in one zone: 2, 4, 8 and 16 CPUs at $0.10 per 2 CPUs.
const TYPES: &str = r#"[
    {name: small, capacity: {cpu: "2", memory: 8Gi, pods: "110"}, price: 0.10, offerings: [{zone: us-west-2a, capacityType: on-demand}]},
    {name: medium, capacity: {cpu: "4", memory: 16Gi, pods: "110"}, price: 0.20, offerings: [{zone: us-west-2a, capacityType: on-demand}]},
    {name: large, capacity: {cpu: "8", memory: 32Gi, pods: "110"}, price: 0.40, offerings: [{zone: us-west-2a, capacityType: on-demand}]},
    {name: xlarge, capacity: {cpu: "16", memory: 64Gi, pods: "110"}, price: 0.80, offerings: [{zone: us-west-2a, capacityType: on-demand}]}]"#;

const CLASS: &str = "{apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {name: default}, spec: {role: R, \
    amiSelectorTerms: [{alias: al2023@latest}], subnetSelectorTerms: [{tags: {a: b}}], \
    securityGroupSelectorTerms: [{tags: {a: b}}]}}";

/// The first node the simulated cloud launches in us-west-2a, then the second, ...
fn node_name(n: u32) -> String {
    format!("ip-10-0-0-{}.us-west-2.compute.internal", n + 1)
}

/// A NodePool `default` with extra template spec fields and a disruption block.
fn pool(template_extra: &str, disruption: &str) -> String {
    let reqs = if template_extra.contains("requirements") { "" } else { ", requirements: []" };
    format!(
        "{{apiVersion: karpenter.sh/v1, kind: NodePool, metadata: {{name: default}}, spec: {{template: {{spec: \
         {{nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}{reqs}{template_extra}}}}}, \
         disruption: {disruption}}}}}"
    )
}

/// A Deployment of `replicas` pause pods asking for `cpu` each; `pod_meta` adds to the pod
/// template's metadata (e.g. `, annotations: {...}`).
fn deployment(name: &str, replicas: u32, cpu: &str, pod_meta: &str) -> String {
    deployment_with(name, replicas, cpu, pod_meta, "")
}

/// [`deployment`] with extra pod spec fields (`, affinity: {...}`).
fn deployment_with(name: &str, replicas: u32, cpu: &str, pod_meta: &str, pod_spec: &str) -> String {
    format!(
        "{{apiVersion: apps/v1, kind: Deployment, metadata: {{name: {name}}}, spec: {{replicas: {replicas}, \
         selector: {{matchLabels: {{app: {name}}}}}, template: {{metadata: {{labels: {{app: {name}}}{pod_meta}}}, \
         spec: {{containers: [{{name: c, image: pause, resources: {{requests: {{cpu: \"{cpu}\"}}}}}}]{pod_spec}}}}}}}}}"
    )
}

/// A scenario on the custom types: `head` goes before `cloud` (e.g. `start:`), `steps` is the
/// YAML list of steps after the pool and class are applied.
fn scenario(name: &str, head: &str, pool: &str, steps: &str) -> String {
    format!(
        "name: {name}\n{head}cloud: {{region: us-west-2, zones: [us-west-2a], launchLatency: 30s, instanceTypes: {TYPES}}}\n\
         steps:\n  - apply: [{pool}, {CLASS}]\n{steps}"
    )
}

fn simulate(name: &str, yaml: &str) -> Value {
    common::simulate_report("disruption", name, yaml)
}

fn disruptions(r: &Value) -> Vec<&Value> {
    r["disruptions"].as_array().unwrap().iter().collect()
}

fn nodes(r: &Value) -> Vec<&Value> {
    r["nodes"].as_array().unwrap().iter().collect()
}

fn types_of(r: &Value) -> Vec<String> {
    let mut t: Vec<String> = nodes(r).iter().map(|n| n["instanceType"].as_str().unwrap().to_string()).collect();
    t.sort();
    t
}

fn cost_per_hour(r: &Value) -> f64 {
    r["summary"]["costPerHour"].as_f64().unwrap()
}

fn secs(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Every pod of the scenario runs at the end: nothing was lost.
fn assert_all_running(r: &Value, pods: u64) {
    assert_eq!(r["summary"]["pods"], pods, "{:#}", r["pods"]);
    assert_eq!(r["summary"]["podsPending"], 0, "{:#}", r["pods"]);
    for p in r["pods"].as_array().unwrap() {
        assert_eq!(p["phase"], "Running", "{p}");
    }
}

const CONSOLIDATE_NOW: &str =
    "{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{nodes: \"100%\"}]}";

#[test]
fn empty_node_is_deleted_after_consolidate_after_and_the_validation_delay() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 0}}\n  - wait: 5m\n",
        deployment("web", 6, "1", "")
    );
    let disruption = "{consolidationPolicy: WhenEmpty, consolidateAfter: 1m, budgets: [{nodes: \"100%\"}]}";
    let r = simulate("empty", &scenario("empty", "", &pool("", disruption), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Empty");
    assert_eq!(d[0]["node"], node_name(1));
    assert_eq!(d[0]["instanceType"], "large");
    assert_eq!(d[0]["nodePool"], "default");
    // Scaled to zero at 2m: consolidateAfter 1m, then 15 s of validation, then gone at once.
    assert_eq!(secs(&d[0]["atSeconds"]), 195.0);
    assert_eq!(secs(&d[0]["terminatedSeconds"]), 195.0);
    assert!(d[0]["replacements"].as_array().unwrap().is_empty());
    assert!(nodes(&r).is_empty());
    assert_eq!(r["summary"]["nodeClaimsTerminated"], 1);
    assert_eq!(cost_per_hour(&r), 0.0);
    // $0.40/h for 195 s.
    assert!((r["summary"]["cost"].as_f64().unwrap() - 0.4 * 195.0 / 3600.0).abs() < 1e-3, "{}", r["summary"]);
}

#[test]
fn underutilized_node_is_replaced_by_one_strictly_cheaper_node_launched_before_it_drains() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 3}}\n  - wait: 5m\n",
        deployment("web", 12, "1", "")
    );
    let r = simulate("replace", &scenario("replace", "", &pool("", CONSOLIDATE_NOW), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Underutilized");
    assert_eq!(d[0]["instanceType"], "xlarge");
    let detail = d[0]["detail"].as_str().unwrap();
    assert!(detail.contains("1 cheaper node (medium, $0.2000/h instead of $0.8000/h)"), "{detail}");
    // Decided after the 15 s validation; the replacement launched and became ready (30 s)
    // before the old node was drained and removed.
    let (at, gone) = (secs(&d[0]["atSeconds"]), secs(&d[0]["terminatedSeconds"]));
    assert!((135.0..=140.0).contains(&at), "{at}");
    assert!(gone >= at + 30.0 && gone <= at + 35.0, "{at} {gone}");
    assert_eq!(d[0]["replacements"].as_array().unwrap().len(), 1);
    assert_eq!(types_of(&r), vec!["medium"]);
    assert_eq!(nodes(&r)[0]["nodeClaim"], d[0]["replacements"][0]);
    assert_eq!(cost_per_hour(&r), 0.2);
    assert_all_running(&r, 3);
}

#[test]
fn pool_at_its_cpu_limit_can_still_replace_a_node_by_a_cheaper_one_in_consolidation() {
    // The xlarge node holds all 16 CPUs of the pool's limit; its replacement uses what it frees.
    let steps = format!(
        "  - apply: [{}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 3}}\n  - wait: 5m\n",
        deployment("web", 12, "1", "")
    );
    let spec = format!("{CONSOLIDATE_NOW}, limits: {{cpu: \"16\"}}");
    let r = simulate("limit-replace", &scenario("limit-replace", "", &pool("", &spec), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Underutilized");
    assert_eq!(d[0]["instanceType"], "xlarge");
    let detail = d[0]["detail"].as_str().unwrap();
    assert!(detail.contains("1 cheaper node (medium, $0.2000/h instead of $0.8000/h)"), "{detail}");
    assert_eq!(types_of(&r), vec!["medium"]);
    assert_eq!(cost_per_hour(&r), 0.2);
    assert_all_running(&r, 3);
}

#[test]
fn two_underutilized_nodes_merge_into_one_cheaper_node() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 1m\n  - apply: [{}]\n  - wait: 1m\n\
         \x20 - scale: {{kind: Deployment, name: a, namespace: default, replicas: 2}}\n\
         \x20 - scale: {{kind: Deployment, name: b, namespace: default, replicas: 2}}\n  - wait: 5m\n",
        deployment("a", 8, "900m", ""),
        deployment("b", 8, "900m", "")
    );
    let r = simulate("merge", &scenario("merge", "", &pool("", CONSOLIDATE_NOW), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(d.iter().all(|x| x["reason"] == "Underutilized" && x["instanceType"] == "large"));
    assert_eq!(d[0]["atSeconds"], d[1]["atSeconds"], "one multi-node command");
    assert_eq!(d[0]["replacements"], d[1]["replacements"]);
    assert_eq!(d[0]["replacements"].as_array().unwrap().len(), 1);
    assert!(
        d[0]["detail"].as_str().unwrap().contains("these 2 nodes' 4 pod(s) fit on 1 cheaper node (medium"),
        "{}",
        d[0]
    );
    assert_eq!(types_of(&r), vec!["medium"]);
    assert_eq!(cost_per_hour(&r), 0.2);
    assert_all_running(&r, 4);
}

#[test]
fn pods_that_fit_on_other_nodes_let_a_node_be_deleted_without_a_replacement() {
    // a fills most of one large node; b's two pods land on a second one; scaling a down leaves
    // room for b's pods on the first.
    let steps = format!(
        "  - apply: [{}]\n  - wait: 1m\n  - apply: [{}]\n  - wait: 1m\n\
         \x20 - scale: {{kind: Deployment, name: a, namespace: default, replicas: 4}}\n  - wait: 5m\n",
        deployment("a", 7, "1", ""),
        deployment("b", 2, "1", "")
    );
    let r = simulate("delete", &scenario("delete", "", &pool("", CONSOLIDATE_NOW), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Underutilized");
    assert!(d[0]["replacements"].as_array().unwrap().is_empty());
    assert!(d[0]["detail"].as_str().unwrap().contains("fit on other nodes"), "{}", d[0]);
    assert_eq!(types_of(&r), vec!["large"]);
    assert_eq!(cost_per_hour(&r), 0.4);
    assert_all_running(&r, 6);
}

#[test]
fn pod_annotated_do_not_disrupt_keeps_its_node_and_the_report_says_why() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 1}}\n  - wait: 5m\n",
        deployment("web", 12, "1", ", annotations: {karpenter.sh/do-not-disrupt: \"true\"}")
    );
    let r = simulate("dnd-pod", &scenario("dnd-pod", "", &pool("", CONSOLIDATE_NOW), &steps));
    assert!(disruptions(&r).is_empty());
    let n = nodes(&r);
    assert_eq!(n.len(), 1);
    let why = n[0]["disruptionBlocked"].as_str().unwrap();
    assert!(why.contains("karpenter.sh/do-not-disrupt=true") && why.starts_with("pod default/web-"), "{why}");
    assert_eq!(cost_per_hour(&r), 0.8);
    assert_all_running(&r, 1);
}

#[test]
fn node_annotated_do_not_disrupt_by_a_patch_is_not_consolidated() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 1m\n\
         \x20 - patch: {{kind: Node, name: {}, merge: {{metadata: {{annotations: {{karpenter.sh/do-not-disrupt: \"true\"}}}}}}}}\n\
         \x20 - scale: {{kind: Deployment, name: web, namespace: default, replicas: 0}}\n  - wait: 5m\n",
        deployment("web", 12, "1", ""),
        node_name(1)
    );
    let r = simulate("dnd-node", &scenario("dnd-node", "", &pool("", CONSOLIDATE_NOW), &steps));
    assert!(disruptions(&r).is_empty());
    let n = nodes(&r);
    assert_eq!(n.len(), 1);
    assert_eq!(n[0]["annotations"]["karpenter.sh/do-not-disrupt"], "true");
    let why = n[0]["disruptionBlocked"].as_str().unwrap();
    assert!(why.contains(&format!("node {} is annotated karpenter.sh/do-not-disrupt=true", node_name(1))), "{why}");
}

#[test]
fn do_not_disrupt_in_the_nodepool_template_reaches_its_nodes_and_keeps_them_empty_or_drifted() {
    let pool = format!(
        "{{apiVersion: karpenter.sh/v1, kind: NodePool, metadata: {{name: default}}, spec: {{template: {{\
         metadata: {{annotations: {{karpenter.sh/do-not-disrupt: \"true\"}}}}, spec: {{nodeClassRef: {{group: \
         karpenter.k8s.aws, kind: EC2NodeClass, name: default}}, requirements: []}}}}, disruption: {CONSOLIDATE_NOW}}}}}"
    );
    // Emptied at 1m, then drifted (a template label) at 2m: neither removes the node.
    let steps = format!(
        "  - apply: [{}]\n  - wait: 1m\n\
         \x20 - scale: {{kind: Deployment, name: web, namespace: default, replicas: 0}}\n  - wait: 1m\n\
         \x20 - patch: {{kind: NodePool, name: default, merge: {{spec: {{template: {{metadata: {{labels: {{team: blue}}}}}}}}}}}}\n  - wait: 5m\n",
        deployment("web", 6, "1", "")
    );
    let r = simulate("dnd-pool", &scenario("dnd-pool", "", &pool, &steps));
    assert!(disruptions(&r).is_empty(), "{:#?}", disruptions(&r));
    let n = nodes(&r);
    assert_eq!(n.len(), 1);
    assert_eq!(n[0]["name"], node_name(1));
    assert_eq!(n[0]["pods"], 0);
    assert_eq!(n[0]["annotations"]["karpenter.sh/do-not-disrupt"], "true", "{}", n[0]);
    let why = n[0]["disruptionBlocked"].as_str().unwrap();
    assert!(why.contains(&format!("node {} is annotated karpenter.sh/do-not-disrupt=true", node_name(1))), "{why}");
}

#[test]
fn pod_disruption_budget_with_no_disruptions_left_blocks_consolidation() {
    let pdb = "{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: web}, spec: {minAvailable: 2, selector: {matchLabels: {app: web}}}}";
    let steps = format!(
        "  - apply: [{}, {pdb}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 2}}\n  - wait: 5m\n",
        deployment("web", 12, "1", "")
    );
    let r = simulate("pdb", &scenario("pdb", "", &pool("", CONSOLIDATE_NOW), &steps));
    assert!(disruptions(&r).is_empty(), "{:#?}", disruptions(&r));
    let why = nodes(&r)[0]["disruptionBlocked"].as_str().unwrap().to_string();
    assert!(
        why.contains("PodDisruptionBudget default/web allows no disruption")
            && why.contains("needs 2 healthy pods, has 2"),
        "{why}"
    );
    assert_all_running(&r, 2);
}

#[test]
fn budget_of_one_node_removes_empty_nodes_one_command_at_a_time() {
    let anti = ", affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
                [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]}}";
    // A Deployment with one pod per node: three nodes.
    let web = deployment_with("web", 3, "1", "", anti);
    let steps = format!(
        "  - apply: [{web}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 0}}\n  - wait: 5m\n"
    );
    let one = "{consolidationPolicy: WhenEmpty, consolidateAfter: 0s, budgets: [{nodes: \"1\"}]}";
    let r = simulate("budget-one", &scenario("budget-one", "", &pool("", one), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 3, "{d:#?}");
    for pair in d.windows(2) {
        assert!(secs(&pair[1]["atSeconds"]) >= secs(&pair[0]["terminatedSeconds"]) + 15.0, "{pair:#?}");
    }
    assert!(d.iter().all(|x| x["reason"] == "Empty"));
    assert!(nodes(&r).is_empty());

    let half = "{consolidationPolicy: WhenEmpty, consolidateAfter: 0s, budgets: [{nodes: \"50%\"}]}";
    let r = simulate("budget-half", &scenario("budget-half", "", &pool("", half), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 3, "{d:#?}");
    // 50% of 3 nodes rounds up to 2: two go together, then the last one.
    assert_eq!(d[0]["atSeconds"], d[1]["atSeconds"]);
    assert!(secs(&d[2]["atSeconds"]) > secs(&d[1]["atSeconds"]));
}

#[test]
fn pods_tolerating_every_taint_keep_their_nodes_from_emptiness_and_each_node_says_why() {
    // Agents run as Deployments often tolerate every taint: the drain does not evict them, but
    // they go with the node and come back elsewhere, so a node running them is not empty.
    // Ten `small` nodes of five such pods each, a WhenEmpty pool with the default budget (10%).
    let agent = deployment_with("agent", 50, "350m", "", ", tolerations: [{operator: Exists}]");
    let when_empty = "{consolidationPolicy: WhenEmpty, consolidateAfter: 30s}";
    let pinned = ", requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [small]}]";
    let steps = format!("  - apply: [{agent}]\n  - wait: 10m\n");
    let r = simulate("tolerate-all", &scenario("tolerate-all", "", &pool(pinned, when_empty), &steps));
    assert!(disruptions(&r).is_empty(), "{:#?}", disruptions(&r));
    assert_eq!(nodes(&r).len(), 10);
    for n in nodes(&r) {
        let why = n["disruptionBlocked"].as_str().unwrap_or_else(|| panic!("a node kept without a reason: {n:#}"));
        assert_eq!(why, "NodePool default consolidates only empty nodes (WhenEmpty) and it runs 5 pod(s)");
    }
    assert_all_running(&r, 50);

    // Scaled to zero, every node is empty: the budget takes them one at a time (10% of the
    // pool, rounded up), each after the previous one is gone.
    let steps = format!(
        "  - apply: [{agent}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: agent, namespace: default, replicas: 0}}\n  - wait: 10m\n"
    );
    let r = simulate("tolerate-all-down", &scenario("tolerate-all-down", "", &pool(pinned, when_empty), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 10, "{d:#?}");
    assert!(d.iter().all(|x| x["reason"] == "Empty"));
    for pair in d.windows(2) {
        assert!(secs(&pair[1]["atSeconds"]) >= secs(&pair[0]["terminatedSeconds"]), "{pair:#?}");
    }
    assert!(nodes(&r).is_empty());
}

#[test]
fn scheduled_zero_budget_holds_disruption_until_its_window_closes() {
    let budgets = "{consolidationPolicy: WhenEmpty, consolidateAfter: 0s, budgets: [{nodes: \"100%\"}, \
                   {nodes: \"0\", schedule: \"0 9 * * *\", duration: 10m}]}";
    let head = "start: \"2025-03-03T08:59:00Z\"\n";
    let steps = |end: &str| {
        format!(
            "  - apply: [{}]\n  - wait: 1m\n  - scale: {{kind: Deployment, name: web, namespace: default, replicas: 0}}\n  - wait: {end}\n",
            deployment("web", 4, "1", "")
        )
    };
    // At 09:05 the window (09:00-09:10) still holds the empty node, and says so.
    let r = simulate("window-open", &scenario("window-open", head, &pool("", budgets), &steps("5m")));
    assert!(disruptions(&r).is_empty());
    let why = nodes(&r)[0]["disruptionBlocked"].as_str().unwrap().to_string();
    assert!(why.contains("schedule \"0 9 * * *\" for 10m") && why.contains("Empty"), "{why}");
    // After 09:10 it goes (t = 11m, plus the validation delay).
    let r = simulate("window-closed", &scenario("window-closed", head, &pool("", budgets), &steps("15m")));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert!((660.0..=690.0).contains(&secs(&d[0]["atSeconds"])), "{}", d[0]);
}

#[test]
fn nodepool_template_change_drifts_and_replaces_the_node_before_draining_it() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 2m\n\
         \x20 - patch: {{kind: NodePool, name: default, merge: {{spec: {{template: {{metadata: {{labels: {{team: blue}}}}}}}}}}}}\n  - wait: 3m\n",
        deployment("web", 6, "1", "")
    );
    let r = simulate("drift", &scenario("drift", "", &pool("", CONSOLIDATE_NOW), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Drifted");
    assert!(d[0]["detail"].as_str().unwrap().contains("NodePool default's template changed"), "{}", d[0]);
    // Drift does not wait for validation; the replacement is up (30 s) before the node drains.
    let (at, gone) = (secs(&d[0]["atSeconds"]), secs(&d[0]["terminatedSeconds"]));
    assert!((120.0..=122.0).contains(&at), "{at}");
    assert!(gone >= at + 30.0, "{gone}");
    let n = nodes(&r);
    assert_eq!(n.len(), 1);
    assert_eq!(n[0]["labels"]["team"], "blue");
    assert_eq!(n[0]["nodeClaim"], d[0]["replacements"][0]);
    assert_eq!(cost_per_hour(&r), 0.4);
    assert_all_running(&r, 6);
}

/// Drift of a node whose pods are protected (four do-not-disrupt pods, two pods under a PDB that
/// allows nothing), with `template` added to the pool's template spec and `node_patch` (a merge
/// patch of the first node's metadata, or nothing) applied before the template changes at 1m.
fn protected_drift(name: &str, template: &str, node_patch: &str) -> Value {
    let pdb = "{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: db}, spec: {maxUnavailable: 0, selector: {matchLabels: {app: db}}}}";
    let patch = if node_patch.is_empty() {
        String::new()
    } else {
        format!("  - patch: {{kind: Node, name: {}, merge: {{metadata: {node_patch}}}}}\n", node_name(1))
    };
    let steps = format!(
        "  - apply: [{}, {}, {pdb}]\n  - wait: 1m\n{patch}\
         \x20 - patch: {{kind: NodePool, name: default, merge: {{spec: {{template: {{metadata: {{labels: {{team: blue}}}}}}}}}}}}\n  - wait: 6m\n",
        deployment("web", 4, "1", ", annotations: {karpenter.sh/do-not-disrupt: \"true\"}"),
        deployment("db", 2, "1", "")
    );
    simulate(name, &scenario(name, "", &pool(template, CONSOLIDATE_NOW), &steps))
}

#[test]
fn drift_with_a_termination_grace_period_replaces_a_node_whose_pods_block_disruption() {
    let r = protected_drift("tgp-drift", ", terminationGracePeriod: 2m", "");
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Drifted");
    assert_eq!(d[0]["node"], node_name(1));
    let detail = d[0]["detail"].as_str().unwrap();
    assert!(detail.contains("NodePool default's template changed"), "{detail}");
    assert!(detail.contains("terminationGracePeriod 2m"), "{detail}");
    // Decided at once; the replacement is up (30 s) before the claim is deleted; the pods that
    // may not be evicted stay until the grace period (2m) ends, then the node goes.
    let (at, gone) = (secs(&d[0]["atSeconds"]), secs(&d[0]["terminatedSeconds"]));
    assert!((60.0..=62.0).contains(&at), "{at}");
    assert!(gone >= at + 30.0 + 120.0 && gone <= at + 30.0 + 130.0, "{at} {gone}");
    let n = nodes(&r);
    assert_eq!(n.len(), 1, "{n:#?}");
    assert_ne!(n[0]["name"], node_name(1));
    assert_eq!(n[0]["labels"]["team"], "blue");
    assert_eq!(n[0]["nodeClaim"], d[0]["replacements"][0]);
    assert_all_running(&r, 6);
}

#[test]
fn drift_without_a_termination_grace_period_or_against_a_do_not_disrupt_node_waits() {
    // No grace period: the pods' protection holds.
    let r = protected_drift("no-tgp-drift", "", "");
    assert!(disruptions(&r).is_empty(), "{:#?}", disruptions(&r));
    let n = nodes(&r);
    assert_eq!(n.len(), 1);
    let why = n[0]["disruptionBlocked"].as_str().unwrap();
    assert!(
        why.starts_with("Drifted (NodePool default's template changed") && why.contains("but pod default/web-"),
        "{why}"
    );
    // A grace period does not override the node's own annotation.
    let r = protected_drift(
        "dnd-node-tgp-drift",
        ", terminationGracePeriod: 2m",
        "{annotations: {karpenter.sh/do-not-disrupt: \"true\"}}",
    );
    assert!(disruptions(&r).is_empty(), "{:#?}", disruptions(&r));
    let why = nodes(&r)[0]["disruptionBlocked"].as_str().unwrap().to_string();
    assert!(why.contains(&format!("but node {} is annotated karpenter.sh/do-not-disrupt=true", node_name(1))), "{why}");
    assert_all_running(&r, 6);
}

#[test]
fn changing_weight_limits_or_disruption_settings_does_not_drift() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 2m\n\
         \x20 - patch: {{kind: NodePool, name: default, merge: {{spec: {{weight: 50, limits: {{cpu: \"1000\"}}, disruption: {{consolidateAfter: 30s}}}}}}}}\n  - wait: 3m\n",
        deployment("web", 6, "1", "")
    );
    let r = simulate("no-drift", &scenario("no-drift", "", &pool("", CONSOLIDATE_NOW), &steps));
    assert!(disruptions(&r).is_empty(), "{:#?}", disruptions(&r));
    assert_eq!(nodes(&r)[0]["name"], node_name(1));
    assert_all_running(&r, 6);
}

#[test]
fn node_no_longer_meeting_the_pool_requirements_drifts() {
    let template = ", requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [large, xlarge]}]";
    let steps = format!(
        "  - apply: [{}]\n  - wait: 2m\n\
         \x20 - patch: {{kind: NodePool, name: default, merge: {{spec: {{template: {{spec: {{requirements: [{{key: node.kubernetes.io/instance-type, operator: In, values: [xlarge]}}]}}}}}}}}}}\n  - wait: 3m\n",
        deployment("web", 6, "1", "")
    );
    let r = simulate("req-drift", &scenario("req-drift", "", &pool(template, CONSOLIDATE_NOW), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Drifted");
    assert!(d[0]["detail"].as_str().unwrap().contains("node.kubernetes.io/instance-type=large"), "{}", d[0]);
    assert_eq!(types_of(&r), vec!["xlarge"]);
    assert_all_running(&r, 6);
}

#[test]
fn node_class_change_drifts() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 2m\n\
         \x20 - patch: {{kind: EC2NodeClass, name: default, merge: {{spec: {{tags: {{team: blue}}}}}}}}\n  - wait: 3m\n",
        deployment("web", 6, "1", "")
    );
    let r = simulate("class-drift", &scenario("class-drift", "", &pool("", CONSOLIDATE_NOW), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Drifted");
    assert!(d[0]["detail"].as_str().unwrap().contains("node class default changed"), "{}", d[0]);
    assert_all_running(&r, 6);
}

#[test]
fn an_ami_change_drifts_every_node_in_rounds_of_the_budget_each_round_one_command() {
    // Four nodes, one pod each (hostname anti-affinity); the class moves to another AMI family.
    let spread = ", affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
                  [{labelSelector: {matchLabels: {app: web}}, topologyKey: kubernetes.io/hostname}]}}";
    let steps = format!(
        "  - apply: [{}]\n  - wait: 2m\n\
         \x20 - patch: {{kind: EC2NodeClass, name: default, merge: {{spec: {{amiSelectorTerms: [{{alias: bottlerocket@latest}}]}}}}}}\n\
         \x20 - wait: 10m\n",
        deployment_with("web", 4, "1", "", spread)
    );
    let two = "{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{nodes: \"2\"}]}";
    let r = simulate("ami-drift", &scenario("ami-drift", "", &pool("", two), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 4, "{d:#?}");
    for x in &d {
        assert_eq!(x["reason"], "Drifted", "{x}");
        assert!(x["detail"].as_str().unwrap().contains("AMIDrift"), "{x}");
    }
    // The budget's two nodes go in one command (decided together), then the other two.
    let mut at: Vec<f64> = d.iter().map(|x| secs(&x["atSeconds"])).collect();
    at.sort_by(f64::total_cmp);
    assert_eq!(at[0], at[1], "{d:#?}");
    assert_eq!(at[2], at[3], "{d:#?}");
    assert!(at[2] > at[1], "{d:#?}");
    assert_eq!(nodes(&r).len(), 4);
    assert_all_running(&r, 4);
}

#[test]
fn expired_node_is_replaced_forcefully_even_with_do_not_disrupt_and_a_zero_budget() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 7m\n",
        deployment("web", 6, "1", ", annotations: {karpenter.sh/do-not-disrupt: \"true\"}")
    );
    let zero = "{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{nodes: \"0\"}]}";
    let r = simulate("expire", &scenario("expire", "", &pool(", expireAfter: 5m", zero), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Expired");
    // The claim was created at 1 s (the provisioning batch); it expires 5 m later.
    assert_eq!(secs(&d[0]["atSeconds"]), 301.0);
    assert!(secs(&d[0]["terminatedSeconds"]) >= 331.0, "pre-spun replacement first: {}", d[0]);
    assert_eq!(d[0]["replacements"].as_array().unwrap().len(), 1);
    assert_eq!(nodes(&r).len(), 1);
    assert_all_running(&r, 6);
}

#[test]
fn deleting_a_node_drains_it_and_termination_grace_period_forces_what_a_pdb_holds() {
    let pdb = "{apiVersion: policy/v1, kind: PodDisruptionBudget, metadata: {name: web}, spec: {maxUnavailable: 0, selector: {matchLabels: {app: web}}}}";
    let steps = |end: &str| {
        format!(
            "  - apply: [{}, {pdb}]\n  - wait: 1m\n  - delete: {{kind: Node, name: {}}}\n  - wait: {end}\n",
            deployment("web", 4, "1", ""),
            node_name(1)
        )
    };
    let template = ", terminationGracePeriod: 2m";
    // A minute in: every eviction is refused; the node is tainted and still holds its pods.
    let r = simulate("tgp-early", &scenario("tgp-early", "", &pool(template, CONSOLIDATE_NOW), &steps("1m")));
    let n = nodes(&r);
    assert_eq!(n.len(), 1);
    assert_eq!(n[0]["pods"], 4);
    assert!(
        n[0]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "karpenter.sh/disrupted" && t["effect"] == "NoSchedule")
    );
    assert!(disruptions(&r).is_empty(), "a manual deletion is not kerf's disruption");
    // After the 2m grace period the pods are deleted, the node goes, and the pods run elsewhere.
    let r = simulate("tgp-late", &scenario("tgp-late", "", &pool(template, CONSOLIDATE_NOW), &steps("4m")));
    let n = nodes(&r);
    assert_eq!(n.len(), 1);
    assert_ne!(n[0]["name"], node_name(1));
    assert_eq!(r["summary"]["nodeClaimsTerminated"], 1);
    let timeline = r["timeline"].as_array().unwrap();
    let gone = timeline.iter().find(|s| s["podsRunning"] == 0 && secs(&s["atSeconds"]) > 60.0).unwrap();
    assert_eq!(secs(&gone["atSeconds"]), 180.0, "deleted at 1m, forced at 3m: {timeline:#?}");
    assert_all_running(&r, 4);
}

#[test]
fn deleting_a_nodeclaim_drains_its_node_and_the_pods_move_to_new_capacity() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 1m\n  - delete: {{kind: NodeClaim, name: {}}}\n  - wait: 2m\n",
        deployment("web", 4, "1", ""),
        "CLAIM"
    );
    // The claim's name comes from a seeded generator: read it from a run of the same start.
    let probe = format!("  - apply: [{}]\n  - wait: 1m\n", deployment("web", 4, "1", ""));
    let r0 = simulate("claim-probe", &scenario("claim-probe", "", &pool("", CONSOLIDATE_NOW), &probe));
    let claim = nodes(&r0)[0]["nodeClaim"].as_str().unwrap().to_string();
    let r = simulate(
        "claim-delete",
        &scenario("claim-delete", "", &pool("", CONSOLIDATE_NOW), &steps.replace("CLAIM", &claim)),
    );
    let n = nodes(&r);
    assert_eq!(n.len(), 1);
    assert_ne!(n[0]["nodeClaim"], claim.as_str());
    assert_eq!(r["summary"]["nodeClaimsTerminated"], 1);
    assert_eq!(r["summary"]["nodeClaimsLaunched"], 2);
    assert_all_running(&r, 4);
}

#[test]
fn stable_workload_reaches_a_stable_fleet_without_churn() {
    let steps = format!(
        "  - apply: [{}, {}, {}]\n  - wait: 10m\n\
         \x20 - scale: {{kind: Deployment, name: a, namespace: default, replicas: 4}}\n  - wait: 1h\n",
        deployment("a", 20, "1", ""),
        deployment("b", 10, "500m", ""),
        deployment("c", 6, "1500m", "")
    );
    let r = simulate("stable", &scenario("stable", "", &pool("", CONSOLIDATE_NOW), &steps));
    let d = disruptions(&r);
    // Some consolidation after the scale-down, all of it within minutes ...
    assert!(!d.is_empty());
    for x in &d {
        assert!(secs(&x["atSeconds"]) < 20.0 * 60.0, "{x}");
    }
    // ... and no node disrupted twice; every step strictly cheaper.
    let claims: std::collections::BTreeSet<&str> = d.iter().map(|x| x["nodeClaim"].as_str().unwrap()).collect();
    assert_eq!(claims.len(), d.len());
    // The fleet is the same for the last 40 minutes.
    let timeline = r["timeline"].as_array().unwrap();
    let late: Vec<&Value> = timeline.iter().filter(|s| secs(&s["atSeconds"]) >= 30.0 * 60.0).collect();
    assert!(
        late.windows(2).all(|w| w[0]["nodes"] == w[1]["nodes"] && w[0]["costPerHour"] == w[1]["costPerHour"]),
        "{late:#?}"
    );
    let costs: Vec<f64> =
        timeline.iter().filter(|s| secs(&s["atSeconds"]) >= 10.0 * 60.0).map(|s| secs(&s["costPerHour"])).collect();
    assert!(costs.last().unwrap() < &costs[0], "{costs:?}");
    assert_all_running(&r, 20);
}

/// The spot pool of the examples (catalog types, spot only, one zone) and its node class, with
/// `settings`.
fn spot_scenario(name: &str, settings: &str) -> String {
    let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/manifests");
    format!(
        "name: {name}\n{settings}cloud: {{region: us-west-2, launchLatency: 30s}}\nsteps:\n\
         \x20 - apply: {manifests}/spot-pool.yaml\n  - apply: [{CLASS}]\n  - apply: {manifests}/inflate.yaml\n\
         \x20 - scale: {{kind: Deployment, name: inflate, namespace: default, replicas: 40}}\n  - wait: 2m\n\
         \x20 - scale: {{kind: Deployment, name: inflate, namespace: default, replicas: 3}}\n  - wait: 5m\n"
    )
}

#[test]
fn spot_node_is_replaced_by_a_cheaper_spot_node_only_with_the_feature_gate() {
    let off = simulate("spot-off", &spot_scenario("spot-off", ""));
    assert!(disruptions(&off).is_empty(), "{:#?}", disruptions(&off));
    let why = nodes(&off)[0]["disruptionBlocked"].as_str().unwrap().to_string();
    assert!(why.contains("settings.featureGates.spotToSpotConsolidation"), "{why}");
    let before = cost_per_hour(&off);

    let on =
        simulate("spot-on", &spot_scenario("spot-on", "settings: {featureGates: {spotToSpotConsolidation: true}}\n"));
    let d = disruptions(&on);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Underutilized");
    let n = nodes(&on);
    assert_eq!(n.len(), 1);
    assert_eq!(n[0]["capacityType"], "spot");
    assert_ne!(n[0]["instanceType"], d[0]["instanceType"], "never the same type");
    assert!(cost_per_hour(&on) < before, "{} < {before}", cost_per_hour(&on));
    assert_all_running(&on, 3);
}

#[test]
fn bad_settings_and_start_are_rejected_with_the_field_named() {
    let cases = [
        ("start: yesterday\n", "start: expected an RFC 3339 instant"),
        (
            "settings: {featureGates: {spotToSpotConsolidation: maybe}}\n",
            "settings.featureGates.spotToSpotConsolidation: expected true or false",
        ),
        (
            "settings: {batchIdleDuration: 20s, batchMaxDuration: 10s}\n",
            "settings.batchIdleDuration: must not be longer",
        ),
        ("settings: {consolidationPolicy: x}\n", "settings.consolidationPolicy: unknown field"),
        (
            "settings: {preferencePolicy: Sometimes}\n",
            "settings.preferencePolicy: \"Sometimes\" is not a preference policy: expected one of RespectWithinRoom, Respect, Ignore",
        ),
    ];
    for (head, want) in cases {
        let dir = std::env::temp_dir().join(format!("kerf-disruption-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.yaml");
        std::fs::write(&path, scenario("bad", head, &pool("", CONSOLIDATE_NOW), "  - wait: 1s\n")).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_kerf")).args(["simulate", path.to_str().unwrap()]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(want), "{want:?} not in {stderr}");
    }
    let patch = "  - patch: {kind: Deployment, name: web, merge: {spec: {replicas: 1}}}\n";
    let dir = std::env::temp_dir().join(format!("kerf-disruption-badpatch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.yaml");
    std::fs::write(&path, scenario("bad", "", &pool("", CONSOLIDATE_NOW), patch)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kerf")).args(["simulate", path.to_str().unwrap()]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("steps[1].patch.kind: a Deployment changes through apply, scale or rollout"), "{stderr}");
}

#[test]
fn priority_and_runtime_classes_are_applied_to_pods_by_admission() {
    let classes = "{apiVersion: scheduling.k8s.io/v1, kind: PriorityClass, metadata: {name: high}, value: 1000}, \
                   {apiVersion: node.k8s.io/v1, kind: RuntimeClass, metadata: {name: kata}, handler: kata, \
                   overhead: {podFixed: {cpu: 500m}}}";
    let steps = format!(
        "  - apply: [{classes}]\n  - apply: [{}]\n  - wait: 1m\n",
        deployment_with("web", 2, "1", "", ", priorityClassName: high, runtimeClassName: kata")
    );
    let r = simulate("classes", &scenario("classes", "", &pool("", CONSOLIDATE_NOW), &steps));
    // Two 1-CPU pods with 500m of runtime overhead each: 3 CPUs, a medium node.
    assert_eq!(types_of(&r), vec!["medium"]);
    assert_eq!(nodes(&r)[0]["requested"]["cpu"], "3");
    assert_all_running(&r, 2);
}

#[test]
fn pods_with_hostname_anti_affinity_are_never_merged_onto_one_node() {
    let anti = |app: &str| {
        format!(
            ", affinity: {{podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: \
             [{{topologyKey: kubernetes.io/hostname, labelSelector: {{matchLabels: {{app: {app}}}}}}}]}}}}"
        )
    };
    let steps = format!(
        "  - apply: [{}, {}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: filler, namespace: default, replicas: 0}}\n  - wait: 10m\n",
        deployment_with("web", 3, "1", "", &anti("web")),
        deployment_with("filler", 3, "2500m", "", &anti("filler"))
    );
    let r = simulate("anti", &scenario("anti", "", &pool("", CONSOLIDATE_NOW), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 3, "{d:#?}");
    for x in &d {
        assert_eq!(x["reason"], "Underutilized");
        assert_eq!(x["instanceType"], "medium");
        assert_eq!(x["replacements"].as_array().unwrap().len(), 1, "{x}");
    }
    assert_eq!(types_of(&r), vec!["small", "small", "small"]);
    let hosts: std::collections::BTreeSet<&str> =
        r["pods"].as_array().unwrap().iter().map(|p| p["node"].as_str().unwrap()).collect();
    assert_eq!(hosts.len(), 3, "one web pod per node");
    assert!((cost_per_hour(&r) - 0.3).abs() < 1e-9);
    assert_all_running(&r, 3);
}

#[test]
fn independent_consolidations_run_side_by_side_within_the_budget() {
    // Three web pods, one per node (hostname anti-affinity), each node over-sized once the
    // filler goes: three single-node replacements that share no node and no room.
    let anti = |app: &str| {
        format!(
            ", affinity: {{podAntiAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: \
             [{{topologyKey: kubernetes.io/hostname, labelSelector: {{matchLabels: {{app: {app}}}}}}}]}}}}"
        )
    };
    let steps = format!(
        "  - apply: [{}, {}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: filler, namespace: default, replicas: 0}}\n  - wait: 10m\n",
        deployment_with("web", 3, "1", "", &anti("web")),
        deployment_with("filler", 3, "2500m", "", &anti("filler"))
    );
    let run = |name: &str, budget: &str| {
        let disruption = format!(
            "{{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{{nodes: \"{budget}\"}}]}}"
        );
        let r = simulate(name, &scenario(name, "", &pool("", &disruption), &steps));
        assert_eq!(types_of(&r), vec!["small", "small", "small"]);
        assert_all_running(&r, 3);
        let mut d: Vec<(f64, f64)> =
            disruptions(&r).iter().map(|x| (secs(&x["atSeconds"]), secs(&x["terminatedSeconds"]))).collect();
        d.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(d.len(), 3, "{d:?}");
        (d, r["summary"]["nodeClaimsLaunched"].as_u64().unwrap())
    };
    // Budget 100%: each decision is taken (and validated, 15 s) while the replacements of the
    // earlier ones still launch (30 s): the three overlap, and no node is launched twice.
    let (d, launched) = run("side-by-side", "100%");
    for pair in d.windows(2) {
        assert!(pair[1].0 < pair[0].1, "decided while the one before still ran: {d:?}");
        assert!(pair[1].0 >= pair[0].0 + 15.0, "one validation at a time: {d:?}");
    }
    assert_eq!(launched, 6, "three nodes and their three replacements");
    // Budget 1: the next one only once the one before is gone.
    let (d, _) = run("one-at-a-time", "1");
    for pair in d.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "{d:?}");
    }
}

#[test]
fn side_by_side_consolidations_never_count_the_same_room_twice() {
    // A part of the scale example's generated workload on its NodePools, unchanged for 20
    // minutes: consolidation runs several commands at once, and the pods of one land where
    // kube-scheduler puts them, which may be room another was decided on. Each decision is
    // checked with the running commands' pods landing first, so none is undone.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/converge/side-by-side-scenario.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", path.to_str().unwrap(), "--report", "json"])
        .env("KERF_LOG", "warn")
        .output()
        .expect("run kerf");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kerf simulate failed: {log}");
    let r: Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert!(!disruptions(&r).is_empty(), "provisioning over-bought, consolidation has work to do");
    assert!(!log.contains("consolidation undone"), "a consolidation was undone:\n{log}");
    // Every NodeClaim is from the first provisioning pass or a consolidation's replacement.
    let replacements: std::collections::BTreeSet<&str> =
        disruptions(&r).iter().flat_map(|d| d["replacements"].as_array().unwrap()).filter_map(|c| c.as_str()).collect();
    let timeline = r["timeline"].as_array().unwrap();
    let first_fleet = timeline.iter().find(|t| t["podsPending"] == 0).expect("every pod placed")["nodes"].as_u64();
    assert_eq!(
        Some(r["summary"]["nodeClaimsLaunched"].as_u64().unwrap() - replacements.len() as u64),
        first_fleet,
        "a NodeClaim was launched for pods a consolidation moved"
    );
    assert_eq!(r["summary"]["podsPending"], 0);
}

#[test]
fn replicas_preferring_one_per_node_get_the_nodes_their_requests_need_and_the_fleet_stays_put() {
    // Twelve 1-CPU replicas preferring one per node, as most Helm charts ship them, left
    // unchanged for 15 minutes. kerf honours the preference on room that is there and never
    // buys a node per replica for it, so what it launches is what consolidation keeps;
    // Karpenter's Respect launches a node per replica.
    let anti = ", affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 100, \
                podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}}]}}";
    let steps = format!("  - apply: [{}]\n  - wait: 15m\n", deployment_with("web", 12, "1", "", anti));
    let run = |name: &str, head: &str| simulate(name, &scenario(name, head, &pool("", CONSOLIDATE_NOW), &steps));
    let within = run("prefer-within-room", "");
    assert_all_running(&within, 12);
    assert!(disruptions(&within).is_empty(), "{:#?}", disruptions(&within));
    let launched = within["summary"]["nodeClaimsLaunched"].as_u64().unwrap();
    assert!(launched <= 2, "{launched} nodes for 12 CPUs of 1-CPU pods: {:?}", types_of(&within));
    let respect = run("prefer-respect", "settings: {preferencePolicy: Respect}\n");
    assert_all_running(&respect, 12);
    assert_eq!(respect["summary"]["nodeClaimsLaunched"], 12, "{:?}", types_of(&respect));
    assert!(cost_per_hour(&within) < cost_per_hour(&respect));
}

/// Node repair's scenario head: the `NodeRepair` gate on.
const REPAIR: &str = "settings: {featureGates: {nodeRepair: true}}\n";

/// `n` replicas of one CPU, one per node (required hostname anti-affinity): `n` `small` nodes.
fn one_per_node(n: u32) -> String {
    let anti = ", affinity: {podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: \
                [{topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: web}}}]}}";
    deployment_with("web", n, "1", "", anti)
}

/// The default budget, and consolidation kept out of the way.
const KEEP: &str = "{consolidationPolicy: WhenEmpty, consolidateAfter: Never}";

#[test]
fn node_repair_replaces_a_node_whose_kubelet_stopped_after_the_ready_toleration() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 5m\n  - fail: {{node: {}}}\n  - wait: 40m\n",
        one_per_node(3),
        node_name(1)
    );
    let r = simulate("repair-ready", &scenario("repair-ready", REPAIR, &pool("", KEEP), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Unhealthy");
    assert_eq!(d[0]["node"], node_name(1));
    // Failed at 5m; Ready Unknown is tolerated for 30 minutes.
    assert_eq!(secs(&d[0]["atSeconds"]), 2100.0);
    assert!(d[0]["detail"].as_str().unwrap().contains("its Ready condition has been Unknown for 30m"), "{}", d[0]);
    // Its pod fits on no other node: a replacement launched first.
    assert_eq!(d[0]["replacements"].as_array().unwrap().len(), 1, "{}", d[0]);
    assert!(nodes(&r).iter().all(|n| n["name"] != node_name(1)));
    assert_eq!(nodes(&r).len(), 3);
    assert_all_running(&r, 3);

    // Without the gate the node stays, broken, with its pod.
    let off = simulate("repair-off", &scenario("repair-off", "", &pool("", KEEP), &steps));
    assert!(disruptions(&off).is_empty(), "{:#?}", disruptions(&off));
    assert!(nodes(&off).iter().any(|n| n["name"] == node_name(1)));
}

#[test]
fn node_repair_replaces_a_gpu_node_after_its_hardware_condition_toleration_and_honours_do_not_repair() {
    let condition = |n: u32| {
        format!(
            "  - condition: {{node: {}, type: AcceleratedHardwareReady, status: \"False\", reason: NvidiaXidError}}\n",
            node_name(n)
        )
    };
    let steps = format!("  - apply: [{}]\n  - wait: 5m\n{}  - wait: 20m\n", one_per_node(3), condition(1));
    let r = simulate("repair-gpu", &scenario("repair-gpu", REPAIR, &pool("", KEEP), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Unhealthy");
    // AcceleratedHardwareReady False is tolerated for 10 minutes.
    assert_eq!(secs(&d[0]["atSeconds"]), 900.0);
    assert_all_running(&r, 3);

    // The same failure on a node annotated karpenter.sh/do-not-repair: kept, and it says why.
    let steps = format!(
        "  - apply: [{}]\n  - wait: 5m\n  - patch: {{kind: Node, name: {}, merge: {{metadata: {{annotations: {{karpenter.sh/do-not-repair: \"true\"}}}}}}}}\n{}  - wait: 20m\n",
        one_per_node(3),
        node_name(1),
        condition(1)
    );
    let r = simulate("repair-veto", &scenario("repair-veto", REPAIR, &pool("", KEEP), &steps));
    assert!(disruptions(&r).is_empty(), "{:#?}", disruptions(&r));
    let kept = nodes(&r).into_iter().find(|n| n["name"] == node_name(1)).expect("the node stays");
    let why = kept["disruptionBlocked"].as_str().unwrap();
    assert!(why.contains("AcceleratedHardwareReady condition has been False"), "{why}");
    assert!(why.contains("annotated karpenter.sh/do-not-repair=true"), "{why}");
}

#[test]
fn node_repair_stops_when_more_than_a_fifth_of_a_pool_is_unhealthy_and_paces_by_the_budget() {
    let fail = |ns: &[u32]| ns.iter().map(|n| format!("  - fail: {{node: {}}}\n", node_name(*n))).collect::<String>();
    // Three of ten nodes fail at once: more than 20% of the pool, so none is repaired.
    let steps = format!("  - apply: [{}]\n  - wait: 5m\n{}  - wait: 40m\n", one_per_node(10), fail(&[1, 4, 7]));
    let r = simulate("repair-wide", &scenario("repair-wide", REPAIR, &pool("", KEEP), &steps));
    assert!(disruptions(&r).is_empty(), "{:#?}", disruptions(&r));
    for n in [1, 4, 7] {
        let node = nodes(&r).into_iter().find(|x| x["name"] == node_name(n)).expect("the node stays");
        let why = node["disruptionBlocked"].as_str().unwrap();
        assert!(why.contains("3 of NodePool default's 10 nodes are unhealthy (more than 20%)"), "{why}");
    }

    // Two of ten (20%, the most the pool tolerates): both are repaired, one at a time under the
    // default budget (10%: one node), the second once the first is gone.
    let steps = format!("  - apply: [{}]\n  - wait: 5m\n{}  - wait: 40m\n", one_per_node(10), fail(&[1, 4]));
    let r = simulate("repair-two", &scenario("repair-two", REPAIR, &pool("", KEEP), &steps));
    let d = disruptions(&r);
    assert_eq!(d.len(), 2, "{d:#?}");
    assert!(d.iter().all(|x| x["reason"] == "Unhealthy"));
    assert!(secs(&d[1]["atSeconds"]) >= secs(&d[0]["terminatedSeconds"]), "{d:#?}");
    assert_eq!(nodes(&r).len(), 10);
    assert_all_running(&r, 10);
}

/// Node repair with a reboot first: the `NodeRepair` and `RebootForRepair` gates on.
const REBOOT: &str = "settings: {featureGates: {nodeRepair: true, rebootForRepair: true}}\n";

fn reboots(r: &Value) -> Vec<&Value> {
    r["reboots"].as_array().map(|a| a.iter().collect()).unwrap_or_default()
}

/// The names of the pods and the node each is bound to.
fn placements(r: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = r["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["node"].as_str().unwrap_or("").to_string()))
        .collect();
    out.sort();
    out
}

#[test]
fn reboot_for_repair_fixes_a_gpu_node_without_a_new_node_and_its_pods_stay() {
    let gpu = |extra: &str| {
        format!(
            "  - condition: {{node: {}, type: AcceleratedHardwareReady, status: \"False\", reason: NvidiaXidError{extra}}}\n",
            node_name(1)
        )
    };
    let steps = format!("  - apply: [{}]\n  - wait: 5m\n{}  - wait: 30m\n", one_per_node(3), gpu(""));
    let r = simulate("reboot-gpu", &scenario("reboot-gpu", REBOOT, &pool("", KEEP), &steps));
    let b = reboots(&r);
    assert_eq!(b.len(), 1, "{b:#?}");
    assert_eq!(b[0]["node"], node_name(1));
    assert_eq!(b[0]["condition"], "AcceleratedHardwareReady");
    // Failed at 5m, tolerated for 10 minutes: rebooted at 15m.
    assert_eq!(secs(&b[0]["atSeconds"]), 900.0);
    assert!(b[0]["detail"].as_str().unwrap().contains("has been False for 10m (rebooted after 10m)"), "{}", b[0]);
    // Back after the launch latency with its GPU fixed: no replacement, the same pods where they were.
    assert!(disruptions(&r).is_empty(), "{:#?}", disruptions(&r));
    assert_eq!(r["summary"]["nodeClaimsLaunched"], 3);
    assert!(nodes(&r).iter().all(|n| n["ready"] == true), "{:#?}", nodes(&r));
    assert!(nodes(&r).iter().any(|n| n["name"] == node_name(1)));
    assert_all_running(&r, 3);
    let steady =
        simulate("reboot-none", &scenario("reboot-none", REBOOT, &pool("", KEEP), &steps.replace(&gpu(""), "")));
    assert_eq!(placements(&r), placements(&steady));

    // A kubelet that stopped is brought back by a reboot too, after the Ready toleration.
    let steps = format!(
        "  - apply: [{}]\n  - wait: 5m\n  - fail: {{node: {}}}\n  - wait: 40m\n",
        one_per_node(3),
        node_name(1)
    );
    let r = simulate("reboot-kubelet", &scenario("reboot-kubelet", REBOOT, &pool("", KEEP), &steps));
    let b = reboots(&r);
    assert_eq!(b.len(), 1, "{b:#?}");
    assert_eq!(secs(&b[0]["atSeconds"]), 2100.0);
    assert_eq!(b[0]["condition"], "Ready");
    assert!(disruptions(&r).is_empty(), "{:#?}", disruptions(&r));
    assert!(nodes(&r).iter().all(|n| n["ready"] == true), "{:#?}", nodes(&r));
    assert_all_running(&r, 3);

    // `rebootForRepair` without `nodeRepair` repairs nothing.
    let steps = format!("  - apply: [{}]\n  - wait: 5m\n{}  - wait: 30m\n", one_per_node(3), gpu(""));
    let alone = "settings: {featureGates: {rebootForRepair: true}}\n";
    let r = simulate("reboot-alone", &scenario("reboot-alone", alone, &pool("", KEEP), &steps));
    assert!(reboots(&r).is_empty() && disruptions(&r).is_empty(), "{r:#}");
}

#[test]
fn reboot_for_repair_reboots_a_persistent_failure_once_then_replaces_the_node() {
    let steps = format!(
        "  - apply: [{}]\n  - wait: 5m\n  - condition: {{node: {}, type: AcceleratedHardwareReady, status: \"False\", persistent: true}}\n  - wait: 40m\n",
        one_per_node(3),
        node_name(1)
    );
    let r = simulate("reboot-persistent", &scenario("reboot-persistent", REBOOT, &pool("", KEEP), &steps));
    let b = reboots(&r);
    assert_eq!(b.len(), 1, "rebooted once: {b:#?}");
    assert_eq!(secs(&b[0]["atSeconds"]), 900.0);
    // Still failing 10 minutes after the reboot: replaced then.
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0]["reason"], "Unhealthy");
    assert_eq!(d[0]["node"], node_name(1));
    assert_eq!(secs(&d[0]["atSeconds"]), 1500.0);
    assert!(d[0]["detail"].as_str().unwrap().contains("after its reboot (replaced after 10m)"), "{}", d[0]);
    assert!(nodes(&r).iter().all(|n| n["name"] != node_name(1)));
    assert_eq!(nodes(&r).len(), 3);
    assert_all_running(&r, 3);

    // Without the reboot gate, the same failure is replaced at its first toleration.
    let r = simulate("reboot-off", &scenario("reboot-off", REPAIR, &pool("", KEEP), &steps));
    assert!(reboots(&r).is_empty());
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(secs(&d[0]["atSeconds"]), 900.0);
    assert!(r.get("reboots").is_none(), "a report without reboots has no reboots field");
}

/// A pool of one `large` node (8 CPUs, $0.40/h), with `six` (6 CPUs, $0.37/h) and `small`
/// (2 CPUs, $0.10/h) to replace it with; seven one-CPU pods, then `replicas`.
fn replace_after_scale_down(name: &str, policy: &str, replicas: u32) -> Value {
    let types = r#"[
    {name: large, capacity: {cpu: "8", memory: 32Gi, pods: "110"}, price: 0.40, offerings: [{zone: us-west-2a, capacityType: on-demand}]},
    {name: six, capacity: {cpu: "6", memory: 24Gi, pods: "110"}, price: 0.37, offerings: [{zone: us-west-2a, capacityType: on-demand}]},
    {name: small, capacity: {cpu: "2", memory: 8Gi, pods: "110"}, price: 0.10, offerings: [{zone: us-west-2a, capacityType: on-demand}]}]"#;
    let disruption = format!("{{consolidationPolicy: {policy}, consolidateAfter: 0s}}");
    let steps = format!(
        "  - apply: [{}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: web, namespace: default, replicas: {replicas}}}\n  - wait: 10m\n",
        deployment("web", 7, "1", "")
    );
    let yaml = format!(
        "name: {name}\ncloud: {{region: us-west-2, zones: [us-west-2a], launchLatency: 30s, instanceTypes: {types}}}\n\
         steps:\n  - apply: [{}, {CLASS}]\n{steps}",
        pool("", &disruption)
    );
    simulate(name, &yaml)
}

#[test]
fn balanced_refuses_a_replacement_that_saves_little_for_what_it_disrupts_and_says_its_score() {
    // Five pods left on the 8-CPU node: `six` holds them for $0.03/h less. The move saves 7.5%
    // of the pool's cost and disrupts all of it: score 0.08, below Balanced's 0.50.
    let eager = replace_after_scale_down("marginal-eager", "WhenEmptyOrUnderutilized", 5);
    assert_eq!(disruptions(&eager).len(), 1, "{:#?}", disruptions(&eager));
    assert_eq!(types_of(&eager), ["six"]);
    let balanced = replace_after_scale_down("marginal-balanced", "Balanced", 5);
    assert!(disruptions(&balanced).is_empty(), "{:#?}", disruptions(&balanced));
    assert_eq!(types_of(&balanced), ["large"]);
    let why = nodes(&balanced)[0]["disruptionBlocked"].as_str().unwrap().to_string();
    assert!(why.contains("Balanced score 0.08 in NodePool default"), "{why}");
    assert!(why.contains("needs 0.50"), "{why}");
    assert_all_running(&balanced, 5);

    // Two pods left: `small` holds them for 75% less, worth the disruption (score 0.75); the
    // disruption reports its score.
    let r = replace_after_scale_down("worth-balanced", "Balanced", 2);
    let d = disruptions(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(types_of(&r), ["small"]);
    assert!((secs(&d[0]["score"]) - 0.75).abs() < 1e-9, "{}", d[0]);
    assert!(d[0]["detail"].as_str().unwrap().contains("Balanced score 0.75"), "{}", d[0]);
    assert_all_running(&r, 2);
    // Scaled to zero, the empty node goes whatever the policy.
    let r = replace_after_scale_down("empty-balanced", "Balanced", 0);
    assert_eq!(disruptions(&r).len(), 1);
    assert_eq!(disruptions(&r)[0]["reason"], "Empty");
    assert!(nodes(&r).is_empty());
}

#[test]
fn consolidation_disrupts_the_node_whose_pods_cost_least_to_evict_first() {
    // Node A (`medium`) runs `dear`, whose pod carries a high pod-deletion-cost, and three
    // `filler` pods; node B (`small`) runs `cheap`. With `filler` gone, either node's pod fits
    // on the other: the one whose pod is cheaper to evict goes first, though A costs more.
    let dear =
        deployment("dear", 1, "1", ", annotations: {controller.kubernetes.io/pod-deletion-cost: \"1000000000\"}");
    let steps = format!(
        "  - apply: [{dear}, {}]\n  - wait: 2m\n  - apply: [{}]\n  - wait: 2m\n  - scale: {{kind: Deployment, name: filler, namespace: default, replicas: 0}}\n  - wait: 5m\n",
        deployment("filler", 3, "1", ""),
        deployment("cheap", 1, "1", "")
    );
    let r = simulate("deletion-cost", &scenario("deletion-cost", "", &pool("", CONSOLIDATE_NOW), &steps));
    let d = disruptions(&r);
    assert!(!d.is_empty(), "{d:#?}");
    assert_eq!(d[0]["instanceType"], "small", "{d:#?}");
    assert_eq!(d[0]["node"], node_name(2), "{d:#?}");
    assert_all_running(&r, 2);
}

/// Three `large` nodes of seven one-CPU pods (Deployments a, b, c in turn), scaled down to a:1,
/// b:1, c:5 while consolidation is off, then consolidated one node at a time. `a_meta` goes on
/// Deployment a's pod template. Returns the report and the name of a's remaining pod before
/// consolidation, with its node.
fn consolidated_after_scale_down(name: &str, a_meta: &str) -> (Value, (String, String)) {
    let large = ", requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [large]}]";
    let off = "{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: Never}";
    let on = "{consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 0s, budgets: [{nodes: \"1\"}]}";
    let head = format!(
        "  - apply: [{}]\n  - wait: 2m\n  - apply: [{}]\n  - wait: 2m\n  - apply: [{}]\n  - wait: 2m\n\
         \x20 - scale: {{kind: Deployment, name: a, namespace: default, replicas: 1}}\n\
         \x20 - scale: {{kind: Deployment, name: b, namespace: default, replicas: 1}}\n\
         \x20 - scale: {{kind: Deployment, name: c, namespace: default, replicas: 5}}\n  - wait: 3m\n",
        deployment("a", 7, "1", a_meta),
        deployment("b", 7, "1", ""),
        deployment("c", 7, "1", "")
    );
    let before = simulate(&format!("{name}-before"), &scenario(name, "", &pool(large, off), &head));
    let a = before["pods"].as_array().unwrap().iter().find(|p| p["owner"] == "Deployment/a").expect("a's pod");
    let a = (a["name"].as_str().unwrap().to_string(), a["node"].as_str().unwrap().to_string());
    let steps = format!("{head}  - apply: [{}]\n  - wait: 10m\n", pool(large, on));
    (simulate(name, &scenario(name, "", &pool(large, off), &steps)), a)
}

#[test]
fn a_node_whose_pods_declare_a_high_disruption_cost_is_consolidated_last() {
    // The same cluster twice: a's and b's last pods share a node, two nodes hold the five c's.
    // Every node holds two or three pods and any one can go; the budget takes one at a time.
    let (plain, (a_pod, a_node)) = consolidated_after_scale_down("cost-plain", "");
    let gone: Vec<&str> = disruptions(&plain).iter().map(|d| d["node"].as_str().unwrap()).collect();
    assert_eq!(gone.len(), 2, "{gone:?}");
    assert!(gone.contains(&a_node.as_str()), "without a cost, a's node is one of the first to go: {gone:?}");
    assert!(pods(&plain, "a-").iter().all(|p| p["name"] != a_pod), "a's pod was evicted");

    let costly = ", annotations: {karpenter.sh/disruption-cost: \"1000000000\"}";
    let (r, (a_pod, a_node)) = consolidated_after_scale_down("cost-high", costly);
    let gone: Vec<&str> = disruptions(&r).iter().map(|d| d["node"].as_str().unwrap()).collect();
    assert_eq!(gone.len(), 2, "{gone:?}");
    assert!(!gone.contains(&a_node.as_str()), "the costly pod's node is kept: {gone:?}");
    let a = pods(&r, "a-");
    assert_eq!((a[0]["name"].as_str().unwrap(), a[0]["node"].as_str().unwrap()), (a_pod.as_str(), a_node.as_str()));
    assert_all_running(&r, 7);
}

fn pods<'a>(r: &'a Value, prefix: &str) -> Vec<&'a Value> {
    r["pods"].as_array().unwrap().iter().filter(|p| p["name"].as_str().unwrap().starts_with(prefix)).collect()
}
