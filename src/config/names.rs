//! Service Bus naming rules for queues, topics, subscriptions and rules.
//!
//! Each check returns a reason (without the entity path; the caller adds that). Names are
//! compared case-insensitively elsewhere; this module only judges a single name's shape.
//! Letters and digits are ASCII only.

/// Longest queue or topic name Service Bus accepts.
pub const MAX_ENTITY_NAME_LENGTH: usize = 260;
/// Longest subscription or rule name Service Bus accepts.
pub const MAX_SUBSCRIPTION_NAME_LENGTH: usize = 50;
/// The rule every subscription gets when none is configured; a rule may also be named so.
pub const DEFAULT_RULE_NAME: &str = "$Default";

/// Checks a queue or topic name: 1–260 characters from letters, digits, `.`, `-`, `_`, `/`;
/// starts and ends with a letter or digit; no empty path segment; no `.` or `..` segment
/// (a client that normalises URLs, as curl and browsers do, would address another entity:
/// `a/../b` is `b` to them, and a token scoped to `a` would create it); no `subscriptions`
/// segment (it would be ambiguous with `topic/Subscriptions/name` addresses).
pub fn check_entity_name(name: &str) -> Result<(), String> {
    check_shape(
        name,
        MAX_ENTITY_NAME_LENGTH,
        "letters, digits, '.', '-', '_' and '/'",
        |character| is_plain_name_character(character) || character == '/',
    )?;
    if name.contains("//") {
        return Err(format!(
            "name {name:?} contains an empty path segment ('//')"
        ));
    }
    if let Some(segment) = name
        .split('/')
        .find(|segment| matches!(*segment, "." | ".."))
    {
        return Err(format!(
            "name {name:?} has a path segment {segment:?}; '.' and '..' segments are not allowed (a client that normalises the path would address another entity)"
        ));
    }
    if name
        .split('/')
        .any(|segment| segment.eq_ignore_ascii_case("subscriptions"))
    {
        return Err(format!(
            "name {name:?} has a path segment \"subscriptions\", which is reserved for subscription addresses"
        ));
    }
    Ok(())
}

/// Checks a subscription name: 1–50 characters from letters, digits, `.`, `-`, `_`;
/// starts and ends with a letter or digit.
pub fn check_subscription_name(name: &str) -> Result<(), String> {
    check_shape(
        name,
        MAX_SUBSCRIPTION_NAME_LENGTH,
        "letters, digits, '.', '-' and '_'",
        is_plain_name_character,
    )
}

/// Checks a rule name: as for subscriptions, except that the reserved name `$Default` is
/// allowed (so a configuration may give the default rule its own filter).
pub fn check_rule_name(name: &str) -> Result<(), String> {
    if name == DEFAULT_RULE_NAME {
        return Ok(());
    }
    check_subscription_name(name)
}

fn is_plain_name_character(character: char) -> bool {
    character.is_ascii_alphanumeric() || matches!(character, '.' | '-' | '_')
}

fn check_shape(
    name: &str,
    max_length: usize,
    allowed_description: &str,
    is_allowed: impl Fn(char) -> bool,
) -> Result<(), String> {
    let length = name.chars().count();
    if length == 0 {
        return Err("name is empty".to_string());
    }
    if length > max_length {
        return Err(format!(
            "name {name:?} is {length} characters long; the limit is {max_length}"
        ));
    }
    if let Some(character) = name.chars().find(|character| !is_allowed(*character)) {
        return Err(format!(
            "name {name:?} contains {character:?}; allowed are {allowed_description}"
        ));
    }
    let starts_well = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let ends_well = name
        .chars()
        .last()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    if !starts_well || !ends_well {
        return Err(format!(
            "name {name:?} must start and end with a letter or digit"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_names_follow_service_bus_rules() {
        for name in ["orders", "queue.1", "a", "Sales/EU/orders", "x_y-z.9"] {
            assert_eq!(check_entity_name(name), Ok(()), "{name}");
        }
        assert_eq!(check_entity_name(&"a".repeat(260)), Ok(()));
    }

    #[test]
    fn bad_entity_names_are_rejected_with_a_reason() {
        let cases = [
            ("", "empty"),
            ("$orders", "'$'"),
            ("or$ders", "'$'"),
            ("orders ", "' '"),
            ("-orders", "start and end"),
            ("orders.", "start and end"),
            ("/orders", "start and end"),
            ("orders/", "start and end"),
            ("a//b", "empty path segment"),
            ("topic/Subscriptions/sub", "reserved"),
            ("adv-q/../evil-q", "path segment \"..\""),
            ("adv-q/./evil-q", "path segment \".\""),
            ("a/../../b", "'.' and '..' segments are not allowed"),
            ("a/b/..", "start and end"),
            ("ördrs", "'ö'"),
        ];
        for (name, expected) in cases {
            let reason = check_entity_name(name).err().unwrap_or_default();
            assert!(reason.contains(expected), "{name:?}: {reason}");
        }
        let too_long = check_entity_name(&"a".repeat(261))
            .err()
            .unwrap_or_default();
        assert!(too_long.contains("limit is 260"), "{too_long}");
    }

    #[test]
    fn dots_inside_a_segment_are_still_allowed() {
        for name in ["a/.b/c", "a/b../c", "a/.../c", "a/b.c/d", "x.y"] {
            assert_eq!(check_entity_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn dot_segments_cannot_name_a_subscription_or_rule() {
        // A subscription or rule name is one segment that starts and ends with a letter
        // or digit, so `.` and `..` are already refused; the test keeps it so.
        for name in [".", ".."] {
            assert!(check_subscription_name(name).is_err(), "{name}");
            assert!(check_rule_name(name).is_err(), "{name}");
            assert!(check_entity_name(name).is_err(), "{name}");
        }
    }

    #[test]
    fn subscription_names_are_short_and_have_no_slash() {
        assert_eq!(check_subscription_name("subscription.1"), Ok(()));
        assert_eq!(check_subscription_name(&"s".repeat(50)), Ok(()));
        let too_long = check_subscription_name(&"s".repeat(51))
            .err()
            .unwrap_or_default();
        assert!(too_long.contains("limit is 50"), "{too_long}");
        let slash = check_subscription_name("a/b").err().unwrap_or_default();
        assert!(slash.contains("'/'"), "{slash}");
        assert!(check_subscription_name("$Default").is_err());
    }

    #[test]
    fn rule_names_allow_only_the_reserved_default() {
        assert_eq!(check_rule_name("$Default"), Ok(()));
        assert_eq!(check_rule_name("big-red"), Ok(()));
        assert!(check_rule_name("$Other").is_err());
        assert!(check_rule_name("a/b").is_err());
        assert!(check_rule_name("").is_err());
    }
}
