//! Rule descriptions on the wire: reading `add-rule` requests and writing the described
//! rule descriptions `enumerate-rules` returns (numeric descriptors, wire contract §6.4).
//!
//! SQL parameters: a `sql-filter` or `sql-rule-action` map may carry `sql-parameters`, a map
//! from each parameter's name to its typed value (AMQP string, int, long, double, boolean,
//! timestamp, uuid, and .NET's described `com.microsoft:timespan` ticks). enumerate-rules
//! writes them back as a third list field after the compatibility level, only when there are
//! some: readers of the two documented fields (JS reads the expression, .NET skips fields
//! past its count) see the same lists as before. The SDKs neither send nor read them today.

use serde_amqp::Value;
use serde_amqp::descriptor::Descriptor;

use super::{argument, body_entry, body_text, property_changes};
use crate::amqp::errors::Failure;
use crate::broker::filter::Filter;
use crate::broker::rules::{FilterDefinition, Rule, RuleDefinition};
use crate::config::ParameterValue;
use crate::config::parameters::{TICKS_PER_MILLISECOND, check_parameters};
use crate::encoding::codec::Writer;

/// The described type .NET writes a `TimeSpan` as: its ticks, a long.
const TIMESPAN: &str = "com.microsoft:timespan";
/// The described type .NET writes a `DateTimeOffset` as: its UTC ticks since 0001-01-01.
const DATETIME_OFFSET: &str = "com.microsoft:datetime-offset";
/// .NET ticks from 0001-01-01 to the Unix epoch.
const UNIX_EPOCH_TICKS: i64 = 621_355_968_000_000_000;

/// The value of a map entry, looking through a described wrapper.
pub(super) fn undescribed(value: &Value) -> &Value {
    match value {
        Value::Described(described) => &described.value,
        other => other,
    }
}

pub(super) fn rule_from_request(body: &Value) -> Result<Rule, Failure> {
    let name = body_text(body, "rule-name").ok_or_else(|| argument("rule-name is required"))?;
    let description = body_entry(body, "rule-description")
        .map(undescribed)
        .ok_or_else(|| argument("rule-description is required"))?;
    let mut filter_parameters = Vec::new();
    let filter = if let Some(sql) = body_entry(description, "sql-filter").map(undescribed) {
        let expression = body_text(sql, "expression")
            .ok_or_else(|| argument("sql-filter needs an expression"))?;
        filter_parameters = sql_parameters(sql, "sql-filter")?;
        FilterDefinition::Sql(expression)
    } else if let Some(correlation) = body_entry(description, "correlation-filter").map(undescribed)
    {
        let field = |key: &str| body_text(correlation, key);
        FilterDefinition::Correlation {
            fields: [
                field("correlation-id"),
                field("message-id"),
                field("to"),
                field("reply-to"),
                field("label"),
                field("session-id"),
                field("reply-to-session-id"),
                field("content-type"),
            ],
            properties: property_changes(body_entry(correlation, "properties")),
        }
    } else {
        FilterDefinition::True
    };
    let mut action_parameters = Vec::new();
    let action = match body_entry(description, "sql-rule-action").map(undescribed) {
        Some(action) => match body_text(action, "expression") {
            Some(expression) if !expression.trim().is_empty() => {
                action_parameters = sql_parameters(action, "sql-rule-action")?;
                Some(expression)
            }
            _ => None,
        },
        None => None,
    };
    let definition = RuleDefinition {
        name,
        filter,
        action,
        filter_parameters,
        action_parameters,
        created_at: 0,
    };
    definition
        .compile()
        .map_err(|error| argument(&error.to_string()))
}

/// The `sql-parameters` of a `sql-filter` or `sql-rule-action` map (none when absent).
fn sql_parameters(part: &Value, part_name: &str) -> Result<Vec<(String, ParameterValue)>, Failure> {
    let map = match body_entry(part, "sql-parameters") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Map(map)) => map,
        Some(_) => {
            return Err(argument(&format!(
                "{part_name} sql-parameters must be a map"
            )));
        }
    };
    let mut parameters = Vec::new();
    for (key, value) in map.iter() {
        let name = match key {
            Value::String(text) => text.clone(),
            Value::Symbol(symbol) => symbol.0.clone(),
            _ => {
                return Err(argument(&format!(
                    "{part_name} sql-parameters: names must be strings"
                )));
            }
        };
        let value = parameter_value(value).ok_or_else(|| {
            argument(&format!(
                "{part_name} sql-parameters '{name}': values of this AMQP type are not supported (use string, int, long, double, boolean, timestamp, uuid or a com.microsoft:timespan)"
            ))
        })?;
        parameters.push((name, value));
    }
    check_parameters(&parameters)
        .map_err(|reason| argument(&format!("{part_name} sql-parameters: {reason}")))?;
    Ok(parameters)
}

