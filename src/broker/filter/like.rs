//! `LIKE` pattern matching: `%` matches any run of characters (possibly empty), `_` matches
//! exactly one character, and an optional escape character makes the character after it
//! literal (`'ABC\%' ESCAPE '\'` matches `ABC%`). Matching is case-sensitive and works on
//! Unicode scalar values.
//!
//! A pattern is compiled once into a [`LikePattern`]: a nondeterministic automaton with one
//! state per pattern element, simulated bit-parallel (Shift-And), so matching reads each
//! character of the text once and costs `⌈states / 64⌉` word operations a character — linear
//! in the text, whatever the pattern; nothing backtracks. A constant pattern is compiled when
//! its rule is parsed; a pattern computed at run time is compiled per evaluation, its cost
//! charged like the match's. Every step is charged to the evaluation's [`Fuel`] before it is
//! taken.

use super::error::FilterEvaluationError;
use super::fuel::Fuel;

/// A pattern whose last character is its escape character, which escapes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DanglingEscape;

/// One unit of a pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Element {
    /// `%`.
    AnySequence,
    /// `_`.
    AnyCharacter,
    /// A character matched exactly (possibly an escaped wildcard).
    Literal(char),
}

/// A compiled `LIKE` pattern. State `i` means "the first `i` elements matched"; the pattern
/// matches when the state after its last element is reached at the end of the text. Runs of
/// `%` are folded into one, so one step closes the states over the `%`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LikePattern {
    /// Elements in the pattern (states are `0..=elements`).
    elements: usize,
    /// 64-bit words in a state set.
    words: usize,
    /// Bit `i`: element `i + 1` is `_` (state `i` advances on any character).
    any_character: Vec<u64>,
    /// Bit `i`: element `i` is `%` (state `i` stays on any character).
    stay: Vec<u64>,
    /// Bit `i`: element `i + 1` is `%` (state `i` also stands in state `i + 1`).
    skip: Vec<u64>,
    /// For each ASCII character, 1 + its mask's index in `ascii_masks`; 0: not in the pattern.
    ascii_index: [u8; 128],
    /// Bit `i` of mask `n`: element `i + 1` is that ASCII character; `words` words a mask.
    ascii_masks: Vec<u64>,
    /// Other characters of the pattern, sorted, each with the states it advances (sparse, so
    /// a long pattern of distinct characters costs memory in its length only).
    other_literals: Vec<(char, Vec<u32>)>,
    /// The last element is `%`: once the final state is reached, the text's rest matches.
    ends_with_any_sequence: bool,
}

impl LikePattern {
    /// Compiles `pattern` with `escape` as its escape character.
    pub(super) fn compile(pattern: &str, escape: Option<char>) -> Result<Self, DanglingEscape> {
        let mut elements = Vec::new();
        let mut position = 0;
        while let Some((element, next)) = next_element(pattern, position, escape)? {
            position = next;
            if !(element == Element::AnySequence && elements.last() == Some(&Element::AnySequence))
            {
                elements.push(element);
            }
        }
        let words = (elements.len() + 1).div_ceil(64);
        let mut compiled = LikePattern {
            elements: elements.len(),
            words,
            any_character: vec![0; words],
            stay: vec![0; words],
            skip: vec![0; words],
            ascii_index: [0; 128],
            ascii_masks: Vec::new(),
            other_literals: Vec::new(),
            ends_with_any_sequence: elements.last() == Some(&Element::AnySequence),
        };
        for (index, element) in elements.iter().enumerate() {
            // Element `index + 1` in the state numbering: it leaves state `index`.
            match *element {
                Element::AnySequence => {
                    set_bit(&mut compiled.skip, index);
                    set_bit(&mut compiled.stay, index + 1);
                }
                Element::AnyCharacter => set_bit(&mut compiled.any_character, index),
                Element::Literal(character) => compiled.add_literal(character, index),
            }
        }
        compiled
            .other_literals
            .sort_unstable_by_key(|(character, _)| *character);
        Ok(compiled)
    }

    fn add_literal(&mut self, character: char, state: usize) {
        if character.is_ascii() {
            let slot = &mut self.ascii_index[character as usize];
            if *slot == 0 {
                self.ascii_masks
                    .resize(self.ascii_masks.len() + self.words, 0);
                // At most 128 ASCII characters: the index fits.
                *slot = (self.ascii_masks.len() / self.words) as u8;
            }
            let start = (usize::from(*slot) - 1) * self.words;
            set_bit(&mut self.ascii_masks[start..start + self.words], state);
        } else {
            match self
                .other_literals
                .iter_mut()
                .find(|(c, _)| *c == character)
            {
                Some((_, states)) => states.push(state as u32),
                None => self.other_literals.push((character, vec![state as u32])),
            }
        }
    }

