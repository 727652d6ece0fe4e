//! Starting workers: [`spawn_worker`] (one engine + its HTTP server on a given listener),
//! [`spawn_fleet`] (many in one process), [`spawn_pod_fleet`] (many, each on its own
//! loopback address and one shared port, as pods are), and the [`WorkerHandle`] that stops
//! them.

use crate::config::{SimConfig, WorkerSpec};
use crate::engine::Engine;
use crate::fleet::canonical_role;
use crate::http::{router, Worker};
use crate::kv_events::publish::{self, EventSink, KvEventPorts};
use crate::metrics::Metrics;
use crate::stats::WorkerStats;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running worker. Dropping it (or [`WorkerHandle::shutdown`]) stops the engine, fails
/// in-flight requests and closes the listener.
pub struct WorkerHandle {
    spec: WorkerSpec,
    cfg: SimConfig,
    addr: SocketAddr,
    engine: Arc<Engine>,
    kv_ports: Option<KvEventPorts>,
    stop: watch::Sender<bool>,
    server: Option<JoinHandle<()>>,
    engine_task: JoinHandle<()>,
    publisher: Option<JoinHandle<()>>,
}

impl WorkerHandle {
    /// Listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Worker name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Canonical role label.
    pub fn role(&self) -> &str {
        &self.spec.role
    }

    /// Revision label.
    pub fn revision(&self) -> Option<&str> {
        self.spec.revision.as_deref()
    }

    /// Identity (role canonicalized).
    pub fn spec(&self) -> &WorkerSpec {
        &self.spec
    }

    /// Engine id written into `remote_engine_id`.
    pub fn engine_id(&self) -> &str {
        &self.engine.engine_id
    }

    /// Counters and current load.
    pub fn stats(&self) -> WorkerStats {
        self.engine.stats()
    }

    /// The ports this worker's KV events are published on (ZMQ PUB, replay ROUTER), as bound
    /// (a configured port 0 is the free port chosen); `None` when KV events are off.
    pub fn kv_event_ports(&self) -> Option<KvEventPorts> {
        self.kv_ports
    }

    /// `tcp://127.0.0.1:PORT` of this worker's KV-event PUB socket, for a subscriber on this
    /// machine; `None` when KV events are off.
    pub fn kv_events_endpoint(&self) -> Option<String> {
        self.kv_ports
            .map(|p| format!("tcp://127.0.0.1:{}", p.publish))
    }

    /// `tcp://127.0.0.1:PORT` of this worker's replay socket, when configured.
    pub fn kv_replay_endpoint(&self) -> Option<String> {
        self.kv_ports
            .and_then(|p| p.replay)
            .map(|port| format!("tcp://127.0.0.1:{port}"))
    }

    /// Restarts the engine as a new process would: the same name, address and KV-event
    /// ports, a new engine id, an empty cache, counters at zero, event sequence numbers from
    /// 0 again and a new `process_start_time_seconds`. In-flight requests fail (503).
    ///
    /// Errors: the address or a port was taken by someone else meanwhile.
    pub async fn restart(self) -> anyhow::Result<WorkerHandle> {
        let (spec, addr) = (self.spec.clone(), self.addr);
        let mut cfg = self.cfg.clone();
        if let (Some(k), Some(ports)) = (&mut cfg.kv_events, self.kv_ports) {
            k.pin_ports(ports)?;
        }
        self.shutdown().await;
        let listener = bind(&addr.ip().to_string(), addr.port()).await?;
        spawn_worker(spec, cfg, listener).await
    }

    /// Stops the worker and waits (at most 5 s) for its server and publisher to close.
    pub async fn shutdown(mut self) {
        self.stop_now();
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        }
        if let Some(publisher) = self.publisher.take() {
            publisher.abort();
            let _ = publisher.await;
        }
    }

    fn stop_now(&self) {
        let _ = self.stop.send(true);
        self.engine_task.abort();
        self.engine.close();
        if let Some(p) = &self.publisher {
            p.abort();
        }
    }
}

impl Drop for WorkerHandle {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// Starts one worker serving on `listener`.
///
/// Errors: invalid settings ([`SimConfig::validate`]), unknown role, a name or revision that
/// cannot be a header value.
pub async fn spawn_worker(
    spec: WorkerSpec,
    cfg: SimConfig,
    listener: TcpListener,
) -> anyhow::Result<WorkerHandle> {
    cfg.validate()?;
    anyhow::ensure!(!spec.name.is_empty(), "a worker needs a name");
    let role =
        canonical_role(&spec.role).map_err(|e| anyhow::anyhow!("worker {}: {e}", spec.name))?;
    let spec = WorkerSpec { role, ..spec };
    let addr = listener.local_addr()?;
    let advertise_host = cfg.advertise_host.clone().unwrap_or_else(|| {
        if addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else {
            addr.ip().to_string()
        }
    });
    let engine_id = format!("{}-{:08x}", spec.name, rand::random::<u32>());
    let metrics = Arc::new(Metrics::new(&cfg.model, cfg.block_size, cfg.num_gpu_blocks));
    metrics.register_shared_storage(cfg.kv_shared_storage().is_some(), cfg.ec_transfer.is_some());
    let settings = match &cfg.kv_events {
        Some(k) => k.publisher_settings()?,
        None => None,
    };
    let (sink, kv) = match settings {
        Some(settings) => {
            let (sink, rx) = EventSink::channel(settings.max_queue_size);
            let started = publish::start(&settings, cfg.kv_events_encoding, rx)
                .await
                .map_err(|e| anyhow::anyhow!("worker {}: {e}", spec.name))?;
            let source = settings.source(&advertise_host, started.ports);
            (Some(sink), Some((started, source)))
        }
        None => (None, None),
    };
    let engine = Arc::new(Engine::new(
        cfg.clone(),
        engine_id,
        spec.revision.clone(),
        metrics.clone(),
        sink,
    ));
    let (kv_ports, kv_source, publisher) = match kv {
        Some((started, source)) => (Some(started.ports), Some(source), Some(started.task)),
        None => (None, None, None),
    };
    let worker = Arc::new(Worker::new(
        spec.clone(),
        cfg.clone(),
        engine.clone(),
        metrics,
        addr,
        advertise_host,
        kv_source,
    )?);
    let engine_task = tokio::spawn(engine.clone().run());
    let (stop, mut stopped) = watch::channel(false);
    let app = router(worker);
    let name = spec.name.clone();
    let server = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::warn!(worker = %name, error = %e, "server stopped");
        }
    });
    Ok(WorkerHandle {
        spec,
        cfg,
        addr,
        engine,
        kv_ports,
        stop,
        server: Some(server),
        engine_task,
        publisher,
    })
}

