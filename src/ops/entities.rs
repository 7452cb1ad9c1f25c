//! Queues, topics, subscriptions and rules from the command line.
//!
//! Queues, topics and subscriptions go through the explorer's entity routes
//! (`/explorer/api/entities`, `/explorer/api/entity?path=…`), whose definitions are the
//! configuration file's TOML: a flag is a configuration key, checked by the broker exactly as
//! the file's would be. An update reads the definition, changes the keys given and writes it
//! back. Rules go through the admin (ATOM) API (`/{topic}/Subscriptions/{subscription}/Rules/
//! {rule}`), the route the SDKs' administration clients use; they are listed from the
//! subscription's detail.

use serde_json::{Value as Json, json};

use super::client::{OpsError, Target};
use super::output::{self, print_entities, print_json, print_table, text};
use super::{
    Connection, Output, QueueAction, RuleAction, RuleSettings, Settings, SubscriptionAction,
};
use crate::admin::atom::{CorrelationFilter, PropertyValue, RuleDescription, RuleFilter};

/// Queue or topic: the two kinds `ferrobus queue` and `ferrobus topic` share a grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `[[queues]]`.
    Queue,
    /// `[[topics]]`.
    Topic,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Queue => "queue",
            Kind::Topic => "topic",
        }
    }
}

/// `ferrobus queue …` / `ferrobus topic …`.
pub async fn queue_or_topic(
    kind: Kind,
    action: &QueueAction,
    connection: &Connection,
) -> Result<(), OpsError> {
    let target = Target::from_options(connection.connection_string.as_deref())?;
    let json_out = connection.output == Some(Output::Json);
    match action {
        QueueAction::List => {
            let entities = list(&target, |entity| text(entity, "/kind") == kind.name()).await?;
            show_list(&entities, json_out);
            Ok(())
        }
        QueueAction::Show { name } => show(&target, name, kind.name(), json_out).await,
        QueueAction::Create { name, settings } => {
            let table = match kind {
                Kind::Queue => "queues",
                Kind::Topic => "topics",
            };
            let mut definition =
                format!("[[{table}]]\nname = {}\n", toml::Value::from(name.as_str()));
            definition.push_str(&settings_toml(settings)?);
            create(&target, &definition, json_out).await
        }
        QueueAction::Update { name, settings } => {
            update(&target, name, kind.name(), settings, json_out).await
        }
        QueueAction::Delete { name } => delete(&target, name, kind.name(), json_out).await,
    }
}

/// `ferrobus subscription …`.
pub async fn subscription(
    action: &SubscriptionAction,
    connection: &Connection,
) -> Result<(), OpsError> {
    let target = Target::from_options(connection.connection_string.as_deref())?;
    let json_out = connection.output == Some(Output::Json);
    let path = |topic: &str, name: &str| format!("{topic}/Subscriptions/{name}");
    match action {
        SubscriptionAction::List { topic } => {
            // The topic must exist: an empty list would hide a typo.
            entity(&target, topic, "topic").await?;
            let entities = list(&target, |entity| {
                text(entity, "/kind") == "subscription"
                    && text(entity, "/topic").eq_ignore_ascii_case(topic)
            })
            .await?;
            show_list(&entities, json_out);
            Ok(())
        }
        SubscriptionAction::Show { topic, name } => {
            show(&target, &path(topic, name), "subscription", json_out).await
        }
        SubscriptionAction::Create {
            topic,
            name,
            settings,
        } => {
            // The explorer would create a missing topic along with it; the CLI does not.
            entity(&target, topic, "topic").await?;
            let mut definition = format!(
                "[[topics]]\nname = {}\n\n[[topics.subscriptions]]\nname = {}\n",
                toml::Value::from(topic.as_str()),
                toml::Value::from(name.as_str())
            );
            definition.push_str(&settings_toml(settings)?);
            create(&target, &definition, json_out).await
        }
        SubscriptionAction::Update {
            topic,
            name,
            settings,
        } => {
            update(
                &target,
                &path(topic, name),
                "subscription",
                settings,
                json_out,
            )
            .await
        }
        SubscriptionAction::Delete { topic, name } => {
            delete(&target, &path(topic, name), "subscription", json_out).await
        }
    }
}

