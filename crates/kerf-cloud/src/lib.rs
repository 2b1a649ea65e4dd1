//! kerf-cloud
