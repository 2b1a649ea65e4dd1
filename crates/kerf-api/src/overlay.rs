//! NodeOverlays applied to instance types: the one home of "the price of this offering after
//! overlays" and of the extended resources overlays add (docs/design.md, "NodeOverlay").
//!
//! [`NodeOverlays`] is built once from the cluster's overlays whenever they change: it drops
//! those that fail their checks, orders the rest by weight (higher first) then name, and finds
//! conflicts (two overlays of one weight that can select the same offering and set a different
//! price, or a different quantity of one resource: the one later by name is not applied, as
//! Karpenter does). Cloud providers then apply it where they hand out instance types and where
//! they launch, so provisioning, consolidation, launches and reports all read one price.
//!
//! Field-level merge, as Karpenter documents it: an offering's price comes from the first
//! overlay in that order that selects it and sets a price; each extended resource from the first
//! that selects the type and names it. An overlay selects an offering when its requirements
//! match the type's labels, the offering's zone and capacity type, and the context's labels (the
//! NodePool's name and template labels, or a NodeClaim's labels).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::labels;
use crate::nodeoverlay::{NodeOverlay, PriceChange};
use crate::{InstanceType, Offering, Requirements, ResourceList};

/// Why an overlay is or is not applied.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Valid and without conflict: applied wherever it selects.
    Applied,
    /// Its spec fails a check (the message names the field).
    Invalid(String),
    /// Of the same weight as `with`, which can select the same offerings and sets another value.
    Conflict { with: String, field: String },
}

impl Verdict {
    /// `(status, reason, message)` of the overlay's `ValidationSucceeded` condition.
    pub fn condition(&self) -> (&'static str, &'static str, String) {
        use crate::nodeoverlay::{REASON_CONFLICT, REASON_INVALID};
        match self {
            Verdict::Applied => ("True", "ValidationSucceeded", String::new()),
            Verdict::Invalid(why) => ("False", REASON_INVALID, why.clone()),
            Verdict::Conflict { with, field } => (
                "False",
                REASON_CONFLICT,
                format!("conflict with overlay {with:?}: same weight, overlapping requirements, different {field}"),
            ),
        }
    }
}

#[derive(Debug)]
struct Entry {
    name: String,
    weight: i32,
    reqs: Requirements,
    price: Option<PriceChange>,
    capacity: ResourceList,
}

/// The cluster's NodeOverlays, ready to apply.
#[derive(Debug, Default)]
pub struct NodeOverlays {
    /// Applied overlays, in precedence order (weight descending, then name).
    entries: Vec<Entry>,
    verdicts: BTreeMap<String, Verdict>,
}

/// An offering's price after overlays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OfferingPrice<'a> {
    pub price: f64,
    /// The cloud's price.
    pub list_price: f64,
    /// The overlay that set the price, if one did.
    pub overlay: Option<&'a str>,
}

