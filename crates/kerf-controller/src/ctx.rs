//! What every reconciler is handed when it runs ([`Ctx`]).
//!
//! A reconciler owns its state and reaches everything else through its `Ctx`: the cluster API,
//! the cloud, the informer cache ([`ClusterState`], written only with what the API server
//! answered a write with, as the watch would deliver it), the options, [`Published`] (the
//! facts and signals one reconciler makes known to the others, see `published`), and the
//! bookkeeping of its run ([`Pass`]). Nothing a reconciler keeps is read or written by another.

use kerf_api::{NodeClaim, NodePool};
use kerf_cloud::CloudProvider;
use kerf_scheduling::{NewNodeClaim, PodFactsCache};

use crate::input::{TypesByPool, View};
use crate::options::Options;
use crate::pass::Pass;
use crate::published::Published;
use crate::state::ClusterState;
use crate::util::SplitMix64;

/// What a reconciler is handed for one run.
pub(crate) struct Ctx<'a, P, C> {
    pub api: &'a C,
    pub cloud: &'a P,
    pub options: &'a Options,
    /// The informer cache. Reconcilers read it, and record in it only the objects the API
    /// server answered their own writes with (read-your-writes, as the watch will deliver them).
    pub state: &'a mut ClusterState,
    pub published: &'a mut Published,
    /// NodeClaim names are drawn from one seeded generator, reconciler after reconciler.
    pub names: &'a mut SplitMix64,
    /// Parsed pod facts kept across the scheduling inputs built pass after pass.
    pub pod_facts: &'a PodFactsCache,
    /// A watch failed and has not listed again: the state may miss changes.
    pub watches_interrupted: bool,
    pub pass: Pass,
}

impl<P: CloudProvider, C> Ctx<'_, P, C> {
    /// The cluster as the scheduling core is shown it.
    pub fn view(&self) -> View<'_> {
        View { state: self.state, published: self.published, preference_policy: self.options.preference_policy }
    }

    /// Instance types of every live NodePool (see [`crate::input::instance_types_by_pool`]).
    pub async fn instance_types_by_pool(&mut self) -> TypesByPool {
        crate::input::instance_types_by_pool(self.cloud, self.state, self.published).await
    }

    /// A NodeClaim of `pool` for `new`, with a fresh name.
    pub fn new_claim(&mut self, pool: &NodePool, new: &NewNodeClaim) -> NodeClaim {
        crate::claims::new_claim(self.state, self.names, pool, new)
    }
}
