//! Cost-driven claim sizing: how big a new NodeClaim may grow, chosen by price.
//!
//! # Why
//!
//! Pods are placed largest first and join the first open claim they fit (first-fit
//! decreasing, as Karpenter packs). Left alone, a claim accepts pods until no instance type of
//! its pool can hold them, so every claim grows to the pool's largest types and its type is
//! whatever those few giants cost: a claim filled with 4-CPU / 16 GiB pods ends as a 190-core
//! machine, though mid-size types may hold the same pods for less per pod.
//!
//! # What
//!
//! When provisioning opens a claim, it picks a *target* type by cost, and the claim may then
//! only become a type no dearer than the target (its candidate types are cut to those priced
//! at most the target's price; the cheapest fitting one is still chosen when the claim is
//! finished). The target is the type that holds the most *worth* of the pods still to place
//! per dollar:
//!
//! - a pod's worth is what it would cost on its own: for its shape (its request vector), the
//!   least `price / pods of this shape the type holds` over the pool's types, the pods held
//!   capped at the pods of that shape left (so a lone pod is worth its cheapest fitting type);
//! - a type's worth is that of the pods it would hold when filled, as first-fit decreasing
//!   fills it, from the pods left: shapes largest first, as many of each as still fit;
//! - the target maximises worth / price (ties: the larger type, fewer claims). A type worth
//!   more than it costs is one where shapes complement each other (CPU-heavy pods filling the
//!   CPU a memory-heavy mix leaves idle); a type worth less wastes room or is dear.
//! - the tail: when the pods left fit in two claims, the ratio may leave a dear last claim
//!   (60 one-CPU pods: a 31-pod type is the best ratio, and two of them can cost more than one
//!   64-pod type). There the cheapest cover by at most two claims (each type filled as above,
//!   the second the cheapest type that holds the rest) is compared with following the ratio
//!   claim after claim (up to 16 claims), and the first claim of the cheaper plan is the
//!   target. This lookahead is skipped when it would take more than 200,000 fit checks.
//!
//! Only types no other type dominates (as much room everywhere for at most the price) are
//! weighed.
//!
//! # Mixes
//!
//! Largest first fills a claim's scarcest resource with the large pods and strands the rest
//! (500 pods of 3500m / 28Gi fill an r6a.48xlarge's memory 50 at a time and leave 13 CPUs idle,
//! where 47 of them and 29 pods of 900m / 3100Mi use it whole). So for batches of at most
//! `MIX_PODS` pods with two mixable shapes or more (pods without topology constraints or host
//! ports), provisioning also places the batch with *mixes*: the target's best few types (by
//! their first-fit-decreasing worth) are also weighed with their best mix of the pods left, a
//! knapsack over the shapes valued by worth (with a small search budget), and when a mix holds
//! more worth per dollar, the claims opened for that target take at most the mix's count of a
//! shape while pods of the mix's other shapes are still to be placed.
//!
//! A mix is chosen claim by claim; unchecked, it would take the shape that completes it best
//! from the whole batch (one large pod and fifteen small ones per node uses the small pods up on
//! a few nodes and strands the large ones). So a mix takes at most a claim's share of each shape:
//! the pods left times its price over the worth of all pods left, times a slack. No one slack
//! suits every batch, so each of `MIX_SLACKS` gives a plan, and the cheapest plan placing no
//! fewer pods (the one without mixes first, on ties) is kept.
//!
//! Rooms and prices are the pool's tables as every claim sees them (DaemonSet overhead and
//! the pod-count limit included), for the requirements of the pod opening the claim (pool
//! requirements and its node affinity), so a pod that must run on-demand sizes its claim by
//! on-demand prices.
//!
//! # Constraints and determinism
//!
//! A batch that one claim of the pool's largest types can hold is not capped: first fit
//! decreasing places it (one claim, then its cheapest fitting type), so small batches keep one
//! node.
//!
//! Capping only removes candidate types from a new claim: every rule is still checked by the
//! usual code on what remains (topology spread, pod (anti-)affinity, limits, minValues, ports,
//! volume zones). If no capped candidate lets the opening pod in, the claim is opened uncapped,
//! exactly as without this module. Consolidation's what-ifs are not capped: they ask whether
//! pods fit on one replacement, which a cap would split.
//!
//! The targets are computed from the pods left in the run and cached per (pool,
//! requirements) until the pods left have dropped by an eighth (always recomputed for the last
//! few pods). Everything is a function of the input and the placement order: same input, same
//! plan.

