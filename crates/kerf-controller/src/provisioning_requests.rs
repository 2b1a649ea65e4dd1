//! The ProvisioningRequest reconciler: room for a whole group of pods, found or launched at
//! once, then booked until its pods arrive (`autoscaling.x-k8s.io/v1`; docs/design.md,
//! "ProvisioningRequest").
//!
//! A request's pod sets become virtual pods (as a CapacityBuffer's chunks: in memory only),
//! placed by the same scheduling core as every real pod:
//! - `check-capacity.autoscaling.x-k8s.io`: on existing nodes and in-flight NodeClaims only
//!   (no pool launches anything). All fit: `Provisioned=True` (`CapacityIsFound`) and the room
//!   is booked where they fit; else `Provisioned=False` (`CapacityIsNotFound`), answered again
//!   as the cluster changes, or `Failed=True` with `noRetry: "true"`.
//! - `best-effort-atomic-scale-up.autoscaling.x-k8s.io`: with every NodePool too, every pod
//!   set in one plan. Every pod placed: every NodeClaim the plan needs is created (each marked
//!   with [`CLAIM_ANNOTATION`]) and `Provisioned=True` (`CapacityIsProvisioned`, or
//!   `CapacityIsFound` when nothing had to launch); some pod placed nowhere: nothing is
//!   created and `Failed=True` (`CapacityIsNotFound`) names the pod set and what stopped it.
//!
//! Booked room ([`Published::booked_room`](crate::published::Published)) is held like buffer
//! room: disruption counts it on its node, the provisioner places it after the real pods (a
//! best-effort-atomic booking that lost its room launches it again; a check-capacity booking
//! that lost it is `CapacityRevoked`). Each pod carrying the consume annotation takes one
//! booked pod's place. The booking ends with `BookingExpired=True`: `CapacityBookingConsumed`
//! once as many consuming pods are bound as were asked for, `CapacityReservationTimeExpired`
//! ten minutes after `Provisioned`.
//!
//! Everything is derived from the cluster: the conditions say where a request stands, the
//! consuming pods how much of its booking is left, and claims carrying [`CLAIM_ANNOTATION`]
//! that a plan was launched (a restart between launching and writing `Provisioned` finishes
//! the write, and launches nothing again).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kerf_api::cluster::{ClusterApi, Patch};
use kerf_api::provisioningrequest::{
    self as pr, CLASS_CHECK_CAPACITY, CONDITION_ACCEPTED, CONDITION_BOOKING_EXPIRED, CONDITION_CAPACITY_REVOKED,
    CONDITION_FAILED, CONDITION_PROVISIONED, ProvisioningRequestStatus, State,
};
use kerf_api::{Condition, NodeClaim, ProvisioningRequest, SlimPod};
use kerf_cloud::{CloudProvider, Timestamp};
use kerf_scheduling::{SchedulingContext, SchedulingResult};

use crate::buffer_room::{BufferRoom, VirtualPod, place_room, previous_places};
use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::patches::status_changes;
use crate::state::{ClusterState, ObjectKey};
use crate::util;

/// Annotation on a NodeClaim launched for a request's plan: the request, `namespace/name`.
pub const CLAIM_ANNOTATION: &str = "kerf.dev/provisioning-request";

/// How long a request waits for a PodTemplate it names before it fails (templates and request
/// are usually created together, and their watch events may arrive in either order).
pub const TEMPLATE_GRACE: Duration = Duration::from_secs(10);

/// One pod of a request: its pod set and the pod.
#[derive(Debug, Clone)]
struct SetPod {
    set: usize,
    pod: Arc<SlimPod>,
}

