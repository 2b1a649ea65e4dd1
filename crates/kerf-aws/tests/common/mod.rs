//! The local AWS the tests run against: moto's server, started once per test binary from
//! `tools/moto-fixture.py` with the interpreter named by `KERF_MOTO_PYTHON` (`.ci/run` installs
//! it), plus helpers that build a VPC for one test.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::Credentials;
use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use kerf_api::EC2NodeClass;
use kerf_aws::{AwsClients, AwsProvider, AwsSettings};
use kerf_cloud::ManualClock;

pub const CLUSTER_VERSION: &str = "1.33";

pub struct Moto {
    pub endpoint: String,
    pub region: String,
    pub images: serde_json::Map<String, serde_json::Value>,
    // Held open: the fixture serves until its stdin closes, i.e. until this process exits.
    _child: Mutex<(Child, ChildStdin)>,
}

static MOTO: OnceLock<Result<Moto, String>> = OnceLock::new();

fn start() -> Result<Moto, String> {
    let python = std::env::var("KERF_MOTO_PYTHON").map_err(|_| {
        "KERF_MOTO_PYTHON is not set: it must name a Python with moto[server]==5.2.5 \
         (python3 -m venv /tmp/kerf-moto-venv && /tmp/kerf-moto-venv/bin/pip install -r tools/requirements-moto.txt; \
         export KERF_MOTO_PYTHON=/tmp/kerf-moto-venv/bin/python), as .ci/run does"
            .to_string()
    })?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/moto-fixture.py");
    let mut child = Command::new(&python)
        .arg(script)
        .args(["--port", "0", "--kubernetes-version", CLUSTER_VERSION])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("starting {python} {script}: {e}"))?;
    let stdin = child.stdin.take().ok_or("fixture has no stdin")?;
    let stdout = child.stdout.take().ok_or("fixture has no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).map_err(|e| format!("reading the fixture's endpoint: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&line)
        .map_err(|e| format!("the fixture printed {line:?} instead of its endpoint: {e}"))?;
    let endpoint = v["endpoint"].as_str().ok_or("fixture output has no endpoint")?.to_string();
    let region = v["region"].as_str().ok_or("fixture output has no region")?.to_string();
    let images = v["images"].as_object().cloned().unwrap_or_default();
    Ok(Moto { endpoint, region, images, _child: Mutex::new((child, stdin)) })
}

/// The shared moto server. Panics (failing the test, never skipping it) when it cannot start.
pub fn moto() -> &'static Moto {
    match MOTO.get_or_init(start) {
        Ok(m) => m,
        Err(e) => panic!("moto fixture: {e}"),
    }
}

/// SDK configuration for moto: its endpoint, region, and static test credentials.
pub async fn sdk_config() -> SdkConfig {
    let m = moto();
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(&m.endpoint)
        .region(Region::new(m.region.clone()))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "kerf-tests"))
        .load()
        .await
}

pub async fn clients() -> AwsClients {
    AwsClients::from_sdk_config(&sdk_config().await).unwrap_or_else(|e| panic!("{e}"))
}

pub fn settings(cluster: &str) -> AwsSettings {
    let mut s = AwsSettings::new(cluster, "https://cluster.example", CLUSTER_VERSION);
    s.cluster_ca_bundle = Some("Q0E=".to_string());
    s.cluster_cidr = Some("10.100.0.0/16".to_string());
    s
}

pub fn provider(clients: AwsClients, cluster: &str) -> (AwsProvider, ManualClock) {
    let clock = ManualClock::new();
    (AwsProvider::new(clients, settings(cluster), Arc::new(clock.clone())), clock)
}

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

/// A VPC of one test: a subnet in each of three zones and a security group, all tagged
/// `kerf.test/discovery: <name>`.
pub struct Network {
    pub vpc: String,
    pub subnets: Vec<(String, String)>,
    pub security_group: String,
    pub security_group_name: String,
}

