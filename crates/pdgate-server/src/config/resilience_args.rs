//! `pdgate serve` flags for upstream timeouts, retries, circuit breakers and the
//! prefill-unavailable policy. Each flag can also be set by its `PDGATE_*` environment
//! variable; every default is the constant of its module ([`crate::dispatch::timeouts`],
//! [`crate::dispatch::retry`], [`crate::breaker`], [`PrefillFallback::default`]).

use crate::breaker::{
    BreakerConfig, DEFAULT_FAILURE_THRESHOLD, DEFAULT_HALF_OPEN_PROBES, DEFAULT_OPEN_FOR,
};
use crate::dispatch::retry::{
    RetryPolicy, DEFAULT_BASE_BACKOFF, DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_BACKOFF,
};
use crate::dispatch::timeouts::{
    UpstreamTimeouts, DEFAULT_BODY_TIMEOUT_SECS, DEFAULT_CONNECT_TIMEOUT_SECS,
    DEFAULT_LEG_DEADLINE_SECS, DEFAULT_STREAM_HEAD_TIMEOUT_SECS, DEFAULT_STREAM_IDLE_TIMEOUT_SECS,
};
use pdgate_coordinator::PrefillFallback;
use std::time::Duration;

pub use crate::dispatch::timeouts::MAX_TIMEOUT_SECS;

fn secs(s: &str) -> Result<u64, String> {
    let v: u64 = s
        .parse()
        .map_err(|e| format!("`{s}` is not a number of seconds: {e}"))?;
    if (1..=MAX_TIMEOUT_SECS).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be within 1..={MAX_TIMEOUT_SECS} s"))
    }
}

fn millis(s: &str) -> Result<u64, String> {
    let v: u64 = s
        .parse()
        .map_err(|e| format!("`{s}` is not a number of milliseconds: {e}"))?;
    if (1..=MAX_TIMEOUT_SECS * 1000).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be within 1..={} ms", MAX_TIMEOUT_SECS * 1000))
    }
}

/// The flags (flattened into `pdgate serve`). Timeouts are 1 s to one year (0 would cut every
/// leg at once); tries, failure threshold and probes are at least 1.
#[derive(Debug, Clone, clap::Args)]
pub struct ResilienceArgs {
    /// TCP connect timeout to an upstream, s.
    #[arg(long, env = "PDGATE_CONNECT_TIMEOUT_SECS", value_parser = secs, default_value_t = DEFAULT_CONNECT_TIMEOUT_SECS)]
    pub connect_timeout_secs: u64,
    /// Streamed leg: time to the response head, s (`--upstream-timeout-secs` is its old name).
    #[arg(long, alias = "upstream-timeout-secs", env = "PDGATE_STREAM_HEAD_TIMEOUT_SECS", value_parser = secs,
          default_value_t = DEFAULT_STREAM_HEAD_TIMEOUT_SECS)]
    pub stream_head_timeout_secs: u64,
    /// Streamed leg: longest gap between two chunks, s.
    #[arg(long, env = "PDGATE_STREAM_IDLE_TIMEOUT_SECS", value_parser = secs, default_value_t = DEFAULT_STREAM_IDLE_TIMEOUT_SECS)]
    pub stream_idle_timeout_secs: u64,
    /// Streamed leg: cap on the whole leg, s [default: none].
    #[arg(long, env = "PDGATE_STREAM_TOTAL_TIMEOUT_SECS", value_parser = secs)]
    pub stream_total_timeout_secs: Option<u64>,
    /// Non-streamed and prefill legs: total deadline (head and body), s.
    #[arg(long, env = "PDGATE_LEG_DEADLINE_SECS", value_parser = secs, default_value_t = DEFAULT_LEG_DEADLINE_SECS)]
    pub leg_deadline_secs: u64,
    /// Non-streamed and prefill legs: time for the body once the head has come, s.
    #[arg(long, env = "PDGATE_BODY_TIMEOUT_SECS", value_parser = secs, default_value_t = DEFAULT_BODY_TIMEOUT_SECS)]
    pub body_timeout_secs: u64,
    /// Tries per phase leg, the first included (1 = no retries).
    #[arg(long, env = "PDGATE_RETRY_MAX_ATTEMPTS", value_parser = clap::value_parser!(u32).range(1..), default_value_t = DEFAULT_MAX_ATTEMPTS)]
    pub retry_max_attempts: u32,
    /// Backoff ceiling before the first retry, ms (doubles per retry).
    #[arg(long, env = "PDGATE_RETRY_BASE_BACKOFF_MS", value_parser = millis, default_value_t = DEFAULT_BASE_BACKOFF.as_millis() as u64)]
    pub retry_base_backoff_ms: u64,
    /// Cap on one backoff, ms.
    #[arg(long, env = "PDGATE_RETRY_MAX_BACKOFF_MS", value_parser = millis, default_value_t = DEFAULT_MAX_BACKOFF.as_millis() as u64)]
    pub retry_max_backoff_ms: u64,
    /// Consecutive failures that open an endpoint's circuit breaker.
    #[arg(long, env = "PDGATE_BREAKER_FAILURE_THRESHOLD", value_parser = clap::value_parser!(u32).range(1..), default_value_t = DEFAULT_FAILURE_THRESHOLD)]
    pub breaker_failure_threshold: u32,
    /// Time an open breaker refuses traffic before probing, ms.
    #[arg(long, env = "PDGATE_BREAKER_OPEN_MS", value_parser = millis, default_value_t = DEFAULT_OPEN_FOR.as_millis() as u64)]
    pub breaker_open_ms: u64,
    /// Concurrent probes a half-open breaker admits.
    #[arg(long, env = "PDGATE_BREAKER_HALF_OPEN_PROBES", value_parser = clap::value_parser!(u32).range(1..), default_value_t = DEFAULT_HALF_OPEN_PROBES)]
    pub breaker_half_open_probes: u32,
    /// When no prefill endpoint can serve a split request: `aggregated` runs it on its decode
    /// endpoint, `fail` answers 503 naming the reason.
    #[arg(long, env = "PDGATE_PREFILL_FALLBACK", default_value_t = PrefillFallback::default().as_str().to_string(),
          value_parser = |s: &str| s.parse::<PrefillFallback>().map(|p| p.as_str().to_string()))]
    pub prefill_fallback: String,
}

