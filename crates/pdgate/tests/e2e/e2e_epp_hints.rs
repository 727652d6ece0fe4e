//! `pdgate epp` through the Envoy stand-in (`support::envoy`): pins and sessions as in
//! `serve`, and the protocol edges an adversarial try found.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;
use support::envoy::{self, aggregated, completion, JSON};
use support::wait_until;

#[tokio::test]
async fn pins_and_sessions_work_as_in_serve() {
    let (workers, e) = aggregated(3).await;
    let addr_of: BTreeMap<String, String> = workers
        .iter()
        .map(|w| (w.name().to_string(), w.addr().to_string()))
        .collect();
    let body = serde_json::to_vec(&completion(0, 40, false)).unwrap();
    for _ in 0..4 {
        let mut s = e.stream().await;
        let pin = [JSON, ("x-worker-instance-id", "w2")];
        let r = s.request("/v1/completions", &pin, &body, 1000, None).await;
        // A pin blocks fallbacks: Envoy gets the pinned endpoint alone.
        assert_eq!(r.set["x-gateway-destination-endpoint"], addr_of["w2"]);
    }
    let mut s = e.stream().await;
    let unknown = [JSON, ("x-worker-instance-id", "w9")];
    let r = s
        .request("/v1/completions", &unknown, &body, 1000, None)
        .await;
    assert_eq!(r.immediate, Some(400));
    let message = r.immediate_json()["error"]["message"].to_string();
    assert!(
        message.contains("x-worker-instance-id") && message.contains("w9"),
        "{message}"
    );
    // A session sticks to the endpoint it was bound to.
    let mut first = None;
    for i in 0..5u32 {
        let mut s = e.stream().await;
        let b = serde_json::to_vec(&completion(5000 * (i + 1), 40, false)).unwrap();
        let sess = [JSON, ("x-session-id", "conversation-7")];
        let r = s.request("/v1/completions", &sess, &b, 1000, None).await;
        let dest = r.destination();
        assert_eq!(first.get_or_insert(dest.clone()), &dest, "request {i}");
        s.call_destination(&r, "/v1/completions", &[JSON], None)
            .await;
    }
}

/// Regression tests of an adversarial try: trailers end the request body (it is routed
/// then), a malformed subset hint or an unreadable pin is a 400, a second end of the request
/// body and request messages after the response began are ignored.
#[tokio::test]
async fn protocol_edges_from_the_adversarial_try() {
    use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
    use envoy_types::pb::envoy::service::ext_proc::v3::{
        processing_request::Request, processing_response::Response, HttpBody, HttpHeaders,
        HttpTrailers,
    };
    let (workers, e) = aggregated(1).await;
    let addr = workers[0].addr().to_string();
    let body = serde_json::to_vec(&completion(0, 40, false)).unwrap();
    let headers = |extra: Vec<HeaderValue>, eos: bool| {
        let mut h =
            envoy::envoy_headers(&[(":method", "POST"), (":path", "/v1/completions/"), JSON]);
        h.headers.extend(extra);
        Request::RequestHeaders(HttpHeaders {
            headers: Some(HeaderMap { headers: h.headers }),
            end_of_stream: eos,
            ..Default::default()
        })
    };
    let chunk = |b: &[u8], eos: bool| {
        Request::RequestBody(HttpBody {
            body: b.to_vec(),
            end_of_stream: eos,
            ..Default::default()
        })
    };
    // Trailers end the body: routed (a trailing slash on the path is the same API), the body
    // comes back without end_of_stream, then the trailers are answered.
    let mut s = e.stream().await;
    s.send(headers(vec![], false), None).await;
    s.send(chunk(&body, false), None).await;
    s.send(Request::RequestTrailers(HttpTrailers::default()), None)
        .await;
    let Some(Response::RequestHeaders(h)) = s.recv().await.response else {
        panic!("routed when the trailers came")
    };
    let set = h.response.unwrap().header_mutation.unwrap().set_headers;
    assert_eq!(set[0].header.as_ref().unwrap().raw_value, addr.as_bytes());
    assert!(matches!(
        s.recv().await.response,
        Some(Response::RequestBody(_))
    ));
    assert!(matches!(
        s.recv().await.response,
        Some(Response::RequestTrailers(_))
    ));
    // A second end of the body is ignored: the next answer is the response headers'.
    s.send(chunk(b"", true), None).await;
    s.send(
        Request::ResponseHeaders(HttpHeaders {
            headers: Some(envoy::envoy_headers(&[(":status", "200")])),
            ..Default::default()
        }),
        None,
    )
    .await;
    assert!(matches!(
        s.recv().await.response,
        Some(Response::ResponseHeaders(_))
    ));
    drop(s);
    // A subset hint that is not strings, and a pin that is not visible ASCII: 400.
    let number = envoy_types::pb::google::protobuf::Value {
        kind: Some(envoy_types::pb::google::protobuf::value::Kind::NumberValue(
            5.0,
        )),
    };
    let mut s = e.stream().await;
    let r = s
        .request("/v1/completions", &[JSON], &body, 1000, Some(number))
        .await;
    assert_eq!(r.immediate, Some(400));
    let message = r.immediate_json()["error"]["message"].to_string();
    assert!(
        message.contains("x-gateway-destination-endpoint-subset"),
        "{message}"
    );
    let mut s = e.stream().await;
    let bad_pin = HeaderValue {
        key: "x-worker-instance-id".into(),
        raw_value: vec![0xC3, 0x28],
        ..Default::default()
    };
    s.send(headers(vec![bad_pin], false), None).await;
    s.send(chunk(&body, true), None).await;
    let Some(Response::ImmediateResponse(i)) = s.recv().await.response else {
        panic!("an unreadable pin is refused")
    };
    assert_eq!(i.status.unwrap().code, 400);
    assert!(String::from_utf8_lossy(&i.body).contains("x-worker-instance-id"));
    wait_until(Duration::from_secs(1), "no booking left", || {
        e.in_flight(&addr) == 0
    })
    .await;
}
