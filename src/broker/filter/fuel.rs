//! [`Fuel`]: how much work evaluating one message's rules may do.
//!
//! Evaluation charges its fuel before each step that costs more than a constant: a node of
//! the syntax tree, a property lookup (a pass over the message's properties), a string
//! compared or built (its bytes), a `LIKE` match (the text's bytes times the pattern's state
//! words). A step is roughly one byte or word examined, so a budget is a bound on the work
//! and the time a message's filters and actions take, whatever a rule and a message combine
//! into. Running out is a [`FilterEvaluationError::BudgetExceeded`].

use super::error::FilterEvaluationError;

/// Steps a subscription's rules may take on one message unless configured otherwise
/// (`[server] filter_evaluation_budget`): tens of milliseconds of one core at most, and
/// hundreds of times what a 256 KB message costs any usual filter.
pub const DEFAULT_EVALUATION_BUDGET: u64 = 16_000_000;

/// The steps left to one evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fuel {
    /// What the evaluation started with (named in the error when it runs out).
    limit: u64,
    /// What is left.
    remaining: u64,
}

impl Fuel {
    /// `limit` steps.
    pub fn new(limit: u64) -> Fuel {
        Fuel {
            limit,
            remaining: limit,
        }
    }

    /// No bound (tests, and callers that bound the work otherwise).
    pub fn unlimited() -> Fuel {
        Fuel::new(u64::MAX)
    }

    /// Steps taken so far.
    pub fn used(&self) -> u64 {
        self.limit - self.remaining
    }

    /// Takes `steps`, or fails (leaving none) when fewer are left.
    pub fn charge(&mut self, steps: u64) -> Result<(), FilterEvaluationError> {
        match self.remaining.checked_sub(steps) {
            Some(left) => {
                self.remaining = left;
                Ok(())
            }
            None => {
                self.remaining = 0;
                Err(FilterEvaluationError::BudgetExceeded { budget: self.limit })
            }
        }
    }
}
