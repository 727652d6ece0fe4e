//! `pdgate serve`'s listeners: one server thread per core, each with a single-threaded tokio
//! runtime, its own `SO_REUSEPORT` listener on the same address and its own upstream
//! connection pool (the thread-per-core layout of Pingora and Envoy). A request then stays on
//! one thread from accept to the upstream and back, with no cross-thread wake-ups; the kernel
//! spreads connections over the listeners. Scheduling state (endpoints, prefix index,
//! bookings, metrics) is shared.

use crate::app::spawn_listener;
use crate::state::AppState;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// One `SO_REUSEPORT` listener on `addr`; with port 0, pass the port of the first listener
/// for the others. The unspecified IPv6 address (`[::]`) is bound dual-stack (IPv4 clients
/// too, whatever the host's `bindv6only`), as Go binds `:PORT`.
pub fn bind_reuseport(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = tcp_socket(addr)?;
    socket.set_reuse_address(true)?;
    #[cfg(unix)]
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Where `spawn_server_threads` probes `addr`: `[::]` (every interface) falls back to
/// `0.0.0.0` on a host without IPv6, logged; any other address is bound as given.
fn probe(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    match bind_exclusive(addr) {
        Err(e) if every_interface(addr) && e.kind() != std::io::ErrorKind::AddrInUse => {
            let v4 = SocketAddr::from(([0, 0, 0, 0], addr.port()));
            tracing::warn!(error = %e, %v4, "IPv6 is unavailable: listening on every IPv4 interface");
            bind_exclusive(v4)
        }
        other => other,
    }
}

/// A bind of `addr` without `SO_REUSEPORT`, dual-stack for `[::]`: it fails when any other
/// listener holds the port, so two routers never silently share one. With `SO_REUSEADDR`,
/// as every listener here: connections of a predecessor left in TIME-WAIT (a restart closes
/// its keep-alive connections) do not hold the port — on Linux `SO_REUSEADDR` never lets two
/// live listeners share a port, only a listener bind over TIME-WAIT (issue 27: without it a
/// successor was refused for the 60 s of TIME-WAIT).
fn bind_exclusive(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = tcp_socket(addr)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1)?;
    Ok(socket.into())
}

/// `[::]`: every interface, IPv6 and IPv4 (Go's `:PORT`).
fn every_interface(addr: SocketAddr) -> bool {
    addr.is_ipv6() && addr.ip().is_unspecified()
}

/// A TCP socket for `addr`'s family; dual-stack when `addr` is `[::]`.
fn tcp_socket(addr: SocketAddr) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if every_interface(addr) {
        socket.set_only_v6(false)?;
    }
    Ok(socket)
}

/// Starts `threads` server threads (at least 1) on `addr` (port 0 picks one port for all) and
/// returns the bound address. The threads run until the process exits.
///
/// Errors: the address is in use — also by another process's `SO_REUSEPORT` listener: the port
/// is first probed with a plain bind, so two routers never silently share a port — cannot be
/// bound, or a runtime cannot be built.
pub fn spawn_server_threads(
    addr: SocketAddr,
    threads: usize,
    state: &Arc<AppState>,
) -> std::io::Result<SocketAddr> {
    let bound = probe(addr)?.local_addr()?;
    let mut listeners = Vec::with_capacity(threads.max(1));
    for _ in 0..threads.max(1) {
        listeners.push(bind_reuseport(bound)?);
    }
    for (i, std_listener) in listeners.into_iter().enumerate() {
        let state = Arc::new(state.with_own_upstream());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(format!("pdgate-server-{i}"))
            .spawn(move || {
                rt.block_on(async move {
                    tokio::spawn(timer_anchor());
                    match TcpListener::from_std(std_listener) {
                        Ok(listener) => {
                            let _ = spawn_listener(listener, state).await;
                        }
                        Err(e) => tracing::error!(error = %e, "listener unusable"),
                    }
                })
            })?;
    }
    Ok(bound)
}

/// Period of [`timer_anchor`]: shorter than every default per-request timeout (the shortest,
/// the upstream connect timeout, is 5 s), so those never precede the timer's next wake.
pub const TIMER_ANCHOR_PERIOD: Duration = Duration::from_secs(1);

/// Keeps one timer always pending on a server thread's runtime. tokio's time driver writes to
/// the runtime's eventfd whenever a timer is registered with a deadline earlier than its next
/// wake-up, including none (tokio 1.x `runtime/time/mod.rs`, `reregister`), even when the
/// thread is awake, which is always the case when a request registers its deadlines. Without
/// a pending timer, every request (its client-body, head and body deadlines) cost one `write`
/// and one more `epoll_wait` (measured with `strace -c`: 1.3 writes per request). With this
/// timer due within [`TIMER_ANCHOR_PERIOD`], deadlines of that length or more register
/// without a syscall; shorter ones (a setting under 1 s) still wake the driver as they must.
async fn timer_anchor() {
    let mut tick = tokio::time::interval(TIMER_ANCHOR_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::start_state;
    use crate::state::ServeOptions;
    use pdgate_fleet::EndpointSource;
    use pdgate_scheduler::{Scheduler, DEFAULT_CONFIG_YAML};

    #[tokio::test]
    async fn a_port_held_by_another_reuseport_listener_is_refused() {
        // Another router's listener (SO_REUSEPORT) holds the port.
        let held = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = held.local_addr().unwrap();
        let scheduler = Arc::new(Scheduler::from_yaml(DEFAULT_CONFIG_YAML, "default").unwrap());
        let (state, _tasks) =
            start_state(ServeOptions::new(scheduler, EndpointSource::Static(vec![])))
                .await
                .unwrap();
        let err = spawn_server_threads(port, 2, &state).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        // A free port works, with every thread on the same port.
        let bound = spawn_server_threads("127.0.0.1:0".parse().unwrap(), 2, &state).unwrap();
        assert_ne!(bound.port(), 0);
    }

    /// TCP connections in TIME-WAIT whose local port is `port` (`/proc/net/tcp`, state 06).
    fn time_wait_on(port: u16) -> usize {
        let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
        let local = format!(":{port:04X} ");
        (table.lines().skip(1))
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() > 3 && format!("{} ", f[1]).ends_with(&local) && f[3] == "06"
            })
            .count()
    }

    #[test]
    fn the_probe_binds_over_time_wait_but_not_over_a_live_listener() {
        // A predecessor's listener that closed its accepted connections first (as a router
        // closes idle keep-alive connections on SIGTERM): they stay in TIME-WAIT on its port.
        let first = bind_exclusive("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = first.local_addr().unwrap();
        // One at a time: the probe's backlog is 1.
        let clients: Vec<_> = (0..5)
            .map(|_| {
                let c = std::net::TcpStream::connect(addr).unwrap();
                drop(first.accept().unwrap().0); // the server side closes first
                c
            })
            .collect();
        drop(first);
        std::thread::sleep(Duration::from_millis(50));
        drop(clients);
        std::thread::sleep(Duration::from_millis(50));
        assert!(time_wait_on(addr.port()) >= 1, "TIME-WAIT on the port");
        let successor = probe(addr).expect("a successor binds over TIME-WAIT");
        // A live listener still holds the port against a second router.
        let second = probe(addr).unwrap_err();
        assert_eq!(second.kind(), std::io::ErrorKind::AddrInUse);
        drop(successor);
    }
}
