//! prediction.json (REF §2.1 keys and definitions), requests.jsonl records (REF §2.2), and
//! the human-readable summary table.
//!
//! Host wall-clock figures (`wall_time_ms`, `processed_tokens_per_s`,
//! `processed_output_tokens_per_s`) are written as `null`: they would make prediction.json
//! differ between two runs of the same seed. The CLI reports wall time separately.

use serde::Serialize;
use serde_json::{json, Map, Value};
use servesim_core::frontend::FrontendStats;
use servesim_core::metrics::{Dist, Summary};
use servesim_core::record::{Record, RecordLog};
use servesim_core::request::{ReqSeq, Status, NEVER};
use servesim_core::sim::{RunResult, StopReason};
use servesim_core::timing::StepTally;
use servesim_core::units::SimTime;

pub use crate::details::{add_details, Details};
use crate::scenario::{Prepared, PreparedRole};

mod agentic;
mod planner;
mod summary;
mod tiers;

pub use summary::{rejection_line, summary_table};
pub use tiers::{capacity_phrase, pool_phrase, writes_phrase};

/// Version of servesim's own `servesim` section in prediction.json.
pub const SERVESIM_SECTION_VERSION: u32 = 1;

/// A finished prediction: the JSON report and the per-request records.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// prediction.json, keys in the reference order.
    pub json: Value,
    /// One record per terminal request, sorted by arrival then uuid.
    pub requests: Requests,
    /// The summary figures.
    pub summary: Summary,
    /// Each worker's steps by kind ([`servesim_core::timing::StepKind::ALL`] order), for `--detail time`.
    pub worker_steps: Vec<[StepTally; 3]>,
}

/// The terminal requests of a run (finished or refused), kept compact and written out as
/// [`RequestRecord`]s one at a time: a run of millions of requests never holds millions of
/// records with their strings, nor the whole requests.jsonl text unless asked for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Requests {
    /// Every request that arrived, by arrival number.
    records: RecordLog,
    /// Arrival numbers sorted by arrival time, when that differs from arrival order.
    order: Option<Vec<ReqSeq>>,
    /// Size of the prefill pool in P/D; `None` when aggregated.
    prefill_workers: Option<u32>,
    /// The trace's name of each request by its (session, turn), when the trace names its
    /// rows (agentic Mooncake's `request_id`).
    names: Option<std::sync::Arc<std::collections::BTreeMap<(u32, u32), String>>>,
}

/// The names a trace gives its rows, by the (session, turn) their requests carry.
fn trace_names(p: &Prepared) -> Option<std::sync::Arc<std::collections::BTreeMap<(u32, u32), String>>> {
    let servesim_core::traffic::Source::Trace(t) = &p.traffic.source else { return None };
    if !t.dag || t.request_ids.len() != t.rows.len() {
        return None;
    }
    Some(std::sync::Arc::new(t.row_keys().into_iter().zip(t.request_ids.iter().cloned()).collect()))
}

impl Requests {
    fn new(
        records: RecordLog,
        prefill_workers: Option<u32>,
        names: Option<std::sync::Arc<std::collections::BTreeMap<(u32, u32), String>>>,
    ) -> Self {
        let mut prev = SimTime::ZERO;
        let sorted = records.iter().all(|r| core::mem::replace(&mut prev, r.arrival) <= r.arrival);
        let order = (!sorted).then(|| {
            #[allow(clippy::cast_possible_truncation)] // Request counts are bounded by u32 stop rules.
            let mut o: Vec<ReqSeq> = (0..records.len() as ReqSeq).collect();
            // Stable: equal arrivals stay in arrival-number (uuid) order.
            o.sort_by_key(|&i| records[i as usize].arrival);
            o
        });
        Requests { records, order, prefill_workers, names }
    }

    /// Request `i`'s line, with its name in the trace when it has one.
    fn record(&self, i: ReqSeq) -> RequestRecord {
        let r = &self.records[i as usize];
        let mut out = record(i, r, self.prefill_workers);
        out.request_id = self.names.as_ref().and_then(|n| r.session.and_then(|k| n.get(&k).cloned()));
        out
    }

