//! Precise prefix routing from the engines' KV events, end to end: simulator workers publish
//! vLLM's ZMQ events, pdgate (`precise-prefix-cache-producer` feeding `prefix-cache-scorer`,
//! canonical blocks of 16 tokens) subscribes to each. A repeated prompt goes to its holder
//! and hits its cache; a prefix the engine dropped (reset, eviction) or lost (restart) stops
//! being credited; engines at 16/32/64 tokens per block are compared in canonical blocks;
//! two replicas (in-process and the real binary) agree.

use crate::support;

use support::kv_events::*;
use support::process::{serve, TempPath};
use support::{metric, metrics, url};

/// Canonical blocks of a `len`-token prompt on an engine of `engine_block` tokens: its full
/// engine blocks, re-cut to the router's 16.
fn canonical(len: u32, engine_block: u32) -> u64 {
    u64::from(len / engine_block * engine_block) / ROUTER_BLOCK as u64
}

/// The endpoint of `router` dump entry `name`: its `last_seq`.
async fn last_seq(url: &str, name: &str) -> u64 {
    let ix = kv_index(url).await;
    let e = ix["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("`{name}` in {ix}"));
    e["last_seq"].as_u64().unwrap()
}

#[tokio::test]
async fn a_repeated_prompt_goes_to_the_engine_that_holds_it() {
    let (_workers, _router, u) =
        precise_fleet(vec![("e0", kv_sim_config(16)), ("e1", kv_sim_config(16))]).await;

    // 100 tokens: 6 full blocks (96 tokens) once served.
    let prompt = ids(1_000, 100);
    let (holder, cached) = route(&u, &prompt, None).await;
    assert_eq!(cached, 0, "a new prompt");
    let other = if holder == "e0" { "e1" } else { "e0" };
    wait_blocks(&u, &holder, 6).await;
    assert_eq!(blocks_held(&u, other).await, 0);
    let m = metrics(&u).await;
    let series =
        |e: &str| format!("pdgate_kv_index_blocks{{producer=\"{PRODUCER}\",endpoint=\"{e}\"}}");
    assert_eq!(metric(&m, &series(&holder)), 6, "{m}");
    assert!(m.contains(&format!("{} 0\n", series(other))), "{m}");

    for _ in 0..4 {
        assert_eq!(route(&u, &prompt, None).await, (holder.clone(), 96));
    }
    // The dump's sample size is checked and capped, naming the parameter.
    for bad in ["abc", "-1", "1025"] {
        let r = reqwest::get(format!("{u}/debug/kv-index?sample={bad}"))
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "sample={bad}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            body["error"]["message"],
            "query parameter `sample`: must be a whole number from 0 to 1024"
        );
    }
}

/// e0 holds all 6 blocks of `prompt`, e1 its first 3: the longer match wins.
async fn held_long_on_e0_short_on_e1(u: &str, prompt: &[u32]) {
    assert_eq!(route(u, prompt, Some("e0")).await, ("e0".into(), 0));
    assert_eq!(route(u, &prompt[..48], Some("e1")).await, ("e1".into(), 0));
    wait_blocks(u, "e0", 6).await;
    wait_blocks(u, "e1", 3).await;
    assert_eq!(route(u, prompt, None).await, ("e0".into(), 96));
}

#[tokio::test]
async fn a_reset_prefix_stops_being_credited_with_its_batch() {
    let (workers, _router, u) =
        precise_fleet(vec![("e0", kv_sim_config(16)), ("e1", kv_sim_config(16))]).await;
    let prompt = ids(2_000, 100);
    held_long_on_e0_short_on_e1(&u, &prompt).await;

    // One batch (AllBlocksCleared) later, e0 holds nothing; the prompt follows e1's 3 blocks.
    let seq = last_seq(&u, "e0").await;
    reset_prefix_cache(&workers[0]).await;
    wait_blocks(&u, "e0", 0).await;
    assert_eq!(last_seq(&u, "e0").await, seq + 1, "the reset's own batch");
    // e1 hits its 3 blocks, and computes (and holds) the rest.
    assert_eq!(route(&u, &prompt, None).await, ("e1".into(), 48));
    assert_eq!(route(&u, &prompt, None).await, ("e1".into(), 96));
}

