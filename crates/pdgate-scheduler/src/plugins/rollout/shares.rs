//! Revision coverage and traffic shares (design.md §5.1), as pure functions of the endpoints.

use super::selector::Selector;
use crate::endpoint::Endpoint;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How traffic is split between covered revisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Weight = the revision's count of the dominant role (the required role with the most
    /// counted endpoints over all covered revisions; ties: first in `requiredRoles`).
    #[default]
    MaxRole,
    /// Weight = the revision's count over all required roles.
    Sum,
    /// No weighted choice, no narrowing; a revision header is still applied strictly.
    Disabled,
}

/// A role a revision must cover (the values of the role label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GatedRole {
    /// `prefill`
    Prefill,
    /// `decode`
    Decode,
    /// `encode`
    Encode,
}

impl GatedRole {
    /// The role label value.
    pub fn as_str(self) -> &'static str {
        match self {
            GatedRole::Prefill => "prefill",
            GatedRole::Decode => "decode",
            GatedRole::Encode => "encode",
        }
    }
}

/// What the share computation needs: the scope and the gating rules (validated).
#[derive(Debug, Clone, PartialEq)]
pub struct Gating {
    /// Endpoints counted and narrowed (`scope.labelSelector`).
    pub scope: Selector,
    /// Split rule.
    pub mode: Mode,
    /// Roles every covered revision has (non-empty, no duplicates).
    pub required_roles: Vec<GatedRole>,
    /// Label carrying the revision.
    pub revision_label_key: String,
    /// Label carrying the role (values `prefill`, `decode`, `encode`).
    pub role_label_key: String,
}

impl Gating {
    /// The revision label of `e`, when `e` is in scope and has one.
    pub fn revision_in_scope<'e>(&self, e: &'e Endpoint) -> Option<&'e str> {
        if !self.scope.matches(&e.labels) {
            return None;
        }
        e.labels.get(&self.revision_label_key).map(String::as_str)
    }
}

/// Counted endpoints per revision (by name), one count per required role (in
/// `required_roles` order). Counted: in scope, Ready, not terminating, with a revision label
/// and a role label naming a required role.
pub fn counts(endpoints: &[&Endpoint], g: &Gating) -> BTreeMap<String, Vec<usize>> {
    let mut out: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for e in endpoints {
        if !e.schedulable() {
            continue;
        }
        let Some(rev) = g.revision_in_scope(e) else {
            continue;
        };
        let Some(role) = e.labels.get(&g.role_label_key) else {
            continue;
        };
        let Some(i) = g.required_roles.iter().position(|r| r.as_str() == role) else {
            continue;
        };
        if !out.contains_key(rev) {
            out.insert(rev.to_string(), vec![0; g.required_roles.len()]);
        }
        if let Some(c) = out.get_mut(rev) {
            c[i] += 1;
        }
    }
    out
}

/// Index into `required_roles` of the dominant role over `covered` count vectors: the most
/// endpoints in total; ties go to the first.
fn dominant(covered: &[(String, Vec<usize>)], roles: usize) -> usize {
    let mut best = (0, 0);
    for i in 0..roles {
        let total: usize = covered.iter().map(|(_, c)| c[i]).sum();
        if i == 0 || total > best.1 {
            best = (i, total);
        }
    }
    best.0
}

/// The covered revisions ordered by name, each with its share of traffic in (0, 1]
/// (shares sum to 1; empty when no revision is covered). A revision is covered when every
/// required role has at least one counted endpoint in it (see [`counts`]). In `disabled`
/// mode the shares are informational (`sum` weights); no draw uses them.
pub fn shares(endpoints: &[&Endpoint], g: &Gating) -> Vec<(String, f64)> {
    let covered: Vec<(String, Vec<usize>)> = counts(endpoints, g)
        .into_iter()
        .filter(|(_, c)| c.iter().all(|n| *n > 0))
        .collect();
    let weights: Vec<usize> = match g.mode {
        Mode::MaxRole => {
            let d = dominant(&covered, g.required_roles.len());
            covered.iter().map(|(_, c)| c[d]).collect()
        }
        Mode::Sum | Mode::Disabled => covered.iter().map(|(_, c)| c.iter().sum()).collect(),
    };
    let total: usize = weights.iter().sum();
    covered
        .into_iter()
        .zip(weights)
        .map(|((rev, _), w)| (rev, w as f64 / total as f64))
        .collect()
}

