//! The `ferrobus` binary: parse flags, load the configuration, start logging, bind the
//! listener and run until SIGINT or SIGTERM (SIGHUP reloads the configuration file, see
//! `ferrobus::daemon`). Errors become a message and exit code 1.

use std::process::ExitCode;

use clap::Parser;
use ferrobus::cli::{self, Cli};
use ferrobus::config::Config;

mod health_check;

fn load_config(cli: &Cli) -> Result<(Config, String), String> {
    match cli::resolve_config_path(cli.config.as_deref()) {
        Some(path) => Config::load(&path)
            .map(|config| (config, path.display().to_string()))
            .map_err(|error| error.to_string()),
        None => Ok((Config::builtin_default(), "built-in default".to_string())),
    }
}

/// Installs the SIGINT/SIGTERM handlers now (before the start-up line is logged, so a
/// signal sent right after it stops the broker cleanly) and returns a future that
/// completes on the first signal.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    async move {
        let terminate = async {
            match terminate {
                Some(mut signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let interrupt = async {
            match interrupt {
                Some(mut signal) => {
                    signal.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = terminate => {}
            () = interrupt => {}
        }
    }
}

fn main() -> ExitCode {
    ferrobus::server::limits::tune_allocator();
    let cli = Cli::parse();
    if let Some(cli::Command::Health { url }) = &cli.command {
        return health_check::run(url.as_deref());
    }
    if let Some(cli::Command::Config(cli::ConfigCommand::Convert { file })) = &cli.command {
        return match ferrobus::config::emulator::convert_file(file) {
            Ok(toml_text) => {
                print!("{toml_text}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("ferrobus: {error}");
                ExitCode::FAILURE
            }
        };
    }
    match &cli.command {
        Some(cli::Command::Ops(command)) => return ferrobus::ops::run(command),
        Some(cli::Command::Config(cli::ConfigCommand::Reload(arguments))) => {
            return ferrobus::ops::run_reload(arguments);
        }
        _ => {}
    }
    if let Some(path) = &cli.check_config {
        return match Config::load(path)
            .map_err(|error| error.to_string())
            .and_then(|config| ferrobus::validate(&config).map(|()| config))
        {
            Ok(config) => {
                println!("{}: OK", path.display());
                println!("{}", config.summary().trim_end());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("{error}");
                ExitCode::FAILURE
            }
        };
    }
    let filter = std::env::var("RUST_LOG")
        .ok()
        .filter(|_| cli.log_level.is_none())
        .unwrap_or_else(|| format!("ferrobus={}", cli.log_filter()));
    ferrobus::daemon::logging::init(cli.log_format, &filter);
    let (config, origin) = match load_config(&cli) {
        Ok(loaded) => loaded,
        Err(error) => {
            eprintln!("ferrobus: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(error) = ferrobus::validate(&config) {
        eprintln!("ferrobus: invalid configuration {origin}: {error}");
        return ExitCode::FAILURE;
    }
    if let Some(limit) = ferrobus::server::limits::raise_descriptor_limit() {
        let wanted =
            config.server.max_connections as u64 + ferrobus::server::limits::RESERVED_DESCRIPTORS;
        if wanted > limit {
            tracing::warn!(
                "max_connections is {} but the process may open only {limit} files: connections beyond about {} are refused with amqp:resource-limit-exceeded (raise the hard limit, e.g. `ulimit -Hn`, or lower server.max_connections)",
                config.server.max_connections,
                limit.saturating_sub(ferrobus::server::limits::RESERVED_DESCRIPTORS)
            );
        }
    }
    let mut config = config;
    let overrides = ferrobus::daemon::reload::command_line_overrides(&cli);
    overrides(&mut config);
    let listen = cli.listen.unwrap_or(config.server.listen);
    let mut reload = ferrobus::daemon::reload::ReloadSource {
        config: cli.config.clone(),
        overrides,
        running: config.clone(),
        hangup: None,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("ferrobus: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let mut storage = match ferrobus::open_storage(&config) {
            Ok(storage) => storage,
            Err(error) => {
                eprintln!(
                    "ferrobus: cannot open the data directory {}: {error}",
                    config.storage.data_dir.display()
                );
                return ExitCode::FAILURE;
            }
        };
        if cli.reset_runtime_changes {
            match &mut storage {
                Some((_, recovery)) => recovery.reset_runtime_changes(),
                None => tracing::info!(
                    "--reset-runtime-changes: storage is in memory, nothing stored to drop"
                ),
            }
        }
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(listener) => listener,
            Err(error) => {
                eprintln!("ferrobus: cannot listen on {listen}: {error}");
                return ExitCode::FAILURE;
            }
        };
        let http = match bind_http(&config, listen).await {
            Ok(http) => http,
            Err(error) => {
                eprintln!("ferrobus: {error}");
                return ExitCode::FAILURE;
            }
        };
        let amqps = match bind_port(Port {
            what: "AMQPS",
            key: "tls.listen",
            disabled: config.tls.disabled,
            configured: config.tls.listen,
            default_port: ferrobus::config::DEFAULT_AMQPS_PORT,
            amqp: listen,
            fallback: "AMQP over TLS is served on the AMQP port",
            quiet: true,
        })
        .await
        {
            Ok(listener) => listener,
            Err(error) => {
                eprintln!("ferrobus: {error}");
                return ExitCode::FAILURE;
            }
        };
        let websocket = match bind_port(Port {
            what: "WebSockets",
            key: "websocket.listen",
            disabled: config.websocket.disabled,
            configured: config.websocket.listen,
            default_port: ferrobus::config::DEFAULT_WEBSOCKET_PORT,
            amqp: listen,
            fallback: "AMQP over WebSockets is served on the AMQP and HTTP ports",
            quiet: true,
        })
        .await
        {
            Ok(listener) => listener,
            Err(error) => {
                eprintln!("ferrobus: {error}");
                return ExitCode::FAILURE;
            }
        };
        let https = match config.http.https_listen {
            Some(address) => match tokio::net::TcpListener::bind(address).await {
                Ok(listener) => Some(listener),
                Err(error) => {
                    eprintln!("ferrobus: cannot listen for HTTPS on {address} (http.https_listen): {error}");
                    return ExitCode::FAILURE;
                }
            },
            None => None,
        };
        let ignored: Vec<&str> = ["ACCEPT_EULA", "SQL_SERVER", "MSSQL_SA_PASSWORD", "SQL_WAIT_INTERVAL"]
            .into_iter()
            .filter(|name| std::env::var_os(name).is_some())
            .collect();
        if !ignored.is_empty() {
            tracing::info!(
                "ignoring the official emulator's environment ({}): ferrobus needs no SQL Server and no EULA",
                ignored.join(", ")
            );
        }
        if config.storage.mode == ferrobus::config::StorageMode::Durable
            && !config.tls.disabled
            && matches!(
                ferrobus::tls_identity(&config),
                ferrobus::admin::tls::Identity::Development { .. }
            )
        {
            // The development CA exists before the broker says it listens: clients that
            // wait for that line can trust the CA file at once.
            if let Err(error) = ferrobus::admin::tls::load(&ferrobus::tls_identity(&config)) {
                tracing::warn!(%error, "no development certificate: TLS connections will be refused");
            }
        }
        let signal = shutdown_signal();
        reload.hangup = ferrobus::daemon::reload::hangup_signal();
        let address = listener
            .local_addr()
            .map(|address| address.to_string())
            .unwrap_or_default();
        let storage_text = match config.storage.mode {
            ferrobus::config::StorageMode::Durable => {
                format!("data: {}", config.storage.data_dir.display())
            }
            ferrobus::config::StorageMode::Memory => "in memory".to_string(),
        };
        tracing::info!(
            "ferrobus {} listening on {address} with {} entities (config: {origin}, {storage_text})",
            env!("CARGO_PKG_VERSION"),
            config.entity_count()
        );
        // After the AMQP line: scripts take the first "listening on" as the AMQP port.
        for (listener, what) in [
            (&http, "HTTP (admin API, /health, /metrics)"),
            (&https, "HTTPS (admin API, /health, /metrics)"),
            (&amqps, "AMQPS (AMQP over TLS)"),
            (&websocket, "WebSockets (ws and wss at /$servicebus/websocket/)"),
        ] {
            if let Some(address) = listener.as_ref().and_then(|l| l.local_addr().ok()) {
                tracing::info!("{what} on {address}");
            }
        }
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let grace = config.server.shutdown_grace_period;
        let server = tokio::spawn(async move {
            let listeners = ferrobus::Listeners {
                amqp: listener,
                more: amqps.into_iter().chain(websocket).collect(),
                http,
                https,
            };
            // The line the official emulator prints when it serves; Testcontainers modules
            // wait for it.
            let ready = || {
                println!("Emulator Service is Successfully Up!");
                ferrobus::daemon::notify::ready("serving");
            };
            let exits = ferrobus::daemon::member::Exits {
                deposed: std::sync::Arc::new(restart_in_place),
                failed: std::sync::Arc::new(|why: String| {
                    tracing::error!("{why}");
                    std::process::exit(1);
                }),
                removed: std::sync::Arc::new(|| std::process::exit(0)),
            };
            let spread = config.cluster.placement == ferrobus::config::Placement::Spread;
            let served = match storage {
                Some(storage) if config.cluster.is_multi_node() && spread => {
                    ferrobus::daemon::spread::run_spread(
                        listeners,
                        &config,
                        storage,
                        stopped,
                        ready,
                        Some(reload),
                        exits,
                    )
                    .await
                }
                Some(storage) if config.cluster.is_multi_node() => {
                    ferrobus::daemon::member::run_member(
                        listeners,
                        &config,
                        storage,
                        stopped,
                        ready,
                        Some(reload),
                        exits,
                    )
                    .await
                }
                storage => {
                    ferrobus::run_daemon(listeners, &config, storage, stopped, ready, Some(reload))
                        .await
                }
            };
            if let Err(error) = served {
                tracing::error!("{error}");
                return false;
            }
            true
        });
        let mut server = server;
        tokio::select! {
            () = signal => {}
            // The broker stopped by itself (it could not start serving): nothing to wait for.
            served = &mut server => {
                return if matches!(served, Ok(true)) {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                };
            }
        }
        tracing::info!("shutting down");
        ferrobus::daemon::notify::stopping();
        let _ = stop.send(true);
        // The server returns once every connection has closed (bounded by the grace period).
        let _ = tokio::time::timeout(grace + std::time::Duration::from_secs(8), server).await;
        ExitCode::SUCCESS
    })
}

/// A cluster member that stopped leading starts again as a follower: the same process
/// (pid, arguments, environment) runs the binary anew, which closes every connection and
/// drops every lock and in-memory state at once, as `kill -9` and a restart would. Every
/// file and socket closes on exec; the data directory's lock goes with them.
fn restart_in_place() {
    use std::os::unix::process::CommandExt;
    let arguments: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let error = match std::env::current_exe() {
        Ok(binary) => std::process::Command::new(binary).args(arguments).exec(),
        Err(error) => error,
    };
    eprintln!("ferrobus: cannot start again as a follower: {error}");
    std::process::exit(75);
}

/// Binds the HTTP listener: `http.listen`, else port `EMULATOR_HTTP_PORT` or 5300 on the
/// AMQP address's IP (an ephemeral port when the AMQP port is 0). A configured address
/// that cannot be bound is an error; the default port being taken only disables the
/// listener (the AMQP port serves HTTP too).
async fn bind_http(
    config: &ferrobus::config::Config,
    amqp: std::net::SocketAddr,
) -> Result<Option<tokio::net::TcpListener>, String> {
    let from_environment = match std::env::var("EMULATOR_HTTP_PORT") {
        Ok(text) => Some(
            text.trim()
                .parse::<u16>()
                .map_err(|_| format!("EMULATOR_HTTP_PORT={text:?} is not a port number"))?,
        ),
        Err(_) => None,
    };
    let configured = config
        .http
        .listen
        .or(from_environment.map(|port| std::net::SocketAddr::new(amqp.ip(), port)));
    bind_port(Port {
        what: "HTTP",
        key: "http.listen / EMULATOR_HTTP_PORT",
        disabled: config.http.disabled,
        configured,
        default_port: ferrobus::config::DEFAULT_HTTP_PORT,
        amqp,
        fallback: "the admin API, /health and /metrics are served on the AMQP port only",
        quiet: false,
    })
    .await
}

/// An optional listener: where it is asked for, or where it goes by default.
struct Port {
    what: &'static str,
    key: &'static str,
    disabled: bool,
    configured: Option<std::net::SocketAddr>,
    default_port: u16,
    amqp: std::net::SocketAddr,
    fallback: &'static str,
    /// A busy default port is only worth an info line (443 needs privileges).
    quiet: bool,
}

/// Binds an optional listener: at its configured address (failure is an error), else at the
/// default port on the AMQP address (failure is a warning: the AMQP port serves the same
/// protocols), or on an ephemeral port when the AMQP port is 0.
async fn bind_port(port: Port) -> Result<Option<tokio::net::TcpListener>, String> {
    if port.disabled {
        return Ok(None);
    }
    let (address, explicit) = match port.configured {
        Some(address) => (address, true),
        None if port.amqp.port() == 0 => (std::net::SocketAddr::new(port.amqp.ip(), 0), false),
        None => (
            std::net::SocketAddr::new(port.amqp.ip(), port.default_port),
            false,
        ),
    };
    match tokio::net::TcpListener::bind(address).await {
        Ok(listener) => Ok(Some(listener)),
        Err(error) if explicit => Err(format!(
            "cannot listen for {} on {address} ({}): {error}",
            port.what, port.key
        )),
        Err(error) => {
            let text = format!(
                "cannot listen for {} on {address}: {error}; {} (set {} to choose another port)",
                port.what, port.fallback, port.key
            );
            if port.quiet {
                tracing::info!("{text}");
            } else {
                tracing::warn!("{text}");
            }
            Ok(None)
        }
    }
}
