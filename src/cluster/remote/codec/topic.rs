//! The topic commands on the stream ([`TopicCommand`]), and a topic's rules, which go as
//! their definitions.

use crate::broker::entity::NotificationSender;
use crate::broker::rules::{FilterDefinition, Rule, RuleDefinition};
use crate::broker::topic::{RuleOperation, TopicCommand};
use crate::broker::types::SequenceNumber;
use crate::config::ParameterValue;
use crate::store::codec::{DecodeError, In, Out};

use super::values::{
    batch, entity_status, forward_key, message_of, messages_of, numbers, opt_duration,
    opt_reply_to, read_16_bytes, read_batch, read_entity_status, read_forward_key, read_list,
    read_message, read_numbers, read_opt_duration, read_opt_reply_to, read_reply_to, read_usize,
    reply_to,
};
use super::{SinkIds, Unencodable};

const PUBLISH: u8 = 1;
const PUBLISH_FORWARDED: u8 = 2;
const PUBLISH_BATCH: u8 = 3;
const SCHEDULE: u8 = 4;
const TOPIC_CANCEL_SCHEDULED: u8 = 5;
const REMOVE_SUBSCRIPTION: u8 = 7;
const UPDATE: u8 = 8;
const TOPIC_DESCRIBE: u8 = 9;
const TOPIC_DELETE: u8 = 10;
const RULES: u8 = 11;

pub(super) fn topic_command_body(
    out: &mut Out,
    command: &TopicCommand,
    sinks: &mut impl SinkIds,
) -> Result<(), Unencodable> {
    match command {
        TopicCommand::Publish { messages, reply } => {
            out.u8(PUBLISH);
            messages_of(out, messages.iter());
            opt_reply_to(out, reply.as_ref(), sinks);
        }
        TopicCommand::PublishForwarded {
            message,
            key,
            floor,
            reply,
        } => {
            out.u8(PUBLISH_FORWARDED);
            message_of(out, message);
            forward_key(out, key);
            out.i64(floor.0);
            reply_to(out, reply, sinks);
        }
        TopicCommand::PublishBatch { sends, sink } => {
            out.u8(PUBLISH_BATCH);
            batch(out, sends, sink, sinks);
        }
        TopicCommand::Schedule { messages, reply } => {
            out.u8(SCHEDULE);
            messages_of(out, messages.iter());
            reply_to(out, reply, sinks);
        }
        TopicCommand::CancelScheduled {
            sequence_numbers,
            reply,
        } => {
            out.u8(TOPIC_CANCEL_SCHEDULED);
            numbers(out, sequence_numbers);
            reply_to(out, reply, sinks);
        }
        TopicCommand::AddSubscription { .. } => {
            return Err(Unencodable::LocalOnly("AddSubscription"));
        }
        TopicCommand::RemoveSubscription { name, reply } => {
            out.u8(REMOVE_SUBSCRIPTION);
            out.str(name);
            reply_to(out, reply, sinks);
        }
        TopicCommand::Update {
            duplicate_detection,
            auto_delete_on_idle,
            status,
            reply,
        } => {
            out.u8(UPDATE);
            opt_duration(out, *duplicate_detection);
            opt_duration(out, *auto_delete_on_idle);
            entity_status(out, *status);
            reply_to(out, reply, sinks);
        }
        TopicCommand::Describe { reply } => {
            out.u8(TOPIC_DESCRIBE);
            reply_to(out, reply, sinks);
        }
        TopicCommand::Delete { reply } => {
            out.u8(TOPIC_DELETE);
            reply_to(out, reply, sinks);
        }
        TopicCommand::Rules {
            subscription,
            operation,
            reply,
        } => {
            out.u8(RULES);
            out.str(subscription);
            match operation {
                RuleOperation::Add(added) => {
                    out.u8(0);
                    rule(out, added);
                }
                RuleOperation::Remove(name) => {
                    out.u8(1);
                    out.str(name);
                }
                RuleOperation::Enumerate { skip, top } => {
                    out.u8(2);
                    out.u64(*skip as u64);
                    out.u64(*top as u64);
                }
            }
            reply_to(out, reply, sinks);
        }
    }
    Ok(())
}

