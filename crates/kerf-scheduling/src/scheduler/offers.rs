//! What a NodePool's instance types offer new pods, as the Scheduler sees them: for each type
//! the pool's requirements admit, the room left for pods once its DaemonSets run and the price
//! of its cheapest allowed offering. Read by `kerf bench packing` to build its lower bound from
//! the very tables the Scheduler packs against.

use std::sync::Arc;

use kerf_api::ResourceList;
use kerf_api::resources::PODS;

use super::interning::Interned;
use super::pools::Pools;
use super::resources::Resources;
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

impl Pools {
    /// The instance types NodePool `pool` may launch, cheapest first, each with what is free
    /// for pods (`res` names the resources) and its price; `None` when there is no such pool.
    /// Types too small for their DaemonSets are left out.
    pub(super) fn type_views(
        &mut self,
        pool: &str,
        interned: &mut Interned,
        res: &Resources,
    ) -> Option<Vec<PoolTypeView>> {
        let p = self.all.position(|x| x.name == pool)?;
        let req = interned.intern_req(self[p].rules.reqs.clone());
        let compat = self.compat(p, req, interned);
        let order = self.price_order(p, req, interned);
        let pods = res.index[PODS];
        let pool = &self[p];
        Some(
            order
                .iter()
                .filter(|(_, i)| compat.contains(*i) && pool.table.free.get(*i, pods) >= 0)
                .map(|(price, i)| PoolTypeView {
                    instance_type: Arc::clone(&pool.table.types[*i]),
                    free: res.list(pool.table.free.row(*i)),
                    price: *price,
                })
                .collect(),
        )
    }
}
