//! The store served as the Kubernetes REST API over HTTP/1.1 (JSON, or protobuf as negotiated in
//! [`crate::media`]): discovery and the OpenAPI documents, CRUD of the built-in kinds and of
//! those CRDs register, field validation, patches, server-side apply, subresources, server-side
//! Tables, streaming watches, the metrics API and the access reviews. One catch-all handler
//! parses the path (Kubernetes paths are regular); every failure is answered with a `Status`.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::watch;

use kerf_api::clock::Clock;

use crate::cluster::{Change, SimCluster};
use crate::kinds::ResourceKind;
use crate::media::{self, Format};
use crate::proto;
use crate::requests::RequestCounts;
use crate::rest::{Filter, PatchType, Rest, RestError};
use crate::stored::Stored;
use crate::table;
use crate::writes::{Commit, Part, Preconditions};
use crate::{discovery, dry_run, field_validation, openapi};

/// Largest request body accepted.
const BODY_LIMIT: usize = 8 << 20;
/// How often a quiet watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(1);

#[derive(Clone)]
struct App {
    rest: Rest,
    shutdown: watch::Receiver<bool>,
    requests: RequestCounts,
}

/// Serves `rest` on `listener` until `shutdown` turns true; open watches end then too.
pub async fn serve(
    listener: tokio::net::TcpListener,
    rest: Rest,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let app = App { rest, shutdown: shutdown.clone(), requests: RequestCounts::default() };
    let router = axum::Router::new().fallback(handle).with_state(app);
    let mut stop = shutdown;
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        })
        .await
}

fn error_response(e: &RestError) -> Response {
    error_reply(Format::Json, e)
}

fn error_reply(format: Format, e: &RestError) -> Response {
    let (code, status) = e.status();
    media::reply(format, code, &status)
}

/// A boolean query parameter as the API server reads one: given with any value but `0` or
/// `false` (in any case) it is true, so `watch=True` (the Python client's) is a watch.
fn flag(q: &HashMap<String, String>, name: &str) -> bool {
    q.get(name).is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// What the request asked to see.
struct Ask {
    table: bool,
    include_object: bool,
}

fn ask(headers: &HeaderMap, q: &HashMap<String, String>) -> Ask {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    Ask {
        table: accept.split(',').next().is_some_and(|first| first.contains("as=Table")),
        include_object: q.get("includeObject").is_some_and(|v| v == "Object"),
    }
}

async fn handle(State(app): State<App>, req: Request) -> Response {
    let q: HashMap<String, String> =
        Query::<HashMap<String, String>>::try_from_uri(req.uri()).map(|q| q.0).unwrap_or_default();
    let method = req.method().clone();
    let headers = req.headers().clone();
    let path = req.uri().path().to_string();
    if method == Method::GET && path == "/metrics" {
        return ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], app.requests.render()).into_response();
    }
    let named = {
        // /api/v1/[namespaces/NS/]PLURAL/NAME... or /apis/G/V/[namespaces/NS/]PLURAL/NAME...
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let rest = match segs.as_slice() {
            ["api", _, rest @ ..] => rest,
            ["apis", _, _, rest @ ..] => rest,
            _ => &[][..],
        };
        match rest {
            ["namespaces", _, _, _, ..] => true,
            ["namespaces", _] => true,
            [_, _, ..] => rest[0] != "namespaces",
            _ => false,
        }
    };
    app.requests.record(&headers, &method, flag(&q, "watch"), named);
    let format = media::response_format(&headers);
    let body = match axum::body::to_bytes(req.into_body(), BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return error_reply(format, &RestError::BadRequest(format!("cannot read the request body: {e}"))),
    };
    let mut response = match route(&app, &method, &path, &q, &headers, &body, format) {
        Ok(r) => r,
        Err(e) => error_reply(format, &e),
    };
    // The server's time is the simulation's (virtual) time, as a real API server's `Date` is
    // its own clock: `kerf snapshot` reads the instant its snapshot is of from it.
    let now = app.rest.cluster.clock().now();
    if let Ok(date) = header::HeaderValue::from_str(
        &k8s_openapi::jiff::fmt::rfc2822::DateTimePrinter::new().timestamp_to_rfc9110_string(&now).unwrap_or_default(),
    ) {
        response.headers_mut().insert(header::DATE, date);
    }
    response
}

