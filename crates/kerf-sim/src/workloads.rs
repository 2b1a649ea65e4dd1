//! Stand-ins for the Deployment and ReplicaSet controllers: a Deployment owns ReplicaSets (one per
//! pod-template hash), a ReplicaSet keeps its pod count, and a rolling update honours maxSurge and
//! maxUnavailable. A pod counts as available when it runs on a Ready node. A scale-down deletes
//! pods in the ReplicaSet controller's order: unbound, then not available, then the lowest
//! `controller.kubernetes.io/pod-deletion-cost`, then the newest.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use kerf_api::SlimPod;
use kerf_api::intstr::scaled;
use kerf_api::pod_facts;

use crate::rng::{fnv1a32, safe_encode};
use kerf_apiserver::SimCluster;

pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
pub const RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// What the workload controllers know about one pod.
#[derive(Debug, Clone, Default)]
pub struct PodState {
    pub bound: bool,
    pub available: bool,
    pub seq: u64,
    /// Its `controller.kubernetes.io/pod-deletion-cost` (0 when unset or not an int32).
    pub deletion_cost: i32,
}

#[derive(Debug, Clone)]
struct DeploymentState {
    namespace: String,
    name: String,
    spec: DeploymentSpec,
    /// Bumped by `rollout` so the template hashes differ.
    restarts: u32,
    /// The Deployment's uid, which its ReplicaSets' owner reference names.
    uid: String,
    /// Its annotations a new ReplicaSet copies (`kubernetes.io/change-cause`, ...).
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
struct ReplicaSetState {
    namespace: String,
    name: String,
    deployment: String,
    template: PodTemplateSpec,
    replicas: i32,
    /// Creation order, oldest first.
    seq: u64,
    pods: BTreeSet<String>,
    /// `deployment.kubernetes.io/revision`: the highest of its Deployment's when it last became
    /// the current ReplicaSet (created, or brought back by `kubectl rollout undo`).
    revision: u64,
    /// The Deployment's annotations while this was its current ReplicaSet (`rollout history`'s
    /// CHANGE-CAUSE).
    annotations: BTreeMap<String, String>,
}

/// What was reported of a ReplicaSet: (replicas, pods, available pods), its revision and
/// annotations.
type Published = ([i32; 3], u64, BTreeMap<String, String>);

/// Annotations of a Deployment its ReplicaSets do not copy, as the Deployment controller skips them.
const NOT_COPIED: &[&str] = &[
    REVISION,
    "deployment.kubernetes.io/revision-history",
    "deployment.kubernetes.io/desired-replicas",
    "deployment.kubernetes.io/max-replicas",
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// The annotation naming a Deployment's and its ReplicaSets' revisions, which `kubectl rollout
/// history` lists and `kubectl rollout undo` goes back by.
pub const REVISION: &str = "deployment.kubernetes.io/revision";

/// What the Deployment controller writes to a Deployment: its status counts, the rolling update's
/// floor of available pods (for the `Available` condition), its current ReplicaSet and revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentProgress {
    pub namespace: String,
    pub name: String,
    /// `spec.replicas`.
    pub desired: i32,
    pub replicas: i32,
    pub updated: i32,
    pub available: i32,
    /// `spec.replicas` less `maxUnavailable`.
    pub min_available: i32,
    pub replica_set: String,
    pub revision: u64,
}

/// Deployments and their ReplicaSets.
#[derive(Debug, Default)]
pub struct Workloads {
    deployments: BTreeMap<String, DeploymentState>,
    replica_sets: BTreeMap<String, ReplicaSetState>,
    /// pod key -> (replica set key, state)
    pods: BTreeMap<String, (String, PodState)>,
    dirty: BTreeSet<String>,
    rs_seq: u64,
    /// What was last reported of each ReplicaSet.
    published_sets: BTreeMap<String, Published>,
    /// Pods owned by a ReplicaSet this stand-in did not create (a cluster snapshot's pods,
    /// whose ReplicaSets the cluster's Deployment controller named), by pod key: (labels, state).
    /// The Deployment whose selector matches adopts them, as the ReplicaSet controller adopts
    /// orphans.
    orphans: BTreeMap<String, (BTreeMap<String, String>, PodState)>,
}

fn key(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

impl Workloads {
    pub fn apply_deployment(&mut self, d: Deployment) {
        let namespace = d.metadata.namespace.clone().unwrap_or_else(|| "default".to_string());
        let name = d.metadata.name.clone().unwrap_or_default();
        let Some(spec) = d.spec else { return };
        let k = key(&namespace, &name);
        let mut annotations = d.metadata.annotations.unwrap_or_default();
        annotations.retain(|a, _| !NOT_COPIED.contains(&a.as_str()));
        // A write that left the spec and annotations as they were (e.g. a status update)
        // changes nothing here.
        if self.deployments.get(&k).is_some_and(|s| s.spec == spec && s.annotations == annotations) {
            return;
        }
        let restarts = self.deployments.get(&k).map_or(0, |s| s.restarts);
        let uid = d.metadata.uid.clone().unwrap_or_default();
        self.deployments.insert(k.clone(), DeploymentState { namespace, name, spec, restarts, uid, annotations });
        self.dirty.insert(k);
    }

    /// The ReplicaSets whose size or pod counts changed since the last call, as the API shows
    /// them (`Some(object)`), and those gone since (`None`), by `namespace/name`.
    pub fn take_replica_set_changes(
        &mut self,
        available: &BTreeMap<String, i32>,
    ) -> Vec<(String, Option<serde_json::Value>)> {
        let mut out = Vec::new();
        for (rk, rs) in &self.replica_sets {
            let counts = [rs.replicas, rs.pods.len() as i32, available.get(rk).copied().unwrap_or(0)];
            let published = (counts, rs.revision, rs.annotations.clone());
            if self.published_sets.get(rk) == Some(&published) {
                continue;
            }
            self.published_sets.insert(rk.clone(), published);
            let Some(d) = self.deployments.get(&rs.deployment) else { continue };
            let labels = rs.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
            let hash = labels.get(POD_TEMPLATE_HASH).cloned().unwrap_or_default();
            let mut selector = serde_json::to_value(&d.spec.selector).unwrap_or_default();
            selector["matchLabels"][POD_TEMPLATE_HASH] = serde_json::json!(hash);
            let mut annotations = rs.annotations.clone();
            annotations.insert(REVISION.to_string(), rs.revision.to_string());
            let obj = serde_json::json!({
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "metadata": {
                    "name": rs.name,
                    "namespace": rs.namespace,
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": d.name,
                        "uid": d.uid, "controller": true, "blockOwnerDeletion": true}],
                },
                "spec": {"replicas": counts[0], "selector": selector, "template": rs.template},
                "status": {"replicas": counts[1], "readyReplicas": counts[2], "availableReplicas": counts[2]},
            });
            out.push((rk.clone(), Some(obj)));
        }
        let gone: Vec<String> =
            self.published_sets.keys().filter(|k| !self.replica_sets.contains_key(*k)).cloned().collect();
        for k in gone {
            self.published_sets.remove(&k);
            out.push((k, None));
        }
        out
    }

