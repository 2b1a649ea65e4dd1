//! The table of protobuf messages (`schema.txt`), loaded once: each message's fields with their
//! tags, JSON names and types, and the message of a kind.

use std::collections::HashMap;
use std::sync::LazyLock;

use prost::encoding::WireType;
use serde_json::{Map, Value};

use super::ProtoError;

/// A field's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    String,
    Int32,
    Int64,
    Bool,
    Double,
    Bytes,
    /// A message, by its full name in the table.
    Message(String),
}

impl Ty {
    fn parse(s: &str) -> Ty {
        match s {
            "string" => Ty::String,
            "int32" => Ty::Int32,
            "int64" => Ty::Int64,
            "bool" => Ty::Bool,
            "double" => Ty::Double,
            "bytes" => Ty::Bytes,
            other => Ty::Message(other.to_string()),
        }
    }

    pub fn wire_type(&self) -> WireType {
        match self {
            Ty::Int32 | Ty::Int64 | Ty::Bool => WireType::Varint,
            Ty::Double => WireType::SixtyFourBit,
            Ty::String | Ty::Bytes | Ty::Message(_) => WireType::LengthDelimited,
        }
    }

    /// Whether a repeated field of this type may come packed.
    pub fn is_packable(&self) -> bool {
        matches!(self, Ty::Int32 | Ty::Int64 | Ty::Bool | Ty::Double)
    }

    /// The JSON of a value of this type that the wire leaves empty.
    pub fn empty(&self) -> Value {
        match self {
            Ty::String | Ty::Bytes => Value::String(String::new()),
            Ty::Int32 | Ty::Int64 | Ty::Double => Value::from(0),
            Ty::Bool => Value::Bool(false),
            Ty::Message(_) => Value::Object(Map::new()),
        }
    }
}

/// How a field holds its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Label {
    Optional,
    Repeated,
    /// A map with keys of this type (the field's type is the values').
    Map(Ty),
    /// An embedded Go struct: its message's fields are the enclosing object's in JSON.
    Inline,
}

#[derive(Debug, Clone)]
pub struct Field {
    pub tag: u32,
    pub json: String,
    pub label: Label,
    pub ty: Ty,
}

#[derive(Debug, Clone)]
pub struct Message {
    pub name: String,
    pub fields: Vec<Field>,
}

/// Messages by full name, lowercased (k8s-pb spells `CSIDriver` as `CsiDriver`).
struct Table(HashMap<String, Message>);

fn parse(text: &str) -> Result<Table, String> {
    let mut messages = HashMap::new();
    let mut current: Option<Message> = None;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix("message ") {
            if let Some(m) = current.take() {
                messages.insert(m.name.to_lowercase(), m);
            }
            current = Some(Message { name: name.to_string(), fields: Vec::new() });
            continue;
        }
        let bad = || format!("schema.txt line {}: {line:?}", n + 1);
        let parts: Vec<&str> = line.split(' ').collect();
        let [tag, json, label, ty] = parts.as_slice() else { return Err(bad()) };
        let (label, ty) = match *label {
            "optional" => (Label::Optional, Ty::parse(ty)),
            "repeated" => (Label::Repeated, Ty::parse(ty)),
            "inline" => (Label::Inline, Ty::parse(ty)),
            "map" => {
                let (k, v) = ty.split_once(',').ok_or_else(bad)?;
                (Label::Map(Ty::parse(k)), Ty::parse(v))
            }
            _ => return Err(bad()),
        };
        let field = Field { tag: tag.parse().map_err(|_| bad())?, json: json.to_string(), label, ty };
        current.as_mut().ok_or_else(bad)?.fields.push(field);
    }
    if let Some(m) = current.take() {
        messages.insert(m.name.to_lowercase(), m);
    }
    Ok(Table(messages))
}

static TABLE: LazyLock<Result<Table, String>> = LazyLock::new(|| parse(include_str!("schema.txt")));

fn table() -> Result<&'static Table, ProtoError> {
    TABLE.as_ref().map_err(|e| ProtoError::Malformed(format!("the server's protobuf table is broken: {e}")))
}

/// The message named `name` (a full name from the table).
pub(super) fn by_name(name: &str) -> Result<&'static Message, ProtoError> {
    table()?
        .0
        .get(&name.to_lowercase())
        .ok_or_else(|| ProtoError::Malformed(format!("the server's protobuf table has no message {name}")))
}

/// Whether `group` is one of Kubernetes' own API groups (whose kinds the table may have), not a
/// custom resource's.
fn built_in(group: &str) -> bool {
    group.is_empty() || !group.contains('.') || (group.ends_with(".k8s.io") && !group.ends_with(".x-k8s.io"))
}

/// The message of the kind `kind` in `api_version`, if the table has it.
pub fn message(api_version: &str, kind: &str) -> Option<&'static Message> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    if !built_in(group) || kind.is_empty() {
        return None;
    }
    let table = table().ok()?;
    let package = group.split('.').next().filter(|g| !g.is_empty()).unwrap_or("core");
    let key = format!("api.{package}.{version}.{kind}").to_lowercase();
    table.0.get(&key).or_else(|| {
        (group.is_empty() || group == "meta.k8s.io")
            .then(|| table.0.get(&format!("apimachinery.pkg.apis.meta.v1.{kind}").to_lowercase()))
            .flatten()
    })
}

#[cfg(test)]
pub(super) fn parse_errors() -> Option<String> {
    TABLE.as_ref().err().cloned()
}
