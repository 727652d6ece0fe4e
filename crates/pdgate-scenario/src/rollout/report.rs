//! What the rollout observed, the per-step table and its rendering (pure: no I/O). The
//! checks, and the rule that attributes requests to steps, are in [`super::checks`].

use super::plan::Counts;
use super::publish::Discovery;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One request as the scenario saw it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Sent by the trickle (long, in flight across changes) rather than as step traffic.
    pub trickle: bool,
    /// Step index (0-based) of a step request; recomputed for trickle requests.
    pub step: usize,
    /// Sent, ms since the scenario started (step requests: when the step's traffic began).
    pub sent_ms: f64,
    /// Answered (body complete), ms since the start (step requests: when the step's traffic
    /// ended).
    pub answered_ms: f64,
    /// 2xx and no stream error.
    pub ok: bool,
    /// Status label (`"200"`, `"503"`, `"transport"`, …).
    pub status: String,
    /// Error body or message of a failure.
    pub error: Option<String>,
    /// `x-pdgate-prefill-revision`.
    pub prefill_revision: Option<String>,
    /// `x-pdgate-decode-revision`.
    pub decode_revision: Option<String>,
    /// `x-pdgate-pd-mode`.
    pub pd_mode: Option<String>,
}

/// When a step was published (its file written, or its first pod update sent) and when
/// each router held it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StepTiming {
    /// Published, ms since the start.
    pub write_ms: f64,
    /// Prefill router, decode router: first holding a list other than before the step (an
    /// intermediate one while a step's pod updates arrive; the step's own for a file), ms
    /// since the start; `None` when not within the apply timeout.
    pub changed: [Option<f64>; 2],
    /// Prefill router, decode router: holding the new endpoints, ms since the start; `None`
    /// when not within the apply timeout.
    pub applied: [Option<f64>; 2],
}

impl StepTiming {
    /// Both routers hold the step's list, ms after it was published.
    pub fn apply_ms(&self) -> Option<f64> {
        Some(self.applied[0]?.max(self.applied[1]?) - self.write_ms)
    }
}

/// Conditional-decode probe counts of the coordinator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Probes {
    /// Probes the decode router served (prefix cached there).
    pub served: u64,
    /// Probes deferred (412): prefill then decode followed.
    pub deferred: u64,
    /// Probes that failed otherwise.
    pub error: u64,
}

impl Probes {
    /// Counts since `earlier`.
    pub fn since(&self, earlier: &Probes) -> Probes {
        Probes {
            served: self.served - earlier.served,
            deferred: self.deferred - earlier.deferred,
            error: self.error - earlier.error,
        }
    }
}

/// Everything the scenario recorded.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// How the steps were published.
    pub discovery: Discovery,
    /// Ready counts per step.
    pub steps: Vec<Counts>,
    /// Per step.
    pub timings: Vec<StepTiming>,
    /// Per step: probes from the step's publication to the next (step and trickle traffic).
    pub probes: Vec<Probes>,
    /// Every request.
    pub outcomes: Vec<Outcome>,
    /// Σ over every simulator of its refused KV handoffs, by reason.
    pub handoff_rejections: BTreeMap<String, u64>,
    /// End of the scenario, ms since the start.
    pub end_ms: f64,
}

/// One row of the table.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepRow {
    /// Ready counts.
    pub counts: Counts,
    /// Max-role expectation of B's share; `None`: no covered revision.
    pub expected_b: Option<f64>,
    /// B's share of the step requests answered 2xx (by `x-pdgate-decode-revision`).
    pub measured_b: Option<f64>,
    /// Step requests.
    pub requests: usize,
    /// Trickle requests answered during the step's window.
    pub trickle: usize,
    /// Trickle requests in flight when the step was published.
    pub across: usize,
    /// Non-2xx (step and trickle requests of the step) by status.
    pub non_2xx: BTreeMap<String, usize>,
    /// Coordinator probes during the step's window.
    pub probes: Probes,
    /// Published → both routers hold the step's list, ms.
    pub apply_ms: Option<f64>,
    /// |prefill router − decode router| apply moments, ms.
    pub skew_ms: Option<f64>,
}