/// The media type of a server-side apply.
const APPLY: &str = "application/apply-patch+yaml";

/// The field manager of a write: the `fieldManager` parameter, else the client's name (the
/// User-Agent's first token), as the API server takes it.
fn field_manager(headers: &HeaderMap, q: &HashMap<String, String>) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    let ua = headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("");
    ua.split('/').next().filter(|s| !s.is_empty()).unwrap_or("unknown").to_string()
}

/// A resolved resource path.
struct Target<'a> {
    kind: &'static ResourceKind,
    namespace: Option<&'a str>,
    name: Option<&'a str>,
    sub: Option<&'a str>,
}

fn resolve<'a>(cluster: &SimCluster, group: &str, version: &str, rest: &[&'a str]) -> Result<Target<'a>, RestError> {
    let found = |plural: &str| cluster.kind_at(group, version, plural).ok_or(RestError::NoSuchPath);
    let t = match rest {
        ["namespaces", ns, plural, tail @ ..] if cluster.kind_at(group, version, plural).is_some() => {
            let kind = found(plural)?;
            if !kind.namespaced {
                return Err(RestError::NoSuchPath);
            }
            Target { kind, namespace: Some(ns), name: tail.first().copied(), sub: tail.get(1).copied() }
        }
        [plural, tail @ ..] => {
            let kind = found(plural)?;
            let t = Target { kind, namespace: None, name: tail.first().copied(), sub: tail.get(1).copied() };
            if kind.namespaced && t.name.is_some() {
                return Err(RestError::NoSuchPath);
            }
            t
        }
        [] => return Err(RestError::NoSuchPath),
    };
    if rest.len() > if t.namespace.is_some() { 5 } else { 3 } {
        return Err(RestError::NoSuchPath);
    }
    Ok(t)
}

/// A request for a resource answered without a store (the metrics API, the access reviews), if
/// `path` names one.
fn virtual_resource(
    app: &App,
    method: &Method,
    group: &str,
    version: &str,
    rest: &[&str],
    q: &HashMap<String, String>,
    body: &Bytes,
) -> Option<Result<Response, RestError>> {
    let cluster = &app.rest.cluster;
    let selector = q.get("labelSelector").map(String::as_str);
    let answer = match (group, version, rest) {
        ("metrics.k8s.io", "v1beta1", ["nodes", name @ ..]) if name.len() <= 1 => {
            crate::metrics_api::nodes(cluster, name.first().copied(), selector)
        }
        ("metrics.k8s.io", "v1beta1", ["pods"]) => crate::metrics_api::pods(cluster, None, None, selector),
        ("metrics.k8s.io", "v1beta1", ["namespaces", ns, "pods", name @ ..]) if name.len() <= 1 => {
            crate::metrics_api::pods(cluster, Some(ns), name.first().copied(), selector)
        }
        ("authorization.k8s.io" | "authentication.k8s.io", "v1", [plural]) => {
            let v = discovery::VIRTUAL.iter().find(|v| v.group == group && v.plural == *plural)?;
            if *method != Method::POST {
                return Some(Err(RestError::MethodNotAllowed));
            }
            return Some(Ok(media::reply(
                Format::Json,
                201,
                &crate::access::review(v.kind, &format!("{group}/{version}"), body),
            )));
        }
        _ => return None,
    };
    Some(if *method == Method::GET {
        answer.map(|v| media::reply(Format::Json, 200, &v))
    } else {
        Err(RestError::MethodNotAllowed)
    })
}

/// Field validation of a request body ([`crate::field_validation`]): the body as the server
/// takes it, and the warnings to send.
fn validated(
    app: &App,
    kind: &ResourceKind,
    q: &HashMap<String, String>,
    mut body: Value,
) -> Result<(Value, Vec<String>), RestError> {
    let directive = field_validation::Directive::from_query(q.get("fieldValidation").map(String::as_str))?;
    let schemas = openapi::Schemas::of(&app.rest.cluster.custom_kinds());
    let warnings = field_validation::check(&schemas, kind, directive, &mut body)?;
    Ok((body, warnings))
}

