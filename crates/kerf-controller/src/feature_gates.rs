//! Karpenter's feature gates as kerf reads them: `FEATURE_GATES` and `AWS_FEATURE_GATES` in
//! `kerf controller`, `settings.featureGates` in scenarios. Every name Karpenter v1.15 defines is
//! accepted, so a Karpenter installation's settings carry over as they are; what kerf does with
//! each gate is [`Support`]. A name no Karpenter defines is bad input.

/// What kerf does with a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Acted on as Karpenter acts on it.
    Implemented,
    /// What the gate turns on is always on in kerf; `false` does not turn it off.
    AlwaysOn,
    /// kerf does not implement what the gate turns on; `true` changes nothing.
    NotYet,
}

/// One of Karpenter's feature gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGate {
    /// As `FEATURE_GATES` names it: `SpotToSpotConsolidation`.
    pub name: &'static str,
    /// Karpenter's default.
    pub default: bool,
    /// `true` for the AWS provider's gates (`AWS_FEATURE_GATES`).
    pub aws: bool,
    pub support: Support,
}

const fn gate(name: &'static str, default: bool, aws: bool, support: Support) -> FeatureGate {
    FeatureGate { name, default, aws, support }
}

/// Every gate of Karpenter v1.15, its AWS provider's included, and `Drift` (a gate before v1,
/// always on since).
pub const KARPENTER_GATES: &[FeatureGate] = &[
    gate("SpotToSpotConsolidation", false, false, Support::Implemented),
    gate("NodeRepair", false, false, Support::Implemented),
    gate("ReservedCapacity", true, false, Support::Implemented),
    gate("NodeOverlay", false, false, Support::AlwaysOn),
    gate("StaticCapacity", false, false, Support::AlwaysOn),
    gate("CapacityBuffer", false, false, Support::AlwaysOn),
    gate("TerminateFirstDrift", false, false, Support::Implemented),
    gate("TerminateFirstRepair", false, false, Support::Implemented),
    gate("PodDeletionCostManagement", false, false, Support::Implemented),
    gate("Drift", true, false, Support::AlwaysOn),
    gate("NodeClassCEL", false, true, Support::NotYet),
    gate("RebootForRepair", false, true, Support::Implemented),
    gate("DRANVIDIAGPU", false, true, Support::NotYet),
    gate("DRAEFA", false, true, Support::NotYet),
];

/// The gate named `name` (exactly, as Karpenter matches it).
pub fn by_name(name: &str) -> Option<&'static FeatureGate> {
    KARPENTER_GATES.iter().find(|g| g.name == name)
}

/// The gate a Helm value names: `spotToSpotConsolidation` (the name with its first letter
/// lowered; `DRANVIDIAGPU` → `dRANVIDIAGPU` is not one, so the all-capital names match as they
/// are too, and in lower case).
pub fn by_helm_value(value: &str) -> Option<&'static FeatureGate> {
    KARPENTER_GATES.iter().find(|g| helm_value(g.name) == value || g.name == value || g.name.to_lowercase() == value)
}

/// `SpotToSpotConsolidation` → `spotToSpotConsolidation`.
pub fn helm_value(name: &str) -> String {
    let mut chars = name.chars();
    chars.next().map(|c| c.to_ascii_lowercase().to_string() + chars.as_str()).unwrap_or_default()
}

/// Gates as set: name and value, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateSettings(pub Vec<(&'static FeatureGate, bool)>);

