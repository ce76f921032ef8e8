//! HBase's filter language: the strings the shell takes as `FILTER => "..."`, parsed into a
//! [`Filter`].
//!
//! ```text
//! expr    := or
//! or      := and ("OR" and)*
//! and     := unary ("AND" unary)*
//! unary   := "(" expr ")" | Name "(" [arg ("," arg)*] ")"
//! arg     := 'quoted string' ('' for a quote) | integer | true | false | < | <= | = | != | > | >=
//! ```
//!
//! AND binds tighter than OR. Comparisons take HBase's comparator strings; the engine compares
//! bytes, so only `binary:` is accepted. The filters are those the engine has: `PrefixFilter`,
//! `ColumnPrefixFilter`, `QualifierFilter`, `ValueFilter`, `SingleColumnValueFilter`,
//! `PageFilter`, `KeyOnlyFilter`, `FirstKeyOnlyFilter`, `ColumnRangeFilter` and
//! `ColumnPaginationFilter` (whose offset may also be a quoted qualifier: the page starts at
//! that column). `SKIP`, `WHILE` and other filters are refused with a message saying so.

use bytes::Bytes;

use crate::filter::{ColumnOffset, Filter};
use crate::mutation::CompareOp;
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Str(Vec<u8>),
    Int(i64),
    Op(CompareOp),
    Open,
    Close,
    Comma,
}

fn bad(reason: impl Into<String>) -> Error {
    Error::invalid("filter", reason)
}

fn tokens(text: &str) -> Result<Vec<Token>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b' ' | b'\t' | b'\n' | b'\r' => i += 1,
            b'(' => {
                out.push(Token::Open);
                i += 1;
            }
            b')' => {
                out.push(Token::Close);
                i += 1;
            }
            b',' => {
                out.push(Token::Comma);
                i += 1;
            }
            b'\'' => {
                let mut s = Vec::new();
                i += 1;
                loop {
                    match bytes.get(i) {
                        None => return Err(bad(format!("unterminated string in `{text}`"))),
                        Some(b'\'') if bytes.get(i + 1) == Some(&b'\'') => {
                            s.push(b'\'');
                            i += 2;
                        }
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(b) => {
                            s.push(*b);
                            i += 1;
                        }
                    }
                }
                out.push(Token::Str(s));
            }
            b'<' | b'>' | b'=' | b'!' => {
                let two = bytes.get(i + 1) == Some(&b'=');
                let op = match (c, two) {
                    (b'<', true) => CompareOp::LessOrEqual,
                    (b'<', false) => CompareOp::Less,
                    (b'>', true) => CompareOp::GreaterOrEqual,
                    (b'>', false) => CompareOp::Greater,
                    (b'=', _) => CompareOp::Equal,
                    (b'!', true) => CompareOp::NotEqual,
                    _ => return Err(bad(format!("unknown operator at `{}`", &text[i..]))),
                };
                out.push(Token::Op(op));
                i += if two && c != b'=' { 2 } else { 1 };
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while bytes.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
                let n = text[start..i].parse().map_err(|_| bad(format!("bad number `{}`", &text[start..i])))?;
                out.push(Token::Int(n));
            }
            c if c.is_ascii_alphabetic() => {
                let start = i;
                while bytes.get(i).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_') {
                    i += 1;
                }
                out.push(Token::Word(text[start..i].to_string()));
            }
            _ => return Err(bad(format!("unexpected `{}` in `{text}`", char::from(c)))),
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn expect(&mut self, want: Token, what: &str) -> Result<()> {
        match self.next() {
            Some(t) if t == want => Ok(()),
            other => Err(bad(format!("expected {what}, found {other:?}"))),
        }
    }

    fn keyword(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w)) if w == word)
    }

    fn or(&mut self) -> Result<Filter> {
        let mut terms = vec![self.and()?];
        while self.keyword("OR") {
            self.at += 1;
            terms.push(self.and()?);
        }
        Ok(if terms.len() == 1 { terms.remove(0) } else { Filter::Or(terms) })
    }

    fn and(&mut self) -> Result<Filter> {
        let mut terms = vec![self.unary()?];
        while self.keyword("AND") {
            self.at += 1;
            terms.push(self.unary()?);
        }
        Ok(if terms.len() == 1 { terms.remove(0) } else { Filter::And(terms) })
    }

    fn unary(&mut self) -> Result<Filter> {
        match self.next() {
            Some(Token::Open) => {
                let f = self.or()?;
                self.expect(Token::Close, "`)`")?;
                Ok(f)
            }
            Some(Token::Word(w)) if w == "SKIP" || w == "WHILE" => {
                Err(bad(format!("{w} is not supported: the engine filters cells, not rows as they stream")))
            }
            Some(Token::Word(name)) => {
                self.expect(Token::Open, &format!("`(` after {name}"))?;
                let mut args = Vec::new();
                if self.peek() != Some(&Token::Close) {
                    loop {
                        match self.next() {
                            Some(t @ (Token::Str(_) | Token::Int(_) | Token::Op(_) | Token::Word(_))) => args.push(t),
                            other => return Err(bad(format!("{name}: expected an argument, found {other:?}"))),
                        }
                        match self.next() {
                            Some(Token::Comma) => continue,
                            Some(Token::Close) => break,
                            other => return Err(bad(format!("{name}: expected `,` or `)`, found {other:?}"))),
                        }
                    }
                } else {
                    self.at += 1;
                }
                build(&name, &args)
            }
            other => Err(bad(format!("expected a filter, found {other:?}"))),
        }
    }
}