/// `response` with a `Warning` header for each of `warnings`, as kubectl prints them.
fn warned(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {}", serde_json::Value::String(w.clone()));
        if let Ok(v) = header::HeaderValue::from_str(&text) {
            response.headers_mut().append("Warning", v);
        }
    }
    response
}

fn route(
    app: &App,
    method: &Method,
    path: &str,
    q: &HashMap<String, String>,
    headers: &HeaderMap,
    body: &Bytes,
    format: Format,
) -> Result<Response, RestError> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let ok = |v: Value| Ok(media::reply(format, 200, &v));
    let parse_json = |body: &Bytes| media::body(headers, body);
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return ok(discovery::version()),
        ["healthz" | "livez" | "readyz"] => {
            return Ok((StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "ok").into_response());
        }
        ["openapi", "v2"] => {
            // client-go asks for the v2 document in protobuf only; JSON is all this server has.
            let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
            if !accept.is_empty() && !accept.contains("json") && !accept.contains("*/*") {
                let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": format!("only application/json is served here, not {accept}"), "reason": "NotAcceptable", "code": 406});
                return Ok(media::reply(Format::Json, 406, &status));
            }
            return ok(openapi::v2(&openapi::Schemas::of(&app.rest.cluster.custom_kinds())));
        }
        ["openapi", "v3"] => return ok(openapi::v3_root(&openapi::Schemas::of(&app.rest.cluster.custom_kinds()))),
        ["openapi", "v3", "api", v] => {
            let schemas = openapi::Schemas::of(&app.rest.cluster.custom_kinds());
            return openapi::v3_group_version(&schemas, "", v).map_or(Err(RestError::NoSuchPath), ok);
        }
        ["openapi", "v3", "apis", g, v] => {
            let schemas = openapi::Schemas::of(&app.rest.cluster.custom_kinds());
            return openapi::v3_group_version(&schemas, g, v).map_or(Err(RestError::NoSuchPath), ok);
        }
        ["api"] => return ok(discovery::core_versions()),
        ["apis"] => return ok(discovery::groups(&app.rest.cluster.served_kinds())),
        ["api", v] => {
            return discovery::resources(&app.rest.cluster.served_kinds(), "", v)
                .map_or(Err(RestError::NoSuchPath), ok);
        }
        ["apis", g, v] => {
            return discovery::resources(&app.rest.cluster.served_kinds(), g, v).map_or(Err(RestError::NoSuchPath), ok);
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(RestError::NoSuchPath),
    };
    if let Some(answer) = virtual_resource(app, method, group, version, rest, q, body) {
        return answer;
    }
    let t = resolve(&app.rest.cluster, group, version, rest)?;
    // `dryRun=All`: the write worked out and answered, nothing kept (crate::dry_run).
    let commit = if *method == Method::GET {
        Commit::Store
    } else {
        dry_run::commit_of(q.get("dryRun").map(String::as_str), dry_run::options_kind(method))?
    };
    let rest = &app.rest.with(commit);
    let shown = ask(headers, q);
    let (kind, ns) = (t.kind, t.namespace);
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let now = || rest.cluster.clock().now();
    let manager = field_manager(headers, q);
    match (method.clone(), t.name, t.sub) {
        (Method::GET, None, None) => {
            let filter = Filter::new(
                ns,
                q.get("labelSelector").map(String::as_str),
                q.get("fieldSelector").map(String::as_str),
            )?;
            if flag(q, "watch") {
                return watch_response(app, kind, filter, q, shown, format);
            }
            let limit =
                match q.get("limit").filter(|l| !l.is_empty()) {
                    None => None,
                    Some(l) => Some(l.parse::<usize>().map_err(|_| {
                        RestError::BadRequest(format!("limit must be a non-negative integer, got {l:?}"))
                    })?),
                };
            let token = q.get("continue").map(String::as_str);
            if !shown.table && format == Format::Json {
                let text = rest.list_page_json(kind, &filter, limit, token)?;
                return Ok((StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], text).into_response());
            }
            let page = rest.list_page(kind, &filter, limit, token)?;
            let rv = page.resource_version;
            if shown.table {
                let mut t = table::table(kind, &page.items, rv, now(), shown.include_object);
                if let Some(c) = &page.continue_token {
                    t["metadata"]["continue"] = json!(c);
                }
                return ok(t);
            }
            let mut metadata = json!({"resourceVersion": rv.to_string()});
            if let Some(c) = page.continue_token {
                metadata["continue"] = json!(c);
            }
            ok(json!({
                "kind": format!("{}List", kind.kind),
                "apiVersion": kind.api_version(),
                "metadata": metadata,
                "items": page.items,
            }))
        }
        (Method::GET, Some(name), sub) => {
            let obj = match sub {
                None | Some("status") => rest.get(kind, ns, name)?,
                Some("scale") => rest.get_scale(kind, ns, name)?,
                _ => return Err(RestError::NoSuchPath),
            };
            if shown.table && sub.is_none() {
                let rv = rest.cluster.resource_version();
                return ok(table::table(kind, &[obj], rv, now(), shown.include_object));
            }
            ok(obj)
        }
        (Method::POST, None, None) => {
            let (body, warnings) = validated(app, kind, q, parse_json(body)?)?;
            let created = rest.create_by(kind, ns, body, &manager)?;
            Ok(warned(media::reply(format, 201, &created), &warnings))
        }
        (Method::POST, Some(name), Some("eviction")) if kind.kind == "Pod" => {
            let b = if body.is_empty() { json!({}) } else { parse_json(body)? };
            let asked = dry_run::commit_of(dry_run::body_values(&b["deleteOptions"])?, "DeleteOptions")?;
            let rest = &if asked == Commit::DryRun { rest.dry_run() } else { rest.clone() };
            Ok(media::reply(format, 201, &rest.evict(ns.unwrap_or("default"), name, &b)?))
        }
        (Method::PUT, Some(name), sub @ (None | Some("status"))) => {
            let (body, warnings) = validated(app, kind, q, parse_json(body)?)?;
            let part = if sub.is_none() { Part::Main } else { Part::Status };
            Ok(warned(media::reply(format, 200, &rest.replace_by(kind, ns, name, body, part, &manager)?), &warnings))
        }
        (Method::PUT, Some(name), sub) => match sub {
            Some("scale") => ok(rest.update_scale_as(kind, ns, name, &parse_json(body)?, None, &manager)?),
            _ => Err(RestError::NoSuchPath),
        },
        (Method::PATCH, Some(name), sub) if media::content_type(headers) == APPLY => {
            if sub.is_some() {
                return Err(RestError::BadRequest(format!(
                    "server-side apply of the {} subresource is not supported by this server",
                    sub.unwrap_or_default()
                )));
            }
            let force = flag(q, "force");
            let manager = q.get("fieldManager").map(String::as_str).unwrap_or("");
            // An applied configuration has the object's shape: its fields are validated as the object's.
            let (config, warnings) = validated(app, kind, q, parse_json(body)?)?;
            let (obj, created) = rest.apply(kind, ns, name, config, manager, force)?;
            Ok(warned(media::reply(format, if created { 201 } else { 200 }, &obj), &warnings))
        }
        (Method::PATCH, Some(name), sub) => {
            let pt = PatchType::from_content_type(content_type)?;
            // A merge patch has the object's shape: its fields are validated as the object's.
            let (patch, warnings) = match (pt, sub) {
                (PatchType::Merge | PatchType::Strategic, None | Some("status")) => {
                    validated(app, kind, q, parse_json(body)?)?
                }
                _ => (parse_json(body)?, Vec::new()),
            };
            let answer = match sub {
                None => ok(rest.patch_by(kind, ns, name, pt, &patch, Part::Main, &manager)?),
                Some("status") => ok(rest.patch(kind, ns, name, pt, &patch, Part::Status)?),
                Some("scale") => ok(rest.update_scale_as(kind, ns, name, &patch, Some(pt), &manager)?),
                _ => Err(RestError::NoSuchPath),
            };
            answer.map(|r| warned(r, &warnings))
        }
        (Method::DELETE, Some(name), None) => {
            let opts = if body.is_empty() { json!({}) } else { parse_json(body)? };
            let asked = dry_run::commit_of(dry_run::body_values(&opts)?, "DeleteOptions")?;
            let rest = &if asked == Commit::DryRun { rest.dry_run() } else { rest.clone() };
            let pre = Preconditions {
                uid: opts.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_string),
                resource_version: opts
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            };
            ok(deleted(kind, rest.delete(kind, ns, name, &pre)?))
        }
        (Method::DELETE, None, None) => {
            let opts = if body.is_empty() { json!({}) } else { parse_json(body)? };
            let asked = dry_run::commit_of(dry_run::body_values(&opts)?, "DeleteOptions")?;
            let rest = &if asked == Commit::DryRun { rest.dry_run() } else { rest.clone() };
            let filter = Filter::new(
                ns,
                q.get("labelSelector").map(String::as_str),
                q.get("fieldSelector").map(String::as_str),
            )?;
            let (items, rv) = rest.list(kind, &filter);
            let mut deleted = Vec::new();
            for item in items {
                let m = &item["metadata"];
                let name = m["name"].as_str().unwrap_or("");
                if let Ok(d) = rest.delete(kind, m["namespace"].as_str(), name, &Preconditions::default()) {
                    deleted.push(d);
                }
            }
            ok(
                json!({"kind": format!("{}List", kind.kind), "apiVersion": kind.api_version(), "metadata": {"resourceVersion": rv.to_string()}, "items": deleted}),
            )
        }
        (Method::GET | Method::POST | Method::PUT | Method::PATCH | Method::DELETE, _, _) => Err(RestError::NoSuchPath),
        _ => Err(RestError::MethodNotAllowed),
    }
}

