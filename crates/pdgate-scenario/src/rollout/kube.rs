//! The rollout on Kubernetes discovery: the set's simulators are pods of an `InferencePool`
//! in the stand-in API server ([`pdgate_sim::kube_api::KubeApi`], the real list/watch
//! protocol), and both routers follow the pool with the real kube-rs watcher
//! ([`pdgate_fleet::kube::KubeWatcher`]).
//!
//! - The pool (`inference.networking.k8s.io/v1`, namespace [`NAMESPACE`], name
//!   [`plan::SET_NAME`]) selects the set's label `disaggregatedset.x-k8s.io/name` and has
//!   one target port: the port every simulator shares on its own loopback address
//!   (`127.0.0.N`), which is the pod's `status.podIP`.
//! - A pod carries the labels the file gives its endpoint. A step is the pod updates that
//!   turn the previous step's listing into this one, in pod order: `Ready` → condition
//!   `Ready=True`; `NotReady` → `Ready=False`; `Terminating` → `metadata.deletionTimestamp`
//!   set (with a 30 s grace); `Absent` → the pod deleted. A terminating pod cannot come back
//!   (Kubernetes never clears a deletion timestamp): when the listing has it again, it is
//!   deleted and created anew with the same name and a new UID, as a StatefulSet does.

use super::plan::{self, Listing, Pod};
use super::publish::{addr_of, Publisher};
use k8s_openapi::api::core::v1::Pod as KubePod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pdgate_fleet::kube::pool::GROUP_V1;
use pdgate_fleet::kube::{KubeWatcher, Target};
use pdgate_fleet::EndpointSource;
use pdgate_scheduler::Endpoint;
use pdgate_sim::kube_api::KubeApi;
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Namespace of the pool and its pods.
pub const NAMESPACE: &str = "rollout";

/// Publishes steps as pod updates in a stand-in API server it owns (stopped when dropped).
pub struct KubePublisher {
    api: KubeApi,
    client: kube::Client,
    addrs: BTreeMap<String, SocketAddr>,
    port: u16,
    /// Every pod as last applied, by name.
    pods: BTreeMap<String, KubePod>,
    /// Pods created so far (a recreated pod gets a new UID from it).
    created: u64,
}

impl KubePublisher {
    /// Starts the API server with the set's pool (no pods yet) and a client of it; the
    /// simulators at `addrs` (by pod name) must share one port.
    ///
    /// Errors: the simulators' ports differ, the server cannot listen, or the client cannot
    /// be built.
    pub async fn start(addrs: BTreeMap<String, SocketAddr>) -> anyhow::Result<Self> {
        let mut ports: Vec<u16> = addrs.values().map(SocketAddr::port).collect();
        ports.sort_unstable();
        ports.dedup();
        let [port] = ports[..] else {
            anyhow::bail!("the pool has one target port, the simulators listen on {ports:?}");
        };
        let api = KubeApi::start().await?;
        api.apply_pool(
            GROUP_V1,
            "v1",
            serde_json::json!({
                "metadata": {"name": plan::SET_NAME, "namespace": NAMESPACE},
                "spec": {"selector": {"matchLabels": {pdgate_api::labels::DS_NAME: plan::SET_NAME}},
                         "targetPorts": [{"number": port}],
                         "endpointPickerRef": {"name": "pdgate", "port": {"number": 9002}}}
            }),
        );
        let client = kube::Client::try_from(kube::Config::new(api.url().parse()?))?;
        Ok(KubePublisher {
            api,
            client,
            addrs,
            port,
            pods: BTreeMap::new(),
            created: 0,
        })
    }

    /// The pod object of `pod` listed as `how` (`None`: absent).
    fn object(&self, pod: &Pod, how: Listing) -> anyhow::Result<Option<KubePod>> {
        let name = pod.name();
        let ip = addr_of(&self.addrs, &name)?.ip().to_string();
        let labels = pod.labels();
        let labels: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let ready = |r| pdgate_sim::kube_api::pod(NAMESPACE, &name, &ip, r, &labels);
        Ok(match how {
            Listing::Absent => None,
            Listing::Ready => Some(ready(true)),
            Listing::NotReady => Some(ready(false)),
            Listing::Terminating => {
                let mut p = ready(true);
                p.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
                p.metadata.deletion_grace_period_seconds = Some(30);
                Some(p)
            }
        })
    }

