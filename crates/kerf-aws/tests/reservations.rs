//! Capacity reservations against moto extended with them (tools/moto_reservations.py: moto
//! 5.2.5 has no DescribeCapacityReservations and ignores reservation targets): a node class's
//! selector terms resolved into its status, reserved offerings with the room EC2 reports, a
//! launch into a reservation through a targeting launch template, a full reservation falling
//! through to on-demand at once, instances read back in their reservation (a capacity block's
//! warned before its end), `open` reservations, the `CapacityReservationsReady` condition and
//! the `ReservedCapacity` gate.

mod common;

use std::time::Duration;

use aws_sdk_ec2::types::{
    CapacityReservationInstancePlatform, CapacityReservationTarget, DefaultTargetCapacityType,
    FleetLaunchTemplateConfigRequest, FleetLaunchTemplateOverridesRequest, FleetLaunchTemplateSpecificationRequest,
    FleetType, InstanceMatchCriteria, LaunchTemplateCapacityReservationSpecificationRequest, RequestLaunchTemplateData,
    ResourceType, TargetCapacitySpecificationRequest,
};
use common::*;
use kerf_api::{NodePool, labels};
use kerf_aws::AwsClients;
use kerf_cloud::CloudProvider;

/// A targeted reservation of `count` instances of `instance_type` in `zone`, tagged `tags`; its id.
async fn reserve(clients: &AwsClients, instance_type: &str, zone: &str, count: i32, tags: &[(&str, &str)]) -> String {
    reserve_matching(clients, InstanceMatchCriteria::Targeted, instance_type, zone, count, tags).await
}

/// A reservation with instance match criteria `criteria` (see [`reserve`]).
async fn reserve_matching(
    clients: &AwsClients,
    criteria: InstanceMatchCriteria,
    instance_type: &str,
    zone: &str,
    count: i32,
    tags: &[(&str, &str)],
) -> String {
    let mut spec = aws_sdk_ec2::types::TagSpecification::builder().resource_type(ResourceType::CapacityReservation);
    for (k, v) in tags {
        spec = spec.tags(tag(k, v));
    }
    let out = clients
        .ec2
        .create_capacity_reservation()
        .instance_type(instance_type)
        .instance_platform(CapacityReservationInstancePlatform::LinuxUnix)
        .availability_zone(zone)
        .instance_count(count)
        .instance_match_criteria(criteria)
        .set_tag_specifications((!tags.is_empty()).then(|| vec![spec.build()]))
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateCapacityReservation: {e:?}"));
    out.capacity_reservation().and_then(|r| r.capacity_reservation_id()).unwrap_or_default().to_string()
}

async fn available(clients: &AwsClients, id: &str) -> i32 {
    let out = clients
        .ec2
        .describe_capacity_reservations()
        .capacity_reservation_ids(id)
        .send()
        .await
        .unwrap_or_else(|e| panic!("DescribeCapacityReservations: {e:?}"));
    out.capacity_reservations()[0].available_instance_count().unwrap_or(-1)
}