/// The answer to a DELETE: the object while finalizers keep it, and once it is gone the object for
/// the kinds whose registries return it (pods, namespaces, storage, services, service accounts,
/// CRDs and custom resources), else a
/// `Status` of success naming it, as the API server answers.
fn deleted(kind: &ResourceKind, obj: Value) -> Value {
    let pending = obj.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
    let returns_object = matches!(
        kind.kind,
        "Pod"
            | "Namespace"
            | "PersistentVolume"
            | "PersistentVolumeClaim"
            | "StorageClass"
            | "PriorityClass"
            | "Service"
            | "ServiceAccount"
            | "CustomResourceDefinition"
    ) || kind.custom.is_some()
        || kerf_api::crd::definition(kind.kind).is_some();
    if pending || returns_object {
        return obj;
    }
    let m = &obj["metadata"];
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
        "details": {"name": m["name"], "group": kind.group, "kind": kind.plural, "uid": m["uid"]}})
}

/// What a watch has yet to send.
enum Queued {
    Line(Bytes),
    /// An object of the initial state, turned into its `ADDED` line (if the filter takes it)
    /// only when the client reads that far: a watch holds the objects it has to send, not
    /// copies of them, so many watches of a large kind cost little memory.
    Initial(Stored),
    /// A change, turned into its line when the client reads that far.
    Change(Change),
}

