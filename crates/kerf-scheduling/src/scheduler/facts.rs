//! What the Scheduler reads from one pod — its requests, host ports and constraints (tolerations,
//! node affinity, topology spread, pod affinity and anti-affinity, volumes) — parsed once, and a
//! cache that keeps it across [`SchedulingContext`](crate::SchedulingContext) builds.
//!
//! A controller builds a context per pass over mostly the same pods: re-reading every pod's
//! quantities and constraints each time is most of a build. [`PodFactsCache`] keeps the
//! [`PodFacts`] of each pod shape (the spec less the node name, which the decoded pods of a
//! workload share), labels (shared likewise) and namespace: everything parsing reads of a pod.
//! A pod is parsed only when no pod of its shape, labels and namespace was, so the replicas of a
//! workload parse once, and a pod whose status changed is not parsed again. A pod whose facts are
//! its own (a generic ephemeral volume's claim is named after it) is kept by uid and
//! resourceVersion, and parsed on every build when it has neither. A pod's constraints are parsed
//! on first use: only the pod that stands for its group (pods with identical constraints) needs
//! them.
//!
//! The cache also sorts the pods it parses into constraint classes: pods whose constraints are
//! equal (as `preferences::same_constraints` compares them) get the same class id, so a build
//! groups them by a hash lookup instead of comparing their affinities field by field.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use k8s_openapi::api::core::v1::Toleration;
use kerf_api::resources::SharedLists;
use kerf_api::resources::{CPU, EPHEMERAL_STORAGE, MEMORY, PODS};
use kerf_api::slim_meta::StringMap;
use kerf_api::{PodShape, SlimPod};
use kerf_api::{Quantity, ResourceList};

use super::ids::{GroupIx, IxVec, PodIx};
use super::request_rows::RequestRows;
use super::resources::to_units;
use crate::model::SchedulingInput;
use crate::pod::{self, HostPort, PodAffinities, SpreadConstraint};
use crate::requirements::{Requirement, Requirements};

/// Every pod of the context, by [`PodIx`]: the pending pods (`input.pods`) first, then the pods
/// on existing nodes.
pub(super) struct Pods {
    /// Every pod's dense requests.
    pub(super) requests: RequestRows,
    /// Every pod's parsed facts.
    pub(super) facts: IxVec<PodIx, Arc<PodFacts>>,
    pub(super) group: IxVec<PodIx, GroupIx>,
    /// The pods on existing nodes, indexed from `input.pods.len()`.
    pub(super) existing: Vec<Arc<SlimPod>>,
}

/// The context indexes ([`PodIx`]) of each existing node's pods, node by node in input order:
/// the pending pods come first, then each existing node's pods in turn (as `build` lays out
/// `facts`).
pub(super) fn existing_pod_ranges(input: &SchedulingInput) -> Vec<std::ops::Range<usize>> {
    let mut next = input.pods.len();
    input
        .existing_nodes
        .iter()
        .map(|n| {
            let range = next..next + n.pods.len();
            next = range.end;
            range
        })
        .collect()
}

/// What the Scheduler reads from one version of a pod.
pub(super) struct PodFacts {
    /// The pod's requests by resource name, in the Scheduler's units (cpu in millicores,
    /// everything else whole units), with `pods` 1.
    pub(super) requests: Vec<(Cow<'static, str>, i64)>,
    pub(super) ports: Vec<HostPort>,
    /// The constraint class the cache sorted this pod into (see the module documentation);
    /// `None` when parsed without a cache or when the pod stands alone.
    pub(super) class: Option<u64>,
    /// Boxed: most pods never parse them (one pod stands for its group), and every pod's facts
    /// are kept between passes.
    constraints: OnceLock<Box<Constraints>>,
    /// The requests as kube-scheduler's view keeps them ([`pod::pod_requests`]), on first use.
    request_list: OnceLock<Arc<ResourceList>>,
}

/// A pod's scheduling constraints, as its group is built from them.
pub(super) struct Constraints {
    pub(super) tolerations: Vec<Toleration>,
    pub(super) terms: Vec<Requirements>,
    pub(super) name_fields: Vec<Option<Requirement>>,
    pub(super) pref_node: Vec<(i32, Requirements)>,
    pub(super) spreads: Vec<SpreadConstraint>,
    pub(super) affinities: PodAffinities,
    pub(super) volume_claims: Vec<String>,
}

/// A resource name without an allocation for the common ones.
fn resource_name(k: &str) -> Cow<'static, str> {
    match k {
        CPU => Cow::Borrowed(CPU),
        MEMORY => Cow::Borrowed(MEMORY),
        PODS => Cow::Borrowed(PODS),
        EPHEMERAL_STORAGE => Cow::Borrowed(EPHEMERAL_STORAGE),
        other => Cow::Owned(other.to_string()),
    }
}

