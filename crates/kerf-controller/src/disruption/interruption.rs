//! Interruption: the cloud warns that an instance is going away (a spot interruption, a state
//! change to stopping / terminated, scheduled maintenance). The node is tainted and its claim
//! deleted at once (draining starts now, not when the instance dies), and replacements for its
//! pods are launched in the same pass. A rebalance recommendation is only recorded as an Event.
//! The provider marks the offering unavailable when it hands out the notice.
//!
//! Interruption is one of the disruption controller's methods: its commands run in the same
//! orchestration as every other. It has its own pass (and its own backoff) because it runs
//! before provisioning, so that the interrupted pods' replacements launch in the same round.

use kerf_cloud::CloudProvider;

use super::{Disruption, Reason};
use crate::ctx::Ctx;
use crate::error::ControllerError;
use kerf_api::cluster::{ClusterApi, EventRecord};

impl Disruption {
    /// Reads the cloud's interruption notices and disrupts each interrupted node at once.
    pub(crate) async fn reconcile_interruptions<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let notices = match cx.cloud.interruptions().await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(error = %e, "cannot read interruption notices");
                return Ok(());
            }
        };
        if notices.is_empty() {
            return Ok(());
        }
        let types = cx.instance_types_by_pool().await;
        for notice in notices {
            let Some(claim) = cx.state.claim_for_provider_id(&notice.provider_id).cloned() else {
                tracing::debug!("provider-id" = %notice.provider_id, "interruption notice for an instance without a nodeclaim");
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() || self.is_disrupting(claim.name()) {
                continue;
            }
            let name = claim.name().to_string();
            tracing::info!(NodeClaim = %name, kind = %notice.kind, "received interruption notice");
            cx.api
                .record_event(EventRecord {
                    kind: kerf_api::nodeclaim::KIND,
                    name: name.clone(),
                    uid: cx.state.uid_of(kerf_api::nodeclaim::KIND, &name),
                    type_: "Warning",
                    reason: notice.kind.event_reason().to_string(),
                    message: format!("{} notice received from the cloud", notice.kind),
                })
                .await;
            if !notice.kind.requires_drain() {
                // A rebalance recommendation is only a hint: the node keeps running.
                continue;
            }
            let detail = match notice.terminates_at {
                Some(at) => format!(
                    "{}the cloud warned it reclaims the instance in {}s",
                    match notice.kind {
                        kerf_cloud::InterruptionKind::CapacityBlockEnding => "its capacity block ends: ",
                        kerf_cloud::InterruptionKind::CapacityReservationInterruption => {
                            "the owner of its interruptible capacity reservation reclaims it: "
                        }
                        _ => "",
                    },
                    ((at.as_millisecond() - cx.pass.now.as_millisecond()) / 1000).max(0)
                ),
                None => format!("the cloud sent a {} notice", notice.kind),
            };
            let cmd = self.forced_command(cx, &claim, &types, Reason::Interrupted, detail);
            self.execute(cx, cmd).await?;
        }
        Ok(())
    }
}