    /// Arrival numbers of the terminal requests, sorted by arrival then uuid.
    fn seqs(&self) -> impl Iterator<Item = ReqSeq> + '_ {
        #[allow(clippy::cast_possible_truncation)] // Request counts are bounded by u32 stop rules.
        let seqs: Box<dyn Iterator<Item = ReqSeq> + '_> = match &self.order {
            Some(o) => Box::new(o.iter().copied()),
            None => Box::new(0..self.records.len() as ReqSeq),
        };
        seqs.filter(|&i| matches!(self.records[i as usize].status, Status::Completed | Status::Rejected))
    }

    /// The records, sorted by arrival then uuid.
    pub fn iter(&self) -> impl Iterator<Item = RequestRecord> + '_ {
        self.seqs().map(|i| self.record(i))
    }

    /// Records (terminal requests).
    #[must_use]
    pub fn count(&self) -> usize {
        self.seqs().count()
    }

    /// Writes requests.jsonl, one line at a time.
    ///
    /// # Errors
    /// What `out` returns.
    pub fn write_jsonl(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.write_jsonl_every(1, out)
    }

    /// Writes every `every`-th line of requests.jsonl (the first, then each `every` after it).
    ///
    /// # Errors
    /// What `out` returns.
    pub fn write_jsonl_every(&self, every: usize, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        // Only the kept records are built (a sample of ten million keeps one in a hundred).
        for i in self.seqs().step_by(every.max(1)) {
            let r = self.record(i);
            serde_json::to_writer(&mut *out, &r)?;
            out.write_all(b"\n")?;
        }
        Ok(())
    }

    /// requests.jsonl as text, or an even sample of it when the run has more than `max`
    /// records (every `every`-th by arrival: what a page can hold, where a million-request
    /// run's 765 MB cannot be).
    #[must_use]
    pub fn jsonl_sample(&self, max: usize) -> JsonlSample {
        let total = self.count();
        let every = total.div_ceil(max.max(1)).max(1);
        let mut out = Vec::new();
        // Writing to memory cannot fail, and serde_json writes valid UTF-8.
        let _ = self.write_jsonl_every(every, &mut out);
        JsonlSample { text: String::from_utf8(out).unwrap_or_default(), total, every }
    }

    /// Writes the records as CSV: a header of every key, one line per request, empty cells
    /// for null, quotes where a cell needs them.
    ///
    /// # Errors
    /// What `out` returns.
    pub fn write_csv(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        let mut keys: Vec<String> = Vec::new();
        for r in self.iter() {
            let Value::Object(m) = serde_json::to_value(&r).unwrap_or(Value::Null) else { continue };
            if keys.is_empty() {
                keys = m.keys().cloned().collect();
                writeln!(out, "{}", keys.join(","))?;
            }
            writeln!(out, "{}", csv_line(&keys, &m))?;
        }
        Ok(())
    }
}

/// A requests.jsonl sample: the text, the records in the run, and the step between the
/// records kept (1: all of them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonlSample {
    /// Lines of the records kept.
    pub text: String,
    /// Records in the run.
    pub total: usize,
    /// Every how many records one was kept.
    pub every: usize,
}

/// One CSV line of a record's `keys` (empty cells for null and missing keys; a cell holding a
/// comma, quote or newline is quoted with its quotes doubled).
#[must_use]
fn csv_line(keys: &[String], record: &Map<String, Value>) -> String {
    let cell = |v: Option<&Value>| -> String {
        match v {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) if s.contains([',', '"', '\n']) => {
                format!("\"{}\"", s.replace('"', "\"\""))
            }
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        }
    };
    keys.iter().map(|k| cell(record.get(k))).collect::<Vec<_>>().join(",")
}