/// Launches an instance into reservation `id` behind kerf's back (another cluster's launch).
async fn fill(clients: &AwsClients, id: &str, instance_type: &str, subnet: &str) -> String {
    let name = format!("other-{id}");
    clients
        .ec2
        .create_launch_template()
        .launch_template_name(&name)
        .launch_template_data(
            RequestLaunchTemplateData::builder()
                .image_id("ami-04681a1dbd79675a5")
                .capacity_reservation_specification(
                    LaunchTemplateCapacityReservationSpecificationRequest::builder()
                        .capacity_reservation_target(
                            CapacityReservationTarget::builder().capacity_reservation_id(id).build(),
                        )
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateLaunchTemplate: {e:?}"));
    let out = clients
        .ec2
        .create_fleet()
        .r#type(FleetType::Instant)
        .target_capacity_specification(
            TargetCapacitySpecificationRequest::builder()
                .total_target_capacity(1)
                .default_target_capacity_type(DefaultTargetCapacityType::OnDemand)
                .build(),
        )
        .launch_template_configs(
            FleetLaunchTemplateConfigRequest::builder()
                .launch_template_specification(
                    FleetLaunchTemplateSpecificationRequest::builder()
                        .launch_template_name(&name)
                        .version("$Latest")
                        .build(),
                )
                .overrides(
                    FleetLaunchTemplateOverridesRequest::builder()
                        .instance_type(instance_type.into())
                        .subnet_id(subnet)
                        .availability_zone("us-west-2a")
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateFleet: {e:?}"));
    out.instances()[0].instance_ids()[0].clone()
}

fn pool() -> NodePool {
    serde_yaml_ng::from_str(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      \
         nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

const M5_RESERVED_OR_ON_DEMAND: &str = "    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n    \
                                        - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}\n";

fn label<'a>(claim: &'a kerf_api::NodeClaim, key: &str) -> Option<&'a str> {
    claim.metadata.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str)
}

#[tokio::test]
async fn a_selected_reservation_is_resolved_into_the_class_status_and_launched_into() {
    let clients = clients().await;
    let selected = reserve(&clients, "m5.large", "us-west-2a", 1, &[("team", "resolve")]).await;
    let _other = reserve(&clients, "m5.large", "us-west-2a", 1, &[("team", "someone-else")]).await;
    let by_id = reserve(&clients, "c5.large", "us-west-2b", 2, &[]).await;
    let extra = format!(
        "  amiSelectorTerms: [{{alias: al2023@latest}}]\n  capacityReservationSelectorTerms:\n    \
         - tags: {{team: resolve}}\n    - id: {by_id}\n      ownerID: \"123456789012\"\n    - id: cr-0000000000000dead\n"
    );
    let (provider, _clock, _net, nc) = ready_provider("reserve", 71, clients.clone(), &extra).await;

    // The class status lists exactly the selected reservations, as Karpenter writes them.
    let status = nc.status.clone().unwrap_or_default();
    let mut listed: Vec<(String, String, String, String, String)> = status
        .capacity_reservations
        .iter()
        .map(|r| {
            (
                r.id.clone(),
                r.instance_type.clone().unwrap_or_default(),
                r.availability_zone.clone().unwrap_or_default(),
                r.reservation_type.clone().unwrap_or_default(),
                r.state.clone().unwrap_or_default(),
            )
        })
        .collect();
    listed.sort();
    let mut want = vec![
        (selected.clone(), "m5.large".into(), "us-west-2a".into(), "default".into(), "active".into()),
        (by_id.clone(), "c5.large".into(), "us-west-2b".into(), "default".into(), "active".into()),
    ];
    want.sort();
    assert_eq!(listed, want);
    let first = &status.capacity_reservations[0];
    assert_eq!(first.owner_id.as_deref(), Some("123456789012"));
    assert_eq!(first.instance_match_criteria.as_deref(), Some("targeted"));

    // m5.large gains a reserved offering in us-west-2a with the reservation's room, at $0.
    let types = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    let m5 = types.iter().find(|t| t.name == "m5.large").unwrap_or_else(|| panic!("no m5.large"));
    let reserved: Vec<_> = m5.offerings.iter().filter(|o| o.capacity_type == "reserved").collect();
    assert_eq!(reserved.len(), 1, "{:?}", m5.offerings);
    assert_eq!(reserved[0].zone, "us-west-2a");
    assert!(reserved[0].available);
    assert_eq!(reserved[0].price, 0.0);
    assert_eq!(reserved[0].reservation.as_ref().map(|r| (r.id.as_str(), r.remaining)), Some((selected.as_str(), 1)));

    // A claim that allows reserved capacity launches into it first, labelled as Karpenter does.
    let launched = provider
        .create(&claim("default-reserved1", "default", M5_RESERVED_OR_ON_DEMAND))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&launched, labels::CAPACITY_TYPE), Some("reserved"));
    assert_eq!(label(&launched, labels::CAPACITY_RESERVATION_ID), Some(selected.as_str()));
    assert_eq!(label(&launched, labels::CAPACITY_RESERVATION_TYPE), Some("default"));
    assert_eq!(label(&launched, labels::ZONE), Some("us-west-2a"));
    assert_eq!(available(&clients, &selected).await, 0, "EC2 counts the instance in the reservation");
    assert_eq!(provider.reservation_room(&selected), Some(0));

    // Its launch template targets the reservation.
    let lts = clients
        .ec2
        .describe_launch_templates()
        .filters(filter("tag:karpenter.k8s.aws/cluster", "reserve"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let mut targets = Vec::new();
    for lt in lts.launch_templates() {
        let versions = clients
            .ec2
            .describe_launch_template_versions()
            .launch_template_name(lt.launch_template_name().unwrap_or_default())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e:?}"));
        let data = versions.launch_template_versions()[0].launch_template_data().cloned();
        targets.extend(data.and_then(|d| d.capacity_reservation_specification().cloned()).and_then(|s| {
            s.capacity_reservation_target().and_then(|t| t.capacity_reservation_id()).map(str::to_string)
        }));
    }
    assert_eq!(targets, vec![selected.clone()]);

    // Now full: the next claim is on-demand, without calling EC2 for the reservation.
    let second = provider
        .create(&claim("default-reserved2", "default", M5_RESERVED_OR_ON_DEMAND))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&second, labels::CAPACITY_TYPE), Some("on-demand"));
    assert_eq!(label(&second, labels::CAPACITY_RESERVATION_ID), None);
}

