//! Capacity reservations in the simulated cloud: selection into the node class's status,
//! reserved offerings with their room, launches into them before spot, the fall-through when
//! one is full, capacity blocks warned and reclaimed ahead of their end, and drift when a
//! reservation stops being selected, the `CapacityReservationsReady` condition, and the
//! `ReservedCapacity` gate turned off.

use std::sync::Arc;
use std::time::Duration;

use kerf_api::{EC2NodeClass, NodeClaim, NodePool, labels};
use kerf_cloud::sim::{SimConfig, SimProvider};
use kerf_cloud::{Clock, CloudProvider, InterruptionKind, ManualClock, block_on};

/// Two custom types in two zones; an ODCR of 2 `large` in us-west-2a and a capacity block of 1
/// `large` in us-west-2b from 1h to 3h at $0.05/h.
const CLOUD: &str = "
zones: [us-west-2a, us-west-2b]
instanceTypes:
  - {name: small, capacity: {cpu: '2', memory: 4Gi, pods: '20'}, price: 0.10}
  - {name: large, capacity: {cpu: '8', memory: 32Gi, pods: '50'}, price: 0.30}
capacityReservations:
  - {id: cr-odcr, instanceType: large, zone: us-west-2a, count: 2, tags: {team: web}}
  - {id: cr-block, instanceType: large, zone: us-west-2b, type: capacity-block, start: 1h, end: 3h,
     price: 0.05, tags: {team: ml}}
";

fn provider() -> (SimProvider, ManualClock) {
    let clock = ManualClock::new();
    let config: SimConfig = serde_yaml_ng::from_str(CLOUD).unwrap();
    (SimProvider::new(config, Arc::new(clock.clone())).unwrap(), clock)
}

fn class(terms: &str) -> EC2NodeClass {
    serde_yaml_ng::from_str(&format!(
        "metadata: {{name: default}}\nspec:\n  role: R\n  subnetSelectorTerms: [{{tags: {{a: b}}}}]\n  \
         securityGroupSelectorTerms: [{{tags: {{a: b}}}}]\n  amiSelectorTerms: [{{alias: al2023@latest}}]\n  \
         capacityReservationSelectorTerms: {terms}\n"
    ))
    .unwrap()
}

/// Resolves the class and keeps its status on it, as the node class controller does.
fn resolve(p: &SimProvider, c: &mut EC2NodeClass) -> Option<Duration> {
    let r = block_on(p.resolve_node_class(c)).unwrap();
    c.status = Some(r.status);
    r.recheck_after
}

fn claim(name: &str, capacity_types: &[&str]) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types},
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["small", "large"]}],
                 "resources": {"requests": {"cpu": "4"}},
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap()
}

fn label(c: &NodeClaim, key: &str) -> Option<String> {
    c.metadata.labels.as_ref().and_then(|l| l.get(key).cloned())
}

const ALL: &[&str] = &["reserved", "spot", "on-demand"];

#[test]
fn selected_reservations_are_listed_in_the_class_status_as_karpenter_writes_them() {
    let (p, clock) = provider();
    let mut c = class("[{tags: {team: web}}, {id: cr-block}]");
    // The block starts at 1h: only the ODCR is active, and the class is resolved again then.
    assert_eq!(resolve(&p, &mut c), Some(Duration::from_secs(3600)));
    let status = c.status.clone().unwrap();
    let ids: Vec<&str> = status.capacity_reservations.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["cr-odcr"]);
    let odcr = &status.capacity_reservations[0];
    assert_eq!(odcr.instance_type.as_deref(), Some("large"));
    assert_eq!(odcr.availability_zone.as_deref(), Some("us-west-2a"));
    assert_eq!(odcr.owner_id.as_deref(), Some("123456789012"));
    assert_eq!(odcr.instance_match_criteria.as_deref(), Some("targeted"));
    assert_eq!(odcr.reservation_type.as_deref(), Some("default"));
    assert_eq!(odcr.state.as_deref(), Some("active"));
    assert_eq!(odcr.end_time, None);

    clock.advance(Duration::from_secs(3600));
    // Next change: the block drains 40 minutes before its end at 3h.
    assert_eq!(resolve(&p, &mut c), Some(Duration::from_secs(3600 + 20 * 60)));
    let block = c.status.as_ref().unwrap().capacity_reservations.iter().find(|r| r.id == "cr-block").cloned().unwrap();
    assert_eq!(block.reservation_type.as_deref(), Some("capacity-block"));
    let end = block.end_time.unwrap().0;
    assert_eq!(end.as_millisecond() - clock.now().as_millisecond(), 2 * 3600 * 1000);
    clock.advance(Duration::from_secs(3600 + 20 * 60));
    resolve(&p, &mut c);
    let states: Vec<_> = c.status.unwrap().capacity_reservations.iter().map(|r| r.state.clone().unwrap()).collect();
    assert_eq!(states, ["active", "expiring"]);
}

