//! Reading an engine's `/metrics` exposition (its `/v1/models` answer: [`super::models`]).

use pdgate_scheduler::plugins::core_metrics_extractor::{EngineMetrics, MetricNames, MetricSpec};
use std::sync::LazyLock;

/// The default `core-metrics-extractor` mapping (built-in engines, default `vllm`).
static DEFAULT_ENGINES: LazyLock<EngineMetrics> = LazyLock::new(EngineMetrics::default);

/// Gauges read from one exposition (metric names of vLLM here; [`parse_engine_metrics_with`]
/// reads those of the endpoint's engine type).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct EngineGauges {
    /// Σ `vllm:num_requests_running` (the engine's `runningRequestsSpec` series).
    pub running: Option<f64>,
    /// Σ `vllm:num_requests_waiting` (`queuedRequestsSpec`).
    pub waiting: Option<f64>,
    /// Mean `vllm:kv_cache_usage_perc` (0..1), else mean `vllm:gpu_cache_usage_perc`
    /// (`kvUsageSpec`).
    pub kv_usage: Option<f64>,
    /// `process_start_time_seconds` (Unix time, s; the Prometheus client's process
    /// collector, which vLLM's API server exports): a new value means the engine restarted.
    /// The largest value when several series carry it.
    pub start_time: Option<f64>,
    /// Tokens per engine KV block: label `block_size` of `vllm:cache_config_info` (vLLM's
    /// `--block-size`; `cacheInfoSpec` and `cacheBlockSizeLabelName`, or the value of
    /// `cacheBlockSizeSpec`). The first series that carries a positive integer wins.
    pub block_size: Option<u32>,
    /// KV blocks the engine can hold: label `num_gpu_blocks` of `vllm:cache_config_info`
    /// (`"None"` or absent → unknown; `cacheNumBlocksLabelName` or `cacheNumBlocksSpec`).
    pub num_gpu_blocks: Option<u64>,
    /// LoRA adapters: labels `running_lora_adapters`, `waiting_lora_adapters` and `max_lora`
    /// of the `vllm:lora_requests_info` series with the highest value (its creation time;
    /// the first such series on a tie, llm-d's rule). `None` when the engine exports none.
    pub lora: Option<pdgate_scheduler::LoraInfo>,
}

/// Parses a Prometheus text exposition into [`EngineGauges`] with vLLM's metric names (the
/// default `core-metrics-extractor` mapping).
///
/// Only sample lines are read (`name{labels} value [timestamp]`, [`series`]); comments and
/// unknown names are skipped, and a malformed line is skipped, not fatal. (The `prometheus-parse` crate
/// rejects metric names with colons, which every vLLM metric has, hence this small reader.)
pub fn parse_engine_metrics(text: &str) -> EngineGauges {
    let m = &*DEFAULT_ENGINES;
    parse_engine_metrics_with(text, &m.engines[m.default].1)
}

/// Parses a Prometheus text exposition into [`EngineGauges`] with the metric `names` of one
/// engine type (`core-metrics-extractor`): a series counts for a gauge when its name and
/// labels match the gauge's spec; counts are summed over matching series, the KV usage
/// averaged; a gauge without a spec or without a matching series is unknown.
pub fn parse_engine_metrics_with(text: &str, names: &MetricNames) -> EngineGauges {
    let specs = [
        &names.running,
        &names.queue,
        &names.kv_usage,
        &names.kv_usage_fallback,
    ];
    let mut sums: [(f64, u32); 4] = [(0.0, 0); 4];
    let mut start_time: Option<f64> = None;
    let (mut block_size, mut num_gpu_blocks) = (None, None);
    // The LoRA series with the highest value (its creation time), the first on a tie.
    let mut lora: Option<(f64, pdgate_scheduler::LoraInfo)> = None;
    for (name, labels, value) in series(text) {
        if name == "process_start_time_seconds" {
            if value.is_finite() {
                start_time = Some(start_time.map_or(value, |s| s.max(value)));
            }
            continue;
        }
        let matches = |s: &Option<MetricSpec>| {
            s.as_ref()
                .is_some_and(|s| s.name == name && s.matches(|k| label_value(labels, k)))
        };
        for (i, s) in specs.iter().enumerate() {
            if value.is_finite() && matches(s) {
                sums[i].0 += value;
                sums[i].1 += 1;
            }
        }
        if matches(&names.cache_info) {
            let int = |key: &str| label_value(labels, key).and_then(|v| v.parse::<u64>().ok());
            block_size = block_size.or(int(&names.cache_block_size_label)
                .filter(|b| *b > 0)
                .and_then(|b| u32::try_from(b).ok()));
            num_gpu_blocks = num_gpu_blocks.or(int(&names.cache_num_blocks_label));
        }
        let whole = (value.is_finite() && value >= 0.0 && value.fract() == 0.0).then_some(value);
        if matches(&names.cache_block_size) {
            block_size = block_size.or(whole
                .filter(|v| *v >= 1.0 && *v <= u32::MAX as f64)
                .map(|v| v as u32));
        }
        if matches(&names.cache_num_blocks) {
            num_gpu_blocks = num_gpu_blocks.or(whole.map(|v| v as u64));
        }
        if matches(&names.lora) && lora.as_ref().is_none_or(|(v, _)| value > *v || v.is_nan()) {
            let l = |k: &str| label_value(labels, k).unwrap_or_default();
            let info = pdgate_scheduler::LoraInfo::from_labels(
                &l("running_lora_adapters"),
                &l("waiting_lora_adapters"),
                &l("max_lora"),
            );
            lora = Some((value, info));
        }
    }
    let sum = |i: usize| (sums[i].1 > 0).then_some(sums[i].0);
    let mean = |i: usize| (sums[i].1 > 0).then(|| sums[i].0 / sums[i].1 as f64);
    EngineGauges {
        running: sum(0),
        waiting: sum(1),
        kv_usage: mean(2).or_else(|| mean(3)),
        start_time,
        block_size,
        num_gpu_blocks,
        lora: lora.map(|(_, l)| l),
    }
}

