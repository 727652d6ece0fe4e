//! What the scraper concludes from one endpoint's successive scrapes: when it starts or stops
//! answering (logged once per change, not every tick), when its engine restarted (its
//! prefix-cache credit is then dropped), and whether it stays a scheduling candidate: after
//! [`UNREADY_AFTER`] scrapes in a row without an HTTP answer it is out
//! ([`ScrapeHealth::unready`]), until one answers. Pure: no IO, no clock.

/// The result of one `/metrics` scrape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scrape {
    /// 200 with an exposition; `start_time` is its `process_start_time_seconds`, if any.
    Answered {
        /// `process_start_time_seconds` (Unix time, s).
        start_time: Option<f64>,
    },
    /// An HTTP answer that cannot be used: a status other than 200, or a broken body. The
    /// engine's server is up.
    Failed,
    /// No HTTP answer: the connection failed or closed, or the scrape timed out, before a
    /// response head ([`super::client::GetError::NoAnswer`]).
    Unanswered,
}

/// Scrapes in a row without an HTTP answer ([`Scrape::Unanswered`]) after which an endpoint
/// is no scheduling candidate (not Ready, [`ScrapeHealth::unready`]) until a scrape is
/// answered again. 3 as Kubernetes' readiness-probe `failureThreshold` default: with the
/// scrape back-off (waits of 1, 2, 4 intervals) that is a refused connection for 3 intervals
/// (600 ms at the default 200 ms interval), or about 3 scrape timeouts of a host that never
/// answers; one lost scrape does not take an engine out. Any HTTP answer (even a 404: a
/// server without `/metrics`) keeps it in.
pub const UNREADY_AFTER: u32 = 3;

/// A change of an endpoint's scrape state, to be logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// It stopped answering (or never answered): first failure after success or start.
    Failing,
    /// It answers again after failing.
    Recovered,
}

/// What one scrape means for the endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verdict {
    /// A state change to log (`None`: same state as the previous scrape).
    pub change: Option<Change>,
    /// The engine restarted since the previous answer: what it cached is gone.
    pub restarted: bool,
    /// `Some(true)`: this scrape took the endpoint out of the candidates ([`UNREADY_AFTER`]
    /// unanswered in a row); `Some(false)`: it brought it back (answered after being out).
    pub unready: Option<bool>,
}

/// One endpoint's scrape history, as far as the verdicts need it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ScrapeHealth {
    /// Outcome of the previous scrape; `None` before the first.
    answered: Option<bool>,
    /// `process_start_time_seconds` of the last answer that had it.
    start_time: Option<f64>,
    /// It answered at least once (an engine that comes up after the router did not restart).
    ever_answered: bool,
    /// Failed scrapes since the last answer.
    failures: u32,
    /// Scrapes without an HTTP answer since the last one with ([`Scrape::Unanswered`]).
    unanswered: u32,
}

/// Longest wait between two scrapes of an endpoint that keeps failing, ms.
pub const MAX_BACKOFF_MS: u64 = 5_000;

impl ScrapeHealth {
    /// True after [`UNREADY_AFTER`] scrapes in a row without an HTTP answer: the endpoint is
    /// no scheduling candidate until a scrape is answered.
    pub fn unready(&self) -> bool {
        self.unanswered >= UNREADY_AFTER
    }

    /// Scrape ticks to skip before the next scrape of this endpoint: 0 while it answers; after
    /// `k` failures in a row, 2^(k-1) - 1 ticks (a wait of 1, 2, 4, … intervals), at most
    /// [`MAX_BACKOFF_MS`] of `interval_ms` intervals. A dead endpoint of a large fleet then
    /// costs a connection attempt every few seconds, not every tick.
    pub fn ticks_to_skip(&self, interval_ms: u64) -> u64 {
        if self.failures <= 1 {
            return 0;
        }
        let doubled = 1u64 << (self.failures - 1).min(20);
        let cap = (MAX_BACKOFF_MS / interval_ms.max(1)).max(1);
        doubled.min(cap) - 1
    }
}

