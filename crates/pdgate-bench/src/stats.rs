//! Latency percentiles over an HDR histogram (`hdrhistogram`, 4 significant digits, µs units).

use hdrhistogram::Histogram;
use serde::Serialize;

/// Summary of one latency distribution, in ms. All zero when `count` is 0.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Percentiles {
    /// Number of samples.
    pub count: u64,
    /// Mean, ms (rounded down to the µs).
    pub mean: f64,
    /// Median, ms (nearest rank).
    pub p50: f64,
    /// 90th percentile, ms.
    pub p90: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// Largest sample, ms.
    pub max: f64,
}

/// Accumulates latency samples in ms with µs resolution; values are exact below 32.768 ms
/// and within 0.01 % above (4 significant digits).
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
    /// Exact sum of the recorded samples, µs (the histogram's own mean is bucketed).
    sum_us: u128,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        // 4 significant digits is within hdrhistogram's 0..=5 range, so this cannot fail.
        let hist = Histogram::new(4).unwrap_or_else(|_| unreachable!("4 sigfigs is valid"));
        LatencyHistogram { hist, sum_us: 0 }
    }

    /// Records one sample in ms (negative and non-finite values count as 0).
    pub fn record_ms(&mut self, ms: f64) {
        let us = if ms.is_finite() && ms > 0.0 {
            (ms * 1_000.0).round() as u64
        } else {
            0
        };
        self.sum_us += u128::from(us);
        // `record` grows the histogram as needed; it only fails past u64 range limits.
        if self.hist.record(us).is_err() {
            self.hist.saturating_record(us);
        }
    }

    /// Nearest-rank percentiles of the samples so far, in ms (lowest value of the bucket
    /// holding the rank, so exact for exactly representable samples).
    pub fn percentiles(&self) -> Percentiles {
        let h = &self.hist;
        if h.is_empty() {
            return Percentiles::default();
        }
        let q = |q: f64| h.lowest_equivalent(h.value_at_quantile(q)) as f64 / 1_000.0;
        Percentiles {
            count: h.len(),
            mean: (self.sum_us / u128::from(h.len())) as f64 / 1_000.0,
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            max: h.lowest_equivalent(h.max()) as f64 / 1_000.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles_in_ms() {
        let mut h = LatencyHistogram::new();
        for ms in 1..=100 {
            h.record_ms(f64::from(ms));
        }
        assert_eq!(
            h.percentiles(),
            Percentiles {
                count: 100,
                mean: 50.5,
                p50: 50.0,
                p90: 90.0,
                p99: 99.0,
                max: 100.0
            }
        );
    }

    #[test]
    fn small_and_fractional_samples_are_exact() {
        let mut h = LatencyHistogram::new();
        for ms in [0.25, 1.5, 2.0, -3.0] {
            h.record_ms(ms);
        }
        let p = h.percentiles();
        assert_eq!((p.count, p.p50, p.p90, p.max), (4, 0.25, 2.0, 2.0));
        assert_eq!(
            LatencyHistogram::new().percentiles(),
            Percentiles::default()
        );
    }
}