/// The state of one streaming watch.
struct WatchState {
    app: App,
    kind: &'static ResourceKind,
    filter: Filter,
    rv: u64,
    rx: watch::Receiver<u64>,
    pending: VecDeque<Queued>,
    shown: Ask,
    /// Protobuf frames (the kind has a message and the client prefers them), else JSON lines.
    protobuf: bool,
    bookmarks: bool,
    deadline: tokio::time::Instant,
    done: bool,
}

impl WatchState {
    fn line(&self, type_: &str, obj: &Value) -> Bytes {
        let with_status;
        let obj = if self.kind.kind == "PodDisruptionBudget" && type_ != "BOOKMARK" && type_ != "ERROR" {
            with_status = crate::budget_status::with_status(&self.app.rest.cluster, obj.clone());
            &with_status
        } else {
            obj
        };
        let object = if self.shown.table && type_ != "BOOKMARK" && type_ != "ERROR" {
            let now = self.app.rest.cluster.clock().now();
            let rv = obj
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .and_then(|s| s.parse().ok())
                .unwrap_or(self.rv);
            table::table(self.kind, std::slice::from_ref(obj), rv, now, self.shown.include_object)
        } else {
            obj.clone()
        };
        if self.protobuf {
            match proto::watch_frame(type_, &object) {
                Ok(frame) => return Bytes::from(frame),
                Err(e) => {
                    let (_, status) = RestError::BadRequest(format!("cannot encode the event: {e}")).status();
                    return Bytes::from(proto::watch_frame("ERROR", &status).unwrap_or_default());
                }
            }
        }
        let mut s = json!({"type": type_, "object": object}).to_string();
        s.push('\n');
        Bytes::from(s)
    }

