//! The log's format: `text` (one human-readable line per event, the default) or `json` (one
//! JSON object per line for log shippers: `timestamp`, `level`, `target`, `fields` with the
//! `message` and the event's fields, and the spans). Logs go to stderr either way.

/// `--log-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global subscriber: `filter` is an `EnvFilter` directive.
pub fn init(format: LogFormat, filter: &str) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}
