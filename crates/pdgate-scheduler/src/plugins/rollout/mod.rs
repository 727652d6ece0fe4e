//! `disaggregatedset-rollout-screener` — gates traffic to the revisions of a disaggregated set
//! that can serve it end to end, split by weight during a rollout (design.md §5.1).
//!
//! - **Type:** `disaggregatedset-rollout-screener`
//! - **Extension points:** Screener, ResponseHeader (stamps the served revision),
//!   RequestRejected (stamps the chosen revision on a rejection after screening, e.g. the
//!   412 of a conditional-decode miss), MetricsSource.
//! - **Parameters** (defaults):
//!   - `scope.labelSelector` `""` — a Kubernetes label-selector string (`k=v`, `k==v`,
//!     `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, comma = AND); empty = every
//!     endpoint. Malformed → load error naming `scope.labelSelector`.
//!   - `revisionGating.mode` `max-role` — `max-role` | `sum` | `disabled`.
//!   - `revisionGating.requiredRoles` `[prefill, decode]` — non-empty, of `prefill`,
//!     `decode`, `encode`, no duplicates.
//!   - `revisionGating.revisionHeaderName` `x-llm-d-disagg-revision` (lowercased).
//!   - `revisionGating.revisionLabelKey` `disaggregatedset.x-k8s.io/revision`.
//!   - `revisionGating.roleLabelKey` `disaggregatedset.x-k8s.io/role`.
//! - **Inputs:** the whole endpoint snapshot (`RequestCtx::snapshot`, Ready or not); the
//!   request headers `revisionHeaderName` (strict revision) and
//!   `x-llm-d-revision-decision-id` (shared draw of a fanned-out request); values trimmed.
//! - **Outputs:**
//!   - Counted endpoints: in scope, Ready, not terminating, with a revision label and a role
//!     label naming a required role. A revision is *covered* when every required role has
//!     at least one counted endpoint in it; only covered revisions get traffic.
//!   - Shares ([`shares::shares`]): `max-role` — the dominant role is the required role with
//!     the most counted endpoints over all covered revisions (ties: first in
//!     `requiredRoles`), a revision's weight its count of that role; `sum` — its count over
//!     all required roles. A{P2,D9}, B{P1,D1}: `max-role` 90/10, `sum` 84.6/15.4.
//!   - Per request: a weighted random draw over the covered revisions (ordered by name);
//!     with the revision header, strictly that revision (no draw); with a decision id, the
//!     revision drawn for that id earlier (while still covered; else a new draw, remembered;
//!     up to 65,536 ids, least recently used evicted). The candidates are narrowed to the
//!     endpoints in scope whose revision label equals the choice, and the choice is stored
//!     under [`REVISION_STATE_KEY`] in the request state.
//!   - Fail closed (`Err` → 503 `Rejection::Screened`): no covered revision ("no covered
//!     revision (required roles prefill, decode)"); a strict header naming a revision that
//!     is not covered ("strict revision `x` (header x-llm-d-disagg-revision) is not
//!     covered"); the chosen revision has no candidate serving the model.
//!   - `disabled`: no draw and no narrowing; a revision header is still applied strictly
//!     (covered = every required role has a counted endpoint).
//!   - ResponseHeader: `revisionHeaderName: <revision label of the answering endpoint>` on
//!     every phase response head (2xx or not) when that endpoint has the label.
//!     RequestRejected: `revisionHeaderName: <chosen revision>`.
//!   - Metrics: gauge `pdgate_revision_share{revision}` per covered revision (none in
//!     `disabled` mode; a revision that is no longer covered has no series), counters
//!     `pdgate_revision_strict_misses_total` and `pdgate_revision_decisions_total{revision}`.
//!   - Bounds: decision ids ≤ 65,536 (LRU); decision counts only for revisions that still
//!     have an endpoint in the snapshot (a revision that left loses its count and series).
//! - **Limitations:** shares are recomputed on the first request after an endpoint change
//!   (cached by `Snapshot::version`, which must grow with every rebuild), so the gauges
//!   describe the last snapshot a request was screened over. The draw is per request, not
//!   per session. Endpoints count once per name (a DP rank counts as an endpoint). Role
//!   values are compared exactly (`prefill-decode` is not counted as either). A blank
//!   revision header counts as absent. Decision ids are per router instance: separate
//!   routers share no draws. Two instances of this plugin share the request-state key.
//!   Source: llm-d disaggregatedset rollout screener; design.md §5.1.

