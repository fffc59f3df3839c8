//! Weka coding-agent traces (kv-cache-tester's, SemiAnalysis's AgentX corpora; REF §4).
//!
//! A conversation is a JSON object whose `requests` list holds API calls (`type` `n` or `s`:
//! `t` seconds from the conversation's start, `in`, `out`, `hash_ids` in blocks of the
//! conversation's `block_size`, optionally `api_time`, the recorded response's seconds) and
//! subagent markers (`type: subagent`: `t` the spawn, `agent_id`, `status`, and `requests` of
//! its own, markers among them). A file holds one conversation, a JSON list of them, or one a
//! line. Each conversation becomes plays of requests that wait for one another:
//!
//! - its requests, in list order, form a chain: each waits for the one before;
//! - a subagent's requests form a chain of their own, a conversation (session) of its own,
//!   whose first waits for the parent's request before the marker; the parent's request after
//!   the marker waits for the subagent's last (unless its `status` is `async_launched`: the
//!   parent does not wait for a background agent, nor for one that no parent request follows);
//! - a request waits, after the last of what it waits for completes, the recorded idle gap
//!   between the latest recorded end among them (`t + api_time`, or `t` where `api_time` is
//!   not recorded) and its own `t`; a request that waits for nothing starts at its `t`.
//!
//! A subagent's requests give `t` from the conversation's start (`absolute`, SemiAnalysis's
//! published corpora) or from their marker's (`relative`, raw kv-cache-tester traces);
//! [`NestedBasis::Auto`] reads a file as relative when any of its markers has a request
//! before it read the other way, as AISimulate does. Request models are ignored: every
//! request goes to the scenario's model.

use serde_json::{Map, Value};
use servesim_core::rng::mix2;
use servesim_core::traffic::{Trace, TraceRow};
use servesim_core::units::SimDur;

use super::{err, id_list, utf8_text, ParsedTrace, TraceError, MAX_SPAN_NS, MAX_TOKENS};

/// Tokens per `hash_ids` entry of a Weka conversation that does not say: kv-cache-tester's
/// and SemiAnalysis's corpora hash 64-token blocks (REF §4).
pub const WEKA_BLOCK_TOKENS: u32 = 64;

/// How a Weka subagent's requests give their `t` (`traffic.source.nested_timestamp_basis`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NestedBasis {
    /// Relative when any marker of the file has a request before it read as absolute.
    #[default]
    Auto,
    /// Seconds from the conversation's start.
    Absolute,
    /// Seconds from the subagent's marker.
    Relative,
}

/// A request read, before it is placed in the graph.
struct Call {
    /// Start, seconds from the conversation's start.
    t: f64,
    /// Recorded end (`t + api_time`, or `t`).
    end: f64,
    row: TraceRow,
}

/// One entry of a `requests` list.
enum Entry {
    Call(Call),
    Subagent { agent: String, background: bool, entries: Vec<Entry> },
}

/// What lowering a file's conversations accumulates.
struct Lowering {
    rows: Vec<TraceRow>,
    names: Vec<String>,
    sessions: u32,
}