/// The sample lines of an exposition as `(metric name, label text, value)`: the label text is
/// what stands between `{` and `}` (empty without labels), the value the first field after it.
/// Comments, blank lines and malformed lines are skipped; values are not checked for finiteness.
pub fn series(text: &str) -> impl Iterator<Item = (&str, &str, f64)> {
    text.lines().filter_map(|line| {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            return None;
        }
        sample(line)
    })
}

/// Σ of the finite values of every series of metric `name` (all label sets: vLLM exports one
/// per `engine` and `model_name`); `None` when the exposition has no such series.
pub fn sum_series(text: &str, name: &str) -> Option<f64> {
    series(text)
        .filter(|(n, _, v)| *n == name && v.is_finite())
        .map(|(_, _, v)| v)
        .reduce(|a, b| a + b)
}

/// The value of label `label` on the first series of metric `name` that carries it, unescaped
/// (`\\`, `\"`, `\n`), e.g. `block_size` of `vllm:cache_config_info`.
pub fn series_label(text: &str, name: &str, label: &str) -> Option<String> {
    series(text)
        .filter(|(n, _, _)| *n == name)
        .find_map(|(_, labels, _)| label_value(labels, label))
}

/// Splits one sample line into metric name, label text and value.
fn sample(line: &str) -> Option<(&str, &str, f64)> {
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = "";
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
        let close = close?;
        labels = &rest[1..close];
        rest = &rest[close + 1..];
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name, labels, value))
}

