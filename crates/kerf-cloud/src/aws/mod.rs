//! AWS: the built-in instance catalog and Karpenter's allocatable arithmetic.

pub mod allocatable;
pub mod catalog;
pub mod windows;

pub use allocatable::{KubeletError, NodeClassSettings};
pub use catalog::{Catalog, CatalogError, EstimateRule, RegionOffer, TypeInfo, catalog, spot_price};