use std::collections::HashMap;
use std::sync::Arc;

use super::facts::Pods;
use super::ids::{GroupIx, IxVec, PodIx, PoolIx};
use super::interning::{Bits, Interned};
use super::pools::{Pools, PriceOrder};
use super::preferences::Group;
use super::resources::Matrix;

use crate::packing_bound::{BoundShape, knapsack, units_fitting};

/// The largest batch provisioning also places with mixes (see `Sizing::mix`), keeping the
/// cheaper plan.
pub(super) const MIX_PODS: usize = 5_000;
/// Pods left below which targets are recomputed at every new claim.
const TAIL: u64 = 16;

/// Whether a target or worth computed with `at` pods of its shape left still stands with `left`
/// left: not in the tail, and no more than about an eighth fewer left since.
pub(super) fn still_holds(left: u64, at: u64) -> bool {
    left > TAIL && left + left / 8 >= at
}
/// The most fit checks (shapes × types × types) the two-claim lookahead may take.
const TAIL_CHECKS: usize = 200_000;
/// The most claims the lookahead follows the ratio for, to compare with two claims.
const RATIO_STEPS: usize = 16;
/// The types (best by their first-fit-decreasing fill) whose best mix is also searched.
const MIX_TYPES: usize = 6;
/// The mix policies provisioning tries after the plan without mixes: how far past its share of
/// the pods left a claim's mix may go (see `Table::ratio_pick`; infinite: no share).
pub(super) const MIX_SLACKS: [f64; 4] = [1.25, 1.5, 2.0, f64::INFINITY];
/// Search nodes per mix (a bounded knapsack).
const MIX_BUDGET: usize = 4_000;
/// How much more worth per dollar a mix must hold than first-fit decreasing to be kept to.
const MIX_GAIN: f64 = 1e-9;
/// Runs with more pod shapes than this size claims by the first-fit-decreasing fill alone.
const MIX_SHAPES: usize = 64;

/// How a new claim is sized: the types it may not grow into, and the pods of each shape it
/// keeps room for.
pub(super) struct Sizing {
    /// The candidates no dearer than the target; `None` when that cuts nothing.
    pub(super) cut: Option<Bits>,
    /// Per shape of the run, the most pods of that shape the claim takes while pods of the
    /// other shapes it keeps room for are still to be placed; `None`: first fit decreasing.
    pub(super) mix: Option<Arc<[u64]>>,
}

/// The mix a claim was sized for (see [`Sizing::mix`]) and the pods of each shape it holds
/// (empty without a mix).
#[derive(Default)]
pub(super) struct ClaimMix {
    mix: Option<Arc<[u64]>>,
    held: Vec<u32>,
}

/// A mix: per shape of the run, the most pods of that shape (see `Sizing::mix`).
type Mix = Option<Arc<[u64]>>;
/// A cached target: pods left when computed, the price cap, the mix.
type Target = (u64, f64, Mix);

/// The run's pod shapes and what is left of them, and the cached targets.
#[derive(Default)]
pub(super) struct Packing {
    /// Whether the running query sizes claims by cost (provisioning does; what-ifs do not).
    pub(super) enabled: bool,
    /// Whether a pod narrowing a claim's requirements joins it only when that costs no more
    /// than the pod is worth (see `join_cost`): the first pass of a run; retries join anyway.
    pub(super) joins_by_worth: bool,
    /// Whether new claims keep room for a mix of shapes (see `Sizing::mix`): how far past its
    /// share of the pods left a mix may go; 0: no mixes.
    pub(super) mix_slack: f64,
    /// Per context pod index, its shape in the run (`u32::MAX`: not in the run).
    shape_of: IxVec<PodIx, u32>,
    /// Requests of each shape, largest first (cpu, then memory), as the queue orders pods.
    shapes: Vec<Vec<i64>>,
    /// Whether a shape's pods may be mixed by quota: pods without topology constraints or
    /// host ports (any number of them may share a node with any other).
    mixable: Vec<bool>,
    /// Pods of each shape not placed yet.
    left: Vec<u64>,
    total_left: u64,
    /// The requests of the whole batch, summed.
    batch: Vec<i64>,
    /// (pool, requirements) → the target of its new claims.
    targets: HashMap<(PoolIx, u32), Target>,
    /// (pool, requirements) → the undominated types, cheapest first (kept across queries).
    fleet: HashMap<(PoolIx, u32), Arc<PriceOrder>>,
    /// (pool, requirements, shape) → pods of the shape left when computed, a pod's worth.
    worth: HashMap<(PoolIx, u32, u32), (u64, f64)>,
    /// Per shape, bumped whenever one of its worths is computed (see `dearer`).
    worth_epoch: Vec<u64>,
}

