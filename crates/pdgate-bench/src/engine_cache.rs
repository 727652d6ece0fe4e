//! Cache reuse read from the engines' own counters: the deltas of vLLM's
//! `vllm:prefix_cache_hits_total` and `vllm:prefix_cache_queries_total` (both in tokens, summed
//! over the `engine` / `model_name` label sets) between a `/metrics` read before the run and
//! one after, per engine and over the fleet. Unlike `usage.prompt_tokens_details.cached_tokens`
//! this also counts the decode leg of a P/D split, which vLLM 0.32 reports as 0 cached.
//!
//! A counter that went backwards, or a changed `process_start_time_seconds`, means the engine
//! restarted during the run: its delta is then what the new process counted since it started
//! (Prometheus' `increase()` rule for a counter reset), and the engine is flagged, never given
//! a negative count. Pure: the readings come from [`crate::engine_metrics`].

use pdgate_fleet::scrape::{series_label, sum_series};
use serde::Serialize;

/// vLLM's counter of prompt tokens found in the prefix cache.
pub const HITS: &str = "vllm:prefix_cache_hits_total";
/// vLLM's counter of prompt tokens looked up in the prefix cache.
pub const QUERIES: &str = "vllm:prefix_cache_queries_total";
/// vLLM's info gauge whose labels carry the cache geometry (`block_size`, `num_gpu_blocks`).
pub const CACHE_CONFIG_INFO: &str = "vllm:cache_config_info";
/// The Prometheus process collector's start time (Unix s): a new value means a restart.
pub const START_TIME: &str = "process_start_time_seconds";

/// One engine's cache counters at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheCounters {
    /// Σ [`HITS`], tokens.
    pub hits: f64,
    /// Σ [`QUERIES`], tokens.
    pub queries: f64,
    /// [`START_TIME`], Unix s, when exported.
    pub start_time: Option<f64>,
    /// Cache geometry from [`CACHE_CONFIG_INFO`], when exported with both labels numeric.
    pub geometry: Option<CacheGeometry>,
}

/// An engine's KV cache shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheGeometry {
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV cache capacity, blocks.
    pub num_gpu_blocks: usize,
}

impl CacheCounters {
    /// Reads the counters from a Prometheus text exposition.
    ///
    /// Errors: the exposition lacks [`HITS`] or [`QUERIES`] (a message naming the metric).
    pub fn parse(text: &str) -> Result<Self, String> {
        let need = |name: &str| {
            sum_series(text, name).ok_or_else(|| format!("no `{name}` series in the exposition"))
        };
        let label = |l| series_label(text, CACHE_CONFIG_INFO, l).and_then(|v| v.parse().ok());
        let geometry = match (label("block_size"), label("num_gpu_blocks")) {
            (Some(block_size), Some(num_gpu_blocks)) => Some(CacheGeometry {
                block_size,
                num_gpu_blocks,
            }),
            _ => None,
        };
        Ok(CacheCounters {
            hits: need(HITS)?,
            queries: need(QUERIES)?,
            start_time: sum_series(text, START_TIME),
            geometry,
        })
    }
}

/// The change of one engine's counters over a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CounterDelta {
    /// Prompt tokens found in the prefix cache during the run.
    pub hit_tokens: u64,
    /// Prompt tokens looked up during the run.
    pub query_tokens: u64,
    /// The engine restarted during the run: the counts cover only the time since then.
    pub restarted: bool,
}

/// The change from `before` to `after`. A counter below its earlier value, or a different
/// start time, is a restart: the counts are then `after`'s own (counted since the restart).
pub fn counter_delta(before: &CacheCounters, after: &CacheCounters) -> CounterDelta {
    let new_process = matches!((before.start_time, after.start_time), (Some(a), Some(b)) if a != b);
    let restarted = new_process || after.hits < before.hits || after.queries < before.queries;
    let tokens = |v: f64| {
        if v.is_finite() && v > 0.0 {
            v.round() as u64
        } else {
            0
        }
    };
    if restarted {
        CounterDelta {
            hit_tokens: tokens(after.hits),
            query_tokens: tokens(after.queries),
            restarted,
        }
    } else {
        CounterDelta {
            hit_tokens: tokens(after.hits - before.hits),
            query_tokens: tokens(after.queries - before.queries),
            restarted,
        }
    }
}

