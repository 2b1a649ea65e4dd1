//! Tests of the in-memory store: uids and resourceVersions, admission, conflicts, finalizers,
//! Event objects, generateName and eviction.

use super::*;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn node(name: &str) -> Node {
    Node { metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() }, ..Default::default() }
}

#[test]
fn create_assigns_uid_and_increasing_resource_versions() {
    let c = SimCluster::new(ManualClock::new(), 1);
    let a = c.create_obj(node("a")).unwrap();
    let b = c.create_obj(node("b")).unwrap();
    assert_ne!(a.metadata.uid, b.metadata.uid);
    assert_eq!(a.metadata.resource_version.as_deref(), Some("1"));
    assert_eq!(b.metadata.resource_version.as_deref(), Some("2"));
    assert!(matches!(c.create_obj(node("a")), Err(ApiError::AlreadyExists { .. })));
}

#[test]
fn nodes_created_not_ready_get_the_not_ready_taint_once_the_admission_plugin_is_on() {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    let keys = |n: &Node| -> Vec<(String, String)> {
        n.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(|t| (t.key.clone(), t.effect.clone())).collect()
    };
    let c = SimCluster::new(ManualClock::new(), 1);
    assert!(keys(&c.create_obj(node("plain")).unwrap()).is_empty(), "off by default");
    c.taint_nodes_by_condition();
    let not_ready = vec![("node.kubernetes.io/not-ready".to_string(), "NoSchedule".to_string())];
    assert_eq!(keys(&c.create_obj(node("new")).unwrap()), not_ready);
    let with_status = |name: &str, ready: &str| {
        let mut n = node(name);
        n.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_string(),
                status: ready.to_string(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        n
    };
    assert_eq!(keys(&c.create_obj(with_status("booting", "False")).unwrap()), not_ready);
    assert!(keys(&c.create_obj(with_status("up", "True")).unwrap()).is_empty());
    // Only creation is admitted: an update keeps what it writes.
    let mut n = c.get_obj::<Node>(None, "new").unwrap();
    n.spec = None;
    assert!(keys(&c.update_obj(n).unwrap()).is_empty());
}

#[test]
fn update_with_stale_resource_version_conflicts() {
    let c = SimCluster::new(ManualClock::new(), 1);
    let a = Arc::unwrap_or_clone(c.create_obj(node("a")).unwrap());
    let mut fresh = a.clone();
    fresh.metadata.labels = Some(BTreeMap::from([("x".to_string(), "1".to_string())]));
    c.update_obj(fresh).unwrap();
    assert!(matches!(c.update_obj(a), Err(ApiError::Conflict { .. })));
}

#[test]
fn delete_with_finalizer_marks_then_last_finalizer_removal_deletes() {
    let c = SimCluster::new(ManualClock::new(), 1);
    let mut n = node("a");
    n.metadata.finalizers = Some(vec!["karpenter.sh/termination".to_string()]);
    c.create_obj(n).unwrap();
    c.drain_watch();
    c.delete_obj::<Node>(None, "a").unwrap();
    let marked = c.get_obj::<Node>(None, "a").unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    let mut unfinalized = marked.clone();
    unfinalized.metadata.finalizers = Some(vec![]);
    c.update_obj(unfinalized).unwrap();
    assert!(c.get_obj::<Node>(None, "a").is_none());
    let kinds: Vec<bool> = c.drain_watch().iter().map(|e| matches!(e, WatchEvent::Deleted(_))).collect();
    assert_eq!(kinds, vec![false, true]);
}

#[test]
fn recorded_events_become_event_objects_naming_the_object_and_old_ones_expire() {
    let c = SimCluster::new(ManualClock::new(), 1);
    c.enable_serving(100);
    let pod = c
        .create_obj(Pod {
            metadata: ObjectMeta { name: Some("p".to_string()), ..Default::default() },
            ..Default::default()
        })
        .unwrap();
    for i in 0..MAX_EVENT_OBJECTS + 5 {
        c.record(EventRecord {
            kind: "Pod",
            name: "default/p".to_string(),
            uid: None,
            type_: "Normal",
            reason: "Nominated".to_string(),
            // Messages that differ apart from their numbers (those alone are one event).
            message: (0..4).map(|d| char::from(b'a' + (i / 26usize.pow(d) % 26) as u8)).collect(),
        });
    }
    let (events, _) = c.list_stored("Event", Some("default"));
    assert_eq!(events.len(), MAX_EVENT_OBJECTS);
    let Stored::Dynamic(e) = &events[events.len() - 1] else { panic!("events are dynamic") };
    assert_eq!(e.body["involvedObject"]["uid"].as_str(), pod.metadata.uid.as_deref());
    assert_eq!(e.body["involvedObject"]["name"], "p");
    assert_eq!(c.events().len(), MAX_EVENT_OBJECTS + 5, "the event log keeps everything");
}

#[test]
fn identical_events_within_the_window_become_one_event_object_and_the_log_keeps_every_one() {
    let clock = ManualClock::new();
    let c = SimCluster::new(clock.clone(), 1);
    c.enable_serving(100);
    let blocked = |message: &str| EventRecord {
        kind: "Node",
        name: "n1".to_string(),
        uid: None,
        type_: "Normal",
        reason: "DisruptionBlocked".to_string(),
        message: message.to_string(),
    };
    let annotated = "Cannot disrupt Node: pod default/a is annotated karpenter.sh/do-not-disrupt=true";
    for _ in 0..10 {
        c.record(blocked(annotated));
        clock.advance(std::time::Duration::from_secs(10));
    }
    // A new message for the same node is written at once.
    c.record(blocked("Cannot disrupt Node: NodePool default has consolidateAfter: Never"));
    // Two minutes after the first: written again.
    clock.advance(std::time::Duration::from_secs(20));
    c.record(blocked(annotated));
    let (objects, _) = c.list_stored("Event", Some("default"));
    assert_eq!(objects.len(), 3);
    assert_eq!(c.events().len(), 12, "the event log keeps everything");
}

#[test]
fn generate_name_appends_a_deterministic_suffix() {
    let make = || {
        let c = SimCluster::new(ManualClock::new(), 7);
        let p = Pod {
            metadata: ObjectMeta { generate_name: Some("inflate-abc-".to_string()), ..Default::default() },
            ..Default::default()
        };
        c.create_obj(p).unwrap().metadata.name.clone().unwrap()
    };
    let a = make();
    assert!(a.starts_with("inflate-abc-") && a.len() == "inflate-abc-".len() + 5, "{a}");
    assert_eq!(a, make());
}

/// Creates a Running, Ready pod `name` in `default` with `labels` (what a budget counts as healthy).
fn create_ready_pod(c: &SimCluster, name: &str, labels: &BTreeMap<String, String>) {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    c.create_obj(Pod {
        metadata: ObjectMeta { name: Some(name.to_string()), labels: Some(labels.clone()), ..Default::default() },
        status: Some(PodStatus {
            phase: Some("Running".to_string()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".to_string(),
                status: "True".to_string(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    })
    .unwrap();
}

#[test]
fn eviction_is_refused_by_a_budget_with_no_disruptions_left_and_for_a_pod_two_budgets_select() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let c = SimCluster::new(ManualClock::new(), 1);
    let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
    for n in ["a", "b"] {
        create_ready_pod(&c, n, &labels);
    }
    c.create_obj(PodDisruptionBudget {
        metadata: ObjectMeta { name: Some("web".to_string()), ..Default::default() },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector { match_labels: Some(labels), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    })
    .unwrap();
    c.evict_pod("default", "a").unwrap();
    assert!(matches!(c.evict_pod("default", "b"), Err(ApiError::TooManyRequests { .. })));
    assert!(c.get_obj::<Pod>(Some("default"), "b").is_some());
    // A second budget that would allow it: the pod is now selected by two, which the
    // Eviction API refuses whatever each allows.
    c.delete_obj::<PodDisruptionBudget>(Some("default"), "web").unwrap();
    for pdb in ["web", "web-too"] {
        c.create_obj(PodDisruptionBudget {
            metadata: ObjectMeta { name: Some(pdb.to_string()), ..Default::default() },
            spec: Some(PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(5)),
                selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap();
    }
    match c.evict_pod("default", "b") {
        Err(ApiError::TooManyRequests { reason, .. }) => {
            assert!(reason.contains("more than one PodDisruptionBudget (default/web and default/web-too)"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    c.delete_obj::<PodDisruptionBudget>(Some("default"), "web-too").unwrap();
    c.evict_pod("default", "b").unwrap();
}

#[test]
fn evictions_arriving_together_spend_a_budgets_last_disruption_once() {
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    const PODS: usize = 16;
    // The race is narrow: many rounds, so a check and a deletion apart would be caught.
    for _ in 0..200 {
        let c = SimCluster::new(ManualClock::new(), 1);
        let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
        for i in 0..PODS {
            create_ready_pod(&c, &format!("p{i}"), &labels);
        }
        c.create_obj(PodDisruptionBudget {
            metadata: ObjectMeta { name: Some("web".to_string()), ..Default::default() },
            spec: Some(PodDisruptionBudgetSpec {
                min_available: Some(IntOrString::Int(PODS as i32 - 1)),
                selector: Some(LabelSelector { match_labels: Some(labels), ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap();
        // Every pod's eviction at once, from its own thread (as an API server's handlers run).
        let start = std::sync::Barrier::new(PODS);
        let evicted = std::thread::scope(|s| {
            let handles: Vec<_> = (0..PODS)
                .map(|i| {
                    let (c, start) = (&c, &start);
                    s.spawn(move || {
                        start.wait();
                        c.evict_pod("default", &format!("p{i}")).is_ok()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join()).filter(|r| matches!(r, Ok(true))).count()
        });
        assert_eq!(evicted, 1, "the budget allows one disruption");
        let left = (0..PODS).filter(|i| c.get_obj::<Pod>(Some("default"), &format!("p{i}")).is_some()).count();
        assert_eq!(left, PODS - 1);
    }
}
