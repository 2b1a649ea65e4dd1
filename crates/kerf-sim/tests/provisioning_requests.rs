//! ProvisioningRequests through the simulator, on the examples/provisioning-request-*.yaml
//! scenarios: an atomic plan launched in one batch and used by its pods, a plan a NodePool limit
//! cannot meet launching nothing, check-capacity answering from the room that exists, and a
//! booking that expires and releases its room.

use std::path::{Path, PathBuf};

use kerf_api::NodeClaim;
use kerf_cloud::ManualClock;
use kerf_cloud::sim::SimProvider;
use kerf_sim::Report;
use kerf_sim::driver::Simulation;
use kerf_sim::report_requests::ProvisioningRequestReport;
use kerf_sim::scenario::parse;
use kerf_sim::steps::simulation_for;

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples").join(name)
}

/// The report after each step of an example, and the simulation at the end.
fn run_steps(name: &str) -> (Vec<Report>, Simulation<SimProvider>) {
    let path = example(name);
    let yaml = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let scenario = parse(&path, &yaml).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = simulation_for(&scenario, ManualClock::new()).unwrap_or_else(|e| panic!("{e}"));
    sim.add_nodes(&scenario.nodes).unwrap_or_else(|e| panic!("{e}"));
    sim.settle(sim.now()).unwrap_or_else(|e| panic!("{e}"));
    let reports = scenario
        .steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            sim.step(i, step).unwrap_or_else(|e| panic!("{e}"));
            sim.report()
        })
        .collect();
    (reports, sim)
}

fn request<'a>(r: &'a Report, name: &str) -> &'a ProvisioningRequestReport {
    r.provisioning_requests
        .iter()
        .find(|q| q.name == name)
        .unwrap_or_else(|| panic!("no request {name} in {:?}", r.provisioning_requests))
}

fn claims(sim: &Simulation<SimProvider>) -> Vec<NodeClaim> {
    sim.cluster().list_objs::<NodeClaim>()
}

#[test]
fn an_atomic_request_launches_every_claim_in_one_batch_and_its_pods_run_on_them() {
    let (reports, sim) = run_steps("provisioning-request-atomic.yaml");
    // Step 3 is the minute after the request: provisioned, nothing running yet.
    let before_job = &reports[3];
    let q = request(before_job, "training");
    assert_eq!(q.state, "Provisioned", "{q:?}");
    assert!(q.reason.as_deref().is_some_and(|r| r.starts_with("CapacityIsProvisioned")), "{q:?}");
    assert_eq!(q.provisioned_at_seconds.map(|s| s.0), Some(0.0), "provisioned in the first pass: {q:?}");
    let booked_nodes: Vec<String> = before_job.nodes.iter().map(|n| n.name.clone()).collect();
    assert_eq!(booked_nodes.len(), 16, "two 1800m workers per m5.xlarge: {booked_nodes:?}");

    let all = claims(&sim);
    assert_eq!(all.len(), 16, "no claim beyond the plan's: {:?}", all.iter().map(|c| c.name()).collect::<Vec<_>>());
    let created: std::collections::BTreeSet<_> =
        all.iter().map(|c| c.metadata.creation_timestamp.as_ref().map(|t| t.0)).collect();
    assert_eq!(created.len(), 1, "every claim created at the same instant: {created:?}");
    assert!(all.iter().all(|c| {
        c.metadata.annotations.as_ref().and_then(|a| a.get("kerf.dev/provisioning-request")).map(String::as_str)
            == Some("default/training")
    }));

    let end = reports.last().unwrap();
    let workers: Vec<_> = end.pods.iter().filter(|p| p.name.starts_with("training-")).collect();
    assert_eq!(workers.len(), 32);
    for p in &workers {
        assert_eq!(p.phase, "Running", "{p:?}");
        let node = p.node.as_deref().unwrap_or_default();
        assert!(booked_nodes.iter().any(|n| n == node), "{} runs on {node}, not a booked node", p.name);
    }
    assert_eq!(end.summary.node_claims_launched, 16);
    let q = request(end, "training");
    assert_eq!(q.state, "BookingExpired", "{q:?}");
    assert!(q.reason.as_deref().is_some_and(|r| r.starts_with("CapacityBookingConsumed")), "{q:?}");
}

