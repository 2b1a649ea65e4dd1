//! kerf-controller
