//! Resource lists (`{cpu: 1, memory: 2Gi}`) and their arithmetic.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::quantity::Quantity;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const PODS: &str = "pods";
/// The NodePool limit on the node count (`limits.nodes`).
pub const NODES: &str = "nodes";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const AMD_GPU: &str = "amd.com/gpu";
pub const AWS_NEURON: &str = "aws.amazon.com/neuron";
pub const AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
pub const HABANA_GAUDI: &str = "habana.ai/gaudi";
pub const EFA: &str = "vpc.amazonaws.com/efa";
pub const POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
/// EBS volumes a node can still attach for pods (kube-scheduler's NodeVolumeLimits; kerf keeps
/// the CSI driver's per-node count under this name: docs/design.md, "Volume attach limits").
pub const ATTACHABLE_VOLUMES_EBS: &str = "attachable-volumes-aws-ebs";

/// A map from resource name to quantity, ordered by name (so output is deterministic). Equal
/// (and hashed) by amounts, whatever their formats.
#[derive(Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ResourceList(pub BTreeMap<String, Quantity>);

/// Resource lists kept once per distinct list (equal in every amount and format): the replicas
/// of a workload ask for the same, and holders of a list per pod (kube-scheduler's views, the
/// scheduler's facts) would otherwise hold one copy per pod.
#[derive(Debug, Clone, Default)]
pub struct SharedLists(HashSet<Arc<ResourceList>, foldhash::fast::RandomState>);

impl SharedLists {
    /// `list`, or the equal list kept already. A list equal in amounts to a kept one but
    /// written in other formats (`1Gi` against `1073741824`) is handed back as it is.
    pub fn share(&mut self, list: Arc<ResourceList>) -> Arc<ResourceList> {
        match self.0.get(&*list) {
            Some(known) => {
                let same_formats = known.iter().zip(list.iter()).all(|((_, a), (_, b))| a.format() == b.format());
                if same_formats { Arc::clone(known) } else { list }
            }
            None => {
                self.0.insert(Arc::clone(&list));
                list
            }
        }
    }
}

/// One resource that does not fit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    pub resource: String,
    pub requested: Quantity,
    /// What is available; zero when the resource is absent.
    pub available: Quantity,
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} requested {}, available {}", self.resource, self.requested, self.available)
    }
}

impl ResourceList {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn get(&self, name: &str) -> Quantity {
        self.0.get(name).copied().unwrap_or(Quantity::ZERO)
    }

    pub fn set(&mut self, name: impl Into<String>, q: Quantity) {
        self.0.insert(name.into(), q);
    }

    pub fn with(mut self, name: impl Into<String>, q: Quantity) -> Self {
        self.set(name, q);
        self
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Quantity)> {
        self.0.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds every entry of `other` (saturating).
    pub fn add(&mut self, other: &ResourceList) {
        for (k, v) in &other.0 {
            // The name is copied only for a resource not listed yet.
            match self.0.get_mut(k.as_str()) {
                Some(e) => *e = e.saturating_add(v),
                None => {
                    self.0.insert(k.clone(), Quantity::ZERO.saturating_add(v));
                }
            }
        }
    }

    /// Subtracts every entry of `other`; results may be negative.
    pub fn sub(&mut self, other: &ResourceList) {
        for (k, v) in &other.0 {
            match self.0.get_mut(k.as_str()) {
                Some(e) => *e = e.saturating_sub(v),
                None => {
                    self.0.insert(k.clone(), Quantity::ZERO.saturating_sub(v));
                }
            }
        }
    }

    pub fn plus(&self, other: &ResourceList) -> ResourceList {
        let mut r = self.clone();
        r.add(other);
        r
    }

    pub fn minus(&self, other: &ResourceList) -> ResourceList {
        let mut r = self.clone();
        r.sub(other);
        r
    }

    /// Entry-wise maximum.
    pub fn max_with(&mut self, other: &ResourceList) {
        for (k, v) in &other.0 {
            let e = self.0.entry(k.clone()).or_insert(Quantity::ZERO);
            *e = (*e).max(*v);
        }
    }

    /// Every resource of `self` (a request) that exceeds `available`. A zero request never
    /// fails, even when the resource is absent.
    pub fn shortfalls(&self, available: &ResourceList) -> Vec<Shortfall> {
        self.0
            .iter()
            .filter(|(_, req)| !req.is_zero())
            .filter_map(|(k, req)| {
                let avail = available.get(k);
                (*req > avail).then(|| Shortfall { resource: k.clone(), requested: *req, available: avail })
            })
            .collect()
    }

    /// Whether this request fits in `available`.
    pub fn fits(&self, available: &ResourceList) -> bool {
        self.0.iter().all(|(k, req)| req.is_zero() || *req <= available.get(k))
    }

    /// Drops zero entries.
    pub fn without_zeros(mut self) -> Self {
        self.0.retain(|_, v| !v.is_zero());
        self
    }
}

impl fmt::Debug for ResourceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// `{"cpu":"1475m","memory":"1686Mi"}`, the compact form used in messages.
impl fmt::Display for ResourceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "\"{k}\":\"{v}\"")?;
        }
        f.write_str("}")
    }
}

