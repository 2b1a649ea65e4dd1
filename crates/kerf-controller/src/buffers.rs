//! The CapacityBuffer reconciler: room kept in the cluster for pods that do not exist yet.
//!
//! Each buffer (`autoscaling.x-k8s.io/v1beta1`, strategy `buffer.x-k8s.io/active-capacity`) is
//! resolved into a pod template and a count of chunks — `replicas`, `percentage` of its
//! `scalableRef` workload's replicas (rounded up, at least 1; the larger of the two when both
//! are set), capped by `limits` (or, alone, as many chunks as fit in them) — and then into
//! virtual pods: Pods that exist only in memory, never in the API. The reconciler places them,
//! as a batch of their own and after every real pod, on the room left on existing nodes and
//! in-flight NodeClaims, and publishes the result for the other reconcilers ([`BufferRoom`]):
//! - the provisioner places the virtual pods in every pass, after the real ones, so what does
//!   not fit launches nodes;
//! - every other decision (disruption's what-ifs, emptiness) counts the virtual pods held on a
//!   node like its pods: a node holding buffer room is not empty, and a consolidation that
//!   would remove room the rest of the fleet cannot hold is refused.
//!
//! Real pods use the room at once (kube-scheduler sees no virtual pod); the next pass finds the
//! room gone from where it was and puts it back. Status is written as upstream defines it:
//! `replicas`, `podTemplateRef`, `podTemplateGeneration`, `provisioningStrategy`, and the
//! conditions `ReadyForProvisioning` (the buffer resolved) and `Provisioning` (kerf: True once
//! all of its room exists on registered nodes).
//!
//! kerf's `kerf.dev/active-schedule` + `kerf.dev/active-duration` annotations make a buffer
//! keep room only inside a window (cron, as NodePool budget schedules).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kerf_api::SlimPod;
use kerf_api::capacitybuffer::{
    self as cb, ACTIVE_CAPACITY, CONDITION_PROVISIONING, CONDITION_READY_FOR_PROVISIONING, CapacityBufferStatus,
    LocalObjectRef,
};
use kerf_api::cluster::{ApiError, ClusterApi, Patch};
use kerf_api::{CapacityBuffer, Condition, ResourceList};
use kerf_cloud::{CloudProvider, Timestamp};

use crate::buffer_room::{BufferRoom, VirtualPod, held_owned, place_room, previous_places};
use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::patches::status_changes;
use crate::state::{ClusterState, ObjectKey};
use crate::util;

/// Annotation on a virtual pod naming its buffer (`namespace/name`).
pub const BUFFER_ANNOTATION: &str = "kerf.dev/capacity-buffer";

/// How long a `scalableRef` workload read through the API is trusted before it is read again.
pub const WORKLOAD_REFRESH: Duration = Duration::from_secs(10);

/// No buffer keeps more chunks than this (a limits-only buffer over tiny requests would
/// otherwise ask for millions).
pub const MAX_CHUNKS: i64 = 10_000;

/// What a buffer resolved to.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub replicas: i32,
    pub template: PodTemplateSpec,
    /// The PodTemplate it came from (a `podTemplateRef` buffer).
    pub template_ref: Option<String>,
    pub template_generation: Option<i64>,
    /// Why it keeps no room now though it could (outside its active window).
    pub inactive: Option<String>,
}

/// A `scalableRef` workload as the buffer needs it: its replicas and pod template.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub replicas: i32,
    pub template: PodTemplateSpec,
    pub generation: Option<i64>,
}

/// The kinds a `scalableRef` may name (group `apps`).
const SCALABLE_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "ReplicaSet"];

/// Chunks for `percentage` of a workload's `replicas`: rounded up, at least 1 when positive.
pub fn chunks_from_percentage(percentage: i32, replicas: i32) -> i64 {
    let pct = i64::from(percentage.max(0));
    let n = (pct * i64::from(replicas.max(0)) + 99) / 100;
    if pct > 0 { n.max(1) } else { 0 }
}

/// How many chunks of `chunk` requests fit in `limits` (the smallest quotient over the
/// resources both name); `None` when the chunk requests none of the limited resources.
pub fn chunks_within(limits: &ResourceList, chunk: &ResourceList) -> Option<i64> {
    limits
        .0
        .iter()
        .filter_map(|(name, limit)| {
            let per = chunk.get(name).nanos();
            (per > 0).then(|| i64::try_from(limit.nanos().max(0) / per).unwrap_or(i64::MAX))
        })
        .min()
}

