//! Evaluates a parsed [`Expression`] against one message.
//!
//! Semantics follow the Service Bus documentation: a missing property is *unknown* (SQL
//! `NULL`); arithmetic, comparisons and `LIKE` with an unknown operand are unknown; `AND` / `OR`
//! / `NOT` use three-valued logic; a filter matches only when its condition is TRUE. Operators
//! follow C# binding: integers widen to floats, `+` concatenates when a string is involved,
//! timestamps and durations combine like `DateTime` / `TimeSpan`, and operand types without a
//! C# operator (string `<` string, string `=` number, arithmetic on booleans…) raise a
//! [`FilterEvaluationError`] rather than silently not matching.
//!
//! `AND` / `OR` evaluate left to right and stop at the first deciding operand (FALSE / TRUE),
//! so an error in a later operand is not raised. `x IN (a, b)` behaves as `x = a OR x = b`
//! (SQL-92): a `NULL` item makes a non-matching `IN` unknown, and an item of an incompatible
//! type is an error only if it is reached.
//!
//! Strings are borrowed from the message or the syntax tree ([`Cow::Borrowed`]); only string
//! concatenation allocates. This module reads the message; it never changes it.
//!
//! Every evaluation draws on a [`Fuel`]: a step per node, a property lookup's pass over the
//! message's properties, the bytes of every string compared or built (charged before it is
//! built), a `LIKE` match's text times its pattern's state words. Nothing here does work
//! that was not charged first, so a rule cannot make one message cost more than the budget.

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

use super::error::FilterEvaluationError;
use super::fuel::Fuel;
use super::like::LikePattern;
use super::message::{FilterMessage, SystemProperty};
use super::operators::{arithmetic, compare, negate, plus};
use super::syntax::{ComparisonOperator, Expression, PropertyReference};
use super::value::{FilterValue, FilterValueRef, ValueType};

/// A value during evaluation; strings borrow where they can.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Operand<'a> {
    Null,
    Bool(bool),
    Integer(i64),
    Float(f64),
    String(Cow<'a, str>),
    Timestamp(i64),
    Duration(i64),
    Uuid([u8; 16]),
}

impl<'a> Operand<'a> {
    pub(super) fn value_type(&self) -> ValueType {
        match self {
            Operand::Null => ValueType::Null,
            Operand::Bool(_) => ValueType::Bool,
            Operand::Integer(_) => ValueType::Integer,
            Operand::Float(_) => ValueType::Float,
            Operand::String(_) => ValueType::String,
            Operand::Timestamp(_) => ValueType::Timestamp,
            Operand::Duration(_) => ValueType::Duration,
            Operand::Uuid(_) => ValueType::Uuid,
        }
    }

    fn from_value_ref(value: FilterValueRef<'a>) -> Self {
        match value {
            FilterValueRef::Null => Operand::Null,
            FilterValueRef::Bool(value) => Operand::Bool(value),
            FilterValueRef::Integer(value) => Operand::Integer(value),
            FilterValueRef::Float(value) => Operand::Float(value),
            FilterValueRef::String(value) => Operand::String(Cow::Borrowed(value)),
            FilterValueRef::Timestamp(value) => Operand::Timestamp(value),
            FilterValueRef::Duration(value) => Operand::Duration(value),
            FilterValueRef::Uuid(value) => Operand::Uuid(value),
        }
    }

    /// Converts into an owned value (allocates for borrowed strings).
    pub(super) fn into_filter_value(self) -> FilterValue {
        match self {
            Operand::Null => FilterValue::Null,
            Operand::Bool(value) => FilterValue::Bool(value),
            Operand::Integer(value) => FilterValue::Integer(value),
            Operand::Float(value) => FilterValue::Float(value),
            Operand::String(value) => FilterValue::String(value.into_owned()),
            Operand::Timestamp(value) => FilterValue::Timestamp(value),
            Operand::Duration(value) => FilterValue::Duration(value),
            Operand::Uuid(value) => FilterValue::Uuid(value),
        }
    }
}

