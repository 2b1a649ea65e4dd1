//! A lower bound on the cheapest fleet that holds a set of pods: what `kerf bench packing`
//! compares the Scheduler's fleet against. Only its knapsack takes part in decisions: it finds
//! the mixes of pod shapes new claims may be sized for (`scheduler::packing`).
//!
//! # The problem and its relaxation
//!
//! Pods come in shapes `s` (a request vector `r_s` over resources: cpu, memory, pod count, ...)
//! with `n_s` pods each. Bins are the instance types a NodePool may launch, each with what is
//! free for pods `F_b` (allocatable less the DaemonSet overhead, the pod-count limit included as
//! the `pods` resource) and the price `p_b` of its cheapest allowed offering. A *configuration*
//! `c = (b, a)` is a bin and a vector of pod counts with `Σ_s a_s r_s ≤ F_b` componentwise and
//! `a_s ≤ n_s`; it costs `p_b`. Every fleet that holds the pods is a multiset of configurations,
//! so the optimum of the integer program
//!
//! ```text
//! minimise Σ_c p_c x_c   subject to   Σ_c a_{s,c} x_c ≥ n_s  (every shape s),   x_c ∈ ℕ
//! ```
//!
//! is the cheapest fleet, and its linear relaxation (`x_c ≥ 0` real) is a lower bound on it.
//! Capping `a_s ≤ n_s` changes nothing: a configuration with more pods of a shape than exist is
//! dominated by the same bin with `n_s`, at the same price. Dropping a bin that another bin
//! dominates (at least as much room in every resource, at most the price) changes nothing either.
//! Every constraint the relaxation ignores (topology spread, affinity, zones, ports, limits) can
//! only make the real optimum dearer, so the bound stays a bound.
//!
//! # Column generation
//!
//! The configurations are far too many to list, so the LP is solved over a growing subset (the
//! restricted master, solved by a small revised simplex in [`Master`]): start with one
//! single-shape column per shape, solve, read the duals `y_s ≥ 0` (the price of one pod of each
//! shape), and ask every bin for the configuration of largest dual value `Σ_s y_s a_s` (a bounded
//! multi-dimensional integer knapsack, solved exactly by branch and bound in [`knapsack`]). A
//! configuration worth more than its bin's price has a negative reduced cost and joins the
//! master; when none does, the master's optimum is the LP's optimum.
//!
//! # Why the number returned is a true bound (Farley's bound)
//!
//! Column generation stops at a round limit and computes in floating point, so the bound is not
//! read off the master. Instead, for the final duals `y ≥ 0`, let
//! `ρ = max_b max_a (Σ_s y_s a_s) / p_b` over every bin and every configuration (the knapsack's
//! exact optimum, or an upper bound on it when its search is cut short). Then `y / ρ` is
//! feasible for the dual LP (`Σ_s a_s y_s / ρ ≤ p_b` for every configuration), so by weak
//! duality `Σ_s n_s y_s / max(ρ, 1)` is at most the LP optimum and hence at most the cheapest
//! fleet. At convergence `ρ = 1` and the bound equals the LP optimum.

/// One kind of bin: what is free for pods in each resource, and its price ($/h).
#[derive(Debug, Clone, PartialEq)]
pub struct BoundBin {
    pub name: String,
    pub free: Vec<i64>,
    pub price: f64,
}

/// One pod shape: its requests in each resource (the bins' order) and how many pods have it.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundShape {
    pub requests: Vec<i64>,
    pub count: u64,
}

/// The bound and how it was reached.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    /// A lower bound on the cheapest fleet ($/h): Farley's bound for the final duals.
    pub value: f64,
    /// The restricted master's optimum at the end (the LP optimum when `converged`).
    pub master: f64,
    /// Columns generated.
    pub columns: usize,
    /// Pricing rounds.
    pub rounds: usize,
    /// No configuration with a negative reduced cost was left.
    pub converged: bool,
    /// Every pricing knapsack of the final check was solved exactly.
    pub exact: bool,
}

