//! The pipeline's steps (llm-d-router `pkg/coordinator/steps/`): their parameters, decoded
//! strictly, and which of them pdgate runs.
//!
//! pdgate runs the steps in one fixed order, the order llm-d documents them in:
//! `replace-media-urls` → `render` → `conditional-decode` → `encode` → `prefill` → `decode`.
//! A pipeline listing them in another order, twice, or without `prefill` and `decode` is
//! refused, naming the step. `replace-media-urls` runs as `--replace-media-urls`
//! ([`MediaSettings`]), `render` as `--render-address` ([`RenderSettings`]).

use serde::Deserialize;
use serde_yaml_ng::Value;

/// A step, with its parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Downloads `image_url`s and inlines them as `data:` URIs.
    ReplaceMediaUrls(ReplaceMediaUrls),
    /// Tokenizes the request with a render service.
    Render(Render),
    /// Sends the decode leg first with `Prefer: if-available`; a 412 goes on.
    ConditionalDecode(FormatOnly),
    /// One encode leg per media item.
    Encode(Encode),
    /// The prefill leg (one token, not streamed).
    Prefill(Legs),
    /// The decode leg, streamed to the client.
    Decode(Legs),
}

/// The step types, in the order pdgate runs them.
pub const STEP_ORDER: &[&str] = &[
    "replace-media-urls",
    "render",
    "conditional-decode",
    "encode",
    "prefill",
    "decode",
];

/// `replace-media-urls` parameters (llm-d defaults).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the step's params")]
pub struct ReplaceMediaUrls {
    /// Per download, Go duration.
    pub download_timeout: Option<String>,
    /// Downloads at once (default 10).
    pub max_concurrent_downloads: Option<i64>,
    /// Most media parts per request (0 = unlimited).
    pub max_multimodal_entries: Option<i64>,
    /// Most MiB per download (default 10).
    pub max_download_size: Option<i64>,
    /// Allow RFC 1918 addresses.
    pub allow_private_networks: Option<bool>,
    /// Host names downloads may come from (empty: any).
    pub allowed_domains: Option<Vec<String>>,
}

/// `render` parameters.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the step's params")]
pub struct Render {
    /// Base URL of the render service.
    pub address: Option<String>,
    /// Per call, Go duration (default 30s).
    pub timeout: Option<String>,
    /// Keep-alive pool size.
    pub max_idle_conns_per_host: Option<i64>,
    /// Idle connection lifetime, Go duration.
    pub idle_conn_timeout: Option<String>,
    /// Most prompt tokens (0 = unlimited).
    pub max_total_tokens: Option<i64>,
    /// Most image placeholder tokens (0 = unlimited).
    pub max_total_placeholder_tokens: Option<i64>,
}

/// The `render` step's settings, checked, llm-d's defaults filled in; they map onto the
/// `--render-*` flags of `pdgate serve` ([`crate::pre_steps::render_step`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RenderSettings {
    /// The render service, `host:port`.
    pub address: String,
    /// Per call (zero: none).
    pub timeout: std::time::Duration,
    /// Idle connections kept to it.
    pub max_idle_per_host: usize,
    /// Idle connection lifetime.
    pub idle_timeout: std::time::Duration,
    /// Most prompt tokens (0 = unlimited).
    pub max_total_tokens: usize,
    /// Most placeholder tokens (0 = unlimited).
    pub max_total_placeholder_tokens: usize,
}

