//! The requirements algebra: per label key, the set of values a node may carry.
//!
//! A requirement is a value set or a complement set ("anything but"), optionally bounded by
//! integer bounds (`Gt`/`Lt`/`Gte`/`Lte`), plus whether a node *without* the label satisfies it.
//! Requirements intersect (a NodeClaim's requirements are its NodePool's narrowed by its pods)
//! and are checked for compatibility with a precise error naming the key and both sides.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::labels::normalize_key;
use crate::{NodeSelectorRequirementWithMinValues, Operator};
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};

/// The allowed values of one label key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    /// When true, `values` are the excluded values and every other value is allowed.
    complement: bool,
    values: BTreeSet<String>,
    /// Values must be integers strictly greater than this.
    greater_than: Option<i64>,
    /// Values must be integers strictly less than this.
    less_than: Option<i64>,
    /// Whether a node without this label satisfies the requirement (NotIn, DoesNotExist).
    allows_absent: bool,
    /// Karpenter's minValues: the least number of distinct values across a claim's instance types.
    pub min_values: Option<i64>,
}

impl Requirement {
    /// Any value, or no label at all.
    pub fn any() -> Self {
        Requirement {
            complement: true,
            values: BTreeSet::new(),
            greater_than: None,
            less_than: None,
            allows_absent: true,
            min_values: None,
        }
    }

    /// Builds a requirement from an operator and its values. Bounds that are not integers make
    /// the requirement unsatisfiable (as kube-scheduler treats them as non-matching).
    pub fn new<S: AsRef<str>>(op: Operator, values: &[S]) -> Self {
        let set = || values.iter().map(|v| v.as_ref().to_string()).collect::<BTreeSet<_>>();
        let bound = || {
            if values.len() == 1 { values[0].as_ref().trim().parse::<i64>().ok() } else { None }
        };
        let mut r = Requirement::any();
        match op {
            Operator::In => {
                r.complement = false;
                r.values = set();
                r.allows_absent = false;
            }
            Operator::NotIn => r.values = set(),
            Operator::Exists => r.allows_absent = false,
            Operator::DoesNotExist => {
                r.complement = false;
                r.allows_absent = true;
            }
            Operator::Gt | Operator::Gte | Operator::Lt | Operator::Lte => {
                r.allows_absent = false;
                match bound() {
                    Some(n) => match op {
                        Operator::Gt => r.greater_than = Some(n),
                        Operator::Gte => r.greater_than = Some(n.saturating_sub(1)),
                        Operator::Lt => r.less_than = Some(n),
                        _ => r.less_than = Some(n.saturating_add(1)),
                    },
                    None => r.complement = false,
                }
            }
        }
        r.normalize();
        r
    }

    /// Exactly one value.
    pub fn single(value: impl Into<String>) -> Self {
        Requirement::new(Operator::In, &[value.into()])
    }

    fn normalize(&mut self) {
        if let (Some(g), Some(l)) = (self.greater_than, self.less_than)
            && l.saturating_sub(g) <= 1
        {
            // No integer fits strictly between the bounds.
            self.complement = false;
            self.values.clear();
            self.greater_than = None;
            self.less_than = None;
            return;
        }
        if !self.complement {
            let (g, l) = (self.greater_than, self.less_than);
            self.values.retain(|v| within(v, g, l));
            self.greater_than = None;
            self.less_than = None;
        } else if self.greater_than.is_some() || self.less_than.is_some() {
            // Excluded values outside the bounds are excluded anyway.
            let (g, l) = (self.greater_than, self.less_than);
            self.values.retain(|v| within(v, g, l));
        }
    }

    /// Whether a node labelled `value` satisfies this requirement.
    pub fn has(&self, value: &str) -> bool {
        if self.complement {
            !self.values.contains(value) && within(value, self.greater_than, self.less_than)
        } else {
            self.values.contains(value)
        }
    }

    /// Whether a node with (`Some`) or without (`None`) the label satisfies this requirement.
    pub fn matches(&self, value: Option<&str>) -> bool {
        match value {
            Some(v) => self.has(v),
            None => self.allows_absent,
        }
    }

    pub fn allows_absent(&self) -> bool {
        self.allows_absent
    }

    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// The allowed values when finite (`None` for a complement set).
    pub fn values(&self) -> Option<&BTreeSet<String>> {
        (!self.complement).then_some(&self.values)
    }

    /// The single allowed value, when exactly one.
    pub fn single_value(&self) -> Option<&str> {
        if !self.complement && self.values.len() == 1 { self.values.iter().next().map(String::as_str) } else { None }
    }