/// `ferrobus rule …`.
pub async fn rule(action: &RuleAction, connection: &Connection) -> Result<(), OpsError> {
    let target = Target::from_options(connection.connection_string.as_deref())?;
    let json_out = connection.output == Some(Output::Json);
    match action {
        RuleAction::List {
            topic,
            subscription,
        } => {
            let rules = rules(&target, topic, subscription).await?;
            if json_out {
                print_json(&Json::Array(rules));
            } else {
                print_table(&["NAME", "FILTER", "ACTION"], &rule_rows(&rules));
            }
            Ok(())
        }
        RuleAction::Show {
            topic,
            subscription,
            name,
        } => {
            let rules = rules(&target, topic, subscription).await?;
            let rule = rules
                .into_iter()
                .find(|rule| text(rule, "/name").eq_ignore_ascii_case(name))
                .ok_or_else(|| {
                    OpsError::NotFound(format!(
                        "the subscription '{topic}/Subscriptions/{subscription}' has no rule '{name}'"
                    ))
                })?;
            if json_out {
                print_json(&rule);
            } else {
                println!("name: {}", text(&rule, "/name"));
                println!("filter: {}", text(&rule, "/filter"));
                let action = text(&rule, "/action");
                println!("action: {}", if action.is_empty() { "-" } else { &action });
            }
            Ok(())
        }
        RuleAction::Create {
            topic,
            subscription,
            name,
            rule,
        }
        | RuleAction::Update {
            topic,
            subscription,
            name,
            rule,
        } => {
            let update = matches!(action, RuleAction::Update { .. });
            let description = rule_description(rule)?;
            let xml = crate::admin::atom::render_rule_entry(
                &format!("http://{}", target.authority()),
                topic,
                subscription,
                name,
                &description,
                std::time::SystemTime::now(),
            );
            let headers: &[(&str, &str)] = if update { &[("If-Match", "*")] } else { &[] };
            target
                .admin(
                    "PUT",
                    &rule_path(topic, subscription, name),
                    headers,
                    Some(&xml),
                )
                .await?;
            let verb = if update { "updated" } else { "created" };
            done(
                json_out,
                json!({ verb: format!("{topic}/Subscriptions/{subscription}/Rules/{name}") }),
            );
            Ok(())
        }
        RuleAction::Delete {
            topic,
            subscription,
            name,
        } => {
            target
                .admin("DELETE", &rule_path(topic, subscription, name), &[], None)
                .await?;
            done(
                json_out,
                json!({ "deleted": format!("{topic}/Subscriptions/{subscription}/Rules/{name}") }),
            );
            Ok(())
        }
    }
}

/// `ferrobus config reload`: the admin route that re-reads the broker's configuration file.
pub async fn reload(connection: &Connection) -> Result<(), OpsError> {
    let target = Target::from_options(connection.connection_string.as_deref())?;
    let answer = target.admin("POST", "/$config/reload", &[], None).await?;
    let value: Json = serde_json::from_str(&answer).unwrap_or(Json::String(answer));
    if connection.output == Some(Output::Json) {
        print_json(&value);
        return Ok(());
    }
    let list = |key: &str| -> Vec<String> {
        value
            .get(key)
            .and_then(Json::as_array)
            .map(|items| items.iter().map(|item| text(item, "")).collect())
            .unwrap_or_default()
    };
    if value.get("file").is_some() {
        println!("file: {}", text(&value, "/file"));
    }
    for change in ["added", "changed", "removed"] {
        let names = list(change);
        println!(
            "{change}: {}",
            if names.is_empty() {
                "-".to_string()
            } else {
                names.join(", ")
            }
        );
    }
    // What waits for a restart, and the file's entities that run-time changes override.
    for (key, label) in [("restart", "at next start"), ("overridden", "overridden")] {
        for line in list(key) {
            println!("{label}: {line}");
        }
    }
    Ok(())
}

/// The path of a rule in the admin API.
fn rule_path(topic: &str, subscription: &str, name: &str) -> String {
    format!(
        "/{}/Subscriptions/{}/Rules/{}",
        encode(topic),
        encode(subscription),
        encode(name)
    )
}

/// Percent-encodes a path segment or query value (unreserved characters stay).
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// Every entity the broker lists that `keep` accepts.
async fn list(target: &Target, keep: impl Fn(&Json) -> bool) -> Result<Vec<Json>, OpsError> {
    let answer = target.explorer("GET", "entities", None).await?;
    Ok(answer
        .get("entities")
        .and_then(Json::as_array)
        .map(|entities| {
            entities
                .iter()
                .filter(|entity| keep(entity))
                .cloned()
                .collect()
        })
        .unwrap_or_default())
}