/// One line of requests.jsonl.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Session, when the request is a turn of one.
    pub session_id: Option<String>,
    /// Turn within the session.
    pub turn_index: Option<u32>,
    /// Request id.
    pub uuid: String,
    /// The request's name in its trace (agentic Mooncake's `request_id`; servesim extension,
    /// absent for other traffic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// A warmup primer sent before the measured replay (`traffic.load.agentic_warmup`;
    /// servesim extension, absent for measured requests): left out of every metric.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
    /// Arrival time (ms from the start).
    pub arrival_time_ms: f64,
    /// First admission by a scheduler.
    pub first_admit_ms: Option<f64>,
    /// First output token.
    pub first_token_ms: Option<f64>,
    /// Last output token.
    pub last_token_ms: Option<f64>,
    /// Time to first token.
    pub ttft_ms: Option<f64>,
    /// Time from first to second token.
    pub ttst_ms: Option<f64>,
    /// End-to-end latency.
    pub e2e_latency_ms: Option<f64>,
    /// This request's mean time per output token (AIPerf's `inter_token_latency`).
    pub itl_ms: Option<f64>,
    /// Prompt tokens.
    pub input_length: u32,
    /// Output tokens asked for.
    pub requested_output_length: u32,
    /// Output tokens generated.
    pub output_length: u32,
    /// Prompt tokens served from prefix cache (max over admissions).
    pub reused_input_tokens: u32,
    /// Of the prompt tokens served from cache at the first admission, those GPU memory held
    /// (AISimulate's name; null if never admitted).
    pub first_admission_g1_reused_input_tokens: Option<u32>,
    /// Those host or storage memory gave back (null if never admitted).
    pub first_admission_host_reused_input_tokens: Option<u32>,
    /// Prefill worker (null when aggregated).
    pub prefill_worker_idx: Option<u32>,
    /// Decode or aggregated worker.
    pub decode_worker_idx: Option<u32>,
    /// P/D: first admission on the prefill worker.
    pub prefill_admit_ms: Option<f64>,
    /// P/D: prefill finished; the source KV is held from here.
    pub source_held_ms: Option<f64>,
    /// P/D: the decode worker reserved KV.
    pub destination_reserved_ms: Option<f64>,
    /// P/D: the KV arrived on the decode worker.
    pub destination_activated_ms: Option<f64>,
    /// P/D: first decode-worker step including the request.
    pub decode_admit_ms: Option<f64>,
    /// P/D: the prefill worker released the source KV.
    pub source_released_ms: Option<f64>,
    /// P/D: prompt tokens the decode worker already had cached.
    pub decode_reused_input_tokens: Option<u32>,
    /// P/D: KV tokens moved (servesim extension).
    pub transferred_tokens: Option<u32>,
    /// Prompt tokens cached on the prefill worker when routed (null when aggregated).
    pub prefill_route_overlap_tokens: Option<u32>,
    /// Prompt tokens cached on the decode (or aggregated) worker when routed.
    pub decode_route_overlap_tokens: Option<u32>,
    /// Times the request was preempted (servesim extension).
    pub num_preemptions: u32,
    /// `completed | rejected`.
    pub terminal_status: &'static str,
}

fn ms(t: SimTime) -> Option<f64> {
    (t != NEVER).then(|| t.as_ms_f64())
}

