//! One ext_proc stream driven message by message over real gRPC ([`Raw`]), whatever the EPP
//! answers — unlike the stand-in Envoy ([`super::envoy`]), which plays the whole protocol —
//! with the messages to send and the readers of an immediate response. For the hostile cases
//! of `pdgate epp`'s limits (the `e2e_epp_limits_*` modules).

use super::envoy::{envoy_headers, JSON};
use envoy_types::pb::envoy::config::core::v3::HeaderMap;
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    processing_request::Request, processing_response::Response, HttpBody, HttpHeaders,
    ImmediateResponse, ProcessingRequest, ProcessingResponse,
};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::mpsc;
use tonic::transport::Channel;

/// A new gRPC connection to the ext_proc port at `grpc`.
pub async fn connect(grpc: SocketAddr) -> ExternalProcessorClient<Channel> {
    ExternalProcessorClient::connect(format!("http://{grpc}"))
        .await
        .unwrap()
}

/// One ext_proc stream driven message by message, whatever the EPP answers.
pub struct Raw {
    /// The messages to the EPP (dropping it ends the request side).
    pub tx: mpsc::Sender<ProcessingRequest>,
    /// The EPP's answers.
    pub rx: tonic::Streaming<ProcessingResponse>,
}

/// Opens a stream on `client`.
///
/// Errors: the status the EPP refused the stream with.
pub async fn open(client: &mut ExternalProcessorClient<Channel>) -> Result<Raw, tonic::Status> {
    let (tx, rx) = mpsc::channel(64);
    let rx = client
        .process(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok(Raw { tx, rx })
}

impl Raw {
    /// Sends `request` as the stream's next message.
    pub async fn send(&self, request: Request) {
        let msg = ProcessingRequest {
            request: Some(request),
            ..Default::default()
        };
        self.tx.send(msg).await.unwrap();
    }

    /// The next message or the stream's end, within `within` (else the test fails).
    pub async fn next(
        &mut self,
        within: Duration,
    ) -> Result<Option<ProcessingResponse>, tonic::Status> {
        tokio::time::timeout(within, self.rx.message())
            .await
            .expect("an answer or the stream's end in time")
    }

    /// The immediate response that must come next (within 5 s).
    pub async fn immediate(&mut self) -> ImmediateResponse {
        let answer = self.next(Duration::from_secs(5)).await;
        match answer.map(|m| m.and_then(|m| m.response)) {
            Ok(Some(Response::ImmediateResponse(i))) => i,
            other => panic!("expected an immediate response, got {other:?}"),
        }
    }
}

/// A request-headers message of `h`.
pub fn headers_msg(h: HeaderMap, end_of_stream: bool) -> Request {
    Request::RequestHeaders(HttpHeaders {
        headers: Some(h),
        end_of_stream,
        ..Default::default()
    })
}

/// A request-body message of `bytes`.
pub fn body_msg(bytes: &[u8], end_of_stream: bool) -> Request {
    Request::RequestBody(HttpBody {
        body: bytes.to_vec(),
        end_of_stream,
        ..Default::default()
    })
}

/// `POST /v1/completions` headers, with `extra` pairs.
pub fn post(extra: &[(&str, &str)]) -> HeaderMap {
    let mut h = vec![
        (":method", "POST"),
        (":path", "/v1/completions"),
        (":authority", "gateway"),
        JSON,
    ];
    h.extend_from_slice(extra);
    envoy_headers(&h)
}

/// The status of an immediate response.
pub fn status_of(i: &ImmediateResponse) -> u16 {
    i.status.as_ref().map_or(0, |s| s.code as u16)
}

/// Header `name` of an immediate response, `None` when it sets none.
pub fn header_of(i: &ImmediateResponse, name: &str) -> Option<String> {
    let m = i.headers.as_ref()?;
    m.set_headers
        .iter()
        .filter_map(|o| o.header.as_ref())
        .find(|h| h.key == name)
        .map(|h| String::from_utf8_lossy(&h.raw_value).into_owned())
}

/// The OpenAI error message of an immediate response's body ("" when it has none).
pub fn message_of(i: &ImmediateResponse) -> String {
    let v: serde_json::Value = serde_json::from_slice(&i.body).unwrap();
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
