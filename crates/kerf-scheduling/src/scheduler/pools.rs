//! NodePools as the Scheduler sees them. A [`Pool`] is three parts, each with the functions
//! that work on it: its [`Rules`] (requirements, labels, taints, minValues), its [`TypeTable`]
//! (instance types with allocatable, capacity, and per type the DaemonSet overhead and what is
//! left for pods) and its [`Limits`] (what is left of them; a query's new claims use them up).
//! [`Pools`] holds the pools by weight with what is cached per interned requirement set: the
//! types it admits and their price order, and the CapacityQuotas every pool shares (`quotas`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::{Index, IndexMut};
use std::sync::Arc;

use kerf_api::SlimPod;
use kerf_api::labels::{CAPACITY_TYPE, HOSTNAME, INSTANCE_TYPE, NODE_POOL, ZONE};
use kerf_api::launch;
use kerf_api::resources::PODS;
use kerf_api::{NodePool, Operator, ResourceList, Taint};

use super::ids::{IxVec, PoolIx};
use super::interning::{Bits, Interned};
use super::quotas::{PoolQuota, QuotaHold, Quotas};
use super::resources::Resources;
use super::resources::{Matrix, to_units, type_fits};
use crate::instance::InstanceType;
use crate::model::SchedulingInput;
use crate::pod::{self, HostPort};
use crate::requirements::{Requirement, Requirements};

/// The NodePools by weight, and what is cached per pool and interned requirement set.
#[derive(Default)]
pub(super) struct Pools {
    pub(super) all: IxVec<PoolIx, Pool>,
    /// The types of a pool an interned requirement set admits.
    pub(super) compat_cache: HashMap<(PoolIx, u32), Arc<Bits>>,
    /// The price order of those types.
    pub(super) price_cache: HashMap<(PoolIx, u32), Arc<PriceOrder>>,
    /// What is left of the CapacityQuotas, shared by the pools.
    pub(super) quotas: Quotas,
}

impl Index<PoolIx> for Pools {
    type Output = Pool;
    fn index(&self, p: PoolIx) -> &Pool {
        &self.all[p]
    }
}

impl IndexMut<PoolIx> for Pools {
    fn index_mut(&mut self, p: PoolIx) -> &mut Pool {
        &mut self.all[p]
    }
}

/// One NodePool: its rules, its instance-type table and what is left of its limits, each a
/// part with the functions that work on it.
pub(super) struct Pool {
    pub(super) name: String,
    pub(super) node_pool: Arc<NodePool>,
    pub(super) rules: Rules,
    pub(super) table: TypeTable,
    pub(super) limits: Limits,
    /// The CapacityQuotas that select some of its types, with those types.
    pub(super) quotas: Vec<PoolQuota>,
}

/// What a NodePool asks of its nodes and gives them: requirements, labels, taints, minValues.
pub(super) struct Rules {
    /// Pool requirements plus template labels plus `karpenter.sh/nodepool In [name]`.
    pub(super) reqs: Requirements,
    /// `reqs`, interned when first needed (interning order decides value ids).
    pub(super) req_id: Option<u32>,
    /// Keys the pool itself defines (requirements or template labels).
    pub(super) defined_keys: BTreeSet<String>,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) taints: Vec<Taint>,
    pub(super) startup_taints: Vec<Taint>,
    pub(super) min_values: Vec<(String, usize)>,
}

/// A NodePool's instance types and what each holds, in dense resource vectors.
pub(super) struct TypeTable {
    /// Sorted by cheapest available offering, then name.
    pub(super) types: Vec<Arc<InstanceType>>,
    /// Per type (row), per resource.
    pub(super) alloc: Matrix,
    pub(super) capacity: Matrix,
    /// Componentwise largest capacity, allocatable, and free allocatable (after DaemonSets)
    /// over the types.
    pub(super) max_capacity: Vec<i64>,
    pub(super) largest_alloc: Vec<i64>,
    pub(super) max_alloc: Vec<i64>,
    /// Keys some instance type labels (plus zone and capacity type from offerings, and the
    /// capacity reservation labels when an offering is reserved).
    pub(super) type_keys: BTreeSet<String>,
    /// Per type, per resource: the requests of the DaemonSet pods that would run on each type,
    /// and what is left for other pods (`alloc - overhead`; a type too small for its
    /// DaemonSets has a negative pod count).
    pub(super) overhead: Matrix,
    pub(super) free: Matrix,
    /// Host ports of the DaemonSets that run on some type of the pool, each with the types it
    /// leaves free (those the DaemonSet does not run on), like the overhead above.
    pub(super) daemon_ports: Vec<(HostPort, Bits)>,
    /// Whether some type has an offering in a capacity reservation (new claims are then bound
    /// to reservations with room first).
    pub(super) has_reserved: bool,
}

