//! Rule descriptions on the wire: reading `add-rule` requests and writing the described
//! rule descriptions `enumerate-rules` returns (numeric descriptors, wire contract §6.4).

use serde_amqp::Value;

use super::{argument, body_entry, body_text, property_changes};
use crate::amqp::codec::Writer;
use crate::amqp::errors::Failure;
use crate::broker::filter::{CorrelationFilter, Filter, FilterValue, SqlFilter, SqlRuleAction};
use crate::broker::rules::Rule;
use crate::broker::types::PropertyValue;

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
    let syntax = |error: crate::broker::filter::FilterSyntaxError| argument(&error.to_string());
    let filter = if let Some(sql) = body_entry(description, "sql-filter").map(undescribed) {
        let expression = body_text(sql, "expression")
            .ok_or_else(|| argument("sql-filter needs an expression"))?;
        Filter::Sql(SqlFilter::parse(&expression).map_err(syntax)?)
    } else if let Some(correlation) = body_entry(description, "correlation-filter").map(undescribed)
    {
        let field = |key: &str| body_text(correlation, key);
        let properties = property_changes(body_entry(correlation, "properties"))
            .into_iter()
            .map(|(key, value)| {
                let value = match value {
                    PropertyValue::Long(number) => FilterValue::Integer(number),
                    PropertyValue::Double(number) => FilterValue::Float(number),
                    PropertyValue::Bool(flag) => FilterValue::Bool(flag),
                    PropertyValue::String(text) => FilterValue::String(text),
                    PropertyValue::Timestamp(millis) => FilterValue::Timestamp(millis),
                    PropertyValue::Uuid(bytes) => FilterValue::Uuid(bytes),
                    _ => FilterValue::Null,
                };
                (key, value)
            })
            .collect();
        Filter::Correlation(CorrelationFilter {
            correlation_id: field("correlation-id"),
            message_id: field("message-id"),
            to: field("to"),
            reply_to: field("reply-to"),
            label: field("label"),
            session_id: field("session-id"),
            reply_to_session_id: field("reply-to-session-id"),
            content_type: field("content-type"),
            properties,
        })
    } else {
        Filter::True
    };
    let action = match body_entry(description, "sql-rule-action").map(undescribed) {
        Some(action) => match body_text(action, "expression") {
            Some(expression) if !expression.trim().is_empty() => {
                Some(SqlRuleAction::parse(&expression).map_err(syntax)?)
            }
            _ => None,
        },
        None => None,
    };
    Ok(Rule {
        name,
        filter,
        action,
        created_at: 0,
    })
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
            let mut list = writer.start_list();
            writer.string(filter.expression());
            writer.int(20);
            list.count = 2;
            writer.finish_compound(list);
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
                crate::amqp::message::write_property_value(writer, &value);
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
            let mut list = writer.start_list();
            writer.string(action.expression());
            writer.int(20);
            list.count = 2;
            writer.finish_compound(list);
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