/// `prefill_workers`: size of the prefill pool in P/D (decode indices are pool-local), or
/// `None` when aggregated.
fn record(i: ReqSeq, r: &Record, prefill_workers: Option<u32>) -> RequestRecord {
    let pd = prefill_workers.is_some();
    let a = r.arrival;
    let first = ms(r.stamps.first_token);
    let last = ms(r.stamps.last_token);
    let since = |t: SimTime| (t != NEVER).then(|| (t - a).as_ms_f64());
    RequestRecord {
        session_id: r.session.map(|(s, _)| format!("session_{s}")),
        turn_index: r.session.map(|(_, t)| t),
        uuid: format!("request_{i}"),
        request_id: None,
        warmup: r.warmup,
        arrival_time_ms: a.as_ms_f64(),
        first_admit_ms: ms(r.stamps.first_admit),
        first_token_ms: first,
        last_token_ms: last,
        ttft_ms: since(r.stamps.first_token),
        ttst_ms: (r.stamps.second_token != NEVER)
            .then(|| (r.stamps.second_token - r.stamps.first_token).as_ms_f64()),
        e2e_latency_ms: since(r.stamps.last_token),
        itl_ms: (r.emitted >= 2)
            .then(|| (r.stamps.last_token - r.stamps.first_token).as_ms_f64() / f64::from(r.emitted - 1)),
        input_length: r.input_tokens,
        requested_output_length: r.requested_output_tokens,
        output_length: r.emitted,
        reused_input_tokens: r.reused_max,
        first_admission_g1_reused_input_tokens: r
            .first_admission_reused()
            .map(|n| n.saturating_sub(r.first_admission_tier_reused)),
        first_admission_host_reused_input_tokens: r
            .first_admission_reused()
            .map(|_| r.first_admission_tier_reused),
        prefill_worker_idx: r.prefill_worker,
        decode_worker_idx: match prefill_workers {
            Some(np) => r.decode_worker.map(|d| d - np),
            None => Some(r.worker),
        },
        prefill_admit_ms: if pd { ms(r.stamps.first_admit) } else { None },
        source_held_ms: ms(r.pd.prefill_done),
        destination_reserved_ms: ms(r.pd.dest_reserved),
        destination_activated_ms: ms(r.pd.dest_activated),
        decode_admit_ms: ms(r.pd.decode_admit),
        source_released_ms: ms(r.pd.source_released),
        decode_reused_input_tokens: pd.then_some(r.decode_reused),
        transferred_tokens: pd.then_some(r.transferred_tokens),
        prefill_route_overlap_tokens: pd.then_some(r.prefill_route_overlap_tokens),
        decode_route_overlap_tokens: Some(r.route_overlap_tokens),
        num_preemptions: r.preemptions,
        terminal_status: match r.status {
            Status::Completed => "completed",
            Status::Rejected => "rejected",
            Status::Waiting | Status::Running | Status::Transferring => "canceled",
        },
    }
}

fn put_dist(m: &mut Map<String, Value>, name: &str, d: &Dist, suffix: &str) {
    for (stat, v) in [
        ("mean", d.mean),
        ("min", d.min),
        ("max", d.max),
        ("median", d.median),
        ("p75", d.p75),
        ("p90", d.p90),
        ("p95", d.p95),
        ("p99", d.p99),
        ("std", d.std),
    ] {
        m.insert(format!("{stat}_{name}{suffix}"), json!(v));
    }
}

fn stop_name(s: StopReason) -> &'static str {
    match s {
        StopReason::Drained => "drained",
        StopReason::EventLimit => "event_limit",
        StopReason::TimeLimit => "time_limit",
    }
}