/// SQL three-valued truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Truth {
    True,
    False,
    Unknown,
}

impl Truth {
    pub(super) fn from_bool(value: bool) -> Truth {
        if value { Truth::True } else { Truth::False }
    }

    fn not(self) -> Truth {
        match self {
            Truth::True => Truth::False,
            Truth::False => Truth::True,
            Truth::Unknown => Truth::Unknown,
        }
    }

    /// Applies `NOT` when `negated`.
    fn negated_if(self, negated: bool) -> Truth {
        if negated { self.not() } else { self }
    }
}

type EvaluationResult<T> = Result<T, FilterEvaluationError>;

/// Evaluates `expression` as a condition.
pub(super) fn evaluate_condition<M: FilterMessage + ?Sized>(
    expression: &Expression,
    message: &M,
    fuel: &mut Fuel,
) -> EvaluationResult<Truth> {
    fuel.charge(1)?;
    match expression {
        Expression::And(operands) => {
            let mut result = Truth::True;
            for operand in operands {
                match evaluate_condition(operand, message, fuel)? {
                    Truth::False => return Ok(Truth::False),
                    Truth::Unknown => result = Truth::Unknown,
                    Truth::True => {}
                }
            }
            Ok(result)
        }
        Expression::Or(operands) => {
            let mut result = Truth::False;
            for operand in operands {
                match evaluate_condition(operand, message, fuel)? {
                    Truth::True => return Ok(Truth::True),
                    Truth::Unknown => result = Truth::Unknown,
                    Truth::False => {}
                }
            }
            Ok(result)
        }
        Expression::Not(operand) => Ok(evaluate_condition(operand, message, fuel)?.not()),
        Expression::Comparison {
            operator,
            left,
            right,
        } => {
            let left = evaluate_value(left, message, fuel)?;
            let right = evaluate_value(right, message, fuel)?;
            fuel.charge(comparison_cost(&left, &right))?;
            compare(*operator, &left, &right)
        }
        Expression::Like {
            negated,
            value,
            pattern,
            escape,
            compiled,
        } => evaluate_like(
            message,
            value,
            pattern,
            escape.as_deref(),
            compiled.as_deref(),
            fuel,
        )
        .map(|truth| truth.negated_if(*negated)),
        Expression::In {
            negated,
            value,
            list,
        } => evaluate_in(message, value, list, fuel).map(|truth| truth.negated_if(*negated)),
        Expression::IsNull { negated, property } => {
            fuel.charge(message.property_lookup_cost())?;
            let is_null = matches!(
                read_property(property, message),
                None | Some(FilterValueRef::Null)
            );
            Ok(Truth::from_bool(is_null != *negated))
        }
        Expression::Exists(property) => {
            fuel.charge(message.property_lookup_cost())?;
            Ok(Truth::from_bool(read_property(property, message).is_some()))
        }
        value_expression => match evaluate_value(value_expression, message, fuel)? {
            Operand::Bool(value) => Ok(Truth::from_bool(value)),
            Operand::Null => Ok(Truth::Unknown),
            other => Err(FilterEvaluationError::NotACondition(other.value_type())),
        },
    }
}