/// What is left of a NodePool's limits: per resource (`i64::MAX` when unlimited) and nodes.
/// A query changes them as it opens claims; the context puts them back when it ends.
#[derive(Clone)]
pub(super) struct Limits {
    pub(super) remaining: Vec<i64>,
    pub(super) nodes_remaining: i64,
    /// Whether the NodePool has limits at all.
    pub(super) limited: bool,
}

/// A pool's instance types (by index) with their cheapest compatible price, cheapest first.
pub(super) type PriceOrder = Vec<(f64, usize)>;

/// What a node of instance type `t` from a pool with requirements `pool` would carry: the
/// pool's requirements narrowed to the type's labels and its available offerings' zones and
/// capacity types.
pub(super) fn type_requirements(pool: &Requirements, t: &InstanceType) -> Requirements {
    let mut r = pool.clone();
    r.add(INSTANCE_TYPE, Requirement::single(t.name.clone()));
    for (k, v) in &t.labels {
        r.add(k, Requirement::single(v.clone()));
    }
    let available = || t.offerings.iter().filter(|o| o.available);
    let zones: BTreeSet<&str> = available().map(|o| o.zone.as_str()).collect();
    let capacity_types: BTreeSet<&str> = available().map(|o| o.capacity_type.as_str()).collect();
    r.add(ZONE, Requirement::new(Operator::In, &zones.into_iter().collect::<Vec<_>>()));
    r.add(CAPACITY_TYPE, Requirement::new(Operator::In, &capacity_types.into_iter().collect::<Vec<_>>()));
    r
}

impl Pools {
    /// Types of `pool` whose labels and some available offering satisfy requirements `req`.
    pub(super) fn compat(&mut self, pool: PoolIx, req: u32, interned: &Interned) -> Arc<Bits> {
        if let Some(b) = self.compat_cache.get(&(pool, req)) {
            return Arc::clone(b);
        }
        let bits = Arc::new(self[pool].compat(&interned.reqs[req as usize]));
        self.compat_cache.insert((pool, req), Arc::clone(&bits));
        bits
    }

    /// The pool's types with an offering compatible with requirements `req`, cheapest first
    /// (then name), each at the price the launch rule would pay for it alone
    /// ([`kerf_api::launch::type_price`]).
    pub(super) fn price_order(&mut self, pool: PoolIx, req: u32, interned: &Interned) -> Arc<PriceOrder> {
        if let Some(v) = self.price_cache.get(&(pool, req)) {
            return Arc::clone(v);
        }
        let v = Arc::new(self[pool].table.price_order(&interned.reqs[req as usize]));
        self.price_cache.insert((pool, req), Arc::clone(&v));
        v
    }

    /// The NodePools of `input` by weight (then name), with their type tables in `res`'s
    /// resources.
    pub(super) fn build(input: &SchedulingInput, res: &Resources) -> Pools {
        let mut out = Pools { quotas: Quotas::build(&input.quotas, res), ..Pools::default() };
        let mut pools: Vec<&crate::model::NodePoolInput> = input.node_pools.iter().collect();
        pools.sort_by(|a, b| {
            b.node_pool.weight().cmp(&a.node_pool.weight()).then_with(|| a.node_pool.name().cmp(b.node_pool.name()))
        });
        for p in pools {
            let np = &p.node_pool;
            let name = np.name().to_string();
            let rules = Rules::build(np, &name);
            let table = TypeTable::build(&p.instance_types, &rules, &input.daemonset_pods, res);
            let limits = Limits::build(np, &p.in_use, res);
            let mut pool = Pool { name, node_pool: np.clone(), rules, table, limits, quotas: Vec::new() };
            pool.quotas = out.quotas.select(&pool, &pool.table);
            out.all.push(pool);
        }
        out
    }