/// Builds the prediction from a finished run.
#[must_use]
#[allow(clippy::cast_precision_loss)]
pub fn build(p: &Prepared, result: RunResult) -> Prediction {
    let s = &result.summary;
    let mut m = Map::new();
    m.insert("num_requests".into(), json!(s.num_requests));
    m.insert("completed_requests".into(), json!(s.completed_requests));
    m.insert("total_input_tokens".into(), json!(s.total_input_tokens));
    m.insert("total_output_tokens".into(), json!(s.total_output_tokens));
    m.insert("duration_ms".into(), json!(s.duration_ms));
    m.insert("wall_time_ms".into(), Value::Null);
    m.insert("request_throughput_rps".into(), json!(s.request_throughput_rps));
    m.insert("input_throughput_tok_s".into(), json!(s.input_throughput_tok_s));
    m.insert("output_throughput_tok_s".into(), json!(s.output_throughput_tok_s));
    m.insert("total_throughput_tok_s".into(), json!(s.total_throughput_tok_s));
    m.insert("prefill_worker_seconds".into(), json!(s.prefill_worker_seconds));
    m.insert("decode_worker_seconds".into(), json!(s.decode_worker_seconds));
    m.insert("prefill_gpus_per_worker".into(), json!(s.prefill_gpus_per_worker));
    m.insert("decode_gpus_per_worker".into(), json!(s.decode_gpus_per_worker));
    m.insert("gpu_hours".into(), json!(s.gpu_hours));
    if let Some(g) = s.goodput {
        m.insert("goodput_completed_requests".into(), json!(g.completed_requests));
        m.insert("goodput_request_throughput_rps".into(), json!(g.request_throughput_rps));
        m.insert("goodput_output_throughput_tok_s".into(), json!(g.output_throughput_tok_s));
    }
    m.insert("processed_tokens".into(), json!(s.processed_tokens));
    m.insert("processed_tokens_per_s".into(), Value::Null);
    m.insert("processed_output_tokens_per_s".into(), Value::Null);
    m.insert("prefix_cache_reused_ratio".into(), json!(s.prefix_cache_reused_ratio));
    m.insert(
        "first_admission_prefix_cache_reused_ratio".into(),
        json!(s.first_admission_prefix_cache_reused_ratio),
    );
    put_dist(&mut m, "ttft", &s.ttft, "_ms");
    put_dist(&mut m, "ttst", &s.ttst, "_ms");
    put_dist(&mut m, "tpot", &s.tpot, "_ms");
    put_dist(&mut m, "itl", &s.itl, "_ms");
    put_dist(&mut m, "e2e_latency", &s.e2e_latency, "_ms");
    put_dist(&mut m, "output_token_throughput_per_user", &s.output_token_throughput_per_user, "");
    // Power needs per-op energy (REF §2.4): the share of op latency whose op carries an energy
    // figure. The op-level model's kernel tables carry none (the importer keeps latency only),
    // so its coverage is 0 and power_w is withheld; whole-forward (FPM) and roofline timing
    // have no per-op figures at all, so both are null, as the contract has it for FPM.
    let op_level = !result.timers.is_empty()
        && result.timers.iter().all(|t| t.as_ref().is_some_and(|t| t.model == "op_level"));
    m.insert("power_w".into(), Value::Null);
    m.insert("power_coverage".into(), if op_level { json!(0.0) } else { Value::Null });
    // AISimulate's conditional `g2_domains`: each cluster-shared host pool, its capacity once.
    if let Some(pool) = result.host_pool {
        m.insert(
            "g2_domains".into(),
            json!([{
                "scope": "cluster_shared",
                "role": p.roles.first().map_or("", |r| r.name),
                "capacity_blocks": pool.capacity_blocks,
                "used_blocks": pool.resident_blocks,
                "ranks": pool.ports,
            }]),
        );
    }
    m.insert("servesim".into(), servesim_section(p, &result));

    let worker_steps = result.worker_stats.iter().map(|w| w.by_kind).collect();
    let requests = Requests::new(result.records, p.disaggregated().then(|| prefill_slots(p)), trace_names(p));
    Prediction { json: Value::Object(m), requests, summary: result.summary, worker_steps }
}

/// The role (index into `p.roles`) worker `w` belongs to: workers are laid out role by
/// role, the prefill pool first when disaggregated.
pub(crate) fn role_of_worker(p: &Prepared, w: usize) -> usize {
    usize::from(p.disaggregated() && w >= prefill_slots(p) as usize)
}

/// Worker slots of the prefill pool (its replicas, or as many as the planner may start):
/// decode workers are numbered after them.
fn prefill_slots(p: &Prepared) -> u32 {
    #[allow(clippy::cast_possible_truncation)] // Worker counts are small.
    p.roles.first().map_or(0, |x| p.slots(x) as u32)
}

/// Why requests were refused, so a run whose requests never ran says so: those longer (prompt
/// plus output) than the model's context, and the rest, which no rank's KV pool could hold
/// (the smallest pool of any role, in tokens).
fn rejections(p: &Prepared, r: &RunResult) -> Value {
    let pool_tokens = p.roles.iter().map(PreparedRole::kv_tokens_per_rank).min().unwrap_or(0);
    let (mut beyond_context, mut beyond_pool) = (0u64, 0u64);
    for q in r.records.iter().filter(|q| q.status == Status::Rejected) {
        let total = q.input_tokens.saturating_add(q.requested_output_tokens);
        if p.context_limit.is_some_and(|l| total > l) {
            beyond_context += 1;
        } else {
            beyond_pool += 1;
        }
    }
    json!({
        "beyond_context": beyond_context,
        "context_tokens": p.context_limit,
        "beyond_kv_pool": beyond_pool,
        "kv_pool_tokens": pool_tokens,
    })
}

