//! Report assembly: the timeline samples the clock loop records as it goes, and the JSON
//! report built from a simulation's state ([`crate::report`] holds the report's types and
//! their rendering).
//!
//! The report reads everything (the world, the cloud's instances, the controllers' disruption
//! records and blocked nodes, the stand-ins' pod owners and messages) but changes nothing, so
//! it lives apart from the loop that moves the run forward.

use std::collections::BTreeMap;

use kerf_api::{ResourceList, SlimPod};
use kerf_cloud::{ManualClock, Timestamp};
use kerf_scheduling::pod_requests;

use crate::driver::Simulation;
use crate::kubelet::Instance;
use crate::report::{Disruption, NodeReport, PodReport, Reboot, Report, Sample, Seconds, Summary, dollars};
use crate::sim_cloud::SimCloud;
use kerf_scheduling::node::node_ready;

impl<P: SimCloud> Simulation<P> {
    /// Records the state at the end of an instant in the timeline (a sample replaces one at the
    /// same instant; one equal to the last is not kept).
    pub(crate) fn sample(&mut self) {
        let s = Sample {
            seconds: self.elapsed(),
            nodes: self.world.nodes.len(),
            pods_pending: self.world.pod_count() - self.world.bound_count(),
            pods_running: self.world.bound_count(),
            cost_per_hour: self.fleet_price(),
        };
        if !self.manager.state().capacity_quotas().is_empty() {
            self.quota_history.sample(self.manager.state(), s.seconds);
        }
        match self.timeline.last_mut() {
            Some(last) if last.seconds == s.seconds => *last = s,
            Some(last)
                if last.nodes == s.nodes
                    && last.pods_pending == s.pods_pending
                    && last.pods_running == s.pods_running
                    && last.cost_per_hour == s.cost_per_hour => {}
            _ => self.timeline.push(s),
        }
    }

