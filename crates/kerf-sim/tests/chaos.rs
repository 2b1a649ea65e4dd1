//! `kerf bench chaos` in CI: a few seeded runs with crashes in each and faults at the default
//! rate keep every promise; and the checks do catch a broken one.

use kerf_cloud::{Clock, ManualClock, Timestamp};
use std::cell::Cell;
use std::collections::BTreeMap;

use kerf_sim::chaos::invariants::{CLEAN_PERIODS, CleanupPeriods, CloudInstance};
use kerf_sim::chaos::{self, Kind, Monitor, Summary};

#[test]
fn seeded_runs_with_crashes_and_faults_at_the_default_rate_break_no_promise() {
    let mut summary = Summary::default();
    for seed in 1..=12 {
        summary.add(&chaos::run(seed, 0.2));
    }
    assert_eq!(summary.iterations, 12);
    assert!(summary.crashes >= 12, "a crash in every run: {}", summary.crashes);
    assert!(summary.faults_injected > 1000, "faults injected: {}", summary.faults_injected);
    assert_eq!(summary.total_violations(), 0, "{:?}", summary.failures);
}

/// Seeds that reach hard cases, each replayed: in 3197 an Underutilized decision is taken while
/// the watches are down (a node of the pool already disrupting unseen) and must still keep to
/// its budget; in 1839 a pass fails after writing a taint and before recording its decision,
/// and the taint must not be judged against an older decision of the same node (another
/// reason, another budget).
#[test]
fn seeds_that_once_broke_a_promise_keep_every_one() {
    for seed in [1839, 3197] {
        let o = chaos::run(seed, 0.2);
        assert!(o.crashes >= 1 && o.error.is_none(), "seed {seed}: {:?}", o.error);
        assert!(o.violations.is_empty(), "seed {seed}: {:?}", o.violations);
    }
}

#[test]
fn a_run_replays_exactly_from_its_seed() {
    let a = chaos::run(7, 0.2);
    let b = chaos::run(7, 0.2);
    assert_eq!((a.crashes, &a.faults, &a.violations), (b.crashes, &b.faults, &b.violations));
}

#[test]
fn once_faults_stop_an_instance_without_a_nodeclaim_past_the_window_is_a_leak() {
    let clock = ManualClock::new();
    let cluster = kerf_apiserver::SimCluster::new(clock.clone(), 1);
    let monitor = Monitor::new(0);
    let t0 = clock.now();
    let instance = CloudInstance {
        provider_id: "aws:///us-west-2a/i-1".to_string(),
        instance_type: "c.large".to_string(),
        node_claim: "pool-0-abcde".to_string(),
        launched_at: t0,
        terminated: false,
    };
    let periods = Periods::default();
    monitor.faults_stopped(t0);
    monitor.check_state(&cluster, std::slice::from_ref(&instance), &periods, t0);
    assert!(monitor.violations().is_empty(), "garbage collection gets its window");
    let later =
        Timestamp::from_millisecond(t0.as_millisecond() + chaos::invariants::LEAK_WINDOW.as_millis() as i64).unwrap();
    monitor.check_state(&cluster, std::slice::from_ref(&instance), &periods, later);
    let v = monitor.violations();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].kind, Kind::LeakedInstance);
}

/// Garbage collection periods as a test sets them: a counter of lists, and per key the list
/// count at its last failed cleanup call.
#[derive(Default)]
struct Periods {
    lists: Cell<u64>,
    failed_at: BTreeMap<String, u64>,
}

impl CleanupPeriods for Periods {
    fn lists(&self) -> u64 {
        self.lists.get()
    }

    fn clean_periods_since(&self, key: &str, lists: u64) -> u64 {
        self.lists.get().saturating_sub(self.failed_at.get(key).copied().unwrap_or(0).max(lists))
    }
}

#[test]
fn a_leak_is_judged_by_the_periods_that_could_have_removed_it_not_by_time() {
    let clock = ManualClock::new();
    let cluster = kerf_apiserver::SimCluster::new(clock.clone(), 1);
    let t0 = clock.now();
    let at = |minutes: i64| Timestamp::from_millisecond(t0.as_millisecond() + minutes * 60_000).unwrap();
    let instance = CloudInstance {
        provider_id: "aws:///us-west-2a/i-1".to_string(),
        instance_type: "c.large".to_string(),
        node_claim: "pool-0-abcde".to_string(),
        launched_at: t0,
        terminated: false,
    };
    let one = std::slice::from_ref(&instance);

    // Every terminate of it failed: 25 minutes and many lists later it is no violation yet
    // (while calls fail, its duration is measured, not judged).
    let mut periods = Periods::default();
    let monitor = Monitor::new(0);
    monitor.check_state(&cluster, one, &periods, t0);
    periods.lists.set(8);
    periods.failed_at.insert(instance.provider_id.clone(), 8);
    monitor.check_state(&cluster, one, &periods, at(25));
    assert!(monitor.violations().is_empty(), "{:?}", monitor.violations());
    assert_eq!(monitor.max_leak_and_orphan().0.as_secs(), 1500, "its duration is measured");

    // Calls succeed again: it must be gone within CLEAN_PERIODS periods.
    periods.lists.set(8 + CLEAN_PERIODS);
    monitor.check_state(&cluster, one, &periods, at(29));
    assert!(monitor.violations().is_empty());
    periods.lists.set(9 + CLEAN_PERIODS);
    monitor.check_state(&cluster, one, &periods, at(31));
    let v = monitor.violations();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].kind, Kind::LeakedInstance);
    assert!(v[0].detail.contains("3 garbage collection period(s)"), "{}", v[0].detail);
}

#[test]
fn faults_at_half_the_calls_break_no_promise_on_a_few_seeds() {
    let mut summary = Summary::default();
    for seed in [77, 94, 189, 222, 284, 323] {
        summary.add(&chaos::run(seed, 0.5));
    }
    assert_eq!(summary.total_violations(), 0, "{:?}", summary.failures);
    assert!(summary.max_leak.0 > std::time::Duration::ZERO, "leaks happen at this rate and are measured");
}
