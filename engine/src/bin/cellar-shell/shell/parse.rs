//! Parses HBase shell command lines: `command 'arg', 123, {KEY => 'v', ...}, [a, b]`.
//!
//! The grammar is the subset of Ruby the HBase shell's commands use: single- and double-quoted
//! strings (double quotes understand `\xNN`, `\n`, `\t`, `\\`, `\"`), integers, `true`,
//! `false`, `nil`, bare constants (`NAME`), hashes with `=>`, arrays, and a trailing hash
//! without braces (`alter 't', NAME => 'f', VERSIONS => 5`).

/// A parsed argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A quoted string, as bytes.
    Str(Vec<u8>),
    /// An integer.
    Int(i64),
    /// `true` / `false`.
    Bool(bool),
    /// `nil`.
    Nil,
    /// A bare constant such as `NAME`.
    Ident(String),
    /// `{K => V, ...}`.
    Hash(Vec<(Value, Value)>),
    /// `[a, b]`.
    Array(Vec<Value>),
}

impl Value {
    /// The text of a string or constant.
    pub fn as_text(&self) -> Option<String> {
        match self {
            Value::Str(s) => Some(String::from_utf8_lossy(s).into_owned()),
            Value::Ident(s) => Some(s.clone()),
            _ => None,
        }
    }
}

/// One command: its name and arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Command name, e.g. `scan`.
    pub name: String,
    /// Arguments in order.
    pub args: Vec<Value>,
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, token: &[u8]) -> bool {
        self.skip_ws();
        if self.s[self.pos..].starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn err<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("syntax error at column {}: {what}", self.pos + 1))
    }

    fn string(&mut self, quote: u8) -> Result<Value, String> {
        self.pos += 1;
        let mut out = Vec::new();
        while let Some(&c) = self.s.get(self.pos) {
            self.pos += 1;
            if c == quote {
                return Ok(Value::Str(out));
            }
            if c != b'\\' {
                out.push(c);
                continue;
            }
            let Some(&e) = self.s.get(self.pos) else {
                break;
            };
            self.pos += 1;
            if quote == b'\'' {
                // Ruby single quotes only escape the quote and the backslash.
                if e != b'\'' && e != b'\\' {
                    out.push(b'\\');
                }
                out.push(e);
                continue;
            }
            match e {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'0' => out.push(0),
                b'x' => {
                    let hex = self.s.get(self.pos..self.pos + 2).and_then(|h| std::str::from_utf8(h).ok());
                    match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                        Some(b) => {
                            out.push(b);
                            self.pos += 2;
                        }
                        None => return self.err("\\x needs two hex digits"),
                    }
                }
                other => out.push(other),
            }
        }
        self.err("unterminated string")
    }

    fn word(&mut self) -> String {
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || matches!(self.s[self.pos], b'_' | b'.' | b':'))
        {
            self.pos += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.pos]).into_owned()
    }

    fn value(&mut self) -> Result<Value, String> {
        match self.peek() {
            Some(q @ (b'\'' | b'"')) => self.string(q),
            Some(b'{') => {
                self.pos += 1;
                let mut pairs = Vec::new();
                if self.eat(b"}") {
                    return Ok(Value::Hash(pairs));
                }
                loop {
                    let k = self.value()?;
                    if !self.eat(b"=>") {
                        return self.err("expected `=>` in hash");
                    }
                    pairs.push((k, self.value()?));
                    if self.eat(b"}") {
                        return Ok(Value::Hash(pairs));
                    }
                    if !self.eat(b",") {
                        return self.err("expected `,` or `}` in hash");
                    }
                }
            }
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                if self.eat(b"]") {
                    return Ok(Value::Array(items));
                }
                loop {
                    items.push(self.value()?);
                    if self.eat(b"]") {
                        return Ok(Value::Array(items));
                    }
                    if !self.eat(b",") {
                        return self.err("expected `,` or `]` in array");
                    }
                }
            }
            Some(c) if c == b'-' || c.is_ascii_digit() => {
                let start = self.pos;
                self.pos += 1;
                while self.pos < self.s.len() && (self.s[self.pos].is_ascii_digit() || self.s[self.pos] == b'_') {
                    self.pos += 1;
                }
                let text: String = String::from_utf8_lossy(&self.s[start..self.pos]).replace('_', "");
                text.parse().map(Value::Int).or_else(|_| self.err("bad integer"))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let w = self.word();
                Ok(match w.as_str() {
                    "true" => Value::Bool(true),
                    "false" => Value::Bool(false),
                    "nil" => Value::Nil,
                    _ => Value::Ident(w),
                })
            }
            Some(_) => self.err("unexpected character"),
            None => self.err("unexpected end of line"),
        }
    }
}

