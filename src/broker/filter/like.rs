//! `LIKE` pattern matching: `%` matches any run of characters (possibly empty), `_` matches
//! exactly one character, and an optional escape character makes the character after it
//! literal (`'ABC\%' ESCAPE '\'` matches `ABC%`). Matching is case-sensitive and works on
//! Unicode scalar values.
//!
//! The pattern is interpreted in place, without compiling or allocating, using the greedy
//! "backtrack to the last `%`" algorithm (worst case O(text × pattern)).

/// A pattern whose last character is its escape character, which escapes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DanglingEscape;

/// One unit of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    /// `%`.
    AnySequence,
    /// `_`.
    AnyCharacter,
    /// A character matched exactly (possibly an escaped wildcard).
    Literal(char),
}

/// Checks that every escape character in `pattern` is followed by a character.
pub(super) fn validate_pattern(pattern: &str, escape: Option<char>) -> Result<(), DanglingEscape> {
    let mut position = 0;
    while let Some((_, next)) = next_element(pattern, position, escape)? {
        position = next;
    }
    Ok(())
}

/// Whether `text` matches `pattern`.
pub(super) fn like_matches(
    text: &str,
    pattern: &str,
    escape: Option<char>,
) -> Result<bool, DanglingEscape> {
    validate_pattern(pattern, escape)?;
    let mut text_position = 0;
    let mut pattern_position = 0;
    // After a `%`: where the pattern resumes, and where in the text it was last tried.
    let mut backtrack: Option<(usize, usize)> = None;
    loop {
        let current = text
            .get(text_position..)
            .and_then(|rest| rest.chars().next());
        let Some(character) = current else {
            return Ok(only_any_sequences_remain(pattern, pattern_position, escape));
        };
        let element = next_element(pattern, pattern_position, escape)?;
        match element {
            Some((Element::AnySequence, next)) => {
                backtrack = Some((next, text_position));
                pattern_position = next;
                continue;
            }
            Some((Element::AnyCharacter, next)) => {
                text_position += character.len_utf8();
                pattern_position = next;
                continue;
            }
            Some((Element::Literal(expected), next)) if expected == character => {
                text_position += character.len_utf8();
                pattern_position = next;
                continue;
            }
            _ => {}
        }
        // Mismatch, or pattern exhausted with text left: let the last `%` swallow one more.
        let Some((resume, tried_at)) = backtrack else {
            return Ok(false);
        };
        let skipped = text
            .get(tried_at..)
            .and_then(|rest| rest.chars().next())
            .map_or(0, char::len_utf8);
        if skipped == 0 {
            return Ok(false);
        }
        backtrack = Some((resume, tried_at + skipped));
        text_position = tried_at + skipped;
        pattern_position = resume;
    }
}

fn only_any_sequences_remain(pattern: &str, mut position: usize, escape: Option<char>) -> bool {
    while let Ok(Some((element, next))) = next_element(pattern, position, escape) {
        if element != Element::AnySequence {
            return false;
        }
        position = next;
    }
    true
}

/// Reads the element at byte `position`; `None` at the end of the pattern.
fn next_element(
    pattern: &str,
    position: usize,
    escape: Option<char>,
) -> Result<Option<(Element, usize)>, DanglingEscape> {
    let mut characters = pattern.get(position..).unwrap_or("").chars();
    let Some(first) = characters.next() else {
        return Ok(None);
    };
    let after_first = position + first.len_utf8();
    if Some(first) == escape {
        let escaped = characters.next().ok_or(DanglingEscape)?;
        return Ok(Some((
            Element::Literal(escaped),
            after_first + escaped.len_utf8(),
        )));
    }
    let element = match first {
        '%' => Element::AnySequence,
        '_' => Element::AnyCharacter,
        literal => Element::Literal(literal),
    };
    Ok(Some((element, after_first)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(text: &str, pattern: &str) -> bool {
        like_matches(text, pattern, Some('\\')).unwrap_or(false)
    }

    #[test]
    fn wildcards_match_sequences_and_single_characters() {
        assert!(matches("service bus", "%bus%"));
        assert!(matches("bus", "%bus%"));
        assert!(matches("", "%"));
        assert!(matches("", "%%"));
        assert!(!matches("", "_"));
        assert!(matches("abc", "a_c"));
        assert!(!matches("abbc", "a_c"));
        assert!(matches("abbc", "a%c"));
        assert!(matches("aXbXc", "%X%X_"));
        assert!(!matches("abc", "ab"));
        assert!(!matches("ab", "abc"));
        assert!(matches("mississippi", "m%iss%ppi"));
        assert!(!matches("mississippi", "m%iss%ppx"));
        assert!(matches("ééa", "_%a"));
        assert!(!matches("ABC", "abc"));
    }

    #[test]
    fn escape_makes_wildcards_literal() {
        assert!(matches("ABC%", "ABC\\%"));
        assert!(!matches("ABCD", "ABC\\%"));
        assert!(matches("a_b", "a\\_b"));
        assert!(!matches("axb", "a\\_b"));
        assert!(matches("a\\b", "a\\\\b"));
        assert_eq!(like_matches("a", "a\\", Some('\\')), Err(DanglingEscape));
        assert_eq!(like_matches("a%", "a!%", Some('!')), Ok(true));
        assert_eq!(like_matches("a\\x", "a\\%", None), Ok(true));
    }
}
