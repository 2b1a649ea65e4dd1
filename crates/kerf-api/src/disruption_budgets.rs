//! Which pods each PodDisruptionBudget selects and how many of them are healthy, kept up to date
//! as pods and budgets come, change and go. The Eviction API (in the simulated API server) and
//! the disruption controller read a budget's counts here instead of matching its selector against
//! every pod of its namespace on every eviction and every disruption pass: a pod's selecting
//! budgets are matched once, when it arrives or its labels change.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::intstr::scaled;
use crate::selector::selector_matches;
use crate::slim_pod::PodView;
use crate::str_pair::StrPair;

/// `(namespace, name)` of a pod or a budget.
pub type Key = (String, String);

/// A budget as the index keeps it: its selector and rule, and the pods it selects.
#[derive(Debug, Clone)]
struct Budget {
    selector: LabelSelector,
    min_available: Option<IntOrString>,
    max_unavailable: Option<IntOrString>,
    /// Selected pods that count (see [`DisruptionBudgets::new`]).
    expected: i64,
    /// Those of them that are healthy.
    healthy: i64,
}

/// What one selected pod adds to its budgets.
#[derive(Debug, Clone)]
struct Selected {
    /// The budgets selecting it, in key order.
    budgets: Vec<Key>,
    counted: bool,
    healthy: bool,
}

/// A budget's state: how many healthy pods it needs and has, and how many more may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetStatus {
    pub expected: i64,
    pub desired_healthy: i64,
    pub healthy: i64,
}

impl BudgetStatus {
    /// How many of its healthy pods may be disrupted now (none when 0 or less).
    pub fn allowed(&self) -> i64 {
        self.healthy - self.desired_healthy
    }
}

/// Why the Eviction API refuses to evict a pod now (see [`DisruptionBudgets::eviction_refusal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionRefusal<'a> {
    /// More than one budget selects the pod, which the Eviction API does not support: the first
    /// two, in key order.
    MoreThanOneBudget(&'a Key, &'a Key),
    /// The one budget selecting the pod allows no more disruptions.
    NoneAllowed(&'a Key, BudgetStatus),
}

/// The index; see the module documentation.
#[derive(Debug, Clone, Default)]
pub struct DisruptionBudgets {
    /// Finished pods (phase Succeeded or Failed) count towards the budgets' totals.
    count_finished: bool,
    budgets: BTreeMap<Key, Budget>,
    /// Pods selected by at least one budget.
    pods: HashMap<Key, Selected>,
}

/// A pod counts as healthy for a disruption budget when it runs with its Ready condition true.
pub fn pod_healthy(pod: &(impl PodView + ?Sized)) -> bool {
    pod.phase() == Some("Running") && pod.ready()
}

/// A pod's `(namespace, name)`, borrowed (a missing one reads as empty).
fn pod_names(pod: &(impl PodView + ?Sized)) -> (&str, &str) {
    (pod.meta().namespace().unwrap_or_default(), pod.meta().name().unwrap_or_default())
}

fn pod_key(pod: &(impl PodView + ?Sized)) -> Key {
    let (namespace, name) = pod_names(pod);
    (namespace.to_string(), name.to_string())
}

fn same_labels(a: &(impl PodView + ?Sized), b: &(impl PodView + ?Sized)) -> bool {
    a.meta().namespace() == b.meta().namespace() && a.meta().labels() == b.meta().labels()
}

impl DisruptionBudgets {
    /// An empty index. With `count_finished`, finished pods count towards a budget's total (as
    /// the Eviction API counts them); without, only pods that have not finished do.
    pub fn new(count_finished: bool) -> Self {
        DisruptionBudgets { count_finished, ..Self::default() }
    }

    /// Whether any budget is known.
    pub fn is_empty(&self) -> bool {
        self.budgets.is_empty()
    }

    /// A pod changed from `old` to `new` (`None`: it did not exist / is gone). `old` must be
    /// the version last given as `new` for the same pod.
    pub fn update_pod<P: PodView + ?Sized>(&mut self, old: Option<&P>, new: Option<&P>) {
        let key = match (old, new) {
            (_, Some(p)) | (Some(p), None) => pod_key(p),
            (None, None) => return,
        };
        let previous = self.pods.remove(&key);
        if let Some(s) = &previous {
            self.add(s, -1);
        }
        let Some(pod) = new else { return };
        let budgets = match (old, previous) {
            (Some(o), Some(s)) if same_labels(o, pod) => s.budgets,
            (Some(o), None) if same_labels(o, pod) => return,
            _ => self.selecting_budgets(pod),
        };
        if budgets.is_empty() {
            return;
        }
        let s = Selected {
            budgets,
            counted: self.count_finished || !crate::pod_facts::terminal(pod),
            healthy: pod_healthy(pod),
        };
        self.add(&s, 1);
        self.pods.insert(key, s);
    }

