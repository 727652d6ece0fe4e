//! Unit tests of `burst_prefix_cache_producer.rs`.

use super::*;
use crate::endpoint::EndpointState;
use crate::plugins::testutil::{ep, with_ctx};
use crate::request::RequestState;
use pdgate_api::PromptInput;

/// A fresh request state (one request).
fn req() -> Arc<RequestState> {
    with_ctx(&PromptInput::Tokens(vec![]), |ctx| ctx.state().clone())
}

fn index(yaml: &str) -> BurstIndex {
    let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
    let p: Params = decode(Some(&v)).unwrap();
    let (cfg, hasher) = p.validate().unwrap();
    BurstIndex::new(0, hasher, cfg)
}

/// Names of the replicas `n` new requests of prompt `hashes` are placed on at `now`.
fn place_n(
    ix: &BurstIndex,
    hashes: &[u64],
    eps: &[Arc<EndpointState>],
    n: usize,
    now: u64,
) -> Vec<String> {
    let c: Vec<_> = eps.iter().collect();
    (0..n)
        .map(|_| match ix.place(&req(), hashes, &c, now) {
            Some(i) => eps[i].endpoint.name.clone(),
            None => "-".into(),
        })
        .collect()
}

fn three() -> Vec<Arc<EndpointState>> {
    vec![ep("a", None), ep("b", None), ep("c", None)]
}

#[test]
fn groups_follow_their_first_request_and_new_groups_go_least_loaded() {
    let ix = index("{}");
    let eps = three();
    let (g1, g2, g3) = ([1, 2, 3], [1, 2, 4], [7]);
    // g1 opens the batch on `a` (all loads 0, names break the tie) and stays there.
    assert_eq!(place_n(&ix, &g1, &eps, 3, 0), ["a", "a", "a"]);
    // g2 shares two blocks with g1 but is another group (minColocateBlocks 0): the
    // least-loaded replica, `b` (load 0 < 3), then `c`.
    assert_eq!(place_n(&ix, &g2, &eps, 2, 10), ["b", "b"]);
    assert_eq!(place_n(&ix, &g3, &eps, 1, 20), ["c"]);
    // Loads a 3, b 2, c 1: a fourth group goes to c, a follower of g1 still to a.
    assert_eq!(place_n(&ix, &[9, 9], &eps, 1, 30), ["c"]);
    assert_eq!(place_n(&ix, &g1, &eps, 1, 99), ["a"]);
    assert_eq!(ix.batch_requests(99), 8);
}

#[test]
fn the_window_closes_the_batch() {
    let ix = index("windowDurationMs: 50");
    let eps = three();
    assert_eq!(place_n(&ix, &[1], &eps, 2, 1000), ["a", "a"]);
    // 1049 ms: still the batch opened at 1000 → a new group avoids `a` (load 2).
    assert_eq!(place_n(&ix, &[2], &eps, 1, 1049), ["b"]);
    // 1050 ms: the window [1000, 1050) has passed; loads start at 0 again and the old
    // group is forgotten: both prompts start over on `a`.
    assert_eq!(ix.batch_requests(1050), 0);
    assert_eq!(place_n(&ix, &[2], &eps, 1, 1050), ["a"]);
    assert_eq!(place_n(&ix, &[1], &eps, 1, 1051), ["b"]);
    assert_eq!(ix.batch_requests(1051), 2);
}

#[test]
fn max_per_replica_fills_then_spills_to_the_least_loaded() {
    let ix = index("maxPerReplica: 2");
    let eps = three();
    // Another group first puts 1 request on `a`.
    assert_eq!(place_n(&ix, &[5], &eps, 1, 0), ["a"]);
    // The group of 7: b b (fill to k=2), then c c (least-loaded under k: c 0 < a 1),
    // then a a (the only replica under k), then all are at k: the least loaded
    // (a 3, b 2, c 2 → b by name), then c (b 3, c 2).
    assert_eq!(
        place_n(&ix, &[6], &eps, 8, 1),
        ["b", "b", "c", "c", "a", "a", "b", "c"]
    );
}

#[test]
fn running_requests_break_load_ties() {
    let ix = index("{}");
    let eps = three();
    eps[0].load.set_scraped(Some(4.0), None, None);
    eps[1].load.set_scraped(Some(1.0), None, None);
    eps[2].load.set_scraped(Some(2.0), None, None);
    assert_eq!(place_n(&ix, &[1], &eps, 1, 0), ["b"]);
    // b has load 1 now: c (running 2) beats a (running 4).
    assert_eq!(place_n(&ix, &[2], &eps, 1, 0), ["c"]);
    assert_eq!(place_n(&ix, &[3], &eps, 1, 0), ["a"]);
}

