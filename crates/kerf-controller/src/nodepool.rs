//! NodePool controllers: static capacity (`spec.replicas`, capped by `limits.nodes`) and status
//! (resources, node count, readiness). Static drift (disruption/static_drift.rs) counts claims
//! the same way, through [`StaticCount`].

use std::collections::BTreeSet;

use kerf_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_LAUNCHED};
use kerf_api::nodepool::{CONDITION_NODE_CLASS_READY, CONDITION_READY, NodePoolStatus};
use kerf_api::pod_facts;
use kerf_api::shared::set_condition;
use kerf_api::{NodeClaim, NodePool, ResourceList};
use kerf_cloud::CloudProvider;

use crate::ctx::Ctx;
use crate::error::ControllerError;
use crate::patches::status_changes;
use crate::state::ClusterState;
use crate::static_pools::{counts_toward_replicas, static_count, static_new_claim};
use crate::util;
use crate::util::first_five;
use kerf_api::cluster::{ClusterApi, Object, Patch};

/// Which of a static pool's claims to remove first: ones that have not launched, then ones not
/// initialized, then those with the fewest pods, newest name last as a tie-break.
fn removal_order(a: &(bool, bool, usize, String), b: &(bool, bool, usize, String)) -> std::cmp::Ordering {
    a.cmp(b)
}

/// The NodePool reconcilers: drift hash annotations, NodeClaims of deleted pools, static pools'
/// replicas, and status. They keep nothing but a cache of the pools found carrying kerf's hash:
/// which pools are gone is read from the owner references of the claims, so a pool deleted while
/// no controller ran loses its claims all the same.
#[derive(Debug, Default)]
pub(crate) struct NodePools {
    stamped: crate::hashes::Stamped,
}

