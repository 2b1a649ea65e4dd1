//! Well-known labels, annotations, taints and the termination finalizer.

pub const GROUP: &str = "karpenter.sh";
pub const AWS_GROUP: &str = "karpenter.k8s.aws";

// Kubernetes well-known labels.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

// Deprecated beta aliases, normalized to the stable keys on read.
pub const BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
pub const BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
pub const BETA_ARCH: &str = "beta.kubernetes.io/arch";
pub const BETA_OS: &str = "beta.kubernetes.io/os";
pub const BETA_INSTANCE_TYPE: &str = "beta.kubernetes.io/instance-type";

// Karpenter labels.
pub const NODE_POOL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const INITIALIZED: &str = "karpenter.sh/initialized";
pub const REGISTERED: &str = "karpenter.sh/registered";
pub const NODE_CLAIM: &str = "karpenter.sh/nodeclaim";
pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";

pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

// AWS provider labels.
pub const AWS_EC2_NODE_CLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str = "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str = "karpenter.k8s.aws/instance-encryption-in-transit-supported";
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str = "karpenter.k8s.aws/instance-accelerator-manufacturer";
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
pub const INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str = "karpenter.k8s.aws/capacity-reservation-interruptible";
/// The labels an offering in a capacity reservation gives its node (its id, type, and whether it
/// is interruptible); requirements on them choose among offerings like zone and capacity type.
pub const CAPACITY_RESERVATION_LABELS: [&str; 3] =
    [CAPACITY_RESERVATION_ID, CAPACITY_RESERVATION_TYPE, CAPACITY_RESERVATION_INTERRUPTIBLE];
pub const PLACEMENT_GROUP_ID: &str = "karpenter.k8s.aws/placement-group-id";
pub const PLACEMENT_GROUP_PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";
pub const TOPOLOGY_ZONE_ID: &str = "topology.k8s.aws/zone-id";

// Annotations.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// On a Node: node repair leaves it alone however long its conditions stay unhealthy.
pub const DO_NOT_REPAIR: &str = "karpenter.sh/do-not-repair";
/// On a Pod: the order a ReplicaSet's scale-down deletes its pods in (lowest first), an int32.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
/// On a Pod: what evicting it costs, as its owner declares it (an int32); consolidation takes
/// nodes whose pods cost less first.
pub const DISRUPTION_COST: &str = "karpenter.sh/disruption-cost";
/// kerf's annotation on a Pod whose `controller.kubernetes.io/pod-deletion-cost` kerf wrote
/// (`PodDeletionCostManagement`), with the value it wrote.
pub const MANAGED_DELETION_COST: &str = "kerf.sh/pod-deletion-cost";
/// kerf's annotation on a NodeClaim launched by a consolidation to replace other nodes: it is
/// not consolidated itself while the workload it was sized for stays as it is.
pub const CONSOLIDATION_REPLACEMENT: &str = "kerf.sh/consolidation-replacement";
/// kerf's annotation on a NodeClaim that took part in a consolidation that was undone (the pods
/// it moved needed a new node): `undone <time> decided <time>`. Consolidation leaves the node
/// alone until the workload shrinks; a restarted controller reads the hold back from here.
pub const CONSOLIDATION_REVERSED: &str = "kerf.sh/consolidation-reversed";
/// kerf's annotation on a NodePool: the consolidations of its nodes still watched for being
/// undone (a JSON list), so a restarted controller goes on watching them.
pub const CONSOLIDATION_WATCHES: &str = "kerf.sh/consolidation-watches";
/// kerf's annotation on a NodeClaim: when node repair rebooted its instance (RFC 3339), so that
/// the node is rebooted once and, after a restart of the controller, not again.
pub const REBOOTED_AT: &str = "kerf.sh/rebooted-at";
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
pub const NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
pub const NODECLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";
pub const NODECLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";
pub const NODECLAIM_MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";

