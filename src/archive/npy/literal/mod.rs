//! The Python literals `ast.literal_eval` accepts, as CPython 3.11 tokenizes and
//! parses them: an `.npy` header is one, and numpy evaluates it so.
//!
//! Every question is answered as Python would answer it or not at all: a value
//! the model cannot compute exactly (a `\N{...}` escape, a name spelled outside
//! ASCII, an integer past 128 bits where its value matters) is [`Fail::Unsure`],
//! never a guess. Python refusing the text (`SyntaxError`, `ValueError`,
//! `TypeError`) is [`Fail::Refused`]: for numpy, that is no array and no pickle.
//!
//! Work is linear in the text and recursion follows bracket nesting, which the
//! tokenizer caps at [`MAX_NESTING`] as CPython's does.

use std::collections::BTreeMap;

mod lexer;

use lexer::*;

/// CPython's tokenizer refuses a bracket opened inside this many open ones
/// (`MAXLEVEL`, "too many nested parentheses"): the parser's recursion is bounded
/// by it.
pub const MAX_NESTING: usize = 200;

/// CPython's default `sys.int_max_str_digits`: a longer decimal literal is a
/// `SyntaxError` unless the limit was raised, so the model does not decide it.
const MAX_DECIMAL_DIGITS: usize = 4300;

/// Why a text gives no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fail {
    /// Python raises: nothing is built from the text.
    Refused(String),
    /// Python might accept the text; the model cannot say what it holds.
    Unsure(String),
}

pub type Result<T> = std::result::Result<T, Fail>;

fn refused<T>(why: impl Into<String>) -> Result<T> {
    Err(Fail::Refused(why.into()))
}

fn unsure<T>(why: impl Into<String>) -> Result<T> {
    Err(Fail::Unsure(why.into()))
}

/// A Python integer: exact in 128 bits, otherwise only its sign is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int {
    Small(i128),
    Big { negative: bool },
}

/// A str is code points, not a Rust `String`: escapes can spell lone surrogates.
pub type PyStr = Vec<u32>;

/// What `ast.literal_eval` returns.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(PyStr),
    Bytes(Vec<u8>),
    Int(Int),
    Bool(bool),
    Float(f64),
    Complex(f64, f64),
    None,
    Ellipsis,
    Tuple(Vec<Value>),
    List(Vec<Value>),
    /// In insertion order, each key once (the first key object, the last value),
    /// as `dict` keeps them.
    Dict(Vec<(Value, Value)>),
    /// Each element once, in the order first written (Python's own order is by
    /// hash; callers for whom order matters must not rely on this one).
    Set(Vec<Value>),
}

impl Value {
    pub fn str(s: &str) -> Value {
        Value::Str(s.chars().map(u32::from).collect())
    }

    /// Whether this is the str `s`.
    pub fn is_str(&self, s: &str) -> bool {
        matches!(self, Value::Str(v) if v.iter().copied().eq(s.chars().map(u32::from)))
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::Int(_) => "int",
            Value::Bool(_) => "bool",
            Value::Float(_) => "float",
            Value::Complex(..) => "complex",
            Value::None => "NoneType",
            Value::Ellipsis => "ellipsis",
            Value::Tuple(_) => "tuple",
            Value::List(_) => "list",
            Value::Dict(_) => "dict",
            Value::Set(_) => "set",
        }
    }

    /// The value's identity under Python's `==` and `hash`, for dict keys and
    /// set elements: numbers that compare equal share one (`1 == 1.0 == True`).
    pub fn key(&self) -> Result<Key> {
        Ok(match self {
            Value::Str(s) => Key::Str(s.clone()),
            Value::Bytes(b) => Key::Bytes(b.clone()),
            Value::Int(Int::Small(i)) => Key::Int(*i),
            Value::Int(Int::Big { .. }) => return unsure("an integer too large to compare"),
            Value::Bool(b) => Key::Int(i128::from(*b)),
            Value::Float(f) => float_key(*f)?,
            Value::Complex(re, im) if *im == 0.0 => float_key(*re)?,
            Value::Complex(re, im) => {
                if re.is_nan() || im.is_nan() {
                    return unsure("a NaN compares to nothing");
                }
                Key::Complex(zero_bits(*re), zero_bits(*im))
            }
            Value::None => Key::None,
            Value::Ellipsis => Key::Ellipsis,
            Value::Tuple(items) => Key::Tuple(items.iter().map(Value::key).collect::<Result<_>>()?),
            Value::List(_) | Value::Dict(_) | Value::Set(_) => {
                return refused(format!("unhashable type: '{}'", self.type_name()))
            }
        })
    }
}

