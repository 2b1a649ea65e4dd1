//! The writes the simulator's stand-ins make to a pod (kube-scheduler's binding and its
//! `Unschedulable` condition, the kubelet's start and addresses), on whichever form the store
//! keeps pods in (see `kerf_apiserver::pod_form`): the same change, field by field, to a whole
//! `Pod` when the cluster is served and to the kept [`SlimPod`] when it is not.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{HostIP, Pod, PodCondition, PodIP, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::SlimPod;
use kerf_api::clock::Timestamp;
use kerf_api::cluster::{AnyObject, ApiError};
use kerf_api::slim_pod::{ConditionStatus, KeptCondition, SlimCondition, SlimPodStatus};
use kerf_apiserver::Stored;

use kerf_apiserver::SimCluster;

/// A pod's fields a stand-in changes.
pub trait PodEdit {
    fn set_node_name(&mut self, node: &str);
    fn set_phase(&mut self, phase: &str);
    /// Sets the start time unless it has one.
    fn start_once(&mut self, now: Timestamp);
    fn clear_nomination(&mut self);
    fn has_condition(&self, type_: KeptCondition) -> bool;
    fn remove_condition(&mut self, type_: KeptCondition);
    /// Adds the condition last (after removing any of its type).
    fn set_condition(
        &mut self,
        type_: KeptCondition,
        status: ConditionStatus,
        reason: Option<&str>,
        message: Option<String>,
        now: Timestamp,
    );
    /// The addresses the kubelet reports for a pod it starts: its node's (`host_ip`, when the
    /// node has one) and, unless the pod has one already, its own ([`crate::addresses::pod_ip`];
    /// its node's when it is on the host's network). A slim pod keeps no addresses: nothing the
    /// controllers decide reads them.
    fn set_addresses(&mut self, host_ip: Option<&str>);
}

impl PodEdit for Pod {
    fn set_node_name(&mut self, node: &str) {
        self.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
    }
    fn set_phase(&mut self, phase: &str) {
        status(self).phase = Some(phase.to_string());
    }
    fn start_once(&mut self, now: Timestamp) {
        status(self).start_time.get_or_insert(Time(now));
    }
    fn clear_nomination(&mut self) {
        status(self).nominated_node_name = None;
    }
    fn has_condition(&self, type_: KeptCondition) -> bool {
        let conditions = self.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
        conditions.iter().any(|c| c.type_ == type_.as_str())
    }
    fn remove_condition(&mut self, type_: KeptCondition) {
        status(self).conditions.get_or_insert_with(Vec::new).retain(|c| c.type_ != type_.as_str());
    }
    fn set_condition(
        &mut self,
        type_: KeptCondition,
        s: ConditionStatus,
        reason: Option<&str>,
        message: Option<String>,
        now: Timestamp,
    ) {
        let conditions = status(self).conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != type_.as_str());
        conditions.push(PodCondition {
            type_: type_.as_str().to_string(),
            status: s.as_str().to_string(),
            reason: reason.map(str::to_string),
            message,
            last_transition_time: Some(Time(now)),
            ..PodCondition::default()
        });
    }
    fn set_addresses(&mut self, host_ip: Option<&str>) {
        let has_ip = self.status.as_ref().is_some_and(|s| s.pod_ip.is_some());
        let host_network = self.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
        let ip = match (has_ip, host_network) {
            (true, _) => None,
            (false, true) => host_ip.map(str::to_string),
            (false, false) => self.metadata.uid.as_deref().map(crate::addresses::pod_ip),
        };
        let status = status(self);
        if let Some(host) = host_ip {
            status.host_ip = Some(host.to_string());
            status.host_ips = Some(vec![HostIP { ip: host.to_string() }]);
        }
        if let Some(ip) = ip {
            status.pod_ips = Some(vec![PodIP { ip: ip.clone() }]);
            status.pod_ip = Some(ip);
        }
    }
}

fn status(pod: &mut Pod) -> &mut PodStatus {
    pod.status.get_or_insert_with(PodStatus::default)
}

