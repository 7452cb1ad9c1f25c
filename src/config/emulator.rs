//! The official Azure Service Bus emulator's `Config.json`, read as is: converted into the
//! equivalent ferrobus TOML text, which then goes through the ordinary TOML loader.
//!
//! The pipeline is: strip `//` and `/* */` comments and trailing commas (outside strings,
//! keeping every line break so line numbers stay true) → `serde_json::Value` → a small pass
//! that records the line of every JSON path → a strict walk of the emulator's schema that
//! fills in the emulator's defaults → TOML text. Keys match case-insensitively, as the .NET
//! configuration binder the emulator uses does; unknown keys are errors.
//!
//! Every error is a [`ConfigError::Parse`] naming the file, the line, and the JSON path of
//! the field, e.g. `Config.json:31: UserConfig.Namespaces[0].Topics[0].Subscriptions[0]
//! .Rules[1].Properties.FilterType: "SqlFilter" is not a filter type …`.
//!
//! This module owns the JSON format only. Names, ranges, forward targets and SQL are checked
//! by the TOML stage on the converted text, so both formats obey exactly the same rules.
//! `docs/emulator-config.md` maps every key.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::duration::parse_duration;
use super::{Config, ConfigError};

mod json;
mod output;

use json::*;
use output::*;

/// `MaxDeliveryCount` of a queue or subscription that leaves it out (the emulator's
/// `Config-schema.json` default; Azure's own default is 10).
pub const EMULATOR_MAX_DELIVERY_COUNT: u32 = 3;
/// `LockDuration` of a queue or subscription that leaves it out.
pub const EMULATOR_LOCK_DURATION: &str = "PT1M";
/// `DefaultMessageTimeToLive` of an entity that leaves it out (also the emulator's maximum).
pub const EMULATOR_DEFAULT_MESSAGE_TIME_TO_LIVE: &str = "PT1H";
/// `DuplicateDetectionHistoryTimeWindow` of a queue or topic that leaves it out.
pub const EMULATOR_DUPLICATE_DETECTION_WINDOW: &str = "PT20S";

/// .NET `TimeSpan.MaxValue` (`P10675199DT2H48M5.4775807S`), which Service Bus reads as "no
/// limit".
const TIMESPAN_MAX: Duration = Duration::new(922_337_203_685, 477_580_700);

/// Whether the file at `path` is an emulator `Config.json` rather than TOML: its name ends
/// in `.json` (any case), or its first character that is not blank or inside a comment is
/// `{` (which no TOML file starts with).
pub fn is_emulator_json(path: &Path, text: &str) -> bool {
    let by_extension = path
        .extension()
        .and_then(|extension| extension.to_str())
        .is_some_and(|extension| extension.eq_ignore_ascii_case("json"));
    by_extension || first_significant_character(text) == Some('{')
}

/// Reads the emulator `Config.json` at `path` and returns the equivalent TOML text, after
/// checking that the TOML loads (what `ferrobus config convert` prints).
pub fn convert_file(path: &Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let origin = path.display().to_string();
    let toml_text = to_toml(&text, &origin)?;
    load_converted(&toml_text, &origin)?;
    Ok(toml_text)
}

/// Converts the text of an emulator `Config.json` into equivalent ferrobus TOML. `origin`
/// (a path or label) prefixes errors and is noted in the TOML's header comment.
pub fn to_toml(json: &str, origin: &str) -> Result<String, ConfigError> {
    let cleaned = strip_comments_and_trailing_commas(json)
        .map_err(|(line, message)| parse_error(origin, line, message))?;
    let root: Value = serde_json::from_str(&cleaned).map_err(|error| {
        let text = error.to_string();
        let reason = text
            .rsplit_once(" at line ")
            .map_or(text.as_str(), |(reason, _)| reason);
        parse_error(
            origin,
            error.line(),
            format!("not valid JSON: {reason} (column {})", error.column()),
        )
    })?;
    let lines =
        Locator::lines(&cleaned).map_err(|(line, message)| parse_error(origin, line, message))?;
    let reader = Reader { origin, lines };
    let document = reader.document(&root)?;
    Ok(document.render(origin))
}