/// See [`Value::key`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key {
    Int(i128),
    /// A float that is no integer (bits, -0.0 folded into 0.0).
    Float(u64),
    Complex(u64, u64),
    Str(PyStr),
    Bytes(Vec<u8>),
    None,
    Ellipsis,
    Tuple(Vec<Key>),
}

fn zero_bits(f: f64) -> u64 {
    if f == 0.0 {
        0
    } else {
        f.to_bits()
    }
}

/// 2**127 as a float: integral floats below it convert to `i128` exactly.
const I128_BOUND: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;

fn float_key(f: f64) -> Result<Key> {
    if f.is_nan() {
        return unsure("a NaN compares to nothing");
    }
    if f.is_finite() && f.fract() == 0.0 {
        if f.abs() < I128_BOUND {
            #[allow(clippy::cast_possible_truncation)]
            return Ok(Key::Int(f as i128));
        }
        return unsure("a float too large to compare with integers");
    }
    Ok(Key::Float(zero_bits(f)))
}

/// `ast.literal_eval(text)` for a str `text` (code points).
pub fn literal_eval(text: &[char]) -> Result<Value> {
    // literal_eval strips only these before parsing.
    let start = text
        .iter()
        .position(|c| *c != ' ' && *c != '\t')
        .unwrap_or(text.len());
    let rest = text.get(start..).unwrap_or_default();
    if rest.contains(&'\0') {
        return refused("source code cannot contain null bytes");
    }
    let source = translate_newlines(rest);
    let mut parser = Parser {
        lexer: Lexer::new(&source),
        peeked: None,
    };
    parser.top()
}

/// A parsed expression, with what literal_eval needs to know of its shape.
enum Node {
    /// A number written as one token (`2j`, `1.5`).
    Number(Num),
    /// `+`/`-` applied to a [`Node::Number`].
    Signed(Num),
    /// `real ± imaginary`.
    Complex(f64, f64),
    Value(Value),
}

struct Parser<'t> {
    lexer: Lexer<'t>,
    peeked: Option<Tok>,
}

