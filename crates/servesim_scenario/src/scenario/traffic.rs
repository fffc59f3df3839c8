//! The arrival process of a scenario: synthetic sources, sessions and replayed traces.

use std::sync::Arc;

use servesim_core::traffic::{Load, SessionSpec, Source, Stop, Trace, TrafficSpec};
use servesim_core::units::{SimDur, SimTime};
use servesim_data::trace::{ParsedTrace, TraceFormat};

use super::{config_error, origin_of, Files, ScenarioError};
use crate::config::{Config, KvEvictionPolicy, LoadKind, SourceConfig, TraceFormatConfig};
use crate::decode::{MAX_CONCURRENCY, MAX_REQUESTS};
use crate::diag::{DiagKind, Diagnostic};
use crate::node::{Node, Origin};

/// Mooncake's tokens per `hash_ids` entry, the block size of a trace that does not set one.
const MOONCAKE_BLOCK_TOKENS: u32 = 512;

/// Parses one file at the source's block size: `block_size` when set; otherwise Mooncake's,
/// or `kv_block` (the engine's KV block) when every row gives its prompt as token ids.
fn parse_trace(
    bytes: &[u8],
    path: &str,
    fmt: TraceFormat,
    block_size: Option<u32>,
    kv_block: u32,
    nested_basis: servesim_data::trace::NestedBasis,
) -> Result<(ParsedTrace, u32), servesim_data::trace::TraceError> {
    // A Weka file names its own block size (64 where it does not); a config that sets one
    // asserts it.
    if fmt == TraceFormat::Weka {
        let parsed = servesim_data::trace::parse_weka(
            bytes,
            path,
            block_size.unwrap_or(servesim_data::trace::WEKA_BLOCK_TOKENS),
            nested_basis,
        )?;
        let own = parsed.trace.block_size;
        if let Some(b) = block_size.filter(|b| *b != own) {
            return Err(servesim_data::trace::TraceError {
                file: path.into(),
                line: None,
                message: format!(
                    "its conversations hash blocks of {own} tokens, but traffic.source.block_size is {b}"
                ),
            });
        }
        return Ok((parsed, own));
    }
    // The first row decides in one pass; a file that mixes the two kinds is parsed again.
    let unset = |all_token_ids: bool| if all_token_ids { kv_block } else { MOONCAKE_BLOCK_TOKENS };
    let guess = block_size.unwrap_or_else(|| {
        unset(
            matches!(fmt, TraceFormat::Mooncake | TraceFormat::AgenticMooncake)
                && servesim_data::trace::first_row_gives_token_ids(bytes),
        )
    });
    let parsed = servesim_data::trace::parse(bytes, path, fmt, guess)?;
    let all_token_ids = parsed.token_id_rows > 0 && parsed.token_id_rows == parsed.trace.rows.len();
    match block_size {
        None if unset(all_token_ids) != guess => {
            let right = unset(all_token_ids);
            Ok((servesim_data::trace::parse(bytes, path, fmt, right)?, right))
        }
        _ => Ok((parsed, guess)),
    }
}

/// What the rest of the config asks of a trace.
#[derive(Clone, Copy)]
struct Needs {
    /// Every job's first request has a timestamp (load type `trace_timestamps`).
    timestamps: bool,
    /// No row is a later turn of a session (Belady eviction forecasts the input order).
    no_sessions: bool,
}