fn show_list(entities: &[Json], json_out: bool) {
    if json_out {
        print_json(&Json::Array(entities.to_vec()));
    } else {
        print_entities(entities, false);
    }
}

/// An entity's detail, refused as not found when it is of another kind.
async fn entity(target: &Target, path: &str, kind: &str) -> Result<Json, OpsError> {
    let detail = target
        .explorer("GET", &format!("entity?path={}", encode(path)), None)
        .await?;
    let found = text(&detail, "/kind");
    if found != kind {
        return Err(OpsError::NotFound(format!(
            "'{path}' is a {found}, not a {kind}"
        )));
    }
    Ok(detail)
}

async fn show(target: &Target, path: &str, kind: &str, json_out: bool) -> Result<(), OpsError> {
    let detail = entity(target, path, kind).await?;
    if json_out {
        print_json(&detail);
        return Ok(());
    }
    println!("path: {}", text(&detail, "/path"));
    println!("kind: {}", text(&detail, "/kind"));
    println!("status: {}", text(&detail, "/status"));
    for (label, pointer) in [
        ("active", "/counts/active"),
        ("dead-letter", "/counts/dead_letter"),
        ("scheduled", "/counts/scheduled"),
        ("deferred", "/counts/deferred"),
        ("transfer", "/counts/transfer"),
        ("transfer dead-letter", "/counts/transfer_dead_letter"),
        ("bytes", "/size_bytes"),
    ] {
        println!("{label}: {}", output::number(&detail, pointer));
    }
    if detail.get("subscription_count").is_some() {
        println!(
            "subscriptions: {}",
            output::number(&detail, "/subscription_count")
        );
    }
    println!();
    print!("{}", text(&detail, "/definition"));
    if let Some(rules) = detail.get("rules").and_then(Json::as_array) {
        println!();
        print_table(&["RULE", "FILTER", "ACTION"], &rule_rows(rules));
    }
    Ok(())
}

async fn create(target: &Target, definition: &str, json_out: bool) -> Result<(), OpsError> {
    let answer = target
        .explorer(
            "POST",
            "entities",
            Some(&json!({ "definition": definition })),
        )
        .await?;
    done(
        json_out,
        json!({ "created": answer.get("path").cloned().unwrap_or(Json::Null) }),
    );
    Ok(())
}

async fn update(
    target: &Target,
    path: &str,
    kind: &str,
    settings: &Settings,
    json_out: bool,
) -> Result<(), OpsError> {
    let changes = settings_pairs(settings)?;
    if changes.is_empty() {
        return Err(OpsError::Usage(
            "nothing to change: give at least one setting (see --help)".to_string(),
        ));
    }
    let detail = entity(target, path, kind).await?;
    let mut definition: toml::Table = text(&detail, "/definition").parse().map_err(|error| {
        OpsError::Refused(format!(
            "the broker's definition of '{path}' does not parse: {error}"
        ))
    })?;
    let table = entity_table(&mut definition, kind).ok_or_else(|| {
        OpsError::Refused(format!(
            "the broker's definition of '{path}' has no {kind} table"
        ))
    })?;
    for (key, value) in changes {
        table.insert(key, value);
    }
    let text = toml::to_string(&definition)
        .map_err(|error| OpsError::Refused(format!("cannot write the definition: {error}")))?;
    let answer = target
        .explorer(
            "PUT",
            &format!("entity?path={}", encode(path)),
            Some(&json!({ "definition": text })),
        )
        .await?;
    if json_out {
        print_json(&answer);
    } else {
        println!("updated: {path}");
    }
    Ok(())
}

/// The table of the entity in a one-entity definition.
fn entity_table<'a>(definition: &'a mut toml::Table, kind: &str) -> Option<&'a mut toml::Table> {
    let first = |value: &'a mut toml::Value| value.as_array_mut()?.first_mut()?.as_table_mut();
    match kind {
        "queue" => first(definition.get_mut("queues")?),
        "topic" => first(definition.get_mut("topics")?),
        _ => {
            let topic = first(definition.get_mut("topics")?)?;
            first(topic.get_mut("subscriptions")?)
        }
    }
}