pub(super) fn topic_command(
    input: &mut In<'_>,
    sink: &mut impl FnMut(u64) -> NotificationSender,
) -> Result<TopicCommand, DecodeError> {
    Ok(match input.u8()? {
        PUBLISH => TopicCommand::Publish {
            messages: read_list(input, read_message)?,
            reply: read_opt_reply_to(input, sink)?,
        },
        PUBLISH_FORWARDED => TopicCommand::PublishForwarded {
            message: read_message(input)?,
            key: read_forward_key(input)?,
            floor: SequenceNumber(input.i64()?),
            reply: read_reply_to(input, sink)?,
        },
        PUBLISH_BATCH => {
            let (sends, sink) = read_batch(input, sink)?;
            TopicCommand::PublishBatch { sends, sink }
        }
        SCHEDULE => TopicCommand::Schedule {
            messages: read_list(input, read_message)?,
            reply: read_reply_to(input, sink)?,
        },
        TOPIC_CANCEL_SCHEDULED => TopicCommand::CancelScheduled {
            sequence_numbers: read_numbers(input)?,
            reply: read_reply_to(input, sink)?,
        },
        REMOVE_SUBSCRIPTION => TopicCommand::RemoveSubscription {
            name: input.string()?,
            reply: read_reply_to(input, sink)?,
        },
        UPDATE => TopicCommand::Update {
            duplicate_detection: read_opt_duration(input)?,
            auto_delete_on_idle: read_opt_duration(input)?,
            status: read_entity_status(input)?,
            reply: read_reply_to(input, sink)?,
        },
        TOPIC_DESCRIBE => TopicCommand::Describe {
            reply: read_reply_to(input, sink)?,
        },
        TOPIC_DELETE => TopicCommand::Delete {
            reply: read_reply_to(input, sink)?,
        },
        RULES => TopicCommand::Rules {
            subscription: input.string()?,
            operation: match input.u8()? {
                0 => RuleOperation::Add(Box::new(read_rule(input)?)),
                1 => RuleOperation::Remove(input.string()?),
                2 => RuleOperation::Enumerate {
                    skip: read_usize(input)?,
                    top: read_usize(input)?,
                },
                _ => return input.fail("unknown rule operation"),
            },
            reply: read_reply_to(input, sink)?,
        },
        kind => return input.fail(&format!("unknown topic command {kind}")),
    })
}

/// A compiled rule goes as its definition (what `add-rule` gave) and is compiled again
/// on the other end, by the same build.
pub(super) fn rule(out: &mut Out, rule: &Rule) {
    let definition = RuleDefinition::of(rule);
    out.str(&definition.name);
    match &definition.filter {
        FilterDefinition::True => out.u8(0),
        FilterDefinition::False => out.u8(1),
        FilterDefinition::Sql(expression) => {
            out.u8(2);
            out.str(expression);
        }
        FilterDefinition::Correlation { fields, properties } => {
            out.u8(3);
            for field in fields {
                out.opt_str(field.as_deref());
            }
            out.properties(properties);
        }
    }
    out.opt_str(definition.action.as_deref());
    parameters(out, &definition.filter_parameters);
    parameters(out, &definition.action_parameters);
    out.i64(definition.created_at);
}

pub(super) fn read_rule(input: &mut In<'_>) -> Result<Rule, DecodeError> {
    let name = input.string()?;
    let filter = match input.u8()? {
        0 => FilterDefinition::True,
        1 => FilterDefinition::False,
        2 => FilterDefinition::Sql(input.string()?),
        3 => {
            let mut fields: [Option<String>; 8] = Default::default();
            for field in &mut fields {
                *field = input.opt_string()?;
            }
            FilterDefinition::Correlation {
                fields,
                properties: input.properties()?,
            }
        }
        _ => return input.fail("unknown filter kind"),
    };
    let definition = RuleDefinition {
        name,
        filter,
        action: input.opt_string()?,
        filter_parameters: read_parameters(input)?,
        action_parameters: read_parameters(input)?,
        created_at: input.i64()?,
    };
    definition
        .compile()
        .map_err(|error| DecodeError(format!("a rule that does not compile: {error}")))
}

fn parameters(out: &mut Out, parameters: &[(String, ParameterValue)]) {
    out.u64(parameters.len() as u64);
    for (name, value) in parameters {
        out.str(name);
        match value {
            ParameterValue::String(text) => {
                out.u8(0);
                out.str(text);
            }
            ParameterValue::Int(number) => {
                out.u8(1);
                out.i64(i64::from(*number));
            }
            ParameterValue::Long(number) => {
                out.u8(2);
                out.i64(*number);
            }
            ParameterValue::Double(number) => {
                out.u8(3);
                out.u64(number.to_bits());
            }
            ParameterValue::Bool(flag) => {
                out.u8(4);
                out.u8(u8::from(*flag));
            }
            ParameterValue::DateTime(ticks) => {
                out.u8(5);
                out.i64(*ticks);
            }
            ParameterValue::Duration(ticks) => {
                out.u8(6);
                out.i64(*ticks);
            }
            ParameterValue::Guid(guid) => {
                out.u8(7);
                out.0.extend_from_slice(guid);
            }
        }
    }
}

fn read_parameters(input: &mut In<'_>) -> Result<Vec<(String, ParameterValue)>, DecodeError> {
    read_list(input, |input| {
        let name = input.string()?;
        let value = match input.u8()? {
            0 => ParameterValue::String(input.string()?),
            1 => match i32::try_from(input.i64()?) {
                Ok(number) => ParameterValue::Int(number),
                Err(_) => return input.fail("an int parameter out of range"),
            },
            2 => ParameterValue::Long(input.i64()?),
            3 => ParameterValue::Double(f64::from_bits(input.u64()?)),
            4 => ParameterValue::Bool(input.u8()? != 0),
            5 => ParameterValue::DateTime(input.i64()?),
            6 => ParameterValue::Duration(input.i64()?),
            7 => ParameterValue::Guid(read_16_bytes(input)?),
            _ => return input.fail("unknown parameter type"),
        };
        Ok((name, value))
    })
}