#[allow(clippy::cast_precision_loss)]
fn servesim_section(p: &Prepared, r: &RunResult) -> Value {
    let e = &p.config.engine;
    let series = &r.series;
    let interval_s = series.interval.as_secs_f64();
    let workers: Vec<Value> = (0..r.worker_stats.len())
        .map(|w| {
            let col = |f: &dyn Fn(&servesim_core::metrics::WorkerSample) -> f64| -> Vec<f64> {
                series.samples.iter().map(|s| s.get(w).map_or(0.0, f)).collect()
            };
            // Rates over each sample interval from the cumulative counters (exact however
            // the series was thinned).
            let rate_of = |f: &dyn Fn(&servesim_core::metrics::WorkerSample) -> u64| -> Vec<f64> {
                let c: Vec<u64> = series.samples.iter().map(|s| s.get(w).map_or(0, f)).collect();
                let mut rate = vec![0.0];
                for k in 1..c.len() {
                    let dt = (series.times[k] - series.times[k - 1]).as_secs_f64();
                    rate.push(if dt > 0.0 { (c[k] - c[k - 1]) as f64 / dt } else { 0.0 });
                }
                rate
            };
            let prefill_rate = rate_of(&|x| x.prefill_cumulative);
            let decode_rate = rate_of(&|x| x.decode_cumulative);
            let rate: Vec<f64> = prefill_rate.iter().zip(&decode_rate).map(|(a, b)| a + b).collect();
            let st = &r.worker_stats[w];
            // The worker's KV pool: every attention-DP rank's blocks.
            let role = p.roles.get(role_of_worker(p, w));
            let kv_total = role
                .map_or(0, |r| u64::from(r.blocks_per_rank) * u64::from(r.config.parallelism.attention_data));
            let mut entry = json!({
                "worker": w,
                "kv_blocks_total": kv_total,
                "role": role.map_or("aggregated", |r| r.name),
                "waiting": col(&|x| f64::from(x.waiting)),
                "running": col(&|x| f64::from(x.running)),
                "kv_blocks_used": col(&|x| f64::from(x.kv_blocks_used)),
                "tokens_per_s": rate,
                "prefill_tokens_per_s": prefill_rate,
                "decode_tokens_per_s": decode_rate,
                "steps": st.steps,
                "busy_ms": st.busy_ns as f64 / 1e6,
                "prefill_tokens": st.prefill_tokens,
                "decode_tokens": st.decode_tokens,
                "preemptions": st.preemptions,
                "kv_evicted_tokens": st.kv_evicted_tokens,
            });
            // Under the planner: how long the slot was provisioned (0 for one never started).
            if let Some(d) = st.provisioned {
                entry["provisioned_ms"] = json!(d.as_ms_f64());
            }
            entry
        })
        .collect();
    let rejected = r.records.iter().filter(|q| q.status == Status::Rejected).count();
    let rejections = (rejected > 0).then(|| rejections(p, r));
    let roles: Vec<Value> = p
        .roles
        .iter()
        .map(|role| {
            let rc = &role.config;
            json!({
                "role": role.name,
                "hardware": role.hardware.id,
                "replicas": rc.parallelism.replicas,
                "tensor": rc.parallelism.tensor,
                "attention_data": rc.parallelism.attention_data,
                "gpus_per_worker": role.parallelism.gpus(),
                "block_size": rc.kv_cache.block_size,
                "prefix_caching": rc.kv_cache.prefix_caching,
                "max_batched_tokens": role.max_batched_tokens,
                "max_sequences": role.max_sequences,
                // SGLang's prefill budget (its own, not `max_batched_tokens`), as resolved.
                "chunked_prefill_size": rc.scheduler.chunked_prefill_size,
            })
        })
        .collect();
    let mut memory = Map::new();
    for role in &p.roles {
        let mem = &role.memory;
        memory.insert(
            role.name.to_string(),
            json!({
                "total_gpu_capacity_bytes": mem.total_gpu_capacity_bytes,
                "weights_bytes": mem.weights_bytes,
                "activations_bytes": mem.activations_bytes,
                "runtime_overhead_bytes": mem.runtime_overhead_bytes,
                "comm_overhead_bytes": mem.comm_overhead_bytes,
                "cuda_graph_reserved_bytes": mem.cuda_graph_reserved_bytes,
                "kv_cache_bytes": mem.kv_cache_bytes,
                "kv_size_per_token_bytes": mem.kv_bytes_per_token,
                "total_kv_size_tokens": mem.kv_tokens,
                "kv_blocks_per_rank": role.blocks_per_rank,
                "memory_fraction": role.memory_fraction,
                "recurrent_state": role.state.as_ref().map(|s| tiers::state_json(p, r, role, s)),
            }),
        );
    }
    let transferred: u64 = r.records.iter().map(|q| u64::from(q.transferred_tokens)).sum();
    // Per role: the step-time model, its data, and how its op lookups were answered.
    let timing: Vec<Value> = p
        .roles
        .iter()
        .zip(&r.timers)
        .map(|(role, t)| match t {
            Some(t) => {
                let mut lookups = Map::new();
                let mut total = [0u64; 4];
                for (kind, c) in &t.lookups {
                    for (a, b) in total.iter_mut().zip(c) {
                        *a += b;
                    }
                    lookups.insert(
                        kind.clone(),
                        json!({"measured": c[0], "interpolated": c[1], "extrapolated": c[2], "roofline": c[3]}),
                    );
                }
                json!({
                    "role": role.name,
                    "model": t.model,
                    "data": t.data,
                    "lookups": {"measured": total[0], "interpolated": total[1], "extrapolated": total[2], "roofline": total[3]},
                    "lookups_by_op": lookups,
                })
            }
            None => json!({
                "role": role.name,
                "model": "roofline",
                "data": "none: peak x efficiency (constants in crates/servesim_perf/src/roofline.rs)",
            }),
        })
        .collect();
    let mut section = json!({
        "schema_version": SERVESIM_SECTION_VERSION,
        "version": env!("CARGO_PKG_VERSION"),
        "seed": p.seed,
        "stop_reason": stop_name(r.stop),
        "events": r.events,
        "rejected_requests": rejected,
        "num_preemptions": r.summary.num_preemptions,
        "num_samples": {
            "ttft": r.summary.ttft.count,
            "tpot": r.summary.tpot.count,
            "itl": r.summary.itl.count,
        },
        "deployment": {
            "mode": if p.disaggregated() { "disaggregated" } else { "aggregated" },
            "model": p.model.id,
            "backend": match e.backend {
                servesim_core::engine::Backend::Vllm => "vllm",
                servesim_core::engine::Backend::Sglang => "sglang",
                servesim_core::engine::Backend::TrtLlm => "trtllm",
            },
            "backend_version": e.backend_version,
            "gpus": p.gpus(),
            "gemm_dtype": p.gemm_dtype.name(),
            "kv_cache_dtype": p.kv_dtype.name(),
            "roles": roles,
        },
        "memory": memory,
        "kv_transfer": {
            "transferred_tokens": transferred,
            "bandwidth_gb_per_second": e.kv_transfer.bandwidth_gb_per_second,
            "link_sharing": match e.kv_transfer.link_sharing {
                servesim_core::transfer::Sharing::MaxMin => "max_min",
                servesim_core::transfer::Sharing::Independent => "independent",
            },
        },
        "timing": timing,
        "time_series": {
            "interval_ms": interval_s * 1000.0,
            "time_ms": series.times.iter().map(|t| t.as_ms_f64()).collect::<Vec<_>>(),
            "workers": workers,
        },
    });
    if let Some(f) = frontend_section(r) {
        section["frontend"] = f;
    }
    if let Some(h) = tiers::host_section(p, r) {
        section["host_offload"] = h;
    }
    if let Some(g) = tiers::g3_section(p, r) {
        section["g3_offload"] = g;
    }
    if let Some(e) = tiers::eviction_section(r) {
        section["kv_eviction"] = e;
    }
    if let Some(pl) = planner::section(p, r) {
        section["planner"] = pl;
    }
    if let Some(a) = agentic::section(p, r) {
        section["agentic"] = a;
    }
    if let Some(s) = speculation_section(p, r) {
        section["speculation"] = s;
    }
    if let Some(why) = rejections {
        section["rejections"] = why;
    }
    section
}

