//! A stand-in Kubernetes API server for tests (there is none on these machines): pods and
//! `InferencePool`s in namespaces, served with the real protocol so that the real kube-rs
//! client runs against it.
//!
//! - List: `GET /api/v1/namespaces/{ns}/pods` and
//!   `GET /apis/{group}/{version}/namespaces/{ns}/inferencepools`, with `labelSelector`
//!   (equality terms `k=v`, `k==v`, `k!=v`, comma-separated) and `fieldSelector`
//!   (`metadata.name=…`, `metadata.namespace=…`); the answer is a `…List` whose
//!   `metadata.resourceVersion` is the store's current version (no paging: `limit` is
//!   ignored and no `continue` token is given).
//! - Watch: the same paths with `watch=true` (or `1`) and `resourceVersion=N`: the changes
//!   after N as newline-delimited `{"type": "ADDED"|"MODIFIED"|"DELETED", "object": …}`, then
//!   live ones, with a `BOOKMARK` every second when asked (`allowWatchBookmarks`). An object
//!   that stops matching the selector is sent as `DELETED`, one that starts as `ADDED`, as
//!   the API server's watch cache does. A version older than the retained history gets the
//!   real server's answer: one `ERROR` event with a `Status` of code 410 (`Expired`).
//! - Objects are JSON (pods serialized from k8s-openapi's `Pod`); every object carries its
//!   `apiVersion`, `kind` and a `metadata.resourceVersion` stamped by the store.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::{broadcast, watch};

/// The resource of an object: `pods`, or `inferencepools` of one group/version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Resource {
    /// `v1` for pods, `group/version` for pools.
    api_version: String,
    /// `Pod` or `InferencePool`.
    kind: String,
}

impl Resource {
    fn pods() -> Self {
        Resource {
            api_version: "v1".into(),
            kind: "Pod".into(),
        }
    }

    fn pools(group: &str, version: &str) -> Self {
        Resource {
            api_version: format!("{group}/{version}"),
            kind: "InferencePool".into(),
        }
    }
}

type Key = (Resource, String, String);

#[derive(Debug, Clone)]
struct Change {
    rv: u64,
    resource: Resource,
    namespace: String,
    old: Option<Value>,
    new: Option<Value>,
}

#[derive(Default)]
struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    history: Vec<Change>,
    /// Watches from a version below this get 410.
    oldest: u64,
}

struct Shared {
    store: Mutex<Store>,
    changes: broadcast::Sender<Change>,
    /// Bumped to end every open watch (a dropped connection).
    generation: watch::Sender<u64>,
    lists: AtomicU64,
    watches: AtomicU64,
}

