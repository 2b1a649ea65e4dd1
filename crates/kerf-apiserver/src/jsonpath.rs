//! The JSONPath of a CRD's printer columns (`.status.conditions[?(@.type=="Ready")].status`,
//! `.metadata.labels.app\.kubernetes\.io/name`, `.spec.items[0].name`, `.spec.items[*].name`):
//! the subset of Kubernetes JSONPath printer columns use. Fields are separated by dots (a `\.`
//! is a dot inside a name); a bracket holds an index, `*`, or a filter comparing a field of
//! each element with a literal (`==` or `!=`).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter { field: Vec<String>, equal: bool, literal: Value },
}

fn parse(path: &str) -> Option<Vec<Step>> {
    let path = path.trim();
    let path = path.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(path);
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut steps = Vec::new();
    let chars: Vec<char> = path.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let mut name = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    name.push(chars[i]);
                    i += 1;
                }
                if !name.is_empty() {
                    steps.push(Step::Field(name));
                }
            }
            '[' => {
                let end = (i..chars.len()).find(|&j| chars[j] == ']')?;
                let inner: String = chars[i + 1..end].iter().collect();
                steps.push(bracket(inner.trim())?);
                i = end + 1;
            }
            _ => return None,
        }
    }
    Some(steps)
}

fn bracket(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::All);
    }
    if let Ok(n) = inner.parse::<i64>() {
        return Some(Step::Index(n));
    }
    let f = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (lhs, equal, rhs) = if let Some((l, r)) = f.split_once("==") {
        (l, true, r)
    } else {
        let (l, r) = f.split_once("!=")?;
        (l, false, r)
    };
    let field = lhs.trim().strip_prefix("@.")?.split('.').map(str::to_string).collect();
    let rhs = rhs.trim();
    let literal = match rhs.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(s) => Value::String(s.to_string()),
        None => match rhs.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
            Some(s) => Value::String(s.to_string()),
            None => serde_json::from_str(rhs).ok()?,
        },
    };
    Some(Step::Filter { field, equal, literal })
}

/// The values `path` selects in `obj` (none when the path is not one this subset reads).
pub fn select<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let Some(steps) = parse(path) else { return Vec::new() };
    let mut current = vec![obj];
    for step in &steps {
        let mut next = Vec::new();
        for v in current {
            match step {
                Step::Field(name) => next.extend(v.get(name)),
                Step::Index(n) => {
                    if let Some(a) = v.as_array() {
                        let at = if *n < 0 { a.len() as i64 + n } else { *n };
                        next.extend(usize::try_from(at).ok().and_then(|i| a.get(i)));
                    }
                }
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter { field, equal, literal } => {
                    for item in v.as_array().into_iter().flatten() {
                        let got = field.iter().try_fold(item, |at, f| at.get(f));
                        if (got == Some(literal)) == *equal {
                            next.push(item);
                        }
                    }
                }
            }
        }
        current = next;
    }
    current
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn printer_column_paths_select_fields_labels_indexes_and_filtered_conditions() {
        let obj = json!({
            "metadata": {"labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"items": [{"name": "a"}, {"name": "b"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Active", "status": "False"}]},
        });
        let one = |p: &str| select(&obj, p).first().map(|v| (*v).clone());
        assert_eq!(one(".metadata.labels.app\\.kubernetes\\.io/name"), Some(json!("web")));
        assert_eq!(one(".status.conditions[?(@.type==\"Active\")].status"), Some(json!("False")));
        assert_eq!(one(".spec.items[1].name"), Some(json!("b")));
        assert_eq!(one(".spec.items[-1].name"), Some(json!("b")));
        assert_eq!(select(&obj, ".spec.items[*].name").len(), 2);
        assert_eq!(one(".spec.missing"), None);
        assert!(select(&obj, "spec").is_empty(), "a path starts with a dot");
    }
}
