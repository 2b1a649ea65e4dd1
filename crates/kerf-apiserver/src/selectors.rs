//! Label selectors (`app=web,tier!=db,env in (a,b),!canary`) and field selectors
//! (`spec.nodeName=n1,status.phase!=Running`) of list and watch requests, parsed once and
//! matched against objects as the REST API shows them.

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelTerm {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelTerm>);

/// Splits at top-level commas (not those inside `in (a,b)`).
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().map(str::trim).filter(|t| !t.is_empty()).collect()
}

fn set_values(rest: &str, term: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("label selector term {term:?}: expected a parenthesised value list"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

fn check_key(key: &str, term: &str) -> Result<String, String> {
    let key = key.trim();
    if key.is_empty() || key.contains(|c: char| c.is_whitespace() || "=!(),".contains(c)) {
        return Err(format!("label selector term {term:?}: invalid key {key:?}"));
    }
    Ok(key.to_string())
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in split_terms(s) {
            let t = if let Some(key) = term.strip_prefix('!') {
                LabelTerm::DoesNotExist(check_key(key, term)?)
            } else if let Some((k, v)) = term.split_once("!=") {
                LabelTerm::NotEquals(check_key(k, term)?, v.trim().to_string())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                LabelTerm::Equals(check_key(k, term)?, v.trim().to_string())
            } else if let Some((k, rest)) = term.split_once(" notin ") {
                LabelTerm::NotIn(check_key(k, term)?, set_values(rest, term)?)
            } else if let Some((k, rest)) = term.split_once(" in ") {
                LabelTerm::In(check_key(k, term)?, set_values(rest, term)?)
            } else {
                LabelTerm::Exists(check_key(term, term)?)
            };
            terms.push(t);
        }
        Ok(LabelSelector(terms))
    }

    pub fn matches(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k));
        self.0.iter().all(|t| match t {
            LabelTerm::Equals(k, v) => get(k) == Some(v),
            LabelTerm::NotEquals(k, v) => get(k) != Some(v),
            LabelTerm::In(k, vs) => get(k).is_some_and(|x| vs.contains(x)),
            LabelTerm::NotIn(k, vs) => get(k).is_none_or(|x| !vs.contains(x)),
            LabelTerm::Exists(k) => get(k).is_some(),
            LabelTerm::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `path=value` / `path==value` / `path!=value` terms on dotted paths
/// into the object (`metadata.name`, `metadata.namespace`, `spec.nodeName`, `status.phase`,
/// `involvedObject.kind`, ...). A missing field reads as the empty string, as the API server's
/// field sets do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Whether it selects everything (no requirement).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for term in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, equal, value) = if let Some((p, v)) = term.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (p, true, v)
            } else {
                return Err(format!("field selector term {term:?}: expected field=value or field!=value"));
            };
            let path = path.trim();
            if path.is_empty() || !path.split('.').all(|p| !p.is_empty()) {
                return Err(format!("field selector term {term:?}: invalid field path"));
            }
            terms.push((path.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let found = path.split('.').try_fold(object, |v, part| v.get(part));
            let text = match found {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (text == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn label_selector_supports_equality_set_and_existence_terms() {
        let l = labels(&[("app", "web"), ("env", "prod")]);
        for (sel, want) in [
            ("app=web", true),
            ("app==web,env=prod", true),
            ("app!=web", false),
            ("env in (prod, dev)", true),
            ("env notin (prod)", false),
            ("app,!canary", true),
            ("!app", false),
            ("", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(Some(&l)), want, "{sel}");
        }
        assert!(LabelSelector::parse("env in prod").is_err());
    }

    #[test]
    fn field_selector_reads_dotted_paths_and_missing_fields_as_empty() {
        let pod = serde_json::json!({"metadata": {"name": "a", "namespace": "default"}, "spec": {"nodeName": "n1"}});
        assert!(FieldSelector::parse("spec.nodeName=n1,metadata.name=a").unwrap().matches(&pod));
        assert!(!FieldSelector::parse("metadata.namespace!=default").unwrap().matches(&pod));
        assert!(FieldSelector::parse("status.phase=").unwrap().matches(&pod));
        assert!(FieldSelector::parse("spec.nodeName").is_err());
    }
}
