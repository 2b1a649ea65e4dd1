//! A Pod as the controllers and the decision core keep it: the fields scheduling, disruption,
//! termination and the metrics read, in the shapes Kubernetes gives them, and nothing else.
//!
//! Every pod of a cluster stays in the controllers' state for as long as it exists, and the
//! generated `Pod` type spends kilobytes on each one even when most of it is empty: a `PodSpec`
//! and a `PodStatus` carry every field of the API inline, each `Container` its probes, lifecycle
//! hooks and security settings, each `Volume` every volume source there is. In a large cluster
//! that makes up most of a controller's memory. [`SlimPod`] keeps the same field names and types for
//! what it keeps, so code reads `pod.spec.as_ref().and_then(|s| s.affinity.as_ref())` whichever
//! it holds, and it decodes straight from a Pod's JSON, skipping the rest as it goes.
//!
//! Kept: the metadata (less the server-side apply bookkeeping, kubectl's copy of the last
//! applied manifest and the deletion's grace period), the spec's placement constraints (node
//! name and selector, affinity, tolerations, topology spread, priority, runtime class, OS, host
//! network), its resources (containers' and init containers' requests, limits, ports and
//! restart policies, pod-level resources, overhead), the volumes that bind claims, the
//! termination grace period and scheduler name; the status's phase, its `PodScheduled` and
//! `Ready` conditions, nominated node, reason, message and start time.
//!
//! A slim pod is never written back whole: controllers patch named fields, evict or delete.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EphemeralVolumeSource, PersistentVolumeClaimVolumeSource, Pod, PodCondition,
    PodOS, PodSpec, PodStatus, ResourceRequirements, Toleration, TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

use crate::weak_table::WeakTable;
use crate::{MetaView, SlimMeta};

/// kubectl's copy of the manifest it last applied, kept on the object by client-side apply.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A Pod as the controllers keep it (see the module's doc).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SlimPod {
    pub metadata: SlimMeta,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<SlimPodSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<SlimPodStatus>,
}

/// What a [`SlimPod`] keeps of a `PodSpec`: the node it is bound to, and the rest, its shape,
/// which the replicas of a workload share: one copy of each distinct shape is kept (see
/// [`crate::pod_shapes`]). It reads as its shape (`spec.affinity`, `spec.containers`); changing
/// a field of the shape gives this spec a copy of its own.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(from = "PodShape")]
pub struct SlimPodSpec {
    /// One copy per node, shared by the pods bound to it ([`node_name`]).
    pub node_name: Option<Arc<str>>,
    shape: Arc<PodShape>,
}

static NODE_NAMES: LazyLock<WeakTable<str>> = LazyLock::new(WeakTable::new);

/// A node's name as the pods bound to it keep it: one copy for all of them.
pub fn node_name(name: &str) -> Arc<str> {
    let mut h = DefaultHasher::new();
    name.hash(&mut h);
    NODE_NAMES.share_arc_with(h.finish(), |n| n == name, || Arc::from(name))
}

/// A [`SlimPodSpec`] less its node name: what the replicas of a workload share.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodShape {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    pub containers: Vec<SlimContainer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<SlimContainer>>,
    /// The node name as decoded or written in a literal; a [`SlimPodSpec`] made of this shape
    /// takes it as its own (in a shared shape it is always `None`).
    #[serde(skip_serializing)]
    pub node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<PodOS>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// Only the volumes that bind a claim (`persistentVolumeClaim` or `ephemeral`).
    #[serde(deserialize_with = "claim_volumes", skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<SlimVolume>>,
}

/// What a [`SlimPod`] keeps of a `Container`: what it asks of a node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SlimContainer {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// `Always` on an init container makes it a sidecar that runs beside the app containers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// What a [`SlimPod`] keeps of a `Volume` that binds a claim (its zones constrain where the
/// pod can run); a pod's other volumes (config maps, secrets, projected tokens) are not kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SlimVolume {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<Box<EphemeralVolumeSource>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
}

