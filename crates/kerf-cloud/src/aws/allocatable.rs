//! Capacity and overhead of an AWS instance as Karpenter computes them, so that kerf's
//! allocatable matches what Karpenter (and then the kubelet) reports.
//!
//! - memory capacity: the type's memory, less 64 MiB on Graviton (arm64) for the kernel's
//!   contiguous-memory reserve, less the VM overhead (7.5%, rounded up to a MiB);
//! - pods: ENI-limited (`ENIs × (IPv4 per ENI − 1) + 2`; 110 on Windows), or kubelet `maxPods`;
//!   `podsPerCore` caps either at `podsPerCore × vCPUs` (except on Bottlerocket, which ignores it);
//! - ephemeral-storage: the root volume (20Gi, 50Gi on Windows, unless the node class maps it);
//! - attachable EBS volumes (`attachable-volumes-aws-ebs`): the type's EBS attachment limit
//!   less the volumes the node launches with (the node class's EBS block devices, at least the
//!   root volume), as the EBS CSI driver reports the node's limit;
//! - kube-reserved: CPU 6% of the first core, 1% of the second, 0.5% of cores 3–4, 0.25% of the
//!   rest; memory 11Mi per pod + 255Mi; ephemeral-storage 1Gi; each overridable per resource;
//! - system-reserved: only what the node class sets;
//! - eviction threshold: memory 100Mi and nodefs 10% of the root volume, replaced per signal by
//!   `evictionHard` / `evictionSoft` (the larger of the two; Windows kubelets have no soft
//!   eviction, so there `evictionSoft` is ignored), absolute or a percentage.
//!
//! The float steps follow the same order of operations as Karpenter so that rounding agrees.

use kerf_api::ec2nodeclass::{AmiFamily, BlockDeviceMapping, InstanceStorePolicy, KubeletConfiguration};
use kerf_api::resources::{
    AMD_GPU, ATTACHABLE_VOLUMES_EBS, AWS_NEURON, AWS_NEURON_CORE, CPU, EFA, EPHEMERAL_STORAGE, HABANA_GAUDI, MEMORY,
    NVIDIA_GPU, PODS,
};
use kerf_api::{EC2NodeClass, Quantity, ResourceList};

use super::catalog::TypeInfo;
use super::windows;

const MIB: i64 = 1024 * 1024;
const GIB: i64 = 1024 * MIB;

/// Share of memory the hypervisor and OS keep (Karpenter's `vmMemoryOverheadPercent` default).
pub const VM_MEMORY_OVERHEAD_PERCENT: f64 = 0.075;
/// Root volume size when the node class does not map one.
pub const DEFAULT_ROOT_VOLUME_BYTES: i64 = 20 * GIB;
/// Graviton kernels reserve this much for the contiguous memory allocator.
pub const GRAVITON_CMA_RESERVED_MIB: i64 = 64;

const MEMORY_AVAILABLE: &str = "memory.available";
const NODEFS_AVAILABLE: &str = "nodefs.available";

/// A kubelet setting of the node class that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("EC2NodeClass {node_class}: spec.kubelet.{field}: {problem}")]
pub struct KubeletError {
    pub node_class: String,
    pub field: String,
    pub problem: String,
}

/// What of an EC2NodeClass shapes an instance's capacity and overhead.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeClassSettings {
    /// The node class's name, for error messages (`""` when there is none).
    pub name: String,
    pub kubelet: KubeletConfiguration,
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    pub ami_family: Option<AmiFamily>,
    pub instance_store_policy: Option<InstanceStorePolicy>,
}

impl NodeClassSettings {
    /// Settings of `node_class`, or Karpenter's defaults when there is none.
    pub fn from_node_class(node_class: Option<&EC2NodeClass>) -> Self {
        let Some(nc) = node_class else { return Self::default() };
        let spec = &nc.spec;
        // v1 node classes usually name the family through an AMI alias (`al2023@latest`).
        let ami_family = spec.ami_family.or_else(|| {
            spec.ami_selector_terms.iter().find_map(|t| {
                let alias = t.alias.as_deref()?;
                let family = alias.split('@').next().unwrap_or(alias).to_ascii_lowercase();
                match family.as_str() {
                    "al2" => Some(AmiFamily::AL2),
                    "al2023" => Some(AmiFamily::AL2023),
                    "bottlerocket" => Some(AmiFamily::Bottlerocket),
                    "windows2019" => Some(AmiFamily::Windows2019),
                    "windows2022" => Some(AmiFamily::Windows2022),
                    "windows2025" => Some(AmiFamily::Windows2025),
                    _ => None,
                }
            })
        });
        NodeClassSettings {
            name: nc.name().to_string(),
            kubelet: spec.kubelet.clone().unwrap_or_default(),
            block_device_mappings: spec.block_device_mappings.clone(),
            ami_family,
            instance_store_policy: spec.instance_store_policy,
        }
    }

    fn error(&self, field: impl Into<String>, problem: impl Into<String>) -> KubeletError {
        KubeletError { node_class: self.name.clone(), field: field.into(), problem: problem.into() }
    }
}

