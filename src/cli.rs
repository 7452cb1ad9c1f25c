//! Command-line interface (clap derive).
//!
//! `ferrobus [--config FILE] [--listen ADDR] [--data-dir DIR | --memory]
//! [--reset-runtime-changes] [--log-level LEVEL]` runs the broker;
//! `ferrobus --check-config FILE` validates a file, prints its summary and exits 0 or 1;
//! `ferrobus config convert FILE` prints the TOML equivalent of an emulator `Config.json`;
//! `ferrobus health [--url URL]` checks a running broker's `/health` (the container image's
//! health check).
//! This module only parses arguments and locates the config file; loading it, applying
//! `--listen` and initialising logging are `main.rs`'s job.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand};

/// Where the broker looks for its configuration first when `--config` is not given,
/// relative to the working directory.
pub const DEFAULT_CONFIG_PATH: &str = "config/ferrobus.toml";

/// Where the official emulator's image reads its `Config.json` (its compose file mounts the
/// user's file there); the second place looked at without `--config`.
pub const EMULATOR_CONFIG_PATH: &str = "/ServiceBus_Emulator/ConfigFiles/Config.json";

/// The system-wide configuration (the container image's default); the last place looked at
/// without `--config`.
pub const SYSTEM_CONFIG_PATH: &str = "/etc/ferrobus/ferrobus.toml";

/// Without `--config`, the first of these that is a file is loaded; none: the built-in
/// sample namespace.
pub const DEFAULT_CONFIG_PATHS: [&str; 3] = [
    DEFAULT_CONFIG_PATH,
    EMULATOR_CONFIG_PATH,
    SYSTEM_CONFIG_PATH,
];

/// Log filter used when `--log-level` is not given.
pub const DEFAULT_LOG_LEVEL: &str = "info";

/// Parsed command line.
#[derive(Debug, Clone, PartialEq, Eq, Parser)]
#[command(
    name = "ferrobus",
    version,
    about = "A standalone AMQP 1.0 broker with Azure Service Bus semantics",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// A tool to run instead of the broker.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Configuration file [default: the first that exists of config/ferrobus.toml,
    /// /ServiceBus_Emulator/ConfigFiles/Config.json and /etc/ferrobus/ferrobus.toml, else the
    /// built-in sample namespace].
    #[arg(long, value_name = "FILE", conflicts_with = "check_config")]
    pub config: Option<PathBuf>,

    /// Address to listen on, overriding `server.listen` (e.g. 0.0.0.0:5672).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Log level (trace, debug, info, warn, error) or a tracing EnvFilter directive such as
    /// "ferrobus=debug,info" [default: info].
    #[arg(long, value_name = "LEVEL", value_parser = parse_log_level)]
    pub log_level: Option<String>,

    /// Log line format: text, or json (one JSON object per line, for log shippers).
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = crate::daemon::LogFormat::Text)]
    pub log_format: crate::daemon::LogFormat,

    /// Data directory, overriding `storage.data_dir` [default: data, relative to the
    /// working directory].
    #[arg(long, value_name = "DIR", conflicts_with = "memory")]
    pub data_dir: Option<PathBuf>,

    /// Keep everything in memory (nothing is written; a restart starts empty), overriding
    /// `storage.mode`.
    #[arg(long)]
    pub memory: bool,

    /// Drop every entity created, changed or deleted at run time (admin API, `$management`)
    /// from the data directory at start: the namespace is the configuration file's again.
    #[arg(long, conflicts_with = "memory")]
    pub reset_runtime_changes: bool,

    /// Validate FILE, print a summary of its entities, and exit (0 if valid, 1 if not).
    #[arg(long, value_name = "FILE")]
    pub check_config: Option<PathBuf>,
}

/// Subcommands: tools that run and exit instead of starting the broker.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Configuration file tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Check a running broker's /health: exit 0 when it answers 200, else 1 (the container
    /// image's health check; no shell or curl needed).
    Health {
        /// The health URL (plain HTTP) [default: http://127.0.0.1:5300/health, the port
        /// being EMULATOR_HTTP_PORT when set].
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// The operator commands (`queue`, `topic`, `send`, `receive`, …): see `docs/cli.md`.
    #[command(flatten)]
    Ops(Box<crate::ops::OpsCommand>),
}