    /// The report of the run so far (the JSON report of docs/design.md).
    pub fn report(&self) -> Report {
        let instances = self.manager.cloud().sim_instances();
        let unpriced = self.manager.cloud().sim_unpriced();
        let by_pid: BTreeMap<&str, &Instance> = instances.iter().map(|i| (i.provider_id.as_str(), i)).collect();
        let ebs_claims = self.world.ebs_claims();
        let mut nodes = Vec::new();
        for (name, node) in &self.world.nodes {
            let labels = node.metadata.labels.clone().unwrap_or_default();
            let pid = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
            let inst = pid.and_then(|p| by_pid.get(p)).copied();
            let claim = pid.and_then(|p| self.world.claim_by_provider.get(p)).cloned();
            let managed = inst.is_some() || claim.is_some();
            let pods_here: Vec<&SlimPod> = self
                .world
                .pods_by_node
                .get(name)
                .into_iter()
                .flatten()
                .filter_map(|k| self.world.pods.get(k))
                .map(|e| e.pod.as_ref())
                .collect();
            let mut requested = ResourceList::new();
            for p in &pods_here {
                let volumes = kerf_scheduling::volume_limits::ebs_volume_count(p, &ebs_claims);
                requested.add(&kerf_scheduling::volume_limits::with_ebs_volumes(&pod_requests(p), volumes));
            }
            let allocatable: BTreeMap<String, String> = node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .into_iter()
                .flatten()
                .map(|(k, q)| {
                    (k.clone(), kerf_api::Quantity::parse(&q.0).map_or_else(|_| q.0.clone(), |q| q.canonical()))
                })
                .collect();
            nodes.push(NodeReport {
                name: name.clone(),
                node_pool: if managed { labels.get(kerf_api::labels::NODE_POOL).cloned() } else { None },
                node_claim: claim,
                instance_type: labels
                    .get(kerf_api::labels::INSTANCE_TYPE)
                    .cloned()
                    .or_else(|| inst.map(|i| i.instance_type.clone())),
                capacity_type: labels
                    .get(kerf_api::labels::CAPACITY_TYPE)
                    .cloned()
                    .or_else(|| inst.map(|i| i.capacity_type.clone())),
                // Its label, or the `open` reservation EC2 put its on-demand instance in.
                capacity_reservation_id: labels
                    .get(kerf_api::labels::CAPACITY_RESERVATION_ID)
                    .cloned()
                    .or_else(|| inst.and_then(|i| i.capacity_reservation.clone())),
                zone: labels.get(kerf_api::labels::ZONE).cloned().or_else(|| inst.map(|i| i.zone.clone())),
                // A terminated instance costs nothing any more; an unknown price is not made up.
                price_per_hour: inst
                    .filter(|i| !unpriced.contains_key(&i.provider_id))
                    .map(|i| if i.terminated { 0.0 } else { dollars(i.price) }),
                price_unknown: pid.and_then(|p| unpriced.get(p)).cloned(),
                price_estimated: inst
                    .is_some_and(|i| i.price_estimated && !i.terminated && !unpriced.contains_key(&i.provider_id)),
                list_price_per_hour: inst
                    .filter(|i| !i.terminated && dollars(i.list_price) != dollars(i.price))
                    .map(|i| dollars(i.list_price)),
                node_overlays: inst.filter(|i| !i.terminated).map(|i| i.overlays.clone()).unwrap_or_default(),
                ready: node_ready(node),
                pods: pods_here.len(),
                // Only for managed nodes that are not being disrupted or deleted.
                disruption_blocked: if managed
                    && node.metadata.deletion_timestamp.is_none()
                    && !node
                        .spec
                        .as_ref()
                        .and_then(|s| s.taints.as_ref())
                        .is_some_and(|ts| ts.iter().any(|t| t.key == kerf_api::labels::DISRUPTED_TAINT_KEY))
                {
                    self.manager.disruption_blocked().get(name).cloned()
                } else {
                    None
                },
                labels,
                annotations: node.metadata.annotations.clone().unwrap_or_default(),
                taints: node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .into_iter()
                    .flatten()
                    .filter_map(kerf_api::Taint::from_core)
                    .collect(),
                allocatable,
                requested: requested.without_zeros().iter().map(|(k, q)| (k.clone(), q.canonical())).collect(),
            });
        }
        let failed = self.cluster.latest_events_by_object("Pod", "FailedScheduling");
        let nominated = self.cluster.latest_events_by_object("Pod", "Nominated");
        let mut pods = Vec::new();
        let mut running = 0;
        for (key, e) in &self.world.pods {
            let node = e.node().map(str::to_string);
            let is_running = node.as_deref().is_some_and(|n| self.world.is_node_ready(n));
            if is_running {
                running += 1;
            }
            let owner = self
                .workloads
                .owner_of(key)
                .or_else(|| self.daemonsets.owner_of(key))
                .or_else(|| {
                    e.pod
                        .metadata
                        .owner_references
                        .as_ref()
                        .and_then(|o| o.iter().find(|r| r.controller == Some(true)))
                        .map(|r| format!("{}/{}", r.kind, r.name))
                })
                .unwrap_or_default();
            let reason = if is_running {
                None
            } else if let Some(n) = &node {
                Some(format!("bound to node {n}, which is not Ready"))
            } else {
                let scheduler_msg = self.scheduler.message(key).map(str::to_string);
                match (failed.get(key), nominated.get(key)) {
                    (Some(f), n) if n.is_none_or(|n| n.time <= f.time) => Some(f.record.message.clone()),
                    (_, Some(n)) => Some(match scheduler_msg {
                        Some(m) => format!("{m} {} (waiting for its node)", n.record.message),
                        None => format!("{} (waiting for its node)", n.record.message),
                    }),
                    _ => scheduler_msg.or_else(|| Some("not yet considered by the scheduler".to_string())),
                }
            };
            pods.push(PodReport {
                namespace: e.pod.metadata.namespace.clone().unwrap_or_else(|| "default".to_string()),
                name: e.pod.metadata.name.clone().unwrap_or_default(),
                owner,
                node,
                phase: if is_running { "Running" } else { "Pending" }.to_string(),
                reason,
            });
        }
        let mut timeline = self.timeline.clone();
        let end = self.elapsed();
        if let Some(mut last) = timeline.last().copied()
            && last.seconds < end
        {
            last.seconds = end;
            timeline.push(last);
        }
        let cost_per_hour = instances.iter().filter(|i| !i.terminated).map(|i| i.price).sum::<f64>();
        let state = self.manager.state();
        let buffers =
            crate::report_buffers::buffer_reports(state.capacity_buffers(), self.manager.buffer_room(), &nodes);
        Report {
            scenario: self.name.clone(),
            end_seconds: Seconds(end),
            summary: Summary {
                pods: pods.len(),
                pods_running: running,
                pods_pending: pods.len() - running,
                nodes: nodes.len(),
                node_claims_launched: instances.iter().filter(|i| !self.adopted.contains(&i.provider_id)).count(),
                node_claims_terminated: instances.iter().filter(|i| i.terminated).count(),
                cost_per_hour: dollars(cost_per_hour),
                cost: dollars(self.cost),
                by_capacity_type: Summary::shares(&nodes),
            },
            nodes,
            pods,
            disruptions: self.disruption_report(&instances),
            reboots: self.reboot_report(),
            timeline,
            buffers,
            provisioning_requests: crate::report_requests::request_reports(state.provisioning_requests()),
            quotas: crate::report_quotas::quota_reports(state, &self.quota_history, self.elapsed()),
            balanced_what_if: self
                .manager
                .balanced_what_if()
                .pools
                .iter()
                .map(|(pool, w)| crate::report::BalancedWhatIf {
                    node_pool: pool.clone(),
                    policy: w.policy.to_string(),
                    consolidations: w.consolidations,
                    balanced_would_refuse: w.balanced_would_refuse,
                    refused_savings_per_hour: dollars(w.refused_savings),
                })
                .collect(),
            comparison: None,
        }
    }

