//! Encoder disaggregation refusals over real HTTP: `ec_transfer_params` entries that do not
//! match the request's media, requests an encode worker does not serve, and text-only requests
//! that must stay as they were.

mod common;

use common::epd::*;
use common::*;
use pdgate_api::media::content_hash;
use pdgate_api::KvTransferParams;
use pdgate_sim::WorkerSpec;
use serde_json::{json, Value};

#[tokio::test]
async fn entries_must_match_the_items() {
    let e = worker(WorkerSpec::new("encode-0", "encode"), fast()).await;
    let p = worker(WorkerSpec::new("prefill-0", "prefill"), fast()).await;
    let media = [image(1), image(2)];
    let ec = encode(&e, &media).await;
    let (url, media) = (&p.url(), &media);
    // POSTs the prefill leg of `media` carrying `ec`.
    let send = move |ec: Value| post(url, "/v1/chat/completions", prefill_leg(media, &ec));

    // No entry for the second image.
    let r = send(json!([ec[0]])).await;
    assert_error(
        &r,
        400,
        &format!(
            "ec_transfer_params rejected: no entry for mm_hash {} (media item 1)",
            content_hash(&media[1])
        ),
    );
    // An entry for an image the request does not have.
    let other = encode(&e, &[image(3)]).await;
    let r = send(json!([ec[0], ec[1], other[0]])).await;
    let want = format!(
        "ec_transfer_params rejected: ec_transfer_params[2].mm_hash {} matches no media item of the request",
        content_hash(&image(3))
    );
    assert_error(&r, 400, &want);
    // A field missing, and not an array.
    let mut bad = ec.clone();
    bad[1]["lease_id"] = Value::Null;
    let r = send(bad).await;
    assert_error(
        &r,
        400,
        "ec_transfer_params rejected: ec_transfer_params[1].lease_id is missing or null",
    );
    let r = send(json!({"x": 1})).await;
    assert_eq!(r.status, 400);
    // Swapped leases: the encoder refuses the hash the lease does not hold.
    let mut swapped = ec.clone();
    swapped[0]["lease_id"] = ec[1]["lease_id"].clone();
    swapped[1]["lease_id"] = ec[0]["lease_id"].clone();
    let r = send(swapped).await;
    assert_error(
        &r,
        400,
        &format!(
            "ec_transfer_params rejected: lease {} holds mm_hash {}, not {}",
            ec[1]["lease_id"].as_str().unwrap(),
            content_hash(&media[1]),
            content_hash(&media[0])
        ),
    );
    // None of these consumed a lease (3: two images, and the stray one): the right params work.
    assert_eq!(e.stats().ec_leases, 3);
    let r = send(ec).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(e.stats().ec_leases, 1);

    // Another engine id on one entry: that entry is refused, the other one was pulled (each
    // entry is pulled on its own) and is consumed.
    let ec = encode(&e, media).await;
    let mut wrong = ec.clone();
    wrong[0]["encoder_engine_id"] = json!("encode-9-deadbeef");
    let r = send(wrong).await;
    let want = format!(
        "ec_transfer_params rejected: engine encode-9-deadbeef is not served at 127.0.0.1:{} (engine {} is)",
        e.addr().port(),
        e.engine_id()
    );
    assert_error(&r, 404, &want);
    assert_eq!(
        e.stats().ec_leases,
        2,
        "lease of entry 0 kept, entry 1 consumed"
    );
    let mut unknown = ec.clone();
    unknown[1]["lease_id"] = json!("no-such-lease");
    let r = send(unknown).await;
    assert_error(
        &r,
        404,
        &format!(
            "ec_transfer_params rejected: engine {} holds no lease no-such-lease",
            e.engine_id()
        ),
    );
    assert_counts(
        &p.stats().ec_handoff_rejections,
        &[
            ("missing_entry", 1),
            ("malformed", 3),
            ("hash_mismatch", 1),
            ("unknown_engine", 1),
            ("unknown_lease", 1),
        ],
    );
}

#[tokio::test]
async fn text_only_requests_are_unchanged() {
    let p = worker(WorkerSpec::new("prefill-0", "prefill"), fast()).await;
    let body = json!({"model": "pdgate-sim", "messages": [{"role": "user", "content": "hello there"}],
                      "max_tokens": 2});
    let r = post_chat(&p, body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}})
    );
    assert!(r.body.get("ec_transfer_params").is_none());
    let leg = with(
        body,
        json!({"ec_transfer_params": [],
               "kv_transfer_params": KvTransferParams::prefill_request_json()}),
    );
    let r = post_chat(&p, leg).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["kv_transfer_params"]["do_remote_prefill"], true);
    let s = p.stats();
    assert_eq!(
        (
            s.encode_items,
            s.local_encoded_items,
            s.remote_encoded_items,
            s.prefill_legs
        ),
        (0, 0, 0, 1)
    );
    assert!(s.ec_handoff_rejections.is_empty());
}

#[tokio::test]
async fn encode_workers_refuse_completions_text_and_streams() {
    let e = worker(WorkerSpec::new("encode-0", "encode"), fast()).await;
    let r = post(
        &e.url(),
        "/v1/completions",
        json!({"model": "pdgate-sim", "prompt": "hi", "max_tokens": 1}),
    )
    .await;
    assert_error(&r, 400, "encode workers serve chat requests with media");
    assert_eq!(r.headers["x-sim-role"], "encode");
    let r = post_chat(&e, chat(&[], 1)).await;
    assert_eq!(r.status, 400);
    assert!(r.body["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("field `messages` must contain at least one media part"));
    let r = post_chat(&e, with(chat(&[image(1)], 1), json!({"stream": true}))).await;
    assert_eq!(r.status, 400);
    assert_eq!(e.stats().encode_items, 0);
}
