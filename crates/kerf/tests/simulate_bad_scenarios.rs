//! Bad scenarios exit with status 2 and name the file, the field and the problem on stderr.

use std::path::{Path, PathBuf};
use std::process::Command;

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("kerf-bad-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn run(scenario: &Path) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf")).arg("simulate").arg(scenario).output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_bad(scenario: &Path, needles: &[&str]) {
    let (code, stderr) = run(scenario);
    assert_eq!(code, 2, "stderr: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "stderr lacks {n:?}: {stderr}");
    }
}

#[test]
fn unknown_scenario_field_exits_2_naming_file_and_field() {
    let d = Dir::new("field");
    let s = d.write("s.yaml", "name: x\nsteps:\n  - wait: 1m\nstpes: []\n");
    assert_bad(&s, &["s.yaml", "stpes", "unknown field"]);
    let s = d.write("t.yaml", "name: x\nsteps:\n  - scale: {kind: Deployment, name: a, replicas: 2, replica: 3}\n");
    assert_bad(&s, &["t.yaml", "steps[0].scale.replica", "unknown field"]);
    let s = d.write("c.yaml", "name: x\ncloud:\n  region: us-west-2\n  launchLatncy: 30s\n");
    assert_bad(&s, &["c.yaml", "cloud", "launchLatncy"]);
}

#[test]
fn unknown_kind_exits_2_naming_manifest_file_and_kind() {
    let d = Dir::new("kind");
    d.write("m.yaml", "apiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: nightly\n");
    let s = d.write("s.yaml", "name: x\nsteps:\n  - apply: m.yaml\n");
    assert_bad(&s, &["m.yaml", "document 1", "kind", "unknown kind \"CronJob\""]);
}

#[test]
fn bad_duration_exits_2_naming_the_step_field() {
    let d = Dir::new("duration");
    let s = d.write("s.yaml", "name: x\nsteps:\n  - wait: 5 minutes\n");
    assert_bad(&s, &["s.yaml", "steps[0].wait", "invalid duration \"5 minutes\""]);
}

#[test]
fn missing_manifest_file_exits_2_naming_the_apply_step_and_path() {
    let d = Dir::new("missing");
    let s = d.write("s.yaml", "name: x\nsteps:\n  - wait: 1s\n  - apply: nope.yaml\n");
    assert_bad(&s, &["s.yaml", "steps[1].apply", "nope.yaml", "cannot read"]);
    let (code, stderr) = run(&d.0.join("absent.yaml"));
    assert_eq!(code, 2);
    assert!(stderr.contains("absent.yaml"), "{stderr}");
}

#[test]
fn invalid_manifest_exits_2_naming_object_field_and_problem() {
    let d = Dir::new("invalid");
    d.write(
        "pool.yaml",
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: default\nspec:\n  template:\n    spec:\n      \
         requirements:\n        - key: karpenter.sh/capacity-type\n          operator: Within\n          values: [spot]\n      \
         nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n",
    );
    let s = d.write("s.yaml", "name: x\nsteps:\n  - apply: pool.yaml\n");
    assert_bad(&s, &["pool.yaml", "NodePool/default", "spec.template.spec.requirements[0].operator", "Within"]);
    d.write(
        "deploy.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: many\n  selector:\n    \
         matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n        \
         - name: web\n          image: nginx\n",
    );
    let s = d.write("t.yaml", "name: x\nsteps:\n  - apply: deploy.yaml\n");
    assert_bad(&s, &["deploy.yaml", "Deployment/web", "spec.replicas"]);
    let s = d.write(
        "u.yaml",
        "name: x\nsteps:\n  - apply:\n      - apiVersion: v1\n        kind: Pod\n        metadata: {name: p}\n        spec:\n          \
         containers:\n            - name: c\n              image: i\n              resources: {requests: {cpu: lots}}\n",
    );
    assert_bad(
        &s,
        &["u.yaml", "steps[0].apply[0] (Pod/p)", "spec.containers[0].resources.requests.cpu", "invalid quantity"],
    );
}

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    \
     matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n        \
     - name: web\n          image: nginx\n          resources: {requests: {cpu: 100m}}\n";