fn add_units(list: &mut Vec<(Cow<'static, str>, i64)>, k: &str, v: i64) {
    match list.iter_mut().find(|(n, _)| n == k) {
        Some((_, total)) => *total += v,
        None => list.push((resource_name(k), v)),
    }
}

impl PodFacts {
    /// Reads `p`'s requests and host ports; its constraints wait for [`PodFacts::constraints`].
    pub(super) fn parse(p: &SlimPod) -> Self {
        let spec = p.spec.as_ref();
        let simple = spec.is_some_and(|s| s.init_containers.as_ref().is_none_or(Vec::is_empty) && s.overhead.is_none());
        let mut requests: Vec<(Cow<'static, str>, i64)> = Vec::with_capacity(3);
        if simple {
            // Only regular containers: each container's requests (a limit standing in for a
            // missing request), summed in the Scheduler's units without intermediate lists.
            for c in spec.iter().flat_map(|s| &s.containers) {
                let Some(rr) = &c.resources else { continue };
                let asked = rr.requests.as_ref();
                let limits_only = rr.limits.iter().flatten().filter(|(k, _)| asked.is_none_or(|r| !r.contains_key(*k)));
                for (k, q) in asked.into_iter().flatten().chain(limits_only) {
                    let units = Quantity::parse(&q.0).map(|q| to_units(k, &q)).unwrap_or(0);
                    add_units(&mut requests, k, units);
                }
            }
        } else {
            for (k, q) in pod::pod_requests(p).iter() {
                add_units(&mut requests, k, to_units(k, q));
            }
        }
        match requests.iter_mut().find(|(n, _)| n == PODS) {
            Some((_, v)) => *v = 1,
            None => requests.push((Cow::Borrowed(PODS), 1)),
        }
        PodFacts {
            requests,
            ports: pod::host_ports(p),
            class: None,
            constraints: OnceLock::new(),
            request_list: OnceLock::new(),
        }
    }

    /// The requests of `p` (the pod these facts were read from) as a resource list, for
    /// kube-scheduler's view of the cluster; worked out once per version of the pod, and kept
    /// as the list `shared` holds when it holds an equal one.
    pub(super) fn request_list(&self, p: &SlimPod, shared: &mut SharedLists) -> Arc<ResourceList> {
        Arc::clone(self.request_list.get_or_init(|| shared.share(Arc::new(pod::pod_requests(p)))))
    }

    /// The constraints of `p` (the pod these facts were read from), parsed on first use.
    pub(super) fn constraints(&self, p: &SlimPod) -> &Constraints {
        self.constraints.get_or_init(|| {
            Box::new(Constraints {
                tolerations: pod::tolerations(p).to_vec(),
                terms: pod::required_node_terms(p),
                name_fields: pod::required_node_name_fields(p),
                pref_node: pod::preferred_node_terms(p),
                spreads: pod::spread_constraints(p),
                affinities: pod::pod_affinities(p),
                volume_claims: pod::volume_claims(p),
            })
        })
    }
}

/// [`PodFacts`] kept across [`SchedulingContext`](crate::SchedulingContext) builds (see the
/// [module documentation](self)). Owned by whoever builds contexts pass after pass (the
/// controller) and handed to [`SchedulingContext::with_facts`](crate::SchedulingContext::with_facts).
/// Facts no build used are dropped when the table has doubled since the last sweep.
#[derive(Default)]
pub struct PodFactsCache {
    inner: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    /// The facts of the pods of one shape, labels and namespace: everything parsing reads of a
    /// pod, so the replicas of a workload parse once and hold one copy, and a pod whose
    /// resourceVersion changed without touching them (its status did) is not parsed again. Keyed
    /// by the shape's and the labels' addresses (see [`Shared`]), then told apart by namespace.
    /// Nothing is kept per pod: in a large cluster a per-pod table would be a large part of the
    /// controller's memory.
    by_share: foldhash::HashMap<(usize, usize), Vec<Shared>>,
    /// Facts of pods that share none, by uid and resourceVersion: a pod with a generic ephemeral
    /// volume (its claim is named after the pod).
    by_uid: foldhash::HashMap<String, Entry>,
    /// Facts in `by_share`.
    shared: usize,
    /// The number of facts kept at which those no build used since are dropped.
    sweep_at: usize,
    /// How many pods were parsed, over the cache's life.
    parses: u64,
    /// Builds served, to tell the facts the latest build used.
    builds: u64,
    /// Constraint key (see [`constraint_key`]) → class id.
    classes: foldhash::HashMap<String, u64>,
}

/// Facts shared by the pods of one shape, labels and namespace. The shape and labels are told
/// by address: the entry holds them alive, so an address is not reused for another value while
/// the entry exists.
struct Shared {
    namespace: String,
    _shape: Arc<PodShape>,
    _labels: Option<Arc<StringMap>>,
    facts: Arc<PodFacts>,
    /// The build that last used them.
    used: u64,
}

/// The shape of `p` when its facts are shared by the pods of its shape, labels and namespace;
/// `None` for a pod whose facts are its own (a generic ephemeral volume's claim is named after
/// the pod) or that has no spec: those are kept by uid.
fn shared_shape(p: &SlimPod) -> Option<&Arc<PodShape>> {
    let spec = p.spec.as_ref()?;
    if spec.volumes.iter().flatten().any(|v| v.ephemeral.is_some()) {
        return None;
    }
    Some(spec.shape())
}

impl CacheState {
    /// Parses `p` and sorts it into its constraint class.
    fn parse(&mut self, p: &SlimPod) -> Arc<PodFacts> {
        self.parses += 1;
        let mut facts = PodFacts::parse(p);
        if let Some(key) = constraint_key(p, &facts.ports) {
            let next = self.classes.len() as u64;
            facts.class = Some(*self.classes.entry(key).or_insert(next));
        }
        Arc::new(facts)
    }

    /// The facts of the pods of `shape` (its [`shared_shape`]) with `p`'s labels and namespace,
    /// parsed from `p` when no such pod was.
    fn shared(&mut self, shape: &Arc<PodShape>, p: &SlimPod, build: u64) -> Arc<PodFacts> {
        let labels = p.metadata.labels.as_ref();
        let key = (Arc::as_ptr(shape) as usize, labels.map_or(0, |l| Arc::as_ptr(l) as usize));
        let namespace = pod::namespace(p);
        if let Some(s) = self.by_share.get_mut(&key).and_then(|v| v.iter_mut().find(|s| s.namespace == namespace)) {
            s.used = build;
            return Arc::clone(&s.facts);
        }
        let facts = self.parse(p);
        let entry = Shared {
            namespace: namespace.to_string(),
            _shape: Arc::clone(shape),
            _labels: labels.cloned(),
            facts: Arc::clone(&facts),
            used: build,
        };
        self.by_share.entry(key).or_default().push(entry);
        self.shared += 1;
        facts
    }

    /// Drops the facts the latest build (`build`, which went through every pod) did not use,
    /// once the kept facts have doubled since the last sweep.
    fn sweep(&mut self, build: u64) {
        if self.shared + self.by_uid.len() < self.sweep_at {
            return;
        }
        self.by_share.retain(|_, v| {
            v.retain(|s| s.used == build);
            !v.is_empty()
        });
        self.shared = self.by_share.values().map(Vec::len).sum();
        self.by_uid.retain(|_, e| e.used == build);
        self.sweep_at = (2 * (self.shared + self.by_uid.len())).max(1024);
    }
}

/// Everything `preferences::same_constraints` compares, as one string: equal strings for pods
/// with equal constraints, different ones otherwise. `None` for pods that stand alone or have no
/// spec (they are grouped by comparison).
fn constraint_key(p: &SlimPod, ports: &[HostPort]) -> Option<String> {
    let spec = p.spec.as_ref()?;
    // Generic ephemeral volumes are claims named after the pod: such a pod is a group of its own.
    if spec.volumes.iter().flatten().any(|v| v.ephemeral.is_some()) {
        return None;
    }
    let fields = (
        pod::namespace(p),
        pod::labels(p),
        &spec.node_selector,
        &spec.affinity,
        &spec.tolerations,
        &spec.topology_spread_constraints,
        &spec.volumes,
    );
    let json = serde_json::to_string(&fields).ok()?;
    Some(format!("{json}{ports:?}"))
}

struct Entry {
    resource_version: String,
    facts: Arc<PodFacts>,
    used: u64,
}

impl PodFactsCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many pods were parsed (their facts not found in the cache) since it was made.
    pub fn parses(&self) -> u64 {
        self.state().parses
    }

    /// How many facts the cache holds: one per shape, labels and namespace, and one per version
    /// of a pod that shares none.
    pub fn len(&self) -> usize {
        let state = self.state();
        state.shared + state.by_uid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn state(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // A panic while the lock was held leaves at worst a missing entry: keep going.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The facts of each of `pods`, from the cache when a pod of the same shape, labels and
    /// namespace (or this very version of a pod that shares none) was parsed. `whole`: these are
    /// all the pods of a build (facts no build used since are dropped when they have doubled);
    /// else a part of a build whose other pods' facts come from elsewhere (nothing is dropped).
    fn facts<'a>(&self, pods: impl Iterator<Item = &'a Arc<SlimPod>>, whole: bool) -> Vec<Arc<PodFacts>> {
        let mut state = self.state();
        let state = &mut *state;
        if whole {
            state.builds += 1;
        }
        let build = state.builds;
        let mut out = Vec::with_capacity(pods.size_hint().0);
        for p in pods {
            if let Some(shape) = shared_shape(p) {
                out.push(state.shared(shape, p, build));
                continue;
            }
            let uid = p.metadata.uid.as_deref().filter(|u| !u.is_empty());
            let rv = p.metadata.resource_version.as_deref().filter(|v| !v.is_empty());
            let (Some(uid), Some(rv)) = (uid, rv) else {
                out.push(state.parse(p));
                continue;
            };
            match state.by_uid.get_mut(uid) {
                Some(e) if e.resource_version == rv => {
                    e.used = build;
                    out.push(Arc::clone(&e.facts));
                }
                _ => {
                    let facts = state.parse(p);
                    let entry = Entry { resource_version: rv.to_string(), facts: Arc::clone(&facts), used: build };
                    state.by_uid.insert(uid.to_string(), entry);
                    out.push(facts);
                }
            }
        }
        if whole {
            state.sweep(build);
        }
        out
    }
}

/// The facts of each of `pods`: through `cache` when there is one, else parsed.
pub(super) fn gather<'a>(
    pods: impl Iterator<Item = &'a Arc<SlimPod>>,
    cache: Option<&PodFactsCache>,
) -> Vec<Arc<PodFacts>> {
    gather_part(pods, cache, true)
}

/// [`gather`] for some of a build's pods (the others' facts are taken over from an earlier
/// context): the cache drops nothing.
pub(super) fn gather_some<'a>(
    pods: impl Iterator<Item = &'a Arc<SlimPod>>,
    cache: Option<&PodFactsCache>,
) -> Vec<Arc<PodFacts>> {
    gather_part(pods, cache, false)
}

