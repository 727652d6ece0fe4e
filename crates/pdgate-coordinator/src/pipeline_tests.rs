//! Unit tests of `pipeline.rs`.
use super::*;
use crate::dispatch::FailureKind;
use pdgate_api::ApiKind;
use std::sync::Mutex;

/// A dispatcher that records legs and answers from a script; it resolves each leg's
/// endpoint from its phase ([`endpoint_of`]), as the real ones do from their picks.
struct Fake {
    legs: Mutex<Vec<PhaseRequest>>,
    prefill_status: u16,
    /// Status of a leg carrying `Prefer: if-available`.
    probe_status: u16,
    /// `x-llm-d-disagg-revision` stamped on the probe's answer.
    probe_revision: Option<&'static str>,
    /// The prefill leg fails with this instead of answering.
    prefill_error: Option<DispatchError>,
    /// The prefill leg's body instead of a NIXL answer.
    prefill_body: Option<&'static [u8]>,
}

fn scripted(prefill_status: u16, probe_status: u16) -> Fake {
    Fake {
        legs: Mutex::new(vec![]),
        prefill_status,
        probe_status,
        probe_revision: None,
        prefill_error: None,
        prefill_body: None,
    }
}

impl Dispatcher for Fake {
    type Body = Bytes;
    async fn dispatch(&self, req: PhaseRequest) -> Result<PhaseResponse<Bytes>, DispatchError> {
        let phase = req.phase;
        let probe = req.headers.contains_key(headers::PREFER);
        self.legs.lock().unwrap().push(req);
        if let (Phase::Prefill, Some(e)) = (phase, &self.prefill_error) {
            return Err(e.clone());
        }
        let (status, body): (u16, &'static [u8]) = match phase {
            _ if probe => (self.probe_status, b"probe"),
            Phase::Prefill => (
                self.prefill_status,
                self.prefill_body.unwrap_or(
                    br#"{"kv_transfer_params":{"remote_engine_id":"p0","remote_block_ids":[1]}}"#,
                ),
            ),
            _ => (200, b"decoded"),
        };
        let mut headers = HeaderMap::new();
        if let (true, Some(r)) = (probe, self.probe_revision) {
            headers.insert(headers::DISAGG_REVISION, HeaderValue::from_static(r));
        }
        Ok(PhaseResponse {
            served: endpoint_of(phase).into(),
            status,
            headers,
            body: Bytes::from_static(body),
        })
    }
    async fn collect(&self, _: &str, body: Bytes) -> Result<Bytes, DispatchError> {
        Ok(body)
    }
}

/// The endpoint the fake resolves for a leg of `phase`.
fn endpoint_of(phase: Phase) -> &'static str {
    match phase {
        Phase::Prefill => "p0",
        Phase::Encode => "e0",
        Phase::Decode | Phase::Aggregated => "d0",
    }
}

fn plan(split: bool, conditional: bool) -> Plan {
    Plan {
        split,
        one_leg: Phase::Aggregated,
        encode: false,
        conditional,
        prefill_fallback: PrefillFallback::Aggregated,
        kv_connector: KvConnector::Nixl,
        encode_settings: Default::default(),
        tokens_in: false,
    }
}

fn request(n: u32) -> (InferenceRequest, Bytes) {
    let raw = Bytes::from(format!(
        r#"{{"model":"m","prompt":"hi","n":{n},"max_tokens":9}}"#
    ));
    (
        InferenceRequest::parse(ApiKind::Completions, &raw).unwrap(),
        raw,
    )
}

/// Runs `plan` for a request with `n` choices through `fake`.
async fn go(fake: &Fake, plan: &Plan, n: u32) -> (Outcome<Bytes>, Trace, Bytes) {
    let (req, raw) = request(n);
    let mut trace = Trace::default();
    let rules = ForwardRules::default();
    let out = run(fake, plan, &req, &HeaderMap::new(), &rules, &mut trace)
        .await
        .unwrap();
    (out, trace, raw)
}

#[tokio::test]
async fn split_plan_sends_prefill_then_decode_with_the_handoff() {
    let fake = scripted(200, 200);
    let (out, trace, _) = go(&fake, &plan(true, false), 1).await;
    assert!(matches!(out, Outcome::Final(r) if r.body == "decoded"));
    assert_eq!(trace.probe, None);
    let legs = fake.legs.lock().unwrap();
    assert_eq!(
        legs.iter().map(|l| l.phase).collect::<Vec<_>>(),
        [Phase::Prefill, Phase::Decode]
    );
    assert!(legs.iter().all(|l| l.headers.is_empty()), "no header added");
    let decode: serde_json::Value = serde_json::from_slice(&legs[1].body).unwrap();
    assert_eq!(decode["kv_transfer_params"]["remote_engine_id"], "p0");
    assert_eq!(decode["max_tokens"], 9);
}

