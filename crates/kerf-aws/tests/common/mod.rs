//! The local AWS the tests run against (moto's server, [`moto`]), plus the provider, node
//! classes and claims the tests build on it.

#![allow(dead_code)]

pub mod moto;

use std::sync::Arc;

use aws_sdk_ec2::types::Filter;
use kerf_api::EC2NodeClass;
use kerf_aws::{AwsClients, AwsProvider, AwsSettings};
use kerf_cloud::ManualClock;
pub use moto::*;

pub const CLUSTER_VERSION: &str = KUBERNETES_VERSIONS[0];

/// Clients for moto, but for the Price List API, which they find closed (a refused port): the
/// built-in table prices, as in a cluster that cannot reach the API. moto 5.2.5 does not answer
/// the SDK's GetProducts at all, so asking it would hold every provider's first price lookup
/// for `PRICING_TIMEOUT`; [`moto::clients`] asks moto anyway.
pub async fn clients() -> AwsClients {
    let mut clients = moto::clients().await;
    let closed = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url("http://127.0.0.1:9")
        .region(aws_config::Region::new(kerf_aws::clients::PRICING_REGION))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new("testing", "testing", None, None, "kerf-tests"))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await;
    clients.pricing = aws_sdk_pricing::Client::new(&closed);
    clients
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

/// A VPC whose subnets and security group are tagged `kerf.test/discovery: <name>`.
pub async fn network(clients: &AwsClients, name: &str, octet: u8) -> Network {
    network_tagged(clients, "kerf.test/discovery", name, octet).await
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

/// Launches one t3.micro in `subnet` directly through EC2 (not through kerf), with `tags`; its
/// instance id.
pub async fn run_instance(clients: &AwsClients, subnet: &str, tags: &[(&str, &str)]) -> String {
    let mut run = clients
        .ec2
        .run_instances()
        .image_id("ami-04681a1dbd79675a5")
        .instance_type(aws_sdk_ec2::types::InstanceType::T3Micro)
        .subnet_id(subnet)
        .min_count(1)
        .max_count(1);
    if !tags.is_empty() {
        let mut spec =
            aws_sdk_ec2::types::TagSpecification::builder().resource_type(aws_sdk_ec2::types::ResourceType::Instance);
        for (k, v) in tags {
            spec = spec.tags(aws_sdk_ec2::types::Tag::builder().key(*k).value(*v).build());
        }
        run = run.tag_specifications(spec.build());
    }
    let out = run.send().await.unwrap_or_else(|e| panic!("RunInstances: {e:?}"));
    out.instances()[0].instance_id().unwrap_or_default().to_string()
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
