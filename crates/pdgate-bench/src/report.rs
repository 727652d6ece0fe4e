//! [`Report`]: the summary of one replay (design.md §7), built from [`RequestRecord`]s.
//! JSON field names are stable (snake_case); the table is in [`crate::render`].

use crate::ceiling::Ceiling;
use crate::engine_cache::FleetReuse;
use crate::record::RequestRecord;
use crate::stats::{LatencyHistogram, Percentiles};
use serde::Serialize;
use std::collections::BTreeMap;

/// Summary of one replay. Latencies and token counts cover ok requests only; the served-by
/// maps cover every request that carried the headers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// Requests sent.
    pub requests: u64,
    /// Requests that succeeded (2xx, no stream error).
    pub ok: u64,
    /// Failed requests by status label (`"503"`, `"stream_error"`, `"transport"`, ...).
    pub errors: BTreeMap<String, u64>,
    /// Failed / sent, 0..1 (0 when nothing was sent).
    pub error_rate: f64,
    /// Time to first content token, ms.
    pub ttft_ms: Percentiles,
    /// Inter-token latency (gap between content chunks), ms.
    pub itl_ms: Percentiles,
    /// End-to-end latency, ms.
    pub e2e_ms: Percentiles,
    /// Wall time of the replay, s.
    pub duration_s: f64,
    /// Σ output tokens.
    pub output_tokens: u64,
    /// Σ output tokens / duration, tokens per s.
    pub output_tokens_per_s: f64,
    /// Σ prompt tokens reported in `usage`.
    pub prompt_tokens: u64,
    /// Σ cached prompt tokens (`usage.prompt_tokens_details.cached_tokens`).
    pub cached_tokens: u64,
    /// `cached_tokens / prompt_tokens`, 0..1 (0 when no usage was reported).
    pub cached_token_ratio: f64,
    /// Requests per endpoint and phase: `"prefill:<name>"` / `"decode:<name>"`, or
    /// `"aggregated:<name>"` when one endpoint ran both (`x-pdgate-pd-mode: aggregated`) → count.
    pub requests_by_endpoint: BTreeMap<String, u64>,
    /// `x-pdgate-pd-mode` value → count.
    pub pd_modes: BTreeMap<String, u64>,
    /// Served revision mix: `"prefill:<rev>"` / `"decode:<rev>"` → count.
    pub revisions: BTreeMap<String, u64>,
    /// Requests sent to each base URL, when the replay alternated over several (empty, and
    /// absent from the JSON, with one).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub requests_by_url: BTreeMap<String, u64>,
    /// Cache reuse from the engines' own counters over the run (`--engine-metrics`; absent,
    /// and absent from the JSON, without it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_cache: Option<FleetReuse>,
    /// The offline ceiling of cache reuse for the prompts of the requests that succeeded, on
    /// the fleet's geometry
    /// (absent when the block size or capacity is unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ceiling: Option<Ceiling>,
    /// One record per request, in workload order.
    pub records: Vec<RequestRecord>,
}

fn bump(map: &mut BTreeMap<String, u64>, key: String) {
    *map.entry(key).or_default() += 1;
}

impl Report {
    /// Summarizes `records` (sorted by index here) of a replay that took `duration_s` s.
    pub fn from_records(mut records: Vec<RequestRecord>, duration_s: f64) -> Report {
        records.sort_by_key(|r| r.index);
        let mut rep = Report {
            requests: records.len() as u64,
            duration_s,
            ..Report::default()
        };
        let (mut ttft, mut itl, mut e2e) = Default::default();
        for r in &records {
            let s = &r.served;
            if s.pd_mode.as_deref() == Some("aggregated") {
                // One endpoint ran both phases.
                if let Some(name) = &s.decode_endpoint {
                    bump(&mut rep.requests_by_endpoint, format!("aggregated:{name}"));
                }
            } else {
                let phases = [
                    ("prefill", &s.prefill_endpoint),
                    ("decode", &s.decode_endpoint),
                ];
                for (phase, name) in phases {
                    if let Some(name) = name {
                        bump(&mut rep.requests_by_endpoint, format!("{phase}:{name}"));
                    }
                }
            }
            let revisions = [
                ("prefill", &s.prefill_revision),
                ("decode", &s.decode_revision),
            ];
            for (phase, rev) in revisions {
                if let Some(rev) = rev {
                    bump(&mut rep.revisions, format!("{phase}:{rev}"));
                }
            }
            if let Some(mode) = &s.pd_mode {
                bump(&mut rep.pd_modes, mode.clone());
            }
            if let Some(url) = &r.url {
                bump(&mut rep.requests_by_url, url.clone());
            }
            if !r.ok {
                bump(&mut rep.errors, r.status.clone());
                continue;
            }
            rep.ok += 1;
            record_ok(r, &mut ttft, &mut itl, &mut e2e);
            rep.output_tokens += u64::from(r.output_tokens);
            if let Some(p) = r.prompt_tokens {
                rep.prompt_tokens += u64::from(p);
                rep.cached_tokens += u64::from(r.cached_tokens.unwrap_or(0));
            }
        }
        rep.error_rate = ratio(rep.requests - rep.ok, rep.requests);
        rep.cached_token_ratio = ratio(rep.cached_tokens, rep.prompt_tokens);
        rep.output_tokens_per_s = if duration_s > 0.0 {
            rep.output_tokens as f64 / duration_s
        } else {
            0.0
        };
        rep.ttft_ms = ttft.percentiles();
        rep.itl_ms = itl.percentiles();
        rep.e2e_ms = e2e.percentiles();
        rep.records = records;
        rep
    }
}

