//! Expiration: a claim older than its `expireAfter` is replaced (pre-spun) and removed, whatever
//! budgets and do-not-disrupt say. Unlike the evaluated methods it looks at every claim, on
//! every pass, before any evaluation, and waits for nothing.

use kerf_api::cluster::ClusterApi;
use kerf_cloud::CloudProvider;

use crate::ctx::Ctx;
use crate::disruption::{Disruption, Reason};
use crate::error::ControllerError;
use crate::util;

impl Disruption {
    /// Expiration: a claim older than its `expireAfter` is replaced (pre-spun) and removed,
    /// whatever budgets and do-not-disrupt say.
    pub(in crate::disruption) async fn expire<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let mut expired = Vec::new();
        for claim in cx.state.node_claims().values() {
            if claim.metadata.deletion_timestamp.is_some() || self.in_command(claim.name()) {
                continue;
            }
            let (Some(after), Some(created)) =
                (claim.spec.expire_after.duration(), claim.metadata.creation_timestamp.as_ref().map(|t| t.0))
            else {
                continue;
            };
            let at = util::after(created, after);
            if cx.pass.now >= at {
                expired.push((claim.clone(), claim.spec.expire_after));
            } else {
                cx.pass.wake_at(at);
            }
        }
        if expired.is_empty() {
            return Ok(());
        }
        // A validating consolidation may involve these nodes: it is decided again later.
        self.validating = None;
        let types = cx.instance_types_by_pool().await;
        for (claim, after) in expired {
            let detail = format!("expireAfter {after} has passed since it was created");
            let cmd = self.forced_command(cx, &claim, &types, Reason::Expired, detail);
            self.execute(cx, cmd).await?;
        }
        Ok(())
    }
}