mod decisions;
pub mod selector;
pub mod shares;

use crate::endpoint::{Endpoint, Snapshot};
use crate::error::Rejection;
use crate::plugin::{
    Candidates, MetricKind, MetricsSource, PluginMetric, RequestRejected, ResponseCtx,
    ResponseHeader, Screener,
};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::plugins::label_selector_filter::{LabelSelector, Operator, Requirement};
use crate::request::RequestCtx;
use arc_swap::ArcSwapOption;
use lru::LruCache;
use parking_lot::Mutex;
use pdgate_api::headers::{DISAGG_REVISION, REVISION_DECISION_ID};
use pdgate_api::labels::{DS_REVISION, DS_ROLE};
use rand::Rng;
use selector::Selector;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
pub use shares::{GatedRole, Gating, Mode};
use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "disaggregatedset-rollout-screener",
    stage: Stage::Consumer,
    build,
};

/// [`crate::request::RequestState`] key of the chosen revision (a `String`).
pub const REVISION_STATE_KEY: &str = "disaggregatedset-rollout-screener/revision";

/// How many decision ids are remembered (least recently used evicted).
pub const DECISION_CAPACITY: usize = 65_536;

/// Parameters (design.md §5.1).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// Which endpoints belong to the set.
    pub scope: Scope,
    /// How revisions are gated.
    pub revision_gating: RevisionGating,
}

/// `scope`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Scope {
    /// Kubernetes label-selector string; empty = every endpoint.
    pub label_selector: String,
}

/// `revisionGating`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct RevisionGating {
    /// Split rule.
    pub mode: Mode,
    /// Roles a covered revision has.
    pub required_roles: Vec<GatedRole>,
    /// Request/response header carrying the revision.
    pub revision_header_name: String,
    /// Endpoint label carrying the revision.
    pub revision_label_key: String,
    /// Endpoint label carrying the role.
    pub role_label_key: String,
}

impl Default for RevisionGating {
    fn default() -> Self {
        RevisionGating {
            mode: Mode::MaxRole,
            required_roles: vec![GatedRole::Prefill, GatedRole::Decode],
            revision_header_name: DISAGG_REVISION.to_string(),
            revision_label_key: DS_REVISION.to_string(),
            role_label_key: DS_ROLE.to_string(),
        }
    }
}

/// Shares computed for one snapshot version.
struct View {
    version: u64,
    shares: Vec<(String, f64)>,
}

impl View {
    fn covers(&self, revision: &str) -> bool {
        self.shares.iter().any(|(r, _)| r == revision)
    }
}

/// The screener and its hooks.
pub struct RolloutScreener {
    gating: Gating,
    header: String,
    /// The shares of the last snapshot screened; read without a lock on the per-request path
    /// (a stale version is recomputed and swapped in; two threads may both compute it).
    view: ArcSwapOption<View>,
    decisions: Mutex<LruCache<String, String>>,
    strict_misses: AtomicU64,
    chosen: decisions::DecisionCounts,
}

fn check_label_key(field: &str, key: &str) -> Result<(), PluginError> {
    let probe = LabelSelector {
        match_labels: BTreeMap::new(),
        match_expressions: vec![Requirement {
            key: key.to_string(),
            operator: Operator::Exists,
            values: vec![],
        }],
    };
    probe
        .validate()
        .map_err(|e| PluginError::invalid(field, e.message))
}