    /// For a claim of pool `p` with requirements `req` for a pod of requests `total`: the
    /// types whose capacity fits what is left of the pool's limits and of every CapacityQuota
    /// that selects them, and the claim's requirements. A quota that selects offerings (zone or
    /// capacity type) and is full keeps out the types it selects while other types still fit
    /// the pod; else the claim's requirements are narrowed to avoid its offerings, when the pod
    /// allows (see `quotas`).
    pub(super) fn types_within_limits(
        &mut self,
        p: PoolIx,
        req: u32,
        total: &[i64],
        interned: &mut Interned,
    ) -> (Bits, u32) {
        if self.all[p].quotas.is_empty() {
            return (self.all[p].types_within_limits(), req);
        }
        let compat = self.compat(p, req, interned);
        let Pools { all, quotas, .. } = self;
        let pool = &mut all[p];
        let mut types = pool.types_within_limits();
        quotas.admit_types(&mut pool.quotas, &pool.table, &mut types, req, false, interned);
        if pool.table.any_fit(&types, &compat, total) {
            return (types, req);
        }
        // Rarely: the quotas' own types would take the pod, outside their offerings.
        let mut types = pool.types_within_limits();
        let narrowed = quotas.admit_types(&mut pool.quotas, &pool.table, &mut types, req, true, interned);
        if narrowed != req {
            types = types.and(&self.compat(p, narrowed, interned));
        }
        (types, narrowed)
    }

    /// A new claim of pool `p` with requirements `req` opens with candidates `types` holding
    /// `total`: the pool's limits (see [`Pool::reserve`]) and the quotas that select a
    /// candidate are debited. What it reserved of the pool's limits (`None` without limits) and
    /// of each quota.
    pub(super) fn reserve(
        &mut self,
        p: PoolIx,
        types: &Bits,
        total: &[i64],
        req: u32,
        interned: &mut Interned,
    ) -> (Option<Vec<i64>>, Vec<QuotaHold>) {
        let limits = self.all[p].reserve(types, total);
        let Pools { all, quotas, .. } = self;
        let pool = &mut all[p];
        let holds = quotas.reserve(&mut pool.quotas, &pool.table, types, total, req, interned);
        (limits, holds)
    }
}

impl Pool {
    /// The types whose labels and some available offering satisfy requirements `r`.
    fn compat(&self, r: &Requirements) -> Bits {
        let mut bits = Bits::empty(self.table.types.len());
        let zone = r.get(ZONE);
        let ct = r.get(CAPACITY_TYPE);
        // Requirements on the capacity reservation labels are rare: checked per offering only
        // when present.
        let reserved_keys = kerf_api::labels::CAPACITY_RESERVATION_LABELS.iter().any(|k| r.has_key(k));
        'types: for (i, t) in self.table.types.iter().enumerate() {
            for (k, req) in r.iter() {
                if k == HOSTNAME || kerf_api::instance::is_offering_label(k) {
                    continue;
                }
                if let Some(v) = t.labels.get(k) {
                    if !req.has(v) {
                        continue 'types;
                    }
                } else if k == INSTANCE_TYPE {
                    if !req.has(&t.name) {
                        continue 'types;
                    }
                } else if !self.rules.defined_keys.contains(k) && !req.allows_absent() {
                    continue 'types;
                }
            }
            let offered = t.offerings.iter().any(|o| {
                o.available
                    && zone.is_none_or(|z| z.has(&o.zone))
                    && ct.is_none_or(|c| c.has(&o.capacity_type))
                    && (!reserved_keys || launch::offering_allowed(r, o))
            });
            if offered {
                bits.set(i);
            }
        }
        bits
    }

    /// Whether `types` still offer at least minValues distinct values for each key that has one.
    pub(super) fn min_values_ok(&self, types: &Bits) -> Option<(String, usize, usize)> {
        for (k, m) in &self.rules.min_values {
            let mut vals: BTreeSet<&str> = BTreeSet::new();
            for i in types.iter() {
                let t = &self.table.types[i];
                if k == INSTANCE_TYPE {
                    vals.insert(&t.name);
                } else if k == ZONE || k == CAPACITY_TYPE {
                    for o in t.offerings.iter().filter(|o| o.available) {
                        vals.insert(if k == ZONE { &o.zone } else { &o.capacity_type });
                    }
                } else if let Some(v) = t.labels.get(k) {
                    vals.insert(v);
                }
            }
            if vals.len() < *m {
                return Some((k.clone(), *m, vals.len()));
            }
        }
        None
    }

    /// Whether any remaining limit is below the largest type's capacity (else no claim can
    /// reach the limit and the check is skipped).
    pub(super) fn limits_matter(&self) -> bool {
        let l = &self.limits;
        l.limited && l.remaining.iter().zip(&self.table.max_capacity).any(|(r, m)| *r != i64::MAX && r < m)
    }

    /// Whether a claim that `reserved` capacity stays within the limits if its candidates were
    /// `types` and it held `total`.
    pub(super) fn within_limits(&self, reserved: &[i64], types: &Bits, total: &[i64]) -> bool {
        let new = self.table.reservation(types, total);
        new.iter().zip(reserved).zip(&self.limits.remaining).all(|((n, o), rem)| *rem == i64::MAX || n - o <= *rem)
    }

    /// The types whose capacity fits the remaining limits.
    fn types_within_limits(&self) -> Bits {
        let mut out = Bits::empty(self.table.types.len());
        for i in 0..self.table.types.len() {
            if self.limits.admit(self.table.capacity.row(i)) {
                out.set(i);
            }
        }
        out
    }

    /// A new claim of the pool opens with candidates `types` holding `total`: one node fewer
    /// is left, and under limits the claim reserves the largest capacity among `types` that
    /// fits `total` (returned; `None` when the pool has no limits).
    fn reserve(&mut self, types: &Bits, total: &[i64]) -> Option<Vec<i64>> {
        self.limits.nodes_remaining -= 1;
        if !self.limits.limited {
            return None;
        }
        let reserve = self.table.reservation(types, total);
        for (rem, v) in self.limits.remaining.iter_mut().zip(&reserve) {
            if *rem != i64::MAX {
                *rem -= v;
            }
        }
        Some(reserve)
    }
}