    /// `reboots[]`: the nodes node repair rebooted, in order.
    fn reboot_report(&self) -> Vec<Reboot> {
        self.manager
            .repairs()
            .iter()
            .filter(|r| r.action == kerf_controller::disruption::RepairAction::Reboot)
            .map(|r| Reboot {
                at_seconds: Seconds((r.at.as_millisecond() - ManualClock::EPOCH_MILLIS) as f64 / 1000.0),
                node_claim: r.node_claim.clone(),
                node: r.node.clone(),
                node_pool: r.node_pool.clone(),
                condition: r.condition.to_string(),
                detail: r.detail.clone(),
            })
            .collect()
    }

    /// `disruptions[]`: interruption warnings as they were delivered, and every node the
    /// controllers disrupted, with when its instance was gone.
    fn disruption_report(&self, instances: &[Instance]) -> Vec<Disruption> {
        let secs = |t: Timestamp| Seconds((t.as_millisecond() - ManualClock::EPOCH_MILLIS) as f64 / 1000.0);
        let mut out = self.disruptions.clone();
        for rec in self.manager.disruptions() {
            let reason = rec.reason.as_str();
            match out.iter_mut().find(|d| d.node_claim == rec.node_claim && d.reason == reason) {
                Some(d) => {
                    d.replacements = rec.replacements.clone();
                    d.detail = format!("{}; {}", d.detail, rec.detail);
                    d.node_pool = d.node_pool.take().or_else(|| rec.node_pool.clone());
                    d.instance_type = d.instance_type.take().or_else(|| rec.instance_type.clone());
                }
                None => out.push(Disruption {
                    at_seconds: secs(rec.decided_at),
                    terminated_seconds: None,
                    node_claim: rec.node_claim.clone(),
                    node: rec.node.clone(),
                    node_pool: rec.node_pool.clone(),
                    instance_type: rec.instance_type.clone(),
                    reason: reason.to_string(),
                    replacements: rec.replacements.clone(),
                    detail: rec.detail.clone(),
                    score: rec.score,
                }),
            }
        }
        let pid_of: BTreeMap<&str, &str> =
            self.world.claim_by_provider.iter().map(|(p, c)| (c.as_str(), p.as_str())).collect();
        let by_pid: BTreeMap<&str, &Instance> = instances.iter().map(|i| (i.provider_id.as_str(), i)).collect();
        for d in &mut out {
            d.terminated_seconds =
                pid_of.get(d.node_claim.as_str()).and_then(|p| by_pid.get(p)).and_then(|i| i.terminated_at).map(secs);
        }
        out.sort_by(|a, b| a.at_seconds.0.total_cmp(&b.at_seconds.0));
        out
    }
}
