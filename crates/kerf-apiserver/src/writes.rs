//! The vocabulary of writes shared by the store, its parts and the REST layer above it: which
//! part of an object a write addresses ([`Part`]) and what it replaces ([`Mode`]), a delete's
//! [`Preconditions`], whether a write is kept or only worked out ([`Commit`]), and what a watch
//! says happened ([`ChangeType`]).

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Main,
    Status,
}

/// How a write treats the parts of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Metadata and spec; the stored status is kept.
    Spec,
    /// Status only (the status subresource).
    Status,
    /// Everything (the simulator's own stand-ins).
    All,
}

/// What happened to an object, as a watch reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeType {
    Added,
    Modified,
    Deleted,
}

impl ChangeType {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeType::Added => "ADDED",
            ChangeType::Modified => "MODIFIED",
            ChangeType::Deleted => "DELETED",
        }
    }
}

/// Preconditions of a delete (DeleteOptions.preconditions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// Whether a write is kept, or only worked out and answered (`dryRun=All`): a dry run checks and
/// computes everything a write does (admission, names, conflicts, preconditions) and changes
/// nothing: no object, resourceVersion, uid or watch event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Commit {
    #[default]
    Store,
    DryRun,
}