    fn selecting_budgets(&self, pod: &(impl PodView + ?Sized)) -> Vec<Key> {
        let ns = pod.meta().namespace().map(str::to_string).unwrap_or_default();
        let empty = BTreeMap::new();
        let labels = pod.meta().labels().unwrap_or(&empty);
        self.budgets
            .range((ns.clone(), String::new())..)
            .take_while(|((bns, _), _)| *bns == ns)
            .filter(|(_, b)| selector_matches(Some(&b.selector), labels))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn add(&mut self, s: &Selected, sign: i64) {
        for k in &s.budgets {
            if let Some(b) = self.budgets.get_mut(k) {
                if s.counted {
                    b.expected += sign;
                }
                if s.counted && s.healthy {
                    b.healthy += sign;
                }
            }
        }
    }

    /// A budget was created, changed (`Some`) or deleted (`None`); `namespace_pods` are the
    /// pods of its namespace now (its selector is matched against each).
    pub fn set_budget<'p, P: PodView + ?Sized + 'p>(
        &mut self,
        key: Key,
        pdb: Option<&PodDisruptionBudget>,
        namespace_pods: impl IntoIterator<Item = &'p P>,
    ) {
        if self.budgets.remove(&key).is_some() {
            self.pods.retain(|_, s| {
                s.budgets.retain(|b| *b != key);
                !s.budgets.is_empty()
            });
        }
        let Some(spec) = pdb.and_then(|p| p.spec.as_ref()) else { return };
        let Some(selector) = spec.selector.clone() else { return };
        let mut budget = Budget {
            selector,
            min_available: spec.min_available.clone(),
            max_unavailable: spec.max_unavailable.clone(),
            expected: 0,
            healthy: 0,
        };
        let empty = BTreeMap::new();
        for pod in namespace_pods {
            if !selector_matches(Some(&budget.selector), pod.meta().labels().unwrap_or(&empty)) {
                continue;
            }
            let counted = self.count_finished || !crate::pod_facts::terminal(pod);
            let healthy = pod_healthy(pod);
            budget.expected += i64::from(counted);
            budget.healthy += i64::from(counted && healthy);
            let s = self.pods.entry(pod_key(pod)).or_insert_with(|| Selected { budgets: Vec::new(), counted, healthy });
            let at = s.budgets.partition_point(|b| *b < key);
            s.budgets.insert(at, key.clone());
        }
        self.budgets.insert(key, budget);
    }

    /// The budgets selecting the pod with this key, in key order.
    pub fn selecting(&self, pod: &Key) -> &[Key] {
        self.selecting_named(&pod.0, &pod.1)
    }

    /// [`DisruptionBudgets::selecting`] by a borrowed key: the disruption controller asks for
    /// every pod of every candidate node on each pass.
    fn selecting_named(&self, namespace: &str, name: &str) -> &[Key] {
        self.pods.get(&(namespace, name) as &dyn StrPair).map_or(&[], |s| s.budgets.as_slice())
    }

    /// Whether the Eviction API would refuse to evict `pod` now, and why: a pod that is not
    /// healthy may always go (it counts towards no budget's healthy pods), a pod selected by
    /// more than one budget never, else only while its budget allows one more disruption. The
    /// one answer both the in-memory API server and the disruption controller give.
    pub fn eviction_refusal(&self, pod: &(impl PodView + ?Sized)) -> Option<EvictionRefusal<'_>> {
        if self.budgets.is_empty() || !pod_healthy(pod) {
            return None;
        }
        let (namespace, name) = pod_names(pod);
        match self.selecting_named(namespace, name) {
            [] => None,
            [first, second, ..] => Some(EvictionRefusal::MoreThanOneBudget(first, second)),
            [budget] => {
                let status = self.status(budget)?;
                (status.allowed() <= 0).then_some(EvictionRefusal::NoneAllowed(budget, status))
            }
        }
    }

