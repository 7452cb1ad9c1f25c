//! The two failures of this module: [`FilterSyntaxError`] when a SQL filter or rule action is
//! parsed (the broker rejects the rule), and [`FilterEvaluationError`] when a parsed filter or
//! action meets a message it cannot handle (the broker dead-letters or skips the message,
//! following the subscription's `DeadLetteringOnFilterEvaluationExceptions` setting).

use super::value::ValueType;

/// A SQL filter or rule action that could not be parsed, with where it went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("syntax error at line {line}, column {column}: {kind}")]
pub struct FilterSyntaxError {
    /// What was wrong.
    kind: SyntaxErrorKind,
    /// Byte offset into the expression text where the problem starts.
    offset: usize,
    /// 1-based line of `offset`.
    line: usize,
    /// 1-based column of `offset`, counted in characters.
    column: usize,
}

impl FilterSyntaxError {
    /// Builds an error at byte `offset` of `text`, computing its line and column.
    pub(super) fn new(kind: SyntaxErrorKind, text: &str, offset: usize) -> Self {
        let offset = offset.min(text.len());
        let before = text.get(..offset).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |index| index + 1);
        let column = before.get(line_start..).unwrap_or("").chars().count() + 1;
        FilterSyntaxError {
            kind,
            offset,
            line,
            column,
        }
    }

    /// What was wrong.
    pub fn kind(&self) -> &SyntaxErrorKind {
        &self.kind
    }

    /// Byte offset into the expression text where the problem starts.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// 1-based line of the problem.
    pub fn line(&self) -> usize {
        self.line
    }

    /// 1-based column of the problem, in characters.
    pub fn column(&self) -> usize {
        self.column
    }
}

/// The reason a SQL expression was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxErrorKind {
    /// The parser needed one thing and found another.
    #[error("expected {expected}, found {found}")]
    Unexpected {
        /// What the grammar allows here.
        expected: &'static str,
        /// The token that was there instead.
        found: String,
    },
    /// A character that starts no token.
    #[error("unexpected character {0:?}")]
    UnexpectedCharacter(char),
    /// A string literal without its closing quote.
    #[error("unterminated string literal")]
    UnterminatedString,
    /// A `[…]` or `"…"` identifier without its closing delimiter.
    #[error("unterminated delimited identifier")]
    UnterminatedIdentifier,
    /// `[]` or `""`.
    #[error("empty identifier")]
    EmptyIdentifier,
    /// An integer literal beyond the 64-bit signed range.
    #[error("integer literal {0} is outside the 64-bit range")]
    IntegerOutOfRange(String),
    /// A number literal that does not parse (e.g. `1e`).
    #[error("malformed number literal {0}")]
    MalformedNumber(String),
    /// `sys.<name>` naming no system property.
    #[error("unknown system property {0:?}")]
    UnknownSystemProperty(String),
    /// A rule action assigning or removing a read-only system property.
    #[error("system property {0:?} is read-only")]
    ReadOnlySystemProperty(String),
    /// `<scope>.<name>` with a scope other than `sys` or `user`.
    #[error("unknown property scope {0:?}; expected sys or user")]
    UnknownScope(String),
    /// A call to a function the grammar does not define.
    #[error("unknown function {0:?}")]
    UnknownFunction(String),
    /// `@name` without a value supplied for it.
    #[error("no value supplied for parameter {0:?}")]
    UndefinedParameter(String),
    /// A literal `ESCAPE` argument that is not one character.
    #[error("LIKE escape must be a single character, found {0:?}")]
    InvalidEscape(String),
    /// A literal `LIKE` pattern ending in its escape character.
    #[error("LIKE pattern ends with its escape character")]
    DanglingEscape,
    /// A value where a condition is required, or a condition where a value is required.
    #[error("{0}")]
    WrongKind(&'static str),
    /// Too many nested parentheses or operators.
    #[error("expression nests deeper than {0} levels")]
    TooDeep(usize),
    /// The expression text exceeds the service's length limit.
    #[error("expression is longer than {0} characters")]
    TooLong(usize),
    /// A rule action with more statements than the service allows.
    #[error("rule action has more than {0} statements")]
    TooManyStatements(usize),
}

/// A filter or rule action that failed on a particular message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterEvaluationError {
    /// An operator applied to operand types it does not accept (C# binding has no overload).
    #[error("operator {operator} cannot be applied to {left} and {right}")]
    IncompatibleOperands {
        /// The operator, as written in SQL.
        operator: &'static str,
        /// Type of the left operand.
        left: ValueType,
        /// Type of the right operand.
        right: ValueType,
    },
    /// A unary operator applied to an operand type it does not accept.
    #[error("operator {operator} cannot be applied to {operand}")]
    IncompatibleOperand {
        /// The operator, as written in SQL.
        operator: &'static str,
        /// Type of the operand.
        operand: ValueType,
    },
    /// A value used as a condition that is neither boolean nor null.
    #[error("a {0} value cannot be used as a condition")]
    NotACondition(ValueType),
    /// Integer division or remainder by zero.
    #[error("integer division by zero")]
    DivisionByZero,
    /// Integer arithmetic that overflows where .NET throws (`long.MinValue / -1`).
    #[error("integer arithmetic overflow")]
    Overflow,
    /// A `LIKE` pattern or escape computed at run time that is unusable.
    #[error("invalid LIKE pattern: {0}")]
    InvalidLikePattern(&'static str),
    /// `property(name)` given a name that is not a string.
    #[error("property name must be a string, found {0}")]
    PropertyNameNotString(ValueType),
    /// `property('sys.X')` naming no system property.
    #[error("unknown system property {0:?}")]
    UnknownSystemProperty(String),
    /// The evaluation took more steps than its budget allows (`[server]
    /// filter_evaluation_budget`): the work a rule does on a message is bounded.
    #[error("evaluation exceeded its budget of {budget} steps")]
    BudgetExceeded {
        /// The budget, in steps.
        budget: u64,
    },
    /// A rule action storing a value that the system property cannot hold.
    #[error("cannot assign a {value} value to system property {property}")]
    InvalidAssignment {
        /// The canonical name of the target system property.
        property: &'static str,
        /// Type of the value that was computed.
        value: ValueType,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_error_reports_line_and_character_column() {
        let error = FilterSyntaxError::new(SyntaxErrorKind::DanglingEscape, "ab\néé x", 7);
        assert_eq!((error.line(), error.column(), error.offset()), (2, 3, 7));
        assert_eq!(
            error.to_string(),
            "syntax error at line 2, column 3: LIKE pattern ends with its escape character"
        );
    }
}