// Taints.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";
pub const NODE_NOT_READY_TAINT_KEY: &str = "node.kubernetes.io/not-ready";
pub const NODE_UNREACHABLE_TAINT_KEY: &str = "node.kubernetes.io/unreachable";
pub const NODE_UNSCHEDULABLE_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";

/// Finalizer Karpenter puts on nodes and NodeClaims it manages.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

/// A label domain reserved for Kubernetes or Karpenter: NodePool requirements and template labels
/// may not use a key in it (or in a sub-domain of it), except its `allowed` keys and keys of its
/// `exempt` sub-domains. Validation, the CRDs' CEL rules and [`is_restricted_label`] all read
/// this one table.
#[derive(Debug, Clone, Copy)]
pub struct RestrictedDomain {
    pub domain: &'static str,
    pub exempt: &'static [&'static str],
    pub allowed: &'static [&'static str],
}

impl RestrictedDomain {
    /// Whether `key` falls in this domain and is neither allowed nor in an exempt sub-domain.
    pub fn restricts(&self, key: &str) -> bool {
        let domain = rule_domain(key);
        domain.ends_with(self.domain)
            && !self.allowed.contains(&key)
            && !self.exempt.iter().any(|e| domain.ends_with(e))
    }
}

/// The restricted label domains, in the order their rules are checked.
pub const RESTRICTED_DOMAINS: &[RestrictedDomain] = &[
    RestrictedDomain {
        domain: "kubernetes.io",
        exempt: &["node.kubernetes.io", "node-restriction.kubernetes.io"],
        allowed: KUBERNETES_IO_ALLOWED,
    },
    RestrictedDomain { domain: "k8s.io", exempt: &["kops.k8s.io"], allowed: &[] },
    RestrictedDomain { domain: "karpenter.sh", exempt: &[], allowed: KARPENTER_SH_ALLOWED },
    RestrictedDomain { domain: "karpenter.k8s.aws", exempt: &[], allowed: KARPENTER_AWS_ALLOWED },
];

/// The domain of a key as the restricted-domain rules read it: everything before the first `/`
/// (the whole key when there is none).
fn rule_domain(key: &str) -> &str {
    key.split('/').next().unwrap_or(key)
}

/// The restricted domain that refuses `key`, if one does.
pub fn restricted_domain_of(key: &str) -> Option<&'static RestrictedDomain> {
    RESTRICTED_DOMAINS.iter().find(|d| d.restricts(key))
}

/// Keys of `kubernetes.io` sub-domains users may still set (besides `*.node.kubernetes.io` and
/// `*.node-restriction.kubernetes.io`).
const KUBERNETES_IO_ALLOWED: &[&str] = &[
    "beta.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/windows-build",
];

/// Keys of the `karpenter.sh` domain users may use.
const KARPENTER_SH_ALLOWED: &[&str] = &["karpenter.sh/capacity-type", "karpenter.sh/nodepool"];

/// Keys of the `karpenter.k8s.aws` domain users may use (the instance-type labels).
const KARPENTER_AWS_ALLOWED: &[&str] = &[
    "karpenter.k8s.aws/instance-encryption-in-transit-supported",
    "karpenter.k8s.aws/instance-category",
    "karpenter.k8s.aws/instance-hypervisor",
    "karpenter.k8s.aws/instance-family",
    "karpenter.k8s.aws/instance-generation",
    "karpenter.k8s.aws/instance-local-nvme",
    "karpenter.k8s.aws/instance-size",
    "karpenter.k8s.aws/instance-cpu",
    "karpenter.k8s.aws/instance-cpu-manufacturer",
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz",
    "karpenter.k8s.aws/instance-memory",
    "karpenter.k8s.aws/instance-ebs-bandwidth",
    "karpenter.k8s.aws/instance-network-bandwidth",
    "karpenter.k8s.aws/instance-gpu-name",
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.k8s.aws/instance-gpu-count",
    "karpenter.k8s.aws/instance-gpu-memory",
    "karpenter.k8s.aws/instance-accelerator-name",
    "karpenter.k8s.aws/instance-accelerator-manufacturer",
    "karpenter.k8s.aws/instance-accelerator-count",
    "karpenter.k8s.aws/instance-capability-flex",
    "karpenter.k8s.aws/capacity-reservation-id",
    "karpenter.k8s.aws/capacity-reservation-type",
    "karpenter.k8s.aws/capacity-reservation-interruptible",
    "karpenter.k8s.aws/placement-group-id",
    "karpenter.k8s.aws/placement-group-partition",
];

