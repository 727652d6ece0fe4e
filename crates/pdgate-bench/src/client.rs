//! The HTTP side of a replay: one streamed request → one [`RequestRecord`], and model
//! discovery (`GET /v1/models`).

use crate::record::{RequestRecord, ServedBy, StreamTracker, STATUS_TRANSPORT};
use crate::sse::SseDecoder;
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, CONTENT_TYPE};
use serde_json::Value;
use std::time::Instant;

/// Longest error body kept in a record, in bytes.
pub const MAX_ERROR_BODY: usize = 1_000;

/// Sends `body` to `url` with `headers` and follows the response to its end. `on_head`, when
/// given, is fired as soon as the response head arrived (or the request failed).
///
/// Never fails: a non-2xx is recorded with its status and error body, a connect or read
/// failure as [`STATUS_TRANSPORT`], an SSE error event as `stream_error`. Times are ms from
/// the moment the request is handed to the client.
pub async fn send_one(
    client: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    body: &Value,
    index: usize,
    on_head: Option<tokio::sync::oneshot::Sender<()>>,
) -> RequestRecord {
    let t0 = Instant::now();
    let ms = || t0.elapsed().as_secs_f64() * 1_000.0;
    let sent = client
        .post(url)
        .headers(headers.clone())
        .json(body)
        .send()
        .await;
    if let Some(tx) = on_head {
        let _ = tx.send(());
    }
    let resp = match sent {
        Ok(r) => r,
        Err(e) => return transport(index, ServedBy::default(), &e, ms()),
    };
    let status = resp.status();
    let served = ServedBy::from_headers(resp.headers());
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        return RequestRecord {
            index,
            status: status.as_u16().to_string(),
            error: Some(truncate(text, MAX_ERROR_BODY)),
            served,
            e2e_ms: ms(),
            ..RequestRecord::default()
        };
    }
    let is_sse = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let mut tracker = StreamTracker::default();
    let mut decoder = SseDecoder::default();
    let mut stream = resp.bytes_stream();
    let mut whole = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) if is_sse => {
                let at = ms();
                for event in decoder.push(&bytes) {
                    tracker.on_event(&event, at);
                }
            }
            Ok(bytes) => whole.extend_from_slice(&bytes),
            Err(e) => return transport(index, served, &e, ms()),
        }
    }
    let last = if is_sse {
        decoder.finish()
    } else {
        Some(String::from_utf8_lossy(&whole).into_owned())
    };
    if let Some(event) = last {
        tracker.on_event(&event, ms());
    }
    tracker.finish(index, status.as_u16(), served, ms())
}

/// The first model id listed by `GET {base_url}/v1/models` (`data[0].id`).
///
/// Errors: transport failure, non-2xx status, or a body without a model id; each names the URL.
pub async fn first_model(client: &reqwest::Client, base_url: &str) -> anyhow::Result<String> {
    let url = format!("{}/v1/models", base_url.trim_end_matches('/'));
    let resp = client
        .get(&url)
        .send()
        .await
        .map_err(|e| anyhow::anyhow!("GET {url}: {}", chain(&e)))?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        anyhow::bail!("GET {url}: status {status}: {}", truncate(text, 200));
    }
    let v: Value = resp
        .json()
        .await
        .map_err(|e| anyhow::anyhow!("GET {url}: body is not JSON: {e}"))?;
    v.pointer("/data/0/id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("GET {url}: no model listed in `data[0].id`"))
}

fn transport(index: usize, served: ServedBy, e: &reqwest::Error, e2e_ms: f64) -> RequestRecord {
    RequestRecord {
        index,
        status: STATUS_TRANSPORT.into(),
        error: Some(chain(e)),
        served,
        e2e_ms,
        ..RequestRecord::default()
    }
}

/// An error and its sources, joined with `": "`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// `s` cut to at most `max` bytes on a char boundary.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo".into(), 2), "h");
        assert_eq!(truncate("héllo".into(), 3), "hé");
        assert_eq!(truncate("ok".into(), 10), "ok");
    }
}
