//! Content negotiation, as the API server does it: a request body is read by its `Content-Type`
//! (JSON, YAML or the Kubernetes protobuf envelope) into the JSON object the REST layer takes, and
//! a response is written in the first media type of the `Accept` list that the server can produce
//! for that object (protobuf for the built-in kinds, JSON for everything, so JSON is the default
//! and what custom resources and Tables always get).

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::proto::{self, ProtoError};
use crate::rest::RestError;

/// What a response is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    /// Protobuf for objects the server can encode so, JSON for the others.
    Protobuf,
}

/// The media types of a header's list, without parameters, each with whether it carries
/// parameters that ask for another shape (`as=Table`).
fn media_types(value: &str) -> impl Iterator<Item = (&str, bool)> {
    value.split(',').map(|item| {
        let mut parts = item.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        let reshaped = parts.any(|p| p.starts_with("as="));
        (media, reshaped)
    })
}

/// The response format the `Accept` header prefers (the first listed the server can write).
pub fn response_format(headers: &HeaderMap) -> Format {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    for (media, reshaped) in media_types(accept) {
        match media {
            proto::MEDIA_TYPE if !reshaped => return Format::Protobuf,
            "application/json" | "application/*" | "*/*" => return Format::Json,
            _ => {}
        }
    }
    Format::Json
}

/// The request's media type (its `Content-Type` without parameters).
pub fn content_type(headers: &HeaderMap) -> &str {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    ct.split(';').next().unwrap_or("").trim()
}

/// The request body as JSON, read as its `Content-Type` says. Bodies are at most the server's
/// body limit, and JSON is nested at most 128 deep (serde_json's recursion limit): anything
/// deeper is refused as malformed, so no later step recurses without bound.
pub fn body(headers: &HeaderMap, body: &Bytes) -> Result<Value, RestError> {
    if body.is_empty() {
        return Err(RestError::BadRequest("the request has no body".to_string()));
    }
    match content_type(headers) {
        proto::MEDIA_TYPE => proto::decode(body).map_err(|e| match e {
            ProtoError::UnknownKind { .. } => RestError::Unsupported(e.to_string()),
            other => RestError::BadRequest(other.to_string()),
        }),
        "application/yaml" | "application/apply-patch+yaml" => yaml(body),
        _ => json(body),
    }
}

/// A JSON body.
pub fn json(body: &Bytes) -> Result<Value, RestError> {
    serde_json::from_slice(body).map_err(|e| RestError::BadRequest(format!("the request body is not valid JSON: {e}")))
}

/// A YAML body (JSON is YAML too), as one JSON value.
fn yaml(body: &Bytes) -> Result<Value, RestError> {
    serde_yaml_ng::from_slice(body)
        .map_err(|e| RestError::BadRequest(format!("the request body is not valid YAML: {e}")))
}

/// `value` with status `code`, in `format` when the object can be written so, else as JSON.
pub fn reply(format: Format, code: u16, value: &Value) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if format == Format::Protobuf && proto::can_encode(value) {
        match proto::encode(value) {
            Ok(bytes) => return (status, [(header::CONTENT_TYPE, proto::MEDIA_TYPE)], bytes).into_response(),
            Err(e) => tracing::debug!("answering in JSON: {e}"),
        }
    }
    (status, [(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn accept(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static(v));
        h
    }

    #[test]
    fn the_first_media_type_the_server_can_write_is_chosen() {
        assert_eq!(response_format(&accept("application/vnd.kubernetes.protobuf,application/json")), Format::Protobuf);
        assert_eq!(response_format(&accept("application/json, application/vnd.kubernetes.protobuf")), Format::Json);
        assert_eq!(
            response_format(&accept(
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json"
            )),
            Format::Json
        );
        assert_eq!(response_format(&accept("application/vnd.kubernetes.protobuf;stream=watch")), Format::Protobuf);
        assert_eq!(response_format(&HeaderMap::new()), Format::Json);
    }

    #[test]
    fn a_custom_resource_asked_for_in_protobuf_is_answered_in_json() {
        let pool = serde_json::json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "a"}});
        let r = reply(Format::Protobuf, 200, &pool);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/json");
        let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}});
        let r = reply(Format::Protobuf, 200, &ns);
        assert_eq!(r.headers()[header::CONTENT_TYPE], proto::MEDIA_TYPE);
    }
}