    /// Each Deployment's progress: what the Deployment controller writes to it.
    pub fn progress(&self, available_by_set: &BTreeMap<String, i32>) -> Vec<DeploymentProgress> {
        let mut out = Vec::new();
        for (dk, d) in &self.deployments {
            let current = format!("{}-{}", d.name, template_hash(&d.spec.template));
            let (mut total, mut updated, mut available, mut revision) = (0, 0, 0, 0);
            for (rk, rs) in self.replica_sets.iter().filter(|(_, rs)| &rs.deployment == dk) {
                let n = rs.pods.len() as i32;
                total += n;
                if rs.name == current {
                    updated += n;
                    revision = rs.revision;
                }
                available += available_by_set.get(rk).copied().unwrap_or(0);
            }
            let desired = d.spec.replicas.unwrap_or(1);
            out.push(DeploymentProgress {
                namespace: d.namespace.clone(),
                name: d.name.clone(),
                desired,
                replicas: total,
                updated,
                available,
                min_available: desired - max_unavailable(&d.spec, desired),
                replica_set: current,
                revision,
            });
        }
        out
    }

    pub fn has_deployment(&self, namespace: &str, name: &str) -> bool {
        self.deployments.contains_key(&key(namespace, name))
    }

    pub fn scale(&mut self, namespace: &str, name: &str, replicas: i32) -> bool {
        let k = key(namespace, name);
        let Some(d) = self.deployments.get_mut(&k) else { return false };
        d.spec.replicas = Some(replicas);
        self.dirty.insert(k);
        true
    }