impl NodePools {
    /// The pools' drift hash annotations, NodeClaims of deleted pools, then static pools'
    /// replicas.
    pub(crate) async fn reconcile<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        // Each pool's current template hash and kerf's hash version, where it carries other
        // values (none yet, Karpenter's, or the hash of a template since changed), as Karpenter's
        // NodePool hash controller does with its own.
        let (owners, patch_of) = (ClusterState::node_pools, crate::hashes::node_pool_patch);
        crate::hashes::stamp_owners(cx, &mut self.stamped, owners, patch_of, "writing nodepool hash").await?;
        self.delete_claims_of_deleted_pools(cx).await?;
        self.reconcile_static_pools(cx).await
    }

    /// Pools with `spec.replicas` keep exactly that many NodeClaims, whatever the pods need,
    /// never more than `limits.nodes` at once (a claim being deleted still counts: the claim
    /// that refills its place waits for it when the pool is at its limit).
    async fn reconcile_static_pools<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let pools: Vec<NodePool> = cx
            .state
            .node_pools()
            .values()
            .filter(|p| p.spec.replicas.is_some() && p.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        for pool in pools {
            let count = static_count(cx.state, &pool);
            let want = count.want;
            if count.live > want {
                let live: Vec<&NodeClaim> =
                    cx.state.claims_of_pool(pool.name()).filter(|c| counts_toward_replicas(cx.state, c)).collect();
                let mut order: Vec<(bool, bool, usize, String)> = live
                    .iter()
                    .map(|c| {
                        let pods = cx
                            .state
                            .node_for_claim(c)
                            .and_then(|n| n.metadata.name.as_deref())
                            .map(|n| cx.state.pods_on_node(n).filter(|p| !pod_facts::terminal(p)).count())
                            .unwrap_or(0);
                        (
                            c.is_condition_true(CONDITION_LAUNCHED),
                            c.is_condition_true(CONDITION_INITIALIZED),
                            pods,
                            c.name().to_string(),
                        )
                    })
                    .collect();
                order.sort_by(removal_order);
                for (_, _, _, name) in order.into_iter().take(count.live - want) {
                    tracing::info!(NodePool = %pool.name(), NodeClaim = %name, replicas = want, "deleting nodeclaim: above the pool's replicas");
                    cx.pass.soft("deleting nodeclaim", cx.api.delete::<NodeClaim>(None, &name).await)?;
                }
            }
            let missing = want.saturating_sub(count.live);
            if missing == 0 {
                continue;
            }
            if let Some(problem) = cx.state.node_class_problem(&pool) {
                tracing::debug!(NodePool = %pool.name(), reason = %problem.message, "not creating nodeclaims");
                continue;
            }
            let create = missing.min(count.headroom());
            if create < missing {
                tracing::debug!(
                    NodePool = %pool.name(),
                    missing,
                    claims = count.claims,
                    "limits.nodes" = count.limit.unwrap_or(usize::MAX),
                    "waiting for deleting nodeclaims: the pool is at its node limit"
                );
                if create == 0 {
                    continue;
                }
            }
            let types = match cx.cloud.instance_types(&pool, cx.state.node_class_for(&pool)).await {
                Ok(types) => types,
                Err(e) => {
                    tracing::warn!(NodePool = %pool.name(), error = %e, "not creating nodeclaims: its instance types are unknown");
                    continue;
                }
            };
            let new = static_new_claim(&pool, &types);
            let names: Vec<String> = new.instance_types.iter().map(|t| t.name.clone()).collect();
            for _ in 0..create {
                let claim = cx.new_claim(&pool, &new);
                let Some(created) = cx.pass.soft("creating nodeclaim", cx.api.create(claim).await)? else { break };
                tracing::info!(
                    NodePool = %pool.name(),
                    NodeClaim = %created.name(),
                    requests = %ResourceList::new(),
                    "instance-types" = %first_five(&names),
                    replicas = want,
                    "created nodeclaim"
                );
                cx.state.record(created.into_any());
            }
        }
        Ok(())
    }

    /// NodeClaims owned by a NodePool that no longer exists are deleted with it, as the
    /// garbage collector of Kubernetes deletes what an owner that is gone leaves.
    async fn delete_claims_of_deleted_pools<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let gone: BTreeSet<&str> = cx
            .state
            .node_claims()
            .values()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|c| {
                let owners = c.metadata.owner_references.as_ref()?;
                owners.iter().find(|o| o.kind == kerf_api::nodepool::KIND).map(|o| o.name.as_str())
            })
            .filter(|pool| cx.state.node_pool(pool).is_none())
            .collect();
        let doomed: Vec<(String, String)> = gone
            .into_iter()
            .flat_map(|pool| {
                cx.state
                    .claims_of_pool(pool)
                    .filter(|c| c.metadata.deletion_timestamp.is_none())
                    .map(move |c| (pool.to_string(), c.name().to_string()))
            })
            .collect();
        for (pool, name) in doomed {
            tracing::info!(NodePool = %pool, NodeClaim = %name, "deleting nodeclaim: its nodepool was deleted");
            cx.pass.soft("deleting nodeclaim", cx.api.delete::<NodeClaim>(None, &name).await)?;
        }
        Ok(())
    }

    /// Writes each pool's status: the capacity of its launched claims, their count, and Ready.
    /// Statuses not written are written on the retry.
    pub(crate) async fn reconcile_status<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        if !std::mem::take(&mut cx.published.pool_status_stale) {
            return Ok(());
        }
        let r = self.write_status(cx).await;
        cx.published.pool_status_stale |= r.is_err();
        r
    }

    async fn write_status<P: CloudProvider, C: ClusterApi>(
        &mut self,
        cx: &mut Ctx<'_, P, C>,
    ) -> Result<(), ControllerError> {
        let pools: Vec<NodePool> =
            cx.state.node_pools().values().filter(|p| p.metadata.deletion_timestamp.is_none()).cloned().collect();
        for pool in pools {
            let mut resources = ResourceList::new();
            let mut nodes = 0i64;
            for claim in cx.state.claims_of_pool(pool.name()) {
                if claim.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                if let Some(s) = claim.status.as_ref().filter(|s| !s.capacity.is_empty()) {
                    resources.add(&s.capacity);
                    nodes += 1;
                }
            }
            let mut status: NodePoolStatus = pool.status.clone().unwrap_or_default();
            status.resources = resources;
            status.nodes = Some(nodes);
            let problem = cx.state.node_class_problem(&pool);
            let class_ready = match &problem {
                Some(p) => util::condition(CONDITION_NODE_CLASS_READY, false, p.reason, &p.message, cx.pass.now),
                None => util::condition(CONDITION_NODE_CLASS_READY, true, CONDITION_NODE_CLASS_READY, "", cx.pass.now),
            };
            let ready = match (&problem, cx.published.pool_errors.get(pool.name())) {
                (Some(p), _) => util::condition(CONDITION_READY, false, p.reason, &p.message, cx.pass.now),
                (None, Some(err)) => util::condition(CONDITION_READY, false, "NodeClassNotReady", err, cx.pass.now),
                (None, None) => util::condition(CONDITION_READY, true, CONDITION_READY, "", cx.pass.now),
            };
            set_condition(&mut status.conditions, class_ready);
            set_condition(&mut status.conditions, ready);
            if let Some(generation) = cx.state.node_class_for(&pool).and_then(|c| c.metadata.generation) {
                status.node_class_observed_generation = Some(generation);
            }
            // A merge patch of what changed: a concurrent change of the pool's spec (a user's
            // apply) is neither overwritten nor a conflict.
            let Some(patch) = status_changes(pool.status.as_ref(), &status)? else { continue };
            let written = cx.api.patch_status::<NodePool>(None, pool.name(), &Patch::Merge(patch)).await;
            match cx.pass.soft("updating nodepool status", written)? {
                Some(updated) => cx.state.record(updated.into_any()),
                None => cx.published.pool_status_stale = true,
            }
        }
        Ok(())
    }
}