impl Render {
    /// The settings, with llm-d's defaults (timeout 30s, 100 idle connections kept 90s).
    ///
    /// Errors: no `address` (pdgate refuses at start what llm-d fails at request time), an
    /// address that is not `http://host[:port]`, a bad duration, a negative number; each
    /// naming the parameter.
    pub fn settings(&self) -> Result<RenderSettings, String> {
        use crate::pre_steps::render_step as d;
        let address = match self.address.as_deref() {
            Some(a) if !a.trim().is_empty() => super::parse::upstream_address(a.trim(), "render service")
                .map_err(|m| format!("address: {m}"))?,
            _ => return Err("`address` is required: the render service's base URL, e.g. `http://rendering-service:8080`".into()),
        };
        let duration = |name: &str, v: &Option<String>, default_ms: u64| match v {
            None => Ok(std::time::Duration::from_millis(default_ms)),
            Some(t) => {
                pdgate_scheduler::flow::duration::parse(t).map_err(|m| format!("{name}: {m}"))
            }
        };
        let count = |name: &str, v: Option<i64>, default: usize| match v {
            None => Ok(default),
            Some(n) if n < 0 => Err(format!("{name} must be non-negative, got {n}")),
            Some(n) => Ok(n as usize),
        };
        Ok(RenderSettings {
            address,
            timeout: duration("timeout", &self.timeout, d::DEFAULT_RENDER_TIMEOUT_MS)?,
            max_idle_per_host: count(
                "max_idle_conns_per_host",
                self.max_idle_conns_per_host,
                d::DEFAULT_RENDER_MAX_IDLE_PER_HOST,
            )?,
            idle_timeout: duration(
                "idle_conn_timeout",
                &self.idle_conn_timeout,
                d::DEFAULT_RENDER_IDLE_TIMEOUT_MS,
            )?,
            max_total_tokens: count("max_total_tokens", self.max_total_tokens, 0)?,
            max_total_placeholder_tokens: count(
                "max_total_placeholder_tokens",
                self.max_total_placeholder_tokens,
                0,
            )?,
        })
    }
}

/// The `replace-media-urls` step's settings, checked, llm-d's defaults filled in; they map
/// onto the `--replace-media-urls` and `--media-*` flags ([`crate::pre_steps::media_urls`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MediaSettings {
    /// Per download (zero: none).
    pub download_timeout: std::time::Duration,
    /// Downloads at once.
    pub max_concurrent_downloads: usize,
    /// Most image parts per request (0 = unlimited).
    pub max_entries: usize,
    /// Most MiB per download.
    pub max_download_mib: u64,
    /// Allow RFC 1918 addresses.
    pub allow_private_networks: bool,
    /// Host names downloads may come from (empty: any).
    pub allowed_domains: Vec<String>,
}

impl ReplaceMediaUrls {
    /// The settings, with llm-d's defaults (10s, 10 at once, no entry limit, 10 MiB).
    ///
    /// Errors, naming the parameter: a bad duration, `max_concurrent_downloads` or
    /// `max_download_size` not positive (or over pdgate's bounds), a negative
    /// `max_multimodal_entries`.
    pub fn settings(&self) -> Result<MediaSettings, String> {
        use crate::pre_steps::media_urls as d;
        let download_timeout = match &self.download_timeout {
            None => std::time::Duration::from_millis(d::DEFAULT_DOWNLOAD_TIMEOUT_MS),
            Some(t) => pdgate_scheduler::flow::duration::parse(t)
                .map_err(|m| format!("download_timeout: {m}"))?,
        };
        let max_concurrent_downloads = match self.max_concurrent_downloads {
            None => d::DEFAULT_MAX_CONCURRENT_DOWNLOADS,
            Some(n) if (1..=4096).contains(&n) => n as usize,
            Some(n) => {
                return Err(format!(
                    "max_concurrent_downloads must be positive (at most 4096), got {n}"
                ))
            }
        };
        let max_entries = match self.max_multimodal_entries {
            None => d::DEFAULT_MAX_ENTRIES,
            Some(n) if n >= 0 => n as usize,
            Some(n) => {
                return Err(format!(
                    "max_multimodal_entries must be non-negative, got {n}"
                ))
            }
        };
        let max_download_mib = match self.max_download_size {
            None => d::DEFAULT_MAX_DOWNLOAD_MIB,
            Some(n) if n > 0 && (n as u64) <= d::MAX_DOWNLOAD_MIB => n as u64,
            Some(n) => {
                return Err(format!(
                    "max_download_size must be positive (MB, at most {}), got {n}",
                    d::MAX_DOWNLOAD_MIB
                ))
            }
        };
        let allowed_domains = (self.allowed_domains.iter().flatten().enumerate())
            .map(|(i, d)| {
                crate::pre_steps::media_urls::allowed_domain(d)
                    .map_err(|m| format!("allowed_domains[{i}]: {m}"))
            })
            .collect::<Result<Vec<String>, String>>()?;
        Ok(MediaSettings {
            download_timeout,
            max_concurrent_downloads,
            max_entries,
            max_download_mib,
            allow_private_networks: self.allow_private_networks.unwrap_or(false),
            allowed_domains,
        })
    }
}

