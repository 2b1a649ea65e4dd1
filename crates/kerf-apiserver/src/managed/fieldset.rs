//! Sets of fields of an object, as `managedFields` records them (`FieldsV1`): a tree whose keys
//! are `f:NAME` (a field of a map), `k:{KEYS}` (an item of a list keyed by some of its fields)
//! and `v:VALUE` (an item of a set), where a node is a member (owned itself) or only leads to
//! members. The set of an object, the fields two versions differ in, and the reading, removing
//! and merging of the values at such paths are here; which lists are keyed is
//! [`super::shapes`]'.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::shapes::{ListShape, Shapes};

/// A set of field paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    member: bool,
    children: BTreeMap<String, FieldSet>,
}

/// One step of a path: a `FieldsV1` key.
pub type Step = String;

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    /// Reads a `FieldsV1` object; `.` marks a node that is itself a member.
    pub fn from_fields_v1(v: &Value) -> FieldSet {
        let Value::Object(m) = v else { return FieldSet::default() };
        let mut set = FieldSet { member: m.is_empty() || m.contains_key("."), children: BTreeMap::new() };
        for (k, c) in m {
            if k != "." {
                set.children.insert(k.clone(), FieldSet::from_fields_v1(c));
            }
        }
        set
    }

    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".to_string(), Value::Object(Map::new()));
        }
        for (k, c) in &self.children {
            m.insert(k.clone(), c.to_fields_v1());
        }
        Value::Object(m)
    }

    /// Adds every member of `other`.
    pub fn union(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (k, c) in &other.children {
            self.children.entry(k.clone()).or_default().union(c);
        }
    }

    /// Removes every member of `other` (and what is left leading nowhere).
    pub fn remove(&mut self, other: &FieldSet) {
        if other.member {
            self.member = false;
        }
        for (k, c) in &other.children {
            if let Some(mine) = self.children.get_mut(k) {
                mine.remove(c);
                if mine.is_empty() {
                    self.children.remove(k);
                }
            }
        }
    }

    /// Whether `path` is a member.
    pub fn contains(&self, path: &[Step]) -> bool {
        match path.split_first() {
            None => self.member,
            Some((head, rest)) => self.children.get(head).is_some_and(|c| c.contains(rest)),
        }
    }

    /// Every member's path, parents before their children.
    pub fn members(&self) -> Vec<Vec<Step>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (k, c) in &self.children {
            prefix.push(k.clone());
            c.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Makes `path` a member.
    pub fn insert(&mut self, path: &[Step]) {
        match path.split_first() {
            None => self.member = true,
            Some((head, rest)) => self.children.entry(head.clone()).or_default().insert(rest),
        }
    }

    fn leaf() -> FieldSet {
        FieldSet { member: true, children: BTreeMap::new() }
    }

    fn with(&mut self, step: Step, child: FieldSet) {
        if !child.is_empty() {
            self.children.entry(step).or_default().union(&child);
        }
    }
}

/// The `k:` step of an item of a list keyed by `keys` (a key field missing from the item counts
/// as its default, `TCP` for a port's protocol, else absent).
fn key_step(item: &Value, keys: &[&str]) -> Step {
    let mut k = Map::new();
    for key in keys {
        match item.get(*key) {
            Some(v) if !v.is_null() => {
                k.insert((*key).to_string(), v.clone());
            }
            _ if *key == "protocol" => {
                k.insert("protocol".to_string(), Value::String("TCP".to_string()));
            }
            _ => {}
        }
    }
    format!("k:{}", Value::Object(k))
}

fn value_step(item: &Value) -> Step {
    format!("v:{item}")
}

/// Walks an object by field names (list items add none), asking `shapes` about each list.
pub struct Walker<'a> {
    pub shapes: &'a Shapes,
    names: Vec<String>,
}

impl<'a> Walker<'a> {
    pub fn new(shapes: &'a Shapes) -> Self {
        Walker { shapes, names: Vec::new() }
    }

    fn shape(&self) -> ListShape {
        self.shapes.list(&self.names)
    }

    fn atomic_map(&self) -> bool {
        self.shapes.atomic_map(&self.names)
    }

    /// The set of fields `v` sets: its scalars, atomic lists and maps, empty maps and list items.
    pub fn set_of(&mut self, v: &Value) -> FieldSet {
        match v {
            Value::Object(m) if !m.is_empty() && !self.atomic_map() => {
                let mut set = FieldSet::default();
                for (k, c) in m.iter().filter(|(_, c)| !c.is_null()) {
                    self.names.push(k.clone());
                    let child = self.set_of(c);
                    self.names.pop();
                    set.with(format!("f:{k}"), child);
                }
                set
            }
            Value::Array(items) => match self.shape() {
                ListShape::Atomic => FieldSet::leaf(),
                ListShape::Set => {
                    let mut set = FieldSet::default();
                    for item in items {
                        set.with(value_step(item), FieldSet::leaf());
                    }
                    set
                }
                ListShape::Map(keys) => {
                    let mut set = FieldSet::default();
                    for item in items {
                        let mut child = self.set_of(item);
                        child.member = true;
                        set.with(key_step(item, &keys), child);
                    }
                    set
                }
            },
            _ => FieldSet::leaf(),
        }
    }

