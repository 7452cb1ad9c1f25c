//! The emulator's `Config.json` as text: comments and trailing commas removed, and where
//! each path lies in the file (for errors that name the line).

use super::*;

pub(super) fn parse_error(origin: &str, line: usize, message: impl Into<String>) -> ConfigError {
    ConfigError::Parse {
        origin: origin.to_string(),
        line: Some(line.max(1)),
        message: message.into(),
    }
}

/// The first character outside blanks, `#` / `//` line comments and `/* */` comments.
pub(super) fn first_significant_character(text: &str) -> Option<char> {
    let mut rest = text.trim_start_matches('\u{feff}');
    loop {
        rest = rest.trim_start();
        if rest.starts_with('#') || rest.starts_with("//") {
            rest = rest.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, after)| after);
        } else {
            return rest.chars().next();
        }
    }
}

/// Replaces comments, trailing commas and a byte-order mark with spaces (line breaks are
/// kept), leaving string contents untouched. Errs with the line of an unclosed comment.
pub(super) fn strip_comments_and_trailing_commas(text: &str) -> Result<String, (usize, String)> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    let mut line = 1;
    if text.starts_with('\u{feff}') {
        out.extend_from_slice(b"   ");
        index = 3;
    }
    while index < bytes.len() {
        let byte = bytes[index];
        match byte {
            b'"' => {
                let end = string_end(bytes, index);
                out.extend_from_slice(&bytes[index..end]);
                line += bytes[index..end].iter().filter(|b| **b == b'\n').count();
                index = end;
                continue;
            }
            b'/' if bytes.get(index + 1) == Some(&b'/') => {
                while index < bytes.len() && bytes[index] != b'\n' {
                    out.push(b' ');
                    index += 1;
                }
                continue;
            }
            b'/' if bytes.get(index + 1) == Some(&b'*') => {
                let start_line = line;
                out.extend_from_slice(b"  ");
                index += 2;
                loop {
                    match bytes.get(index) {
                        None => return Err((start_line, "comment \"/*\" is never closed".into())),
                        Some(b'*') if bytes.get(index + 1) == Some(&b'/') => {
                            out.extend_from_slice(b"  ");
                            index += 2;
                            break;
                        }
                        Some(b'\n') => {
                            out.push(b'\n');
                            line += 1;
                            index += 1;
                        }
                        Some(_) => {
                            out.push(b' ');
                            index += 1;
                        }
                    }
                }
                continue;
            }
            b'\n' => line += 1,
            _ => {}
        }
        out.push(byte);
        index += 1;
    }
    // Comments are blanks now, so a trailing comma is one followed by blanks and a closer.
    let mut index = 0;
    while index < out.len() {
        match out[index] {
            b'"' => {
                index = string_end(&out, index);
                continue;
            }
            b',' => {
                let next = out[index + 1..]
                    .iter()
                    .find(|byte| !byte.is_ascii_whitespace());
                if matches!(next, Some(b'}' | b']')) {
                    out[index] = b' ';
                }
            }
            _ => {}
        }
        index += 1;
    }
    // Only ASCII bytes were replaced by ASCII bytes, so the text is still UTF-8.
    String::from_utf8(out).map_err(|_| (1, "the file is not UTF-8".to_string()))
}

/// The index just past the string literal starting at `start` (a `"`), or the end of input.
pub(super) fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut index = start + 1;
    while index < bytes.len() {
        match bytes[index] {
            b'\\' => index += 2,
            b'"' => return index + 1,
            _ => index += 1,
        }
    }
    bytes.len()
}

/// Records the line of every member and element of already-valid JSON, by path.
pub(super) struct Locator<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) index: usize,
    pub(super) line: usize,
    pub(super) lines: HashMap<String, usize>,
}

impl Locator<'_> {
    /// Path → line for `text`, which `serde_json` has accepted; errs on a duplicate key.
    pub(super) fn lines(text: &str) -> Result<HashMap<String, usize>, (usize, String)> {
        let mut locator = Locator {
            bytes: text.as_bytes(),
            index: 0,
            line: 1,
            lines: HashMap::new(),
        };
        locator.value("")?;
        Ok(locator.lines)
    }

    pub(super) fn skip_blanks(&mut self) {
        while let Some(byte) = self.bytes.get(self.index) {
            if !byte.is_ascii_whitespace() {
                break;
            }
            if *byte == b'\n' {
                self.line += 1;
            }
            self.index += 1;
        }
    }

    pub(super) fn value(&mut self, path: &str) -> Result<(), (usize, String)> {
        self.skip_blanks();
        match self.bytes.get(self.index) {
            Some(b'{') => self.object(path),
            Some(b'[') => self.array(path),
            Some(b'"') => {
                self.string();
                Ok(())
            }
            _ => {
                while let Some(byte) = self.bytes.get(self.index) {
                    if matches!(byte, b',' | b'}' | b']') || byte.is_ascii_whitespace() {
                        break;
                    }
                    self.index += 1;
                }
                Ok(())
            }
        }
    }

    /// Reads a string literal and returns its decoded text.
    pub(super) fn string(&mut self) -> String {
        let start = self.index;
        let end = string_end(self.bytes, start);
        self.index = end;
        let raw = String::from_utf8_lossy(&self.bytes[start..end]);
        serde_json::from_str::<String>(&raw).unwrap_or_else(|_| raw.trim_matches('"').to_string())
    }

    pub(super) fn object(&mut self, path: &str) -> Result<(), (usize, String)> {
        self.index += 1;
        loop {
            self.skip_blanks();
            match self.bytes.get(self.index) {
                Some(b'"') => {}
                Some(b',') => {
                    self.index += 1;
                    continue;
                }
                _ => {
                    self.index += 1;
                    return Ok(());
                }
            }
            let line = self.line;
            let key = self.string();
            let member = join(path, &key);
            if let Some(first) = self.lines.insert(member.clone(), line) {
                return Err((
                    line,
                    format!("{member}: key {key:?} appears twice (also on line {first})"),
                ));
            }
            self.skip_blanks();
            self.index += 1; // the ':'
            self.value(&member)?;
        }
    }

    pub(super) fn array(&mut self, path: &str) -> Result<(), (usize, String)> {
        self.index += 1;
        let mut position = 0;
        loop {
            self.skip_blanks();
            match self.bytes.get(self.index) {
                Some(b',') => {
                    self.index += 1;
                    position += 1;
                }
                Some(b']') | None => {
                    self.index += 1;
                    return Ok(());
                }
                Some(_) => {
                    let element = format!("{path}[{position}]");
                    self.lines.insert(element.clone(), self.line);
                    self.value(&element)?;
                }
            }
        }
    }
}

/// `path.key`, or `key` at the root.
pub(super) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The path one level up (`a.b[2]` → `a.b` → `a` → ``), `None` at the root.
pub(super) fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    if path.ends_with(']')
        && let Some(open) = path.rfind('[')
    {
        return Some(&path[..open]);
    }
    Some(path.rsplit_once('.').map_or("", |(parent, _)| parent))
}

/// A JSON value's kind, for "must be X, not Y" messages.
pub(super) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