/// Parameters of a step that only takes the wire format.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the step's params")]
pub struct FormatOnly {
    /// Overrides `pipeline.use_openai_format` for this step.
    pub use_openai_format: Option<bool>,
}

/// `encode` parameters.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the step's params")]
pub struct Encode {
    /// Encode legs in flight at once per request (default [`DEFAULT_ENCODE_MAX_PARALLEL`]).
    pub max_parallel: Option<i64>,
    /// Overrides `pipeline.use_openai_format`.
    pub use_openai_format: Option<bool>,
    /// Overrides `pipeline.ec_connector`.
    pub ec_connector: Option<String>,
}

/// Default `encode.max_parallel` (llm-d's).
pub const DEFAULT_ENCODE_MAX_PARALLEL: usize = 8;

/// `prefill` / `decode` parameters.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, expecting = "the step's params")]
pub struct Legs {
    /// Overrides `pipeline.use_openai_format`.
    pub use_openai_format: Option<bool>,
    /// Overrides `pipeline.kv_connector`.
    pub kv_connector: Option<String>,
    /// Overrides `pipeline.ec_connector` (prefill only in llm-d).
    pub ec_connector: Option<String>,
}

impl Step {
    /// Decodes step `step_type` with `params`.
    ///
    /// Errors: an unknown type (the known ones listed), or a parameter error naming the field.
    pub fn parse(step_type: &str, params: Option<&Value>) -> Result<Step, String> {
        fn de<T: serde::de::DeserializeOwned + Default>(p: Option<&Value>) -> Result<T, String> {
            match p {
                None | Some(Value::Null) => Ok(T::default()),
                // Through text, so that the error names the field (`from_value` does not).
                Some(v) => serde_yaml_ng::to_string(v)
                    .and_then(|t| serde_yaml_ng::from_str(&t))
                    .map_err(|e| {
                        let m = e.to_string();
                        m.rfind(" at line ")
                            .map_or(m.clone(), |i| m[..i].to_string())
                    }),
            }
        }
        let step = match step_type {
            "replace-media-urls" => Step::ReplaceMediaUrls(de(params)?),
            "render" => Step::Render(de(params)?),
            "conditional-decode" => Step::ConditionalDecode(de(params)?),
            "encode" => Step::Encode(de(params)?),
            "prefill" => Step::Prefill(de(params)?),
            "decode" => Step::Decode(de(params)?),
            other => {
                return Err(format!(
                    "unknown step type `{other}`, expected one of `{}`",
                    STEP_ORDER.join("`, `")
                ))
            }
        };
        if let Step::Encode(Encode {
            max_parallel: Some(n),
            ..
        }) = &step
        {
            if *n <= 0 {
                return Err(format!("max_parallel must be positive, got {n}"));
            }
        }
        Ok(step)
    }

