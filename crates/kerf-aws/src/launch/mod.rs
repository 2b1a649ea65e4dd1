//! Launching instances: user data, launch templates and CreateFleet.

pub mod fleet;
pub mod template;
pub mod userdata;
