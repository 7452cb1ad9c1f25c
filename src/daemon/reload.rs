//! The configuration reload: SIGHUP and `POST /$config/reload` re-read the configuration
//! file (`--config`, else the first default place that holds one, as at start) and apply its
//! entities online ([`Registry::reload_file`]). A file that does not load — not TOML, an
//! unknown key, a broken rule (the loader's error names the line or the key) — or whose
//! entities do not fit the run-time changes in force is refused with that error logged, and
//! the running configuration stays. Every section other than the entities (`[server]`,
//! `[auth]`, `[storage]`, `[http]`, `[tls]`, `[websocket]`, `[cluster]`) is read at start
//! only: a change there is logged as waiting for a restart.
//!
//! Answer of the route (and what a SIGHUP logs): `{"reloaded", "file", "added", "changed",
//! "removed", "restart", "overridden", "errors"}`, with `"error"` (one line) when something
//! failed.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::broker::registry::Registry;
use crate::broker::reload::FileReload;
use crate::config::Config;

/// What a reload needs besides the namespace: where the file is and what the command line
/// overrides in it.
pub struct ReloadSource {
    /// `--config` (`None`: the default places, else the built-in sample namespace).
    pub config: Option<PathBuf>,
    /// Applies the command line's overrides (`--listen`, `--data-dir`, `--memory`) to a
    /// freshly read file, so that they are not reported as changes.
    pub overrides: Arc<dyn Fn(&mut Config) + Send + Sync>,
    /// The configuration the broker started with (overrides applied).
    pub running: Config,
    /// SIGHUP, when it reloads (the binary installs it before it says it listens, so that
    /// a SIGHUP never meets the default action, which ends the process); `None`: only the
    /// route reloads.
    pub hangup: Option<tokio::signal::unix::Signal>,
}

impl std::fmt::Debug for ReloadSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("ReloadSource")
            .field("config", &self.config)
            .field("hangup", &self.hangup.is_some())
            .finish()
    }
}

/// The outcome of one reload: the HTTP status and the JSON answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// 200 when applied, 400 when the file was refused, 500 when some change failed.
    pub status: u16,
    /// The answer.
    pub body: Value,
}

/// Reloads the configuration of one running namespace.
pub struct Reloader {
    source: ReloadSource,
    registry: Arc<Registry>,
    /// One reload at a time.
    running: tokio::sync::Mutex<()>,
}

impl Reloader {
    /// A reloader of `registry` from `source`.
    pub fn new(source: ReloadSource, registry: Arc<Registry>) -> Arc<Reloader> {
        Arc::new(Reloader {
            source,
            registry,
            running: tokio::sync::Mutex::new(()),
        })
    }

    /// Re-reads the file and applies it; `trigger` names what asked (for the log). The
    /// service manager hears `RELOADING=1` before and `READY=1` after.
    pub async fn reload(&self, trigger: &str) -> Outcome {
        let _one = self.running.lock().await;
        super::notify::reloading();
        let outcome = self.apply(trigger).await;
        super::notify::ready(&status_line(&outcome));
        outcome
    }

    async fn apply(&self, trigger: &str) -> Outcome {
        let path = crate::cli::resolve_config_path(self.source.config.as_deref());
        let file = path
            .as_ref()
            .map(|path| path.display().to_string())
            .unwrap_or_else(|| "built-in default".to_string());
        tracing::info!("reloading the configuration from {file} ({trigger})");
        let loaded = match &path {
            Some(path) => Config::load(path).map_err(|error| error.to_string()),
            None => Ok(Config::builtin_default()),
        };
        let mut config = match loaded.and_then(|config| crate::validate(&config).map(|()| config)) {
            Ok(config) => config,
            Err(error) => return refused(&file, error),
        };
        (self.source.overrides)(&mut config);
        let mut report = match self.registry.reload_file(&config).await {
            Ok(report) => report,
            Err(error) => return refused(&file, error.to_string()),
        };
        report
            .restart
            .splice(0..0, settings_waiting(&self.source.running, &config));
        for line in &report.overridden {
            tracing::warn!(
                "{line} (the run-time change stored in the data directory wins over the configuration file)"
            );
        }
        for line in &report.restart {
            tracing::warn!("configuration reload: {line}");
        }
        for line in &report.errors {
            tracing::error!("configuration reload: {line}");
        }
        tracing::info!(
            "configuration reloaded from {file}: added [{}], changed [{}], removed [{}]",
            report.added.join(", "),
            report.changed.join(", "),
            report.removed.join(", ")
        );
        answer(&file, &report)
    }
}

/// The sections that are read at start only and differ between `running` and `file`, each
/// with the keys that differ (names only: `[auth]` values are secrets).
fn settings_waiting(running: &Config, file: &Config) -> Vec<String> {
    let sections = [
        ("[server]", differing_keys(&running.server, &file.server)),
        ("[auth]", differing_keys(&running.auth, &file.auth)),
        ("[storage]", differing_keys(&running.storage, &file.storage)),
        ("[http]", differing_keys(&running.http, &file.http)),
        ("[tls]", differing_keys(&running.tls, &file.tls)),
        (
            "[websocket]",
            differing_keys(&running.websocket, &file.websocket),
        ),
        ("[cluster]", differing_keys(&running.cluster, &file.cluster)),
    ];
    sections
        .into_iter()
        .filter_map(|(section, keys)| {
            let keys = keys?;
            Some(if keys.is_empty() {
                format!("{section}: a change takes effect at the next start")
            } else {
                format!(
                    "{section} {}: a change takes effect at the next start",
                    keys.join(", ")
                )
            })
        })
        .collect()
}