/// Why no bound exists.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BoundError {
    #[error("pod shape {0} fits no bin")]
    ShapeFitsNoBin(usize),
    #[error("bin {name}: price must be positive and finite, got {price}")]
    BadPrice { name: String, price: f64 },
}

const EPS: f64 = 1e-9;
const MAX_ROUNDS: usize = 400;
/// Branch-and-bound nodes per knapsack before the search falls back to an upper bound.
const KNAPSACK_BUDGET: usize = 2_000_000;

/// The LP-relaxation lower bound on the cheapest fleet of `bins` holding `shapes`; see the
/// module documentation.
pub fn lower_bound(bins: &[BoundBin], shapes: &[BoundShape]) -> Result<Bound, BoundError> {
    for b in bins {
        if !(b.price.is_finite() && b.price > 0.0) {
            return Err(BoundError::BadPrice { name: b.name.clone(), price: b.price });
        }
    }
    let shapes: Vec<&BoundShape> = shapes.iter().filter(|s| s.count > 0).collect();
    if shapes.is_empty() {
        return Ok(Bound { value: 0.0, master: 0.0, columns: 0, rounds: 0, converged: true, exact: true });
    }
    let bins = undominated(bins);
    let m = shapes.len();
    let counts: Vec<f64> = shapes.iter().map(|s| s.count as f64).collect();
    // Initial columns: for each shape, the bin that holds its pods most cheaply.
    let mut columns: Vec<Column> = Vec::new();
    for (s, shape) in shapes.iter().enumerate() {
        let best = bins
            .iter()
            .filter_map(|b| {
                let k = units_fitting(&shape.requests, &b.free).min(shape.count);
                (k > 0).then(|| (b.price / k as f64, b, k))
            })
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let Some((_, b, k)) = best else { return Err(BoundError::ShapeFitsNoBin(s)) };
        let mut a = vec![0u64; m];
        a[s] = k;
        columns.push(Column { price: b.price, a });
    }
    let mut rounds = 0;
    let mut converged = false;
    let mut duals;
    let mut master;
    loop {
        let sol = Master::solve(&columns, &counts);
        duals = sol.duals;
        master = sol.value;
        if rounds >= MAX_ROUNDS {
            break;
        }
        rounds += 1;
        let mut added = 0;
        for b in &bins {
            let k = knapsack(&b.free, &shapes, &duals, KNAPSACK_BUDGET);
            if k.best > b.price * (1.0 + 1e-9) + EPS && !columns.iter().any(|c| c.price == b.price && c.a == k.a) {
                columns.push(Column { price: b.price, a: k.a });
                added += 1;
            }
        }
        if added == 0 {
            converged = true;
            break;
        }
    }
    // Farley's bound for the final duals.
    let mut rho: f64 = 1.0;
    let mut exact = true;
    for b in &bins {
        let k = knapsack(&b.free, &shapes, &duals, KNAPSACK_BUDGET);
        exact &= k.exact;
        rho = rho.max(k.upper / b.price);
    }
    let value = duals.iter().zip(&counts).map(|(y, n)| y * n).sum::<f64>() / rho;
    Ok(Bound { value, master, columns: columns.len(), rounds, converged, exact })
}

/// Bins no other bin dominates (as much room everywhere for at most the price; of equal ones the
/// first).
fn undominated(bins: &[BoundBin]) -> Vec<&BoundBin> {
    let dominates = |a: &BoundBin, b: &BoundBin| a.price <= b.price && a.free.iter().zip(&b.free).all(|(x, y)| x >= y);
    bins.iter()
        .enumerate()
        .filter(|(i, b)| {
            !bins.iter().enumerate().any(|(j, o)| j != *i && dominates(o, b) && (!dominates(b, o) || j < *i))
        })
        .map(|(_, b)| b)
        .collect()
}

/// How many pods of `requests` fit in `free` (`u64::MAX` for a pod that asks nothing).
pub(crate) fn units_fitting(requests: &[i64], free: &[i64]) -> u64 {
    units_in(requests, free.iter().copied())
}

