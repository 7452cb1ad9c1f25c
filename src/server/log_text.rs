//! Client-controlled text in log lines (issue 10, item 14): link names, addresses,
//! container ids and the like are escaped — a newline cannot forge a log line, an escape
//! sequence cannot drive a terminal — and truncated, so a 1 MB name writes a short line.

use std::fmt;

/// Characters of client text a log line shows at most.
const MAX_SHOWN: usize = 200;

/// Displays client text escaped and truncated.
pub struct LogText<'a>(pub &'a str);

impl fmt::Display for LogText<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (shown, character) in self.0.chars().enumerate() {
            if shown == MAX_SHOWN {
                return write!(formatter, "…({} bytes)", self.0.len());
            }
            if character.is_control() {
                write!(formatter, "{}", character.escape_default())?;
            } else {
                write!(formatter, "{character}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for LogText<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "\"{self}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::LogText;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            LogText("a\nFORGED line\r\x1b[31m").to_string(),
            "a\\nFORGED line\\r\\u{1b}[31m"
        );
    }

    #[test]
    fn long_text_is_truncated_with_its_size() {
        let long = "x".repeat(1_000_000);
        let shown = LogText(&long).to_string();
        assert!(shown.len() < 300, "{}", shown.len());
        assert!(shown.ends_with("…(1000000 bytes)"));
    }
}