/// Pods the VPC CNI can address: each ENI's IPv4 addresses less its primary one, plus two for
/// host-network pods.
pub fn eni_limited_pods(enis: i64, ipv4_per_eni: i64) -> i64 {
    enis * (ipv4_per_eni - 1) + 2
}

/// The node's pod limit: kubelet `maxPods`, else the ENI limit (110 on Windows, whose nodes do
/// not size pod density by ENIs), capped by `podsPerCore × vCPUs`. Bottlerocket has no kubelet
/// setting to carry podsPerCore, so there it is ignored, as Karpenter does.
pub fn max_pods(info: &TypeInfo, settings: &NodeClassSettings) -> i64 {
    let family = settings.ami_family;
    let windows = windows::is_windows(family);
    let mut count = match settings.kubelet.max_pods {
        Some(m) => i64::from(m),
        None if windows => 110,
        None => eni_limited_pods(info.enis, info.ipv4_per_eni),
    };
    if let Some(ppc) = settings.kubelet.pods_per_core
        && ppc > 0
        && family != Some(AmiFamily::Bottlerocket)
    {
        count = count.min(i64::from(ppc) * info.vcpu);
    }
    count
}

/// Memory the OS sees, in MiB: the type's memory less the Graviton reserve and the VM overhead.
pub fn memory_capacity_mib(info: &TypeInfo) -> i64 {
    let mut mib = info.memory_mib;
    if info.arch == "arm64" {
        mib -= GRAVITON_CMA_RESERVED_MIB;
    }
    let bytes = mib * MIB;
    let overhead = (bytes as f64 * VM_MEMORY_OVERHEAD_PERCENT / 1024.0 / 1024.0).ceil() as i64;
    mib - overhead
}

/// Kube-reserved CPU in millicores for a node with `cpu_millis` of CPU.
pub fn kube_reserved_cpu_millis(cpu_millis: i64) -> i64 {
    const RANGES: [(i64, i64, f64); 4] =
        [(0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 31, 0.0025)];
    let mut total = 0;
    for (start, end, share) in RANGES {
        if cpu_millis >= start {
            let span = if cpu_millis < end { cpu_millis - start } else { end - start };
            // Each range's share is truncated to whole millicores on its own.
            total += (span as f64 * share) as i64;
        }
    }
    total
}

/// The root volume size in bytes (or the instance store when the node class RAIDs it).
pub fn ephemeral_storage(info: &TypeInfo, settings: &NodeClassSettings) -> Quantity {
    if settings.instance_store_policy == Some(InstanceStorePolicy::RAID0)
        && let Some(gb) = info.local_nvme_gb
    {
        return Quantity::from_units(gb * 1_000_000_000);
    }
    let mappings = &settings.block_device_mappings;
    if !mappings.is_empty() {
        let size = |m: &BlockDeviceMapping| m.ebs.as_ref().and_then(|e| e.volume_size);
        if let Some(q) = mappings.iter().find(|m| m.root_volume == Some(true)).and_then(size) {
            return q;
        }
        match settings.ami_family {
            // A custom AMI's root device is unknown: the last mapping is the best guess.
            Some(AmiFamily::Custom) => {
                if let Some(q) = mappings.last().and_then(size) {
                    return q;
                }
            }
            family => {
                let device = match family {
                    Some(AmiFamily::Bottlerocket) => "/dev/xvdb",
                    f if windows::is_windows(f) => windows::ROOT_DEVICE,
                    _ => "/dev/xvda",
                };
                if let Some(q) = mappings.iter().find(|m| m.device_name.as_deref() == Some(device)).and_then(size) {
                    return q;
                }
            }
        }
    }
    if windows::is_windows(settings.ami_family) {
        return Quantity::from_bytes(windows::DEFAULT_ROOT_VOLUME_GIB * GIB);
    }
    Quantity::from_bytes(DEFAULT_ROOT_VOLUME_BYTES)
}

/// EBS attachments of a type when the catalog does not know them: the Nitro limit of 28 shared
/// with the primary ENI and an NVMe instance store, or the 40 Xen types take.
const NITRO_SHARED_ATTACHMENTS: i64 = 28;
const XEN_ATTACHMENTS: i64 = 40;

/// EBS volumes a node of this type can attach for pods: its attachment limit (from the
/// catalog; else the Nitro or Xen rule) less the node class's EBS block devices (at least the
/// root volume), which are attached at launch.
pub fn attachable_ebs_volumes(info: &TypeInfo, settings: &NodeClassSettings) -> i64 {
    let most = info.max_ebs_attachments.unwrap_or(if info.hypervisor == "xen" {
        XEN_ATTACHMENTS
    } else {
        NITRO_SHARED_ATTACHMENTS - 1 - i64::from(info.local_nvme_gb.is_some())
    });
    let at_launch = settings.block_device_mappings.iter().filter(|m| m.ebs.is_some()).count().max(1) as i64;
    (most - at_launch).max(0)
}