/// How many pods of `requests` fit in `room`, one amount per resource, any of which may be
/// negative (`u64::MAX` for a pod that asks nothing).
pub(crate) fn units_in(requests: &[i64], room: impl IntoIterator<Item = i64>) -> u64 {
    let mut k = u64::MAX;
    for (r, f) in requests.iter().zip(room) {
        if *r > 0 {
            if f < *r {
                return 0;
            }
            k = k.min((f / *r) as u64);
        }
    }
    k
}

struct Column {
    price: f64,
    a: Vec<u64>,
}

/// The restricted master `min Σ p_c x_c, Σ_c a_c x_c ≥ n, x ≥ 0` by a revised simplex with the
/// basis inverse recomputed each step (the master has one row per shape: a handful).
struct Master {
    value: f64,
    duals: Vec<f64>,
}

impl Master {
    /// Columns `0..k` are the configurations, `k..k+m` the surplus variables (`-e_i`, cost 0).
    /// The first `m` configurations are the single-shape ones: a feasible starting basis.
    fn solve(columns: &[Column], n: &[f64]) -> Master {
        let m = n.len();
        let k = columns.len();
        let entry = |j: usize, i: usize| -> f64 {
            if j < k {
                columns[j].a[i] as f64
            } else if j - k == i {
                -1.0
            } else {
                0.0
            }
        };
        let cost = |j: usize| if j < k { columns[j].price } else { 0.0 };
        let mut basis: Vec<usize> = (0..m).collect();
        let mut duals = vec![0.0; m];
        let mut x = vec![0.0; m];
        for iter in 0..10_000 {
            let Some(binv) = invert(&basis.iter().map(|&j| (0..m).map(|i| entry(j, i)).collect()).collect::<Vec<_>>())
            else {
                break;
            };
            for (i, xi) in x.iter_mut().enumerate() {
                *xi = (0..m).map(|r| binv[i][r] * n[r]).sum();
            }
            for (i, d) in duals.iter_mut().enumerate() {
                *d = (0..m).map(|r| cost(basis[r]) * binv[r][i]).sum();
            }
            // Entering column: most negative reduced cost (Bland's smallest index after many
            // steps, against cycling).
            let bland = iter > 2_000;
            let mut enter = None;
            let mut best = -1e-9;
            for j in 0..k + m {
                if basis.contains(&j) {
                    continue;
                }
                let d = cost(j) - (0..m).map(|i| duals[i] * entry(j, i)).sum::<f64>();
                // Relative to the column's price, so cheap and dear bins compare fairly.
                let rel = d / cost(j).max(1e-6);
                if rel < best {
                    enter = Some(j);
                    if bland {
                        break;
                    }
                    best = rel;
                }
            }
            let Some(q) = enter else { break };
            let u: Vec<f64> = (0..m).map(|i| (0..m).map(|r| binv[i][r] * entry(q, r)).sum()).collect();
            let mut leave = None;
            let mut ratio = f64::INFINITY;
            for i in 0..m {
                if u[i] > 1e-12 {
                    let t = x[i] / u[i];
                    if t < ratio - 1e-12 || (t <= ratio + 1e-12 && leave.is_some_and(|l: usize| basis[i] < basis[l])) {
                        ratio = t;
                        leave = Some(i);
                    }
                }
            }
            // Unbounded cannot happen (prices are positive); stop if it seems to.
            let Some(l) = leave else { break };
            basis[l] = q;
        }
        let value = (0..m).map(|i| cost(basis[i]) * x[i]).sum();
        Master { value, duals: duals.into_iter().map(|d: f64| d.max(0.0)).collect() }
    }
}

