//! CPython 3.11's tokenizer for the literals `ast.literal_eval` reads: newlines,
//! numbers, strings and their escapes, names and operators, with its nesting cap.

use super::*;

/// The tokenizer reads `\r\n` and a lone `\r` as `\n`, inside strings too.
pub(super) fn translate_newlines(text: &[char]) -> Vec<char> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.iter().copied().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' {
            if chars.peek() == Some(&'\n') {
                chars.next();
            }
            out.push('\n');
        } else {
            out.push(c);
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Num {
    Int(Int),
    Float(f64),
    Imag(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok {
    /// One string literal: whether it is bytes, and its value.
    Str(bool, StrValue),
    Num(Num),
    Name(String),
    /// `...`
    Ellipsis,
    /// An operator or bracket (`(` `)` `[` `]` `{` `}` `,` `:` `+` `-`), or any
    /// other ASCII punctuation, which no literal holds.
    Op(char),
    /// The end of the logical line the expression is on.
    Newline,
    End,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum StrValue {
    Str(PyStr),
    Bytes(Vec<u8>),
}

pub(super) struct Lexer<'t> {
    text: &'t [char],
    pos: usize,
    /// Open brackets: newlines and indentation mean nothing inside them.
    level: usize,
    /// At the start of a physical line, where indentation is measured.
    atbol: bool,
    /// Whether the current logical line has a token (a newline then ends it).
    line_has_token: bool,
}

pub(super) fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl<'t> Lexer<'t> {
    pub(super) fn new(text: &'t [char]) -> Self {
        Lexer {
            text,
            pos: 0,
            level: 0,
            atbol: true,
            line_has_token: false,
        }
    }

    pub(super) fn peek(&self) -> Option<char> {
        self.text.get(self.pos).copied()
    }

    pub(super) fn peek_at(&self, ahead: usize) -> Option<char> {
        self.text.get(self.pos + ahead).copied()
    }

    pub(super) fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += 1;
        Some(c)
    }

    pub(super) fn next(&mut self) -> Result<Tok> {
        loop {
            if self.atbol {
                self.atbol = false;
                let mut col = 0usize;
                while let Some(c) = self.peek() {
                    match c {
                        ' ' => col += 1,
                        '\t' => col = (col / 8 + 1) * 8,
                        // A form feed resets the column, as CPython's tokenizer does.
                        '\x0c' => col = 0,
                        _ => break,
                    }
                    self.pos += 1;
                }
                let blank = matches!(self.peek(), Some('#' | '\n'));
                if !blank && self.level == 0 {
                    if self.peek() == Some('\\') {
                        // CPython versions measure a line that starts with a
                        // continuation differently.
                        return unsure("a line continuation at the start of a line");
                    }
                    if col != 0 {
                        return refused("unexpected indent");
                    }
                }
            }
            while matches!(self.peek(), Some(' ' | '\t' | '\x0c')) {
                self.pos += 1;
            }
            let Some(c) = self.bump() else {
                if self.level > 0 {
                    return refused("unexpected EOF: a bracket is not closed");
                }
                return Ok(Tok::End);
            };
            match c {
                '#' => {
                    while !matches!(self.peek(), None | Some('\n')) {
                        self.pos += 1;
                    }
                }
                '\n' => {
                    self.atbol = true;
                    if self.level == 0 && self.line_has_token {
                        self.line_has_token = false;
                        return Ok(Tok::Newline);
                    }
                }
                '\\' => match self.bump() {
                    Some('\n') if self.peek().is_none() => {
                        return refused("unexpected EOF after a line continuation")
                    }
                    Some('\n') => {}
                    None => return refused("unexpected EOF after a line continuation"),
                    Some(_) => return refused("unexpected character after line continuation"),
                },
                _ => {
                    self.line_has_token = true;
                    return self.token(c);
                }
            }
        }
    }

    /// The token that starts with `c` (already consumed).
    pub(super) fn token(&mut self, c: char) -> Result<Tok> {
        match c {
            '\'' | '"' => self.string(c, ""),
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = self.pos - 1;
                while self.peek().is_some_and(is_ident_char) {
                    self.pos += 1;
                }
                if self.peek().is_some_and(|c| !c.is_ascii()) {
                    return unsure("a name spelled outside ASCII");
                }
                let name: String = self
                    .text
                    .get(start..self.pos)
                    .unwrap_or_default()
                    .iter()
                    .collect();
                if let Some(q @ ('\'' | '"')) = self.peek() {
                    let prefix = name.to_ascii_lowercase();
                    if matches!(
                        prefix.as_str(),
                        "r" | "u" | "b" | "br" | "rb" | "f" | "fr" | "rf"
                    ) {
                        self.pos += 1;
                        return self.string(q, &prefix);
                    }
                }
                Ok(Tok::Name(name))
            }
            '0'..='9' => self.number(c),
            '.' if self.peek().is_some_and(|c| c.is_ascii_digit()) => self.number(c),
            '.' if self.peek() == Some('.') && self.peek_at(1) == Some('.') => {
                self.pos += 2;
                Ok(Tok::Ellipsis)
            }
            '(' | '[' | '{' => {
                if self.level >= MAX_NESTING {
                    return refused("too many nested parentheses");
                }
                self.level += 1;
                Ok(Tok::Op(c))
            }
            ')' | ']' | '}' => {
                // A closing bracket with none open is the tokenizer's error;
                // a mismatched one the parser reports.
                let Some(level) = self.level.checked_sub(1) else {
                    return refused(format!("unmatched '{c}'"));
                };
                self.level = level;
                Ok(Tok::Op(c))
            }
            c if c.is_ascii() && !c.is_ascii_control() => Ok(Tok::Op(c)),
            c if c.is_ascii() => refused(format!(
                "invalid non-printable character U+{:04X}",
                u32::from(c)
            )),
            _ => unsure("a character outside ASCII outside a string"),
        }
    }

    /// A string literal after its opening quote `q`; `prefix` in lower case.
    pub(super) fn string(&mut self, q: char, prefix: &str) -> Result<Tok> {
        if prefix.contains('f') {
            // An f-string is a JoinedStr, which literal_eval refuses in every
            // version, whatever its boundaries.
            return refused("an f-string is no literal");
        }
        let triple = self.peek() == Some(q) && self.peek_at(1) == Some(q);
        if triple {
            self.pos += 2;
        }
        let start = self.pos;
        let end;
        loop {
            let Some(c) = self.bump() else {
                return refused("unterminated string literal");
            };
            match c {
                '\\' if self.bump().is_none() => return refused("unterminated string literal"),
                '\\' => {}
                '\n' if !triple => return refused("unterminated string literal"),
                c if c == q => {
                    if !triple {
                        end = self.pos - 1;
                        break;
                    }
                    if self.peek() == Some(q) && self.peek_at(1) == Some(q) {
                        end = self.pos - 1;
                        self.pos += 2;
                        break;
                    }
                }
                _ => {}
            }
        }
        let body = self.text.get(start..end).unwrap_or_default();
        let raw = prefix.contains('r');
        if prefix.contains('b') {
            if body.iter().any(|c| !c.is_ascii()) {
                return refused("bytes can only contain ASCII literal characters");
            }
            let bytes = if raw {
                body.iter().map(|c| *c as u8).collect()
            } else {
                unescape(body, true)?
                    .into_iter()
                    .map(|c| u8::try_from(c & 0xff).unwrap_or_default())
                    .collect()
            };
            Ok(Tok::Str(true, StrValue::Bytes(bytes)))
        } else {
            let s = if raw {
                body.iter().map(|c| u32::from(*c)).collect()
            } else {
                unescape(body, false)?
            };
            Ok(Tok::Str(false, StrValue::Str(s)))
        }
    }

    /// A number starting with `first` (already consumed), as CPython's
    /// tokenizer reads one.
    pub(super) fn number(&mut self, first: char) -> Result<Tok> {
        let start = self.pos - 1;
        if first == '.' {
            self.digits()?;
            self.exponent()?;
        } else if first == '0' && matches!(self.peek(), Some('x' | 'X' | 'o' | 'O' | 'b' | 'B')) {
            let radix = match self.bump() {
                Some('x' | 'X') => 16,
                Some('o' | 'O') => 8,
                _ => 2,
            };
            let digits_start = self.pos;
            loop {
                if self.peek() == Some('_') {
                    self.pos += 1;
                }
                match self.peek() {
                    Some(c) if c.is_digit(radix) => self.pos += 1,
                    _ => break,
                }
            }
            let text: String = self
                .text
                .get(digits_start..self.pos)
                .unwrap_or_default()
                .iter()
                .filter(|c| **c != '_')
                .collect();
            let ends_well = self.text.get(self.pos - 1).is_some_and(|c| *c != '_');
            if text.is_empty() || !ends_well {
                return refused("invalid number literal");
            }
            self.end_of_number()?;
            return Ok(Tok::Num(Num::Int(parse_int(&text, radix))));
        } else {
            self.pos -= 1;
            self.digits()?;
            let mut float = false;
            let int_text: String = self
                .text
                .get(start..self.pos)
                .unwrap_or_default()
                .iter()
                .filter(|c| **c != '_')
                .collect();
            if self.peek() == Some('.') {
                self.pos += 1;
                float = true;
                if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.digits()?;
                }
            }
            float |= self.exponent()?;
            if matches!(self.peek(), Some('j' | 'J')) {
                float = true;
            }
            if !float {
                let nonzero = int_text.bytes().any(|b| b != b'0');
                if int_text.starts_with('0') && nonzero {
                    return refused("leading zeros in decimal integer literals are not permitted");
                }
                self.end_of_number()?;
                if int_text.len() > MAX_DECIMAL_DIGITS {
                    return unsure("a decimal integer longer than Python's default digit limit");
                }
                return Ok(Tok::Num(Num::Int(parse_int(&int_text, 10))));
            }
        }
        let text: String = self
            .text
            .get(start..self.pos)
            .unwrap_or_default()
            .iter()
            .filter(|c| **c != '_')
            .collect();
        let value: f64 = match text.parse() {
            Ok(v) => v,
            Err(_) => return refused("invalid decimal literal"),
        };
        if matches!(self.peek(), Some('j' | 'J')) {
            self.pos += 1;
            self.end_of_number()?;
            return Ok(Tok::Num(Num::Imag(value)));
        }
        self.end_of_number()?;
        Ok(Tok::Num(Num::Float(value)))
    }

    /// `[0-9](_?[0-9])*` from here.
    pub(super) fn digits(&mut self) -> Result<()> {
        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return refused("invalid decimal literal");
        }
        self.pos += 1;
        loop {
            match self.peek() {
                Some(c) if c.is_ascii_digit() => self.pos += 1,
                Some('_') if self.peek_at(1).is_some_and(|c| c.is_ascii_digit()) => self.pos += 2,
                Some('_') => return refused("invalid decimal literal"),
                _ => return Ok(()),
            }
        }
    }

    /// An optional exponent; whether there was one.
    pub(super) fn exponent(&mut self) -> Result<bool> {
        if !matches!(self.peek(), Some('e' | 'E')) {
            return Ok(false);
        }
        self.pos += 1;
        if matches!(self.peek(), Some('+' | '-')) {
            self.pos += 1;
        }
        self.digits()?;
        Ok(true)
    }

    /// A number runs into no name: `1L`, `1x` are errors (`1if` is valid
    /// syntax, but no literal).
    pub(super) fn end_of_number(&self) -> Result<()> {
        match self.peek() {
            Some(c) if is_ident_char(c) => refused("invalid decimal literal"),
            Some(c) if !c.is_ascii() => unsure("a character outside ASCII after a number"),
            _ => Ok(()),
        }
    }
}