/// An HTTP field name (RFC 9110 token).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
}

impl RolloutScreener {
    /// A screener for `p`; the header name is lowercased in place (effective parameters).
    ///
    /// Errors: naming `scope.labelSelector`, `revisionGating.requiredRoles`,
    /// `revisionGating.revisionHeaderName`, `revisionGating.revisionLabelKey` or
    /// `revisionGating.roleLabelKey`.
    pub fn new(p: &mut Params) -> Result<Self, PluginError> {
        let scope = Selector::parse(&p.scope.label_selector).map_err(|m| {
            PluginError::invalid(
                "scope.labelSelector",
                format!("invalid label selector {:?}: {m}", p.scope.label_selector),
            )
        })?;
        let g = &mut p.revision_gating;
        if g.required_roles.is_empty() {
            return Err(PluginError::invalid(
                "revisionGating.requiredRoles",
                "must name at least one role (prefill, decode, encode)",
            ));
        }
        for (i, r) in g.required_roles.iter().enumerate() {
            if g.required_roles[..i].contains(r) {
                return Err(PluginError::invalid(
                    "revisionGating.requiredRoles",
                    format!("role `{}` is listed twice", r.as_str()),
                ));
            }
        }
        g.revision_header_name = g.revision_header_name.to_ascii_lowercase();
        if !is_token(&g.revision_header_name) {
            return Err(PluginError::invalid(
                "revisionGating.revisionHeaderName",
                format!("`{}` is not a valid header name", g.revision_header_name),
            ));
        }
        check_label_key("revisionGating.revisionLabelKey", &g.revision_label_key)?;
        check_label_key("revisionGating.roleLabelKey", &g.role_label_key)?;
        let capacity = NonZeroUsize::new(DECISION_CAPACITY).expect("non-zero");
        Ok(RolloutScreener {
            gating: Gating {
                scope,
                mode: g.mode,
                required_roles: g.required_roles.clone(),
                revision_label_key: g.revision_label_key.clone(),
                role_label_key: g.role_label_key.clone(),
            },
            header: g.revision_header_name.clone(),
            view: ArcSwapOption::empty(),
            decisions: Mutex::new(LruCache::new(capacity)),
            strict_misses: AtomicU64::new(0),
            chosen: decisions::DecisionCounts::default(),
        })
    }

    /// The validated gating rules.
    pub fn gating(&self) -> &Gating {
        &self.gating
    }

    /// The shares computed for the last snapshot screened (empty before the first request).
    pub fn current_shares(&self) -> Vec<(String, f64)> {
        self.view
            .load()
            .as_ref()
            .map(|v| v.shares.clone())
            .unwrap_or_default()
    }

    /// The shares of `snap`, recomputed only when its version differs from the cached one.
    fn view(&self, snap: &Snapshot) -> Arc<View> {
        if let Some(v) = self.view.load_full().filter(|v| v.version == snap.version) {
            return v;
        }
        let eps: Vec<&Endpoint> = snap.endpoints.iter().map(|e| &e.endpoint).collect();
        // Decision counts follow the revisions that still have endpoints (bounded state).
        self.chosen.retain(|rev| {
            eps.iter().any(|e| {
                e.labels
                    .get(&self.gating.revision_label_key)
                    .map(String::as_str)
                    == Some(rev)
            })
        });
        let v = Arc::new(View {
            version: snap.version,
            shares: shares::shares(&eps, &self.gating),
        });
        self.view.store(Some(v.clone()));
        v
    }

    fn no_covered(&self) -> String {
        let roles: Vec<&str> = self
            .gating
            .required_roles
            .iter()
            .map(|r| r.as_str())
            .collect();
        format!("no covered revision (required roles {})", roles.join(", "))
    }