/// The unescaped value of `key` in a label text `k1="v1",k2="v2"`.
fn label_value(labels: &str, key: &str) -> Option<String> {
    let mut rest = labels;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        let eq = rest.find('=')?;
        let k = rest[..eq].trim();
        let mut chars = rest[eq + 1..].trim_start().char_indices();
        let start = eq + 1 + (rest[eq + 1..].len() - rest[eq + 1..].trim_start().len());
        if chars.next().map(|(_, c)| c) != Some('"') {
            return None;
        }
        let (mut value, mut escaped, mut end) = (String::new(), false, None);
        for (i, c) in chars {
            match c {
                _ if escaped => {
                    value.push(if c == 'n' { '\n' } else { c });
                    escaped = false;
                }
                '\\' => escaped = true,
                '"' => {
                    end = Some(start + i + 1);
                    break;
                }
                _ => value.push(c),
            }
        }
        let end = end?;
        if k == key {
            return Some(value);
        }
        rest = &rest[end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = format!(
            "{}/../../../shared/fixtures/vllm-0.32-cpu/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

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
        assert_eq!(g.start_time, None);
        assert!((g.kv_usage.unwrap() - 0.3).abs() < 1e-12);
    }

    #[test]
    fn counters_sum_over_label_sets_and_labels_unescape() {
        let text = "# TYPE vllm:prefix_cache_hits_total counter\n\
            vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 64.0\n\
            vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"m\"} 32\n\
            vllm:prefix_cache_hits_created{engine=\"0\",model_name=\"m\"} 1.7e9\n\
            vllm:prefix_cache_queries_total NaN\n\
            info{a=\"x,\\\"y\\\"}\", b = \"2\\\\n\",block_size=\"16\"} 1\n";
        assert_eq!(sum_series(text, "vllm:prefix_cache_hits_total"), Some(96.0));
        assert_eq!(sum_series(text, "vllm:prefix_cache_queries_total"), None);
        assert_eq!(sum_series(text, "vllm:absent"), None);
        assert_eq!(series_label(text, "info", "a").as_deref(), Some("x,\"y\"}"));
        assert_eq!(series_label(text, "info", "b").as_deref(), Some("2\\n"));
        assert_eq!(
            series_label(text, "info", "block_size").as_deref(),
            Some("16")
        );
        assert_eq!(series_label(text, "info", "c"), None);
        assert_eq!(series(text).count(), 5);
    }

    #[test]
    fn real_vllm_exposition_gives_counters_and_cache_config() {
        let text = fixture("metrics.txt");
        assert_eq!(
            sum_series(&text, "vllm:prefix_cache_hits_total"),
            Some(64.0)
        );
        assert_eq!(
            sum_series(&text, "vllm:prefix_cache_queries_total"),
            Some(208.0)
        );
        let label = |l| series_label(&text, "vllm:cache_config_info", l);
        assert_eq!(
            (label("block_size"), label("num_gpu_blocks")),
            (Some("32".to_string()), Some("16384".to_string()))
        );
    }

    #[test]
    fn engine_metric_names_select_series_by_name_and_labels() {
        let engines = EngineMetrics::default();
        let names = |e: &str| engines.engine(e).unwrap();
        // SGLang: its own names, block size from label `page_size` of its info gauge.
        let text = "sglang:num_queue_reqs{model=\"m\"} 3\n\
            sglang:num_running_reqs{model=\"m\"} 2\n\
            sglang:token_usage 0.25\n\
            sglang:cache_config_info{page_size=\"64\",num_pages=\"1000\"} 1\n\
            vllm:num_requests_waiting 9\n";
        let g = parse_engine_metrics_with(text, names("sglang"));
        assert_eq!(
            (
                g.waiting,
                g.running,
                g.kv_usage,
                g.block_size,
                g.num_gpu_blocks
            ),
            (Some(3.0), Some(2.0), Some(0.25), Some(64), Some(1000))
        );
        // Triton TRT-LLM: one family, series told apart by a label; the cache geometry from
        // gauge values. 4 waiting, 7 scheduled, usage 0.5, 32 tokens per block, 512 blocks.
        let text = "nv_trt_llm_request_metrics{request_type=\"waiting\",model=\"m\"} 4\n\
            nv_trt_llm_request_metrics{request_type=\"scheduled\",model=\"m\"} 7\n\
            nv_trt_llm_request_metrics{request_type=\"max\",model=\"m\"} 64\n\
            nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\"} 0.5\n\
            nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"tokens_per\"} 32\n\
            nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"max\"} 512\n";
        let g = parse_engine_metrics_with(text, names("triton-tensorrt-llm"));
        assert_eq!(
            (
                g.waiting,
                g.running,
                g.kv_usage,
                g.block_size,
                g.num_gpu_blocks
            ),
            (Some(4.0), Some(7.0), Some(0.5), Some(32), Some(512))
        );
        // Triton has no KV-usage metric: unknown, not 0; vLLM names read nothing here.
        assert_eq!(
            parse_engine_metrics_with(text, names("triton")).kv_usage,
            None
        );
        assert_eq!(parse_engine_metrics(text), EngineGauges::default());
    }

    #[test]
    fn lora_info_comes_from_the_latest_series() {
        // Two states of the info series: the one with the higher value (creation time) wins,
        // whatever its position; names are trimmed, deduplicated, empty ones dropped.
        let text = "vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"a\",\
            waiting_lora_adapters=\"\"} 1.7e9\n\
            vllm:lora_requests_info{max_lora=\"3\",running_lora_adapters=\" b, a,,b\",\
            waiting_lora_adapters=\"c\"} 1.8e9\n\
            vllm:lora_requests_info{max_lora=\"9\",running_lora_adapters=\"z\",\
            waiting_lora_adapters=\"\"} 1.8e9\n";
        let lora = parse_engine_metrics(text).lora.unwrap();
        assert_eq!(lora.running, ["b", "a"]);
        assert_eq!(lora.waiting, ["c"]);
        assert_eq!(lora.max_lora, 3);
        let bad = "vllm:lora_requests_info{max_lora=\"x\",running_lora_adapters=\"a\"} 1\n";
        let lora = parse_engine_metrics(bad).lora.unwrap();
        assert_eq!(
            (lora.running.len(), lora.waiting.len(), lora.max_lora),
            (1, 0, 0)
        );
        assert_eq!(parse_engine_metrics(&fixture("metrics.txt")).lora, None);
    }

    #[test]
    fn cache_config_labels_are_matched_by_exact_key() {
        let text = "vllm:cache_config_info{mamba_block_size=\"8\",block_size=\"64\",\
            num_gpu_blocks=\"None\"} 1\n";
        let g = parse_engine_metrics(text);
        assert_eq!((g.block_size, g.num_gpu_blocks), (Some(64), None));
        let zero = parse_engine_metrics("vllm:cache_config_info{block_size=\"0\"} 1\n");
        assert_eq!(zero.block_size, None);
        let idle = parse_engine_metrics(&fixture("metrics.txt"));
        assert_eq!(
            (idle.block_size, idle.num_gpu_blocks),
            (Some(32), Some(16384))
        );
    }

    #[test]
    fn real_vllm_exposition_gives_gauges_and_start_time() {
        let idle = parse_engine_metrics(&fixture("metrics.txt"));
        assert_eq!(
            (idle.running, idle.waiting, idle.kv_usage, idle.start_time),
            (Some(0.0), Some(0.0), Some(0.0), Some(1.7959416738e9))
        );
        let busy = parse_engine_metrics(&fixture("metrics-under-load.txt"));
        assert_eq!((busy.running, busy.waiting), (Some(5.0), Some(0.0)));
        assert_eq!(busy.kv_usage, Some(0.014649331624244644));
        assert_eq!(busy.start_time, Some(1.79610714098e9));
    }
}
