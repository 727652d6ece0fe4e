//! Label keys read from endpoints (llm-d and Kubernetes DisaggregatedSet conventions).

/// Role of an endpoint (llm-d): see [`crate::Role`].
pub const ROLE: &str = "llm-d.ai/role";
/// Revision of a disaggregated set an endpoint belongs to.
pub const DS_REVISION: &str = "disaggregatedset.x-k8s.io/revision";
/// Role label used by disaggregated sets.
pub const DS_ROLE: &str = "disaggregatedset.x-k8s.io/role";
/// Name of the disaggregated set.
pub const DS_NAME: &str = "disaggregatedset.x-k8s.io/name";

/// The endpoint name of data-parallel rank `rank` of pod (or endpoints-file entry) `pod`:
/// `<pod>-rank-<rank>` (llm-d's naming of DP ranks as endpoints). The one place the form is
/// written: discovery names ranks with it, pins and the data-parallel profile handler look
/// them up with it.
pub fn rank_endpoint_name(pod: &str, rank: impl std::fmt::Display) -> String {
    format!("{pod}-rank-{rank}")
}
