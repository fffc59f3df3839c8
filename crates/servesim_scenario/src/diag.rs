//! Validation diagnostics: every problem in a config, each with its dotted path and origin.

use std::fmt;

use crate::node::{Node, Origin, Value};

/// What kind of problem a diagnostic reports (all map to exit code 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiagKind {
    /// The text is not valid YAML/JSON.
    Syntax,
    /// Unknown key, missing required key, or wrong type.
    Schema,
    /// A value outside its allowed domain.
    Domain,
    /// Valid, but a combination servesim does not simulate.
    Unsupported,
}

/// One problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// Dotted path of the offending value (`""` for the document root).
    pub path: String,
    /// Where the value came from.
    pub origin: Origin,
    /// What is wrong, and what would be right.
    pub message: String,
    /// Category.
    pub kind: DiagKind,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() { "(document)" } else { &self.path };
        match &self.origin {
            Origin::Builtin => write!(f, "{path}: {}", self.message),
            o => write!(f, "{path} ({o}): {}", self.message),
        }
    }
}

/// Collects diagnostics while decoding.
#[derive(Debug, Default)]
pub struct Cx {
    /// Everything found so far, in document order of discovery.
    pub diags: Vec<Diagnostic>,
}

impl Cx {
    /// Records a problem.
    pub fn report(&mut self, kind: DiagKind, path: &str, origin: &Origin, message: impl Into<String>) {
        self.diags.push(Diagnostic {
            path: path.to_string(),
            origin: origin.clone(),
            message: message.into(),
            kind,
        });
    }

    /// Records a domain problem.
    pub fn domain(&mut self, path: &str, node: &Node, message: impl Into<String>) {
        self.report(DiagKind::Domain, path, &node.origin, message);
    }

    /// Records a type or shape problem.
    pub fn schema(&mut self, path: &str, node: &Node, message: impl Into<String>) {
        self.report(DiagKind::Schema, path, &node.origin, message);
    }

    /// Records a feature servesim does not simulate.
    pub fn unsupported(&mut self, path: &str, node: &Node, message: impl Into<String>) {
        self.report(DiagKind::Unsupported, path, &node.origin, message);
    }
}

/// Joins a path and a key.
#[must_use]
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Edit distance, for "did you mean" hints.
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The closest allowed name within two edits, or the only one that starts with `name`
/// (so `h200` suggests `h200_sxm`).
#[must_use]
pub fn suggest<'a>(name: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let close =
        allowed.iter().map(|a| (levenshtein(name, a), *a)).filter(|(d, _)| *d <= 2).min_by_key(|(d, _)| *d);
    if let Some((_, a)) = close {
        return Some(a);
    }
    let lower = name.to_ascii_lowercase();
    let mut prefixed =
        allowed.iter().filter(|a| !lower.is_empty() && a.to_ascii_lowercase().starts_with(&lower));
    match (prefixed.next(), prefixed.next()) {
        (Some(a), None) => Some(a),
        _ => None,
    }
}

/// A mapping being decoded: hands out entries and reports the ones nobody asked for.
pub struct Fields<'a> {
    path: String,
    entries: Vec<(&'a str, &'a Origin, &'a Node)>,
    used: Vec<bool>,
}

impl<'a> Fields<'a> {
    /// Views `node` as a mapping (`null` is an empty mapping). Reports and returns `None` otherwise.
    pub fn of(node: &'a Node, path: &str, cx: &mut Cx) -> Option<Self> {
        match &node.value {
            Value::Map(items) => Some(Fields {
                path: path.to_string(),
                entries: items.iter().map(|(k, o, n)| (k.as_str(), o, n)).collect(),
                used: vec![false; items.len()],
            }),
            Value::Null => Some(Fields { path: path.to_string(), entries: Vec::new(), used: Vec::new() }),
            other => {
                cx.schema(path, node, format!("expected a mapping, found {}", other.kind()));
                None
            }
        }
    }

    /// The path of this mapping.
    #[must_use]
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Takes entry `key` with its path; an explicit `null` counts as absent.
    pub fn take(&mut self, key: &str) -> Option<(&'a Node, String)> {
        let i = self.entries.iter().position(|(k, _, _)| *k == key)?;
        self.used[i] = true;
        let node = self.entries[i].2;
        if matches!(node.value, Value::Null) {
            return None;
        }
        Some((node, join(&self.path, key)))
    }