/// Well-known keys the user may constrain in requirements even though their domain is restricted.
pub const WELL_KNOWN_LABELS: &[&str] = &[
    NODE_POOL,
    ZONE,
    REGION,
    INSTANCE_TYPE,
    ARCH,
    OS,
    CAPACITY_TYPE,
    WINDOWS_BUILD,
    INSTANCE_CATEGORY,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_SIZE,
    INSTANCE_CPU,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    INSTANCE_MEMORY,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_HYPERVISOR,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    INSTANCE_LOCAL_NVME,
    INSTANCE_CAPABILITY_FLEX,
    TOPOLOGY_ZONE_ID,
    AWS_EC2_NODE_CLASS,
];

/// Maps a deprecated beta label key to its stable key; other keys are returned unchanged.
pub fn normalize_key(key: &str) -> &str {
    match key {
        BETA_ZONE => ZONE,
        BETA_REGION => REGION,
        BETA_ARCH => ARCH,
        BETA_OS => OS,
        BETA_INSTANCE_TYPE => INSTANCE_TYPE,
        // Karpenter's own historical aliases.
        "karpenter.sh/provisioner-name" => NODE_POOL,
        "topology.ebs.csi.aws.com/zone" => ZONE,
        _ => key,
    }
}

/// The domain part of a label key (`karpenter.sh` for `karpenter.sh/nodepool`), if any.
pub fn key_domain(key: &str) -> Option<&str> {
    key.split_once('/').map(|(d, _)| d)
}

/// Whether `key` is in a restricted label domain (kubernetes.io, k8s.io, karpenter.sh,
/// karpenter.k8s.aws) and not one of the keys users may constrain. `karpenter.sh/nodepool` is
/// not restricted here (NodeClaims carry it); the exact per-field rules, including that a
/// NodePool may not name it, are [`crate::validation::restricted_label_problem`].
pub fn is_restricted_label(key: &str) -> bool {
    crate::validation::restricted_label_problem(key, crate::validation::LabelUse::NodeClaimRequirement).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beta_aliases_normalize_to_stable_keys() {
        assert_eq!(normalize_key(BETA_ZONE), ZONE);
        assert_eq!(normalize_key("failure-domain.beta.kubernetes.io/region"), REGION);
        assert_eq!(normalize_key("beta.kubernetes.io/arch"), ARCH);
        assert_eq!(normalize_key("app"), "app");
    }

    #[test]
    fn restricted_domains() {
        assert!(is_restricted_label("karpenter.sh/foo"));
        assert!(is_restricted_label(HOSTNAME));
        assert!(is_restricted_label("kubernetes.io/custom"));
        assert!(!is_restricted_label(NODE_POOL));
        assert!(!is_restricted_label(CAPACITY_TYPE));
        assert!(!is_restricted_label("node.kubernetes.io/role"));
        assert!(!is_restricted_label("capacity-spread"));
        assert!(!is_restricted_label("example.com/team"));
        assert!(!is_restricted_label(INSTANCE_FAMILY));
        assert!(!is_restricted_label(BETA_ZONE));
        assert!(is_restricted_label(AWS_EC2_NODE_CLASS));
        assert!(is_restricted_label("example.k8s.io/x"));
        assert!(!is_restricted_label("example.kops.k8s.io/x"));
    }
}
