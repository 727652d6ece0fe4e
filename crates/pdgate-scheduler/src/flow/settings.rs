//! Flow control as the config resolves it: the `flowControl` section's limits and per-band
//! policies ([`FlowControlConfig`], [`BandConfig`]) and the loaded [`FlowSettings`]. Decoding
//! and resolving the section is [`super::config`]'s work; the queues and the server read
//! these.

use super::detector::UtilizationDetector;
use super::policy::{Fairness, Ordering, UsageLimit};
use super::saturation::SaturationDetector;
use std::sync::Arc;
use std::time::Duration;

/// Default band `maxBytes` (llm-d: 1 GB).
pub const DEFAULT_BAND_MAX_BYTES: u64 = 1_000_000_000;
/// Default band `maxRequests` (llm-d: 5000).
pub const DEFAULT_BAND_MAX_REQUESTS: u64 = 5000;
/// Default `defaultRequestTTL` (llm-d: 60 s).
pub const DEFAULT_REQUEST_TTL: Duration = Duration::from_secs(60);

/// One priority band's limits and policies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BandConfig {
    /// Higher is served first.
    pub priority: i32,
    /// Queued bytes (request bodies) this band holds at most.
    pub max_bytes: u64,
    /// Queued requests this band holds at most.
    pub max_requests: u64,
    /// How flows take turns.
    pub fairness: Fairness,
    /// How a flow orders its items.
    pub ordering: Ordering,
    /// The band's own queue-wait budget while the pool has endpoints (`defaultRequestTTL`
    /// of the band); `None` = the global one.
    pub ttl: Option<Duration>,
}

/// The `flowControl` section, resolved (defaults filled, references checked).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowControlConfig {
    /// Global cap on queued bytes; 0 = none.
    pub max_bytes: u64,
    /// Global cap on queued requests; 0 = none.
    pub max_requests: u64,
    /// Queue wait budget while the pool has endpoints; zero = wait for the client.
    pub default_ttl: Duration,
    /// Queue wait budget while the pool has none; zero = wait for the client.
    pub no_endpoint_ttl: Duration,
    /// Listed bands (priority 0 included), highest priority first.
    pub bands: Vec<BandConfig>,
    /// Template of unlisted non-negative bands.
    pub default_band: BandConfig,
    /// Template of unlisted negative bands.
    pub negative_band: BandConfig,
    /// The usage-limit policy: the per-band dispatch ceilings (default
    /// `static-usage-limit-policy` at 1.0: dispatch stops while saturation ≥ 1.0).
    pub usage_limit: UsageLimit,
    /// `enableEviction`: dispatched sheddable requests may be evicted to unblock higher
    /// priorities ([`super::eviction`]).
    pub enable_eviction: bool,
}

impl Default for FlowControlConfig {
    fn default() -> Self {
        let band = BandConfig {
            priority: 0,
            max_bytes: DEFAULT_BAND_MAX_BYTES,
            max_requests: DEFAULT_BAND_MAX_REQUESTS,
            fairness: Fairness::default(),
            ordering: Ordering::default(),
            ttl: None,
        };
        FlowControlConfig {
            max_bytes: 0,
            max_requests: 0,
            default_ttl: DEFAULT_REQUEST_TTL,
            no_endpoint_ttl: DEFAULT_REQUEST_TTL,
            bands: vec![band],
            default_band: band,
            negative_band: band,
            usage_limit: UsageLimit::default(),
            enable_eviction: false,
        }
    }
}

impl FlowControlConfig {
    /// The band a request of `priority` joins: a listed one, else one built from the
    /// matching template.
    pub fn band(&self, priority: i32) -> BandConfig {
        self.bands
            .iter()
            .find(|b| b.priority == priority)
            .copied()
            .unwrap_or(BandConfig {
                priority,
                ..if priority < 0 {
                    self.negative_band
                } else {
                    self.default_band
                }
            })
    }

    /// The queue-wait budget of `band` while the pool has endpoints (`pool_empty` false) or
    /// has none: the band's own `defaultRequestTTL`, else the global one; with no endpoints
    /// always `noEndpointRequestTTL`. Zero = no limit.
    pub fn ttl(&self, band: &BandConfig, pool_empty: bool) -> Duration {
        match pool_empty {
            true => self.no_endpoint_ttl,
            false => band.ttl.unwrap_or(self.default_ttl),
        }
    }
}

/// Flow control as loaded: the gate, the detector, the section.
#[derive(Clone)]
pub struct FlowSettings {
    /// `featureGates` names `flowControl` (and not `=false`).
    pub gate: bool,
    /// The pool's saturation detector (default `utilization-detector`).
    pub detector: Arc<dyn SaturationDetector>,
    /// The resolved `flowControl` section (defaults when absent).
    pub control: FlowControlConfig,
    /// Settings that load but have no effect (e.g. the section without the gate), to log.
    pub warnings: Vec<String>,
    /// The `flowControl` section with every default written out (the effective config),
    /// when the gate is on or the section was given.
    pub effective: Option<serde_yaml_ng::Value>,
}

impl Default for FlowSettings {
    fn default() -> Self {
        FlowSettings {
            gate: false,
            detector: Arc::new(UtilizationDetector::default()),
            control: FlowControlConfig::default(),
            warnings: Vec::new(),
            effective: None,
        }
    }
}

impl std::fmt::Debug for FlowSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowSettings")
            .field("gate", &self.gate)
            .field("detector", &self.detector.type_name())
            .field("control", &self.control)
            .finish()
    }
}
