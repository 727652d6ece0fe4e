//! The routing-quality table: one row per run (policy), the columns that compare routers on
//! one fleet — cache share from the engines' counters, cache share from `usage`, the two
//! ceilings, TTFT, errors, and how unevenly the prompt tokens were spread. `pdgate bench
//! --summary FILE --label NAME` appends its row, so runs of several routers (each a separate
//! bench) build one table.

use crate::render::percentiles;
use crate::report::Report;
use std::io::Write;
use std::path::Path;

/// Column titles, in order.
pub const COLUMNS: [&str; 8] = [
    "policy",
    "engine cache",
    "usage cached",
    "ceiling inf",
    "ceiling LRU",
    "ttft ms p50/p90/p99",
    "errors",
    "max/fair",
];

/// Column widths (the label column grows past 24 characters when needed).
const WIDTHS: [usize; 8] = [24, 12, 12, 11, 11, 25, 12, 8];

/// The table's header line, `\n`-ended.
pub fn header() -> String {
    line(&COLUMNS.map(str::to_string))
}

/// The row of `report` under `label`, `\n`-ended. Engine cache: Σ hits / Σ queries over the
/// engines (`-` without `--engine-metrics`; `*` marks a fleet where an engine restarted or
/// could not be read); max/fair: the engines' query tokens, else requests per endpoint from
/// the served-by headers (`-` without either).
pub fn row(label: &str, report: &Report) -> String {
    let engine = report.engine_cache.as_ref().map_or("-".to_string(), |f| {
        let flag = if f.restarted + f.unreadable > 0 {
            "*"
        } else {
            ""
        };
        format!("{:.3}{flag}", f.share)
    });
    let (inf, lru) = report
        .ceiling
        .as_ref()
        .map_or(("-".into(), "-".into()), |c| {
            (
                format!("{:.3}", c.infinite_share),
                format!("{:.3}", c.lru_share),
            )
        });
    let max_fair = match &report.engine_cache {
        Some(f) if f.query_tokens > 0 => format!("{:.2}", f.max_over_fair),
        _ => endpoint_max_over_fair(report).map_or("-".into(), |v| format!("{v:.2}")),
    };
    line(&[
        label.to_string(),
        engine,
        format!("{:.3}", report.cached_token_ratio),
        inf,
        lru,
        percentiles(&report.ttft_ms),
        format!(
            "{} ({:.1}%)",
            report.requests - report.ok,
            report.error_rate * 100.0
        ),
        max_fair,
    ])
}

/// Largest request count per endpoint over the mean, from the served-by headers.
fn endpoint_max_over_fair(report: &Report) -> Option<f64> {
    let counts: Vec<u64> = report.requests_by_endpoint.values().copied().collect();
    let total: u64 = counts.iter().sum();
    let max = *counts.iter().max()?;
    (total > 0).then(|| max as f64 * counts.len() as f64 / total as f64)
}

fn line(cells: &[String; 8]) -> String {
    let padded: Vec<String> = cells
        .iter()
        .zip(WIDTHS)
        .map(|(c, w)| format!("{c:<w$}"))
        .collect();
    let mut out = padded.join("  ").trim_end().to_string();
    out.push('\n');
    out
}

/// Appends `report`'s row under `label` to the table in `path`, writing the header first when
/// the file is new or empty.
///
/// Errors: the file cannot be opened or written (naming it).
pub fn append_row(path: &Path, label: &str, report: &Report) -> anyhow::Result<()> {
    let err = |e: std::io::Error| anyhow::anyhow!("summary {}: {e}", path.display());
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err)?;
    let empty = f.metadata().map_err(err)?.len() == 0;
    let mut text = if empty { header() } else { String::new() };
    text.push_str(&row(label, report));
    f.write_all(text.as_bytes()).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ceiling::{CacheShare, Ceiling};
    use crate::engine_cache::{CacheCounters, FleetReuse};
    use crate::stats::Percentiles;

    fn report() -> Report {
        let c = |h, q| CacheCounters {
            hits: h,
            queries: q,
            start_time: None,
            geometry: None,
        };
        Report {
            requests: 10,
            ok: 9,
            error_rate: 0.1,
            cached_token_ratio: 0.25,
            ttft_ms: Percentiles {
                count: 9,
                mean: 2.0,
                p50: 1.0,
                p90: 2.5,
                p99: 3.0,
                max: 3.0,
            },
            engine_cache: Some(FleetReuse::from_readings(&[
                ("a".into(), c(0.0, 0.0), Ok(c(30.0, 100.0))),
                ("b".into(), c(0.0, 0.0), Ok(c(10.0, 300.0))),
            ])),
            ceiling: Some(Ceiling {
                block_size: 16,
                capacity_blocks: 8,
                infinite: CacheShare::default(),
                infinite_share: 0.5,
                lru: CacheShare::default(),
                lru_share: 0.125,
            }),
            ..Report::default()
        }
    }

    #[test]
    fn rows_line_up_under_the_header() {
        let r = report();
        let table = header() + &row("pdgate-precise", &r) + &row("rr", &Report::default());
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "policy                    engine cache  usage cached  ceiling inf  ceiling LRU  ttft ms p50/p90/p99        errors        max/fair"
        );
        assert_eq!(
            lines[1],
            "pdgate-precise            0.100         0.250         0.500        0.125        1.0 / 2.5 / 3.0            1 (10.0%)     1.50"
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["rr", "-", "0.000", "-", "-", "-", "0", "(0.0%)", "-"]
        );
        // Column starts agree between header and rows.
        assert_eq!(lines[0].find("engine cache"), lines[1].find("0.100"));
        assert_eq!(lines[0].find("max/fair"), lines[1].find("1.50"));
    }

    #[test]
    fn max_over_fair_falls_back_to_served_by_counts() {
        let r = Report {
            requests_by_endpoint: [
                ("aggregated:a".to_string(), 3),
                ("aggregated:b".to_string(), 1),
            ]
            .into(),
            ..Report::default()
        };
        assert_eq!(endpoint_max_over_fair(&r), Some(1.5));
        assert!(row("x", &r).trim_end().ends_with("1.50"));
    }

    #[test]
    fn append_row_writes_the_header_once() {
        let dir = std::env::temp_dir().join(format!("pdgate-quality-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("table.txt");
        let _ = std::fs::remove_file(&path);
        append_row(&path, "a", &report()).unwrap();
        append_row(&path, "b", &report()).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(text.starts_with("policy "));
        assert!(text.lines().nth(2).unwrap().starts_with("b "));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