impl PodEdit for SlimPod {
    fn set_node_name(&mut self, node: &str) {
        self.spec.get_or_insert_with(Default::default).node_name = Some(kerf_api::slim_pod::node_name(node));
    }
    fn set_phase(&mut self, phase: &str) {
        slim_status(self).phase = Some(phase.to_string());
    }
    fn start_once(&mut self, now: Timestamp) {
        let status = slim_status(self);
        if status.start_time().is_none() {
            status.set_start_time(Some(&Time(now)));
        }
    }
    fn clear_nomination(&mut self) {
        slim_status(self).set_nominated_node_name(None);
    }
    fn has_condition(&self, type_: KeptCondition) -> bool {
        self.condition(type_).is_some()
    }
    fn remove_condition(&mut self, type_: KeptCondition) {
        slim_status(self).conditions.get_or_insert_with(Vec::new).retain(|c| c.type_ != type_);
    }
    fn set_condition(
        &mut self,
        type_: KeptCondition,
        s: ConditionStatus,
        reason: Option<&str>,
        message: Option<String>,
        now: Timestamp,
    ) {
        let conditions = slim_status(self).conditions.get_or_insert_with(Vec::new);
        conditions.retain(|c| c.type_ != type_);
        conditions.push(SlimCondition::new(type_, s, reason.map(str::to_string), message, Some(Time(now))));
    }
    fn set_addresses(&mut self, _host_ip: Option<&str>) {}
}

fn slim_status(pod: &mut SlimPod) -> &mut SlimPodStatus {
    pod.status.get_or_insert_with(SlimPodStatus::default)
}

/// What the kubelet writes for a pod it starts on a node whose address is `host_ip`: phase
/// Running since `now` (a start time already set is kept), `PodScheduled` (which it adds for
/// pods bound without kube-scheduler), `Ready` True and the pod's addresses. The simulator pulls
/// no images and runs no probes, so it all happens at once.
pub fn set_running(pod: &mut dyn PodEdit, now: Timestamp, host_ip: Option<&str>) {
    pod.set_phase("Running");
    pod.start_once(now);
    pod.remove_condition(KeptCondition::Ready);
    if !pod.has_condition(KeptCondition::PodScheduled) {
        pod.set_condition(KeptCondition::PodScheduled, ConditionStatus::True, None, None, now);
    }
    pod.set_condition(KeptCondition::Ready, ConditionStatus::True, None, None, now);
    pod.set_addresses(host_ip);
}

