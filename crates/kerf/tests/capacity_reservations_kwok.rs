//! Capacity reservations over the API: `kerf serve --controllers none` and a separately started
//! `kerf controller --cloud kwok --cloud-config FILE` whose cloud holds an ODCR. kubectl applies
//! a NodePool that allows reserved capacity and an EC2NodeClass selecting the reservation; the
//! class's status lists it as Karpenter writes it, the reservation is filled before spot, its
//! Nodes carry the reservation labels, a restarted controller does not overfill it, a capacity
//! block's Node is drained and replaced ahead of the block's end, a bad reservation stops the
//! controller naming it, and `FEATURE_GATES=ReservedCapacity=false` turns reservations off.

#[macro_use]
mod common;

use std::collections::BTreeSet;

use common::controller::{Controller, words};
use common::*;

const CLOUD: &str = r#"cloud:
  region: us-west-2
  capacityReservations:
    - id: cr-0a1b2c3d4e5f60001
      instanceType: m5.2xlarge
      zone: us-west-2a
      count: 2
      tags: {team: web}
"#;

const MANIFESTS: &str = r#"apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-demo
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: demo}
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: demo}
  capacityReservationSelectorTerms:
    - tags: {team: web}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - {key: karpenter.sh/capacity-type, operator: In, values: ["reserved", "spot", "on-demand"]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m", "r"]}
        - {key: kubernetes.io/arch, operator: In, values: ["amd64"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: inflate
  namespace: default
spec:
  replicas: 20
  selector:
    matchLabels: {app: inflate}
  template:
    metadata:
      labels: {app: inflate}
    spec:
      containers:
        - name: inflate
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {cpu: "1"}
"#;

fn jsonpath(s: &Served, args: &[&str], path: &str) -> String {
    let mut all: Vec<&str> = args.to_vec();
    let arg = format!("jsonpath={path}");
    all.extend(["-o", arg.as_str()]);
    kubectl_ok(s, &all)
}

#[test]
fn the_kwok_controller_fills_a_reservation_from_its_cloud_config_before_spot() {
    let s = Served::start("reserved-kwok", &["--controllers", "none", "--speed", "10"]);
    let cloud = write(&s.dir, "cloud.yaml", CLOUD);
    let c = Controller::start(&s, "a", &["--cloud-config", cloud.to_str().expect("utf-8 path")]);
    eventually(30, "readyz", || {
        let (code, body) = c.readyz();
        (code == 200 && body.contains("ok: leader")).then_some(())
    });
    let path = write(&s.dir, "reserved.yaml", MANIFESTS);
    kubectl_ok(&s, &["apply", "-f", path.to_str().expect("utf-8 path")]);

    // The class's status lists the reservation as Karpenter writes it.
    eventually(30, "status.capacityReservations", || {
        let id = jsonpath(&s, &["get", "ec2nodeclass", "default"], "{.status.capacityReservations[0].id}");
        (id == "cr-0a1b2c3d4e5f60001").then_some(())
    });
    let field = |f: &str| {
        jsonpath(&s, &["get", "ec2nodeclass", "default"], &format!("{{.status.capacityReservations[0].{f}}}"))
    };
    assert_eq!(field("instanceType"), "m5.2xlarge");
    assert_eq!(field("availabilityZone"), "us-west-2a");
    assert_eq!(field("ownerID"), "123456789012");
    assert_eq!(field("instanceMatchCriteria"), "targeted");
    assert_eq!(field("reservationType"), "default");
    assert_eq!(field("state"), "active");

    eventually(90, "every inflate pod running", || {
        let phases = jsonpath(&s, &["get", "pods", "-l", "app=inflate"], "{.items[*].status.phase}");
        (phases.split_whitespace().filter(|p| *p == "Running").count() == 20).then_some(())
    });
    let reserved = words(&s, &["get", "nodes", "-l", "karpenter.sh/capacity-type=reserved", "-o", "name"]);
    assert_eq!(reserved.len(), 2, "the reservation holds two instances");
    let ids: BTreeSet<String> = words(
        &s,
        &[
            "get",
            "nodes",
            "-l",
            "karpenter.sh/capacity-type=reserved",
            "-o",
            "jsonpath={.items[*].metadata.labels.karpenter\\.k8s\\.aws/capacity-reservation-id}",
        ],
    );
    assert_eq!(ids, BTreeSet::from(["cr-0a1b2c3d4e5f60001".to_string()]));
    let types = words(
        &s,
        &[
            "get",
            "nodes",
            "-l",
            "karpenter.sh/capacity-type=reserved",
            "-o",
            "jsonpath={.items[*].metadata.labels.node\\.kubernetes\\.io/instance-type}",
        ],
    );
    assert_eq!(types, BTreeSet::from(["m5.2xlarge".to_string()]));
    // Past the reservation: spot, never on-demand.
    let others = words(&s, &["get", "nodes", "-l", "karpenter.sh/capacity-type!=reserved", "-o", "name"]);
    let spot = words(&s, &["get", "nodes", "-l", "karpenter.sh/capacity-type=spot", "-o", "name"]);
    assert!(!others.is_empty() && others == spot, "{others:?} vs {spot:?}");
    assert!(c.stop().success());

    // A restarted controller counts the reserved Nodes it finds: more pods go to spot.
    let c = Controller::start(&s, "b", &["--cloud-config", cloud.to_str().expect("utf-8 path")]);
    kubectl_ok(&s, &["scale", "deployment", "inflate", "--replicas", "30"]);
    eventually(90, "thirty inflate pods running", || {
        let phases = jsonpath(&s, &["get", "pods", "-l", "app=inflate"], "{.items[*].status.phase}");
        (phases.split_whitespace().filter(|p| *p == "Running").count() == 30).then_some(())
    });
    let reserved_now = words(&s, &["get", "nodes", "-l", "karpenter.sh/capacity-type=reserved", "-o", "name"]);
    assert_eq!(reserved_now, reserved, "the full reservation takes no third instance");
    let spot_now = words(&s, &["get", "nodes", "-l", "karpenter.sh/capacity-type=spot", "-o", "name"]);
    assert!(spot_now.len() > spot.len(), "{spot_now:?}");
    assert!(c.stop().success());
}

#[test]
fn a_bad_cloud_config_stops_the_kwok_controller_naming_the_field() {
    let s = Served::start("reserved-kwok-bad", &["--controllers", "none"]);
    let cloud = write(
        &s.dir,
        "cloud.yaml",
        "cloud:\n  capacityReservations:\n    - {id: cr-1, instanceType: m5.large, zone: us-west-2a, type: block}\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["controller", "--cloud", "kwok", "--kubeconfig"])
        .arg(&s.kubeconfig)
        .args(["--cloud-config", cloud.to_str().expect("utf-8 path")])
        .output()
        .expect("run kerf controller");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cloud.capacityReservations[0].type: \"block\" is not one of default, capacity-block"),
        "{stderr}"
    );
}

#[test]
fn the_kwok_controller_drains_a_capacity_blocks_node_ahead_of_its_end() {
    let s = Served::start("block-kwok", &["--controllers", "none", "--speed", "10"]);
    // The block ends 40m20s after the controller starts: draining starts 40 minutes before its
    // end (10 minutes before EC2 reclaims), 20 seconds in.
    let cloud = write(
        &s.dir,
        "cloud.yaml",
        "capacityReservations:\n  - {id: cr-0a1b2c3d4e5f60002, instanceType: m5.2xlarge, zone: us-west-2a, \
         type: capacity-block, end: 40m20s, tags: {team: web}}\n",
    );
    let c = Controller::start(&s, "a", &["--cloud-config", cloud.to_str().expect("utf-8 path")]);
    eventually(30, "readyz", || {
        let (code, body) = c.readyz();
        (code == 200 && body.contains("ok: leader")).then_some(())
    });
    let path = write(&s.dir, "block.yaml", &MANIFESTS.replace("replicas: 20", "replicas: 5"));
    kubectl_ok(&s, &["apply", "-f", path.to_str().expect("utf-8 path")]);
    let block = eventually(30, "a node in the block", || {
        let nodes = words(
            &s,
            &["get", "nodes", "-l", "karpenter.k8s.aws/capacity-reservation-type=capacity-block", "-o", "name"],
        );
        (nodes.len() == 1).then(|| nodes.into_iter().next().unwrap_or_default())
    });
    // Drained and deleted before the block ends; the pods run on a replacement outside it.
    eventually(60, "the block's node gone", || {
        let all = words(&s, &["get", "nodes", "-o", "name"]);
        (!all.contains(&block)).then_some(())
    });
    eventually(60, "every inflate pod running again", || {
        let phases = jsonpath(&s, &["get", "pods", "-l", "app=inflate"], "{.items[*].status.phase}");
        (phases.split_whitespace().filter(|p| *p == "Running").count() == 5).then_some(())
    });
    let reasons = words(&s, &["get", "events", "-A", "-o", "jsonpath={.items[*].reason}"]);
    assert!(reasons.contains("CapacityReservationExpiring"), "the drain was the block's notice: {reasons:?}");
    let reserved = words(&s, &["get", "nodes", "-l", "karpenter.sh/capacity-type=reserved", "-o", "name"]);
    assert!(reserved.is_empty(), "nothing launches into a draining block: {reserved:?}");
    assert_eq!(
        jsonpath(&s, &["get", "ec2nodeclass", "default"], "{.status.capacityReservations[0].state}"),
        "expiring"
    );
    assert!(c.stop().success());
}

#[test]
fn with_reserved_capacity_false_the_kwok_controller_lists_and_fills_no_reservation() {
    let s = Served::start("reserved-kwok-off", &["--controllers", "none", "--speed", "10"]);
    let cloud = write(&s.dir, "cloud.yaml", CLOUD);
    let mut command = Controller::command(&s, &["--cloud-config", cloud.to_str().expect("utf-8 path")]);
    command.env("FEATURE_GATES", "ReservedCapacity=false");
    let c = Controller::spawn(&s, "off", command);
    eventually(30, "readyz", || {
        let (code, body) = c.readyz();
        (code == 200 && body.contains("ok: leader")).then_some(())
    });
    let path = write(&s.dir, "reserved.yaml", &MANIFESTS.replace("replicas: 20", "replicas: 8"));
    kubectl_ok(&s, &["apply", "-f", path.to_str().expect("utf-8 path")]);
    eventually(90, "every inflate pod running", || {
        let phases = jsonpath(&s, &["get", "pods", "-l", "app=inflate"], "{.items[*].status.phase}");
        (phases.split_whitespace().filter(|p| *p == "Running").count() == 8).then_some(())
    });
    // The class is resolved (Ready) without the reservation or its condition.
    let conditions = jsonpath(&s, &["get", "ec2nodeclass", "default"], "{.status.conditions[*].type}");
    assert!(conditions.contains("Ready") && !conditions.contains("CapacityReservationsReady"), "{conditions}");
    let listed = jsonpath(&s, &["get", "ec2nodeclass", "default"], "{.status.capacityReservations}");
    assert_eq!(listed, "", "no reservation listed");
    let reserved = words(&s, &["get", "nodes", "-l", "karpenter.sh/capacity-type=reserved", "-o", "name"]);
    assert!(reserved.is_empty(), "{reserved:?}");
    let spot = words(&s, &["get", "nodes", "-l", "karpenter.sh/capacity-type=spot", "-o", "name"]);
    assert!(!spot.is_empty(), "spot first without reserved offerings");
    assert!(!c.stderr().contains("ReservedCapacity"), "the gate is acted on, not named as ignored: {}", c.stderr());
    assert!(c.stop().success());
}