impl NodeOverlays {
    /// The overlays in force among `overlays` (deleted ones are the caller's to leave out).
    pub fn new<'a>(overlays: impl IntoIterator<Item = &'a NodeOverlay>) -> NodeOverlays {
        let mut verdicts = BTreeMap::new();
        let mut candidates = Vec::new();
        for o in overlays {
            let problems = crate::nodeoverlay::validate(o);
            let price = o.price_change();
            match (problems.first(), price) {
                (Some(p), _) => {
                    verdicts.insert(o.name().to_string(), Verdict::Invalid(p.to_string()));
                }
                (None, Err(e)) => {
                    verdicts.insert(o.name().to_string(), Verdict::Invalid(e));
                }
                (None, Ok(price)) => candidates.push(Entry {
                    name: o.name().to_string(),
                    weight: o.weight(),
                    reqs: Requirements::from_node_selector(&o.node_selector()),
                    price,
                    capacity: o.spec.capacity.clone().unwrap_or_default(),
                }),
            }
        }
        candidates.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
        let mut entries: Vec<Entry> = Vec::with_capacity(candidates.len());
        for e in candidates {
            let conflict = entries
                .iter()
                .filter(|k| k.weight == e.weight && k.reqs.compatible(&e.reqs).is_ok())
                .find_map(|k| disagreement(k, &e).map(|field| (k.name.clone(), field)));
            match conflict {
                Some((with, field)) => {
                    verdicts.insert(e.name.clone(), Verdict::Conflict { with, field });
                }
                None => {
                    verdicts.insert(e.name.clone(), Verdict::Applied);
                    entries.push(e);
                }
            }
        }
        NodeOverlays { entries, verdicts }
    }

    /// No overlay applies anywhere.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Each overlay's verdict, by name.
    pub fn verdicts(&self) -> &BTreeMap<String, Verdict> {
        &self.verdicts
    }

    /// The price of offering `o` of type `t` (the cloud's type, before overlays) seen from
    /// `context` (see the module doc).
    pub fn offering_price<'s>(
        &'s self,
        t: &InstanceType,
        o: &Offering,
        context: &BTreeMap<String, String>,
    ) -> OfferingPrice<'s> {
        let setter = self.entries.iter().find(|e| e.price.is_some() && selects(e, t, Some(o), context));
        match setter {
            Some(e) => OfferingPrice {
                price: e.price.map_or(o.price, |p| p.apply(o.price)),
                list_price: o.price,
                overlay: Some(&e.name),
            },
            None => OfferingPrice { price: o.price, list_price: o.price, overlay: None },
        }
    }

    /// The overlays that apply to an instance of `t` bought as (`zone`, `capacity_type`): the
    /// one that set its price and those that added a resource to it, in precedence order.
    pub fn applied_to(
        &self,
        t: &InstanceType,
        zone: &str,
        capacity_type: &str,
        context: &BTreeMap<String, String>,
    ) -> Vec<&str> {
        let o = Offering {
            zone: zone.to_string(),
            capacity_type: capacity_type.to_string(),
            price: 0.0,
            available: true,
            reservation: None,
        };
        let price = self.entries.iter().find(|e| e.price.is_some() && selects(e, t, Some(&o), context));
        let mut taken: Vec<&str> = Vec::new();
        let mut out = Vec::new();
        for e in &self.entries {
            let adds = e.capacity.0.keys().any(|k| !taken.contains(&k.as_str())) && selects_type(e, t, context);
            if adds {
                taken.extend(e.capacity.0.keys().map(String::as_str));
            }
            if adds || price.is_some_and(|p| std::ptr::eq(p, e)) {
                out.push(e.name.as_str());
            }
        }
        out
    }

    /// `t` as overlays change it seen from `context`: each offering at its price after overlays
    /// and the extended resources overlays add in its capacity. The same `Arc` when no overlay
    /// selects it.
    pub fn apply(&self, t: &Arc<InstanceType>, context: &BTreeMap<String, String>) -> Arc<InstanceType> {
        if self.entries.is_empty() || !self.entries.iter().any(|e| selects_type(e, t, context)) {
            return Arc::clone(t);
        }
        let mut out = InstanceType::clone(t);
        for o in &mut out.offerings {
            o.price = self.offering_price(t, o, context).price;
        }
        let mut added: Vec<&str> = Vec::new();
        for e in self.entries.iter().filter(|e| !e.capacity.is_empty() && selects_type(e, t, context)) {
            for (k, q) in e.capacity.iter() {
                if !added.contains(&k.as_str()) {
                    added.push(k);
                    out.capacity.set(k.clone(), *q);
                }
            }
        }
        if out == **t { Arc::clone(t) } else { Arc::new(out) }
    }

    /// [`NodeOverlays::apply`] to each of `types`, in order.
    pub fn apply_all(&self, types: &[Arc<InstanceType>], context: &BTreeMap<String, String>) -> Vec<Arc<InstanceType>> {
        types.iter().map(|t| self.apply(t, context)).collect()
    }
}

/// What two overlays that may select the same offering set differently, if anything.
fn disagreement(a: &Entry, b: &Entry) -> Option<String> {
    if let (Some(x), Some(y)) = (a.price, b.price)
        && x != y
    {
        return Some("price".to_string());
    }
    a.capacity.iter().find(|(k, q)| b.capacity.0.get(*k).is_some_and(|r| r != *q)).map(|(k, _)| format!("capacity {k}"))
}