#[test]
fn a_plan_over_the_pool_limit_fails_naming_the_pod_set_and_launches_nothing() {
    let (reports, sim) = run_steps("provisioning-request-limit.yaml");
    let end = reports.last().unwrap();
    let q = request(end, "training");
    assert_eq!(q.state, "Failed", "{q:?}");
    let reason = q.reason.as_deref().unwrap_or_default();
    assert!(reason.starts_with("CapacityIsNotFound: pod set 0 (PodTemplate trainer)"), "{reason}");
    assert!(reason.contains("of 32 pods cannot be placed"), "{reason}");
    assert!(reason.contains("limit"), "the NodePool limit is named: {reason}");
    assert!(reason.ends_with("no NodeClaim launched"), "{reason}");
    // The same outcome in the JSON, text and HTML renderings.
    let json = serde_json::to_value(end).unwrap_or_else(|e| panic!("{e}"));
    let entry = &json["provisioningRequests"][0];
    assert_eq!(
        (entry["namespace"].as_str(), entry["name"].as_str(), entry["state"].as_str()),
        (Some("default"), Some("training"), Some("Failed"))
    );
    assert_eq!(entry["class"], "best-effort-atomic-scale-up.autoscaling.x-k8s.io");
    assert!(entry["provisionedAtSeconds"].is_null(), "{entry}");
    let text = end.to_text();
    assert!(text.contains("Provisioning requests:") && text.contains("default/training"), "{text}");
    let html = kerf_sim::report_html::render(&json);
    assert!(html.contains("<table id=\"provisioning-requests\">") && html.contains("CapacityIsNotFound"), "{html}");
    assert!(claims(&sim).is_empty(), "an atomic plan that cannot be met launches nothing");
    assert_eq!(end.summary.node_claims_launched, 0);
}

#[test]
fn check_capacity_answers_true_then_false_as_the_cluster_fills_and_true_once_a_booking_expires() {
    let (reports, sim) = run_steps("provisioning-request-check-capacity.yaml");
    let launched = |r: &Report| r.summary.node_claims_launched;
    let before = launched(&reports[3]);
    assert_eq!(before, 2, "three web pods on two nodes");
    // Steps: 4 applies probe-1, 5 waits 1m, 6 applies probe-2, 7 waits 1m, 8 waits 10m.
    let p1 = request(&reports[5], "probe-1");
    assert_eq!(p1.state, "Provisioned", "{p1:?}");
    assert!(p1.reason.as_deref().is_some_and(|r| r.starts_with("CapacityIsFound")), "{p1:?}");
    let p2 = request(&reports[7], "probe-2");
    assert_eq!(p2.state, "Accepted", "answered, not provisioned: {p2:?}");
    let why = p2.reason.as_deref().unwrap_or_default();
    assert!(why.starts_with("CapacityIsNotFound: pod set 0 (PodTemplate trainer): 1 of 1 pods do not fit"), "{why}");
    assert_eq!(p2.provisioned_at_seconds, None);

    let end = reports.last().unwrap();
    let p1 = request(end, "probe-1");
    assert_eq!(p1.state, "BookingExpired", "{p1:?}");
    assert!(p1.reason.as_deref().is_some_and(|r| r.starts_with("CapacityReservationTimeExpired")), "{p1:?}");
    let p2 = request(end, "probe-2");
    assert_eq!(p2.state, "Provisioned", "the expired booking's room answers probe-2: {p2:?}");
    let p1_at = request(&reports[5], "probe-1").provisioned_at_seconds.unwrap().0;
    let p2_at = p2.provisioned_at_seconds.unwrap().0;
    assert!(p2_at >= p1_at + 600.0, "probe-2 waited for probe-1's booking: {p1_at} then {p2_at}");
    assert_eq!(launched(end), before, "check-capacity never launches");
    assert_eq!(claims(&sim).len(), 2);
}

