//! Start-up steps both fronts share: reading the scheduler config, waiting for the stop
//! signal.

use pdgate_scheduler::{ConfigError, Scheduler, DEFAULT_CONFIG_YAML};
use std::path::PathBuf;

/// The text of a config file (EndpointPickerConfig or coordinator file), safe to parse: a
/// regular file of at most [`pdgate_fleet::file_read::MAX_CONFIG_FILE_BYTES`] (so `/dev/zero`
/// or a FIFO cannot eat memory or hang the start), nested at most
/// [`pdgate_fleet::file_read::MAX_NESTING`] levels (the YAML parser's time grows with the
/// square of the depth). Every front end reads its config files here (`serve --config`,
/// `serve --coordinator-config`, `epp --config-file`, `check-config`).
///
/// Errors: one [`ConfigError`] naming the path: `cannot read the file: …`, or the line nested
/// too deep.
pub fn read_config_file(path: &std::path::Path) -> Result<String, ConfigError> {
    use pdgate_fleet::file_read::{nesting_error, read_regular_file, MAX_CONFIG_FILE_BYTES};
    let err = |line: Option<usize>, message: String| ConfigError {
        source_name: path.display().to_string(),
        line,
        plugin: None,
        message,
    };
    let text = read_regular_file(path, MAX_CONFIG_FILE_BYTES)
        .map_err(|e| err(None, format!("cannot read the file: {e}")))?;
    match nesting_error(&text) {
        Some((line, message)) => Err(err(Some(line), message)),
        None => Ok(text),
    }
}

/// Loads the scheduler config named by `path` (given with the flag `flag`, named in read
/// errors), or the built-in default.
///
/// Errors: the file cannot be read or nests too deep ([`read_config_file`], naming `flag`),
/// or the config is invalid — then every error is listed, one per line, as `check-config`
/// shows them.
pub fn load_scheduler(path: Option<&PathBuf>, flag: &str) -> anyhow::Result<Scheduler> {
    match path {
        Some(p) => {
            let text = read_config_file(p).map_err(|e| anyhow::anyhow!("{flag}: {e}"))?;
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