async fn delete(target: &Target, path: &str, kind: &str, json_out: bool) -> Result<(), OpsError> {
    entity(target, path, kind).await?;
    let answer = target
        .explorer("DELETE", &format!("entity?path={}", encode(path)), None)
        .await?;
    done(json_out, answer);
    Ok(())
}

/// Prints the answer of a change: JSON, or `key: value` text.
fn done(json_out: bool, answer: Json) {
    if json_out {
        print_json(&answer);
    } else {
        println!("{}", output::summary_line(&answer).replace('"', ""));
    }
}

/// The subscription's rules from its detail.
async fn rules(target: &Target, topic: &str, subscription: &str) -> Result<Vec<Json>, OpsError> {
    let detail = entity(
        target,
        &format!("{topic}/Subscriptions/{subscription}"),
        "subscription",
    )
    .await?;
    Ok(detail
        .get("rules")
        .and_then(Json::as_array)
        .cloned()
        .unwrap_or_default())
}

/// The settings given, as configuration keys and TOML values.
fn settings_pairs(settings: &Settings) -> Result<Vec<(String, toml::Value)>, OpsError> {
    let mut pairs: Vec<(String, toml::Value)> = Vec::new();
    let mut text = |key: &str, value: &Option<String>| {
        if let Some(value) = value {
            pairs.push((key.to_string(), toml::Value::String(value.clone())));
        }
    };
    text("lock_duration", &settings.lock_duration);
    text(
        "default_message_time_to_live",
        &settings.default_message_time_to_live,
    );
    text(
        "duplicate_detection_history_time_window",
        &settings.duplicate_detection_history_time_window,
    );
    text("auto_delete_on_idle", &settings.auto_delete_on_idle);
    text("forward_to", &settings.forward_to);
    text(
        "forward_dead_lettered_messages_to",
        &settings.forward_dead_lettered_messages_to,
    );
    text("status", &settings.status);
    text("user_metadata", &settings.user_metadata);
    for (key, value) in [
        (
            "dead_lettering_on_message_expiration",
            settings.dead_lettering_on_message_expiration,
        ),
        ("requires_session", settings.requires_session),
        (
            "requires_duplicate_detection",
            settings.requires_duplicate_detection,
        ),
    ] {
        if let Some(value) = value {
            pairs.push((key.to_string(), toml::Value::Boolean(value)));
        }
    }
    if let Some(count) = settings.max_delivery_count {
        pairs.push((
            "max_delivery_count".to_string(),
            toml::Value::Integer(count.into()),
        ));
    }
    if let Some(size) = settings.max_size_in_megabytes {
        let size = i64::try_from(size)
            .map_err(|_| OpsError::Usage(format!("--max-size-in-megabytes {size} is too large")))?;
        pairs.push((
            "max_size_in_megabytes".to_string(),
            toml::Value::Integer(size),
        ));
    }
    for setting in &settings.set {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| OpsError::Usage(format!("--set {setting:?} is not KEY=VALUE")))?;
        pairs.push((key.trim().to_string(), toml_value(value.trim())));
    }
    Ok(pairs)
}