/// Reads and parses every trace file of a trace source.
fn load_traces(
    paths: &[(String, Origin)],
    (format, nested_basis): (TraceFormatConfig, servesim_data::trace::NestedBasis),
    (block_size, kv_block): (Option<u32>, u32),
    files: &dyn Files,
    source: &str,
    needs: Needs,
) -> Result<Trace, ScenarioError> {
    let mut rows = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut sessions = 0u32;
    let mut diags = Vec::new();
    // (file, block size) of the first file read: one trace has one block size.
    let mut hashed_at: Option<(String, u32)> = None;
    for (i, (path, origin)) in paths.iter().enumerate() {
        let problem = |message: String| Diagnostic {
            path: format!("traffic.source.paths[{i}]"),
            origin: origin.clone(),
            message,
            kind: DiagKind::Domain,
        };
        let bytes = match files.read(path) {
            Ok(b) => b,
            Err(m) => {
                diags.push(problem(m));
                continue;
            }
        };
        let fmt = match format {
            TraceFormatConfig::Mooncake => TraceFormat::Mooncake,
            TraceFormatConfig::AzureCsv => TraceFormat::AzureCsv,
            TraceFormatConfig::AgenticMooncake => TraceFormat::AgenticMooncake,
            TraceFormatConfig::Weka => TraceFormat::Weka,
        };
        let (parsed, block) = match parse_trace(&bytes, path, fmt, block_size, kv_block, nested_basis) {
            Ok(x) => x,
            Err(e) => {
                diags.push(problem(e.to_string()));
                continue;
            }
        };
        match &hashed_at {
            Some((first, b)) if *b != block => {
                diags.push(problem(format!("{path} hashes its prompts in blocks of {block} tokens but {first} in blocks of {b} (a file of token ids takes the engine's KV block, one of hash_ids Mooncake's 512); set traffic.source.block_size for both")));
                continue;
            }
            Some(_) => {}
            None => hashed_at = Some((path.clone(), block)),
        }
        if needs.no_sessions {
            if let Some(row) = parsed.trace.rows.iter().position(|r| r.session.is_some()) {
                diags.push(problem(format!("{path}: request {} of the file belongs to a multi-turn session; engine.kv_eviction_policy: belady cannot forecast sessions (a turn is sent when the one before it completes)", row + 1)));
                continue;
            }
        }
        if let (true, Some(line)) = (needs.timestamps, parsed.untimed_line) {
            let fix = if fmt == TraceFormat::AgenticMooncake {
                "add a timestamp to every request that waits for nothing"
            } else {
                "use load type concurrency, or add timestamps"
            };
            diags.push(problem(format!("{path}:{line}: a request that starts a job has no timestamp, so load type trace_timestamps cannot place it ({fix})")));
            continue;
        }
        names.extend(parsed.trace.request_ids);
        // Files are replayed as if started together; their sessions stay apart, and a row
        // waits for rows of its own file.
        let offset = sessions;
        let row_offset = u32::try_from(rows.len()).unwrap_or(u32::MAX);
        let mut max_session = 0;
        for mut r in parsed.trace.rows {
            if let Some(s) = r.session.as_mut() {
                *s += offset;
                max_session = max_session.max(*s + 1);
            }
            for d in &mut r.wait_for {
                *d += row_offset;
            }
            rows.push(r);
        }
        sessions = sessions.max(max_session);
    }
    if !diags.is_empty() {
        return Err(config_error(source, diags));
    }
    let block = hashed_at.map_or(MOONCAKE_BLOCK_TOKENS, |(_, b)| b);
    Ok(if format.is_graph() {
        Trace { request_ids: names, ..Trace::dag(rows, block) }
    } else {
        Trace::new(rows, block)
    })
}

/// A domain error at `path` (a dotted config path), located where it was written.
fn too_large(source: &str, root: &Node, path: &str, message: String) -> ScenarioError {
    let origin = origin_of(root, path);
    config_error(source, vec![Diagnostic { path: path.into(), origin, message, kind: DiagKind::Domain }])
}

