//! What in a torch.export program (`models/*.json` of a `.pt2`, or
//! `serialized_exported_program.json` of torch 2.6 and 2.7) torch runs as
//! Python. The program is JSON, yet `torch.export.load` evaluates parts of it:
//! each symbolic expression goes through `sympy.sympify` (Python's `eval`), each
//! graph input's name is written as a parameter of the `forward` it generates and
//! `exec`s, and a pytree context may name an enum or a defaultdict factory it
//! imports by module name; `ExportedProgram.module()` then `exec`s each guard.
//! Each of these is checked against the shapes torch itself writes; anything
//! else is a [`Hazard`].

use serde_json::Value;

/// Something the program gives torch to run, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hazard {
    /// The JSON path of the value (`graph_module.graph.inputs[0].as_tensor.name`).
    pub at: String,
    /// What torch does with it.
    pub why: &'static str,
}

const SYMPIFY: &str = "torch.export.load evaluates this symbolic expression with sympy.sympify \
                       (Python's eval), and it is not one torch writes";
const NAME: &str = "torch.export.load writes this name into the Python code of the forward it \
                    generates and executes, and it is not a plain identifier";
const ENUM: &str = "torch.export.load imports the module this pytree context names (an enum)";
const FACTORY: &str =
    "torch.export.load imports the module this pytree context names (a defaultdict factory)";
const GUARD: &str = "ExportedProgram.module() executes this guard as Python code, and it is \
                     not an expression of the shapes of the inputs";
const UNREADABLE_SPEC: &str = "a pytree spec only Python's json reads (NaN, Infinity, a number past \
                               a float, a lone surrogate): what torch.export.load imports from it \
                               cannot be checked";
const KEYWORD: &str = "ExportedProgram.module() writes these keys into the code it generates as \
                       keyword argument names, and one is not a plain identifier";
const ARGUMENT: &str = "ExportedProgram.module() writes this name into the code it generates as \
                        an argument name, and it is not a plain identifier";
const STRING_INPUT: &str = "ExportedProgram.module() writes this string input's value into the \
                            guard code it executes, and it holds more than letters, digits and \
                            plain punctuation";

/// How deep the JSON may nest (torch's programs nest about 12 levels).
const MAX_DEPTH: usize = 96;

/// The hazards of a program's JSON; `Err` when it is not JSON this reader can
/// read to its end (not JSON, or nested deeper than [`MAX_DEPTH`]).
pub fn hazards(json: &[u8]) -> Result<Vec<Hazard>, String> {
    let value: Value = serde_json::from_slice(json).map_err(|e| format!("not JSON: {e}"))?;
    let mut found = Vec::new();
    walk(&value, &mut String::new(), 0, &mut found)?;
    Ok(found)
}

fn walk(value: &Value, at: &mut String, depth: usize, found: &mut Vec<Hazard>) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested deeper than {MAX_DEPTH} levels at {at}"));
    }
    let mark = at.len();
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                if !at.is_empty() {
                    at.push('.');
                }
                at.push_str(key);
                check(key, child, at, found);
                walk(child, at, depth + 1, found)?;
                at.truncate(mark);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                at.push_str(&format!("[{i}]"));
                walk(child, at, depth + 1, found)?;
                at.truncate(mark);
            }
        }
        _ => {}
    }
    Ok(())
}

/// The hazards of one field, by its key.
fn check(key: &str, value: &Value, at: &str, found: &mut Vec<Hazard>) {
    let mut flag = |why| {
        found.push(Hazard {
            at: at.to_owned(),
            why,
        })
    };
    match (key, value) {
        ("expr_str", Value::String(s)) if !is_sym_expr(s) => flag(SYMPIFY),
        ("name" | "as_name", Value::String(s)) if !is_identifier(s) => flag(NAME),
        ("in_spec" | "out_spec", Value::String(s)) => {
            for why in spec_hazards(s) {
                flag(why);
            }
        }
        ("forward_arg_names", Value::Array(names))
            if names.iter().any(|n| !n.as_str().is_some_and(is_identifier)) =>
        {
            flag(ARGUMENT)
        }
        ("as_string", Value::String(s)) if !is_plain_text(s) => flag(STRING_INPUT),
        ("guards_code", Value::Array(guards)) => {
            for guard in guards {
                if !guard.as_str().is_some_and(is_guard) {
                    flag(GUARD);
                }
            }
        }
        _ => {}
    }
}

