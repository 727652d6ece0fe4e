//! The P/D handshake between workers over real HTTP (vLLM NIXL contract, design.md §5.2).

mod common;

use common::*;
use pdgate_api::KvTransferParams;
use pdgate_sim::{SimConfig, WorkerHandle, WorkerSpec};
use serde_json::{json, Value};
use std::time::Duration;

fn prompt() -> Vec<u32> {
    tokens(1, 100)
}

/// Runs a prefill leg on `p` and returns the full response body.
async fn prefill_leg(p: &WorkerHandle, prompt: &[u32]) -> Value {
    let r = post(
        &p.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 1, "stream": false,
               "kv_transfer_params": KvTransferParams::prefill_request_json()}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

async fn decode_leg(d: &WorkerHandle, prompt: &[u32], kv: &Value) -> Resp {
    post(
        &d.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 5, "kv_transfer_params": kv}),
    )
    .await
}

#[tokio::test]
async fn prefill_then_decode_then_replay_is_consumed() {
    let p = worker_rev("prefill-0", "prefill", "rev-a").await;
    let d = worker_rev("decode-0", "decode", "rev-a").await;
    // Warm the prefill's cache with the first 64 tokens of the prompt.
    let warm = post(
        &p.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": &prompt()[..70], "max_tokens": 1}),
    )
    .await;
    assert_eq!(warm.status, 200);

    let pre = prefill_leg(&p, &prompt()).await;
    assert_eq!(pre["usage"]["completion_tokens"], 1);
    assert_eq!(pre["usage"]["prompt_tokens_details"]["cached_tokens"], 64);
    let kv = &pre["kv_transfer_params"];
    assert_eq!(kv["do_remote_prefill"], true);
    assert_eq!(kv["do_remote_decode"], false);
    assert_eq!(kv["remote_engine_id"], p.engine_id());
    assert_eq!(kv["remote_host"], "127.0.0.1");
    assert_eq!(kv["remote_port"], p.addr().port());
    assert_eq!(kv["tp_size"], 1);
    assert_eq!(
        kv["remote_block_ids"].as_array().unwrap().len(),
        7,
        "100 tokens = 7 blocks"
    );
    let lease = kv["remote_request_id"].as_str().unwrap().to_string();
    let s = p.stats();
    assert_eq!(
        (s.leases, s.kv_blocks_used, s.prefill_legs),
        (1, 7, 1),
        "the lease holds the prompt blocks"
    );

    let r = decode_leg(&d, &prompt(), &decode_params(&pre)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["usage"]["completion_tokens"], 5);
    assert_eq!(
        r.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "transferred tokens are not cached tokens of a decode leg (vLLM 0.32)"
    );
    assert_eq!(r.headers["x-sim-worker"], "decode-0");
    // The reuse shows in the engines' counters: the prefill computed the 70 warm-up tokens,
    // then hit 64 of the leg's 100; the decode got all 100 from the transfer.
    let (ps, ds) = (p.stats(), d.stats());
    assert_eq!(
        (ps.prefix_cache_hits, ps.prompt_tokens_local_compute),
        (64, 70 + 36)
    );
    assert_eq!(
        (
            ds.prefix_cache_queries,
            ds.prefix_cache_hits,
            ds.prompt_tokens_local_compute,
            ds.prompt_tokens_external_kv_transfer
        ),
        (100, 0, 0, 100)
    );
    let dm = metrics(&d).await;
    assert_metric_lines(
        &dm,
        &[r#"vllm:prompt_tokens_by_source_total{engine="0",model_name="pdgate-sim",source="external_kv_transfer"} 100"#.to_string()],
    );
    let (ps, ds) = (p.stats(), d.stats());
    assert_eq!(
        (ps.leases, ps.kv_blocks_used, ps.pulls_served),
        (0, 0, 1),
        "the pull released the lease"
    );
    assert_eq!(ds.remote_decode_legs, 1);

    // The decode inserted the prompt's blocks in its own cache: a local request now hits.
    let again = post(
        &d.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": prompt(), "max_tokens": 1}),
    )
    .await;
    assert_eq!(
        again.body["usage"]["prompt_tokens_details"]["cached_tokens"],
        96
    );

    // Single consumer: the same params again are refused.
    let r = decode_leg(&d, &prompt(), &decode_params(&pre)).await;
    assert_error(
        &r,
        409,
        &format!(
            "kv_transfer_params rejected: lease {lease} on engine {} was already consumed",
            p.engine_id()
        ),
    );
    assert_eq!(d.stats().handoff_rejections["consumed"], 1);
    assert_eq!(p.stats().pull_rejections["consumed"], 1);
    let m = metrics(&d).await;
    assert!(m.contains(r#"pdgate_sim_kv_handoffs_total{engine="0",model_name="pdgate-sim",result="consumed"} 1"#), "{m}");
    assert!(
        m.contains(
            r#"pdgate_sim_kv_handoffs_total{engine="0",model_name="pdgate-sim",result="ok"} 1"#
        ),
        "{m}"
    );
}

#[tokio::test]
async fn another_revision_is_refused_and_the_lease_kept() {
    let p = worker_rev("prefill-0", "prefill", "rev-b").await;
    let d = worker_rev("decode-0", "decode", "rev-a").await;
    let pre = prefill_leg(&p, &prompt()).await;
    let r = decode_leg(&d, &prompt(), &decode_params(&pre)).await;
    let want = format!(
        "kv_transfer_params rejected: engine {} (revision rev-b) cannot hand KV to revision rev-a",
        p.engine_id()
    );
    assert_error(&r, 409, &want);
    assert_eq!(d.stats().handoff_rejections["revision_mismatch"], 1);
    assert_eq!(
        p.stats().leases,
        1,
        "a refused pull leaves the lease as it was"
    );

    // A decode of the right revision can still take it.
    let d2 = worker_rev("decode-1", "decode", "rev-b").await;
    assert_eq!(
        decode_leg(&d2, &prompt(), &decode_params(&pre))
            .await
            .status,
        200
    );
    // No revision on either side counts as equal; one side only does not.
    let p0 = worker(WorkerSpec::new("prefill-1", "prefill"), fast()).await;
    let pre = prefill_leg(&p0, &prompt()).await;
    let r = decode_leg(&d, &prompt(), &decode_params(&pre)).await;
    assert_eq!(
        r.body["error"]["message"],
        format!("kv_transfer_params rejected: engine {} (revision none) cannot hand KV to revision rev-a", p0.engine_id())
    );
    let d0 = worker(WorkerSpec::new("decode-2", "decode"), fast()).await;
    assert_eq!(
        decode_leg(&d0, &prompt(), &decode_params(&pre))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn unknown_engine_lease_unreachable_and_malformed() {
    let p = worker(WorkerSpec::new("prefill-0", "prefill"), fast()).await;
    let d = worker(WorkerSpec::new("decode-0", "decode"), fast()).await;
    let pre = prefill_leg(&p, &prompt()).await;
    let addr = format!("127.0.0.1:{}", p.addr().port());

    let mut kv = decode_params(&pre);
    kv["remote_engine_id"] = json!("prefill-9-deadbeef");
    let r = decode_leg(&d, &prompt(), &kv).await;
    let want = format!(
        "kv_transfer_params rejected: engine prefill-9-deadbeef is not served at {addr} (engine {} is)",
        p.engine_id()
    );
    assert_error(&r, 404, &want);

    let mut kv = decode_params(&pre);
    kv["remote_request_id"] = json!("no-such-lease");
    let r = decode_leg(&d, &prompt(), &kv).await;
    assert_error(
        &r,
        404,
        &format!(
            "kv_transfer_params rejected: engine {} holds no lease no-such-lease",
            p.engine_id()
        ),
    );

    // A different prompt than the prefill's.
    let r = decode_leg(&d, &tokens(1, 90), &decode_params(&pre)).await;
    assert_eq!(r.status, 409);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .ends_with("holds another prompt (100 tokens) than the decode request (90 tokens)"));
    // Same length, other tokens: still another prompt (regression: this was accepted).
    let r = decode_leg(&d, &tokens(5001, 100), &decode_params(&pre)).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .ends_with("holds another prompt (100 tokens) than the decode request (100 tokens)"));

    let mut kv = decode_params(&pre);
    kv["remote_host"] = json!(null);
    let r = decode_leg(&d, &prompt(), &kv).await;
    assert_error(
        &r,
        400,
        "kv_transfer_params rejected: kv_transfer_params.remote_host is missing or null",
    );

    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mut kv = decode_params(&pre);
    kv["remote_port"] = json!(port);
    let r = decode_leg(&d, &prompt(), &kv).await;
    assert_eq!(r.status, 404);
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with(&format!(
            "kv_transfer_params rejected: engine {} at 127.0.0.1:{port} is unreachable: ",
            p.engine_id()
        )),
        "{msg}"
    );

    // None of these touched the lease.
    assert_eq!(p.stats().leases, 1);
    assert_eq!(
        decode_leg(&d, &prompt(), &decode_params(&pre)).await.status,
        200
    );
    assert_counts(
        &d.stats().handoff_rejections,
        &[
            ("unknown_engine", 1),
            ("unknown_lease", 1),
            ("prompt_mismatch", 2),
            ("malformed", 1),
            ("unreachable", 1),
        ],
    );
}

#[tokio::test]
async fn expired_lease_is_released_and_refused() {
    let cfg = SimConfig {
        lease_ttl: Duration::from_millis(100),
        ..fast()
    };
    let p = worker(WorkerSpec::new("prefill-0", "prefill"), cfg).await;
    let d = worker(WorkerSpec::new("decode-0", "decode"), fast()).await;
    let pre = prefill_leg(&p, &prompt()).await;
    let lease = pre["kv_transfer_params"]["remote_request_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(p.stats().kv_blocks_used, 7);
    // The engine releases the blocks at the TTL by itself.
    wait_until(|| p.stats().leases == 0, || "lease never expired".into()).await;
    assert_eq!(p.stats().kv_blocks_used, 0);
    let r = decode_leg(&d, &prompt(), &decode_params(&pre)).await;
    assert_error(
        &r,
        409,
        &format!(
            "kv_transfer_params rejected: lease {lease} on engine {} expired",
            p.engine_id()
        ),
    );
}

#[tokio::test]
async fn chat_prefill_and_decode_and_stream_decode() {
    let p = worker(WorkerSpec::new("prefill-0", "prefill"), fast()).await;
    let d = worker(WorkerSpec::new("decode-0", "decode"), fast()).await;
    let messages = json!([{"role": "user", "content": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen"}]);
    let r = post(
        &p.url(),
        "/v1/chat/completions",
        json!({"model": "pdgate-sim", "messages": messages, "max_completion_tokens": 1,
               "kv_transfer_params": KvTransferParams::prefill_request_json()}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let kv = decode_params(&r.body);
    let (status, text) = post_stream(
        &d.url(),
        "/v1/chat/completions",
        json!({"model": "pdgate-sim", "messages": messages, "max_completion_tokens": 3, "stream": true,
               "stream_options": {"include_usage": true}, "kv_transfer_params": kv}),
    )
    .await;
    assert_eq!(status, 200);
    let (events, done) = sse_events(&text);
    assert!(done);
    assert_eq!(events.len(), 5, "role, 3 tokens, usage: {text}");
    assert_eq!(events[4]["usage"]["prompt_tokens"], 18);
    assert_eq!(
        events[4]["usage"]["prompt_tokens_details"]["cached_tokens"],
        0
    );
}

#[tokio::test]
async fn streamed_prefill_leg_carries_params_on_its_last_chunk() {
    let p = worker(WorkerSpec::new("prefill-0", "prefill"), fast()).await;
    let d = worker(WorkerSpec::new("decode-0", "decode"), fast()).await;
    let (status, text) = post_stream(
        &p.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": prompt(), "max_tokens": 1, "stream": true,
               "kv_transfer_params": KvTransferParams::prefill_request_json()}),
    )
    .await;
    assert_eq!(status, 200);
    let (events, done) = sse_events(&text);
    assert!(done);
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0]["kv_transfer_params"]["remote_engine_id"],
        p.engine_id()
    );
    assert_eq!(
        decode_leg(&d, &prompt(), &decode_params(&events[0]))
            .await
            .status,
        200
    );
}
