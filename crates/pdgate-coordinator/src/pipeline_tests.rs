//! Unit tests of `pipeline.rs`.
use super::*;
use pdgate_api::ApiKind;
use std::sync::Mutex;

/// A dispatcher that records legs and answers from a script.
struct Fake {
    legs: Mutex<Vec<PhaseRequest>>,
    prefill_status: u16,
    /// Status of a leg carrying `Prefer: if-available`.
    probe_status: u16,
    /// `x-llm-d-disagg-revision` stamped on the probe's answer.
    probe_revision: Option<&'static str>,
}

fn scripted(prefill_status: u16, probe_status: u16) -> Fake {
    Fake {
        legs: Mutex::new(vec![]),
        prefill_status,
        probe_status,
        probe_revision: None,
    }
}

impl Dispatcher for Fake {
    type Body = Bytes;
    async fn dispatch(&self, req: PhaseRequest) -> Result<PhaseResponse<Bytes>, DispatchError> {
        let phase = req.phase;
        let probe = req.headers.contains_key(headers::PREFER);
        self.legs.lock().unwrap().push(req);
        let (status, body): (u16, &'static [u8]) = match phase {
            _ if probe => (self.probe_status, b"probe"),
            Phase::Prefill => (
                self.prefill_status,
                br#"{"kv_transfer_params":{"remote_engine_id":"p0","remote_block_ids":[1]}}"#,
            ),
            _ => (200, b"decoded"),
        };
        let mut headers = HeaderMap::new();
        if let (true, Some(r)) = (probe, self.probe_revision) {
            headers.insert(headers::DISAGG_REVISION, HeaderValue::from_static(r));
        }
        Ok(PhaseResponse {
            status,
            headers,
            body: Bytes::from_static(body),
        })
    }
    async fn collect(&self, _: &str, body: Bytes) -> Result<Bytes, DispatchError> {
        Ok(body)
    }
}

fn plan(prefill: Option<&str>, routed: bool, conditional: bool) -> Plan {
    Plan {
        prefill: prefill.map(target),
        decode: target("d0"),
        encode: None,
        routed,
        conditional,
    }
}

fn target(n: &str) -> Target {
    Target {
        name: n.into(),
        address: format!("{n}:1"),
        revision: None,
        dp_rank: None,
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
    let out = run(
        fake,
        plan,
        &req,
        &raw,
        &HeaderMap::new(),
        &rules,
        &mut trace,
    )
    .await
    .unwrap();
    (out, trace, raw)
}

#[tokio::test]
async fn split_plan_sends_prefill_then_decode_with_the_handoff() {
    let fake = scripted(200, 200);
    let (out, trace, _) = go(&fake, &plan(Some("p0"), false, false), 1).await;
    assert!(matches!(out, Outcome::Final(r) if r.body == "decoded"));
    assert_eq!(trace.probe, None);
    let legs = fake.legs.lock().unwrap();
    assert_eq!(
        legs.iter()
            .map(|l| (l.phase, l.target.name.as_str()))
            .collect::<Vec<_>>(),
        [(Phase::Prefill, "p0"), (Phase::Decode, "d0")]
    );
    assert!(
        legs.iter().all(|l| l.headers.is_empty()),
        "no profile header"
    );
    let decode: serde_json::Value = serde_json::from_slice(&legs[1].body).unwrap();
    assert_eq!(decode["kv_transfer_params"]["remote_engine_id"], "p0");
    assert_eq!(decode["max_tokens"], 9);
}

#[tokio::test]
async fn failed_prefill_sends_no_decode_and_n_above_one_runs_aggregated() {
    let fake = scripted(409, 200);
    let (out, _, _) = go(&fake, &plan(Some("p0"), false, false), 1).await;
    assert!(
        matches!(out, Outcome::Rejected { phase: Phase::Prefill, response: r, .. } if r.status == 409)
    );
    assert_eq!(fake.legs.lock().unwrap().len(), 1);

    let fake = scripted(200, 200);
    let (_, _, raw) = go(&fake, &plan(Some("p0"), true, true), 2).await;
    let legs = fake.legs.lock().unwrap();
    assert_eq!(legs.len(), 1, "n > 1: no probe, no prefill");
    assert_eq!(
        (legs[0].phase, legs[0].body.clone()),
        (Phase::Aggregated, raw)
    );
}

fn leg_view(l: &PhaseRequest) -> (Phase, String, Option<String>, bool) {
    let h = |n: &str| l.headers.get(n).map(|v| v.to_str().unwrap().to_string());
    (
        l.phase,
        l.target.name.clone(),
        h(headers::EPP_PROFILE),
        h(headers::PREFER).as_deref() == Some("if-available"),
    )
}

#[tokio::test]
async fn conditional_decode_412_goes_on_with_prefill_then_decode() {
    let fake = scripted(200, 412);
    let (out, trace, raw) = go(&fake, &plan(Some("prefill-router"), true, true), 1).await;
    assert!(matches!(out, Outcome::Final(r) if r.body == "decoded"));
    assert_eq!(trace.probe, Some(Probe::Deferred));
    assert!(trace.probe_headers.is_some() && trace.prefill_headers.is_some());
    let legs = fake.legs.lock().unwrap();
    let s = |x: &str| Some(x.to_string());
    assert_eq!(
        legs.iter().map(leg_view).collect::<Vec<_>>(),
        [
            (Phase::Decode, "d0".into(), s("decode"), true),
            (Phase::Prefill, "prefill-router".into(), s("prefill"), false),
            (Phase::Decode, "d0".into(), s("decode"), false),
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
        let (out, trace, _) = go(&fake, &plan(Some("p0"), true, true), 1).await;
        assert!(matches!(out, Outcome::Final(r) if r.status == status && r.body == "probe"));
        assert_eq!(trace.probe, Some(probe));
        assert_eq!(
            fake.legs.lock().unwrap().len(),
            1,
            "{status}: no prefill leg"
        );
    }
    // Not conditional, or no prefill target: no probe at all.
    let fake = scripted(200, 412);
    let (_, trace, _) = go(&fake, &plan(None, true, true), 1).await;
    assert_eq!(trace.probe, None);
    assert_eq!(
        fake.legs
            .lock()
            .unwrap()
            .iter()
            .map(leg_view)
            .collect::<Vec<_>>(),
        [(Phase::Aggregated, "d0".into(), Some("decode".into()), false)]
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
    let (_, trace, _) = go(&fake, &plan(Some("p0"), true, true), 1).await;
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
    let (_, trace, _) = go(&fake, &plan(Some("p0"), true, true), 1).await;
    assert!(trace.captured.is_empty());
    assert!(fake
        .legs
        .lock()
        .unwrap()
        .iter()
        .all(|l| revision(l).is_none()));
}
