//! A worker's KV events over a real ZMQ SUB (and the replay DEALER) on 127.0.0.1: the events
//! of a request, of a reset, both encodings, block sizes 16/32/64, and a restart.

mod common;

use common::*;
use pdgate_kvevents::publisher::REPLAY_END_SEQ;
use pdgate_kvevents::wire::decode;
use pdgate_kvevents::{EventBatch, KvEvent};
use pdgate_sim::kv_events::{KvEventEncoding, KvEventsConfig};
use pdgate_sim::{SimConfig, WorkerHandle, WorkerSpec};
use serde_json::json;
use std::time::Duration;
use tokio::time::timeout;
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

const BOUND: Duration = Duration::from_secs(10);

fn cfg(block_size: usize, encoding: KvEventEncoding) -> SimConfig {
    SimConfig {
        block_size,
        kv_events: Some(
            KvEventsConfig::parse(
                r#"{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://127.0.0.1:0","replay_endpoint":"tcp://127.0.0.1:0"}"#,
            )
            .unwrap(),
        ),
        kv_events_encoding: encoding,
        ..fast()
    }
}

fn frames(msg: &ZmqMessage) -> Vec<&[u8]> {
    msg.iter().map(|f| f.as_ref()).collect()
}

async fn reset(w: &WorkerHandle) {
    let r = reqwest::Client::new()
        .post(format!("{}/reset_prefix_cache", w.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// A SUB connected to `w` that receives its messages: resets (one batch each) until one
/// arrives (a PUB drops messages until the subscription has propagated), then drains.
async fn subscribe(w: &WorkerHandle) -> SubSocket {
    let mut sub = SubSocket::new();
    sub.connect(&w.kv_events_endpoint().unwrap()).await.unwrap();
    sub.subscribe("").await.unwrap();
    timeout(BOUND, async {
        loop {
            reset(w).await;
            if let Ok(Ok(_)) = timeout(Duration::from_millis(50), sub.recv()).await {
                break;
            }
        }
    })
    .await
    .expect("a message arrives");
    while let Ok(Ok(_)) = timeout(Duration::from_millis(200), sub.recv()).await {}
    sub
}

/// The next message: its decoded batch and its raw payload.
async fn next(sub: &mut SubSocket) -> (EventBatch, Vec<u8>) {
    let msg = timeout(BOUND, sub.recv()).await.expect("in time").unwrap();
    let f = frames(&msg);
    (decode(&f).expect("decodes"), f[2].to_vec())
}

async fn complete(w: &WorkerHandle, prompt: Vec<u32>) -> serde_json::Value {
    let r = post(
        &w.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": prompt, "max_tokens": 1}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
}

fn stored(e: &KvEvent) -> &pdgate_kvevents::BlockStored {
    match e {
        KvEvent::BlockStored(s) => s,
        other => panic!("expected BlockStored, got {other:?}"),
    }
}

#[tokio::test]
async fn a_request_and_a_reset_in_both_encodings() {
    for encoding in [KvEventEncoding::Tagged, KvEventEncoding::Positional] {
        let w = worker(WorkerSpec::new("agg-0", "both"), cfg(16, encoding)).await;
        let mut sub = subscribe(&w).await;
        // 40 tokens: 2 full blocks in one BlockStored, the first of a prompt (no parent).
        complete(&w, tokens(1, 40)).await;
        let (b, payload) = next(&mut sub).await;
        assert_eq!(b.dp_rank, Some(0));
        assert_eq!(b.events.len(), 1, "{b:?}");
        let s = stored(&b.events[0]).clone();
        assert_eq!(s.block_hashes.len(), 2);
        assert_eq!(s.parent_block_hash, None);
        assert_eq!(s.token_ids, tokens(1, 32));
        assert_eq!(s.block_size, 16);
        assert_eq!(
            (s.medium.as_deref(), s.lora_id, s.group_idx),
            (Some("GPU"), None, Some(0))
        );
        assert_eq!(s.kv_cache_spec_kind.as_deref(), Some("full_attention"));
        // Tagged maps carry field names, positional arrays do not.
        let named = payload.windows(12).any(|x| x == b"block_hashes");
        assert_eq!(named, encoding == KvEventEncoding::Tagged, "{encoding:?}");
        // A prompt sharing the first block stores only its second, chained to the first.
        let mut other = tokens(1, 16);
        other.extend(tokens(500, 20));
        complete(&w, other.clone()).await;
        let (b2, _) = next(&mut sub).await;
        assert_eq!(b2.seq, b.seq + 1);
        let s2 = stored(&b2.events[0]);
        assert_eq!(s2.parent_block_hash, Some(s.block_hashes[0]));
        assert_eq!(s2.token_ids, other[16..32].to_vec());
        // A reset: one AllBlocksCleared.
        reset(&w).await;
        let (b3, _) = next(&mut sub).await;
        assert_eq!(
            (b3.seq, b3.events.clone()),
            (b2.seq + 1, vec![KvEvent::AllBlocksCleared])
        );
        let m = metrics(&w).await;
        assert_metric_lines(
            &m,
            &[r#"pdgate_sim_kv_events_total{engine="0",model_name="pdgate-sim",type="BlockStored"} 2"#.to_string()],
        );
    }
}

#[tokio::test]
async fn block_sizes_16_32_64_announce_their_own_blocks() {
    for bs in [16usize, 32, 64] {
        let w = worker(
            WorkerSpec::new("agg-0", "both"),
            cfg(bs, KvEventEncoding::Tagged),
        )
        .await;
        let mut sub = subscribe(&w).await;
        complete(&w, tokens(1, 130)).await;
        let (b, _) = next(&mut sub).await;
        let s = stored(&b.events[0]);
        assert_eq!(s.block_size as usize, bs);
        assert_eq!(s.block_hashes.len(), 130 / bs, "block size {bs}");
        assert_eq!(s.token_ids, tokens(1, 130 / bs * bs));
    }
}

/// The messages of `w`'s replay socket from seq 0, asked again until there are `n` (batches
/// reach the publisher a moment after the response that caused them).
async fn replay_n(w: &WorkerHandle, n: usize) -> Vec<EventBatch> {
    timeout(BOUND, async {
        loop {
            let got = replay(w, 0).await;
            if got.len() >= n {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the batches are published")
}

/// Every message of `w`'s replay socket from seq `from`.
async fn replay(w: &WorkerHandle, from: u64) -> Vec<EventBatch> {
    let port = w.kv_event_ports().unwrap().replay.unwrap();
    let mut d = DealerSocket::new();
    d.connect(&format!("tcp://127.0.0.1:{port}")).await.unwrap();
    let req: ZmqMessage = vec![
        bytes::Bytes::new(),
        bytes::Bytes::copy_from_slice(&from.to_be_bytes()),
    ]
    .try_into()
    .unwrap();
    d.send(req).await.unwrap();
    let mut out = Vec::new();
    loop {
        let msg = timeout(BOUND, d.recv()).await.expect("in time").unwrap();
        let f = frames(&msg);
        // [empty, seq, payload]; the end is seq -1 with an empty payload.
        if f[1] == REPLAY_END_SEQ {
            return out;
        }
        out.push(decode(&[b"", f[1], f[2]]).unwrap());
    }
}

#[tokio::test]
async fn discovery_lists_the_bound_ports_and_a_restart_starts_over() {
    let w = worker(
        WorkerSpec::new("agg-0", "both"),
        cfg(16, KvEventEncoding::Tagged),
    )
    .await;
    let ports = w.kv_event_ports().unwrap();
    assert_eq!(
        get_json(&format!("{}/kv_event_sources", w.url())).await,
        json!([{"data_parallel_rank": 0,
                "endpoint": format!("tcp://127.0.0.1:{}", ports.publish),
                "replay_endpoint": format!("tcp://127.0.0.1:{}", ports.replay.unwrap()),
                "topic": ""}])
    );
    complete(&w, tokens(1, 40)).await;
    complete(&w, tokens(100, 40)).await;
    let before = replay_n(&w, 2).await;
    assert_eq!(before.iter().map(|b| b.seq).collect::<Vec<_>>(), vec![0, 1]);
    let engine = w.engine_id().to_string();
    let w = w.restart().await.unwrap();
    assert_eq!(w.kv_event_ports(), Some(ports), "same ports");
    assert_ne!(w.engine_id(), engine);
    // An empty cache, and seq from 0 again.
    let body = complete(&w, tokens(1, 40)).await;
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let after = replay_n(&w, 1).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].seq, 0);
    assert_eq!(
        after[0].events, before[0].events,
        "the same prompt, the same blocks"
    );
}