/// Resolves `buffer` (pure): its template from the PodTemplate or the workload, its chunk count
/// from `replicas`, `percentage` and `limits`, and whether its active window is open at `wall`.
pub fn resolve(
    buffer: &CapacityBuffer,
    state: &ClusterState,
    workload: Option<&Result<Workload, String>>,
    wall: Timestamp,
) -> Result<Resolved, String> {
    let spec = &buffer.spec;
    let ns = buffer.namespace();
    let (template, template_ref, template_generation, scalable_replicas) = match (
        &spec.pod_template_ref,
        &spec.scalable_ref,
    ) {
        (Some(r), None) => {
            let key = (ns.to_string(), r.name.clone());
            let pt = state.pod_templates().get(&key).ok_or_else(|| format!("PodTemplate {ns}/{} not found", r.name))?;
            let template = pt.template.clone().ok_or_else(|| format!("PodTemplate {ns}/{} has no template", r.name))?;
            (template, Some(r.name.clone()), pt.metadata.generation, None)
        }
        (None, Some(r)) => {
            if r.api_group != "apps" || !SCALABLE_KINDS.contains(&r.kind.as_str()) {
                return Err(format!(
                    "scalableRef kind {}/{} is not supported (kerf reads apps Deployment, StatefulSet and ReplicaSet)",
                    if r.api_group.is_empty() { "core" } else { r.api_group.as_str() },
                    r.kind
                ));
            }
            let w = match workload {
                Some(Ok(w)) => w,
                Some(Err(e)) => return Err(e.clone()),
                None => return Err(format!("{} {ns}/{} not read yet", r.kind, r.name)),
            };
            (w.template.clone(), None, w.generation, Some(w.replicas))
        }
        _ => return Err("exactly one of podTemplateRef and scalableRef must be set".to_string()),
    };
    let chunk = kerf_scheduling::pod_requests(&virtual_pod_of(&template, ns, "chunk", 0, ""));
    let from_percentage = spec.percentage.zip(scalable_replicas).map(|(p, r)| chunks_from_percentage(p, r));
    let from_replicas = spec.replicas.map(|r| i64::from(r.max(0)));
    let within = spec.limits.as_ref().map(|l| chunks_within(l, &chunk));
    let mut count = match (from_replicas, from_percentage) {
        (Some(a), Some(b)) => a.max(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => match within {
            Some(Some(n)) => n,
            Some(None) => {
                return Err(format!(
                    "limits cap nothing: the template requests none of the limited resources ({})",
                    spec.limits.iter().flat_map(|l| l.0.keys()).cloned().collect::<Vec<_>>().join(", ")
                ));
            }
            None => return Err("no replicas, percentage or limits: nothing says how many chunks to keep".to_string()),
        },
    };
    if let Some(Some(cap)) = within {
        count = count.min(cap);
    }
    let count = count.clamp(0, MAX_CHUNKS);
    let inactive = window_closed(buffer, wall);
    Ok(Resolved {
        replicas: i32::try_from(count).unwrap_or(i32::MAX),
        template,
        template_ref,
        template_generation,
        inactive,
    })
}

/// Why the buffer's active window is closed at `wall`, if it has one and it is.
fn window_closed(buffer: &CapacityBuffer, wall: Timestamp) -> Option<String> {
    let (schedule, duration) = window(buffer)?;
    match kerf_api::budget::window_active(schedule, duration, wall) {
        Ok(true) => None,
        Ok(false) => Some(format!(
            "outside its active window ({}: \"{schedule}\" for {})",
            cb::ANNOTATION_ACTIVE_SCHEDULE,
            kerf_api::GoDuration(duration)
        )),
        Err(e) => Some(format!("its {} cannot be read: {e}", cb::ANNOTATION_ACTIVE_SCHEDULE)),
    }
}

/// The buffer's window: schedule and duration, when both annotations are set and the duration
/// reads.
fn window(buffer: &CapacityBuffer) -> Option<(&str, Duration)> {
    let ann = buffer.metadata.annotations.as_ref()?;
    let schedule = ann.get(cb::ANNOTATION_ACTIVE_SCHEDULE)?;
    let duration = ann.get(cb::ANNOTATION_ACTIVE_DURATION)?.parse::<kerf_api::GoDuration>().ok()?;
    Some((schedule.as_str(), duration.0))
}

/// Chunk `i` of a buffer as a pod: the template's labels and spec, in the buffer's namespace,
/// with an identity the scheduling core can cache (`version` changes with buffer or template).
fn virtual_pod_of(template: &PodTemplateSpec, ns: &str, buffer: &str, i: i64, version: &str) -> SlimPod {
    let meta = template.metadata.clone().unwrap_or_default();
    SlimPod {
        metadata: ObjectMeta {
            namespace: Some(ns.to_string()),
            name: Some(format!("{buffer}-buffer-{i}")),
            uid: Some(format!("kerf-capacitybuffer/{ns}/{buffer}/{i}")),
            resource_version: Some(version.to_string()),
            labels: meta.labels,
            annotations: Some([(BUFFER_ANNOTATION.to_string(), format!("{ns}/{buffer}"))].into()),
            ..ObjectMeta::default()
        }
        .into(),
        spec: template.spec.as_ref().map(kerf_api::SlimPodSpec::from),
        status: None,
    }
}

/// The buffer reconciler's own state.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    /// The cluster state generation the room was last computed at.
    observed: Option<u64>,
    /// When the room must be computed again whatever happens (a workload read ages out, a
    /// window opens or closes).
    next_at: Option<Timestamp>,
    /// `scalableRef` workloads read, by buffer: when, and what was found.
    workloads: BTreeMap<ObjectKey, (Timestamp, Result<Workload, String>)>,
}

