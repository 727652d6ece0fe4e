//! Encoder disaggregation (vLLM "EPD") over real HTTP: encode workers answer
//! `ec_transfer_params`, prefill and aggregated workers pull the encoder output through
//! `/ec/pull` (or encode it themselves), and the P/D handoff keeps working alongside.

mod common;

use common::epd::*;
use common::*;
use pdgate_api::media::{content_hash, encode_leg_body, media_items};
use pdgate_sim::{SimConfig, WorkerSpec};
use serde_json::{json, Value};
use std::time::Duration;

#[tokio::test]
async fn encode_prefill_decode_and_a_second_pull_is_consumed() {
    let e = worker_rev("encode-0", "encode", "rev-a").await;
    let p = worker_rev("prefill-0", "prefill", "rev-a").await;
    let d = worker_rev("decode-0", "decode", "rev-a").await;
    let media = [image(1), image(2)];
    let r = post_with(
        &e.url(),
        "/v1/chat/completions",
        chat(&media, 1),
        &[("x-request-id", "enc-1")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.headers["x-sim-worker"], "encode-0");
    assert_eq!(r.headers["x-sim-role"], "encode");
    assert_eq!(r.headers["x-sim-revision"], "rev-a");
    assert_eq!(r.headers["x-request-id"], "enc-1");
    let b = &r.body;
    assert_eq!(
        (b["object"].as_str(), b["id"].as_str()),
        (Some("chat.completion"), Some("chatcmpl-enc-1"))
    );
    assert_eq!(b["choices"].as_array().unwrap().len(), 1);
    assert_eq!(b["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        b["usage"],
        json!({"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3, "prompt_tokens_details": {"cached_tokens": 0}})
    );
    let ec = b["ec_transfer_params"].as_array().unwrap();
    assert_eq!(ec.len(), 2);
    let leases: Vec<String> = (0..2)
        .map(|i| format!("{}-ec-{}", e.engine_id(), i + 1))
        .collect();
    for (i, entry) in ec.iter().enumerate() {
        assert_eq!(
            *entry,
            json!({"mm_hash": content_hash(&media[i]), "encoder_engine_id": e.engine_id(),
                   "lease_id": leases[i], "remote_host": "127.0.0.1", "remote_port": e.addr().port()})
        );
    }
    assert_ne!(ec[0]["mm_hash"], ec[1]["mm_hash"]);
    let s = e.stats();
    assert_eq!((s.encode_items, s.ec_leases, s.chat_completions), (2, 2, 1));

    // The prefill leg carries both kv_transfer_params and ec_transfer_params.
    let leg = prefill_leg(&media, &b["ec_transfer_params"]);
    let r = post_chat(&p, leg.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["kv_transfer_params"]["remote_engine_id"],
        p.engine_id()
    );
    assert!(r.body.get("ec_transfer_params").is_none());
    let (es, ps) = (e.stats(), p.stats());
    assert_eq!((es.ec_pulls_served, es.ec_leases), (2, 0));
    assert_eq!(
        (
            ps.remote_encoded_items,
            ps.local_encoded_items,
            ps.encode_items,
            ps.prefill_legs
        ),
        (2, 0, 0, 1)
    );

    // The decode leg takes the KV; it neither encodes nor pulls the media.
    let kv = decode_params(&r.body);
    let r = post_chat(&d, with(chat(&media, 4), json!({"kv_transfer_params": kv}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["usage"]["completion_tokens"], 4);
    let ds = d.stats();
    assert_eq!(
        (
            ds.remote_decode_legs,
            ds.encode_items,
            ds.remote_encoded_items
        ),
        (1, 0, 0)
    );

    // Single consumer: the same ec params again are refused.
    let r = post_chat(&p, leg).await;
    assert_error(
        &r,
        409,
        &format!(
            "ec_transfer_params rejected: lease {} on engine {} was already consumed",
            leases[0],
            e.engine_id()
        ),
    );
    assert_eq!(p.stats().ec_handoff_rejections["consumed"], 1);
    assert_eq!(e.stats().ec_pull_rejections["consumed"], 2);
    let l = r#"engine="0",model_name="pdgate-sim""#;
    assert_metric_lines(
        &metrics(&e).await,
        &[
            format!("pdgate_sim_ec_pulls_total{{{l},result=\"ok\"}} 2"),
            format!("pdgate_sim_ec_pulls_total{{{l},result=\"consumed\"}} 2"),
            format!("pdgate_sim_mm_items_total{{{l},source=\"encoder\"}} 2"),
            format!("pdgate_sim_ec_leases{{{l}}} 0"),
        ],
    );
    assert_metric_lines(
        &metrics(&p).await,
        &[
            format!("pdgate_sim_ec_handoffs_total{{{l},result=\"ok\"}} 1"),
            format!("pdgate_sim_ec_handoffs_total{{{l},result=\"consumed\"}} 1"),
            format!("pdgate_sim_mm_items_total{{{l},source=\"remote\"}} 2"),
        ],
    );
}

#[tokio::test]
async fn another_revision_is_refused_and_the_leases_kept() {
    let e = worker_rev("encode-0", "encode", "rev-a").await;
    let pb = worker_rev("prefill-0", "prefill", "rev-b").await;
    let media = [image(1), image(2)];
    let ec = encode(&e, &media).await;
    let r = post_chat(&pb, prefill_leg(&media, &ec)).await;
    let want = format!(
        "ec_transfer_params rejected: engine {} (revision rev-a) cannot hand encoder output to revision rev-b",
        e.engine_id()
    );
    assert_error(&r, 409, &want);
    assert_eq!(pb.stats().ec_handoff_rejections["revision_mismatch"], 1);
    assert_eq!(e.stats().ec_pull_rejections["revision_mismatch"], 2);
    assert_eq!(
        e.stats().ec_leases,
        2,
        "a refused pull leaves the leases as they were"
    );
    // An aggregated worker of the right revision can still take them.
    let agg = worker_rev("agg-0", "both", "rev-a").await;
    let r = post_chat(
        &agg,
        with(chat(&media, 3), json!({"ec_transfer_params": ec})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["usage"]["completion_tokens"], 3);
    assert_eq!(agg.stats().remote_encoded_items, 2);
    assert_eq!(e.stats().ec_pulls_served, 2);
}

#[tokio::test]
async fn without_ec_params_the_worker_encodes_itself() {
    // 1000 ms per item at speedup 10: 100 ms each.
    let cfg = SimConfig {
        speedup: 10.0,
        encode_ms_per_item: 1000.0,
        ..SimConfig::default()
    };
    let p = worker(WorkerSpec::new("prefill-0", "prefill"), cfg.clone()).await;
    let media = [image(1), image(2)];
    let t = tokio::time::Instant::now();
    let r = post_chat(&p, chat(&media, 1)).await;
    let local = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(local >= Duration::from_millis(200), "{local:?}");
    let s = p.stats();
    assert_eq!(
        (
            s.local_encoded_items,
            s.encode_items,
            s.remote_encoded_items
        ),
        (2, 2, 0)
    );

    // The router's way: one encode leg per item, then the prefill pulls them for free.
    let e = worker(WorkerSpec::new("encode-0", "encode"), cfg).await;
    let body = chat(&media, 1);
    let items = media_items(&pdgate_api::RawObject::parse(body.to_string().into()).unwrap());
    let mut entries = Vec::new();
    let t = tokio::time::Instant::now();
    for item in &items {
        let leg = Value::Object(encode_leg_body("pdgate-sim", item));
        let r = post_chat(&e, leg).await;
        assert_eq!(r.status, 200, "{}", r.body);
        entries.extend(r.body["ec_transfer_params"].as_array().unwrap().clone());
    }
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "the encoder pays the cost"
    );
    let r = post_chat(&p, with(body, json!({"ec_transfer_params": entries}))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let s = p.stats();
    assert_eq!(
        (
            s.local_encoded_items,
            s.encode_items,
            s.remote_encoded_items
        ),
        (2, 2, 2),
        "pulled items are not encoded again"
    );
    assert_eq!(e.stats().encode_items, 2);
}

#[tokio::test]
async fn expired_encoder_leases_are_dropped_and_refused() {
    let cfg = SimConfig {
        ec_lease_ttl: Some(Duration::from_millis(100)),
        ..fast()
    };
    let e = worker(WorkerSpec::new("encode-0", "encode"), cfg).await;
    let p = worker(WorkerSpec::new("prefill-0", "prefill"), fast()).await;
    let media = [image(1)];
    let ec = encode(&e, &media).await;
    wait_until(|| e.stats().ec_leases == 0, || "lease never expired".into()).await;
    let r = post_chat(&p, prefill_leg(&media, &ec)).await;
    assert_error(
        &r,
        409,
        &format!(
            "ec_transfer_params rejected: lease {} on engine {} expired",
            ec[0]["lease_id"].as_str().unwrap(),
            e.engine_id()
        ),
    );
}

#[tokio::test]
async fn fleets_take_the_encode_role() {
    let mut spec = WorkerSpec::new("encode-0", "encode").with_revision("r1");
    spec.labels
        .insert(pdgate_api::labels::ROLE.to_string(), "encode".to_string());
    let fleet = pdgate_sim::spawn_fleet(
        vec![spec, WorkerSpec::new("prefill-0", "prefill")],
        fast(),
        "127.0.0.1",
        0,
    )
    .await
    .unwrap();
    let info = get_json(&format!("{}/sim/info", fleet[0].url())).await;
    assert_eq!(info["role"], "encode");
    assert_eq!(info["labels"]["llm-d.ai/role"], "encode");
    assert_eq!(fleet[0].role(), "encode");
    let plan = pdgate_sim::fleet::plan_fleet(
        &pdgate_sim::fleet::parse_fleet("- role: encode\n  count: 2\n- role: prefill\n").unwrap(),
        0,
    )
    .unwrap();
    let roles: Vec<_> = plan
        .iter()
        .map(|w| (w.spec.name.as_str(), w.spec.role.as_str()))
        .collect();
    assert_eq!(
        roles,
        vec![
            ("encode-0", "encode"),
            ("encode-1", "encode"),
            ("prefill-0", "prefill")
        ]
    );
}