/// Starts `specs` on `host`, worker i on `first_port + i` (0 = each on an ephemeral port) and,
/// with KV events, publishing on the configured ports + i.
/// On error the workers already started are stopped.
pub async fn spawn_fleet(
    specs: Vec<WorkerSpec>,
    cfg: SimConfig,
    host: &str,
    first_port: u16,
) -> anyhow::Result<Vec<WorkerHandle>> {
    let mut out = Vec::with_capacity(specs.len());
    for (i, spec) in specs.into_iter().enumerate() {
        let port = if first_port == 0 {
            0
        } else {
            u16::try_from(first_port as usize + i)
                .map_err(|_| anyhow::anyhow!("port {} is over 65535", first_port as usize + i))?
        };
        let listener = bind(host, port).await?;
        out.push(spawn_worker(spec, cfg.for_worker(i)?, listener).await?);
    }
    Ok(out)
}

/// Attempts of [`spawn_pod_fleet`] at finding a port free on every address.
const POD_PORT_ATTEMPTS: usize = 8;

/// Starts `specs` the way pods serve: worker *i* on its own loopback address
/// `127.0.0.{i + 2}` (Linux routes all of 127.0.0.0/8 to loopback), all on one port — as
/// pods differ by IP and share their pool's target port. The port is the one the system
/// gives the first address; when it is taken on another address, the listeners are dropped
/// and a new port is tried. Returns the workers and the port.
///
/// Errors: more than 253 workers, no port free on every address after 8 attempts (the last
/// bind error is named), or a worker that does not start (the others are stopped).
pub async fn spawn_pod_fleet(
    specs: Vec<WorkerSpec>,
    cfg: SimConfig,
) -> anyhow::Result<(Vec<WorkerHandle>, u16)> {
    anyhow::ensure!(
        specs.len() <= 253,
        "{} workers: at most 253 loopback addresses (127.0.0.2-254)",
        specs.len()
    );
    let ip = |i: usize| Ipv4Addr::new(127, 0, 0, (i + 2) as u8);
    let mut last_error = None;
    for _ in 0..POD_PORT_ATTEMPTS {
        let first = bind(&ip(0).to_string(), 0).await?;
        let port = first.local_addr()?.port();
        let mut listeners = vec![first];
        for i in 1..specs.len() {
            match TcpListener::bind((ip(i), port)).await {
                Ok(l) => listeners.push(l),
                Err(e) => {
                    last_error = Some(format!("{}:{port}: {e}", ip(i)));
                    break;
                }
            }
        }
        if listeners.len() < specs.len() {
            continue;
        }
        let mut out = Vec::with_capacity(specs.len());
        for (i, (spec, listener)) in specs.into_iter().zip(listeners).enumerate() {
            out.push(spawn_worker(spec, cfg.for_worker(i)?, listener).await?);
        }
        return Ok((out, port));
    }
    anyhow::bail!(
        "no port free on all of 127.0.0.2-{} after {POD_PORT_ATTEMPTS} attempts; last: {}",
        specs.len() + 1,
        last_error.unwrap_or_default()
    )
}

/// Binds `host:port`, with an error naming the address.
pub async fn bind(host: &str, port: u16) -> anyhow::Result<TcpListener> {
    TcpListener::bind((host, port))
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {host}:{port}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pod_fleet_workers_share_a_port_on_their_own_addresses() {
        let specs: Vec<WorkerSpec> = (0..3)
            .map(|i| WorkerSpec {
                name: format!("w-{i}"),
                role: "decode".into(),
                revision: None,
                labels: Default::default(),
            })
            .collect();
        let (workers, port) = spawn_pod_fleet(specs, SimConfig::default()).await.unwrap();
        let addrs: Vec<String> = workers.iter().map(|w| w.addr().to_string()).collect();
        assert_eq!(
            addrs,
            [2, 3, 4].map(|n| format!("127.0.0.{n}:{port}")),
            "one port, one address each"
        );
        for w in &workers {
            // Each answers on its own address.
            tokio::net::TcpStream::connect(w.addr()).await.unwrap();
        }
    }
}
