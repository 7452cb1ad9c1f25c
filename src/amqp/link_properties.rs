//! Service Bus link properties read from and written to `attach` frames: the
//! `com.microsoft:session-filter` of a session receiver, the `com.microsoft:timeout` it
//! waits for a session, and .NET ticks for `com.microsoft:locked-until-utc` (§3.5 of the
//! wire contract). Pure functions; the server decides what to do with them.

use std::time::Duration;

use fe2o3_amqp_types::performatives::Attach;
use fe2o3_amqp_types::primitives::Value;

/// The `com.microsoft:session-filter` of an attach: `None` without one, `Some(None)` for
/// next available (null), `Some(Some(id))` for a named session (plain or described string).
pub fn session_filter(attach: &Attach) -> Option<Option<String>> {
    let filter = attach.source.as_ref()?.filter.as_ref()?;
    let (_, value) = filter
        .iter()
        .find(|(key, _)| key.0 == "com.microsoft:session-filter")?;
    let value = match value {
        Value::Described(described) => &described.value,
        other => other,
    };
    Some(match value {
        Value::String(text) => Some(text.clone()),
        Value::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    })
}

/// .NET ticks (100 ns since 0001-01-01) for a Unix-millisecond time.
pub fn dotnet_ticks(unix_milliseconds: i64) -> i64 {
    unix_milliseconds * 10_000 + 621_355_968_000_000_000
}

/// The `com.microsoft:timeout` attach property (milliseconds, any integer type): how long a
/// next-available session receiver waits for a session. `None` when absent or not a number.
pub fn session_wait(attach: &Attach) -> Option<Duration> {
    let (_, value) = attach
        .properties
        .as_ref()?
        .iter()
        .find(|(key, _)| key.0 == "com.microsoft:timeout")?;
    let millis = match value {
        Value::Uint(millis) => *millis as u64,
        Value::Int(millis) => (*millis).max(0) as u64,
        Value::Ulong(millis) => *millis,
        Value::Long(millis) => (*millis).max(0) as u64,
        _ => return None,
    };
    Some(Duration::from_millis(millis))
}

/// The `com.microsoft:transfer-destination-address` attach property of a send-via sender:
/// the entity its messages go to (the link's target is the entity they go through).
pub fn transfer_destination(attach: &Attach) -> Option<String> {
    let (_, value) = attach
        .properties
        .as_ref()?
        .iter()
        .find(|(key, _)| key.0 == "com.microsoft:transfer-destination-address")?;
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Symbol(symbol) => Some(symbol.0.clone()),
        _ => None,
    }
}
