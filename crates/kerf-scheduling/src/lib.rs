//! kerf-scheduling
