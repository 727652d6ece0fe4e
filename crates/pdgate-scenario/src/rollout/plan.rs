//! The pure side of the rollout scenario: the steps, the max-role expectation (design.md
//! §5.1), the endpoints file written at each step and how many requests a step needs.

use pdgate_api::labels::{DS_NAME, DS_REVISION, DS_ROLE, ROLE};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Name of the disaggregated set (label `disaggregatedset.x-k8s.io/name`).
pub const SET_NAME: &str = "demo";
/// The two revisions, old then new.
pub const REVISIONS: [&str; 2] = ["a", "b"];
/// Prefill pods per revision.
pub const PREFILL_PODS: usize = 2;
/// Decode pods per revision.
pub const DECODE_PODS: usize = 6;

/// Ready counts of one step: revision A's prefill and decode pods, then revision B's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Ready prefill pods of A.
    pub a_prefill: usize,
    /// Ready decode pods of A.
    pub a_decode: usize,
    /// Ready prefill pods of B.
    pub b_prefill: usize,
    /// Ready decode pods of B.
    pub b_decode: usize,
}

/// Shorthand for [`Counts`] in the step table.
pub const fn counts(
    a_prefill: usize,
    a_decode: usize,
    b_prefill: usize,
    b_decode: usize,
) -> Counts {
    Counts {
        a_prefill,
        a_decode,
        b_prefill,
        b_decode,
    }
}

/// The default rollout: B's pods become Ready one by one while A's leave; step 8 has no
/// covered revision (A has lost its last prefill, B's prefills are not Ready), step 9 keeps
/// one A decode Ready while A is uncovered (it must get no traffic).
pub const DEFAULT_STEPS: [Counts; 10] = [
    counts(2, 6, 0, 0),
    counts(2, 6, 0, 1),
    counts(2, 6, 1, 1),
    counts(2, 5, 1, 2),
    counts(2, 4, 1, 3),
    counts(1, 3, 2, 4),
    counts(1, 2, 2, 5),
    counts(0, 0, 0, 6),
    counts(0, 1, 2, 6),
    counts(0, 0, 2, 6),
];

impl Counts {
    /// `(revision, [prefill, decode])` for A and B.
    pub fn per_revision(&self) -> [(&'static str, [usize; 2]); 2] {
        [
            (REVISIONS[0], [self.a_prefill, self.a_decode]),
            (REVISIONS[1], [self.b_prefill, self.b_decode]),
        ]
    }

    /// Ready count of `role` (`prefill`/`decode`) in `revision` (`a`/`b`).
    pub fn ready(&self, revision: &str, role: &str) -> usize {
        match (revision, role) {
            ("a", "prefill") => self.a_prefill,
            ("a", "decode") => self.a_decode,
            ("b", "prefill") => self.b_prefill,
            ("b", "decode") => self.b_decode,
            _ => 0,
        }
    }

    /// B's expected share of traffic under max-role; `None` when no revision is covered
    /// (every request must then fail closed).
    pub fn expected_b_share(&self) -> Option<f64> {
        let shares = max_role_shares(&self.per_revision());
        if shares.is_empty() {
            return None;
        }
        Some(
            shares
                .iter()
                .find(|(r, _)| r == REVISIONS[1])
                .map_or(0.0, |(_, s)| *s),
        )
    }
}

/// Max-role shares (design.md §5.1) with required roles `[prefill, decode]`: `revisions`
/// holds each revision's Ready `[prefill, decode]` counts. A revision is covered when both
/// counts are ≥ 1; the dominant role is the one with the most Ready endpoints over the covered
/// revisions (ties: prefill, the first required role); a covered revision's weight is its
/// count of that role. Returns the covered revisions, ordered by name, with shares summing
/// to 1; empty when none is covered.
pub fn max_role_shares(revisions: &[(&str, [usize; 2])]) -> Vec<(String, f64)> {
    let mut covered: Vec<(&str, [usize; 2])> = revisions
        .iter()
        .filter(|(_, c)| c.iter().all(|n| *n > 0))
        .copied()
        .collect();
    covered.sort_by(|a, b| a.0.cmp(b.0));
    let total = |role: usize| covered.iter().map(|(_, c)| c[role]).sum::<usize>();
    let dominant = if total(1) > total(0) { 1 } else { 0 };
    let sum = total(dominant) as f64;
    covered
        .iter()
        .map(|(r, c)| (r.to_string(), c[dominant] as f64 / sum))
        .collect()
}

/// Standard deviations the ±`tolerance` share check spans with [`requests_for`].
pub const SHARE_SIGMAS: f64 = 4.0;

/// Requests to send in a step whose expected B share is `p`: at least `base`, and enough
/// that `tolerance` (a fraction, 0.05 = 5 points) is [`SHARE_SIGMAS`] binomial standard
/// deviations, so that the share check fails by chance about once in 16,000 steps.
pub fn requests_for(base: usize, p: Option<f64>, tolerance: f64) -> usize {
    let Some(p) = p else { return base };
    let var = p * (1.0 - p);
    let needed = (SHARE_SIGMAS * SHARE_SIGMAS * var / (tolerance * tolerance)).ceil() as usize;
    base.max(needed)
}

/// One simulated pod of the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pod {
    /// `a` or `b`.
    pub revision: &'static str,
    /// `prefill` or `decode`.
    pub role: &'static str,
    /// Index within its revision and role.
    pub index: usize,
}

