//! Built-in plugins, one module each, named after their llm-d type.

pub mod active_request_scorer;
pub mod always_disagg_pd_decider;
pub mod approx_prefix_cache_producer;
pub mod by_label;
pub mod decode_filter;
pub mod disagg_profile_handler;
pub mod encode_filter;
pub mod header_profile_handler;
pub mod kv_cache_utilization_scorer;
pub mod kv_cost_scorer;
pub mod label_selector_filter;
pub mod load_aware_scorer;
pub mod max_score_picker;
pub mod precise_prefix_cache_producer;
pub mod prefill_filter;
pub mod prefix_based_pd_decider;
pub mod prefix_cache_scorer;
pub mod queue_scorer;
pub mod random_picker;
pub mod role_filter;
pub mod rollout;
pub mod round_robin_picker;
pub mod running_requests_size_scorer;
pub mod session_affinity_filter;
pub mod session_affinity_scorer;
pub mod single_profile_handler;
pub mod token_producer;
pub mod weighted_random_picker;

#[cfg(test)]
pub(crate) mod testutil;