    fn create(&mut self, name: String, mut pod: KubePod) {
        self.created += 1;
        pod.metadata.uid = Some(format!("{name}-{}", self.created));
        self.api.apply_pod(&pod);
        self.pods.insert(name, pod);
    }
}

fn terminating(p: &KubePod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

impl Publisher for KubePublisher {
    fn source(&self) -> anyhow::Result<EndpointSource> {
        let target = Target::Pool {
            name: plan::SET_NAME.into(),
            namespace: NAMESPACE.into(),
            group: GROUP_V1.into(),
        };
        let watcher = KubeWatcher::new(self.client.clone(), target)?;
        Ok(EndpointSource::Watch(Box::new(watcher)))
    }

    /// Applies the pod updates from the previous listing to this one (only the pods that
    /// change); the expected endpoints are what pdgate's pod reading makes of the pods.
    fn publish(&mut self, listing: &[(Pod, Listing)]) -> anyhow::Result<Vec<Endpoint>> {
        for (pod, how) in listing {
            let name = pod.name();
            let want = self.object(pod, *how)?;
            let Some(old) = self.pods.get(&name) else {
                if let Some(new) = want {
                    self.create(name, new);
                }
                continue;
            };
            match want {
                None => {
                    self.api.delete_pod(NAMESPACE, &name);
                    self.pods.remove(&name);
                }
                Some(new) if terminating(old) && !terminating(&new) => {
                    self.api.delete_pod(NAMESPACE, &name);
                    self.create(name, new);
                }
                // A terminating pod stays as it is (its deletion timestamp is kept).
                Some(_) if terminating(old) => {}
                Some(mut new) => {
                    new.metadata.uid = old.metadata.uid.clone();
                    if new != *old {
                        self.api.apply_pod(&new);
                        self.pods.insert(name, new);
                    }
                }
            }
        }
        Ok(pdgate_fleet::kube::pods::endpoints(self.pods.values(), &[self.port]).0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::plan::{listings, pods, DEFAULT_STEPS};

    fn addrs() -> BTreeMap<String, SocketAddr> {
        pods()
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name(), SocketAddr::from(([127, 0, 0, i as u8 + 2], 9000))))
            .collect()
    }

    fn view(eps: &[Endpoint]) -> Vec<(String, String, bool, bool)> {
        eps.iter()
            .map(|e| (e.name.clone(), e.address.clone(), e.ready, e.terminating))
            .collect()
    }

    #[tokio::test]
    async fn every_step_reaches_a_watcher_as_the_publisher_expects() {
        let mut p = KubePublisher::start(addrs()).await.unwrap();
        let mut w = match p.source().unwrap() {
            EndpointSource::Watch(w) => w,
            other => panic!("{other:?}"),
        };
        let mut got = Vec::new();
        for (k, listing) in listings(&DEFAULT_STEPS).iter().enumerate() {
            let want = view(&p.publish(listing).unwrap());
            // The watcher yields intermediate lists within a step; the last one is the step.
            loop {
                let next = tokio::time::timeout(std::time::Duration::from_secs(2), w.next())
                    .await
                    .unwrap_or_else(|_| panic!("step {}: no list within 2 s", k + 1));
                got = view(&next.unwrap().unwrap());
                if got == want {
                    break;
                }
            }
            let ready = got.iter().filter(|e| e.2).count();
            let c = DEFAULT_STEPS[k];
            assert_eq!(
                ready,
                c.a_prefill + c.a_decode + c.b_prefill + c.b_decode,
                "step {}",
                k + 1
            );
        }
        // Step 10: A's last decode pod is terminating (not Ready), B's are Ready at their
        // own addresses on the pool's port.
        assert!(got.contains(&("a-decode-0".into(), "127.0.0.4:9000".into(), false, true)));
        assert!(got.contains(&("b-decode-5".into(), "127.0.0.17:9000".into(), true, false)));
        assert_eq!(got.len(), 9, "{got:?}");
    }

    #[tokio::test]
    async fn simulators_on_different_ports_are_refused() {
        let mut a = addrs();
        a.insert(
            "a-prefill-0".into(),
            SocketAddr::from(([127, 0, 0, 2], 9001)),
        );
        let err = KubePublisher::start(a).await.err().unwrap().to_string();
        assert!(err.contains("one target port"), "{err}");
    }
}