/// `ferrobus config …`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum ConfigCommand {
    /// Print the ferrobus TOML equivalent of the official emulator's Config.json (exit 0),
    /// or the error (exit 1).
    Convert {
        /// The emulator's Config.json.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Make a running broker re-read its configuration file (the admin API's
    /// `POST /$config/reload`) and print what it added, changed and removed.
    Reload(crate::ops::ReloadArgs),
}

impl Cli {
    /// The log filter to install: `--log-level`, or [`DEFAULT_LOG_LEVEL`].
    pub fn log_filter(&self) -> &str {
        self.log_level.as_deref().unwrap_or(DEFAULT_LOG_LEVEL)
    }
}

/// Accepts a level name (any case, normalised to lower case) or something shaped like an
/// EnvFilter directive; the directive's full grammar is checked when logging starts.
fn parse_log_level(text: &str) -> Result<String, String> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "trace" | "debug" | "info" | "warn" | "error" | "off"
    ) {
        return Ok(lower);
    }
    if trimmed.is_empty() || trimmed.chars().any(char::is_whitespace) {
        return Err(format!(
            "{text:?} is not a log level (expected trace, debug, info, warn, error, or a directive like \"ferrobus=debug\")"
        ));
    }
    Ok(trimmed.to_string())
}

/// The config file to load: the explicit `--config` path (even if missing, so the error
/// names it); else the first of [`DEFAULT_CONFIG_PATHS`] that is a file (the first relative
/// to the working directory); else `None`, meaning
/// [`crate::config::Config::builtin_default`].
pub fn resolve_config_path(cli_config: Option<&Path>) -> Option<PathBuf> {
    resolve_config_path_in(cli_config, DEFAULT_CONFIG_PATHS.map(PathBuf::from))
}

