//! `data-parallel-profile-handler` — one profile whose pick is a data-parallel rank, reached
//! through the pod's primary port.
//!
//! - **Type:** `data-parallel-profile-handler` (deprecated in llm-d, which logs "Use
//!   simple-profile-handler with Istio >= 1.28.1" at construction: a gateway that reaches
//!   each rank's port itself needs no primary-port hop; pdgate's `single-profile-handler`
//!   then does).
//! - **Extension points:** ProfileHandler
//! - **Parameters:** `primaryPort` (TCP port, default [`DEFAULT_PRIMARY_PORT`] = 8000; must
//!   be 1..=65535).
//! - **Inputs:** the config's only scheduling profile; its pick is an endpoint, which for a
//!   pod serving several data-parallel ranks is the rank `<pod>-rank-<i>` at `ip:<rank port>`
//!   (pdgate-fleet names them so from a pool with several target ports, as llm-d's EPP does).
//! - **Outputs:** one pick, phase `Aggregated`. The request's [`DataParallelRoute`] is kept in
//!   its [`RequestState`] ([`route_of`]): the header `x-data-parallel-host-port` =
//!   the pick's `host:port` (the rank's own port), and the destination `host:primaryPort`.
//!   `pdgate epp` (in front of a gateway) answers the gateway with that destination and that
//!   header, so that the pod's primary port (vLLM's front-end / llm-d's routing sidecar)
//!   forwards the request to the rank, exactly as llm-d's handler does by rewriting the
//!   target's port to `primaryPort`. No fallback destination is offered then: another pod's
//!   primary port would forward to the rank the header names anyway. `pdgate serve` (the
//!   router proxies itself) ignores the route: it sends the request straight to the rank's
//!   own address, with `x-data-parallel-rank` set to the rank (as for any DP endpoint), so
//!   no primary-port hop is needed. The header is router-owned: a client's copy is dropped
//!   (`pdgate serve`) or replaced (`pdgate epp` with this handler).
//! - **Limitations:** a config with other than exactly one scheduling profile is refused at
//!   load (llm-d accepts it and then fails every request). `primaryPort: 0` is refused
//!   (llm-d accepts it and sends every request to port 0). Ranks from an endpoints file
//!   (`dp_size`) share one address, so behind a gateway the header names that shared
//!   address, not the rank (`pdgate serve` tells them apart by `x-data-parallel-rank`). A profile
//!   chosen by the `x-llm-d-epp-profile` header bypasses the handler (no route kept).
//!   Source: llm-d `pkg/epp/framework/plugins/scheduling/profilehandler/dataparallel/
//!   dp_profile_handler.go`.

use crate::error::Rejection;
use crate::plugin::{ProfileHandler, ProfileRunner};
use crate::plugin_build::{decode, effective, BuildCtx, Built, PluginError, PluginType, Stage};
use crate::request::{RequestCtx, RequestState, SchedulingResult};
use pdgate_api::Phase;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::Value;
use std::sync::Arc;

/// Registry entry.
pub const TYPE: PluginType = PluginType {
    name: "data-parallel-profile-handler",
    stage: Stage::Handler,
    build,
};

/// Default of `primaryPort` (TCP port of the pod's front end, llm-d's default).
pub const DEFAULT_PRIMARY_PORT: i64 = 8000;

/// Request header naming the chosen rank's `host:port` (llm-d `x-data-parallel-host-port`;
/// llm-d's README calls it `X-Data-Parallel-Endpoint`, its code sets this one). Router-owned:
/// a client's copy is removed on ingress.
pub const HOST_PORT_HEADER: &str = pdgate_api::headers::DATA_PARALLEL_HOST_PORT;

/// [`RequestState`] key of the request's [`DataParallelRoute`].
const ROUTE: &str = "data-parallel-profile-handler/route";

/// Parameters (llm-d names and defaults).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Params {
    /// TCP port the gateway sends to (the pod's front end); default 8000. Signed so that a
    /// negative value is reported as out of range rather than as a type error.
    pub primary_port: i64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            primary_port: DEFAULT_PRIMARY_PORT,
        }
    }
}

/// Where a gateway sends a request picked by this handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataParallelRoute {
    /// Value of [`HOST_PORT_HEADER`]: the picked rank's `host:port`.
    pub host_port: String,
    /// The destination `host:primaryPort` (IPv6 hosts keep their brackets).
    pub destination: String,
}

/// The route the handler kept for the request whose state is `state`; `None` when another
/// handler scheduled it (or a header-selected profile bypassed this one).
pub fn route_of(state: &RequestState) -> Option<DataParallelRoute> {
    state.get(ROUTE)
}

/// The route to an endpoint at `address` (`host:port`, `[v6]:port`) through `primary_port`.
/// An address without a port keeps its whole text as the host.
pub fn route_to(address: &str, primary_port: u16) -> DataParallelRoute {
    let is_port = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let host = match address.strip_prefix('[') {
        // `[v6]:port` → `[v6]`; `[v6]` alone has no port.
        Some(rest) => match rest.rsplit_once("]:") {
            Some((_, p)) if is_port(p) => &address[..address.len() - p.len() - 1],
            _ => address,
        },
        // `host:port` with one colon; a bare IPv6 address has several and no port.
        None => match address.split_once(':') {
            Some((h, p)) if is_port(p) => h,
            _ => address,
        },
    };
    DataParallelRoute {
        host_port: address.to_string(),
        destination: format!("{host}:{primary_port}"),
    }
}

/// The handler.
#[derive(Debug)]
pub struct DataParallelProfileHandler {
    profile: String,
    primary_port: u16,
}

impl ProfileHandler for DataParallelProfileHandler {
    fn handle(
        &self,
        ctx: &RequestCtx<'_>,
        runner: &dyn ProfileRunner,
    ) -> Result<SchedulingResult, Rejection> {
        let decode = runner.run(ctx, &self.profile, Phase::Aggregated)?;
        let route = route_to(&decode.endpoint.endpoint.address, self.primary_port);
        ctx.state().set(ROUTE, route);
        Ok(SchedulingResult {
            prefill: None,
            decode,
            prefill_unavailable: None,
        })
    }

    /// One aggregated profile: no phase has a profile of its own (no encode step, no split).
    fn profile_for(&self, _phase: Phase) -> Option<&str> {
        None
    }
}

fn build(params: Option<&Value>, ctx: &mut BuildCtx<'_>) -> Result<Built, PluginError> {
    let p: Params = decode(params)?;
    let primary_port = u16::try_from(p.primary_port)
        .ok()
        .filter(|port| *port != 0)
        .ok_or_else(|| {
            PluginError::invalid(
                "primaryPort",
                format!("must be between 1 and 65535, got {}", p.primary_port),
            )
        })?;
    let profile = match ctx.profiles {
        [one] => one.clone(),
        many => {
            return Err(PluginError {
                path: None,
                key: None,
                message: format!(
                    "needs exactly one scheduling profile (it routes one pick to a rank), found {}",
                    many.len()
                ),
                missing: None,
            })
        }
    };
    Ok(Built {
        handler: Some(Arc::new(DataParallelProfileHandler {
            profile,
            primary_port,
        })),
        params: effective(&p),
        ..Built::default()
    })
}

#[cfg(test)]
#[path = "data_parallel_profile_handler_tests.rs"]
mod tests;