fn string(name: &str, args: &[Token], i: usize) -> Result<Bytes> {
    match args.get(i) {
        Some(Token::Str(s)) => Ok(Bytes::copy_from_slice(s)),
        other => Err(bad(format!("{name}: argument {} must be a quoted string, found {other:?}", i + 1))),
    }
}

fn int(name: &str, args: &[Token], i: usize) -> Result<usize> {
    match args.get(i) {
        Some(Token::Int(n)) if *n >= 0 => Ok(*n as usize),
        other => Err(bad(format!("{name}: argument {} must be a non-negative integer, found {other:?}", i + 1))),
    }
}

fn boolean(name: &str, args: &[Token], i: usize) -> Result<bool> {
    match args.get(i) {
        Some(Token::Word(w)) if w.eq_ignore_ascii_case("true") => Ok(true),
        Some(Token::Word(w)) if w.eq_ignore_ascii_case("false") => Ok(false),
        other => Err(bad(format!("{name}: argument {} must be true or false, found {other:?}", i + 1))),
    }
}

fn op(name: &str, args: &[Token], i: usize) -> Result<CompareOp> {
    match args.get(i) {
        Some(Token::Op(op)) => Ok(*op),
        other => {
            Err(bad(format!("{name}: argument {} must be a comparison (<, <=, =, !=, >=, >), found {other:?}", i + 1)))
        }
    }
}

/// A comparator string: `binary:bytes` (or plain bytes, compared the same way).
fn comparator(name: &str, args: &[Token], i: usize) -> Result<Bytes> {
    let s = string(name, args, i)?;
    let Some(colon) = s.iter().position(|b| *b == b':') else { return Ok(s) };
    match &s[..colon] {
        b"binary" => Ok(s.slice(colon + 1..)),
        other => Err(bad(format!(
            "{name}: comparator `{}` is not supported (the engine compares bytes: use binary:)",
            String::from_utf8_lossy(other)
        ))),
    }
}

fn arity(name: &str, args: &[Token], counts: &[usize]) -> Result<()> {
    if counts.contains(&args.len()) {
        return Ok(());
    }
    Err(bad(format!("{name} takes {counts:?} arguments, not {}", args.len())))
}

