//! Node classes: the node class status controller (the cloud provider resolves what each
//! EC2NodeClass selects; its status and conditions are written back), and Karpenter's
//! NodeClassReady rule: a NodePool whose node class is missing or not Ready launches nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use kerf_api::EC2NodeClass;
use kerf_api::cluster::{ClusterApi, Object, Patch};
use kerf_api::ec2nodeclass::{EC2NodeClassSpec, EC2NodeClassStatus};
use kerf_cloud::{CloudProvider, Timestamp};

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::patches::status_changes;
use crate::state::ClusterState;

/// How long to wait before resolving a node class again after the cloud failed to.
pub(crate) const RESOLVE_RETRY_AFTER: Duration = Duration::from_secs(30);

/// The node class status controller: what it remembers of each node class it resolved.
#[derive(Debug, Default, Clone)]
pub(crate) struct NodeClasses {
    by_class: BTreeMap<String, Resolution>,
    /// The classes found carrying kerf's hash annotations (a cache).
    stamped: crate::hashes::Stamped,
}

/// One node class as last resolved.
#[derive(Debug, Clone)]
pub(crate) struct Resolution {
    /// The spec resolved.
    spec: EC2NodeClassSpec,
    /// The status the class had once resolved (as written, or found already right). A class
    /// whose status differs (an API server that restarted without it, another writer) is
    /// resolved again although its spec did not change.
    status: Option<EC2NodeClassStatus>,
    /// When to resolve it again although nothing changed.
    recheck: Option<Timestamp>,
}

impl Resolution {
    fn of(class: &EC2NodeClass, recheck: Option<Timestamp>) -> Resolution {
        Resolution { spec: class.spec.clone(), status: class.status.clone(), recheck }
    }
}

impl NodeClasses {
    /// Puts the drift hash annotations on classes that lack kerf's (see [`crate::hashes`]), then
    /// resolves node classes that are new, changed, or due again, and writes their status.
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        // Each class's current hash and kerf's hash version, where it carries other values (none
        // yet, Karpenter's, or a hash of its spec before it changed).
        let (owners, patch_of) = (ClusterState::node_classes, crate::hashes::node_class_patch);
        crate::hashes::stamp_owners(cx, &mut self.stamped, owners, patch_of, "writing nodeclass hash").await?;
        self.resolve(cx).await
    }

    async fn resolve<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let classes = cx.state.node_classes();
        self.by_class.retain(|name, _| classes.contains_key(name));
        let mut due: Vec<EC2NodeClass> = Vec::new();
        for class in classes.values().filter(|c| c.metadata.deletion_timestamp.is_none()) {
            match self.by_class.get(class.name()) {
                Some(r) if r.spec == class.spec && r.status == class.status => match r.recheck {
                    Some(t) if cx.pass.now >= t => due.push(class.clone()),
                    Some(t) => cx.pass.wake_at(t),
                    None => {}
                },
                _ => due.push(class.clone()),
            }
        }
        for class in due {
            let name = class.name().to_string();
            let resolution = match cx.cloud.resolve_node_class(&class).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!(EC2NodeClass = %name, error = %e, "failed resolving nodeclass");
                    let retry = crate::util::after(cx.pass.now, RESOLVE_RETRY_AFTER);
                    self.by_class.insert(name, Resolution::of(&class, Some(retry)));
                    cx.pass.wake_at(retry);
                    continue;
                }
            };
            let recheck = resolution.recheck_after.map(|d| crate::util::after(cx.pass.now, d));
            if let Some(t) = recheck {
                cx.pass.wake_at(t);
            }
            if class.status.as_ref() == Some(&resolution.status) {
                self.by_class.insert(name, Resolution::of(&class, recheck));
                continue;
            }
            let was = class.not_ready();
            let Some(patch) = status_changes(class.status.as_ref(), &resolution.status)? else { continue };
            let mut resolved = class.clone();
            resolved.status = Some(resolution.status);
            let now = resolved.not_ready();
            // Resolved only once the status is written (a merge patch of what changed): a write
            // that fails (the reconciler is retried) or finds the class gone resolves it again.
            let written = cx.api.patch_status::<EC2NodeClass>(None, &name, &Patch::Merge(patch)).await;
            if let Some(updated) = cx.pass.soft("updating nodeclass status", written)? {
                self.by_class.insert(name.clone(), Resolution::of(&updated, recheck));
                if was != now {
                    match &now {
                        None => tracing::info!(EC2NodeClass = %name, "nodeclass is ready"),
                        Some(why) => tracing::info!(EC2NodeClass = %name, reason = %why, "nodeclass is not ready"),
                    }
                }
                cx.state.record(updated.into_any());
                // Pools using it may now launch (or no longer).
                cx.published.pending_may_fit = true;
                cx.published.pool_status_stale = true;
            }
        }
        Ok(())
    }
}