    fn bookmark(&self, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": self.rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        self.line("BOOKMARK", &json!({"kind": self.kind.kind, "apiVersion": self.kind.api_version(), "metadata": meta}))
    }

    /// Queues the changes since the last look; false when the watch must end (history gone).
    fn poll(&mut self) -> bool {
        self.rx.borrow_and_update();
        match self.app.rest.changes_of(self.kind, self.rv) {
            Ok((changes, last)) => {
                self.pending.extend(changes.into_iter().map(Queued::Change));
                self.rv = last;
                true
            }
            Err(expired) => {
                let (_, status) = RestError::Gone(expired.to_string()).status();
                let line = self.line("ERROR", &status);
                self.pending.push_back(Queued::Line(line));
                false
            }
        }
    }
}

fn watch_response(
    app: &App,
    kind: &'static ResourceKind,
    filter: Filter,
    q: &HashMap<String, String>,
    shown: Ask,
    format: Format,
) -> Result<Response, RestError> {
    let protobuf =
        format == Format::Protobuf && !shown.table && proto::message(&kind.api_version(), kind.kind).is_some();
    let requested = q.get("resourceVersion").map(String::as_str).filter(|v| !v.is_empty());
    let timeout = q.get("timeoutSeconds").and_then(|s| s.parse::<u64>().ok()).unwrap_or(30 * 60);
    let send_initial = flag(q, "sendInitialEvents");
    let mut state = WatchState {
        app: app.clone(),
        kind,
        filter,
        rv: 0,
        rx: app.rest.cluster.subscribe(),
        pending: VecDeque::new(),
        shown,
        protobuf,
        bookmarks: flag(q, "allowWatchBookmarks"),
        deadline: tokio::time::Instant::now() + Duration::from_secs(timeout),
        done: false,
    };
    state.rx.borrow_and_update();
    match requested {
        Some(v) if v != "0" && !send_initial => {
            state.rv = v.parse().map_err(|_| {
                RestError::BadRequest(format!("resourceVersion {v:?} is not a resourceVersion of this server"))
            })?;
        }
        _ => {
            // No resourceVersion (or "0"): the current state first, as ADDED events.
            let (items, rv) = app.rest.cluster.list_stored(kind.kind, state.filter.namespace.as_deref());
            state.rv = rv;
            state.pending.extend(items.into_iter().map(Queued::Initial));
            if send_initial {
                let b = state.bookmark(true);
                state.pending.push_back(Queued::Line(b));
            }
        }
    }
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            match st.pending.pop_front() {
                Some(Queued::Line(b)) => return Some((Ok::<_, Infallible>(b), st)),
                Some(Queued::Initial(obj)) => {
                    let json = obj.to_json(st.kind);
                    if st.filter.matches(&obj, &json) {
                        let b = st.line("ADDED", &json);
                        return Some((Ok(b), st));
                    }
                    continue;
                }
                Some(Queued::Change(c)) => {
                    if let Some((t, json)) = Rest::event_of(st.kind, &st.filter, &c) {
                        let b = st.line(t.as_str(), &json);
                        return Some((Ok(b), st));
                    }
                    continue;
                }
                None => {}
            }
            if st.done {
                return None;
            }
            if !st.poll() {
                st.done = true;
                continue;
            }
            if !st.pending.is_empty() {
                continue;
            }
            let mut shutdown = st.app.shutdown.clone();
            tokio::select! {
                changed = st.rx.changed() => if changed.is_err() { st.done = true },
                _ = tokio::time::sleep(BOOKMARK_EVERY), if st.bookmarks => {
                    let b = st.bookmark(false);
                    st.pending.push_back(Queued::Line(b));
                }
                _ = tokio::time::sleep_until(st.deadline) => st.done = true,
                _ = shutdown.wait_for(|s| *s) => st.done = true,
            }
        }
    });
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(
            header::CONTENT_TYPE,
            if protobuf { "application/vnd.kubernetes.protobuf;stream=watch" } else { "application/json" },
        )
        .header("Transfer-Encoding", "chunked")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| error_response(&RestError::BadRequest("cannot start the watch".to_string()))))
}