impl<K: Into<String>> FromIterator<(K, Quantity)> for ResourceList {
    fn from_iter<T: IntoIterator<Item = (K, Quantity)>>(iter: T) -> Self {
        ResourceList(iter.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

impl schemars::JsonSchema for ResourceList {
    fn schema_name() -> Cow<'static, str> {
        "ResourceList".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let q = generator.subschema_for::<Quantity>();
        schemars::json_schema!({"type": "object", "additionalProperties": q})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rl(pairs: &[(&str, &str)]) -> ResourceList {
        pairs.iter().map(|(k, v)| (*k, Quantity::parse(v).unwrap())).collect()
    }

    #[test]
    fn equal_lists_are_shared_and_lists_written_in_other_formats_are_kept_apart() {
        let mut shared = SharedLists::default();
        let first = shared.share(Arc::new(rl(&[("cpu", "250m"), ("memory", "1Gi")])));
        let same = shared.share(Arc::new(rl(&[("cpu", "250m"), ("memory", "1Gi")])));
        assert!(Arc::ptr_eq(&first, &same));
        // Equal amounts in another format: the list as given, so it prints as it was written.
        let bytes = shared.share(Arc::new(rl(&[("cpu", "250m"), ("memory", "1073741824")])));
        assert!(!Arc::ptr_eq(&first, &bytes));
        assert_eq!(bytes.get("memory").to_string(), "1073741824");
        let other = shared.share(Arc::new(rl(&[("cpu", "500m"), ("memory", "1Gi")])));
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(other.get("cpu").to_string(), "500m");
    }

    #[test]
    fn fits_and_names_each_shortfall() {
        let req = rl(&[("cpu", "3310m"), ("memory", "3344Mi"), ("pods", "8"), (POD_ENI, "1")]);
        let avail = rl(&[("cpu", "7910m"), ("memory", "14162Mi"), ("pods", "58")]);
        assert!(!req.fits(&avail));
        let s = req.shortfalls(&avail);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].resource, POD_ENI);
        assert_eq!(s[0].to_string(), "vpc.amazonaws.com/pod-eni requested 1, available 0");
    }

    #[test]
    fn add_subtract_and_max() {
        let mut a = rl(&[("cpu", "1"), ("memory", "1Gi")]);
        a.add(&rl(&[("cpu", "500m"), ("pods", "1")]));
        assert_eq!(a.to_string(), r#"{"cpu":"1500m","memory":"1Gi","pods":"1"}"#);
        a.sub(&rl(&[("memory", "512Mi")]));
        assert_eq!(a.get("memory").canonical(), "512Mi");
        a.max_with(&rl(&[("cpu", "2"), ("memory", "100Mi")]));
        assert_eq!(a.get("cpu").canonical(), "2");
        assert_eq!(a.get("memory").canonical(), "512Mi");
    }
}