impl ScrapeHealth {
    /// Folds in one scrape.
    ///
    /// Restart rule: a `process_start_time_seconds` different from the last one seen is a
    /// restart. An engine that answered before, failed and answers again restarted unless both
    /// answers carry the same start time (engines that do not export it lose their credit on every
    /// recovery: a cache miss costs less than routing on blocks that are gone).
    pub fn observe(&mut self, scrape: Scrape) -> Verdict {
        let before = self.answered;
        let was_unready = self.unready();
        if scrape == Scrape::Unanswered {
            self.unanswered = self.unanswered.saturating_add(1);
        } else {
            self.unanswered = 0;
        }
        let unready = (self.unready() != was_unready).then_some(!was_unready);
        match scrape {
            Scrape::Failed | Scrape::Unanswered => {
                self.answered = Some(false);
                self.failures = self.failures.saturating_add(1);
                Verdict {
                    change: (before != Some(false)).then_some(Change::Failing),
                    restarted: false,
                    unready,
                }
            }
            Scrape::Answered { start_time } => {
                let same_start = match (self.start_time, start_time) {
                    (Some(a), Some(b)) => Some(a == b),
                    _ => None,
                };
                let restarted = match before {
                    None => false,
                    Some(true) => same_start == Some(false),
                    Some(false) => self.ever_answered && same_start != Some(true),
                };
                self.answered = Some(true);
                self.ever_answered = true;
                self.failures = 0;
                if start_time.is_some() {
                    self.start_time = start_time;
                }
                Verdict {
                    change: (before == Some(false)).then_some(Change::Recovered),
                    restarted,
                    unready,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_endpoint_is_scraped_ever_less_often_up_to_the_cap() {
        let mut h = ScrapeHealth::default();
        let mut skips = Vec::new();
        for _ in 0..8 {
            h.observe(Scrape::Failed);
            skips.push(h.ticks_to_skip(200));
        }
        // Waits of 1, 2, 4, 8, 16 intervals, then the 5 s cap (25 intervals of 200 ms).
        assert_eq!(skips, [0, 1, 3, 7, 15, 24, 24, 24]);
        h.observe(Scrape::Answered { start_time: None });
        assert_eq!(h.ticks_to_skip(200), 0);
        h.observe(Scrape::Failed);
        assert_eq!(h.ticks_to_skip(10_000), 0, "one failure: no back-off");
        h.observe(Scrape::Failed);
        assert_eq!(h.ticks_to_skip(10_000), 0, "the cap is below one interval");
    }

    #[test]
    fn three_unanswered_scrapes_in_a_row_take_an_endpoint_out_until_one_is_answered() {
        use Scrape::{Failed, Unanswered};
        let mut h = ScrapeHealth::default();
        let mut seen = Vec::new();
        for s in [
            Unanswered,
            Unanswered,
            Failed, // an HTTP answer (a 404): the count starts again
            Unanswered,
            Unanswered,
            Unanswered, // out
            Unanswered,
            Failed, // back: the server answers, even without /metrics
            Unanswered,
            ok(None),
        ] {
            let v = h.observe(s);
            seen.push((v.unready, h.unready()));
        }
        assert_eq!(
            seen,
            [
                (None, false),
                (None, false),
                (None, false),
                (None, false),
                (None, false),
                (Some(true), true),
                (None, true),
                (Some(false), false),
                (None, false),
                (None, false),
            ]
        );
        assert_eq!(UNREADY_AFTER, 3);
    }

    fn ok(t: Option<f64>) -> Scrape {
        Scrape::Answered { start_time: t }
    }

    fn run(scrapes: &[Scrape]) -> Vec<(Option<Change>, bool)> {
        let mut h = ScrapeHealth::default();
        (scrapes.iter())
            .map(|s| h.observe(*s))
            .map(|v| (v.change, v.restarted))
            .collect()
    }

    #[test]
    fn state_changes_are_reported_once_and_restarts_follow_the_start_time() {
        use Change::*;
        let (a, b) = (Some(100.0), Some(200.5));
        // Steady answers, then a restart in place (new start time, no failure seen).
        assert_eq!(
            run(&[ok(a), ok(a), ok(b), ok(b)]),
            [(None, false), (None, false), (None, true), (None, false)]
        );
        // Failing for three ticks, back with the same process: one log each way, no restart.
        assert_eq!(
            run(&[ok(a), Scrape::Failed, Scrape::Failed, Scrape::Failed, ok(a)]),
            [
                (None, false),
                (Some(Failing), false),
                (None, false),
                (None, false),
                (Some(Recovered), false)
            ]
        );
        // Back with a new process.
        assert_eq!(
            run(&[ok(a), Scrape::Failed, ok(b)]),
            [
                (None, false),
                (Some(Failing), false),
                (Some(Recovered), true)
            ]
        );
        // No start time exported: a recovery counts as a restart, steady answers do not.
        assert_eq!(
            run(&[ok(None), ok(None), Scrape::Failed, ok(None)]),
            [
                (None, false),
                (None, false),
                (Some(Failing), false),
                (Some(Recovered), true)
            ]
        );
        // Never answered yet (the engine came up after the router): the first failure is
        // logged; the first answer is a recovery, not a restart.
        assert_eq!(
            run(&[Scrape::Failed, ok(a)]),
            [(Some(Failing), false), (Some(Recovered), false)]
        );
    }
}