/// Reads Weka conversations into a dependency graph (module docs). `block_size` is the
/// tokens per `hash_ids` entry of conversations that do not give theirs; those that do must
/// agree. `hash_id_scope: local` (the default) keeps a conversation's ids its own, subagents
/// included; `global` shares them across the file.
///
/// # Errors
/// A [`TraceError`] naming the line (of a JSON-lines file), the conversation and the path to
/// the request.
pub fn parse_weka(
    bytes: &[u8],
    file: &str,
    block_size: u32,
    basis: NestedBasis,
) -> Result<ParsedTrace, TraceError> {
    let text = utf8_text(bytes, file)?;
    // The whole file as one JSON document, else one conversation a line.
    let convs: Vec<(Option<usize>, Value)> = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(a)) => a.into_iter().map(|v| (None, v)).collect(),
        Ok(v) => vec![(None, v)],
        Err(_) => {
            let mut out = Vec::new();
            for (i, raw) in text.lines().enumerate() {
                if raw.trim().is_empty() {
                    continue;
                }
                let v = serde_json::from_str::<Value>(raw).map_err(|e| {
                    err(
                        file,
                        Some(i + 1),
                        format!("not a JSON conversation ({e}); the line may be truncated"),
                    )
                })?;
                out.push((Some(i + 1), v));
            }
            out
        }
    };
    let relative = match basis {
        NestedBasis::Absolute => false,
        NestedBasis::Relative => true,
        NestedBasis::Auto => convs.iter().any(|(_, c)| c.get("requests").is_some_and(child_precedes_marker)),
    };
    let mut low = Lowering { rows: Vec::new(), names: Vec::new(), sessions: 0 };
    let mut block: Option<(u32, String)> = None;
    for (k, (line, conv)) in convs.iter().enumerate() {
        let Some(obj) = conv.as_object() else {
            return Err(err(
                file,
                *line,
                format!("conversation {k}: expected a JSON object with 'requests'"),
            ));
        };
        let id = match obj.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => format!("conversation{k}"),
        };
        let here = |m: String| err(file, *line, format!("conversation {id}: {m}"));
        if let Some(b) = obj.get("block_size").filter(|b| !b.is_null()) {
            let b = b
                .as_u64()
                .and_then(|b| u32::try_from(b).ok())
                .filter(|b| *b >= 1)
                .ok_or_else(|| here(format!("'block_size' must be a positive integer, got {b}")))?;
            match &block {
                Some((first, of)) if *first != b => {
                    return Err(here(format!("'block_size' {b} differs from conversation {of}'s {first}")))
                }
                Some(_) => {}
                None => block = Some((b, id.clone())),
            }
        }
        let namespace = match obj.get("hash_id_scope").and_then(Value::as_str) {
            None | Some("local") => Some(id.bytes().fold(0xC0DE_u64, |h, b| mix2(h, u64::from(b)))),
            Some("global") => None,
            Some(other) => return Err(here(format!("'hash_id_scope' must be local or global, got {other}"))),
        };
        let Some(requests) = obj.get("requests") else {
            return Err(here("missing the 'requests' list".into()));
        };
        let read = Reader { file, line: *line, namespace, relative };
        let entries = read.entries(requests, "requests", 0.0).map_err(&here)?;
        if !entries.iter().any(has_call) {
            return Err(here("no requests".into()));
        }
        let session = low.sessions;
        low.sessions += 1;
        lower_chain(entries, session, None, &id, &mut low).map_err(here)?;
    }
    if low.rows.is_empty() {
        return Err(err(file, None, "the trace has no conversations"));
    }
    let block = block.map_or(block_size, |(b, _)| b);
    let trace = Trace { request_ids: low.names, ..Trace::dag(low.rows, block) };
    Ok(ParsedTrace { trace, untimed_line: None, token_id_rows: 0 })
}

/// Whether a `requests` list (or one nested in it) holds a marker with a request or marker
/// whose `t` is before the marker's: only relative times can say that.
fn child_precedes_marker(list: &Value) -> bool {
    let Some(list) = list.as_array() else { return false };
    list.iter().any(|e| {
        if e.get("type").and_then(Value::as_str) != Some("subagent") {
            return false;
        }
        let at = e.get("t").and_then(Value::as_f64).unwrap_or(0.0);
        let inner = e.get("requests");
        let before = inner
            .and_then(Value::as_array)
            .is_some_and(|l| l.iter().any(|c| c.get("t").and_then(Value::as_f64).is_some_and(|t| t < at)));
        before || inner.is_some_and(child_precedes_marker)
    })
}

/// Whether entries hold a request, at any depth.
fn has_call(e: &Entry) -> bool {
    match e {
        Entry::Call(_) => true,
        Entry::Subagent { entries, .. } => entries.iter().any(has_call),
    }
}

/// Reads one conversation's entries.
struct Reader<'a> {
    file: &'a str,
    line: Option<usize>,
    /// The conversation's own id space (`local`), or none (`global`).
    namespace: Option<u64>,
    relative: bool,
}

