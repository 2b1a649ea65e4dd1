//! Watches: one kube-rs watcher per kind the controllers use, merged into one ordered feed of
//! [`WatchEvent`]s. A watch that fails (the stream breaks, the server is gone, 410) is reported
//! and started over with a list, after a backoff, so that a kind is known complete again only
//! once its list has been delivered.
//! A relist is turned into the changes it implies: objects no longer listed are delivered as
//! `Deleted`, so the controllers' state never keeps an object that went away during the gap.
//! A kind is *synced* once its first list has been delivered. Pods are decoded as
//! [`SlimPod`]s, without the fields no controller reads.

use kerf_api::MetaView;
use kerf_api::str_pair::StrPair;
use std::collections::BTreeSet;

use futures_util::StreamExt;
use kerf_api::SlimPod;
use kerf_api::cluster::Object;
use kerf_api::cluster::{AnyObject, WatchEvent};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc;

use crate::kinds::{self, Kind};

/// What the watches deliver, in order per kind.
#[derive(Debug)]
pub enum Feed {
    Event(WatchEvent),
    /// The kind's list has been delivered in full (first time, or after a relist).
    Synced(&'static str),
    /// The watch failed; it retries on its own.
    Error(&'static str, String),
}

/// An object ordered by its `(namespace, name)` (no namespace reads as empty), read from the
/// object itself: the watch's record of what it delivered holds every pod of the cluster, and
/// keyed this way an entry is the shared object alone rather than it and a key of owned strings.
#[derive(Clone)]
struct Keyed(AnyObject);

impl StrPair for Keyed {
    fn first(&self) -> &str {
        self.0.meta().namespace().unwrap_or_default()
    }
    fn second(&self) -> &str {
        self.0.meta().name().unwrap_or_default()
    }
}

kerf_api::ordered_by_str_pair!(Keyed);

/// Whether `a` has a lower resourceVersion than `b` (both integers; opaque ones never are).
fn older(a: &dyn MetaView, b: &dyn MetaView) -> bool {
    let rv = |m: &dyn MetaView| m.resource_version().and_then(|v| v.parse::<u64>().ok());
    matches!((rv(a), rv(b)), (Some(a), Some(b)) if a < b)
}

/// Turns one kind's watcher events into feed items, keeping what it has delivered so that a
/// relist can tell what disappeared.
#[derive(Default)]
pub struct RelistDiff {
    known: BTreeSet<Keyed>,
    /// Objects of a list in progress.
    listing: Option<BTreeSet<Keyed>>,
}

impl RelistDiff {
    pub fn apply(&mut self, kind: &'static str, event: Event<AnyObject>, out: &mut Vec<Feed>) {
        match event {
            Event::Apply(obj) => {
                self.known.replace(Keyed(obj.clone()));
                out.push(Feed::Event(WatchEvent::Applied(obj)));
            }
            Event::Delete(obj) => {
                let m = obj.meta();
                self.known.remove(&(m.namespace().unwrap_or_default(), m.name().unwrap_or_default()) as &dyn StrPair);
                out.push(Feed::Event(WatchEvent::Deleted(obj)));
            }
            Event::Init => self.listing = Some(BTreeSet::new()),
            Event::InitApply(obj) => {
                self.listing.get_or_insert_with(BTreeSet::new).replace(Keyed(obj));
            }
            Event::InitDone => {
                let listed = self.listing.take().unwrap_or_default();
                for gone in std::mem::take(&mut self.known) {
                    // Gone, or listed at an older resourceVersion than delivered before: the API
                    // server restarted without its history (a restarted `kerf serve`), and the
                    // listed object replaces the known one (the controllers ignore an update
                    // older than what they hold).
                    let now = listed.get(&gone as &dyn StrPair);
                    let replaced = now.is_some_and(|now| older(now.0.meta(), gone.0.meta()));
                    if now.is_none() || replaced {
                        out.push(Feed::Event(WatchEvent::Deleted(gone.0)));
                    }
                }
                for obj in &listed {
                    out.push(Feed::Event(WatchEvent::Applied(obj.0.clone())));
                }
                self.known = listed;
                out.push(Feed::Synced(kind));
            }
        }
    }
}

fn typed(kind: &'static str, ev: Event<DynamicObject>) -> Option<Event<AnyObject>> {
    let convert = |o: DynamicObject| {
        let name = o.metadata.name.clone().unwrap_or_default();
        // Pods are kept slim (see `kerf_api::slim_pod`): decoded as what the controllers read.
        let decoded = if kind == "Pod" {
            let DynamicObject { metadata, mut data, .. } = o;
            let mut part = |k: &str| data.get_mut(k).map(serde_json::Value::take);
            let (spec, status) = (part("spec"), part("status"));
            SlimPod::from_parts(metadata, spec, status).map(Object::into_any)
        } else {
            kinds::from_dynamic(kind, o)
        };
        match decoded {
            Ok(a) => Some(a),
            Err(e) => {
                tracing::warn!(kind, name = %name, error = %e, "cannot decode object; ignored");
                None
            }
        }
    };
    Some(match ev {
        Event::Apply(o) => Event::Apply(convert(o)?),
        Event::Delete(o) => Event::Delete(convert(o)?),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(convert(o)?),
        Event::InitDone => Event::InitDone,
    })
}

/// How long a failed watch waits before it lists again: doubling from 100 ms up to 10 s.
fn relist_backoff(failures: u32) -> std::time::Duration {
    std::time::Duration::from_millis(100u64.saturating_mul(1 << failures.min(7)))
        .min(std::time::Duration::from_secs(10))
}

/// Objects per page of a watch's list (client-go's pager takes 500). A page is decoded whole,
/// as JSON values, before its objects are kept in their typed (for pods, slim) forms: that
/// transient is allocated among the kept objects, and what it leaves scattered holds the
/// controller's resident memory up, so a page is kept smaller than client-go's.
const LIST_PAGE: u32 = 100;

/// Kinds a cluster may not serve (their CRD is not installed): without it there is nothing of
/// the kind, and the watch reports the kind synced and empty instead of retrying forever.
const OPTIONAL: &[&str] = &[
    kerf_api::capacitybuffer::KIND,
    kerf_api::nodeoverlay::KIND,
    kerf_api::provisioningrequest::KIND,
    kerf_api::capacityquota::KIND,
];

async fn watch_kind(client: Client, kind: &'static Kind, tx: mpsc::Sender<Vec<Feed>>) {
    let api: Api<DynamicObject> = Api::all_with(client, &kind.resource);
    if OPTIONAL.contains(&kind.kind)
        && let Err(kube::Error::Api(e)) = api.list(&kube::api::ListParams::default().limit(1)).await
        && e.code == 404
    {
        tracing::info!(
            kind = kind.kind,
            "the API server does not serve this kind (its CRD is not installed); not watching it"
        );
        let _ = tx.send(vec![Feed::Synced(kind.kind)]).await;
        return;
    }
    let mut diff = RelistDiff::default();
    let mut failures = 0u32;
    loop {
        // A watch that failed starts over with a list (not a resumed watch): the controllers
        // learn that their view is complete again from its `Synced`, and what went away during
        // the gap (or with a restarted API server) from the diff.
        let mut stream = watcher::watcher(api.clone(), watcher::Config::default().page_size(LIST_PAGE)).boxed();
        while let Some(item) = stream.next().await {
            let mut out = Vec::new();
            let failed = match item {
                Ok(ev) => {
                    if let Some(ev) = typed(kind.kind, ev) {
                        diff.apply(kind.kind, ev, &mut out);
                    }
                    if out.iter().any(|f| matches!(f, Feed::Synced(_))) {
                        failures = 0;
                    }
                    false
                }
                Err(e) => {
                    out.push(Feed::Error(kind.kind, e.to_string()));
                    true
                }
            };
            if !out.is_empty() && tx.send(out).await.is_err() {
                return;
            }
            if failed {
                break;
            }
        }
        failures = failures.saturating_add(1);
        tokio::time::sleep(relist_backoff(failures)).await;
    }
}

/// Starts a watch per kind; their feed arrives on the returned channel, in batches (a whole
/// relist is one batch, so the controllers never see half of it). The watches stop when the
/// receiver is dropped.
pub fn start(client: &Client) -> (mpsc::Receiver<Vec<Feed>>, Vec<&'static str>) {
    let (tx, rx) = mpsc::channel(1024);
    let all = kinds::all();
    let names = all.iter().map(|k| k.kind).collect();
    for kind in all {
        tokio::spawn(watch_kind(client.clone(), kind, tx.clone()));
    }
    (rx, names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kerf_api::cluster::Object;

    fn node(name: &str) -> AnyObject {
        Node { metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() }, ..Default::default() }
            .into_any()
    }

    fn summary(out: &[Feed]) -> Vec<String> {
        out.iter()
            .map(|f| match f {
                Feed::Event(WatchEvent::Applied(o)) => format!("applied {}", o.meta().name().unwrap_or_default()),
                Feed::Event(WatchEvent::Deleted(o)) => format!("deleted {}", o.meta().name().unwrap_or_default()),
                Feed::Synced(k) => format!("synced {k}"),
                Feed::Error(k, e) => format!("error {k} {e}"),
            })
            .collect()
    }

    #[test]
    fn a_relist_delivers_objects_gone_during_the_gap_as_deleted() {
        let mut diff = RelistDiff::default();
        let mut out = Vec::new();
        for ev in [Event::Init, Event::InitApply(node("a")), Event::InitApply(node("b")), Event::InitDone] {
            diff.apply("Node", ev, &mut out);
        }
        assert_eq!(summary(&out), ["applied a", "applied b", "synced Node"]);
        out.clear();
        diff.apply("Node", Event::Apply(node("c")), &mut out);
        // The watch broke; meanwhile b went away and d appeared.
        for ev in [Event::Init, Event::InitApply(node("a")), Event::InitApply(node("c")), Event::InitApply(node("d"))] {
            diff.apply("Node", ev, &mut out);
        }
        assert_eq!(summary(&out), ["applied c"], "nothing of a relist is delivered before it is complete");
        diff.apply("Node", Event::InitDone, &mut out);
        assert_eq!(summary(&out), ["applied c", "deleted b", "applied a", "applied c", "applied d", "synced Node"]);
    }

    #[test]
    fn a_relist_from_a_restarted_server_at_older_versions_replaces_what_was_known() {
        let at = |name: &str, rv: &str| {
            let meta = ObjectMeta {
                name: Some(name.to_string()),
                resource_version: Some(rv.to_string()),
                ..Default::default()
            };
            Node { metadata: meta, ..Default::default() }.into_any()
        };
        let mut diff = RelistDiff::default();
        let mut out = Vec::new();
        for ev in [Event::Init, Event::InitApply(at("a", "900")), Event::InitApply(at("b", "901")), Event::InitDone] {
            diff.apply("Node", ev, &mut out);
        }
        out.clear();
        // The server came back from its scenario: a again at version 12, b at a newer version.
        for ev in [Event::Init, Event::InitApply(at("a", "12")), Event::InitApply(at("b", "950")), Event::InitDone] {
            diff.apply("Node", ev, &mut out);
        }
        assert_eq!(summary(&out), ["deleted a", "applied a", "applied b", "synced Node"]);
    }
}