/// What a [`SlimPod`] keeps of a `PodStatus`. Its reason, message and nominated node, which
/// only a pod that failed, was evicted or waits for a preemption has, are kept apart
/// ([`SlimPodStatus::reason`]), and its start time in whole seconds: every pod is kept for as
/// long as it exists, and three empty strings inline would cost each one 72 bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "StatusFields", into = "StatusFields")]
pub struct SlimPodStatus {
    /// Only the conditions of a [`KeptCondition`] type.
    pub conditions: Option<Vec<SlimCondition>>,
    pub phase: Option<String>,
    start: Second,
    detail: Option<Box<StatusDetail>>,
}

/// A pod status's reason, message and nominated node, when it has any.
#[derive(Debug, Clone, Default, PartialEq)]
struct StatusDetail {
    reason: Option<String>,
    message: Option<String>,
    nominated_node_name: Option<String>,
}

impl StatusDetail {
    /// The detail to keep: none when every field is empty.
    fn kept(self) -> Option<Box<StatusDetail>> {
        (self != StatusDetail::default()).then(|| Box::new(self))
    }
}

/// A [`SlimPodStatus`] field by field, as the API writes it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct StatusFields {
    #[serde(deserialize_with = "kept_conditions", skip_serializing_if = "Option::is_none")]
    conditions: Option<Vec<SlimCondition>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nominated_node_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    phase: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_time: Option<Time>,
}

impl From<StatusFields> for SlimPodStatus {
    fn from(f: StatusFields) -> Self {
        let StatusFields { conditions, message, nominated_node_name, phase, reason, start_time } = f;
        SlimPodStatus {
            conditions,
            phase,
            start: Second::of(start_time.as_ref()),
            detail: StatusDetail { reason, message, nominated_node_name }.kept(),
        }
    }
}

impl From<SlimPodStatus> for StatusFields {
    fn from(s: SlimPodStatus) -> Self {
        let SlimPodStatus { conditions, phase, start, detail } = s;
        let StatusDetail { reason, message, nominated_node_name } = detail.map(|d| *d).unwrap_or_default();
        StatusFields { conditions, message, nominated_node_name, phase, reason, start_time: start.time() }
    }
}

impl SlimPodStatus {
    /// Why the pod is in its phase (`Evicted`, `Preempting`), when the status says.
    pub fn reason(&self) -> Option<&str> {
        self.detail.as_ref()?.reason.as_deref()
    }

    /// The status's message, when it has one.
    pub fn message(&self) -> Option<&str> {
        self.detail.as_ref()?.message.as_deref()
    }

    /// The node a preemption was started for, while the pod waits for it.
    pub fn nominated_node_name(&self) -> Option<&str> {
        self.detail.as_ref()?.nominated_node_name.as_deref()
    }

    /// When the kubelet started the pod, to the second.
    pub fn start_time(&self) -> Option<Time> {
        self.start.time()
    }

    /// Sets the status's reason and message (`None` clears each).
    pub fn set_reason(&mut self, reason: Option<String>, message: Option<String>) {
        let nominated_node_name = self.detail.take().and_then(|d| d.nominated_node_name);
        self.detail = StatusDetail { reason, message, nominated_node_name }.kept();
    }

    /// Sets the nominated node (`None` clears it).
    pub fn set_nominated_node_name(&mut self, node: Option<String>) {
        let detail = self.detail.take().map(|d| *d).unwrap_or_default();
        self.detail = StatusDetail { nominated_node_name: node, ..detail }.kept();
    }

    /// Sets the start time (`None` clears it).
    pub fn set_start_time(&mut self, at: Option<&Time>) {
        self.start = Second::of(at);
    }
}

/// A kept pod condition (of a [`KeptCondition`] type): its type and status as the values they can be,
/// its reason, message and last transition (not its probe time or observed generation). The
/// reason and message, which a running pod's conditions seldom have, are kept apart, and the
/// transition in whole seconds, as the API writes it: a condition takes 24 bytes, so a running
/// pod's two take 48.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SlimCondition {
    #[serde(rename = "type")]
    pub type_: KeptCondition,
    pub status: ConditionStatus,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    detail: Option<Box<ConditionDetail>>,
    #[serde(rename = "lastTransitionTime", skip_serializing_if = "Second::is_none")]
    transition: Second,
}