impl Packing {
    /// The pods of pod `pi`'s shape not placed yet (`None`: not sizing by cost, or not in the run).
    pub(super) fn shape_left(&self, pi: PodIx) -> Option<u64> {
        let s = *self.shape_of.get(pi)?;
        (self.enabled && s != u32::MAX).then(|| self.left[s as usize])
    }

    /// Pod `pi`'s shape and the shape's worth epoch (`None`: not sizing by cost, or not in the run).
    pub(super) fn shape_epoch(&self, pi: PodIx) -> Option<(u32, u64)> {
        let s = *self.shape_of.get(pi)?;
        (self.enabled && s != u32::MAX).then(|| (s, self.worth_epoch[s as usize]))
    }
}

impl Packing {
    /// Starts a run over `pods` (already in queue order): their shapes and counts.
    /// `of` gives their requests and groups, `groups` the groups, `dims` the number of resources.
    pub(super) fn begin(&mut self, pods: &[PodIx], of: &Pods, groups: &IxVec<GroupIx, Group>, dims: usize) {
        let pk = self;
        pk.targets.clear();
        pk.worth.clear();
        pk.joins_by_worth = pk.enabled;
        pk.shapes.clear();
        pk.mixable.clear();
        pk.left.clear();
        pk.worth_epoch.clear();
        pk.total_left = 0;
        if !pk.enabled {
            return;
        }
        pk.shape_of.clear();
        pk.shape_of.resize(of.requests.len(), u32::MAX);
        let mut ids: HashMap<(&[i64], bool), u32> = HashMap::new();
        for &pi in pods {
            let r = &of.requests[pi];
            let g = &groups[of.group[pi]];
            let free = g.ports.is_empty()
                && g.state.rejected_by.is_empty()
                && g.hard_spread.is_empty()
                && g.soft_spread.is_empty()
                && g.affinity.is_empty()
                && g.anti.is_empty()
                && g.pref_affinity.is_empty()
                && g.pref_anti.is_empty();
            let id = *ids.entry((r, free)).or_insert_with(|| {
                pk.shapes.push(r.to_vec());
                pk.mixable.push(free);
                pk.left.push(0);
                pk.worth_epoch.push(0);
                (pk.shapes.len() - 1) as u32
            });
            pk.shape_of[pi] = id;
            pk.left[id as usize] += 1;
            pk.total_left += 1;
        }
        pk.batch = vec![0; dims];
        for (r, l) in pk.shapes.iter().zip(&pk.left) {
            for (t, v) in pk.batch.iter_mut().zip(r) {
                *t += v * *l as i64;
            }
        }
    }

    /// Pod `pi` was placed: one fewer of its shape is left.
    pub(super) fn placed(&mut self, pi: PodIx) {
        let pk = self;
        if let Some(&s) = pk.shape_of.get(pi)
            && s != u32::MAX
            && pk.left[s as usize] > 0
        {
            pk.left[s as usize] -= 1;
            pk.total_left -= 1;
        }
    }

    /// How to size a new claim of pool `p` with requirements `req` whose candidates are
    /// `candidates` (see the module documentation); `None` when provisioning is not sizing by
    /// cost or the batch fits one claim.
    pub(super) fn cost_sizing(
        &mut self,
        pools: &mut Pools,
        interned: &Interned,
        p: PoolIx,
        req: u32,
        candidates: &Bits,
    ) -> Option<Sizing> {
        if !self.enabled || self.total_left == 0 {
            return None;
        }
        // A batch that one claim of the largest types it may use holds is placed uncapped: one
        // claim, its cheapest fitting type.
        let types = self.undominated(pools, interned, p, req);
        let n = pools[p].table.free.cols();
        let free = &pools[p].table.free;
        let fits_one = (0..n).all(|d| {
            let most = types.iter().map(|(_, i)| free.get(*i, d)).max().unwrap_or(0);
            self.batch[d] <= most
        });
        if fits_one {
            return None;
        }
        let left = self.total_left;
        let (cap, mix) = match self.targets.get(&(p, req)) {
            Some((at, cap, mix)) if still_holds(left, *at) => (*cap, mix.clone()),
            _ => {
                let (cap, reusable, mix) = self.cost_target(pools, interned, p, req)?;
                if reusable {
                    self.targets.insert((p, req), (left, cap, mix.clone()));
                }
                (cap, mix)
            }
        };
        let order = pools.price_order(p, req, interned);
        let mut out = Bits::empty(pools[p].table.types.len());
        let mut cut = false;
        for &(price, i) in order.iter() {
            if candidates.contains(i) {
                if price <= cap {
                    out.set(i);
                } else {
                    cut = true;
                }
            }
        }
        Some(Sizing { cut: (cut && !out.is_empty()).then_some(out), mix })
    }

