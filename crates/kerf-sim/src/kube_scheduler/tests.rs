//! The stand-in's queue: every pod it takes from the queue ends bound, parked with a verdict
//! written, or queued again, whatever the store answers.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Node, NodeStatus, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::SlimPod;
use kerf_api::clock::{Clock, ManualClock};
use kerf_apiserver::SimCluster;

use super::KubeScheduler;
use crate::world::{Changes, World};

fn pod(name: &str) -> Pod {
    let requests = BTreeMap::from([("cpu".to_string(), Quantity("1".to_string()))]);
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some("default".to_string()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".to_string(),
                resources: Some(ResourceRequirements { requests: Some(requests), ..ResourceRequirements::default() }),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}

fn node(name: &str) -> Node {
    let allocatable = BTreeMap::from([
        ("cpu".to_string(), Quantity("4".to_string())),
        ("memory".to_string(), Quantity("8Gi".to_string())),
        ("pods".to_string(), Quantity("10".to_string())),
    ]);
    Node {
        metadata: ObjectMeta { name: Some(name.to_string()), ..ObjectMeta::default() },
        status: Some(NodeStatus { allocatable: Some(allocatable), ..NodeStatus::default() }),
        ..Node::default()
    }
}

/// The cluster, the world the stand-in reads, and the stand-in.
struct Fixture {
    clock: ManualClock,
    cluster: SimCluster,
    world: World,
    scheduler: KubeScheduler,
}

impl Fixture {
    fn new() -> Self {
        let clock = ManualClock::new();
        let cluster = SimCluster::new(clock.clone(), 1);
        Fixture { clock, cluster, world: World::default(), scheduler: KubeScheduler::default() }
    }

    /// Delivers the pending watch events to the world, and the pods they show unbound to the
    /// queue, as the driver does.
    fn deliver(&mut self) {
        let mut changes = Changes::default();
        for ev in self.cluster.drain_watch() {
            self.world.apply(ev.into_kept(), &mut changes);
        }
        self.scheduler.cluster_changed();
        for key in &changes.unbound_pods {
            if let Some(e) = self.world.pods.get(key) {
                self.scheduler.enqueue(key, &e.pod, e.seq);
            }
        }
    }

    /// Delivers the pending watch events to the world only: the stand-in hears of no pod.
    fn deliver_to_world_only(&mut self) {
        let mut changes = Changes::default();
        for ev in self.cluster.drain_watch() {
            self.world.apply(ev.into_kept(), &mut changes);
        }
        self.scheduler.invalidate();
    }

    fn run(&mut self) -> usize {
        self.scheduler.run(&self.world, &self.cluster, self.clock.now())
    }

    fn stored(&self, name: &str) -> SlimPod {
        self.cluster.get_obj::<SlimPod>(Some("default"), name).expect("the pod exists")
    }

    /// Writes a new version of the pod (a label), as another client would.
    fn touch_pod(&self, name: &str) {
        let mut p: Pod = self.cluster.get_obj(Some("default"), name).expect("the pod exists");
        p.metadata.labels.get_or_insert_with(BTreeMap::new).insert("touched".to_string(), "yes".to_string());
        self.cluster.update_obj(p).expect("the label is written");
    }
}

fn node_of(p: &SlimPod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn unschedulable(p: &SlimPod) -> bool {
    use kerf_api::slim_pod::{ConditionStatus, KeptCondition};
    p.condition(KeptCondition::PodScheduled)
        .is_some_and(|c| c.status == ConditionStatus::False && c.reason() == Some("Unschedulable"))
}

#[test]
fn a_pod_whose_unschedulable_verdict_hit_a_write_conflict_is_judged_again() {
    let mut f = Fixture::new();
    f.cluster.create_obj(pod("a")).expect("created");
    f.deliver();
    // Another client writes the pod after the world read it: the verdict's write conflicts.
    f.touch_pod("a");
    assert_eq!(f.run(), 0);
    assert!(!unschedulable(&f.stored("a")), "the verdict was written from a stale read");
    assert!(f.scheduler.has_work(), "a pod whose verdict was not written must stay queued");
    f.deliver();
    f.run();
    assert!(unschedulable(&f.stored("a")), "{:?}", f.stored("a").status);
}

#[test]
fn a_pod_whose_binding_failed_is_tried_again_after_a_backoff_with_no_event_for_it() {
    let mut f = Fixture::new();
    f.cluster.create_obj(node("n1")).expect("created");
    f.cluster.create_obj(pod("a")).expect("created");
    f.deliver();
    // The binding is refused (the pod changed since the world read it) and the stand-in does
    // not hear of the new version: only its own retry can place the pod.
    f.touch_pod("a");
    assert_eq!(f.run(), 0);
    assert_eq!(node_of(&f.stored("a")), None);
    f.deliver_to_world_only();
    let retry = f.scheduler.next_retry().expect("a pod whose binding failed is retried");
    assert_eq!(retry, crate::driver::after(f.clock.now(), Duration::from_secs(1)));
    assert!(!f.scheduler.has_work(), "the retry waits out its backoff");
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(f.run(), 1);
    assert_eq!(node_of(&f.stored("a")), Some("n1"));
    assert_eq!(f.scheduler.next_retry(), None);
}

#[test]
fn bind_backoff_doubles_from_one_second_to_at_most_ten() {
    let secs: Vec<u64> = (1..=6).map(|n| super::bind_backoff(n).as_secs()).collect();
    assert_eq!(secs, [1, 2, 4, 8, 10, 10]);
}