    /// Number of allowed values; `usize::MAX` for complement sets.
    pub fn len(&self) -> usize {
        if self.complement { usize::MAX } else { self.values.len() }
    }

    /// No value allowed (same as [`has_no_values`](Self::has_no_values)).
    pub fn is_empty(&self) -> bool {
        self.has_no_values()
    }

    /// No value allowed (absence may still be allowed: DoesNotExist).
    pub fn has_no_values(&self) -> bool {
        !self.complement && self.values.is_empty()
    }

    /// Neither any value nor absence satisfies it.
    pub fn is_unsatisfiable(&self) -> bool {
        self.has_no_values() && !self.allows_absent
    }

    pub fn is_any(&self) -> bool {
        *self == Requirement::any()
    }

    /// Both requirements at once.
    pub fn intersect(&self, other: &Requirement) -> Requirement {
        let greater_than = max_opt(self.greater_than, other.greater_than);
        let less_than = min_opt(self.less_than, other.less_than);
        let (complement, values) = match (self.complement, other.complement) {
            (true, true) => (true, self.values.union(&other.values).cloned().collect()),
            (true, false) => (false, other.values.iter().filter(|v| !self.values.contains(*v)).cloned().collect()),
            (false, true) => (false, self.values.iter().filter(|v| !other.values.contains(*v)).cloned().collect()),
            (false, false) => (false, self.values.intersection(&other.values).cloned().collect()),
        };
        // A finite set must also satisfy each side's bounds.
        let values: BTreeSet<String> = if complement {
            values
        } else {
            values
                .into_iter()
                .filter(|v| {
                    within(v, self.greater_than, self.less_than) && within(v, other.greater_than, other.less_than)
                })
                .collect()
        };
        let mut r = Requirement {
            complement,
            values,
            greater_than,
            less_than,
            allows_absent: self.allows_absent && other.allows_absent,
            min_values: max_opt(self.min_values, other.min_values),
        };
        r.normalize();
        r
    }

    /// Whether some node could satisfy both (a common value, or both allow absence).
    pub fn intersects(&self, other: &Requirement) -> bool {
        !self.intersect(other).is_unsatisfiable()
    }

    /// Back to node selector form (one or more entries for `key`).
    pub fn to_node_selector(&self, key: &str) -> Vec<NodeSelectorRequirementWithMinValues> {
        let mk = |operator, values: Vec<String>| NodeSelectorRequirementWithMinValues {
            key: key.to_string(),
            operator,
            values,
            min_values: self.min_values,
        };
        let values: Vec<String> = self.values.iter().cloned().collect();
        if !self.complement {
            return vec![if values.is_empty() && self.allows_absent {
                mk(Operator::DoesNotExist, vec![])
            } else {
                mk(Operator::In, values)
            }];
        }
        let mut out = Vec::new();
        if !values.is_empty() {
            out.push(mk(Operator::NotIn, values));
        }
        if let Some(g) = self.greater_than {
            out.push(mk(Operator::Gt, vec![g.to_string()]));
        }
        if let Some(l) = self.less_than {
            out.push(mk(Operator::Lt, vec![l.to_string()]));
        }
        if !self.allows_absent && out.iter().all(|r| r.operator == Operator::NotIn) {
            out.push(mk(Operator::Exists, vec![]));
        }
        out
    }
}

/// `In [a b]`, `NotIn [a]`, `Exists`, `DoesNotExist`, `Gt 4`, `Exists >4 <9`.
impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>| -> fmt::Result {
            f.write_str("[")?;
            for (i, v) in self.values.iter().enumerate() {
                if i > 0 {
                    f.write_str(" ")?;
                }
                f.write_str(v)?;
            }
            f.write_str("]")
        };
        if !self.complement {
            if self.values.is_empty() {
                return f.write_str(if self.allows_absent { "DoesNotExist" } else { "In []" });
            }
            f.write_str("In ")?;
            return list(f);
        }
        let mut parts = 0;
        if !self.values.is_empty() {
            f.write_str("NotIn ")?;
            list(f)?;
            parts += 1;
        }
        if let Some(g) = self.greater_than {
            if parts > 0 {
                f.write_str(" ")?;
            }
            write!(f, "Gt {g}")?;
            parts += 1;
        }
        if let Some(l) = self.less_than {
            if parts > 0 {
                f.write_str(" ")?;
            }
            write!(f, "Lt {l}")?;
            parts += 1;
        }
        if parts == 0 {
            f.write_str(if self.allows_absent { "Any" } else { "Exists" })?;
        }
        Ok(())
    }
}

