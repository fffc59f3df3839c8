//! Request traces.
//!
//! **Mooncake JSONL** (REF §4): one JSON object per line with `hash_ids` (required; one id per
//! `block_size`-token block, 512 by default), `output_length` | `output_tokens` (required),
//! `input_length` | `input_tokens` (default: `hash_ids` capacity), `timestamp` |
//! `created_time` (ms), `session_id` (rows sharing it are turns, in file order), and
//! `delay` | `delay_ms` (a later turn's delay after the previous turn completes). Other
//! fields (`request_id`, `priority`, ...) are accepted and ignored. Timestamps are shifted so
//! the first request arrives at zero.
//!
//! A row may carry its prompt's token ids instead of `hash_ids` (`input_tok_ids`, as in
//! LLMServingSim's ShareGPT request files, with `input_toks`, `output_toks` and
//! `arrival_time_ns`): its ids are then the chained hashes of its `block_size`-token blocks
//! (the last may be partial), so prompts that share a prefix share the ids of its whole
//! blocks, as Mooncake's do. A scenario that does not set `block_size` hashes a file of
//! token ids in its engine's KV block size, so the prefix cache sees exactly the reuse the
//! engine would (`servesim_scenario`, trace sources).
//!
//! **Agentic Mooncake JSONL** (REF §4, [`parse_agentic`]): Mooncake rows that name themselves
//! (`request_id`) and the rows they wait for (`wait_for`), with the delay and tool wait after
//! those complete; the rows form a dependency graph ([`Trace::dag`]).
//!
//! **Weka** (REF §4, [`parse_weka`]): kv-cache-tester / AgentX coding-agent conversations, each
//! a play of requests that wait for one another, subagents included (`trace/weka.rs`).
//!
//! **Azure CSV** (Azure LLM inference traces): header `TIMESTAMP,ContextTokens,GeneratedTokens`,
//! timestamps `YYYY-MM-DD HH:MM:SS[.fraction]`.

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;
use servesim_core::rng::mix2;
use servesim_core::traffic::{Trace, TraceRow};
use servesim_core::units::SimDur;

mod azure;
mod weka;
pub use azure::parse_azure;
pub use weka::{parse_weka, NestedBasis, WEKA_BLOCK_TOKENS};

/// Largest token count accepted in a trace row (2^24).
const MAX_TOKENS: u64 = 1 << 24;

/// A trace could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct TraceError {
    /// File name as given.
    pub file: String,
    /// Line (1-based), when the problem is on one.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// A parsed trace and what the reader noticed about it.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedTrace {
    /// The rows.
    pub trace: Trace,
    /// First line that opens a job (standalone row or first turn) without a timestamp; such a
    /// trace can be replayed under `concurrency` but not at its timestamps.
    pub untimed_line: Option<usize>,
    /// Rows whose block ids were hashed from their prompt's token ids (`input_tok_ids`).
    pub token_id_rows: usize,
}

/// The formats [`parse`] understands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// Mooncake JSONL.
    Mooncake,
    /// Azure LLM inference CSV.
    AzureCsv,
    /// Agentic Mooncake JSONL: Mooncake rows that name themselves (`request_id`) and the
    /// rows they wait for (`wait_for`).
    AgenticMooncake,
    /// Weka coding-agent traces ([`parse_weka`]).
    Weka,
}

impl TraceFormat {
    /// Guesses the format from a file name (`.csv` → Azure, else Mooncake).
    #[must_use]
    pub fn from_name(name: &str) -> Self {
        if name.to_ascii_lowercase().ends_with(".csv") {
            TraceFormat::AzureCsv
        } else {
            TraceFormat::Mooncake
        }
    }

    /// Guesses the format from a file's name and contents: JSON lines whose first row names
    /// itself (`request_id`) and any of which has a `wait_for` field are agentic Mooncake.
    #[must_use]
    pub fn sniff(name: &str, bytes: &[u8]) -> Self {
        if is_weka(bytes) {
            return TraceFormat::Weka;
        }
        match Self::from_name(name) {
            TraceFormat::Mooncake
                if bytes.windows(WAIT_FOR_KEY.len()).any(|w| w == WAIT_FOR_KEY)
                    && first_record(bytes).is_some_and(|v| v.get("request_id").is_some()) =>
            {
                TraceFormat::AgenticMooncake
            }
            f => f,
        }
    }
}

