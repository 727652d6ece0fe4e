//! The extension points found by the framework: screeners (intersected, 503), and the
//! ResponseHeader, RequestRejected (opt-in) and RequestAbandoned hooks, with stub plugins
//! registered through `Scheduler::from_yaml_with_plugins`.

mod common;

use common::{ep, snapshot};
use pdgate_api::PromptInput;
use pdgate_scheduler::plugin::{
    AbandonedCtx, Candidates, RequestAbandoned, RequestRejected, ResponseCtx, ResponseHeader,
    Screener,
};
use pdgate_scheduler::registry::{BuildCtx, Built, PluginError, PluginType, Stage};
use pdgate_scheduler::{
    Rejection, RequestCtx, RequestHeaders, Scheduler, SchedulingRequest, DEFAULT_CONFIG_YAML,
};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Keeps endpoints whose name contains the `x-keep` header's value; stores the value.
struct KeepScreener;
impl Screener for KeepScreener {
    fn screen(&self, ctx: &RequestCtx<'_>, c: &mut Candidates<'_>) -> Result<(), String> {
        match ctx.req.headers.header("x-keep") {
            Some("refuse") => Err("refused by test".into()),
            Some(v) => {
                ctx.state().set("keep", v.to_string());
                c.retain(|e| e.endpoint.name.contains(v));
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// Drops endpoints whose name ends in `2`.
struct NoTwoScreener;
impl Screener for NoTwoScreener {
    fn screen(&self, _: &RequestCtx<'_>, c: &mut Candidates<'_>) -> Result<(), String> {
        c.retain(|e| !e.endpoint.name.ends_with('2'));
        Ok(())
    }
}

thread_local! {
    /// Abandonments seen on this test's thread (tests run in parallel; hooks run on the
    /// thread that drops the booking).
    static ABANDONED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Stamps the screener's kept value on rejections and responses; counts abandonments.
struct Stamp;
impl RequestRejected for Stamp {
    fn request_rejected(
        &self,
        ctx: &RequestCtx<'_>,
        r: &Rejection,
        out: &mut Vec<(String, String)>,
    ) {
        let kept = ctx.state().get::<String>("keep").unwrap_or_default();
        out.push((
            "x-test-rejected".into(),
            format!("{kept}:{}", matches!(r, Rejection::DecodeDeferred { .. })),
        ));
    }
}
impl ResponseHeader for Stamp {
    fn response_header(&self, ctx: &ResponseCtx<'_>, out: &mut Vec<(String, String)>) {
        out.push((
            "x-test-served".into(),
            format!("{}:{}", ctx.endpoint.endpoint.name, ctx.status),
        ));
    }
}
impl RequestAbandoned for Stamp {
    fn request_abandoned(&self, _: &AbandonedCtx<'_>) {
        ABANDONED.with(|a| a.set(a.get() + 1));
    }
}

fn keep(_: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    Ok(Built {
        screener: Some(Arc::new(KeepScreener)),
        ..Built::default()
    })
}
fn no_two(_: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    Ok(Built {
        screener: Some(Arc::new(NoTwoScreener)),
        ..Built::default()
    })
}
fn stamp(_: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let s = Arc::new(Stamp);
    Ok(Built {
        request_rejected: Some(s.clone()),
        response_header: Some(s.clone()),
        request_abandoned: Some(s),
        ..Built::default()
    })
}

const EXTRA: &[PluginType] = &[
    PluginType {
        name: "keep-screener",
        stage: Stage::Consumer,
        build: keep,
    },
    PluginType {
        name: "no-two-screener",
        stage: Stage::Consumer,
        build: no_two,
    },
    PluginType {
        name: "stamp",
        stage: Stage::Consumer,
        build: stamp,
    },
];

fn sched(with_stamp: bool) -> Scheduler {
    let mut yaml = DEFAULT_CONFIG_YAML.replacen(
        "\nplugins:\n",
        "\nplugins:\n- type: keep-screener\n- type: no-two-screener\n",
        1,
    );
    if with_stamp {
        yaml = yaml.replacen("\nplugins:\n", "\nplugins:\n- type: stamp\n", 1);
    }
    assert!(yaml.contains("keep-screener"));
    Scheduler::from_yaml_with_plugins(&yaml, "hooks", EXTRA).unwrap()
}

fn request<'a>(
    prompt: &'a PromptInput,
    h: &'a dyn RequestHeaders,
    conditional: bool,
) -> SchedulingRequest<'a> {
    SchedulingRequest {
        conditional,
        headers: h,
        ..SchedulingRequest::new("r", "m", prompt)
    }
}

#[test]
fn screeners_intersect_and_an_empty_or_refused_screen_is_503_without_hooks() {
    let s = sched(true);
    let eps = [
        ep("d-a1", Some("decode")),
        ep("d-a2", Some("decode")),
        ep("d-b1", Some("decode")),
    ];
    let snap = snapshot(&eps);
    let prompt = PromptInput::Tokens((0..64).collect());
    // keep "a" ∩ not "…2" = {d-a1}, every time.
    for _ in 0..20 {
        let r = s
            .schedule(&request(&prompt, &[("X-Keep", "a")], false), &snap)
            .unwrap();
        assert_eq!(r.decode.endpoint.endpoint.name, "d-a1");
    }
    // keep "a2" ∩ not "…2" = {} → 503 naming the screener that emptied it; no hook headers.
    let e = s
        .schedule(&request(&prompt, &[("x-keep", "a2")], false), &snap)
        .unwrap_err();
    assert_eq!(
        e.reason,
        Rejection::Screened {
            reason: "screener `no-two-screener` left no endpoint".into()
        }
    );
    assert!(e.headers.is_empty());
    let e = s
        .schedule(&request(&prompt, &[("x-keep", "refuse")], false), &snap)
        .unwrap_err();
    assert_eq!(
        e.reason,
        Rejection::Screened {
            reason: "refused by test".into()
        }
    );
    assert!(e.headers.is_empty());
    assert!(eps.iter().all(|e| e.load.in_flight() == 0));
}

#[test]
fn rejected_hook_stamps_a_412_only_for_plugins_that_implement_it() {
    let eps = [ep("p-a1", Some("prefill")), ep("d-a1", Some("decode"))];
    let snap = snapshot(&eps);
    let prompt = PromptInput::Tokens((0..64).collect());
    let h = &[("x-keep", "a")];
    let e = sched(true)
        .schedule(&request(&prompt, h, true), &snap)
        .unwrap_err();
    assert!(
        matches!(e.reason, Rejection::DecodeDeferred { .. }),
        "{e:?}"
    );
    assert_eq!(
        e.headers,
        [("x-test-rejected".to_string(), "a:true".to_string())]
    );
    // Same config without the hook plugin: the same 412, nothing stamped.
    let e = sched(false)
        .schedule(&request(&prompt, h, true), &snap)
        .unwrap_err();
    assert!(matches!(e.reason, Rejection::DecodeDeferred { .. }));
    assert!(e.headers.is_empty());
}

#[test]
fn response_header_stamps_and_abandoned_fires_only_for_uncompleted_bookings() {
    let s = sched(true);
    let eps = [ep("p-a1", Some("prefill")), ep("d-a1", Some("decode"))];
    let snap = snapshot(&eps);
    let prompt = PromptInput::Tokens((0..64).collect());
    let before = ABANDONED.with(|a| a.get());
    let mut r = s.schedule(&request(&prompt, &[], false), &snap).unwrap();
    let pre = r.prefill.as_mut().expect("split");
    assert_eq!(
        s.response_received(pre, 200),
        [("x-test-served".to_string(), "p-a1:200".to_string())]
    );
    pre.guard.complete();
    assert_eq!(
        s.response_received(&r.decode, 502),
        [("x-test-served".to_string(), "d-a1:502".to_string())]
    );
    // The prefill completed; the decode did not (e.g. client disconnect): one abandonment.
    drop(r);
    assert_eq!(ABANDONED.with(|a| a.get()) - before, 1);
    assert!(eps.iter().all(|e| e.load.in_flight() == 0));
}