/// A time in whole seconds since the Unix epoch, or none: eight bytes where an `Option<Time>`
/// takes sixteen or more. The API's times (`metav1.Time`) are whole seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Second(i64);

impl Default for Second {
    fn default() -> Self {
        Second::NONE
    }
}

impl Second {
    /// No time (below any time a `Timestamp` can hold).
    const NONE: Second = Second(i64::MIN);

    fn of(time: Option<&Time>) -> Second {
        time.map_or(Second::NONE, |t| Second(t.0.as_second()))
    }

    fn is_none(&self) -> bool {
        *self == Second::NONE
    }

    fn time(self) -> Option<Time> {
        if self.is_none() {
            return None;
        }
        k8s_openapi::jiff::Timestamp::from_second(self.0).ok().map(Time)
    }
}

impl Serialize for Second {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.time().serialize(s)
    }
}

/// A condition's reason and message, when it has either.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct ConditionDetail {
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// The pod conditions kept: `PodScheduled` (kube-scheduler found no node, and why) and `Ready`
/// (the pod counts as healthy for its disruption budgets).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum KeptCondition {
    PodScheduled,
    Ready,
}

impl KeptCondition {
    const ALL: [KeptCondition; 2] = [KeptCondition::PodScheduled, KeptCondition::Ready];

    /// The type's name in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            KeptCondition::PodScheduled => "PodScheduled",
            KeptCondition::Ready => "Ready",
        }
    }

    /// The kept type named `name`, if it is one.
    fn named(name: &str) -> Option<KeptCondition> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// A condition's status; any value but `True` and `False` reads as `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// The status's value in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    /// The status valued `value` (`Unknown` for any value but `True` and `False`).
    fn valued(value: &str) -> ConditionStatus {
        [ConditionStatus::True, ConditionStatus::False]
            .into_iter()
            .find(|s| s.as_str() == value)
            .unwrap_or(ConditionStatus::Unknown)
    }
}

impl SlimCondition {
    /// The kept form of a condition of type `type_`, or None for a type not kept.
    fn of(
        type_: &str,
        status: &str,
        reason: Option<String>,
        message: Option<String>,
        last_transition_time: Option<Time>,
    ) -> Option<SlimCondition> {
        let type_ = KeptCondition::named(type_)?;
        Some(SlimCondition::new(type_, ConditionStatus::valued(status), reason, message, last_transition_time))
    }

    /// A kept condition of type `type_`.
    pub fn new(
        type_: KeptCondition,
        status: ConditionStatus,
        reason: Option<String>,
        message: Option<String>,
        last_transition_time: Option<Time>,
    ) -> SlimCondition {
        let detail = (reason.is_some() || message.is_some()).then(|| Box::new(ConditionDetail { reason, message }));
        SlimCondition { type_, status, detail, transition: Second::of(last_transition_time.as_ref()) }
    }

    /// When the condition last changed status, to the second.
    pub fn last_transition_time(&self) -> Option<Time> {
        self.transition.time()
    }

    /// Why the condition is as it is (a machine-readable word such as `Unschedulable`).
    pub fn reason(&self) -> Option<&str> {
        self.detail.as_ref()?.reason.as_deref()
    }

    /// What the condition says in words.
    pub fn message(&self) -> Option<&str> {
        self.detail.as_ref()?.message.as_deref()
    }

    /// The kept form of a whole pod's condition, or None for a type not kept.
    fn of_whole(c: &PodCondition) -> Option<SlimCondition> {
        SlimCondition::of(&c.type_, &c.status, c.reason.clone(), c.message.clone(), c.last_transition_time.clone())
    }
}

/// A pod condition as decoded: the fields a [`SlimCondition`] keeps.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct DecodedCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
    reason: Option<String>,
    message: Option<String>,
    last_transition_time: Option<Time>,
}

