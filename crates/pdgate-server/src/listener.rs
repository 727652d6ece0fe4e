//! The accept loop of `pdgate serve`'s port: client connections under [`ClientLimits`]
//! (issue 10), by the loop both fronts share ([`pdgate_core::front`]; the EPP's metrics port
//! runs the same one).
//!
//! - **Connection slots**, shared by every server thread: a connection over
//!   [`ClientLimits::max_connections`] is answered `503` with `Connection: close` and closed at
//!   once, so a flood of idle or slow connections never takes the descriptors that `/health`
//!   and normal requests need for longer than the header timeout that frees them.
//! - **Header timeout** (from accept until the first byte, then hyper's HTTP/1 header-read
//!   timer, which also runs whenever the connection falls idle after a response): a
//!   connection that never sends a byte, a slowloris client, or a keep-alive connection
//!   nobody uses, is closed after [`ClientLimits::header_timeout`].
//! - **Header limits**: at most [`pdgate_core::front::MAX_REQUEST_HEADERS`] fields and
//!   [`pdgate_core::front::MAX_REQUEST_HEADER_BYTES`] of head (431 from hyper), the EPP's
//!   limits too.
//! - **Accept errors** (`EMFILE`, `ENFILE`, …) pause the loop for [`ACCEPT_BACKOFF`] and are
//!   logged at most once a second; the loop never stops.
//!
//! `/metrics` and `/health` are routes of this port: serve has no port of its own for them.

use crate::client_limits::ClientLimits;
use crate::state::AppState;
use axum::Router;
use pdgate_core::front::{Door, Refusal};
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves `app` on `listener` under `state`'s client limits until the task is aborted.
pub async fn accept_loop(listener: TcpListener, app: Router, state: Arc<AppState>) {
    let limits: ClientLimits = state.client_limits;
    let door = Door::new(
        listener,
        (&limits).into(),
        state.connections.clone(),
        state.metrics.clone(),
        Refusal::Http503,
    );
    pdgate_core::front::serve_http(door, app).await
}
