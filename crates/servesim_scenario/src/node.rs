//! A config document as a tree of [`Node`]s that remember where they came from.
//!
//! YAML and JSON both load through the YAML 1.2 parser (JSON is a subset), so every value
//! carries its line and column and validation can point at it. Overrides (`--set`) graft
//! nodes whose origin is the override, so errors name the flag instead of a line.

use std::borrow::Cow;
use std::fmt;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

/// Where a value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A position in the loaded document (1-based line and column).
    File {
        /// Line, from 1.
        line: u32,
        /// Column, from 1.
        col: u32,
    },
    /// The `index`-th `--set` override (from 1).
    Override(usize),
    /// Built-in (no source position).
    Builtin,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File { line, col } => write!(f, "line {line}, column {col}"),
            Origin::Override(i) => write!(f, "--set #{i}"),
            Origin::Builtin => f.write_str("built-in"),
        }
    }
}

/// A value and its origin.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The value.
    pub value: Value,
    /// Where it came from.
    pub origin: Origin,
}

/// A YAML/JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `null`, `~` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping with string keys, in document order.
    Map(Vec<(String, Origin, Node)>),
}

impl Value {
    /// A short name of the value's type for error messages.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }
}

impl Node {
    /// A node with no source position.
    #[must_use]
    pub fn builtin(value: Value) -> Self {
        Node { value, origin: Origin::Builtin }
    }

    /// The entry `key` of a mapping.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(m) => m.iter().find(|(k, _, _)| k == key).map(|(_, _, n)| n),
            _ => None,
        }
    }

    /// Sets the value at a dotted path, creating mappings on the way (used by `--set`).
    /// Replaces whole values: no sequence indexes, as AISimulate's `--set` does.
    ///
    /// # Errors
    /// When the path crosses a value that is not a mapping.
    pub fn set_path(&mut self, path: &str, value: Node) -> Result<(), String> {
        let mut cur = self;
        let parts: Vec<&str> = path.split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(format!("'{path}' is not a dotted path (empty segment)"));
        }
        for (i, part) in parts.iter().enumerate() {
            if matches!(cur.value, Value::Null) {
                cur.value = Value::Map(Vec::new());
            }
            let kind = cur.value.kind();
            let Value::Map(entries) = &mut cur.value else {
                return Err(format!(
                    "'{}' is {kind}, so '{part}' cannot be set inside it",
                    parts[..i].join(".")
                ));
            };
            let pos = match entries.iter().position(|(k, _, _)| k == part) {
                Some(p) => p,
                None => {
                    entries.push((
                        (*part).to_string(),
                        value.origin.clone(),
                        Node { value: Value::Null, origin: value.origin.clone() },
                    ));
                    entries.len() - 1
                }
            };
            if i + 1 == parts.len() {
                entries[pos].2 = value;
                return Ok(());
            }
            cur = &mut entries[pos].2;
        }
        Ok(())
    }
}

/// A document could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    /// Line, from 1.
    pub line: u32,
    /// Column, from 1.
    pub col: u32,
    /// The parser's message.
    pub message: String,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}: {}", self.line, self.col, self.message)
    }
}

#[allow(clippy::cast_possible_truncation)] // Documents are far smaller than 4 billion lines.
fn origin_of(span: &Span, over: Option<usize>) -> Origin {
    match over {
        Some(i) => Origin::Override(i),
        None => Origin::File { line: span.start.line() as u32, col: span.start.col() as u32 + 1 },
    }
}

/// Resolves a plain scalar by the YAML 1.2 core schema.
fn resolve_plain(s: &str) -> Value {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Value::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    let digits = |t: &str, radix: u32| !t.is_empty() && t.chars().all(|c| c.is_digit(radix));
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    if digits(body, 10) {
        if let Ok(i) = s.parse::<i64>() {
            return Value::Int(i);
        }
        if let Ok(f) = s.parse::<f64>() {
            return Value::Float(f);
        }
    }
    if let Some(h) = s.strip_prefix("0x") {
        if digits(h, 16) {
            if let Ok(i) = i64::from_str_radix(h, 16) {
                return Value::Int(i);
            }
        }
    }
    if let Some(o) = s.strip_prefix("0o") {
        if digits(o, 8) {
            if let Ok(i) = i64::from_str_radix(o, 8) {
                return Value::Int(i);
            }
        }
    }
    // Floats: [-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?
    let looks_float = {
        let (mant, exp) = match body.find(['e', 'E']) {
            Some(i) => (&body[..i], Some(&body[i + 1..])),
            None => (body, None),
        };
        let mant_ok = match mant.split_once('.') {
            Some((a, b)) => {
                (digits(a, 10) || a.is_empty())
                    && (digits(b, 10) || b.is_empty())
                    && !(a.is_empty() && b.is_empty())
            }
            None => digits(mant, 10),
        };
        let exp_ok = exp.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e), 10));
        mant_ok && exp_ok
    };
    if looks_float {
        if let Ok(f) = s.parse::<f64>() {
            return Value::Float(f);
        }
    }
    Value::Str(s.to_string())
}

