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