impl Parser<'_> {
    fn peek(&mut self) -> Result<&Tok> {
        if self.peeked.is_none() {
            self.peeked = Some(self.lexer.next()?);
        }
        match &self.peeked {
            Some(t) => Ok(t),
            None => unsure("the parser lost its token"),
        }
    }

    fn take(&mut self) -> Result<Tok> {
        match self.peeked.take() {
            Some(t) => Ok(t),
            None => self.lexer.next(),
        }
    }

    fn eat(&mut self, op: char) -> Result<bool> {
        if *self.peek()? == Tok::Op(op) {
            self.take()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    fn expect(&mut self, op: char) -> Result<()> {
        if self.eat(op)? {
            Ok(())
        } else {
            refused(format!("invalid syntax: expected '{op}'"))
        }
    }

    /// `eval_input`: expressions, then newlines, then the end.
    fn top(&mut self) -> Result<Value> {
        let value = self.expressions(None)?;
        loop {
            match self.take()? {
                Tok::Newline => {}
                Tok::End => return Ok(value),
                _ => return refused("invalid syntax after the expression"),
            }
        }
    }

    /// One expression, or several separated by commas (a tuple), up to `close`.
    fn expressions(&mut self, close: Option<char>) -> Result<Value> {
        let first = self.expression()?;
        if !self.eat(',')? {
            return Ok(first);
        }
        let mut items = vec![first];
        loop {
            let next = self.peek()?;
            let ends = match close {
                Some(c) => *next == Tok::Op(c),
                None => matches!(next, Tok::Newline | Tok::End),
            };
            if ends {
                return Ok(Value::Tuple(items));
            }
            items.push(self.expression()?);
            if !self.eat(',')? {
                return Ok(Value::Tuple(items));
            }
        }
    }

    fn expression(&mut self) -> Result<Value> {
        let node = self.signed()?;
        let node = match self.peek()? {
            Tok::Op(op @ ('+' | '-')) => {
                let negate = *op == '-';
                self.take()?;
                let left = match node {
                    Node::Number(Num::Int(i)) | Node::Signed(Num::Int(i)) => int_to_float(i)?,
                    Node::Number(Num::Float(f)) | Node::Signed(Num::Float(f)) => f,
                    _ => {
                        return refused("malformed node: only a real number plus an imaginary one")
                    }
                };
                let Node::Number(Num::Imag(im)) = self.atom()? else {
                    return refused("malformed node: only a real number plus an imaginary one");
                };
                if negate {
                    Node::Complex(left - 0.0, -im)
                } else {
                    Node::Complex(left + 0.0, im)
                }
            }
            _ => node,
        };
        if let Tok::Op(op) = self.peek()? {
            if !matches!(op, ',' | ':' | ')' | ']' | '}') {
                return refused(format!("malformed node or invalid syntax at '{op}'"));
            }
        }
        if matches!(
            self.peek()?,
            Tok::Name(_) | Tok::Str(..) | Tok::Num(_) | Tok::Ellipsis
        ) {
            return refused("invalid syntax: two expressions in a row");
        }
        Ok(match node {
            Node::Number(n) | Node::Signed(n) => number_value(n),
            Node::Complex(re, im) => Value::Complex(re, im),
            Node::Value(v) => v,
        })
    }

    /// An atom, or `+`/`-` before a number.
    fn signed(&mut self) -> Result<Node> {
        let Tok::Op(op @ ('+' | '-')) = *self.peek()? else {
            return self.atom();
        };
        self.take()?;
        match self.atom()? {
            Node::Number(Num::Int(i)) if op == '-' => Ok(Node::Signed(Num::Int(negate(i)))),
            Node::Number(Num::Float(f)) if op == '-' => Ok(Node::Signed(Num::Float(-f))),
            Node::Number(Num::Imag(f)) if op == '-' => Ok(Node::Signed(Num::Imag(-f))),
            Node::Number(n) => Ok(Node::Signed(n)),
            _ => refused("malformed node: a sign before something other than a number"),
        }
    }

    fn atom(&mut self) -> Result<Node> {
        match self.take()? {
            Tok::Str(is_bytes, first) => {
                let mut value = first;
                while let Tok::Str(next_bytes, _) = self.peek()? {
                    if *next_bytes != is_bytes {
                        return refused("cannot mix bytes and nonbytes literals");
                    }
                    let Tok::Str(_, next) = self.take()? else {
                        return unsure("the parser lost its token");
                    };
                    match (&mut value, next) {
                        (StrValue::Str(a), StrValue::Str(b)) => a.extend(b),
                        (StrValue::Bytes(a), StrValue::Bytes(b)) => a.extend(b),
                        _ => return refused("cannot mix bytes and nonbytes literals"),
                    }
                }
                Ok(Node::Value(match value {
                    StrValue::Str(s) => Value::Str(s),
                    StrValue::Bytes(b) => Value::Bytes(b),
                }))
            }
            Tok::Num(n) => Ok(Node::Number(n)),
            Tok::Ellipsis => Ok(Node::Value(Value::Ellipsis)),
            Tok::Name(name) => match name.as_str() {
                "True" => Ok(Node::Value(Value::Bool(true))),
                "False" => Ok(Node::Value(Value::Bool(false))),
                "None" => Ok(Node::Value(Value::None)),
                "set" if self.eat('(')? => {
                    self.expect(')')?;
                    Ok(Node::Value(Value::Set(Vec::new())))
                }
                _ => refused(format!("malformed node: the name {name}")),
            },
            Tok::Op('(') => {
                if self.eat(')')? {
                    return Ok(Node::Value(Value::Tuple(Vec::new())));
                }
                let first = self.parenthesized()?;
                if self.eat(')')? {
                    return Ok(first);
                }
                if !self.eat(',')? {
                    return refused("invalid syntax in parentheses");
                }
                let first = node_value(first);
                let Value::Tuple(items) = self.rest_of_tuple(first)? else {
                    return unsure("the parser lost its tuple");
                };
                self.expect(')')?;
                Ok(Node::Value(Value::Tuple(items)))
            }
            Tok::Op('[') => {
                let mut items = Vec::new();
                while !self.eat(']')? {
                    items.push(self.expression()?);
                    if !self.eat(',')? {
                        self.expect(']')?;
                        break;
                    }
                }
                Ok(Node::Value(Value::List(items)))
            }
            Tok::Op('{') => self.braces().map(Node::Value),
            _ => refused("invalid syntax: no expression here"),
        }
    }

    /// What a pair of parentheses holds before a `,` or `)`: a number keeps its
    /// shape, so `-(1)` and `(1)+(2j)` are the literals they are in Python.
    fn parenthesized(&mut self) -> Result<Node> {
        let node = self.signed()?;
        match self.peek()? {
            Tok::Op('+' | '-') => {
                // Re-enter the general path for `(1+2j)`: rebuild it as a value.
                let value = self.continue_expression(node)?;
                Ok(Node::Value(value))
            }
            Tok::Op(',' | ')') => Ok(node),
            Tok::Op(op) => refused(format!("malformed node or invalid syntax at '{op}'")),
            _ => refused("invalid syntax in parentheses"),
        }
    }

    /// [`Parser::expression`] after its first operand was read.
    fn continue_expression(&mut self, node: Node) -> Result<Value> {
        let negate = matches!(self.take()?, Tok::Op('-'));
        let left = match node {
            Node::Number(Num::Int(i)) | Node::Signed(Num::Int(i)) => int_to_float(i)?,
            Node::Number(Num::Float(f)) | Node::Signed(Num::Float(f)) => f,
            _ => return refused("malformed node: only a real number plus an imaginary one"),
        };
        let Node::Number(Num::Imag(im)) = self.atom()? else {
            return refused("malformed node: only a real number plus an imaginary one");
        };
        match self.peek()? {
            Tok::Op(',' | ')') => {}
            _ => return refused("malformed node: more than one operator"),
        }
        Ok(if negate {
            Value::Complex(left - 0.0, -im)
        } else {
            Value::Complex(left + 0.0, im)
        })
    }

    fn rest_of_tuple(&mut self, first: Value) -> Result<Value> {
        let mut items = vec![first];
        loop {
            if *self.peek()? == Tok::Op(')') {
                return Ok(Value::Tuple(items));
            }
            items.push(self.expression()?);
            if !self.eat(',')? {
                return Ok(Value::Tuple(items));
            }
        }
    }

    /// `{}` a dict, `{k: v, ...}` a dict, `{a, ...}` a set.
    fn braces(&mut self) -> Result<Value> {
        if self.eat('}')? {
            return Ok(Value::Dict(Vec::new()));
        }
        let first = self.expression()?;
        if self.eat(':')? {
            let mut items = vec![(first, self.expression()?)];
            while self.eat(',')? {
                if *self.peek()? == Tok::Op('}') {
                    break;
                }
                let key = self.expression()?;
                self.expect(':')?;
                items.push((key, self.expression()?));
            }
            self.expect('}')?;
            return dict(items);
        }
        let mut items = vec![first];
        while self.eat(',')? {
            if *self.peek()? == Tok::Op('}') {
                break;
            }
            items.push(self.expression()?);
        }
        self.expect('}')?;
        set(items)
    }
}

fn node_value(node: Node) -> Value {
    match node {
        Node::Number(n) | Node::Signed(n) => number_value(n),
        Node::Complex(re, im) => Value::Complex(re, im),
        Node::Value(v) => v,
    }
}

fn number_value(n: Num) -> Value {
    match n {
        Num::Int(i) => Value::Int(i),
        Num::Float(f) => Value::Float(f),
        Num::Imag(f) => Value::Complex(0.0, f),
    }
}

fn negate(i: Int) -> Int {
    match i {
        Int::Small(v) => v
            .checked_neg()
            .map_or(Int::Big { negative: true }, Int::Small),
        Int::Big { negative } => Int::Big {
            negative: !negative,
        },
    }
}

/// An int added to a complex becomes a float first.
fn int_to_float(i: Int) -> Result<f64> {
    match i {
        #[allow(clippy::cast_precision_loss)]
        Int::Small(v) => Ok(v as f64),
        Int::Big { .. } => unsure("an integer too large to say whether it fits a float"),
    }
}

/// `dict(zip(keys, values))`: the first key object, the last value.
fn dict(items: Vec<(Value, Value)>) -> Result<Value> {
    let mut index: BTreeMap<Key, usize> = BTreeMap::new();
    let mut out: Vec<(Value, Value)> = Vec::with_capacity(items.len());
    for (k, v) in items {
        let key = k.key()?;
        match index.get(&key).and_then(|i| out.get_mut(*i)) {
            Some(slot) => slot.1 = v,
            None => {
                index.insert(key, out.len());
                out.push((k, v));
            }
        }
    }
    Ok(Value::Dict(out))
}

fn set(items: Vec<Value>) -> Result<Value> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for v in items {
        if seen.insert(v.key()?) {
            out.push(v);
        }
    }
    Ok(Value::Set(out))
}