/// Letters, digits and a little punctuation (`cuda:0`, `mean`, `a-b.c/d`): no
/// quote, backslash, newline, comment sign, bracket or operator, so nothing that
/// could close the literal it is written into or make code outside one.
fn is_plain_text(s: &str) -> bool {
    s.chars().all(|c| c.is_alphanumeric() || " _-.,:/".contains(c))
}

/// A Python identifier that is no keyword: what a parameter may be called.
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') && !is_keyword(s)
}

fn is_keyword(s: &str) -> bool {
    const KEYWORDS: [&str; 35] = [
        "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class",
        "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global",
        "if", "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return",
        "try", "while", "with", "yield",
    ];
    KEYWORDS.contains(&s)
}

/// A pytree spec (JSON in a string) and the contexts in it (JSON in strings
/// again, or inline): what torch's `_json_to_treespec` imports, and the keyword
/// names `module()` writes into the code it generates.
fn spec_hazards(spec: &str) -> Vec<&'static str> {
    let mut found = Vec::new();
    // Python's json reads more than JSON (NaN, Infinity, 1e400, lone surrogates):
    // a spec only it reads is one this check cannot vouch for.
    let Ok(value) = serde_json::from_str::<Value>(spec) else {
        return vec![UNREADABLE_SPEC];
    };
    let mut pending = vec![(&value, 0usize)];
    while let Some((node, depth)) = pending.pop() {
        if depth > MAX_DEPTH {
            found.push(ENUM);
            break;
        }
        match node {
            Value::Object(map) => {
                match map.get("context") {
                    Some(Value::String(context)) => found.extend(context_hazards(context)),
                    Some(inline @ (Value::Object(_) | Value::Array(_))) => {
                        found.extend(context_value_hazards(inline))
                    }
                    _ => {}
                }
                pending.extend(map.values().map(|v| (v, depth + 1)));
            }
            Value::Array(items) => pending.extend(items.iter().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    found
}

/// `json.loads(context, object_hook=...)`: every object with `__enum__` is
/// imported; a defaultdict's factory is imported from its module.
fn context_hazards(context: &str) -> Vec<&'static str> {
    match serde_json::from_str::<Value>(context) {
        Ok(value) => context_value_hazards(&value),
        Err(_) => vec![UNREADABLE_SPEC],
    }
}

/// A context's value: imports it names, and names that must be identifiers (a
/// dict's keys are the keyword arguments `module()` writes into its code).
fn context_value_hazards(value: &Value) -> Vec<&'static str> {
    let mut found = Vec::new();
    if let Value::Array(keys) = value {
        if keys.iter().any(|k| k.as_str().is_some_and(|k| !is_identifier(k))) {
            found.push(KEYWORD);
        }
    }
    let mut pending = vec![(value, 0usize)];
    while let Some((node, depth)) = pending.pop() {
        if depth > MAX_DEPTH {
            found.push(ENUM);
            break;
        }
        match node {
            Value::Object(map) => {
                if map.contains_key("__enum__") {
                    found.push(ENUM);
                }
                match map.get("default_factory_module") {
                    Some(Value::String(m)) if m == "builtins" => {}
                    Some(_) => found.push(FACTORY),
                    None => {}
                }
                pending.extend(map.values().map(|v| (v, depth + 1)));
            }
            Value::Array(items) => pending.extend(items.iter().map(|v| (v, depth + 1))),
            _ => {}
        }
    }
    found
}

/// The functions a symbolic expression torch writes may call: sympy's own
/// arithmetic and logic, and `torch.utils._sympy.functions`.
const SYM_FUNCTIONS: [&str; 48] = [
    "Symbol", "Integer", "Float", "Rational", "Add", "Mul", "Pow", "Mod", "Max", "Min", "Abs",
    "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Not", "Xor", "Piecewise", "ITE", "FloorDiv",
    "CeilDiv", "ModularIndexing", "CleanDiv", "CeilToInt", "FloorToInt", "TruncToInt",
    "TruncToFloat", "RoundToInt", "RoundDecimal", "IntTrueDiv", "FloatTrueDiv", "ToFloat",
    "PythonMod", "LShift", "RShift", "PowByNatural", "FloatPow", "Identity",
    "IsNonOverlappingAndDenseIndicator", "Where", "sqrt", "floor", "ceiling", "sign",
];
/// Families of functions named by prefix (`OpaqueUnaryFn_exp`, `BitwiseFn_bitwise_and`).
const SYM_FUNCTION_FAMILIES: [&str; 2] = ["OpaqueUnaryFn_", "BitwiseFn_"];
/// The assumptions `Symbol(...)` takes, as keywords.
const SYM_ASSUMPTIONS: [&str; 12] = [
    "positive", "negative", "nonnegative", "nonpositive", "integer", "real", "finite", "zero",
    "even", "odd", "commutative", "evaluate",
];
/// Names that are values: booleans and sympy's constants.
const SYM_CONSTANTS: [&str; 8] = ["True", "False", "oo", "zoo", "nan", "pi", "E", "I"];

