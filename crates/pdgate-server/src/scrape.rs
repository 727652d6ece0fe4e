//! Engine metrics scraping and model discovery, outside the pick path.
//!
//! Every interval, each endpoint's `/metrics` is read and its gauges stored in the endpoint's
//! [`EndpointLoad`]: `vllm:num_requests_running` and `vllm:num_requests_waiting` summed over
//! series (one per engine), `vllm:kv_cache_usage_perc` (or the older
//! `vllm:gpu_cache_usage_perc`) averaged over series (design.md §5.4). A gauge the engine does
//! not export, or a failed scrape, is stored as unknown, never as 0. `/v1/models` is read on
//! the first tick after every endpoint change and every `models_every` ticks, and stored
//! per endpoint (requests are only scheduled on endpoints that serve their model).

use crate::discovery::EndpointRegistry;
use crate::metrics::Metrics;
use crate::upstream::Upstream;
use futures_util::future::join_all;
use pdgate_scheduler::EndpointLoad;
use std::sync::Arc;
use std::time::Duration;

/// Gauges read from one exposition.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct EngineGauges {
    /// Σ `vllm:num_requests_running`.
    pub running: Option<f64>,
    /// Σ `vllm:num_requests_waiting`.
    pub waiting: Option<f64>,
    /// Mean `vllm:kv_cache_usage_perc` (0..1), else mean `vllm:gpu_cache_usage_perc`.
    pub kv_usage: Option<f64>,
}

/// Parses a Prometheus text exposition into [`EngineGauges`].
///
/// Only sample lines are read (`name{labels} value [timestamp]`); comments and unknown names
/// are skipped, and a malformed line is skipped, not fatal. (The `prometheus-parse` crate
/// rejects metric names with colons, which every vLLM metric has, hence this small reader.)
pub fn parse_engine_metrics(text: &str) -> EngineGauges {
    let mut sums: [(f64, u32); 4] = [(0.0, 0); 4];
    for line in text.lines() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = sample(line) else {
            continue;
        };
        let idx = match name {
            "vllm:num_requests_running" => 0,
            "vllm:num_requests_waiting" => 1,
            "vllm:kv_cache_usage_perc" => 2,
            "vllm:gpu_cache_usage_perc" => 3,
            _ => continue,
        };
        if value.is_finite() {
            sums[idx].0 += value;
            sums[idx].1 += 1;
        }
    }
    let sum = |i: usize| (sums[i].1 > 0).then_some(sums[i].0);
    let mean = |i: usize| (sums[i].1 > 0).then(|| sums[i].0 / sums[i].1 as f64);
    EngineGauges {
        running: sum(0),
        waiting: sum(1),
        kv_usage: mean(2).or_else(|| mean(3)),
    }
}

/// Splits one sample line into metric name and value.
fn sample(line: &str) -> Option<(&str, f64)> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    if rest.starts_with('{') {
        // Skip the label set, honouring quoted values that may contain `}`.
        let mut in_quotes = false;
        let mut escaped = false;
        let mut close = None;
        for (i, c) in rest.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if in_quotes => escaped = true,
                '"' => in_quotes = !in_quotes,
                '}' if !in_quotes => {
                    close = Some(i);
                    break;
                }
                _ => {}
            }
        }
        rest = &rest[close? + 1..];
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name, value))
}

fn parse_models(body: &[u8]) -> Vec<String> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.get("data")?.as_array().map(|d| {
                d.iter()
                    .filter_map(|m| m.get("id")?.as_str().map(str::to_string))
                    .collect()
            })
        })
        .unwrap_or_default()
}

/// Scrapes forever; abort the returned task to stop.
pub fn start(
    registry: Arc<EndpointRegistry>,
    upstream: Upstream,
    metrics: Arc<Metrics>,
    interval: Duration,
    models_every: u32,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let timeout = interval.max(Duration::from_millis(500));
        let mut seen_version = 0u64;
        let mut n = 0u32;
        loop {
            tick.tick().await;
            let snap = registry.snapshot();
            let want_models = snap.version != seen_version || n.is_multiple_of(models_every.max(1));
            seen_version = snap.version;
            n = n.wrapping_add(1);
            let jobs = snap.endpoints.iter().map(|e| {
                let up = upstream.clone();
                let metrics = metrics.clone();
                let name = e.endpoint.name.clone();
                let addr = e.endpoint.address.clone();
                let load: Arc<EndpointLoad> = e.load.clone();
                async move {
                    match up.get(&name, &addr, "/metrics", timeout).await {
                        Ok((200, body)) => {
                            let g = parse_engine_metrics(&String::from_utf8_lossy(&body));
                            load.set_scraped(g.running, g.waiting, g.kv_usage);
                        }
                        _ => {
                            metrics.scrape_errors.inc();
                            load.set_scraped(None, None, None);
                        }
                    }
                    if want_models {
                        if let Ok((200, body)) = up.get(&name, &addr, "/v1/models", timeout).await {
                            load.set_models(parse_models(&body));
                        }
                    }
                }
            });
            join_all(jobs).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_counts_averages_usage_and_keeps_missing_gauges_unknown() {
        let text = "# TYPE vllm:num_requests_running gauge\n\
            vllm:num_requests_waiting_by_reason{reason=\"a}b\"} 9\n\
            not a sample line\n\
            vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 2\n\
            vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 3\n\
            vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.2\n\
            vllm:gpu_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.4\n";
        let g = parse_engine_metrics(text);
        assert_eq!(g.running, Some(5.0));
        assert_eq!(g.waiting, None);
        assert!((g.kv_usage.unwrap() - 0.3).abs() < 1e-12);
        assert_eq!(
            parse_models(br#"{"object":"list","data":[{"id":"a"},{"id":"b"}]}"#),
            ["a", "b"]
        );
    }
}