#[tokio::test]
async fn blocks_the_engine_evicts_stop_being_credited() {
    // 8 blocks of 16 tokens: a 112-token prompt (7 blocks, and one for its output) evicts
    // every block of an earlier 64-token prompt.
    let small = pdgate_sim::SimConfig {
        num_gpu_blocks: 8,
        max_model_len: 128,
        ..kv_sim_config(16)
    };
    let (_workers, _router, u) =
        precise_fleet(vec![("e0", small), ("e1", kv_sim_config(16))]).await;
    let a = ids(3_000, 64);
    assert_eq!(route(&u, &a, Some("e0")).await, ("e0".into(), 0));
    assert_eq!(route(&u, &a[..32], Some("e1")).await, ("e1".into(), 0));
    wait_blocks(&u, "e0", 4).await;
    wait_blocks(&u, "e1", 2).await;
    assert_eq!(route(&u, &a, None).await, ("e0".into(), 48));

    let b = ids(4_000, 112);
    assert_eq!(route(&u, &b, Some("e0")).await, ("e0".into(), 0));
    wait_blocks(&u, "e0", 7).await;
    assert_eq!(route(&u, &a, None).await, ("e1".into(), 32));
    assert_eq!(route(&u, &a, None).await, ("e1".into(), 48));
}

#[tokio::test]
async fn a_restarted_engine_gets_no_credit_for_its_old_blocks() {
    let (mut workers, _router, u) =
        precise_fleet(vec![("e0", kv_sim_config(16)), ("e1", kv_sim_config(16))]).await;
    let prompt = ids(5_000, 100);
    held_long_on_e0_short_on_e1(&u, &prompt).await;

    // Same name, address and ports, a new process with an empty cache.
    let e0 = workers.remove(0);
    let addr = e0.addr();
    let e0 = e0.restart().await.unwrap();
    assert_eq!(e0.addr(), addr);
    wait_blocks(&u, "e0", 0).await;
    // e1 hits its 3 blocks, and computes (and holds) the rest.
    assert_eq!(route(&u, &prompt, None).await, ("e1".into(), 48));
    assert_eq!(route(&u, &prompt, None).await, ("e1".into(), 96));
    // The new process's own events credit it again, once pdgate's subscription has
    // reconnected (a ZMQ PUB drops what it publishes before that).
    let workers = [e0, workers.remove(0)];
    wait_feeds(&[&u], &workers[..1]).await;
    assert_eq!(route(&u, &prompt, Some("e0")).await, ("e0".into(), 0));
    wait_blocks(&u, "e0", 6).await;
    reset_prefix_cache(&workers[1]).await;
    wait_blocks(&u, "e1", 0).await;
    assert_eq!(route(&u, &prompt, None).await, ("e0".into(), 96));
}

#[tokio::test]
async fn engines_at_16_32_64_tokens_per_block_are_matched_in_canonical_blocks() {
    let sizes = [16u32, 32, 64];
    let names = sizes.map(|bs| format!("b{bs}"));
    let engines = (names.iter().zip(sizes))
        .map(|(n, bs)| (n.as_str(), kv_sim_config(bs as usize)))
        .collect();
    let (_workers, _router, u) = precise_fleet(engines).await;

    // A 100-token prompt of its own on each: 96, 96 and 64 tokens in full engine blocks.
    let prompts: Vec<Vec<u32>> = (0..3).map(|i| ids(10_000 * (i + 1), 100)).collect();
    for (p, bs) in prompts.iter().zip(sizes) {
        let name = format!("b{bs}");
        assert_eq!(route(&u, p, Some(&name)).await, (name.clone(), 0));
        wait_blocks(&u, &name, canonical(100, bs)).await;
    }
    let ix = kv_index(&u).await;
    let engine_sizes: Vec<_> = (ix["endpoints"].as_array().unwrap().iter())
        .map(|e| (e["name"].clone(), e["engine_block_size"].clone()))
        .collect();
    assert_eq!(
        engine_sizes,
        sizes
            .iter()
            .map(|bs| (format!("b{bs}").into(), (*bs).into()))
            .collect::<Vec<(serde_json::Value, serde_json::Value)>>(),
        "{ix}"
    );
    for _ in 0..2 {
        for (p, bs) in prompts.iter().zip(sizes) {
            let cached = u64::from(100 / bs * bs);
            assert_eq!(route(&u, p, None).await, (format!("b{bs}"), cached));
        }
    }

    // One 130-token prompt on two engines: b32 holds its first 96 tokens (6 canonical
    // blocks), b64 128 (8): b64's longer match wins.
    let q = ids(90_000, 130);
    assert_eq!(route(&u, &q[..96], Some("b32")).await, ("b32".into(), 0));
    assert_eq!(route(&u, &q, Some("b64")).await, ("b64".into(), 0));
    wait_blocks(&u, "b32", canonical(100, 32) + 6).await;
    wait_blocks(&u, "b64", canonical(100, 64) + 8).await;
    assert_eq!(route(&u, &q, None).await, ("b64".into(), 128));
}