/// What the flags configure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resilience {
    /// Upstream timeouts.
    pub timeouts: UpstreamTimeouts,
    /// Retry budget and backoff.
    pub retry: RetryPolicy,
    /// Breaker tuning.
    pub breaker: BreakerConfig,
    /// Prefill-unavailable policy.
    pub prefill_fallback: PrefillFallback,
}

impl ResilienceArgs {
    /// The settings the flags give.
    pub fn settings(&self) -> Resilience {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        Resilience {
            timeouts: UpstreamTimeouts {
                connect: s(self.connect_timeout_secs),
                stream_head: s(self.stream_head_timeout_secs),
                stream_idle: s(self.stream_idle_timeout_secs),
                stream_total: self.stream_total_timeout_secs.map(s),
                deadline: s(self.leg_deadline_secs),
                body: s(self.body_timeout_secs),
            },
            retry: RetryPolicy {
                max_attempts: self.retry_max_attempts,
                base_backoff: ms(self.retry_base_backoff_ms),
                max_backoff: ms(self.retry_max_backoff_ms),
            },
            breaker: BreakerConfig {
                failure_threshold: self.breaker_failure_threshold,
                open_for: ms(self.breaker_open_ms),
                half_open_probes: self.breaker_half_open_probes,
            },
            prefill_fallback: self.prefill_fallback.parse().unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        r: ResilienceArgs,
    }

    #[test]
    fn flag_defaults_are_the_modules_defaults() {
        let cli = Cli::try_parse_from(["pdgate"]).unwrap();
        assert_eq!(cli.r.settings(), Resilience::default());
    }

    #[test]
    fn flags_set_every_value_and_a_bad_policy_is_refused() {
        let cli = Cli::try_parse_from([
            "pdgate",
            "--upstream-timeout-secs=7",
            "--stream-total-timeout-secs=90",
            "--leg-deadline-secs=65",
            "--retry-max-attempts=1",
            "--breaker-failure-threshold=2",
            "--prefill-fallback=fail",
        ])
        .unwrap();
        let r = cli.r.settings();
        assert_eq!(r.timeouts.stream_head, Duration::from_secs(7));
        assert_eq!(r.timeouts.stream_total, Some(Duration::from_secs(90)));
        assert_eq!(r.timeouts.deadline, Duration::from_secs(65));
        assert_eq!(r.retry.max_attempts, 1);
        assert_eq!(r.breaker.failure_threshold, 2);
        assert_eq!(r.prefill_fallback, PrefillFallback::Fail);
        let err = Cli::try_parse_from(["pdgate", "--prefill-fallback=sometimes"])
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("`sometimes` is not a prefill fallback"),
            "{err}"
        );
    }
}
