//! The `kwok` cloud provider: "instances" are Node objects created through the API, for clusters
//! whose kubelets are simulated (kwok, or `kerf serve`'s kubelet stand-in), as Karpenter's kwok
//! provider does. Which instance type and offering a claim gets is decided by the simulated
//! provider over the built-in AWS catalog (one home for that choice); this provider only turns
//! the result into a Node named after the claim, with providerID `kwok://NAME`, and reads
//! instances back from Nodes. A reboot marks the Node's kubelet gone (see
//! [`KwokProvider::reboot`]); kwok, or `kerf serve`, reports it Ready again.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as CoreQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::nodeclaim::{NodeClaimSpec, NodeClaimStatus};
use kerf_api::{EC2NodeClass, NodeClaim, NodePool, Quantity, ResourceList, Taint, TaintEffect, labels};
use kerf_cloud::sim::{SimConfig, SimProvider};
use kerf_cloud::{CloudError, CloudProvider, NodeClassResolution, SystemClock};
use kerf_scheduling::InstanceType;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// Provider IDs of kwok instances start with this.
pub const PROVIDER_ID_PREFIX: &str = kerf_cloud::KWOK_PROVIDER_ID_PREFIX;
/// The annotation kwok uses to pick the Nodes it simulates.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// Nodes per page when the instances are listed (client-go's pager takes 500; a page of Nodes
/// is decoded whole before it is made into claims).
const NODE_PAGE: u32 = 100;

/// A provider whose instances are Node objects.
pub struct KwokProvider {
    client: Client,
    /// Chooses instance types and offerings (cheapest first, capacity type order, requirements).
    catalog: SimProvider,
}

fn cloud_err(what: &str, e: kube::Error) -> CloudError {
    match e {
        kube::Error::Api(s) if s.code == 404 => CloudError::NotFound(what.to_string()),
        other => CloudError::Other(format!("{what}: {other}")),
    }
}

fn node_name_of(provider_id: &str) -> Option<&str> {
    provider_id.strip_prefix(PROVIDER_ID_PREFIX).filter(|n| !n.is_empty())
}

fn quantities(list: &ResourceList) -> std::collections::BTreeMap<String, CoreQuantity> {
    list.iter().map(|(k, v)| (k.clone(), CoreQuantity(v.canonical()))).collect()
}

/// The labels of a Node that identify the instance it stands for, all a listed instance keeps.
const INSTANCE_LABELS: [&str; 5] =
    [labels::NODE_POOL, labels::INSTANCE_TYPE, labels::ZONE, labels::CAPACITY_TYPE, labels::CAPACITY_RESERVATION_ID];

/// The spec of a claim read back from a Node: its node class unknown, nothing required.
fn read_back_spec() -> Arc<NodeClaimSpec> {
    Arc::new(NodeClaimSpec {
        taints: Vec::new(),
        startup_taints: Vec::new(),
        requirements: Vec::new(),
        resources: Default::default(),
        node_class_ref: kerf_api::NodeClassReference {
            group: kerf_api::ec2nodeclass::GROUP.to_string(),
            kind: kerf_api::ec2nodeclass::KIND.to_string(),
            name: String::new(),
        },
        expire_after: kerf_api::nodepool::default_expire_after(),
        termination_grace_period: None,
    })
}

fn resource_list(q: Option<&std::collections::BTreeMap<String, CoreQuantity>>) -> ResourceList {
    let mut out = ResourceList::new();
    for (k, v) in q.into_iter().flatten() {
        if let Ok(parsed) = Quantity::parse(&v.0) {
            out.set(k.clone(), parsed);
        }
    }
    out
}

impl KwokProvider {
    /// A kwok provider selling the built-in catalog's instance types of `region`.
    pub fn new(client: Client, region: &str) -> Result<KwokProvider, String> {
        Self::with_config(client, SimConfig { region: region.to_string(), ..SimConfig::default() })
    }