/// numpy's `_filter_header`: Python 2 wrote `10L`; it drops every name `L`
/// that follows a number token (as the `tokenize` module splits tokens) and
/// parses again. Where the text changes, the original was a syntax error in
/// Python 3, so numpy does reach this; `Ok(None)` when nothing changes.
pub fn drop_long_suffixes(text: &[char]) -> Result<Option<Vec<char>>> {
    let mut out = text.to_vec();
    let mut changed = false;
    let mut i = 0;
    let at = |i: usize| text.get(i).copied();
    while let Some(c) = at(i) {
        if !c.is_ascii() {
            return unsure("a character outside ASCII in a Python 2 header");
        }
        if c == '#' {
            while !matches!(at(i), None | Some('\n' | '\r')) {
                i += 1;
            }
        } else if c == '\'' || c == '"' {
            i = skip_string(text, i)?;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while at(i).is_some_and(is_ident_char) {
                i += 1;
            }
            let prefix: String = text
                .get(start..i)
                .unwrap_or_default()
                .iter()
                .collect::<String>()
                .to_ascii_lowercase();
            let prefixes = ["r", "u", "b", "br", "rb", "f", "fr", "rf"];
            if matches!(at(i), Some('\'' | '"')) && prefixes.contains(&prefix.as_str()) {
                i = skip_string(text, i)?;
            }
        } else if let Some(end) = tokenize_number(text, i) {
            i = end;
            // The names `L` after it, across blanks and continuations (no
            // token between them).
            loop {
                let mut j = i;
                loop {
                    match at(j) {
                        Some(' ' | '\t' | '\x0c') => j += 1,
                        Some('\\') if at(j + 1) == Some('\n') => j += 2,
                        Some('\\') if at(j + 1) == Some('\r') => {
                            j += if at(j + 2) == Some('\n') { 3 } else { 2 }
                        }
                        _ => break,
                    }
                }
                let lone_l = at(j) == Some('L')
                    && !at(j + 1).is_some_and(|c| is_ident_char(c) || !c.is_ascii());
                if !lone_l {
                    break;
                }
                if let Some(slot) = out.get_mut(j) {
                    *slot = ' ';
                }
                changed = true;
                i = j + 1;
            }
        } else {
            i += 1;
        }
    }
    Ok(changed.then_some(out))
}

