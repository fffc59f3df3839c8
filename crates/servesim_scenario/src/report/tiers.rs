//! prediction.json's sections for the KV tiers beyond GPU memory — `servesim.host_offload`
//! (G2) and `servesim.g3_offload` (G3) — for Belady eviction (`servesim.kv_eviction`) and for
//! a hybrid model's recurrent state (`servesim.memory.<role>.recurrent_state`), and the
//! summary's lines for them.

use serde_json::{json, Value};
use servesim_core::host::{HostStats, HostWrites, PrefetchPolicy};
use servesim_core::sim::RunResult;

use crate::scenario::Prepared;

/// The host KV tiers (G2), when the workers keep them: their size and links, and what they
/// wrote, evicted and restored over the run.
#[allow(clippy::cast_precision_loss)] // Counters are far below 2^52.
pub(super) fn host_section(p: &Prepared, r: &RunResult) -> Option<Value> {
    let role = p.roles.first()?;
    let spec = p.host_spec(role)?;
    // HiCache's tier counts tokens (its blocks are tokens).
    let tokens = spec.writes.tokens();
    let block_size = if tokens { 1 } else { u64::from(role.config.kv_cache.block_size) };
    let describe = |h: &HostStats| {
        json!({
            "written_blocks": h.written_blocks,
            "dropped_blocks": h.dropped_blocks,
            "evicted_blocks": h.evicted_blocks,
            "restores": h.restores,
            "restored_blocks": h.restored_blocks,
            "restored_tokens": h.restored_blocks * block_size,
            "mean_restore_wait_ms": if h.restores > 0 { h.restore_wait_ns as f64 / h.restores as f64 / 1e6 } else { 0.0 },
            "resident_blocks": h.resident_blocks,
        })
    };
    let per_worker: Vec<(usize, HostStats)> =
        r.worker_stats.iter().enumerate().filter_map(|(w, s)| s.host.map(|h| (w, h))).collect();
    let mut out = describe(&host_totals(r));
    let gbps = |b: Option<f64>| b.map_or(0.0, |b| b / 1e9);
    out["scope"] = json!(if r.host_pool.is_some() { "cluster_shared" } else { "dp_rank_local" });
    // The workers that keep it: the aggregated ones, or a disaggregated deployment's prefill pool.
    out["role"] = json!(role.name);
    // vLLM writes every computed block; TensorRT-LLM only what GPU memory evicts.
    out["writes"] = json!(match spec.writes {
        HostWrites::AfterCompute => "after_compute",
        HostWrites::OnEviction => "on_eviction",
        HostWrites::WriteThrough => "write_through",
        HostWrites::WriteThroughSelective => "write_through_selective",
        HostWrites::WriteBack => "write_back",
    });
    out["counted_in"] = json!(if tokens { "tokens" } else { "blocks" });
    let gib = |blocks: u64| blocks as f64 * spec.block_bytes as f64 / (1u64 << 30) as f64;
    match (r.host_pool, role.config.kv_cache.host_offload.and_then(|h| h.shared)) {
        // One pool for every rank: its size, contents and bandwidth once, not a rank's.
        (Some(pool), Some(links)) => {
            // Each of a rank's tensor-parallel GPUs holds its own shard of every block (vLLM).
            let shards = f64::from(role.config.parallelism.tensor.max(1));
            out["capacity_blocks"] = json!(pool.capacity_blocks);
            out["block_bytes_per_gpu"] = json!(spec.block_bytes);
            out["capacity_gib"] = json!(gib(pool.capacity_blocks) * shards);
            out["resident_blocks"] = json!(pool.resident_blocks);
            out["ranks"] = json!(pool.ports);
            out["cross_rank_restored_blocks"] = json!(pool.cross_rank_restored_blocks);
            out["shared_d2h_bandwidth_gbps"] = json!(links.d2h_gbps);
            out["shared_h2d_bandwidth_gbps"] = json!(links.h2d_gbps);
        }
        _ => {
            out["capacity_blocks_per_rank"] = json!(spec.capacity_blocks);
            out["block_bytes_per_gpu"] = json!(spec.block_bytes);
            out["capacity_gib_per_gpu"] = json!(gib(u64::from(spec.capacity_blocks)));
        }
    }
    out["d2h_bandwidth_gbps"] = json!(gbps(spec.d2h_bytes_per_s));
    out["h2d_bandwidth_gbps"] = json!(gbps(spec.h2d_bytes_per_s));
    out["latency_to_first_byte_ms"] = json!(spec.first_byte.as_ms_f64());
    out["workers"] = super::workers_json(&per_worker, describe);
    Some(out)
}