impl Pod {
    /// `<revision>-<role>-<index>`, e.g. `b-decode-3`.
    pub fn name(&self) -> String {
        format!("{}-{}-{}", self.revision, self.role, self.index)
    }

    /// The pod's labels: both role labels, the revision and the set name.
    pub fn labels(&self) -> BTreeMap<String, String> {
        [
            (ROLE, self.role),
            (DS_ROLE, self.role),
            (DS_REVISION, self.revision),
            (DS_NAME, SET_NAME),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }
}

/// Every pod: A's prefill, A's decode, B's prefill, B's decode.
pub fn pods() -> Vec<Pod> {
    let mut out = Vec::new();
    for revision in REVISIONS {
        for (role, n) in [("prefill", PREFILL_PODS), ("decode", DECODE_PODS)] {
            out.extend((0..n).map(|index| Pod {
                revision,
                role,
                index,
            }));
        }
    }
    out
}

/// How a pod appears in the endpoints file at one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// Not in the file.
    Absent,
    /// Listed, Ready.
    Ready,
    /// Listed with `ready: false`.
    NotReady,
    /// Listed with `terminating: true`.
    Terminating,
}

/// The file's content at each step. The first pods of each (revision, role) are the Ready
/// ones. A pod of A that leaves is listed for one step as `ready: false` (prefill) or
/// `terminating: true` (decode), then removed. B's pods are absent at the first step, then
/// listed `ready: false` until Ready (created, not yet Ready), and `ready: false` again when
/// they lose readiness. So every way out of rotation occurs: `ready: false`,
/// `terminating: true` and removal.
pub fn listings(steps: &[Counts]) -> Vec<Vec<(Pod, Listing)>> {
    let pods = pods();
    let mut prev: Vec<Listing> = vec![Listing::Absent; pods.len()];
    let mut out = Vec::with_capacity(steps.len());
    for (k, step) in steps.iter().enumerate() {
        let now: Vec<Listing> = pods
            .iter()
            .zip(&prev)
            .map(|(pod, before)| {
                if pod.index < step.ready(pod.revision, pod.role) {
                    return Listing::Ready;
                }
                match (pod.revision, before) {
                    ("a", Listing::Ready) if pod.role == "prefill" => Listing::NotReady,
                    ("a", Listing::Ready) => Listing::Terminating,
                    ("a", _) => Listing::Absent,
                    (_, _) if k == 0 => Listing::Absent,
                    _ => Listing::NotReady,
                }
            })
            .collect();
        out.push(pods.iter().copied().zip(now.iter().copied()).collect());
        prev = now;
    }
    out
}