    /// The llm-d step type.
    pub fn name(&self) -> &'static str {
        match self {
            Step::ReplaceMediaUrls(_) => "replace-media-urls",
            Step::Render(_) => "render",
            Step::ConditionalDecode(_) => "conditional-decode",
            Step::Encode(_) => "encode",
            Step::Prefill(_) => "prefill",
            Step::Decode(_) => "decode",
        }
    }

    /// The step's `use_openai_format` override, if it has one.
    pub fn use_openai_format(&self) -> Option<bool> {
        match self {
            Step::ConditionalDecode(p) => p.use_openai_format,
            Step::Encode(p) => p.use_openai_format,
            Step::Prefill(p) | Step::Decode(p) => p.use_openai_format,
            _ => None,
        }
    }
}

/// Checks the order: each step at most once, in [`STEP_ORDER`], `prefill` and `decode`
/// present. `steps` are `(index, step)`.
///
/// Errors: `(index of the step at fault, message)`; index `None` for a missing step.
pub fn check_order(steps: &[Step]) -> Result<(), (Option<usize>, String)> {
    let rank = |s: &Step| STEP_ORDER.iter().position(|n| *n == s.name()).unwrap_or(0);
    for (i, pair) in steps.windows(2).enumerate() {
        let (a, b) = (&pair[0], &pair[1]);
        if rank(a) == rank(b) {
            return Err((Some(i + 1), format!("step `{}` is listed twice", b.name())));
        }
        if rank(a) > rank(b) {
            return Err((
                Some(i + 1),
                format!(
                    "step `{}` comes after `{}`: pdgate runs the steps in the order `{}`",
                    b.name(),
                    a.name(),
                    STEP_ORDER.join("` → `")
                ),
            ));
        }
    }
    for needed in ["prefill", "decode"] {
        if !steps.iter().any(|s| s.name() == needed) {
            return Err((
                None,
                format!(
                    "the pipeline has no `{needed}` step: pdgate's coordinator runs split \
                     requests (prefill then decode); for aggregated serving, run `pdgate serve` \
                     without a coordinator config"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(t: &str, p: &str) -> Result<Step, String> {
        let v: Value = serde_yaml_ng::from_str(p).unwrap();
        Step::parse(t, Some(&v))
    }

    #[test]
    fn params_are_strict_and_name_the_field() {
        assert_eq!(
            parse("encode", "max_parallel: 3"),
            Ok(Step::Encode(Encode {
                max_parallel: Some(3),
                ..Default::default()
            }))
        );
        let e = parse("prefill", "kv_conector: kv-nixl").unwrap_err();
        assert!(e.starts_with("unknown field `kv_conector`"), "{e}");
        assert_eq!(
            parse("encode", "max_parallel: 0").unwrap_err(),
            "max_parallel must be positive, got 0"
        );
        let e = parse("decode", "use_openai_format: \"no\"").unwrap_err();
        assert!(e.contains("use_openai_format"), "{e}");
        assert!(Step::parse("prefil", None)
            .unwrap_err()
            .starts_with("unknown step type `prefil`, expected one of `replace-media-urls`"));
    }

    #[test]
    fn order_is_checked() {
        let s = |t: &str| Step::parse(t, None).unwrap();
        assert_eq!(check_order(&[s("prefill"), s("decode")]), Ok(()));
        assert_eq!(
            check_order(&[
                s("conditional-decode"),
                s("encode"),
                s("prefill"),
                s("decode")
            ]),
            Ok(())
        );
        let (i, m) = check_order(&[s("decode"), s("prefill")]).unwrap_err();
        assert_eq!(i, Some(1));
        assert!(m.starts_with("step `prefill` comes after `decode`"), "{m}");
        let (i, m) = check_order(&[s("prefill"), s("prefill"), s("decode")]).unwrap_err();
        assert_eq!((i, m.as_str()), (Some(1), "step `prefill` is listed twice"));
        let (i, m) = check_order(&[s("decode")]).unwrap_err();
        assert_eq!(i, None);
        assert!(m.starts_with("the pipeline has no `prefill` step"), "{m}");
    }
}
