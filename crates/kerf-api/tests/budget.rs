//! Disruption budgets: when they are active and how many nodes they allow.

use k8s_openapi::jiff::Timestamp;
use kerf_api::budget::{BudgetError, UNBOUNDED, budget_nodes};
use kerf_api::duration::GoDuration;
use kerf_api::nodepool::{Budget, DisruptionReason};
use kerf_api::{NodePool, manifest};

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn budget(nodes: &str, schedule: Option<&str>, duration: Option<&str>) -> Budget {
    Budget {
        nodes: nodes.to_string(),
        schedule: schedule.map(str::to_string),
        duration: duration.map(|d| GoDuration::parse(d).unwrap()),
        reasons: None,
    }
}

#[test]
fn nodes_are_an_integer_or_a_percentage_rounded_up() {
    assert_eq!(budget_nodes("10%", 15), Ok(2));
    assert_eq!(budget_nodes("10%", 10), Ok(1));
    assert_eq!(budget_nodes("10%", 1), Ok(1));
    assert_eq!(budget_nodes("10%", 0), Ok(0));
    assert_eq!(budget_nodes("100%", 7), Ok(7));
    assert_eq!(budget_nodes("0%", 7), Ok(0));
    assert_eq!(budget_nodes("3", 1), Ok(3));
    assert_eq!(budget_nodes("0", 100), Ok(0));
    assert_eq!(budget_nodes("ten", 1), Err(BudgetError::Nodes("ten".into())));
    assert_eq!(budget_nodes("150%", 1), Err(BudgetError::Nodes("150%".into())));
}

#[test]
fn an_unscheduled_budget_is_always_active() {
    let b = budget("20%", None, None);
    assert_eq!(b.is_active(at("2025-01-04T03:00:00Z")), Ok(true));
    assert_eq!(b.allowed_disruptions(at("2025-01-04T03:00:00Z"), 10), Ok(2));
}

#[test]
fn a_weekday_business_hours_budget_is_active_from_each_hit_for_its_duration() {
    // 2025-01-06 is a Monday.
    let b = budget("0", Some("0 9 * * mon-fri"), Some("8h"));
    assert_eq!(b.is_active(at("2025-01-06T08:59:59Z")), Ok(false));
    assert_eq!(b.is_active(at("2025-01-06T09:00:00Z")), Ok(true));
    assert_eq!(b.is_active(at("2025-01-06T16:59:59Z")), Ok(true));
    // Exactly the duration after the hit, the window has closed.
    assert_eq!(b.is_active(at("2025-01-06T17:00:00Z")), Ok(false));
    assert_eq!(b.is_active(at("2025-01-11T10:00:00Z")), Ok(false), "Saturday");
    assert_eq!(b.allowed_disruptions(at("2025-01-06T10:00:00Z"), 10), Ok(0));
    assert_eq!(b.allowed_disruptions(at("2025-01-06T18:00:00Z"), 10), Ok(UNBOUNDED));
}

#[test]
fn macros_and_windows_spanning_midnight() {
    let b = budget("1", Some("@daily"), Some("1h"));
    assert_eq!(b.is_active(at("2025-03-01T00:30:00Z")), Ok(true));
    assert_eq!(b.is_active(at("2025-03-01T01:00:00Z")), Ok(false));
    let b = budget("1", Some("30 23 * * *"), Some("1h"));
    assert_eq!(b.is_active(at("2025-03-02T00:15:00Z")), Ok(true));
    assert_eq!(b.is_active(at("2025-03-02T00:31:00Z")), Ok(false));
    let b = budget("1", Some("@yearly"), Some("24h"));
    assert_eq!(b.is_active(at("2026-01-01T12:00:00Z")), Ok(true));
    assert_eq!(b.is_active(at("2026-01-02T12:00:00Z")), Ok(false));
}

#[test]
fn a_pool_allows_the_smallest_allowance_of_the_budgets_for_the_reason() {
    let y = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: p}
spec:
  template:
    spec:
      requirements: []
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}
  disruption:
    budgets:
      - nodes: '20%'
      - nodes: '0'
        reasons: [Underutilized]
      - nodes: '1'
        reasons: [Empty]
        schedule: '0 9 * * mon-fri'
        duration: 8h
";
    let np: NodePool = manifest::decode(&serde_yaml_ng::from_str(y).unwrap()).unwrap();
    let monday_10 = at("2025-01-06T10:00:00Z");
    let saturday = at("2025-01-11T10:00:00Z");
    assert_eq!(np.allowed_disruptions(monday_10, 10, DisruptionReason::Drifted), 2);
    assert_eq!(np.allowed_disruptions(monday_10, 10, DisruptionReason::Underutilized), 0);
    assert_eq!(np.allowed_disruptions(monday_10, 10, DisruptionReason::Empty), 1);
    assert_eq!(np.allowed_disruptions(saturday, 10, DisruptionReason::Empty), 2);
    // The default budget: 10% of the pool, rounded up.
    let mut default_pool = np.clone();
    default_pool.spec.disruption.budgets = kerf_api::nodepool::default_budgets();
    assert_eq!(default_pool.allowed_disruptions(saturday, 25, DisruptionReason::Underutilized), 3);
}

#[test]
fn a_budget_that_cannot_be_evaluated_allows_nothing() {
    let y = "
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: p}
spec:
  template:
    spec:
      requirements: []
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: d}
";
    let mut np: NodePool = manifest::decode(&serde_yaml_ng::from_str(y).unwrap()).unwrap();
    np.spec.disruption.budgets.push(budget("1", Some("not a cron"), Some("1h")));
    assert_eq!(np.allowed_disruptions(at("2025-01-06T10:00:00Z"), 10, DisruptionReason::Drifted), 0);
    assert_eq!(budget("1", Some("@daily"), None).is_active(at("2025-01-06T10:00:00Z")), Err(BudgetError::Incomplete));
}
