//! The local AWS tests run against: moto's server on 127.0.0.1, started once per test binary
//! from `tools/moto-fixture.py` with the interpreter named by `KERF_MOTO_PYTHON` (`tools/test`
//! makes it), the EKS AMI parameters of [`KUBERNETES_VERSIONS`] seeded; SDK configuration for it;
//! and a VPC for one test. Shared by kerf-aws's tests and the `kerf` binary's end-to-end test
//! (`#[path]`), so it names the SDK through `kerf_aws`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use kerf_aws::AwsClients;
use kerf_aws::aws_config::{self, BehaviorVersion, Region, SdkConfig};
use kerf_aws::aws_sdk_ec2::config::Credentials;
use kerf_aws::aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};

/// The Kubernetes versions whose AMI aliases are seeded: kerf-aws's tests' cluster and the one
/// `kerf serve` reports.
pub const KUBERNETES_VERSIONS: [&str; 2] = ["1.33", "1.32"];

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
         export KERF_MOTO_PYTHON=/tmp/kerf-moto-venv/bin/python), as tools/test does"
            .to_string()
    })?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tools/moto-fixture.py");
    let mut command = Command::new(&python);
    command.arg(script).args(["--port", "0"]);
    for v in KUBERNETES_VERSIONS {
        command.args(["--kubernetes-version", v]);
    }
    let mut child = command
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

pub fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v).build()
}

/// A VPC of one test: a subnet in each of three zones and a security group.
pub struct Network {
    pub vpc: String,
    pub subnets: Vec<(String, String)>,
    pub security_group: String,
    pub security_group_name: String,
}

/// A VPC `10.<octet>.0.0/16` whose subnets and security group (`<name>-nodes`) are all tagged
/// `<tag_key>: <name>`.
pub async fn network_tagged(clients: &AwsClients, tag_key: &str, name: &str, octet: u8) -> Network {
    let ec2 = &clients.ec2;
    let discovery = |r: ResourceType| TagSpecification::builder().resource_type(r).tags(tag(tag_key, name)).build();
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