/// A pod in `namespace` at `ip` with `labels`, its `Ready` condition `ready` (the shape the
/// tests build rollouts from).
pub fn pod(
    namespace: &str,
    name: &str,
    ip: &str,
    ready: bool,
    labels: &[(&str, &str)],
) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        status: Some(PodStatus {
            pod_ip: Some(ip.into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A running stand-in API server on `127.0.0.1` (port 0); stopped when dropped.
pub struct KubeApi {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl KubeApi {
    /// Starts the server.
    ///
    /// Errors: the loopback listener cannot be bound.
    pub async fn start() -> std::io::Result<KubeApi> {
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            changes: broadcast::channel(4096).0,
            generation: watch::channel(0).0,
            lists: AtomicU64::new(0),
            watches: AtomicU64::new(0),
        });
        let app = Router::new()
            .route("/api/v1/namespaces/{ns}/pods", get(pods))
            .route(
                "/apis/{group}/{version}/namespaces/{ns}/inferencepools",
                get(pools),
            )
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(KubeApi {
            shared,
            addr,
            server,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig file's text naming this server (no credentials), namespace `namespace`.
    pub fn kubeconfig(&self, namespace: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: {}\n\
             users:\n- name: tester\n  user: {{}}\ncontexts:\n- name: test\n  context:\n    cluster: stand-in\n    user: tester\n    namespace: {namespace}\n\
             current-context: test\n",
            self.url()
        )
    }

    /// List requests served so far.
    pub fn lists(&self) -> u64 {
        self.shared.lists.load(Ordering::SeqCst)
    }

    /// Watch requests served so far.
    pub fn watches(&self) -> u64 {
        self.shared.watches.load(Ordering::SeqCst)
    }

    /// Creates or replaces a pod (by namespace and name; the namespace defaults to `default`).
    pub fn apply_pod(&self, pod: &k8s_openapi::api::core::v1::Pod) {
        let value = serde_json::to_value(pod).expect("a Pod serializes");
        self.apply(Resource::pods(), value);
    }

    /// Deletes a pod; a no-op when there is none.
    pub fn delete_pod(&self, namespace: &str, name: &str) {
        self.delete(Resource::pods(), namespace, name);
    }

    /// Creates or replaces an `InferencePool` of `group`/`version` (`pool` is the object's
    /// JSON: `metadata` with `name` and `namespace`, and `spec`).
    pub fn apply_pool(&self, group: &str, version: &str, pool: Value) {
        self.apply(Resource::pools(group, version), pool);
    }

    /// Deletes an `InferencePool`.
    pub fn delete_pool(&self, group: &str, version: &str, namespace: &str, name: &str) {
        self.delete(Resource::pools(group, version), namespace, name);
    }

    /// A DELETE the watchers never see: every open watch ends (the connection broke), the pod
    /// is removed meanwhile, and the history is forgotten, so a watch resumed from an earlier
    /// version gets 410 and must list again.
    pub fn delete_pod_while_disconnected(&self, namespace: &str, name: &str) {
        let mut store = self.shared.store.lock();
        self.shared.generation.send_modify(|g| *g += 1);
        store.rv += 1;
        store
            .objects
            .remove(&(Resource::pods(), namespace.to_string(), name.to_string()));
        store.history.clear();
        store.oldest = store.rv;
    }

    fn apply(&self, resource: Resource, mut value: Value) {
        let mut store = self.shared.store.lock();
        store.rv += 1;
        let rv = store.rv;
        let meta = value
            .as_object_mut()
            .expect("an object")
            .entry("metadata")
            .or_insert_with(|| json!({}));
        let namespace = meta
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let name = meta["name"].as_str().expect("metadata.name").to_string();
        meta["namespace"] = json!(namespace);
        meta["resourceVersion"] = json!(rv.to_string());
        meta.as_object_mut()
            .expect("metadata is an object")
            .entry("uid")
            .or_insert_with(|| json!(format!("uid-{name}")));
        value["apiVersion"] = json!(resource.api_version);
        value["kind"] = json!(resource.kind);
        let key = (resource.clone(), namespace.clone(), name);
        let old = store.objects.insert(key, value.clone());
        self.record(
            &mut store,
            Change {
                rv,
                resource,
                namespace,
                old,
                new: Some(value),
            },
        );
    }

    fn delete(&self, resource: Resource, namespace: &str, name: &str) {
        let mut store = self.shared.store.lock();
        let key = (resource.clone(), namespace.to_string(), name.to_string());
        let Some(mut old) = store.objects.remove(&key) else {
            return;
        };
        store.rv += 1;
        let rv = store.rv;
        old["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.record(
            &mut store,
            Change {
                rv,
                resource,
                namespace: namespace.to_string(),
                old: Some(old),
                new: None,
            },
        );
    }

    fn record(&self, store: &mut Store, change: Change) {
        store.history.push(change.clone());
        let _ = self.shared.changes.send(change);
    }
}

/// An equality-based label selector (`k=v`, `k==v`, `k!=v`, comma-separated).
fn labels_match(selector: &str, obj: &Value) -> bool {
    let labels = &obj["metadata"]["labels"];
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                labels[k.trim()].as_str() != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                labels[k.trim()].as_str() == Some(v.trim())
            } else {
                labels.get(term).is_some()
            }
        })
}

/// `metadata.name=…` / `metadata.namespace=…` terms.
fn fields_match(selector: &str, obj: &Value) -> bool {
    selector
        .split(',')
        .filter(|t| !t.is_empty())
        .all(|term| match term.split_once('=') {
            Some(("metadata.name", v)) => obj["metadata"]["name"].as_str() == Some(v),
            Some(("metadata.namespace", v)) => obj["metadata"]["namespace"].as_str() == Some(v),
            _ => false,
        })
}

struct Selection {
    resource: Resource,
    namespace: String,
    labels: String,
    fields: String,
}

impl Selection {
    fn of(resource: Resource, namespace: String, q: &HashMap<String, String>) -> Self {
        Selection {
            resource,
            namespace,
            labels: q.get("labelSelector").cloned().unwrap_or_default(),
            fields: q.get("fieldSelector").cloned().unwrap_or_default(),
        }
    }

    fn matches(&self, obj: &Value) -> bool {
        labels_match(&self.labels, obj) && fields_match(&self.fields, obj)
    }

    /// The watch event a change makes for this selection, if any.
    fn event(&self, c: &Change) -> Option<Value> {
        if c.resource != self.resource || c.namespace != self.namespace {
            return None;
        }
        let was = c.old.as_ref().is_some_and(|o| self.matches(o));
        let is = c.new.as_ref().is_some_and(|n| self.matches(n));
        let (kind, obj) = match (was, is) {
            (false, true) => ("ADDED", c.new.clone()?),
            (true, true) => ("MODIFIED", c.new.clone()?),
            (true, false) => {
                let mut o = c.new.clone().or_else(|| c.old.clone())?;
                o["metadata"]["resourceVersion"] = json!(c.rv.to_string());
                ("DELETED", o)
            }
            (false, false) => return None,
        };
        Some(json!({"type": kind, "object": obj}))
    }
}

async fn pods(
    State(shared): State<Arc<Shared>>,
    Path(ns): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    serve(shared, Selection::of(Resource::pods(), ns, &q), q)
}

async fn pools(
    State(shared): State<Arc<Shared>>,
    Path((group, version, ns)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    serve(
        shared,
        Selection::of(Resource::pools(&group, &version), ns, &q),
        q,
    )
}

fn serve(shared: Arc<Shared>, sel: Selection, q: HashMap<String, String>) -> Response {
    let watching = matches!(q.get("watch").map(String::as_str), Some("true" | "1"));
    let store = shared.store.lock();
    if !watching {
        shared.lists.fetch_add(1, Ordering::SeqCst);
        let items: Vec<&Value> = store
            .objects
            .iter()
            .filter(|((r, ns, _), v)| *r == sel.resource && *ns == sel.namespace && sel.matches(v))
            .map(|(_, v)| v)
            .collect();
        let list = json!({
            "apiVersion": sel.resource.api_version,
            "kind": format!("{}List", sel.resource.kind),
            "metadata": {"resourceVersion": store.rv.to_string()},
            "items": items,
        });
        return axum::Json(list).into_response();
    }
    shared.watches.fetch_add(1, Ordering::SeqCst);
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, std::io::Error>>(1024);
    let line = |v: Value| format!("{v}\n");
    if from < store.oldest {
        let gone = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
            "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
            "message": format!("too old resource version: {from} ({})", store.oldest)}});
        let _ = tx.try_send(Ok(line(gone)));
    } else {
        let mut changes = shared.changes.subscribe();
        let mut ended = shared.generation.subscribe();
        let replay: Vec<String> = store
            .history
            .iter()
            .filter(|c| c.rv > from)
            .filter_map(|c| sel.event(c))
            .map(line)
            .collect();
        let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
        let kind = sel.resource.clone();
        let mut rv_now = store.rv;
        tokio::spawn(async move {
            for l in replay {
                if tx.send(Ok(l)).await.is_err() {
                    return;
                }
            }
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tokio::select! {
                    c = changes.recv() => match c {
                        Ok(c) => {
                            rv_now = c.rv;
                            if let Some(ev) = sel.event(&c) {
                                if tx.send(Ok(line(ev))).await.is_err() {
                                    return;
                                }
                            }
                        }
                        Err(_) => return,
                    },
                    _ = ended.changed() => return,
                    _ = tick.tick(), if bookmarks => {
                        let ev = json!({"type": "BOOKMARK", "object": {"apiVersion": kind.api_version,
                            "kind": kind.kind, "metadata": {"resourceVersion":
                            rv_now.to_string()}}});
                        if tx.send(Ok(line(ev))).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    drop(store);
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    Response::builder()
        .header("content-type", "application/json")
        .body(body)
        .expect("a valid response")
}
