//! Recursive-descent parser for the Service Bus SQL dialect (filters and rule actions).
//!
//! Precedence, loosest first: `OR`, `AND`, `NOT`, the predicates (`= <> != < <= > >=`,
//! `[NOT] LIKE`, `[NOT] IN`, `IS [NOT] NULL`), `+ -`, `* / %`, unary `+ -`, then primaries
//! (constants, properties, functions, `EXISTS(…)`, parentheses). Keywords are
//! case-insensitive and reserved: a property called `and` must be written `[and]`.
//!
//! The parser also checks kinds (a condition where a condition is required, a value where a
//! value is required), validates literal `LIKE` patterns, resolves `sys.` names and
//! substitutes `@parameters`, so evaluation never meets a malformed tree. Nesting is capped
//! at [`MAXIMUM_NESTING`] so hostile input cannot exhaust the stack.

use super::error::{FilterSyntaxError, SyntaxErrorKind};
use super::lexer::{Token, TokenKind, is_keyword, is_reserved, tokenize};
use super::like::LikePattern;
use super::message::{SystemProperty, property_names_equal};
use super::syntax::{ArithmeticOperator, ComparisonOperator, Expression, PropertyReference};
use super::value::FilterValue;

/// Deepest nesting of parentheses, `NOT` and unary operators accepted.
pub(super) const MAXIMUM_NESTING: usize = 64;

const VALUE_EXPECTED: &str = "expected a value here, found a condition";
const CONDITION_EXPECTED: &str = "expected a condition here, found a value";

/// Parser state over one expression text.
pub(super) struct Parser<'text, 'parameters> {
    text: &'text str,
    tokens: Vec<Token<'text>>,
    /// Index of the current token; the last token is always [`TokenKind::End`].
    position: usize,
    /// Values for `@name` placeholders.
    parameters: &'parameters [(String, FilterValue)],
    /// Current nesting depth, checked against [`MAXIMUM_NESTING`].
    nesting: usize,
}

type ParseResult<T> = Result<T, FilterSyntaxError>;

impl<'text, 'parameters> Parser<'text, 'parameters> {
    /// Tokenizes `text`.
    pub(super) fn new(
        text: &'text str,
        parameters: &'parameters [(String, FilterValue)],
    ) -> ParseResult<Self> {
        Ok(Parser {
            text,
            tokens: tokenize(text)?,
            position: 0,
            parameters,
            nesting: 0,
        })
    }

    // ----- token helpers -------------------------------------------------------------------

