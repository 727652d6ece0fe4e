//! Reading the engines' `/metrics` around a run (the IO half of [`crate::engine_cache`]).

use crate::engine_cache::CacheCounters;
use futures_util::future::join_all;
use std::time::Duration;

/// Time allowed for one `/metrics` read, head and body: real vLLM scrapes took up to 1.7 s
/// under load (`shared/tools/real-vllm/README.md`).
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// The `/metrics` URL of `url`: itself when it has a path, else `{url}/metrics` (so an
/// engine's base URL works too).
///
/// Errors: `url` is not an absolute http(s) URL.
pub fn metrics_url(url: &str) -> anyhow::Result<String> {
    let trimmed = url.trim();
    let parsed = reqwest::Url::parse(trimmed)
        .map_err(|e| anyhow::anyhow!("--engine-metrics `{trimmed}`: not a URL: {e}"))?;
    anyhow::ensure!(
        matches!(parsed.scheme(), "http" | "https"),
        "--engine-metrics `{trimmed}`: scheme must be http or https"
    );
    Ok(if parsed.path() == "/" {
        format!("{}/metrics", trimmed.trim_end_matches('/'))
    } else {
        trimmed.to_string()
    })
}

/// Reads and parses one engine's counters.
///
/// Errors (as text naming the URL): transport failure or timeout, a non-2xx status, or an
/// exposition without the prefix-cache counters.
pub async fn read_counters(client: &reqwest::Client, url: &str) -> Result<CacheCounters, String> {
    let fail = |e: &dyn std::fmt::Display| format!("GET {url}: {e}");
    let resp = client
        .get(url)
        .timeout(SCRAPE_TIMEOUT)
        .send()
        .await
        .map_err(|e| fail(&e))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(fail(&format!("status {status}")));
    }
    let text = resp.text().await.map_err(|e| fail(&e))?;
    CacheCounters::parse(&text).map_err(|e| fail(&e))
}

/// Reads every engine at once; results in the order of `urls`.
pub async fn read_all(
    client: &reqwest::Client,
    urls: &[String],
) -> Vec<Result<CacheCounters, String>> {
    join_all(urls.iter().map(|u| read_counters(client, u))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_get_the_metrics_path() {
        assert_eq!(
            metrics_url("http://127.0.0.1:8000").unwrap(),
            "http://127.0.0.1:8000/metrics"
        );
        assert_eq!(metrics_url("http://h:1/").unwrap(), "http://h:1/metrics");
        assert_eq!(
            metrics_url(" http://h:1/custom/metrics ").unwrap(),
            "http://h:1/custom/metrics"
        );
        assert!(metrics_url("h:1")
            .unwrap_err()
            .to_string()
            .starts_with("--engine-metrics `h:1`: "));
        assert_eq!(
            metrics_url("ftp://h/").unwrap_err().to_string(),
            "--engine-metrics `ftp://h/`: scheme must be http or https"
        );
    }
}
