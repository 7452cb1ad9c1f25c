//! [`SqlRuleAction`]: the `SET` / `REMOVE` statements a rule applies to a message copy that its
//! filter selected.
//!
//! Grammar (Service Bus "SQL rule action syntax"): statements are `SET <property> =
//! <expression>` or `REMOVE <property>`, separated by `;` or `,` (a trailing `;` is allowed).
//! Statements run in order, and each sees the changes of those before it
//! (`SET a = 1; SET b = a + 1` gives `b = 2`). The action never mutates the message: it returns
//! the [`PropertyChange`]s for the broker to apply to its copy.

use super::error::{FilterEvaluationError, FilterSyntaxError, SyntaxErrorKind};
use super::evaluate::{evaluate_value, read_property, text_cost};
use super::fuel::Fuel;
use super::lexer::TokenKind;
use super::message::{FilterMessage, SystemProperty, SystemPropertyKind, property_names_equal};
use super::parser::Parser;
use super::sql_filter::check_length;
use super::syntax::{Expression, PropertyReference};
use super::value::{FilterValue, FilterValueRef, UUID_TEXT_LENGTH, format_uuid};

/// Most statements one action may hold (the service's "expressions per rule action" quota).
pub const MAXIMUM_STATEMENTS: usize = 32;

/// A property a rule action writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PropertyTarget {
    /// A writable broker property.
    System(SystemProperty),
    /// An application property, by the name written in the action (match it ignoring case).
    User(String),
}

/// One change for the broker to apply, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyChange {
    /// Create or overwrite the property. For system targets the value already has the
    /// property's type (text as [`FilterValue::String`], …) or is [`FilterValue::Null`]
    /// (clear it).
    Set {
        /// What to write.
        target: PropertyTarget,
        /// The new value.
        value: FilterValue,
    },
    /// Remove the property (for a system property: clear it).
    Remove {
        /// What to remove.
        target: PropertyTarget,
    },
}

/// One parsed statement.
#[derive(Debug, Clone, PartialEq)]
enum Statement {
    Set {
        target: PropertyReference,
        value: Expression,
    },
    Remove(PropertyReference),
}

/// A parsed SQL rule action.
#[derive(Debug, Clone, PartialEq)]
pub struct SqlRuleAction {
    /// The text as given, echoed back by rule enumeration.
    expression: String,
    /// The statements, in order; at least one.
    statements: Vec<Statement>,
}

impl SqlRuleAction {
    /// Parses an action such as `SET sys.Label = 'routed'; REMOVE priority`.
    pub fn parse(expression: &str) -> Result<SqlRuleAction, FilterSyntaxError> {
        SqlRuleAction::parse_with_parameters(expression, &[])
    }

    /// Parses an action whose `@name` placeholders take the given values.
    pub fn parse_with_parameters(
        expression: &str,
        parameters: &[(String, FilterValue)],
    ) -> Result<SqlRuleAction, FilterSyntaxError> {
        check_length(expression)?;
        let mut parser = Parser::new(expression, parameters)?;
        let mut statements = Vec::new();
        loop {
            if statements.len() == MAXIMUM_STATEMENTS {
                let kind = SyntaxErrorKind::TooManyStatements(MAXIMUM_STATEMENTS);
                return Err(parser.error_at(kind, parser.offset()));
            }
            statements.push(parse_statement(&mut parser)?);
            let mut separated = false;
            while parser.eat(&TokenKind::Semicolon) || parser.eat(&TokenKind::Comma) {
                separated = true;
            }
            if parser.at_end() {
                break;
            }
            if !separated {
                return Err(parser.unexpected("';', ',' or end of input"));
            }
        }
        Ok(SqlRuleAction {
            expression: expression.to_owned(),
            statements,
        })
    }

    /// The original expression text.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Computes the changes this action makes to `message`, in order.
    pub fn apply<M: FilterMessage + ?Sized>(
        &self,
        message: &M,
    ) -> Result<Vec<PropertyChange>, FilterEvaluationError> {
        self.apply_within(message, &mut Fuel::unlimited())
    }

    /// [`Self::apply`], drawing on `fuel`.
    pub fn apply_within<M: FilterMessage + ?Sized>(
        &self,
        message: &M,
        fuel: &mut Fuel,
    ) -> Result<Vec<PropertyChange>, FilterEvaluationError> {
        let mut changes = Vec::with_capacity(self.statements.len());
        for statement in &self.statements {
            let view = ChangedMessage {
                original: message,
                changes: &changes,
            };
            let change = match statement {
                Statement::Set { target, value } => {
                    let computed = evaluate_value(value, &view, fuel)?;
                    fuel.charge(text_cost(&computed))?;
                    let computed = computed.into_filter_value();
                    let current = read_property(target, &view);
                    PropertyChange::Set {
                        target: to_target(target),
                        value: convert_for_target(target, computed, current)?,
                    }
                }
                Statement::Remove(target) => PropertyChange::Remove {
                    target: to_target(target),
                },
            };
            changes.push(change);
        }
        Ok(changes)
    }
}

