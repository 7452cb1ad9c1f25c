//! [`SqlFilter`]: a subscription rule's SQL filter, parsed once and evaluated per message.
//!
//! The filter keeps its original text so the broker can echo it when rules are enumerated.
//! Evaluation reads the message through [`FilterMessage`] and allocates only when a string
//! concatenation (`'a' + prop`) is evaluated.

use super::error::{FilterEvaluationError, FilterSyntaxError, SyntaxErrorKind};
use super::evaluate::{Truth, evaluate_condition};
use super::fuel::Fuel;
use super::message::FilterMessage;
use super::parser::Parser;
use super::syntax::Expression;
use super::value::FilterValue;

/// Longest filter or action text the service accepts, in characters.
pub const MAXIMUM_EXPRESSION_LENGTH: usize = 1024;

/// A parsed SQL filter expression.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlFilter {
    /// The text as given, echoed back by rule enumeration.
    expression: String,
    /// The parsed condition; validated by the parser, so evaluation meets no syntax issue.
    condition: Expression,
}

impl SqlFilter {
    /// Parses a filter expression such as `sys.Label LIKE '%bus%' AND quantity > 10`.
    pub fn parse(expression: &str) -> Result<SqlFilter, FilterSyntaxError> {
        SqlFilter::parse_with_parameters(expression, &[])
    }

    /// Parses a filter whose `@name` placeholders take the given values (the `Parameters` of a
    /// Service Bus `SqlFilter`; names may be given with or without `@`, and match ignoring
    /// case).
    pub fn parse_with_parameters(
        expression: &str,
        parameters: &[(String, FilterValue)],
    ) -> Result<SqlFilter, FilterSyntaxError> {
        check_length(expression)?;
        let condition = Parser::new(expression, parameters)?.parse_filter()?;
        Ok(SqlFilter {
            expression: expression.to_owned(),
            condition,
        })
    }

    /// The original expression text.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Whether `message` matches: the condition must be TRUE (unknown does not match).
    pub fn evaluate<M: FilterMessage + ?Sized>(
        &self,
        message: &M,
    ) -> Result<bool, FilterEvaluationError> {
        self.evaluate_within(message, &mut Fuel::unlimited())
    }

    /// [`Self::evaluate`], drawing on `fuel`.
    pub fn evaluate_within<M: FilterMessage + ?Sized>(
        &self,
        message: &M,
        fuel: &mut Fuel,
    ) -> Result<bool, FilterEvaluationError> {
        Ok(evaluate_condition(&self.condition, message, fuel)? == Truth::True)
    }
}

/// Rejects texts over [`MAXIMUM_EXPRESSION_LENGTH`] characters.
pub(super) fn check_length(expression: &str) -> Result<(), FilterSyntaxError> {
    match expression.char_indices().nth(MAXIMUM_EXPRESSION_LENGTH) {
        Some((offset, _)) => Err(FilterSyntaxError::new(
            SyntaxErrorKind::TooLong(MAXIMUM_EXPRESSION_LENGTH),
            expression,
            offset,
        )),
        None => Ok(()),
    }
}