fn workload_of_deployment(d: Deployment) -> Option<Workload> {
    let spec = d.spec?;
    Some(Workload { replicas: spec.replicas.unwrap_or(1), template: spec.template, generation: d.metadata.generation })
}

fn workload_of_statefulset(s: StatefulSet) -> Option<Workload> {
    let spec = s.spec?;
    Some(Workload { replicas: spec.replicas.unwrap_or(1), template: spec.template, generation: s.metadata.generation })
}

fn workload_of_replicaset(r: ReplicaSet) -> Option<Workload> {
    let spec = r.spec?;
    Some(Workload {
        replicas: spec.replicas.unwrap_or(1),
        template: spec.template.unwrap_or_default(),
        generation: r.metadata.generation,
    })
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    now: Timestamp,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_transition_time: Some(Time(now)),
        observed_generation: generation,
    }
}

impl Buffers {
    /// Reads the `scalableRef` workloads not read within [`WORKLOAD_REFRESH`].
    async fn read_workloads<C: ClusterApi>(
        &mut self,
        api: &C,
        state: &ClusterState,
        now: Timestamp,
    ) -> Result<(), ControllerError> {
        let buffers: Vec<(ObjectKey, cb::ScalableRef)> = state
            .capacity_buffers()
            .iter()
            .filter_map(|(k, b)| Some((k.clone(), b.spec.scalable_ref.clone()?)))
            .collect();
        self.workloads.retain(|k, _| buffers.iter().any(|(b, _)| b == k));
        for (key, r) in buffers {
            if self.workloads.get(&key).is_some_and(|(at, _)| now < util::after(*at, WORKLOAD_REFRESH)) {
                continue;
            }
            if r.api_group != "apps" || !SCALABLE_KINDS.contains(&r.kind.as_str()) {
                continue;
            }
            let ns = Some(key.0.as_str()).filter(|n| !n.is_empty()).or(Some("default"));
            let found = match r.kind.as_str() {
                "Deployment" => api.get::<Deployment>(ns, &r.name).await.map(|d| d.and_then(workload_of_deployment)),
                "StatefulSet" => api.get::<StatefulSet>(ns, &r.name).await.map(|s| s.and_then(workload_of_statefulset)),
                _ => api.get::<ReplicaSet>(ns, &r.name).await.map(|s| s.and_then(workload_of_replicaset)),
            };
            let found = match found {
                Ok(Some(w)) => Ok(w),
                Ok(None) | Err(ApiError::NotFound { .. }) => {
                    Err(format!("{} {}/{} not found", r.kind, ns.unwrap_or_default(), r.name))
                }
                Err(e) => return Err(e.into()),
            };
            self.workloads.insert(key, (now, found));
        }
        Ok(())
    }

