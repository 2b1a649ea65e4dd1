//! Karpenter's NodeClassReady rule through `kerf simulate`: a NodePool whose EC2NodeClass is
//! missing or not Ready launches nothing, and its pending pods say why, naming both.

mod common;

use serde_json::Value;

const POOL: &str = "{apiVersion: karpenter.sh/v1, kind: NodePool, metadata: {name: default}, spec: {template: {spec: \
    {nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}, requirements: []}}}}";

/// A node class `default` whose subnet selector term is `subnet_term`.
fn class(subnet_term: &str) -> String {
    format!(
        "{{apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {{name: default}}, spec: {{role: R, \
         amiSelectorTerms: [{{alias: al2023@latest}}], subnetSelectorTerms: [{subnet_term}], \
         securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]}}}}"
    )
}

const WEB: &str = "{apiVersion: apps/v1, kind: Deployment, metadata: {name: web}, spec: {replicas: 3, \
    selector: {matchLabels: {app: web}}, template: {metadata: {labels: {app: web}}, \
    spec: {containers: [{name: c, image: pause, resources: {requests: {cpu: \"1\"}}}]}}}}";

fn scenario(name: &str, steps: &str) -> String {
    format!(
        "name: {name}\ncloud: {{region: us-west-2, zones: [us-west-2a, us-west-2b], launchLatency: 30s, instanceTypes: \
         [{{name: small, capacity: {{cpu: \"2\", memory: 8Gi, pods: \"110\"}}, price: 0.10}}]}}\nsteps:\n{steps}"
    )
}

fn simulate(name: &str, yaml: &str) -> Value {
    common::simulate_report("node-class", name, yaml)
}

fn reasons(r: &Value) -> Vec<String> {
    r["pods"].as_array().unwrap().iter().map(|p| p["reason"].as_str().unwrap_or("").to_string()).collect()
}

#[test]
fn pods_of_a_pool_whose_node_class_is_missing_stay_pending_until_it_is_created() {
    let steps = format!("  - apply: [{POOL}, {WEB}]\n  - wait: 2m\n");
    let r = simulate("missing", &scenario("missing", &steps));
    assert_eq!(r["summary"]["podsPending"], 3);
    assert_eq!(r["summary"]["nodeClaimsLaunched"], 0);
    assert_eq!(reasons(&r), vec!["NodePool default: EC2NodeClass default not found"; 3]);

    let created = format!("{steps}  - apply: [{}]\n  - wait: 2m\n", class("{tags: {karpenter.sh/discovery: demo}}"));
    let r = simulate("created-later", &scenario("created-later", &created));
    assert_eq!(r["summary"]["podsRunning"], 3, "{:#?}", r["pods"]);
    assert!(r["summary"]["nodeClaimsLaunched"].as_u64().unwrap() > 0);
    assert!(r["pods"].as_array().unwrap().iter().all(|p| p["reason"].is_null()));
}

#[test]
fn pods_of_a_pool_whose_node_class_is_not_ready_say_what_its_ready_condition_says() {
    // An id that is not a well-formed subnet id names no subnet the simulated account has or
    // assumes: SubnetsReady and Ready are False.
    let steps = format!("  - apply: [{POOL}, {}, {WEB}]\n  - wait: 2m\n", class("{id: subnet-doesnotexist}"));
    let r = simulate("not-ready", &scenario("not-ready", &steps));
    assert_eq!(r["summary"]["podsPending"], 3);
    assert_eq!(
        reasons(&r),
        vec!["NodePool default: EC2NodeClass default is not ready: SubnetSelector did not match any Subnets"; 3]
    );

    // Selecting one of the account's subnets fixes it.
    let fixed = format!("{steps}  - apply: [{}]\n  - wait: 2m\n", class("{id: subnet-simuswest2b}"));
    let r = simulate("fixed", &scenario("fixed", &fixed));
    assert_eq!(r["summary"]["podsRunning"], 3, "{:#?}", r["pods"]);
}

#[test]
fn a_class_pinning_real_ids_runs_its_pods_on_assumed_subnets_images_and_groups() {
    // Manifests of a real cluster pin AMIs, subnets and security groups by id: the simulated
    // account assumes every well-formed one, so the what-if runs them as they are.
    let class = "{apiVersion: karpenter.k8s.aws/v1, kind: EC2NodeClass, metadata: {name: default}, spec: {role: R, \
                 amiFamily: AL2023, amiSelectorTerms: [{id: ami-0123456789abcdef0}], \
                 subnetSelectorTerms: [{id: subnet-0123456789abcdef0}, {id: subnet-0fedcba9876543210}], \
                 securityGroupSelectorTerms: [{id: sg-0a1b2c3d4e5f60718}]}}";
    let steps = format!("  - apply: [{POOL}, {class}, {WEB}]\n  - wait: 2m\n");
    let r = simulate("pinned-ids", &scenario("pinned-ids", &steps));
    assert_eq!(r["summary"]["podsRunning"], 3, "{:#?}", r["pods"]);
    assert_eq!(r["summary"]["podsPending"], 0);
}
