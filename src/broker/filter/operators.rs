//! The typing rules of comparison and arithmetic operators, modelled on C# operator binding
//! (the Service Bus documentation: "Operators follow C# implicit conversion semantics").
//!
//! | operands                         | comparisons        | arithmetic                      |
//! |----------------------------------|--------------------|---------------------------------|
//! | integer, integer                 | all                | all; `+ - *` wrap like C#       |
//! | integer / float mixed, or floats | all (as `double`)  | all (as `double`)               |
//! | string, string                   | `=` `<>` (ordinal) | `+` concatenates                |
//! | string, integer/float/bool/uuid  | error              | `+` concatenates the text form  |
//! | bool, bool / uuid, uuid          | `=` `<>`           | error                           |
//! | timestamp, timestamp             | all                | `-` gives a duration            |
//! | timestamp, duration              | error              | `+` `-` give a timestamp        |
//! | duration, duration               | all                | `+` `-`                         |
//! | anything with null (unknown)     | unknown            | null                            |
//!
//! Every other pairing is a [`FilterEvaluationError`]. Integer division or remainder by zero
//! is an error (C# throws); float division follows IEEE 754.

use std::borrow::Cow;
use std::cmp::Ordering;

use super::error::FilterEvaluationError;
use super::evaluate::{Operand, Truth};
use super::syntax::{ArithmeticOperator, ComparisonOperator};
use super::value::{UUID_TEXT_LENGTH, format_uuid};

type EvaluationResult<T> = Result<T, FilterEvaluationError>;

/// Applies a comparison operator.
pub(super) fn compare(
    operator: ComparisonOperator,
    left: &Operand<'_>,
    right: &Operand<'_>,
) -> EvaluationResult<Truth> {
    let incompatible = || FilterEvaluationError::IncompatibleOperands {
        operator: operator.symbol(),
        left: left.value_type(),
        right: right.value_type(),
    };
    let ordering = match (left, right) {
        (Operand::Null, _) | (_, Operand::Null) => return Ok(Truth::Unknown),
        (Operand::Integer(left), Operand::Integer(right)) => Some(left.cmp(right)),
        (Operand::Timestamp(left), Operand::Timestamp(right))
        | (Operand::Duration(left), Operand::Duration(right)) => Some(left.cmp(right)),
        (Operand::String(left), Operand::String(right)) if operator.is_equality() => {
            Some(equality_ordering(left == right))
        }
        (Operand::Bool(left), Operand::Bool(right)) if operator.is_equality() => {
            Some(equality_ordering(left == right))
        }
        (Operand::Uuid(left), Operand::Uuid(right)) if operator.is_equality() => {
            Some(equality_ordering(left == right))
        }
        (left_operand, right_operand) => match (as_float(left_operand), as_float(right_operand)) {
            (Some(left), Some(right)) => left.partial_cmp(&right),
            _ => return Err(incompatible()),
        },
    };
    // `None` only for NaN, where C# makes every comparison false except `!=`.
    let result = match ordering {
        None => operator == ComparisonOperator::NotEqual,
        Some(ordering) => match operator {
            ComparisonOperator::Equal => ordering == Ordering::Equal,
            ComparisonOperator::NotEqual => ordering != Ordering::Equal,
            ComparisonOperator::Less => ordering == Ordering::Less,
            ComparisonOperator::LessOrEqual => ordering != Ordering::Greater,
            ComparisonOperator::Greater => ordering == Ordering::Greater,
            ComparisonOperator::GreaterOrEqual => ordering != Ordering::Less,
        },
    };
    Ok(Truth::from_bool(result))
}

fn equality_ordering(equal: bool) -> Ordering {
    if equal {
        Ordering::Equal
    } else {
        Ordering::Less
    }
}

/// An integer or float as `double` (C# implicit numeric conversion).
fn as_float(operand: &Operand<'_>) -> Option<f64> {
    match *operand {
        // Precision loss above 2^53 matches C#'s implicit long → double conversion.
        Operand::Integer(value) => Some(value as f64),
        Operand::Float(value) => Some(value),
        _ => None,
    }
}

