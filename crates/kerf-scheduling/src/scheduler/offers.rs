//! What a NodePool's instance types offer new pods, as the Scheduler sees them: for each type
//! the pool's requirements admit, the room left for pods once its DaemonSets run and the price
//! of its cheapest allowed offering. Read by `kerf bench packing` to build its lower bound from
//! the very tables the Scheduler packs against.

use std::sync::Arc;

use kerf_api::ResourceList;
use kerf_api::resources::PODS;

use super::SchedulingContext;
use crate::instance::InstanceType;

/// One instance type of a NodePool as a new NodeClaim would see it.
#[derive(Debug, Clone)]
pub struct PoolTypeView {
    pub instance_type: Arc<InstanceType>,
    /// Allocatable less the DaemonSet pods that would run on it (the pod count included).
    pub free: ResourceList,
    /// The cheapest available offering the pool's requirements allow, $/h.
    pub price: f64,
}

impl SchedulingContext {
    /// The instance types NodePool `pool` may launch, cheapest first, each with what is free
    /// for pods and its price; `None` when the context has no such pool. Types too small for
    /// their DaemonSets are left out.
    pub fn pool_types(&mut self, pool: &str) -> Option<Vec<PoolTypeView>> {
        let p = self.pools.position(|x| x.name == pool)?;
        let req = self.intern_req(self.pools[p].reqs.clone());
        let compat = self.compat(p, req);
        let order = self.price_order(p, req);
        let pods = self.res.index[PODS];
        let pool = &self.pools[p];
        Some(
            order
                .iter()
                .filter(|(_, i)| compat.contains(*i) && pool.free.get(*i, pods) >= 0)
                .map(|(price, i)| PoolTypeView {
                    instance_type: Arc::clone(&pool.types[*i]),
                    free: self.res.list(pool.free.row(*i)),
                    price: *price,
                })
                .collect(),
        )
    }
}