#[test]
fn a_booking_keeps_its_empty_nodes_until_it_expires_then_they_go() {
    let (reports, _sim) = run_steps("provisioning-request-booking-expiry.yaml");
    // Step 3 is 9 minutes after Provisioned: the booked nodes are empty but kept.
    let booked = &reports[3];
    assert_eq!(request(booked, "idle").state, "Provisioned");
    assert_eq!(booked.nodes.len(), 4, "8 workers' room on 4 nodes: {:?}", booked.nodes);
    assert!(booked.disruptions.is_empty(), "booked room is not consolidated: {:?}", booked.disruptions);
    let end = reports.last().unwrap();
    let q = request(end, "idle");
    assert_eq!(q.state, "BookingExpired", "{q:?}");
    assert!(q.reason.as_deref().is_some_and(|r| r.starts_with("CapacityReservationTimeExpired")), "{q:?}");
    assert!(end.nodes.is_empty(), "the released room's nodes were removed: {:?}", end.nodes);
    assert_eq!(end.disruptions.len(), 4);
    assert!(end.disruptions.iter().all(|d| d.at_seconds.0 >= 600.0), "{:?}", end.disruptions);
}

#[test]
fn a_restarted_controller_keeps_the_booking_from_the_requests_conditions_alone() {
    let path = example("provisioning-request-booking-expiry.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let scenario = parse(&path, &yaml).unwrap_or_else(|e| panic!("{e}"));
    // A cloud that can outlive the controllers' process (no fault is injected at rate 0).
    let clock = ManualClock::new();
    let provider = SimProvider::new(scenario.cloud.clone(), std::sync::Arc::new(clock.clone()))
        .unwrap_or_else(|e| panic!("{}", e.problem));
    let region = provider.region().to_string();
    let faults = std::sync::Arc::new(kerf_sim::chaos::Faults::new(1, 0.0));
    let cloud = kerf_sim::chaos::FaultyCloud::new(std::sync::Arc::new(provider), faults);
    let mut sim = Simulation::for_scenario(&scenario, cloud, clock, &region);
    sim.settle(sim.now()).unwrap_or_else(|e| panic!("{e}"));
    let mut reports = Vec::new();
    for (i, step) in scenario.steps.iter().enumerate() {
        // Right after the request's step: a new process, the cluster only.
        if i == 3 {
            sim.restart_controllers(99);
        }
        sim.step(i, step).unwrap_or_else(|e| panic!("{e}"));
        reports.push(sim.report());
    }
    let booked = &reports[3];
    assert_eq!(booked.nodes.len(), 4, "the booked nodes outlive the restart: {:?}", booked.nodes);
    assert!(booked.disruptions.is_empty(), "{:?}", booked.disruptions);
    assert!(sim.cluster().list_objs::<NodeClaim>().is_empty(), "and go once the booking expires");
    let end = reports.last().unwrap();
    assert_eq!(request(end, "idle").state, "BookingExpired");
    assert_eq!(end.summary.node_claims_launched, 4, "the restart launched nothing again");
}

#[test]
fn a_snapshot_writes_live_requests_and_their_templates_but_not_finished_ones() {
    use k8s_openapi::api::core::v1::PodTemplate;
    use kerf_api::ProvisioningRequest;
    use kerf_sim::scenario_writer::{ClusterObjects, write};

    let template: PodTemplate = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "trainer", "namespace": "default"},
        "template": {"spec": {"containers": [{"name": "t", "image": "i", "resources": {"requests": {"cpu": "1"}}}]}}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let request = |name: &str, condition: &str| -> ProvisioningRequest {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "provisioningClassName": "check-capacity.autoscaling.x-k8s.io",
                "podSets": [{"podTemplateRef": {"name": "trainer"}, "count": 2}]
            },
            "status": {"conditions": [{"type": condition, "status": "True", "reason": "R", "message": "m"}]}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    };
    let objects = ClusterObjects {
        pod_templates: vec![template],
        provisioning_requests: vec![request("live", "Provisioned"), request("done", "BookingExpired")],
        ..ClusterObjects::default()
    };
    let (text, _) = write("requests", kerf_cloud::Timestamp::UNIX_EPOCH, &objects).unwrap_or_else(|e| panic!("{e}"));
    assert!(text.contains("kind: ProvisioningRequest") && text.contains("name: live"), "{text}");
    assert!(text.contains("kind: PodTemplate") && text.contains("name: trainer"), "{text}");
    assert!(!text.contains("name: done") && !text.contains("status"), "{text}");
    // The written scenario loads.
    parse(Path::new("snapshot.yaml"), &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
}

