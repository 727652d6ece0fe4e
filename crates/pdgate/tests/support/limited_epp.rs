//! An EPP in-process under chosen limits ([`Limited`]), over two simulator workers, with its
//! ext_proc and metrics ports served: what the `e2e_epp_limits_*` modules hold against
//! `pdgate epp`'s limits (issue 26).

use super::envoy::{serve_ext_proc, Servers};
use super::raw_ext_proc::connect;
use super::{endpoints, sim_config, sim_workers, spec, wait_until};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use pdgate_epp::{Epp, EppLimits, EppOptions};
use pdgate_scheduler::{Scheduler, DEFAULT_CONFIG_YAML};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tonic::transport::Channel;

/// An EPP in-process over two simulator workers, under `limits`: its ext_proc and metrics
/// ports.
pub struct Limited {
    /// The EPP's state (its budget, streams, connections, registry).
    pub epp: Arc<Epp>,
    /// The ext_proc (gRPC) port.
    pub grpc: SocketAddr,
    /// The metrics port.
    pub metrics: SocketAddr,
    /// The simulator workers it routes to.
    pub workers: Vec<pdgate_sim::WorkerHandle>,
    _servers: Servers,
}

impl Limited {
    /// The EPP's metrics as Prometheus text.
    pub fn text(&self) -> String {
        String::from_utf8(pdgate_epp::service::render_metrics(&self.epp)).unwrap()
    }

    /// The bookings held on every endpoint.
    pub fn in_flight(&self) -> u32 {
        let snap = self.epp.registry.snapshot();
        snap.endpoints.iter().map(|e| e.load.in_flight()).sum()
    }

    /// The ext_proc streams open now.
    pub fn streams_open(&self) -> usize {
        self.epp.limits.max_streams - self.epp.streams.available_permits()
    }

    /// A new gRPC connection to the ext_proc port.
    pub async fn client(&self) -> ExternalProcessorClient<Channel> {
        connect(self.grpc).await
    }
}

/// Limits for the tests: the defaults with `f` applied.
pub fn limits(f: impl FnOnce(&mut EppLimits)) -> EppLimits {
    let mut l = EppLimits::default();
    f(&mut l);
    l
}
/// Starts an EPP under `limits` (see [`Limited`]), once it knows its endpoints.
pub async fn limited(limits: EppLimits) -> Limited {
    let workers = sim_workers(
        vec![spec("w0", "decode", None), spec("w1", "decode", None)],
        sim_config(50.0),
    )
    .await;
    let scheduler = Arc::new(Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "test config").unwrap());
    let source = pdgate_fleet::EndpointSource::Static(endpoints(&workers));
    let mut opts = EppOptions::new(scheduler, source);
    opts.limits = limits;
    let (epp, tasks) = Epp::start(opts).await.unwrap();
    let mut servers = Servers(tasks);
    let grpc = serve_ext_proc(&epp, &mut servers).await;
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_addr = metrics.local_addr().unwrap();
    servers
        .0
        .push(tokio::spawn(pdgate_epp::service::serve_metrics(
            epp.clone(),
            metrics,
        )));
    wait_until(Duration::from_secs(5), "endpoints known", || epp.ready()).await;
    Limited {
        epp,
        grpc,
        metrics: metrics_addr,
        workers,
        _servers: servers,
    }
}
