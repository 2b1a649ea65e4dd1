//! What the store holds: a typed object of a kind the controllers use (shared with them as
//! `AnyObject`, so the simulator pays no conversion), or a dynamic object of any other kind,
//! kept as JSON around typed metadata so the store's rules (names, uids, resourceVersions,
//! finalizers) apply to both the same way.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::MetaView;
use kerf_api::cluster::AnyObject;
use kerf_api::cluster::Object;
use kerf_api::slim_pod::PodView;
use serde_json::{Map, Value};

use crate::kinds::ResourceKind;
use crate::server_fields::{ServerFields, any_server_fields};

/// An object of a kind the store has no Rust type for: its metadata, and everything else
/// (`apiVersion`, `kind`, `spec`, `status`, ...) as JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct DynamicObject {
    pub metadata: ObjectMeta,
    pub body: Map<String, Value>,
}

impl DynamicObject {
    /// Splits a JSON object into metadata and body. The error names the field.
    pub fn from_json(value: Value) -> Result<Self, kerf_api::FieldError> {
        let Value::Object(mut body) = value else {
            return Err(kerf_api::FieldError::new("", "the object must be a JSON object"));
        };
        let metadata = match body.remove("metadata") {
            None | Some(Value::Null) => ObjectMeta::default(),
            Some(m) => serde_path_to_error::deserialize(m).map_err(|e| {
                let path = e.path().to_string();
                let path = if path == "." { "metadata".to_string() } else { format!("metadata.{path}") };
                kerf_api::FieldError::new(path, e.into_inner().to_string())
            })?,
        };
        Ok(DynamicObject { metadata, body })
    }

    pub fn to_json(&self) -> Value {
        let mut out = Map::with_capacity(self.body.len() + 1);
        for key in ["apiVersion", "kind"] {
            if let Some(v) = self.body.get(key) {
                out.insert(key.to_string(), v.clone());
            }
        }
        out.insert("metadata".to_string(), serde_json::to_value(&self.metadata).unwrap_or(Value::Null));
        for (k, v) in &self.body {
            if k != "apiVersion" && k != "kind" {
                out.insert(k.clone(), v.clone());
            }
        }
        Value::Object(out)
    }

    /// The object's `kind` field.
    pub fn kind(&self) -> &str {
        self.body.get("kind").and_then(Value::as_str).unwrap_or("")
    }
}

/// One stored object.
#[derive(Debug, Clone)]
pub enum Stored {
    Typed(AnyObject),
    Dynamic(Arc<DynamicObject>),
}

impl Stored {
    pub fn meta(&self) -> &dyn MetaView {
        match self {
            Stored::Typed(a) => a.meta(),
            Stored::Dynamic(d) => &d.metadata,
        }
    }

    /// The metadata fields the server writes.
    pub fn server_fields(&mut self) -> ServerFields<'_> {
        match self {
            Stored::Typed(a) => any_server_fields(a),
            Stored::Dynamic(d) => ServerFields::of_whole(&mut Arc::make_mut(d).metadata),
        }
    }

    /// The object as a pod of either form, if it is one.
    pub fn pod(&self) -> Option<&dyn PodView> {
        match self {
            Stored::Typed(AnyObject::Pod(p)) => Some(&**p),
            Stored::Typed(AnyObject::SlimPod(p)) => Some(&**p),
            _ => None,
        }
    }

    /// Copies `from`'s status into `self` (same kind), leaving everything else.
    pub fn copy_status_from(&mut self, from: &Stored) {
        match (self, from) {
            (Stored::Typed(a), Stored::Typed(b)) => crate::status::copy_status(a, b),
            (Stored::Dynamic(a), Stored::Dynamic(b)) => {
                let a = Arc::make_mut(a);
                match b.body.get("status") {
                    Some(s) => {
                        a.body.insert("status".to_string(), s.clone());
                    }
                    None => {
                        a.body.remove("status");
                    }
                }
            }
            _ => {}
        }
    }

    /// The object as the REST API shows it, `apiVersion` and `kind` included.
    pub fn to_json(&self, kind: &ResourceKind) -> Value {
        match self {
            Stored::Typed(a) => kind.typed.and_then(|t| (t.encode)(a)).unwrap_or(Value::Null),
            Stored::Dynamic(d) => {
                let mut v = d.to_json();
                // A CRD's objects are served at each of its versions (no conversion between them).
                if kind.custom.is_some() {
                    v["apiVersion"] = Value::String(kind.api_version());
                }
                v
            }
        }
    }
}

impl Stored {
    /// [`Stored::to_json`] written as JSON text onto `out`.
    pub fn write_json(&self, kind: &ResourceKind, out: &mut Vec<u8>) {
        if let (Stored::Typed(a), Some(t)) = (self, kind.typed)
            && (t.write)(a, out)
        {
            return;
        }
        // Writing a Value into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *out, &self.to_json(kind));
    }
}

/// The stored object as a `K`, if it is a typed one of that kind.
pub(crate) fn typed<K: Object>(s: &Stored) -> Option<&K> {
    match s {
        Stored::Typed(a) => K::from_any(a),
        Stored::Dynamic(_) => None,
    }
}
