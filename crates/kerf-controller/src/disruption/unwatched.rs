//! What can change a disruption decision without a watch event announcing it: the cloud's
//! offerings (prices, availability) and the windows of scheduled disruption budgets. Pods,
//! nodes, claims and NodePools bump the watch generation; these two are checked on a timer
//! ([`super::IDLE_REEVALUATE`], every minute while a budget has a schedule) by comparing a
//! fingerprint with the one the last evaluation saw, so a settled cluster is not evaluated
//! again unless one of them changed.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use kerf_cloud::{CloudProvider, Timestamp};

use super::Disruption;
use crate::ctx::Ctx;
use crate::input::TypesByPool;

/// How often the fingerprint is compared while some budget has a schedule (windows open and
/// close on the minute).
pub(crate) const BUDGET_WINDOW_CHECK: Duration = Duration::from_secs(60);

impl Disruption {
    /// A fingerprint of the offerings of every pool's instance types and of which scheduled
    /// budgets are active now.
    pub(crate) fn unwatched_inputs<P: CloudProvider, C>(
        &self,
        cx: &Ctx<'_, P, C>,
        types: &TypesByPool,
        now: Timestamp,
    ) -> u64 {
        let mut h = DefaultHasher::new();
        for (pool, its) in types {
            pool.hash(&mut h);
            for t in its {
                t.name.hash(&mut h);
                for o in &t.offerings {
                    (&o.zone, &o.capacity_type, o.price.to_bits(), o.available).hash(&mut h);
                }
            }
        }
        let wall = cx.options.wall_clock(now);
        for (name, pool) in cx.state.node_pools() {
            name.hash(&mut h);
            for b in &pool.spec.disruption.budgets {
                b.is_active(wall).ok().hash(&mut h);
            }
        }
        h.finish()
    }

    /// When the fingerprint is compared next.
    pub(crate) fn next_unwatched_check<P: CloudProvider, C>(&self, cx: &Ctx<'_, P, C>, now: Timestamp) -> Timestamp {
        let scheduled =
            cx.state.node_pools().values().any(|p| p.spec.disruption.budgets.iter().any(|b| b.schedule.is_some()));
        crate::util::after(now, if scheduled { BUDGET_WINDOW_CHECK } else { super::IDLE_REEVALUATE })
    }
}