fn record_ok(
    r: &RequestRecord,
    ttft: &mut LatencyHistogram,
    itl: &mut LatencyHistogram,
    e2e: &mut LatencyHistogram,
) {
    if let Some(t) = r.ttft_ms {
        ttft.record_ms(t);
    }
    for &gap in &r.itl_ms {
        itl.record_ms(gap);
    }
    e2e.record_ms(r.e2e_ms);
}

use crate::engine_cache::ratio;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::ServedBy;

    fn ok(index: usize, decode: &str, ttft: f64, prompt: u32, cached: u32) -> RequestRecord {
        RequestRecord {
            index,
            status: "200".into(),
            ok: true,
            served: ServedBy {
                prefill_endpoint: Some("p0".into()),
                decode_endpoint: Some(decode.into()),
                decode_revision: Some("v1".into()),
                pd_mode: Some("split".into()),
                ..ServedBy::default()
            },
            prompt_tokens: Some(prompt),
            cached_tokens: Some(cached),
            output_tokens: 10,
            ttft_ms: Some(ttft),
            e2e_ms: ttft + 20.0,
            itl_ms: vec![2.0, 4.0],
            ..RequestRecord::default()
        }
    }

    #[test]
    fn counts_ratios_and_percentiles() {
        let failed = RequestRecord {
            index: 0,
            status: "503".into(),
            error: Some("no endpoints".into()),
            e2e_ms: 1.0,
            ..RequestRecord::default()
        };
        let recs = vec![
            ok(3, "d1", 30.0, 100, 50),
            failed,
            ok(1, "d0", 10.0, 100, 0),
            ok(2, "d0", 20.0, 200, 100),
        ];
        let r = Report::from_records(recs, 2.0);
        assert_eq!((r.requests, r.ok), (4, 3));
        assert_eq!(r.errors, BTreeMap::from([("503".to_string(), 1)]));
        assert_eq!(r.error_rate, 0.25);
        assert_eq!((r.prompt_tokens, r.cached_tokens), (400, 150));
        assert_eq!(r.cached_token_ratio, 0.375);
        assert_eq!((r.output_tokens, r.output_tokens_per_s), (30, 15.0));
        assert_eq!(
            (r.ttft_ms.count, r.ttft_ms.p50, r.ttft_ms.p90, r.ttft_ms.max),
            (3, 20.0, 30.0, 30.0)
        );
        assert_eq!((r.e2e_ms.p50, r.e2e_ms.p99), (40.0, 50.0));
        assert_eq!((r.itl_ms.count, r.itl_ms.p50, r.itl_ms.p99), (6, 2.0, 4.0));
        assert_eq!(
            r.requests_by_endpoint,
            BTreeMap::from([
                ("decode:d0".to_string(), 2),
                ("decode:d1".to_string(), 1),
                ("prefill:p0".to_string(), 3)
            ])
        );
        assert_eq!(r.pd_modes, BTreeMap::from([("split".to_string(), 3)]));
        assert_eq!(r.revisions, BTreeMap::from([("decode:v1".to_string(), 3)]));
        assert_eq!(
            r.records.iter().map(|r| r.index).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
    }

    #[test]
    fn requests_by_url_counts_every_request_when_urls_are_named() {
        let on = |r: RequestRecord, url: &str| RequestRecord {
            url: Some(url.into()),
            ..r
        };
        let failed = RequestRecord {
            index: 2,
            status: "503".into(),
            ..RequestRecord::default()
        };
        let recs = vec![
            on(ok(0, "d0", 5.0, 10, 5), "http://a"),
            on(ok(1, "d0", 5.0, 10, 5), "http://b"),
            on(failed, "http://a"),
        ];
        let r = Report::from_records(recs, 1.0);
        assert_eq!(
            r.requests_by_url,
            BTreeMap::from([("http://a".to_string(), 2), ("http://b".to_string(), 1)])
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v["requests_by_url"],
            serde_json::json!({"http://a": 2, "http://b": 1})
        );
        assert_eq!(v["records"][1]["url"], "http://b");
        let table = r.render_table();
        let url_rows: Vec<Vec<&str>> = table
            .lines()
            .filter(|l| l.starts_with("url "))
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            url_rows,
            [["url", "http://a", "2"], ["url", "http://b", "1"]]
        );
    }

    #[test]
    fn json_field_names_are_stable() {
        let r = Report::from_records(vec![ok(0, "d0", 5.0, 10, 5)], 1.0);
        let v = serde_json::to_value(&r).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            vec![
                "cached_token_ratio",
                "cached_tokens",
                "duration_s",
                "e2e_ms",
                "error_rate",
                "errors",
                "itl_ms",
                "ok",
                "output_tokens",
                "output_tokens_per_s",
                "pd_modes",
                "prompt_tokens",
                "records",
                "requests",
                "requests_by_endpoint",
                "revisions",
                "ttft_ms"
            ]
        );
        assert_eq!(
            v["records"][0],
            serde_json::json!({"index": 0, "status": "200", "ok": true, "error": null,
                "prefill_endpoint": "p0", "decode_endpoint": "d0", "prefill_revision": null,
                "decode_revision": "v1", "pd_mode": "split", "prompt_tokens": 10,
                "cached_tokens": 5, "output_tokens": 10, "ttft_ms": 5.0, "e2e_ms": 25.0})
        );
    }
}
