//! Subscription rule filters and actions, with Azure Service Bus semantics.
//!
//! A subscription rule is a [`Filter`] (true, false, a [`SqlFilter`] or a
//! [`CorrelationFilter`]) plus an optional [`SqlRuleAction`]. The broker parses rules once when
//! they are created (a [`FilterSyntaxError`] rejects the rule) and evaluates them against each
//! message published to the topic through the [`FilterMessage`] trait, which its message type
//! implements. A [`FilterEvaluationError`] means the message could not be evaluated: the broker
//! dead-letters it or skips the subscription, per `DeadLetteringOnFilterEvaluationExceptions`.
//!
//! This module is pure: no I/O, no clock, no broker types; it never mutates a message (actions
//! return [`PropertyChange`]s). It does not know about rule names, `$Default`, or how many rules
//! a subscription may hold.
//!
//! # Layout
//! - `value` — [`FilterValue`] / [`FilterValueRef`] and UUID text helpers.
//! - `message` — [`FilterMessage`] and the [`SystemProperty`] catalogue.
//! - `error` — [`FilterSyntaxError`], [`FilterEvaluationError`].
//! - `lexer`, `parser`, `syntax` — SQL text → syntax tree.
//! - `evaluate`, `operators`, `like` — syntax tree × message → truth / values.
//! - `fuel` — [`Fuel`], the bound on the work one evaluation does.
//! - `sql_filter`, `rule_action`, `correlation` — the public rule parts.

mod correlation;
mod error;
mod evaluate;
mod fuel;
mod lexer;
mod like;
mod message;
mod operators;
mod parser;
mod rule_action;
mod sql_filter;
mod syntax;
mod value;

#[cfg(test)]
mod correlation_tests;
#[cfg(test)]
mod rule_action_tests;
#[cfg(test)]
mod sql_filter_tests;
#[cfg(test)]
mod test_message;

pub use correlation::CorrelationFilter;
pub use error::{FilterEvaluationError, FilterSyntaxError, SyntaxErrorKind};
pub use fuel::{DEFAULT_EVALUATION_BUDGET, Fuel};
pub use message::{FilterMessage, SystemProperty, SystemPropertyKind, property_names_equal};
pub use rule_action::{MAXIMUM_STATEMENTS, PropertyChange, PropertyTarget, SqlRuleAction};
pub use sql_filter::{MAXIMUM_EXPRESSION_LENGTH, SqlFilter};
pub use value::{
    FilterValue, FilterValueRef, UUID_TEXT_LENGTH, ValueType, format_uuid, parse_uuid,
};

/// The filter of a subscription rule.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Matches every message (`TrueFilter`, the `$Default` rule; same as SQL `1=1`).
    True,
    /// Matches no message (`FalseFilter`; same as SQL `1=0`).
    False,
    /// A SQL expression.
    Sql(SqlFilter),
    /// Equality on system and user properties.
    Correlation(CorrelationFilter),
}

impl Filter {
    /// Whether `message` is selected by this filter.
    pub fn evaluate<M: FilterMessage + ?Sized>(
        &self,
        message: &M,
    ) -> Result<bool, FilterEvaluationError> {
        self.evaluate_within(message, &mut Fuel::unlimited())
    }

    /// [`Self::evaluate`], drawing on `fuel` (see [`Fuel`]).
    pub fn evaluate_within<M: FilterMessage + ?Sized>(
        &self,
        message: &M,
        fuel: &mut Fuel,
    ) -> Result<bool, FilterEvaluationError> {
        fuel.charge(1)?;
        match self {
            Filter::True => Ok(true),
            Filter::False => Ok(false),
            Filter::Sql(filter) => filter.evaluate_within(message, fuel),
            Filter::Correlation(filter) => {
                fuel.charge(filter.lookups() * message.property_lookup_cost())?;
                Ok(filter.matches(message))
            }
        }
    }
}