/// What code serving both forms of a pod (the API server's whole `Pod`, the controllers'
/// [`SlimPod`]) reads of either.
pub trait PodView {
    fn meta(&self) -> &dyn MetaView;
    fn phase(&self) -> Option<&str>;
    /// Its `Ready` condition is `True`.
    fn ready(&self) -> bool;
}

/// Both forms keep a pod's metadata, phase and conditions in the same places.
macro_rules! pod_view {
    ($($ty:ty => |$c:ident| $ready:expr),*) => {$(
        impl PodView for $ty {
            fn meta(&self) -> &dyn MetaView {
                &self.metadata
            }
            fn phase(&self) -> Option<&str> {
                self.status.as_ref().and_then(|s| s.phase.as_deref())
            }
            fn ready(&self) -> bool {
                self.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default().iter().any(|$c| $ready)
            }
        }
    )*};
}
pod_view!(
    Pod => |c| c.type_ == "Ready" && c.status == "True",
    SlimPod => |c| c.type_ == KeptCondition::Ready && c.status == ConditionStatus::True
);

/// A reference or a shared pointer to a pod reads as the pod.
macro_rules! pod_view_through {
    ($($wrapper:ty),*) => {$(
        impl<P: PodView + ?Sized> PodView for $wrapper {
            fn meta(&self) -> &dyn MetaView {
                (**self).meta()
            }
            fn phase(&self) -> Option<&str> {
                (**self).phase()
            }
            fn ready(&self) -> bool {
                (**self).ready()
            }
        }
    )*};
}
pod_view_through!(&P, std::sync::Arc<P>);

impl SlimVolume {
    fn binds_claim(&self) -> bool {
        self.persistent_volume_claim.is_some() || self.ephemeral.is_some()
    }
}

/// Whether a pod's volume binds a claim, so a [`SlimVolume`] keeps it.
pub(crate) fn volume_binds_claim(v: &Volume) -> bool {
    v.persistent_volume_claim.is_some() || v.ephemeral.is_some()
}

fn claim_volumes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<SlimVolume>>, D::Error> {
    let volumes = Option::<Vec<SlimVolume>>::deserialize(d)?;
    Ok(volumes.map(|mut v| {
        v.retain(SlimVolume::binds_claim);
        v
    }))
}

fn kept_conditions<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<SlimCondition>>, D::Error> {
    Ok(Option::<Vec<DecodedCondition>>::deserialize(d)?.map(|decoded| {
        kept_list(
            decoded
                .into_iter()
                .filter_map(|c| SlimCondition::of(&c.type_, &c.status, c.reason, c.message, c.last_transition_time)),
        )
    }))
}

/// The kept conditions, in a list of their length (a list collected from a filter has room for
/// four, one collected in place the decoded list's room).
fn kept_list(kept: impl Iterator<Item = SlimCondition>) -> Vec<SlimCondition> {
    let mut kept: Vec<SlimCondition> = kept.collect();
    kept.shrink_to_fit();
    kept
}

impl SlimPod {
    /// A whole `Pod` with what this one keeps, every other field empty: what a reader of the
    /// whole form gets of a pod stored slim.
    pub fn whole(&self) -> Result<Pod, serde_json::Error> {
        serde_json::to_value(self).and_then(serde_json::from_value)
    }

    /// Its condition of type `type_`, if it has one.
    pub fn condition(&self, type_: KeptCondition) -> Option<&SlimCondition> {
        self.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
    }

    /// A slim pod from a pod's metadata and the JSON of its spec and status, as a client that
    /// decoded the object generically holds them: each part decoded as what a slim pod keeps,
    /// without a copy of the whole object's JSON first.
    pub fn from_parts(
        metadata: ObjectMeta,
        spec: Option<serde_json::Value>,
        status: Option<serde_json::Value>,
    ) -> Result<SlimPod, serde_json::Error> {
        fn part<T: serde::de::DeserializeOwned>(v: Option<serde_json::Value>) -> Result<Option<T>, serde_json::Error> {
            v.filter(|v| !v.is_null()).map(serde_json::from_value).transpose()
        }
        Ok(SlimPod { metadata: SlimMeta::from(metadata), spec: part(spec)?, status: part(status)? })
    }
}