    /// The pods of pod `pi`'s shape that were left when its worth on a claim of pool `p` with
    /// requirements `req` was last computed (see [`Self::pod_worth`]).
    pub(super) fn worth_computed_at(&self, p: PoolIx, req: u32, pi: PodIx) -> Option<u64> {
        let s = *self.shape_of.get(pi)?;
        self.worth.get(&(p, req, s)).map(|(at, _)| *at)
    }

    /// What pod `pi` is worth on a claim of pool `p` with requirements `req` (its own, not a
    /// claim's): the least price per pod of its shape over the undominated types, as many of
    /// the shape's pods left as a type holds sharing it (see the module documentation).
    /// `None` when provisioning is not sizing by cost or no type holds the pod.
    pub(super) fn pod_worth(
        &mut self,
        pools: &mut Pools,
        interned: &Interned,
        p: PoolIx,
        req: u32,
        pi: PodIx,
    ) -> Option<f64> {
        if !self.enabled {
            return None;
        }
        let s = *self.shape_of.get(pi)?;
        if s == u32::MAX {
            return None;
        }
        let left = self.left[s as usize].max(1);
        match self.worth.get(&(p, req, s)) {
            Some(&(at, w)) if still_holds(left, at) => return w.is_finite().then_some(w),
            _ => {}
        }
        let types = self.undominated(pools, interned, p, req);
        let shape = &self.shapes[s as usize];
        let free = &pools[p].table.free;
        let w = types
            .iter()
            .filter_map(|&(price, i)| {
                let k = units_fitting(shape, free.row(i)).min(left);
                (k > 0).then(|| price / k as f64)
            })
            .fold(f64::INFINITY, f64::min);
        self.worth.insert((p, req, s), (left, w));
        self.worth_epoch[s as usize] += 1;
        w.is_finite().then_some(w)
    }

    /// The mix of a new claim sized for `mix` (none: first fit decreasing).
    pub(super) fn claim_mix(&self, mix: Option<Arc<[u64]>>) -> ClaimMix {
        let held = if mix.is_some() { vec![0; self.shapes.len()] } else { Vec::new() };
        ClaimMix { mix, held }
    }

    /// Whether pod `pi` would take a claim with mix `claim` past it: the claim holds its share
    /// of the pod's shape and keeps room for pods of other shapes still to be placed.
    pub(super) fn over_mix(&self, claim: &ClaimMix, pi: PodIx) -> bool {
        let Some(mix) = &claim.mix else {
            return false;
        };
        let s = match self.shape_of.get(pi) {
            Some(&s) if s != u32::MAX => s as usize,
            _ => return false,
        };
        let held = &claim.held;
        self.mixable[s]
            && held[s] as u64 >= mix[s]
            && mix.iter().enumerate().any(|(t, &m)| t != s && (held[t] as u64) < m && self.left[t] > 0)
    }

    /// Pod `pi` joined a claim with mix `claim`: one more of its shape there.
    pub(super) fn mix_placed(&self, claim: &mut ClaimMix, pi: PodIx) {
        if claim.mix.is_some()
            && let Some(&s) = self.shape_of.get(pi)
            && s != u32::MAX
        {
            claim.held[s as usize] += 1;
        }
    }

    /// Whether the last run had pods of two mixable shapes or more (a plan with mixes may
    /// differ).
    pub(super) fn may_mix(&self) -> bool {
        self.mixable.iter().filter(|m| **m).count() > 1
    }

