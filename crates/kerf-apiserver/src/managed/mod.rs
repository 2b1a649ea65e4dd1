//! Field management (`metadata.managedFields`), as the API server keeps it: each manager's fields
//! per operation (`Apply` for server-side apply, `Update` for create, update and patch), so that
//! an apply can tell which of its fields another manager set and report those as conflicts. A
//! write by a manager takes the fields it sets from every other manager; an apply's fields are
//! exactly those of its configuration (docs/playground.md, "Server-side apply").

pub mod fieldset;
pub mod shapes;

use serde_json::{Map, Value, json};

use fieldset::{FieldSet, Walker};
use shapes::Shapes;

/// `Apply` or `Update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    fn is(&self, manager: &str, operation: Operation, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation.as_str() && self.subresource == subresource
    }

    /// How a conflict names the manager: `"kubectl-edit" using apps/v1`, or `"kubectl"` for an
    /// applier.
    pub fn who(&self) -> String {
        if self.operation == "Apply" {
            format!("{:?}", self.manager)
        } else {
            format!("{:?} using {}", self.manager, self.api_version)
        }
    }

    fn to_json(&self) -> Value {
        let mut e = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": self.fields.to_fields_v1(),
        });
        if !self.subresource.is_empty() {
            e["subresource"] = json!(self.subresource);
        }
        e
    }

    fn from_json(v: &Value) -> Option<Entry> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let manager = s("manager");
        if manager.is_empty() && s("operation").is_empty() {
            return None;
        }
        Some(Entry {
            manager,
            operation: s("operation"),
            api_version: s("apiVersion"),
            time: s("time"),
            subresource: s("subresource"),
            fields: v.get("fieldsV1").map(FieldSet::from_fields_v1).unwrap_or_default(),
        })
    }
}

/// The entries an object carries.
pub fn entries(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Entry::from_json).collect())
        .unwrap_or_default()
}

/// Writes `entries` (those that still own a field) into the object's metadata.
pub fn set_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries.iter().filter(|e| !e.fields.is_empty()).map(Entry::to_json).collect();
    if let Some(m) = obj.as_object_mut() {
        m.entry("metadata").or_insert_with(|| json!({}));
    }
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".to_string(), Value::Array(list));
        }
    }
}

/// The metadata fields the server sets, which no manager owns.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// What of an object managers own: its fields but the type, the server's metadata and (for a
/// kind with a status subresource) the status.
pub fn managed_view(obj: &Value, has_status: bool) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
        if has_status {
            m.remove("status");
        }
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.retain(|k, _| !SERVER_METADATA.contains(&k.as_str()));
            if meta.is_empty() {
                m.remove("metadata");
            }
        }
    }
    v
}

/// A write's author.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: String,
    /// The write's time, RFC 3339.
    pub time: String,
    /// `""` for the main resource, `status` or `scale`.
    pub subresource: &'a str,
}

/// Whether the write asks for its managed fields to be cleared: `managedFields: [{}]`.
fn clears(obj: &Value) -> bool {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|a| a.len() == 1 && a[0].as_object().is_some_and(Map::is_empty))
}

/// Records an update (create: `old` is `None`) by `writer` into `new`'s managedFields: the fields
/// it sets become its `Update` entry's and no other manager's; fields it removes, nobody's. The
/// entries a client writes into the object are taken as given (kubectl rewrites them when it
/// moves client-side apply's fields to server-side apply); `[{}]` clears them.
pub fn record_update(kind: &str, has_status: bool, old: Option<&Value>, new: &mut Value, writer: &Writer) {
    if clears(new) {
        set_entries(new, &[]);
        return;
    }
    let given = new.pointer("/metadata/managedFields").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    let mut list = match old {
        Some(o) if !given || o.pointer("/metadata/managedFields") == new.pointer("/metadata/managedFields") => {
            entries(o)
        }
        _ => entries(new),
    };
    let shapes = Shapes::of(kind);
    let (old_view, new_view) = (old.map(|o| managed_view(o, has_status)), managed_view(new, has_status));
    let (set, removed) = Walker::new(&shapes).changes(old_view.as_ref(), Some(&new_view));
    for e in &mut list {
        e.fields.remove(&set);
        e.fields.remove(&removed);
    }
    if !set.is_empty() {
        match list.iter_mut().find(|e| e.is(writer.manager, Operation::Update, writer.subresource)) {
            Some(e) => {
                e.fields.union(&set);
                e.time.clone_from(&writer.time);
                e.api_version.clone_from(&writer.api_version);
            }
            None => list.push(Entry {
                manager: writer.manager.to_string(),
                operation: Operation::Update.as_str().to_string(),
                api_version: writer.api_version.clone(),
                time: writer.time.clone(),
                subresource: writer.subresource.to_string(),
                fields: set,
            }),
        }
    }
    set_entries(new, &list);
}

/// The entry of `manager`'s applies, if any (its index).
pub fn apply_entry(list: &[Entry], manager: &str) -> Option<usize> {
    list.iter().position(|e| e.is(manager, Operation::Apply, ""))
}

/// A new `Apply` entry.
pub fn new_apply_entry(writer: &Writer, fields: FieldSet) -> Entry {
    Entry {
        manager: writer.manager.to_string(),
        operation: Operation::Apply.as_str().to_string(),
        api_version: writer.api_version.clone(),
        time: writer.time.clone(),
        subresource: String::new(),
        fields,
    }
}