/// The labels a NodePool's instances carry before the type's own: its name and template labels
/// (what overlay requirements on `karpenter.sh/nodepool` and custom labels read).
pub fn pool_context(pool: &crate::NodePool) -> BTreeMap<String, String> {
    let mut out = Requirements::from_node_selector(&pool.spec.template.spec.requirements).single_valued_labels();
    out.extend(pool.spec.template.metadata.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
    out.insert(labels::NODE_POOL.to_string(), pool.name().to_string());
    out
}

/// What overlay requirements read of a NodeClaim beyond its instance's type and offering: its
/// labels (the NodePool's name and template labels) and single-valued requirements.
pub fn claim_context(claim: &crate::NodeClaim) -> BTreeMap<String, String> {
    let mut out = Requirements::from_node_selector(&claim.spec.requirements).single_valued_labels();
    out.extend(claim.metadata.labels.iter().flatten().map(|(k, v)| (k.clone(), v.clone())));
    out
}

/// Whether `e` selects offering `o` of `t` (`None`: the type, whatever the offering).
fn selects(e: &Entry, t: &InstanceType, o: Option<&Offering>, context: &BTreeMap<String, String>) -> bool {
    e.reqs.iter().all(|(key, req)| {
        let value = match key.as_str() {
            labels::ZONE => match o {
                Some(o) => Some(o.zone.as_str()),
                None => return true,
            },
            labels::CAPACITY_TYPE => match o {
                Some(o) => Some(o.capacity_type.as_str()),
                None => return true,
            },
            k => t.labels.get(k).or_else(|| context.get(k)).map(String::as_str),
        };
        req.matches(value)
    })
}

/// Whether `e` selects `t` with at least one of its offerings (or, for a type without
/// offerings, by its labels alone).
fn selects_type(e: &Entry, t: &InstanceType, context: &BTreeMap<String, String>) -> bool {
    if !selects(e, t, None, context) {
        return false;
    }
    let offering_keys = e.reqs.has_key(labels::ZONE) || e.reqs.has_key(labels::CAPACITY_TYPE);
    !offering_keys || t.offerings.is_empty() || t.offerings.iter().any(|o| selects(e, t, Some(o), context))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quantity;

    fn overlay(yaml: &str) -> NodeOverlay {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    fn itype(name: &str, family: &str, prices: &[(&str, f64)]) -> Arc<InstanceType> {
        Arc::new(InstanceType {
            name: name.to_string(),
            labels: [
                (labels::INSTANCE_TYPE.to_string(), name.to_string()),
                ("karpenter.k8s.aws/instance-family".to_string(), family.to_string()),
            ]
            .into(),
            capacity: ResourceList::new().with("cpu", Quantity::from_units(2)),
            overhead: ResourceList::new(),
            offerings: prices
                .iter()
                .map(|&(ct, price)| Offering {
                    zone: "us-west-2a".to_string(),
                    capacity_type: ct.to_string(),
                    price,
                    available: true,
                    reservation: None,
                })
                .collect(),
            price_estimated: false,
        })
    }

    const SAVINGS: &str = "
metadata: {name: savings}
spec:
  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}]
  priceAdjustment: \"-30%\"
";

    #[test]
    fn a_percentage_overlay_prices_the_offerings_it_selects_and_leaves_others() {
        let set = NodeOverlays::new([&overlay(SAVINGS)]);
        let m5 = itype("m5.large", "m5", &[("on-demand", 0.096), ("spot", 0.04)]);
        let c5 = itype("c5.large", "c5", &[("on-demand", 0.085)]);
        let ctx = BTreeMap::new();
        let m5o = set.apply(&m5, &ctx);
        assert!((m5o.offerings[0].price - 0.0672).abs() < 1e-9);
        assert!((m5o.offerings[1].price - 0.028).abs() < 1e-9);
        assert!(Arc::ptr_eq(&set.apply(&c5, &ctx), &c5), "an unselected type is handed back as it is");
        let priced = set.offering_price(&m5, &m5.offerings[0], &ctx);
        assert_eq!((priced.list_price, priced.overlay), (0.096, Some("savings")));
    }

    #[test]
    fn the_higher_weight_sets_the_price_and_capacities_of_both_merge() {
        let a = overlay(
            "
metadata: {name: overlay-a}
spec:
  weight: 5
  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}]
  priceAdjustment: \"-10%\"
  capacity: {hugepages-2Mi: 50Mi}
",
        );
        let b = overlay(
            "
metadata: {name: overlay-b}
spec:
  weight: 10
  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}]
  priceAdjustment: \"-20%\"
  capacity: {custom-device/gpu: 1}
