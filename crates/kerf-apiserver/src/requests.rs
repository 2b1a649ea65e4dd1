//! Requests served, counted by client and verb, and shown at `GET /metrics` in the Prometheus
//! text format as `apiserver_request_total{client,verb}` (kube-apiserver's metric name; the
//! client is the first token of the request's User-Agent, `unknown` without one). It is how a
//! benchmark tells what load a controller puts on the API.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, Method, header};

/// Shared request counters.
#[derive(Debug, Clone, Default)]
pub struct RequestCounts {
    counts: Arc<Mutex<BTreeMap<(String, &'static str), u64>>>,
}

/// The API verb of a request: `watch` and `list` for reads of a collection, `get` for one
/// object, and the writes by method.
fn verb(method: &Method, watch: bool, named: bool) -> &'static str {
    match *method {
        Method::GET if watch => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "other",
    }
}

/// The client's name: the User-Agent's first product token (`kubectl/v1.32.0 (linux)` →
/// `kubectl`).
fn client(headers: &HeaderMap) -> String {
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split(['/', ' ']).next())
        .filter(|c| !c.is_empty())
        .map_or_else(|| "unknown".to_string(), |c| c.chars().filter(|c| c.is_ascii_graphic() && *c != '"').collect())
}

impl RequestCounts {
    /// Counts one request; `named` when its path names an object.
    pub fn record(&self, headers: &HeaderMap, method: &Method, watch: bool, named: bool) {
        let key = (client(headers), verb(method, watch, named));
        if let Ok(mut counts) = self.counts.lock() {
            *counts.entry(key).or_insert(0) += 1;
        }
    }

    /// The counters in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# HELP apiserver_request_total Requests served, by client (User-Agent) and verb.\n# TYPE apiserver_request_total counter\n",
        );
        if let Ok(counts) = self.counts.lock() {
            for ((client, verb), n) in counts.iter() {
                let _ = writeln!(out, "apiserver_request_total{{client=\"{client}\",verb=\"{verb}\"}} {n}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn requests_are_counted_by_the_user_agents_first_token_and_verb() {
        let c = RequestCounts::default();
        let mut kubectl = HeaderMap::new();
        kubectl.insert(header::USER_AGENT, HeaderValue::from_static("kubectl/v1.32.0 (linux/amd64)"));
        c.record(&kubectl, &Method::GET, false, false);
        c.record(&kubectl, &Method::GET, true, false);
        c.record(&kubectl, &Method::GET, false, true);
        c.record(&HeaderMap::new(), &Method::PATCH, false, true);
        c.record(&HeaderMap::new(), &Method::PATCH, false, true);
        let text = c.render();
        assert!(text.contains("apiserver_request_total{client=\"kubectl\",verb=\"list\"} 1\n"), "{text}");
        assert!(text.contains("apiserver_request_total{client=\"kubectl\",verb=\"watch\"} 1\n"), "{text}");
        assert!(text.contains("apiserver_request_total{client=\"kubectl\",verb=\"get\"} 1\n"), "{text}");
        assert!(text.contains("apiserver_request_total{client=\"unknown\",verb=\"patch\"} 2\n"), "{text}");
    }
}
