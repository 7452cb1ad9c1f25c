//! How the operator CLI prints: aligned tables for people, JSON for scripts, and the one JSON
//! shape of a message that `peek` and `receive` both write (one object per line).

use serde_json::{Value as Json, json};

/// Prints rows under a header, each column as wide as its widest cell.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    print!("{}", table(header, rows));
}

/// The text of [`print_table`].
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|cell| cell.chars().count()).collect();
    for row in rows {
        for (index, cell) in row.iter().enumerate() {
            if let Some(width) = widths.get_mut(index) {
                *width = (*width).max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|cell| cell.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(index, cell)| {
                let width = widths.get(index).copied().unwrap_or(0);
                format!("{cell:<width$}")
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// Prints a JSON value on one line.
pub fn print_json_line(value: &Json) {
    println!("{value}");
}

/// Prints a JSON value indented.
pub fn print_json(value: &Json) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// A number of a JSON object as text (`-` when absent).
pub fn number(value: &Json, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Json::as_u64)
        .map(|number| number.to_string())
        .unwrap_or_else(|| "-".to_string())
}

/// A string of a JSON object (empty when absent).
pub fn text(value: &Json, pointer: &str) -> String {
    match value.pointer(pointer) {
        Some(Json::String(text)) => text.clone(),
        Some(Json::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// A message body for JSON: `"body"` as text when it is UTF-8, else `"body_base64"`.
pub fn body_fields(object: &mut serde_json::Map<String, Json>, bytes: &[u8]) {
    use base64::Engine as _;
    match std::str::from_utf8(bytes) {
        Ok(text) => {
            object.insert("body".to_string(), Json::String(text.to_string()));
        }
        Err(_) => {
            object.insert(
                "body_base64".to_string(),
                Json::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
            );
        }
    }
}

/// Prints messages (in the shape [`body_fields`] and the message commands build) as JSON
/// lines or as a table of their main fields.
pub fn print_messages(messages: &[Json], as_table: bool) {
    if !as_table {
        for message in messages {
            print_json_line(message);
        }
        return;
    }
    let rows: Vec<Vec<String>> = messages
        .iter()
        .map(|message| {
            let mut body = text(message, "/body");
            if body.is_empty() && message.get("body_base64").is_some() {
                body = "(binary)".to_string();
            }
            let body: String = body.replace(['\n', '\r'], " ").chars().take(60).collect();
            vec![
                text(message, "/sequence_number"),
                text(message, "/message_id"),
                text(message, "/enqueued_time"),
                text(message, "/session_id"),
                text(message, "/dead_letter_reason"),
                body,
            ]
        })
        .collect();
    print_table(
        &[
            "SEQUENCE",
            "MESSAGE-ID",
            "ENQUEUED",
            "SESSION",
            "DEAD-LETTER-REASON",
            "BODY",
        ],
        &rows,
    );
}

/// Entities (the explorer's `Entity` objects) as the counts table.
pub fn print_entities(entities: &[Json], with_kind: bool) {
    let rows: Vec<Vec<String>> = entities
        .iter()
        .map(|entity| {
            let mut row = Vec::new();
            if with_kind {
                row.push(text(entity, "/kind"));
            }
            row.extend([
                text(entity, "/path"),
                text(entity, "/status"),
                number(entity, "/counts/active"),
                number(entity, "/counts/dead_letter"),
                number(entity, "/counts/scheduled"),
                number(entity, "/counts/deferred"),
                number(entity, "/counts/transfer_dead_letter"),
                number(entity, "/size_bytes"),
            ]);
            row
        })
        .collect();
    let mut header = Vec::new();
    if with_kind {
        header.push("KIND");
    }
    header.extend([
        "PATH",
        "STATUS",
        "ACTIVE",
        "DEAD-LETTER",
        "SCHEDULED",
        "DEFERRED",
        "TRANSFER-DL",
        "BYTES",
    ]);
    print_table(&header, &rows);
}

/// An empty message object to fill.
pub fn message_object() -> serde_json::Map<String, Json> {
    serde_json::Map::new()
}

/// Puts `value` under `name` unless it is null.
pub fn put(object: &mut serde_json::Map<String, Json>, name: &str, value: Json) {
    if !value.is_null() {
        object.insert(name.to_string(), value);
    }
}

/// `{"resubmitted": n, …}` and the like as one line of text.
pub fn summary_line(value: &Json) -> String {
    match value {
        Json::Object(map) => map
            .iter()
            .map(|(key, value)| format!("{key}: {}", json!(value)))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let text = table(
            &["PATH", "ACTIVE"],
            &[
                vec!["orders".to_string(), "12".to_string()],
                vec!["q".to_string(), "3".to_string()],
            ],
        );
        assert_eq!(text, "PATH    ACTIVE\norders  12\nq       3\n");
    }

    #[test]
    fn binary_bodies_are_base64() {
        let mut object = message_object();
        body_fields(&mut object, &[0xff, 0x00]);
        assert_eq!(object.get("body_base64"), Some(&json!("/wA=")));
        let mut object = message_object();
        body_fields(&mut object, b"hi");
        assert_eq!(object.get("body"), Some(&json!("hi")));
    }
}