fn gather_part<'a>(
    pods: impl Iterator<Item = &'a Arc<SlimPod>>,
    cache: Option<&PodFactsCache>,
    whole: bool,
) -> Vec<Arc<PodFacts>> {
    match cache {
        Some(c) => c.facts(pods, whole),
        None => pods.map(|p| Arc::new(PodFacts::parse(p))).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(name: &str, app: &str, ephemeral: bool) -> Arc<SlimPod> {
        let volumes = if ephemeral {
            serde_json::json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}])
        } else {
            serde_json::json!([])
        };
        let pod = serde_json::json!({
            "metadata": {"name": name, "namespace": "shop", "uid": format!("uid-{name}"), "resourceVersion": "1",
                         "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                     "volumes": volumes}
        });
        Arc::new(serde_json::from_value(pod).unwrap())
    }

    #[test]
    fn replicas_of_one_shape_labels_and_namespace_share_their_facts_and_parse_once_for_all() {
        let pods = [
            decoded("web-1", "web", false),
            decoded("web-2", "web", false),
            decoded("api-1", "api", false),
            decoded("scratch-1", "web", true),
            decoded("scratch-2", "web", true),
        ];
        let cache = PodFactsCache::new();
        let facts = cache.facts(pods.iter(), true);
        assert!(Arc::ptr_eq(&facts[0], &facts[1]), "replicas share one copy");
        assert!(!Arc::ptr_eq(&facts[0], &facts[2]), "other labels are other facts");
        assert!(!Arc::ptr_eq(&facts[3], &facts[4]), "a claim named after the pod is the pod's own");
        assert_eq!(facts[0].requests, facts[2].requests);
        assert_eq!(facts[0].class, facts[1].class);
        assert_ne!(facts[0].class, facts[2].class);
        assert_eq!(
            (
                facts[3].constraints(&pods[3]).volume_claims.clone(),
                facts[4].constraints(&pods[4]).volume_claims.clone()
            ),
            (vec!["shop/scratch-1-scratch".to_string()], vec!["shop/scratch-2-scratch".to_string()])
        );
        assert_eq!((cache.len(), cache.parses()), (4, 4), "the two replicas parse once");
    }

    /// A pod of `app` whose spec differs from every other's (its priority is `priority`).
    fn own_shape(name: &str, app: &str, priority: i32, resource_version: &str) -> Arc<SlimPod> {
        let mut pod = (*decoded(name, app, false)).clone();
        pod.metadata.resource_version = Some(resource_version.to_string());
        let spec = pod.spec.as_mut().unwrap();
        let mut shape = (**spec.shape()).clone();
        shape.priority = Some(priority);
        *spec = kerf_api::SlimPodSpec::from(shape);
        Arc::new(pod)
    }

    #[test]
    fn a_new_version_of_a_pod_with_the_same_spec_and_labels_is_not_parsed_again() {
        let cache = PodFactsCache::new();
        let before = cache.facts([decoded("web-1", "web", false)].iter(), true);
        let mut status_changed = (*decoded("web-1", "web", false)).clone();
        status_changed.metadata.resource_version = Some("2".into());
        let after = cache.facts([Arc::new(status_changed)].iter(), true);
        assert!(Arc::ptr_eq(&before[0], &after[0]));
        assert_eq!(cache.parses(), 1);
    }

    #[test]
    fn facts_no_build_used_are_dropped_once_the_cache_has_doubled() {
        let cache = PodFactsCache::new();
        let first: Vec<_> = (0..1500).map(|i| own_shape(&format!("a-{i}"), "a", i, "1")).collect();
        cache.facts(first.iter(), true);
        assert_eq!(cache.len(), 1500);
        let second: Vec<_> = (0..1500).map(|i| own_shape(&format!("a-{i}"), "a", 1500 + i, "2")).collect();
        let facts = cache.facts(second.iter(), true);
        assert_eq!(cache.len(), 1500, "the first build's facts are gone");
        assert_eq!(cache.parses(), 3000);
        let again = cache.facts(second.iter(), true);
        assert!(facts.iter().zip(&again).all(|(a, b)| Arc::ptr_eq(a, b)), "the second build's are kept");
        assert_eq!(cache.parses(), 3000);
    }
}