impl Reader<'_> {
    /// The entries of list `v` at `path`, whose times count from `base` seconds when relative.
    fn entries(&self, v: &Value, path: &str, base: f64) -> Result<Vec<Entry>, String> {
        let Some(list) = v.as_array() else { return Err(format!("'{path}' must be a list")) };
        let mut out = Vec::with_capacity(list.len());
        for (j, e) in list.iter().enumerate() {
            let path = format!("{path}[{j}]");
            let Some(e) = e.as_object() else { return Err(format!("{path}: expected a JSON object")) };
            let t = secs(e, "t", &path)?.ok_or_else(|| format!("{path}: missing 't' (seconds)"))?;
            let t = if self.relative { base + t } else { t };
            match e.get("type").and_then(Value::as_str) {
                None | Some("n" | "s") => out.push(Entry::Call(self.call(e, t, &path)?)),
                Some("subagent") => {
                    let agent = match e.get("agent_id") {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Number(n)) => n.to_string(),
                        _ => format!("{j}"),
                    };
                    let inner = e
                        .get("requests")
                        .ok_or_else(|| format!("{path}: a subagent marker needs its 'requests' list"))?;
                    let entries = self.entries(inner, &format!("{path}.requests"), t)?;
                    let background = e.get("status").and_then(Value::as_str) == Some("async_launched");
                    out.push(Entry::Subagent { agent, background, entries });
                }
                Some(other) => return Err(format!("{path}: unknown 'type' {other} (n, s or subagent)")),
            }
        }
        Ok(out)
    }

    /// An API call starting at `t` seconds.
    fn call(&self, e: &Map<String, Value>, t: f64, path: &str) -> Result<Call, String> {
        let api = secs(e, "api_time", path)?;
        let count = |key: &str| -> Result<u32, String> {
            let x = e.get(key).ok_or_else(|| format!("{path}: missing '{key}'"))?;
            match x.as_u64() {
                // A request has at least one prompt token and asks for at least one more.
                Some(v) if v <= MAX_TOKENS => Ok(u32::try_from(v.max(1)).unwrap_or(u32::MAX)),
                _ => Err(format!(
                    "{path}: '{key}' must be a whole number of tokens up to {MAX_TOKENS}, got {x}"
                )),
            }
        };
        let (input_tokens, output_tokens) = (count("in")?, count("out")?);
        let hash_ids = match e.get("hash_ids") {
            None | Some(Value::Null) => Vec::new(),
            Some(h) => id_list(h, "hash_ids", self.file, self.line.unwrap_or(0))
                .map_err(|x| format!("{path}: {}", x.message))?
                .into_iter()
                .map(|h| self.namespace.map_or(h, |n| mix2(n, h)))
                .collect(),
        };
        let row = TraceRow {
            timestamp: SimDur::ZERO,
            session: None,
            input_tokens,
            output_tokens,
            hash_ids,
            delay: None,
            wait_for: Vec::new(),
        };
        Ok(Call { t, end: t + api.unwrap_or(0.0), row })
    }
}

/// `key` of `e` as seconds (absent: `None`).
#[allow(clippy::cast_precision_loss)] // A bound, not an exact count.
fn secs(e: &Map<String, Value>, key: &str, path: &str) -> Result<Option<f64>, String> {
    match e.get(key).filter(|x| !x.is_null()) {
        None => Ok(None),
        Some(x) => match x.as_f64() {
            Some(v) if v.is_finite() && v >= 0.0 && v * 1e9 < MAX_SPAN_NS as f64 => Ok(Some(v)),
            _ => Err(format!("{path}: '{key}' must be a number of seconds from 0, got {x}")),
        },
    }
}