#[test]
fn a_reservation_is_filled_before_spot_and_a_full_one_falls_through_at_once() {
    let (p, _) = provider();
    let mut c = class("[{id: cr-odcr}]");
    resolve(&p, &mut c);
    let pool: NodePool = serde_json::from_value(serde_json::json!({"metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}}))
    .unwrap();
    let reserved = |types: &[Arc<kerf_api::InstanceType>]| -> Vec<(String, u32, bool)> {
        types
            .iter()
            .flat_map(|t| t.offerings.iter())
            .filter_map(|o| o.reservation.as_ref().map(|r| (r.id.clone(), r.remaining, o.available)))
            .collect()
    };
    assert_eq!(reserved(&block_on(p.instance_types(&pool, Some(&c))).unwrap()), [("cr-odcr".to_string(), 2, true)]);

    let mut launched = Vec::new();
    for i in 0..3 {
        launched.push(block_on(p.create(&claim(&format!("c{i}"), ALL))).unwrap());
    }
    for c in &launched[..2] {
        assert_eq!(label(c, labels::CAPACITY_TYPE).as_deref(), Some("reserved"));
        assert_eq!(label(c, labels::CAPACITY_RESERVATION_ID).as_deref(), Some("cr-odcr"));
        assert_eq!(label(c, labels::CAPACITY_RESERVATION_TYPE).as_deref(), Some("default"));
        assert_eq!(label(c, labels::ZONE).as_deref(), Some("us-west-2a"));
    }
    // The third: the reservation is full, so the cheapest spot offering, with no reservation labels.
    assert_eq!(label(&launched[2], labels::CAPACITY_TYPE).as_deref(), Some("spot"));
    assert_eq!(label(&launched[2], labels::CAPACITY_RESERVATION_ID), None);
    assert_eq!(reserved(&block_on(p.instance_types(&pool, Some(&c))).unwrap()), [("cr-odcr".to_string(), 0, false)]);
    let prices: Vec<f64> = p.instances().iter().map(|i| i.price).collect();
    assert_eq!(prices[..2], [0.0, 0.0], "an ODCR is prepaid by default");

    // A reserved instance goes: its room is free again.
    block_on(p.delete(&launched[0])).unwrap();
    let again = block_on(p.create(&claim("c3", ALL))).unwrap();
    assert_eq!(label(&again, labels::CAPACITY_RESERVATION_ID).as_deref(), Some("cr-odcr"));
}

#[test]
fn a_pool_that_does_not_allow_reserved_never_launches_into_a_reservation() {
    let (p, _) = provider();
    let mut c = class("[{id: cr-odcr}]");
    resolve(&p, &mut c);
    let launched = block_on(p.create(&claim("a", &["spot", "on-demand"]))).unwrap();
    assert_eq!(label(&launched, labels::CAPACITY_TYPE).as_deref(), Some("spot"));
    // A class that selects nothing has no reserved offerings, whatever the pool allows.
    let (p, _) = provider();
    let mut c = class("[{id: cr-other}]");
    resolve(&p, &mut c);
    let launched = block_on(p.create(&claim("a", ALL))).unwrap();
    assert_eq!(label(&launched, labels::CAPACITY_TYPE).as_deref(), Some("spot"));
}

#[test]
fn a_capacity_block_is_warned_ahead_of_its_end_and_reclaimed_before_it() {
    let (p, clock) = provider();
    let mut c = class("[{tags: {team: ml}}]");
    clock.advance(Duration::from_secs(3600));
    resolve(&p, &mut c);
    let launched = block_on(p.create(&claim("a", ALL))).unwrap();
    assert_eq!(label(&launched, labels::CAPACITY_RESERVATION_TYPE).as_deref(), Some("capacity-block"));
    assert_eq!(p.instances()[0].price, 0.05, "priced as declared");
    assert!(block_on(p.interruptions()).unwrap().is_empty());
    // 2h20m: 10 minutes before EC2 starts reclaiming (30 minutes before the end at 3h).
    clock.advance(Duration::from_secs(80 * 60));
    let notices = block_on(p.interruptions()).unwrap();
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].kind, InterruptionKind::CapacityBlockEnding);
    let reclaim = notices[0].terminates_at.unwrap();
    assert_eq!(reclaim.as_millisecond() - clock.now().as_millisecond(), 10 * 60 * 1000);
    assert!(block_on(p.interruptions()).unwrap().is_empty(), "warned once");
    // No new launch goes into a draining block.
    let other = block_on(p.create(&claim("b", ALL))).unwrap();
    assert_eq!(label(&other, labels::CAPACITY_TYPE).as_deref(), Some("spot"));
    clock.advance(Duration::from_secs(10 * 60));
    assert!(p.instances()[0].terminated);
    assert_eq!(p.instances()[0].terminated_at, Some(reclaim));
}

#[test]
fn a_reservation_no_longer_selected_drifts_its_nodes() {
    let (p, _) = provider();
    let mut c = class("[{id: cr-odcr}]");
    resolve(&p, &mut c);
    let launched = block_on(p.create(&claim("a", ALL))).unwrap();
    let spot = block_on(p.create(&claim("b", &["spot"]))).unwrap();
    assert_eq!(block_on(p.is_drifted(&launched, Some(&c))).unwrap(), None);
    let mut changed = class("[{tags: {team: nobody}}]");
    changed.metadata.annotations = c.metadata.annotations.clone();
    resolve(&p, &mut changed);
    // The class's own hash drift aside (its spec changed), the reservation drift is named.
    let drift = kerf_cloud::sim::reservations::reservation_drift(&launched, &changed);
    assert_eq!(drift.as_deref(), Some("CapacityReservationDrift"));
    assert_eq!(kerf_cloud::sim::reservations::reservation_drift(&spot, &changed), None);
}

#[test]
fn a_reservation_of_an_unknown_type_or_zone_is_refused_naming_the_field() {
    let err = |extra: &str| {
        let yaml = format!(
            "zones: [us-west-2a]\ninstanceTypes:\n  - {{name: small, capacity: {{cpu: '2'}}, price: 0.1}}\n\
             capacityReservations:\n  - {extra}\n"
        );
        let config: SimConfig = serde_yaml_ng::from_str(&yaml).unwrap();
        SimProvider::new(config, Arc::new(ManualClock::new())).err().unwrap().to_string()
    };
    assert_eq!(
        err("{id: cr-1, instanceType: huge, zone: us-west-2a}"),
        "cloud.capacityReservations[0].instanceType: unknown instance type \"huge\" in region us-west-2"
    );
    assert_eq!(
        err("{id: cr-1, instanceType: small, zone: us-west-2c}"),
        "cloud.capacityReservations[0].zone: zone \"us-west-2c\" is not one of the cloud's zones (us-west-2a)"
    );
}

fn reservations_ready(c: &EC2NodeClass) -> Option<String> {
    let conditions = &c.status.as_ref()?.conditions;
    conditions.iter().find(|x| x.type_ == "CapacityReservationsReady").map(|x| x.status.clone())
}

#[test]
fn the_class_reads_capacity_reservations_ready_and_the_gate_off_turns_reservations_off() {
    let (p, _) = provider();
    let mut c = class("[{id: cr-odcr}]");
    resolve(&p, &mut c);
    assert_eq!(reservations_ready(&c).as_deref(), Some("True"));
    let types = block_on(p.instance_types(&pool(), Some(&c))).unwrap();
    assert!(types.iter().flat_map(|t| t.offerings.iter()).any(|o| o.capacity_type == "reserved"));
    let reserved = block_on(p.create(&claim("c1", ALL))).unwrap();
    assert_eq!(label(&reserved, labels::CAPACITY_RESERVATION_ID).as_deref(), Some("cr-odcr"));

    // Karpenter's ReservedCapacity gate off: nothing listed, offered or launched into, and the
    // node already in the reservation does not drift for it.
    let (off, _) = provider();
    off.set_reserved_capacity(false);
    let mut c = class("[{id: cr-odcr}]");
    resolve(&off, &mut c);
    assert_eq!(c.status.as_ref().unwrap().capacity_reservations, Vec::new());
    assert_eq!(reservations_ready(&c), None, "no condition without the gate");
    let types = block_on(off.instance_types(&pool(), Some(&c))).unwrap();
    assert!(types.iter().flat_map(|t| t.offerings.iter()).all(|o| o.capacity_type != "reserved"));
    let launched = block_on(off.create(&claim("c2", ALL))).unwrap();
    assert_eq!(label(&launched, labels::CAPACITY_TYPE).as_deref(), Some("spot"));
    assert_eq!(block_on(off.is_drifted(&reserved, Some(&c))).unwrap(), None);
}

fn pool() -> NodePool {
    serde_json::from_value(serde_json::json!({"metadata": {"name": "default"},
        "spec": {"template": {"spec": {"requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}}}}))
    .unwrap()
}

fn condition(c: &EC2NodeClass, type_: &str) -> (String, Option<String>, Option<String>) {
    let found = c.status.as_ref().and_then(|s| s.conditions.iter().find(|x| x.type_ == type_)).unwrap();
    (found.status.clone(), found.reason.clone(), found.message.clone())
}

#[test]
fn with_the_gate_reservations_that_cannot_be_read_hold_the_class_ready_back_naming_them() {
    let (p, _) = provider();
    p.fail_reservation_reads(Some("ec2:DescribeCapacityReservations: Throttling".to_string()));
    let mut c = class("[{id: cr-odcr}]");
    resolve(&p, &mut c);
    let failed = (
        "Unknown".to_string(),
        Some("CapacityReservationsResolutionFailed".to_string()),
        Some("ec2:DescribeCapacityReservations: Throttling".to_string()),
    );
    assert_eq!(condition(&c, "CapacityReservationsReady"), failed);
    assert_eq!(condition(&c, "Ready"), failed, "Ready counts CapacityReservationsReady with the gate");

    // Read once, a later failure keeps the class Ready with the reservations it listed.
    p.fail_reservation_reads(None);
    resolve(&p, &mut c);
    assert_eq!(condition(&c, "Ready").0, "True");
    p.fail_reservation_reads(Some("throttled".to_string()));
    resolve(&p, &mut c);
    assert_eq!(condition(&c, "Ready").0, "True");
    assert_eq!(condition(&c, "CapacityReservationsReady").0, "True");
    let ids: Vec<&str> = c.status.as_ref().unwrap().capacity_reservations.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["cr-odcr"]);

    // Without the gate reservations are not read, and Ready does not wait for them.
    let (off, _) = provider();
    off.set_reserved_capacity(false);
    off.fail_reservation_reads(Some("throttled".to_string()));
    let mut c = class("[{id: cr-odcr}]");
    resolve(&off, &mut c);
    assert_eq!(condition(&c, "Ready").0, "True");
    assert_eq!(reservations_ready(&c), None);
}

#[test]
fn an_interruptible_reservation_is_labelled_and_its_reclaim_interrupts_its_nodes_like_spot() {
    let clock = ManualClock::new();
    let yaml = format!(
        "{CLOUD}  - {{id: cr-lent, instanceType: small, zone: us-west-2a, count: 1, interruptible: true, \
         reclaimAt: 2h, tags: {{team: batch}}}}\n"
    );
    let config: SimConfig = serde_yaml_ng::from_str(&yaml).unwrap();
    let p = SimProvider::new(config, Arc::new(clock.clone())).unwrap();
    let mut c = class("[{tags: {team: batch}}, {id: cr-odcr}]");
    resolve(&p, &mut c);
    let listed = &c.status.as_ref().unwrap().capacity_reservations;
    let flags: Vec<(&str, Option<bool>)> = listed.iter().map(|r| (r.id.as_str(), r.interruptible)).collect();
    assert_eq!(flags, [("cr-odcr", None), ("cr-lent", Some(true))]);

    let small = |name: &str| -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"requirements": [
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ALL},
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["small"]}],
                     "resources": {"requests": {"cpu": "1"}},
                     "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
        }))
        .unwrap()
    };
    let lent = block_on(p.create(&small("a"))).unwrap();
    assert_eq!(label(&lent, labels::CAPACITY_RESERVATION_ID).as_deref(), Some("cr-lent"));
    assert_eq!(label(&lent, labels::CAPACITY_RESERVATION_INTERRUPTIBLE).as_deref(), Some("true"));
    let odcr = block_on(p.create(&claim("b", ALL))).unwrap();
    assert_eq!(label(&odcr, labels::CAPACITY_RESERVATION_INTERRUPTIBLE).as_deref(), Some("false"));

    // A claim that requires interruptible reserved capacity only takes an offering of it.
    let types = block_on(p.instance_types(&pool(), Some(&c))).unwrap();
    let mut reqs = kerf_api::Requirements::new();
    reqs.add(labels::CAPACITY_RESERVATION_INTERRUPTIBLE, kerf_api::Requirement::single("true".to_string()));
    let allowed: Vec<String> = types
        .iter()
        .flat_map(|t| t.offerings.iter())
        .filter(|o| kerf_api::launch::offering_allowed(&reqs, o))
        .filter_map(|o| o.reservation.as_ref().map(|r| r.id.clone()))
        .collect();
    assert_eq!(allowed, ["cr-lent"]);

    assert!(block_on(p.interruptions()).unwrap().is_empty());
    clock.advance(Duration::from_secs(2 * 3600));
    let notices = block_on(p.interruptions()).unwrap();
    assert_eq!(notices.len(), 1, "only the interruptible reservation's node: {notices:?}");
    assert_eq!(notices[0].kind, InterruptionKind::CapacityReservationInterruption);
    assert_eq!(notices[0].provider_id, lent.status.as_ref().unwrap().provider_id.clone().unwrap());
    let reclaim = notices[0].terminates_at.unwrap();
    assert_eq!(reclaim.as_millisecond() - clock.now().as_millisecond(), 2 * 60 * 1000, "two minutes' notice");
    // Reclaimed, it takes no launch: the next small claim goes to spot.
    let next = block_on(p.create(&small("c"))).unwrap();
    assert_eq!(label(&next, labels::CAPACITY_TYPE).as_deref(), Some("spot"));
    clock.advance(Duration::from_secs(2 * 60));
    let gone = p.instances().into_iter().find(|i| i.capacity_reservation.as_deref() == Some("cr-lent")).unwrap();
    assert!(gone.terminated);
}

