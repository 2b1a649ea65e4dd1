//! Capacity blocks ending on EC2: EC2 reclaims a capacity block's instances 30 minutes before
//! the block ends, so Karpenter drains them from 40 minutes before the end. The provider hands
//! out a `CapacityBlockEnding` notice for each instance of this cluster that DescribeInstances
//! places in a selected capacity block that is that close to its end, once per instance; the
//! controller drains and replaces it as it does any interrupted node (docs/design.md, "Capacity
//! reservations").

use std::collections::BTreeMap;

use kerf_cloud::clock::add;
use kerf_cloud::{CloudError, InterruptionKind, InterruptionNotice, Timestamp};

use super::AwsProvider;
use crate::instances;
use crate::reservations::{
    CAPACITY_BLOCK_EXPIRING_BEFORE_END, CAPACITY_BLOCK_RECLAIMED_BEFORE_END, TYPE_CAPACITY_BLOCK,
};

impl AwsProvider {
    /// The capacity blocks the resolved node classes selected that end within
    /// [`CAPACITY_BLOCK_EXPIRING_BEFORE_END`] of `now`, with their ends.
    fn ending_blocks(&self, now: Timestamp) -> BTreeMap<String, Timestamp> {
        let state = self.lock();
        state
            .node_classes
            .values()
            .flat_map(|r| r.status().capacity_reservations.iter())
            .filter(|r| r.reservation_type.as_deref() == Some(TYPE_CAPACITY_BLOCK))
            .filter_map(|r| Some((r.id.clone(), r.end_time.as_ref()?.0)))
            .filter(|(_, end)| add(now, CAPACITY_BLOCK_EXPIRING_BEFORE_END) >= *end)
            .collect()
    }

    /// A notice for each live instance of this cluster in a capacity block due to be drained,
    /// the first time it is found so (no call to EC2 while no selected block is that close to
    /// its end). The notice says when EC2 reclaims the instance.
    pub(super) async fn block_ending_notices(&self) -> Result<Vec<InterruptionNotice>, CloudError> {
        let due = self.ending_blocks(self.clock.now());
        if due.is_empty() {
            return Ok(Vec::new());
        }
        let live = instances::list_owned(&self.clients, &self.settings.cluster_name).await?;
        let mut state = self.lock();
        state.block_warned.retain(|pid| live.iter().any(|i| i.provider_id() == *pid));
        let mut out = Vec::new();
        for i in &live {
            let Some(end) = i.capacity_reservation_id.as_ref().and_then(|id| due.get(id)) else { continue };
            if !state.block_warned.insert(i.provider_id()) {
                continue;
            }
            let reclaim_at = Timestamp::from_millisecond(
                end.as_millisecond()
                    - i64::try_from(CAPACITY_BLOCK_RECLAIMED_BEFORE_END.as_millis()).unwrap_or(i64::MAX),
            )
            .unwrap_or(*end);
            out.push(InterruptionNotice {
                provider_id: i.provider_id(),
                kind: InterruptionKind::CapacityBlockEnding,
                terminates_at: Some(reclaim_at),
            });
        }
        Ok(out)
    }
}