/// The inverse of a small dense matrix (Gauss–Jordan with partial pivoting), `None` if singular.
fn invert(a: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let m = a.len();
    // `a` holds columns: transpose to rows.
    let mut w: Vec<Vec<f64>> = (0..m)
        .map(|r| (0..m).map(|c| a[c][r]).chain((0..m).map(|c| if c == r { 1.0 } else { 0.0 })).collect())
        .collect();
    for col in 0..m {
        let piv = (col..m).max_by(|x, y| w[*x][col].abs().total_cmp(&w[*y][col].abs()))?;
        if w[piv][col].abs() < 1e-12 {
            return None;
        }
        w.swap(col, piv);
        let p = w[col][col];
        for v in w[col].iter_mut() {
            *v /= p;
        }
        let pivot_row = w[col].clone();
        for (r, row) in w.iter_mut().enumerate() {
            if r != col {
                let f = row[col];
                if f != 0.0 {
                    for (x, p) in row.iter_mut().zip(&pivot_row) {
                        *x -= f * p;
                    }
                }
            }
        }
    }
    Some(w.into_iter().map(|row| row[m..].to_vec()).collect())
}

/// A knapsack's answer: the best configuration found, its value, an upper bound on the optimum
/// (equal to `best` when `exact`).
pub(crate) struct Knapsack {
    pub(crate) a: Vec<u64>,
    pub(crate) best: f64,
    upper: f64,
    exact: bool,
}

/// The configuration of bin `b` of largest dual value `Σ_s y_s a_s` (`a_s ≤ n_s`), by depth-first
/// branch and bound: shapes by dual value per share of the bin, most first; counts largest first;
/// a node is cut when its value plus the fractional bound of the shapes left (the least, over
/// resources, of the one-resource fractional knapsack) cannot beat the best.
///
/// At most `budget` search nodes: past it, the best configuration found so far (not `exact`).
/// The provisioner's claim sizing uses it too, with a small budget (see `scheduler::packing`).
pub(crate) fn knapsack(free: &[i64], shapes: &[&BoundShape], y: &[f64], budget: usize) -> Knapsack {
    let m = shapes.len();
    let d = free.len();
    let mut items: Vec<usize> =
        (0..m).filter(|s| y[*s] > EPS && units_fitting(&shapes[*s].requests, free) > 0).collect();
    let share = |s: usize| -> f64 {
        shapes[s]
            .requests
            .iter()
            .zip(free)
            .map(|(r, f)| if *f > 0 { *r as f64 / *f as f64 } else { 0.0 })
            .sum::<f64>()
            .max(1e-12)
    };
    items.sort_by(|x, z| (y[*z] / share(*z)).total_cmp(&(y[*x] / share(*x))).then(x.cmp(z)));
    // Per resource, the items by value per unit of that resource, most first.
    let orders: Vec<Vec<usize>> = (0..d)
        .map(|r| {
            let mut o: Vec<usize> = (0..items.len()).collect();
            let dens = |i: usize| {
                let q = shapes[items[i]].requests[r];
                if q > 0 { y[items[i]] / q as f64 } else { f64::INFINITY }
            };
            o.sort_by(|x, z| dens(*z).total_cmp(&dens(*x)).then(x.cmp(z)));
            o
        })
        .collect();
    let mut search = Search {
        shapes,
        y,
        items: &items,
        orders: &orders,
        a: vec![0; m],
        best_a: vec![0; m],
        best: 0.0,
        nodes: 0,
        budget,
        cut_short: false,
    };
    let mut rem = free.to_vec();
    let root = search.bound(0, &rem);
    search.dfs(0, 0.0, &mut rem);
    let exact = !search.cut_short;
    Knapsack { a: search.best_a, best: search.best, upper: if exact { search.best } else { root }, exact }
}

struct Search<'a> {
    shapes: &'a [&'a BoundShape],
    y: &'a [f64],
    items: &'a [usize],
    orders: &'a [Vec<usize>],
    a: Vec<u64>,
    best_a: Vec<u64>,
    best: f64,
    nodes: usize,
    budget: usize,
    cut_short: bool,
}