/// The cloud with an `open` ODCR of one `large` in us-west-2a that no class selects, and
/// Karpenter's `ReservedCapacity` gate as `gate`; a class selecting no reservation.
fn with_open_reservation(gate: bool) -> (SimProvider, EC2NodeClass) {
    let yaml = format!(
        "{CLOUD}  - {{id: cr-open, instanceType: large, zone: us-west-2a, instanceMatchCriteria: open, price: 0.02}}\n"
    );
    let config: SimConfig = serde_yaml_ng::from_str(&yaml).unwrap();
    let p = SimProvider::new(config, Arc::new(ManualClock::new())).unwrap();
    p.set_reserved_capacity(gate);
    let mut c = class("[]");
    resolve(&p, &mut c);
    (p, c)
}

/// An on-demand claim for a `large` in us-west-2a.
fn on_demand_large(name: &str) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a"]},
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["large"]}],
                 "resources": {"requests": {"cpu": "4"}},
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .unwrap()
}

#[test]
fn with_the_gate_an_on_demand_launch_never_lands_in_an_open_reservation_as_it_asks_for_none() {
    let (p, _) = with_open_reservation(true);
    let launched = block_on(p.create(&on_demand_large("a"))).unwrap();
    assert_eq!(label(&launched, labels::CAPACITY_TYPE).as_deref(), Some("on-demand"));
    assert_eq!(p.instances()[0].capacity_reservation, None);
    assert_eq!(p.instances()[0].price, 0.30, "billed on demand");
}

