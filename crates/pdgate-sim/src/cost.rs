//! The step cost model (design.md §6; Dynamo mocker coefficients), in simulated milliseconds.
//! Callers divide by the speedup ([`crate::SimConfig::scaled`]).

/// Prefill cost of `t` uncached tokens scheduled in one step: 4.21e-7·T² + 0.0152·T + 16.5 ms,
/// 0 when `t == 0`.
pub fn prefill_ms(t: usize) -> f64 {
    if t == 0 {
        return 0.0;
    }
    let t = t as f64;
    4.21e-7 * t * t + 0.0152 * t + 16.5
}

/// Cost of one decode step at KV usage `u` (0..1): −25.74·u² + 54.01·u + 5.74 ms, at least 1 ms.
pub fn decode_ms(u: f64) -> f64 {
    let u = u.clamp(0.0, 1.0);
    (-25.74 * u * u + 54.01 * u + 5.74).max(1.0)
}

/// Cost of one step: prefill of `t` uncached tokens plus, when any request decodes, one decode
/// step at usage `u`.
pub fn step_ms(t: usize, any_decode: bool, u: f64) -> f64 {
    prefill_ms(t) + if any_decode { decode_ms(u) } else { 0.0 }
}

/// KV transfer cost of `tokens`: tokens × bytes_per_token / bandwidth + setup, in ms
/// (`gbps` in gigabits per second).
pub fn transfer_ms(tokens: usize, bytes_per_token: u64, gbps: f64, setup_ms: f64) -> f64 {
    let bits = tokens as f64 * bytes_per_token as f64 * 8.0;
    bits / (gbps * 1e9) * 1000.0 + setup_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_values() {
        assert_eq!(prefill_ms(0), 0.0);
        assert!((prefill_ms(1000) - 32.121).abs() < 1e-9);
        assert!((decode_ms(0.0) - 5.74).abs() < 1e-9);
        assert!((decode_ms(1.0) - 34.01).abs() < 1e-9);
        assert!((step_ms(0, true, 0.5) - (-25.74 * 0.25 + 27.005 + 5.74)).abs() < 1e-9);
        // 1000 tokens × 128 KiB over 200 Gb/s = 5.24288 ms, plus 2 ms setup.
        assert!((transfer_ms(1000, 131072, 200.0, 2.0) - 7.24288).abs() < 1e-9);
    }
}