/// What the instance has: cpu, memory, pods, ephemeral-storage, attachable EBS volumes and its
/// accelerators.
pub fn capacity(info: &TypeInfo, settings: &NodeClassSettings) -> ResourceList {
    let mut c = ResourceList::new()
        .with(CPU, Quantity::from_units(info.vcpu))
        .with(MEMORY, Quantity::from_mebibytes(memory_capacity_mib(info)))
        .with(PODS, Quantity::from_units(max_pods(info, settings)))
        .with(EPHEMERAL_STORAGE, ephemeral_storage(info, settings))
        .with(ATTACHABLE_VOLUMES_EBS, Quantity::from_units(attachable_ebs_volumes(info, settings)));
    if let Some(gpu) = &info.gpu {
        let resource = match gpu.manufacturer.as_str() {
            "nvidia" => Some(NVIDIA_GPU),
            "amd" => Some(AMD_GPU),
            "habana" => Some(HABANA_GAUDI),
            _ => None,
        };
        if let Some(r) = resource {
            c.set(r, Quantity::from_units(gpu.count));
        }
    }
    if let Some(n) = &info.neuron {
        c.set(AWS_NEURON, Quantity::from_units(n.count));
        if n.cores > 0 {
            c.set(AWS_NEURON_CORE, Quantity::from_units(n.cores));
        }
    }
    if let Some(efa) = info.efa {
        c.set(EFA, Quantity::from_units(efa));
    }
    c
}

/// kube-reserved + system-reserved + eviction threshold for an instance with `capacity`.
pub fn overhead(capacity: &ResourceList, settings: &NodeClassSettings) -> Result<ResourceList, KubeletError> {
    let kubelet = &settings.kubelet;
    let pods = capacity.get(PODS).value_ceil();
    let mut kube_reserved = ResourceList::new()
        .with(CPU, Quantity::from_milli(kube_reserved_cpu_millis(capacity.get(CPU).milli_ceil())))
        .with(MEMORY, Quantity::from_mebibytes(11 * pods + 255))
        .with(EPHEMERAL_STORAGE, Quantity::from_bytes(GIB));
    for (k, v) in &kubelet.kube_reserved {
        if v.is_negative() {
            return Err(settings.error(format!("kubeReserved[{k}]"), format!("{v} must not be negative")));
        }
        kube_reserved.set(k.clone(), *v);
    }
    let mut system_reserved = ResourceList::new();
    for (k, v) in &kubelet.system_reserved {
        if v.is_negative() {
            return Err(settings.error(format!("systemReserved[{k}]"), format!("{v} must not be negative")));
        }
        system_reserved.set(k.clone(), *v);
    }
    let eviction = eviction_threshold(capacity, settings)?;
    let mut total = kube_reserved;
    total.add(&system_reserved);
    total.add(&eviction);
    Ok(total)
}

/// The memory and nodefs eviction thresholds as quantities.
pub fn eviction_threshold(capacity: &ResourceList, settings: &NodeClassSettings) -> Result<ResourceList, KubeletError> {
    let memory = capacity.get(MEMORY);
    let storage = capacity.get(EPHEMERAL_STORAGE);
    let mut threshold = ResourceList::new()
        .with(MEMORY, Quantity::from_mebibytes(100))
        .with(EPHEMERAL_STORAGE, percent_of(storage, 10.0));
    let kubelet = &settings.kubelet;
    let mut overrides = ResourceList::new();
    let soft =
        if windows::is_windows(settings.ami_family) { None } else { Some(("evictionSoft", &kubelet.eviction_soft)) };
    for (field, signals) in [Some(("evictionHard", &kubelet.eviction_hard)), soft].into_iter().flatten() {
        let mut these = ResourceList::new();
        if let Some(v) = signals.get(MEMORY_AVAILABLE) {
            these.set(MEMORY, signal_value(memory, v, settings, field, MEMORY_AVAILABLE)?);
        }
        if let Some(v) = signals.get(NODEFS_AVAILABLE) {
            these.set(EPHEMERAL_STORAGE, signal_value(storage, v, settings, field, NODEFS_AVAILABLE)?);
        }
        overrides.max_with(&these);
    }
    for (k, v) in overrides.iter() {
        threshold.set(k.clone(), *v);
    }
    Ok(threshold)
}

fn percent_of(q: Quantity, percent: f64) -> Quantity {
    let bytes = (q.value_ceil() as f64 / 100.0 * percent).ceil();
    Quantity::from_bytes(bytes as i64).with_format(q.format())
}

fn signal_value(
    capacity: Quantity,
    value: &str,
    settings: &NodeClassSettings,
    field: &str,
    signal: &str,
) -> Result<Quantity, KubeletError> {
    let field = format!("{field}[{signal}]");
    if let Some(p) = value.trim().strip_suffix('%') {
        let percent: f64 = p
            .trim()
            .parse()
            .map_err(|_| settings.error(&field, format!("{value:?} is not a percentage such as 10%")))?;
        if !(0.0..=100.0).contains(&percent) {
            return Err(settings.error(&field, format!("{value:?} must be between 0% and 100%")));
        }
        return Ok(percent_of(capacity, percent));
    }
    let q = Quantity::parse(value).map_err(|e| settings.error(&field, e.to_string()))?;
    if q.is_negative() {
        return Err(settings.error(&field, format!("{value:?} must not be negative")));
    }
    Ok(q)
}