    /// A new template revision (what `kubectl rollout restart` does): the hash changes and the
    /// pods are replaced by a rolling update.
    pub fn rollout(&mut self, namespace: &str, name: &str, at: &str) -> bool {
        let k = key(namespace, name);
        let Some(d) = self.deployments.get_mut(&k) else { return false };
        d.restarts += 1;
        let meta = d.spec.template.metadata.get_or_insert_with(ObjectMeta::default);
        meta.annotations.get_or_insert_with(BTreeMap::new).insert(RESTARTED_AT.to_string(), at.to_string());
        self.dirty.insert(k);
        true
    }

    /// Deletes the Deployment, its ReplicaSets and their pods.
    pub fn delete(&mut self, cluster: &SimCluster, namespace: &str, name: &str) -> bool {
        let k = key(namespace, name);
        if self.deployments.remove(&k).is_none() {
            return false;
        }
        let owned: Vec<String> =
            self.replica_sets.iter().filter(|(_, rs)| rs.deployment == k).map(|(rk, _)| rk.clone()).collect();
        for rk in owned {
            if let Some(rs) = self.replica_sets.remove(&rk) {
                for pod in rs.pods {
                    let _ = cluster.delete_obj::<Pod>(Some(&rs.namespace), &pod);
                }
            }
        }
        true
    }

    /// `Deployment/name` for a pod a ReplicaSet of a Deployment owns.
    pub fn owner_of(&self, pod_key: &str) -> Option<String> {
        let (rs, _) = self.pods.get(pod_key)?;
        let rs = self.replica_sets.get(rs)?;
        let d = self.deployments.get(&rs.deployment)?;
        Some(format!("Deployment/{}", d.name))
    }

