//! NodeOverlays in the simulated cloud: the types it hands out to a NodePool and launches from,
//! priced and extended as the cluster's overlays say (one [`NodeOverlays`] applied, see
//! `kerf_api::overlay`), cached per node class and overlay context so a pass re-reads shared
//! types; and running instances repriced when the overlays change.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::aws::NodeClassSettings;
use crate::provider::CloudError;
use kerf_api::overlay::NodeOverlays;
use kerf_api::{EC2NodeClass, InstanceType, NodeClaim, NodePool, Offering};

use super::{Launched, SharedTypes, SimProvider, State};

/// (node class, context) → (the types overlays were applied to, the result).
pub(super) type OverlaidCache = BTreeMap<(String, BTreeMap<String, String>), (SharedTypes, SharedTypes)>;

/// `types` (a node class's) with `state`'s overlays applied as seen from `context`; `types` as
/// they are when no overlay is in force.
pub(super) fn overlaid(
    state: &mut State,
    key: &str,
    context: &BTreeMap<String, String>,
    types: SharedTypes,
) -> SharedTypes {
    if state.overlays.is_empty() {
        return types;
    }
    let cache_key = (key.to_string(), context.clone());
    if let Some((input, out)) = state.overlaid.get(&cache_key)
        && Arc::ptr_eq(input, &types)
    {
        return Arc::clone(out);
    }
    let out = Arc::new(state.overlays.apply_all(&types, context));
    state.overlaid.insert(cache_key, (types, Arc::clone(&out)));
    out
}

/// What overlay requirements read of a claim beyond its instance's type and offering: its
/// labels (the NodePool's name and template labels) and single-valued requirements. Empty
/// when no overlay is in force.
pub(super) fn claim_context(claim: &NodeClaim, overlays: &NodeOverlays) -> BTreeMap<String, String> {
    if overlays.is_empty() {
        return BTreeMap::new();
    }
    kerf_api::overlay::claim_context(claim)
}

/// Sets a running instance's price from its list price and `overlays`. An instance in a
/// capacity reservation keeps the reservation's declared price.
pub(super) fn reprice(overlays: &NodeOverlays, l: &mut Launched) {
    let i = &mut l.instance;
    if i.capacity_reservation.is_some() {
        return;
    }
    let context = claim_context(&l.claim, overlays);
    let offering = Offering {
        zone: i.zone.clone(),
        capacity_type: i.capacity_type.clone(),
        price: i.list_price,
        available: true,
        reservation: None,
    };
    i.price = overlays.offering_price(&i.instance_type, &offering, &context).price;
    i.overlays = overlays
        .applied_to(&i.instance_type, &i.zone, &i.capacity_type, &context)
        .into_iter()
        .map(str::to_string)
        .collect();
}

impl SimProvider {
    /// The instance types a NodePool of a node class may launch, with availability as of now and
    /// the NodeOverlays that apply to the pool (none without a pool).
    pub fn instance_types_seen_from(
        &self,
        node_class: Option<&EC2NodeClass>,
        node_pool: Option<&NodePool>,
    ) -> Result<Vec<Arc<InstanceType>>, CloudError> {
        let now = self.clock.now();
        let settings = NodeClassSettings::from_node_class(node_class);
        let key = node_class.map(|nc| nc.name().to_string()).unwrap_or_default();
        let mut state = self.lock();
        if node_class.is_some() {
            state.node_classes.insert(key.clone(), settings.clone());
        }
        let (_, market) = self.types_now(&mut state, &key, &settings)?;
        let mut base = Self::reachable(&mut state, &key, market);
        if let Some(pool) = node_pool.filter(|_| !state.overlays.is_empty()) {
            let context = kerf_api::overlay::pool_context(pool);
            base = overlaid(&mut state, &key, &context, base);
        }
        let types = Arc::new(Self::with_availability(&state, now, &base));
        // Reserved offerings at the reservations' declared prices, after the overlays.
        Ok(Arc::unwrap_or_clone(self.with_reservations(&state, &key, types, now)))
    }

    /// Uses `overlays` from now on: for the types callers read, for launches, and for the
    /// price of every running instance the cloud knows the price of.
    pub fn use_node_overlays(&self, overlays: Arc<NodeOverlays>) {
        let now = self.clock.now();
        let mut state = self.lock();
        state.overlays = Arc::clone(&overlays);
        state.overlaid.clear();
        let unpriced: Vec<String> = state.unpriced.keys().cloned().collect();
        for l in &mut state.instances {
            if !Self::observed_terminated(&l.instance, now) && !unpriced.contains(&l.instance.provider_id) {
                reprice(&overlays, l);
            }
        }
    }
}