    /// The types of pool `p` compatible with requirements `req` that no other one dominates
    /// (as much room in every resource for at most the price), cheapest first, with their
    /// prices. Fixed for the context, so cached across queries.
    fn undominated(&mut self, pools: &mut Pools, interned: &Interned, p: PoolIx, req: u32) -> Arc<PriceOrder> {
        if let Some(v) = self.fleet.get(&(p, req)) {
            return Arc::clone(v);
        }
        let order = pools.price_order(p, req, interned);
        let compat = pools.compat(p, req, interned);
        let pool = &pools[p];
        let free = |i: usize| pool.table.free.row(i);
        let types: Vec<(f64, usize)> = order
            .iter()
            .copied()
            .filter(|(price, i)| compat.contains(*i) && *price > 0.0 && free(*i).iter().all(|v| *v >= 0))
            .collect();
        let dominated = |a: usize| {
            let (pa, ia) = types[a];
            types.iter().enumerate().any(|(b, &(pb, ib))| {
                b != a
                    && pb <= pa
                    && free(ib).iter().zip(free(ia)).all(|(x, y)| x >= y)
                    // Of two equal types, the first (cheaper, then by name) is kept.
                    && (pb < pa || free(ib) != free(ia) || b < a)
            })
        };
        let kept: Vec<(f64, usize)> = (0..types.len()).filter(|a| !dominated(*a)).map(|a| types[a]).collect();
        let kept = Arc::new(kept);
        self.fleet.insert((p, req), Arc::clone(&kept));
        kept
    }

    /// The price cap for a new claim of pool `p` with requirements `req`, whether it may be
    /// reused for the next claims, and the mix (see the module documentation).
    fn cost_target(&mut self, pools: &mut Pools, interned: &Interned, p: PoolIx, req: u32) -> Option<(f64, bool, Mix)> {
        let types = self.undominated(pools, interned, p, req);
        let n = pools[p].table.free.cols();
        let pool = &pools[p];
        let table = Table {
            types: &types,
            free: &pool.table.free,
            n,
            shapes: &self.shapes,
            // No shape is mixable when mixes are off.
            mixable: if self.mix_slack > 0.0 { &self.mixable } else { &[] },
            slack: self.mix_slack,
        };
        let left = &self.left;
        let (ratio_price, _, mix) = table.ratio_pick(left)?;
        // The tail: when what is left fits in two claims, the cheapest cover by at most two
        // claims, if it beats going on by the ratio.
        let mut total = vec![0i64; n];
        for (r, l) in table.shapes.iter().zip(left) {
            for (t, v) in total.iter_mut().zip(r) {
                *t += v * *l as i64;
            }
        }
        let shapes_left = left.iter().filter(|l| **l > 0).count();
        let small = total.iter().zip(&pool.table.max_alloc).all(|(t, m)| *t <= 2 * m);
        if small
            && shapes_left * types.len() * types.len() <= TAIL_CHECKS
            && let Some((pair, first)) = table.cheapest_pair(left)
            && table.ratio_plan(left).is_some_and(|cost| pair < cost - 1e-9)
        {
            return Some((first, false, None));
        }
        Some((ratio_price, true, mix.map(Arc::from)))
    }
}

/// A pool's undominated types (price, index) and room table, and the run's shapes: what the
/// cost target is computed over.
struct Table<'a> {
    types: &'a [(f64, usize)],
    free: &'a Matrix,
    n: usize,
    shapes: &'a [Vec<i64>],
    mixable: &'a [bool],
    slack: f64,
}