impl Search<'_> {
    /// An upper bound on the value items `from..` can add within `rem`.
    fn bound(&self, from: usize, rem: &[i64]) -> f64 {
        let mut ub = f64::INFINITY;
        for (r, order) in self.orders.iter().enumerate() {
            let mut cap = rem[r] as f64;
            let mut v = 0.0;
            for &i in order {
                if i < from {
                    continue;
                }
                let s = self.items[i];
                let q = self.shapes[s].requests[r] as f64;
                let n = self.max_count(s, rem) as f64;
                if q <= 0.0 {
                    v += self.y[s] * n;
                    continue;
                }
                let take = n.min(cap / q);
                v += self.y[s] * take;
                cap -= take * q;
                if cap <= 0.0 {
                    break;
                }
            }
            ub = ub.min(v);
        }
        ub
    }

    fn max_count(&self, s: usize, rem: &[i64]) -> u64 {
        units_fitting(&self.shapes[s].requests, rem).min(self.shapes[s].count)
    }

    fn dfs(&mut self, from: usize, value: f64, rem: &mut Vec<i64>) {
        if value > self.best + EPS {
            self.best = value;
            self.best_a.clone_from(&self.a);
        }
        if from == self.items.len() {
            return;
        }
        self.nodes += 1;
        if self.nodes > self.budget {
            self.cut_short = true;
            return;
        }
        if value + self.bound(from, rem) <= self.best + EPS {
            return;
        }
        let s = self.items[from];
        let max = self.max_count(s, rem);
        for k in (0..=max).rev() {
            for (x, r) in rem.iter_mut().zip(&self.shapes[s].requests) {
                *x -= *r * k as i64;
            }
            self.a[s] = k;
            self.dfs(from + 1, value + self.y[s] * k as f64, rem);
            self.a[s] = 0;
            for (x, r) in rem.iter_mut().zip(&self.shapes[s].requests) {
                *x += *r * k as i64;
            }
            if self.cut_short {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(name: &str, free: &[i64], price: f64) -> BoundBin {
        BoundBin { name: name.into(), free: free.to_vec(), price }
    }
    fn shape(requests: &[i64], count: u64) -> BoundShape {
        BoundShape { requests: requests.to_vec(), count }
    }

    /// The cheapest fleet by exhaustive search: every way to put the pods, one at a time, into
    /// a new bin of any kind or an open one.
    fn brute_force(bins: &[BoundBin], shapes: &[BoundShape]) -> f64 {
        let pods: Vec<&[i64]> =
            shapes.iter().flat_map(|s| std::iter::repeat_n(s.requests.as_slice(), s.count as usize)).collect();
        let mut best = f64::INFINITY;
        let mut open: Vec<(usize, Vec<i64>)> = Vec::new();
        fn go(
            i: usize,
            pods: &[&[i64]],
            bins: &[BoundBin],
            open: &mut Vec<(usize, Vec<i64>)>,
            cost: f64,
            best: &mut f64,
        ) {
            if cost >= *best {
                return;
            }
            if i == pods.len() {
                *best = cost;
                return;
            }
            let p = pods[i];
            for j in 0..open.len() {
                if open[j].1.iter().zip(p).all(|(f, r)| f >= r) {
                    for (f, r) in open[j].1.iter_mut().zip(p) {
                        *f -= r;
                    }
                    go(i + 1, pods, bins, open, cost, best);
                    for (f, r) in open[j].1.iter_mut().zip(p) {
                        *f += r;
                    }
                }
            }
            for (b, kind) in bins.iter().enumerate() {
                if kind.free.iter().zip(p).all(|(f, r)| f >= r) {
                    open.push((b, kind.free.iter().zip(p).map(|(f, r)| f - r).collect()));
                    go(i + 1, pods, bins, open, cost + kind.price, best);
                    open.pop();
                }
            }
        }
        go(0, &pods, bins, &mut open, 0.0, &mut best);
        best
    }

    #[test]
    fn bound_equals_the_optimum_when_pods_divide_bins_exactly() {
        // 8 pods of 1 cpu; a 4-cpu bin at 1.0 and a 2-cpu bin at 0.6: two big bins, 2.0.
        let bins = [bin("big", &[4000, 16, 10], 1.0), bin("small", &[2000, 8, 10], 0.6)];
        let shapes = [shape(&[1000, 1, 1], 8)];
        let b = lower_bound(&bins, &shapes).unwrap();
        assert!(b.converged && b.exact);
        assert!((b.value - 2.0).abs() < 1e-9, "{b:?}");
        assert!((brute_force(&bins, &shapes) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn bound_never_exceeds_the_brute_force_optimum_on_small_mixes() {
        // Two resources and a pod-count limit, several bins with unequal price per resource.
        let bins = [
            bin("c", &[4000, 8, 6], 0.17),
            bin("m", &[4000, 16, 6], 0.19),
            bin("r", &[4000, 32, 6], 0.25),
            bin("c2", &[2000, 4, 3], 0.09),
            bin("r2", &[2000, 16, 3], 0.13),
        ];
        let cases: Vec<Vec<BoundShape>> = vec![
            vec![shape(&[1000, 2, 1], 3), shape(&[500, 6, 1], 3)],
            vec![shape(&[1500, 1, 1], 2), shape(&[250, 7, 1], 3), shape(&[1000, 4, 1], 1)],
            vec![shape(&[3000, 3, 1], 2), shape(&[1000, 12, 1], 2)],
            vec![shape(&[100, 1, 1], 7)],
        ];
        for shapes in &cases {
            let b = lower_bound(&bins, shapes).unwrap();
            let opt = brute_force(&bins, shapes);
            assert!(b.exact, "{b:?}");
            assert!(b.value <= opt + 1e-9, "bound {} above the optimum {opt} for {shapes:?}", b.value);
            // A lower bound worth having: within 40% of these tiny optima (rounding dominates).
            assert!(b.value >= 0.6 * opt, "bound {} far below {opt} for {shapes:?}", b.value);
        }
    }

    #[test]
    fn pod_count_limit_binds_the_bound() {
        // Tiny pods, plenty of cpu and memory: only the pod-count limit (4 per bin) matters.
        let bins = [bin("a", &[64000, 256, 4], 1.0)];
        let shapes = [shape(&[10, 1, 1], 10)];
        let b = lower_bound(&bins, &shapes).unwrap();
        assert!((b.value - 2.5).abs() < 1e-9, "{b:?}");
        assert!((brute_force(&bins, &shapes) - 3.0).abs() < 1e-9);
    }

    #[test]
    fn mixing_shapes_on_one_bin_lowers_the_bound_below_separate_fleets() {
        // A cpu-heavy and a memory-heavy shape fill one bin together exactly.
        let bins = [bin("m", &[4000, 16, 10], 1.0)];
        let shapes = [shape(&[3000, 4, 1], 4), shape(&[1000, 12, 1], 4)];
        let b = lower_bound(&bins, &shapes).unwrap();
        assert!((b.value - 4.0).abs() < 1e-9, "{b:?}");
        assert!((brute_force(&bins, &shapes) - 4.0).abs() < 1e-9);
    }

    #[test]
    fn shape_that_fits_no_bin_has_no_bound() {
        let bins = [bin("small", &[1000, 2, 10], 0.1)];
        assert_eq!(lower_bound(&bins, &[shape(&[2000, 1, 1], 1)]), Err(BoundError::ShapeFitsNoBin(0)));
    }

    #[test]
    fn knapsack_finds_the_exact_best_configuration() {
        let b = bin("x", &[10, 10, 100], 1.0);
        let shapes = [shape(&[6, 1, 1], 5), shape(&[5, 5, 1], 5), shape(&[4, 4, 1], 5)];
        let refs: Vec<&BoundShape> = shapes.iter().collect();
        // Values 7, 5, 4: best is 6+4 (11) over 5+5 (10) and 6 alone (7).
        let k = knapsack(&b.free, &refs, &[7.0, 5.0, 4.0], KNAPSACK_BUDGET);
        assert!(k.exact);
        assert_eq!(k.a, vec![1, 0, 1]);
        assert!((k.best - 11.0).abs() < 1e-12);
    }
}