    /// One pass: resolve every buffer, place its room, publish it, write status.
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        if cx.state.capacity_buffers().is_empty() {
            cx.published.buffer_room.clear();
            *self = Buffers::default();
            return Ok(());
        }
        let due = self.next_at.is_some_and(|t| cx.pass.now >= t);
        if !due && self.observed == Some(cx.state.generation()) {
            if let Some(t) = self.next_at {
                cx.pass.wake_at(t);
            }
            return Ok(());
        }
        self.read_workloads(cx.api, cx.state, cx.pass.now).await?;
        let wall = cx.options.wall_clock(cx.pass.now);
        let mut next_at: Option<Timestamp> = None;
        let mut resolved: Vec<(ObjectKey, CapacityBuffer, Result<Resolved, String>)> = Vec::new();
        for (key, buffer) in cx.state.capacity_buffers() {
            if buffer.strategy() != ACTIVE_CAPACITY || buffer.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let workload = self.workloads.get(key).map(|(at, w)| {
                next_at = util::earliest(next_at, Some(util::after(*at, WORKLOAD_REFRESH)));
                w
            });
            if let Some((schedule, duration)) = window(buffer)
                && let Some(change) = kerf_api::budget::window_next_change(schedule, duration, wall)
            {
                let virtual_ms = change.as_millisecond() - cx.options.wall_clock_offset_ms;
                next_at = util::earliest(next_at, Timestamp::from_millisecond(virtual_ms).ok());
            }
            resolved.push((key.clone(), buffer.clone(), resolve(buffer, cx.state, workload, wall)));
        }
        let mut pods = Vec::new();
        for (key, buffer, r) in &resolved {
            let Ok(r) = r else { continue };
            if r.inactive.is_some() {
                continue;
            }
            let version = format!(
                "{}.{}",
                buffer.metadata.resource_version.as_deref().unwrap_or_default(),
                r.template_generation.unwrap_or_default()
            );
            for i in 0..i64::from(r.replicas) {
                let pod = virtual_pod_of(&r.template, buffer.namespace(), buffer.name(), i, &version);
                pods.push(VirtualPod { buffer: key.clone(), pod: Arc::new(pod), held_on: None, registered: false });
            }
        }
        // Booked room (ProvisioningRequests) is held first: chunks take what it leaves.
        let before = previous_places(&cx.published.buffer_room);
        let booked = held_owned(&cx.published.booked_room);
        place_room(cx, &mut pods, &before, booked).await;
        let old = &cx.published.buffer_room;
        if old.pods != pods {
            let generation = old.generation + 1;
            cx.published.buffer_room = BufferRoom { pods, generation };
        }
        self.observed = Some(cx.state.generation());
        self.next_at = next_at;
        if let Some(t) = next_at {
            cx.pass.wake_at(t);
        }
        for (key, buffer, r) in resolved {
            let status = buffer_status(&cx.published.buffer_room, &key, &buffer, &r, cx.pass.now);
            // A merge patch of what changed: the buffer's spec, edited meanwhile, stays.
            let Some(patch) = status_changes(buffer.status.as_ref(), &status)? else { continue };
            let written = cx
                .api
                .patch_status::<CapacityBuffer>(Some(buffer.namespace()), buffer.name(), &Patch::Merge(patch))
                .await;
            if let Some(written) = cx.pass.soft("writing capacitybuffer status", written)? {
                cx.state.record(kerf_api::cluster::Object::into_any(written));
            }
        }
        // The status writes changed the generation; the room does not depend on status.
        self.observed = Some(cx.state.generation());
        Ok(())
    }
}

