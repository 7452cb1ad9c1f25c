//! Turns SQL filter and rule-action text into tokens.
//!
//! Owns the lexical rules of the Service Bus SQL dialect: single-quoted strings with `''`,
//! `[…]` identifiers with `]]`, `"…"` identifiers with `""`, integer / decimal / exponent
//! numbers, `@parameters`, and the operator punctuation. Keywords are not decided here: a
//! [`TokenKind::Word`] is a keyword or a regular identifier depending on where the parser
//! meets it. Every token keeps its byte offset so errors can name a column.

use super::error::{FilterSyntaxError, SyntaxErrorKind};

/// One token and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token<'text> {
    /// What was read.
    pub(super) kind: TokenKind<'text>,
    /// Byte offset of the token's first character.
    pub(super) offset: usize,
}

/// The token kinds of the dialect.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum TokenKind<'text> {
    /// A regular identifier or keyword: a letter followed by letters, digits or `_`.
    Word(&'text str),
    /// A `[…]` or `"…"` identifier, unescaped; never a keyword.
    DelimitedIdentifier(String),
    /// A `'…'` string constant, unescaped.
    String(String),
    /// An integer constant's magnitude; up to 2^63 so that `-9223372036854775808` parses.
    Integer(u64),
    /// A decimal or approximate (exponent) constant.
    Float(f64),
    /// `@name`, without the `@`.
    Parameter(&'text str),
    LeftParenthesis,
    RightParenthesis,
    Comma,
    Semicolon,
    Dot,
    Equal,
    /// `<>` or `!=`.
    NotEqual,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    Plus,
    Minus,
    Star,
    Slash,
    Percent,
    /// End of the text.
    End,
}

impl TokenKind<'_> {
    /// A short description for error messages.
    pub(super) fn describe(&self) -> String {
        let punctuation = match self {
            TokenKind::Word(word) => return format!("{word:?}"),
            TokenKind::DelimitedIdentifier(name) => return format!("identifier [{name}]"),
            TokenKind::String(text) => return format!("string {text:?}"),
            TokenKind::Integer(value) => return format!("number {value}"),
            TokenKind::Float(value) => return format!("number {value}"),
            TokenKind::Parameter(name) => return format!("parameter @{name}"),
            TokenKind::End => return "end of input".to_owned(),
            TokenKind::LeftParenthesis => "(",
            TokenKind::RightParenthesis => ")",
            TokenKind::Comma => ",",
            TokenKind::Semicolon => ";",
            TokenKind::Dot => ".",
            TokenKind::Equal => "=",
            TokenKind::NotEqual => "<>",
            TokenKind::Less => "<",
            TokenKind::LessOrEqual => "<=",
            TokenKind::Greater => ">",
            TokenKind::GreaterOrEqual => ">=",
            TokenKind::Plus => "+",
            TokenKind::Minus => "-",
            TokenKind::Star => "*",
            TokenKind::Slash => "/",
            TokenKind::Percent => "%",
        };
        format!("'{punctuation}'")
    }
}

/// Splits `text` into tokens, ending with [`TokenKind::End`].
pub(super) fn tokenize(text: &str) -> Result<Vec<Token<'_>>, FilterSyntaxError> {
    let mut lexer = Lexer { text, offset: 0 };
    let mut tokens = Vec::new();
    loop {
        let token = lexer.next_token()?;
        let at_end = token.kind == TokenKind::End;
        tokens.push(token);
        if at_end {
            return Ok(tokens);
        }
    }
}

struct Lexer<'text> {
    text: &'text str,
    /// Byte offset of the next unread character.
    offset: usize,
}

