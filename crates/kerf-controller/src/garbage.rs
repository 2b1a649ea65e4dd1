//! Garbage collection: instances the cloud runs for this cluster that no NodeClaim accounts for
//! are terminated, and launched NodeClaims whose instance is gone are deleted.
//!
//! Which instances belong to this cluster is the provider's business: `CloudProvider::list`
//! returns only instances tagged as this cluster's, so an instance of anything else is never
//! touched.

use std::collections::BTreeSet;
use std::time::Duration;

use kerf_api::NodeClaim;
use kerf_cloud::{CloudError, CloudProvider, Timestamp};

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::util;
use kerf_api::cluster::ClusterApi;

/// How often the cloud's instances are compared with the claims (Karpenter: 2 minutes).
pub(crate) const GC_INTERVAL: Duration = Duration::from_secs(120);
/// After a pass a cloud or API call failed in, the next comes this much sooner, doubling with
/// each failed pass in a row up to [`GC_INTERVAL`]: a leak lasts as long as the calls fail, not
/// a whole interval more each time.
pub(crate) const GC_RETRY: Duration = Duration::from_secs(15);

/// The garbage collector's memory.
#[derive(Debug, Default)]
pub(crate) struct GarbageCollection {
    /// When it runs next.
    next_at: Option<Timestamp>,
    /// The cloud listed no instance on the last run when this process had asked for this many
    /// launches ([`crate::ctx::Published::launches`]).
    empty_at_launches: Option<u64>,
    /// Passes in a row in which a call failed.
    failed_passes: u32,
}

/// When the pass after one that failed `failed` times in a row comes: [`GC_RETRY`], doubling,
/// at most [`GC_INTERVAL`].
fn retry_after(failed: u32) -> Duration {
    GC_RETRY.saturating_mul(1 << failed.saturating_sub(1).min(8)).min(GC_INTERVAL)
}

impl GarbageCollection {
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        if let Some(at) = self.next_at
            && cx.pass.now < at
        {
            cx.pass.wake_at(at);
            return Ok(());
        }
        // No claim, and the cloud had no instance when last asked with nothing launched since:
        // nothing to compare until something is launched. (A new process asks once: a launch
        // of the process before it may have left an instance behind.)
        if cx.state.node_claims().is_empty()
            && cx.published.unrecorded_launches.is_empty()
            && self.next_at.is_none()
            && self.empty_at_launches == Some(cx.published.launches)
        {
            return Ok(());
        }
        let next = util::after(cx.pass.now, GC_INTERVAL);
        self.next_at = (!cx.state.node_claims().is_empty()).then_some(next);
        if self.next_at.is_some() {
            cx.pass.wake_at(next);
        }
        let instances = match cx.cloud.list().await {
            Ok(list) => list,
            Err(e) => {
                tracing::error!(error = %e, "garbage collection: cannot list instances");
                self.retry_soon(cx);
                return Ok(());
            }
        };
        let mut failed = false;
        self.empty_at_launches = instances.is_empty().then_some(cx.published.launches);
        if !instances.is_empty() && self.next_at.is_none() {
            // Instances without claims: look again until they are gone.
            self.next_at = Some(next);
            cx.pass.wake_at(next);
        }
        // A launch left unrecorded for a claim that is gone or has since recorded another
        // instance (launched again on a stale view) is garbage.
        let state = &cx.state;
        cx.published
            .unrecorded_launches
            .retain(|name, _| state.node_claim(name).is_some_and(|c| c.provider_id().is_none()));
        let live: BTreeSet<String> = instances.iter().filter_map(|i| i.provider_id().map(str::to_string)).collect();
        for instance in &instances {
            let Some(pid) = instance.provider_id() else { continue };
            // An instance launched for a claim that has not recorded it yet is left alone while
            // that launch may still be recorded; once the claim names another instance (it was
            // launched again after a restart lost this one), this one is garbage.
            let known = cx.state.claim_for_provider_id(pid).is_some()
                || cx.state.node_claim(instance.name()).is_some_and(|c| c.provider_id().is_none())
                || cx
                    .published
                    .unrecorded_launches
                    .iter()
                    .any(|(name, c)| c.provider_id() == Some(pid) && cx.state.node_claim(name).is_some());
            if known {
                continue;
            }
            match cx.cloud.delete(instance).await {
                Ok(()) | Err(CloudError::NotFound(_)) => {
                    tracing::info!("provider-id" = %pid, NodeClaim = %instance.name(), "garbage collected instance without a nodeclaim");
                }
                Err(e) => {
                    failed = true;
                    tracing::error!("provider-id" = %pid, error = %e, "garbage collection: cannot terminate instance")
                }
            }
        }
        let orphans: Vec<String> = cx
            .state
            .node_claims()
            .values()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter(|c| c.provider_id().is_some_and(|p| !live.contains(p)))
            .map(|c| c.name().to_string())
            .collect();
        for name in orphans {
            // A list is eventually consistent: an instance it misses is asked for on its own
            // before its claim goes (as Karpenter does).
            let Some(pid) = cx.state.node_claim(&name).and_then(|c| c.provider_id()).map(str::to_string) else {
                continue;
            };
            match cx.cloud.get(&pid).await {
                Err(CloudError::NotFound(_)) => {}
                Ok(_) => continue,
                Err(e) => {
                    failed = true;
                    tracing::error!(NodeClaim = %name, error = %e, "garbage collection: cannot confirm the instance is gone");
                    continue;
                }
            }
            tracing::info!(NodeClaim = %name, "garbage collecting nodeclaim: its instance is gone");
            let deleted = cx.api.delete::<NodeClaim>(None, &name).await;
            failed |= deleted.is_err();
            if let Err(e) = cx.pass.soft("deleting nodeclaim", deleted) {
                self.retry_soon(cx);
                return Err(e);
            }
        }
        if failed {
            self.retry_soon(cx);
        } else {
            self.failed_passes = 0;
        }
        Ok(())
    }

    /// A call failed this pass: the next comes sooner than the interval (see [`GC_RETRY`]).
    fn retry_soon<P: CloudProvider, C: ClusterApi>(&mut self, cx: &mut Ctx<'_, P, C>) {
        self.failed_passes = self.failed_passes.saturating_add(1);
        let at = util::after(cx.pass.now, retry_after(self.failed_passes));
        self.next_at = Some(at);
        cx.pass.wake_at(at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_pass_retries_in_fifteen_seconds_doubling_up_to_the_interval() {
        let secs: Vec<u64> = (1..=6).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(secs, [15, 30, 60, 120, 120, 120]);
    }
}