/// Whether a file holds Weka conversations: JSON whose first object (the whole file, its
/// first element or its first line) has a `requests` list.
fn is_weka(bytes: &[u8]) -> bool {
    let has = |v: &Value| v.get("requests").is_some_and(Value::is_array);
    if first_record(bytes).is_some_and(|v| has(&v)) {
        return true;
    }
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Array(a)) => a.first().is_some_and(has),
        Ok(v) => has(&v),
        Err(_) => false,
    }
}

/// The JSON key of an agentic row's dependencies, quoted as it appears in a file.
const WAIT_FOR_KEY: &[u8] = b"\"wait_for\"";

/// The first record of a JSON-lines file (its first non-blank line), when it is JSON.
#[must_use]
pub fn first_record(bytes: &[u8]) -> Option<Value> {
    bytes
        .split(|b| *b == b'\n')
        .find(|l| !l.trim_ascii().is_empty())
        .and_then(|l| serde_json::from_slice::<Value>(l).ok())
}

/// Whether a Mooncake file's first row gives its prompt as token ids (`input_tok_ids`, no
/// `hash_ids`), so that a caller can choose the block size to hash them in before parsing.
#[must_use]
pub fn first_row_gives_token_ids(bytes: &[u8]) -> bool {
    first_record(bytes).is_some_and(|v| v.get("input_tok_ids").is_some() && v.get("hash_ids").is_none())
}

/// Parses a trace. `block_size` is the tokens per `hash_ids` entry (Mooncake).
///
/// # Errors
/// A [`TraceError`] naming the line and field of the first problem.
pub fn parse(
    bytes: &[u8],
    file: &str,
    format: TraceFormat,
    block_size: u32,
) -> Result<ParsedTrace, TraceError> {
    match format {
        TraceFormat::Mooncake => parse_jsonl(bytes, file, block_size, false),
        TraceFormat::AgenticMooncake => parse_jsonl(bytes, file, block_size, true),
        TraceFormat::AzureCsv => parse_azure(bytes, file),
        TraceFormat::Weka => weka::parse_weka(bytes, file, block_size, weka::NestedBasis::Auto),
    }
}

/// Longest span of trace time replayed: half of simulated time's range (2^63 ns, about 292
/// years), so the steps after the last arrival still fit.
const MAX_SPAN_NS: u64 = u64::MAX / 2;

fn too_late(offset: &str) -> String {
    format!("a timestamp {offset} after the trace's first is more than the 292 years a replay can span")
}

/// `bytes` as text, or an error naming the line of the first byte that is not UTF-8.
fn utf8_text<'b>(bytes: &'b [u8], file: &str) -> Result<&'b str, TraceError> {
    std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()].iter().filter(|b| **b == b'\n').count() + 1;
        err(file, Some(line), "not valid UTF-8 text")
    })
}

fn err(file: &str, line: Option<usize>, message: impl Into<String>) -> TraceError {
    TraceError { file: file.to_string(), line, message: message.into() }
}

fn tokens(v: &Value, field: &str, file: &str, line: usize, min: u64) -> Result<u32, TraceError> {
    let n = v
        .as_u64()
        .ok_or_else(|| err(file, Some(line), format!("'{field}' must be a non-negative integer, got {v}")))?;
    if n < min || n > MAX_TOKENS {
        return Err(err(
            file,
            Some(line),
            format!("'{field}' must be between {min} and {MAX_TOKENS}, got {n}"),
        ));
    }
    u32::try_from(n).map_err(|_| err(file, Some(line), format!("'{field}' is too large")))
}

fn millis(v: &Value, field: &str, file: &str, line: usize) -> Result<f64, TraceError> {
    duration(v, field, "milliseconds", file, line)
}

/// A non-negative, finite number of `unit`s.
fn duration(v: &Value, field: &str, unit: &str, file: &str, line: usize) -> Result<f64, TraceError> {
    match v.as_f64() {
        Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => {
            Err(err(file, Some(line), format!("'{field}' must be a non-negative number of {unit}, got {v}")))
        }
    }
}

/// Seed of the hash chain over a prompt's token blocks (any constant: it names the chain).
const TOKEN_BLOCK_CHAIN: u64 = 0x70CE_B10C;

/// Chained ids of a prompt's `block_size`-token blocks, the last one possibly partial: a
/// block's id hashes its tokens and the previous block's id, so equal prefixes give equal ids
/// and a block's id says where it sits, as Mooncake's `hash_ids` do.
fn token_block_ids(tokens: &[u64], block_size: u32) -> Vec<u64> {
    let mut prev = TOKEN_BLOCK_CHAIN;
    tokens
        .chunks(block_size as usize)
        .map(|block| {
            let id = block.iter().fold(mix2(prev, block.len() as u64), |h, t| mix2(h, *t));
            prev = id;
            id
        })
        .collect()
}

