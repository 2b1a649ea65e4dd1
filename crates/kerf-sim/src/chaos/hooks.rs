//! The chaos bench's plug-in at the driver's seams ([`crate::run_hooks::RunHooks`]): watch
//! outages (events held back, then a relist), controller passes through the faulty API with
//! their writes judged as they are made, and the state a restart of the controllers drops.
//!
//! Everything the bench changes about a round lives here, so the driver's loop is the same
//! for plain simulations and chaos runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use kerf_api::cluster::WatchEvent;
use kerf_cloud::{Timestamp, block_on};
use kerf_controller::{ControllerError, Manager};

use super::faults::{self, Faults, FaultyApi};
use super::invariants::Monitor;
use crate::run_hooks::RunHooks;
use crate::sim_cloud::SimCloud;
use kerf_apiserver::SimCluster;

/// What the driver's run loop consults while a chaos run is on.
pub(crate) struct Hooks {
    faults: Arc<Faults>,
    monitor: Arc<Monitor>,
    /// Watch events the controllers did not get while their watches were down.
    withheld: Vec<WatchEvent>,
    /// The watches went down and have not listed again yet.
    outage_seen: bool,
    /// The watches are down this round.
    watch_down: bool,
}

fn event_key(ev: &WatchEvent) -> (&'static str, Option<String>, Option<String>) {
    let (WatchEvent::Applied(o) | WatchEvent::Deleted(o)) = ev;
    (o.kind(), o.meta().namespace().map(str::to_string), o.meta().name().map(str::to_string))
}

impl Hooks {
    pub fn new(faults: Arc<Faults>, monitor: Arc<Monitor>) -> Self {
        Hooks { faults, monitor, withheld: Vec::new(), outage_seen: false, watch_down: false }
    }

    /// What a relist after the outage tells the controllers: each object changed during it in
    /// its latest state (or gone), in the order of their last change.
    fn relist(&mut self) -> Vec<WatchEvent> {
        let withheld = std::mem::take(&mut self.withheld);
        let mut last = BTreeMap::new();
        for (i, ev) in withheld.iter().enumerate() {
            last.insert(event_key(ev), i);
        }
        withheld
            .into_iter()
            .enumerate()
            .filter(|(i, ev)| last.get(&event_key(ev)) == Some(i))
            .map(|(_, ev)| ev)
            .collect()
    }
}

impl<P: SimCloud> RunHooks<P> for Hooks {
    /// A watch outage: the controllers get nothing until it ends, then a relist. Their watches
    /// fail, so they know their view may be stale until then.
    fn before_round(&mut self, manager: &mut Manager<P>, now: Timestamp) -> bool {
        self.watch_down = self.faults.watch_down(now);
        if self.watch_down {
            self.outage_seen = true;
            manager.watches_interrupted();
        } else if std::mem::take(&mut self.outage_seen) {
            for ev in self.relist() {
                manager.observe(&ev);
            }
            manager.watches_resynced();
            return true;
        }
        false
    }

    fn deliver(&mut self, manager: &mut Manager<P>, event: &WatchEvent) {
        if self.watch_down {
            self.withheld.push(event.clone());
        } else {
            manager.observe(event);
        }
    }

    /// One controller pass through the faulty API, its writes judged as they are made.
    fn reconcile(&mut self, manager: &mut Manager<P>, cluster: &SimCluster, now: Timestamp) -> Option<Timestamp> {
        let monitor = &self.monitor;
        let watcher = |w: &faults::Write| monitor.on_write(w, cluster, now);
        let api = FaultyApi::new(cluster, &self.faults, &watcher);
        block_on(manager.reconcile(&api, now))
    }

    /// Failures are the faults' doing; the reconcilers retry with backoff. The controllers'
    /// disruption decisions are judged.
    fn after_controllers(&mut self, manager: &mut Manager<P>, now: Timestamp) -> Option<ControllerError> {
        manager.take_errors();
        self.monitor.after_reconcile(manager.disruptions(), now);
        None
    }

    /// The new process lists everything afresh: what was held back is no longer owed to it.
    fn controllers_restarted(&mut self) {
        self.withheld.clear();
    }
}