impl<'text> Lexer<'text> {
    fn rest(&self) -> &'text str {
        self.text.get(self.offset..).unwrap_or("")
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        self.rest().chars().nth(1)
    }

    fn error(&self, kind: SyntaxErrorKind, offset: usize) -> FilterSyntaxError {
        FilterSyntaxError::new(kind, self.text, offset)
    }

    /// Advances while `accept` holds and returns the consumed slice.
    fn take_while(&mut self, accept: impl Fn(char) -> bool) -> &'text str {
        let start = self.offset;
        let rest = self.rest();
        let length = rest
            .find(|character| !accept(character))
            .unwrap_or(rest.len());
        self.offset += length;
        self.text.get(start..self.offset).unwrap_or("")
    }

    fn next_token(&mut self) -> Result<Token<'text>, FilterSyntaxError> {
        self.take_while(char::is_whitespace);
        let offset = self.offset;
        let Some(character) = self.peek() else {
            return Ok(Token {
                kind: TokenKind::End,
                offset,
            });
        };
        let kind = match character {
            '\'' => {
                TokenKind::String(self.quoted('\'', '\'', SyntaxErrorKind::UnterminatedString)?)
            }
            '[' => self.delimited_identifier('[', ']')?,
            '"' => self.delimited_identifier('"', '"')?,
            '0'..='9' => self.number()?,
            '.' if self.peek_second().is_some_and(|next| next.is_ascii_digit()) => self.number()?,
            '@' => {
                self.offset += 1;
                let name = self.take_while(is_identifier_continuation);
                if name.is_empty() {
                    return Err(self.error(SyntaxErrorKind::UnexpectedCharacter('@'), offset));
                }
                TokenKind::Parameter(name)
            }
            character if character.is_alphabetic() => {
                TokenKind::Word(self.take_while(is_identifier_continuation))
            }
            _ => self.punctuation(character, offset)?,
        };
        Ok(Token { kind, offset })
    }

    fn punctuation(
        &mut self,
        character: char,
        offset: usize,
    ) -> Result<TokenKind<'text>, FilterSyntaxError> {
        let next = self.peek_second();
        let (kind, length) = match (character, next) {
            ('<', Some('>')) | ('!', Some('=')) => (TokenKind::NotEqual, 2),
            ('<', Some('=')) => (TokenKind::LessOrEqual, 2),
            ('>', Some('=')) => (TokenKind::GreaterOrEqual, 2),
            ('<', _) => (TokenKind::Less, 1),
            ('>', _) => (TokenKind::Greater, 1),
            ('=', _) => (TokenKind::Equal, 1),
            ('(', _) => (TokenKind::LeftParenthesis, 1),
            (')', _) => (TokenKind::RightParenthesis, 1),
            (',', _) => (TokenKind::Comma, 1),
            (';', _) => (TokenKind::Semicolon, 1),
            ('.', _) => (TokenKind::Dot, 1),
            ('+', _) => (TokenKind::Plus, 1),
            ('-', _) => (TokenKind::Minus, 1),
            ('*', _) => (TokenKind::Star, 1),
            ('/', _) => (TokenKind::Slash, 1),
            ('%', _) => (TokenKind::Percent, 1),
            _ => {
                return Err(self.error(SyntaxErrorKind::UnexpectedCharacter(character), offset));
            }
        };
        self.offset += length;
        Ok(kind)
    }

    /// Reads text between `open` and `close`, where a doubled `close` stands for itself.
    fn quoted(
        &mut self,
        open: char,
        close: char,
        unterminated: SyntaxErrorKind,
    ) -> Result<String, FilterSyntaxError> {
        let start = self.offset;
        self.offset += open.len_utf8();
        let mut content = String::new();
        loop {
            let piece = self.take_while(|character| character != close);
            content.push_str(piece);
            if self.peek().is_none() {
                return Err(self.error(unterminated, start));
            }
            self.offset += close.len_utf8();
            if self.peek() == Some(close) {
                content.push(close);
                self.offset += close.len_utf8();
            } else {
                return Ok(content);
            }
        }
    }

    fn delimited_identifier(
        &mut self,
        open: char,
        close: char,
    ) -> Result<TokenKind<'text>, FilterSyntaxError> {
        let start = self.offset;
        let name = self.quoted(open, close, SyntaxErrorKind::UnterminatedIdentifier)?;
        if name.is_empty() {
            return Err(self.error(SyntaxErrorKind::EmptyIdentifier, start));
        }
        Ok(TokenKind::DelimitedIdentifier(name))
    }

    /// Reads `digits [. digits] [E [+|-] digits]` (or `. digits …`).
    fn number(&mut self) -> Result<TokenKind<'text>, FilterSyntaxError> {
        let start = self.offset;
        self.take_while(|character| character.is_ascii_digit());
        let mut is_integer = true;
        if self.peek() == Some('.') {
            is_integer = false;
            self.offset += 1;
            self.take_while(|character| character.is_ascii_digit());
        }
        if matches!(self.peek(), Some('e' | 'E')) {
            is_integer = false;
            self.offset += 1;
            if matches!(self.peek(), Some('+' | '-')) {
                self.offset += 1;
            }
            let exponent = self.take_while(|character| character.is_ascii_digit());
            if exponent.is_empty() {
                let literal = self.text.get(start..self.offset).unwrap_or("").to_owned();
                return Err(self.error(SyntaxErrorKind::MalformedNumber(literal), start));
            }
        }
        let literal = self.text.get(start..self.offset).unwrap_or("");
        if is_integer {
            match literal.parse::<u64>() {
                Ok(magnitude) if magnitude <= i64::MIN.unsigned_abs() => {
                    Ok(TokenKind::Integer(magnitude))
                }
                _ => Err(self.error(
                    SyntaxErrorKind::IntegerOutOfRange(literal.to_owned()),
                    start,
                )),
            }
        } else {
            literal
                .parse::<f64>()
                .ok()
                .filter(|value| value.is_finite())
                .map(TokenKind::Float)
                .ok_or_else(|| {
                    self.error(SyntaxErrorKind::MalformedNumber(literal.to_owned()), start)
                })
        }
    }
}

