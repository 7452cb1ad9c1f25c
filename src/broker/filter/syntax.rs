//! The syntax tree shared by SQL filters and SQL rule actions.
//!
//! One [`Expression`] type holds both predicates (comparisons, `AND`, `LIKE`, …, which yield
//! true / false / unknown) and value expressions (constants, properties, arithmetic). The parser
//! guarantees that predicates only appear where a condition is expected and values only where
//! a value is expected, so the evaluator never has to guess. `AND` / `OR` chains are stored
//! flat so that long chains do not deepen the tree.

use super::like::LikePattern;
use super::message::SystemProperty;
use super::value::FilterValue;

/// A reference to one property: `sys.<name>`, `user.<name>` or a bare `<name>`.
#[derive(Debug, Clone, PartialEq)]
pub enum PropertyReference {
    /// A broker property.
    System(SystemProperty),
    /// An application property, by the name written in the expression.
    User(Box<str>),
}

/// A node of the syntax tree.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expression {
    /// A literal, `TRUE` / `FALSE` / `NULL`, or a substituted `@parameter`.
    Constant(FilterValue),
    /// A property read.
    Property(PropertyReference),
    /// `newid()`: a fresh random UUID per evaluation.
    NewIdentifier,
    /// `property(name)` / `p(name)`: a property whose name is computed.
    PropertyByName(Box<Expression>),
    /// Unary `-`.
    Negate(Box<Expression>),
    /// Unary `+`.
    Identity(Box<Expression>),
    /// `+ - * / %`.
    Arithmetic {
        operator: ArithmeticOperator,
        left: Box<Expression>,
        right: Box<Expression>,
    },
    /// `= <> != < <= > >=`.
    Comparison {
        operator: ComparisonOperator,
        left: Box<Expression>,
        right: Box<Expression>,
    },
    /// `a AND b AND …`, two or more operands.
    And(Vec<Expression>),
    /// `a OR b OR …`, two or more operands.
    Or(Vec<Expression>),
    /// `NOT a`.
    Not(Box<Expression>),
    /// `value [NOT] LIKE pattern [ESCAPE escape]`.
    Like {
        negated: bool,
        value: Box<Expression>,
        pattern: Box<Expression>,
        escape: Option<Box<Expression>>,
        /// The pattern compiled when the rule was parsed, when it and its escape are
        /// constants (a pattern computed at run time is compiled per evaluation).
        compiled: Option<Box<LikePattern>>,
    },
    /// `value [NOT] IN (list…)`.
    In {
        negated: bool,
        value: Box<Expression>,
        list: Vec<Expression>,
    },
    /// `property IS [NOT] NULL`.
    IsNull {
        negated: bool,
        property: PropertyReference,
    },
    /// `EXISTS(property)`.
    Exists(PropertyReference),
}

/// Binary arithmetic operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ArithmeticOperator {
    Add,
    Subtract,
    Multiply,
    Divide,
    Remainder,
}

impl ArithmeticOperator {
    /// The operator as written in SQL.
    pub(super) fn symbol(self) -> &'static str {
        match self {
            ArithmeticOperator::Add => "+",
            ArithmeticOperator::Subtract => "-",
            ArithmeticOperator::Multiply => "*",
            ArithmeticOperator::Divide => "/",
            ArithmeticOperator::Remainder => "%",
        }
    }
}

/// Binary comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ComparisonOperator {
    Equal,
    NotEqual,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

impl ComparisonOperator {
    /// The operator as written in SQL.
    pub(super) fn symbol(self) -> &'static str {
        match self {
            ComparisonOperator::Equal => "=",
            ComparisonOperator::NotEqual => "<>",
            ComparisonOperator::Less => "<",
            ComparisonOperator::LessOrEqual => "<=",
            ComparisonOperator::Greater => ">",
            ComparisonOperator::GreaterOrEqual => ">=",
        }
    }

    /// Whether this operator only asks for equality (allowed on every type).
    pub(super) fn is_equality(self) -> bool {
        matches!(
            self,
            ComparisonOperator::Equal | ComparisonOperator::NotEqual
        )
    }
}

impl Expression {
    /// Whether this node is a predicate (yields a truth value rather than a value).
    pub(super) fn is_predicate(&self) -> bool {
        matches!(
            self,
            Expression::Comparison { .. }
                | Expression::And(_)
                | Expression::Or(_)
                | Expression::Not(_)
                | Expression::Like { .. }
                | Expression::In { .. }
                | Expression::IsNull { .. }
                | Expression::Exists(_)
        )
    }

    /// Whether this node can stand where a condition is expected: a predicate, or a value that
    /// may be boolean at run time (a property, `TRUE`, `FALSE`, `NULL`).
    pub(super) fn can_be_condition(&self) -> bool {
        match self {
            Expression::Constant(value) => {
                matches!(value, FilterValue::Bool(_) | FilterValue::Null)
            }
            Expression::Property(_) | Expression::PropertyByName(_) => true,
            other => other.is_predicate(),
        }
    }
}