impl GateSettings {
    /// Parses `NAME=true,NAME=false` (spaces around items allowed, empty items skipped). `what`
    /// names the setting in problems (`FEATURE_GATES=...`).
    pub fn parse(value: &str, what: &str) -> Result<GateSettings, String> {
        let mut out = Vec::new();
        for item in value.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            let (name, on) = item.split_once('=').ok_or_else(|| format!("{what}: {item:?} is not NAME=true|false"))?;
            let (name, on) = (name.trim(), on.trim());
            let on = match on {
                "true" => true,
                "false" => false,
                other => return Err(format!("{what}: {name}={other}: expected true or false")),
            };
            let gate = by_name(name).ok_or_else(|| {
                format!(
                    "{what}: unknown feature gate {name:?}: Karpenter defines {}",
                    KARPENTER_GATES.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
                )
            })?;
            out.push((gate, on));
        }
        Ok(GateSettings(out))
    }

    /// The value set last for the gate named `name`, if any.
    pub fn get(&self, name: &str) -> Option<bool> {
        self.0.iter().rev().find(|(g, _)| g.name == name).map(|(_, on)| *on)
    }

    /// `other`'s settings after these.
    pub fn extend(&mut self, other: GateSettings) {
        self.0.extend(other.0);
    }

    /// The gates set to a value kerf does not act on: `NAME=true` of a gate kerf does not
    /// implement yet, `NAME=false` of one that is always on in kerf. `None` when there are none;
    /// else a sentence for one warning.
    pub fn not_acted_on(&self) -> Option<String> {
        let mut not_yet = Vec::new();
        let mut always_on = Vec::new();
        for (gate, on) in &self.0 {
            if self.get(gate.name) != Some(*on) {
                continue; // set again later
            }
            match (gate.support, on) {
                (Support::NotYet, true) if !not_yet.contains(&gate.name) => not_yet.push(gate.name),
                (Support::AlwaysOn, false) if !always_on.contains(&gate.name) => always_on.push(gate.name),
                _ => {}
            }
        }
        let mut parts = Vec::new();
        if !not_yet.is_empty() {
            parts.push(format!("{} (not implemented in kerf yet; no effect)", not_yet.join(", ")));
        }
        if !always_on.is_empty() {
            parts.push(format!("{} (always on in kerf; false has no effect)", always_on.join(", ")));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_karpenter_gate_parses_and_an_unknown_name_is_refused_naming_it() {
        let all: Vec<String> = KARPENTER_GATES.iter().map(|g| format!("{}={}", g.name, !g.default)).collect();
        let s = GateSettings::parse(&all.join(","), "FEATURE_GATES").unwrap();
        assert_eq!(s.0.len(), KARPENTER_GATES.len());
        assert_eq!(s.get("SpotToSpotConsolidation"), Some(true));
        let e = GateSettings::parse("Teleport=true", "FEATURE_GATES=Teleport=true").unwrap_err();
        assert!(
            e.starts_with("FEATURE_GATES=Teleport=true: unknown feature gate \"Teleport\": Karpenter defines"),
            "{e}"
        );
        let e = GateSettings::parse("NodeRepair=yes", "X").unwrap_err();
        assert_eq!(e, "X: NodeRepair=yes: expected true or false");
        let e = GateSettings::parse("NodeRepair", "X").unwrap_err();
        assert_eq!(e, "X: \"NodeRepair\" is not NAME=true|false");
        assert_eq!(GateSettings::parse(" , ", "X").unwrap(), GateSettings::default());
    }

    #[test]
    fn one_sentence_names_the_gates_kerf_does_not_act_on() {
        let s = GateSettings::parse(
            "SpotToSpotConsolidation=true,NodeRepair=true,NodeClassCEL=true,StaticCapacity=false,ReservedCapacity=false,NodeOverlay=true,NodeOverlay=false",
            "X",
        )
        .unwrap();
        assert_eq!(
            s.not_acted_on().as_deref(),
            Some(
                "NodeClassCEL (not implemented in kerf yet; no effect); StaticCapacity, NodeOverlay (always on in kerf; false has no effect)"
            )
        );
        assert_eq!(
            GateSettings::parse("SpotToSpotConsolidation=false,CapacityBuffer=true", "X").unwrap().not_acted_on(),
            None
        );
    }

    #[test]
    fn helm_values_name_gates_with_a_lower_case_first_letter() {
        assert_eq!(by_helm_value("spotToSpotConsolidation").map(|g| g.name), Some("SpotToSpotConsolidation"));
        assert_eq!(by_helm_value("podDeletionCostManagement").map(|g| g.name), Some("PodDeletionCostManagement"));
        assert_eq!(by_helm_value("nodeClassCEL").map(|g| g.name), Some("NodeClassCEL"));
        assert_eq!(by_helm_value("teleport"), None);
    }
}
