//! The provisioner: batches pods kube-scheduler could not place, runs the scheduling core
//! against existing nodes, in-flight NodeClaims and NodePools, and creates NodeClaims.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures_util::stream::{self, StreamExt};
use kerf_api::SlimPod;
use kerf_api::pod_facts;
use kerf_cloud::{CloudProvider, Timestamp};
use kerf_scheduling::{SchedulingContext, SchedulingInput, SchedulingResult};

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::nominations::Nominations;
use crate::pass::{IN_FLIGHT, UNSCHEDULABLE_RETRY_AFTER};
use crate::published::PodLaunch;
use crate::state::{ClusterState, ObjectKey};
use crate::util;
use kerf_api::cluster::{ApiError, ClusterApi, EventRecord, Object};

fn pod_name(key: &ObjectKey) -> String {
    format!("{}/{}", key.0, key.1)
}

/// Whether kerf should provision for this pod: kube-scheduler marked it unschedulable, it is
/// not terminating, not a DaemonSet's, and not already nominated to an in-flight claim.
fn provisionable(nominations: &Nominations, key: &ObjectKey, pod: &SlimPod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && util::marked_unschedulable(pod)
        && pod_facts::daemonset_owner(pod).is_none()
        && !nominations.contains(key)
}

fn provisionable_pods(state: &ClusterState, nominations: &Nominations) -> Vec<(ObjectKey, Arc<SlimPod>)> {
    state
        .unbound_pods()
        .filter(|(k, p)| provisionable(nominations, k, p))
        .map(|(k, p)| (k.clone(), p.clone()))
        .collect()
}

/// The provisioning batch window (see [`crate::Options::batch_idle`], [`crate::Options::batch_max`]).
#[derive(Debug, Default, Clone)]
struct Batch {
    /// When the open window started; `None` when no window is open.
    started: Option<Timestamp>,
    /// When the last new pending pod was seen.
    last_trigger: Option<Timestamp>,
    /// Provisionable pods already seen: only new ones (re)open a window.
    seen: BTreeSet<ObjectKey>,
    /// Something other than a pod changed that may let pending pods fit (see
    /// [`crate::ctx::Published::pending_may_fit`]): re-run even without new pods.
    dirty: bool,
    /// (pod generation, nomination generation) when `seen` was last brought up to date.
    observed: Option<(u64, u64)>,
    /// When to try pods that fit nowhere again, even if nothing visible changed (offerings
    /// marked unavailable come back; the cloud's view is not in the watch).
    retry_at: Option<Timestamp>,
    /// The room generations last looked at (room held nowhere opens a window once).
    room_seen: Option<(u64, u64)>,
}

/// The provisioner: its batch window. Where it expects pods to run (nominations) it publishes.
#[derive(Debug, Default)]
pub(crate) struct Provisioner {
    batch: Batch,
}