fn within(v: &str, greater_than: Option<i64>, less_than: Option<i64>) -> bool {
    if greater_than.is_none() && less_than.is_none() {
        return true;
    }
    let Ok(n) = v.trim().parse::<i64>() else { return false };
    greater_than.is_none_or(|g| n > g) && less_than.is_none_or(|l| n < l)
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Why two sets of requirements cannot both hold: the key and each side's allowed values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("key {key}: {key} {left} conflicts with {key} {right}")]
pub struct Incompatible {
    pub key: String,
    /// The first side's requirement, e.g. `In [on-demand]`; `undefined` when it has none.
    pub left: String,
    pub right: String,
}

/// Requirements per label key (keys normalized: beta aliases map to the stable keys).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    reqs: BTreeMap<String, Requirement>,
}

impl Requirements {
    pub fn new() -> Self {
        Self::default()
    }

    /// From a NodePool's (or NodeClaim's) requirements; entries for the same key intersect.
    pub fn from_node_selector(reqs: &[NodeSelectorRequirementWithMinValues]) -> Requirements {
        let mut out = Requirements::new();
        for r in reqs {
            let mut req = Requirement::new(r.operator, &r.values);
            req.min_values = r.min_values;
            out.add(&r.key, req);
        }
        out
    }

    /// From a pod's `nodeSelector` or labels: each key `In [value]`.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Requirements {
        let mut out = Requirements::new();
        for (k, v) in labels {
            out.add(k, Requirement::single(v.clone()));
        }
        out
    }

    /// From the `matchExpressions` of one term of a pod's node affinity. Unknown operators make
    /// the term unsatisfiable. (`matchFields` name nodes, not labels: the predicates check them.)
    pub fn from_node_selector_term(term: &NodeSelectorTerm) -> Requirements {
        let mut out = Requirements::new();
        for e in term.match_expressions.iter().flatten() {
            out.add(&e.key, requirement_from_core(e));
        }
        out
    }

    /// Adds (intersects) one requirement.
    pub fn add(&mut self, key: &str, req: Requirement) {
        let key = normalize_key(key);
        match self.reqs.get_mut(key) {
            Some(cur) => *cur = cur.intersect(&req),
            None => {
                self.reqs.insert(key.to_string(), req);
            }
        }
    }

    /// Intersects every requirement of `other` into this one.
    pub fn add_all(&mut self, other: &Requirements) {
        for (k, r) in &other.reqs {
            self.add(k, r.clone());
        }
    }

    /// Both sets of requirements at once.
    pub fn intersect(&self, other: &Requirements) -> Requirements {
        let mut out = self.clone();
        out.add_all(other);
        out
    }

    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.reqs.get(normalize_key(key))
    }

    pub fn has_key(&self, key: &str) -> bool {
        self.reqs.contains_key(normalize_key(key))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Requirement)> {
        self.reqs.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.reqs.keys()
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    /// Whether `key=value` is allowed (an undefined key allows every value).
    pub fn allows(&self, key: &str, value: &str) -> bool {
        self.get(key).is_none_or(|r| r.has(value))
    }

    /// Whether a node with these labels satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|k| labels.get(k).map(String::as_str))
    }

    /// Whether a node whose label `k` is `label(k)` satisfies every requirement. An absent key
    /// fails In/Exists/Gt/Lt/Gte/Lte and passes NotIn/DoesNotExist.
    pub fn matches_with<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.reqs.iter().all(|(k, r)| r.matches(label(k)))
    }

    /// The first requirement a labelled node fails, as `(key, requirement, node's value)`.
    pub fn first_mismatch<'a>(
        &'a self,
        label: impl Fn(&str) -> Option<&'a str>,
    ) -> Option<(&'a str, &'a Requirement, Option<&'a str>)> {
        self.reqs.iter().find_map(|(k, r)| {
            let v = label(k);
            (!r.matches(v)).then_some((k.as_str(), r, v))
        })
    }

    /// Whether every key both define has a common value (or both allow absence). Keys only one
    /// side defines do not conflict here; see [`Requirements::compatible_strict`].
    pub fn compatible(&self, other: &Requirements) -> Result<(), Incompatible> {
        for (k, a) in &self.reqs {
            if let Some(b) = other.reqs.get(k)
                && !a.intersects(b)
            {
                return Err(Incompatible { key: k.clone(), left: a.to_string(), right: b.to_string() });
            }
        }
        Ok(())
    }

    /// Like [`compatible`](Self::compatible), and a key `other` requires but this side does not
    /// define conflicts unless `other` allows the label to be absent or `defined_elsewhere(key)`
    /// (e.g. the instance types supply that label).
    pub fn compatible_strict(
        &self,
        other: &Requirements,
        defined_elsewhere: impl Fn(&str) -> bool,
    ) -> Result<(), Incompatible> {
        self.compatible(other)?;
        for (k, b) in &other.reqs {
            if !self.reqs.contains_key(k) && !b.allows_absent() && !defined_elsewhere(k) {
                return Err(Incompatible { key: k.clone(), left: "undefined".to_string(), right: b.to_string() });
            }
        }
        Ok(())
    }

    /// Labels implied by single-valued requirements.
    pub fn single_valued_labels(&self) -> BTreeMap<String, String> {
        self.reqs.iter().filter_map(|(k, r)| r.single_value().map(|v| (k.clone(), v.to_string()))).collect()
    }

    /// Back to node selector form, sorted by key.
    pub fn to_node_selector(&self) -> Vec<NodeSelectorRequirementWithMinValues> {
        self.reqs.iter().filter(|(_, r)| !r.is_any()).flat_map(|(k, r)| r.to_node_selector(k)).collect()
    }

    /// The first key no node can satisfy.
    pub fn unsatisfiable_key(&self) -> Option<&str> {
        self.reqs.iter().find(|(_, r)| r.is_unsatisfiable()).map(|(k, _)| k.as_str())
    }
}