enum Frame {
    Seq(Vec<Node>, Origin, usize),
    Map(Vec<(String, Origin, Node)>, Origin, Option<(String, Origin)>, usize),
}

/// Parses one YAML (or JSON) document. `override_index` marks every node as coming from that
/// `--set` instead of a file position.
///
/// # Errors
/// A [`SyntaxError`] with the position of the first problem: invalid YAML, several
/// documents, duplicate keys, keys that are not scalars, or unknown aliases.
pub fn parse(text: &str, override_index: Option<usize>) -> Result<Node, SyntaxError> {
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut anchors: Vec<(usize, Node)> = Vec::new();
    let mut root: Option<Node> = None;
    let mut documents = 0;
    let err = |span: &Span, message: String| SyntaxError {
        line: u32::try_from(span.start.line()).unwrap_or(u32::MAX),
        col: u32::try_from(span.start.col() + 1).unwrap_or(u32::MAX),
        message,
    };
    while let Some(ev) = parser.next_event() {
        let (ev, span) = ev.map_err(|e| SyntaxError {
            line: u32::try_from(e.marker().line()).unwrap_or(u32::MAX),
            col: u32::try_from(e.marker().col() + 1).unwrap_or(u32::MAX),
            message: e.info().to_string(),
        })?;
        let done: Option<(Node, usize)> = match ev {
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => None,
            Event::DocumentStart(_) => {
                documents += 1;
                if documents > 1 {
                    return Err(err(&span, "expected a single document, found another '---'".into()));
                }
                None
            }
            Event::Alias(id) => match anchors.iter().rev().find(|(a, _)| *a == id) {
                Some((_, n)) => Some((n.clone(), 0)),
                None => return Err(err(&span, "alias to an unknown anchor".into())),
            },
            Event::Scalar(text, style, anchor, tag) => {
                let is_str_tag = tag.as_ref().is_some_and(|t| t.suffix == "str");
                let value = if style == ScalarStyle::Plain && !is_str_tag {
                    resolve_plain(&text)
                } else {
                    Value::Str(Cow::into_owned(text))
                };
                Some((Node { value, origin: origin_of(&span, override_index) }, anchor))
            }
            Event::SequenceStart(anchor, _) => {
                stack.push(Frame::Seq(Vec::new(), origin_of(&span, override_index), anchor));
                None
            }
            Event::MappingStart(anchor, _) => {
                stack.push(Frame::Map(Vec::new(), origin_of(&span, override_index), None, anchor));
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq(items, origin, anchor)) => {
                    Some((Node { value: Value::Seq(items), origin }, anchor))
                }
                _ => return Err(err(&span, "unbalanced sequence".into())),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map(items, origin, _, anchor)) => {
                    Some((Node { value: Value::Map(items), origin }, anchor))
                }
                _ => return Err(err(&span, "unbalanced mapping".into())),
            },
        };
        let Some((node, anchor)) = done else { continue };
        if anchor != 0 {
            anchors.push((anchor, node.clone()));
        }
        match stack.last_mut() {
            None => root = Some(node),
            Some(Frame::Seq(items, _, _)) => items.push(node),
            Some(Frame::Map(items, _, key, _)) => match key.take() {
                None => {
                    let name = match node.value {
                        Value::Str(s) => s,
                        Value::Int(i) => i.to_string(),
                        Value::Bool(b) => b.to_string(),
                        Value::Null => "null".to_string(),
                        Value::Float(f) => f.to_string(),
                        Value::Seq(_) | Value::Map(_) => {
                            return Err(err(
                                &span,
                                "mapping keys must be plain names, not lists or mappings".into(),
                            ))
                        }
                    };
                    if items.iter().any(|(k, _, _)| *k == name) {
                        return Err(err(&span, format!("duplicate key '{name}'")));
                    }
                    *key = Some((name, node.origin));
                }
                Some((k, korigin)) => items.push((k, korigin, node)),
            },
        }
    }
    Ok(root.unwrap_or(Node { value: Value::Null, origin: Origin::File { line: 1, col: 1 } }))
}

/// Writes a node back as block-style YAML (keys in their order, strings quoted when needed).
#[must_use]
pub fn to_yaml(node: &Node) -> String {
    let mut out = String::new();
    write_yaml(&node.value, 0, &mut out);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

pub(crate) fn scalar_yaml(v: &Value) -> Option<String> {
    Some(match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => {
            if f.is_nan() {
                ".nan".into()
            } else if f.is_infinite() {
                if *f > 0.0 {
                    ".inf".into()
                } else {
                    "-.inf".into()
                }
            } else {
                format!("{f:?}")
            }
        }
        Value::Str(s) => {
            let plain_ok = !s.is_empty()
                && matches!(resolve_plain(s), Value::Str(_))
                && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
                && !s.starts_with(['-', '.']);
            if plain_ok {
                s.clone()
            } else {
                serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
            }
        }
        Value::Seq(items) if items.is_empty() => "[]".into(),
        Value::Map(items) if items.is_empty() => "{}".into(),
        Value::Seq(_) | Value::Map(_) => return None,
    })
}

