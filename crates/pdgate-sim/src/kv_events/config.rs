//! `--kv-events-config`: vLLM's own flag (a JSON `KVEventsConfig`), with vLLM's field names and
//! defaults, and the per-worker endpoints derived from it (worker i publishes on PORT + i, as
//! vLLM's data-parallel ranks do).
//!
//! Source: vLLM `vllm/config/kv_events.py` (`KVEventsConfig`) and
//! `vllm/distributed/kv_events.py` (`offset_endpoint_port`).

use super::publish::KvEventPorts;
use serde::{Deserialize, Serialize};

/// vLLM's default publish endpoint.
pub const DEFAULT_ENDPOINT: &str = "tcp://*:5557";
/// vLLM's default replay buffer, in batches (engine steps).
pub const DEFAULT_BUFFER_STEPS: usize = 10_000;
/// vLLM's default high-water mark of the PUB socket, in batches.
pub const DEFAULT_HWM: usize = 100_000;
/// vLLM's default queue of batches waiting to be sent.
pub const DEFAULT_MAX_QUEUE_SIZE: usize = 100_000;

/// vLLM's `KVEventsConfig`. Unknown fields are an error (vLLM's config classes are strict).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvEventsConfig {
    /// Master switch; nothing is published unless true.
    #[serde(default)]
    pub enable_kv_cache_events: bool,
    /// `"zmq"` or `"null"`; absent = `"zmq"` when enabled, else `"null"`.
    #[serde(default)]
    pub publisher: Option<String>,
    /// PUB endpoint to bind, `tcp://HOST:PORT` (`*` = every interface; port 0 = a free one).
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// ROUTER endpoint answering replay requests, when set.
    #[serde(default)]
    pub replay_endpoint: Option<String>,
    /// Batches kept for replay.
    #[serde(default = "default_buffer_steps")]
    pub buffer_steps: usize,
    /// High-water mark of the PUB socket, in batches.
    #[serde(default = "default_hwm")]
    pub hwm: usize,
    /// Batches queued for sending before new ones are dropped.
    #[serde(default = "default_max_queue_size")]
    pub max_queue_size: usize,
    /// Topic frame of every message.
    #[serde(default)]
    pub topic: String,
}

fn default_endpoint() -> String {
    DEFAULT_ENDPOINT.into()
}
fn default_buffer_steps() -> usize {
    DEFAULT_BUFFER_STEPS
}
fn default_hwm() -> usize {
    DEFAULT_HWM
}
fn default_max_queue_size() -> usize {
    DEFAULT_MAX_QUEUE_SIZE
}

/// A `tcp://HOST:PORT` endpoint, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpEndpoint {
    /// Host as written (`*` = every interface).
    pub host: String,
    /// Port (0 = a free one, chosen at bind time).
    pub port: u16,
}

impl TcpEndpoint {
    /// Parses `tcp://HOST:PORT`; `field` names the config field in errors.
    pub fn parse(field: &str, s: &str) -> anyhow::Result<Self> {
        let rest = s.strip_prefix("tcp://").ok_or_else(|| {
            anyhow::anyhow!("--kv-events-config: {field} {s:?} must be tcp://HOST:PORT")
        })?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| anyhow::anyhow!("--kv-events-config: {field} {s:?} has no :PORT"))?;
        let port = port.parse::<u16>().map_err(|_| {
            anyhow::anyhow!("--kv-events-config: {field} {s:?}: port {port:?} is not 0..65535")
        })?;
        anyhow::ensure!(
            !host.is_empty(),
            "--kv-events-config: {field} {s:?} has no host"
        );
        Ok(TcpEndpoint {
            host: host.to_string(),
            port,
        })
    }

    /// The address to bind: `*` becomes `0.0.0.0`, a bracketed IPv6 host loses its brackets.
    pub fn bind_host(&self) -> &str {
        match self.host.as_str() {
            "*" => "0.0.0.0",
            h => h.trim_start_matches('[').trim_end_matches(']'),
        }
    }

    /// `tcp://HOST:PORT` for a subscriber: a wildcard host is replaced by `advertise`.
    pub fn connect_url(&self, advertise: &str, port: u16) -> String {
        let host = match self.host.as_str() {
            "*" | "0.0.0.0" | "[::]" | "::" => advertise,
            h => h,
        };
        format!("tcp://{host}:{port}")
    }

    /// This endpoint shifted by `offset` ports (port 0 stays 0: each binds a free one).
    fn offset(&self, field: &str, offset: usize) -> anyhow::Result<Self> {
        if self.port == 0 {
            return Ok(self.clone());
        }
        let port = u16::try_from(self.port as usize + offset).map_err(|_| {
            anyhow::anyhow!(
                "--kv-events-config: {field} port {} + worker {offset} is over 65535",
                self.port
            )
        })?;
        Ok(TcpEndpoint {
            host: self.host.clone(),
            port,
        })
    }
}