/// Evaluates `expression` as a value.
pub(super) fn evaluate_value<'a, M: FilterMessage + ?Sized>(
    expression: &'a Expression,
    message: &'a M,
    fuel: &mut Fuel,
) -> EvaluationResult<Operand<'a>> {
    fuel.charge(1)?;
    match expression {
        Expression::Constant(value) => Ok(Operand::from_value_ref(value.as_value_ref())),
        Expression::Property(property) => {
            fuel.charge(message.property_lookup_cost())?;
            Ok(read_property(property, message).map_or(Operand::Null, Operand::from_value_ref))
        }
        Expression::NewIdentifier => Ok(Operand::Uuid(new_unique_identifier())),
        Expression::PropertyByName(name) => {
            let name = evaluate_value(name, message, fuel)?;
            fuel.charge(message.property_lookup_cost())?;
            read_property_by_name(&name, message)
        }
        Expression::Negate(operand) => negate(evaluate_value(operand, message, fuel)?),
        Expression::Identity(operand) => plus(evaluate_value(operand, message, fuel)?),
        Expression::Arithmetic {
            operator,
            left,
            right,
        } => {
            let left = evaluate_value(left, message, fuel)?;
            let right = evaluate_value(right, message, fuel)?;
            // `+` on a string builds a new one: its bytes are charged before it is built.
            if matches!(left, Operand::String(_)) || matches!(right, Operand::String(_)) {
                fuel.charge(text_cost(&left) + text_cost(&right))?;
            }
            arithmetic(*operator, left, right)
        }
        predicate => Ok(match evaluate_condition(predicate, message, fuel)? {
            Truth::True => Operand::Bool(true),
            Truth::False => Operand::Bool(false),
            Truth::Unknown => Operand::Null,
        }),
    }
}

/// Reads a property; `None` when the message does not carry it.
pub(super) fn read_property<'a, M: FilterMessage + ?Sized>(
    property: &PropertyReference,
    message: &'a M,
) -> Option<FilterValueRef<'a>> {
    match property {
        PropertyReference::System(property) => message.system_property(*property),
        PropertyReference::User(name) => message.user_property(name),
    }
}

/// `property(name)`: `sys.X` and `user.X` prefixes select the scope, otherwise user scope.
fn read_property_by_name<'a, M: FilterMessage + ?Sized>(
    name: &Operand<'_>,
    message: &'a M,
) -> EvaluationResult<Operand<'a>> {
    let name = match name {
        Operand::Null => return Ok(Operand::Null),
        Operand::String(name) => name.as_ref(),
        other => {
            return Err(FilterEvaluationError::PropertyNameNotString(
                other.value_type(),
            ));
        }
    };
    let value = match split_scope(name) {
        (Some(true), rest) => {
            let property = SystemProperty::from_name(rest)
                .ok_or_else(|| FilterEvaluationError::UnknownSystemProperty(rest.to_owned()))?;
            message.system_property(property)
        }
        (Some(false), rest) => message.user_property(rest),
        (None, whole) => message.user_property(whole),
    };
    Ok(value.map_or(Operand::Null, Operand::from_value_ref))
}

/// Splits a `sys.` (`Some(true)`) or `user.` (`Some(false)`) prefix off a property name.
fn split_scope(name: &str) -> (Option<bool>, &str) {
    for (prefix, is_system) in [("sys.", true), ("user.", false)] {
        let has_prefix = name
            .get(..prefix.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(prefix));
        if has_prefix {
            return (Some(is_system), name.get(prefix.len()..).unwrap_or(""));
        }
    }
    (None, name)
}

fn evaluate_like<M: FilterMessage + ?Sized>(
    message: &M,
    value: &Expression,
    pattern: &Expression,
    escape: Option<&Expression>,
    compiled: Option<&LikePattern>,
    fuel: &mut Fuel,
) -> EvaluationResult<Truth> {
    let value = evaluate_value(value, message, fuel)?;
    if let Some(compiled) = compiled {
        return match &value {
            Operand::Null => Ok(Truth::Unknown),
            Operand::String(text) => compiled.matches(text, fuel).map(Truth::from_bool),
            other => Err(FilterEvaluationError::IncompatibleOperands {
                operator: "LIKE",
                left: other.value_type(),
                right: ValueType::String,
            }),
        };
    }
    let pattern = evaluate_value(pattern, message, fuel)?;
    let escape = match escape {
        Some(escape) => Some(evaluate_value(escape, message, fuel)?),
        None => None,
    };
    let escape_character = match &escape {
        None => None,
        Some(Operand::Null) => return Ok(Truth::Unknown),
        Some(Operand::String(text)) => {
            let mut characters = text.chars();
            match (characters.next(), characters.next()) {
                (Some(character), None) => Some(character),
                _ => {
                    return Err(FilterEvaluationError::InvalidLikePattern(
                        "the escape must be a single character",
                    ));
                }
            }
        }
        Some(other) => {
            return Err(FilterEvaluationError::IncompatibleOperand {
                operator: "ESCAPE",
                operand: other.value_type(),
            });
        }
    };
    match (&value, &pattern) {
        (Operand::Null, _) | (_, Operand::Null) => Ok(Truth::Unknown),
        (Operand::String(text), Operand::String(pattern)) => {
            fuel.charge(LikePattern::compile_cost(pattern.len()))?;
            LikePattern::compile(pattern, escape_character)
                .map_err(|_| {
                    FilterEvaluationError::InvalidLikePattern(
                        "the pattern ends with its escape character",
                    )
                })?
                .matches(text, fuel)
                .map(Truth::from_bool)
        }
        (left, right) => Err(FilterEvaluationError::IncompatibleOperands {
            operator: "LIKE",
            left: left.value_type(),
            right: right.value_type(),
        }),
    }
}