",
        );
        let set = NodeOverlays::new([&a, &b]);
        let m5 = itype("m5.large", "m5", &[("on-demand", 0.1)]);
        let out = set.apply(&m5, &BTreeMap::new());
        assert!((out.offerings[0].price - 0.08).abs() < 1e-9);
        assert_eq!(out.capacity.get("hugepages-2Mi").canonical(), "50Mi");
        assert_eq!(out.capacity.get("custom-device/gpu").canonical(), "1");
        assert_eq!(set.applied_to(&m5, "us-west-2a", "on-demand", &BTreeMap::new()), ["overlay-b", "overlay-a"]);
    }

    #[test]
    fn same_weight_overlays_that_overlap_and_disagree_leave_the_later_name_unapplied() {
        let a = overlay(
            "
metadata: {name: alpha}
spec:
  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5, c5]}]
  price: \"0.01\"
",
        );
        let b = overlay(
            "
metadata: {name: beta}
spec:
  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [m5]}]
  price: \"0.02\"
",
        );
        let c = overlay(
            "
metadata: {name: gamma}
spec:
  requirements: [{key: karpenter.k8s.aws/instance-family, operator: In, values: [r5]}]
  price: \"0.03\"
",
        );
        let set = NodeOverlays::new([&c, &b, &a]);
        assert_eq!(set.verdicts()["alpha"], Verdict::Applied);
        assert_eq!(set.verdicts()["gamma"], Verdict::Applied, "disjoint requirements do not conflict");
        let Verdict::Conflict { with, field } = &set.verdicts()["beta"] else { panic!("{:?}", set.verdicts()) };
        assert_eq!((with.as_str(), field.as_str()), ("alpha", "price"));
        let m5 = itype("m5.large", "m5", &[("on-demand", 0.1)]);
        assert_eq!(set.apply(&m5, &BTreeMap::new()).offerings[0].price, 0.01);
    }

    #[test]
    fn capacity_type_and_nodepool_requirements_select_offerings_and_pools() {
        let spot_only = overlay(
            "
metadata: {name: spot-discount}
spec:
  requirements:
    - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
    - {key: karpenter.sh/nodepool, operator: In, values: [batch]}
  price: \"0.001\"
",
        );
        let set = NodeOverlays::new([&spot_only]);
        let m5 = itype("m5.large", "m5", &[("on-demand", 0.1), ("spot", 0.04)]);
        let batch: BTreeMap<String, String> = [(labels::NODE_POOL.to_string(), "batch".to_string())].into();
        let out = set.apply(&m5, &batch);
        assert_eq!((out.offerings[0].price, out.offerings[1].price), (0.1, 0.001));
        let web: BTreeMap<String, String> = [(labels::NODE_POOL.to_string(), "web".to_string())].into();
        assert!(Arc::ptr_eq(&set.apply(&m5, &web), &m5));
    }

    #[test]
    fn an_invalid_overlay_is_not_applied_and_says_why() {
        let bad = overlay(
            "
metadata: {name: bad}
spec:
  requirements: []
  capacity: {cpu: \"2\"}
",
        );
        let set = NodeOverlays::new([&bad]);
        assert!(set.is_empty());
        let Verdict::Invalid(why) = &set.verdicts()["bad"] else { panic!() };
        assert!(why.contains("spec.capacity.cpu"), "{why}");
    }
}