/// Places a chain of `entries` (one conversation, `session`) in the graph: each request
/// waits for the one before, the first for `spawn` (a row and its recorded end) if any, a
/// request after subagent markers for their chains' last requests too. Returns the chain's
/// last request (row and recorded end).
fn lower_chain(
    entries: Vec<Entry>,
    session: u32,
    spawn: Option<(u32, f64)>,
    name: &str,
    low: &mut Lowering,
) -> Result<Option<(u32, f64)>, String> {
    let mut prev = spawn;
    let mut joins: Vec<(u32, f64)> = Vec::new();
    let mut turn = 0usize;
    for e in entries {
        match e {
            Entry::Call(c) => {
                let deps: Vec<(u32, f64)> = prev.into_iter().chain(joins.drain(..)).collect();
                let mut row = c.row;
                row.session = Some(session);
                if deps.is_empty() {
                    row.timestamp = SimDur::from_ms_f64(c.t * 1e3);
                } else {
                    let ready = deps.iter().map(|d| d.1).fold(f64::NEG_INFINITY, f64::max);
                    row.delay = Some(SimDur::from_ms_f64((c.t - ready).max(0.0) * 1e3));
                    row.wait_for = deps.iter().map(|d| d.0).collect();
                }
                let index = u32::try_from(low.rows.len()).map_err(|_| "too many requests".to_string())?;
                low.rows.push(row);
                low.names.push(format!("{name}/{turn}"));
                turn += 1;
                prev = Some((index, c.end));
            }
            Entry::Subagent { agent, background, entries } => {
                let child = low.sessions;
                low.sessions += 1;
                let last = lower_chain(entries, child, prev, &format!("{name}/sa:{agent}"), low)?;
                if let (false, Some(last)) = (background, last) {
                    joins.push(last);
                }
            }
        }
    }
    Ok(prev)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceFormat;

    fn parse(text: &str) -> Result<ParsedTrace, TraceError> {
        parse_weka(text.as_bytes(), "w.jsonl", 64, NestedBasis::Auto)
    }

    /// A Weka conversation of three requests: `t` 0, 10 and 12 s, the first's response taking
    /// 4 s, the second's 1.5 s; blocks 0-2, 0-3, 0-4.
    const WEKA: &str = r#"{"id": "a", "block_size": 64, "requests": [
        {"t": 0.0, "type": "n", "in": 150, "out": 20, "hash_ids": [0, 1, 2], "api_time": 4.0},
        {"t": 10.0, "in": 200, "out": 30, "hash_ids": [0, 1, 2, 3], "api_time": 1.5},
        {"t": 12.0, "type": "s", "in": 250, "out": 0, "hash_ids": [0, 1, 2, 3, 4]}]}"#;

    #[test]
    fn weka_conversations_are_plays_of_requests_that_wait_for_the_one_before() {
        let p = parse_weka(WEKA.as_bytes(), "w.json", 512, NestedBasis::Auto).unwrap();
        let t = &p.trace;
        assert!(t.dag);
        assert_eq!(t.block_size, 64, "the conversation's own block size wins");
        // In list order; each waits for the one before.
        let inputs: Vec<u32> = t.rows.iter().map(|r| r.input_tokens).collect();
        assert_eq!(inputs, [150, 200, 250]);
        assert!(t.rows[0].wait_for.is_empty() && t.rows[0].timestamp == SimDur::ZERO);
        assert_eq!((t.rows[1].wait_for.as_slice(), t.rows[2].wait_for.as_slice()), (&[0][..], &[1][..]));
        // The recorded idle gap from a response's end: 10 - (0 + 4) s, then 12 - (10 + 1.5) s.
        assert_eq!(t.rows[1].delay, Some(SimDur::from_ms(6_000)));
        assert_eq!(t.rows[2].delay, Some(SimDur::from_ms(500)));
        assert_eq!(t.rows[2].output_tokens, 1, "a request asks for at least one token");
        assert_eq!(t.request_ids, ["a/0", "a/1", "a/2"]);
        assert!(t.rows.iter().all(|r| r.session == Some(0)));
        // Later prompts extend earlier ones, so their blocks are shared within the play.
        assert_eq!(t.rows[1].hash_ids[..3], t.rows[0].hash_ids[..]);
        // Without api_time the gap runs from the request's start.
        let bare = WEKA.replace(r#", "api_time": 4.0"#, "");
        let p = parse_weka(bare.as_bytes(), "w.json", 512, NestedBasis::Auto).unwrap();
        assert_eq!(p.trace.rows[1].delay, Some(SimDur::from_ms(10_000)));
        assert_eq!(TraceFormat::sniff("w.json", WEKA.as_bytes()), TraceFormat::Weka);
    }

    #[test]
    fn weka_files_hold_one_conversation_a_list_or_one_a_line_each_in_its_own_blocks() {
        let one = WEKA.replace('\n', " ");
        let two = one.replace(r#""id": "a""#, r#""id": "b""#);
        let lines = format!("{one}\n{two}\n");
        let array = format!("[{one}, {two}]");
        for text in [&lines, &array] {
            let t = parse(text).unwrap().trace;
            assert_eq!(t.rows.len(), 6);
            assert_eq!(t.rows[3].wait_for, Vec::<u32>::new(), "each conversation a play of its own");
            assert_eq!(t.rows[4].wait_for, [3]);
            assert_eq!(t.rows[3].session, Some(1));
            // Local ids: conversation b's block 0 is not a's.
            assert_ne!(t.rows[0].hash_ids[0], t.rows[3].hash_ids[0]);
            assert_eq!(t.plays(), [0, 0, 0, 3, 3, 3]);
        }
        let shared = lines.replace(r#""block_size": 64"#, r#""block_size": 64, "hash_id_scope": "global""#);
        let t = parse(&shared).unwrap().trace;
        assert_eq!(t.rows[0].hash_ids[0], t.rows[3].hash_ids[0], "global ids are the file's");
        assert_eq!(TraceFormat::sniff("w.jsonl", lines.as_bytes()), TraceFormat::Weka);
    }

    #[test]
    fn weka_problems_name_the_line_the_conversation_and_the_request() {
        let one = WEKA.replace('\n', " ");
        let sub = one.replace(r#"{"t": 12.0, "type": "s""#, r#"{"t": 12.0, "type": "subagent""#);
        let e = parse(&format!("{one}\n{sub}\n")).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "w.jsonl:2: conversation a: requests[2]: a subagent marker needs its 'requests' list"
            ),
            "{e}"
        );
        let cases = [
            (one.replace(r#""t": 10.0"#, r#""t": -1"#), "requests[1]: 't' must be a number of seconds"),
            (
                one.replace(r#""in": 200"#, r#""in": -3"#),
                "requests[1]: 'in' must be a whole number of tokens",
            ),
            (one.replace(r#", "in": 150"#, ""), "requests[0]: missing 'in'"),
            (one.replace(r#""hash_ids": [0, 1, 2],"#, r#""hash_ids": "x","#), "requests[0]: "),
            (
                one.replace(r#""block_size": 64"#, r#""block_size": 0"#),
                "'block_size' must be a positive integer",
            ),
            (
                one.replace(r#""block_size": 64"#, r#""block_size": 64, "hash_id_scope": "team""#),
                "'hash_id_scope' must be local or global",
            ),
            (one.replace(r#""requests": ["#, r#""turns": ["#), "missing the 'requests' list"),
            (one.replace(r#""type": "s""#, r#""type": "x""#), "requests[2]: unknown 'type' x"),
            (
                format!("{one}\n{}", one.replace(r#""block_size": 64"#, r#""block_size": 32"#)),
                "'block_size' 32 differs from conversation a's 64",
            ),
            (format!("{one}\n{{\"id\": 3, \"requests\": [{{\"t\""), "w.jsonl:2: not a JSON conversation"),
        ];
        for (text, want) in cases {
            let e = parse(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    /// A parent of three requests, a subagent of two spawned after the first (times relative
    /// to its marker at 5 s) and joined by the third, and a background one after the second.
    const PARENT: &str = r#"{"id": "p", "requests": [
        {"t": 0, "type": "n", "in": 100, "out": 5, "hash_ids": [0, 1], "api_time": 2},
        {"t": 5, "type": "subagent", "agent_id": "x", "status": "completed", "requests": [
            {"t": 1, "type": "n", "in": 80, "out": 5, "hash_ids": [0, 9], "api_time": 1},
            {"t": 3, "type": "s", "in": 90, "out": 5, "hash_ids": [0, 9, 8], "api_time": 2}]},
        {"t": 6, "type": "n", "in": 150, "out": 5, "hash_ids": [0, 1, 2], "api_time": 1},
        {"t": 8, "type": "subagent", "agent_id": "bg", "status": "async_launched", "requests": [
            {"t": 0.5, "type": "n", "in": 50, "out": 5, "hash_ids": [0, 7]}]},
        {"t": 20, "type": "n", "in": 300, "out": 5, "hash_ids": [0, 1, 2, 3]}]}"#;

    #[test]
    fn subagents_are_conversations_spawned_by_the_request_before_and_joined_by_the_one_after() {
        let t = parse(PARENT).unwrap().trace;
        let names = &t.request_ids;
        assert_eq!(names, &["p/0", "p/sa:x/0", "p/sa:x/1", "p/1", "p/sa:bg/0", "p/2"]);
        let (w, d) = (|i: usize| t.rows[i].wait_for.clone(), |i: usize| t.rows[i].delay);
        // The subagent's first waits for the parent's first: relative t 1 + marker 5 = 6 s,
        // its recorded end at 2 s, so 4 s after it completes.
        assert_eq!((w(1), d(1)), (vec![0], Some(SimDur::from_ms(4_000))));
        // Its second after its first: 5 + 3 = 8 s against 6 + 1 = 7 s.
        assert_eq!((w(2), d(2)), (vec![1], Some(SimDur::from_ms(1_000))));
        // The parent's second joins its first and the subagent's last: 6 s against the
        // later of ends 2 s and 10 s: no wait after both are done.
        assert_eq!((w(3), d(3)), (vec![0, 2], Some(SimDur::from_ms(0))));
        // The background agent is spawned by the parent's second; nothing waits for it.
        assert_eq!((w(4), d(4)), (vec![3], Some(SimDur::from_ms(1_500))));
        assert_eq!(w(5), vec![3], "the parent does not wait for an async_launched agent");
        // Each agent is a conversation of its own, all one play sharing the parent's ids.
        let sessions: Vec<Option<u32>> = t.rows.iter().map(|r| r.session).collect();
        assert_eq!(sessions, [Some(0), Some(1), Some(1), Some(0), Some(2), Some(0)]);
        assert_eq!(t.plays(), [0; 6]);
        assert_eq!(t.rows[1].hash_ids[0], t.rows[0].hash_ids[0], "one id space a conversation");
        // Read as absolute, the subagent's requests would start before their marker: auto
        // reads the file as relative; forced absolute, they wait from the spawn's end.
        let abs = parse_weka(PARENT.as_bytes(), "w.json", 64, NestedBasis::Absolute).unwrap().trace;
        assert_eq!(abs.rows[1].delay, Some(SimDur::ZERO));
        let shifted = PARENT
            .replace(r#""t": 1, "type": "n""#, r#""t": 6, "type": "n""#)
            .replace(r#""t": 3, "type": "s""#, r#""t": 8, "type": "s""#)
            .replace(r#""t": 0.5,"#, r#""t": 8.5,"#);
        let auto = parse(&shifted).unwrap().trace;
        assert_eq!(auto.rows[1].delay, Some(SimDur::from_ms(4_000)), "published absolute times read as such");
        assert_eq!(auto.rows[4].delay, Some(SimDur::from_ms(1_500)));
        assert_eq!(TraceFormat::sniff("p.json", PARENT.as_bytes()), TraceFormat::Weka);
    }

    #[test]
    fn a_subagent_before_any_parent_request_starts_at_its_time_and_nests() {
        let text = r#"{"id": "q", "requests": [
            {"t": 2, "type": "subagent", "agent_id": "a", "status": "completed", "requests": [
                {"t": 3, "type": "n", "in": 10, "out": 2, "api_time": 1},
                {"t": 4, "type": "subagent", "agent_id": "b", "status": "completed", "requests": [
                    {"t": 5, "type": "n", "in": 20, "out": 2, "api_time": 1}]},
                {"t": 7, "type": "n", "in": 30, "out": 2}]},
            {"t": 9, "type": "n", "in": 40, "out": 2}]}"#;
        let t = parse_weka(text.as_bytes(), "q.json", 64, NestedBasis::Absolute).unwrap().trace;
        assert_eq!(t.request_ids, ["q/sa:a/0", "q/sa:a/sa:b/0", "q/sa:a/1", "q/0"]);
        assert!(t.rows[0].wait_for.is_empty() && t.rows[0].timestamp == SimDur::from_ms(3_000));
        assert_eq!(t.rows[1].wait_for, [0]);
        assert_eq!(t.rows[2].wait_for, [0, 1], "a nested agent is joined by its parent's next request");
        assert_eq!(t.rows[3].wait_for, [2], "the parent's first request joins the agent before it");
        assert_eq!(t.rows[3].delay, Some(SimDur::from_ms(2_000)));
    }

    proptest::proptest! {
        /// Weka conversations of any shape give rows or an error, never a panic.
        #[test]
        fn weka_never_panics(lines in proptest::collection::vec("\\{\"(id|block_size|hash_id_scope)\": ?(\"[a-z]*\"|-?[0-9]{0,3}|null), ?\"requests\": ?\\[(\\{\"t\": ?-?[0-9.e]{0,6}, ?\"(in|out|api_time|type|hash_ids)\": ?(-?[0-9]{0,4}|\"[ns]\"|\\[[0-9, ]{0,8}\\]|null)(, ?\"(in|out)\": ?[0-9]{0,4})?\\}, ?)*\\]\\}", 0..4)) {
            let _ = parse_weka(lines.join("\n").as_bytes(), "fuzz.jsonl", 64, NestedBasis::Auto);
        }

    }
}