/// Writes a stand-in's change to the stored pod the world's `pod` stands for, whole (see
/// `SimCluster::replace_obj`) and pinned at the version the world holds, so the write is
/// refused as a conflict when the pod changed since. The answer is the pod written, as the
/// world keeps it; `None` when the pod is gone.
pub fn write_pod(
    cluster: &SimCluster,
    pod: &SlimPod,
    edit: impl FnOnce(&mut dyn PodEdit),
) -> Option<Result<Arc<SlimPod>, ApiError>> {
    let name = pod.metadata.name.as_deref()?;
    let version = &pod.metadata.resource_version;
    Some(match cluster.get_stored("Pod", pod.metadata.namespace.as_deref(), name)? {
        Stored::Typed(AnyObject::SlimPod(stored)) => {
            let mut p = SlimPod::clone(&stored);
            p.metadata.resource_version.clone_from(version);
            edit(&mut p);
            cluster.replace_obj(p)
        }
        Stored::Typed(AnyObject::Pod(stored)) => {
            let mut p = Pod::clone(&stored);
            p.metadata.resource_version.clone_from(version);
            edit(&mut p);
            cluster.replace_obj(p).map(|written| Arc::new(SlimPod::from(&*written)))
        }
        Stored::Typed(_) | Stored::Dynamic(_) => return None,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kerf_api::clock::{Clock, ManualClock};

    use super::*;

    /// A pending pod that was nominated and found unschedulable once, with a condition the
    /// slim form does not keep.
    fn pending() -> Pod {
        let condition = |type_: &str, status: &str| PodCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            ..PodCondition::default()
        };
        Pod {
            metadata: ObjectMeta { name: Some("a".to_string()), ..ObjectMeta::default() },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Pending".to_string()),
                nominated_node_name: Some("n1".to_string()),
                conditions: Some(vec![condition("PodScheduled", "False"), condition("ContainersReady", "False")]),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn a_binding_and_a_start_leave_the_same_kept_pod_whichever_form_the_store_keeps() {
        let written = [false, true].map(|slim| {
            let clock = ManualClock::new();
            let cluster = SimCluster::new(clock.clone(), 1);
            if slim {
                cluster.keep_pods_slim();
            }
            cluster.create_obj(pending()).unwrap();
            let read = cluster.get_obj::<SlimPod>(Some("default"), "a").unwrap();
            clock.advance(std::time::Duration::from_secs(5));
            let now = clock.now();
            let bound = write_pod(&cluster, &read, |p| {
                p.set_node_name("n1");
                p.clear_nomination();
                p.set_condition(KeptCondition::PodScheduled, ConditionStatus::True, None, None, now);
                set_running(p, now, Some("10.0.0.7"));
            });
            // A second write from the same (now stale) read is a conflict.
            let stale = write_pod(&cluster, &read, |p| p.set_phase("Failed"));
            assert!(matches!(stale, Some(Err(ApiError::Conflict { .. }))), "{stale:?}");
            SlimPod::clone(&bound.expect("the pod exists").expect("written"))
        });
        assert_eq!(written[0], written[1]);
        let pod = &written[1];
        assert_eq!(pod.spec.as_ref().and_then(|s| s.node_name.as_deref()), Some("n1"));
        let status = pod.status.as_ref().unwrap();
        assert_eq!((status.phase.as_deref(), status.nominated_node_name()), (Some("Running"), None));
        let kept: Vec<_> = status.conditions.iter().flatten().map(|c| (c.type_, c.status)).collect();
        assert_eq!(
            kept,
            [(KeptCondition::PodScheduled, ConditionStatus::True), (KeptCondition::Ready, ConditionStatus::True)]
        );
        assert!(status.start_time().is_some());
    }

    #[test]
    fn a_started_pod_gets_its_own_address_and_its_nodes_and_keeps_them() {
        let uid = "00000000-0000-4000-8000-000000000102";
        let mut pod = pending();
        pod.metadata.uid = Some(uid.to_string());
        let now = ManualClock::new().now();
        set_running(&mut pod, now, Some("10.0.0.7"));
        let addresses = |p: &Pod| {
            let s = p.status.clone().unwrap_or_default();
            let ips = |v: Option<Vec<String>>| v.unwrap_or_default().join(",");
            (
                s.pod_ip,
                ips(s.pod_ips.map(|v| v.into_iter().map(|i| i.ip).collect())),
                s.host_ip,
                ips(s.host_ips.map(|v| v.into_iter().map(|i| i.ip).collect())),
            )
        };
        let own = Some("100.64.1.3".to_string());
        let host = Some("10.0.0.7".to_string());
        assert_eq!(addresses(&pod), (own.clone(), "100.64.1.3".to_string(), host.clone(), "10.0.0.7".to_string()));
        // Started again (its node rebooted), it keeps its address.
        set_running(&mut pod, now, Some("10.0.0.7"));
        assert_eq!(addresses(&pod).0, own);
        // On the host's network it has its node's address; on a node without one, none.
        let mut on_host = pending();
        on_host.metadata.uid = Some(uid.to_string());
        on_host.spec.get_or_insert_with(Default::default).host_network = Some(true);
        let mut bare = on_host.clone();
        set_running(&mut on_host, now, Some("10.0.0.7"));
        assert_eq!(addresses(&on_host).0, host);
        set_running(&mut bare, now, None);
        assert_eq!(addresses(&bare), (None, String::new(), None, String::new()));
    }
}
