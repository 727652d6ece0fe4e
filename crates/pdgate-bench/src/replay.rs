//! The replay loop: send each [`WorkItem`] at `at_ms / speedup` from the start, at most
//! `concurrency` in flight, and summarize the outcomes in a [`Report`].

use crate::client::send_one;
use crate::report::Report;
use crate::targets::Targets;
use crate::work::WorkItem;
use indicatif::{ProgressBar, ProgressStyle};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// How to replay a workload.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// Base URLs of OpenAI-compatible servers, e.g. `http://127.0.0.1:8000`: request *i* of
    /// the workload goes to URL *i* mod *n* (see [`Targets`]).
    pub urls: Vec<String>,
    /// `model` sent in every body.
    pub model: String,
    /// Arrival times are divided by this; `0` or `inf` = send as fast as `concurrency` allows.
    pub speedup: f64,
    /// Most requests in flight at once (at least 1).
    pub concurrency: usize,
    /// Cap on each request's `max_tokens`, in tokens.
    pub max_output_tokens: Option<u32>,
    /// Draw a progress bar on stderr (only when stderr is a terminal).
    pub progress: bool,
    /// Extra headers sent on every request (e.g. pins), `(name, value)`.
    pub headers: Vec<(String, String)>,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Send each request only after the previous one's response head arrived, so the server
    /// sees the requests in exactly the workload's order (order-sensitive baselines such as
    /// round-robin then replay identically); arrival times become at least that late.
    pub ordered: bool,
}

impl ReplayConfig {
    /// Defaults for one `url` and `model`: speedup 1, concurrency 64, no cap, no progress bar, no
    /// extra headers, 10 s connect timeout, not ordered.
    pub fn new(url: impl Into<String>, model: impl Into<String>) -> Self {
        ReplayConfig {
            urls: vec![url.into()],
            model: model.into(),
            speedup: 1.0,
            concurrency: 64,
            max_output_tokens: None,
            progress: false,
            ordered: false,
            headers: Vec::new(),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Send offset of an item arriving at `at_ms` under `speedup`; `None` = do not wait.
///
/// Errors: `speedup` negative or NaN.
pub fn send_offset(at_ms: u64, speedup: f64) -> anyhow::Result<Option<Duration>> {
    if speedup.is_nan() || speedup < 0.0 {
        anyhow::bail!("speedup must be >= 0 (0 or inf = no pacing), got {speedup}");
    }
    if speedup == 0.0 || speedup.is_infinite() {
        return Ok(None);
    }
    Ok(Some(Duration::from_secs_f64(
        at_ms as f64 / 1_000.0 / speedup,
    )))
}

/// Replays `work` against `cfg.urls` (in turn) and reports. Requests go to `/v1/completions`
/// or `/v1/chat/completions` by item kind (see [`WorkItem::body`]). With several URLs each
/// record names its URL and the report counts them (`requests_by_url`).
///
/// Errors: bad `speedup`, `concurrency` 0, no URL, an invalid extra header, or an HTTP client
/// that cannot be built. Request failures are not errors: they are counted in the report.
pub async fn replay(cfg: &ReplayConfig, work: Vec<WorkItem>) -> anyhow::Result<Report> {
    send_offset(0, cfg.speedup)?;
    anyhow::ensure!(cfg.concurrency >= 1, "concurrency must be at least 1");
    let headers = Arc::new(header_map(&cfg.headers)?);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(cfg.concurrency)
        .connect_timeout(cfg.connect_timeout)
        .build()?;
    let targets = Targets::new(&cfg.urls)?;
    let bar = progress_bar(cfg.progress, work.len() as u64);
    let slots = Arc::new(Semaphore::new(cfg.concurrency));
    let mut tasks = JoinSet::new();
    let mut records = Vec::with_capacity(work.len());
    let start = Instant::now();
    for (index, item) in work.into_iter().enumerate() {
        if let Some(offset) = send_offset(item.at_ms, cfg.speedup)? {
            tokio::time::sleep_until((start + offset).into()).await;
        }
        let permit = slots.clone().acquire_owned().await?;
        let body = item.body(&cfg.model, cfg.max_output_tokens);
        let base = targets.for_request(index);
        let url = format!("{base}{}", item.api().path());
        let named = targets.several().then(|| base.to_string());
        let (client, headers, bar) = (client.clone(), headers.clone(), bar.clone());
        let (head_tx, head_rx) = tokio::sync::oneshot::channel();
        tasks.spawn(async move {
            let mut record = send_one(&client, &url, &headers, &body, index, Some(head_tx)).await;
            record.url = named;
            drop(permit);
            bar.inc(1);
            record
        });
        if cfg.ordered {
            // The server has seen this request (its response head came back) before the next
            // one is sent: arrival order is the trace's order exactly.
            let _ = head_rx.await;
        }
        while let Some(done) = tasks.try_join_next() {
            records.push(done?);
        }
    }
    while let Some(done) = tasks.join_next().await {
        records.push(done?);
    }
    bar.finish_and_clear();
    Ok(Report::from_records(records, start.elapsed().as_secs_f64()))
}

fn header_map(pairs: &[(String, String)]) -> anyhow::Result<HeaderMap> {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let n = HeaderName::try_from(name.as_str())
            .map_err(|e| anyhow::anyhow!("header name `{name}`: {e}"))?;
        let v = HeaderValue::try_from(value.as_str())
            .map_err(|e| anyhow::anyhow!("header `{name}` value: {e}"))?;
        map.append(n, v);
    }
    Ok(map)
}

fn progress_bar(enabled: bool, len: u64) -> ProgressBar {
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} requests ({eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_scale_with_speedup() {
        assert_eq!(
            send_offset(1_500, 1.0).unwrap(),
            Some(Duration::from_millis(1_500))
        );
        assert_eq!(
            send_offset(1_500, 3.0).unwrap(),
            Some(Duration::from_millis(500))
        );
        assert_eq!(send_offset(1_500, 0.0).unwrap(), None);
        assert_eq!(send_offset(1_500, f64::INFINITY).unwrap(), None);
        assert_eq!(
            send_offset(0, -1.0).unwrap_err().to_string(),
            "speedup must be >= 0 (0 or inf = no pacing), got -1"
        );
    }

    #[test]
    fn bad_header_names_are_rejected() {
        let e = header_map(&[("bad name".into(), "v".into())]).unwrap_err();
        assert!(e.to_string().starts_with("header name `bad name`: "));
    }
}