/// Loads TOML converted from `origin`; errors of that stage still name `origin`.
pub(super) fn load_converted(toml_text: &str, origin: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(toml_text, &format!("{origin} converted to TOML")).map_err(|error| {
        match error {
            ConfigError::Invalid { message } => ConfigError::Invalid {
                message: format!("{origin}: {message}"),
            },
            other => other,
        }
    })
}

/// Walks the parsed file; knows the origin and the line of every path for its errors.
struct Reader<'a> {
    origin: &'a str,
    lines: HashMap<String, usize>,
}

/// The members of one JSON object, matched to the keys its schema allows.
struct Members<'v> {
    path: String,
    /// (schema key, member path, value); nulls are left out, as if absent.
    found: Vec<(&'static str, String, &'v Value)>,
}

impl<'v> Members<'v> {
    /// The member for schema key `key`, with its path.
    fn get(&self, key: &str) -> Option<(&str, &'v Value)> {
        self.found
            .iter()
            .find(|(name, _, _)| *name == key)
            .map(|(_, path, value)| (path.as_str(), *value))
    }

    /// The path an absent `key` would have (for "is required" errors).
    fn path_of(&self, key: &str) -> String {
        join(&self.path, key)
    }
}

/// A duration setting's value.
enum DurationValue {
    /// ISO-8601 text ferrobus parses to the same duration.
    Text(String),
    /// `TimeSpan.MaxValue`: no limit.
    Unlimited,
}