    /// A budget's counts and what it needs.
    pub fn status(&self, budget: &Key) -> Option<BudgetStatus> {
        let b = self.budgets.get(budget)?;
        let desired_healthy = match (&b.min_available, &b.max_unavailable) {
            (Some(min), _) => scaled(min, b.expected, true),
            (None, Some(max)) => b.expected - scaled(max, b.expected, true),
            (None, None) => b.expected,
        };
        Some(BudgetStatus { expected: b.expected, desired_healthy, healthy: b.healthy })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, app: &str, phase: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pdb(name: &str, app: &str, max_unavailable: &str) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("ns".into()), ..Default::default() },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some([("app".to_string(), app.to_string())].into()),
                    ..Default::default()
                }),
                max_unavailable: Some(IntOrString::String(max_unavailable.into())),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn key(name: &str) -> Key {
        ("ns".to_string(), name.to_string())
    }

    /// The counts a full scan of `pods` gives for a budget selecting `app`.
    fn scanned(pods: &[Pod], app: &str, count_finished: bool) -> (i64, i64) {
        let sel: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.labels.as_ref().unwrap()["app"] == app)
            .filter(|p| count_finished || !crate::pod_facts::terminal(p))
            .collect();
        (sel.len() as i64, sel.iter().filter(pod_healthy).count() as i64)
    }

    #[test]
    fn counts_follow_pods_that_arrive_turn_ready_change_labels_finish_and_go() {
        for count_finished in [false, true] {
            let mut idx = DisruptionBudgets::new(count_finished);
            let mut pods = vec![pod("a", "web", "Running", true), pod("b", "web", "Pending", false)];
            for p in &pods {
                idx.update_pod(None, Some(p));
            }
            idx.set_budget(key("web"), Some(&pdb("web", "web", "50%")), pods.iter());
            let check = |idx: &DisruptionBudgets, pods: &[Pod]| {
                let s = idx.status(&key("web")).unwrap();
                assert_eq!((s.expected, s.healthy), scanned(pods, "web", count_finished));
            };
            check(&idx, &pods);
            let changes = [
                (1, pod("b", "web", "Running", true)),
                (0, pod("a", "db", "Running", true)),
                (0, pod("a", "web", "Running", true)),
                (1, pod("b", "web", "Succeeded", false)),
            ];
            for (i, next) in changes {
                idx.update_pod(Some(&pods[i]), Some(&next));
                pods[i] = next;
                check(&idx, &pods);
            }
            let c = pod("c", "web", "Running", true);
            idx.update_pod(None, Some(&c));
            pods.push(c);
            check(&idx, &pods);
            let gone = pods.remove(0);
            idx.update_pod(Some(&gone), None);
            check(&idx, &pods);
        }
    }

    #[test]
    fn a_pod_lists_every_budget_selecting_it_in_key_order_until_a_budget_goes() {
        let mut idx = DisruptionBudgets::new(false);
        let p = pod("a", "web", "Running", true);
        idx.update_pod(None, Some(&p));
        idx.set_budget(key("z-web"), Some(&pdb("z-web", "web", "1")), [&p]);
        idx.set_budget(key("a-web"), Some(&pdb("a-web", "web", "1")), [&p]);
        idx.set_budget(key("db"), Some(&pdb("db", "db", "1")), [&p]);
        assert_eq!(idx.selecting(&key("a")), &[key("a-web"), key("z-web")]);
        idx.set_budget(key("a-web"), None, [&p]);
        assert_eq!(idx.selecting(&key("a")), &[key("z-web")]);
        assert!(idx.status(&key("a-web")).is_none());
    }

    #[test]
    fn eviction_is_refused_when_the_budget_allows_none_or_two_budgets_select_the_pod_but_not_for_unhealthy_pods() {
        let mut idx = DisruptionBudgets::new(true);
        let pods =
            [pod("a", "web", "Running", true), pod("b", "web", "Running", true), pod("c", "web", "Pending", false)];
        for p in &pods {
            idx.update_pod(None, Some(p));
        }
        assert_eq!(idx.eviction_refusal(&pods[0]), None, "no budget selects it");
        // maxUnavailable 33% of 3 pods is 1: two must stay healthy, and two are.
        idx.set_budget(key("web"), Some(&pdb("web", "web", "33%")), pods.iter());
        let status = BudgetStatus { expected: 3, desired_healthy: 2, healthy: 2 };
        assert_eq!(idx.eviction_refusal(&pods[0]), Some(EvictionRefusal::NoneAllowed(&key("web"), status)));
        assert_eq!(idx.eviction_refusal(&pods[2]), None, "a pod that is not healthy may always go");
        // 34% of 3 is 2: one must stay healthy.
        idx.set_budget(key("web"), Some(&pdb("web", "web", "34%")), pods.iter());
        assert_eq!(idx.eviction_refusal(&pods[0]), None, "the budget allows one more");
        idx.set_budget(key("also-web"), Some(&pdb("also-web", "web", "100%")), pods.iter());
        assert_eq!(
            idx.eviction_refusal(&pods[1]),
            Some(EvictionRefusal::MoreThanOneBudget(&key("also-web"), &key("web")))
        );
    }

    #[test]
    fn max_unavailable_percent_rounds_up_and_min_available_wins_when_both_are_set() {
        let mut idx = DisruptionBudgets::new(false);
        let pods: Vec<Pod> = (0..7).map(|i| pod(&format!("p{i}"), "web", "Running", true)).collect();
        for p in &pods {
            idx.update_pod(None, Some(p));
        }
        idx.set_budget(key("web"), Some(&pdb("web", "web", "10%")), pods.iter());
        // 10% of 7 rounds up to 1: 6 must stay healthy, 1 may go.
        assert_eq!(idx.status(&key("web")).unwrap(), BudgetStatus { expected: 7, desired_healthy: 6, healthy: 7 });
        assert_eq!(idx.status(&key("web")).unwrap().allowed(), 1);
        let mut both = pdb("web", "web", "10%");
        both.spec.as_mut().unwrap().min_available = Some(IntOrString::Int(7));
        idx.set_budget(key("web"), Some(&both), pods.iter());
        assert_eq!(idx.status(&key("web")).unwrap().allowed(), 0);
    }
}