#[tokio::test]
async fn a_reservation_found_full_falls_through_to_on_demand_at_once_until_described_again() {
    let clients = clients().await;
    let id = reserve(&clients, "m5.large", "us-west-2a", 1, &[("team", "full")]).await;
    let (provider, clock, net, nc) = ready_provider(
        "reserve-full",
        72,
        clients.clone(),
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  capacityReservationSelectorTerms: [{tags: {team: full}}]\n",
    )
    .await;
    assert_eq!(provider.reservation_room(&id), Some(1));
    // Another launch takes the reservation's only instance after kerf described it.
    let subnet_a = net.subnets.iter().find(|(_, z)| z == "us-west-2a").map(|(s, _)| s.clone()).unwrap_or_default();
    let theirs = fill(&clients, &id, "m5.large", &subnet_a).await;
    assert_eq!(available(&clients, &id).await, 0);

    let launched = provider
        .create(&claim("default-full1", "default", M5_RESERVED_OR_ON_DEMAND))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&launched, labels::CAPACITY_TYPE), Some("on-demand"), "fell through to on-demand");
    assert_eq!(label(&launched, labels::CAPACITY_RESERVATION_ID), None);
    assert_eq!(provider.reservation_room(&id), Some(0), "the reservation is marked full");
    let offered = |types: &[std::sync::Arc<kerf_api::InstanceType>]| {
        types
            .iter()
            .flat_map(|t| t.offerings.iter())
            .find(|o| o.reservation.as_ref().is_some_and(|r| r.id == id))
            .map(|o| o.available)
    };
    let types = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(offered(&types), Some(false));

    // The other instance goes; the next describe (after a minute) offers the room again.
    clients.ec2.terminate_instances().instance_ids(&theirs).send().await.unwrap_or_else(|e| panic!("{e:?}"));
    let types = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(offered(&types), Some(false), "not described again within the minute");
    clock.advance(Duration::from_secs(61));
    let types = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(offered(&types), Some(true));
}

