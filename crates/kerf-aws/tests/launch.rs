//! Launching against moto: CreateFleet from a cached launch template with per-family user data,
//! block devices, metadata options and tags, and insufficient capacity moving on to the next
//! offering.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use aws_sdk_ec2::config::interceptors::{
    BeforeDeserializationInterceptorContextMut, BeforeSerializationInterceptorContextRef,
    BeforeTransmitInterceptorContextMut,
};
use aws_sdk_ec2::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ec2::error::BoxError;
use aws_sdk_ec2::operation::create_fleet::CreateFleetInput;
use common::*;
use kerf_aws::AwsClients;
use kerf_aws::launch::userdata::{CONTENT_TYPE_NODECONFIG, parse_mime_archive};
use kerf_cloud::{CloudError, CloudProvider};

const M5_LARGE_ON_DEMAND: &str = "    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n    \
                                  - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n";

fn tags_of(i: &aws_sdk_ec2::types::Instance) -> BTreeMap<String, String> {
    i.tags()
        .iter()
        .map(|t| (t.key().unwrap_or_default().to_string(), t.value().unwrap_or_default().to_string()))
        .collect()
}

async fn instance(clients: &AwsClients, id: &str) -> aws_sdk_ec2::types::Instance {
    let out = clients.ec2.describe_instances().instance_ids(id).send().await.unwrap_or_else(|e| panic!("{e:?}"));
    out.reservations()
        .iter()
        .flat_map(|r| r.instances())
        .next()
        .cloned()
        .unwrap_or_else(|| panic!("instance {id} not found"))
}