/// What the rest of numpy's `_filter_header` does to a header: `tokenize`
/// then `untokenize` rebuilds the whitespace between tokens, so the first
/// line's indentation becomes spaces (which literal_eval strips), and a last
/// line of blanks only, with no newline, is dropped. Nothing else it rebuilds
/// changes what Python reads.
pub fn untokenized(text: &[char]) -> Result<Vec<char>> {
    if text.contains(&'\r') {
        return unsure("a carriage return in a header numpy re-tokenizes");
    }
    let blank = |c: &char| matches!(c, ' ' | '\t' | '\x0c');
    let start = text.iter().position(|c| !blank(c)).unwrap_or(text.len());
    let mut out = text.get(start..).unwrap_or_default().to_vec();
    if let Some(last_newline) = out.iter().rposition(|c| *c == '\n') {
        let tail = out.get(last_newline + 1..).unwrap_or_default();
        if !tail.is_empty() && tail.iter().all(blank) {
            out.truncate(last_newline + 1);
        }
    }
    Ok(out)
}

/// Past the string literal whose quote is at `i`.
fn skip_string(text: &[char], i: usize) -> Result<usize> {
    let q = text.get(i).copied();
    let triple = text.get(i + 1).copied() == q && text.get(i + 2).copied() == q;
    let mut j = if triple { i + 3 } else { i + 1 };
    loop {
        match text.get(j).copied() {
            None => return refused("unterminated string literal"),
            Some('\\') => j += 2,
            Some('\n' | '\r') if !triple => return refused("unterminated string literal"),
            c if c == q => {
                if !triple {
                    return Ok(j + 1);
                }
                if text.get(j + 1).copied() == q && text.get(j + 2).copied() == q {
                    return Ok(j + 3);
                }
                j += 1;
            }
            _ => j += 1,
        }
    }
}