fn apply_one(d: &Dir, manifest: &str) -> PathBuf {
    d.write("m.yaml", manifest);
    d.write("s.yaml", "name: x\nsteps:\n  - apply: m.yaml\n  - wait: 1m\n")
}

#[test]
fn typos_inside_deployments_and_pods_are_unknown_fields_with_their_paths() {
    let d = Dir::new("typos");
    let s = apply_one(&d, &DEPLOYMENT.replace("  replicas: 2", "  replicaz: 2"));
    assert_bad(&s, &["m.yaml: document 1 (Deployment/web): spec.replicaz: unknown field `replicaz`"]);
    let s =
        apply_one(&d, &DEPLOYMENT.replace("      containers:", "      nodeSelectr: {disk: ssd}\n      containers:"));
    assert_bad(
        &s,
        &["m.yaml: document 1 (Deployment/web): spec.template.spec.nodeSelectr: unknown field `nodeSelectr`"],
    );
    let s = apply_one(&d, &DEPLOYMENT.replace("resources: {requests", "resourcez: {requests"));
    assert_bad(
        &s,
        &["m.yaml: document 1 (Deployment/web): spec.template.spec.containers[0].resourcez: unknown field `resourcez`"],
    );
    let s = d.write(
        "p.yaml",
        "name: x\nsteps:\n  - apply:\n      - apiVersion: v1\n        kind: Pod\n        metadata: {name: p, labelz: {a: b}}\n        \
         spec:\n          containers: [{name: c, image: i}]\n",
    );
    assert_bad(&s, &["p.yaml: steps[0].apply[0] (Pod/p): metadata.labelz: unknown field `labelz`"]);
    let ds = DEPLOYMENT
        .replace("kind: Deployment", "kind: DaemonSet")
        .replace("  replicas: 2\n", "")
        .replace("image: nginx", "image: nginx\n          imagePullPolicyy: Always");
    let s = apply_one(&d, &ds);
    assert_bad(&s, &["(DaemonSet/web): spec.template.spec.containers[0].imagePullPolicyy: unknown field"]);
}

#[test]
fn negative_cpu_or_memory_requests_exit_2() {
    let d = Dir::new("negative");
    let s = apply_one(&d, &DEPLOYMENT.replace("cpu: 100m", "cpu: -100m"));
    assert_bad(
        &s,
        &[
            "m.yaml: document 1 (Deployment/web): spec.template.spec.containers[0].resources.requests.cpu: \"-100m\" is negative",
        ],
    );
    let s = apply_one(&d, &DEPLOYMENT.replace("cpu: 100m", "memory: -1Gi"));
    assert_bad(&s, &["resources.requests.memory: \"-1Gi\" is negative: requests must be 0 or more"]);
}

