//! Interruption: the cloud warns that an instance is going away (a spot interruption, a state
//! change to stopping / terminated, scheduled maintenance). The node is tainted and its claim
//! deleted at once (draining starts now, not when the instance dies), and replacements for its
//! pods are launched in the same pass. A rebalance recommendation is only recorded as an Event.
//! The provider marks the offering unavailable when it hands out the notice.

use kerf_cloud::CloudProvider;

use crate::ctx::{ControllerError, Ctx};
use crate::disruption::{Command, Disruption, Reason};
use kerf_api::cluster::{ClusterApi, EventRecord};

/// The interruption reconciler. It keeps nothing; the commands it starts are carried out by the
/// disruption controller's orchestration, handed to it explicitly.
#[derive(Debug, Default)]
pub(crate) struct Interruption;

impl Interruption {
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
        disruption: &mut Disruption,
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
            if claim.metadata.deletion_timestamp.is_some() || disruption.is_disrupting(claim.name()) {
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
            let cand = disruption.forced_candidate(cx, &claim, &types);
            let (replacements, moves) = disruption.forced_replacements(cx, &cand, &types);
            let detail = match notice.terminates_at {
                Some(at) => format!(
                    "the cloud warned it reclaims the instance in {}s",
                    ((at.as_millisecond() - cx.pass.now.as_millisecond()) / 1000).max(0)
                ),
                None => format!("the cloud sent a {} notice", notice.kind),
            };
            disruption
                .execute(
                    cx,
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