impl From<&Container> for SlimContainer {
    fn from(c: &Container) -> Self {
        SlimContainer {
            name: c.name.clone(),
            ports: c.ports.clone(),
            resources: c.resources.clone(),
            restart_policy: c.restart_policy.clone(),
        }
    }
}

impl From<&Volume> for SlimVolume {
    fn from(v: &Volume) -> Self {
        SlimVolume {
            name: v.name.clone(),
            ephemeral: v.ephemeral.clone().map(Box::new),
            persistent_volume_claim: v.persistent_volume_claim.clone(),
        }
    }
}

impl SlimPodSpec {
    /// The shape, shared with the pods that have the same.
    pub fn shape(&self) -> &Arc<PodShape> {
        &self.shape
    }
}

impl std::ops::Deref for SlimPodSpec {
    type Target = PodShape;
    fn deref(&self) -> &PodShape {
        &self.shape
    }
}

impl std::ops::DerefMut for SlimPodSpec {
    fn deref_mut(&mut self) -> &mut PodShape {
        Arc::make_mut(&mut self.shape)
    }
}

impl From<PodShape> for SlimPodSpec {
    fn from(mut shape: PodShape) -> Self {
        let node_name = shape.node_name.take().map(|n| node_name(&n));
        SlimPodSpec { node_name, shape: crate::pod_shapes::shared(shape) }
    }
}

impl Serialize for SlimPodSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Written<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            node_name: &'a Option<Arc<str>>,
            #[serde(flatten)]
            shape: &'a PodShape,
        }
        Written { node_name: &self.node_name, shape: &self.shape }.serialize(s)
    }
}

impl From<&PodSpec> for SlimPodSpec {
    fn from(s: &PodSpec) -> Self {
        SlimPodSpec { node_name: s.node_name.as_deref().map(node_name), shape: crate::pod_shapes::shared_from(s) }
    }
}

impl From<&PodSpec> for PodShape {
    fn from(s: &PodSpec) -> Self {
        PodShape {
            affinity: s.affinity.clone(),
            containers: s.containers.iter().map(SlimContainer::from).collect(),
            host_network: s.host_network,
            init_containers: s.init_containers.as_ref().map(|c| c.iter().map(SlimContainer::from).collect()),
            node_name: None,
            node_selector: s.node_selector.clone(),
            os: s.os.clone(),
            overhead: s.overhead.clone(),
            preemption_policy: s.preemption_policy.clone(),
            priority: s.priority,
            priority_class_name: s.priority_class_name.clone(),
            resources: s.resources.clone(),
            restart_policy: s.restart_policy.clone(),
            runtime_class_name: s.runtime_class_name.clone(),
            scheduler_name: s.scheduler_name.clone(),
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            tolerations: s.tolerations.clone(),
            topology_spread_constraints: s.topology_spread_constraints.clone(),
            volumes: s
                .volumes
                .as_ref()
                .map(|v| v.iter().filter(|v| volume_binds_claim(v)).map(SlimVolume::from).collect()),
        }
    }
}

impl From<&PodStatus> for SlimPodStatus {
    fn from(s: &PodStatus) -> Self {
        SlimPodStatus {
            conditions: s.conditions.as_ref().map(|c| kept_list(c.iter().filter_map(SlimCondition::of_whole))),
            phase: s.phase.clone(),
            start: Second::of(s.start_time.as_ref()),
            detail: StatusDetail {
                reason: s.reason.clone(),
                message: s.message.clone(),
                nominated_node_name: s.nominated_node_name.clone(),
            }
            .kept(),
        }
    }
}