#[test]
fn duplicate_names_in_one_apply_exit_2_naming_both() {
    let d = Dir::new("duplicate");
    let s = apply_one(&d, &format!("{DEPLOYMENT}---\n{DEPLOYMENT}"));
    assert_bad(
        &s,
        &[
            "m.yaml: document 2 (Deployment/web): metadata.name: duplicate: Deployment default/web is also defined at document 1",
        ],
    );
    // The same name in another namespace is another object.
    let other = DEPLOYMENT.replace("  name: web\n", "  name: web\n  namespace: other\n");
    let s = apply_one(&d, &format!("{DEPLOYMENT}---\n{other}"));
    let (code, stderr) = run(&s);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn empty_scenario_and_empty_manifest_files_exit_2() {
    let d = Dir::new("empty");
    let s = d.write("s.yaml", "");
    assert_bad(&s, &["s.yaml: the scenario file is empty"]);
    d.write("m.yaml", "# nothing yet\n");
    let s = d.write("t.yaml", "name: x\nsteps:\n  - apply: m.yaml\n");
    assert_bad(&s, &["t.yaml: steps[0].apply: manifest file", "m.yaml has no objects"]);
    let out = Command::new(env!("CARGO_BIN_EXE_kerf")).arg("validate").arg(d.0.join("m.yaml")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("m.yaml: the file has no YAML documents"));
}

#[test]
fn a_utf8_byte_order_mark_is_read_past() {
    let d = Dir::new("bom");
    d.write("m.yaml", &format!("\u{feff}{DEPLOYMENT}"));
    let s = d.write("s.yaml", "\u{feff}name: x\nsteps:\n  - apply: m.yaml\n  - wait: 1m\n");
    let (code, stderr) = run(&s);
    assert_eq!(code, 0, "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_kerf")).arg("validate").arg(d.0.join("m.yaml")).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn absurd_replicas_exit_2_with_the_allowed_range() {
    let d = Dir::new("replicas");
    let s = apply_one(&d, &DEPLOYMENT.replace("replicas: 2", "replicas: 1e20"));
    assert_bad(
        &s,
        &["m.yaml: document 1 (Deployment/web): spec.replicas: must be a whole number from 0 to 2147483647, got "],
    );
    let s = apply_one(&d, &DEPLOYMENT.replace("replicas: 2", "replicas: 3000000000"));
    assert_bad(&s, &["spec.replicas: must be a whole number from 0 to 2147483647, got 3000000000"]);
}

#[test]
fn every_karpenter_feature_gate_is_read_and_an_unknown_one_exits_2_naming_it() {
    let d = Dir::new("gates");
    let s = d.write(
        "ok.yaml",
        "name: x\nsettings:\n  featureGates: {spotToSpotConsolidation: true, nodeRepair: true, reservedCapacity: false, \
         nodeOverlay: false, staticCapacity: false, capacityBuffer: true, terminateFirstDrift: true, \
         terminateFirstRepair: true, podDeletionCostManagement: false, nodeClassCEL: true}\nsteps:\n  - wait: 1m\n",
    );
    let (code, stderr) = run(&s);
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stderr.contains(
            "kerf: settings.featureGates: NodeClassCEL (not implemented in kerf yet; no effect); \
             NodeOverlay, StaticCapacity (always on in kerf; false has no effect)"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("TerminateFirstRepair"), "the gate is acted on: {stderr}");
    let s = d.write("bad.yaml", "name: x\nsettings:\n  featureGates: {teleport: true}\nsteps:\n  - wait: 1m\n");
    assert_bad(&s, &["bad.yaml", "settings.featureGates.teleport", "unknown field", "spotToSpotConsolidation"]);
    let s = d.write("val.yaml", "name: x\nsettings:\n  featureGates: {nodeRepair: sometimes}\nsteps:\n  - wait: 1m\n");
    assert_bad(&s, &["val.yaml", "settings.featureGates.nodeRepair", "expected true or false"]);
}

#[test]
fn node_condition_and_fail_steps_name_a_bad_status_or_a_node_that_does_not_exist() {
    let d = Dir::new("node-steps");
    let s = d.write("status.yaml", "name: x\nsteps:\n  - condition: {node: n, type: Ready, status: Maybe}\n");
    assert_bad(&s, &["status.yaml", "steps[0].condition.status", "expected True, False or Unknown", "Maybe"]);
    let s = d.write("type.yaml", "name: x\nsteps:\n  - condition: {node: n, status: \"False\"}\n");
    assert_bad(&s, &["type.yaml", "steps[0].condition", "type"]);
    let s = d.write("fail.yaml", "name: x\nsteps:\n  - fail: {node: ip-10-0-0-9.example}\n");
    let (code, stderr) = run(&s);
    assert_ne!(code, 0, "{stderr}");
    assert!(stderr.contains("fail ip-10-0-0-9.example") && stderr.contains("no node"), "{stderr}");
}

#[test]
fn a_persistent_that_is_not_true_or_false_names_the_step_and_field() {
    let d = Dir::new("persistent");
    let s = d.write("fail.yaml", "name: x\nsteps:\n  - fail: {node: n, persistent: yes}\n");
    assert_bad(&s, &["fail.yaml", "steps[0].fail.persistent", "expected true or false, found a string"]);
    let s = d.write(
        "condition.yaml",
        "name: x\nsteps:\n  - wait: 1m\n  - condition: {node: n, type: AcceleratedHardwareReady, status: \"False\", persistent: 1}\n",
    );
    assert_bad(&s, &["condition.yaml", "steps[1].condition.persistent", "expected true or false"]);
}