/// Where the `tokenize` module's `Number` pattern (imaginary, then float, then
/// integer: the first alternative that matches) ends, from `i`.
fn tokenize_number(text: &[char], i: usize) -> Option<usize> {
    let at = |i: usize| text.get(i).copied();
    let digitpart = |i: usize| -> Option<usize> {
        if !at(i)?.is_ascii_digit() {
            return None;
        }
        let mut j = i + 1;
        loop {
            match at(j) {
                Some(c) if c.is_ascii_digit() => j += 1,
                Some('_') if at(j + 1).is_some_and(|c| c.is_ascii_digit()) => j += 2,
                _ => return Some(j),
            }
        }
    };
    let exponent = |i: usize| -> Option<usize> {
        if !matches!(at(i), Some('e' | 'E')) {
            return None;
        }
        let j = if matches!(at(i + 1), Some('+' | '-')) {
            i + 2
        } else {
            i + 1
        };
        digitpart(j)
    };
    let pointfloat = |i: usize| -> Option<usize> {
        let end = match digitpart(i) {
            Some(j) if at(j) == Some('.') => digitpart(j + 1).unwrap_or(j + 1),
            Some(_) => return None,
            None if at(i) == Some('.') => digitpart(i + 1)?,
            None => return None,
        };
        Some(exponent(end).unwrap_or(end))
    };
    let float = |i: usize| pointfloat(i).or_else(|| digitpart(i).and_then(exponent));
    let imag = |i: usize| {
        let j = digitpart(i).filter(|j| matches!(at(*j), Some('j' | 'J')));
        let j = j.or_else(|| float(i).filter(|j| matches!(at(*j), Some('j' | 'J'))));
        j.map(|j| j + 1)
    };
    let int = |i: usize| -> Option<usize> {
        let radix_digits = |j: usize, ok: fn(char) -> bool| -> Option<usize> {
            let mut k = j;
            let mut any = false;
            loop {
                let step = if at(k) == Some('_') { 1 } else { 0 };
                match at(k + step) {
                    Some(c) if ok(c) => {
                        k += step + 1;
                        any = true;
                    }
                    _ => break,
                }
            }
            any.then_some(k)
        };
        if at(i) == Some('0') {
            let radix: Option<fn(char) -> bool> = match at(i + 1) {
                Some('x' | 'X') => Some(|c: char| c.is_ascii_hexdigit()),
                Some('b' | 'B') => Some(|c: char| c == '0' || c == '1'),
                Some('o' | 'O') => Some(|c: char| ('0'..='7').contains(&c)),
                _ => None,
            };
            if let Some(end) = radix.and_then(|ok| radix_digits(i + 2, ok)) {
                return Some(end);
            }
            let mut k = i + 1;
            loop {
                let step = if at(k) == Some('_') { 1 } else { 0 };
                if at(k + step) == Some('0') {
                    k += step + 1;
                } else {
                    return Some(k);
                }
            }
        }
        digitpart(i).filter(|_| at(i) != Some('0'))
    };
    imag(i).or_else(|| float(i)).or_else(|| int(i))
}

#[cfg(test)]
mod tests;
