//! The `spotPrices` step: the spot market moves under a running fleet. Running spot instances
//! are billed at the new price, launches choose by it, and a bad step names its field.

use std::path::Path;

mod common;

use common::{NODE_CLASS, deployment, run};
use kerf_cloud::sim::SpotMarket;
use kerf_sim::scenario::parse;

/// Two spot types of the same shape, `a` slightly cheaper than `b` at model prices, in one zone.
const CLOUD: &str = r#"
cloud:
  region: us-west-2
  zones: [us-west-2a]
  launchLatency: 30s
  instanceTypes:
    - name: a
      capacity: {cpu: "4", memory: 8Gi, pods: "30"}
      price: 0.20
      offerings: [{zone: us-west-2a, capacityType: spot, price: 0.100}]
    - name: b
      capacity: {cpu: "4", memory: 8Gi, pods: "30"}
      price: 0.20
      offerings: [{zone: us-west-2a, capacityType: spot, price: 0.104}]
"#;

const POOL: &str = r#"
      - apiVersion: karpenter.sh/v1
        kind: NodePool
        metadata: {name: default}
        spec:
          template:
            spec:
              requirements:
                - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
              nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
          disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 1h}
"#;

/// A seed under which `b` is cheaper than `a` once the market moves by `change`.
fn seed_turning_b_cheaper(change: f64) -> u64 {
    (1..1000)
        .find(|&seed| {
            let m = SpotMarket { seed, change };
            m.price("b", "us-west-2a", 0.104) < m.price("a", "us-west-2a", 0.100)
        })
        .expect("some seed moves b below a")
}

#[test]
fn a_running_spot_node_is_billed_at_the_moved_price_and_the_next_launch_chooses_by_it() {
    let seed = seed_turning_b_cheaper(0.3);
    let market = SpotMarket { seed, change: 0.3 };
    let yaml = format!(
        r#"name: t
{CLOUD}
steps:
  - apply:
{NODE_CLASS}{POOL}{}
  - wait: 5m
  - spotPrices: {{seed: {seed}, change: 30%}}
  - wait: 5m
  - apply:
{}
  - wait: 5m
"#,
        deployment("first", 3, "1", ""),
        deployment("second", 3, "1", "")
    );
    let r = run(&yaml);
    assert_eq!(r.summary.pods_pending, 0);
    let node =
        |t: &str| r.nodes.iter().find(|n| n.instance_type.as_deref() == Some(t)).unwrap_or_else(|| panic!("{t}"));
    // Launched at model prices, a was the cheaper; after the move it costs the market price.
    let a = node("a");
    assert_eq!(a.price_per_hour, Some(market.price("a", "us-west-2a", 0.100)));
    // The launch after the move took b, now the cheaper.
    let b = node("b");
    assert_eq!(b.price_per_hour, Some(market.price("b", "us-west-2a", 0.104)));
    // The fleet's cost changed at the step, not at a launch.
    let at = |s: f64| r.timeline.iter().rev().find(|x| x.seconds <= s).map(|x| x.cost_per_hour).unwrap();
    assert!((at(299.0) - 0.100).abs() < 1e-9, "{}", at(299.0));
    assert!((at(301.0) - market.price("a", "us-west-2a", 0.100)).abs() < 1e-9, "{:?}", r.timeline);
}

#[test]
fn a_spot_prices_step_out_of_range_names_its_field() {
    for (body, needle) in [
        ("{seed: 1, change: 95%}", "steps[0].spotPrices.change: expected a percentage from 0% to 90%, found \"95%\""),
        ("{seed: 1, change: 0.2}", "steps[0].spotPrices.change: expected a percentage"),
        ("{seed: -1, change: 10%}", "steps[0].spotPrices.seed: expected a non-negative integer"),
        ("{change: 10%}", "steps[0].spotPrices"),
    ] {
        let yaml = format!("name: t\nsteps:\n  - spotPrices: {body}\n");
        let err = parse(Path::new("test.yaml"), &yaml).err().unwrap_or_else(|| panic!("{body} parsed"));
        assert!(err.to_string().contains(needle), "{body}: {err}");
    }
}