impl Reader<'_> {
    fn error(&self, path: &str, reason: impl fmt::Display) -> ConfigError {
        parse_error(self.origin, self.line(path), format!("{path}: {reason}"))
    }

    /// The line of `path`, or of its nearest ancestor present in the file.
    fn line(&self, path: &str) -> usize {
        let mut current = Some(path);
        while let Some(candidate) = current {
            if let Some(line) = self.lines.get(candidate) {
                return *line;
            }
            current = parent(candidate);
        }
        1
    }

    /// Matches the members of the object at `path` to `known` keys, case-insensitively.
    fn members<'v>(
        &self,
        value: &'v Value,
        path: &str,
        known: &[&'static str],
    ) -> Result<Members<'v>, ConfigError> {
        let Value::Object(map) = value else {
            return Err(self.error(path, format!("must be an object, not {}", kind(value))));
        };
        let mut found: Vec<(&'static str, String, &'v Value)> = Vec::new();
        for (key, member) in map {
            let member_path = join(path, key);
            let Some(name) = known.iter().find(|name| name.eq_ignore_ascii_case(key)) else {
                let expected = known.join(", ");
                return Err(self.error(
                    &member_path,
                    format!("unknown key {key:?} (expected one of: {expected})"),
                ));
            };
            if let Some((_, other, _)) = found.iter().find(|(seen, _, _)| seen == name) {
                return Err(self.error(
                    &member_path,
                    format!("{name} is set twice (also as {other})"),
                ));
            }
            if !member.is_null() {
                found.push((name, member_path, member));
            }
        }
        Ok(Members {
            path: path.to_string(),
            found,
        })
    }

    /// The elements of the optional array `key` of `members` (absent or null: none).
    fn array<'v>(
        &self,
        members: &Members<'v>,
        key: &str,
    ) -> Result<Vec<(String, &'v Value)>, ConfigError> {
        match members.get(key) {
            None => Ok(Vec::new()),
            Some((path, Value::Array(elements))) => Ok(elements
                .iter()
                .enumerate()
                .map(|(index, element)| (format!("{path}[{index}]"), element))
                .collect()),
            Some((path, other)) => {
                Err(self.error(path, format!("must be an array, not {}", kind(other))))
            }
        }
    }

    fn string(&self, path: &str, value: &Value) -> Result<String, ConfigError> {
        match value {
            Value::String(text) => Ok(text.clone()),
            other => Err(self.error(path, format!("must be a string, not {}", kind(other)))),
        }
    }

    /// The required, non-empty `Name` of an entity or rule.
    fn name(&self, members: &Members) -> Result<String, ConfigError> {
        let Some((path, value)) = members.get("Name") else {
            return Err(self.error(&members.path_of("Name"), "Name is required"));
        };
        let name = self.string(path, value)?;
        if name.trim().is_empty() {
            return Err(self.error(path, "Name must not be empty"));
        }
        Ok(name)
    }

    /// `true` / `false`, or those words as a string (the .NET binder accepts both).
    fn boolean(&self, path: &str, value: &Value) -> Result<bool, ConfigError> {
        match value {
            Value::Bool(flag) => Ok(*flag),
            Value::String(text) if text.trim().eq_ignore_ascii_case("true") => Ok(true),
            Value::String(text) if text.trim().eq_ignore_ascii_case("false") => Ok(false),
            other => Err(self.error(
                path,
                format!("must be true or false, not {}", describe(other)),
            )),
        }
    }

    /// A delivery count: a whole number from 1, or such a number as a string.
    fn count(&self, path: &str, value: &Value) -> Result<u32, ConfigError> {
        let number = match value {
            Value::Number(number) => number.as_u64(),
            Value::String(text) => text.trim().parse::<u64>().ok(),
            _ => None,
        };
        number
            .and_then(|number| u32::try_from(number).ok())
            .filter(|number| *number >= 1)
            .ok_or_else(|| {
                self.error(
                    path,
                    format!(
                        "must be a whole number from 1 to {}, not {}",
                        u32::MAX,
                        describe(value)
                    ),
                )
            })
    }

    /// An ISO-8601 duration such as `PT1M`, `PT0.5S`, `P1DT2H`.
    fn duration(&self, path: &str, value: &Value) -> Result<DurationValue, ConfigError> {
        let text = self.string(path, value)?;
        let trimmed = text.trim();
        let expected = "expected an ISO-8601 duration such as \"PT1M\", \"PT0.5S\" or \"P1D\"";
        if !trimmed.starts_with(['P', 'p']) {
            return Err(self.error(path, format!("{text:?} is not a duration ({expected})")));
        }
        match parse_duration(trimmed) {
            Ok(duration) if duration >= TIMESPAN_MAX => Ok(DurationValue::Unlimited),
            Ok(_) => Ok(DurationValue::Text(trimmed.to_string())),
            Err(reason) => Err(self.error(path, format!("{reason} ({expected})"))),
        }
    }

    fn document(&self, root: &Value) -> Result<Document, ConfigError> {
        let top = self.members(root, "", &["UserConfig", "$schema"])?;
        let Some((user_path, user_config)) = top.get("UserConfig") else {
            return Err(self.error("", "the file has no \"UserConfig\" object"));
        };
        let user = self.members(user_config, user_path, &["Namespaces", "Logging"])?;
        let namespaces = self.array(&user, "Namespaces")?;
        let (namespace_path, namespace) = match namespaces.as_slice() {
            [only] => only,
            [] => {
                return Err(self.error(
                    &user.path_of("Namespaces"),
                    "exactly one namespace is required, and there is none",
                ));
            }
            [_, (second, _), ..] => {
                return Err(self.error(
                    second,
                    format!(
                        "exactly one namespace is supported (ferrobus serves one), but there are {}; merge their Queues and Topics into one",
                        namespaces.len()
                    ),
                ));
            }
        };
        let namespace = self.members(namespace, namespace_path, &["Name", "Queues", "Topics"])?;
        let namespace_name = match namespace.get("Name") {
            Some((path, value)) => Some(self.string(path, value)?),
            None => None,
        };
        let queues = self
            .array(&namespace, "Queues")?
            .into_iter()
            .map(|(path, queue)| self.queue(&path, queue))
            .collect::<Result<_, _>>()?;
        let topics = self
            .array(&namespace, "Topics")?
            .into_iter()
            .map(|(path, topic)| self.topic(&path, topic))
            .collect::<Result<_, _>>()?;
        Ok(Document {
            namespace: namespace_name,
            queues,
            topics,
        })
    }

    /// An entity's `Name` and its `Properties` converted by `schema`.
    fn entity(
        &self,
        path: &str,
        members: &Members,
        schema: &[Property],
    ) -> Result<Entity, ConfigError> {
        let name = self.name(members)?;
        let properties = match members.get("Properties") {
            Some((path, value)) => Some(self.members(value, path, &property_keys(schema))?),
            None => None,
        };
        let mut settings = Vec::new();
        for property in schema {
            let given = properties
                .as_ref()
                .and_then(|members| members.get(property.json));
            settings.push(self.setting(property, given)?);
        }
        Ok(Entity {
            source: path.to_string(),
            name,
            settings,
        })
    }

    fn setting(
        &self,
        property: &Property,
        given: Option<(&str, &Value)>,
    ) -> Result<Setting, ConfigError> {
        let value = match (property.kind, given) {
            (Kind::Flag(default), None) => SettingValue::Default(default.to_string()),
            (Kind::Flag(_), Some((path, value))) => {
                SettingValue::Given(self.boolean(path, value)?.to_string())
            }
            (Kind::DeliveryCount(default), None) => SettingValue::Default(default.to_string()),
            (Kind::DeliveryCount(_), Some((path, value))) => {
                SettingValue::Given(self.count(path, value)?.to_string())
            }
            (Kind::Duration(default), None) => SettingValue::Default(toml_string(default)),
            (Kind::Duration(_), Some((path, value))) => match self.duration(path, value)? {
                DurationValue::Text(text) => SettingValue::Given(toml_string(&text)),
                DurationValue::Unlimited => SettingValue::Unlimited,
            },
            (Kind::Target, None) => SettingValue::None,
            (Kind::Target, Some((path, value))) => {
                let target = self.string(path, value)?;
                if target.trim().is_empty() {
                    SettingValue::None
                } else {
                    SettingValue::Given(toml_string(target.trim()))
                }
            }
        };
        Ok(Setting {
            key: property.toml,
            value,
        })
    }

    fn queue(&self, path: &str, value: &Value) -> Result<Entity, ConfigError> {
        let members = self.members(value, path, &["Name", "Properties"])?;
        self.entity(path, &members, QUEUE_PROPERTIES)
    }

    fn topic(&self, path: &str, value: &Value) -> Result<Topic, ConfigError> {
        let members = self.members(value, path, &["Name", "Properties", "Subscriptions"])?;
        let entity = self.entity(path, &members, TOPIC_PROPERTIES)?;
        let subscriptions = self
            .array(&members, "Subscriptions")?
            .into_iter()
            .map(|(path, subscription)| self.subscription(&path, subscription))
            .collect::<Result<_, _>>()?;
        Ok(Topic {
            entity,
            subscriptions,
        })
    }

    fn subscription(&self, path: &str, value: &Value) -> Result<Subscription, ConfigError> {
        let members = self.members(value, path, &["Name", "Properties", "Rules"])?;
        let entity = self.entity(path, &members, SUBSCRIPTION_PROPERTIES)?;
        let rules = self
            .array(&members, "Rules")?
            .into_iter()
            .map(|(path, rule)| self.rule(&path, rule))
            .collect::<Result<_, _>>()?;
        Ok(Subscription { entity, rules })
    }

    fn rule(&self, path: &str, value: &Value) -> Result<Rule, ConfigError> {
        let members = self.members(value, path, &["Name", "Properties"])?;
        let name = self.name(&members)?;
        let Some((properties_path, properties)) = members.get("Properties") else {
            return Err(self.error(
                &members.path_of("Properties"),
                "a rule needs Properties with a FilterType (\"Sql\" or \"Correlation\")",
            ));
        };
        let properties = self.members(
            properties,
            properties_path,
            &["FilterType", "CorrelationFilter", "SqlFilter", "Action"],
        )?;
        let Some((type_path, filter_type)) = properties.get("FilterType") else {
            return Err(self.error(
                &properties.path_of("FilterType"),
                "FilterType is required: \"Sql\" (with SqlFilter) or \"Correlation\" (with CorrelationFilter)",
            ));
        };
        let filter_type = self.string(type_path, filter_type)?;
        let sql = properties.get("SqlFilter");
        let correlation = properties.get("CorrelationFilter");
        let filter = match filter_type.trim().to_ascii_lowercase().as_str() {
            "sql" => {
                if let Some((path, _)) = correlation {
                    return Err(self.error(
                        path,
                        "CorrelationFilter is set but FilterType is \"Sql\"; remove one of them",
                    ));
                }
                let Some((sql_path, sql)) = sql else {
                    return Err(self.error(
                        &properties.path_of("SqlFilter"),
                        "FilterType \"Sql\" needs SqlFilter: { \"SqlExpression\": \"...\" }",
                    ));
                };
                match self.expression(sql_path, sql)? {
                    Some(expression) => Filter::Sql(expression),
                    None => {
                        return Err(self.error(
                            &join(sql_path, "SqlExpression"),
                            "SqlExpression is required and must not be empty",
                        ));
                    }
                }
            }
            "correlation" => {
                if let Some((path, _)) = sql {
                    return Err(self.error(
                        path,
                        "SqlFilter is set but FilterType is \"Correlation\"; remove one of them",
                    ));
                }
                let Some((correlation_path, correlation)) = correlation else {
                    return Err(self.error(
                        &properties.path_of("CorrelationFilter"),
                        "FilterType \"Correlation\" needs CorrelationFilter with at least one field",
                    ));
                };
                self.correlation(correlation_path, correlation)?
            }
            _ => {
                let suggestion = if filter_type.to_ascii_lowercase().contains("corr") {
                    "Correlation"
                } else {
                    "Sql"
                };
                return Err(self.error(
                    type_path,
                    format!(
                        "{filter_type:?} is not a filter type: the valid values are \"Correlation\" and \"Sql\"; did you mean \"{suggestion}\"? (the official emulator silently drops such a rule)"
                    ),
                ));
            }
        };
        let action = match properties.get("Action") {
            Some((path, action)) => self.expression(path, action)?,
            None => None,
        };
        Ok(Rule {
            source: path.to_string(),
            name,
            filter,
            action,
        })
    }

    /// The `SqlExpression` of a `SqlFilter` or `Action` object; `None` if absent or blank.
    fn expression(&self, path: &str, value: &Value) -> Result<Option<String>, ConfigError> {
        let members = self.members(value, path, &["SqlExpression"])?;
        match members.get("SqlExpression") {
            None => Ok(None),
            Some((path, value)) => {
                let text = self.string(path, value)?;
                Ok((!text.trim().is_empty()).then_some(text))
            }
        }
    }

    fn correlation(&self, path: &str, value: &Value) -> Result<Filter, ConfigError> {
        let keys: Vec<&'static str> = CORRELATION_FIELDS
            .iter()
            .map(|(json, _)| *json)
            .chain(["Properties"])
            .collect();
        let members = self.members(value, path, &keys)?;
        let mut fields = Vec::new();
        for (json, toml) in CORRELATION_FIELDS {
            if let Some((path, value)) = members.get(json) {
                let text = self.string(path, value)?;
                if !text.is_empty() {
                    fields.push((*toml, text));
                }
            }
        }
        let mut properties = Vec::new();
        if let Some((properties_path, value)) = members.get("Properties") {
            let Value::Object(map) = value else {
                return Err(self.error(
                    properties_path,
                    format!(
                        "must be an object of property names to values, not {}",
                        kind(value)
                    ),
                ));
            };
            for (name, value) in map {
                let property_path = join(properties_path, name);
                let literal = match value {
                    Value::String(text) => toml_string(text),
                    Value::Bool(flag) => flag.to_string(),
                    Value::Number(number) => match (number.as_i64(), number.as_f64()) {
                        (Some(integer), _) => integer.to_string(),
                        (None, Some(float)) => format!("{float:?}"),
                        (None, None) => number.to_string(),
                    },
                    other => {
                        return Err(self.error(
                            &property_path,
                            format!("must be a string, number or boolean, not {}", kind(other)),
                        ));
                    }
                };
                properties.push((name.clone(), literal));
            }
        }
        if fields.is_empty() && properties.is_empty() {
            return Err(self.error(
                path,
                format!(
                    "CorrelationFilter sets nothing; set at least one of {}",
                    keys.join(", ")
                ),
            ));
        }
        Ok(Filter::Correlation { fields, properties })
    }
}

