//! Start-up steps both fronts share: reading the scheduler config, waiting for the stop
//! signal.

use pdgate_scheduler::{Scheduler, DEFAULT_CONFIG_YAML};
use std::path::PathBuf;

/// The text of a config file: a regular file of at most
/// [`pdgate_fleet::file_read::MAX_CONFIG_FILE_BYTES`] (so `/dev/zero` or a FIFO cannot eat
/// memory or hang the start).
///
/// Errors: a message naming the path and the problem.
pub fn read_config_file(path: &std::path::Path) -> anyhow::Result<String> {
    pdgate_fleet::file_read::read_regular_file(path, pdgate_fleet::file_read::MAX_CONFIG_FILE_BYTES)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))
}

/// Loads the scheduler config named by `path`, or the built-in default.
///
/// Errors: the file cannot be read, or the config is invalid — then every error is listed,
/// one per line, as `check-config` shows them.
pub fn load_scheduler(path: Option<&PathBuf>) -> anyhow::Result<Scheduler> {
    match path {
        Some(p) => {
            let text = read_config_file(p)?;
            let source = p.display().to_string();
            Scheduler::from_yaml(&text, &source).map_err(|first| {
                match pdgate_scheduler::config::check(&text, &source) {
                    Err(all) => anyhow::anyhow!("invalid config:\n{all}"),
                    Ok(_) => anyhow::anyhow!("invalid config: {first}"),
                }
            })
        }
        None => Ok(Scheduler::from_yaml(
            DEFAULT_CONFIG_YAML,
            "built-in default config",
        )?),
    }
}

/// Waits for SIGTERM (Kubernetes stopping the pod) or SIGINT (both front ends).
///
/// Errors: the signal handlers cannot be installed.
pub async fn shutdown_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}