/// One worker's publisher settings, resolved from the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPublisher {
    /// PUB endpoint.
    pub endpoint: TcpEndpoint,
    /// Replay (ROUTER) endpoint, when configured.
    pub replay: Option<TcpEndpoint>,
    /// Topic frame.
    pub topic: String,
    /// Batches kept for replay.
    pub buffer_steps: usize,
    /// Batches queued before drops.
    pub max_queue_size: usize,
}

/// One entry of `GET /kv_event_sources` (vLLM's discovery route: a bare JSON array, one entry
/// per data-parallel rank). A wildcard bind host is replaced by the worker's advertised host so
/// that a subscriber can connect to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KvEventSource {
    /// Data-parallel rank (0: every simulated worker is an engine of its own).
    pub data_parallel_rank: u32,
    /// `tcp://HOST:PORT` of the PUB socket, with the port bound.
    pub endpoint: String,
    /// `tcp://HOST:PORT` of the replay socket, or null.
    pub replay_endpoint: Option<String>,
    /// Topic frame.
    pub topic: String,
}

impl WorkerPublisher {
    /// The discovery entry for this publisher bound on `ports`, reachable at `advertise`.
    pub fn source(&self, advertise: &str, ports: KvEventPorts) -> KvEventSource {
        KvEventSource {
            data_parallel_rank: 0,
            endpoint: self.endpoint.connect_url(advertise, ports.publish),
            replay_endpoint: match (&self.replay, ports.replay) {
                (Some(r), Some(port)) => Some(r.connect_url(advertise, port)),
                _ => None,
            },
            topic: self.topic.clone(),
        }
    }
}