fn write_yaml(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Map(items) if !items.is_empty() => {
            for (k, _, n) in items {
                match scalar_yaml(&n.value) {
                    Some(s) => out.push_str(&format!("{pad}{k}: {s}\n")),
                    None => {
                        out.push_str(&format!("{pad}{k}:\n"));
                        write_yaml(&n.value, indent + 2, out);
                    }
                }
            }
        }
        Value::Seq(items) if !items.is_empty() => {
            for n in items {
                match scalar_yaml(&n.value) {
                    Some(s) => out.push_str(&format!("{pad}- {s}\n")),
                    None => {
                        let mut inner = String::new();
                        write_yaml(&n.value, indent + 2, &mut inner);
                        let trimmed = inner.trim_start();
                        out.push_str(&format!("{pad}- {trimmed}"));
                    }
                }
            }
        }
        other => {
            if let Some(s) = scalar_yaml(other) {
                out.push_str(&format!("{pad}{s}\n"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_and_types() {
        let n = parse("a:\n  b: 3\n  c: '3'\n  d: 1.5e3\n  e: ~\n  f: [x, true]\n", None).unwrap();
        let a = n.get("a").unwrap();
        assert_eq!(a.get("b").unwrap().value, Value::Int(3));
        assert_eq!(a.get("b").unwrap().origin, Origin::File { line: 2, col: 6 });
        assert_eq!(a.get("c").unwrap().value, Value::Str("3".into()));
        assert_eq!(a.get("d").unwrap().value, Value::Float(1500.0));
        assert_eq!(a.get("e").unwrap().value, Value::Null);
        let Value::Seq(f) = &a.get("f").unwrap().value else { panic!() };
        assert_eq!(f[1].value, Value::Bool(true));
    }

    #[test]
    fn json_with_tabs_parses_with_positions() {
        let n = parse("{\n\t\"engine\": {\n\t\t\"model\": \"m\",\n\t\t\"n\": 2\n\t}\n}\n", None).unwrap();
        let e = n.get("engine").unwrap();
        assert_eq!(e.get("n").unwrap().value, Value::Int(2));
        assert_eq!(e.get("model").unwrap().origin, Origin::File { line: 3, col: 12 });
    }

    #[test]
    fn syntax_errors_have_positions() {
        let e = parse("a: [1, 2\nb: 3\n", None).unwrap_err();
        assert!(e.line >= 1, "{e}");
        let dup = parse("a: 1\na: 2\n", None).unwrap_err();
        assert!(dup.message.contains("duplicate key 'a'"));
        assert_eq!(dup.line, 2);
        assert!(parse("a: 1\n---\nb: 2\n", None).is_err());
    }

    #[test]
    fn anchors_and_aliases_expand() {
        let n = parse("x: &v {k: 1}\ny: *v\n", None).unwrap();
        assert_eq!(n.get("y").unwrap().get("k").unwrap().value, Value::Int(1));
    }

    #[test]
    fn set_path_creates_and_replaces() {
        let mut n = parse("traffic:\n  load: {type: concurrency}\n", None).unwrap();
        n.set_path("traffic.load", parse("{type: poisson, requests_per_second: 2}", Some(1)).unwrap())
            .unwrap();
        n.set_path("engine.model", parse("m", Some(2)).unwrap()).unwrap();
        assert_eq!(
            n.get("traffic").unwrap().get("load").unwrap().get("type").unwrap().value,
            Value::Str("poisson".into())
        );
        assert_eq!(n.get("engine").unwrap().get("model").unwrap().origin, Origin::Override(2));
        assert!(n.set_path("engine.model.x", Node::builtin(Value::Null)).is_err());
    }

    #[test]
    fn yaml_round_trip() {
        let src = "engine:\n  model: Qwen/Qwen3-32B\n  workers:\n    aggregated: {}\n  list:\n  - 1\n  - a: 2\n    b: x y\ntraffic:\n  rate: 2.5\n";
        let n = parse(src, None).unwrap();
        let back = parse(&to_yaml(&n), None).unwrap();
        fn strip(v: &Value) -> String {
            to_yaml(&Node::builtin(v.clone()))
        }
        assert_eq!(strip(&n.value), strip(&back.value));
    }

    #[test]
    fn plain_scalar_resolution() {
        assert_eq!(resolve_plain("0x1F"), Value::Int(31));
        assert_eq!(resolve_plain("-7"), Value::Int(-7));
        assert_eq!(resolve_plain(".5"), Value::Float(0.5));
        assert_eq!(resolve_plain("1e9"), Value::Float(1e9));
        assert_eq!(resolve_plain("h200_sxm"), Value::Str("h200_sxm".into()));
        assert_eq!(resolve_plain("1.2.3"), Value::Str("1.2.3".into()));
        assert_eq!(resolve_plain("0.24.0"), Value::Str("0.24.0".into()));
    }
}