    fn current(&self) -> &Token<'text> {
        // Invariant: `position` never passes the final End token (see `advance`).
        &self.tokens[self.position.min(self.tokens.len() - 1)]
    }

    fn peek_kind(&self, ahead: usize) -> &TokenKind<'text> {
        let index = (self.position + ahead).min(self.tokens.len() - 1);
        &self.tokens[index].kind
    }

    fn advance(&mut self) {
        if self.position + 1 < self.tokens.len() {
            self.position += 1;
        }
    }

    pub(super) fn offset(&self) -> usize {
        self.current().offset
    }

    pub(super) fn error_at(&self, kind: SyntaxErrorKind, offset: usize) -> FilterSyntaxError {
        FilterSyntaxError::new(kind, self.text, offset)
    }

    pub(super) fn unexpected(&self, expected: &'static str) -> FilterSyntaxError {
        let found = self.current().kind.describe();
        self.error_at(
            SyntaxErrorKind::Unexpected { expected, found },
            self.offset(),
        )
    }

    /// Whether the current token is the keyword `keyword` (case-insensitive).
    pub(super) fn at_keyword(&self, keyword: &str) -> bool {
        is_keyword(self.peek_kind(0), keyword)
    }

    pub(super) fn eat_keyword(&mut self, keyword: &str) -> bool {
        let found = self.at_keyword(keyword);
        if found {
            self.advance();
        }
        found
    }

    pub(super) fn eat(&mut self, kind: &TokenKind<'_>) -> bool {
        let found = self.peek_kind(0) == kind;
        if found {
            self.advance();
        }
        found
    }

    fn expect(&mut self, kind: &TokenKind<'_>, expected: &'static str) -> ParseResult<()> {
        if self.eat(kind) {
            Ok(())
        } else {
            Err(self.unexpected(expected))
        }
    }

    pub(super) fn at_end(&self) -> bool {
        *self.peek_kind(0) == TokenKind::End
    }

    fn enter(&mut self) -> ParseResult<()> {
        self.nesting += 1;
        if self.nesting > MAXIMUM_NESTING {
            return Err(self.error_at(SyntaxErrorKind::TooDeep(MAXIMUM_NESTING), self.offset()));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.nesting = self.nesting.saturating_sub(1);
    }

    fn require_value(&self, expression: &Expression, offset: usize) -> ParseResult<()> {
        if expression.is_predicate() {
            return Err(self.error_at(SyntaxErrorKind::WrongKind(VALUE_EXPECTED), offset));
        }
        Ok(())
    }

    fn require_condition(&self, expression: &Expression, offset: usize) -> ParseResult<()> {
        if !expression.can_be_condition() {
            return Err(self.error_at(SyntaxErrorKind::WrongKind(CONDITION_EXPECTED), offset));
        }
        Ok(())
    }

    // ----- entry points --------------------------------------------------------------------

    /// Parses a whole filter: one condition, then the end of the text.
    pub(super) fn parse_filter(mut self) -> ParseResult<Expression> {
        let offset = self.offset();
        let condition = self.parse_or()?;
        if !self.at_end() {
            return Err(self.unexpected("AND, OR or end of input"));
        }
        self.require_condition(&condition, offset)?;
        Ok(condition)
    }

    /// Parses a value expression (`+ - * / %` level) and checks it is a value.
    pub(super) fn parse_value(&mut self) -> ParseResult<Expression> {
        let offset = self.offset();
        let expression = self.parse_additive()?;
        self.require_value(&expression, offset)?;
        Ok(expression)
    }

    // ----- predicates ----------------------------------------------------------------------

    fn parse_or(&mut self) -> ParseResult<Expression> {
        self.parse_chain("OR", Self::parse_and, Expression::Or)
    }

    fn parse_and(&mut self) -> ParseResult<Expression> {
        self.parse_chain("AND", Self::parse_not, Expression::And)
    }

    /// Parses `operand (keyword operand)*` into a flat chain.
    fn parse_chain(
        &mut self,
        keyword: &str,
        operand: fn(&mut Self) -> ParseResult<Expression>,
        build: fn(Vec<Expression>) -> Expression,
    ) -> ParseResult<Expression> {
        let first_offset = self.offset();
        let first = operand(self)?;
        if !self.at_keyword(keyword) {
            return Ok(first);
        }
        self.require_condition(&first, first_offset)?;
        let mut operands = vec![first];
        while self.eat_keyword(keyword) {
            let offset = self.offset();
            let next = operand(self)?;
            self.require_condition(&next, offset)?;
            operands.push(next);
        }
        Ok(build(operands))
    }

    fn parse_not(&mut self) -> ParseResult<Expression> {
        if !self.at_keyword("NOT") {
            return self.parse_predicate();
        }
        self.advance();
        self.enter()?;
        let offset = self.offset();
        let operand = self.parse_not()?;
        self.require_condition(&operand, offset)?;
        self.leave();
        Ok(Expression::Not(Box::new(operand)))
    }

    fn parse_predicate(&mut self) -> ParseResult<Expression> {
        let left_offset = self.offset();
        let left = self.parse_additive()?;
        if let Some(operator) = comparison_operator(self.peek_kind(0)) {
            self.require_value(&left, left_offset)?;
            self.advance();
            let right = self.parse_value()?;
            return Ok(Expression::Comparison {
                operator,
                left: Box::new(left),
                right: Box::new(right),
            });
        }
        let negated = self.at_keyword("NOT")
            && (is_keyword(self.peek_kind(1), "LIKE") || is_keyword(self.peek_kind(1), "IN"));
        if negated {
            self.advance();
        }
        if self.eat_keyword("LIKE") {
            self.require_value(&left, left_offset)?;
            return self.parse_like_rest(negated, left);
        }
        if self.eat_keyword("IN") {
            self.require_value(&left, left_offset)?;
            return self.parse_in_rest(negated, left);
        }
        if self.eat_keyword("IS") {
            let negated = self.eat_keyword("NOT");
            if !self.eat_keyword("NULL") {
                return Err(self.unexpected("NULL"));
            }
            let Expression::Property(property) = left else {
                return Err(self.error_at(
                    SyntaxErrorKind::WrongKind("IS NULL applies only to a property"),
                    left_offset,
                ));
            };
            return Ok(Expression::IsNull { negated, property });
        }
        Ok(left)
    }

    fn parse_like_rest(&mut self, negated: bool, value: Expression) -> ParseResult<Expression> {
        let pattern_offset = self.offset();
        let pattern = self.parse_value()?;
        let escape = if self.eat_keyword("ESCAPE") {
            let escape_offset = self.offset();
            let escape = self.parse_value()?;
            if let Expression::Constant(FilterValue::String(text)) = &escape
                && text.chars().count() != 1
            {
                let kind = SyntaxErrorKind::InvalidEscape(text.clone());
                return Err(self.error_at(kind, escape_offset));
            }
            Some(Box::new(escape))
        } else {
            None
        };
        let mut compiled = None;
        if let Expression::Constant(FilterValue::String(pattern_text)) = &pattern {
            let escape_character = match escape.as_deref() {
                Some(Expression::Constant(FilterValue::String(text))) => text.chars().next(),
                _ => None,
            };
            let Ok(pattern) = LikePattern::compile(pattern_text, escape_character) else {
                return Err(self.error_at(SyntaxErrorKind::DanglingEscape, pattern_offset));
            };
            // An escape computed at run time: the pattern is compiled once it is known.
            let escape_is_known = matches!(
                escape.as_deref(),
                None | Some(Expression::Constant(FilterValue::String(_)))
            );
            compiled = escape_is_known.then(|| Box::new(pattern));
        }
        Ok(Expression::Like {
            negated,
            value: Box::new(value),
            pattern: Box::new(pattern),
            escape,
            compiled,
        })
    }

    fn parse_in_rest(&mut self, negated: bool, value: Expression) -> ParseResult<Expression> {
        self.expect(&TokenKind::LeftParenthesis, "'(' after IN")?;
        let mut list = vec![self.parse_value()?];
        while self.eat(&TokenKind::Comma) {
            list.push(self.parse_value()?);
        }
        self.expect(&TokenKind::RightParenthesis, "',' or ')'")?;
        Ok(Expression::In {
            negated,
            value: Box::new(value),
            list,
        })
    }

    // ----- values --------------------------------------------------------------------------

    fn parse_additive(&mut self) -> ParseResult<Expression> {
        self.parse_binary(Self::parse_multiplicative, |kind| match kind {
            TokenKind::Plus => Some(ArithmeticOperator::Add),
            TokenKind::Minus => Some(ArithmeticOperator::Subtract),
            _ => None,
        })
    }

    fn parse_multiplicative(&mut self) -> ParseResult<Expression> {
        self.parse_binary(Self::parse_unary, |kind| match kind {
            TokenKind::Star => Some(ArithmeticOperator::Multiply),
            TokenKind::Slash => Some(ArithmeticOperator::Divide),
            TokenKind::Percent => Some(ArithmeticOperator::Remainder),
            _ => None,
        })
    }

    /// Parses a left-associative chain of one precedence level.
    fn parse_binary(
        &mut self,
        operand: fn(&mut Self) -> ParseResult<Expression>,
        operator_of: fn(&TokenKind<'_>) -> Option<ArithmeticOperator>,
    ) -> ParseResult<Expression> {
        let left_offset = self.offset();
        let mut left = operand(self)?;
        while let Some(operator) = operator_of(self.peek_kind(0)) {
            self.require_value(&left, left_offset)?;
            self.advance();
            let right_offset = self.offset();
            let right = operand(self)?;
            self.require_value(&right, right_offset)?;
            left = Expression::Arithmetic {
                operator,
                left: Box::new(left),
                right: Box::new(right),
            };
        }
        Ok(left)
    }

    fn parse_unary(&mut self) -> ParseResult<Expression> {
        let negate = match self.peek_kind(0) {
            TokenKind::Minus => true,
            TokenKind::Plus => false,
            _ => return self.parse_primary(),
        };
        self.advance();
        if let (true, TokenKind::Integer(magnitude)) = (negate, self.peek_kind(0)) {
            // `-9223372036854775808` is only representable when folded into the literal.
            let value = 0i64.wrapping_sub_unsigned(*magnitude);
            self.advance();
            return Ok(Expression::Constant(FilterValue::Integer(value)));
        }
        self.enter()?;
        let offset = self.offset();
        let operand = self.parse_unary()?;
        self.require_value(&operand, offset)?;
        self.leave();
        Ok(if negate {
            Expression::Negate(Box::new(operand))
        } else {
            Expression::Identity(Box::new(operand))
        })
    }

    fn parse_primary(&mut self) -> ParseResult<Expression> {
        let offset = self.offset();
        let expression = match self.peek_kind(0).clone() {
            TokenKind::Integer(magnitude) => {
                let value = i64::try_from(magnitude).map_err(|_| {
                    let kind = SyntaxErrorKind::IntegerOutOfRange(magnitude.to_string());
                    self.error_at(kind, offset)
                })?;
                Expression::Constant(FilterValue::Integer(value))
            }
            TokenKind::Float(value) => Expression::Constant(FilterValue::Float(value)),
            TokenKind::String(text) => Expression::Constant(FilterValue::String(text)),
            TokenKind::Parameter(name) => Expression::Constant(self.parameter(name, offset)?),
            TokenKind::DelimitedIdentifier(name) => {
                Expression::Property(PropertyReference::User(name.into_boxed_str()))
            }
            TokenKind::LeftParenthesis => {
                self.advance();
                self.enter()?;
                let inner = self.parse_or()?;
                self.expect(&TokenKind::RightParenthesis, "')'")?;
                self.leave();
                return Ok(inner);
            }
            TokenKind::Word(word) => return self.parse_word(word),
            _ => return Err(self.unexpected("an expression")),
        };
        self.advance();
        Ok(expression)
    }

    fn parameter(&self, name: &str, offset: usize) -> ParseResult<FilterValue> {
        self.parameters
            .iter()
            .find(|(key, _)| property_names_equal(key.strip_prefix('@').unwrap_or(key), name))
            .map(|(_, value)| value.clone())
            .ok_or_else(|| {
                self.error_at(
                    SyntaxErrorKind::UndefinedParameter(format!("@{name}")),
                    offset,
                )
            })
    }

    /// A word in value position: constant keyword, `EXISTS`, function call or property.
    fn parse_word(&mut self, word: &str) -> ParseResult<Expression> {
        let constant = match word.to_ascii_uppercase().as_str() {
            "TRUE" => Some(FilterValue::Bool(true)),
            "FALSE" => Some(FilterValue::Bool(false)),
            "NULL" => Some(FilterValue::Null),
            _ => None,
        };
        if let Some(value) = constant {
            self.advance();
            return Ok(Expression::Constant(value));
        }
        if is_reserved(word) && !word.eq_ignore_ascii_case("EXISTS") {
            return Err(self.unexpected("an expression"));
        }
        if word.eq_ignore_ascii_case("EXISTS") {
            self.advance();
            self.expect(&TokenKind::LeftParenthesis, "'(' after EXISTS")?;
            let property = self.parse_property_reference()?;
            self.expect(&TokenKind::RightParenthesis, "')'")?;
            return Ok(Expression::Exists(property));
        }
        if *self.peek_kind(1) == TokenKind::LeftParenthesis {
            return self.parse_function(word);
        }
        Ok(Expression::Property(self.parse_property_reference()?))
    }

    fn parse_function(&mut self, name: &str) -> ParseResult<Expression> {
        let offset = self.offset();
        self.advance();
        self.advance();
        if name.eq_ignore_ascii_case("newid") {
            self.expect(&TokenKind::RightParenthesis, "')'")?;
            return Ok(Expression::NewIdentifier);
        }
        if name.eq_ignore_ascii_case("property") || name.eq_ignore_ascii_case("p") {
            self.enter()?;
            let argument = self.parse_value()?;
            self.expect(&TokenKind::RightParenthesis, "')'")?;
            self.leave();
            return Ok(Expression::PropertyByName(Box::new(argument)));
        }
        let kind = SyntaxErrorKind::UnknownFunction(name.to_owned());
        Err(self.error_at(kind, offset))
    }

    /// Parses `[sys. | user.] name` where name is a word or a delimited identifier.
    pub(super) fn parse_property_reference(&mut self) -> ParseResult<PropertyReference> {
        let offset = self.offset();
        let scope = match self.peek_kind(0).clone() {
            TokenKind::DelimitedIdentifier(name) => {
                self.advance();
                return Ok(PropertyReference::User(name.into_boxed_str()));
            }
            TokenKind::Word(word) if *self.peek_kind(1) == TokenKind::Dot => word,
            TokenKind::Word(word) => {
                if is_reserved(word) {
                    return Err(self.unexpected("a property name"));
                }
                self.advance();
                return Ok(PropertyReference::User(word.into()));
            }
            _ => return Err(self.unexpected("a property name")),
        };
        let is_system = scope.eq_ignore_ascii_case("sys");
        if !is_system && !scope.eq_ignore_ascii_case("user") {
            return Err(self.error_at(SyntaxErrorKind::UnknownScope(scope.to_owned()), offset));
        }
        self.advance();
        self.advance();
        let name_offset = self.offset();
        let name = match self.peek_kind(0).clone() {
            TokenKind::Word(word) => word.to_owned(),
            TokenKind::DelimitedIdentifier(name) => name,
            _ => return Err(self.unexpected("a property name after the scope")),
        };
        self.advance();
        if !is_system {
            return Ok(PropertyReference::User(name.into_boxed_str()));
        }
        SystemProperty::from_name(&name)
            .map(PropertyReference::System)
            .ok_or_else(|| self.error_at(SyntaxErrorKind::UnknownSystemProperty(name), name_offset))
    }
}

fn comparison_operator(kind: &TokenKind<'_>) -> Option<ComparisonOperator> {
    match kind {
        TokenKind::Equal => Some(ComparisonOperator::Equal),
        TokenKind::NotEqual => Some(ComparisonOperator::NotEqual),
        TokenKind::Less => Some(ComparisonOperator::Less),
        TokenKind::LessOrEqual => Some(ComparisonOperator::LessOrEqual),
        TokenKind::Greater => Some(ComparisonOperator::Greater),
        TokenKind::GreaterOrEqual => Some(ComparisonOperator::GreaterOrEqual),
        _ => None,
    }
}