/// `value IN (list)`: TRUE on the first equal item; otherwise UNKNOWN if the value or any
/// comparison was unknown (SQL-92), else FALSE.
fn evaluate_in<M: FilterMessage + ?Sized>(
    message: &M,
    value: &Expression,
    list: &[Expression],
    fuel: &mut Fuel,
) -> EvaluationResult<Truth> {
    let value = evaluate_value(value, message, fuel)?;
    if value == Operand::Null {
        return Ok(Truth::Unknown);
    }
    let mut result = Truth::False;
    for item in list {
        let item = evaluate_value(item, message, fuel)?;
        fuel.charge(comparison_cost(&value, &item))?;
        match compare(ComparisonOperator::Equal, &value, &item)? {
            Truth::True => return Ok(Truth::True),
            Truth::Unknown => result = Truth::Unknown,
            Truth::False => {}
        }
    }
    Ok(result)
}

/// Steps to compare two operands: the shorter string's bytes (equal strings are read to
/// the end of one), else one.
fn comparison_cost(left: &Operand<'_>, right: &Operand<'_>) -> u64 {
    match (left, right) {
        (Operand::String(left), Operand::String(right)) => left.len().min(right.len()) as u64 + 1,
        _ => 1,
    }
}

/// Bytes an operand adds to a string built from it (a string's length; another value's
/// text form is a few dozen bytes at most).
pub(super) fn text_cost(operand: &Operand<'_>) -> u64 {
    match operand {
        Operand::String(text) => text.len() as u64,
        _ => 48,
    }
}

/// `newid()`: a random (version 4) UUID. Randomness comes from the standard library's
/// per-process random hash keys mixed with a counter; unique, but not cryptographically strong.
fn new_unique_identifier() -> [u8; 16] {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, AtomicOrdering::Relaxed);
    let state = RandomState::new();
    let mut halves = [0u64; 2];
    for (index, half) in halves.iter_mut().enumerate() {
        let mut hasher = state.build_hasher();
        hasher.write_u64(count);
        hasher.write_usize(index);
        *half = hasher.finish();
    }
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&halves[0].to_be_bytes());
    uuid[8..].copy_from_slice(&halves[1].to_be_bytes());
    uuid[6] = (uuid[6] & 0x0f) | 0x40;
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    uuid
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_identifiers_are_version_four_and_distinct() {
        let first = new_unique_identifier();
        let second = new_unique_identifier();
        assert_ne!(first, second);
        assert_eq!(first[6] >> 4, 4);
        assert_eq!(first[8] >> 6, 0b10);
    }

    #[test]
    fn scope_prefixes_split_case_insensitively() {
        assert_eq!(split_scope("SYS.Label"), (Some(true), "Label"));
        assert_eq!(split_scope("user.color"), (Some(false), "color"));
        assert_eq!(split_scope("color"), (None, "color"));
        assert_eq!(split_scope("sy"), (None, "sy"));
    }
}