fn time_of(t: Option<&Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

fn created(r: &ProvisioningRequest) -> Option<Timestamp> {
    time_of(r.metadata.creation_timestamp.as_ref())
}

/// The request's pods: every pod set's template, `count` times, in the request's namespace,
/// carrying the consume annotation; the first PodTemplate missing is the error.
fn request_pods(r: &ProvisioningRequest, state: &ClusterState) -> Result<Vec<SetPod>, String> {
    let ns = r.namespace();
    let mut out = Vec::new();
    for (set, s) in r.spec.pod_sets.iter().enumerate() {
        let name = &s.pod_template_ref.name;
        let key = (ns.to_string(), name.clone());
        let t = state
            .pod_templates()
            .get(&key)
            .or_else(|| {
                r.metadata.namespace.is_none().then(|| state.pod_templates().get(&(String::new(), name.clone())))?
            })
            .ok_or_else(|| format!("PodTemplate {ns}/{name} of pod set {set} not found"))?;
        let template =
            t.template.clone().ok_or_else(|| format!("PodTemplate {ns}/{name} of pod set {set} has no template"))?;
        let meta = template.metadata.unwrap_or_default();
        let version = format!(
            "{}.{}",
            r.metadata.resource_version.as_deref().unwrap_or_default(),
            t.metadata.resource_version.as_deref().unwrap_or_default()
        );
        let mut annotations = meta.annotations.unwrap_or_default();
        annotations.insert(pr::CONSUME_ANNOTATION.to_string(), r.name().to_string());
        for i in 0..s.count.max(0) {
            let pod = SlimPod {
                metadata: ObjectMeta {
                    namespace: Some(ns.to_string()),
                    name: Some(format!("{}-{set}-{i}", r.name())),
                    uid: Some(format!("kerf-provisioningrequest/{ns}/{}/{set}/{i}", r.name())),
                    resource_version: Some(version.clone()),
                    labels: meta.labels.clone(),
                    annotations: Some(annotations.clone()),
                    ..ObjectMeta::default()
                }
                .into(),
                spec: template.spec.as_ref().map(kerf_api::SlimPodSpec::from),
                status: None,
            };
            out.push(SetPod { set, pod: Arc::new(pod) });
        }
    }
    Ok(out)
}

/// The pods consuming one request: those not being deleted, and how many of them are bound.
#[derive(Debug, Default)]
struct Consumers {
    present: Vec<Arc<SlimPod>>,
    bound: usize,
}

/// The pods consuming each request, by the request's key.
fn consumers(state: &ClusterState) -> BTreeMap<ObjectKey, Consumers> {
    let mut out: BTreeMap<ObjectKey, Consumers> = BTreeMap::new();
    for p in state.pods() {
        let Some(name) = pr::consumed_by(p.metadata.annotations.as_deref()) else { continue };
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let e = out.entry((ns, name.to_string())).or_default();
        e.present.push(Arc::clone(p));
        e.bound += usize::from(util::pod_node_name(p).is_some());
    }
    out
}

/// The request's pods still booked once each consuming pod has taken one's place: the first of
/// the pod set whose pods request what it requests, else the first left.
fn unconsumed(mut pods: Vec<SetPod>, consumers: &[Arc<SlimPod>]) -> Vec<SetPod> {
    let requests: Vec<kerf_api::ResourceList> = pods.iter().map(|p| kerf_scheduling::pod_requests(&p.pod)).collect();
    let mut left: Vec<bool> = vec![true; pods.len()];
    for c in consumers {
        let wanted = kerf_scheduling::pod_requests(c);
        let same = (0..pods.len()).find(|&i| left[i] && requests[i] == wanted);
        if let Some(i) = same.or_else(|| left.iter().position(|l| *l)) {
            left[i] = false;
        }
    }
    let mut keep = left.into_iter();
    pods.retain(|_| keep.next().unwrap_or(false));
    pods
}

fn set_condition(
    status: &mut ProvisioningRequestStatus,
    r: &ProvisioningRequest,
    c: (&str, bool, &str, String),
    now: Timestamp,
) {
    let (type_, ok, reason, message) = c;
    kerf_api::shared::set_condition(
        &mut status.conditions,
        Condition {
            type_: type_.to_string(),
            status: if ok { "True" } else { "False" }.to_string(),
            reason: Some(reason.to_string()),
            message: Some(message),
            last_transition_time: Some(Time(now)),
            observed_generation: r.metadata.generation,
        },
    );
}

/// Why a plan left pods unplaced: the first pod set with such pods, how many, and the
/// scheduling core's reason for the first of them.
fn shortfall(r: &ProvisioningRequest, pods: &[SetPod], result: &SchedulingResult, with_pools: bool) -> String {
    let mut by_set: BTreeMap<usize, (usize, &str)> = BTreeMap::new();
    for (i, err) in &result.errors {
        if let Some(p) = pods.get(*i) {
            let e = by_set.entry(p.set).or_insert((0, err.message.as_str()));
            e.0 += 1;
        }
    }
    let Some((&set, &(missing, why))) = by_set.iter().next() else {
        return "every pod fits".to_string();
    };
    let template = r.spec.pod_sets.get(set).map(|s| s.pod_template_ref.name.as_str()).unwrap_or_default();
    let count = r.spec.pod_sets.get(set).map_or(0, |s| s.count);
    let others: usize = by_set.values().map(|(n, _)| n).sum::<usize>() - missing;
    let more = if others > 0 { format!(" (and {others} pod(s) of other pod sets)") } else { String::new() };
    if with_pools {
        format!("pod set {set} (PodTemplate {template}): {missing} of {count} pods cannot be placed{more}: {why}")
    } else {
        format!(
            "pod set {set} (PodTemplate {template}): {missing} of {count} pods do not fit on existing or launching nodes{more}"
        )
    }
}

/// The reconciler's own state: when it last looked, and when it must look again.
#[derive(Debug, Default)]
pub(crate) struct ProvisioningRequests {
    observed: Option<u64>,
    next_at: Option<Timestamp>,
}

impl ProvisioningRequests {
    /// One pass: end or keep each booking and place its room; answer each request not yet
    /// provisioned; write status.
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        if cx.state.provisioning_requests().is_empty() {
            cx.published.booked_room.clear();
            *self = ProvisioningRequests::default();
            return Ok(());
        }
        let now = cx.pass.now;
        let due = self.next_at.is_some_and(|t| now >= t);
        if !due && self.observed == Some(cx.state.generation()) {
            if let Some(t) = self.next_at {
                cx.pass.wake_at(t);
            }
            return Ok(());
        }
        let mut requests: Vec<ProvisioningRequest> = cx
            .state
            .provisioning_requests()
            .values()
            .filter(|r| pr::CLASSES.contains(&r.class()) && r.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        requests.sort_by(|a, b| (created(a), a.namespace(), a.name()).cmp(&(created(b), b.namespace(), b.name())));
        let consuming = consumers(cx.state);
        let mut next_at: Option<Timestamp> = None;
        let mut writes: Vec<(ProvisioningRequest, ProvisioningRequestStatus)> = Vec::new();

        // Bookings: ended, or kept and placed (sticking where they were).
        let mut booked: Vec<VirtualPod> = Vec::new();
        let mut checks: Vec<ObjectKey> = Vec::new();
        for r in requests.iter().filter(|r| r.booked()) {
            let key = (r.namespace().to_string(), r.name().to_string());
            let mut status = r.status.clone().unwrap_or_default();
            let none = Consumers::default();
            let c = consuming.get(&key).unwrap_or(&none);
            let bound = c.bound;
            let total = usize::try_from(r.pod_count()).unwrap_or(0);
            let since = time_of(r.condition(CONDITION_PROVISIONED).and_then(|c| c.last_transition_time.as_ref()));
            let expires = util::after(since.unwrap_or(now), pr::BOOKING_DURATION);
            if bound >= total {
                let msg = format!("all {total} pod(s) consuming the request are scheduled");
                set_condition(&mut status, r, (CONDITION_BOOKING_EXPIRED, true, pr::REASON_BOOKING_CONSUMED, msg), now);
                writes.push((r.clone(), status));
                continue;
            }
            if now >= expires {
                let msg = format!(
                    "capacity reservation time is expired: booked for {} after Provisioned; {bound} of {total} consuming pod(s) scheduled",
                    kerf_api::GoDuration(pr::BOOKING_DURATION)
                );
                set_condition(
                    &mut status,
                    r,
                    (CONDITION_BOOKING_EXPIRED, true, pr::REASON_BOOKING_TIME_EXPIRED, msg),
                    now,
                );
                writes.push((r.clone(), status));
                continue;
            }
            next_at = util::earliest(next_at, Some(expires));
            match request_pods(r, cx.state) {
                Ok(pods) => {
                    if r.class() == CLASS_CHECK_CAPACITY {
                        checks.push(key.clone());
                    }
                    for p in unconsumed(pods, &c.present) {
                        booked.push(VirtualPod { buffer: key.clone(), pod: p.pod, held_on: None, registered: false });
                    }
                }
                Err(why) => {
                    let msg = format!("the booked pods cannot be made: {why}");
                    set_condition(&mut status, r, (CONDITION_FAILED, true, pr::REASON_FAILED_TO_BOOK, msg), now);
                    writes.push((r.clone(), status));
                }
            }
        }
        let before = previous_places(&cx.published.booked_room);
        place_room(cx, &mut booked, &before, BTreeMap::new()).await;
        // A check-capacity booking never launches: room it lost is revoked.
        for key in &checks {
            let lost = booked.iter().filter(|p| &p.buffer == key && p.held_on.is_none()).count();
            if lost == 0 {
                continue;
            }
            booked.retain(|p| &p.buffer != key);
            let Some(r) = requests.iter().find(|r| r.namespace() == key.0 && r.name() == key.1) else { continue };
            let mut status = r.status.clone().unwrap_or_default();
            let msg = format!("{lost} booked pod(s) no longer fit on existing or launching nodes");
            set_condition(
                &mut status,
                r,
                (CONDITION_CAPACITY_REVOKED, true, pr::REASON_BOOKED_CAPACITY_LOST, msg),
                now,
            );
            writes.push((r.clone(), status));
        }
        self.publish(cx, booked);

        // Requests not answered yet, oldest first, each seeing the room booked before it.
        for r in requests.iter().filter(|r| matches!(r.state(), State::Pending | State::Accepted)) {
            let answered = self.answer(cx, r, &mut next_at).await?;
            if let Some(status) = answered {
                writes.push((r.clone(), status));
            }
        }

        for (r, status) in writes {
            let Some(patch) = status_changes(r.status.as_ref(), &status)? else { continue };
            let written =
                cx.api.patch_status::<ProvisioningRequest>(Some(r.namespace()), r.name(), &Patch::Merge(patch)).await;
            if let Some(written) = cx.pass.soft("writing provisioningrequest status", written)? {
                cx.state.record(kerf_api::cluster::Object::into_any(written));
            }
        }
        self.observed = Some(cx.state.generation());
        self.next_at = next_at;
        if let Some(t) = next_at {
            cx.pass.wake_at(t);
        }
        Ok(())
    }

    /// Publishes the booked room (a new generation only when it changed).
    fn publish<P, C>(&self, cx: &mut Ctx<'_, P, C>, pods: Vec<VirtualPod>) {
        let old = &cx.published.booked_room;
        if old.pods != pods {
            let generation = old.generation + 1;
            cx.published.booked_room = BufferRoom { pods, generation };
        }
    }

    /// Answers one request not provisioned yet; the status to write, if any.
    async fn answer<P: CloudProvider, C: ClusterApi>(
        &self,
        cx: &mut Ctx<'_, P, C>,
        r: &ProvisioningRequest,
        next_at: &mut Option<Timestamp>,
    ) -> Result<Option<ProvisioningRequestStatus>, ControllerError> {
        let now = cx.pass.now;
        let mut status = r.status.clone().unwrap_or_default();
        let born = created(r).unwrap_or(now);
        let expires = util::after(born, pr::EXPIRATION);
        if now >= expires {
            let msg = format!("not provisioned within {} of its creation", kerf_api::GoDuration(pr::EXPIRATION));
            set_condition(&mut status, r, (CONDITION_FAILED, true, pr::REASON_EXPIRED, msg), now);
            return Ok(Some(status));
        }
        *next_at = util::earliest(*next_at, Some(expires));
        let msg = "ProvisioningRequest is accepted by kerf".to_string();
        set_condition(&mut status, r, (CONDITION_ACCEPTED, true, pr::REASON_ACCEPTED, msg), now);
        let pods = match request_pods(r, cx.state) {
            Ok(pods) => pods,
            Err(why) => {
                let grace = util::after(born, TEMPLATE_GRACE);
                if now < grace {
                    *next_at = util::earliest(*next_at, Some(grace));
                } else {
                    set_condition(&mut status, r, (CONDITION_FAILED, true, pr::REASON_FAILED_TO_CREATE_PODS, why), now);
                }
                return Ok(Some(status));
            }
        };
        let key = (r.namespace().to_string(), r.name().to_string());
        let check = r.class() == CLASS_CHECK_CAPACITY;
        let marker = format!("{}/{}", key.0, key.1);
        if !check && launched_for(cx.state, &marker) {
            // Its plan was launched before a restart: only the status was not written.
            let msg = "NodeClaims for every pod were launched".to_string();
            set_condition(&mut status, r, (CONDITION_PROVISIONED, true, pr::REASON_CAPACITY_IS_PROVISIONED, msg), now);
            return Ok(Some(status));
        }
        let types = cx.instance_types_by_pool().await;
        let mut input = cx.view().scheduling_input(&[], &types);
        if check {
            input.node_pools.clear();
            input.unavailable_node_pools.clear();
        }
        input.pods = pods.iter().map(|p| Arc::clone(&p.pod)).collect();
        let result = SchedulingContext::with_facts(input, cx.pod_facts).place_pending();
        if !result.errors.is_empty() || (check && !result.new_node_claims.is_empty()) {
            let why = shortfall(r, &pods, &result, !check);
            let no_retry = r.parameter(pr::PARAM_NO_RETRY) == Some("true");
            let c = if check && !no_retry {
                (CONDITION_PROVISIONED, false, pr::REASON_CAPACITY_IS_NOT_FOUND, why)
            } else if check {
                (CONDITION_FAILED, true, pr::REASON_CAPACITY_IS_NOT_FOUND, why)
            } else {
                (CONDITION_FAILED, true, pr::REASON_CAPACITY_IS_NOT_FOUND, format!("{why}; no NodeClaim launched"))
            };
            set_condition(&mut status, r, c, now);
            return Ok(Some(status));
        }
        // Every pod placed: launch every claim of the plan, or none.
        let mut held: Vec<Option<String>> = vec![None; pods.len()];
        for p in &result.placements {
            if let Some(h) = held.get_mut(p.pod) {
                *h = Some(p.node.clone());
            }
        }
        let launched = self.launch(cx, &result, &marker).await?;
        for (claim, new) in launched.iter().zip(&result.new_node_claims) {
            for &i in &new.pods {
                if let Some(h) = held.get_mut(i) {
                    *h = Some(claim.clone());
                }
            }
        }
        let mut room = cx.published.booked_room.pods.clone();
        for (p, at) in pods.into_iter().zip(held) {
            room.push(VirtualPod { buffer: key.clone(), pod: p.pod, held_on: at, registered: false });
        }
        self.publish(cx, room);
        let c = if launched.is_empty() {
            (CONDITION_PROVISIONED, true, pr::REASON_CAPACITY_IS_FOUND, "Capacity is found in the cluster".to_string())
        } else {
            let msg = format!("{} NodeClaim(s) launched for all {} pod(s)", launched.len(), r.pod_count());
            (CONDITION_PROVISIONED, true, pr::REASON_CAPACITY_IS_PROVISIONED, msg)
        };
        set_condition(&mut status, r, c, now);
        Ok(Some(status))
    }

    /// Creates every NodeClaim of the plan, each marked with the request; the names, in plan
    /// order. When one cannot be created, those created are deleted again and the error
    /// returned (the request is tried again on the next pass).
    async fn launch<P: CloudProvider, C: ClusterApi>(
        &self,
        cx: &mut Ctx<'_, P, C>,
        result: &SchedulingResult,
        marker: &str,
    ) -> Result<Vec<String>, ControllerError> {
        let mut claims: Vec<NodeClaim> = Vec::new();
        for new in &result.new_node_claims {
            let Some(pool) = cx.state.node_pool(&new.node_pool).cloned() else {
                let why = format!("NodePool {} of the plan for {marker} is gone", new.node_pool);
                return Err(ControllerError::Api(kerf_api::cluster::ApiError::Other(why)));
            };
            let mut claim = cx.new_claim(&pool, new);
            while claims.iter().any(|c| c.name() == claim.name()) {
                claim.metadata.name = Some(crate::claims::claim_name(cx.state, cx.names, pool.name()));
            }
            claim
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(CLAIM_ANNOTATION.to_string(), marker.to_string());
            claims.push(claim);
        }
        let mut names = Vec::with_capacity(claims.len());
        for claim in claims {
            match cx.api.create(claim).await {
                Ok(created) => {
                    tracing::info!(NodeClaim = %created.name(), request = %marker, "created nodeclaim for provisioning request");
                    names.push(created.name().to_string());
                    cx.state.record(kerf_api::cluster::Object::into_any(created));
                    cx.pass.progressed = true;
                }
                Err(e) => {
                    for name in &names {
                        if let Err(undo) = cx.api.delete::<NodeClaim>(None, name).await {
                            tracing::warn!(NodeClaim = %name, error = %undo, "could not delete a claim of an incomplete plan");
                        }
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(names)
    }
}

/// Whether a claim marked with the request `marker` exists.
fn launched_for(state: &ClusterState, marker: &str) -> bool {
    state
        .node_claims()
        .values()
        .any(|c| c.metadata.annotations.as_ref().and_then(|a| a.get(CLAIM_ANNOTATION)).is_some_and(|m| m == marker))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;

    fn pod(name: &str, cpu: &str) -> Arc<SlimPod> {
        let spec = PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some([("cpu".to_string(), KubeQuantity(cpu.into()))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        Arc::new(SlimPod {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() }.into(),
            spec: Some(kerf_api::SlimPodSpec::from(&spec)),
            status: None,
        })
    }

    #[test]
    fn each_consuming_pod_frees_a_booked_pod_of_its_own_shape() {
        // One driver (4 CPU) and three workers (1 CPU).
        let booked = vec![
            SetPod { set: 0, pod: pod("driver", "4") },
            SetPod { set: 1, pod: pod("w0", "1") },
            SetPod { set: 1, pod: pod("w1", "1") },
            SetPod { set: 1, pod: pod("w2", "1") },
        ];
        let names = |pods: Vec<SetPod>| -> Vec<String> {
            pods.into_iter().map(|p| p.pod.metadata.name.clone().unwrap_or_default()).collect()
        };
        // Two workers arrived: the driver's room stays booked.
        assert_eq!(names(unconsumed(booked.clone(), &[pod("a", "1"), pod("b", "1")])), ["driver", "w2"]);
        // A pod of no set's shape takes the first booked pod left.
        assert_eq!(names(unconsumed(booked, &[pod("c", "2")])), ["w0", "w1", "w2"]);
    }

    #[test]
    fn a_plan_launched_before_a_crash_is_not_launched_again_and_its_status_is_written() {
        use crate::testkit::{FakeCloud, Harness, instance_type, node_pool};
        use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec};
        use kerf_api::cluster::ApiError;

        let mut h = Harness::new(FakeCloud::with_types(vec![instance_type("m", "4", "16Gi", 0.2)]));
        h.api.put(node_pool("default"));
        let spec = pod("t", "1800m").whole().unwrap_or_else(|e| panic!("{e}")).spec;
        h.api.put(PodTemplate {
            metadata: ObjectMeta { name: Some("w".into()), namespace: Some("default".into()), ..Default::default() },
            template: Some(PodTemplateSpec { metadata: None, spec }),
        });
        let request: ProvisioningRequest = serde_json::from_value(serde_json::json!({
            "apiVersion": pr::API_VERSION, "kind": pr::KIND,
            "metadata": {"name": "job", "namespace": "default"},
            "spec": {
                "provisioningClassName": pr::CLASS_BEST_EFFORT_ATOMIC,
                "podSets": [{"podTemplateRef": {"name": "w"}, "count": 4}]
            }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        // The claims are created, then the process cannot write the request's status.
        h.api.fail_writes_of::<ProvisioningRequest>(Some(ApiError::Other("unavailable".into())));
        h.tolerate_errors = true;
        h.api.put(request);
        h.settle();
        assert_eq!(h.claims().len(), 2, "four 1800m pods, two per 4-CPU node");
        let stored = h.api.one::<ProvisioningRequest>(Some("default"), "job").unwrap_or_else(|| panic!("gone"));
        assert!(stored.status.is_none(), "{:?}", stored.status);

        // A new process finds the request unanswered and the plan's claims: Provisioned as
        // launched (not found room on claims it takes for someone else's), nothing launched.
        h.api.fail_writes_of::<ProvisioningRequest>(None);
        h.restart();
        let stored = h.api.one::<ProvisioningRequest>(Some("default"), "job").unwrap_or_else(|| panic!("gone"));
        let provisioned = stored.condition(CONDITION_PROVISIONED).unwrap_or_else(|| panic!("{:?}", stored.status));
        assert_eq!(
            (provisioned.status.as_str(), provisioned.reason.as_deref()),
            ("True", Some(pr::REASON_CAPACITY_IS_PROVISIONED))
        );
        assert_eq!(h.claims().len(), 2, "the restarted process launched nothing again");
    }
}