/// The host tiers' counters summed over every worker.
fn host_totals(r: &RunResult) -> HostStats {
    let mut all = HostStats::default();
    for h in r.worker_stats.iter().filter_map(|s| s.host.as_ref()) {
        all.add(h);
    }
    all
}

/// The storage KV tier (G3) behind the host tiers: its scope, size and links, and what it
/// wrote, evicted and read back over the run (shared stores counted once).
#[allow(clippy::cast_precision_loss)] // Counters are far below 2^52.
pub(super) fn g3_section(p: &Prepared, r: &RunResult) -> Option<Value> {
    let g = r.g3?;
    let role = p.roles.first()?;
    let (spec, scope) = p.g3_spec(role)?;
    let block_size = u64::from(role.config.kv_cache.block_size);
    let gbps = |b: Option<f64>| b.map_or(0.0, |b| b / 1e9);
    let mut out = json!({
        "scope": match scope {
            crate::config::G3Scope::WorkerLocal => "worker_local",
            crate::config::G3Scope::ClusterShared => "cluster_shared",
        },
        "capacity_blocks": spec.capacity_blocks,
        "capacity_blocks_total": g.capacity_blocks,
        "block_bytes": spec.block_bytes,
        "read_bandwidth_gbps": gbps(spec.read_bytes_per_s),
        "write_bandwidth_gbps": gbps(spec.write_bytes_per_s),
        "latency_to_first_byte_ms": spec.first_byte.as_ms_f64(),
        "lookup_probes": g.lookup_probes,
        "lookup_hits": g.lookup_hits,
        "lookup_pending": g.lookup_pending,
        "read_jobs": g.read_jobs,
        "read_blocks": g.read_blocks,
        "read_tokens": g.read_blocks * block_size,
        "read_bytes": g.read_blocks * spec.block_bytes,
        "cross_worker_read_blocks": g.cross_worker_read_blocks,
        "written_blocks": g.written_blocks,
        "written_bytes": g.written_blocks * spec.block_bytes,
        "dropped_blocks": g.dropped_blocks,
        "evicted_blocks": g.evicted_blocks,
        "bypassed_restores": g.bypassed_restores,
        "resident_blocks": g.resident_blocks,
        "pending_blocks": g.pending_blocks,
    });
    out["role"] = json!(role.name);
    if scope == crate::config::G3Scope::ClusterShared {
        out["shared_read_bandwidth_gbps"] = json!(gbps(spec.shared_read_bytes_per_s));
        out["shared_write_bandwidth_gbps"] = json!(gbps(spec.shared_write_bytes_per_s));
    }
    // Behind SGLang's HiCache the store holds pages, read ahead of admission.
    if let Some(pf) = p.prefetch_spec(role) {
        let host = host_totals(r);
        out["reads"] = json!("prefetch");
        out["page_tokens"] = json!(pf.page_tokens);
        out["prefetch_policy"] = json!(match pf.policy {
            PrefetchPolicy::BestEffort => "best_effort",
            PrefetchPolicy::WaitComplete => "wait_complete",
            PrefetchPolicy::Timeout { .. } => "timeout",
        });
        out["prefetch_threshold_tokens"] = json!(pf.threshold_tokens);
        out["prefetches"] = json!(host.prefetches);
        out["prefetches_revoked"] = json!(host.prefetch_revoked);
        out["prefetches_cut_short"] = json!(host.prefetch_cut_short);
        out["prefetched_tokens"] = json!(host.prefetched_tokens);
    } else {
        out["reads"] = json!("at_admission");
    }
    Some(out)
}

/// Belady eviction, when the pools evict by its forecast: the assumption (AISimulate's
/// label), what the forecast covered, and the figures to compare with an LRU run of the same
/// config (reuse at first admission, prefill tokens computed, cached tokens evicted).
pub(super) fn eviction_section(r: &RunResult) -> Option<Value> {
    let f = r.eviction?;
    Some(json!({
        "policy": crate::config::KvEvictionPolicy::Belady.name(),
        "assumption": "global_input_trace_order_v1",
        "forecast_requests": f.requests,
        "forecast_blocks": f.blocks,
        "forecast_demands": f.demands,
        "demand_ended_requests": f.ended_requests,
        "first_admission_prefix_cache_reused_ratio": r.summary.first_admission_prefix_cache_reused_ratio,
        "committed_prefill_tokens": r.worker_stats.iter().map(|s| s.prefill_tokens).sum::<u64>(),
        "evicted_tokens": r.worker_stats.iter().map(|s| s.kv_evicted_tokens).sum::<u64>(),
    }))
}