    /// Records a pod's state from a watch event; marks its Deployment for a reconcile when the
    /// change matters to it.
    pub fn observe_pod(&mut self, pod: &SlimPod, deleted: bool, node_ready: impl Fn(&str) -> bool) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let pk = key(ns, name);
        let Some(owner) = pod
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.iter().find(|r| r.kind == "ReplicaSet" && r.controller == Some(true)))
        else {
            return;
        };
        // An adopted pod belongs to the ReplicaSet that adopted it, whatever its owner says.
        let rk = match self.pods.get(&pk) {
            Some((rk, _)) => rk.clone(),
            None => key(ns, &owner.name),
        };
        let Some(rs) = self.replica_sets.get_mut(&rk) else {
            self.observe_orphan(ns, pk, pod, deleted, node_ready);
            return;
        };
        if deleted || pod.metadata.deletion_timestamp.is_some() {
            rs.pods.remove(name);
            self.pods.remove(&pk);
            self.dirty.insert(rs.deployment.clone());
            return;
        }
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let state = PodState {
            bound: node.is_some(),
            available: running && node.is_some_and(&node_ready),
            seq: self.pods.get(&pk).map_or(0, |(_, s)| s.seq),
            deletion_cost: pod_facts::pod_deletion_cost(pod).unwrap_or(0),
        };
        rs.pods.insert(name.to_string());
        let prev = self.pods.insert(pk, (rk, state.clone()));
        if prev.is_none_or(|(_, p)| p.bound != state.bound || p.available != state.available) {
            self.dirty.insert(rs.deployment.clone());
        }
    }

    /// A pod whose ReplicaSet is unknown: kept for the Deployment that matches it.
    fn observe_orphan(
        &mut self,
        ns: &str,
        pk: String,
        pod: &SlimPod,
        deleted: bool,
        node_ready: impl Fn(&str) -> bool,
    ) {
        if deleted || pod.metadata.deletion_timestamp.is_some() {
            self.orphans.remove(&pk);
            return;
        }
        let labels = pod.metadata.labels.as_deref().cloned().unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let state = PodState {
            bound: node.is_some(),
            available: running && node.is_some_and(&node_ready),
            seq: 0,
            deletion_cost: pod_facts::pod_deletion_cost(pod).unwrap_or(0),
        };
        for (dk, d) in &self.deployments {
            if d.namespace == ns && kerf_scheduling::pod::selector_matches(Some(&d.spec.selector), &labels) {
                self.dirty.insert(dk.clone());
            }
        }
        self.orphans.insert(pk, (labels, state));
    }

    /// Moves the orphans `d`'s selector matches into its ReplicaSet `rk`.
    fn adopt_orphans(&mut self, d: &DeploymentState, rk: &str) {
        let prefix = format!("{}/", d.namespace);
        let matching: Vec<String> = self
            .orphans
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(_, (labels, _))| kerf_scheduling::pod::selector_matches(Some(&d.spec.selector), labels))
            .map(|(k, _)| k.clone())
            .collect();
        for pk in matching {
            let Some((_, mut state)) = self.orphans.remove(&pk) else { continue };
            state.seq = self.rs_seq_next();
            if let Some(rs) = self.replica_sets.get_mut(rk) {
                rs.pods.insert(pk[prefix.len()..].to_string());
            }
            self.pods.insert(pk, (rk.to_string(), state));
        }
    }

    /// A node's readiness changed: re-derive availability of the pods on it.
    pub fn node_readiness_changed(&mut self, pods_on_node: &[String], ready: bool) {
        for pk in pods_on_node {
            if let Some((rk, st)) = self.pods.get_mut(pk)
                && st.bound
            {
                st.available = ready;
                if let Some(rs) = self.replica_sets.get(rk) {
                    self.dirty.insert(rs.deployment.clone());
                }
            }
        }
    }

    pub fn is_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Runs the Deployment and ReplicaSet controllers for every Deployment that changed.
    pub fn reconcile(&mut self, cluster: &SimCluster) {
        let dirty = std::mem::take(&mut self.dirty);
        for dk in dirty {
            self.reconcile_deployment(cluster, &dk);
        }
    }

    /// The available pods of every ReplicaSet, by key: counted once for a publish, whose
    /// ReplicaSet and Deployment statuses both read them.
    pub fn available_by_set(&self) -> BTreeMap<String, i32> {
        self.replica_sets.iter().map(|(rk, rs)| (rk.clone(), self.available(rs))).collect()
    }

    fn available(&self, rs: &ReplicaSetState) -> i32 {
        // This runs for every pod on every publish: one walk of the pods from the set's first
        // (the set's names, sorted, are its pods' keys in order behind "namespace/") instead
        // of a lookup per pod.
        let Some(first) = rs.pods.first() else { return 0 };
        let prefix = format!("{}/", rs.namespace);
        let start = format!("{prefix}{first}");
        let mut pods = self.pods.range::<str, _>((Bound::Included(start.as_str()), Bound::Unbounded)).peekable();
        let mut count = 0;
        for name in &rs.pods {
            // Keys from `start` on that leave the namespace sort after every key in it.
            let below = |k: &str| k.strip_prefix(prefix.as_str()).is_some_and(|n| n < name.as_str());
            while pods.next_if(|(k, _)| below(k)).is_some() {}
            if let Some((k, (_, state))) = pods.peek()
                && k.strip_prefix(prefix.as_str()) == Some(name.as_str())
                && state.available
            {
                count += 1;
            }
        }
        count
    }

    fn reconcile_deployment(&mut self, cluster: &SimCluster, dk: &str) {
        let Some(d) = self.deployments.get(dk).cloned() else { return };
        let hash = template_hash(&d.spec.template);
        let new_name = format!("{}-{hash}", d.name);
        let new_key = key(&d.namespace, &new_name);
        let replicas = d.spec.replicas.unwrap_or(1);
        let latest = self.replica_sets.values().filter(|rs| rs.deployment == dk).map(|rs| rs.revision).max();
        if let Some(rs) = self.replica_sets.get_mut(&new_key)
            && latest.is_some_and(|l| rs.revision < l)
        {
            // An older template brought back (`kubectl rollout undo`) is the newest revision.
            rs.revision = latest.unwrap_or(0) + 1;
        }
        if !self.replica_sets.contains_key(&new_key) {
            let mut template = d.spec.template.clone();
            let meta = template.metadata.get_or_insert_with(ObjectMeta::default);
            meta.labels.get_or_insert_with(BTreeMap::new).insert(POD_TEMPLATE_HASH.to_string(), hash.clone());
            self.rs_seq += 1;
            let only = !self.replica_sets.values().any(|rs| rs.deployment == dk);
            self.replica_sets.insert(
                new_key.clone(),
                ReplicaSetState {
                    namespace: d.namespace.clone(),
                    name: new_name.clone(),
                    deployment: dk.to_string(),
                    template,
                    // The first revision starts at full size; later ones grow by the rolling update.
                    replicas: if only { replicas } else { 0 },
                    seq: self.rs_seq,
                    pods: BTreeSet::new(),
                    revision: latest.unwrap_or(0) + 1,
                    annotations: BTreeMap::new(),
                },
            );
        }
        if let Some(rs) = self.replica_sets.get_mut(&new_key) {
            rs.annotations.clone_from(&d.annotations);
        }
        if !self.orphans.is_empty() {
            self.adopt_orphans(&d, &new_key);
        }
        let mut olds: Vec<String> = self
            .replica_sets
            .iter()
            .filter(|(k, rs)| rs.deployment == dk && **k != new_key)
            .map(|(k, _)| k.clone())
            .collect();
        olds.sort_by_key(|k| self.replica_sets.get(k).map_or(0, |rs| rs.seq));

        let recreate = d.spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate");
        if olds.iter().all(|k| self.replica_sets.get(k).is_none_or(|rs| rs.replicas == 0 && rs.pods.is_empty())) {
            // Steady state (or finished rollout): the new ReplicaSet holds every replica.
            self.set_replicas(&new_key, replicas);
        } else if recreate {
            for k in &olds {
                self.set_replicas(k, 0);
            }
            let old_pods: usize = olds.iter().filter_map(|k| self.replica_sets.get(k)).map(|rs| rs.pods.len()).sum();
            if old_pods == 0 {
                self.set_replicas(&new_key, replicas);
            }
        } else {
            self.rolling_update(&new_key, &olds, &d.spec, replicas);
        }
        // Old ReplicaSets that are empty and scaled to zero are kept (as Kubernetes keeps
        // revision history) but stop mattering.
        let mut all = olds;
        all.push(new_key);
        for rk in all {
            self.reconcile_replica_set(cluster, &rk);
        }
    }

    fn set_replicas(&mut self, rk: &str, n: i32) {
        if let Some(rs) = self.replica_sets.get_mut(rk) {
            rs.replicas = n;
        }
    }

    fn rolling_update(&mut self, new_key: &str, olds: &[String], spec: &DeploymentSpec, replicas: i32) {
        let max_surge = max_surge(spec, replicas);
        let max_unavailable = max_unavailable(spec, replicas);
        let spec_total = |w: &Workloads| -> i32 {
            w.replica_sets.get(new_key).map_or(0, |r| r.replicas)
                + olds.iter().filter_map(|k| w.replica_sets.get(k)).map(|r| r.replicas).sum::<i32>()
        };
        // Scale up the new ReplicaSet within the surge allowance.
        let new_replicas = self.replica_sets.get(new_key).map_or(0, |r| r.replicas);
        if new_replicas < replicas {
            let room = replicas + max_surge - spec_total(self);
            if room > 0 {
                self.set_replicas(new_key, (new_replicas + room).min(replicas));
            }
        } else if new_replicas > replicas {
            self.set_replicas(new_key, replicas);
        }
        // Scale down old ReplicaSets as far as availability allows.
        let min_available = replicas - max_unavailable;
        let all_pods: i32 = std::iter::once(new_key)
            .chain(olds.iter().map(String::as_str))
            .filter_map(|k| self.replica_sets.get(k))
            .map(|r| r.pods.len() as i32)
            .sum();
        let (new_pods, new_avail) =
            self.replica_sets.get(new_key).map_or((0, 0), |r| (r.pods.len() as i32, self.available(r)));
        let new_unavailable = (new_pods - new_avail).max(0);
        let max_scaled_down = all_pods - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return;
        }
        // First drop old replicas that are not available anyway.
        let mut scaled_down = 0;
        for k in olds {
            if scaled_down >= max_scaled_down {
                break;
            }
            let Some(rs) = self.replica_sets.get(k) else { continue };
            let avail = self.available(rs);
            let unhealthy = (rs.replicas - avail).max(0).min(max_scaled_down - scaled_down);
            if unhealthy > 0 {
                let r = rs.replicas - unhealthy;
                self.set_replicas(k, r);
                scaled_down += unhealthy;
            }
        }
        // Then available ones, keeping `min_available` pods available.
        let available_total: i32 = std::iter::once(new_key)
            .chain(olds.iter().map(String::as_str))
            .filter_map(|k| self.replica_sets.get(k))
            .map(|r| self.available(r))
            .sum();
        let mut budget = available_total - min_available;
        for k in olds {
            if budget <= 0 {
                break;
            }
            let Some(rs) = self.replica_sets.get(k) else { continue };
            let down = rs.replicas.min(budget);
            if down > 0 {
                let r = rs.replicas - down;
                self.set_replicas(k, r);
                budget -= down;
            }
        }
    }

    fn reconcile_replica_set(&mut self, cluster: &SimCluster, rk: &str) {
        let Some(rs) = self.replica_sets.get(rk) else { return };
        let have = rs.pods.len() as i32;
        let want = rs.replicas;
        if have < want {
            let (ns, name, template) = (rs.namespace.clone(), rs.name.clone(), rs.template.clone());
            for _ in 0..(want - have) {
                let pod = pod_from_template(&ns, &name, &template);
                match cluster.create_named(pod) {
                    Ok(pname) => {
                        let seq = self.rs_seq_next();
                        self.pods.insert(key(&ns, &pname), (rk.to_string(), PodState { seq, ..PodState::default() }));
                        if let Some(rs) = self.replica_sets.get_mut(rk) {
                            rs.pods.insert(pname);
                        }
                    }
                    Err(e) => tracing::warn!(replicaset = %rk, error = %e, "cannot create pod"),
                }
            }
        } else if have > want {
            // Delete the least useful pods first: unbound, then not available, then the lowest
            // deletion cost, then the newest.
            let mut victims: Vec<(u8, i32, std::cmp::Reverse<u64>, String)> = rs
                .pods
                .iter()
                .map(|p| {
                    let st = self.pods.get(&key(&rs.namespace, p)).map(|(_, s)| s.clone()).unwrap_or_default();
                    let rank = if !st.bound {
                        0
                    } else if !st.available {
                        1
                    } else {
                        2
                    };
                    (rank, st.deletion_cost, std::cmp::Reverse(st.seq), p.clone())
                })
                .collect();
            victims.sort();
            let ns = rs.namespace.clone();
            for (_, _, _, p) in victims.into_iter().take((have - want) as usize) {
                let _ = cluster.delete_obj::<Pod>(Some(&ns), &p);
                if let Some(rs) = self.replica_sets.get_mut(rk) {
                    rs.pods.remove(&p);
                }
                self.pods.remove(&key(&ns, &p));
            }
        }
    }

    fn rs_seq_next(&mut self) -> u64 {
        self.rs_seq += 1;
        self.rs_seq
    }
}