#[test]
fn min_colocate_blocks_puts_prefix_sharing_groups_together_up_to_the_fair_share() {
    let ix = index("minColocateBlocks: 2");
    let eps = vec![ep("a", None), ep("b", None)];
    // g1 [1,2,3] ×2 on a. g2 [1,2,4] shares 2 leading blocks with what a holds; the fair
    // share is ceil((2 + 1) / 2) = 2 and a's load is 2, so a is full: b.
    assert_eq!(place_n(&ix, &[1, 2, 3], &eps, 2, 0), ["a", "a"]);
    assert_eq!(place_n(&ix, &[1, 2, 4], &eps, 1, 0), ["b"]);
    // g3 [1,2,5]: a and b both hold 2 leading blocks; fair share ceil((3+1)/2) = 2:
    // a (load 2) is excluded, b (load 1) qualifies.
    assert_eq!(place_n(&ix, &[1, 2, 5], &eps, 1, 0), ["b"]);
    // g4 [1,9]: 1 leading block < 2 anywhere → least loaded (a 2, b 2 → a).
    assert_eq!(place_n(&ix, &[1, 9], &eps, 1, 0), ["a"]);

    // Longest run wins among replicas below the fair share.
    let ix = index("minColocateBlocks: 2");
    let eps = three();
    assert_eq!(place_n(&ix, &[1, 2, 3, 4], &eps, 1, 0), ["a"]);
    // Fair share ceil((1 + 1) / 3) = 1: a (load 1, run 2) is at it → least loaded: b.
    assert_eq!(place_n(&ix, &[1, 2, 5], &eps, 1, 0), ["b"]);
    // Fair share 1 again: a and b are at it, c holds nothing → c, and its follower too.
    assert_eq!(place_n(&ix, &[8], &eps, 2, 0), ["c", "c"]);
    // Loads a 1, b 1, c 2; fair share ceil((4 + 1) / 3) = 2. Leading runs of
    // [1,2,5,6]: a 2, b 3, c 0 → b, though a is as loaded and first by name.
    assert_eq!(place_n(&ix, &[1, 2, 5, 6], &eps, 1, 0), ["b"]);
    // Equal runs (a 2, b 2 for [1,2,9]); fair share ceil((5 + 1) / 3) = 2 → only a
    // (load 1) is below it.
    assert_eq!(place_n(&ix, &[1, 2, 9], &eps, 1, 0), ["a"]);
}

#[test]
fn tokens_balance_charges_the_blocks_not_yet_held() {
    let ix = index("{balanceBy: tokens, minColocateBlocks: 1}");
    let eps = vec![ep("a", None), ep("b", None)];
    let c: Vec<_> = eps.iter().collect();
    // g1: 4 blocks on a (load a 4). Followers add nothing.
    assert_eq!(place_n(&ix, &[1, 2, 3, 4], &eps, 2, 0), ["a", "a"]);
    // g2 [1,2,3,9]: a holds a run of 3; fair share ceil((4 + 4) / 2) = 4, a's load 4 is
    // not below it → least loaded: b, charged all 4 blocks (b holds none).
    assert_eq!(place_n(&ix, &[1, 2, 3, 9], &eps, 1, 0), ["b"]);
    // g3 [1,2,3,4,5] (5 blocks): fair share ceil((8 + 5) / 2) = 7; a (load 4, run 4)
    // and b (load 4, run 3): a, charged 5 − 4 = 1 → a 5.
    assert_eq!(place_n(&ix, &[1, 2, 3, 4, 5], &eps, 1, 0), ["a"]);
    // g4 [7,8]: no run anywhere → least loaded: b (4 < 5).
    let s = req();
    assert_eq!(ix.place(&s, &[7, 8], &c, 0), Some(1));
}

