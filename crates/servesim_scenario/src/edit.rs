//! Edits of a config's text that keep what the user wrote: comments, key order, flow or
//! block style. The page's scenario form changes one value at a time through [`set`]; only
//! the characters of that value change, so the YAML editor beside it stays the user's text.
//!
//! A value that exists is replaced in place. A missing one is inserted into its nearest
//! existing mapping (a new line in a block mapping, `, key: value` in a flow mapping). Only
//! when the text offers no such place (a scalar in the way, an empty document) is the
//! document written afresh by [`node::to_yaml`], keeping its leading comment block.

use saphyr_parser::{Event, Parser, Span};

use crate::diag::join;
use crate::node::{self, Node, SyntaxError, Value};

/// Where a mapping entry sits in the text (byte offsets).
#[derive(Clone, Debug)]
struct Entry {
    /// Dotted path of the entry.
    path: String,
    /// Start of its key.
    key_start: usize,
    /// Start and end of its value (for a collection, its first and last character).
    value: (usize, usize),
    /// The value is a mapping: where its closing `}` is when written in flow style.
    map: Option<MapShape>,
    /// The entry's mapping is written in flow style (`{a: 1, b: 2}`).
    in_flow: bool,
}

#[derive(Clone, Copy, Debug)]
struct MapShape {
    /// Flow style (`{...}`), with the byte offset of its `}`.
    flow_close: Option<usize>,
    /// Entries.
    len: usize,
    /// End of its last entry's value.
    last_end: usize,
    /// Column (bytes from line start) of its keys in block style.
    key_col: usize,
}

enum Frame {
    Map { path: String, flow: bool, key: Option<(String, usize)>, shape: MapShape, entry: Option<usize> },
    Seq { path: String, index: usize, entry: Option<usize> },
}

/// Character index → byte offset.
struct Offsets(Vec<usize>);

impl Offsets {
    fn new(text: &str) -> Self {
        let mut v: Vec<usize> = text.char_indices().map(|(b, _)| b).collect();
        v.push(text.len());
        Offsets(v)
    }
    fn at(&self, chars: usize) -> usize {
        self.0.get(chars).copied().unwrap_or_else(|| self.0.last().copied().unwrap_or(0))
    }
}

fn line_start(text: &str, at: usize) -> usize {
    text[..at].rfind('\n').map_or(0, |i| i + 1)
}

/// Every mapping entry of the document, and the root mapping's shape.
fn entries(text: &str) -> Result<(Vec<Entry>, Option<MapShape>), SyntaxError> {
    // Parse once the way the loader does, so errors are the same ones.
    node::parse(text, None)?;
    let offs = Offsets::new(text);
    let mut parser = Parser::new_from_str(text);
    let mut stack: Vec<Frame> = Vec::new();
    let mut out: Vec<Entry> = Vec::new();
    let mut root = None;
    let b = |s: &Span| (offs.at(s.start.index()), offs.at(s.end.index()));
    while let Some(ev) = parser.next_event() {
        let Ok((ev, span)) = ev else { break };
        let (start, end) = b(&span);
        // A value begins: the path it gets, and the entry it fills (if in a mapping).
        let begin_value = |stack: &mut Vec<Frame>, out: &mut Vec<Entry>| -> Option<String> {
            match stack.last_mut() {
                None => Some(String::new()),
                Some(Frame::Seq { path, index, .. }) => {
                    let p = join(path, &index.to_string());
                    *index += 1;
                    Some(p)
                }
                Some(Frame::Map { path, flow, key, .. }) => match key.take() {
                    None => None,
                    Some((k, key_start)) => {
                        let p = join(path, &k);
                        out.push(Entry {
                            path: p.clone(),
                            key_start,
                            value: (start, end),
                            map: None,
                            in_flow: *flow,
                        });
                        Some(p)
                    }
                },
            }
        };
        match ev {
            Event::Scalar(value, ..) => match begin_value(&mut stack, &mut out) {
                Some(_) => {
                    if let Some(Frame::Map { shape, .. }) = stack.last_mut() {
                        shape.len += 1;
                        shape.last_end = end;
                    }
                }
                None => {
                    if let Some(Frame::Map { key, shape, .. }) = stack.last_mut() {
                        *key = Some((value.into_owned(), start));
                        if shape.len == 0 {
                            shape.key_col = start - line_start(text, start);
                        }
                    }
                }
            },
            Event::MappingStart(..) | Event::SequenceStart(..) => {
                let is_map = matches!(ev, Event::MappingStart(..));
                let flow = text[start..].starts_with(if is_map { '{' } else { '[' });
                let path = begin_value(&mut stack, &mut out).unwrap_or_default();
                let entry = match stack.last() {
                    Some(Frame::Map { .. }) => Some(out.len() - 1),
                    _ => None,
                };
                let shape = MapShape { flow_close: None, len: 0, last_end: end, key_col: 0 };
                stack.push(if is_map {
                    Frame::Map { path, flow, key: None, shape, entry }
                } else {
                    Frame::Seq { path, index: 0, entry }
                });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                let (entry, shape, last) = match stack.pop() {
                    Some(Frame::Map { flow, mut shape, entry, .. }) => {
                        if flow {
                            shape.flow_close = Some(start);
                            shape.last_end = end;
                        }
                        (entry, Some(shape), shape.last_end)
                    }
                    Some(Frame::Seq { entry, .. }) => (entry, None, end),
                    None => (None, None, end),
                };
                if let Some(i) = entry {
                    out[i].value.1 = last;
                    out[i].map = shape;
                }
                match stack.last_mut() {
                    Some(Frame::Map { shape: parent, .. }) => {
                        parent.len += 1;
                        parent.last_end = last;
                    }
                    Some(Frame::Seq { .. }) => {}
                    None => root = shape,
                }
            }
            _ => {}
        }
    }
    Ok((out, root))
}