/// A list of non-negative integers (`hash_ids`, `input_tok_ids`).
fn id_list(v: &Value, field: &str, file: &str, line: usize) -> Result<Vec<u64>, TraceError> {
    let Value::Array(a) = v else {
        return Err(err(file, Some(line), format!("'{field}' must be a list, got {v}")));
    };
    a.iter()
        .map(|h| {
            h.as_u64().ok_or_else(|| {
                err(file, Some(line), format!("'{field}' entries must be non-negative integers, got {h}"))
            })
        })
        .collect()
}

/// Parses Mooncake JSONL.
///
/// # Errors
/// A [`TraceError`] for invalid UTF-8, an unreadable line, or a missing or invalid field.
pub fn parse_mooncake(bytes: &[u8], file: &str, block_size: u32) -> Result<ParsedTrace, TraceError> {
    parse_jsonl(bytes, file, block_size, false)
}

/// Parses agentic Mooncake JSONL: Mooncake rows with a unique `request_id` (required),
/// `wait_for` (the ids of rows that must all complete first; cycles and unknown ids are
/// refused), `delay` | `delay_ms` and `tool_wait_ms` (waited, together, after the last of them
/// completes) and `session_id` (the row's trajectory; a row without one is its own). A row
/// that waits for nothing starts at its `timestamp`; a dependent row's timestamp is only used
/// to place the trace's start. `request_kind`, `branches`, `prefix_reset` and `tool_events`
/// are accepted and have no effect, as in AISimulate.
///
/// # Errors
/// A [`TraceError`] naming the line and field of the first problem.
pub fn parse_agentic(bytes: &[u8], file: &str, block_size: u32) -> Result<ParsedTrace, TraceError> {
    parse_jsonl(bytes, file, block_size, true)
}

/// A `request_id`, `session_id` or `wait_for` entry: a string, or a number read as its text.
fn id_text(v: &Value, field: &str, file: &str, line: usize) -> Result<String, TraceError> {
    match v {
        Value::String(x) => Ok(x.clone()),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(err(file, Some(line), format!("'{field}' must be a string or number, got {other}"))),
    }
}

/// What an agentic row names: itself and what it waits for.
struct AgenticIds {
    /// Row index by `request_id`, with its line.
    rows: HashMap<String, (u32, usize)>,
    /// Per row: the ids of `wait_for`, as written.
    wait_for: Vec<Vec<String>>,
}