impl Provisioner {
    /// One provisioning pass, then every pending pod's `status.nominatedNodeName` brought in
    /// line with the plan.
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        self.batch.dirty |= std::mem::take(&mut cx.published.pending_may_fit);
        let r = self.provision_batch(cx).await;
        cx.published.batch_open = self.batch.started.is_some();
        r?;
        cx.published.nominations.write(cx.api, cx.cloud, cx.state, &mut cx.pass).await
    }

    async fn provision_batch<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        cx.published.nominations.expire(cx.state, &mut cx.pass, cx.options.batch_max);
        // Room held nowhere opens a window like a new pending pod (once per change).
        let room_short = cx.published.buffer_room.short() || cx.published.booked_room.short();
        let generation = cx.published.room_generation();
        let room_new = room_short && self.batch.room_seen != Some(generation);
        self.batch.room_seen = Some(generation);
        // Rescan the pending pods only when a pod or a nomination changed since the last scan.
        let generation = (cx.state.pod_generation(), cx.published.nominations.generation);
        let mut has_new = false;
        if self.batch.observed != Some(generation) {
            let mut count = 0;
            for (k, p) in cx.state.unbound_pods() {
                if provisionable(&cx.published.nominations, k, p) {
                    count += 1;
                    has_new |= !self.batch.seen.contains(k);
                }
            }
            // Every pending pod already seen and as many as before: the set is unchanged.
            if has_new || count != self.batch.seen.len() {
                let seen =
                    provisionable_pods(cx.state, &cx.published.nominations).into_iter().map(|(k, _)| k).collect();
                self.batch.seen = seen;
            }
            self.batch.observed = Some(generation);
        }
        has_new |= room_new;
        if self.batch.seen.is_empty() && !room_short {
            self.batch.started = None;
            self.batch.last_trigger = None;
            self.batch.dirty = false;
            self.batch.retry_at = None;
            return Ok(());
        }
        if let Some(retry) = self.batch.retry_at {
            if cx.pass.now >= retry {
                self.batch.retry_at = None;
                self.batch.dirty = true;
            } else {
                cx.pass.wake_at(retry);
            }
        }
        if has_new || self.batch.dirty {
            self.batch.dirty = false;
            self.batch.started.get_or_insert(cx.pass.now);
            self.batch.last_trigger = Some(cx.pass.now);
        }
        let (Some(started), Some(last)) = (self.batch.started, self.batch.last_trigger) else {
            // No open window: these pods were already tried and nothing changed since.
            return Ok(());
        };
        let closes = util::after(last, cx.options.batch_idle).min(util::after(started, cx.options.batch_max));
        if cx.pass.now < closes {
            cx.pass.wake_at(closes);
            return Ok(());
        }
        self.batch.started = None;
        self.batch.last_trigger = None;

        let pending = provisionable_pods(cx.state, &cx.published.nominations);
        let pods = util::first_five_of(pending.iter().map(|(k, _)| pod_name(k)), pending.len());
        // Booked room held nowhere (lost to other pods, or its launch failed) is launched again;
        // booked room that is held stays where it is (below).
        let room: Vec<Arc<SlimPod>> = (cx.published.booked_room.pods.iter().filter(|p| p.held_on.is_none()))
            .chain(&cx.published.buffer_room.pods)
            .map(|p| Arc::clone(&p.pod))
            .collect();
        if !pending.is_empty() {
            tracing::info!(pods = %pods, count = pending.len(), "found provisionable pod(s)");
        }
        if !room.is_empty() {
            tracing::info!(
                count = room.len(),
                "placing capacity buffer room and lost booked room after the pending pods"
            );
        }

        let types = cx.instance_types_by_pool().await;
        // The buffers' room (and booked room held nowhere) is placed last, by pods the result's indices past `pending` name
        // (no nomination, no event: they exist only here).
        let mut input = cx.view().scheduling_input_with(&pending, &types, false);
        // ProvisioningRequests' booked room is taken where it is held: pending pods are not
        // planned into it (those that consume a booking have already freed their share).
        let mut booked = cx.published.booked_room.held();
        for n in &mut input.existing_nodes {
            n.pods.extend(booked.remove(n.name.as_str()).unwrap_or_default());
        }
        input.placed_last = room.len();
        input.pods.extend(room);
        let result = SchedulingContext::with_facts(input.clone(), cx.pod_facts).place_pending();
        let applied = self.apply_scheduling_result(cx, &pending, &input, result).await;
        if applied.is_err() {
            // The window is closed and the pods already seen: without this, the pods whose
            // claims were not created before the failure would wait for an unrelated change.
            self.batch.dirty = true;
        }
        applied
    }

    async fn apply_scheduling_result<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        pending: &[(ObjectKey, Arc<SlimPod>)],
        input: &SchedulingInput,
        result: SchedulingResult,
    ) -> Result<(), ControllerError> {
        // Pods placed on in-flight claims are nominated to them; pods placed on existing nodes
        // are nominated to those nodes (kube-scheduler binds them).
        let in_flight_names: BTreeSet<&str> =
            input.existing_nodes.iter().filter(|n| n.in_flight).map(|n| n.name.as_str()).collect();
        for (key, _) in pending {
            cx.published.nominations.on_nodes.remove(key);
        }
        for placement in &result.placements {
            let Some((key, _)) = pending.get(placement.pod) else { continue };
            if in_flight_names.contains(placement.node.as_str()) {
                nominate(cx, key, &placement.node).await;
            } else {
                cx.published.nominations.on_nodes.insert(key.clone(), placement.node.clone());
            }
        }

        if !result.new_node_claims.is_empty() {
            let pods: usize = result.new_node_claims.iter().map(|c| c.pods.len()).sum();
            tracing::info!(nodeclaims = result.new_node_claims.len(), pods, "computed new nodeclaim(s) to fit pod(s)");
        }
        // Named in plan order (one seeded generator), created IN_FLIGHT at a time, answers
        // taken in that order.
        let mut claims = Vec::with_capacity(result.new_node_claims.len());
        let mut named = BTreeSet::new();
        for new in &result.new_node_claims {
            let Some(pool) = cx.state.node_pool(&new.node_pool).cloned() else { continue };
            let mut claim = cx.new_claim(&pool, new);
            // Not created yet, so not in the cache: a name drawn twice in one batch is drawn again.
            while !named.insert(claim.name().to_string()) {
                claim.metadata.name = Some(crate::claims::claim_name(cx.state, cx.names, pool.name()));
            }
            claims.push((new, claim));
        }
        let api = cx.api;
        let mut answers =
            stream::iter(claims).map(|(new, claim)| async move { (new, api.create(claim).await) }).buffered(IN_FLIGHT);
        while let Some((new, created)) = answers.next().await {
            let created = match created {
                Err(ApiError::Invalid { message, .. }) => {
                    // Retrying the same claim cannot help: tell its pods why they stay pending.
                    tracing::error!(NodePool = %new.node_pool, error = %message, "failed creating nodeclaim");
                    for &i in &new.pods {
                        if let Some((key, _)) = pending.get(i) {
                            cx.api
                                .record_event(EventRecord {
                                    kind: "Pod",
                                    name: pod_name(key),
                                    uid: cx.state.pod_uid(key),
                                    type_: "Warning",
                                    reason: "FailedScheduling".to_string(),
                                    message: format!(
                                        "NodePool {}: the NodeClaim for this pod was rejected: {message}",
                                        new.node_pool
                                    ),
                                })
                                .await;
                        }
                    }
                    continue;
                }
                other => other,
            };
            let Some(created) = cx.pass.soft("creating nodeclaim", created)? else {
                // Its pods stay pending and already seen: make the next pass try them again.
                self.batch.dirty = true;
                continue;
            };
            let its: Vec<String> = new.instance_types.iter().map(|t| t.name.clone()).collect();
            tracing::info!(
                NodePool = %new.node_pool,
                NodeClaim = %created.name(),
                requests = %new.requests,
                "instance-types" = %util::first_five(&its),
                "created nodeclaim"
            );
            let claim_name = created.name().to_string();
            cx.state.record(created.into_any());
            for &i in &new.pods {
                if let Some((key, _)) = pending.get(i) {
                    nominate(cx, key, &claim_name).await;
                }
            }
            let for_pods: Vec<(String, String)> = new
                .pods
                .iter()
                .filter_map(|&i| pending.get(i))
                .filter_map(|(key, pod)| Some((pod_name(key), util::owner_key(pod)?)))
                .collect();
            cx.published.pod_launches.push(PodLaunch {
                claim: claim_name,
                node_pool: new.node_pool.clone(),
                pods: for_pods,
                at: cx.pass.now,
            });
        }

        self.batch.retry_at = (!result.errors.is_empty()).then(|| util::after(cx.pass.now, UNSCHEDULABLE_RETRY_AFTER));
        if let Some(retry) = self.batch.retry_at {
            cx.pass.wake_at(retry);
        }
        for (i, err) in &result.errors {
            let Some((key, _)) = pending.get(*i) else { continue };
            tracing::info!(pod = %pod_name(key), reason = %err.reason, "could not schedule pod: {}", err.message);
            cx.api
                .record_event(EventRecord {
                    kind: "Pod",
                    name: pod_name(key),
                    uid: cx.state.pod_uid(key),
                    type_: "Warning",
                    reason: "FailedScheduling".to_string(),
                    message: err.message.clone(),
                })
                .await;
        }
        Ok(())
    }
}

async fn nominate<P, C: ClusterApi>(cx: &mut Ctx<'_, P, C>, pod: &ObjectKey, claim: &str) {
    cx.published.nominations.insert(pod.clone(), claim);
    cx.api
        .record_event(EventRecord {
            kind: "Pod",
            name: pod_name(pod),
            uid: cx.state.pod_uid(pod),
            type_: "Normal",
            reason: "Nominated".to_string(),
            message: format!("Pod should schedule on: nodeclaim/{claim}"),
        })
        .await;
}