/// Applies a binary arithmetic operator.
pub(super) fn arithmetic<'a>(
    operator: ArithmeticOperator,
    left: Operand<'a>,
    right: Operand<'a>,
) -> EvaluationResult<Operand<'a>> {
    let incompatible =
        |left: &Operand<'_>, right: &Operand<'_>| FilterEvaluationError::IncompatibleOperands {
            operator: operator.symbol(),
            left: left.value_type(),
            right: right.value_type(),
        };
    match (&left, &right) {
        (Operand::Null, _) | (_, Operand::Null) => Ok(Operand::Null),
        (Operand::Integer(left), Operand::Integer(right)) => {
            integer_arithmetic(operator, *left, *right).map(Operand::Integer)
        }
        (Operand::String(_), _) | (_, Operand::String(_)) => {
            if operator != ArithmeticOperator::Add {
                return Err(incompatible(&left, &right));
            }
            concatenate(left, right)
        }
        (Operand::Timestamp(_) | Operand::Duration(_), _) => {
            time_arithmetic(operator, &left, &right).ok_or_else(|| incompatible(&left, &right))?
        }
        (left_operand, right_operand) => match (as_float(left_operand), as_float(right_operand)) {
            (Some(left), Some(right)) => {
                Ok(Operand::Float(float_arithmetic(operator, left, right)))
            }
            _ => Err(incompatible(left_operand, right_operand)),
        },
    }
}

fn integer_arithmetic(
    operator: ArithmeticOperator,
    left: i64,
    right: i64,
) -> EvaluationResult<i64> {
    match operator {
        ArithmeticOperator::Add => Ok(left.wrapping_add(right)),
        ArithmeticOperator::Subtract => Ok(left.wrapping_sub(right)),
        ArithmeticOperator::Multiply => Ok(left.wrapping_mul(right)),
        ArithmeticOperator::Divide | ArithmeticOperator::Remainder if right == 0 => {
            Err(FilterEvaluationError::DivisionByZero)
        }
        ArithmeticOperator::Divide => left
            .checked_div(right)
            .ok_or(FilterEvaluationError::Overflow),
        ArithmeticOperator::Remainder => left
            .checked_rem(right)
            .ok_or(FilterEvaluationError::Overflow),
    }
}

fn float_arithmetic(operator: ArithmeticOperator, left: f64, right: f64) -> f64 {
    match operator {
        ArithmeticOperator::Add => left + right,
        ArithmeticOperator::Subtract => left - right,
        ArithmeticOperator::Multiply => left * right,
        ArithmeticOperator::Divide => left / right,
        ArithmeticOperator::Remainder => left % right,
    }
}

/// `DateTime` / `TimeSpan` arithmetic; `None` when C# has no such operator.
fn time_arithmetic<'a>(
    operator: ArithmeticOperator,
    left: &Operand<'a>,
    right: &Operand<'a>,
) -> Option<EvaluationResult<Operand<'a>>> {
    let overflow = FilterEvaluationError::Overflow;
    let result = match (left, operator, right) {
        (Operand::Timestamp(left), ArithmeticOperator::Subtract, Operand::Timestamp(right)) => {
            left.checked_sub(*right).map(Operand::Duration)
        }
        (Operand::Timestamp(left), ArithmeticOperator::Add, Operand::Duration(right))
        | (Operand::Duration(right), ArithmeticOperator::Add, Operand::Timestamp(left)) => {
            left.checked_add(*right).map(Operand::Timestamp)
        }
        (Operand::Timestamp(left), ArithmeticOperator::Subtract, Operand::Duration(right)) => {
            left.checked_sub(*right).map(Operand::Timestamp)
        }
        (Operand::Duration(left), ArithmeticOperator::Add, Operand::Duration(right)) => {
            left.checked_add(*right).map(Operand::Duration)
        }
        (Operand::Duration(left), ArithmeticOperator::Subtract, Operand::Duration(right)) => {
            left.checked_sub(*right).map(Operand::Duration)
        }
        _ => return None,
    };
    Some(result.ok_or(overflow))
}

/// C# `string + object`: concatenates the text forms; allocates.
fn concatenate<'a>(left: Operand<'a>, right: Operand<'a>) -> EvaluationResult<Operand<'a>> {
    let (Some(left_text), Some(right_text)) = (text_form(&left), text_form(&right)) else {
        return Err(FilterEvaluationError::IncompatibleOperands {
            operator: "+",
            left: left.value_type(),
            right: right.value_type(),
        });
    };
    let mut joined = String::with_capacity(left_text.len() + right_text.len());
    joined.push_str(&left_text);
    joined.push_str(&right_text);
    Ok(Operand::String(Cow::Owned(joined)))
}