#[test]
fn a_request_is_placed_once_per_candidate_set() {
    let ix = index("{}");
    let eps = [
        ep("p0", None),
        ep("p1", None),
        ep("d0", None),
        ep("d1", None),
    ];
    let prefill: Vec<_> = eps[..2].iter().collect();
    let decode: Vec<_> = eps[2..].iter().collect();
    let s = req();
    let mut out = Vec::new();
    ix.match_lengths_at(&s, &[1, 2], &prefill, 0, &mut out);
    assert_eq!(out, [2, 0]);
    // Reading again (another scorer, the decider) changes nothing.
    ix.match_lengths_at(&s, &[1, 2], &prefill, 0, &mut out);
    assert_eq!(out, [2, 0]);
    assert_eq!(ix.batch_requests(0), 1);
    // Among the decode candidates the request gets its own placement, counted once.
    ix.match_lengths_at(&s, &[1, 2], &decode, 0, &mut out);
    assert_eq!(out, [2, 0]);
    assert_eq!(ix.batch_requests(0), 1);
    assert_eq!(ix.match_length_for(&s, &[1, 2], &eps[0]), 2);
    assert_eq!(ix.match_length_for(&s, &[1, 2], &eps[1]), 0);
    assert_eq!(ix.match_length_for(&s, &[1, 2], &eps[2]), 2);
    // A second request of the group follows it in both sets.
    let s2 = req();
    ix.match_lengths_at(&s2, &[1, 2], &decode, 0, &mut out);
    assert_eq!(out, [2, 0]);
    // A request without a full block is never placed.
    ix.match_lengths_at(&req(), &[], &decode, 0, &mut out);
    assert_eq!(out, [0, 0]);
    assert_eq!(ix.batch_requests(0), 2);
}

#[test]
fn a_full_batch_places_nothing_more_until_the_window_closes() {
    let ix = index("{maxBatchSize: 2, windowDurationMs: 10}");
    let eps = three();
    assert_eq!(place_n(&ix, &[1], &eps, 3, 0), ["a", "a", "-"]);
    assert_eq!(place_n(&ix, &[2], &eps, 1, 9), ["-"]);
    assert_eq!(place_n(&ix, &[2], &eps, 1, 10), ["a"]);
}

#[test]
fn defaults_and_token_cap() {
    let (cfg, h) = Params::default().validate().unwrap();
    assert_eq!(
        cfg,
        BurstConfig {
            window_ms: 100,
            max_per_replica: None,
            min_colocate_blocks: 0,
            max_batch_size: Some(1000),
            balance: Balance::Requests,
        }
    );
    assert_eq!((h.block_tokens, h.max_blocks), (64, 2048));
    let p = Params {
        max_prefix_tokens_to_match: 200,
        max_batch_size: -1,
        balance_by: String::new(),
        ..Params::default()
    };
    let (cfg, h) = p.validate().unwrap();
    assert_eq!((h.max_blocks, cfg.max_batch_size), (3, None));
    assert_eq!(cfg.balance, Balance::Requests);
}

#[test]
fn bad_parameters_name_their_field() {
    let err = |yaml: &str| {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let p: Params = match decode(Some(&v)) {
            Ok(p) => p,
            Err(e) => return (e.path.unwrap_or_default(), e.message),
        };
        let e = p.validate().unwrap_err();
        (e.path.unwrap(), e.message)
    };
    assert_eq!(
        err("windowDurationMs: 0"),
        (
            "windowDurationMs".into(),
            "must be between 1 and 10000 (current value: 0)".into()
        )
    );
    assert_eq!(err("windowDurationMs: 10001").0, "windowDurationMs");
    assert_eq!(
        err("maxPerReplica: 0"),
        (
            "maxPerReplica".into(),
            "must be -1 (unlimited) or >= 1 (current value: 0)".into()
        )
    );
    assert_eq!(err("blockSizeTokens: 0").0, "blockSizeTokens");
    assert_eq!(
        err("maxPrefixTokensToMatch: -1").0,
        "maxPrefixTokensToMatch"
    );
    assert_eq!(
        err("maxPrefixTokensToMatch: 10").1,
        "must be 0 or >= blockSizeTokens (64); a smaller positive value yields no prefix \
             block (current value: 10)"
    );
    assert_eq!(err("minColocateBlocks: -2").0, "minColocateBlocks");
    assert_eq!(err("maxBatchSize: -3").0, "maxBatchSize");
    assert_eq!(
        err("balanceBy: bytes"),
        (
            "balanceBy".into(),
            "must be \"requests\" or \"tokens\" (current value: \"bytes\")".into()
        )
    );
    assert_eq!(err("windowDurationMs: soon").0, "windowDurationMs");
    let v: Value = serde_yaml_ng::from_str("bogus: 1").unwrap();
    let e = decode::<Params>(Some(&v)).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("bogus"));
}
