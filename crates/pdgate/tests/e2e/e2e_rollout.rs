//! A revision rollout end to end, in layout (b): a coordinator (conditional decode on) in
//! front of a prefill router and a decode router — both pdgate routers with the
//! `disaggregatedset-rollout-screener` (max-role), both reading one endpoints file that the
//! scenario rewrites at each step — in front of 16 simulators (revisions a and b, 2 prefill +
//! 6 decode each); all in-process on 127.0.0.1:0. The scenario lives in
//! `pdgate_scenario::rollout` (shared with `pdgate demo --rollout`); see `rollout::report` for how
//! requests are attributed to steps. The same rollout on Kubernetes discovery is
//! `e2e_rollout_kube`; both are judged by `support::rollout`.

use crate::support;

use pdgate_scenario::rollout::Discovery;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_keeps_both_phases_on_one_revision_and_follows_max_role_shares() {
    let report = support::rollout::run_and_assert(Discovery::File).await;
    assert_eq!(report.discovery, Discovery::File);
}