    /// What compiling a pattern of `length` bytes costs, charged before a pattern computed
    /// at run time is compiled: a pass over it and its masks.
    pub(super) fn compile_cost(length: usize) -> u64 {
        let words = (length + 1).div_ceil(64) as u64;
        length as u64 + words * 4
    }

    /// Whether `text` matches, charging `fuel` a step per character and state word (and one
    /// per state a non-ASCII character of the pattern advances).
    pub(super) fn matches(
        &self,
        text: &str,
        fuel: &mut Fuel,
    ) -> Result<bool, FilterEvaluationError> {
        let words = self.words;
        fuel.charge((text.len() as u64 + 1) * words as u64)?;
        let mut current = vec![0u64; words];
        let mut next = vec![0u64; words];
        current[0] = 1;
        self.close(&mut current);
        let final_word = self.elements / 64;
        let final_bit = 1u64 << (self.elements % 64);
        for character in text.chars() {
            if self.ends_with_any_sequence && current[final_word] & final_bit != 0 {
                return Ok(true);
            }
            let literal: &[u64] = match u8::try_from(character) {
                Ok(byte) if byte < 128 => match self.ascii_index[usize::from(byte)] {
                    0 => &[],
                    slot => {
                        let start = (usize::from(slot) - 1) * words;
                        &self.ascii_masks[start..start + words]
                    }
                },
                _ => &[],
            };
            let mut carry = 0;
            for word in 0..words {
                let advancing = self.any_character[word] | literal.get(word).copied().unwrap_or(0);
                let advanced = current[word] & advancing;
                next[word] = (advanced << 1) | carry | (current[word] & self.stay[word]);
                carry = advanced >> 63;
            }
            if !character.is_ascii()
                && let Ok(found) = self
                    .other_literals
                    .binary_search_by_key(&character, |(c, _)| *c)
            {
                let states = &self.other_literals[found].1;
                fuel.charge(states.len() as u64)?;
                for &state in states {
                    let state = state as usize;
                    if current[state / 64] & (1 << (state % 64)) != 0 {
                        set_bit(&mut next, state + 1);
                    }
                }
            }
            self.close(&mut next);
            std::mem::swap(&mut current, &mut next);
            if current.iter().all(|word| *word == 0) {
                return Ok(false);
            }
        }
        Ok(current[final_word] & final_bit != 0)
    }

    /// Adds to `states` every state one `%` away from it.
    fn close(&self, states: &mut [u64]) {
        let mut carry = 0;
        for (word, skip) in states.iter_mut().zip(&self.skip) {
            let skipping = *word & skip;
            let shifted = (skipping << 1) | carry;
            carry = skipping >> 63;
            *word |= shifted;
        }
    }
}

fn set_bit(words: &mut [u64], bit: usize) {
    words[bit / 64] |= 1 << (bit % 64);
}