pub async fn network(clients: &AwsClients, name: &str, octet: u8) -> Network {
    let ec2 = &clients.ec2;
    let discovery =
        |r: ResourceType| TagSpecification::builder().resource_type(r).tags(tag("kerf.test/discovery", name)).build();
    let vpc = ec2
        .create_vpc()
        .cidr_block(format!("10.{octet}.0.0/16"))
        .tag_specifications(discovery(ResourceType::Vpc))
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateVpc: {e:?}"));
    let vpc_id = vpc.vpc().and_then(|v| v.vpc_id()).unwrap_or_default().to_string();
    let mut subnets = Vec::new();
    for (i, zone) in ["us-west-2a", "us-west-2b", "us-west-2c"].iter().enumerate() {
        let s = ec2
            .create_subnet()
            .vpc_id(&vpc_id)
            .cidr_block(format!("10.{octet}.{i}.0/24"))
            .availability_zone(*zone)
            .tag_specifications(discovery(ResourceType::Subnet))
            .send()
            .await
            .unwrap_or_else(|e| panic!("CreateSubnet: {e:?}"));
        subnets.push((s.subnet().and_then(|s| s.subnet_id()).unwrap_or_default().to_string(), zone.to_string()));
    }
    let sg_name = format!("{name}-nodes");
    let sg = ec2
        .create_security_group()
        .group_name(&sg_name)
        .description("kerf test nodes")
        .vpc_id(&vpc_id)
        .tag_specifications(discovery(ResourceType::SecurityGroup))
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateSecurityGroup: {e:?}"));
    Network {
        vpc: vpc_id,
        subnets,
        security_group: sg.group_id().unwrap_or_default().to_string(),
        security_group_name: sg_name,
    }
}

/// An IAM role nodes could assume.
pub async fn role(clients: &AwsClients, name: &str) {
    let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}"#;
    clients
        .iam
        .create_role()
        .role_name(name)
        .assume_role_policy_document(policy)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateRole: {e:?}"));
}

/// A node class selecting the test network by its discovery tag.
pub fn node_class(name: &str, discovery: &str, yaml_extra: &str) -> EC2NodeClass {
    let yaml = format!(
        "apiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata:\n  name: {name}\nspec:\n  \
         subnetSelectorTerms:\n    - tags: {{kerf.test/discovery: {discovery}}}\n  \
         securityGroupSelectorTerms:\n    - tags: {{kerf.test/discovery: {discovery}}}\n{yaml_extra}"
    );
    serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("node class {name}: {e}\n{yaml}"))
}

/// Every instance in the region with its state and tags.
pub async fn instance_states(clients: &AwsClients, ids: &[String]) -> Vec<(String, String)> {
    let out = clients
        .ec2
        .describe_instances()
        .set_instance_ids(Some(ids.to_vec()))
        .send()
        .await
        .unwrap_or_else(|e| panic!("DescribeInstances: {e:?}"));
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            (
                i.instance_id().unwrap_or_default().to_string(),
                i.state().and_then(|s| s.name()).map(|n| n.as_str().to_string()).unwrap_or_default(),
            )
        })
        .collect()
}

pub fn filter(name: &str, value: &str) -> Filter {
    Filter::builder().name(name).values(value).build()
}

/// A NodeClaim of NodePool `default` for node class `node_class`, with extra requirement lines.
pub fn claim(name: &str, node_class: &str, requirements: &str) -> kerf_api::NodeClaim {
    let yaml = format!(
        "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: {name}\n  labels: {{karpenter.sh/nodepool: default, team: a}}\n\
         spec:\n  nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {node_class}}}\n  \
         resources: {{requests: {{cpu: '1'}}}}\n  requirements:\n{requirements}"
    );
    serde_yaml_ng::from_str(&yaml).unwrap_or_else(|e| panic!("claim {name}: {e}\n{yaml}"))
}

/// A ready node class `default` over a fresh test network named `name`.
pub async fn ready_provider(
    name: &str,
    octet: u8,
    clients: AwsClients,
    extra: &str,
) -> (AwsProvider, ManualClock, Network, EC2NodeClass) {
    let net = network(&clients, name, octet).await;
    role(&clients, &format!("{name}-node")).await;
    let (provider, clock) = provider(clients, name);
    let nc = node_class("default", name, &format!("  role: {name}-node\n{extra}"));
    let r = provider.reconcile_node_class(&nc).await;
    assert!(r.is_ready(), "node class not ready: {}", r.not_ready_reason());
    let nc = r.node_class.clone();
    (provider, clock, net, nc)
}
