//! Helpers of the tests of the messages, responses, embeddings and generate APIs: raw
//! requests, `event:`-named SSE streams, and the P/D split of one request over two workers.

use super::*;
use pdgate_api::KvTransferParams;
use pdgate_sim::WorkerHandle;

/// A raw answer: status, headers and the exact body text.
pub struct Raw {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
}

/// POSTs `body` with `x-request-id: id` (when given); returns the raw answer.
pub async fn post_raw(url: &str, path: &str, body: &Value, id: Option<&str>) -> Raw {
    let mut req = reqwest::Client::new()
        .post(format!("{url}{path}"))
        .json(body);
    if let Some(id) = id {
        req = req.header("x-request-id", id);
    }
    let r = req.send().await.unwrap();
    Raw {
        status: r.status().as_u16(),
        headers: r.headers().clone(),
        text: r.text().await.unwrap(),
    }
}

/// The events of an `event: {name}\ndata: {json}` stream, in order, and checks that each
/// `data` is compact JSON on one line and no `[DONE]` is sent.
pub fn named_events(text: &str) -> Vec<(String, Value)> {
    assert!(
        text.ends_with("\n\n"),
        "the stream ends with a blank line: {text:?}"
    );
    text.split("\n\n")
        .filter(|b| !b.is_empty())
        .map(|block| {
            let (name, data) = block
                .strip_prefix("event: ")
                .and_then(|b| b.split_once("\ndata: "))
                .unwrap_or_else(|| panic!("not an `event:` + `data:` event: {block:?}"));
            assert!(!data.contains('\n') && data != "[DONE]", "{block:?}");
            (name.to_string(), serde_json::from_str(data).unwrap())
        })
        .collect()
}

/// The names of `events`.
pub fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

/// `body` with a prefill leg's `kv_transfer_params` (`do_remote_decode`).
pub fn as_prefill_leg(mut body: Value) -> Value {
    body["kv_transfer_params"] = KvTransferParams::prefill_request_json();
    body
}

/// Runs `prefill` on `p` (a prefill leg: `kv_transfer_params` must come back), then `decode`
/// on `d` with the decode leg's params; returns both answers.
pub async fn split(
    p: &WorkerHandle,
    d: &WorkerHandle,
    path: &str,
    prefill: Value,
    mut decode: Value,
) -> (Value, Value) {
    let pre = post(&p.url(), path, as_prefill_leg(prefill)).await;
    assert_eq!(pre.status, 200, "{}", pre.body);
    assert_eq!(
        pre.body["kv_transfer_params"]["remote_engine_id"],
        p.engine_id()
    );
    decode["kv_transfer_params"] = decode_params(&pre.body);
    let dec = post(&d.url(), path, decode).await;
    assert_eq!(dec.status, 200, "{}", dec.body);
    (pre.body, dec.body)
}

/// Asserts the engines' counters after one split of `api`: one prefill leg on `p`, one
/// remote decode leg on `d`, both counted under `api`.
pub fn assert_split_counted(p: &WorkerHandle, d: &WorkerHandle, api: &str) {
    let (ps, ds) = (p.stats(), d.stats());
    assert_eq!(ps.prefill_legs, 1);
    assert_eq!(
        ps.prefill_legs_by_api.get(api),
        Some(&1),
        "{:?}",
        ps.prefill_legs_by_api
    );
    assert_eq!(ds.remote_decode_legs, 1);
    assert_eq!(
        ds.remote_decode_legs_by_api.get(api),
        Some(&1),
        "{:?}",
        ds.remote_decode_legs_by_api
    );
    assert_eq!(ps.pulls_served, 1);
}

/// A fast worker of `role`, named `name`, recording the last `record` bodies.
pub async fn recording_worker(name: &str, role: &str, record: usize) -> WorkerHandle {
    let cfg = SimConfig {
        record_responses: record,
        ..fast()
    };
    worker(WorkerSpec::new(name, role), cfg).await
}

/// POSTs each body of `cases` to `path`: each must be a 400 whose message names its field
/// (in backquotes).
pub async fn assert_400_naming(url: &str, path: &str, cases: Vec<(Value, &str)>) {
    for (body, field) in cases {
        let r = post(url, path, body).await;
        assert_eq!(r.status, 400, "{}", r.body);
        let m = r.body["error"]["message"].as_str().unwrap();
        assert!(m.contains(&format!("`{field}`")), "{m}");
    }
}