/// Strips a pasted prompt such as `hbase(main):017:0> ` or `hbase> `.
fn strip_prompt(line: &str) -> &str {
    let mut rest = line.trim_start();
    loop {
        let before = rest;
        for prefix in ["hbase(main):", "cellar(main):"] {
            if let Some(after) = rest.strip_prefix(prefix) {
                if let Some(i) = after.find('>') {
                    rest = after[i + 1..].trim_start();
                }
            }
        }
        for prefix in ["hbase>", "cellar>"] {
            if let Some(after) = rest.strip_prefix(prefix) {
                rest = after.trim_start();
            }
        }
        if rest == before {
            return rest;
        }
    }
}

/// Parses one line; `Ok(None)` for blank lines and `#` comments.
///
/// # Errors
/// A message naming the column of the syntax error.
pub fn parse_line(line: &str) -> Result<Option<Command>, String> {
    let line = strip_prompt(line);
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let mut p = Parser { s: line.as_bytes(), pos: 0 };
    p.skip_ws();
    let name = p.word();
    if name.is_empty() {
        return p.err("expected a command name");
    }
    let mut args = Vec::new();
    let mut trailing: Vec<(Value, Value)> = Vec::new();
    if p.peek().is_some() {
        loop {
            let v = p.value()?;
            if p.eat(b"=>") {
                trailing.push((v, p.value()?));
            } else if !trailing.is_empty() {
                return p.err("positional argument after `key => value` pairs");
            } else {
                args.push(v);
            }
            match p.peek() {
                None => break,
                Some(b',') => p.pos += 1,
                Some(_) => return p.err("expected `,`"),
            }
        }
    }
    if !trailing.is_empty() {
        args.push(Value::Hash(trailing));
    }
    Ok(Some(Command { name, args }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::Str(v.as_bytes().to_vec())
    }

    #[test]
    fn parses_shell_commands() {
        let c = parse_line("hbase(main):017:0> scan 'test', {RAW=>true, VERSIONS=>1000}").unwrap().unwrap();
        assert_eq!(c.name, "scan");
        assert_eq!(
            c.args,
            vec![
                s("test"),
                Value::Hash(vec![
                    (Value::Ident("RAW".into()), Value::Bool(true)),
                    (Value::Ident("VERSIONS".into()), Value::Int(1000))
                ])
            ]
        );
        let c = parse_line("alter 't1', NAME => 'f1', KEEP_DELETED_CELLS => true").unwrap().unwrap();
        assert_eq!(c.args.len(), 2);
        let c = parse_line(r#"put 't', "r\x00\x01", 'f:q', 'v', 10"#).unwrap().unwrap();
        assert_eq!(c.args[1], Value::Str(b"r\x00\x01".to_vec()));
        assert_eq!(c.args[4], Value::Int(10));
        assert_eq!(parse_line("  # comment").unwrap(), None);
        assert_eq!(parse_line("list").unwrap().unwrap().args, vec![]);
        let c = parse_line("scan 't', {COLUMNS => ['a:b', 'c'], TIMERANGE => [1, 2]}").unwrap().unwrap();
        assert!(matches!(&c.args[1], Value::Hash(h) if h.len() == 2));
    }

    #[test]
    fn reports_syntax_errors() {
        assert!(parse_line("put 't', 'unterminated").is_err());
        assert!(parse_line("scan 't', {RAW true}").is_err());
        assert!(parse_line("get 't' 'r'").is_err());
        assert!(parse_line(r#"put 't', "\xZZ""#).is_err());
    }
}