/// A value as quoted in messages: strings in quotes, other values as JSON.
fn describe(value: &Value) -> String {
    match value {
        Value::Array(_) | Value::Object(_) => kind(value).to_string(),
        other => other.to_string(),
    }
}

/// How a `Properties` member is read and defaulted.
#[derive(Clone, Copy)]
enum Kind {
    /// A boolean; the default.
    Flag(bool),
    /// `MaxDeliveryCount`; the default.
    DeliveryCount(u32),
    /// An ISO-8601 duration; the default text. `TimeSpan.MaxValue` means unlimited.
    Duration(&'static str),
    /// A queue or topic name; empty means none, and so does absent.
    Target,
}

/// One emulator property and the TOML key it becomes.
struct Property {
    json: &'static str,
    toml: &'static str,
    kind: Kind,
}

const fn property(json: &'static str, toml: &'static str, kind: Kind) -> Property {
    Property { json, toml, kind }
}

/// A queue's `Properties`, in the order the TOML lists them.
const QUEUE_PROPERTIES: &[Property] = &[
    property(
        "LockDuration",
        "lock_duration",
        Kind::Duration(EMULATOR_LOCK_DURATION),
    ),
    property(
        "MaxDeliveryCount",
        "max_delivery_count",
        Kind::DeliveryCount(EMULATOR_MAX_DELIVERY_COUNT),
    ),
    property(
        "DefaultMessageTimeToLive",
        "default_message_time_to_live",
        Kind::Duration(EMULATOR_DEFAULT_MESSAGE_TIME_TO_LIVE),
    ),
    property(
        "DeadLetteringOnMessageExpiration",
        "dead_lettering_on_message_expiration",
        Kind::Flag(false),
    ),
    property("RequiresSession", "requires_session", Kind::Flag(false)),
    property(
        "RequiresDuplicateDetection",
        "requires_duplicate_detection",
        Kind::Flag(false),
    ),
    property(
        "DuplicateDetectionHistoryTimeWindow",
        "duplicate_detection_history_time_window",
        Kind::Duration(EMULATOR_DUPLICATE_DETECTION_WINDOW),
    ),
    property("ForwardTo", "forward_to", Kind::Target),
    property(
        "ForwardDeadLetteredMessagesTo",
        "forward_dead_lettered_messages_to",
        Kind::Target,
    ),
];

/// A topic's `Properties`.
const TOPIC_PROPERTIES: &[Property] = &[
    property(
        "DefaultMessageTimeToLive",
        "default_message_time_to_live",
        Kind::Duration(EMULATOR_DEFAULT_MESSAGE_TIME_TO_LIVE),
    ),
    property(
        "RequiresDuplicateDetection",
        "requires_duplicate_detection",
        Kind::Flag(false),
    ),
    property(
        "DuplicateDetectionHistoryTimeWindow",
        "duplicate_detection_history_time_window",
        Kind::Duration(EMULATOR_DUPLICATE_DETECTION_WINDOW),
    ),
];

/// A subscription's `Properties`.
const SUBSCRIPTION_PROPERTIES: &[Property] = &[
    property(
        "LockDuration",
        "lock_duration",
        Kind::Duration(EMULATOR_LOCK_DURATION),
    ),
    property(
        "MaxDeliveryCount",
        "max_delivery_count",
        Kind::DeliveryCount(EMULATOR_MAX_DELIVERY_COUNT),
    ),
    property(
        "DefaultMessageTimeToLive",
        "default_message_time_to_live",
        Kind::Duration(EMULATOR_DEFAULT_MESSAGE_TIME_TO_LIVE),
    ),
    property(
        "DeadLetteringOnMessageExpiration",
        "dead_lettering_on_message_expiration",
        Kind::Flag(false),
    ),
    property("RequiresSession", "requires_session", Kind::Flag(false)),
    property("ForwardTo", "forward_to", Kind::Target),
    property(
        "ForwardDeadLetteredMessagesTo",
        "forward_dead_lettered_messages_to",
        Kind::Target,
    ),
];

/// `CorrelationFilter` fields and their `correlation_filter` keys (`Label` is `subject`).
const CORRELATION_FIELDS: &[(&str, &str)] = &[
    ("CorrelationId", "correlation_id"),
    ("MessageId", "message_id"),
    ("To", "to"),
    ("ReplyTo", "reply_to"),
    ("Label", "subject"),
    ("SessionId", "session_id"),
    ("ReplyToSessionId", "reply_to_session_id"),
    ("ContentType", "content_type"),
];

fn property_keys(schema: &[Property]) -> Vec<&'static str> {
    schema.iter().map(|property| property.json).collect()
}

#[cfg(test)]
#[path = "emulator_tests.rs"]
mod tests;
