//! Decoding objects read from a cluster (watches, lists, the answers to writes), where a field
//! kerf's types do not know is left out rather than the object refused.
//!
//! kerf's Karpenter types refuse unknown fields, so that `kerf validate`, scenarios and `kerf
//! serve` name a misspelt field as the API server's strict field validation does. An object a
//! cluster already holds is another matter: Karpenter's CRDs keep fields kerf's types lack
//! (`status.nodeClassObservedGeneration` of an older kerf, kubelet settings of a newer
//! Karpenter), and refusing the object would make kerf act as if it did not exist. Here each
//! unknown field is removed and named, and the rest decoded as usual; any other problem (a value
//! of the wrong type, an unknown enum value) still refuses the object.

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_path_to_error::Segment;

/// At most this many unknown fields are left out of one object before it is refused.
const MAX_IGNORED: usize = 100;

/// An object decoded from a cluster, and the fields left out of it.
#[derive(Debug, Clone, PartialEq)]
pub struct FromCluster<T> {
    pub object: T,
    /// Paths of the fields kerf's type does not know (`status.nodeClassObservedGeneration`,
    /// `spec.kubelet.shutdownGracePeriod`), in the order they were found.
    pub ignored: Vec<String>,
}

/// Decodes `value` as a `T`, leaving out the fields `T` does not know.
pub fn decode<T: DeserializeOwned>(value: Value) -> Result<FromCluster<T>, serde_json::Error> {
    // Nearly every object has no unknown field: decoded once, without tracking paths.
    let first = match T::deserialize(&value) {
        Ok(object) => return Ok(FromCluster { object, ignored: Vec::new() }),
        Err(e) => e,
    };
    if unknown_field(&first.to_string()).is_none() {
        return Err(first);
    }
    let mut value = value;
    let mut ignored = Vec::new();
    loop {
        let err = match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(object) => return Ok(FromCluster { object, ignored }),
            Err(e) => e,
        };
        let message = err.inner().to_string();
        let Some(field) = unknown_field(&message) else { return Err(err.into_inner()) };
        let mut segments: Vec<Segment> = err.path().iter().cloned().collect();
        if !matches!(segments.last(), Some(Segment::Map { key }) if key == field) {
            segments.push(Segment::Map { key: field.to_string() });
        }
        if ignored.len() >= MAX_IGNORED || !remove(&mut value, &segments) {
            return Err(err.into_inner());
        }
        ignored.push(path_of(&segments));
    }
}

/// The field serde's "unknown field `x`, expected ..." names.
fn unknown_field(message: &str) -> Option<&str> {
    message.strip_prefix("unknown field `")?.split('`').next()
}

/// `spec.kubelet.x`, `spec.disruption.budgets[0].x`.
fn path_of(segments: &[Segment]) -> String {
    let mut out = String::new();
    for s in segments {
        match s {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => out.push_str(".?"),
        }
    }
    out
}

/// Removes the map entry at `segments`; `false` when there is none.
fn remove(value: &mut Value, segments: &[Segment]) -> bool {
    let Some((Segment::Map { key }, parents)) = segments.split_last() else { return false };
    let mut cur = value;
    for s in parents {
        cur = match (s, cur) {
            (Segment::Map { key }, Value::Object(m)) => match m.get_mut(key) {
                Some(v) => v,
                None => return false,
            },
            (Segment::Seq { index }, Value::Array(a)) => match a.get_mut(*index) {
                Some(v) => v,
                None => return false,
            },
            _ => return false,
        };
    }
    match cur {
        Value::Object(m) => m.remove(key).is_some(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{EC2NodeClass, NodeClaim, NodePool};

    fn pool(extra_spec: Value, status: Value) -> Value {
        let mut spec = json!({
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []
            }},
            "disruption": {"budgets": [{"nodes": "1", "reasons": ["Drifted"]}]}
        });
        if let (Some(s), Value::Object(extra)) = (spec.as_object_mut(), extra_spec) {
            s.extend(extra);
        }
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": spec, "status": status})
    }

    #[test]
    fn unknown_fields_anywhere_are_left_out_and_named_and_the_rest_is_read() {
        let mut v = pool(json!({"futureKnob": {"a": 1}}), json!({"nodes": 2, "someNewCount": 3}));
        v["spec"]["disruption"]["budgets"][0]["comment"] = json!("x");
        v["spec"]["template"]["spec"]["newSetting"] = json!(true);
        let got: FromCluster<NodePool> = decode(v).unwrap();
        let mut ignored = got.ignored.clone();
        ignored.sort();
        assert_eq!(
            ignored,
            [
                "spec.disruption.budgets[0].comment",
                "spec.futureKnob",
                "spec.template.spec.newSetting",
                "status.someNewCount"
            ]
        );
        assert_eq!(got.object.status.as_ref().and_then(|s| s.nodes), Some(2));
        assert_eq!(got.object.spec.disruption.budgets[0].nodes, "1");
    }

    #[test]
    fn a_known_object_decodes_as_it_is_and_a_wrong_value_still_refuses_it() {
        let got: FromCluster<NodePool> = decode(pool(json!({}), json!({"nodes": 1}))).unwrap();
        assert!(got.ignored.is_empty());
        let mut bad = pool(json!({"futureKnob": 1}), json!({}));
        bad["spec"]["weight"] = json!("heavy");
        let e = decode::<NodePool>(bad).unwrap_err().to_string();
        assert!(e.contains("invalid type"), "{e}");
        let mut claim = json!({"metadata": {"name": "c"}, "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "a", "operator": "In", "values": ["b"], "weight": 3}]
        }});
        let got: FromCluster<NodeClaim> = decode(claim.clone()).unwrap();
        assert_eq!(got.ignored, ["spec.requirements[0].weight"]);
        claim["spec"]["requirements"][0]["operator"] = json!("Near");
        assert!(decode::<NodeClaim>(claim).is_err(), "an unknown operator is not a field to leave out");
    }

    #[test]
    fn kubelet_settings_of_a_newer_karpenter_are_left_out_of_a_node_class() {
        let v = json!({"metadata": {"name": "d"}, "spec": {
            "role": "R",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "kubelet": {"maxPods": 20, "shutdownGracePeriod": "30s", "maxPodsExpression": "min(110, max_pods)"}
        }});
        let mut got: FromCluster<EC2NodeClass> = decode(v).unwrap();
        got.ignored.sort();
        assert_eq!(got.ignored, ["spec.kubelet.maxPodsExpression", "spec.kubelet.shutdownGracePeriod"]);
        assert_eq!(got.object.spec.kubelet.as_ref().and_then(|k| k.max_pods), Some(20));
    }
}
