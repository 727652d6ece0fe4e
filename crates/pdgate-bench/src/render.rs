//! Text tables of [`Report`]s: one line per metric; the error line sits right above the
//! latency lines so latency is never read without it.

use crate::report::Report;
use crate::stats::Percentiles;
use std::collections::BTreeMap;

impl Report {
    /// The report as a two-column table (metric, value), one line per metric, `\n`-ended.
    pub fn render_table(&self) -> String {
        render_side_by_side(&[("value", self)])
    }

    /// `(metric, value)` rows in display order.
    fn rows(&self) -> Vec<(String, String)> {
        let mut rows = vec![
            ("requests".to_string(), self.requests.to_string()),
            ("ok".to_string(), self.ok.to_string()),
            (
                "errors".to_string(),
                format!(
                    "{} ({:.1}%){}",
                    self.requests - self.ok,
                    self.error_rate * 100.0,
                    map_suffix(&self.errors)
                ),
            ),
        ];
        for (name, p) in [
            ("ttft", &self.ttft_ms),
            ("itl", &self.itl_ms),
            ("e2e", &self.e2e_ms),
        ] {
            rows.push((format!("{name} ms p50/p90/p99"), percentiles(p)));
        }
        rows.extend([
            ("duration s".to_string(), format!("{:.2}", self.duration_s)),
            (
                "output tok/s".to_string(),
                format!("{:.1}", self.output_tokens_per_s),
            ),
            (
                "cached-token ratio".to_string(),
                format!(
                    "{:.3} ({}/{})",
                    self.cached_token_ratio, self.cached_tokens, self.prompt_tokens
                ),
            ),
        ]);
        rows.extend(self.cache_rows());
        for (k, v) in &self.pd_modes {
            rows.push((format!("pd mode {k}"), v.to_string()));
        }
        for (k, v) in &self.revisions {
            rows.push((format!("revision {k}"), v.to_string()));
        }
        for (k, v) in &self.requests_by_endpoint {
            rows.push((format!("endpoint {k}"), v.to_string()));
        }
        for (k, v) in &self.requests_by_url {
            rows.push((format!("url {k}"), v.to_string()));
        }
        rows
    }
}

impl Report {
    /// Rows of the engine-counter reuse and the ceiling, when measured.
    fn cache_rows(&self) -> Vec<(String, String)> {
        let mut rows = Vec::new();
        if let Some(f) = &self.engine_cache {
            let mut notes = String::new();
            if f.restarted > 0 {
                notes.push_str(&format!(", {} restarted", f.restarted));
            }
            if f.unreadable > 0 {
                notes.push_str(&format!(", {} unreadable", f.unreadable));
            }
            rows.push((
                "engine cache share".to_string(),
                format!(
                    "{:.3} ({}/{} tokens, {} engines{notes})",
                    f.share,
                    f.hit_tokens,
                    f.query_tokens,
                    f.engines.len()
                ),
            ));
            rows.push((
                "engine load max/fair".to_string(),
                format!("{:.2}", f.max_over_fair),
            ));
            for e in &f.engines {
                let value = match (&e.delta, &e.error) {
                    (Some(d), _) => format!(
                        "{:.3} ({}/{}){}",
                        e.share,
                        d.hit_tokens,
                        d.query_tokens,
                        if d.restarted {
                            " restarted: counted since the restart"
                        } else {
                            ""
                        }
                    ),
                    (None, Some(err)) => format!("unreadable: {err}"),
                    (None, None) => "-".to_string(),
                };
                rows.push((format!("engine cache {}", e.url), value));
            }
        }
        if let Some(c) = &self.ceiling {
            rows.push((
                "ceiling infinite cache".to_string(),
                format!(
                    "{:.3} ({}/{}, {}-token blocks)",
                    c.infinite_share, c.infinite.hit_tokens, c.infinite.query_tokens, c.block_size
                ),
            ));
            rows.push((
                "ceiling fleet LRU".to_string(),
                format!(
                    "{:.3} ({}/{}, {} blocks)",
                    c.lru_share, c.lru.hit_tokens, c.lru.query_tokens, c.capacity_blocks
                ),
            ));
        }
        rows
    }
}