#[tokio::test]
async fn a_capacity_block_launches_as_one_and_is_labelled_capacity_block() {
    let clients = clients().await;
    let id = reserve(
        &clients,
        "m5.large",
        "us-west-2b",
        1,
        &[("team", "block"), ("kerf.test/reservation-type", "capacity-block")],
    )
    .await;
    let (provider, _clock, _net, nc) = ready_provider(
        "reserve-block",
        73,
        clients.clone(),
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  capacityReservationSelectorTerms: [{tags: {team: block}}]\n",
    )
    .await;
    let status = nc.status.clone().unwrap_or_default();
    assert_eq!(status.capacity_reservations[0].reservation_type.as_deref(), Some("capacity-block"));
    let only_reserved = "    - {key: karpenter.sh/capacity-type, operator: In, values: [reserved]}\n";
    let launched =
        provider.create(&claim("default-block1", "default", only_reserved)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&launched, labels::CAPACITY_TYPE), Some("reserved"));
    assert_eq!(label(&launched, labels::CAPACITY_RESERVATION_ID), Some(id.as_str()));
    assert_eq!(label(&launched, labels::CAPACITY_RESERVATION_TYPE), Some("capacity-block"));
    assert_eq!(label(&launched, labels::INSTANCE_TYPE), Some("m5.large"));
    // A reserved-only claim with the block full has nowhere to go.
    let err = provider.create(&claim("default-block2", "default", only_reserved)).await;
    assert!(matches!(err, Err(kerf_cloud::CloudError::InsufficientCapacity(_))), "{err:?}");
}

#[tokio::test]
async fn an_instance_in_a_capacity_block_is_read_back_in_it_and_warned_forty_minutes_before_its_end() {
    let clients = clients().await;
    let now_secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_else(|e| panic!("{e}")).as_secs()
            as i64;
    let end_secs = now_secs + 2 * 3600;
    let spec = aws_sdk_ec2::types::TagSpecification::builder()
        .resource_type(ResourceType::CapacityReservation)
        .tags(tag("team", "ending"))
        .tags(tag("kerf.test/reservation-type", "capacity-block"))
        .build();
    let out = clients
        .ec2
        .create_capacity_reservation()
        .instance_type("m5.large")
        .instance_platform(CapacityReservationInstancePlatform::LinuxUnix)
        .availability_zone("us-west-2a")
        .instance_count(1)
        .instance_match_criteria(InstanceMatchCriteria::Targeted)
        .end_date(aws_sdk_ec2::primitives::DateTime::from_secs(end_secs))
        .end_date_type(aws_sdk_ec2::types::EndDateType::Limited)
        .tag_specifications(spec)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateCapacityReservation: {e:?}"));
    let id = out.capacity_reservation().and_then(|r| r.capacity_reservation_id()).unwrap_or_default().to_string();
    let (provider, clock, _net, nc) = ready_provider(
        "reserve-ending",
        74,
        clients.clone(),
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  capacityReservationSelectorTerms: [{tags: {team: ending}}]\n",
    )
    .await;
    let end = nc.status.as_ref().and_then(|s| s.capacity_reservations.first()).and_then(|r| r.end_time.clone());
    assert_eq!(end.map(|t| t.0.as_second()), Some(end_secs), "the block's end is in the class status");
    clock.set(kerf_cloud::Timestamp::from_second(now_secs).unwrap_or_else(|e| panic!("{e}")));

    let in_block = provider
        .create(&claim("default-ending1", "default", M5_RESERVED_OR_ON_DEMAND))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let outside = provider
        .create(&claim("default-ending2", "default", M5_RESERVED_OR_ON_DEMAND))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(available(&clients, &id).await, 0, "EC2 counts the instance in the block");
    let in_pid = in_block.provider_id().unwrap_or_default().to_string();
    let out_pid = outside.provider_id().unwrap_or_default().to_string();

    // What EC2 says of each instance is what the launch said: the block's id and type, or none.
    let got = provider.get(&in_pid).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&got, labels::CAPACITY_TYPE), Some("reserved"));
    assert_eq!(label(&got, labels::CAPACITY_RESERVATION_ID), Some(id.as_str()));
    assert_eq!(label(&got, labels::CAPACITY_RESERVATION_TYPE), Some("capacity-block"));
    let listed = provider.list().await.unwrap_or_else(|e| panic!("{e}"));
    let other =
        listed.iter().find(|c| c.provider_id() == Some(out_pid.as_str())).unwrap_or_else(|| panic!("{listed:?}"));
    assert_eq!(label(other, labels::CAPACITY_TYPE), Some("on-demand"));
    assert_eq!(label(other, labels::CAPACITY_RESERVATION_ID), None);
    assert_eq!(label(other, labels::CAPACITY_RESERVATION_TYPE), None);
    let mine = listed.iter().find(|c| c.provider_id() == Some(in_pid.as_str())).unwrap_or_else(|| panic!("{listed:?}"));
    assert_eq!(label(mine, labels::CAPACITY_RESERVATION_ID), Some(id.as_str()));

    // Two hours before the end nothing is due; from forty minutes before it, the block's
    // instance (only it) is warned once, EC2 reclaiming it thirty minutes before the end.
    assert_eq!(provider.interruptions().await.unwrap_or_else(|e| panic!("{e}")), Vec::new());
    clock.advance(Duration::from_secs(79 * 60));
    assert_eq!(provider.interruptions().await.unwrap_or_else(|e| panic!("{e}")), Vec::new(), "41 minutes before");
    clock.advance(Duration::from_secs(60));
    let notices = provider.interruptions().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        notices,
        vec![kerf_cloud::InterruptionNotice {
            provider_id: in_pid.clone(),
            kind: kerf_cloud::InterruptionKind::CapacityBlockEnding,
            terminates_at: Some(
                kerf_cloud::Timestamp::from_second(end_secs - 30 * 60).unwrap_or_else(|e| panic!("{e}"))
            ),
        }]
    );
    assert_eq!(provider.interruptions().await.unwrap_or_else(|e| panic!("{e}")), Vec::new(), "warned once");
    // Nothing launches into the block any more, even before the class is resolved again: its
    // drained node's replacement goes elsewhere.
    let types = provider.instance_types(&pool(), Some(&nc)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(types.iter().flat_map(|t| t.offerings.iter()).all(|o| o.reservation.as_ref().is_none_or(|r| r.id != id)));
}

