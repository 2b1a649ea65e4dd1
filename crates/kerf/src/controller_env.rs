//! The settings `kerf controller` takes from its environment, named as Karpenter's chart sets
//! them (`CLUSTER_NAME`, `BATCH_IDLE_DURATION`, `FEATURE_GATES`, ...). An empty value means
//! unset; a value that cannot be read is bad input naming the variable.

use std::time::Duration;

use kerf_api::GoDuration;
use kerf_controller::feature_gates::GateSettings;
use kerf_scheduling::PreferencePolicy;

/// Settings from the environment; `None` where the variable is unset or empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnvSettings {
    pub cluster_name: Option<String>,
    pub cluster_endpoint: Option<String>,
    pub interruption_queue: Option<String>,
    /// The Lease leader election takes (`LEADER_ELECTION_LEASE`).
    pub lease_name: Option<String>,
    pub batch_idle: Option<Duration>,
    pub batch_max: Option<Duration>,
    /// `FEATURE_GATES=SpotToSpotConsolidation=true`.
    pub spot_to_spot_consolidation: Option<bool>,
    /// `FEATURE_GATES=NodeRepair=true`.
    pub node_repair: Option<bool>,
    /// `AWS_FEATURE_GATES=RebootForRepair=true` (or in `FEATURE_GATES`).
    pub reboot_for_repair: Option<bool>,
    /// Every gate `FEATURE_GATES` and `AWS_FEATURE_GATES` set, in that order.
    pub feature_gates: GateSettings,
    /// `PREFERENCE_POLICY` (Karpenter's `Respect` or `Ignore`, or kerf's `RespectWithinRoom`).
    pub preference_policy: Option<PreferencePolicy>,
}

impl EnvSettings {
    /// Reads the settings through `get` (the process environment in `kerf controller`).
    pub fn read(get: impl Fn(&str) -> Option<String>) -> Result<EnvSettings, String> {
        let value = |name: &str| get(name).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let duration = |name: &str| -> Result<Option<Duration>, String> {
            value(name)
                .map(|v| {
                    GoDuration::parse(&v)
                        .map(|d| d.as_duration())
                        .map_err(|e| format!("{name}={v}: not a duration such as 1s or 10s: {}", e.problem))
                })
                .transpose()
        };
        // Karpenter's names are accepted in either variable: a gate set in the other one than
        // Karpenter reads it from is still read.
        let mut feature_gates = GateSettings::default();
        for name in ["FEATURE_GATES", "AWS_FEATURE_GATES"] {
            if let Some(gates) = value(name) {
                feature_gates.extend(GateSettings::parse(&gates, &format!("{name}={gates}"))?);
            }
        }
        let spot_to_spot = feature_gates.get("SpotToSpotConsolidation");
        let node_repair = feature_gates.get("NodeRepair");
        let reboot_for_repair = feature_gates.get("RebootForRepair");
        let preference_policy = value("PREFERENCE_POLICY")
            .map(|v| {
                PreferencePolicy::parse(&v).ok_or_else(|| {
                    format!("PREFERENCE_POLICY={v}: expected one of {}", PreferencePolicy::NAMES.join(", "))
                })
            })
            .transpose()?;
        Ok(EnvSettings {
            cluster_name: value("CLUSTER_NAME"),
            cluster_endpoint: value("CLUSTER_ENDPOINT"),
            interruption_queue: value("INTERRUPTION_QUEUE"),
            lease_name: value("LEADER_ELECTION_LEASE"),
            batch_idle: duration("BATCH_IDLE_DURATION")?,
            batch_max: duration("BATCH_MAX_DURATION")?,
            spot_to_spot_consolidation: spot_to_spot,
            node_repair,
            reboot_for_repair,
            feature_gates,
            preference_policy,
        })
    }