/// A parameter's value from its AMQP encoding, typed as .NET reads it.
fn parameter_value(value: &Value) -> Option<ParameterValue> {
    Some(match value {
        Value::String(text) => ParameterValue::String(text.clone()),
        Value::Symbol(symbol) => ParameterValue::String(symbol.0.clone()),
        Value::Byte(number) => ParameterValue::Int(i32::from(*number)),
        Value::Short(number) => ParameterValue::Int(i32::from(*number)),
        Value::Int(number) => ParameterValue::Int(*number),
        Value::Ubyte(number) => ParameterValue::Int(i32::from(*number)),
        Value::Ushort(number) => ParameterValue::Int(i32::from(*number)),
        Value::Uint(number) => ParameterValue::Long(i64::from(*number)),
        Value::Long(number) => ParameterValue::Long(*number),
        Value::Ulong(number) => ParameterValue::Long(i64::try_from(*number).ok()?),
        Value::Float(number) => ParameterValue::Double(f64::from(f32::from(*number))),
        Value::Double(number) => ParameterValue::Double(f64::from(*number)),
        Value::Bool(flag) => ParameterValue::Bool(*flag),
        Value::Timestamp(time) => {
            ParameterValue::DateTime(time.milliseconds().checked_mul(TICKS_PER_MILLISECOND)?)
        }
        Value::Uuid(uuid) => ParameterValue::Guid(*uuid.as_inner()),
        Value::Described(described) => {
            let (Descriptor::Name(name), Value::Long(ticks)) =
                (&described.descriptor, &described.value)
            else {
                return None;
            };
            match name.0.as_str() {
                TIMESPAN => ParameterValue::Duration(*ticks),
                DATETIME_OFFSET => ParameterValue::DateTime(ticks.checked_sub(UNIX_EPOCH_TICKS)?),
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// Writes a parameter's value as [`parameter_value`] reads it.
fn write_parameter_value(writer: &mut Writer<'_>, value: &ParameterValue) {
    match value {
        ParameterValue::String(text) => writer.string(text),
        ParameterValue::Int(number) => writer.int(*number),
        ParameterValue::Long(number) => writer.long(*number),
        ParameterValue::Double(number) => {
            writer.raw(&[0x82]);
            writer.raw(&number.to_be_bytes());
        }
        ParameterValue::Bool(flag) => writer.boolean(*flag),
        ParameterValue::DateTime(ticks) => {
            writer.timestamp(ticks.div_euclid(TICKS_PER_MILLISECOND));
        }
        ParameterValue::Duration(ticks) => {
            writer.raw(&[0x00]);
            writer.symbol(TIMESPAN);
            writer.long(*ticks);
        }
        ParameterValue::Guid(bytes) => writer.uuid(bytes),
    }
}

/// A SQL filter's or action's list: expression, compatibility level 20, and the parameters
/// when there are some.
fn write_sql_list(
    writer: &mut Writer<'_>,
    expression: &str,
    parameters: &[(String, ParameterValue)],
) {
    let mut list = writer.start_list();
    writer.string(expression);
    writer.int(20);
    list.count = 2;
    if !parameters.is_empty() {
        let mut map = writer.start_map();
        for (name, value) in parameters {
            writer.string(name);
            write_parameter_value(writer, value);
            map.count += 2;
        }
        writer.finish_compound(map);
        list.count = 3;
    }
    writer.finish_compound(list);
}

fn write_optional_text(writer: &mut Writer<'_>, value: &Option<String>) {
    match value {
        Some(text) => writer.string(text),
        None => writer.null(),
    }
}

/// Writes a rule description as the SDKs decode it (wire contract §6.4, numeric
/// descriptors).
pub(super) fn write_rule(writer: &mut Writer<'_>, rule: &Rule) {
    writer.descriptor_ulong(0x0000_0137_0000_0004);
    let mut description = writer.start_list();
    match &rule.filter {
        Filter::True | Filter::False => {
            let (code, text) = match rule.filter {
                Filter::True => (0x0000_0013_7000_0007, "1=1"),
                _ => (0x0000_0013_7000_0008, "1=0"),
            };
            writer.descriptor_ulong(code);
            let mut list = writer.start_list();
            writer.string(text);
            writer.int(20);
            list.count = 2;
            writer.finish_compound(list);
        }
        Filter::Sql(filter) => {
            writer.descriptor_ulong(0x0000_0013_7000_0006);
            write_sql_list(writer, filter.expression(), &rule.filter_parameters);
        }
        Filter::Correlation(filter) => {
            writer.descriptor_ulong(0x0000_0013_7000_0009);
            let mut list = writer.start_list();
            for field in [
                &filter.correlation_id,
                &filter.message_id,
                &filter.to,
                &filter.reply_to,
                &filter.label,
                &filter.session_id,
                &filter.reply_to_session_id,
                &filter.content_type,
            ] {
                write_optional_text(writer, field);
            }
            let mut properties = writer.start_map();
            for (name, value) in &filter.properties {
                writer.string(name);
                let value = crate::broker::rules::property_value(value);
                crate::broker::message::write_property_value(writer, &value);
                properties.count += 2;
            }
            writer.finish_compound(properties);
            list.count = 9;
            writer.finish_compound(list);
        }
    }
    match &rule.action {
        Some(action) => {
            writer.descriptor_ulong(0x0000_0137_0000_0006);
            write_sql_list(writer, action.expression(), &rule.action_parameters);
        }
        None => {
            writer.descriptor_ulong(0x0000_0137_0000_0005);
            let list = writer.start_list();
            writer.finish_compound(list);
        }
    }
    writer.string(&rule.name);
    writer.timestamp(rule.created_at);
    description.count = 4;
    writer.finish_compound(description);
}
