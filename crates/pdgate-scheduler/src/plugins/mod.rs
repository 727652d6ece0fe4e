//! Built-in plugins, one module each, named after their llm-d type; `http_source` holds the
//! parameters the HTTP data sources share.

pub mod active_request_scorer;
pub mod always_disagg_multimodal_decider;
pub mod always_disagg_pd_decider;
pub mod approx_prefix_cache_producer;
pub mod burst_prefix_cache_producer;
pub mod by_label;
pub mod core_metrics_extractor;
pub mod data_parallel_profile_handler;
pub mod decode_filter;
pub mod disagg_profile_handler;
pub mod encode_filter;
pub mod endpoint_attribute;
pub mod endpoint_attribute_filter;
pub mod endpoint_attribute_scorer;
pub mod endpoint_notification_source;
pub mod header_profile_handler;
pub mod http_source;
pub mod kv_cache_utilization_scorer;
pub mod kv_cost_scorer;
pub mod label_selector_filter;
pub mod load_aware_scorer;
pub mod lora_affinity_scorer;
pub mod max_score_picker;
pub mod metrics_data_source;
pub mod mm_embeddings_cache_producer;
pub mod mm_embeddings_cache_scorer;
pub mod models_data_extractor;
pub mod models_data_source;
pub mod no_hit_lru_scorer;
pub mod precise_prefix_cache_producer;
pub mod prefill_filter;
pub mod prefix_based_pd_decider;
pub mod prefix_cache_scorer;
pub mod probabilistic_admitter;
pub mod queue_scorer;
pub mod random_picker;
pub mod request_parsers;
pub mod role_filter;
pub mod rollout;
pub mod round_robin_picker;
pub mod running_requests_size_scorer;
pub mod session_affinity_filter;
pub mod session_affinity_scorer;
pub mod single_profile_handler;
pub mod token_producer;
pub mod topology_affinity_filter;
pub mod topology_affinity_scorer;
pub mod topology_extractor;
pub mod weighted_random_picker;

#[cfg(test)]
pub(crate) mod testutil;