#[allow(clippy::too_many_lines)] // One pass over the fields of a row, in the order they are read.
fn parse_jsonl(bytes: &[u8], file: &str, block_size: u32, agentic: bool) -> Result<ParsedTrace, TraceError> {
    if block_size == 0 {
        return Err(err(file, None, "block_size must be at least 1"));
    }
    let text = utf8_text(bytes, file)?;
    let mut rows = Vec::new();
    let mut sessions: HashMap<String, u32> = HashMap::new();
    let mut stamps: Vec<Option<f64>> = Vec::new();
    let mut lines: Vec<usize> = Vec::new();
    let mut ids = AgenticIds { rows: HashMap::new(), wait_for: Vec::new() };
    let mut names: Vec<String> = Vec::new();
    let mut token_id_rows = 0;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(raw).map_err(|e| {
            err(file, Some(line), format!("not a JSON object ({e}); the line may be truncated"))
        })?;
        let Some(obj) = v.as_object() else {
            return Err(err(file, Some(line), "expected a JSON object per line"));
        };
        let get = |names: &[&str]| names.iter().find_map(|n| obj.get(*n)).filter(|x| !x.is_null());
        let token_ids = match (obj.get("hash_ids"), obj.get("input_tok_ids")) {
            (None, Some(t)) => Some(id_list(t, "input_tok_ids", file, line)?),
            _ => None,
        };
        let hash_ids: Vec<u64> = match (obj.get("hash_ids"), &token_ids) {
            (Some(h), _) => id_list(h, "hash_ids", file, line)?,
            (None, Some(t)) => {
                token_id_rows += 1;
                token_block_ids(t, block_size)
            }
            (None, None) => return Err(err(file, Some(line), "missing 'hash_ids' (or 'input_tok_ids')")),
        };
        let capacity = (hash_ids.len() as u64).saturating_mul(u64::from(block_size));
        let input_tokens = match (get(&["input_length", "input_tokens", "input_toks"]), &token_ids) {
            (Some(x), Some(t)) => {
                let n = tokens(x, "input_length", file, line, 1)?;
                if u64::from(n) != t.len() as u64 {
                    return Err(err(
                        file,
                        Some(line),
                        format!(
                            "the input length {n} differs from the {} entries of 'input_tok_ids'",
                            t.len()
                        ),
                    ));
                }
                n
            }
            (None, Some(t)) => tokens(&Value::from(t.len()), "input_tok_ids", file, line, 1)?,
            (Some(x), None) => tokens(x, "input_length", file, line, 1)?,
            (None, None) if capacity > 0 => u32::try_from(capacity.min(MAX_TOKENS)).unwrap_or(u32::MAX),
            (None, None) => {
                return Err(err(
                    file,
                    Some(line),
                    "missing 'input_length' and no 'hash_ids' to infer it from",
                ))
            }
        };
        let output_tokens = match get(&["output_length", "output_tokens", "output_toks"]) {
            Some(x) => tokens(x, "output_length", file, line, 1)?,
            None => return Err(err(file, Some(line), "missing 'output_length'")),
        };
        let timestamp = match get(&["timestamp", "created_time"]) {
            Some(x) => Some(millis(x, "timestamp", file, line)?),
            None => get(&["arrival_time_ns"])
                .map(|x| duration(x, "arrival_time_ns", "nanoseconds", file, line).map(|ns| ns / 1e6))
                .transpose()?,
        };
        let mut delay = get(&["delay", "delay_ms"]).map(|x| millis(x, "delay", file, line)).transpose()?;
        let session_key = get(&["session_id"]).map(|s| id_text(s, "session_id", file, line)).transpose()?;
        let row = u32::try_from(rows.len()).map_err(|_| err(file, Some(line), "too many rows"))?;
        let session_key = if agentic {
            let Some(id) = get(&["request_id"]) else {
                return Err(err(file, Some(line), "missing 'request_id' (every agentic_mooncake row names itself, so that others can wait for it)"));
            };
            let id = id_text(id, "request_id", file, line)?;
            let wait_for = match get(&["wait_for"]) {
                Some(Value::Array(a)) => {
                    let mut out: Vec<String> = Vec::with_capacity(a.len());
                    for x in a {
                        let x = id_text(x, "wait_for", file, line)?;
                        if !out.contains(&x) {
                            out.push(x);
                        }
                    }
                    out
                }
                Some(other) => {
                    return Err(err(
                        file,
                        Some(line),
                        format!("'wait_for' must be a list of request ids, got {other}"),
                    ))
                }
                None => Vec::new(),
            };
            if let Some(x) = get(&["tool_wait_ms"]) {
                delay = Some(delay.unwrap_or(0.0) + millis(x, "tool_wait_ms", file, line)?);
            }
            ids.wait_for.push(wait_for);
            // A row without a trajectory is its own, as AISimulate keys it by its id.
            let key = session_key.unwrap_or_else(|| format!("\u{0}request {id}"));
            if let Some((_, first)) = ids.rows.insert(id.clone(), (row, line)) {
                return Err(err(
                    file,
                    Some(line),
                    format!("'request_id' {id} is also the id of line {first}"),
                ));
            }
            names.push(id);
            Some(key)
        } else {
            if get(&["wait_for"]).is_some_and(|w| w.as_array().is_none_or(|a| !a.is_empty())) {
                return Err(err(file, Some(line), "'wait_for' orders the requests of an agentic trace: read this file with format agentic_mooncake"));
            }
            session_key
        };
        let session = session_key.map(|key| {
            let next = u32::try_from(sessions.len()).unwrap_or(u32::MAX);
            *sessions.entry(key).or_insert(next)
        });
        stamps.push(timestamp);
        lines.push(line);
        rows.push(TraceRow {
            timestamp: SimDur::ZERO,
            session,
            input_tokens,
            output_tokens,
            hash_ids,
            delay: delay.map(SimDur::from_ms_f64),
            wait_for: Vec::new(),
        });
    }
    if rows.is_empty() {
        return Err(err(file, None, "the trace has no rows"));
    }
    if agentic {
        resolve_dependencies(&mut rows, &ids, &lines, file)?;
    }
    // Replaying at trace timestamps needs one on every row that opens a job (a standalone
    // row, a session's first turn, a graph's root); later turns and dependent rows may carry
    // a delay instead.
    let mut seen_session = vec![false; sessions.len()];
    let mut untimed_line = None;
    for ((row, ts), line) in rows.iter().zip(&stamps).zip(&lines) {
        let opens = match row.session {
            _ if agentic => row.wait_for.is_empty(),
            Some(s) => !std::mem::replace(&mut seen_session[s as usize], true),
            None => true,
        };
        if opens && ts.is_none() && untimed_line.is_none() {
            untimed_line = Some(*line);
        }
    }
    let first = stamps.iter().flatten().fold(f64::INFINITY, |a, b| a.min(*b));
    let first = if first.is_finite() { first } else { 0.0 };
    for ((row, ts), line) in rows.iter_mut().zip(&stamps).zip(&lines) {
        let offset_ms = ts.unwrap_or(first) - first;
        #[allow(clippy::cast_precision_loss)] // A bound, not an exact count.
        if offset_ms * 1.0e6 > MAX_SPAN_NS as f64 {
            return Err(err(file, Some(*line), too_late(&format!("{offset_ms:e} ms"))));
        }
        row.timestamp = SimDur::from_ms_f64(offset_ms);
    }
    let trace = if agentic {
        Trace { request_ids: names, ..Trace::dag(rows, block_size) }
    } else {
        Trace::new(rows, block_size)
    };
    Ok(ParsedTrace { trace, untimed_line, token_id_rows })
}

