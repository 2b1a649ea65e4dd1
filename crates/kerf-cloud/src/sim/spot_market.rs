//! The simulated spot market: spot prices that move while a simulation runs, so that what
//! consolidation does when the market moves under a settled fleet (the "marginal replace")
//! can be seen and compared between policies.
//!
//! A market is a seed and a largest change. Every spot offering's price becomes its model
//! price (the catalog's, or a custom type's) times `1 + change × (2u − 1)`, where `u` in
//! [0, 1] is drawn from the seed, the type and the zone; so the same seed gives the same
//! prices, each seed moves every (type, zone) independently, and prices stay within ±change
//! of the model. On-demand and reserved prices do not move. Running spot instances are billed
//! at the market price of their offering, as EC2 bills them.

use std::sync::Arc;

use kerf_api::labels;
use kerf_api::seeded::mix64;

use crate::aws::catalog::fnv1a64;
use kerf_api::InstanceType;

/// The largest change a market may make: prices stay positive and within reason.
pub const MAX_CHANGE: f64 = 0.9;

/// Spot prices as the market sets them now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpotMarket {
    pub seed: u64,
    /// The largest relative change from the model price, in [0, [`MAX_CHANGE`]].
    pub change: f64,
}

impl SpotMarket {
    /// The factor the model spot price of `instance_type` in `zone` is multiplied by.
    pub fn factor(&self, instance_type: &str, zone: &str) -> f64 {
        let h = mix64(fnv1a64(instance_type) ^ mix64(fnv1a64(zone) ^ self.seed));
        let u = (h % 10_001) as f64 / 10_000.0;
        1.0 + self.change * (2.0 * u - 1.0)
    }

    /// The market price of a spot offering whose model price is `model` ($/h, rounded to
    /// 1/100000 $ as the catalog's spot prices are).
    pub fn price(&self, instance_type: &str, zone: &str, model: f64) -> f64 {
        (model * self.factor(instance_type, zone) * 100_000.0).round() / 100_000.0
    }

    /// `types` with every spot offering at its market price (model prices in, market out).
    pub fn reprice(&self, types: &[Arc<InstanceType>]) -> Vec<Arc<InstanceType>> {
        types
            .iter()
            .map(|t| {
                if !t.offerings.iter().any(|o| o.capacity_type == labels::CAPACITY_TYPE_SPOT) {
                    return Arc::clone(t);
                }
                let mut moved = InstanceType::clone(t);
                for o in &mut moved.offerings {
                    if o.capacity_type == labels::CAPACITY_TYPE_SPOT {
                        o.price = self.price(&t.name, &o.zone, o.price);
                    }
                }
                Arc::new(moved)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_stay_within_the_change_and_differ_between_seeds() {
        let a = SpotMarket { seed: 1, change: 0.25 };
        let b = SpotMarket { seed: 2, change: 0.25 };
        let mut differ = 0;
        for t in ["m5.large", "c6i.2xlarge", "r7g.4xlarge", "t3.medium"] {
            for z in ["us-west-2a", "us-west-2b", "us-west-2c"] {
                let (fa, fb) = (a.factor(t, z), b.factor(t, z));
                assert!((0.75..=1.25).contains(&fa) && (0.75..=1.25).contains(&fb), "{t} {z}: {fa} {fb}");
                assert_eq!(fa, a.factor(t, z), "the same seed gives the same price");
                if (fa - fb).abs() > 1e-9 {
                    differ += 1;
                }
            }
        }
        assert!(differ >= 10, "a new seed moves most prices: {differ} of 12 moved");
    }

    #[test]
    fn no_change_keeps_the_model_price() {
        let m = SpotMarket { seed: 9, change: 0.0 };
        assert_eq!(m.price("m5.large", "us-west-2a", 0.03512), 0.03512);
    }
}
