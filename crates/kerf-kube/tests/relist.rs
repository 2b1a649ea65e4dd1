//! The watches against a real HTTP API (kerf's in-memory API server): when the server goes
//! away and comes back having forgotten the watches' resourceVersion (410 Gone), the watches
//! relist and deliver what changed in the gap, objects deleted meanwhile included.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kerf_api::cluster::{AnyObject, WatchEvent};
use kerf_apiserver::SimCluster;
use kerf_apiserver::rest::Rest;
use kerf_cloud::ManualClock;
use kerf_kube::watch::{self, Feed};
use tokio::sync::{mpsc, watch as channel};

fn node(name: &str) -> Node {
    Node { metadata: ObjectMeta { name: Some(name.to_string()), ..Default::default() }, ..Default::default() }
}

fn serve(
    cluster: &Arc<SimCluster>,
    listener: tokio::net::TcpListener,
) -> (channel::Sender<bool>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = channel::channel(false);
    let rest = Rest::new(Arc::clone(cluster));
    let task = tokio::spawn(async move {
        let _ = kerf_apiserver::http::serve(listener, rest, rx).await;
    });
    (tx, task)
}

/// Node changes delivered until the Node watch has (re)synced, as `applied x` / `deleted x`.
async fn until_nodes_synced(feed: &mut mpsc::Receiver<Vec<Feed>>, unsynced: &mut Vec<&'static str>) -> Vec<String> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut node_synced = false;
    loop {
        let batch = tokio::time::timeout_at(deadline, feed.recv())
            .await
            .expect("the watches delivered within 30s")
            .expect("the watches are running");
        for item in batch {
            match item {
                Feed::Event(WatchEvent::Applied(AnyObject::Node(n))) => {
                    seen.push(format!("applied {}", n.metadata.name.clone().unwrap_or_default()))
                }
                Feed::Event(WatchEvent::Deleted(AnyObject::Node(n))) => {
                    seen.push(format!("deleted {}", n.metadata.name.clone().unwrap_or_default()))
                }
                Feed::Synced(kind) => {
                    unsynced.retain(|k| *k != kind);
                    node_synced |= kind == "Node";
                }
                Feed::Error(kind, e) => eprintln!("watch {kind}: {e}"),
                _ => {}
            }
        }
        if node_synced && unsynced.is_empty() {
            return seen;
        }
    }
}

#[test]
fn watches_relist_after_the_server_forgot_their_version_and_deliver_deletions_from_the_gap() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let cluster = Arc::new(SimCluster::new(ManualClock::new(), 1));
        // Only a few changes are kept for resuming watches.
        cluster.enable_serving(3);
        cluster.create_obj(node("a")).expect("a");
        cluster.create_obj(node("b")).expect("b");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (stop, server) = serve(&cluster, listener);

        let config = kube::Config::new(format!("http://{addr}").parse().expect("url"));
        let client = kerf_kube::api::client(config).expect("client");
        let (mut feed, kinds) = watch::start(&client);
        let mut unsynced = kinds;
        let first = until_nodes_synced(&mut feed, &mut unsynced).await;
        assert_eq!(first, ["applied a", "applied b"]);

        // The server goes away; meanwhile b is deleted and more changes than it keeps happen.
        let _ = stop.send(true);
        let _ = server.await;
        cluster.delete_obj::<Node>(None, "b").expect("delete b");
        for i in 0..10 {
            cluster.create_obj(node(&format!("c{i}"))).expect("c");
        }
        let listener = tokio::net::TcpListener::bind(addr).await.expect("rebind the same port");
        let (stop, server) = serve(&cluster, listener);

        let mut unsynced = vec!["Node"];
        let relisted = until_nodes_synced(&mut feed, &mut unsynced).await;
        assert_eq!(relisted.first().map(String::as_str), Some("deleted b"), "{relisted:?}");
        let applied: Vec<&String> = relisted.iter().filter(|e| e.starts_with("applied")).collect();
        assert_eq!(applied.len(), 11, "a and c0..c9 listed: {relisted:?}");
        let _ = stop.send(true);
        let _ = server.await;
    });
}
