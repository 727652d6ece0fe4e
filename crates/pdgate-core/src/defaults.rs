//! Defaults both fronts share, defined once.

/// Default request body limit: 64 MiB (llm-d coordinator `max_request_body_size`).
pub const DEFAULT_MAX_BODY_BYTES: usize = 64 << 20;
/// Default engine `/metrics` scrape interval, ms.
pub const DEFAULT_SCRAPE_INTERVAL_MS: u64 = 200;
/// Default time allowed for one engine `/metrics` scrape, ms (head and body): a real vLLM
/// took up to 1.7 s to answer under load (`../shared/fixtures/vllm-0.32-cpu/README.md`).
pub const DEFAULT_SCRAPE_TIMEOUT_MS: u64 = 3000;
/// Default of `--shutdown-grace-ms`: under Kubernetes' default 30 s termination grace.
pub const DEFAULT_SHUTDOWN_GRACE_MS: u64 = 25_000;
