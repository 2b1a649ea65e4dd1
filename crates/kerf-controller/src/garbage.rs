//! Garbage collection: instances the cloud runs for this cluster that no NodeClaim accounts for
//! are terminated, and launched NodeClaims whose instance is gone are deleted.
//!
//! Which instances belong to this cluster is the provider's business: `CloudProvider::list`
//! returns only instances tagged as this cluster's, so an instance of anything else is never
//! touched.

use std::collections::BTreeSet;
use std::time::Duration;

use kerf_api::NodeClaim;
use kerf_cloud::{CloudError, CloudProvider};

use crate::manager::{ControllerError, Manager, Pass};
use crate::util;
use kerf_api::cluster::ClusterApi;

/// How often the cloud's instances are compared with the claims (Karpenter: 2 minutes).
pub(crate) const GC_INTERVAL: Duration = Duration::from_secs(120);

impl<P: CloudProvider> Manager<P> {
    pub(crate) async fn garbage_collect<C: ClusterApi>(
        &mut self,
        api: &C,
        pass: &mut Pass,
    ) -> Result<(), ControllerError> {
        if let Some(at) = self.garbage.next_at
            && pass.now < at
        {
            pass.wake_at(at);
            return Ok(());
        }
        // No claim, and the cloud had no instance when last asked with nothing launched since:
        // nothing to compare until something is launched. (A new process asks once: a launch
        // of the process before it may have left an instance behind.)
        if self.state.node_claims().is_empty()
            && self.lifecycle.unrecorded_launches.is_empty()
            && self.garbage.next_at.is_none()
            && self.garbage.cloud_empty
        {
            return Ok(());
        }
        let next = util::after(pass.now, GC_INTERVAL);
        self.garbage.next_at = (!self.state.node_claims().is_empty()).then_some(next);
        if self.garbage.next_at.is_some() {
            pass.wake_at(next);
        }
        let instances = match self.cloud.list().await {
            Ok(list) => list,
            Err(e) => {
                tracing::error!(error = %e, "garbage collection: cannot list instances");
                self.garbage.next_at = Some(next);
                pass.wake_at(next);
                return Ok(());
            }
        };
        self.garbage.cloud_empty = instances.is_empty();
        if !instances.is_empty() && self.garbage.next_at.is_none() {
            // Instances without claims: look again until they are gone.
            self.garbage.next_at = Some(next);
            pass.wake_at(next);
        }
        // A launch left unrecorded for a claim that is gone or has since recorded another
        // instance (launched again on a stale view) is garbage.
        let state = &self.state;
        self.lifecycle
            .unrecorded_launches
            .retain(|name, _| state.node_claim(name).is_some_and(|c| c.provider_id().is_none()));
        let live: BTreeSet<String> = instances.iter().filter_map(|i| i.provider_id().map(str::to_string)).collect();
        for instance in &instances {
            let Some(pid) = instance.provider_id() else { continue };
            // An instance launched for a claim that has not recorded it yet is left alone while
            // that launch may still be recorded; once the claim names another instance (it was
            // launched again after a restart lost this one), this one is garbage.
            let known = self.state.claim_for_provider_id(pid).is_some()
                || self.state.node_claim(instance.name()).is_some_and(|c| c.provider_id().is_none())
                || self
                    .lifecycle
                    .unrecorded_launches
                    .iter()
                    .any(|(name, c)| c.provider_id() == Some(pid) && self.state.node_claim(name).is_some());
            if known {
                continue;
            }
            match self.cloud.delete(instance).await {
                Ok(()) | Err(CloudError::NotFound(_)) => {
                    tracing::info!("provider-id" = %pid, NodeClaim = %instance.name(), "garbage collected instance without a nodeclaim");
                }
                Err(e) => {
                    tracing::error!("provider-id" = %pid, error = %e, "garbage collection: cannot terminate instance")
                }
            }
        }
        let orphans: Vec<String> = self
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
            let Some(pid) = self.state.node_claim(&name).and_then(|c| c.provider_id()).map(str::to_string) else {
                continue;
            };
            match self.cloud.get(&pid).await {
                Err(CloudError::NotFound(_)) => {}
                Ok(_) => continue,
                Err(e) => {
                    tracing::error!(NodeClaim = %name, error = %e, "garbage collection: cannot confirm the instance is gone");
                    continue;
                }
            }
            tracing::info!(NodeClaim = %name, "garbage collecting nodeclaim: its instance is gone");
            pass.soft("deleting nodeclaim", api.delete::<NodeClaim>(None, &name).await)?;
        }
        Ok(())
    }
}