impl From<&Pod> for SlimPod {
    fn from(p: &Pod) -> Self {
        SlimPod {
            metadata: SlimMeta::from(&p.metadata),
            spec: p.spec.as_ref().map(SlimPodSpec::from),
            status: p.status.as_ref().map(SlimPodStatus::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_with_its_arc_header_fits_the_allocators_320_byte_class() {
        // 150,000 pods a cluster: each class up (384, 448 bytes) costs ~10 MB more.
        assert!(std::mem::size_of::<SlimPod>() + 2 * std::mem::size_of::<usize>() <= 320);
    }

    #[test]
    fn a_running_pods_two_conditions_take_48_bytes() {
        assert_eq!(std::mem::size_of::<SlimCondition>(), 24);
    }

    #[test]
    fn a_status_reason_and_message_are_kept_apart_and_written_back_as_the_api_names_them() {
        let evicted = serde_json::json!({"status": {"phase": "Failed", "reason": "Evicted",
            "message": "The node was low on resource: memory."}});
        let pod: SlimPod = serde_json::from_value(evicted.clone()).unwrap();
        let status = pod.status.as_ref().unwrap();
        assert_eq!(
            (status.reason(), status.message()),
            (Some("Evicted"), Some("The node was low on resource: memory."))
        );
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(serde_json::to_value(&pod).unwrap()["status"], evicted["status"]);
        let whole: Pod = serde_json::from_value(evicted).unwrap();
        assert_eq!(SlimPod::from(&whole), pod);

        let running: SlimPod = serde_json::from_value(serde_json::json!({"status": {"phase": "Running"}})).unwrap();
        let status = running.status.as_ref().unwrap();
        assert!(status.detail.is_none() && status.reason().is_none() && status.message().is_none());
        assert_eq!(serde_json::to_value(&running).unwrap()["status"], serde_json::json!({"phase": "Running"}));
    }

    #[test]
    fn a_nomination_and_start_time_are_kept_compact_and_written_back_as_the_api_names_them() {
        let waiting = serde_json::json!({"status": {"phase": "Pending", "nominatedNodeName": "n2",
            "reason": "Preempting", "startTime": "2026-01-01T00:00:07Z"}});
        let mut pod: SlimPod = serde_json::from_value(waiting.clone()).unwrap();
        assert_eq!(serde_json::to_value(&pod).unwrap()["status"], waiting["status"]);
        let whole: Pod = serde_json::from_value(waiting).unwrap();
        assert_eq!(SlimPod::from(&whole), pod);
        let status = pod.status.as_mut().unwrap();
        assert_eq!((status.nominated_node_name(), status.reason()), (Some("n2"), Some("Preempting")));
        assert_eq!(status.start_time(), whole.status.as_ref().and_then(|s| s.start_time.clone()));

        // Clearing one of the three rare fields keeps the others; clearing all frees their box.
        status.set_nominated_node_name(None);
        assert_eq!((status.nominated_node_name(), status.reason()), (None, Some("Preempting")));
        status.set_nominated_node_name(Some("n3".to_string()));
        status.set_reason(None, None);
        assert_eq!((status.nominated_node_name(), status.reason()), (Some("n3"), None));
        status.set_nominated_node_name(None);
        assert!(status.detail.is_none());
        status.set_start_time(None);
        assert_eq!(serde_json::to_value(&pod).unwrap()["status"], serde_json::json!({"phase": "Pending"}));
    }

    #[test]
    fn pods_bound_to_a_node_share_one_copy_of_its_name() {
        let bound = |name: &str| -> SlimPod {
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": name}, "spec": {"nodeName": "shared-node-1"}}),
            )
            .unwrap()
        };
        let (a, b) = (bound("a"), bound("b"));
        let name = |p: &SlimPod| p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap();
        assert!(Arc::ptr_eq(&name(&a), &name(&b)));
        assert_eq!(&*name(&a), "shared-node-1");
        assert!(Arc::ptr_eq(&name(&a), &node_name("shared-node-1")));
    }

    #[test]
    fn a_watched_pod_keeps_what_scheduling_reads_and_loses_env_probes_and_statuses() {
        let full = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "labels": {"app": "web"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true", LAST_APPLIED: "{\"big\":1}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1", "controller": true}]
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{
                    "name": "app", "image": "web:1", "command": ["/web"], "args": ["--port=80"],
                    "env": [{"name": "A", "value": "1"}],
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}
                }],
                "initContainers": [{"name": "sidecar", "image": "proxy:1", "restartPolicy": "Always", "env": [{"name": "B", "value": "2"}], "resources": {"requests": {"cpu": "100m"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}}, {"name": "config", "configMap": {"name": "web"}}],
                "tolerations": [{"key": "gpu", "operator": "Exists"}]
            },
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "podIPs": [{"ip": "10.1.0.1"}],
                "qosClass": "Burstable",
                "conditions": [
                    {"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"},
                    {"type": "ContainersReady", "status": "True"}, {"type": "PodScheduled", "status": "True"}
                ],
                "containerStatuses": [{"name": "app", "image": "web:1", "imageID": "", "ready": true, "restartCount": 0}]
            }
        });
        let expected = serde_json::json!({
            "metadata": {
                "name": "web-1", "namespace": "shop", "labels": {"app": "web"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1", "controller": true}]
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{
                    "name": "app",
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}
                }],
                "initContainers": [{"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}}],
                "tolerations": [{"key": "gpu", "operator": "Exists"}]
            },
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}]
            }
        });
        let decoded: SlimPod = serde_json::from_value(full.clone()).unwrap();
        assert_eq!(serde_json::to_value(&decoded).unwrap(), expected);
        // A whole pod made slim is the pod decoded slim.
        let whole: Pod = serde_json::from_value(full.clone()).unwrap();
        assert_eq!(SlimPod::from(&whole), decoded);
        // Decoded in parts, as a generic client holds a pod, it is the same.
        let mut parts = full.clone();
        let (spec, status) = (parts["spec"].take(), parts["status"].take());
        let meta: ObjectMeta = serde_json::from_value(parts["metadata"].take()).unwrap();
        assert_eq!(SlimPod::from_parts(meta, Some(spec), Some(status)).unwrap(), decoded);
        // What a slim pod writes reads back the same.
        let again: SlimPod = serde_json::from_value(serde_json::to_value(&decoded).unwrap()).unwrap();
        assert_eq!(again, decoded);
    }

    #[test]
    fn kept_conditions_keep_type_status_reason_message_and_transition_whichever_form_they_arrive_in() {
        let json = serde_json::json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available",
             "lastProbeTime": null, "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "ContainersReady", "status": "False"},
            {"type": "Ready", "status": "Maybe", "observedGeneration": 3}
        ]}});
        let decoded: SlimPod = serde_json::from_value(json.clone()).unwrap();
        let whole: Pod = serde_json::from_value(json).unwrap();
        assert_eq!(SlimPod::from(&whole), decoded);
        let scheduled = decoded.condition(KeptCondition::PodScheduled).unwrap();
        assert_eq!(scheduled.status, ConditionStatus::False);
        assert_eq!(scheduled.reason(), Some("Unschedulable"));
        assert_eq!(scheduled.message(), Some("0/3 nodes are available"));
        assert_eq!(
            scheduled.last_transition_time().map(|t| t.0.as_second()),
            Some("2026-01-01T00:00:00Z".parse::<k8s_openapi::jiff::Timestamp>().unwrap().as_second())
        );
        assert_eq!(decoded.condition(KeptCondition::Ready).map(|c| c.status), Some(ConditionStatus::Unknown));
        assert!(!decoded.ready() && !whole.ready());
        assert_eq!(
            serde_json::to_value(&decoded).unwrap()["status"]["conditions"],
            serde_json::json!([
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Ready", "status": "Unknown"}
            ])
        );
    }

    #[test]
    fn a_decoded_pod_keeps_its_owners_and_conditions_without_spare_room() {
        let json = serde_json::json!({
            "metadata": {"name": "web-1", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]}
        });
        let decoded: SlimPod = serde_json::from_value(json.clone()).unwrap();
        let whole: Pod = serde_json::from_value(json).unwrap();
        for pod in [decoded, SlimPod::from(&whole)] {
            let owners = pod.metadata.owner_references.as_ref().unwrap();
            let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref()).unwrap();
            assert_eq!((owners.len(), owners.capacity()), (1, 1));
            assert_eq!((conditions.len(), conditions.capacity()), (1, 1));
        }
    }
}
