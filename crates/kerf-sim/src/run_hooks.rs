//! The seams of the driver's clock loop where a run can be disturbed: the start of a round,
//! the delivery of each watch event to the controllers, the controller pass and what follows it,
//! a restart of the controllers' process.
//!
//! A plain simulation runs with [`NoHooks`], whose every method is the default: events go
//! straight to the controllers, which reconcile against the in-memory API, and their first
//! error stops the run. A bench that injects faults implements [`RunHooks`] instead, so the
//! loop itself has a single path.

use kerf_api::cluster::WatchEvent;
use kerf_cloud::{Timestamp, block_on};
use kerf_controller::{ControllerError, Manager};

use crate::sim_cloud::SimCloud;
use kerf_apiserver::SimCluster;

/// What the driver calls at its seams; every method has the plain simulation's behaviour.
pub trait RunHooks<P: SimCloud> {
    /// At the start of a round, before its watch events are delivered. True forces a
    /// controller pass this round (the controllers learned something out of band).
    fn before_round(&mut self, _manager: &mut Manager<P>, _now: Timestamp) -> bool {
        false
    }

    /// Hands one watch event of the round to the controllers.
    fn deliver(&mut self, manager: &mut Manager<P>, event: &WatchEvent) {
        manager.observe(event);
    }

    /// One controller pass at `now`; returns when the controllers want to be woken.
    fn reconcile(&mut self, manager: &mut Manager<P>, cluster: &SimCluster, now: Timestamp) -> Option<Timestamp> {
        block_on(manager.reconcile(cluster, now))
    }

    /// After a controller pass: the error that stops the run, if any. The in-memory API fails
    /// only on a bug, so by default the simulation stops at the first failure rather than
    /// retrying as a controller in a cluster would.
    fn after_controllers(&mut self, manager: &mut Manager<P>, _now: Timestamp) -> Option<ControllerError> {
        manager.take_errors().into_iter().next().map(|(_, source)| source)
    }

    /// The controllers' process was replaced by a new one (its state dropped).
    fn controllers_restarted(&mut self) {}
}

/// The plain simulation: nothing is disturbed.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl<P: SimCloud> RunHooks<P> for NoHooks {}