/// [`resolve_config_path`] with the candidate paths given (for tests).
fn resolve_config_path_in(
    cli_config: Option<&Path>,
    candidates: impl IntoIterator<Item = PathBuf>,
) -> Option<PathBuf> {
    if let Some(path) = cli_config {
        return Some(path.to_path_buf());
    }
    candidates.into_iter().find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(arguments: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("ferrobus").chain(arguments.iter().copied()))
    }

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn no_arguments_means_defaults() -> Result<(), clap::Error> {
        let cli = parse(&[])?;
        assert_eq!(cli.config, None);
        assert_eq!(cli.listen, None);
        assert_eq!(cli.check_config, None);
        assert_eq!(cli.log_filter(), "info");
        assert_eq!(cli.data_dir, None);
        assert!(!cli.memory);
        assert!(!cli.reset_runtime_changes);
        Ok(())
    }

    #[test]
    fn reset_runtime_changes_is_a_flag_of_durable_storage() -> Result<(), clap::Error> {
        assert!(parse(&["--reset-runtime-changes"])?.reset_runtime_changes);
        assert!(parse(&["--data-dir", "d", "--reset-runtime-changes"])?.reset_runtime_changes);
        assert!(parse(&["--memory", "--reset-runtime-changes"]).is_err());
        Ok(())
    }

    #[test]
    fn run_arguments_are_parsed() -> Result<(), clap::Error> {
        let cli = parse(&[
            "--config",
            "my.toml",
            "--listen",
            "0.0.0.0:5673",
            "--log-level",
            "DEBUG",
        ])?;
        assert_eq!(cli.config, Some(PathBuf::from("my.toml")));
        assert_eq!(cli.listen, Some(SocketAddr::from(([0, 0, 0, 0], 5673))));
        assert_eq!(cli.log_filter(), "debug");
        Ok(())
    }

    #[test]
    fn log_level_accepts_env_filter_directives() -> Result<(), clap::Error> {
        let cli = parse(&["--log-level", "ferrobus=trace,warn"])?;
        assert_eq!(cli.log_filter(), "ferrobus=trace,warn");
        assert!(parse(&["--log-level", "very loud"]).is_err());
        assert!(parse(&["--log-level", ""]).is_err());
        Ok(())
    }

    #[test]
    fn bad_listen_address_is_rejected() {
        assert!(parse(&["--listen", "localhost"]).is_err());
    }

    #[test]
    fn check_config_takes_a_file_and_excludes_config() -> Result<(), clap::Error> {
        let cli = parse(&["--check-config", "x.toml"])?;
        assert_eq!(cli.check_config, Some(PathBuf::from("x.toml")));
        assert!(parse(&["--check-config", "x.toml", "--config", "y.toml"]).is_err());
        assert!(parse(&["--check-config"]).is_err());
        Ok(())
    }

    #[test]
    fn config_convert_takes_a_file_and_no_broker_flags() -> Result<(), clap::Error> {
        let cli = parse(&["config", "convert", "Config.json"])?;
        assert_eq!(
            cli.command,
            Some(Command::Config(ConfigCommand::Convert {
                file: PathBuf::from("Config.json")
            }))
        );
        assert!(parse(&["config", "convert"]).is_err());
        assert!(parse(&["--memory", "config", "convert", "Config.json"]).is_err());
        assert_eq!(parse(&["--config", "x.json"])?.command, None);
        Ok(())
    }

    #[test]
    fn version_and_help_are_provided() {
        let version = parse(&["--version"]).err().map(|error| error.kind());
        assert_eq!(version, Some(clap::error::ErrorKind::DisplayVersion));
        let help = parse(&["--help"]).err().map(|error| error.kind());
        assert_eq!(help, Some(clap::error::ErrorKind::DisplayHelp));
    }

    #[test]
    fn explicit_config_path_wins_even_if_missing() {
        let path = Path::new("/nonexistent/ferrobus.toml");
        assert_eq!(
            resolve_config_path_in(Some(path), [PathBuf::from("/nonexistent")]),
            Some(path.to_path_buf())
        );
    }

    #[test]
    fn health_takes_an_optional_url_and_no_broker_flags() -> Result<(), clap::Error> {
        assert_eq!(
            parse(&["health"])?.command,
            Some(Command::Health { url: None })
        );
        let url = "http://broker:5300/health";
        assert_eq!(
            parse(&["health", "--url", url])?.command,
            Some(Command::Health {
                url: Some(url.to_string())
            })
        );
        assert!(parse(&["--memory", "health"]).is_err());
        Ok(())
    }

    #[test]
    fn default_config_paths_are_tried_in_order() -> std::io::Result<()> {
        assert_eq!(DEFAULT_CONFIG_PATHS[0], DEFAULT_CONFIG_PATH);
        let directory =
            std::env::temp_dir().join(format!("ferrobus-cli-test-{}", std::process::id()));
        std::fs::create_dir_all(directory.join("config"))?;
        let local = directory.join(DEFAULT_CONFIG_PATH);
        let emulator = directory.join("Config.json");
        let system = directory.join("ferrobus.toml");
        let candidates = || [local.clone(), emulator.clone(), system.clone()];
        assert_eq!(resolve_config_path_in(None, candidates()), None);
        std::fs::write(&system, "")?;
        assert_eq!(
            resolve_config_path_in(None, candidates()),
            Some(system.clone())
        );
        std::fs::write(&emulator, "{}")?;
        assert_eq!(
            resolve_config_path_in(None, candidates()),
            Some(emulator.clone())
        );
        std::fs::write(&local, "")?;
        assert_eq!(
            resolve_config_path_in(None, candidates()),
            Some(local.clone())
        );
        // A directory of that name (a mount point left empty) is not a config file.
        std::fs::remove_file(&local)?;
        std::fs::create_dir_all(&local)?;
        assert_eq!(resolve_config_path_in(None, candidates()), Some(emulator));
        std::fs::remove_dir_all(&directory)
    }
}