/// The arrival process of a config. `kv_tokens` is one rank's KV capacity in tokens and
/// `kv_ranks` the number of ranks across replicas (for `kv_capacity_fraction`); `kv_block`
/// is the engine's KV block size, at which a trace of token ids is hashed by default.
pub(super) fn build_traffic(
    config: &Config,
    root: &Node,
    source: &str,
    files: &dyn Files,
    (kv_tokens, kv_block): (u64, u32),
    kv_ranks: u32,
) -> Result<TrafficSpec, ScenarioError> {
    let t = &config.traffic;
    let (src, per_job_tokens) = match &t.source {
        SourceConfig::Synthetic { input_tokens, output_tokens, shared_prefix_tokens, prompt_pool } => (
            Source::Synthetic {
                input_tokens: input_tokens.clone(),
                output_tokens: output_tokens.clone(),
                shared_prefix_tokens: *shared_prefix_tokens,
                prompt_pool: *prompt_pool,
            },
            input_tokens.nominal_mean() + output_tokens.nominal_mean(),
        ),
        SourceConfig::Session {
            new_input_tokens_per_turn,
            output_tokens_per_turn,
            turns,
            shared_prefix_ratio,
            prefix_groups,
            inter_turn_delay_ms,
        } => (
            Source::Sessions(SessionSpec {
                new_input_tokens: new_input_tokens_per_turn.clone(),
                output_tokens: output_tokens_per_turn.clone(),
                turns: *turns,
                shared_prefix_ratio: *shared_prefix_ratio,
                prefix_groups: *prefix_groups,
                think_time: SimDur::from_ms_f64(*inter_turn_delay_ms),
            }),
            f64::from(*turns)
                * (new_input_tokens_per_turn.nominal_mean() + output_tokens_per_turn.nominal_mean()),
        ),
        SourceConfig::Trace { paths, format, block_size, nested_basis } => {
            let needs_timestamps = matches!(t.load.kind, LoadKind::TraceTimestamps { .. });
            let needs = Needs {
                timestamps: needs_timestamps,
                no_sessions: config.engine.kv_eviction_policy == KvEvictionPolicy::Belady,
            };
            let mut trace =
                load_traces(paths, (*format, *nested_basis), (*block_size, kv_block), files, source, needs)?;
            if let Some(seed) = t.load.agentic_snapshot {
                trace = trace.snapshot(seed, t.load.agentic_lanes.unwrap_or(0));
                if t.load.agentic_warmup {
                    let primers = trace.snapshot.as_ref().map(|s| s.primers.clone()).unwrap_or_default();
                    trace = trace.with_warmup(primers);
                }
            }
            (Source::Trace(Arc::new(trace)), 0.0)
        }
    };
    let load = match t.load.kind {
        LoadKind::Concurrency(c) => Load::Concurrency(c),
        LoadKind::Poisson(r) => Load::Poisson(r),
        LoadKind::ConstantRate(r) => Load::ConstantRate(r),
        LoadKind::Gamma { rate, cv } => Load::Gamma { rate, cv },
        LoadKind::TraceTimestamps { speedup } => {
            Load::TraceTimestamps { speedup, max_plays: t.load.agentic_lanes.unwrap_or(0) }
        }
        LoadKind::KvCapacityFraction(fraction) => {
            // 1.0 = concurrency whose KV working set (prompt + output per request) fills the
            // usable KV capacity of every rank of every replica (REF §1.1).
            #[allow(clippy::cast_precision_loss)]
            let total = kv_tokens as f64 * f64::from(kv_ranks);
            let c = libm::round(fraction * total / per_job_tokens.max(1.0)).max(1.0);
            if c > f64::from(MAX_CONCURRENCY) {
                return Err(too_large(
                    source,
                    root,
                    "traffic.load.fraction",
                    format!(
                        "{fraction} of the KV capacity ({total:.0} tokens in all, \
                         {per_job_tokens:.0} a request) is {c:.0} concurrent requests, more than \
                         the {MAX_CONCURRENCY} a run can hold"
                    ),
                ));
            }
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 1 ..= MAX_CONCURRENCY.
            Load::Concurrency(c as u32)
        }
    };
    let load_unit = match load {
        Load::Concurrency(c) => f64::from(c),
        Load::Poisson(r) | Load::ConstantRate(r) | Load::Gamma { rate: r, .. } => r,
        Load::TraceTimestamps { .. } => 1.0,
    };
    // `k` requests (or sessions) a load unit; a count beyond what a run replays is refused
    // rather than cut short.
    let per_unit = |k: f64, field: &str| {
        let n = libm::round(k * load_unit).max(1.0);
        if n > f64::from(MAX_REQUESTS) {
            return Err(too_large(
                source,
                root,
                &format!("traffic.stop.{field}"),
                format!(
                    "{k} × the load unit ({load_unit}) is {n:.0}, more than the {MAX_REQUESTS} \
                     a run can replay"
                ),
            ));
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // 1 ..= MAX_REQUESTS.
        Ok(n as u32)
    };
    let stop_node = root.get("traffic").and_then(|n| n.get("stop"));
    if matches!(load, Load::TraceTimestamps { .. })
        && (t.stop.requests_per_load_unit.is_some() || t.stop.sessions_per_load_unit.is_some())
    {
        let origin = stop_node.map_or(Origin::Builtin, |n| n.origin.clone());
        return Err(config_error(
            source,
            vec![Diagnostic {
                path: "traffic.stop".into(),
                origin,
                message:
                    "*_per_load_unit needs a load unit (concurrency or a rate); trace_timestamps has none"
                        .into(),
                kind: DiagKind::Domain,
            }],
        ));
    }
    let max_requests = match (&src, t.stop.requests, t.stop.requests_per_load_unit) {
        (_, Some(n), _) => n,
        (_, None, Some(k)) => per_unit(k, "requests_per_load_unit")?,
        // A trace replays whole unless told otherwise; sessions stop on their own rule.
        (Source::Trace(_), None, None) => u32::MAX,
        (Source::Sessions(_), None, None)
            if t.stop.sessions.is_some() || t.stop.sessions_per_load_unit.is_some() =>
        {
            u32::MAX
        }
        (_, None, None) => 100,
    };
    let max_sessions = match (t.stop.sessions, t.stop.sessions_per_load_unit) {
        (Some(n), _) => n,
        (None, Some(k)) => per_unit(k, "sessions_per_load_unit")?,
        (None, None) => u32::MAX,
    };
    if let Source::Sessions(spec) = &src {
        let requests = u64::from(max_requests).min(u64::from(max_sessions) * u64::from(spec.turns));
        if requests > u64::from(MAX_REQUESTS) {
            let field = if t.stop.sessions.is_some() { "sessions" } else { "sessions_per_load_unit" };
            return Err(too_large(
                source,
                root,
                &format!("traffic.stop.{field}"),
                format!(
                    "{max_sessions} sessions of {} turns are {requests} requests, more than the \
                     {MAX_REQUESTS} a run can replay (set traffic.stop.requests to stop sooner)",
                    spec.turns
                ),
            ));
        }
    }
    Ok(TrafficSpec {
        source: src,
        load,
        stop: Stop { max_requests, max_sessions },
        all_content_shared: false,
        rate_changes: config
            .traffic
            .load
            .rate_schedule
            .iter()
            .map(|&(at, rate)| (SimTime::ZERO + SimDur::from_secs_f64(at), rate))
            .collect(),
    })
}