/// The value at a dotted path of a parsed document.
#[must_use]
pub fn lookup<'a>(root: &'a Node, path: &str) -> Option<&'a Node> {
    path.split('.').try_fold(root, |n, k| n.get(k))
}

/// `value` as YAML written inside a line: a scalar as is, a collection in flow style.
fn inline(value: &Value) -> String {
    match value {
        Value::Seq(items) => {
            format!("[{}]", items.iter().map(|n| inline(&n.value)).collect::<Vec<_>>().join(", "))
        }
        Value::Map(items) => format!(
            "{{{}}}",
            items.iter().map(|(k, _, n)| format!("{k}: {}", inline(&n.value))).collect::<Vec<_>>().join(", ")
        ),
        v => node::scalar_yaml(v).unwrap_or_default(),
    }
}

/// Sets (`Some`) or removes (`None`) the value at a dotted path of config text.
///
/// # Errors
/// The document does not parse, or the path crosses a value that is not a mapping.
pub fn set(text: &str, path: &str, value: Option<&Value>) -> Result<String, String> {
    let (found, root) = entries(text).map_err(|e| e.to_string())?;
    if let Some(e) = found.iter().find(|e| e.path == path) {
        return Ok(match value {
            Some(v) => splice(text, e.value.0, e.value.1, &inline(v)),
            None => remove(text, e, &found).unwrap_or_else(|| rewrite(text, path, None))?,
        });
    }
    let Some(v) = value else { return Ok(text.to_string()) };
    // The nearest existing mapping on the path, and the keys still to create below it.
    let keys: Vec<&str> = path.split('.').collect();
    for cut in (0..keys.len()).rev() {
        let parent = keys[..cut].join(".");
        let shape = if parent.is_empty() {
            root
        } else {
            match found.iter().find(|e| e.path == parent) {
                Some(e) if e.map.is_some() => e.map,
                Some(_) => break,
                None => continue,
            }
        };
        let Some(shape) = shape else { break };
        let rest = &keys[cut..];
        let mut nested = v.clone();
        for k in rest[1..].iter().rev() {
            nested = Value::Map(vec![((*k).to_string(), node::Origin::Builtin, Node::builtin(nested))]);
        }
        let entry = format!("{}: {}", rest[0], inline(&nested));
        if let Some(close) = shape.flow_close {
            let sep = if shape.len > 0 { ", " } else { "" };
            return Ok(splice(text, close, close, &format!("{sep}{entry}")));
        }
        if shape.len == 0 {
            break;
        }
        let at = text[shape.last_end..].find('\n').map_or(text.len(), |i| shape.last_end + i);
        let lead = if at == text.len() && !text.ends_with('\n') { "\n" } else { "" };
        let line = format!("{lead}\n{}{entry}", " ".repeat(shape.key_col));
        let line = if lead.is_empty() { line } else { line.replacen("\n\n", "\n", 1) };
        return Ok(splice(text, at, at, &line));
    }
    rewrite(text, path, Some(v))
}