    /// A kwok provider selling what `config` (a scenario's `cloud:` section) describes: its
    /// region, zones, instance types and capacity reservations (whose `start` and `end` count
    /// from now). The error names the field.
    pub fn with_config(client: Client, config: SimConfig) -> Result<KwokProvider, String> {
        let catalog = SimProvider::new(config, Arc::new(SystemClock)).map_err(|e| e.to_string())?;
        Ok(KwokProvider { client, catalog })
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// The Node standing for the claim's instance.
    fn node_for(claim: &NodeClaim, launched: &NodeClaim, provider_id: &str) -> Node {
        let name = claim.name().to_string();
        let mut node_labels = launched.metadata.labels.clone().unwrap_or_default();
        node_labels.insert(labels::HOSTNAME.to_string(), name.clone());
        let mut taints: Vec<Taint> = claim.spec.taints.clone();
        taints.extend(claim.spec.startup_taints.iter().cloned());
        taints.push(Taint::new(labels::UNREGISTERED_TAINT_KEY, None, TaintEffect::NoExecute));
        let status = launched.status.clone().unwrap_or_default();
        Node {
            metadata: ObjectMeta {
                name: Some(name),
                labels: Some(node_labels),
                annotations: Some([(KWOK_NODE_ANNOTATION.to_string(), "fake".to_string())].into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(provider_id.to_string()),
                taints: Some(taints.iter().map(Taint::to_core).collect()),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(quantities(&status.capacity)),
                allocatable: Some(quantities(&status.allocatable)),
                ..NodeStatus::default()
            }),
        }
    }

    /// Finds the Nodes in each capacity reservation (deleting ones included: their instance is
    /// still there) and hands them to the catalog, which counts them with the launches it made
    /// itself, so that a launch after a restart does not overfill a reservation.
    async fn count_reserved_nodes(&self) -> Result<(), CloudError> {
        let params = ListParams::default().labels(labels::CAPACITY_RESERVATION_ID);
        let mut used: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
        self.each_node(params, "listing reserved Nodes", |n| {
            if let (Some(id), Some(name)) = (
                n.metadata.labels.as_ref().and_then(|l| l.get(labels::CAPACITY_RESERVATION_ID)),
                n.metadata.name.as_ref(),
            ) {
                used.entry(id.clone()).or_default().insert(name.clone());
            }
        })
        .await?;
        self.catalog.set_reservation_usage(used);
        Ok(())
    }

    /// Calls `each` with every Node `params` selects, listed a page at a time: a whole Node is
    /// kilobytes once decoded, and only what `each` keeps of it stays, so a list of thousands
    /// of Nodes does not hold them all at once.
    async fn each_node(&self, params: ListParams, what: &str, mut each: impl FnMut(&Node)) -> Result<(), CloudError> {
        let mut params = params.limit(NODE_PAGE);
        loop {
            let page = self.nodes().list(&params).await.map_err(|e| cloud_err(what, e))?;
            page.items.iter().for_each(&mut each);
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(()),
            }
        }
    }

    /// A Node described as the NodeClaim of its instance, with `spec` (a Node does not say
    /// what its claim asked for). `whole`: with every label of the Node and its capacity and
    /// allocatable (a `get`); else with what identifies the instance alone (a `list` of every
    /// instance, which garbage collection reads for names and provider IDs: copied for
    /// thousands of Nodes, their labels and resources would be the largest allocation the
    /// controller makes at once).
    fn claim_of(node: &Node, spec: &Arc<NodeClaimSpec>, whole: bool) -> Option<NodeClaim> {
        let pid = node.spec.as_ref()?.provider_id.clone().filter(|p| p.starts_with(PROVIDER_ID_PREFIX))?;
        let node_labels = node.metadata.labels.as_ref();
        let labels = if whole {
            node_labels.cloned()
        } else {
            node_labels.map(|l| {
                l.iter()
                    .filter(|(k, _)| INSTANCE_LABELS.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
        };
        let status = node.status.as_ref().filter(|_| whole);
        Some(NodeClaim {
            api_version: kerf_api::nodeclaim::API_VERSION.to_string(),
            kind: kerf_api::nodeclaim::KIND.to_string(),
            metadata: ObjectMeta { name: node.metadata.name.clone(), labels, ..ObjectMeta::default() },
            spec: Arc::clone(spec),
            status: Some(NodeClaimStatus {
                provider_id: Some(pid),
                capacity: resource_list(status.and_then(|s| s.capacity.as_ref())),
                allocatable: resource_list(status.and_then(|s| s.allocatable.as_ref())),
                ..NodeClaimStatus::default()
            }),
        })
    }
}

impl CloudProvider for KwokProvider {
    async fn create(&self, claim: &NodeClaim) -> Result<NodeClaim, CloudError> {
        if !self.catalog.config().capacity_reservations.is_empty() {
            self.count_reserved_nodes().await?;
        }
        let mut launched = self.catalog.create(claim).await?;
        let provider_id = format!("{PROVIDER_ID_PREFIX}{}", claim.name());
        let node = Self::node_for(claim, &launched, &provider_id);
        match self.nodes().create(&PostParams::default(), &node).await {
            Ok(_) => {}
            // Launched before (a retry after a lost write, or a restart): the Node is the instance.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = self.nodes().get(claim.name()).await.map_err(|e| cloud_err(claim.name(), e))?;
                let same = existing.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id.as_str());
                // A Node left by an earlier claim of the same name is not this claim's instance.
                let other_owner = existing
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == kerf_api::nodeclaim::KIND && Some(&o.uid) != claim.metadata.uid.as_ref());
                if !same || other_owner || existing.metadata.deletion_timestamp.is_some() {
                    return Err(CloudError::Invalid(format!(
                        "NodeClaim {}: a Node of that name exists and is not its instance",
                        claim.name()
                    )));
                }
            }
            Err(e) => return Err(cloud_err(&format!("creating Node {}", claim.name()), e)),
        }
        let status = launched.status.get_or_insert_with(NodeClaimStatus::default);
        // The image is the catalog's: the one the node class resolves to, so that a change of
        // its AMI selection drifts the node (`AMIDrift`) as on EC2.
        status.provider_id = Some(provider_id);
        Ok(launched)
    }