impl Table<'_> {
    fn free(&self, i: usize) -> &[i64] {
        self.free.row(i)
    }

    /// Each shape's worth with `left` pods of each left: its cheapest cost per pod on its own.
    fn worth(&self, left: &[u64]) -> Vec<f64> {
        self.shapes
            .iter()
            .zip(left)
            .map(|(r, l)| {
                if *l == 0 {
                    return 0.0;
                }
                let w = self
                    .types
                    .iter()
                    .filter_map(|&(price, i)| {
                        let k = units_fitting(r, self.free(i)).min(*l);
                        (k > 0).then(|| price / k as f64)
                    })
                    .fold(f64::INFINITY, f64::min);
                if w.is_finite() { w } else { 0.0 }
            })
            .collect()
    }

    /// The type holding the most worth of `left` per dollar: its price, its index and, when the
    /// best mix of pods for it beats first-fit decreasing, that mix (pods of each shape).
    ///
    /// Each type is weighed filled as first-fit decreasing would (largest shapes first); the
    /// best few are also weighed with their best mix, a bounded knapsack over the shapes left
    /// valued by worth (pods of two shapes that together use a type's every resource, where
    /// largest-first would fill one resource and strand the other).
    fn ratio_pick(&self, left: &[u64]) -> Option<(f64, usize, Option<Vec<u64>>)> {
        let worth = self.worth(left);
        let mut rest = vec![0u64; left.len()];
        let mut room = vec![0i64; self.n];
        let mut best: Option<(f64, f64, usize)> = None;
        let mut scored: Vec<(f64, usize)> = Vec::with_capacity(self.types.len());
        for (k, &(price, i)) in self.types.iter().enumerate() {
            rest.copy_from_slice(left);
            room.copy_from_slice(self.free(i));
            let value = fill(self.shapes, &mut rest, &mut room, &worth);
            let eff = value / price;
            // Types come cheapest first: on a tie the later (larger) one wins.
            if value > 0.0 && best.is_none_or(|(b, _, _)| eff >= b * (1.0 - 1e-9)) {
                best = Some((eff, price, i));
            }
            if value > 0.0 {
                scored.push((eff, k));
            }
        }
        let (mut best_eff, mut price, mut index) = best?;
        let mut mix = None;
        let mixable_left = left.iter().zip(self.mixable).filter(|(l, m)| **l > 0 && **m).count();
        if self.shapes.len() <= MIX_SHAPES && mixable_left > 1 {
            scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let shapes: Vec<BoundShape> = self
                .shapes
                .iter()
                .zip(left)
                .zip(self.mixable)
                .map(|((r, l), m)| BoundShape { requests: r.clone(), count: if *m { *l } else { 0 } })
                .collect();
            // A claim's fair share of each shape: the pods left in proportion to its price
            // against the worth of all pods left (with some slack).
            let total: f64 = worth.iter().zip(left).map(|(w, l)| w * *l as f64).sum();
            for &(_, k) in scored.iter().take(MIX_TYPES) {
                let (p, i) = self.types[k];
                let share = if total > 0.0 { (p / total * self.slack).min(1.0) } else { 1.0 };
                let capped: Vec<BoundShape> = shapes
                    .iter()
                    .map(|b| BoundShape {
                        requests: b.requests.clone(),
                        count: ((b.count as f64 * share).ceil() as u64).min(b.count),
                    })
                    .collect();
                let refs: Vec<&BoundShape> = capped.iter().collect();
                let found = knapsack(self.free(i), &refs, &worth, MIX_BUDGET);
                let eff = found.best / p;
                if eff > best_eff * (1.0 + MIX_GAIN) {
                    (best_eff, price, index) = (eff, p, i);
                    mix = Some(found.a);
                }
            }
        }
        Some((price, index, mix))
    }

    /// What going on by the ratio would cost for `left`, claim after claim; `None` beyond
    /// `RATIO_STEPS` claims or when some pod fits no type.
    fn ratio_plan(&self, left: &[u64]) -> Option<f64> {
        let mut left = left.to_vec();
        let mut room = vec![0i64; self.n];
        let mut cost = 0.0;
        for _ in 0..RATIO_STEPS {
            if left.iter().all(|l| *l == 0) {
                return Some(cost);
            }
            let (price, i, mix) = self.ratio_pick(&left)?;
            match mix {
                Some(mix) => left.iter_mut().zip(&mix).for_each(|(l, m)| *l -= (*m).min(*l)),
                None => {
                    room.copy_from_slice(self.free(i));
                    let all = vec![1.0; left.len()];
                    fill(self.shapes, &mut left, &mut room, &all);
                }
            }
            cost += price;
        }
        left.iter().all(|l| *l == 0).then_some(cost)
    }

    /// The cheapest cover of `left` by one or two claims (each filled as first-fit decreasing
    /// would): its cost and the first claim's price.
    fn cheapest_pair(&self, left: &[u64]) -> Option<(f64, f64)> {
        let all = vec![1.0; left.len()];
        let mut rest = vec![0u64; left.len()];
        let mut second = vec![0u64; left.len()];
        let mut room = vec![0i64; self.n];
        let mut best: Option<(f64, f64)> = None;
        for &(price, i) in self.types {
            rest.copy_from_slice(left);
            room.copy_from_slice(self.free(i));
            fill(self.shapes, &mut rest, &mut room, &all);
            let cost = if rest.iter().all(|r| *r == 0) {
                price
            } else {
                // The cheapest single claim for the rest (types come cheapest first).
                let one = self.types.iter().find(|&&(_, j)| {
                    second.copy_from_slice(&rest);
                    room.copy_from_slice(self.free(j));
                    fill(self.shapes, &mut second, &mut room, &all);
                    second.iter().all(|r| *r == 0)
                });
                match one {
                    Some((p2, _)) => price + p2,
                    None => continue,
                }
            };
            if best.is_none_or(|(b, _)| cost < b - 1e-12) {
                best = Some((cost, price));
            }
        }
        best
    }
}