/// The endpoints YAML of one step (pdgate-server discovery format); `addr` gives each pod's
/// `host:port` by name.
pub fn endpoints_yaml(listing: &[(Pod, Listing)], addr: &dyn Fn(&str) -> String) -> String {
    let mut out = String::from("endpoints:\n");
    for (pod, how) in listing {
        if *how == Listing::Absent {
            continue;
        }
        let name = pod.name();
        let labels: Vec<String> = pod
            .labels()
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        let _ = write!(
            out,
            "- name: {name}\n  address: {}\n  labels: {{{}}}\n",
            addr(&name),
            labels.join(", ")
        );
        match how {
            Listing::NotReady => out.push_str("  ready: false\n"),
            Listing::Terminating => out.push_str("  terminating: true\n"),
            Listing::Ready | Listing::Absent => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn max_role_follows_design_examples() {
        // design.md §5.1: A{P2,D9}, B{P1,D1} → decode dominant, 90/10.
        let s = max_role_shares(&[("a", [2, 9]), ("b", [1, 1])]);
        assert_eq!(s.len(), 2);
        assert!(close(s[0].1, 0.9) && close(s[1].1, 0.1), "{s:?}");
        // A has 6 decode, B has 4 decode (decode dominant) → B gets 40%.
        let s = max_role_shares(&[("b", [1, 4]), ("a", [1, 6])]);
        assert_eq!((s[0].0.as_str(), s[1].0.as_str()), ("a", "b"));
        assert!(close(s[1].1, 0.4), "{s:?}");
        // Prefill dominant: 4 prefill vs 2 decode → weights 3:1.
        let s = max_role_shares(&[("a", [3, 1]), ("b", [1, 1])]);
        assert!(close(s[0].1, 0.75), "{s:?}");
        // Tie (3 vs 3) → prefill, the first required role: 2:1.
        let s = max_role_shares(&[("a", [2, 2]), ("b", [1, 1])]);
        assert!(close(s[0].1, 2.0 / 3.0), "{s:?}");
        // An uncovered revision neither gets traffic nor counts towards the dominant role:
        // A{P0,D6} would make decode dominant; B alone is prefill-dominant and gets 100%.
        let s = max_role_shares(&[("a", [0, 6]), ("b", [2, 1])]);
        assert_eq!(s, vec![("b".to_string(), 1.0)]);
        assert!(max_role_shares(&[("a", [0, 6]), ("b", [0, 6])]).is_empty());
    }

    #[test]
    fn default_steps_expectations() {
        let b: Vec<Option<f64>> = DEFAULT_STEPS.iter().map(|c| c.expected_b_share()).collect();
        let want = [
            Some(0.0),
            Some(0.0),
            Some(1.0 / 7.0),
            Some(2.0 / 7.0),
            Some(3.0 / 7.0),
            Some(4.0 / 7.0),
            Some(5.0 / 7.0),
            None,
            Some(1.0),
            Some(1.0),
        ];
        for (i, (got, want)) in b.iter().zip(want).enumerate() {
            match (got, want) {
                (Some(g), Some(w)) => assert!(close(*g, w), "step {}: {g} vs {w}", i + 1),
                (g, w) => assert_eq!(*g, w, "step {}", i + 1),
            }
        }
        // (2,6,1,1) → A 6/7.
        let s = max_role_shares(&counts(2, 6, 1, 1).per_revision());
        assert!(close(s[0].1, 6.0 / 7.0));
        // Exactly one uncovered step.
        assert_eq!(b.iter().filter(|s| s.is_none()).count(), 1);
    }

    #[test]
    fn requests_scale_with_the_binomial_variance() {
        assert_eq!(requests_for(250, None, 0.05), 250);
        assert_eq!(requests_for(250, Some(0.0), 0.05), 250);
        assert_eq!(requests_for(250, Some(1.0), 0.05), 250);
        // p = 0.5: 16 · 0.25 / 0.0025 = 1,600.
        assert_eq!(requests_for(250, Some(0.5), 0.05), 1_600);
        assert_eq!(requests_for(2_000, Some(0.5), 0.05), 2_000);
        // p = 1/7: 16 · 6/49 / 0.0025 = 783.7 → 784.
        assert_eq!(requests_for(250, Some(1.0 / 7.0), 0.05), 784);
    }

    #[test]
    fn listings_use_every_way_out_and_match_the_counts() {
        let all = listings(&DEFAULT_STEPS);
        assert_eq!(all.len(), DEFAULT_STEPS.len());
        let mut kinds = (false, false, false);
        for (k, step) in all.iter().enumerate() {
            for rev in REVISIONS {
                for role in ["prefill", "decode"] {
                    let ready = step
                        .iter()
                        .filter(|(p, l)| {
                            p.revision == rev && p.role == role && *l == Listing::Ready
                        })
                        .count();
                    assert_eq!(ready, DEFAULT_STEPS[k].ready(rev, role), "step {k}");
                }
            }
            for (i, (_, l)) in step.iter().enumerate() {
                kinds.0 |= *l == Listing::NotReady;
                kinds.1 |= *l == Listing::Terminating;
                kinds.2 |= k > 0 && *l == Listing::Absent && all[k - 1][i].1 != Listing::Absent;
            }
        }
        assert_eq!(kinds, (true, true, true));
        // B is not in the first file; A's leaving decode pod is terminating for one step.
        assert!(all[0]
            .iter()
            .all(|(p, l)| p.revision == "a" || *l == Listing::Absent));
        let a_decode_5 = |k: usize| {
            all[k]
                .iter()
                .find(|(p, _)| p.name() == "a-decode-5")
                .unwrap()
                .1
        };
        assert_eq!(
            (a_decode_5(2), a_decode_5(3), a_decode_5(4)),
            (Listing::Ready, Listing::Terminating, Listing::Absent)
        );
    }

    #[test]
    fn endpoints_yaml_parses_with_the_router_discovery() {
        let all = listings(&DEFAULT_STEPS);
        let yaml = endpoints_yaml(&all[3], &|name| format!("127.0.0.1:{}", 9000 + name.len()));
        let eps = pdgate_fleet::endpoints_file::parse_endpoints_yaml(&yaml, "step.yaml").unwrap();
        let listed = all[3].iter().filter(|(_, l)| *l != Listing::Absent).count();
        assert_eq!(eps.len(), listed);
        let term = eps.iter().find(|e| e.name == "a-decode-5").unwrap();
        assert!(term.terminating && term.ready);
        let pending = eps.iter().find(|e| e.name == "b-prefill-1").unwrap();
        assert!(!pending.ready);
        assert_eq!(pending.revision(), Some("b"));
        assert_eq!(pending.labels[DS_NAME], SET_NAME);
        assert_eq!(pending.labels[DS_ROLE], "prefill");
    }
}