    async fn delete(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        let pid = claim.provider_id().ok_or_else(|| CloudError::NotFound(format!("NodeClaim {}", claim.name())))?;
        let name = node_name_of(pid).ok_or_else(|| CloudError::NotFound(pid.to_string()))?;
        let existing = self.nodes().get_opt(name).await.map_err(|e| cloud_err(pid, e))?;
        match existing {
            None => Err(CloudError::NotFound(pid.to_string())),
            // Already going: deleting it again changes nothing.
            Some(n) if n.metadata.deletion_timestamp.is_some() => Ok(()),
            Some(_) => {
                self.nodes().delete(name, &DeleteParams::default()).await.map_err(|e| cloud_err(pid, e))?;
                // Its room in a capacity reservation is free again.
                self.catalog.release(claim.name());
                Ok(())
            }
        }
    }

    async fn get(&self, provider_id: &str) -> Result<NodeClaim, CloudError> {
        let name = node_name_of(provider_id).ok_or_else(|| CloudError::NotFound(provider_id.to_string()))?;
        let node = self.nodes().get_opt(name).await.map_err(|e| cloud_err(provider_id, e))?;
        node.as_ref()
            .and_then(|n| Self::claim_of(n, &read_back_spec(), true))
            .ok_or_else(|| CloudError::NotFound(provider_id.to_string()))
    }

    async fn list(&self) -> Result<Vec<Arc<NodeClaim>>, CloudError> {
        let mut out = Vec::new();
        let spec = read_back_spec();
        self.each_node(ListParams::default(), "listing Nodes", |n| {
            out.extend(Self::claim_of(n, &spec, false).map(Arc::new))
        })
        .await?;
        Ok(out)
    }

    async fn instance_types(
        &self,
        node_pool: &NodePool,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        self.catalog.instance_types(node_pool, node_class).await
    }

    async fn resolve_node_class(&self, node_class: &EC2NodeClass) -> Result<NodeClassResolution, CloudError> {
        // Nothing exists in a cloud for kwok: the node class resolves as in the simulated account.
        self.catalog.resolve_node_class(node_class).await
    }

    async fn is_drifted(
        &self,
        claim: &NodeClaim,
        node_class: Option<&EC2NodeClass>,
    ) -> Result<Option<String>, CloudError> {
        self.catalog.is_drifted(claim, node_class).await
    }