fn parse_statement(parser: &mut Parser<'_, '_>) -> Result<Statement, FilterSyntaxError> {
    let is_set = parser.eat_keyword("SET");
    if !is_set && !parser.eat_keyword("REMOVE") {
        return Err(parser.unexpected("SET or REMOVE"));
    }
    let target_offset = parser.offset();
    let target = parser.parse_property_reference()?;
    if let PropertyReference::System(property) = target
        && property.writable_kind().is_none()
    {
        let kind = SyntaxErrorKind::ReadOnlySystemProperty(property.name().to_owned());
        return Err(parser.error_at(kind, target_offset));
    }
    if !is_set {
        return Ok(Statement::Remove(target));
    }
    if !parser.eat(&TokenKind::Equal) {
        return Err(parser.unexpected("'='"));
    }
    let value = parser.parse_value()?;
    Ok(Statement::Set { target, value })
}

fn to_target(reference: &PropertyReference) -> PropertyTarget {
    match reference {
        PropertyReference::System(property) => PropertyTarget::System(*property),
        PropertyReference::User(name) => PropertyTarget::User(name.to_string()),
    }
}

/// "SET performs implicit conversion if possible when the expression type and the existing
/// property type are different": an integer stored into a float user property stays a float;
/// system properties take their own type (a UUID becomes its text for text properties).
fn convert_for_target(
    target: &PropertyReference,
    value: FilterValue,
    current: Option<FilterValueRef<'_>>,
) -> Result<FilterValue, FilterEvaluationError> {
    let property = match target {
        PropertyReference::User(_) => {
            return Ok(match (current, value) {
                // Precision loss above 2^53 matches C#'s implicit long → double conversion.
                (Some(FilterValueRef::Float(_)), FilterValue::Integer(number)) => {
                    FilterValue::Float(number as f64)
                }
                (_, value) => value,
            });
        }
        PropertyReference::System(property) => *property,
    };
    let kind = property.writable_kind();
    match (kind, value) {
        (_, FilterValue::Null) => Ok(FilterValue::Null),
        (Some(SystemPropertyKind::Text), FilterValue::String(text)) => {
            Ok(FilterValue::String(text))
        }
        (Some(SystemPropertyKind::Text), FilterValue::Uuid(uuid)) => {
            let mut buffer = [0u8; UUID_TEXT_LENGTH];
            Ok(FilterValue::String(
                format_uuid(&uuid, &mut buffer).to_owned(),
            ))
        }
        (Some(SystemPropertyKind::Timestamp), value @ FilterValue::Timestamp(_))
        | (Some(SystemPropertyKind::Duration), value @ FilterValue::Duration(_))
        | (Some(SystemPropertyKind::Bool), value @ FilterValue::Bool(_)) => Ok(value),
        (_, value) => Err(FilterEvaluationError::InvalidAssignment {
            property: property.name(),
            value: value.value_type(),
        }),
    }
}

/// The message as seen by a later statement: earlier changes first, then the original.
struct ChangedMessage<'a, M: ?Sized> {
    original: &'a M,
    changes: &'a [PropertyChange],
}

impl<M: FilterMessage + ?Sized> ChangedMessage<'_, M> {
    /// The latest change to a property matching `is_target`: `Some(Some(value))` when set,
    /// `Some(None)` when removed, `None` when untouched.
    fn latest_change(
        &self,
        is_target: impl Fn(&PropertyTarget) -> bool,
    ) -> Option<Option<FilterValueRef<'_>>> {
        self.changes.iter().rev().find_map(|change| match change {
            PropertyChange::Set { target, value } if is_target(target) => {
                Some(Some(value.as_value_ref()))
            }
            PropertyChange::Remove { target } if is_target(target) => Some(None),
            _ => None,
        })
    }
}

impl<M: FilterMessage + ?Sized> FilterMessage for ChangedMessage<'_, M> {
    fn system_property(&self, property: SystemProperty) -> Option<FilterValueRef<'_>> {
        let changed = self.latest_change(|target| *target == PropertyTarget::System(property));
        match changed {
            Some(value) => value,
            None => self.original.system_property(property),
        }
    }

    fn user_property(&self, name: &str) -> Option<FilterValueRef<'_>> {
        let changed = self.latest_change(|target| {
            matches!(target, PropertyTarget::User(changed) if property_names_equal(changed, name))
        });
        match changed {
            Some(value) => value,
            None => self.original.user_property(name),
        }
    }

    fn property_lookup_cost(&self) -> u64 {
        self.original.property_lookup_cost() + self.changes.len() as u64
    }
}