#[tokio::test]
async fn with_the_reserved_capacity_gate_off_no_reservation_is_resolved_offered_or_launched_into() {
    let clients = clients().await;
    let id = reserve(&clients, "m5.large", "us-west-2a", 1, &[("team", "gate-off")]).await;
    let extra = "  amiSelectorTerms: [{alias: al2023@latest}]\n  capacityReservationSelectorTerms: [{tags: {team: gate-off}}]\n";
    // A class resolved with the gate on lists the reservation in its status...
    let (on, _clock, _net, resolved_on) = ready_provider("reserve-gate-off", 75, clients.clone(), extra).await;
    assert_eq!(resolved_on.status.as_ref().map(|s| s.capacity_reservations.len()), Some(1));
    drop(on);
    // ...a provider with the gate off offers nothing of it, even from that status,
    let (off, _clock) = provider(clients.clone(), "reserve-gate-off");
    off.set_reserved_capacity(false);
    let types = off.instance_types(&pool(), Some(&resolved_on)).await.unwrap_or_else(|e| panic!("{e}"));
    assert!(types.iter().flat_map(|t| t.offerings.iter()).all(|o| o.capacity_type != "reserved"));
    // resolves the class without it,
    let nc = node_class("default", "reserve-gate-off", &format!("  role: reserve-gate-off-node\n{extra}"));
    let r = off.reconcile_node_class(&nc).await;
    assert!(r.is_ready(), "{}", r.not_ready_reason());
    assert_eq!(r.status().capacity_reservations, Vec::new());
    // and launches a claim that allows reserved capacity on-demand, leaving the reservation be.
    let launched = off
        .create(&claim("default-gate-off1", "default", M5_RESERVED_OR_ON_DEMAND))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&launched, labels::CAPACITY_TYPE), Some("on-demand"));
    assert_eq!(label(&launched, labels::CAPACITY_RESERVATION_ID), None);
    assert_eq!(available(&clients, &id).await, 1);
}

