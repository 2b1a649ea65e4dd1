//! kerf-sim