/// How a host tier (prediction.json's `servesim.host_offload`) was written, after "written"
/// (empty for vLLM's, which writes every block it computes).
#[must_use]
pub fn writes_phrase(host: &Value) -> &'static str {
    match host["writes"].as_str() {
        Some("on_eviction" | "write_back") => " as GPU memory evicted them",
        Some("write_through") => " through from the radix cache",
        Some("write_through_selective") => " through from the radix cache at their second insert",
        _ => "",
    }
}

/// How much a host tier holds: `N blocks a rank`, or for a cluster-shared pool `N blocks in
/// one pool R ranks share (X restored by another rank than wrote them)`.
#[must_use]
pub fn capacity_phrase(host: &Value) -> String {
    let n = |k: &str| host[k].as_u64().unwrap_or(0);
    let unit = host["counted_in"].as_str().unwrap_or("blocks");
    if host["scope"] == "cluster_shared" {
        format!(
            "{} {unit} in one pool {} ranks share ({} restored by another rank than wrote them)",
            n("capacity_blocks"),
            n("ranks"),
            n("cross_rank_restored_blocks")
        )
    } else {
        format!("{} {unit} a rank", n("capacity_blocks_per_rank"))
    }
}

/// Which pool keeps a tier, after its name: nothing for aggregated workers, `, prefill
/// workers` for a disaggregated deployment's.
#[must_use]
pub fn pool_phrase(tier: &Value) -> &'static str {
    if tier["role"] == "prefill" {
        ", prefill workers"
    } else {
        ""
    }
}