/// A `--set` value: TOML if it reads as one, else text.
fn toml_value(text: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("value = {text}"))
        .ok()
        .and_then(|mut table| table.remove("value"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

/// The settings as TOML lines under an entity's table.
fn settings_toml(settings: &Settings) -> Result<String, OpsError> {
    Ok(settings_pairs(settings)?
        .into_iter()
        .map(|(key, value)| format!("{} = {value}\n", toml_key(&key)))
        .collect())
}

fn toml_key(key: &str) -> String {
    if !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        key.to_string()
    } else {
        toml::Value::from(key).to_string()
    }
}

/// The rule the flags describe.
fn rule_description(settings: &RuleSettings) -> Result<RuleDescription, OpsError> {
    let correlation = CorrelationFilter {
        correlation_id: settings.correlation_id.clone(),
        message_id: settings.message_id.clone(),
        to: settings.to.clone(),
        reply_to: settings.reply_to.clone(),
        label: settings.subject.clone(),
        session_id: settings.session_id.clone(),
        reply_to_session_id: None,
        content_type: settings.content_type.clone(),
        properties: settings
            .properties
            .iter()
            .map(|pair| {
                let (name, value) = pair.split_once('=').ok_or_else(|| {
                    OpsError::Usage(format!("--property {pair:?} is not NAME=VALUE"))
                })?;
                Ok((name.to_string(), property_value(value)))
            })
            .collect::<Result<_, OpsError>>()?,
    };
    let has_correlation = correlation != CorrelationFilter::default();
    let filter = match (&settings.sql, has_correlation) {
        (Some(_), true) => {
            return Err(OpsError::Usage(
                "a rule has a SQL filter (--sql) or a correlation filter, not both".to_string(),
            ));
        }
        (Some(expression), false) => RuleFilter::Sql {
            expression: expression.clone(),
            parameters: Vec::new(),
        },
        (None, true) => RuleFilter::Correlation(correlation),
        (None, false) => RuleFilter::True,
    };
    let action = match &settings.action {
        Some(expression) => crate::admin::atom::RuleAction::Sql {
            expression: expression.clone(),
            parameters: Vec::new(),
        },
        None => crate::admin::atom::RuleAction::None,
    };
    Ok(RuleDescription {
        name: None,
        filter,
        action,
    })
}

/// A property value typed as `send --property` types it: integer, number, boolean, else text
/// (double quotes force text).
pub fn property_value(text: &str) -> PropertyValue {
    if let Some(inner) = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    {
        return PropertyValue::String(inner.to_string());
    }
    if let Ok(number) = text.parse::<i64>() {
        return match i32::try_from(number) {
            Ok(small) => PropertyValue::Int(small),
            Err(_) => PropertyValue::Long(number),
        };
    }
    if let Ok(number) = text.parse::<f64>()
        && number.is_finite()
    {
        return PropertyValue::Double(number);
    }
    match text {
        "true" => PropertyValue::Boolean(true),
        "false" => PropertyValue::Boolean(false),
        _ => PropertyValue::String(text.to_string()),
    }
}

/// A table's rows of rules: name, filter, action.
fn rule_rows(rules: &[Json]) -> Vec<Vec<String>> {
    rules
        .iter()
        .map(|rule| {
            vec![
                text(rule, "/name"),
                text(rule, "/filter"),
                text(rule, "/action"),
            ]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_become_configuration_keys() {
        let settings = Settings {
            lock_duration: Some("45s".to_string()),
            max_delivery_count: Some(3),
            requires_session: Some(true),
            set: vec![
                "enable_partitioning=false".to_string(),
                "user_metadata=hello".to_string(),
            ],
            ..Settings::default()
        };
        let text = settings_toml(&settings).expect("valid");
        let table: toml::Table = text.parse().expect("TOML");
        assert_eq!(table["lock_duration"].as_str(), Some("45s"));
        assert_eq!(table["max_delivery_count"].as_integer(), Some(3));
        assert_eq!(table["requires_session"].as_bool(), Some(true));
        assert_eq!(table["enable_partitioning"].as_bool(), Some(false));
        assert_eq!(table["user_metadata"].as_str(), Some("hello"));
    }

    #[test]
    fn a_rule_has_one_kind_of_filter() {
        let sql = RuleSettings {
            sql: Some("a = 1".to_string()),
            ..RuleSettings::default()
        };
        assert!(matches!(
            rule_description(&sql).map(|rule| rule.filter),
            Ok(RuleFilter::Sql { .. })
        ));
        let both = RuleSettings {
            subject: Some("x".to_string()),
            ..sql
        };
        assert!(matches!(rule_description(&both), Err(OpsError::Usage(_))));
        let correlation = RuleSettings {
            properties: vec!["n=5".to_string(), "s=\"5\"".to_string()],
            ..RuleSettings::default()
        };
        match rule_description(&correlation).map(|rule| rule.filter) {
            Ok(RuleFilter::Correlation(filter)) => assert_eq!(
                filter.properties,
                vec![
                    ("n".to_string(), PropertyValue::Int(5)),
                    ("s".to_string(), PropertyValue::String("5".to_string()))
                ]
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            rule_description(&RuleSettings::default()).map(|rule| rule.filter),
            Ok(RuleFilter::True)
        ));
    }

    #[test]
    fn paths_are_percent_encoded() {
        assert_eq!(
            encode("t/Subscriptions/$x y"),
            "t%2FSubscriptions%2F%24x%20y"
        );
    }
}