#[tokio::test]
async fn create_launches_a_tagged_instance_from_a_launch_template_in_a_discovered_subnet() {
    let clients = clients().await;
    let (provider, _clock, net, _nc) = ready_provider(
        "launch",
        21,
        clients.clone(),
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  detailedMonitoring: true\n  tags: {team: blue}\n  \
         userData: |\n    #!/bin/bash\n    echo custom\n  \
         blockDeviceMappings:\n    - {deviceName: /dev/xvda, rootVolume: true, ebs: {volumeSize: 50Gi, volumeType: gp3, encrypted: true}}\n",
    )
    .await;
    let first = claim("default-launch1", "default", M5_LARGE_ON_DEMAND);
    let launched = provider.create(&first).await.unwrap_or_else(|e| panic!("{e}"));

    let labels = launched.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("node.kubernetes.io/instance-type").map(String::as_str), Some("m5.large"));
    assert_eq!(labels.get("karpenter.sh/capacity-type").map(String::as_str), Some("on-demand"));
    assert_eq!(labels.get("topology.kubernetes.io/region").map(String::as_str), Some("us-west-2"));
    assert_eq!(labels.get("karpenter.sh/nodepool").map(String::as_str), Some("default"));
    let zone = labels.get("topology.kubernetes.io/zone").cloned().unwrap_or_default();
    let pid = launched.provider_id().unwrap_or_default().to_string();
    assert!(pid.starts_with(&format!("aws:///{zone}/i-")), "{pid}");
    let x86 =
        moto().images["/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id"]
            .as_str()
            .unwrap_or_default();
    let status = launched.status.clone().unwrap_or_default();
    assert_eq!(status.image_id.as_deref(), Some(x86));
    assert_eq!(status.capacity.get("cpu").canonical(), "2");
    assert!(status.allocatable.get("memory") < status.capacity.get("memory"));

    let id = pid.rsplit('/').next().unwrap_or_default();
    let i = instance(&clients, id).await;
    assert_eq!(i.instance_type().map(|t| t.as_str()), Some("m5.large"));
    assert_eq!(i.image_id(), Some(x86));
    let subnet = i.subnet_id().unwrap_or_default();
    assert!(net.subnets.iter().any(|(s, z)| s == subnet && *z == zone), "{subnet} in {zone} not in {:?}", net.subnets);
    let tags = tags_of(&i);
    for (k, v) in [
        ("kubernetes.io/cluster/launch", "owned"),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/nodeclaim", "default-launch1"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("eks:eks-cluster-name", "launch"),
        ("team", "blue"),
    ] {
        assert_eq!(tags.get(k).map(String::as_str), Some(v), "tag {k} in {tags:?}");
    }

    // The launch template: named by hash, tagged for the cluster, with everything the node needs.
    let lts = clients
        .ec2
        .describe_launch_templates()
        .filters(filter("tag:karpenter.k8s.aws/cluster", "launch"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(lts.launch_templates().len(), 1);
    let lt_name = lts.launch_templates()[0].launch_template_name().unwrap_or_default().to_string();
    assert!(lt_name.starts_with("karpenter.k8s.aws/"), "{lt_name}");
    let versions = clients
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(&lt_name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let data = versions.launch_template_versions()[0].launch_template_data().unwrap_or_else(|| panic!("no data"));
    assert_eq!(data.image_id(), Some(x86));
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        provider.resolved("default").and_then(|r| r.instance_profile.clone()).as_deref()
    );
    assert_eq!(data.security_group_ids(), std::slice::from_ref(&net.security_group));
    assert_eq!(data.monitoring().and_then(|m| m.enabled()), Some(true));
    let md = data.metadata_options().unwrap_or_else(|| panic!("no metadata options"));
    assert_eq!(md.http_tokens().map(|t| t.as_str()), Some("required"));
    assert_eq!(md.http_put_response_hop_limit(), Some(1));
    let bdm = &data.block_device_mappings()[0];
    assert_eq!(bdm.device_name(), Some("/dev/xvda"));
    let ebs = bdm.ebs().unwrap_or_else(|| panic!("no ebs"));
    assert_eq!(
        (ebs.volume_size(), ebs.volume_type().map(|t| t.as_str()), ebs.encrypted()),
        (Some(50), Some("gp3"), Some(true))
    );
    let user_data = kerf_aws::base64::decode(data.user_data().unwrap_or_default()).unwrap_or_default();
    let user_data = String::from_utf8(user_data).unwrap_or_default();
    let parts = parse_mime_archive(&user_data).unwrap_or_else(|e| panic!("{e}: {user_data}"));
    assert_eq!(parts[0].content_type, CONTENT_TYPE_NODECONFIG);
    assert!(parts[0].content.contains("name: launch"), "{}", parts[0].content);
    assert!(parts[0].content.contains("karpenter.sh/unregistered"), "{}", parts[0].content);
    assert!(parts[0].content.contains("karpenter.sh/nodepool=default"), "{}", parts[0].content);
    assert_eq!(parts[1].content, "#!/bin/bash\necho custom\n");

    // The same configuration reuses the template.
    let second = provider.create(&claim("default-launch2", "default", M5_LARGE_ON_DEMAND)).await;
    assert!(second.is_ok(), "{second:?}");
    let lts = clients
        .ec2
        .describe_launch_templates()
        .filters(filter("tag:karpenter.k8s.aws/cluster", "launch"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(lts.launch_templates().len(), 1);
    assert_eq!(provider.launch_templates().len(), 1);
}

#[tokio::test]
async fn spot_is_preferred_when_the_claim_allows_it() {
    let clients = clients().await;
    let (provider, _clock, _net, _nc) =
        ready_provider("spot", 22, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n").await;
    let reqs = "    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large, c5.large]}\n    \
                - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}\n";
    let launched = provider.create(&claim("default-spot", "default", reqs)).await.unwrap_or_else(|e| panic!("{e}"));
    let labels = launched.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("karpenter.sh/capacity-type").map(String::as_str), Some("spot"));
}

#[tokio::test]
async fn bottlerocket_instances_get_toml_user_data_and_two_volumes() {
    let clients = clients().await;
    let (provider, _clock, _net, _nc) = ready_provider(
        "bottlerocket",
        23,
        clients.clone(),
        "  amiSelectorTerms: [{alias: bottlerocket@latest}]\n  userData: |\n    [settings.host-containers.admin]\n    enabled = true\n",
    )
    .await;
    provider.create(&claim("default-br", "default", M5_LARGE_ON_DEMAND)).await.unwrap_or_else(|e| panic!("{e}"));
    let lts = clients
        .ec2
        .describe_launch_templates()
        .filters(filter("tag:karpenter.k8s.aws/cluster", "bottlerocket"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let name = lts.launch_templates()[0].launch_template_name().unwrap_or_default().to_string();
    let versions = clients
        .ec2
        .describe_launch_template_versions()
        .launch_template_name(&name)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let data = versions.launch_template_versions()[0].launch_template_data().unwrap_or_else(|| panic!("no data"));
    let text = String::from_utf8(kerf_aws::base64::decode(data.user_data().unwrap_or_default()).unwrap_or_default())
        .unwrap_or_default();
    let toml: toml::Table = text.parse().unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(toml["settings"]["kubernetes"]["cluster-name"].as_str(), Some("bottlerocket"));
    assert_eq!(toml["settings"]["host-containers"]["admin"]["enabled"].as_bool(), Some(true));
    let devices: Vec<(Option<&str>, Option<i32>)> =
        data.block_device_mappings().iter().map(|b| (b.device_name(), b.ebs().and_then(|e| e.volume_size()))).collect();
    assert_eq!(devices, vec![(Some("/dev/xvda"), Some(4)), (Some("/dev/xvdb"), Some(20))]);
}

#[tokio::test]
async fn a_claim_whose_node_class_is_not_ready_is_refused() {
    let clients = clients().await;
    let (provider, _clock) = provider(clients, "not-ready");
    let err = provider.create(&claim("default-x", "missing", M5_LARGE_ON_DEMAND)).await;
    assert!(matches!(err, Err(CloudError::NodeClassNotReady(_))), "{err:?}");
}

/// Makes CreateFleet answer "insufficient capacity" when its first override (the one moto
/// would launch) is an offering listed as out of capacity. The request is turned into a
/// harmless DescribeRegions so that moto launches nothing, and its answer replaced.
#[derive(Debug, Default)]
struct NoCapacity {
    unavailable: BTreeSet<(String, String)>,
    pending: Mutex<Option<(String, String, String)>>,
    /// The first override of every CreateFleet call: (instance type, zone).
    calls: Mutex<Vec<(String, String)>>,
}

impl Intercept for NoCapacity {
    fn name(&self) -> &'static str {
        "NoCapacity"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(input) = context.input().downcast_ref::<CreateFleetInput>() else { return Ok(()) };
        let first = input
            .launch_template_configs()
            .first()
            .and_then(|c| c.overrides().first())
            .ok_or("CreateFleet without overrides")?;
        let t = first.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default();
        let z = first.availability_zone().unwrap_or_default().to_string();
        let subnet = first.subnet_id().unwrap_or_default().to_string();
        self.calls.lock().map_err(|_| "poisoned")?.push((t.clone(), z.clone()));
        let ice = self.unavailable.contains(&(t.clone(), z.clone()));
        *self.pending.lock().map_err(|_| "poisoned")? = ice.then_some((t, z, subnet));
        Ok(())
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if self.pending.lock().map_err(|_| "poisoned")?.is_some() {
            let body = "Action=DescribeRegions&Version=2016-11-15";
            let req = context.request_mut();
            req.headers_mut().insert("content-length", body.len().to_string());
            *req.body_mut() = body.into();
        }
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _rc: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some((t, z, subnet)) = self.pending.lock().map_err(|_| "poisoned")?.take() else { return Ok(()) };
        let xml = format!(
            "<CreateFleetResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>ice</requestId>\
             <fleetId>fleet-00000000-0000-0000-0000-000000000000</fleetId><errorSet><item>\
             <launchTemplateAndOverrides><overrides><instanceType>{t}</instanceType><subnetId>{subnet}</subnetId>\
             <availabilityZone>{z}</availabilityZone></overrides></launchTemplateAndOverrides>\
             <lifecycle>on-demand</lifecycle><errorCode>InsufficientInstanceCapacity</errorCode>\
             <errorMessage>We currently do not have sufficient {t} capacity in the Availability Zone you requested ({z}).</errorMessage>\
             </item></errorSet><fleetInstanceSet/></CreateFleetResponse>"
        );
        let resp = context.response_mut();
        *resp.status_mut() = 200u16.try_into()?;
        resp.headers_mut().insert("content-length", xml.len().to_string());
        *resp.body_mut() = xml.into();
        Ok(())
    }
}

async fn clients_without(unavailable: &[(&str, &str)]) -> (AwsClients, Arc<NoCapacity>) {
    let config = sdk_config().await;
    let injector = Arc::new(NoCapacity {
        unavailable: unavailable.iter().map(|(t, z)| (t.to_string(), z.to_string())).collect(),
        ..NoCapacity::default()
    });
    // The Price List API closed, as for every other test here (see `common::clients`).
    let mut clients = common::clients().await;
    clients.ec2 = aws_sdk_ec2::Client::from_conf(
        aws_sdk_ec2::config::Builder::from(&config).interceptor(SharedNoCapacity(injector.clone())).build(),
    );
    (clients, injector)
}

#[derive(Debug)]
struct SharedNoCapacity(Arc<NoCapacity>);

impl Intercept for SharedNoCapacity {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.read_before_execution(context, cfg)
    }
    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.modify_before_transmit(context, rc, cfg)
    }
    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        rc: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        self.0.modify_before_deserialization(context, rc, cfg)
    }
}

#[tokio::test]
async fn insufficient_capacity_marks_the_offering_unavailable_for_three_minutes_and_the_next_one_launches() {
    let (clients, injector) = clients_without(&[("m5.large", "us-west-2a")]).await;
    let (provider, clock, _net, _nc) =
        ready_provider("ice", 24, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n").await;
    let launched =
        provider.create(&claim("default-ice", "default", M5_LARGE_ON_DEMAND)).await.unwrap_or_else(|e| panic!("{e}"));
    let labels = launched.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("topology.kubernetes.io/zone").map(String::as_str), Some("us-west-2b"));
    let calls = injector.calls.lock().map(|c| c.clone()).unwrap_or_default();
    assert_eq!(
        calls,
        vec![("m5.large".to_string(), "us-west-2a".to_string()), ("m5.large".to_string(), "us-west-2b".to_string())]
    );
    assert!(!provider.is_offering_available("m5.large", "us-west-2a", "on-demand"));
    assert!(provider.is_offering_available("m5.large", "us-west-2b", "on-demand"));
    clock.advance(std::time::Duration::from_secs(179));
    assert!(!provider.is_offering_available("m5.large", "us-west-2a", "on-demand"));
    clock.advance(std::time::Duration::from_secs(2));
    assert!(provider.is_offering_available("m5.large", "us-west-2a", "on-demand"));
}

#[tokio::test]
async fn a_claim_with_every_offering_out_of_capacity_fails_with_insufficient_capacity() {
    let (clients, injector) =
        clients_without(&[("m5.large", "us-west-2a"), ("m5.large", "us-west-2b"), ("m5.large", "us-west-2c")]).await;
    let (provider, _clock, _net, _nc) =
        ready_provider("ice-all", 25, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n").await;
    let err = provider.create(&claim("default-ice-all", "default", M5_LARGE_ON_DEMAND)).await;
    assert!(matches!(err, Err(CloudError::InsufficientCapacity(_))), "{err:?}");
    assert_eq!(injector.calls.lock().map(|c| c.len()).unwrap_or(0), 3);
    // Nothing was launched for the cluster.
    assert!(provider.list().await.unwrap_or_else(|e| panic!("{e}")).is_empty());
    // And the next attempt does not even call EC2: every offering is known to be out.
    let again = provider.create(&claim("default-ice-all2", "default", M5_LARGE_ON_DEMAND)).await;
    assert!(matches!(again, Err(CloudError::InsufficientCapacity(_))), "{again:?}");
    assert_eq!(injector.calls.lock().map(|c| c.len()).unwrap_or(0), 3);
}
