//! Label selector (`matchLabels` / `matchExpressions`) matching, as workloads, disruption
//! budgets and pod (anti-)affinity terms select pods.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether a label selector matches labels. `None` (a null selector) matches nothing; an empty
/// selector matches everything.
pub fn selector_matches(sel: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = sel else { return false };
    for (k, v) in sel.match_labels.iter().flatten() {
        if labels.get(k) != Some(v) {
            return false;
        }
    }
    for e in sel.match_expressions.iter().flatten() {
        let have = labels.get(&e.key);
        let vals = e.values.as_deref().unwrap_or(&[]);
        let ok = match e.operator.as_str() {
            "In" => have.is_some_and(|h| vals.contains(h)),
            "NotIn" => have.is_none_or(|h| !vals.contains(h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}