    /// A weighted draw, shared by the requests carrying the same decision id.
    fn draw(&self, ctx: &RequestCtx<'_>, view: &View) -> Result<String, String> {
        let fresh = || {
            let u = rand::rng().random::<f64>();
            shares::draw(&view.shares, u)
                .map(str::to_string)
                .ok_or_else(|| self.no_covered())
        };
        let Some(id) = header(ctx, REVISION_DECISION_ID) else {
            return fresh();
        };
        // Held across the draw so that concurrent fan-out requests agree.
        let mut ids = self.decisions.lock();
        if let Some(r) = ids.get(id).filter(|r| view.covers(r)) {
            return Ok(r.clone());
        }
        let r = fresh()?;
        ids.put(id.to_string(), r.clone());
        Ok(r)
    }
}

/// The trimmed, non-blank value of header `name`.
fn header<'a>(ctx: &RequestCtx<'a>, name: &str) -> Option<&'a str> {
    let v = ctx.req.headers.header(name)?.trim();
    (!v.is_empty()).then_some(v)
}

impl Screener for RolloutScreener {
    fn screen(&self, ctx: &RequestCtx<'_>, candidates: &mut Candidates<'_>) -> Result<(), String> {
        let view = self.view(ctx.snapshot());
        // A client pin fixes the revision like a strict header (design.md §5.3).
        let pinned = ctx.pins().revision.as_deref();
        let strict = header(ctx, &self.header)
            .map(|v| (v, format!("header {}", self.header)))
            .or_else(|| pinned.map(|v| (v, "the pinned endpoint".to_string())));
        let chosen = match strict {
            Some((strict, _)) if view.covers(strict) => strict.to_string(),
            Some((strict, from)) => {
                self.strict_misses.fetch_add(1, Ordering::Relaxed);
                return Err(format!(
                    "strict revision `{strict}` ({from}) is not covered"
                ));
            }
            None if self.gating.mode == Mode::Disabled => return Ok(()),
            None => self.draw(ctx, &view)?,
        };
        candidates.retain(|e| self.gating.revision_in_scope(&e.endpoint) == Some(&chosen));
        if candidates.is_empty() {
            return Err(format!(
                "revision `{chosen}` has no schedulable endpoint serving model `{}`",
                ctx.model()
            ));
        }
        self.chosen.count(&chosen);
        ctx.state().set(REVISION_STATE_KEY, chosen);
        Ok(())
    }
}

impl ResponseHeader for RolloutScreener {
    fn response_header(&self, ctx: &ResponseCtx<'_>, out: &mut Vec<(String, String)>) {
        if let Some(rev) = ctx
            .endpoint
            .endpoint
            .labels
            .get(&self.gating.revision_label_key)
        {
            out.push((self.header.clone(), rev.clone()));
        }
    }
}

impl RequestRejected for RolloutScreener {
    fn request_rejected(
        &self,
        ctx: &RequestCtx<'_>,
        _rejection: &Rejection,
        out: &mut Vec<(String, String)>,
    ) {
        if let Some(rev) = ctx.state().get::<String>(REVISION_STATE_KEY) {
            out.push((self.header.clone(), rev));
        }
    }
}

impl MetricsSource for RolloutScreener {
    fn collect(&self, snapshot: &Snapshot, out: &mut Vec<PluginMetric>) {
        if self.gating.mode != Mode::Disabled {
            for (rev, share) in self.view(snapshot).shares.clone() {
                out.push(PluginMetric {
                    name: "pdgate_revision_share",
                    help: "Current traffic share (0..1) of each covered revision.",
                    kind: MetricKind::Gauge,
                    labels: vec![("revision", rev)],
                    value: share,
                });
            }
        }
        out.push(PluginMetric {
            name: "pdgate_revision_strict_misses_total",
            help: "Requests whose revision header named a revision that is not covered.",
            kind: MetricKind::Counter,
            labels: vec![],
            value: self.strict_misses.load(Ordering::Relaxed) as f64,
        });
        for (rev, n) in self.chosen.snapshot() {
            out.push(PluginMetric {
                name: "pdgate_revision_decisions_total",
                help: "Requests screened to each revision (drawn or strict).",
                kind: MetricKind::Counter,
                labels: vec![("revision", rev)],
                value: n as f64,
            });
        }
    }
}