/// Reads the element at byte `position`; `None` at the end of the pattern.
fn next_element(
    pattern: &str,
    position: usize,
    escape: Option<char>,
) -> Result<Option<(Element, usize)>, DanglingEscape> {
    let mut characters = pattern.get(position..).unwrap_or("").chars();
    let Some(first) = characters.next() else {
        return Ok(None);
    };
    let after_first = position + first.len_utf8();
    if Some(first) == escape {
        let escaped = characters.next().ok_or(DanglingEscape)?;
        return Ok(Some((
            Element::Literal(escaped),
            after_first + escaped.len_utf8(),
        )));
    }
    let element = match first {
        '%' => Element::AnySequence,
        '_' => Element::AnyCharacter,
        literal => Element::Literal(literal),
    };
    Ok(Some((element, after_first)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn like(text: &str, pattern: &str, escape: Option<char>) -> Result<bool, DanglingEscape> {
        let compiled = LikePattern::compile(pattern, escape)?;
        Ok(compiled
            .matches(text, &mut Fuel::unlimited())
            .expect("unlimited fuel"))
    }

    fn matches(text: &str, pattern: &str) -> bool {
        like(text, pattern, Some('\\')).unwrap_or(false)
    }

    /// The textbook definition, by recursion: the oracle the automaton is checked against.
    fn reference(text: &[char], pattern: &[char]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some(('%', rest)) => (0..=text.len()).any(|skip| reference(&text[skip..], rest)),
            Some(('_', rest)) => !text.is_empty() && reference(&text[1..], rest),
            Some((literal, rest)) => text.first() == Some(literal) && reference(&text[1..], rest),
        }
    }

    #[test]
    fn wildcards_match_sequences_and_single_characters() {
        assert!(matches("service bus", "%bus%"));
        assert!(matches("bus", "%bus%"));
        assert!(matches("", "%"));
        assert!(matches("", "%%"));
        assert!(matches("", ""));
        assert!(!matches("a", ""));
        assert!(!matches("", "_"));
        assert!(matches("abc", "a_c"));
        assert!(!matches("abbc", "a_c"));
        assert!(matches("abbc", "a%c"));
        assert!(matches("aXbXc", "%X%X_"));
        assert!(!matches("abc", "ab"));
        assert!(!matches("ab", "abc"));
        assert!(matches("mississippi", "m%iss%ppi"));
        assert!(!matches("mississippi", "m%iss%ppx"));
        assert!(matches("ééa", "_%a"));
        assert!(matches("aéb", "a%é%b"));
        assert!(!matches("aeb", "a%é%b"));
        assert!(!matches("ABC", "abc"));
    }

    #[test]
    fn escape_makes_wildcards_literal() {
        assert!(matches("ABC%", "ABC\\%"));
        assert!(!matches("ABCD", "ABC\\%"));
        assert!(matches("a_b", "a\\_b"));
        assert!(!matches("axb", "a\\_b"));
        assert!(matches("a\\b", "a\\\\b"));
        assert_eq!(like("a", "a\\", Some('\\')), Err(DanglingEscape));
        assert_eq!(like("a%", "a!%", Some('!')), Ok(true));
        assert_eq!(like("a\\x", "a\\%", None), Ok(true));
    }

    #[test]
    fn patterns_longer_than_a_word_match_like_the_definition() {
        // 150 elements: three words of states, with carries between them.
        let pattern = format!("{}%{}_z", "a".repeat(70), "b".repeat(77));
        let hit = format!("{}xyz{}qz", "a".repeat(70), "b".repeat(77));
        let miss = format!("{}xyz{}qy", "a".repeat(70), "b".repeat(77));
        assert!(matches(&hit, &pattern));
        assert!(!matches(&miss, &pattern));
        assert!(!matches(&hit[1..], &pattern));
    }

    #[test]
    fn small_alphabets_agree_with_the_definition() {
        // Every pattern over {a, b, %, _} up to 5 long against every text over {a, b} up to
        // 6 long.
        fn strings(alphabet: &[char], up_to: usize) -> Vec<String> {
            let mut all = vec![String::new()];
            let mut last = vec![String::new()];
            for _ in 0..up_to {
                last = last
                    .iter()
                    .flat_map(|prefix| alphabet.iter().map(move |c| format!("{prefix}{c}")))
                    .collect();
                all.extend(last.iter().cloned());
            }
            all
        }
        let patterns = strings(&['a', 'b', '%', '_'], 5);
        let texts = strings(&['a', 'b'], 6);
        for pattern in &patterns {
            let compiled = LikePattern::compile(pattern, None).expect("no escape");
            let pattern_chars: Vec<char> = pattern.chars().collect();
            for text in &texts {
                let text_chars: Vec<char> = text.chars().collect();
                assert_eq!(
                    compiled.matches(text, &mut Fuel::unlimited()),
                    Ok(reference(&text_chars, &pattern_chars)),
                    "{text:?} LIKE {pattern:?}"
                );
            }
        }
    }

    #[test]
    fn the_cost_is_linear_in_the_text() {
        // The pattern that made the old backtracking matcher quadratic: a long run of `a`
        // then a character the text never has, against a long run of `a`.
        let pattern = format!("%{} b", "a".repeat(998));
        let compiled = LikePattern::compile(&pattern, None).expect("no escape");
        let text = "a".repeat(200_000);
        let mut fuel = Fuel::new(u64::MAX);
        assert_eq!(compiled.matches(&text, &mut fuel), Ok(false));
        // 1,000 elements: 16 words a character.
        assert_eq!(fuel.used(), (text.len() as u64 + 1) * 16);
    }

    #[test]
    fn running_out_of_fuel_stops_before_matching() {
        let compiled = LikePattern::compile("%b", None).expect("no escape");
        let mut fuel = Fuel::new(10);
        assert!(matches!(
            compiled.matches(&"a".repeat(100), &mut fuel),
            Err(FilterEvaluationError::BudgetExceeded { .. })
        ));
    }
}