/// `key In [a b], other Exists`.
impl fmt::Display for Requirements {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, r)) in self.reqs.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k} {r}")?;
        }
        Ok(())
    }
}

/// A core/v1 node selector requirement (operator as a string).
pub fn requirement_from_core(e: &NodeSelectorRequirement) -> Requirement {
    match Operator::parse(&e.operator) {
        Some(op) => Requirement::new(op, e.values.as_deref().unwrap_or(&[])),
        None => Requirement::new::<&str>(Operator::In, &[]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn nsr(key: &str, op: Operator, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
        NodeSelectorRequirementWithMinValues {
            key: key.to_string(),
            operator: op,
            values: values.iter().map(|s| s.to_string()).collect(),
            min_values: None,
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn operators_on_an_undefined_key() {
        let empty = labels(&[]);
        for (op, vals, expect) in [
            (Operator::In, vec!["a"], false),
            (Operator::Exists, vec![], false),
            (Operator::Gt, vec!["1"], false),
            (Operator::Lt, vec!["1"], false),
            (Operator::Gte, vec!["1"], false),
            (Operator::Lte, vec!["1"], false),
            (Operator::NotIn, vec!["a"], true),
            (Operator::DoesNotExist, vec![], true),
        ] {
            let r = Requirements::from_node_selector(&[nsr("team", op, &vals)]);
            assert_eq!(r.matches(&empty), expect, "{op} on an absent key");
        }
    }

    #[test]
    fn integer_bounds_are_strict_and_inclusive() {
        let l = labels(&[("cpu", "4")]);
        let m = |op, v: &str| Requirements::from_node_selector(&[nsr("cpu", op, &[v])]).matches(&l);
        assert!(m(Operator::Gt, "3"));
        assert!(!m(Operator::Gt, "4"));
        assert!(m(Operator::Gte, "4"));
        assert!(!m(Operator::Lt, "4"));
        assert!(m(Operator::Lte, "4"));
        assert!(
            !Requirements::from_node_selector(&[nsr("cpu", Operator::Gt, &["3"])])
                .matches(&labels(&[("cpu", "large")]))
        );
    }

    #[test]
    fn intersection_of_in_and_not_in_and_bounds() {
        let r = Requirements::from_node_selector(&[
            nsr("size", Operator::In, &["1", "2", "8", "16"]),
            nsr("size", Operator::NotIn, &["2"]),
            nsr("size", Operator::Gt, &["1"]),
            nsr("size", Operator::Lte, &["8"]),
        ]);
        assert_eq!(r.get("size").unwrap().to_string(), "In [8]");
        assert_eq!(r.to_node_selector(), vec![nsr("size", Operator::In, &["8"])]);
    }

    #[test]
    fn beta_zone_key_is_the_zone_key() {
        let r = Requirements::from_node_selector(&[nsr(
            "failure-domain.beta.kubernetes.io/zone",
            Operator::In,
            &["us-west-2a"],
        )]);
        assert!(r.matches(&labels(&[("topology.kubernetes.io/zone", "us-west-2a")])));
    }

    #[test]
    fn incompatibility_names_the_key_and_both_sides() {
        let pool = Requirements::from_node_selector(&[nsr("capacity_type", Operator::In, &["spot"])]);
        let pod = Requirements::from_node_selector(&[nsr("capacity_type", Operator::In, &["on-demand"])]);
        let err = pool.compatible(&pod).unwrap_err();
        assert_eq!(err.key, "capacity_type");
        assert_eq!(
            err.to_string(),
            "key capacity_type: capacity_type In [spot] conflicts with capacity_type In [on-demand]"
        );
        let team = Requirements::from_node_selector(&[nsr("team", Operator::In, &["a"])]);
        let err = pool.compatible_strict(&team, |_| false).unwrap_err();
        assert_eq!(err.to_string(), "key team: team undefined conflicts with team In [a]");
        let not_team = Requirements::from_node_selector(&[nsr("team", Operator::NotIn, &["a"])]);
        assert!(pool.compatible_strict(&not_team, |_| false).is_ok());
    }

    #[test]
    fn does_not_exist_conflicts_with_in() {
        let a = Requirements::from_node_selector(&[nsr("gpu", Operator::DoesNotExist, &[])]);
        let b = Requirements::from_node_selector(&[nsr("gpu", Operator::In, &["true"])]);
        assert!(a.compatible(&b).is_err());
        let c = Requirements::from_node_selector(&[nsr("gpu", Operator::NotIn, &["true"])]);
        assert!(a.compatible(&c).is_ok());
    }

    #[test]
    fn min_values_carry_through_intersection() {
        let mut a = nsr("node.kubernetes.io/instance-type", Operator::Exists, &[]);
        a.min_values = Some(3);
        let r =
            Requirements::from_node_selector(&[a, nsr("node.kubernetes.io/instance-type", Operator::In, &["x", "y"])]);
        let got = r.get("node.kubernetes.io/instance-type").unwrap();
        assert_eq!(got.min_values, Some(3));
        assert_eq!(got.len(), 2);
    }

    fn arb_requirement() -> impl Strategy<Value = Requirement> {
        let vals = prop::collection::vec(prop_oneof![Just("1"), Just("2"), Just("5"), Just("a"), Just("b")], 0..4);
        let op = prop_oneof![
            Just(Operator::In),
            Just(Operator::NotIn),
            Just(Operator::Exists),
            Just(Operator::DoesNotExist),
            Just(Operator::Gt),
            Just(Operator::Lt),
            Just(Operator::Gte),
            Just(Operator::Lte),
        ];
        (op, vals, prop::option::of(1i64..4)).prop_map(|(op, vals, mv)| {
            let vals = if matches!(op, Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte) {
                vec![vals.first().copied().unwrap_or("2")]
            } else {
                vals
            };
            let mut r = Requirement::new(op, &vals);
            r.min_values = mv;
            r
        })
    }

    fn arb_requirements() -> impl Strategy<Value = Requirements> {
        prop::collection::vec((prop_oneof![Just("k1"), Just("k2"), Just("k3")], arb_requirement()), 0..4).prop_map(
            |entries| {
                let mut r = Requirements::new();
                for (k, req) in entries {
                    r.add(k, req);
                }
                r
            },
        )
    }

    const PROBES: [Option<&str>; 7] = [None, Some("0"), Some("1"), Some("2"), Some("5"), Some("a"), Some("b")];

    proptest! {
        #[test]
        fn intersection_is_commutative(a in arb_requirements(), b in arb_requirements()) {
            prop_assert_eq!(a.intersect(&b), b.intersect(&a));
        }

        #[test]
        fn intersection_is_idempotent(a in arb_requirements(), b in arb_requirements()) {
            prop_assert_eq!(a.intersect(&a), a.clone());
            let ab = a.intersect(&b);
            prop_assert_eq!(ab.intersect(&b), ab.clone());
        }

        #[test]
        fn intersection_is_associative(a in arb_requirements(), b in arb_requirements(), c in arb_requirements()) {
            prop_assert_eq!(a.intersect(&b).intersect(&c), a.intersect(&b.intersect(&c)));
        }

        #[test]
        fn intersection_matches_exactly_what_both_match(a in arb_requirement(), b in arb_requirement()) {
            let ab = a.intersect(&b);
            for p in PROBES {
                prop_assert_eq!(ab.matches(p), a.matches(p) && b.matches(p), "probe {:?}: {} & {} = {}", p, a, b, ab);
            }
        }

        #[test]
        fn compatible_iff_some_probe_matches_both(a in arb_requirement(), b in arb_requirement()) {
            // Over a value domain large enough to witness every satisfiable intersection.
            let witness = PROBES.iter().chain([Some("3"), Some("4"), Some("c"), Some("zz")].iter())
                .any(|p| a.matches(*p) && b.matches(*p));
            if witness { prop_assert!(a.intersects(&b)); }
            if !a.intersects(&b) { prop_assert!(!witness); }
        }
    }
}