    /// The controllers' options with these settings applied over `base`.
    pub fn options(&self, base: kerf_controller::Options) -> kerf_controller::Options {
        kerf_controller::Options {
            batch_idle: self.batch_idle.unwrap_or(base.batch_idle),
            batch_max: self.batch_max.unwrap_or(base.batch_max),
            spot_to_spot_consolidation: self.spot_to_spot_consolidation.unwrap_or(base.spot_to_spot_consolidation),
            preference_policy: self.preference_policy.unwrap_or(base.preference_policy),
            node_repair: self.node_repair.unwrap_or(base.node_repair),
            pod_deletion_cost_management: self
                .feature_gates
                .get("PodDeletionCostManagement")
                .unwrap_or(base.pod_deletion_cost_management),
            reboot_for_repair: self.reboot_for_repair.unwrap_or(base.reboot_for_repair),
            terminate_first_drift: self.feature_gates.get("TerminateFirstDrift").unwrap_or(base.terminate_first_drift),
            terminate_first_repair: self
                .feature_gates
                .get("TerminateFirstRepair")
                .unwrap_or(base.terminate_first_repair),
            reserved_capacity: self.feature_gates.get("ReservedCapacity").unwrap_or(base.reserved_capacity),
            ..base
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<EnvSettings, String> {
        let map: BTreeMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        EnvSettings::read(|k| map.get(k).cloned())
    }

    #[test]
    fn the_charts_environment_sets_batching_feature_gates_and_the_lease() {
        let s = read(&[
            ("CLUSTER_NAME", "prod"),
            ("INTERRUPTION_QUEUE", ""),
            ("LEADER_ELECTION_LEASE", "kerf-leader-election"),
            ("BATCH_IDLE_DURATION", "2s"),
            ("BATCH_MAX_DURATION", "1m"),
            ("FEATURE_GATES", "SpotToSpotConsolidation=true,NodeRepair=false"),
            ("PREFERENCE_POLICY", "Respect"),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.cluster_name.as_deref(), Some("prod"));
        assert_eq!(s.interruption_queue, None, "empty means unset");
        assert_eq!(s.lease_name.as_deref(), Some("kerf-leader-election"));
        let o = s.options(kerf_controller::Options::default());
        assert_eq!(o.batch_idle, Duration::from_secs(2));
        assert_eq!(o.batch_max, Duration::from_secs(60));
        assert!(o.spot_to_spot_consolidation);
        assert_eq!(o.preference_policy, PreferencePolicy::Respect);
    }

    #[test]
    fn an_unreadable_setting_names_the_variable_and_the_problem() {
        let e = read(&[("BATCH_IDLE_DURATION", "soon")]).err().unwrap_or_default();
        assert!(e.starts_with("BATCH_IDLE_DURATION=soon: not a duration"), "{e}");
        let e = read(&[("FEATURE_GATES", "SpotToSpotConsolidation=yes")]).err().unwrap_or_default();
        assert!(e.contains("expected true or false"), "{e}");
        let e = read(&[("FEATURE_GATES", "Teleport=true")]).err().unwrap_or_default();
        assert!(e.starts_with("FEATURE_GATES=Teleport=true: unknown feature gate \"Teleport\""), "{e}");
        let e = read(&[("AWS_FEATURE_GATES", "NodeClassCEL=true,Warp=false")]).err().unwrap_or_default();
        assert!(e.starts_with("AWS_FEATURE_GATES=NodeClassCEL=true,Warp=false: unknown feature gate \"Warp\""), "{e}");
        let e = read(&[("PREFERENCE_POLICY", "Sometimes")]).err().unwrap_or_default();
        assert!(
            e.starts_with("PREFERENCE_POLICY=Sometimes: expected one of RespectWithinRoom, Respect, Ignore"),
            "{e}"
        );
    }

    #[test]
    fn every_gate_of_karpenter_v1_15_is_accepted_and_those_kerf_does_not_act_on_are_named() {
        let s = read(&[
            (
                "FEATURE_GATES",
                "NodeRepair=true,ReservedCapacity=true,SpotToSpotConsolidation=true,NodeOverlay=false,StaticCapacity=true,\
                 CapacityBuffer=true,TerminateFirstDrift=true,TerminateFirstRepair=true,PodDeletionCostManagement=true",
            ),
            ("AWS_FEATURE_GATES", "RebootForRepair=true,NodeClassCEL=false,DRANVIDIAGPU=false,DRAEFA=false"),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.spot_to_spot_consolidation, Some(true));
        assert!(s.options(kerf_controller::Options::default()).spot_to_spot_consolidation);
        assert!(s.options(kerf_controller::Options::default()).node_repair);
        assert!(s.options(kerf_controller::Options::default()).reboot_for_repair);
        assert!(s.options(kerf_controller::Options::default()).pod_deletion_cost_management);
        assert!(s.options(kerf_controller::Options::default()).terminate_first_drift);
        assert!(s.options(kerf_controller::Options::default()).terminate_first_repair);
        assert!(s.options(kerf_controller::Options::default()).reserved_capacity);
        assert_eq!(
            s.feature_gates.not_acted_on().as_deref(),
            Some("NodeOverlay (always on in kerf; false has no effect)")
        );
        let off = read(&[("FEATURE_GATES", "ReservedCapacity=false")]).unwrap_or_else(|e| panic!("{e}"));
        assert!(!off.options(kerf_controller::Options::default()).reserved_capacity);
        assert_eq!(off.feature_gates.not_acted_on(), None, "ReservedCapacity=false is acted on");
        // An AWS gate in FEATURE_GATES (or the reverse) is read all the same.
        let s =
            read(&[("FEATURE_GATES", "RebootForRepair=true"), ("AWS_FEATURE_GATES", "SpotToSpotConsolidation=true")])
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.spot_to_spot_consolidation, Some(true));
        assert_eq!(s.reboot_for_repair, Some(true));
    }

    #[test]
    fn nothing_set_keeps_the_defaults() {
        let s = read(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s, EnvSettings::default());
        assert_eq!(s.options(kerf_controller::Options::default()), kerf_controller::Options::default());
    }
}
