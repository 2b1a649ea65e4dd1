//! Instance types from DescribeInstanceTypes + DescribeInstanceTypeOfferings with spot prices
//! from DescribeSpotPriceHistory, against moto; on-demand prices from the built-in table when
//! the Price List API cannot answer (moto does not serve it); the built-in catalog when EC2 is
//! unreachable.

mod common;

use common::*;
use kerf_aws::instance_types::Source;
use kerf_aws::{AwsClients, AwsProvider};
use kerf_cloud::CloudProvider;
use kerf_cloud::aws::{NodeClassSettings, catalog};

fn pool() -> kerf_api::NodePool {
    let yaml = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      \
                nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n";
    serde_yaml_ng::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn instance_types_come_from_ec2_in_the_node_class_zones_with_spot_prices_and_karpenter_allocatable() {
    let clients = clients().await;
    let (provider, _clock, _net, nc) =
        ready_provider("types", 41, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n").await;
    assert_eq!(provider.refresh_instance_types().await, Ok(Source::Ec2));
    let types = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(types.len() > 100, "{} types", types.len());
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap_or_else(|| panic!("no m5.large"));
    // Only the zones the node class has subnets in (moto sells in us-west-2d too).
    let zones: std::collections::BTreeSet<&str> = m5.offerings.iter().map(|o| o.zone.as_str()).collect();
    assert_eq!(zones.into_iter().collect::<Vec<_>>(), vec!["us-west-2a", "us-west-2b", "us-west-2c"]);
    // Spot at the price DescribeSpotPriceHistory gives (moto: 0.00001), on-demand from the table.
    let spot = m5.offerings.iter().find(|o| o.capacity_type == "spot").unwrap_or_else(|| panic!("no spot"));
    assert_eq!(spot.price, 0.00001);
    let on_demand = m5.offerings.iter().find(|o| o.capacity_type == "on-demand").unwrap_or_else(|| panic!("no od"));
    assert_eq!(Some(on_demand.price), kerf_aws::instance_types::on_demand_price("us-west-2", "m5.large"));
    // Capacity and overhead as the built-in catalog computes them for the same type.
    let settings = NodeClassSettings::from_node_class(Some(&nc));
    let expected = catalog()
        .unwrap_or_else(|e| panic!("{e}"))
        .instance_type("us-west-2", "m5.large", &settings)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m5.capacity, expected.capacity);
    assert_eq!(m5.overhead, expected.overhead);
    assert_eq!(m5.labels.get("karpenter.k8s.aws/instance-cpu").map(String::as_str), Some("2"));
    // Only types an AMI of the node class can boot (al2023 standard: no GPU types).
    assert!(types.iter().all(|t| !t.labels.contains_key("karpenter.k8s.aws/instance-gpu-count")));
    assert!(types.iter().any(|t| t.labels.get("kubernetes.io/arch").map(String::as_str) == Some("arm64")));

    // An offering out of capacity reads unavailable.
    provider.mark_unavailable("m5.large", "us-west-2a", "spot");
    let types = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap_or_else(|| panic!("no m5.large"));
    for o in &m5.offerings {
        assert_eq!(o.available, !(o.zone == "us-west-2a" && o.capacity_type == "spot"), "{o:?}");
    }
}

#[tokio::test]
async fn the_built_in_catalog_stands_in_when_ec2_cannot_be_reached() {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url("http://127.0.0.1:9")
        .region(aws_config::Region::new("us-west-2"))
        .credentials_provider(aws_sdk_ec2::config::Credentials::new("t", "t", None, None, "kerf-tests"))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await;
    let clients = AwsClients::from_sdk_config(&config).unwrap_or_else(|e| panic!("{e}"));
    let provider = AwsProvider::new(clients, settings("offline"), std::sync::Arc::new(kerf_cloud::ManualClock::new()));
    assert_eq!(provider.refresh_instance_types().await, Ok(Source::Catalog));
    // The node class as a cluster would hold it, its status written earlier.
    let mut nc = node_class("default", "offline", "  role: r\n  amiSelectorTerms: [{alias: al2023@latest}]\n");
    let status: kerf_api::ec2nodeclass::EC2NodeClassStatus = serde_yaml_ng::from_str(
        "subnets: [{id: subnet-1, zone: us-west-2a}]\nsecurityGroups: [{id: sg-1}]\ninstanceProfile: p\n\
         amis: [{id: ami-1, requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]}]\n\
         conditions: [{type: Ready, status: 'True', reason: Ready}]\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    nc.status = Some(status);
    let types = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap_or_else(|| panic!("no m5.large"));
    assert!(m5.offerings.iter().all(|o| o.zone == "us-west-2a"));
    assert!(m5.offerings.iter().any(|o| o.capacity_type == "spot" && o.price > 0.001));
    assert!(types.iter().all(|t| t.labels.get("kubernetes.io/arch").map(String::as_str) == Some("amd64")));
}

#[tokio::test]
async fn on_demand_prices_come_from_the_built_in_table_when_the_price_list_api_cannot_answer() {
    // Every client, the Price List API's too, at moto.
    let clients = moto::clients().await;
    let (provider, _clock, _net, nc) =
        ready_provider("pricing", 42, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n").await;
    // moto has no Price List API: GetProducts (sent to moto, as AWS_ENDPOINT_URL would) fails.
    // (moto 5.2.5 never answers this call from the SDK: the client's operation timeout ends it.)
    let e = provider.refresh_on_demand_prices().await.err().unwrap_or_else(|| panic!("moto priced instances"));
    assert!(e.to_string().contains("pricing:GetProducts"), "{e}");
    let types = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    for name in ["m5.large", "c6g.xlarge", "r5.2xlarge"] {
        let t = types.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("no {name}"));
        let od = t.offerings.iter().find(|o| o.capacity_type == "on-demand").unwrap_or_else(|| panic!("no od"));
        let table = kerf_aws::instance_types::on_demand_price("us-west-2", name);
        assert!(table.is_some_and(|p| p > 0.0), "{name}: {table:?}");
        assert_eq!(Some(od.price), table, "{name}");
    }
}