fn splice(text: &str, from: usize, to: usize, with: &str) -> String {
    let mut s = String::with_capacity(text.len() + with.len());
    s.push_str(&text[..from]);
    s.push_str(with);
    s.push_str(&text[to..]);
    s
}

/// Removes a block-style entry that sits alone on its lines; `None` when it does not.
fn remove(text: &str, e: &Entry, all: &[Entry]) -> Option<Result<String, String>> {
    if e.in_flow {
        // `, key: value` inside `{...}`: drop it with the comma that joins it.
        let before = text[..e.key_start].trim_end();
        let after = &text[e.value.1..];
        let after_trim = after.trim_start();
        return Some(Ok(if let Some(stripped) = before.strip_suffix(',') {
            format!("{stripped}{after}")
        } else if let Some(rest) = after_trim.strip_prefix(',') {
            format!("{}{}", &text[..e.key_start], rest.trim_start())
        } else {
            format!("{}{}", &text[..e.key_start], after_trim)
        }));
    }
    let start = line_start(text, e.key_start);
    if !text[start..e.key_start].trim().is_empty() {
        return None;
    }
    let end = text[e.value.1..].find('\n').map_or(text.len(), |i| e.value.1 + i + 1);
    let tail = text[e.value.1..end].trim();
    if !(tail.is_empty() || tail.starts_with('#')) {
        return None;
    }
    // The last entry of its mapping: the mapping would be left with a dangling `key:`.
    let parent = e.path.rsplit_once('.').map_or("", |(p, _)| p);
    let siblings = all.iter().filter(|o| o.path.rsplit_once('.').map_or("", |(p, _)| p) == parent).count();
    if siblings == 1 && !parent.is_empty() {
        return None;
    }
    Some(Ok(splice(text, start, end, "")))
}

/// Writes the document afresh with the change, keeping its leading comment block.
fn rewrite(text: &str, path: &str, value: Option<&Value>) -> Result<String, String> {
    let mut root = node::parse(text, None).map_err(|e| e.to_string())?;
    match value {
        Some(v) => root.set_path(path, Node::builtin(v.clone()))?,
        None => remove_path(&mut root, path),
    }
    let header: String =
        text.lines().take_while(|l| l.trim_start().starts_with('#')).map(|l| format!("{l}\n")).collect();
    Ok(format!("{header}{}", node::to_yaml(&root)))
}