#[tokio::test]
async fn two_replicas_pick_the_same_endpoint_for_the_same_prompt() {
    let workers = vec![
        kv_worker("e0", kv_sim_config(16)).await,
        kv_worker("e1", kv_sim_config(32)).await,
    ];
    // Replica A in process, replica B the real binary with an endpoints file and a config.
    let a = precise_router(&workers).await;
    let endpoints = TempPath::write("kv-endpoints.yaml", &kv_endpoints_yaml(&workers));
    let config = TempPath::write("kv-config.yaml", PRECISE_YAML);
    let (ep, cp) = (
        endpoints.path().to_str().unwrap().to_string(),
        config.path().to_str().unwrap().to_string(),
    );
    let b = serve(
        &["--endpoints", &ep, "--config", &cp],
        &[],
        vec![endpoints, config],
    );
    let (ua, ub) = (url(&a), b.url.clone());
    wait_feeds(&[&ua, &ub], &workers).await;

    // p held whole on e0 and its first 2 of 6 blocks on e1; q the other way round. (The
    // margin keeps the prefix ahead of the queue-scorer when a replica's scrape catches the
    // holder still busy with the other replica's request: with 4 of 6 blocks it was a tie.)
    let p = ids(20_000, 100);
    let q = ids(30_000, 100);
    assert_eq!(route(&ua, &p, Some("e0")).await, ("e0".into(), 0));
    assert_eq!(route(&ua, &p[..32], Some("e1")).await, ("e1".into(), 0));
    assert_eq!(route(&ua, &q, Some("e1")).await, ("e1".into(), 0));
    assert_eq!(route(&ua, &q[..32], Some("e0")).await, ("e0".into(), 0));
    for u in [&ua, &ub] {
        wait_blocks(u, "e0", 6 + 2).await;
        wait_blocks(u, "e1", 2 + 6).await;
    }
    for _ in 0..2 {
        for (prompt, holder, cached) in [(&p, "e0", 96), (&q, "e1", 96)] {
            let via_a = route(&ua, prompt, None).await;
            let via_b = route(&ub, prompt, None).await;
            assert_eq!(via_a, via_b, "the replicas agree");
            assert_eq!(via_a, (holder.to_string(), cached));
        }
    }
}

/// An engine that served prompts before the router started (or before the router found it)
/// publishes them to nobody. When its first batch the router receives has seq > 0, the
/// router replays the engine's buffered history from its replay socket, so those earlier
/// prompts are credited and routed to it.
#[tokio::test]
async fn a_router_started_after_the_engine_learns_its_earlier_blocks_by_replay() {
    let e0 = kv_worker("e0", kv_sim_config_with_replay(16)).await;
    let e1 = kv_worker("e1", kv_sim_config_with_replay(16)).await;
    // Served by e0 with no router listening: 6 blocks, published as seq 0.
    let early = ids(40_000, 100);
    let r = support::send(&e0.url(), &[], &completion(&early)).await;
    assert_eq!(r.status, 200, "{}", r.body);

    let workers = [e0, e1];
    let router = precise_router(&workers).await;
    let u = support::url(&router);
    // Until e0 publishes again, the router has nothing from it.
    assert_eq!(blocks_held(&u, "e0").await, 0);
    // Another prompt pinned to e0 makes it publish seq ≥ 1; the router's first batch of e0 then
    // brings the history before it. ZMQ drops what is published before the subscription
    // reaches the engine, so the pinned prompt is repeated until the router hears e0.
    let start = tokio::time::Instant::now();
    let mut sent = 0;
    while blocks_held(&u, "e0").await == 0 {
        assert!(start.elapsed() < BOUND, "{}", kv_index(&u).await);
        route(&u, &ids(50_000 + 1_000 * sent, 100), Some("e0")).await;
        sent += 1;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Every prompt e0 served is credited: the early one and the pinned ones sent before the
    // router heard e0 came by replay, 6 blocks each.
    wait_blocks(&u, "e0", 6 * (1 + u64::from(sent))).await;
    assert_eq!(blocks_held(&u, "e1").await, 0);
    let m = metrics(&u).await;
    assert_eq!(
        metric(&m, "pdgate_kv_events_history_replays_total"),
        1,
        "{m}"
    );
    assert_eq!(metric(&m, "pdgate_kv_events_clears_total"), 0, "{m}");
    // The early prompt (never seen live by the router) goes to e0 and hits its cache.
    assert_eq!(route(&u, &early, None).await, ("e0".into(), 96));
}