/// One acceptance check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What is checked.
    pub name: String,
    /// Whether it held.
    pub passed: bool,
    /// The evidence.
    pub detail: String,
}

/// The rollout's result: the table, the checks, totals.
#[derive(Debug, Clone, Default)]
pub struct RolloutReport {
    /// How the steps were published.
    pub discovery: Discovery,
    /// Per step.
    pub rows: Vec<StepRow>,
    /// Acceptance checks.
    pub checks: Vec<Check>,
    /// Step requests.
    pub step_requests: usize,
    /// Trickle requests.
    pub trickle_requests: usize,
    /// Distinct error messages of non-2xx answers, with counts.
    pub errors: BTreeMap<String, usize>,
    /// Σ refused KV handoffs over every simulator, by reason.
    pub handoff_rejections: BTreeMap<String, u64>,
    /// Scenario wall time, s.
    pub duration_s: f64,
}

impl RolloutReport {
    /// True when every check held.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// The checks that failed.
    pub fn failed(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| !c.passed).collect()
    }
}

/// The `error.message` of an OpenAI error body, else the body itself.
pub fn error_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.pointer("/error/message")?.as_str().map(str::to_string))
        .unwrap_or_else(|| body.to_string())
}

pub(crate) fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

impl RolloutReport {
    /// The per-step table (fixed-width columns), then the checks.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:>5}  {:>5}  {:>5}  {:>10}  {:>10}  {:>8}  {:>7}  {:>6}  {:<12}  {:>15}  {:>8}  {:>7}",
            "step",
            "A p/d",
            "B p/d",
            "expected B",
            "measured B",
            "requests",
            "trickle",
            "across",
            "non-2xx",
            "probes s/d/e",
            "apply ms",
            "skew ms"
        );
        for (k, r) in self.rows.iter().enumerate() {
            let c = r.counts;
            let step = format!(
                "{}{}",
                k + 1,
                if r.expected_b.is_none() { "*" } else { " " }
            );
            let non_2xx = if r.non_2xx.is_empty() {
                "-".to_string()
            } else {
                r.non_2xx
                    .iter()
                    .map(|(s, n)| format!("{s}×{n}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
            let _ = writeln!(
                s,
                "{:>5}  {:>5}  {:>5}  {:>10}  {:>10}  {:>8}  {:>7}  {:>6}  {:<12}  {:>15}  {:>8}  {:>7}",
                step,
                format!("{}/{}", c.a_prefill, c.a_decode),
                format!("{}/{}", c.b_prefill, c.b_decode),
                r.expected_b.map_or("uncovered".to_string(), pct),
                r.measured_b.map_or("-".to_string(), pct),
                r.requests,
                r.trickle,
                r.across,
                non_2xx,
                format!(
                    "{}/{}/{}",
                    r.probes.served, r.probes.deferred, r.probes.error
                ),
                ms(r.apply_ms),
                ms(r.skew_ms),
            );
        }
        let (published, apply) = match self.discovery {
            Discovery::File => (
                "its file was written",
                "file written -> both routers hold it",
            ),
            Discovery::Kubernetes => (
                "its pod updates began",
                "first pod update -> both routers hold the step's pod list",
            ),
        };
        let _ = writeln!(
            s,
            "* no covered revision. measured B: step requests answered 2xx, by x-pdgate-decode-revision.\n\
             trickle: long requests answered during the step; across: trickle requests in flight when\n\
             {published}. probes s/d/e: the coordinator's conditional-decode probes served by\n\
             the decode router / deferred (412, then prefill + decode) / failed (the 503s). apply ms:\n\
             {apply}; skew ms: between the two routers."
        );
        for (msg, n) in &self.errors {
            let _ = writeln!(s, "non-2xx: {n} × {msg}");
        }
        let _ = writeln!(
            s,
            "{} requests ({} step + {} trickle) in {:.1} s\n\nchecks:",
            self.step_requests + self.trickle_requests,
            self.step_requests,
            self.trickle_requests,
            self.duration_s
        );
        for c in &self.checks {
            let tag = if c.passed { "PASS" } else { "FAIL" };
            let _ = writeln!(s, "  [{tag}] {}: {}", c.name, c.detail);
        }
        s
    }
}
