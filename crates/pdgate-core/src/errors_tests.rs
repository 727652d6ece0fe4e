//! Unit tests of `errors.rs`: the one status mapping (design.md §5.5), as a table.

use super::*;
use pdgate_api::{ApiKind, InferenceRequest, Phase};
use pdgate_coordinator::{DispatchError, FailureKind};

fn leg(kind: FailureKind) -> ApiError {
    ApiError::Pipeline(PipelineError::Dispatch {
        phase: Phase::Decode,
        source: DispatchError::new(kind, "e0", "detail"),
    })
}

fn rejected(r: Rejection) -> ApiError {
    ApiError::Rejected(r.into())
}

#[test]
fn every_error_has_its_status() {
    let bad_json = InferenceRequest::parse(ApiKind::Completions, b"{").unwrap_err();
    let table: Vec<(ApiError, u16)> = vec![
        (ApiError::InvalidRequest(bad_json), 400),
        (
            ApiError::InvalidHeader {
                header: "x-dp-rank",
                reason: "bad".into(),
            },
            400,
        ),
        (ApiError::BodyRead("reset".into()), 400),
        (ApiError::ModelNotFound("m".into()), 404),
        (
            ApiError::NoRoute {
                method: "GET".into(),
                path: "/x".into(),
            },
            404,
        ),
        (
            ApiError::MethodNotAllowed {
                method: "PUT".into(),
                path: "/v1/completions".into(),
            },
            405,
        ),
        (ApiError::BodyTooLarge { limit: 10 }, 413),
        (rejected(Rejection::NoEndpoints), 503),
        (
            rejected(Rejection::NoEndpointForModel { model: "m".into() }),
            503,
        ),
        (
            rejected(Rejection::Screened {
                reason: "no covered revision".into(),
            }),
            503,
        ),
        (
            rejected(Rejection::Saturated {
                profile: "decode".into(),
            }),
            429,
        ),
        (
            rejected(Rejection::NotAdmitted {
                plugin: "probabilistic-admitter".into(),
                reason: "rejected".into(),
            }),
            429,
        ),
        (rejected(Rejection::UnknownProfile("x".into())), 400),
        (
            rejected(Rejection::DecodeDeferred {
                reason: "miss".into(),
            }),
            412,
        ),
        (
            rejected(Rejection::Pin {
                kind: pdgate_scheduler::PinFault::Unavailable,
                reason: "not_ready",
                message: "pinned endpoint not Ready".into(),
            }),
            503,
        ),
        (leg(FailureKind::ConnectRefused), 502),
        (leg(FailureKind::ConnectTimeout), 504),
        (leg(FailureKind::Reset), 502),
        (leg(FailureKind::HeadTimeout), 504),
        (leg(FailureKind::Deadline), 504),
        (leg(FailureKind::BodyTimeout), 504),
        (leg(FailureKind::BodyBroken), 502),
        (leg(FailureKind::Status(503)), 502),
        (leg(FailureKind::Status(500)), 502),
        (leg(FailureKind::BreakerOpen), 503),
        (leg(FailureKind::Unscheduled(429)), 429),
        (
            ApiError::Pipeline(PipelineError::PrefillUnavailable {
                reason: "none Ready".into(),
            }),
            503,
        ),
        (
            ApiError::Pipeline(PipelineError::BadPrefillResponse {
                endpoint: "p0".into(),
                reason: "no kv_transfer_params".into(),
            }),
            502,
        ),
    ];
    for (error, status) in table {
        assert_eq!(error.status().as_u16(), status, "{error}");
    }
}

#[test]
fn a_failed_leg_names_its_phase_endpoint_and_cause() {
    assert_eq!(
        leg(FailureKind::ConnectTimeout).to_string(),
        "decode leg failed: upstream e0 connect timed out: detail"
    );
    let e = DispatchError::new(FailureKind::Status(503), "e1", "answered 503: busy");
    assert_eq!(e.to_string(), "upstream e1 answered 503: busy");
}

#[test]
fn a_fallback_reason_header_is_visible_ascii_and_short() {
    let h =
        crate::errors::reason_header("upstream p0 answered 503: overloaded \u{e9}\u{4e2d}\n\r\0 x");
    assert_eq!(h, "upstream p0 answered 503: overloaded ????? x");
    let long = "x".repeat(500);
    let h = crate::errors::reason_header(&long);
    assert_eq!(h.len(), 203);
    assert!(h.to_str().unwrap().ends_with("x..."));
}
