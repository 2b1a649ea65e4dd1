//! NodePool controllers: static capacity (`spec.replicas`) and status (resources, node count,
//! readiness).

use std::collections::BTreeMap;

use kerf_api::nodeclaim::{CONDITION_INITIALIZED, CONDITION_LAUNCHED};
use kerf_api::nodepool::{CONDITION_NODE_CLASS_READY, CONDITION_READY, NodePoolStatus};
use kerf_api::shared::set_condition;
use kerf_api::{NodeClaim, NodePool, Operator, ResourceList, labels};
use kerf_cloud::CloudProvider;
use kerf_scheduling::Requirements;

use crate::manager::{ControllerError, Manager, Pass};
use crate::provisioner::first_five;
use crate::util;
use kerf_api::cluster::{ClusterApi, Object};

/// Which of a static pool's claims to remove first: ones that have not launched, then ones not
/// initialized, then those with the fewest pods, newest name last as a tie-break.
fn removal_order(a: &(bool, bool, usize, String), b: &(bool, bool, usize, String)) -> std::cmp::Ordering {
    a.cmp(b)
}

impl<P: CloudProvider> Manager<P> {
    /// Pools with `spec.replicas` keep exactly that many NodeClaims, whatever the pods need.
    pub(crate) async fn reconcile_static_pools<C: ClusterApi>(
        &mut self,
        api: &C,
        pass: &mut Pass,
    ) -> Result<(), ControllerError> {
        let pools: Vec<NodePool> = self
            .state
            .node_pools()
            .values()
            .filter(|p| p.spec.replicas.is_some() && p.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        for pool in pools {
            // `limits.nodes`, when set, caps the replicas.
            let cap = pool.spec.limits.as_ref().and_then(|l| l.0.get("nodes")).map(|q| q.value_ceil());
            let want = pool.spec.replicas.unwrap_or(0).min(cap.unwrap_or(i64::MAX)).max(0) as usize;
            let live: Vec<&NodeClaim> =
                self.state.claims_of_pool(pool.name()).filter(|c| c.metadata.deletion_timestamp.is_none()).collect();
            let have = live.len();
            if have > want {
                let mut order: Vec<(bool, bool, usize, String)> = live
                    .iter()
                    .map(|c| {
                        let pods = self
                            .state
                            .node_for_claim(c)
                            .and_then(|n| n.metadata.name.as_deref())
                            .map(|n| self.state.pods_on_node(n).filter(|p| !util::pod_terminal(p)).count())
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
                for (_, _, _, name) in order.into_iter().take(have - want) {
                    tracing::info!(NodePool = %pool.name(), NodeClaim = %name, replicas = want, "deleting nodeclaim: above the pool's replicas");
                    pass.soft("deleting nodeclaim", api.delete::<NodeClaim>(None, &name).await)?;
                }
            }
            if have < want
                && let Some(problem) = crate::nodeclass::node_class_problem(&self.state, &pool)
            {
                tracing::debug!(NodePool = %pool.name(), reason = %problem.message, "not creating nodeclaims");
                continue;
            }
            // For the log: the types a claim of this pool may become, cheapest first.
            let types = if have < want {
                match self.cloud.instance_types(&pool, self.state.node_class_for(&pool)).await {
                    Ok(types) => {
                        let reqs = Requirements::from_node_selector(&pool.spec.template.spec.requirements);
                        let mut allowed: Vec<(f64, String)> = types
                            .iter()
                            .filter(|t| reqs.iter().all(|(k, r)| t.labels.get(k).is_none_or(|v| r.matches(Some(v)))))
                            .filter_map(|t| t.cheapest_available().map(|o| (o.price, t.name.clone())))
                            .collect();
                        allowed.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
                        allowed.into_iter().map(|(_, n)| n).collect()
                    }
                    Err(_) => Vec::new(),
                }
            } else {
                Vec::new()
            };
            for _ in have..want {
                let mut reqs = Requirements::from_node_selector(&pool.spec.template.spec.requirements);
                reqs.add(labels::NODE_POOL, kerf_scheduling::Requirement::new(Operator::In, &[pool.name()]));
                let extra: BTreeMap<String, String> = reqs.single_valued_labels();
                let spec = &pool.spec.template.spec;
                let claim = self.claim_from_pool(
                    &pool,
                    reqs.to_node_selector(),
                    &extra,
                    (spec.taints.clone(), spec.startup_taints.clone()),
                    ResourceList::new(),
                );
                let Some(created) = pass.soft("creating nodeclaim", api.create(claim).await)? else { break };
                tracing::info!(
                    NodePool = %pool.name(),
                    NodeClaim = %created.name(),
                    requests = %ResourceList::new(),
                    "instance-types" = %first_five(&types),
                    replicas = want,
                    "created nodeclaim"
                );
                self.state.record(created.into_any());
            }
        }
        Ok(())
    }

    /// NodeClaims of a deleted NodePool are deleted with it (the pool owns them).
    pub(crate) async fn delete_claims_of_deleted_pools<C: ClusterApi>(
        &mut self,
        api: &C,
        pass: &mut Pass,
    ) -> Result<(), ControllerError> {
        let pools = std::mem::take(&mut self.pools.deleted);
        for pool in pools {
            if self.state.node_pool(&pool).is_some() {
                continue; // re-created since
            }
            let names: Vec<String> = self
                .state
                .claims_of_pool(&pool)
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .map(|c| c.name().to_string())
                .collect();
            for name in names {
                tracing::info!(NodePool = %pool, NodeClaim = %name, "deleting nodeclaim: its nodepool was deleted");
                pass.soft("deleting nodeclaim", api.delete::<NodeClaim>(None, &name).await)?;
            }
        }
        Ok(())
    }

    /// Writes each pool's status: the capacity of its launched claims, their count, and Ready.
    pub(crate) async fn reconcile_pool_status<C: ClusterApi>(
        &mut self,
        api: &C,
        pass: &mut Pass,
    ) -> Result<(), ControllerError> {
        if !std::mem::take(&mut self.pools.status_stale) {
            return Ok(());
        }
        let pools: Vec<NodePool> =
            self.state.node_pools().values().filter(|p| p.metadata.deletion_timestamp.is_none()).cloned().collect();
        for mut pool in pools {
            let mut resources = ResourceList::new();
            let mut nodes = 0i64;
            for claim in self.state.claims_of_pool(pool.name()) {
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
            let problem = crate::nodeclass::node_class_problem(&self.state, &pool);
            let class_ready = match &problem {
                Some(p) => util::condition(CONDITION_NODE_CLASS_READY, false, p.reason, &p.message, pass.now),
                None => util::condition(CONDITION_NODE_CLASS_READY, true, CONDITION_NODE_CLASS_READY, "", pass.now),
            };
            let ready = match (&problem, self.provisioning.pool_errors.get(pool.name())) {
                (Some(p), _) => util::condition(CONDITION_READY, false, p.reason, &p.message, pass.now),
                (None, Some(err)) => util::condition(CONDITION_READY, false, "NodeClassNotReady", err, pass.now),
                (None, None) => util::condition(CONDITION_READY, true, CONDITION_READY, "", pass.now),
            };
            set_condition(&mut status.conditions, class_ready);
            set_condition(&mut status.conditions, ready);
            if pool.status.as_ref() == Some(&status) {
                continue;
            }
            pool.status = Some(status);
            match pass.soft("updating nodepool status", api.update_status(pool).await)? {
                Some(updated) => self.state.record(updated.into_any()),
                None => self.pools.status_stale = true,
            }
        }
        Ok(())
    }
}