/// A rolling update's `maxSurge` of `replicas` (25% unless set; a `Recreate` Deployment has none).
fn max_surge(spec: &DeploymentSpec, replicas: i32) -> i32 {
    let ru = spec.strategy.as_ref().and_then(|s| s.rolling_update.as_ref());
    let surge = ru.and_then(|r| r.max_surge.clone()).unwrap_or(IntOrString::String("25%".to_string()));
    scaled(&surge, i64::from(replicas), true) as i32
}

/// A rolling update's `maxUnavailable` of `replicas` (25% unless set; at least 1 when
/// `maxSurge` is 0); none for a `Recreate` Deployment, as the Deployment controller counts it.
fn max_unavailable(spec: &DeploymentSpec, replicas: i32) -> i32 {
    if spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return 0;
    }
    let ru = spec.strategy.as_ref().and_then(|s| s.rolling_update.as_ref());
    let unavailable = ru.and_then(|r| r.max_unavailable.clone()).unwrap_or(IntOrString::String("25%".to_string()));
    let n = scaled(&unavailable, i64::from(replicas), false) as i32;
    if n == 0 && max_surge(spec, replicas) == 0 { 1 } else { n }
}

/// The pod-template-hash of a template: a hash of its canonical JSON.
///
/// Fields set to `false` or `0` are left out first: Kubernetes hashes the Go struct, where such a
/// field and an absent one are the same value, so a template written with Go's zero values (as
/// kubectl's protobuf create writes it) and the same template without them (as `kubectl rollout
/// undo` sends it back) are one revision.
pub fn template_hash(template: &PodTemplateSpec) -> String {
    fn without_zeros(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                m.retain(|_, f| !(f == &serde_json::json!(false) || f.as_f64() == Some(0.0)));
                m.values_mut().for_each(without_zeros);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(without_zeros),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(template).unwrap_or_default();
    without_zeros(&mut value);
    safe_encode(fnv1a32(value.to_string().as_bytes()))
}

fn pod_from_template(namespace: &str, rs_name: &str, template: &PodTemplateSpec) -> Pod {
    let tmeta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{rs_name}-")),
            namespace: Some(namespace.to_string()),
            labels: tmeta.labels,
            annotations: tmeta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".to_string(),
                kind: "ReplicaSet".to_string(),
                name: rs_name.to_string(),
                uid: String::new(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{DeploymentStrategy, RollingUpdateDeployment};
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use kerf_api::cluster::{AnyObject, WatchEvent};
    use kerf_cloud::ManualClock;

    fn web(replicas: i32, surge: IntOrString, unavailable: IntOrString) -> Deployment {
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        Deployment {
            metadata: ObjectMeta { name: Some("web".to_string()), ..ObjectMeta::default() },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                selector: LabelSelector { match_labels: Some(labels.clone()), ..LabelSelector::default() },
                strategy: Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".to_string()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: Some(surge),
                        max_unavailable: Some(unavailable),
                    }),
                }),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta { labels: Some(labels), ..ObjectMeta::default() }),
                    spec: Some(PodSpec {
                        containers: vec![Container { name: "c".to_string(), ..Container::default() }],
                        ..PodSpec::default()
                    }),
                },
                ..DeploymentSpec::default()
            }),
            status: None,
        }
    }

    /// Plays kube-scheduler and kubelet: every new pod is bound and running at once. Returns
    /// (pods, available pods, pods per template hash) after the controllers settle, checking
    /// `invariant` after every step.
    fn settle(w: &mut Workloads, c: &SimCluster, invariant: &dyn Fn(usize, usize)) -> BTreeMap<String, usize> {
        for _ in 0..100 {
            w.reconcile(c);
            let events = c.drain_watch();
            if events.is_empty() && !w.is_dirty() {
                break;
            }
            for ev in events {
                match ev {
                    WatchEvent::Applied(AnyObject::Pod(p)) => {
                        let mut p = std::sync::Arc::unwrap_or_clone(p);
                        if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none() {
                            p.spec.get_or_insert_with(PodSpec::default).node_name = Some("n".to_string());
                            p.status = Some(PodStatus { phase: Some("Running".to_string()), ..PodStatus::default() });
                            let _ = c.replace_obj(p);
                        } else {
                            w.observe_pod(&SlimPod::from(&p), false, |_| true);
                        }
                    }
                    WatchEvent::Deleted(AnyObject::Pod(p)) => w.observe_pod(&SlimPod::from(&*p), true, |_| true),
                    _ => {}
                }
            }
            let pods = c.list_objs::<Pod>();
            let available =
                pods.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).count();
            invariant(pods.len(), available);
        }
        let mut by_hash = BTreeMap::new();
        for p in c.list_objs::<Pod>() {
            let h = p.metadata.labels.unwrap_or_default().get(POD_TEMPLATE_HASH).cloned().unwrap_or_default();
            *by_hash.entry(h).or_insert(0) += 1;
        }
        by_hash
    }

    #[test]
    fn rolling_update_with_max_surge_1_max_unavailable_0_never_exceeds_5_or_drops_below_4() {
        let c = SimCluster::new(ManualClock::new(), 3);
        let mut w = Workloads::default();
        w.apply_deployment(web(4, IntOrString::Int(1), IntOrString::Int(0)));
        let first = settle(&mut w, &c, &|_, _| {});
        assert_eq!(first.values().copied().collect::<Vec<_>>(), vec![4]);
        assert!(w.rollout("default", "web", "2025-01-01T00:00:00Z"));
        let after = settle(&mut w, &c, &|total, available| {
            assert!(total <= 5, "surge beyond maxSurge: {total} pods");
            assert!(available >= 4, "availability below replicas - maxUnavailable: {available}");
        });
        assert_eq!(after.len(), 1, "only the new revision is left: {after:?}");
        assert_eq!(after.values().copied().sum::<usize>(), 4);
        assert_ne!(after.keys().next(), first.keys().next());
    }

    #[test]
    fn rolling_update_defaults_to_25_percent_surge_and_unavailability() {
        let c = SimCluster::new(ManualClock::new(), 3);
        let mut w = Workloads::default();
        w.apply_deployment(web(8, IntOrString::String("25%".to_string()), IntOrString::String("25%".to_string())));
        settle(&mut w, &c, &|_, _| {});
        w.rollout("default", "web", "t");
        let after = settle(&mut w, &c, &|total, available| {
            assert!(total <= 10, "25% of 8 is a surge of 2: {total}");
            assert!(available >= 6, "25% of 8 is 2 unavailable at most: {available}");
        });
        assert_eq!(after.values().copied().sum::<usize>(), 8);
        assert_eq!(after.len(), 1);
    }

    #[test]
    fn each_new_template_is_the_next_revision_and_a_template_brought_back_becomes_the_newest() {
        let c = SimCluster::new(ManualClock::new(), 3);
        let mut w = Workloads::default();
        let mut d = web(2, IntOrString::Int(1), IntOrString::Int(0));
        d.metadata.uid = Some("d-uid".to_string());
        w.apply_deployment(d.clone());
        settle(&mut w, &c, &|_, _| {});
        let revisions = |w: &mut Workloads| {
            let available = w.available_by_set();
            let mut out = BTreeMap::new();
            for (_, obj) in w.take_replica_set_changes(&available) {
                let obj = obj.unwrap();
                let hash = obj["metadata"]["labels"][POD_TEMPLATE_HASH].as_str().unwrap().to_string();
                assert_eq!(obj["metadata"]["ownerReferences"][0]["uid"], "d-uid");
                out.insert(hash, obj["metadata"]["annotations"][REVISION].as_str().unwrap().to_string());
            }
            out
        };
        let first = revisions(&mut w);
        assert_eq!(first.values().collect::<Vec<_>>(), ["1"]);
        let mut changed = d.clone();
        changed.spec.as_mut().unwrap().template.spec.as_mut().unwrap().containers[0].image = Some("v2".to_string());
        w.apply_deployment(changed);
        settle(&mut w, &c, &|_, _| {});
        let second = revisions(&mut w);
        assert!(second.values().any(|r| r == "2"), "{second:?}");
        // `kubectl rollout undo`: the first template again.
        w.apply_deployment(d);
        settle(&mut w, &c, &|_, _| {});
        let (hash, _) = first.into_iter().next().unwrap();
        assert_eq!(revisions(&mut w).get(&hash).map(String::as_str), Some("3"));
        let progress = &w.progress(&w.available_by_set())[0];
        assert_eq!((progress.revision, progress.available, progress.min_available), (3, 2, 2));
    }

    #[test]
    fn pod_names_follow_replica_set_and_hash() {
        let c = SimCluster::new(ManualClock::new(), 3);
        let mut w = Workloads::default();
        w.apply_deployment(web(2, IntOrString::Int(1), IntOrString::Int(0)));
        w.reconcile(&c);
        for p in c.list_objs::<Pod>() {
            let name = p.metadata.name.unwrap();
            let hash = p.metadata.labels.unwrap()[POD_TEMPLATE_HASH].clone();
            assert!(name.starts_with(&format!("web-{hash}-")), "{name}");
            assert_eq!(name.len(), "web-".len() + hash.len() + 6);
            assert_eq!(w.owner_of(&format!("default/{name}")).as_deref(), Some("Deployment/web"));
        }
    }
}