/// The status upstream defines for a buffer, from what it resolved to and where its room is.
fn buffer_status(
    room: &BufferRoom,
    key: &ObjectKey,
    buffer: &CapacityBuffer,
    resolved: &Result<Resolved, String>,
    now: Timestamp,
) -> CapacityBufferStatus {
    let old = buffer.status.clone().unwrap_or_default();
    let generation = buffer.metadata.generation;
    let mut status = CapacityBufferStatus {
        provisioning_strategy: Some(buffer.strategy().to_string()),
        conditions: old.conditions.clone(),
        ..CapacityBufferStatus::default()
    };
    let set =
        |status: &mut CapacityBufferStatus, c: Condition| kerf_api::shared::set_condition(&mut status.conditions, c);
    match resolved {
        Err(why) => {
            set(
                &mut status,
                condition(CONDITION_READY_FOR_PROVISIONING, false, "ResolutionFailed", why.clone(), now, generation),
            );
            set(
                &mut status,
                condition(
                    CONDITION_PROVISIONING,
                    false,
                    "NotReadyForProvisioning",
                    "the buffer could not be resolved".to_string(),
                    now,
                    generation,
                ),
            );
        }
        Ok(r) => {
            status.pod_template_ref = r.template_ref.clone().map(|name| LocalObjectRef { name });
            status.replicas = Some(r.replicas);
            status.pod_template_generation = r.template_generation;
            set(
                &mut status,
                condition(
                    CONDITION_READY_FOR_PROVISIONING,
                    true,
                    cb::REASON_ATTRIBUTES_SET,
                    "ready".to_string(),
                    now,
                    generation,
                ),
            );
            let c = match &r.inactive {
                Some(why) => condition(
                    CONDITION_PROVISIONING,
                    false,
                    "Inactive",
                    format!("no room kept: {why}"),
                    now,
                    generation,
                ),
                None => {
                    let (all, placed) = room.counts(key);
                    let held = room.pods.iter().filter(|p| &p.buffer == key && p.held_on.is_some()).count();
                    if placed == all {
                        condition(
                            CONDITION_PROVISIONING,
                            true,
                            "CapacityProvisioned",
                            format!("room for all {all} pod(s) exists on registered nodes"),
                            now,
                            generation,
                        )
                    } else {
                        condition(
                            CONDITION_PROVISIONING,
                            false,
                            "CapacityPending",
                            format!(
                                "room for {placed} of {all} pod(s) exists on registered nodes; {} on nodes still launching, {} on no node yet",
                                held - placed,
                                all - held
                            ),
                            now,
                            generation,
                        )
                    }
                }
            };
            set(&mut status, c);
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplate, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as KubeQuantity;
    use kerf_api::capacitybuffer::{CapacityBufferSpec, ScalableRef};
    use kerf_api::cluster::{Object, WatchEvent};

    fn template(cpu: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some([("cpu".to_string(), KubeQuantity(cpu.into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }
    }

    fn buffer(spec: CapacityBufferSpec) -> CapacityBuffer {
        CapacityBuffer {
            api_version: cb::API_VERSION.into(),
            kind: cb::KIND.into(),
            metadata: ObjectMeta { name: Some("b".into()), namespace: Some("default".into()), ..Default::default() },
            spec,
            status: None,
        }
    }

    fn state_with_template(cpu: &str) -> ClusterState {
        let mut s = ClusterState::new();
        let pt = PodTemplate {
            metadata: ObjectMeta { name: Some("t".into()), namespace: Some("default".into()), ..Default::default() },
            template: Some(template(cpu)),
        };
        s.apply(&WatchEvent::Applied(pt.into_any()));
        s
    }

    fn scalable(percentage: Option<i32>, replicas: Option<i32>) -> CapacityBufferSpec {
        CapacityBufferSpec {
            scalable_ref: Some(ScalableRef { api_group: "apps".into(), kind: "Deployment".into(), name: "web".into() }),
            percentage,
            replicas,
            ..Default::default()
        }
    }

    fn res(pairs: &[(&str, &str)]) -> ResourceList {
        let mut out = ResourceList::new();
        for (k, v) in pairs {
            out.set(*k, kerf_api::Quantity::parse(v).unwrap());
        }
        out
    }

    fn workload(replicas: i32) -> Result<Workload, String> {
        Ok(Workload { replicas, template: template("500m"), generation: Some(3) })
    }

    #[test]
    fn percentage_of_the_workload_rounds_up_to_at_least_one_chunk() {
        assert_eq!(chunks_from_percentage(20, 10), 2);
        assert_eq!(chunks_from_percentage(25, 10), 3);
        assert_eq!(chunks_from_percentage(10, 1), 1);
        assert_eq!(chunks_from_percentage(10, 0), 1);
        assert_eq!(chunks_from_percentage(0, 50), 0);
    }

    #[test]
    fn limits_cap_chunks_by_the_smallest_quotient_of_the_resources_a_chunk_requests() {
        let chunk = res(&[("cpu", "500m"), ("memory", "1Gi")]);
        let limits = res(&[("cpu", "4"), ("memory", "3Gi")]);
        assert_eq!(chunks_within(&limits, &chunk), Some(3));
        let gpus = res(&[("nvidia.com/gpu", "2")]);
        assert_eq!(chunks_within(&gpus, &chunk), None, "the chunk asks for no GPU: nothing capped");
    }

    #[test]
    fn replicas_and_percentage_together_keep_the_larger_capped_by_limits() {
        let s = ClusterState::new();
        let wall = Timestamp::UNIX_EPOCH;
        let r = |spec: CapacityBufferSpec, w: i32| resolve(&buffer(spec), &s, Some(&workload(w)), wall).unwrap();
        assert_eq!(r(scalable(Some(50), Some(2)), 10).replicas, 5);
        assert_eq!(r(scalable(Some(10), Some(4)), 10).replicas, 4);
        let mut capped = scalable(Some(50), None);
        capped.limits = Some(res(&[("cpu", "1")]));
        assert_eq!(r(capped, 10).replicas, 2, "two 500m chunks fit in 1 CPU");
        let got = r(scalable(Some(20), None), 10);
        assert_eq!((got.template_ref, got.template_generation), (None, Some(3)));
    }

    #[test]
    fn a_pod_template_buffer_takes_its_shape_from_the_template_and_its_count_from_limits_alone() {
        let s = state_with_template("250m");
        let spec = CapacityBufferSpec {
            pod_template_ref: Some(LocalObjectRef { name: "t".into() }),
            limits: Some(res(&[("cpu", "2")])),
            ..Default::default()
        };
        let got = resolve(&buffer(spec), &s, None, Timestamp::UNIX_EPOCH).unwrap();
        assert_eq!(got.replicas, 8);
        assert_eq!(got.template_ref.as_deref(), Some("t"));
    }

    #[test]
    fn unresolvable_buffers_say_what_is_missing() {
        let s = ClusterState::new();
        let wall = Timestamp::UNIX_EPOCH;
        let missing = CapacityBufferSpec {
            pod_template_ref: Some(LocalObjectRef { name: "nope".into() }),
            replicas: Some(1),
            ..Default::default()
        };
        assert_eq!(resolve(&buffer(missing), &s, None, wall).unwrap_err(), "PodTemplate default/nope not found");
        let mut job = scalable(None, Some(1));
        job.scalable_ref = Some(ScalableRef { api_group: "batch".into(), kind: "Job".into(), name: "j".into() });
        assert!(resolve(&buffer(job), &s, None, wall).unwrap_err().contains("kind batch/Job is not supported"));
        let gone = Err("Deployment default/web not found".to_string());
        assert_eq!(
            resolve(&buffer(scalable(None, Some(1))), &s, Some(&gone), wall).unwrap_err(),
            "Deployment default/web not found"
        );
    }

    #[test]
    fn a_scheduled_buffer_keeps_room_only_inside_its_window() {
        let s = state_with_template("1");
        let mut b = buffer(CapacityBufferSpec {
            pod_template_ref: Some(LocalObjectRef { name: "t".into() }),
            replicas: Some(2),
            ..Default::default()
        });
        b.metadata.annotations = Some(
            [
                (cb::ANNOTATION_ACTIVE_SCHEDULE.to_string(), "0 8 * * mon-fri".to_string()),
                (cb::ANNOTATION_ACTIVE_DURATION.to_string(), "10h".to_string()),
            ]
            .into(),
        );
        // 2025-01-06 is a Monday.
        let at = |h: i64| Timestamp::from_second(1_736_121_600 + h * 3600).unwrap();
        assert!(resolve(&b, &s, None, at(7)).unwrap().inactive.is_some(), "before 08:00");
        assert!(resolve(&b, &s, None, at(9)).unwrap().inactive.is_none(), "09:00 is inside 08:00 + 10h");
        assert!(resolve(&b, &s, None, at(19)).unwrap().inactive.is_some(), "after 18:00");
        let (schedule, duration) = window(&b).unwrap();
        assert_eq!(kerf_api::budget::window_next_change(schedule, duration, at(9)), Some(at(18)));
        assert_eq!(kerf_api::budget::window_next_change(schedule, duration, at(19)), Some(at(32)));
    }
}
