//! Token bookings (pending prefill, active tokens) made at pick time and what
//! `kv-cost-scorer` makes of them.

mod common;

use common::{compat, ep, snapshot};
use pdgate_api::PromptInput;
use pdgate_scheduler::{Scheduler, SchedulingRequest};

fn tokens(range: std::ops::Range<u32>) -> PromptInput {
    PromptInput::Tokens(range.collect())
}

const COST_ONLY: &str =
    "plugins:\n- type: decode-filter\n- type: kv-cost-scorer\n  parameters:\n    \
                         overlapScoreWeight: 2\n";

fn loads(eps: &[std::sync::Arc<pdgate_scheduler::EndpointState>]) -> Vec<(u64, u64)> {
    eps.iter()
        .map(|e| (e.load.pending_prefill_tokens(), e.load.active_tokens()))
        .collect()
}

/// Request 1 (64 tokens) lands on one endpoint, `x`; request 2 extends it to 128 tokens.
/// While request 1 still prefills on x, with w = 2:
///   x = 2·((128 − 64) + 64) + (64 + 128) = 448,  y = 2·128 + 128 = 384 → y.
/// Once x is past request 1's prefill (its first token):
///   x = 2·64 + 192 = 320 < 384 → x.
#[test]
fn a_cached_prefix_wins_only_once_its_endpoint_is_past_its_queue() {
    let s = Scheduler::from_yaml(COST_ONLY, "t").unwrap();
    let eps = [ep("a", None), ep("b", None)];
    let snap = snapshot(&eps);
    let first_prompt = tokens(0..64);
    let mut first = s
        .schedule(&SchedulingRequest::new("r1", "m", &first_prompt), &snap)
        .unwrap();
    s.response_received(&first.decode, 200);
    let x = first.decode.endpoint.endpoint.name.clone();
    let (xi, yi) = if x == "a" { (0, 1) } else { (1, 0) };
    let mut want = [(0, 0); 2];
    want[xi] = (64, 64);
    assert_eq!(loads(&eps), want);

    let second_prompt = tokens(0..128);
    let second = SchedulingRequest::new("r2", "m", &second_prompt);
    let r = s.schedule(&second, &snap).unwrap();
    assert_eq!(r.decode.endpoint.endpoint.name, eps[yi].endpoint.name);
    want[yi] = (128, 128);
    assert_eq!(loads(&eps), want);
    drop(r);

    first.decode.guard.prefill_done();
    want = [(0, 0); 2];
    want[xi] = (0, 64);
    assert_eq!(loads(&eps), want);
    let r = s.schedule(&second, &snap).unwrap();
    assert_eq!(
        (
            r.decode.endpoint.endpoint.name.as_str(),
            r.decode.cached_tokens
        ),
        (x.as_str(), 64)
    );
    want[xi] = (64, 192);
    assert_eq!(loads(&eps), want);
    drop((r, first));
    assert_eq!(loads(&eps), [(0, 0); 2]);
}

/// A split request: the prefill pick books its uncached prompt as pending prefill, the decode
/// pick books none (its KV comes by transfer); both book the prompt as active.
#[test]
fn a_decode_leg_books_no_prefill() {
    let s = Scheduler::from_yaml(&compat("sim-pd-epp-config.yaml"), "sim").unwrap();
    let eps = [ep("p1", Some("prefill")), ep("d1", Some("decode"))];
    let prompt = tokens(0..64);
    let r = s
        .schedule(&SchedulingRequest::new("r", "m", &prompt), &snapshot(&eps))
        .unwrap();
    assert!(r.prefill.is_some());
    assert_eq!(loads(&eps), [(64, 64), (0, 64)]);
    drop(r);
    assert_eq!(loads(&eps), [(0, 0), (0, 0)]);
}