fn build(name: &str, args: &[Token]) -> Result<Filter> {
    Ok(match name {
        "PrefixFilter" => {
            arity(name, args, &[1])?;
            Filter::Prefix(string(name, args, 0)?)
        }
        "ColumnPrefixFilter" => {
            arity(name, args, &[1])?;
            Filter::ColumnPrefix(string(name, args, 0)?)
        }
        "QualifierFilter" => {
            arity(name, args, &[2])?;
            Filter::Qualifier(op(name, args, 0)?, comparator(name, args, 1)?)
        }
        "ValueFilter" => {
            arity(name, args, &[2])?;
            Filter::Value(op(name, args, 0)?, comparator(name, args, 1)?)
        }
        "SingleColumnValueFilter" => {
            arity(name, args, &[4, 6])?;
            let filter_if_missing = if args.len() == 6 { boolean(name, args, 4)? } else { false };
            if args.len() == 6 && !boolean(name, args, 5)? {
                return Err(bad("SingleColumnValueFilter: latestVersionOnly = false is not supported"));
            }
            Filter::SingleColumnValue {
                family: string(name, args, 0)?,
                qualifier: string(name, args, 1)?,
                op: op(name, args, 2)?,
                value: comparator(name, args, 3)?,
                filter_if_missing,
            }
        }
        "PageFilter" => {
            arity(name, args, &[1])?;
            Filter::Page(int(name, args, 0)?)
        }
        "KeyOnlyFilter" => {
            arity(name, args, &[0])?;
            Filter::KeyOnly
        }
        "FirstKeyOnlyFilter" => {
            arity(name, args, &[0])?;
            Filter::FirstKeyOnly
        }
        "ColumnRangeFilter" => {
            arity(name, args, &[4])?;
            // An empty bound leaves that side open, as in HBase.
            let bound = |b: Bytes| (!b.is_empty()).then_some(b);
            Filter::ColumnRange {
                min: bound(string(name, args, 0)?),
                min_inclusive: boolean(name, args, 1)?,
                max: bound(string(name, args, 2)?),
                max_inclusive: boolean(name, args, 3)?,
            }
        }
        "ColumnPaginationFilter" => {
            arity(name, args, &[2])?;
            let offset = match args.get(1) {
                Some(Token::Str(q)) => ColumnOffset::Qualifier(Bytes::copy_from_slice(q)),
                _ => ColumnOffset::Count(int(name, args, 1)?),
            };
            Filter::ColumnPagination { limit: int(name, args, 0)?, offset }
        }
        other => return Err(bad(format!("unknown or unsupported filter `{other}`"))),
    })
}

impl Filter {
    /// Parses HBase's filter language (see the module documentation), as the shell's
    /// `FILTER => "..."` takes it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming what is wrong: a syntax error, an unknown filter, a
    /// comparator other than `binary:`, `SKIP`/`WHILE`.
    pub fn parse(text: &str) -> Result<Filter> {
        let mut p = Parser { tokens: tokens(text)?, at: 0 };
        let f = p.or()?;
        if let Some(t) = p.peek() {
            return Err(bad(format!("unexpected {t:?} after the filter in `{text}`")));
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn single_filters() {
        assert_eq!(Filter::parse("PrefixFilter('row')").unwrap(), Filter::Prefix(b("row")));
        assert_eq!(
            Filter::parse("ValueFilter (>=, 'binary:it''s')").unwrap(),
            Filter::Value(CompareOp::GreaterOrEqual, b("it's"))
        );
        assert_eq!(
            Filter::parse("ColumnRangeFilter('a', true, '', false)").unwrap(),
            Filter::ColumnRange { min: Some(b("a")), min_inclusive: true, max: None, max_inclusive: false }
        );
        assert_eq!(
            Filter::parse("ColumnPaginationFilter(30, 'q5')").unwrap(),
            Filter::ColumnPagination { limit: 30, offset: ColumnOffset::Qualifier(b("q5")) }
        );
        assert_eq!(
            Filter::parse("SingleColumnValueFilter('f', 'q', !=, 'binary:v', true, true)").unwrap(),
            Filter::SingleColumnValue {
                family: b("f"),
                qualifier: b("q"),
                op: CompareOp::NotEqual,
                value: b("v"),
                filter_if_missing: true
            }
        );
        assert_eq!(Filter::parse("KeyOnlyFilter()").unwrap(), Filter::KeyOnly);
    }

    #[test]
    fn and_binds_tighter_than_or() {
        let f = Filter::parse("PrefixFilter('a') OR PrefixFilter('b') AND KeyOnlyFilter()").unwrap();
        assert_eq!(
            f,
            Filter::Or(vec![Filter::Prefix(b("a")), Filter::And(vec![Filter::Prefix(b("b")), Filter::KeyOnly])])
        );
        let g = Filter::parse("(PrefixFilter('a') OR PrefixFilter('b')) AND KeyOnlyFilter()").unwrap();
        assert!(matches!(g, Filter::And(ref fs) if matches!(fs[0], Filter::Or(_))));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        for (text, says) in [
            ("PrefixFilter('a'", "expected `,` or `)`"),
            ("PrefixFilter('a)", "unterminated string"),
            ("ValueFilter(=, 'substring:x')", "comparator `substring` is not supported"),
            ("SKIP ValueFilter(=, 'binary:x')", "SKIP is not supported"),
            ("RandomRowFilter(0.5)", "unexpected"),
            ("TimestampsFilter(1, 2)", "unknown or unsupported filter `TimestampsFilter`"),
            ("PageFilter(-1)", "non-negative integer"),
            ("KeyOnlyFilter() KeyOnlyFilter()", "after the filter"),
            ("ColumnRangeFilter('a', yes, 'b', true)", "true or false"),
        ] {
            let err = Filter::parse(text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