#[test]
fn without_the_gate_ec2_puts_an_on_demand_launch_in_a_matching_open_reservation_until_it_is_full() {
    let (p, _) = with_open_reservation(false);
    let first = block_on(p.create(&on_demand_large("a"))).unwrap();
    // Karpenter labels what it launched on demand: it asked for no reservation.
    assert_eq!(label(&first, labels::CAPACITY_TYPE).as_deref(), Some("on-demand"));
    assert_eq!(label(&first, labels::CAPACITY_RESERVATION_ID), None);
    let i = &p.instances()[0];
    assert_eq!(i.capacity_reservation.as_deref(), Some("cr-open"), "EC2 put it in the open reservation");
    assert_eq!(i.price, 0.02, "the account pays the reservation's price for it");
    // The reservation holds one: the next launch is a plain on-demand instance.
    block_on(p.create(&on_demand_large("b"))).unwrap();
    let second = &p.instances()[1];
    assert_eq!((second.capacity_reservation.as_deref(), second.price), (None, 0.30));
    // Freed, it takes the next one again.
    block_on(p.delete(&first)).unwrap();
    block_on(p.create(&on_demand_large("c"))).unwrap();
    assert_eq!(p.instances()[2].capacity_reservation.as_deref(), Some("cr-open"));
}