/// One engine's reuse over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineReuse {
    /// The `/metrics` URL read.
    pub url: String,
    /// The counters' change, `None` when the read after the run failed.
    pub delta: Option<CounterDelta>,
    /// `hit_tokens / query_tokens`, 0..1 (0 with no query).
    pub share: f64,
    /// Why the read after the run failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Reuse over the whole fleet, from every engine that could be read after the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetReuse {
    /// Σ hit tokens.
    pub hit_tokens: u64,
    /// Σ query tokens.
    pub query_tokens: u64,
    /// `hit_tokens / query_tokens`, 0..1 (0 with no query).
    pub share: f64,
    /// Engines that restarted during the run (their counts cover only the time since then).
    pub restarted: usize,
    /// Engines whose `/metrics` could not be read after the run (left out of the sums).
    pub unreadable: usize,
    /// Largest engine's query tokens over the mean of the read engines' (1 = even spread of
    /// prompt tokens; n = everything on one of n engines); 0 with no query.
    pub max_over_fair: f64,
    /// Per engine, in the order given.
    pub engines: Vec<EngineReuse>,
}

impl FleetReuse {
    /// Sums `engines` (URL, counters before, counters after or the read error).
    pub fn from_readings(
        readings: &[(String, CacheCounters, Result<CacheCounters, String>)],
    ) -> Self {
        let engines: Vec<EngineReuse> = readings
            .iter()
            .map(|(url, before, after)| match after {
                Ok(after) => {
                    let d = counter_delta(before, after);
                    EngineReuse {
                        url: url.clone(),
                        delta: Some(d),
                        share: ratio(d.hit_tokens, d.query_tokens),
                        error: None,
                    }
                }
                Err(e) => EngineReuse {
                    url: url.clone(),
                    delta: None,
                    share: 0.0,
                    error: Some(e.clone()),
                },
            })
            .collect();
        let read: Vec<CounterDelta> = engines.iter().filter_map(|e| e.delta).collect();
        let hit_tokens = read.iter().map(|d| d.hit_tokens).sum();
        let query_tokens: u64 = read.iter().map(|d| d.query_tokens).sum();
        let max = read.iter().map(|d| d.query_tokens).max().unwrap_or(0);
        let max_over_fair = if query_tokens == 0 {
            0.0
        } else {
            max as f64 * read.len() as f64 / query_tokens as f64
        };
        FleetReuse {
            hit_tokens,
            query_tokens,
            share: ratio(hit_tokens, query_tokens),
            restarted: read.iter().filter(|d| d.restarted).count(),
            unreadable: engines.len() - read.len(),
            max_over_fair,
            engines,
        }
    }
}

/// The fleet's ceiling geometry from the engines' readings: `(block_size, Σ num_gpu_blocks)`;
/// `Ok(None)` when there is no engine or one of them exports no geometry.
///
/// Errors: the engines have different block sizes (one ceiling cannot model them).
pub fn fleet_geometry(engines: &[CacheCounters]) -> Result<Option<(usize, usize)>, String> {
    let Some(all) = engines
        .iter()
        .map(|e| e.geometry)
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let Some(first) = all.first() else {
        return Ok(None);
    };
    if let Some(other) = all.iter().find(|g| g.block_size != first.block_size) {
        return Err(format!(
            "the engines have different block sizes ({} and {} tokens)",
            first.block_size, other.block_size
        ));
    }
    Ok(Some((
        first.block_size,
        all.iter().map(|g| g.num_gpu_blocks).sum(),
    )))
}