    /// What an update from `old` to `new` changes: the members it sets to a new value, and the
    /// members it removes.
    pub fn changes(&mut self, old: Option<&Value>, new: Option<&Value>) -> (FieldSet, FieldSet) {
        let (mut set, mut removed) = (FieldSet::default(), FieldSet::default());
        match (old.filter(|v| !v.is_null()), new.filter(|v| !v.is_null())) {
            (None, None) => {}
            (None, Some(n)) => set = self.set_of(n),
            (Some(o), None) => removed = self.set_of(o),
            (Some(o), Some(n)) if o == n => {}
            (Some(Value::Object(o)), Some(Value::Object(n))) if !n.is_empty() && !self.atomic_map() => {
                let keys: std::collections::BTreeSet<&String> = o.keys().chain(n.keys()).collect();
                for k in keys {
                    self.names.push(k.clone());
                    let (s, r) = self.changes(o.get(k), n.get(k));
                    self.names.pop();
                    set.with(format!("f:{k}"), s);
                    removed.with(format!("f:{k}"), r);
                }
            }
            (Some(Value::Array(o)), Some(Value::Array(n))) if self.shape() != ListShape::Atomic => {
                let step = |item: &Value, shape: &ListShape| match shape {
                    ListShape::Map(keys) => key_step(item, keys),
                    _ => value_step(item),
                };
                let shape = self.shape();
                let old: BTreeMap<Step, &Value> = o.iter().map(|i| (step(i, &shape), i)).collect();
                let new: BTreeMap<Step, &Value> = n.iter().map(|i| (step(i, &shape), i)).collect();
                for (k, item) in &new {
                    let (mut s, r) = match shape {
                        ListShape::Map(_) => self.changes(old.get(k).copied(), Some(item)),
                        _ => (
                            if old.contains_key(k) { FieldSet::default() } else { FieldSet::leaf() },
                            FieldSet::default(),
                        ),
                    };
                    if !old.contains_key(k) {
                        s.member = true;
                    }
                    set.with(k.clone(), s);
                    removed.with(k.clone(), r);
                }
                for k in old.keys().filter(|k| !new.contains_key(*k)) {
                    removed.with(k.clone(), FieldSet::leaf());
                }
            }
            (Some(_), Some(_)) => set = FieldSet::leaf(),
        }
        (set, removed)
    }

    /// Merges an applied configuration into `live`: maps by key, keyed lists by item key, sets by
    /// value; anything else is replaced.
    pub fn merge(&mut self, live: &mut Value, applied: &Value) {
        match (live, applied) {
            (Value::Object(l), Value::Object(a)) if !self.atomic_map() => {
                for (k, av) in a.iter().filter(|(_, v)| !v.is_null()) {
                    self.names.push(k.clone());
                    match l.get_mut(k) {
                        Some(lv) => self.merge(lv, av),
                        None => {
                            l.insert(k.clone(), av.clone());
                        }
                    }
                    self.names.pop();
                }
            }
            (Value::Array(l), Value::Array(a)) if self.shape() != ListShape::Atomic => match self.shape() {
                ListShape::Map(keys) => {
                    for item in a {
                        let k = key_step(item, &keys);
                        match l.iter_mut().find(|i| key_step(i, &keys) == k) {
                            Some(existing) => self.merge(existing, item),
                            None => l.push(item.clone()),
                        }
                    }
                }
                _ => {
                    for item in a {
                        if !l.contains(item) {
                            l.push(item.clone());
                        }
                    }
                }
            },
            (live, applied) => *live = applied.clone(),
        }
    }
}

/// The value at `path` in `obj`.
pub fn value_at<'v>(obj: &'v Value, path: &[Step]) -> Option<&'v Value> {
    let Some((head, rest)) = path.split_first() else { return Some(obj) };
    let next = if let Some(name) = head.strip_prefix("f:") {
        obj.get(name)?
    } else {
        let items = obj.as_array()?;
        items.iter().find(|i| item_matches(i, head))?
    };
    value_at(next, rest)
}

fn item_matches(item: &Value, step: &str) -> bool {
    if let Some(v) = step.strip_prefix("v:") {
        return serde_json::from_str::<Value>(v).is_ok_and(|v| &v == item);
    }
    let Some(Ok(Value::Object(keys))) = step.strip_prefix("k:").map(serde_json::from_str::<Value>) else {
        return false;
    };
    let keys: Vec<&str> = keys.keys().map(String::as_str).collect();
    key_step(item, &keys) == step
}

/// Removes the value at `path` from `obj` (a map's field, or a list's item).
pub fn remove_at(obj: &mut Value, path: &[Step]) {
    let Some((last, parent)) = path.split_last() else { return };
    let mut node = obj;
    for step in parent {
        let next = if let Some(name) = step.strip_prefix("f:") {
            node.get_mut(name)
        } else {
            node.as_array_mut().and_then(|items| items.iter_mut().find(|i| item_matches(i, step)))
        };
        match next {
            Some(n) => node = n,
            None => return,
        }
    }
    if let Some(name) = last.strip_prefix("f:") {
        if let Some(m) = node.as_object_mut() {
            m.remove(name);
        }
    } else if let Some(items) = node.as_array_mut() {
        items.retain(|i| !item_matches(i, last));
    }
}

/// A path as the API server prints it in a conflict: `.spec.containers[name="web"].image`.
pub fn display(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        if let Some(name) = step.strip_prefix("f:") {
            out.push('.');
            out.push_str(name);
        } else if let Some(v) = step.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        } else if let Some(Ok(Value::Object(keys))) = step.strip_prefix("k:").map(serde_json::from_str::<Value>) {
            let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        }
    }
    out
}