/// The summary's lines for the host and storage tiers and for Belady eviction, from
/// prediction.json's `servesim`.
pub(super) fn summary_lines(servesim: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let host = &servesim["host_offload"];
    if host.is_object() {
        let n = |k: &str| host[k].as_u64().unwrap_or(0);
        out.push(format!(
            "host KV tier (G2{}): {} restores of {} {unit} ({} tokens, {:.2} ms wait on average); {} {unit} written{}, {} evicted, {} dropped; {}\n",
            pool_phrase(host),
            n("restores"),
            n("restored_blocks"),
            n("restored_tokens"),
            host["mean_restore_wait_ms"].as_f64().unwrap_or(0.0),
            n("written_blocks"),
            writes_phrase(host),
            n("evicted_blocks"),
            n("dropped_blocks"),
            capacity_phrase(host),
            unit = host["counted_in"].as_str().unwrap_or("blocks"),
        ));
    }
    let g3 = &servesim["g3_offload"];
    if g3.is_object() && g3["reads"] == "prefetch" {
        let n = |k: &str| g3[k].as_u64().unwrap_or(0);
        out.push(format!(
            "storage KV tier (G3, {}{}): {} prefetches ({}) read {} pages ({} tokens) ahead of admission, {} cut short, {} not started for too few pages stored; {} tokens reached host memory; {} of {} pages looked up found; {} written, {} evicted, {} dropped\n",
            g3["scope"].as_str().unwrap_or(""),
            pool_phrase(g3),
            n("prefetches"),
            g3["prefetch_policy"].as_str().unwrap_or(""),
            n("read_blocks"),
            n("read_tokens"),
            n("prefetches_cut_short"),
            n("prefetches_revoked"),
            n("prefetched_tokens"),
            n("lookup_hits"),
            n("lookup_probes"),
            n("written_blocks"),
            n("evicted_blocks"),
            n("dropped_blocks"),
        ));
    } else if g3.is_object() {
        let n = |k: &str| g3[k].as_u64().unwrap_or(0);
        out.push(format!(
            "storage KV tier (G3, {}{}): {} blocks read back in {} reads ({} tokens, {} across workers), {} of {} blocks looked up found; {} written, {} evicted, {} dropped; {} restores cut short\n",
            g3["scope"].as_str().unwrap_or(""),
            pool_phrase(g3),
            n("read_blocks"),
            n("read_jobs"),
            n("read_tokens"),
            n("cross_worker_read_blocks"),
            n("lookup_hits"),
            n("lookup_probes"),
            n("written_blocks"),
            n("evicted_blocks"),
            n("dropped_blocks"),
            n("bypassed_restores"),
        ));
    }
    for (role, m) in servesim["memory"].as_object().into_iter().flatten() {
        let st = &m["recurrent_state"];
        if !st.is_object() {
            continue;
        }
        #[allow(clippy::cast_precision_loss)] // State sizes are far below 2^53 bytes.
        let mib = st["bytes_per_sequence"].as_u64().unwrap_or(0) as f64 / f64::from(1u32 << 20);
        let kept = match st["kept_in"].as_str() {
            Some("kv_pool_blocks") => format!(
                "{} KV blocks a sequence{}",
                st["blocks_per_sequence"].as_u64().unwrap_or(0),
                match st["block_size_configured"].as_u64() {
                    Some(b) => format!(
                        " (vLLM raised the block size from {b} to {} tokens to hold a layer's state)",
                        servesim["deployment"]["roles"]
                            .as_array()
                            .and_then(|rs| rs.iter().find(|r| r["role"] == role.as_str()))
                            .and_then(|r| r["block_size"].as_u64())
                            .unwrap_or(0)
                    ),
                    None => String::new(),
                }
            ),
            Some("state_pool_slots") => format!(
                "{} state slots a rank hold the running requests' states and those kept for reuse ({} kept states dropped for a running request's)",
                st["slots"].as_u64().unwrap_or(0),
                st["dropped_states"].as_u64().unwrap_or(0)
            ),
            _ => format!("a state for each of {} max_batch_size slots", st["slots"].as_u64().unwrap_or(0)),
        };
        let reuse = match st["prefix_reuse"].as_str() {
            Some("block_boundary_checkpoints") => "prefix reuse ends at a checkpointed block boundary",
            Some("finished_sequence_states") => "prefix reuse ends where a finished request's state is kept",
            _ => "no prefix reuse",
        };
        out.push(format!(
            "recurrent state ({role}): {mib:.1} MiB a sequence on each GPU ({}), {kept}; {reuse}\n",
            st["ssm_dtype"].as_str().unwrap_or(""),
        ));
    }
    let ev = &servesim["kv_eviction"];
    if ev.is_object() {
        let n = |k: &str| ev[k].as_u64().unwrap_or(0);
        out.push(format!(
            "KV eviction: Belady ({} forecast of {} requests over {} blocks); first-admission prefix reuse {:.1}%, {} prefill tokens computed, {} cached tokens evicted\n",
            ev["assumption"].as_str().unwrap_or(""),
            n("forecast_requests"),
            n("forecast_blocks"),
            100.0 * ev["first_admission_prefix_cache_reused_ratio"].as_f64().unwrap_or(0.0),
            n("committed_prefill_tokens"),
            n("evicted_tokens"),
        ));
    }
    out
}

/// A hybrid model's recurrent state on one role: its size, and where the engine keeps it.
pub(crate) fn state_json(
    p: &Prepared,
    r: &RunResult,
    role: &crate::scenario::PreparedRole,
    s: &crate::scenario::StatePlan,
) -> Value {
    use servesim_core::engine::Backend;
    let kept = match p.config.engine.backend {
        Backend::Vllm => "kv_pool_blocks",
        Backend::Sglang => "state_pool_slots",
        Backend::TrtLlm => "max_batch_size_slots",
    };
    let reuse = match (role.config.kv_cache.prefix_caching, p.config.engine.backend) {
        (false, _) => "none",
        (true, Backend::Vllm) => "block_boundary_checkpoints",
        (true, _) => "finished_sequence_states",
    };
    json!({
        "bytes_per_sequence": s.bytes_per_sequence,
        "ssm_dtype": s.ssm_dtype.name(),
        "kept_in": kept,
        "blocks_per_sequence": (s.blocks_per_sequence > 0).then_some(s.blocks_per_sequence),
        "block_size_configured": s.block_size_raised_from,
        "slots": s.slots,
        "reserved_bytes": s.reserved_bytes,
        "prefix_reuse": reuse,
        // SGLang: kept states dropped to free a slot for a running request.
        "dropped_states": (p.config.engine.backend == Backend::Sglang).then(|| {
            (0..r.worker_stats.len())
                .filter(|w| p.roles.get(super::role_of_worker(p, *w)).is_some_and(|x| x.name == role.name))
                .map(|w| r.worker_stats[w].dropped_states)
                .sum::<u64>()
        }),
    })
}