#[tokio::test]
async fn shared_storage_sends_the_flags_and_needs_nothing_from_the_prefill_answer() {
    let shared = Plan {
        kv_connector: KvConnector::SharedStorage,
        ..plan(true, false)
    };
    // The prefill answers with NIXL-style params (ignored) or none at all (fine).
    for body in [None, Some(&br#"{"choices":[{"text":"x"}]}"#[..])] {
        let fake = Fake {
            prefill_body: body,
            ..scripted(200, 200)
        };
        let (out, trace, _) = go(&fake, &shared, 1).await;
        assert!(matches!(out, Outcome::Final(r) if r.body == "decoded"));
        assert!(trace.prefill_ran);
        let legs = fake.legs.lock().unwrap();
        let body = |i: usize| serde_json::from_slice::<serde_json::Value>(&legs[i].body).unwrap();
        assert_eq!(
            body(0)["kv_transfer_params"],
            serde_json::json!({"do_remote_decode": true, "do_remote_prefill": false})
        );
        assert_eq!(
            body(1)["kv_transfer_params"],
            serde_json::json!({"do_remote_prefill": true, "do_remote_decode": false})
        );
        assert_eq!(
            (body(0)["max_tokens"].clone(), body(1)["max_tokens"].clone()),
            (1.into(), 9.into())
        );
    }
    // NIXL needs the answer's params: without them the prefill answer is bad.
    let fake = Fake {
        prefill_body: Some(br#"{"choices":[]}"#),
        ..scripted(200, 200)
    };
    let (req, _) = request(1);
    let err = run(
        &fake,
        &plan(true, false),
        &req,
        &HeaderMap::new(),
        &ForwardRules::default(),
        &mut Trace::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "prefill endpoint p0 answered without a KV handoff: prefill response has no `kv_transfer_params`",
        "the error names the endpoint the prefill answer came from"
    );
}

#[tokio::test]
async fn failed_prefill_sends_no_decode_and_n_above_one_runs_aggregated() {
    let fake = scripted(409, 200);
    let (out, _, _) = go(&fake, &plan(true, false), 1).await;
    assert!(
        matches!(out, Outcome::Rejected { phase: Phase::Prefill, response: r } if r.status == 409 && r.served == "p0")
    );
    assert_eq!(fake.legs.lock().unwrap().len(), 1);

    let fake = scripted(200, 200);
    let (_, _, raw) = go(&fake, &plan(true, true), 2).await;
    let legs = fake.legs.lock().unwrap();
    assert_eq!(legs.len(), 1, "n > 1: no probe, no prefill");
    assert_eq!(
        (legs[0].phase, legs[0].body.clone()),
        (Phase::Aggregated, raw)
    );
}

/// A leg's phase and whether it is the conditional-decode probe.
fn leg_view(l: &PhaseRequest) -> (Phase, bool) {
    let prefer = l.headers.get(headers::PREFER).map(|v| v.to_str().unwrap());
    (l.phase, prefer == Some("if-available"))
}

#[tokio::test]
async fn conditional_decode_412_goes_on_with_prefill_then_decode() {
    let fake = scripted(200, 412);
    let (out, trace, raw) = go(&fake, &plan(true, true), 1).await;
    assert!(matches!(out, Outcome::Final(r) if r.body == "decoded"));
    assert_eq!(trace.probe, Some(Probe::Deferred));
    assert!(trace.prefill_ran);
    let legs = fake.legs.lock().unwrap();
    assert_eq!(
        legs.iter().map(leg_view).collect::<Vec<_>>(),
        [
            (Phase::Decode, true),
            (Phase::Prefill, false),
            (Phase::Decode, false),
        ]
    );
    assert_eq!(
        legs[0].body, raw,
        "the probe carries the client body unchanged"
    );
}

#[tokio::test]
async fn conditional_decode_other_answers_end_the_pipeline() {
    for (status, probe) in [
        (200, Probe::Served),
        (503, Probe::Error),
        (400, Probe::Error),
    ] {
        let fake = scripted(200, status);
        let (out, trace, _) = go(&fake, &plan(true, true), 1).await;
        assert!(matches!(out, Outcome::Final(r) if r.status == status && r.body == "probe"));
        assert_eq!(trace.probe, Some(probe));
        assert_eq!(
            fake.legs.lock().unwrap().len(),
            1,
            "{status}: no prefill leg"
        );
    }
    // Not conditional, or a plan that does not split: no probe at all.
    let fake = scripted(200, 412);
    let (_, trace, _) = go(&fake, &plan(false, true), 1).await;
    assert_eq!(trace.probe, None);
    assert_eq!(
        fake.legs
            .lock()
            .unwrap()
            .iter()
            .map(leg_view)
            .collect::<Vec<_>>(),
        [(Phase::Aggregated, false)]
    );
}

#[tokio::test]
async fn the_412_revision_reaches_prefill_and_decode_and_its_absence_constrains_nothing() {
    // The seed's bug: the coordinator dropped the 412's headers, so prefill and decode
    // could run on different revisions.
    let revision = |l: &PhaseRequest| {
        l.headers
            .get(headers::DISAGG_REVISION)
            .map(|v| v.to_str().unwrap().to_string())
    };
    let fake = Fake {
        probe_revision: Some("revision-b"),
        ..scripted(200, 412)
    };
    let (_, trace, _) = go(&fake, &plan(true, true), 1).await;
    assert_eq!(trace.captured[headers::DISAGG_REVISION], "revision-b");
    {
        let legs = fake.legs.lock().unwrap();
        assert_eq!(
            legs.iter()
                .map(|l| (l.phase, revision(l)))
                .collect::<Vec<_>>(),
            [
                (Phase::Decode, None),
                (Phase::Prefill, Some("revision-b".into())),
                (Phase::Decode, Some("revision-b".into())),
            ]
        );
    }
    let fake = scripted(200, 412);
    let (_, trace, _) = go(&fake, &plan(true, true), 1).await;
    assert!(trace.captured.is_empty());
    assert!(fake
        .legs
        .lock()
        .unwrap()
        .iter()
        .all(|l| revision(l).is_none()));
}

#[tokio::test]
async fn an_unavailable_prefill_follows_the_policy_and_another_failure_is_the_requests() {
    let unavailable =
        DispatchError::new(FailureKind::ConnectRefused, "p0", "refused").unavailable(true);
    let (req, raw) = request(1);
    let rules = ForwardRules::default();
    let run_with = |fallback, error: DispatchError| {
        let fake = Fake {
            prefill_error: Some(error),
            ..scripted(200, 200)
        };
        let plan = Plan {
            prefill_fallback: fallback,
            ..plan(true, false)
        };
        (fake, plan)
    };
    // Aggregated: one leg runs the client body; the reason is kept.
    let (fake, p) = run_with(PrefillFallback::Aggregated, unavailable.clone());
    let mut trace = Trace::default();
    let out = run(&fake, &p, &req, &HeaderMap::new(), &rules, &mut trace).await;
    assert!(matches!(out, Ok(Outcome::Final(r)) if r.body == "decoded"));
    assert_eq!(
        trace.fallback.as_deref(),
        Some("upstream p0 unreachable: refused")
    );
    assert!(!trace.prefill_ran);
    let legs: Vec<_> = fake.legs.lock().unwrap().iter().map(leg_view).collect();
    assert_eq!(legs, [(Phase::Prefill, false), (Phase::Aggregated, false)]);
    assert_eq!(fake.legs.lock().unwrap()[1].body, raw);
    // Fail: no decode leg, a PrefillUnavailable error.
    let (fake, p) = run_with(PrefillFallback::Fail, unavailable);
    let mut trace = Trace::default();
    let out = run(&fake, &p, &req, &HeaderMap::new(), &rules, &mut trace).await;
    assert_eq!(
        out.err(),
        Some(PipelineError::PrefillUnavailable {
            reason: "upstream p0 unreachable: refused".into()
        })
    );
    assert_eq!(fake.legs.lock().unwrap().len(), 1);
    // A failure that is not "unavailable" (a deadline) fails the request under either policy.
    let deadline = DispatchError::new(FailureKind::Deadline, "p0", "after 5 ms");
    let (fake, p) = run_with(PrefillFallback::Aggregated, deadline.clone());
    let mut trace = Trace::default();
    let out = run(&fake, &p, &req, &HeaderMap::new(), &rules, &mut trace).await;
    assert_eq!(
        out.err(),
        Some(PipelineError::Dispatch {
            phase: Phase::Prefill,
            source: deadline
        })
    );
    assert_eq!(fake.legs.lock().unwrap().len(), 1);
}

#[test]
fn prefill_fallback_parses_its_two_values_and_names_a_bad_one() {
    assert_eq!("aggregated".parse(), Ok(PrefillFallback::Aggregated));
    assert_eq!("fail".parse(), Ok(PrefillFallback::Fail));
    assert_eq!(
        "maybe".parse::<PrefillFallback>(),
        Err("`maybe` is not a prefill fallback: use `aggregated` or `fail`".into())
    );
    assert_eq!(PrefillFallback::default(), PrefillFallback::Aggregated);
}

#[tokio::test]
async fn a_per_role_routers_one_leg_names_its_own_phase_and_carries_the_client_body() {
    // A coordinator sent this router one prefill leg: the plan does not split and its one
    // leg is the router's phase, with the body as it came (no rewrite after the fact).
    let fake = scripted(200, 200);
    let one_leg = Plan {
        one_leg: Phase::Prefill,
        ..plan(false, false)
    };
    let (out, trace, raw) = go(&fake, &one_leg, 1).await;
    assert!(matches!(out, Outcome::Final(r) if r.served == "p0" && r.status == 200));
    assert!(!trace.prefill_ran, "no handoff was relayed");
    let legs = fake.legs.lock().unwrap();
    assert_eq!(legs.len(), 1);
    assert_eq!((legs[0].phase, legs[0].body.clone()), (Phase::Prefill, raw));
}