/// `p50 / p90 / p99` in ms with one decimal, `-` without samples.
pub(crate) fn percentiles(p: &Percentiles) -> String {
    if p.count == 0 {
        "-".to_string()
    } else {
        format!("{:.1} / {:.1} / {:.1}", p.p50, p.p90, p.p99)
    }
}

fn map_suffix(m: &BTreeMap<String, u64>) -> String {
    m.iter().map(|(k, v)| format!(" {k}={v}")).collect()
}

/// Several reports side by side: rows = metrics (union, in first-seen order; `-` where a
/// report lacks one, e.g. an endpoint it never used), one column per `(title, report)`.
pub fn render_side_by_side(columns: &[(&str, &Report)]) -> String {
    let mut labels: Vec<String> = Vec::new();
    let mut cells: Vec<BTreeMap<String, String>> = Vec::new();
    for (_, report) in columns {
        let rows = report.rows();
        for (label, _) in &rows {
            if !labels.contains(label) {
                labels.push(label.clone());
            }
        }
        cells.push(rows.into_iter().collect());
    }
    let mut table = vec![std::iter::once("metric".to_string())
        .chain(columns.iter().map(|(t, _)| t.to_string()))
        .collect::<Vec<_>>()];
    for label in labels {
        let mut line = vec![label.clone()];
        line.extend(
            cells
                .iter()
                .map(|c| c.get(&label).cloned().unwrap_or_else(|| "-".into())),
        );
        table.push(line);
    }
    let ncols = columns.len() + 1;
    let widths: Vec<usize> = (0..ncols)
        .map(|i| {
            table
                .iter()
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in table {
        let padded: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(padded.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(ok: u64, errors: &[(&str, u64)], endpoints: &[(&str, u64)]) -> Report {
        let errors: BTreeMap<String, u64> =
            errors.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let failed: u64 = errors.values().sum();
        Report {
            requests: ok + failed,
            ok,
            error_rate: failed as f64 / (ok + failed) as f64,
            errors,
            ttft_ms: Percentiles {
                count: ok,
                mean: 2.0,
                p50: 1.0,
                p90: 2.5,
                p99: 3.0,
                max: 3.0,
            },
            duration_s: 1.5,
            output_tokens_per_s: 20.0,
            prompt_tokens: 8,
            cached_tokens: 2,
            cached_token_ratio: 0.25,
            requests_by_endpoint: endpoints.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            ..Report::default()
        }
    }

    #[test]
    fn table_has_one_line_per_metric_with_errors_before_latency() {
        let t = report(3, &[("503", 1)], &[("decode:d0", 3)]).render_table();
        assert_eq!(
            t,
            "metric               value\n\
             requests             4\n\
             ok                   3\n\
             errors               1 (25.0%) 503=1\n\
             ttft ms p50/p90/p99  1.0 / 2.5 / 3.0\n\
             itl ms p50/p90/p99   -\n\
             e2e ms p50/p90/p99   -\n\
             duration s           1.50\n\
             output tok/s         20.0\n\
             cached-token ratio   0.250 (2/8)\n\
             endpoint decode:d0   3\n"
        );
    }

    #[test]
    fn side_by_side_unions_rows() {
        let a = report(1, &[], &[("decode:d0", 1)]);
        let b = report(1, &[], &[("decode:d1", 1)]);
        let t = render_side_by_side(&[("rr", &a), ("pdgate", &b)]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "metric               rr               pdgate");
        assert_eq!(lines[10], "endpoint decode:d0   1                -");
        assert_eq!(lines[11], "endpoint decode:d1   -                1");
        assert_eq!(lines.len(), 12);
    }
}