    /// True when the key is present (even as `null`).
    #[must_use]
    pub fn has(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _, n)| *k == key && !matches!(n.value, Value::Null))
    }

    /// Reports keys never taken: unknown ones (with a hint from `schema`) and known ones that
    /// do not apply in this context (`context` says why).
    pub fn finish(self, cx: &mut Cx, schema: &[&str], context: &str) {
        for (i, (k, origin, node)) in self.entries.iter().enumerate() {
            if self.used[i] {
                continue;
            }
            let path = join(&self.path, k);
            if schema.contains(k) {
                if !matches!(node.value, Value::Null) {
                    cx.report(DiagKind::Schema, &path, origin, format!("does not apply {context}"));
                }
            } else {
                let hint = suggest(k, schema).map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default();
                cx.report(
                    DiagKind::Schema,
                    &path,
                    origin,
                    format!("unknown key{hint}; allowed here: {}", schema.join(", ")),
                );
            }
        }
    }
}

/// An integer within `lo..=hi` (integral floats such as `1e4` are accepted).
pub fn int_in(node: &Node, path: &str, cx: &mut Cx, lo: i64, hi: i64) -> Option<i64> {
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let v = match node.value {
        Value::Int(i) => i,
        Value::Float(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 => f as i64,
        ref other => {
            cx.schema(path, node, format!("expected an integer, found {}", other.kind()));
            return None;
        }
    };
    if v < lo || v > hi {
        let range = if hi == i64::MAX { format!("at least {lo}") } else { format!("between {lo} and {hi}") };
        cx.domain(path, node, format!("must be {range}, got {v}"));
        return None;
    }
    Some(v)
}

/// A `u32` within `lo..=hi`.
pub fn u32_in(node: &Node, path: &str, cx: &mut Cx, lo: u32, hi: u32) -> Option<u32> {
    int_in(node, path, cx, i64::from(lo), i64::from(hi)).and_then(|v| u32::try_from(v).ok())
}

/// A `u64` at least `lo`.
pub fn u64_min(node: &Node, path: &str, cx: &mut Cx, lo: u64) -> Option<u64> {
    int_in(node, path, cx, i64::try_from(lo).unwrap_or(i64::MAX), i64::MAX)
        .and_then(|v| u64::try_from(v).ok())
}

/// A finite number.
pub fn number(node: &Node, path: &str, cx: &mut Cx) -> Option<f64> {
    #[allow(clippy::cast_precision_loss)]
    let v = match node.value {
        Value::Int(i) => i as f64,
        Value::Float(f) => f,
        ref other => {
            cx.schema(path, node, format!("expected a number, found {}", other.kind()));
            return None;
        }
    };
    if !v.is_finite() {
        cx.domain(path, node, "must be a finite number");
        return None;
    }
    Some(v)
}

/// A number greater than zero.
pub fn positive(node: &Node, path: &str, cx: &mut Cx) -> Option<f64> {
    let v = number(node, path, cx)?;
    if v <= 0.0 {
        cx.domain(path, node, format!("must be greater than 0, got {}", shown(v)));
        return None;
    }
    Some(v)
}

/// A number within `lo..=hi`.
pub fn number_in(node: &Node, path: &str, cx: &mut Cx, lo: f64, hi: f64) -> Option<f64> {
    let v = number(node, path, cx)?;
    if v < lo || v > hi {
        cx.domain(path, node, format!("must be between {} and {}, got {}", shown(lo), shown(hi), shown(v)));
        return None;
    }
    Some(v)
}

/// A number as a message shows it: plain in the usual range, in scientific notation when
/// tiny or huge (`1e-300` would otherwise print as three hundred digits).
fn shown(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && !(1e-6..1e15).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A boolean.
pub fn boolean(node: &Node, path: &str, cx: &mut Cx) -> Option<bool> {
    match node.value {
        Value::Bool(b) => Some(b),
        ref other => {
            cx.schema(path, node, format!("expected true or false, found {}", other.kind()));
            None
        }
    }
}

/// A string.
pub fn string(node: &Node, path: &str, cx: &mut Cx) -> Option<String> {
    match &node.value {
        Value::Str(s) => Some(s.clone()),
        // Version-like numbers written bare (e.g. 1.5) are accepted as their text.
        Value::Int(i) => Some(i.to_string()),
        Value::Float(f) => Some(f.to_string()),
        other => {
            cx.schema(path, node, format!("expected a string, found {}", other.kind()));
            None
        }
    }
}

/// One of a fixed set of names.
pub fn choice<'c>(node: &Node, path: &str, cx: &mut Cx, allowed: &[&'c str]) -> Option<&'c str> {
    let s = string(node, path, cx)?;
    if let Some(a) = allowed.iter().find(|a| **a == s) {
        return Some(a);
    }
    let hint = suggest(&s, allowed).map(|a| format!(" (did you mean '{a}'?)")).unwrap_or_default();
    cx.domain(path, node, format!("'{s}' is not one of: {}{hint}", allowed.join(", ")));
    None
}
