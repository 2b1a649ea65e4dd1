//! The NodeOverlay reconciler: turns the cluster's NodeOverlays into one
//! [`NodeOverlays`] set whenever their specs change and hands it to the cloud provider (which
//! prices and extends the instance types every other reconciler reads, and the launches), then
//! writes each overlay's status as Karpenter does: `ValidationSucceeded` (False with reason
//! `Conflict` or `ValidationFailed` and a message naming why) and `Ready` over it
//! (docs/design.md, "NodeOverlay").

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf_api::cluster::{ClusterApi, Patch};
use kerf_api::nodeoverlay::{CONDITION_READY, CONDITION_VALIDATION_SUCCEEDED, NodeOverlaySpec, NodeOverlayStatus};
use kerf_api::overlay::NodeOverlays;
use kerf_api::shared::{root_condition, set_condition};
use kerf_api::{Condition, NodeOverlay};
use kerf_cloud::CloudProvider;

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::patches::status_changes;

/// What the reconciler keeps between runs.
#[derive(Default)]
pub(crate) struct Overlays {
    /// The specs (by name) the cloud's set was built from; `None` before the first run.
    seen: Option<Vec<(String, NodeOverlaySpec)>>,
    set: Arc<NodeOverlays>,
}

impl Overlays {
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let live: Vec<&NodeOverlay> =
            cx.state.node_overlays().values().filter(|o| o.metadata.deletion_timestamp.is_none()).collect();
        let specs: Vec<(String, NodeOverlaySpec)> =
            live.iter().map(|o| (o.name().to_string(), o.spec.clone())).collect();
        if self.seen.as_ref() != Some(&specs) {
            // Nothing to hand over while there never was an overlay.
            if self.seen.is_some() || !specs.is_empty() {
                self.set = Arc::new(NodeOverlays::new(live.iter().copied()));
                cx.cloud.set_node_overlays(Arc::clone(&self.set));
                tracing::info!(overlays = specs.len(), "node overlays changed");
            }
            self.seen = Some(specs);
        }
        let writes: Vec<(String, serde_json::Value)> = live
            .iter()
            .filter_map(|o| {
                let status = overlay_status(o, &self.set, cx.pass.now);
                status_changes(o.status.as_ref(), &status).transpose().map(|p| p.map(|p| (o.name().to_string(), p)))
            })
            .collect::<Result<_, _>>()?;
        for (name, patch) in writes {
            let written = cx.api.patch_status::<NodeOverlay>(None, &name, &Patch::Merge(patch)).await;
            if let Some(written) = cx.pass.soft("writing nodeoverlay status", written)? {
                cx.state.record(kerf_api::cluster::Object::into_any(written));
            }
        }
        Ok(())
    }
}

/// The status `set` gives overlay `o` at `now` (transition times kept while a status holds).
fn overlay_status(o: &NodeOverlay, set: &NodeOverlays, now: kerf_cloud::Timestamp) -> NodeOverlayStatus {
    let mut status = o.status.clone().unwrap_or_default();
    let Some(verdict) = set.verdicts().get(o.name()) else { return status };
    let (ok, reason, message) = verdict.condition();
    let generation = o.metadata.generation;
    let stamp =
        |c: Condition| Condition { last_transition_time: Some(Time(now)), observed_generation: generation, ..c };
    let unchanged = |c: &Condition, new: &Condition| {
        c.status == new.status
            && c.reason == new.reason
            && c.message == new.message
            && c.observed_generation == new.observed_generation
    };
    let validation = stamp(Condition {
        type_: CONDITION_VALIDATION_SUCCEEDED.to_string(),
        status: ok.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message),
        last_transition_time: None,
        observed_generation: None,
    });
    if o.condition(CONDITION_VALIDATION_SUCCEEDED).is_none_or(|c| !unchanged(c, &validation)) {
        set_condition(&mut status.conditions, validation);
    }
    let ready = stamp(root_condition(&status.conditions, CONDITION_READY, &[CONDITION_VALIDATION_SUCCEEDED]));
    let ready = Condition { message: ready.message.or(Some(String::new())), ..ready };
    if o.condition(CONDITION_READY).is_none_or(|c| !unchanged(c, &ready)) {
        set_condition(&mut status.conditions, ready);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(json: serde_json::Value) -> NodeOverlay {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_conflicting_overlay_reads_not_ready_with_the_reason_and_the_other_overlay() {
        let a = overlay(serde_json::json!({"metadata": {"name": "a"}, "spec": {"requirements": [], "price": "0.01"}}));
        let b = overlay(serde_json::json!({"metadata": {"name": "b"}, "spec": {"requirements": [], "price": "0.02"}}));
        let set = NodeOverlays::new([&a, &b]);
        let now = kerf_cloud::Timestamp::UNIX_EPOCH;
        let sa = overlay_status(&a, &set, now);
        let sb = overlay_status(&b, &set, now);
        let cond = |s: &NodeOverlayStatus, t: &str| s.conditions.iter().find(|c| c.type_ == t).cloned().unwrap();
        assert_eq!(cond(&sa, CONDITION_READY).status, "True");
        assert_eq!(cond(&sa, CONDITION_VALIDATION_SUCCEEDED).status, "True");
        let v = cond(&sb, CONDITION_VALIDATION_SUCCEEDED);
        assert_eq!((v.status.as_str(), v.reason.as_deref()), ("False", Some("Conflict")));
        assert!(v.message.as_deref().is_some_and(|m| m.contains("\"a\"")), "{v:?}");
        assert_eq!(cond(&sb, CONDITION_READY).status, "False");
        // Read back, the same status asks for no write.
        let b2 = NodeOverlay { status: Some(sb.clone()), ..b };
        assert_eq!(overlay_status(&b2, &set, now), sb);
    }
}