/// `num / den`, 0 when `den` is 0.
pub fn ratio(num: u64, den: u64) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(hits: f64, queries: f64, start: Option<f64>) -> CacheCounters {
        CacheCounters {
            hits,
            queries,
            start_time: start,
            geometry: None,
        }
    }

    #[test]
    fn parse_reads_counters_start_time_and_geometry() {
        let text = "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 64.0\n\
            vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"m\"} 16.0\n\
            vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"m\"} 208.0\n\
            process_start_time_seconds 17.5\n\
            vllm:cache_config_info{block_size=\"32\",engine=\"0\",num_gpu_blocks=\"80\"} 1\n";
        let c = CacheCounters::parse(text).unwrap();
        assert_eq!(
            c,
            CacheCounters {
                hits: 80.0,
                queries: 208.0,
                start_time: Some(17.5),
                geometry: Some(CacheGeometry {
                    block_size: 32,
                    num_gpu_blocks: 80
                }),
            }
        );
        assert_eq!(
            CacheCounters::parse("vllm:prefix_cache_hits_total 1\n").unwrap_err(),
            "no `vllm:prefix_cache_queries_total` series in the exposition"
        );
    }

    #[test]
    fn deltas_and_restarts_never_go_negative() {
        let d = counter_delta(
            &counters(64.0, 208.0, Some(1.0)),
            &counters(96.0, 400.0, Some(1.0)),
        );
        assert_eq!(
            d,
            CounterDelta {
                hit_tokens: 32,
                query_tokens: 192,
                restarted: false
            }
        );
        // Counter reset: the new process counted 16 / 48 since it started.
        let d = counter_delta(&counters(64.0, 208.0, None), &counters(16.0, 48.0, None));
        assert_eq!(
            d,
            CounterDelta {
                hit_tokens: 16,
                query_tokens: 48,
                restarted: true
            }
        );
        // Only one counter went back: still a restart.
        let d = counter_delta(&counters(64.0, 208.0, None), &counters(64.0, 100.0, None));
        assert_eq!((d.hit_tokens, d.query_tokens, d.restarted), (64, 100, true));
        // A new start time with counters that grew past the old values: a restart too.
        let d = counter_delta(
            &counters(10.0, 20.0, Some(1.0)),
            &counters(30.0, 90.0, Some(2.0)),
        );
        assert_eq!((d.hit_tokens, d.query_tokens, d.restarted), (30, 90, true));
        // Unchanged: zero, not a restart.
        let same = counters(5.0, 9.0, Some(1.0));
        assert_eq!(
            counter_delta(&same, &same),
            CounterDelta {
                hit_tokens: 0,
                query_tokens: 0,
                restarted: false
            }
        );
    }

    #[test]
    fn geometry_sums_capacity_and_needs_one_block_size() {
        let g = |block_size, num_gpu_blocks| CacheCounters {
            geometry: Some(CacheGeometry {
                block_size,
                num_gpu_blocks,
            }),
            ..counters(0.0, 0.0, None)
        };
        assert_eq!(
            fleet_geometry(&[g(16, 100), g(16, 50)]),
            Ok(Some((16, 150)))
        );
        assert_eq!(fleet_geometry(&[]), Ok(None));
        assert_eq!(
            fleet_geometry(&[g(16, 100), counters(0.0, 0.0, None)]),
            Ok(None)
        );
        assert_eq!(
            fleet_geometry(&[g(16, 100), g(32, 50)]),
            Err("the engines have different block sizes (16 and 32 tokens)".to_string())
        );
    }

    #[test]
    fn fleet_sums_read_engines_and_flags_the_rest() {
        let readings = vec![
            (
                "a".to_string(),
                counters(0.0, 0.0, None),
                Ok(counters(30.0, 100.0, None)),
            ),
            (
                "b".to_string(),
                counters(50.0, 50.0, None),
                Ok(counters(10.0, 200.0, None)),
            ),
            (
                "c".to_string(),
                counters(0.0, 0.0, None),
                Err("timed out".to_string()),
            ),
        ];
        let f = FleetReuse::from_readings(&readings);
        assert_eq!((f.hit_tokens, f.query_tokens), (40, 300));
        assert!((f.share - 40.0 / 300.0).abs() < 1e-12);
        assert_eq!((f.restarted, f.unreadable), (1, 1));
        // max 200 over the mean 150 of the two engines read.
        assert!((f.max_over_fair - 200.0 / 150.0).abs() < 1e-12);
        assert_eq!(f.engines[0].share, 0.3);
        assert_eq!(f.engines[2].error.as_deref(), Some("timed out"));
        assert_eq!(f.engines[2].delta, None);
        let empty = FleetReuse::from_readings(&[]);
        assert_eq!((empty.share, empty.max_over_fair), (0.0, 0.0));
    }
}