/// A symbolic expression of the shapes torch writes: numbers, symbols (`s0`,
/// `u3`), `Symbol('s77', positive=True, integer=True)`, operators, and calls of
/// the functions above. No attribute, subscript, dunder, other name or text
/// outside a `Symbol`'s name, so `eval` of it can reach nothing but sympy's
/// arithmetic.
fn is_sym_expr(s: &str) -> bool {
    let bytes = s.as_bytes();
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        match c {
            b' ' => i += 1,
            b'0'..=b'9' => {
                while bytes
                    .get(i)
                    .is_some_and(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E'))
                {
                    // An exponent's sign belongs to the number.
                    if matches!(bytes.get(i), Some(b'e' | b'E'))
                        && matches!(bytes.get(i + 1), Some(b'+' | b'-'))
                    {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'\'' | b'"' => {
                let close = bytes.get(i + 1..).and_then(|rest| rest.iter().position(|&b| b == c));
                let Some(len) = close else { return false };
                let text = bytes.get(i + 1..i + 1 + len).unwrap_or_default();
                // Only a symbol's name: what follows `Symbol(`.
                let opened_symbol = s.get(..i).is_some_and(|before| before.trim_end().ends_with("Symbol("));
                if !opened_symbol || !text.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_') {
                    return false;
                }
                i += len + 2;
            }
            b'a'..=b'z' | b'A'..=b'Z' => {
                let start = i;
                while bytes.get(i).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_') {
                    i += 1;
                }
                let word = s.get(start..i).unwrap_or_default();
                let mut next = i;
                while bytes.get(next) == Some(&b' ') {
                    next += 1;
                }
                let ok = match bytes.get(next) {
                    Some(b'(') => {
                        SYM_FUNCTIONS.contains(&word)
                            || SYM_FUNCTION_FAMILIES.iter().any(|f| word.starts_with(f))
                    }
                    Some(b'=') if bytes.get(next + 1) != Some(&b'=') => SYM_ASSUMPTIONS.contains(&word),
                    _ => SYM_CONSTANTS.contains(&word) || is_symbol_name(word),
                };
                if !ok {
                    return false;
                }
            }
            b'+' | b'-' | b'*' | b'/' | b'%' | b'(' | b')' | b',' | b'=' | b'<' | b'>' | b'!'
            | b'&' | b'|' | b'~' | b'^' => i += 1,
            _ => return false,
        }
    }
    true
}

/// A symbol as torch names them: a few lowercase letters and a number (`s0`,
/// `u12`, `zuf3`).
fn is_symbol_name(word: &str) -> bool {
    let letters = word.bytes().take_while(u8::is_ascii_lowercase).count();
    let digits = word.len() - letters;
    (1..=4).contains(&letters) && digits > 0 && word.bytes().skip(letters).all(|b| b.is_ascii_digit())
}

/// A guard as torch's tracer writes it: comparisons and arithmetic of the
/// inputs' sizes, strides and offsets (`L['x'].size()[0] <= 1024`), in one line.
fn is_guard(s: &str) -> bool {
    const NAMES: [&str; 20] = [
        "L", "and", "or", "not", "is", "in", "True", "False", "None", "size", "stride",
        "storage_offset", "numel", "dim", "shape", "len", "abs", "min", "max", "int",
    ];
    let bytes = s.as_bytes();
    let mut i = 0;
    while let Some(&c) = bytes.get(i) {
        match c {
            b' ' | b'0'..=b'9' | b'+' | b'-' | b'*' | b'/' | b'%' | b'(' | b')' | b'[' | b']'
            | b',' | b'=' | b'<' | b'>' | b'!' | b'.' => i += 1,
            b'\'' | b'"' => {
                let close = bytes.get(i + 1..).and_then(|rest| rest.iter().position(|&b| b == c));
                let Some(len) = close else { return false };
                let text = bytes.get(i + 1..i + 1 + len).unwrap_or_default();
                if !text.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_') {
                    return false;
                }
                i += len + 2;
            }
            b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                let start = i;
                while bytes.get(i).is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_') {
                    i += 1;
                }
                if !NAMES.contains(&s.get(start..i).unwrap_or_default()) {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whys(json: &str) -> Vec<&'static str> {
        hazards(json.as_bytes()).unwrap().into_iter().map(|h| h.why).collect()
    }

    #[test]
    fn what_torch_writes_is_no_hazard() {
        for expr in [
            "Symbol('s77', positive=True, integer=True)",
            "s77 + 1",
            "2*s0 - 3",
            "Max(1, s0)",
            "FloorDiv(s0, 2) + Mod(u1, 4)",
            "Eq(s0, 4) & Ne(s1, 0)",
            "s0**2",
            "OpaqueUnaryFn_sqrt(s0)",
            "1.5e-3*s0",
        ] {
            assert!(is_sym_expr(expr), "{expr}");
        }
        let program = r#"{"graph": {"inputs": [{"as_tensor": {"name": "x"}}],
            "tensor_values": {"x": {"sizes": [{"as_expr": {"expr_str": "s0 + 1"}}]}}},
            "signature": {"in_spec": "[1, {\"type\": \"builtins.dict\", \"context\": \"[\\\"scale\\\"]\", \"children_spec\": []}]"},
            "guards_code": ["L['x'].size()[0] <= 1024"]}"#;
        assert_eq!(whys(program), Vec::<&str>::new());
    }

    #[test]
    fn each_way_to_run_code_is_a_hazard() {
        for expr in [
            "__import__('os').system('id') + 2",
            "exec('x')",
            "s0.__class__",
            "Symbol('x')[0]",
            "os",
            "lambdify(s0, s0)",
            "Symbol('a;b')",
        ] {
            assert!(!is_sym_expr(expr), "{expr}");
        }
        assert_eq!(
            whys(r#"{"a": {"expr_str": "__import__('os').system('id')"}}"#),
            [SYMPIFY]
        );
        assert_eq!(
            whys(r#"{"inputs": [{"as_tensor": {"name": "x=__import__('os').system('id')"}}]}"#),
            [NAME]
        );
        assert_eq!(whys(r#"{"as_name": "def"}"#), [NAME]);
        let spec = |context: &str| {
            let inner = serde_json::to_string(&serde_json::json!([1, {"type": "builtins.dict", "context": context, "children_spec": []}])).unwrap();
            serde_json::json!({"in_spec": inner}).to_string()
        };
        assert_eq!(
            whys(&spec(r#"[{"__enum__": true, "fqn": "ctypes:cdll", "name": "x.so"}]"#)),
            [ENUM]
        );
        assert_eq!(
            whys(&spec(r#"{"default_factory_module": "os", "default_factory_name": "system"}"#)),
            [FACTORY]
        );
        assert_eq!(
            whys(&spec(r#"{"default_factory_module": "builtins", "default_factory_name": "list"}"#)),
            Vec::<&str>::new()
        );
        assert_eq!(
            whys(r#"{"guards_code": ["1 #\n, 'a')\n__import__('os').system('id')"]}"#),
            [GUARD]
        );
        assert_eq!(whys(r#"{"guards_code": ["torch.os.system('id')"]}"#), [GUARD]);
    }

    #[test]
    fn what_an_oracle_campaign_found_is_a_hazard() {
        let spec = |context: serde_json::Value| {
            let inner = serde_json::to_string(&serde_json::json!([1, {"type": "collections.defaultdict", "context": context, "children_spec": []}])).unwrap();
            serde_json::json!({"in_spec": inner}).to_string()
        };
        // A context inline rather than in a string, as torch writes a defaultdict's.
        let factory = serde_json::json!({"default_factory_module": "os", "default_factory_name": "system"});
        assert_eq!(whys(&spec(factory)), [FACTORY]);
        // JSON only Python reads, beside an import.
        let nan = r#"{"in_spec": "[1, {\"type\": \"builtins.dict\", \"context\": \"[NaN, {\\\"__enum__\\\": true}]\", \"children_spec\": []}]"}"#;
        assert_eq!(whys(nan), [UNREADABLE_SPEC]);
        // Keyword names, argument names and string inputs written into code.
        assert_eq!(whys(&spec(serde_json::json!("[\"a')\\n__import__('os')\"]"))), [KEYWORD]);
        assert_eq!(whys(r#"{"forward_arg_names": ["x", "y=__import__('os')"]}"#), [ARGUMENT]);
        assert_eq!(whys(r#"{"as_string": "a' #\n"}"#), [STRING_INPUT]);
        assert_eq!(whys(r#"{"as_string": "cuda:0"}"#), Vec::<&str>::new());
    }

    #[test]
    fn json_it_cannot_read_to_its_end_is_an_error() {
        assert!(hazards(b"{\"a\": ").is_err());
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert!(hazards(deep.as_bytes()).is_err());
    }
}