fn remove_path(root: &mut Node, path: &str) {
    let (parent, key) = path.rsplit_once('.').unwrap_or(("", path));
    let target = if parent.is_empty() {
        Some(root)
    } else {
        parent.split('.').try_fold(root, |n, k| match &mut n.value {
            Value::Map(m) => m.iter_mut().find(|(name, _, _)| name == k).map(|(_, _, n)| n),
            _ => None,
        })
    };
    if let Some(Node { value: Value::Map(m), .. }) = target {
        m.retain(|(k, _, _)| k != key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i64) -> Value {
        Value::Int(i)
    }

    const DOC: &str = "# header\nengine:\n  model: Qwen/Qwen3-32B-FP8 # the model\n  workers:\n    aggregated: {}\ntraffic:\n  load: {type: concurrency, concurrency: 10}\n  stop:\n    requests: 100\n";

    #[test]
    fn replaces_a_scalar_in_place() {
        let out = set(DOC, "engine.model", Some(&Value::Str("Qwen/Qwen3-8B".into()))).unwrap();
        assert_eq!(out, DOC.replace("Qwen/Qwen3-32B-FP8", "Qwen/Qwen3-8B"));
        let out = set(DOC, "traffic.load.concurrency", Some(&int(32))).unwrap();
        assert_eq!(out, DOC.replace("concurrency: 10", "concurrency: 32"));
    }

    #[test]
    fn inserts_into_flow_and_block_mappings() {
        let out = set(DOC, "engine.workers.aggregated.parallelism.tensor", Some(&int(2))).unwrap();
        assert!(out.contains("aggregated: {parallelism: {tensor: 2}}\n"), "{out}");
        let out = set(DOC, "traffic.load.requests_per_second", Some(&Value::Float(2.5))).unwrap();
        assert!(out.contains("{type: concurrency, concurrency: 10, requests_per_second: 2.5}"), "{out}");
        let out = set(DOC, "traffic.stop.max_virtual_time_seconds", Some(&int(60))).unwrap();
        assert!(out.ends_with("  stop:\n    requests: 100\n    max_virtual_time_seconds: 60\n"), "{out}");
        let out = set(DOC, "evaluation.sla.ttft_ms", Some(&int(300))).unwrap();
        assert!(out.ends_with("\nevaluation: {sla: {ttft_ms: 300}}\n"), "{out}");
        // Comments survive every edit.
        assert!(out.starts_with("# header\n") && out.contains("# the model"));
        let n = node::parse(&out, None).unwrap();
        assert_eq!(lookup(&n, "evaluation.sla.ttft_ms").unwrap().value, int(300));
    }

    #[test]
    fn removes_entries() {
        let out = set(DOC, "traffic.load.concurrency", None).unwrap();
        assert!(out.contains("load: {type: concurrency}"), "{out}");
        let out = set(DOC, "traffic.load.type", None).unwrap();
        assert!(out.contains("load: {concurrency: 10}"), "{out}");
        let out = set(DOC, "engine.model", None).unwrap();
        assert!(!out.contains("model") && out.starts_with("# header\nengine:\n  workers:"), "{out}");
        // Removing the last entry of a block mapping rewrites rather than leave `stop:` empty.
        let out = set(DOC, "traffic.stop.requests", None).unwrap();
        let n = node::parse(&out, None).unwrap();
        assert!(lookup(&n, "traffic.stop.requests").is_none());
        assert!(out.starts_with("# header\n"));
        // Removing what is not there changes nothing.
        assert_eq!(set(DOC, "router.policy", None).unwrap(), DOC);
    }

    #[test]
    fn scalars_in_the_way_and_bad_text_are_errors() {
        assert!(set(DOC, "engine.model.name", Some(&int(1))).unwrap_err().contains("engine.model"));
        assert!(set("a: [", "a", Some(&int(1))).is_err());
        // An empty document is written afresh.
        assert_eq!(set("", "engine.model", Some(&Value::Str("x".into()))).unwrap(), "engine:\n  model: x\n");
    }

    #[test]
    fn quoted_values_are_replaced_with_their_quotes() {
        for doc in ["a:\n  b: \"x y\"\n", "a:\n  b: 'x y'\n", "a: {b: \"x\", c: 1}\n"] {
            let out = set(doc, "a.b", Some(&Value::Str("z".into()))).unwrap();
            let n = node::parse(&out, None).unwrap();
            assert_eq!(lookup(&n, "a.b").unwrap().value, Value::Str("z".into()), "{doc} -> {out}");
            assert!(!out.contains('"') && !out.contains('\''), "{out}");
        }
    }

    #[test]
    fn multibyte_text_before_the_value() {
        let doc = "# über → ünïcode\nengine:\n  model: a # ü\n  backend: vllm\n";
        let out = set(doc, "engine.backend", Some(&Value::Str("sglang".into()))).unwrap();
        assert_eq!(out, doc.replace("vllm", "sglang"));
    }

    #[test]
    fn every_edit_reads_back() {
        // Property: after set(path, v), the document has v at path and nothing else changed.
        let paths = [
            "engine.model",
            "engine.workers.aggregated.parallelism.replicas",
            "engine.workers.aggregated.scheduler.max_sequences",
            "traffic.load.concurrency",
            "traffic.stop.requests",
            "traffic.source.input_tokens",
            "evaluation.sla.itl_ms",
        ];
        let mut doc = DOC.to_string();
        for (i, p) in paths.iter().enumerate() {
            let before = node::parse(&doc, None).unwrap();
            let v = int(i64::try_from(i).unwrap() + 7);
            doc = set(&doc, p, Some(&v)).unwrap();
            let mut after = node::parse(&doc, None).unwrap();
            assert_eq!(lookup(&after, p).unwrap().value, v, "{p}: {doc}");
            // Undo the change on the tree: the rest must equal the document before.
            let mut expect = before.clone();
            expect.set_path(p, Node::builtin(v.clone())).unwrap();
            strip(&mut after);
            strip(&mut expect);
            assert_eq!(after, expect, "{p}");
        }
    }

    fn strip(n: &mut Node) {
        n.origin = node::Origin::Builtin;
        match &mut n.value {
            Value::Map(m) => m.iter_mut().for_each(|(_, o, c)| {
                *o = node::Origin::Builtin;
                strip(c);
            }),
            Value::Seq(s) => s.iter_mut().for_each(strip),
            _ => {}
        }
    }
}
