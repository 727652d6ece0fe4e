//! The gRPC servers: `envoy.service.ext_proc.v3.ExternalProcessor` (one [`Exchange`] per
//! stream) and the gRPC health services the endpoint-picker protocol names — `liveness`
//! (serving while the process answers), `readiness` and
//! `envoy.service.ext_proc.v3.ExternalProcessor` (serving once the first endpoint list is
//! applied and until draining starts).

use crate::exchange::Exchange;
use crate::state::Epp;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use futures_util::Stream;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tonic_health::ServingStatus;

/// gRPC health service names (endpoint-picker protocol, "Health Checking").
pub const LIVENESS: &str = "liveness";
/// Readiness: the first endpoint list is applied and the EPP is not draining.
pub const READINESS: &str = "readiness";
/// The ext_proc service's own health name (same criteria as readiness).
pub const EXT_PROC: &str = "envoy.service.ext_proc.v3.ExternalProcessor";

/// Answers queued per stream before the reader waits for Envoy to take them.
const ANSWERS_IN_FLIGHT: usize = 64;

/// The ext_proc service of one EPP.
#[derive(Clone)]
pub struct EppService {
    epp: Arc<Epp>,
}

impl EppService {
    /// The service over `epp`.
    pub fn new(epp: Arc<Epp>) -> Self {
        EppService { epp }
    }
}

type Answers = Pin<Box<dyn Stream<Item = Result<ProcessingResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for EppService {
    type ProcessStream = Answers;

    async fn process(
        &self,
        request: Request<Streaming<ProcessingRequest>>,
    ) -> Result<Response<Self::ProcessStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(ANSWERS_IN_FLIGHT);
        let epp = self.epp.clone();
        tokio::spawn(async move {
            // The exchange owns the request's bookings: when this task ends — end of stream,
            // Envoy's reset, a failed send — they are released with it.
            let mut exchange = Exchange::new(epp);
            loop {
                let msg = tokio::select! {
                    m = inbound.message() => m,
                    _ = tx.closed() => break,
                };
                match msg {
                    Ok(Some(msg)) => {
                        for answer in exchange.on_message(msg).await {
                            if tx.send(Ok(answer)).await.is_err() {
                                return;
                            }
                        }
                        if exchange.is_done() {
                            // Keep reading until Envoy closes its side, answering nothing.
                            continue;
                        }
                    }
                    Ok(None) => break,
                    Err(status) => {
                        tracing::debug!(%status, "ext_proc stream ended by the data plane");
                        break;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx)) as Answers))
    }
}

/// Serves the ext_proc service on `listener` until `shutdown` resolves (then in-progress
/// streams finish).
///
/// Errors: the gRPC server failed.
pub async fn serve_ext_proc(
    epp: Arc<Epp>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tonic::transport::Server::builder()
        .add_service(ExternalProcessorServer::new(EppService::new(epp)))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

/// Serves the gRPC health services on `listener` (see the module docs), refreshing readiness
/// every 100 ms, until the task is aborted.
///
/// Errors: the gRPC server failed.
pub async fn serve_health(
    epp: Arc<Epp>,
    listener: tokio::net::TcpListener,
) -> Result<(), tonic::transport::Error> {
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status(LIVENESS, ServingStatus::Serving)
        .await;
    let watch = tokio::spawn(async move {
        let mut last = None;
        loop {
            let ready = epp.ready();
            if last != Some(ready) {
                let status = if ready {
                    ServingStatus::Serving
                } else {
                    ServingStatus::NotServing
                };
                reporter.set_service_status(READINESS, status).await;
                reporter.set_service_status(EXT_PROC, status).await;
                tracing::info!(ready, "EPP readiness");
                last = Some(ready);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let served = tonic::transport::Server::builder()
        .add_service(service)
        .serve_with_incoming(incoming)
        .await;
    watch.abort();
    served
}