/// Speculative decoding, when the engine speculates: its settings, the tokens a round emits
/// by the acceptance model, and what the run's rounds emitted (fewer where outputs end inside
/// a round).
#[allow(clippy::cast_precision_loss)] // Token counts are far below 2^52.
fn speculation_section(p: &Prepared, r: &RunResult) -> Option<Value> {
    let s = p.speculation();
    if !s.is_on() {
        return None;
    }
    let kind = match &p.config.engine.speculation {
        crate::config::SpeculationConfig::Ngram { .. } => "ngram",
        crate::config::SpeculationConfig::DraftModel { .. } => "draft_model",
        _ => "draft_layers",
    };
    let tokens: u64 = r.worker_stats.iter().map(|w| w.decode_tokens).sum();
    let rounds: u64 = r.worker_stats.iter().map(|w| w.decode_rounds).sum();
    let mut out = json!({
        "kind": kind,
        "draft_tokens": s.draft_tokens,
        "draft_layers": p.config.engine.speculation.draft_layers(),
        "expected_tokens_per_round": s.expected_tokens(),
        "tokens_per_round": if rounds > 0 { tokens as f64 / rounds as f64 } else { 0.0 },
        "rounds": rounds,
    });
    if let Some(d) = &p.draft {
        out["draft_model"] = json!(d.id);
    }
    Some(out)
}