fn build(params: Option<&Value>, _: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let mut p: Params = decode(params)?;
    let s = Arc::new(RolloutScreener::new(&mut p)?);
    Ok(Built {
        params: effective(&p),
        screener: Some(s.clone()),
        response_header: Some(s.clone()),
        request_rejected: Some(s.clone()),
        metrics: Some(s),
        ..Built::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(yaml: &str) -> Result<Params, PluginError> {
        let v: Value = serde_yaml_ng::from_str(yaml).unwrap();
        let mut p: Params = decode(Some(&v))?;
        RolloutScreener::new(&mut p)?;
        Ok(p)
    }

    #[test]
    fn defaults_and_effective_parameters() {
        let mut p: Params = decode(None).unwrap();
        assert_eq!(p, Params::default());
        RolloutScreener::new(&mut p).unwrap();
        let eff = serde_yaml_ng::to_string(&effective(&p)).unwrap();
        assert_eq!(
            eff,
            "scope:\n  labelSelector: ''\nrevisionGating:\n  mode: max-role\n  requiredRoles:\n  \
             - prefill\n  - decode\n  revisionHeaderName: x-llm-d-disagg-revision\n  \
             revisionLabelKey: disaggregatedset.x-k8s.io/revision\n  \
             roleLabelKey: disaggregatedset.x-k8s.io/role\n"
        );
        let p = params(
            "revisionGating:\n  mode: sum\n  requiredRoles: [encode, decode]\n  \
             revisionHeaderName: X-Rev\n",
        )
        .unwrap();
        assert_eq!(p.revision_gating.mode, Mode::Sum);
        assert_eq!(p.revision_gating.revision_header_name, "x-rev");
        assert_eq!(
            p.revision_gating.required_roles,
            [GatedRole::Encode, GatedRole::Decode]
        );
    }

    #[test]
    fn bad_parameters_name_their_field() {
        let e = params("revisionGating:\n  bogus: 1\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("revisionGating.bogus"));
        let e = params("revisionGating:\n  mode: half\n").unwrap_err();
        assert_eq!(e.path.as_deref(), Some("revisionGating.mode"));
        assert!(
            e.message.contains("unknown variant `half`"),
            "{}",
            e.message
        );
        let e = params("revisionGating:\n  requiredRoles: [prefill, gpu]\n").unwrap_err();
        assert!(e
            .path
            .as_deref()
            .unwrap()
            .starts_with("revisionGating.requiredRoles"));
        let e = params("revisionGating:\n  requiredRoles: []\n").unwrap_err();
        assert_eq!(e.path.as_deref(), Some("revisionGating.requiredRoles"));
        assert_eq!(
            e.message,
            "must name at least one role (prefill, decode, encode)"
        );
        let e = params("revisionGating:\n  requiredRoles: [decode, decode]\n").unwrap_err();
        assert_eq!(e.message, "role `decode` is listed twice");
        let e = params("scope:\n  labelSelector: 'a in (b'\n").unwrap_err();
        assert_eq!(e.path.as_deref(), Some("scope.labelSelector"));
        assert_eq!(
            e.message,
            "invalid label selector \"a in (b\": expected `,` or `)` in `a in (…)`, found the end"
        );
        let e = params("revisionGating:\n  revisionHeaderName: 'x rev'\n").unwrap_err();
        assert_eq!(e.path.as_deref(), Some("revisionGating.revisionHeaderName"));
        let e = params("revisionGating:\n  roleLabelKey: ''\n").unwrap_err();
        assert_eq!(e.path.as_deref(), Some("revisionGating.roleLabelKey"));
        let e = params("scope:\n  selector: x\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("scope.selector"));
    }
}