impl Rules {
    /// The rules of NodePool `np` called `name`.
    fn build(np: &NodePool, name: &str) -> Rules {
        let tmpl = &np.spec.template;
        let mut reqs = Requirements::from_node_selector(&tmpl.spec.requirements);
        let mut defined_keys: BTreeSet<String> = reqs.keys().cloned().collect();
        for (k, v) in &tmpl.metadata.labels {
            reqs.add(k, Requirement::single(v.clone()));
            defined_keys.insert(kerf_api::labels::normalize_key(k).to_string());
        }
        reqs.add(NODE_POOL, Requirement::single(name.to_string()));
        defined_keys.insert(NODE_POOL.to_string());
        let min_values =
            reqs.iter().filter_map(|(k, r)| r.min_values.filter(|m| *m > 0).map(|m| (k.clone(), m as usize))).collect();
        Rules {
            reqs,
            req_id: None,
            defined_keys,
            labels: tmpl.metadata.labels.clone(),
            taints: tmpl.spec.taints.clone(),
            startup_taints: tmpl.spec.startup_taints.clone(),
            min_values,
        }
    }

    /// The requirements, interned.
    pub(super) fn req(&mut self, interned: &mut Interned) -> u32 {
        if let Some(id) = self.req_id {
            return id;
        }
        let id = interned.intern_req(self.reqs.clone());
        self.req_id = Some(id);
        id
    }
}