pub(super) fn parse_int(digits: &str, radix: u32) -> Int {
    match i128::from_str_radix(digits, radix) {
        Ok(v) => Int::Small(v),
        Err(_) => Int::Big { negative: false },
    }
}

/// A str or bytes literal's escapes, as code points (bytes: `\u`, `\U` and
/// `\N` are no escapes, and octal escapes keep their low byte).
pub(super) fn unescape(body: &[char], bytes: bool) -> Result<PyStr> {
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    let hex = |from: usize, n: usize| -> Result<u32> {
        let digits = body
            .get(from..from + n)
            .filter(|d| d.iter().all(char::is_ascii_hexdigit));
        let Some(digits) = digits else {
            return refused("truncated escape");
        };
        let s: String = digits.iter().collect();
        u32::from_str_radix(&s, 16).or_else(|_| refused("truncated escape"))
    };
    while let Some(&c) = body.get(i) {
        i += 1;
        if c != '\\' {
            out.push(u32::from(c));
            continue;
        }
        let Some(&e) = body.get(i) else {
            return refused("a backslash ends the string");
        };
        i += 1;
        match e {
            '\n' => {}
            '\\' | '\'' | '"' => out.push(u32::from(e)),
            'a' => out.push(7),
            'b' => out.push(8),
            'f' => out.push(12),
            'n' => out.push(10),
            'r' => out.push(13),
            't' => out.push(9),
            'v' => out.push(11),
            '0'..='7' => {
                let mut value = e.to_digit(8).unwrap_or_default();
                for _ in 0..2 {
                    match body.get(i).and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            value = value * 8 + d;
                            i += 1;
                        }
                        None => break,
                    }
                }
                out.push(value);
            }
            'x' => {
                out.push(hex(i, 2)?);
                i += 2;
            }
            'u' if !bytes => {
                out.push(hex(i, 4)?);
                i += 4;
            }
            'U' if !bytes => {
                let v = hex(i, 8)?;
                if v > 0x10_ffff {
                    return refused("illegal Unicode character");
                }
                out.push(v);
                i += 8;
            }
            'N' if !bytes => {
                return unsure("a \\N{...} escape names a character the model does not know")
            }
            _ => {
                // An unknown escape keeps its backslash (a warning, not an error).
                out.push(u32::from('\\'));
                out.push(u32::from(e));
            }
        }
    }
    Ok(out)
}