    /// kwok has no machine to restart: the Node's conditions are replaced by `Ready` `Unknown`,
    /// as a kubelet that stopped leaves them, and the conditions agents on the node reported go
    /// with the boot they described. kwok (or `kerf serve`'s kubelet stand-in) then reports the
    /// Node Ready again, as a kubelet back from a reboot does.
    async fn reboot(&self, claim: &NodeClaim) -> Result<(), CloudError> {
        let pid = claim.provider_id().ok_or_else(|| CloudError::NotFound(format!("NodeClaim {}", claim.name())))?;
        let name = node_name_of(pid).ok_or_else(|| CloudError::NotFound(pid.to_string()))?;
        match self.nodes().get_opt(name).await.map_err(|e| cloud_err(pid, e))? {
            Some(n) if n.metadata.deletion_timestamp.is_none() => {}
            _ => return Err(CloudError::NotFound(pid.to_string())),
        }
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(kerf_cloud::Clock::now(&SystemClock));
        let patch = serde_json::json!({"status": {"conditions": [{
            "type": "Ready",
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": "Kubelet stopped posting node status: the instance is rebooting.",
            "lastTransitionTime": now,
            "lastHeartbeatTime": now,
        }]}});
        self.nodes()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| cloud_err(pid, e))
    }

    /// The capacity blocks of the cloud config end: the catalog warns for the instances it
    /// launched into them (from its clock: the controller's start is t=0), and the notices name
    /// the Nodes standing for them.
    async fn interruptions(&self) -> Result<Vec<kerf_cloud::InterruptionNotice>, CloudError> {
        let notices = self.catalog.interruptions().await?;
        Ok(notices
            .into_iter()
            .filter_map(|n| {
                let claim = self.catalog.instance(&n.provider_id)?.node_claim;
                Some(kerf_cloud::InterruptionNotice { provider_id: format!("{PROVIDER_ID_PREFIX}{claim}"), ..n })
            })
            .collect())
    }

    /// A claim's Node is named after the claim (see [`CloudProvider::create`] above).
    fn expected_node_name<'c>(&self, claim: &'c NodeClaim) -> Option<&'c str> {
        Some(claim.name())
    }

    fn set_node_overlays(&self, overlays: Arc<kerf_api::overlay::NodeOverlays>) {
        self.catalog.use_node_overlays(overlays);
    }

    fn set_reserved_capacity(&self, enabled: bool) {
        self.catalog.set_reserved_capacity(enabled);
    }

    fn name(&self) -> &'static str {
        "kwok"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kwok_node_reads_back_as_the_instance_it_stands_for() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default-abcde", "labels": {"node.kubernetes.io/instance-type": "m5.large"}},
            "spec": {"providerID": "kwok://default-abcde"},
            "status": {"capacity": {"cpu": "2", "memory": "8Gi"}, "allocatable": {"cpu": "1930m"}}
        }))
        .expect("node");
        let claim = KwokProvider::claim_of(&node, &read_back_spec(), true).expect("a kwok node is an instance");
        assert_eq!(claim.name(), "default-abcde");
        assert_eq!(claim.provider_id(), Some("kwok://default-abcde"));
        let status = claim.status.expect("status");
        assert_eq!(status.capacity.get("cpu").canonical(), "2");
        assert_eq!(status.allocatable.get("cpu").canonical(), "1930m");
        let mut other = node.clone();
        other.spec.as_mut().expect("spec").provider_id = Some("aws:///us-west-2a/i-1".into());
        assert!(
            KwokProvider::claim_of(&other, &read_back_spec(), false).is_none(),
            "nodes of other providers are not kwok instances"
        );
        assert_eq!(node_name_of("kwok://x"), Some("x"));
        assert_eq!(node_name_of("kwok://"), None);
    }

    #[test]
    fn a_listed_kwok_instance_keeps_what_identifies_it_and_not_the_nodes_other_labels() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "default-abcde", "labels": {
                "node.kubernetes.io/instance-type": "m5.large", "karpenter.sh/nodepool": "default",
                "topology.kubernetes.io/zone": "us-west-2a", "karpenter.sh/capacity-type": "spot",
                "team": "shop", "kubernetes.io/hostname": "default-abcde"
            }},
            "spec": {"providerID": "kwok://default-abcde"},
            "status": {"capacity": {"cpu": "2"}, "allocatable": {"cpu": "1930m"}}
        }))
        .expect("node");
        let spec = read_back_spec();
        let listed = KwokProvider::claim_of(&node, &spec, false).expect("a kwok node is an instance");
        assert_eq!((listed.name(), listed.provider_id()), ("default-abcde", Some("kwok://default-abcde")));
        let keys: Vec<&str> = listed.metadata.labels.iter().flatten().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "karpenter.sh/capacity-type",
                "karpenter.sh/nodepool",
                "node.kubernetes.io/instance-type",
                "topology.kubernetes.io/zone"
            ]
        );
        assert!(listed.status.as_ref().is_some_and(|s| s.capacity.is_empty() && s.allocatable.is_empty()));
        assert!(Arc::ptr_eq(&listed.spec, &spec), "every listed instance shares the one spec");
        let whole = KwokProvider::claim_of(&node, &spec, true).expect("instance");
        assert_eq!(whole.metadata.labels.as_ref().map(|l| l.len()), Some(6));
    }
}