impl TypeTable {
    /// The table of `types` for a pool with `rules`, in `res`'s resources, with the overhead and
    /// host ports of the `daemonsets` pods that would run on each type.
    fn build(types: &[Arc<InstanceType>], rules: &Rules, daemonsets: &[Arc<SlimPod>], res: &Resources) -> TypeTable {
        let mut types: Vec<Arc<InstanceType>> = types.to_vec();
        let cheapest = |t: &InstanceType| t.cheapest_available().map(|o| o.price).unwrap_or(f64::INFINITY);
        types.sort_by(|a, b| cheapest(a).total_cmp(&cheapest(b)).then_with(|| a.name.cmp(&b.name)));
        let nres = res.names.len();
        let mut alloc = Matrix::new(nres);
        let mut capacity = Matrix::new(nres);
        let mut type_keys: BTreeSet<String> = [ZONE, CAPACITY_TYPE].iter().map(|s| s.to_string()).collect();
        for t in &types {
            alloc.push_row(&res.dense_allocatable(&t.allocatable()));
            capacity.push_row(&res.dense(&t.capacity));
            type_keys.extend(t.labels.keys().map(|k| kerf_api::labels::normalize_key(k).to_string()));
        }
        // DaemonSet pods that would run on this pool's nodes, per instance type: a DaemonSet
        // whose node affinity excludes a type adds nothing to it.
        let mut overhead = Matrix::filled(types.len(), nres, 0);
        let mut daemon_ports = Vec::new();
        let daemons: Vec<&Arc<SlimPod>> =
            daemonsets.iter().filter(|d| pod::untolerated_taint(d, &rules.taints).is_none()).collect();
        if !daemons.is_empty() {
            // Each type's requirements, built for the first DaemonSet pod whose node
            // affinity could turn a type away (one with an empty term runs on every type).
            let mut type_reqs: Option<Vec<Requirements>> = None;
            for d in daemons {
                let terms = pod::required_node_terms(d);
                let everywhere = terms.iter().any(Requirements::is_empty);
                let type_reqs = if everywhere {
                    None
                } else {
                    Some(
                        &*type_reqs
                            .get_or_insert_with(|| types.iter().map(|t| type_requirements(&rules.reqs, t)).collect()),
                    )
                };
                let requests = res.dense(&pod::pod_requests(d));
                let mut runs_somewhere = false;
                let mut free_of = Bits::empty(types.len());
                for ti in 0..types.len() {
                    let runs = type_reqs.is_none_or(|type_reqs| {
                        terms.iter().any(|t| {
                            type_reqs[ti].compatible_strict(t, |k| type_keys.contains(k) || k == HOSTNAME).is_ok()
                        })
                    });
                    if runs {
                        runs_somewhere = true;
                        for (o, v) in overhead.row_mut(ti).iter_mut().zip(&requests) {
                            *o += v;
                        }
                    } else {
                        free_of.set(ti);
                    }
                }
                if runs_somewhere {
                    daemon_ports.extend(pod::host_ports(d).into_iter().map(|port| (port, free_of.clone())));
                }
            }
        }
        // What pods can use on each type once its DaemonSets run; a type too small for
        // its DaemonSets takes no pod.
        let mut free = alloc.minus(&overhead);
        let pods_index = res.index[PODS];
        for row in free.rows_mut() {
            if row.iter().any(|v| *v < 0) {
                row[pods_index] = -1;
            }
        }
        let has_reserved = types.iter().any(|t| t.offerings.iter().any(|o| o.reservation.is_some()));
        if has_reserved {
            // Offerings in a capacity reservation carry its id, type and interruptibility.
            type_keys.extend(kerf_api::labels::CAPACITY_RESERVATION_LABELS.map(str::to_string));
        }
        TypeTable {
            has_reserved,
            max_capacity: capacity.max_row(),
            largest_alloc: alloc.max_row(),
            max_alloc: free.max_row(),
            types,
            alloc,
            capacity,
            type_keys,
            free,
            overhead,
            daemon_ports,
        }
    }

    /// Types among `types` that fit `requests`.
    pub(super) fn fitting(&self, types: &Bits, requests: &[i64]) -> Bits {
        let mut out = Bits::empty(self.types.len());
        for i in types.iter() {
            if type_fits(requests, self.free.row(i)) {
                out.set(i);
            }
        }
        out
    }

    /// Whether some type in `a ∧ b` fits `requests` (no allocation).
    pub(super) fn any_fit(&self, a: &Bits, b: &Bits, requests: &[i64]) -> bool {
        for (wi, (x, y)) in a.0.iter().zip(&b.0).enumerate() {
            let mut w = x & y;
            while w != 0 {
                let i = wi * 64 + w.trailing_zeros() as usize;
                w &= w - 1;
                if type_fits(requests, self.free.row(i)) {
                    return true;
                }
            }
        }
        false
    }

    /// Componentwise largest free allocatable over `types`.
    pub(super) fn max_alloc_of(&self, types: &Bits) -> Vec<i64> {
        let mut r = Vec::new();
        self.max_alloc_into(types, &mut r);
        r
    }

    /// [`max_alloc_of`](Self::max_alloc_of) into `out` (no allocation when it has room).
    pub(super) fn max_alloc_into(&self, types: &Bits, out: &mut Vec<i64>) {
        let n = self.free.cols();
        out.clear();
        out.resize(n, 0);
        for i in types.iter() {
            for (k, v) in out.iter_mut().zip(self.free.row(i)) {
                *k = (*k).max(*v);
            }
        }
    }

