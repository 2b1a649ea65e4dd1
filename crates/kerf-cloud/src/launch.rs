//! What every provider decides the same way when it launches a NodeClaim: whether an instance
//! type's own labels meet the claim's requirements (zone and capacity type are per offering and
//! left to the caller), and deadlines on the provider's clock.

use std::time::Duration;

use kerf_api::labels;
use kerf_api::{InstanceType, Requirement, Requirements};

use crate::Timestamp;

/// Labels an instance type defines itself: a requirement on one of these that the type lacks
/// fails `In`; other keys (NodePool name, node class, user labels) are the claim's own.
fn is_type_label(key: &str) -> bool {
    key != labels::NODE_POOL
        && key != labels::AWS_EC2_NODE_CLASS
        && key != labels::TOPOLOGY_ZONE_ID
        && labels::WELL_KNOWN_LABELS.contains(&key)
}

/// Whether the type's own labels (and the provider's `region`) meet the claim's requirements.
/// Zone and capacity type are properties of offerings: the caller checks them per offering.
///
/// The instance-type requirement is checked first: a claim names its types (the provisioner
/// writes them), and that one lookup turns most of a catalog away before the rest of a type's
/// labels are read.
pub fn type_meets(reqs: &Requirements, t: &InstanceType, region: &str) -> bool {
    let meets = |key: &str, req: &Requirement| {
        if key == labels::ZONE || key == labels::CAPACITY_TYPE {
            return true;
        }
        if key == labels::REGION {
            return req.matches(Some(region));
        }
        match t.labels.get(key) {
            Some(v) => req.matches(Some(v)),
            None if is_type_label(key) => req.matches(None),
            None => true,
        }
    };
    reqs.get(labels::INSTANCE_TYPE).is_none_or(|r| meets(labels::INSTANCE_TYPE, r))
        && reqs.iter().all(|(key, req)| key == labels::INSTANCE_TYPE || meets(key, req))
}

/// `t + d`, saturating at the clock's range instead of failing.
pub fn add(t: Timestamp, d: Duration) -> Timestamp {
    let ms = t.as_millisecond().saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    Timestamp::from_millisecond(ms).unwrap_or(t)
}