/// Words that cannot be used as bare property names (keywords, matched ignoring case).
const RESERVED_WORDS: &[&str] = &[
    "AND", "OR", "NOT", "LIKE", "ESCAPE", "IN", "IS", "NULL", "TRUE", "FALSE", "EXISTS",
];

/// Whether `kind` is the word `keyword`, ignoring case.
pub(super) fn is_keyword(kind: &TokenKind<'_>, keyword: &str) -> bool {
    matches!(kind, TokenKind::Word(word) if word.eq_ignore_ascii_case(keyword))
}

/// Whether `word` is reserved and so needs `[…]` to name a property.
pub(super) fn is_reserved(word: &str) -> bool {
    RESERVED_WORDS
        .iter()
        .any(|reserved| reserved.eq_ignore_ascii_case(word))
}

fn is_identifier_continuation(character: char) -> bool {
    character.is_alphanumeric() || character == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<TokenKind<'_>> {
        tokenize(text)
            .map(|tokens| tokens.into_iter().map(|token| token.kind).collect())
            .unwrap_or_default()
    }

    #[test]
    fn reads_operators_literals_and_identifiers() {
        assert_eq!(
            kinds("sys.Label<>'it''s' AND [a]]b]!=1.5e2"),
            vec![
                TokenKind::Word("sys"),
                TokenKind::Dot,
                TokenKind::Word("Label"),
                TokenKind::NotEqual,
                TokenKind::String("it's".to_owned()),
                TokenKind::Word("AND"),
                TokenKind::DelimitedIdentifier("a]b".to_owned()),
                TokenKind::NotEqual,
                TokenKind::Float(150.0),
                TokenKind::End,
            ]
        );
        assert_eq!(
            kinds("\"x\"\"y\" <= .5 @p1"),
            vec![
                TokenKind::DelimitedIdentifier("x\"y".to_owned()),
                TokenKind::LessOrEqual,
                TokenKind::Float(0.5),
                TokenKind::Parameter("p1"),
                TokenKind::End,
            ]
        );
    }

    #[test]
    fn integer_range_allows_the_magnitude_of_the_minimum() {
        assert_eq!(
            kinds("9223372036854775808"),
            vec![
                TokenKind::Integer(9_223_372_036_854_775_808),
                TokenKind::End
            ]
        );
        let error = tokenize("x = 9223372036854775809").err();
        assert_eq!(error.map(|error| error.column()), Some(5));
    }

    #[test]
    fn unterminated_string_points_at_its_quote() {
        let error = tokenize("a = 'abc").err();
        assert_eq!(
            error.map(|error| (error.kind().clone(), error.column())),
            Some((SyntaxErrorKind::UnterminatedString, 5))
        );
    }
}
