//! `pdgate epp`'s response path under hostile answers: an SSE line past the usage reader's bound
//! passes through unchanged, and status labels from the data plane stay bounded. Each hostile case
//! against the real EPP over real gRPC with simulator workers on loopback (issue 26). The EPP under
//! limits is `support::limited_epp`, the raw stream `support::raw_ext_proc`; timeouts are a few
//! hundred ms and every wait is bounded.

use crate::support;

use pdgate_epp::EppLimits;
use support::envoy::{self, Stream, JSON};
use support::limited_epp::limited;
use support::metric;

#[tokio::test]
async fn an_sse_line_past_4_mib_passes_through_unchanged_and_stops_usage_reading() {
    use pdgate_epp::usage::MAX_SSE_LINE_BYTES;
    let e = limited(EppLimits::default()).await;
    let sse = vec![("content-type".to_string(), "text/event-stream".to_string())];
    let usage = b"data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\ndata: [DONE]\n\n";
    let answer = |line_bytes: usize| {
        let mut body = b"data: ".to_vec();
        body.resize(6 + line_bytes, b'x');
        body.extend_from_slice(b"\n\n");
        body.extend_from_slice(usage);
        // Chunks of at most one answer each (62,000 bytes), as Envoy's are.
        body.chunks(60_000).map(<[u8]>::to_vec).collect::<Vec<_>>()
    };
    let body = serde_json::to_vec(&envoy::completion(0, 16, true)).unwrap();
    let prompt = "pdgate_epp_usage_tokens_total{kind=\"prompt\"}";
    for (line, read) in [(1_000, true), (MAX_SSE_LINE_BYTES + 1, false)] {
        let before = metric(&e.text(), prompt);
        let mut s = Stream::open(e.grpc).await;
        let r = s
            .request("/v1/completions", &[JSON], &body, 4096, None)
            .await;
        assert_eq!(r.immediate, None);
        let chunks = answer(line);
        let (_, passed) = s.respond(200, &sse, &chunks, Some(&r.destination())).await;
        assert_eq!(passed, chunks.concat(), "the client gets every byte");
        let added = metric(&e.text(), prompt) - before;
        assert_eq!(added, if read { 5 } else { 0 }, "line of {line} bytes");
        assert_eq!(e.in_flight(), 0, "released at the end of the answer");
    }
    let text = e.text();
    assert_eq!(
        metric(
            &text,
            "pdgate_epp_usage_unread_total{reason=\"line_too_long\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"200\"}"
        ),
        2
    );
}

#[tokio::test]
async fn status_labels_from_the_data_plane_are_bounded() {
    let e = limited(EppLimits::default()).await;
    let odd: Vec<u16> = (600..650).chain([0, 99, 1000, u16::MAX]).collect();
    for status in odd.iter().copied().chain([200, 503]) {
        let mut s = Stream::open(e.grpc).await;
        let r = s.request("/v1/models", &[], b"", 1, None).await;
        assert_eq!(r.immediate, None);
        s.respond(status, &[], &[], None).await;
    }
    let text = e.text();
    let labels: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("pdgate_requests_total{api=\"ext_proc\""))
        .collect();
    assert_eq!(labels.len(), 3, "{labels:#?}");
    let other = "pdgate_requests_total{api=\"ext_proc\",status=\"other\"}";
    assert_eq!(metric(&text, other), odd.len() as u64);
    assert_eq!(
        metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"200\"}"
        ),
        1
    );
    assert_eq!(
        metric(
            &text,
            "pdgate_requests_total{api=\"ext_proc\",status=\"503\"}"
        ),
        1
    );
}