impl KvEventsConfig {
    /// Parses the flag's JSON and checks it. Errors name the field: a publisher other than
    /// `zmq`/`null`, an endpoint that is not `tcp://HOST:PORT`, `buffer_steps` or
    /// `max_queue_size` of 0 while publishing.
    pub fn parse(json: &str) -> anyhow::Result<Self> {
        let cfg: KvEventsConfig = serde_json::from_str(json).map_err(|e| {
            anyhow::anyhow!("--kv-events-config is not a valid KVEventsConfig: {e}")
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The publisher after vLLM's default (`zmq` when enabled, else `null`).
    pub fn publisher(&self) -> &str {
        match &self.publisher {
            Some(p) => p,
            None if self.enable_kv_cache_events => "zmq",
            None => "null",
        }
    }

    /// Whether events are published (enabled, publisher `zmq`).
    pub fn publishes(&self) -> bool {
        self.enable_kv_cache_events && self.publisher() == "zmq"
    }

    /// Checks the publisher, the endpoints and the queue sizes.
    pub fn validate(&self) -> anyhow::Result<()> {
        match self.publisher() {
            "zmq" | "null" => {}
            other => anyhow::bail!(
                "--kv-events-config: publisher {other:?} is not supported (the simulator publishes with \"zmq\", or \"null\" for none)"
            ),
        }
        TcpEndpoint::parse("endpoint", &self.endpoint)?;
        if let Some(r) = &self.replay_endpoint {
            TcpEndpoint::parse("replay_endpoint", r)?;
        }
        if self.publishes() {
            anyhow::ensure!(
                self.max_queue_size > 0,
                "--kv-events-config: max_queue_size must be at least 1"
            );
            anyhow::ensure!(
                self.replay_endpoint.is_none() || self.buffer_steps > 0,
                "--kv-events-config: buffer_steps must be at least 1 with a replay_endpoint"
            );
            anyhow::ensure!(
                self.topic.is_empty(),
                "--kv-events-config: topic {:?}: the simulator publishes with the empty topic only (vLLM's default)",
                self.topic
            );
        }
        Ok(())
    }

    /// This config as worker `index` of a fleet uses it: the endpoints shifted by `index`
    /// ports, as vLLM's data-parallel rank `index` binds them (port 0 stays 0: each worker
    /// binds a free one).
    pub fn for_worker(&self, index: usize) -> anyhow::Result<KvEventsConfig> {
        let shift = |field: &str, s: &str| -> anyhow::Result<String> {
            let e = TcpEndpoint::parse(field, s)?.offset(field, index)?;
            Ok(format!("tcp://{}:{}", e.host, e.port))
        };
        Ok(KvEventsConfig {
            endpoint: shift("endpoint", &self.endpoint)?,
            replay_endpoint: match &self.replay_endpoint {
                Some(r) => Some(shift("replay_endpoint", r)?),
                None => None,
            },
            ..self.clone()
        })
    }

    /// Sets the endpoints' ports to `ports` (the ones bound), so that a restarted worker binds
    /// the same ones again.
    pub fn pin_ports(&mut self, ports: KvEventPorts) -> anyhow::Result<()> {
        let e = TcpEndpoint::parse("endpoint", &self.endpoint)?;
        self.endpoint = format!("tcp://{}:{}", e.host, ports.publish);
        if let (Some(r), Some(port)) = (&mut self.replay_endpoint, ports.replay) {
            let e = TcpEndpoint::parse("replay_endpoint", r)?;
            *r = format!("tcp://{}:{port}", e.host);
        }
        Ok(())
    }

    /// The publisher this config describes; `None` when nothing is published.
    pub fn publisher_settings(&self) -> anyhow::Result<Option<WorkerPublisher>> {
        if !self.publishes() {
            return Ok(None);
        }
        Ok(Some(WorkerPublisher {
            endpoint: TcpEndpoint::parse("endpoint", &self.endpoint)?,
            replay: match &self.replay_endpoint {
                Some(r) => Some(TcpEndpoint::parse("replay_endpoint", r)?),
                None => None,
            },
            topic: self.topic.clone(),
            buffer_steps: self.buffer_steps,
            max_queue_size: self.max_queue_size,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_defaults_and_fields() {
        let c = KvEventsConfig::parse(r#"{"enable_kv_cache_events":true}"#).unwrap();
        assert_eq!(c.publisher(), "zmq");
        assert_eq!(c.endpoint, "tcp://*:5557");
        assert_eq!(
            (c.buffer_steps, c.hwm, c.max_queue_size),
            (10_000, 100_000, 100_000)
        );
        assert_eq!((c.replay_endpoint.as_deref(), c.topic.as_str()), (None, ""));
        assert!(c.publishes());
        let off = KvEventsConfig::parse(r#"{"publisher":"zmq"}"#).unwrap();
        assert!(!off.publishes(), "not enabled");
        assert!(KvEventsConfig::parse("{}")
            .unwrap()
            .publisher_settings()
            .unwrap()
            .is_none());
        let full = KvEventsConfig::parse(
            r#"{"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:6000","replay_endpoint":"tcp://*:7000","buffer_steps":5,"hwm":1,"max_queue_size":2,"topic":""}"#,
        )
        .unwrap();
        let w2 = full
            .for_worker(2)
            .unwrap()
            .publisher_settings()
            .unwrap()
            .unwrap();
        assert_eq!(w2.endpoint.port, 6002);
        assert_eq!(w2.replay.as_ref().unwrap().port, 7002);
        assert_eq!((w2.topic.as_str(), w2.buffer_steps), ("", 5));
        assert_eq!(w2.endpoint.bind_host(), "0.0.0.0");
        assert_eq!(
            w2.endpoint.connect_url("10.0.0.1", 6002),
            "tcp://10.0.0.1:6002"
        );
        let zero = KvEventsConfig::parse(
            r#"{"enable_kv_cache_events":true,"endpoint":"tcp://127.0.0.1:0"}"#,
        )
        .unwrap();
        assert_eq!(zero.for_worker(3).unwrap().endpoint, "tcp://127.0.0.1:0");
    }

    #[test]
    fn bad_configs_name_the_field() {
        let err = |j: &str| KvEventsConfig::parse(j).unwrap_err().to_string();
        assert_eq!(
            err(r#"{"enable_kv_cache_events":true,"publisher":"nats"}"#),
            "--kv-events-config: publisher \"nats\" is not supported (the simulator publishes with \"zmq\", or \"null\" for none)"
        );
        assert!(
            err(r#"{"enable_kv_cache_events":true,"colour":1}"#).contains("unknown field `colour`")
        );
        assert!(err(r#"{"endpoint":"ipc:///tmp/x"}"#)
            .contains("endpoint \"ipc:///tmp/x\" must be tcp://HOST:PORT"));
        assert!(err(r#"{"endpoint":"tcp://*:99999"}"#).contains("port \"99999\""));
        assert!(err(r#"{"enable_kv_cache_events":true,"topic":"kv"}"#).contains("empty topic only"));
        assert!(err("not json").starts_with("--kv-events-config is not a valid KVEventsConfig"));
        let high =
            KvEventsConfig::parse(r#"{"enable_kv_cache_events":true,"endpoint":"tcp://*:65535"}"#)
                .unwrap();
        assert!(high
            .for_worker(1)
            .unwrap_err()
            .to_string()
            .contains("over 65535"));
    }
}