/// Turns each agentic row's `wait_for` ids into row indices, refusing an id no row has and a
/// cycle (whose rows could never be sent), each named with its line.
fn resolve_dependencies(
    rows: &mut [TraceRow],
    ids: &AgenticIds,
    lines: &[usize],
    file: &str,
) -> Result<(), TraceError> {
    for ((row, wait_for), line) in rows.iter_mut().zip(&ids.wait_for).zip(lines) {
        for id in wait_for {
            let Some((r, _)) = ids.rows.get(id) else {
                return Err(err(
                    file,
                    Some(*line),
                    format!("'wait_for' names request {id}, which no row of the file is"),
                ));
            };
            row.wait_for.push(*r);
        }
    }
    // Kahn's algorithm: rows left once every row whose dependencies can complete has are on
    // (or behind) a cycle.
    let mut remaining: Vec<usize> = rows.iter().map(|r| r.wait_for.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); rows.len()];
    for (r, row) in rows.iter().enumerate() {
        for &d in &row.wait_for {
            dependents[d as usize].push(r);
        }
    }
    let mut ready: Vec<usize> = (0..rows.len()).filter(|r| remaining[*r] == 0).collect();
    let mut done = 0;
    while let Some(r) = ready.pop() {
        done += 1;
        for &d in &dependents[r] {
            remaining[d] -= 1;
            if remaining[d] == 0 {
                ready.push(d);
            }
        }
    }
    if done < rows.len() {
        // Walk back from a stuck row along stuck dependencies until a row repeats: it is on
        // the cycle.
        let stuck = |r: usize| remaining[r] > 0;
        let mut r = (0..rows.len()).find(|r| stuck(*r)).unwrap_or(0);
        let mut seen = vec![false; rows.len()];
        while !seen[r] {
            seen[r] = true;
            r = rows[r].wait_for.iter().map(|d| *d as usize).find(|d| stuck(*d)).unwrap_or(r);
        }
        let id = ids.rows.iter().find(|(_, (row, _))| *row as usize == r).map_or("?", |(k, _)| k.as_str());
        return Err(err(
            file,
            Some(lines[r]),
            format!("request {id} waits, through 'wait_for', for itself: its dependencies form a cycle and can never complete"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mooncake_rows_sessions_and_normalised_time() {
        let text = br#"{"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
{"timestamp": 1500, "output_tokens": 7, "hash_ids": [1, 3], "session_id": "a", "request_id": "x"}

{"created_time": 1200, "input_tokens": 10, "output_length": 2, "hash_ids": [], "session_id": "a", "delay": 50}
"#;
        let p = parse_mooncake(text, "t.jsonl", 512).unwrap();
        assert_eq!(p.untimed_line, None);
        let t = p.trace;
        assert_eq!(t.rows.len(), 3);
        assert_eq!(t.rows[0].timestamp, SimDur::ZERO);
        assert_eq!(t.rows[1].timestamp, SimDur::from_ms(500));
        assert_eq!(t.rows[1].input_tokens, 1024, "defaults to the hash_ids capacity");
        assert_eq!((t.rows[1].session, t.rows[2].session), (Some(0), Some(0)));
        assert_eq!(t.rows[2].delay, Some(SimDur::from_ms(50)));
    }

    #[test]
    fn mooncake_errors_name_the_line_and_field() {
        let e = parse_mooncake(
            b"{\"output_length\": 3, \"hash_ids\": [1]}\n{\"output_length\": 3, \"hash_ids\": [1, \"x\"]}\n",
            "m.jsonl",
            512,
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "m.jsonl:2: 'hash_ids' entries must be non-negative integers, got \"x\"");
        let e = parse_mooncake(b"{\"output_length\": 3, \"hash_ids\": [1]}\n{\"output_len", "m.jsonl", 512)
            .unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("truncated"));
        let e = parse_mooncake(b"{\"hash_ids\": [1]}\n", "m.jsonl", 512).unwrap_err();
        assert!(e.message.contains("output_length"));
        let e = parse_mooncake(b"{\"hash_ids\": [1], \"output_length\": -1}\n", "m.jsonl", 512).unwrap_err();
        assert!(e.message.contains("non-negative"));
        assert!(parse_mooncake(b"", "m.jsonl", 512).is_err());
        let e = parse_mooncake(b"{\"hash_ids\": [1], \"output_length\": 1}\n\xff\xfe", "m.jsonl", 512)
            .unwrap_err();
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn token_id_rows_share_the_ids_of_their_common_whole_blocks() {
        // Block size 4: rows a and b share their first two blocks (8 tokens); c shares a's
        // first block only; b's partial last block differs from a's full one.
        let text = br#"{"arrival_time_ns": 2000000, "input_toks": 10, "output_toks": 3, "input_tok_ids": [1,2,3,4,5,6,7,8,9,10]}
{"arrival_time_ns": 5500000, "output_toks": 2, "input_tok_ids": [1,2,3,4,5,6,7,8,9]}
{"arrival_time_ns": 7000000, "output_toks": 2, "input_tok_ids": [1,2,3,4,9,9,9,9], "output_tok_ids": [5, 6]}
"#;
        let parsed = parse_mooncake(text, "s.jsonl", 4).unwrap();
        assert_eq!(parsed.token_id_rows, 3);
        let t = parsed.trace;
        let ids: Vec<&[u64]> = t.rows.iter().map(|r| r.hash_ids.as_slice()).collect();
        assert_eq!((ids[0].len(), ids[1].len(), ids[2].len()), (3, 3, 2));
        assert_eq!(ids[0][..2], ids[1][..2]);
        assert_ne!(ids[0][2], ids[1][2], "a partial block is its own content");
        assert_eq!(ids[0][0], ids[2][0]);
        assert_ne!(ids[0][1], ids[2][1]);
        assert_eq!(t.rows.iter().map(|r| r.input_tokens).collect::<Vec<_>>(), [10, 9, 8]);
        assert_eq!(t.rows.iter().map(|r| r.output_tokens).collect::<Vec<_>>(), [3, 2, 2]);
        assert_eq!(t.rows[1].timestamp, SimDur::from_ms_f64(3.5), "nanoseconds, shifted to start at zero");
        // The ids depend on the block size, not on the file: the same prompts chunked as 8.
        let t8 = parse_mooncake(text, "s.jsonl", 8).unwrap().trace;
        assert_eq!(t8.rows[0].hash_ids.len(), 2);
        assert_eq!(t8.rows[0].hash_ids[0], t8.rows[1].hash_ids[0]);
        // Explicit hash_ids win over token ids.
        let both = parse_mooncake(
            b"{\"output_toks\": 1, \"hash_ids\": [7], \"input_tok_ids\": [1, 2]}\n",
            "s.jsonl",
            4,
        )
        .unwrap()
        .trace;
        assert_eq!(both.rows[0].hash_ids, [7]);
        let bad = |text: &[u8]| parse_mooncake(text, "s.jsonl", 4).unwrap_err().to_string();
        assert_eq!(
            bad(b"{\"output_toks\": 1, \"input_toks\": 3, \"input_tok_ids\": [1, 2]}\n"),
            "s.jsonl:1: the input length 3 differs from the 2 entries of 'input_tok_ids'"
        );
        assert_eq!(
            bad(b"{\"output_toks\": 1, \"input_tok_ids\": [1, -2]}\n"),
            "s.jsonl:1: 'input_tok_ids' entries must be non-negative integers, got -2"
        );
        assert_eq!(
            bad(b"{\"output_toks\": 1, \"input_tok_ids\": []}\n"),
            "s.jsonl:1: 'input_tok_ids' must be between 1 and 16777216, got 0"
        );
        assert_eq!(
            bad(b"{\"output_toks\": 1, \"input_tok_ids\": [1], \"arrival_time_ns\": \"soon\"}\n"),
            "s.jsonl:1: 'arrival_time_ns' must be a non-negative number of nanoseconds, got \"soon\""
        );
        assert_eq!(bad(b"{\"output_toks\": 1}\n"), "s.jsonl:1: missing 'hash_ids' (or 'input_tok_ids')");
    }

    #[test]
    fn untimed_job_rows_are_reported() {
        let text = b"{\"timestamp\": 5, \"output_length\": 1, \"hash_ids\": [1]}\n{\"output_length\": 1, \"hash_ids\": [2]}\n";
        assert_eq!(parse_mooncake(text, "u.jsonl", 512).unwrap().untimed_line, Some(2));
    }

    #[test]
    fn timestamps_beyond_what_a_replay_can_span_are_refused_with_their_line() {
        let text = b"{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}\n{\"timestamp\": 1e15, \"output_length\": 1, \"hash_ids\": [2]}\n";
        let e = parse(text, "t.jsonl", TraceFormat::Mooncake, 512).unwrap_err().to_string();
        assert!(e.starts_with("t.jsonl:2: a timestamp 1e15 ms after") && e.contains("292 years"), "{e}");
        // A century is fine.
        let text = b"{\"timestamp\": 0, \"output_length\": 1, \"hash_ids\": [1]}\n{\"timestamp\": 3.2e12, \"output_length\": 1, \"hash_ids\": [2]}\n";
        assert!(parse(text, "t.jsonl", TraceFormat::Mooncake, 512).is_ok());
        let csv =
            b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n1700-01-01 00:00:00,10,2\n";
        let e = parse(csv, "a.csv", TraceFormat::AzureCsv, 512).unwrap_err().to_string();
        assert!(e.starts_with("a.csv:2: a timestamp ") && e.contains("292 years"), "{e}");
    }

    /// An agentic row: id, session, dependencies and extra fields.
    fn agentic_row(id: &str, session: Option<&str>, wait_for: &[&str], extra: &str) -> String {
        let session = session.map_or(String::new(), |s| format!(", \"session_id\": \"{s}\""));
        let deps = wait_for.iter().map(|d| format!("\"{d}\"")).collect::<Vec<_>>().join(", ");
        format!("{{\"request_id\": \"{id}\"{session}, \"wait_for\": [{deps}], \"output_length\": 4, \"hash_ids\": [1]{extra}}}\n")
    }

    #[test]
    fn agentic_rows_become_a_dependency_graph() {
        let text = [
            agentic_row("a", Some("main"), &[], ", \"timestamp\": 2000"),
            // Forward reference, a repeated dependency and both waits, summed.
            agentic_row("b", None, &["c", "a", "c"], ", \"delay\": 10, \"tool_wait_ms\": 250.5"),
            agentic_row(
                "c",
                Some("main"),
                &["a"],
                ", \"timestamp\": 2500, \"prefix_reset\": true, \"branches\": [\"b\"]",
            ),
            agentic_row("d", None, &[], ", \"timestamp\": 1000"),
        ]
        .concat();
        let p = parse(text.as_bytes(), "g.jsonl", TraceFormat::AgenticMooncake, 512).unwrap();
        let t = p.trace;
        assert!(t.dag);
        assert_eq!(p.untimed_line, None, "only roots need timestamps");
        let waits: Vec<&[u32]> = t.rows.iter().map(|r| r.wait_for.as_slice()).collect();
        assert_eq!(waits, [&[][..], &[2, 0], &[0], &[]]);
        assert_eq!(t.rows[1].delay, Some(SimDur::from_ms_f64(260.5)));
        // Time starts at the earliest timestamp of any row.
        assert_eq!(t.rows[0].timestamp, SimDur::from_ms(1000));
        assert_eq!(t.rows[3].timestamp, SimDur::ZERO);
        // Rows a and c share their trajectory; b and d are each their own.
        let s: Vec<Option<u32>> = t.rows.iter().map(|r| r.session).collect();
        assert_eq!(s, [Some(0), Some(1), Some(0), Some(2)]);
        assert_eq!(t.row_keys(), [(0, 0), (1, 0), (0, 1), (2, 0)]);
        assert_eq!(TraceFormat::sniff("g.jsonl", text.as_bytes()), TraceFormat::AgenticMooncake);
        // Empty dependency lists on anonymous rows are a plain Mooncake file.
        let plain = b"{\"wait_for\": [], \"output_length\": 4, \"hash_ids\": [1]}\n";
        assert_eq!(TraceFormat::sniff("m.jsonl", plain), TraceFormat::Mooncake);
        assert!(parse(plain, "m.jsonl", TraceFormat::Mooncake, 512).is_ok());
    }

    #[test]
    fn agentic_errors_name_the_line_and_the_request() {
        let bad = |rows: &[String]| {
            parse(rows.concat().as_bytes(), "g.jsonl", TraceFormat::AgenticMooncake, 512)
                .unwrap_err()
                .to_string()
        };
        let e = bad(&[agentic_row("a", None, &[], ""), agentic_row("b", None, &["x"], "")]);
        assert_eq!(e, "g.jsonl:2: 'wait_for' names request x, which no row of the file is");
        let e = bad(&[agentic_row("a", None, &[], ""), agentic_row("a", None, &[], "")]);
        assert_eq!(e, "g.jsonl:2: 'request_id' a is also the id of line 1");
        let e = bad(&[
            agentic_row("root", None, &[], ""),
            agentic_row("a", None, &["root", "c"], ""),
            agentic_row("b", None, &["a"], ""),
            agentic_row("c", None, &["b"], ""),
            agentic_row("after", None, &["c"], ""),
        ]);
        assert!(e.contains("waits, through 'wait_for', for itself"), "{e}");
        assert!(
            e.starts_with("g.jsonl:2: request a")
                || e.starts_with("g.jsonl:3: request b")
                || e.starts_with("g.jsonl:4: request c"),
            "{e}"
        );
        let e = bad(&[agentic_row("a", None, &["a"], "")]);
        assert_eq!(&e[..21], "g.jsonl:1: request a ");
        let e = bad(&["{\"output_length\": 4, \"hash_ids\": [1]}\n".to_string()]);
        assert!(e.starts_with("g.jsonl:1: missing 'request_id'"), "{e}");
        let e =
            bad(&["{\"request_id\": \"a\", \"wait_for\": \"b\", \"output_length\": 4, \"hash_ids\": [1]}\n"
                .to_string()]);
        assert!(e.starts_with("g.jsonl:1: 'wait_for' must be a list"), "{e}");
        let e = bad(&[agentic_row("a", None, &[], ", \"tool_wait_ms\": -1")]);
        assert!(e.starts_with("g.jsonl:1: 'tool_wait_ms' must be a non-negative number"), "{e}");
        // A Mooncake reader refuses dependencies rather than replaying them out of order.
        let e = parse_mooncake(agentic_row("b", None, &["a"], "").as_bytes(), "m.jsonl", 512)
            .unwrap_err()
            .to_string();
        assert!(e.contains("read this file with format agentic_mooncake"), "{e}");
        // An untimed root is reported; an untimed dependent is not.
        let text = [
            agentic_row("a", None, &[], ", \"timestamp\": 5"),
            agentic_row("b", None, &["a"], ""),
            agentic_row("c", None, &[], ""),
        ]
        .concat();
        assert_eq!(parse_agentic(text.as_bytes(), "g.jsonl", 512).unwrap().untimed_line, Some(3));
    }

    proptest::proptest! {
        /// Fuzz: any bytes give rows or an error, never a panic.
        #[test]
        fn mooncake_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = parse_mooncake(&bytes, "fuzz.jsonl", 512);
        }

        #[test]
        fn mooncake_never_panics_on_json_like_lines(lines in proptest::collection::vec("\\{\"(hash_ids|input_tok_ids|output_length|output_toks|input_length|input_toks|timestamp|arrival_time_ns|session_id|delay)\": ?(\\[[0-9, \"a-]*\\]|-?[0-9.e]{0,12}|\"[a-z]*\"|null|\\{\\})(, ?\"[a-z_]+\": ?[0-9\\[\\]]{0,6})?\\}", 0..6)) {
            let _ = parse_mooncake(lines.join("\n").as_bytes(), "fuzz.jsonl", 512);
        }

        #[test]
        fn agentic_never_panics_on_json_like_lines(lines in proptest::collection::vec("\\{\"request_id\": ?\"[a-c]\", ?\"(wait_for|tool_wait_ms|delay|timestamp|session_id|hash_ids|output_length)\": ?(\\[[\"a-c, 0-9]*\\]|-?[0-9.e]{0,8}|\"[a-c]*\"|null)(, ?\"(output_length|hash_ids|wait_for)\": ?(\\[[\"a-c, 0-9]*\\]|[0-9]{1,3}))*\\}", 0..6)) {
            let _ = parse_agentic(lines.join("\n").as_bytes(), "fuzz.jsonl", 512);
        }

    }
}
