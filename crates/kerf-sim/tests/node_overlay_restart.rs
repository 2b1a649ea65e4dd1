//! NodeOverlays across a controller restart: a new process lists the overlays again and prices
//! the instance types with them, so a discount that made kerf pick a family still holds and
//! nothing is consolidated back to the list-price choice.

use std::path::{Path, PathBuf};

use kerf_api::NodeOverlay;
use kerf_cloud::ManualClock;
use kerf_cloud::sim::SimProvider;
use kerf_sim::Report;
use kerf_sim::chaos::{Faults, FaultyCloud};
use kerf_sim::driver::Simulation;
use kerf_sim::scenario::{Scenario, parse};

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

type Sim = Simulation<FaultyCloud<SimProvider>>;

/// Runs `scenario`'s steps, restarting the controllers before step `restart_at` if given (on a
/// cloud that outlives the controllers' process; no fault is injected at rate 0).
fn run(scenario: &Scenario, restart_at: Option<usize>) -> (Report, Sim) {
    let clock = ManualClock::new();
    let provider = SimProvider::new(scenario.cloud.clone(), std::sync::Arc::new(clock.clone()))
        .unwrap_or_else(|e| panic!("{}", e.problem));
    let region = provider.region().to_string();
    let faults = std::sync::Arc::new(Faults::new(1, 0.0));
    let cloud = FaultyCloud::new(std::sync::Arc::new(provider), faults);
    let mut sim = Simulation::for_scenario(scenario, cloud, clock, &region);
    sim.settle(sim.now()).unwrap_or_else(|e| panic!("{e}"));
    for (i, step) in scenario.steps.iter().enumerate() {
        if restart_at == Some(i) {
            sim.restart_controllers(7);
        }
        sim.step(i, step).unwrap_or_else(|e| panic!("{e}"));
    }
    (sim.report(), sim)
}

/// A node's instance type, $/h, list $/h and overlays.
type Priced = (Option<String>, Option<f64>, Option<f64>, Vec<String>);

/// Each node as [`Priced`], by name.
fn fleet(r: &Report) -> Vec<Priced> {
    r.nodes
        .iter()
        .map(|n| (n.instance_type.clone(), n.price_per_hour, n.list_price_per_hour, n.node_overlays.clone()))
        .collect()
}

#[test]
fn an_overlays_price_still_holds_after_a_controller_restart() {
    // The savings plan makes m5 the cheaper family; after the consolidation to m5, a new
    // process takes over and runs for ten more minutes.
    let yaml = r#"
name: overlay-restart
cloud: {region: us-west-2, launchLatency: 30s}
steps:
  - apply: manifests/overlays/nodepool.yaml
  - apply: manifests/overlays/api.yaml
  - wait: 3m
  - apply: manifests/overlays/m5-savings-plan.yaml
  - wait: 10m
  - wait: 10m
"#;
    let s = parse(&example_dir().join("overlay-restart.yaml"), yaml).unwrap_or_else(|e| panic!("{e}"));
    let (kept, _) = run(&s, None);
    let (restarted, sim) = run(&s, Some(5));
    let nodes = fleet(&restarted);
    assert!(!nodes.is_empty());
    for (t, price, list, overlays) in &nodes {
        assert!(t.as_deref().is_some_and(|t| t.starts_with("m5.")), "the discounted family is kept: {nodes:?}");
        assert!(list.is_some_and(|l| price.is_some_and(|p| p < l)), "priced by the overlay: {nodes:?}");
        assert_eq!(overlays, &["m5-savings-plan"], "{nodes:?}");
    }
    assert_eq!(nodes, fleet(&kept), "the same fleet as without the restart");
    assert_eq!(restarted.summary.cost_per_hour, kept.summary.cost_per_hour);
    let overlay = sim.cluster().get_obj::<NodeOverlay>(None, "m5-savings-plan").expect("the overlay");
    let ready =
        overlay.status.iter().flat_map(|s| &s.conditions).find(|c| c.type_ == "Ready").map(|c| c.status.clone());
    assert_eq!(ready.as_deref(), Some("True"));
}