/// `None` when the two are equal; else the names of the top-level fields whose values
/// differ (read from the pretty `Debug` form, where each field starts a line indented by four
/// spaces), possibly empty when that form shows no difference.
fn differing_keys<T: std::fmt::Debug + PartialEq>(running: &T, file: &T) -> Option<Vec<String>> {
    if running == file {
        return None;
    }
    fn fields(text: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for line in text.lines().skip(1) {
            let name = line
                .strip_prefix("    ")
                .filter(|rest| !rest.starts_with(' '))
                .and_then(|rest| rest.split_once(':'))
                .map(|(name, _)| name)
                .filter(|name| {
                    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                });
            match (name, out.last_mut()) {
                (Some(name), _) => out.push((name.to_string(), line.to_string())),
                (None, Some(last)) => {
                    last.1.push('\n');
                    last.1.push_str(line);
                }
                (None, None) => {}
            }
        }
        out
    }
    let before = fields(&format!("{running:#?}"));
    let after = fields(&format!("{file:#?}"));
    Some(
        before
            .iter()
            .zip(after.iter())
            .filter(|(old, new)| old != new)
            .map(|(old, _)| old.0.clone())
            .collect(),
    )
}

fn refused(file: &str, error: String) -> Outcome {
    tracing::error!("configuration reload refused, the running configuration stays: {error}");
    Outcome {
        status: 400,
        body: json!({
            "reloaded": false,
            "file": file,
            "added": [],
            "changed": [],
            "removed": [],
            "restart": [],
            "overridden": [],
            "errors": [error],
            "error": format!("configuration reload refused, the running configuration stays: {error}"),
        }),
    }
}

fn answer(file: &str, report: &FileReload) -> Outcome {
    let mut body = json!({
        "reloaded": true,
        "file": file,
        "added": report.added,
        "changed": report.changed,
        "removed": report.removed,
        "restart": report.restart,
        "overridden": report.overridden,
        "errors": report.errors,
    });
    let status = if report.errors.is_empty() {
        200
    } else {
        body["error"] = json!(format!(
            "configuration reloaded with errors: {}",
            report.errors.join("; ")
        ));
        500
    };
    Outcome { status, body }
}

fn status_line(outcome: &Outcome) -> String {
    let count = |key: &str| {
        outcome.body[key]
            .as_array()
            .map(Vec::len)
            .unwrap_or_default()
    };
    match outcome.status {
        200 => format!(
            "serving; configuration reloaded ({} added, {} changed, {} removed)",
            count("added"),
            count("changed"),
            count("removed")
        ),
        400 => "serving; the last configuration reload was refused (see the log)".to_string(),
        _ => "serving; the last configuration reload had errors (see the log)".to_string(),
    }
}

/// Makes `admin`'s reload route reload `registry` from `source`, and reloads on every
/// SIGHUP of `source.hangup` until `shutdown` turns true.
pub fn install(
    mut source: ReloadSource,
    registry: Arc<Registry>,
    admin: &crate::admin::http::Admin,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let hangups = source.hangup.take();
    let reloader = Reloader::new(source, registry);
    let route = reloader.clone();
    let _ = admin.reload.set(Arc::new(move || {
        let reloader = route.clone();
        Box::pin(async move {
            let outcome = reloader.reload("POST /$config/reload").await;
            (outcome.status, outcome.body)
        })
    }));
    let Some(mut hangups) = hangups else {
        return;
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                received = hangups.recv() => {
                    if received.is_none() {
                        break;
                    }
                    reloader.reload("SIGHUP").await;
                }
                () = async { let _ = shutdown.wait_for(|stop| *stop).await; } => break,
            }
        }
    });
}

/// The command line's overrides of the file (`--listen`, `--memory`, `--data-dir`), applied
/// at start and to every reloaded file.
pub fn command_line_overrides(cli: &crate::cli::Cli) -> Arc<dyn Fn(&mut Config) + Send + Sync> {
    let (listen, memory, data_dir) = (cli.listen, cli.memory, cli.data_dir.clone());
    Arc::new(move |config: &mut Config| {
        if let Some(address) = listen {
            config.server.listen = address;
        }
        if memory {
            config.storage.mode = crate::config::StorageMode::Memory;
        }
        if let Some(directory) = &data_dir {
            config.storage.mode = crate::config::StorageMode::Durable;
            config.storage.data_dir = directory.clone();
        }
    })
}

/// Installs the SIGHUP handler (in a Tokio runtime) for [`ReloadSource::hangup`]; `None`
/// with a warning when it cannot be.
pub fn hangup_signal() -> Option<tokio::signal::unix::Signal> {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(signal) => Some(signal),
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP: reload through POST /$config/reload");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_that_wait_for_a_restart_are_named_by_key() {
        let running = Config::builtin_default();
        let mut file = running.clone();
        assert!(settings_waiting(&running, &file).is_empty());
        file.server.max_connections = 7;
        file.server.listen = "0.0.0.0:5672".parse().expect("an address");
        file.http.allowed_hosts = vec!["broker.example".into()];
        assert_eq!(
            settings_waiting(&running, &file),
            [
                "[server] listen, max_connections: a change takes effect at the next start",
                "[http] allowed_hosts: a change takes effect at the next start",
            ]
        );
    }
}