/// Binds `addr` (e.g. `127.0.0.1:6443`; port 0 for a free one).
pub async fn bind(addr: &str) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// A future that resolves on SIGINT or SIGTERM.
pub async fn interrupted() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let sigterm = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = sigterm => {}
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::sync::Arc;

    use kerf_api::clock::ManualClock;

    use super::*;
    use crate::cluster::SimCluster;
    use crate::kinds;

    /// Serves `cluster` on a free port from a background thread; returns the address and the
    /// switch that stops it.
    fn start(cluster: Arc<SimCluster>) -> (String, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap().to_string()).unwrap();
                serve(listener, Rest::new(cluster), rx).await.unwrap();
            });
        });
        (addr_rx.recv().unwrap(), tx)
    }

    fn request(addr: &str, line: &str) -> BufReader<std::net::TcpStream> {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "{line} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
        BufReader::new(s)
    }

    fn lines_until(r: &mut BufReader<std::net::TcpStream>, needle: &str) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let mut l = String::new();
            if r.read_line(&mut l).unwrap_or(0) == 0 {
                return out;
            }
            let found = l.contains(needle);
            out.push(l);
            if found {
                return out;
            }
        }
    }

    fn priority_class(name: &str) -> Value {
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": 1})
    }

    #[test]
    fn a_watch_from_a_resource_version_no_longer_kept_ends_with_a_410_expired_error_event() {
        let cluster = Arc::new(SimCluster::new(ManualClock::new(), 1));
        cluster.enable_serving(2);
        let rest = Rest::new(cluster.clone());
        let kind = kinds::by_kind("PriorityClass").unwrap();
        for n in ["a", "b", "c", "d"] {
            rest.create(kind, None, priority_class(n)).unwrap();
        }
        let (addr, stop) = start(cluster);
        let mut r = request(&addr, "GET /apis/scheduling.k8s.io/v1/priorityclasses?watch=true&resourceVersion=1");
        let seen = lines_until(&mut r, "\"ERROR\"");
        let last = seen.last().cloned().unwrap_or_default();
        assert!(
            last.contains("\"type\":\"ERROR\"") && last.contains("\"code\":410") && last.contains("Expired"),
            "{seen:?}"
        );
        let _ = stop.send(true);
    }

    #[test]
    fn a_watch_streams_changes_as_they_happen_and_sends_bookmarks() {
        let cluster = Arc::new(SimCluster::new(ManualClock::new(), 1));
        cluster.enable_serving(100);
        let rest = Rest::new(cluster.clone());
        let kind = kinds::by_kind("PriorityClass").unwrap();
        rest.create(kind, None, priority_class("a")).unwrap();
        let (addr, stop) = start(cluster);
        let mut r = request(&addr, "GET /apis/scheduling.k8s.io/v1/priorityclasses?watch=1&allowWatchBookmarks=true");
        let initial = lines_until(&mut r, "\"ADDED\"");
        assert!(initial.last().is_some_and(|l| l.contains("\"name\":\"a\"")), "{initial:?}");
        rest.create(kind, None, priority_class("b")).unwrap();
        rest.delete(kind, None, "a", &Preconditions::default()).unwrap();
        let added = lines_until(&mut r, "\"ADDED\"");
        assert!(added.last().is_some_and(|l| l.contains("\"name\":\"b\"")), "{added:?}");
        let deleted = lines_until(&mut r, "\"DELETED\"");
        assert!(deleted.last().is_some_and(|l| l.contains("\"name\":\"a\"")), "{deleted:?}");
        let bookmark = lines_until(&mut r, "\"BOOKMARK\"");
        assert!(bookmark.last().is_some_and(|l| l.contains("\"resourceVersion\":\"3\"")), "{bookmark:?}");
        let _ = stop.send(true);
    }

    #[test]
    fn a_body_nested_deeper_than_128_levels_is_a_bad_request() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        match media::json(&Bytes::from(deep)) {
            Err(RestError::BadRequest(m)) => assert!(m.contains("recursion limit"), "{m}"),
            other => panic!("expected a bad request, got {other:?}"),
        }
        let fine = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(media::json(&Bytes::from(fine)).is_ok());
    }
}