#[tokio::test]
async fn open_reservations_take_only_the_launches_karpenter_lets_them() {
    let clients = clients().await;
    let unselected = reserve_matching(&clients, InstanceMatchCriteria::Open, "m5.xlarge", "us-west-2a", 2, &[]).await;
    let selected =
        reserve_matching(&clients, InstanceMatchCriteria::Open, "c5.large", "us-west-2a", 1, &[("team", "open")]).await;
    let (provider, _clock, _net, nc) = ready_provider(
        "reserve-open",
        76,
        clients.clone(),
        "  amiSelectorTerms: [{alias: al2023@latest}]\n  capacityReservationSelectorTerms: [{tags: {team: open}}]\n",
    )
    .await;
    // The condition Karpenter sets once the class's reservations are read.
    let status = nc.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().find(|c| c.type_ == "CapacityReservationsReady");
    assert_eq!(
        ready.map(|c| (c.status.as_str(), c.reason.as_deref())),
        Some(("True", Some("CapacityReservationsReady")))
    );
    let listed: Vec<(&str, Option<&str>)> =
        status.capacity_reservations.iter().map(|r| (r.id.as_str(), r.instance_match_criteria.as_deref())).collect();
    assert_eq!(listed, vec![(selected.as_str(), Some("open"))]);

    // A selected open reservation is launched into by targeting it, as a targeted one is.
    let c5 = "    - {key: node.kubernetes.io/instance-type, operator: In, values: [c5.large]}\n    \
              - {key: karpenter.sh/capacity-type, operator: In, values: [reserved, on-demand]}\n";
    let reserved = provider.create(&claim("default-open1", "default", c5)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&reserved, labels::CAPACITY_RESERVATION_ID), Some(selected.as_str()));
    assert_eq!(available(&clients, &selected).await, 0);

    // An on-demand launch of a class that selects reservations stays out of open ones it did
    // not select (its template says CapacityReservationPreference none).
    let m5 = "    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.xlarge]}\n    \
              - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}\n    \
              - {key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a]}\n";
    let od = provider.create(&claim("default-open2", "default", m5)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&od, labels::CAPACITY_TYPE), Some("on-demand"));
    assert_eq!(available(&clients, &unselected).await, 2, "the unselected open reservation is untouched");
    let got = provider.get(od.provider_id().unwrap_or_default()).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&got, labels::CAPACITY_RESERVATION_ID), None);

    // So does one of a class that selects none: with the ReservedCapacity gate every spot and
    // on-demand launch asks for no reservation, as Karpenter's do.
    let (plain, _clock, _net, _nc) =
        ready_provider("reserve-open-plain", 77, clients.clone(), "  amiSelectorTerms: [{alias: al2023@latest}]\n")
            .await;
    let od = plain.create(&claim("default-open3", "default", m5)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&od, labels::CAPACITY_TYPE), Some("on-demand"));
    assert_eq!(available(&clients, &unselected).await, 2, "the open reservation is untouched");

    // Without the gate the template says nothing and EC2 keeps its default: an open reservation
    // of the type and zone takes the instance, which kerf reads back as on-demand, as Karpenter
    // does without the gate.
    let (off, _clock) = common::provider(clients.clone(), "reserve-open-plain");
    off.set_reserved_capacity(false);
    let nc = node_class(
        "default",
        "reserve-open-plain",
        "  role: reserve-open-plain-node\n  amiSelectorTerms: [{alias: al2023@latest}]\n",
    );
    let r = off.reconcile_node_class(&nc).await;
    assert!(r.is_ready(), "{}", r.not_ready_reason());
    let od = off.create(&claim("default-open4", "default", m5)).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&od, labels::CAPACITY_TYPE), Some("on-demand"), "launched as on-demand");
    assert_eq!(available(&clients, &unselected).await, 1, "EC2 put it in the open reservation");
    let got = off.get(od.provider_id().unwrap_or_default()).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(label(&got, labels::CAPACITY_TYPE), Some("on-demand"));
    assert_eq!(label(&got, labels::CAPACITY_RESERVATION_ID), None);
}