#[test]
fn other_pods_get_room_of_their_own_while_a_booking_launches() {
    // Room for four trainers is booked on two launching nodes; five seconds later three pods of
    // the same shape that consume no request arrive.
    let yaml = r#"
name: other-pods
cloud: {region: us-west-2, launchLatency: 30s}
steps:
  - apply: manifests/provisioning/batch-nodepool.yaml
  - apply: manifests/provisioning/trainer-template.yaml
  - apply:
      - apiVersion: autoscaling.x-k8s.io/v1
        kind: ProvisioningRequest
        metadata: {name: booked, namespace: default}
        spec:
          provisioningClassName: best-effort-atomic-scale-up.autoscaling.x-k8s.io
          podSets: [{podTemplateRef: {name: trainer}, count: 4}]
  - wait: 5s
  - apply: manifests/provisioning/web.yaml
  - wait: 3m
"#;
    let path = example("other-pods.yaml");
    let scenario = parse(&path, yaml).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = simulation_for(&scenario, ManualClock::new()).unwrap_or_else(|e| panic!("{e}"));
    sim.settle(sim.now()).unwrap_or_else(|e| panic!("{e}"));
    for (i, step) in scenario.steps.iter().enumerate() {
        sim.step(i, step).unwrap_or_else(|e| panic!("{e}"));
    }
    let end = sim.report();
    assert_eq!(request(&end, "booked").state, "Provisioned");
    let booked: Vec<String> = claims(&sim)
        .into_iter()
        .filter(|c| c.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("kerf.dev/provisioning-request")))
        .map(|c| c.name().to_string())
        .collect();
    assert_eq!(booked.len(), 2, "{booked:?}");
    assert_eq!(end.summary.node_claims_launched, 4, "two for the booking, two for the other pods");
    // The provisioner planned the other pods onto claims of their own, not into the booking.
    let nominated: Vec<String> = sim
        .cluster()
        .events()
        .into_iter()
        .filter(|e| e.record.reason == "Nominated" && e.record.name.starts_with("default/web-"))
        .map(|e| e.record.message)
        .collect();
    assert_eq!(nominated.len(), 3, "{nominated:?}");
    for m in &nominated {
        assert!(!booked.iter().any(|c| m.ends_with(&format!("nodeclaim/{c}"))), "{m} is booked room");
    }
    // kube-scheduler may still bind one into booked room on a node that is ready first; the
    // booking then holds the room the other pods' claims left: all of it is kept.
    assert!(end.pods.iter().filter(|p| p.owner.starts_with("Deployment/web")).all(|p| p.phase == "Running"));
    assert_eq!(end.nodes.len(), 4);
    let room = &sim.manager().booked_room().pods;
    assert_eq!(room.len(), 4);
    assert!(room.iter().all(|p| p.held_on.is_some() && p.registered), "{room:?}");
}
