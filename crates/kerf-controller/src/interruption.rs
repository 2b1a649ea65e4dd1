//! Interruption: the cloud warns that an instance is going away (a spot interruption, a state
//! change to stopping / terminated, scheduled maintenance). The node is tainted and its claim
//! deleted at once (draining starts now, not when the instance dies), and replacements for its
//! pods are launched in the same pass. A rebalance recommendation is only recorded as an Event.
//! The provider marks the offering unavailable when it hands out the notice.

use kerf_cloud::CloudProvider;

use crate::disruption::{Command, Reason};
use crate::manager::{ControllerError, Manager, Pass};
use kerf_api::cluster::{ClusterApi, EventRecord};

impl<P: CloudProvider> Manager<P> {
    pub(crate) async fn reconcile_interruptions<C: ClusterApi>(
        &mut self,
        api: &C,
        pass: &mut Pass,
    ) -> Result<(), ControllerError> {
        let notices = match self.cloud.interruptions().await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(error = %e, "cannot read interruption notices");
                return Ok(());
            }
        };
        if notices.is_empty() {
            return Ok(());
        }
        let types = self.instance_types_by_pool().await;
        for notice in notices {
            let Some(claim) = self.state.claim_for_provider_id(&notice.provider_id).cloned() else {
                tracing::debug!("provider-id" = %notice.provider_id, "interruption notice for an instance without a nodeclaim");
                continue;
            };
            if claim.metadata.deletion_timestamp.is_some() || self.is_disrupting(claim.name()) {
                continue;
            }
            let name = claim.name().to_string();
            tracing::info!(NodeClaim = %name, kind = %notice.kind, "received interruption notice");
            api.record_event(EventRecord {
                kind: kerf_api::nodeclaim::KIND,
                name: name.clone(),
                type_: "Warning",
                reason: notice.kind.event_reason().to_string(),
                message: format!("{} notice received from the cloud", notice.kind),
            })
            .await;
            if !notice.kind.requires_drain() {
                // A rebalance recommendation is only a hint: the node keeps running.
                continue;
            }
            let cand = self.forced_candidate(&claim, &types);
            let (replacements, moves) = self.forced_replacements(&cand, &types);
            let detail = match notice.terminates_at {
                Some(at) => format!(
                    "the cloud warned it reclaims the instance in {}s",
                    ((at.as_millisecond() - pass.now.as_millisecond()) / 1000).max(0)
                ),
                None => format!("the cloud sent a {} notice", notice.kind),
            };
            self.execute(
                api,
                pass,
                Command {
                    reason: Reason::Interrupted,
                    candidates: vec![cand],
                    replacements,
                    detail,
                    savings: 0.0,
                    moves,
                },
            )
            .await?;
        }
        Ok(())
    }
}
