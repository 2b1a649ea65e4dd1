//! `kerf controller --cloud aws` (feature `aws`) against `kerf serve --controllers none` and
//! moto's EC2 API on 127.0.0.1: kubectl creates an EC2NodeClass, a NodePool and a Deployment;
//! the controller, pointed at moto by `AWS_ENDPOINT_URL` alone, resolves the node class in a VPC
//! tagged for discovery and launches instances tagged as Karpenter's in its subnets. No kubelet
//! runs on moto's instances, so the test registers their Nodes as one would; the pods then run
//! on them. Deleting a NodeClaim terminates its instance. Without `CLUSTER_ENDPOINT` the cluster
//! is found in moto's EKS. A selected capacity reservation is launched into first; a capacity
//! block's node is drained 40 minutes before the block ends. Settings it lacks are bad input.

#![cfg(feature = "aws")]

mod common;
#[path = "../../kerf-aws/tests/common/moto.rs"]
mod moto;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use common::controller::{Controller, words};
use common::*;
use kerf_aws::aws_sdk_ec2::types::Filter;
use moto::{Moto, moto};

const CLUSTER: &str = "e2e";

fn manifests(cluster: &str) -> String {
    format!(
        r#"apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-{cluster}
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags: {{karpenter.sh/discovery: {cluster}}}
  securityGroupSelectorTerms:
    - tags: {{karpenter.sh/discovery: {cluster}}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}}
        - {{key: karpenter.k8s.aws/instance-category, operator: In, values: ["c", "m"]}}
        - {{key: kubernetes.io/arch, operator: In, values: ["amd64"]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
  limits:
    cpu: "100"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: inflate
spec:
  replicas: 3
  selector:
    matchLabels: {{app: inflate}}
  template:
    metadata:
      labels: {{app: inflate}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: inflate
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {{cpu: "1"}}
"#
    )
}

/// The environment `kerf controller --cloud aws` gets: the cluster's settings as the Helm chart
/// sets them, and the SDK's standard variables pointing it at moto with test credentials.
fn aws_env(m: &Moto) -> Vec<(&'static str, String)> {
    vec![
        ("CLUSTER_NAME", CLUSTER.to_string()),
        ("CLUSTER_ENDPOINT", "https://e2e.cluster.example".to_string()),
        ("AWS_ENDPOINT_URL", m.endpoint.clone()),
        ("AWS_REGION", m.region.clone()),
        ("AWS_ACCESS_KEY_ID", "testing".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "testing".to_string()),
        // No instance metadata service to ask on a test machine.
        ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
    ]
}

/// `kerf controller --cloud aws` with `env`, the SDK's other sources (profiles, shared files)
/// out of reach.
fn controller_command(s: &Served, env: &[(&str, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kerf"));
    c.args(["controller", "--cloud", "aws", "--kubeconfig"])
        .arg(&s.kubeconfig)
        .args(["--metrics-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"])
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent");
    for k in [
        "CLUSTER_NAME",
        "CLUSTER_ENDPOINT",
        "INTERRUPTION_QUEUE",
        "AWS_PROFILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    ] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// One EC2 instance as the test checks it.
#[derive(Debug)]
struct Instance {
    id: String,
    state: String,
    subnet: String,
    private_dns_name: String,
    tags: BTreeMap<String, String>,
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

/// Every instance in moto tagged as owned by the test's cluster.
fn owned_instances(rt: &tokio::runtime::Runtime, clients: &kerf_aws::AwsClients) -> Vec<Instance> {
    let filter = Filter::builder().name(format!("tag:kubernetes.io/cluster/{CLUSTER}")).values("owned").build();
    let out = rt
        .block_on(clients.ec2.describe_instances().filters(filter).send())
        .unwrap_or_else(|e| panic!("DescribeInstances: {e:?}"));
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| Instance {
            id: i.instance_id().unwrap_or_default().to_string(),
            state: i.state().and_then(|s| s.name()).map(|n| n.as_str().to_string()).unwrap_or_default(),
            subnet: i.subnet_id().unwrap_or_default().to_string(),
            private_dns_name: i.private_dns_name().unwrap_or_default().to_string(),
            tags: i
                .tags()
                .iter()
                .map(|t| (t.key().unwrap_or_default().to_string(), t.value().unwrap_or_default().to_string()))
                .collect(),
        })
        .collect()
}

/// NodeClaim name → provider ID, for claims that have one.
fn launched_claims(s: &Served) -> BTreeMap<String, String> {
    kubectl_ok(
        s,
        &["get", "nodeclaims", "-o", r#"jsonpath={range .items[*]}{.metadata.name}={.status.providerID}{"\n"}{end}"#],
    )
    .lines()
    .filter_map(|l| l.split_once('='))
    .filter(|(_, pid)| !pid.is_empty())
    .map(|(n, pid)| (n.to_string(), pid.to_string()))
    .collect()
}

/// What the kubelet on the instance of NodeClaim `claim` would do on EC2 (`kerf serve` has no
/// kubelet for EC2 instances): register a Node named by the instance's private DNS name with
/// its provider ID, the claim's labels, Karpenter's unregistered taint and the claim's
/// capacity, and report it Ready.
fn register_node(s: &Served, claim: &str, provider_id: &str, instance: &Instance) {
    let json = |path: &str| -> serde_json::Value {
        let text = kubectl_ok(s, &["get", "nodeclaim", claim, "-o", &format!("jsonpath={{{path}}}")]);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("NodeClaim {claim} {path}: {e}: {text}"))
    };
    let status = serde_json::json!({
        "capacity": json(".status.capacity"),
        "allocatable": json(".status.allocatable"),
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
    });
    let node = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": instance.private_dns_name, "labels": json(".metadata.labels")},
        "spec": {
            "providerID": provider_id,
            "taints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
        },
        "status": status,
    });
    let path = write(&s.dir, &format!("node-{claim}.json"), &node.to_string());
    kubectl_ok(s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    let patch = serde_json::json!({"status": status}).to_string();
    kubectl_ok(s, &["patch", "node", &instance.private_dns_name, "--subresource=status", "--type=merge", "-p", &patch]);
}

/// The instance ID in `aws:///<zone>/<id>`.
fn instance_id(provider_id: &str) -> &str {
    provider_id.rsplit('/').next().unwrap_or_default()
}

#[test]
fn aws_controller_launches_tagged_instances_in_the_discovered_subnets_and_terminates_a_deleted_claims_instance() {
    let m = moto();
    let rt = runtime();
    let clients = rt.block_on(moto::clients());
    let net = rt.block_on(moto::network_tagged(&clients, "karpenter.sh/discovery", CLUSTER, 61));
    rt.block_on(moto::role(&clients, &format!("KarpenterNodeRole-{CLUSTER}")));
    let subnets: BTreeSet<String> = net.subnets.iter().map(|(id, _)| id.clone()).collect();

    let s = Served::start("ctrl-aws", &["--controllers", "none", "--speed", "10"]);
    let path = write(&s.dir, "manifests.yaml", &manifests(CLUSTER));
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);

    let mut c = Controller::spawn(&s, "aws", controller_command(&s, &aws_env(m)));

    // The node class resolves against moto: the discovery-tagged subnets and security group.
    eventually(60, "EC2NodeClass default Ready", || {
        let status = kubectl_ok(
            &s,
            &["get", "ec2nodeclass", "default", "-o", r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#],
        );
        (status.trim() == "True").then_some(())
    });
    let resolved = words(&s, &["get", "ec2nodeclass", "default", "-o", "jsonpath={.status.subnets[*].id}"]);
    assert_eq!(resolved, subnets, "status.subnets are the discovered subnets");
    let groups = words(&s, &["get", "ec2nodeclass", "default", "-o", "jsonpath={.status.securityGroups[*].id}"]);
    assert_eq!(groups, BTreeSet::from([net.security_group.clone()]));

    // The Deployment's pending pods lead to NodeClaims with EC2 instances behind them.
    let claims = eventually(90, "launched NodeClaims", || {
        if let Ok(Some(status)) = c.child.try_wait() {
            panic!("kerf controller exited with {status}: {}", c.stderr());
        }
        let claims = launched_claims(&s);
        (!claims.is_empty()).then_some(claims)
    });
    assert!(claims.values().all(|pid| pid.starts_with("aws:///us-west-2")), "{claims:?}: {}", c.stderr());
    let instances = owned_instances(&rt, &clients);
    for (claim, pid) in &claims {
        let id = instance_id(pid);
        let i = instances.iter().find(|i| i.id == id).unwrap_or_else(|| {
            panic!("NodeClaim {claim}: no instance {id} tagged for {CLUSTER} in moto: {instances:?}")
        });
        assert_eq!(i.state, "running", "{i:?}");
        assert!(subnets.contains(&i.subnet), "instance {id} in subnet {} outside {subnets:?}", i.subnet);
        for (k, v) in [
            (format!("kubernetes.io/cluster/{CLUSTER}"), "owned"),
            ("karpenter.sh/nodepool".to_string(), "default"),
            ("karpenter.sh/nodeclaim".to_string(), claim.as_str()),
            ("karpenter.k8s.aws/ec2nodeclass".to_string(), "default"),
            ("eks:eks-cluster-name".to_string(), CLUSTER),
        ] {
            assert_eq!(i.tags.get(&k).map(String::as_str), Some(v), "instance {id} tag {k}: {:?}", i.tags);
        }
    }
    assert_eq!(
        instances.iter().filter(|i| i.state == "running").count(),
        claims.len(),
        "one running instance per launched NodeClaim: {instances:?}"
    );

    // Once their kubelets register, the claims are registered and the pods run on their nodes.
    for (claim, pid) in &claims {
        let i = instances.iter().find(|i| i.id == instance_id(pid)).expect("instance");
        register_node(&s, claim, pid, i);
    }
    eventually(60, "3 running inflate pods", || {
        let running = words(
            &s,
            &["get", "pods", "--field-selector", "status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}"],
        );
        (running.len() == 3).then_some(())
    });
    let registered = words(
        &s,
        &[
            "get",
            "nodes",
            "-l",
            "karpenter.sh/registered=true,karpenter.sh/nodepool=default",
            "-o",
            "jsonpath={.items[*].spec.providerID}",
        ],
    );
    assert_eq!(registered, claims.values().cloned().collect::<BTreeSet<_>>(), "every node registered to its claim");
    let pod_nodes = words(&s, &["get", "pods", "-o", "jsonpath={.items[*].spec.nodeName}"]);
    let instance_nodes: BTreeSet<String> = instances.iter().map(|i| i.private_dns_name.clone()).collect();
    assert!(pod_nodes.is_subset(&instance_nodes), "pods on {pod_nodes:?}, instances' nodes {instance_nodes:?}");

    // Deleting a NodeClaim terminates its instance and the claim goes away.
    let (victim, pid) = claims.iter().next().map(|(n, p)| (n.clone(), p.clone())).expect("a claim");
    kubectl_ok(&s, &["delete", "nodeclaim", &victim, "--wait=false"]);
    let id = instance_id(&pid).to_string();
    eventually(60, &format!("instance {id} of NodeClaim {victim} terminated"), || {
        let i = owned_instances(&rt, &clients).into_iter().find(|i| i.id == id)?;
        matches!(i.state.as_str(), "shutting-down" | "terminated").then_some(())
    });
    eventually(60, &format!("NodeClaim {victim} gone"), || {
        let names = words(&s, &["get", "nodeclaims", "-o", "jsonpath={.items[*].metadata.name}"]);
        (!names.contains(&victim)).then_some(())
    });
    let others: Vec<String> = claims.keys().filter(|n| **n != victim).cloned().collect();
    let running: BTreeSet<String> =
        owned_instances(&rt, &clients).into_iter().filter(|i| i.state == "running").map(|i| i.id).collect();
    for other in &others {
        assert!(running.contains(instance_id(&claims[other])), "NodeClaim {other}'s instance still runs");
    }
    let log = c.stderr();
    assert!(c.stop().success(), "kerf controller stops cleanly on SIGTERM: {log}");
}

#[test]
fn aws_settings_the_controller_lacks_exit_2_naming_the_variable() {
    let m = moto();
    let s = Served::start("ctrl-aws-bad", &["--controllers", "none"]);
    let full = aws_env(m);
    let without = |name: &str| full.iter().filter(|(k, _)| *k != name).cloned().collect::<Vec<_>>();
    let mut bad_endpoint = without("CLUSTER_ENDPOINT");
    bad_endpoint.push(("CLUSTER_ENDPOINT", "e2e.cluster.example".to_string()));
    let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
        (without("CLUSTER_NAME"), "CLUSTER_NAME"),
        (without("CLUSTER_ENDPOINT"), "CLUSTER_ENDPOINT is not set and EKS has no cluster named e2e in us-west-2"),
        (bad_endpoint, "CLUSTER_ENDPOINT=e2e.cluster.example: not an http(s) URL"),
        (without("AWS_REGION"), "AWS_REGION"),
    ];
    for (env, expected) in cases {
        let out = controller_command(&s, &env).output().expect("run kerf controller");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{expected}: {stderr}");
        assert!(stderr.contains(expected), "expected {expected:?} in {stderr}");
    }
}

/// The user data of every launch template kerf made for `cluster`, decoded.
fn launch_template_user_data(
    rt: &tokio::runtime::Runtime,
    clients: &kerf_aws::AwsClients,
    cluster: &str,
) -> Vec<String> {
    let filter = Filter::builder().name(format!("tag:kubernetes.io/cluster/{cluster}")).values("owned").build();
    let templates = rt
        .block_on(clients.ec2.describe_launch_templates().filters(filter).send())
        .unwrap_or_else(|e| panic!("DescribeLaunchTemplates: {e:?}"));
    let mut data = Vec::new();
    for t in templates.launch_templates() {
        let id = t.launch_template_id().unwrap_or_default();
        let versions = rt
            .block_on(clients.ec2.describe_launch_template_versions().launch_template_id(id).send())
            .unwrap_or_else(|e| panic!("DescribeLaunchTemplateVersions {id}: {e:?}"));
        for v in versions.launch_template_versions() {
            let encoded = v.launch_template_data().and_then(|d| d.user_data()).unwrap_or_default();
            let decoded = kerf_aws::base64::decode(encoded).unwrap_or_else(|| panic!("{id}: user data not base64"));
            data.push(String::from_utf8_lossy(&decoded).into_owned());
        }
    }
    data
}

#[test]
fn without_cluster_endpoint_the_controller_finds_the_cluster_in_eks_and_its_nodes_join_it() {
    const FOUND: &str = "e2e-eks";
    let m = moto();
    let rt = runtime();
    let clients = rt.block_on(moto::clients());
    rt.block_on(moto::network_tagged(&clients, "karpenter.sh/discovery", FOUND, 62));
    rt.block_on(moto::role(&clients, &format!("KarpenterNodeRole-{FOUND}")));
    let network = kerf_aws::aws_sdk_eks::types::KubernetesNetworkConfigRequest::builder()
        .service_ipv4_cidr("10.100.0.0/16")
        .build();
    let created = rt
        .block_on(
            clients
                .eks
                .create_cluster()
                .name(FOUND)
                .version("1.33")
                .role_arn("arn:aws:iam::123456789012:role/eks-cluster")
                .resources_vpc_config(kerf_aws::aws_sdk_eks::types::VpcConfigRequest::builder().build())
                .kubernetes_network_config(network)
                .send(),
        )
        .unwrap_or_else(|e| panic!("EKS CreateCluster: {e:?}"));
    let endpoint = created.cluster().and_then(|c| c.endpoint()).unwrap_or_default().trim_end_matches('/').to_string();
    assert!(endpoint.starts_with("https://"), "moto's cluster endpoint: {endpoint:?}");

    let s = Served::start("ctrl-aws-eks", &["--controllers", "none", "--speed", "10"]);
    let path = write(&s.dir, "manifests.yaml", &manifests(FOUND));
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    let env: Vec<(&str, String)> = aws_env(m)
        .into_iter()
        .filter(|(k, _)| *k != "CLUSTER_ENDPOINT")
        .map(|(k, v)| if k == "CLUSTER_NAME" { (k, FOUND.to_string()) } else { (k, v) })
        .collect();
    let mut c = Controller::spawn(&s, "aws-eks", controller_command(&s, &env));
    eventually(90, "a launched NodeClaim", || {
        if let Ok(Some(status)) = c.child.try_wait() {
            panic!("kerf controller exited with {status}: {}", c.stderr());
        }
        (!launched_claims(&s).is_empty()).then_some(())
    });
    // The nodes' user data joins the cluster EKS described: its endpoint and service CIDR.
    let user_data = launch_template_user_data(&rt, &clients, FOUND);
    assert!(!user_data.is_empty(), "kerf made a launch template for {FOUND}: {}", c.stderr());
    for data in &user_data {
        assert!(data.contains(&format!("apiServerEndpoint: {endpoint}")), "endpoint {endpoint} in:\n{data}");
        assert!(data.contains("cidr: 10.100.0.0/16"), "the service CIDR in:\n{data}");
        assert!(data.contains(&format!("name: {FOUND}")), "the cluster's name in:\n{data}");
    }
    let log = c.stderr();
    assert!(c.stop().success(), "kerf controller stops cleanly on SIGTERM: {log}");
}

#[test]
fn aws_controller_launches_a_pending_pod_into_a_selected_capacity_reservation() {
    const ODCR: &str = "e2e-odcr";
    let m = moto();
    let rt = runtime();
    let clients = rt.block_on(moto::clients());
    rt.block_on(moto::network_tagged(&clients, "karpenter.sh/discovery", ODCR, 63));
    rt.block_on(moto::role(&clients, &format!("KarpenterNodeRole-{ODCR}")));
    let reservation = rt
        .block_on(
            clients
                .ec2
                .create_capacity_reservation()
                .instance_type("m5.large")
                .instance_platform(kerf_aws::aws_sdk_ec2::types::CapacityReservationInstancePlatform::LinuxUnix)
                .availability_zone("us-west-2a")
                .instance_count(1)
                .instance_match_criteria(kerf_aws::aws_sdk_ec2::types::InstanceMatchCriteria::Targeted)
                .tag_specifications(
                    kerf_aws::aws_sdk_ec2::types::TagSpecification::builder()
                        .resource_type(kerf_aws::aws_sdk_ec2::types::ResourceType::CapacityReservation)
                        .tags(moto::tag("karpenter.sh/discovery", ODCR))
                        .build(),
                )
                .send(),
        )
        .unwrap_or_else(|e| panic!("CreateCapacityReservation: {e:?}"));
    let id =
        reservation.capacity_reservation().and_then(|r| r.capacity_reservation_id()).unwrap_or_default().to_string();

    // The cluster's manifests with the class selecting the reservation and the pool allowing it.
    let manifests = manifests(ODCR)
        .replace(
            "  securityGroupSelectorTerms:\n",
            &format!(
                "  capacityReservationSelectorTerms:\n    - tags: {{karpenter.sh/discovery: {ODCR}}}\n  securityGroupSelectorTerms:\n"
            ),
        )
        .replace(r#"values: ["on-demand"]"#, r#"values: ["reserved", "on-demand"]"#)
        .replace("  replicas: 3\n", "  replicas: 1\n");
    assert!(manifests.contains("capacityReservationSelectorTerms") && manifests.contains(r#""reserved""#));
    let s = Served::start("ctrl-aws-odcr", &["--controllers", "none", "--speed", "10"]);
    let path = write(&s.dir, "manifests.yaml", &manifests);
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    let env: Vec<(&str, String)> =
        aws_env(m).into_iter().map(|(k, v)| if k == "CLUSTER_NAME" { (k, ODCR.to_string()) } else { (k, v) }).collect();
    let mut c = Controller::spawn(&s, "aws-odcr", controller_command(&s, &env));

    eventually(60, "the reservation in the EC2NodeClass status", || {
        let listed =
            words(&s, &["get", "ec2nodeclass", "default", "-o", "jsonpath={.status.capacityReservations[*].id}"]);
        (listed == BTreeSet::from([id.clone()])).then_some(())
    });
    let claims = eventually(90, "a launched NodeClaim", || {
        if let Ok(Some(status)) = c.child.try_wait() {
            panic!("kerf controller exited with {status}: {}", c.stderr());
        }
        let claims = launched_claims(&s);
        (!claims.is_empty()).then_some(claims)
    });
    assert_eq!(claims.len(), 1, "{claims:?}");
    let claim = claims.keys().next().cloned().unwrap_or_default();
    let label = |key: &str| {
        let path = format!("jsonpath={{.metadata.labels.{}}}", key.replace('.', "\\."));
        kubectl_ok(&s, &["get", "nodeclaim", &claim, "-o", &path]).trim().to_string()
    };
    assert_eq!(label("karpenter.sh/capacity-type"), "reserved", "{}", c.stderr());
    assert_eq!(label("karpenter.k8s.aws/capacity-reservation-id"), id);
    assert_eq!(label("karpenter.k8s.aws/capacity-reservation-type"), "default");
    assert_eq!(label("node.kubernetes.io/instance-type"), "m5.large");
    assert_eq!(label("topology.kubernetes.io/zone"), "us-west-2a");
    let left = rt
        .block_on(clients.ec2.describe_capacity_reservations().capacity_reservation_ids(&id).send())
        .unwrap_or_else(|e| panic!("DescribeCapacityReservations: {e:?}"));
    assert_eq!(
        left.capacity_reservations()[0].available_instance_count(),
        Some(0),
        "the instance is in the reservation"
    );
    let log = c.stderr();
    assert!(c.stop().success(), "kerf controller stops cleanly on SIGTERM: {log}");
}

#[test]
fn aws_controller_drains_a_capacity_blocks_node_forty_minutes_before_the_block_ends() {
    const BLOCK: &str = "e2e-block";
    let m = moto();
    let rt = runtime();
    let clients = rt.block_on(moto::clients());
    rt.block_on(moto::network_tagged(&clients, "karpenter.sh/discovery", BLOCK, 64));
    rt.block_on(moto::role(&clients, &format!("KarpenterNodeRole-{BLOCK}")));
    // A capacity block ending 40 minutes and 75 seconds from now: launched into at once, drained
    // 75 seconds later.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let end = i64::try_from(now).unwrap_or(0) + 40 * 60 + 75;
    let block = rt
        .block_on(
            clients
                .ec2
                .create_capacity_reservation()
                .instance_type("m5.large")
                .instance_platform(kerf_aws::aws_sdk_ec2::types::CapacityReservationInstancePlatform::LinuxUnix)
                .availability_zone("us-west-2a")
                .instance_count(1)
                .instance_match_criteria(kerf_aws::aws_sdk_ec2::types::InstanceMatchCriteria::Targeted)
                .end_date(kerf_aws::aws_sdk_ec2::primitives::DateTime::from_secs(end))
                .end_date_type(kerf_aws::aws_sdk_ec2::types::EndDateType::Limited)
                .tag_specifications(
                    kerf_aws::aws_sdk_ec2::types::TagSpecification::builder()
                        .resource_type(kerf_aws::aws_sdk_ec2::types::ResourceType::CapacityReservation)
                        .tags(moto::tag("karpenter.sh/discovery", BLOCK))
                        .tags(moto::tag("kerf.test/reservation-type", "capacity-block"))
                        .build(),
                )
                .send(),
        )
        .unwrap_or_else(|e| panic!("CreateCapacityReservation: {e:?}"));
    let id = block.capacity_reservation().and_then(|r| r.capacity_reservation_id()).unwrap_or_default().to_string();

    let manifests = manifests(BLOCK)
        .replace(
            "  securityGroupSelectorTerms:\n",
            &format!(
                "  capacityReservationSelectorTerms:\n    - tags: {{karpenter.sh/discovery: {BLOCK}}}\n  securityGroupSelectorTerms:\n"
            ),
        )
        .replace(r#"values: ["on-demand"]"#, r#"values: ["reserved", "on-demand"]"#)
        .replace("  replicas: 3\n", "  replicas: 1\n");
    let s = Served::start("ctrl-aws-block", &["--controllers", "none", "--speed", "10"]);
    let path = write(&s.dir, "manifests.yaml", &manifests);
    kubectl_ok(&s, &["create", "-f", path.to_str().expect("utf-8 path")]);
    let env: Vec<(&str, String)> = aws_env(m)
        .into_iter()
        .map(|(k, v)| if k == "CLUSTER_NAME" { (k, BLOCK.to_string()) } else { (k, v) })
        .collect();
    let mut c = Controller::spawn(&s, "aws-block", controller_command(&s, &env));

    let claims = eventually(60, "a NodeClaim launched into the block", || {
        if let Ok(Some(status)) = c.child.try_wait() {
            panic!("kerf controller exited with {status}: {}", c.stderr());
        }
        let claims = launched_claims(&s);
        (!claims.is_empty()).then_some(claims)
    });
    let first = claims.keys().next().cloned().unwrap_or_default();
    let label = |claim: &str, key: &str| {
        let path = format!("jsonpath={{.metadata.labels.{}}}", key.replace('.', "\\."));
        kubectl_ok(&s, &["get", "nodeclaim", claim, "-o", &path]).trim().to_string()
    };
    assert_eq!(label(&first, "karpenter.k8s.aws/capacity-reservation-id"), id, "{}", c.stderr());
    assert_eq!(label(&first, "karpenter.k8s.aws/capacity-reservation-type"), "capacity-block");

    // From 40 minutes before the end: warned, drained and replaced outside the block.
    eventually(150, "the block's NodeClaim gone and a replacement launched", || {
        let claims = launched_claims(&s);
        (!claims.contains_key(&first) && !claims.is_empty()).then_some(())
    });
    let events = words(
        &s,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=CapacityReservationExpiring",
            "-o",
            "jsonpath={.items[*].involvedObject.name}",
        ],
    );
    assert!(events.contains(&first), "{events:?}: {}", c.stderr());
    let claims = launched_claims(&s);
    let next = claims.keys().next().cloned().unwrap_or_default();
    assert_eq!(label(&next, "karpenter.sh/capacity-type"), "on-demand", "the closing block takes no new instance");
    let log = c.stderr();
    assert!(c.stop().success(), "kerf controller stops cleanly on SIGTERM: {log}");
}