/// The revision a uniform `u` in [0, 1) lands on: the first whose cumulative share exceeds
/// `u` (revisions in the given order); the last one absorbs rounding. `None` when empty.
pub fn draw(shares: &[(String, f64)], u: f64) -> Option<&str> {
    let mut acc = 0.0;
    for (rev, s) in shares {
        acc += s;
        if u < acc {
            return Some(rev);
        }
    }
    shares.last().map(|(r, _)| r.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdgate_api::labels::{DS_NAME, DS_REVISION, DS_ROLE};

    fn gating(mode: Mode, roles: &[GatedRole], scope: &str) -> Gating {
        Gating {
            scope: Selector::parse(scope).unwrap(),
            mode,
            required_roles: roles.to_vec(),
            revision_label_key: DS_REVISION.into(),
            role_label_key: DS_ROLE.into(),
        }
    }

    const PD: &[GatedRole] = &[GatedRole::Prefill, GatedRole::Decode];

    /// `n` endpoints of revision `rev` and role `role` in set `set`.
    fn fleet(out: &mut Vec<Endpoint>, set: &str, rev: &str, role: &str, n: usize) {
        for i in 0..n {
            let labels = [(DS_NAME, set), (DS_REVISION, rev), (DS_ROLE, role)]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            out.push(Endpoint::new(
                format!("{set}-{rev}-{role}-{i}"),
                "x:1",
                labels,
            ));
        }
    }

    /// A{P`ap`,D`ad`}, B{P`bp`,D`bd`} in set `s`.
    fn ab(ap: usize, ad: usize, bp: usize, bd: usize) -> Vec<Endpoint> {
        let mut v = Vec::new();
        fleet(&mut v, "s", "a", "prefill", ap);
        fleet(&mut v, "s", "a", "decode", ad);
        fleet(&mut v, "s", "b", "prefill", bp);
        fleet(&mut v, "s", "b", "decode", bd);
        v
    }

    fn run(eps: &[Endpoint], g: &Gating) -> Vec<(String, f64)> {
        let refs: Vec<&Endpoint> = eps.iter().collect();
        shares(&refs, g)
    }

    fn assert_shares(got: Vec<(String, f64)>, want: &[(&str, f64)]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for ((r, s), (wr, ws)) in got.iter().zip(want) {
            assert_eq!(r, wr);
            assert!((s - ws).abs() < 1e-12, "{r}: {s} vs {ws}");
        }
    }

    #[test]
    fn max_role_and_sum_follow_the_design_examples() {
        let eps = ab(2, 9, 1, 1);
        assert_shares(
            run(&eps, &gating(Mode::MaxRole, PD, "")),
            &[("a", 0.9), ("b", 0.1)],
        );
        assert_shares(
            run(&eps, &gating(Mode::Sum, PD, "")),
            &[("a", 11.0 / 13.0), ("b", 2.0 / 13.0)],
        );
        // A D6 / B D4, decode dominant → B 40%.
        assert_shares(
            run(&ab(1, 6, 1, 4), &gating(Mode::MaxRole, PD, "")),
            &[("a", 0.6), ("b", 0.4)],
        );
    }

    #[test]
    fn a_revision_missing_a_required_role_is_not_covered() {
        // B has no prefill: absent; A gets everything, and B's decodes do not count toward
        // the dominant role either.
        let eps = ab(2, 1, 0, 9);
        assert_shares(run(&eps, &gating(Mode::MaxRole, PD, "")), &[("a", 1.0)]);
        let c = counts(
            &eps.iter().collect::<Vec<_>>(),
            &gating(Mode::MaxRole, PD, ""),
        );
        assert_eq!(c["b"], [0, 9]);
        // Only decode required: B is covered.
        assert_shares(
            run(&eps, &gating(Mode::Sum, &[GatedRole::Decode], "")),
            &[("a", 0.1), ("b", 0.9)],
        );
        // Nothing covered.
        assert!(run(&ab(0, 3, 0, 3), &gating(Mode::MaxRole, PD, "")).is_empty());
        assert!(run(&[], &gating(Mode::Sum, PD, "")).is_empty());
    }

    #[test]
    fn not_ready_terminating_unlabeled_and_out_of_scope_endpoints_are_not_counted() {
        let mut eps = ab(1, 6, 1, 4);
        // Of A's six decodes: one not Ready, one terminating, one without a role label, one
        // with a role that is not required → A counts 2 decodes against B's 4.
        eps[1].ready = false;
        eps[2].terminating = true;
        eps[3].labels.remove(DS_ROLE);
        eps[4].labels.insert(DS_ROLE.into(), "encode".into());
        // Another set's revision `a` endpoints are out of scope.
        fleet(&mut eps, "other", "a", "prefill", 5);
        fleet(&mut eps, "other", "a", "decode", 50);
        // Endpoints without a revision label are not counted.
        eps.push(Endpoint::new(
            "norev",
            "x:1",
            [(DS_NAME.to_string(), "s".to_string())].into(),
        ));
        let g = gating(Mode::MaxRole, PD, &format!("{DS_NAME}=s"));
        assert_shares(run(&eps, &g), &[("a", 2.0 / 6.0), ("b", 4.0 / 6.0)]);
        // Without the scope the other set's 50 decodes count for `a`.
        assert_shares(
            run(&eps, &gating(Mode::MaxRole, PD, "")),
            &[("a", 52.0 / 56.0), ("b", 4.0 / 56.0)],
        );
    }

    #[test]
    fn dominant_role_ties_go_to_the_first_required_role() {
        // A{P3,D1}, B{P1,D3}: 4 prefill, 4 decode.
        let eps = ab(3, 1, 1, 3);
        assert_shares(
            run(&eps, &gating(Mode::MaxRole, PD, "")),
            &[("a", 0.75), ("b", 0.25)],
        );
        let dp = [GatedRole::Decode, GatedRole::Prefill];
        assert_shares(
            run(&eps, &gating(Mode::MaxRole, &dp, "")),
            &[("a", 0.25), ("b", 0.75)],
        );
        // Prefill dominant (A{P5,D1}, B{P3,D1}) → by prefill counts.
        assert_shares(
            run(&ab(5, 1, 3, 1), &gating(Mode::MaxRole, PD, "")),
            &[("a", 0.625), ("b", 0.375)],
        );
    }

    #[test]
    fn draw_is_cumulative_over_revisions_in_order() {
        let s = vec![("a".to_string(), 0.9), ("b".to_string(), 0.1)];
        assert_eq!(draw(&s, 0.0), Some("a"));
        assert_eq!(draw(&s, 0.899), Some("a"));
        assert_eq!(draw(&s, 0.9), Some("b"));
        assert_eq!(draw(&s, 0.999_999), Some("b"));
        assert_eq!(draw(&s, 1.0), Some("b"));
        assert_eq!(draw(&[], 0.5), None);
    }
}