/// The serving processes' work over the run, when they were simulated: how busy they were,
/// how long requests waited for them and how late they delivered tokens. Under the
/// autoscaling planner a worker's processes count for the time it was provisioned, and
/// workers it never started are left out.
#[allow(clippy::cast_precision_loss)]
fn frontend_section(r: &RunResult) -> Option<Value> {
    let duration_ns = r.summary.duration_ms * 1e6;
    // Each worker's stats with its processes' time (ns x processes).
    let per_worker: Vec<(usize, (FrontendStats, f64))> = r
        .worker_stats
        .iter()
        .enumerate()
        .filter(|(_, s)| s.provisioned.is_none_or(|d| d.as_ns() > 0))
        .filter_map(|(w, s)| {
            let lived = s.provisioned.map_or(duration_ns, |d| d.as_ns() as f64);
            s.frontend.map(|f| (w, (f, lived * f64::from(f.processes))))
        })
        .collect();
    if per_worker.is_empty() {
        return None;
    }
    let ratio = |a: u64, b: f64| if b > 0.0 { a as f64 / b } else { 0.0 };
    let describe = |(f, process_ns): &(FrontendStats, f64)| {
        json!({
            "processes": f.processes,
            "busy_fraction": ratio(f.busy_ns, *process_ns),
            "requests": f.requests,
            "mean_request_wait_ms": ratio(f.request_wait_ns, f.requests as f64) / 1e6,
            "tokens": f.tokens,
            "mean_token_delay_ms": ratio(f.token_delay_ns, f.tokens as f64) / 1e6,
        })
    };
    let mut all = (FrontendStats::default(), 0.0);
    for (_, (f, process_ns)) in &per_worker {
        all.0.add(f);
        all.1 += process_ns;
    }
    let mut total = describe(&all);
    total["workers"] = workers_json(&per_worker, describe);
    Some(total)
}

/// Each worker's figures, as `describe` gives them, with its index.
pub(crate) fn workers_json<T>(per_worker: &[(usize, T)], describe: impl Fn(&T) -> Value) -> Value {
    per_worker
        .iter()
        .map(|(w, x)| {
            let mut v = describe(x);
            v["worker"] = json!(w);
            v
        })
        .collect::<Vec<_>>()
        .into()
}

/// Pretty JSON text of prediction.json (two-space indent, trailing newline).
#[must_use]
pub fn to_pretty_json(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

/// requests.jsonl text.
#[must_use]
pub fn to_jsonl(requests: &Requests) -> String {
    let mut out = Vec::new();
    // Writing to memory cannot fail, and serde_json writes valid UTF-8.
    let _ = requests.write_jsonl(&mut out);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_csv_line_quotes_what_needs_it_and_leaves_nulls_empty() {
        let keys: Vec<String> = ["uuid", "ttft_ms", "note", "session_id", "gone"].map(String::from).to_vec();
        let Value::Object(m) =
            json!({"uuid": "r-1", "ttft_ms": 30.5, "note": "a,\"b\"", "session_id": null, "extra": 1})
        else {
            panic!()
        };
        assert_eq!(csv_line(&keys, &m), "r-1,30.5,\"a,\"\"b\"\"\",,");
    }
}