/// The text form .NET's `ToString()` gives, for the types whose form is culture-independent.
fn text_form<'b>(operand: &'b Operand<'_>) -> Option<Cow<'b, str>> {
    match operand {
        Operand::String(text) => Some(Cow::Borrowed(text.as_ref())),
        Operand::Integer(value) => Some(Cow::Owned(value.to_string())),
        Operand::Float(value) => Some(Cow::Owned(format_float(*value))),
        Operand::Bool(true) => Some(Cow::Borrowed("True")),
        Operand::Bool(false) => Some(Cow::Borrowed("False")),
        Operand::Uuid(uuid) => {
            let mut buffer = [0u8; UUID_TEXT_LENGTH];
            Some(Cow::Owned(format_uuid(uuid, &mut buffer).to_owned()))
        }
        Operand::Null | Operand::Timestamp(_) | Operand::Duration(_) => None,
    }
}

/// Formats a double like .NET Core's `double.ToString()`: shortest round-trip digits,
/// scientific (`1E+15`, `1E-05`) outside `[1e-4, 1e15)`.
pub(super) fn format_float(value: f64) -> String {
    if value.is_nan() {
        return "NaN".to_owned();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let magnitude = value.abs();
    if magnitude == 0.0 || (1e-4..1e15).contains(&magnitude) {
        return value.to_string();
    }
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let (sign, digits) = match exponent.strip_prefix('-') {
        Some(digits) => ('-', digits),
        None => ('+', exponent),
    };
    format!("{mantissa}E{sign}{digits:0>2}")
}

/// Unary minus.
pub(super) fn negate(operand: Operand<'_>) -> EvaluationResult<Operand<'_>> {
    match operand {
        Operand::Null => Ok(Operand::Null),
        Operand::Integer(value) => Ok(Operand::Integer(value.wrapping_neg())),
        Operand::Float(value) => Ok(Operand::Float(-value)),
        Operand::Duration(value) => value
            .checked_neg()
            .map(Operand::Duration)
            .ok_or(FilterEvaluationError::Overflow),
        other => Err(FilterEvaluationError::IncompatibleOperand {
            operator: "-",
            operand: other.value_type(),
        }),
    }
}

/// Unary plus.
pub(super) fn plus(operand: Operand<'_>) -> EvaluationResult<Operand<'_>> {
    match operand {
        Operand::Null | Operand::Integer(_) | Operand::Float(_) | Operand::Duration(_) => {
            Ok(operand)
        }
        other => Err(FilterEvaluationError::IncompatibleOperand {
            operator: "+",
            operand: other.value_type(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_format_like_dotnet() {
        assert_eq!(format_float(1.5), "1.5");
        assert_eq!(format_float(2.0), "2");
        assert_eq!(format_float(1e15), "1E+15");
        assert_eq!(format_float(123_456_789_012_345.0), "123456789012345");
        assert_eq!(format_float(0.0001), "0.0001");
        assert_eq!(format_float(0.00001), "1E-05");
        assert_eq!(format_float(-2.5e20), "-2.5E+20");
        assert_eq!(format_float(f64::NAN), "NaN");
    }

    #[test]
    fn nan_compares_unequal_to_everything() {
        let nan = Operand::Float(f64::NAN);
        let equal = compare(ComparisonOperator::Equal, &nan, &nan);
        let not_equal = compare(ComparisonOperator::NotEqual, &nan, &nan);
        assert_eq!(equal, Ok(Truth::False));
        assert_eq!(not_equal, Ok(Truth::True));
    }

    #[test]
    fn integer_division_edge_cases_are_errors() {
        let divide = |left, right| {
            arithmetic(
                ArithmeticOperator::Divide,
                Operand::Integer(left),
                Operand::Integer(right),
            )
        };
        assert_eq!(divide(7, 2), Ok(Operand::Integer(3)));
        assert_eq!(divide(-7, 2), Ok(Operand::Integer(-3)));
        assert_eq!(divide(1, 0), Err(FilterEvaluationError::DivisionByZero));
        assert_eq!(divide(i64::MIN, -1), Err(FilterEvaluationError::Overflow));
    }
}
