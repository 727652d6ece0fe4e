//! pdgate's end-to-end tests, one module per capability, in ONE test binary: each test
//! binary links the whole router (Kubernetes client, gRPC, tokenizers, ZeroMQ), and linking ~40
//! of them in release was most of CI's build time. Run one module with
//! `cargo test -p pdgate --test e2e MODULE::` (e.g. `e2e_pd::`). The real-vLLM tests stay in
//! binaries of their own (`e2e_real_vllm`, `e2e_real_vllm_kv`): they hold two engines on the
//! machine's cores for minutes and must not share the process with the rest.

#[path = "../support/mod.rs"]
mod support;

mod cli_check_config;
mod e2e_apis;
mod e2e_apis_sim;
mod e2e_burst;
mod e2e_client_limits;
mod e2e_conditional;
mod e2e_coordinator_config;
mod e2e_dp;
mod e2e_echo;
mod e2e_encode;
mod e2e_epp;
mod e2e_epp_hints;
mod e2e_epp_limits_bodies;
mod e2e_epp_limits_connections;
mod e2e_epp_limits_headers;
mod e2e_epp_limits_measured;
mod e2e_epp_limits_responses;
mod e2e_epp_limits_streams;
mod e2e_epp_process;
mod e2e_errors;
mod e2e_file_flags;
mod e2e_fleet_bounds;
mod e2e_flow_control;
mod e2e_flow_eviction;
mod e2e_flow_trust;
mod e2e_fronts;
mod e2e_headers;
mod e2e_kube;
mod e2e_kv_events;
mod e2e_limits;
mod e2e_ops;
mod e2e_owned_fields;
mod e2e_pd;
mod e2e_pins;
mod e2e_plugins_admission;
mod e2e_plugins_ceiling;
mod e2e_plugins_datalayer;
mod e2e_plugins_multimodal;
mod e2e_plugins_prefix;
mod e2e_plugins_topology;
mod e2e_pre_steps;
mod e2e_replicas;
mod e2e_request_ctx;
mod e2e_restart;
mod e2e_retries;
mod e2e_rollout;
mod e2e_rollout_kube;
mod e2e_routing;
mod e2e_sessions;
mod e2e_shutdown;
mod e2e_soak;
mod e2e_state;
mod e2e_timeouts;
mod e2e_tokens;
mod e2e_trace;
mod e2e_trust;