/// Fills `room` as first-fit decreasing would from the pods `left` of each shape (largest shape
/// first, as many of each as fit), taking them out of `left`; the worth of what it holds.
fn fill(shapes: &[Vec<i64>], left: &mut [u64], room: &mut [i64], worth: &[f64]) -> f64 {
    let mut value = 0.0;
    for (s, r) in shapes.iter().enumerate() {
        if left[s] == 0 || worth[s] == 0.0 {
            continue;
        }
        let k = units_fitting(r, room).min(left[s]);
        if k > 0 {
            for (x, v) in room.iter_mut().zip(r) {
                *x -= v * k as i64;
            }
            left[s] -= k;
            value += worth[s] * k as f64;
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kerf_api::ResourceList;

    use crate::bench::claims_cost;
    use crate::model::{NodePoolInput, SchedulingInput, SchedulingResult};
    use crate::scheduler::schedule;
    use crate::testing::*;

    fn place(types: Vec<crate::InstanceType>, pods: Vec<Arc<kerf_api::SlimPod>>) -> SchedulingResult {
        let input = SchedulingInput {
            node_pools: vec![NodePoolInput {
                node_pool: Arc::new(node_pool("default", vec![])),
                instance_types: types.into_iter().map(Arc::new).collect(),
                in_use: ResourceList::new(),
            }],
            pods,
            ..Default::default()
        };
        schedule(&input)
    }

    fn chosen(r: &SchedulingResult) -> Vec<&str> {
        r.new_node_claims.iter().map(|c| c.instance_types[0].name.as_str()).collect()
    }

    #[test]
    fn claims_stop_at_the_mid_size_type_that_is_cheaper_per_pod_than_the_largest() {
        // 64 pods of 2 CPU / 8Gi fit two "big" (4.0/h each) or sixteen "mid" (0.40/h each).
        let types = vec![
            instance_type("mid", "8", "32Gi", "110", 0.40, &["a"]),
            instance_type("big", "64", "256Gi", "110", 4.0, &["a"]),
        ];
        let pods = (0..64).map(|i| pod(&format!("p{i}")).cpu("2").memory("8Gi").build()).collect();
        let r = place(types, pods);
        assert!(r.errors.is_empty());
        assert_eq!(chosen(&r), vec!["mid"; 16]);
        assert!((claims_cost(&r) - 16.0 * 0.40 * 0.7).abs() < 1e-9, "{}", claims_cost(&r));
    }

    #[test]
    fn last_pods_take_one_larger_claim_when_two_best_ratio_claims_cost_more() {
        // 31 one-CPU pods per "c31" (0.31/h) is the best price per pod; 124 pods need four of
        // them (1.24/h) where two "c64" (1.22/h) hold all.
        let types = vec![
            instance_type("c31", "31", "64Gi", "110", 0.31, &["a"]),
            instance_type("c64", "64", "128Gi", "110", 0.61, &["a"]),
        ];
        let pods = (0..124).map(|i| pod(&format!("p{i}")).cpu("1").build()).collect();
        let r = place(types, pods);
        assert!(r.errors.is_empty());
        assert_eq!(chosen(&r), vec!["c64", "c64"]);
    }

    #[test]
    fn a_plan_with_mixes_that_costs_more_than_largest_first_is_not_kept() {
        // Per dollar, one large pod (1 CPU / 15Gi) with fifteen small ones (1 CPU / 3Gi) is the
        // best "m"; claims kept to that mix use up the small pods on the first four and leave
        // twenty claims with one large pod each. Largest first: three "r" (8 large, 2 small) and
        // four "m" for the 54 small pods left, 3 x 1.00 + 4 x 0.60 = 5.40/h, which is kept.
        let types = vec![
            instance_type("m", "16", "64Gi", "110", 0.60, &["a"]),
            instance_type("r", "16", "128Gi", "110", 1.00, &["a"]),
        ];
        let mut pods: Vec<_> = (0..24).map(|i| pod(&format!("l{i}")).cpu("1").memory("15Gi").build()).collect();
        pods.extend((0..60).map(|i| pod(&format!("s{i}")).cpu("1").memory("3Gi").build()));
        let r = place(types, pods);
        assert!(r.errors.is_empty());
        assert_eq!(r.new_node_claims.iter().map(|c| c.pods.len()).sum::<usize>(), 84);
        assert_eq!(chosen(&r), vec!["r", "r", "r", "m", "m", "m", "m"]);
        assert!((claims_cost(&r) - 5.40 * 0.7).abs() < 1e-9, "{}", claims_cost(&r));
    }

    #[test]
    fn capped_claims_keep_hostname_anti_affinity_and_place_every_pod() {
        // Pods of app=x must not share a node; the cap must not squeeze them together.
        let types = vec![
            instance_type("mid", "8", "32Gi", "110", 0.40, &["a"]),
            instance_type("big", "64", "256Gi", "110", 4.0, &["a"]),
        ];
        let mut pods: Vec<_> = (0..6)
            .map(|i| {
                pod(&format!("x{i}"))
                    .label("app", "x")
                    .cpu("2")
                    .memory("8Gi")
                    .anti_affinity(kerf_api::labels::HOSTNAME, &[("app", "x")])
                    .build()
            })
            .collect();
        pods.extend((0..30).map(|i| pod(&format!("y{i}")).cpu("2").memory("8Gi").build()));
        let r = place(types, pods);
        assert!(r.errors.is_empty());
        assert_eq!(r.new_node_claims.iter().map(|c| c.pods.len()).sum::<usize>(), 36);
        for c in &r.new_node_claims {
            assert!(c.pods.iter().filter(|p| **p < 6).count() <= 1, "two app=x pods on one claim: {:?}", c.pods);
        }
        assert!(chosen(&r).iter().all(|t| *t == "mid"), "{:?}", chosen(&r));
    }

    #[test]
    fn a_capped_claim_an_on_demand_pod_joins_launches_the_cheapest_on_demand_type_under_limits() {
        // Sized by spot price, claims are capped to "spotty" (spot 0.10/h); "steady", the same
        // size, is set aside (spot 0.25/h). A small on-demand pod then joins the last claim,
        // which becomes on-demand, where "steady" (0.30/h) is cheaper than "spotty" (0.40/h):
        // the finished claim launches "steady", NodePool limits or not ("big" stays out: more
        // capacity than the claim reserved of the limits).
        let with_prices = |name: &str, cpu: &str, od: f64, spot: f64| {
            let mut t = instance_type(name, cpu, "64Gi", "110", od, &["a"]);
            for o in &mut t.offerings {
                if o.capacity_type == "spot" {
                    o.price = spot;
                }
            }
            t
        };
        let types = [
            with_prices("spotty", "8", 0.40, 0.10),
            with_prices("steady", "8", 0.30, 0.25),
            with_prices("big", "32", 3.0, 2.0),
        ];
        let mut pods: Vec<_> = (0..30).map(|i| pod(&format!("f{i}")).cpu("1500m").build()).collect();
        pods.push(
            pod("od")
                .cpu("100m")
                .node_selector(kerf_api::labels::CAPACITY_TYPE, kerf_api::labels::CAPACITY_TYPE_ON_DEMAND)
                .build(),
        );
        for limited in [false, true] {
            let mut np = node_pool("default", vec![]);
            if limited {
                np.spec.limits = Some(rl(&[("cpu", "1000")]));
            }
            let input = SchedulingInput {
                node_pools: vec![NodePoolInput {
                    node_pool: Arc::new(np),
                    instance_types: types.iter().cloned().map(Arc::new).collect(),
                    in_use: ResourceList::new(),
                }],
                pods: pods.clone(),
                ..Default::default()
            };
            let r = schedule(&input);
            assert!(r.errors.is_empty(), "{:?}", r.errors);
            let od = r.new_node_claims.iter().find(|c| c.pods.contains(&30)).expect("a claim for the on-demand pod");
            assert!(od.pods.len() > 1, "the on-demand pod joined a claim: {:?}", od.pods);
            let names: Vec<&str> = od.instance_types.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names[0], "steady", "limited {limited}: {names:?}");
            assert!(!limited || !names.contains(&"big"), "{names:?}");
        }
    }
}
