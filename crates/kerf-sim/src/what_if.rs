//! A what-if on a cluster snapshot: the snapshot loaded as it is (nodes, workloads, pods bound
//! where they run) with kerf's controllers off, the report of that state taken as "before",
//! then the operator's manifests applied (a changed NodePool), the controllers run for the
//! given virtual time, and the report taken as "after", with the comparison of the two.

use std::time::Duration;

use kerf_cloud::ManualClock;

use crate::comparison::Comparison;
use crate::driver::{SimError, Simulation};
use crate::report::Report;
use crate::scenario::{Manifest, Scenario, Step};

/// Runs the what-if; the report (with `comparison`) and the finished simulation.
pub fn run(
    scenario: &Scenario,
    apply: Vec<Manifest>,
    duration: Duration,
    clock: ManualClock,
) -> Result<(Report, Simulation<kerf_cloud::sim::SimProvider>), SimError> {
    let mut sim = crate::steps::simulation_for(scenario, clock)?;
    // The cluster as it is: the stand-ins start what is bound and adopt the workloads' pods;
    // kerf's controllers do nothing yet.
    sim.set_controllers(false);
    sim.run(scenario)?;
    let before = sim.report();
    sim.set_controllers(true);
    let steps = scenario.steps.len();
    if !apply.is_empty() {
        // At the same instant: applying does not advance time.
        sim.step(steps, &Step::Apply(apply))?;
    }
    sim.step(steps + 1, &Step::Wait(duration))?;
    let mut after = sim.report();
    after.comparison = Some(Comparison::new(&before, &after));
    Ok((after, sim))
}