    /// The limit reservation of a claim whose candidates are `types` holding `requests`: the
    /// largest capacity among the types that fit.
    pub(super) fn reservation(&self, types: &Bits, requests: &[i64]) -> Vec<i64> {
        let n = self.free.cols();
        let mut r = vec![0i64; n];
        for i in types.iter().filter(|i| type_fits(requests, self.free.row(*i))) {
            for (k, v) in r.iter_mut().zip(self.capacity.row(i)) {
                *k = (*k).max(*v);
            }
        }
        r
    }

    /// Whether `ports` (a group's) ask for a host port the DaemonSets take on every type.
    pub(super) fn daemon_port_conflict(&self, ports: &[HostPort]) -> bool {
        self.daemon_port_free_types(ports).is_some_and(|free| free.is_empty())
    }

    /// The types where no DaemonSet takes one of `ports`; `None` when no DaemonSet takes one
    /// anywhere.
    pub(super) fn daemon_port_free_types(&self, ports: &[HostPort]) -> Option<Bits> {
        if ports.is_empty() {
            return None;
        }
        let mut free: Option<Bits> = None;
        for (port, free_of) in &self.daemon_ports {
            if ports.iter().any(|a| a.conflicts(port)) {
                free = Some(match free {
                    Some(f) => f.and(free_of),
                    None => free_of.clone(),
                });
            }
        }
        free
    }

    /// The types with an offering compatible with requirements `r`, cheapest first (then name),
    /// each at the price the launch rule would pay for it alone.
    fn price_order(&self, r: &Requirements) -> PriceOrder {
        let mut v: Vec<(f64, usize)> = self
            .types
            .iter()
            .enumerate()
            .filter_map(|(i, t)| launch::type_price(t, r).map(|price| (price, i)))
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| self.types[a.1].name.cmp(&self.types[b.1].name)));
        v
    }

    /// The distinct values of `key` among the types (their labels, names, and available
    /// offerings' zones and capacity types), sorted.
    pub(super) fn values(&self, key: &str) -> Vec<String> {
        let mut vals: BTreeSet<&str> = BTreeSet::new();
        for t in &self.types {
            if key == ZONE || key == CAPACITY_TYPE {
                for o in t.offerings.iter().filter(|o| o.available) {
                    vals.insert(if key == ZONE { &o.zone } else { &o.capacity_type });
                }
            } else if let Some(v) = t.labels.get(key) {
                vals.insert(v);
            } else if key == INSTANCE_TYPE {
                vals.insert(&t.name);
            }
        }
        vals.into_iter().map(str::to_string).collect()
    }
}

impl Limits {
    /// The limits of NodePool `np` less what its nodes hold (`in_use`), in `res`'s resources.
    fn build(np: &NodePool, in_use: &ResourceList, res: &Resources) -> Limits {
        let mut remaining = vec![i64::MAX; res.names.len()];
        let mut nodes_remaining = i64::MAX;
        if let Some(limits) = &np.spec.limits {
            for (k, q) in limits.iter() {
                let used = in_use.get(k);
                if k == "nodes" {
                    nodes_remaining = q.value_ceil() - used.value_ceil();
                } else if let Some(i) = res.index.get(k) {
                    remaining[*i] = to_units(k, q) - to_units(k, &used);
                }
            }
        }
        Limits { remaining, nodes_remaining, limited: np.spec.limits.is_some() }
    }

    /// Whether a node of `capacity` fits what is left.
    pub(super) fn admit(&self, capacity: &[i64]) -> bool {
        !self.limited || capacity.iter().zip(&self.remaining).all(|(c, r)| *r == i64::MAX || c <= r)
    }

    /// Gives what a removed node holds of the limits (`usage`) back for the running what-if (a
    /// replacement may use it); the context puts the limits back when the query ends.
    pub(super) fn release(&mut self, usage: &[i64]) {
        if !self.limited {
            return;
        }
        for (rem, v) in self.remaining.iter_mut().zip(usage) {
            if *rem != i64::MAX {
                *rem = rem.saturating_add(*v);
            }
        }
        // `i64::MAX` (no node limit) stays as it is.
        self.nodes_remaining = self.nodes_remaining.saturating_add(1);
    }
}
