//! The op-level model's predictions written as an FPM cell (`servesim data export-fpm`).
//!
//! The grid is what AISimulate's collector would measure for the deployment, but predicted:
//! prefill steps at `(batch, new tokens, cached tokens)` and decode steps at `(batch, KV
//! tokens)`, per attention-DP rank with the load balanced over ranks. Axes hold every power
//! of two and 1.5 times it (no step more than doubles) from their smallest meaningful value to
//! the deployment's limit, and include the limits themselves and both
//! sides of the CUDA-graph capture limit, so lookups between grid points interpolate over
//! spans where the step time is close to linear. The file serves as a fast cache of the
//! op-level model, a template for measured FPM data, and a test of the FPM reader.

use servesim_core::timing::{PrefillChunk, RankLoad, StepTimer};
use servesim_data::fpm::Cell;
use servesim_perf::fpm::{DecodePoint, FpmCell, PrefillPoint};
use servesim_perf::oplevel::OpLevelTimer;
use servesim_perf::spec::Dtype;

use crate::perfdata;
use crate::scenario::{Prepared, RoleTiming, ScenarioError};

/// Values from `lo` to `hi`: every power of two and 1.5 times it, plus `extra` points inside
/// the range.
#[must_use]
pub fn lattice(lo: u64, hi: u64, extra: &[u64]) -> Vec<u64> {
    let mut out = vec![lo, hi];
    let mut p: u64 = 1;
    while p <= hi {
        for v in [p, p + p / 2] {
            if v > lo && v < hi {
                out.push(v);
            }
        }
        p = p.saturating_mul(2);
    }
    out.extend(extra.iter().copied().filter(|v| (lo..=hi).contains(v)));
    out.sort_unstable();
    out.dedup();
    out
}

fn run_err(message: String) -> ScenarioError {
    ScenarioError::Run { message }
}

/// Predicts the FPM cell of worker role `role` (index into `prepared.roles`).
///
/// # Errors
/// When the role is not timed by the op-level model or a step cannot be timed.
pub fn cell(prepared: &Prepared, role: usize) -> Result<Cell, ScenarioError> {
    let Some(r) = prepared.roles.get(role) else {
        return Err(run_err(format!("no worker role #{role}")));
    };
    let RoleTiming::OpLevel { setup, db } = &r.timing else {
        return Err(run_err(format!("the {} workers are not timed by the op-level model", r.name)));
    };
    let mut timer = OpLevelTimer::new((**setup).clone(), db.clone());
    let dp = r.parallelism.attention_data as usize;
    let max_tokens = u64::from(r.max_batched_tokens.max(1));
    let max_seqs = u64::from(r.max_sequences.max(1));
    let kv_tokens = r.kv_tokens_per_rank();
    let graph = u64::from(setup.graphs.max_tokens);
    let mut time = |load: RankLoad| -> Result<f64, ScenarioError> {
        let ranks = vec![load; dp];
        timer.step_time(&ranks).map(|d| d.as_secs_f64() * 1e3).map_err(|e| run_err(e.message))
    };
    let mut data = FpmCell::default();
    // Prefill: up to the step budget of new tokens, chunks up to the sequence limit.
    let batches = lattice(1, max_seqs.min(max_tokens), &[2, 3, 4]);
    let news = lattice(1, max_tokens, &[graph, graph + 1]);
    let mut cached = lattice(1, kv_tokens.max(1), &[]);
    cached.insert(0, 0);
    for &b in &batches {
        for &t in &news {
            for &k in &cached {
                let chunks = split(t, b).into_iter().zip(split(k, b)).map(|(n, c)| PrefillChunk {
                    new_tokens: u32::try_from(n).unwrap_or(u32::MAX),
                    context_tokens: u32::try_from(c).unwrap_or(u32::MAX),
                });
                let prefill: Vec<PrefillChunk> = chunks.filter(|c| c.new_tokens > 0).collect();
                if prefill.len() as u64 != b {
                    // Fewer new tokens than requests: not a step an engine can run.
                    continue;
                }
                let ms = time(RankLoad { prefill, decode_requests: 0, decode_kv_tokens: 0 })?;
                let batch = u32::try_from(b).unwrap_or(u32::MAX);
                data.prefill.push(PrefillPoint { batch, prefill_tokens: t, kv_tokens: k, latency_ms: ms });
            }
        }
    }
    // Decode: up to the sequence limit, on both sides of the graph capture limit.
    let decode_batches = lattice(1, max_seqs, &[2, 3, 4, 5, 6, 7, 8, graph, graph + 1]);
    let kvs = lattice(1, kv_tokens.max(1), &[]);
    for &b in &decode_batches {
        for &k in &kvs {
            let requests = u32::try_from(b).unwrap_or(u32::MAX);
            let ms = time(RankLoad { prefill: Vec::new(), decode_requests: requests, decode_kv_tokens: k })?;
            data.decode.push(DecodePoint { batch: requests, kv_tokens: k, latency_ms: ms });
        }
    }
    let par = r.parallelism;
    let backend = prepared.config.engine.backend.name();
    let version = prepared
        .config
        .engine
        .backend_version
        .clone()
        .unwrap_or_else(|| perfdata::default_version(prepared.config.engine.backend).to_string());
    let dtype = |d: Dtype| if d == Dtype::Bf16 { "bfloat16" } else { d.name() };
    let model = prepared.model.id.clone();
    let base = model.rsplit('/').next().unwrap_or(&model).to_ascii_lowercase();
    let cell_id = format!(
        "servesim-{base}-{backend}-{}-tp{}-dp{}-ep{}-{}",
        r.hardware.id, par.tensor, par.attention_data, par.moe_expert, r.name
    );
    let identity: Vec<String> = [
        setup.gemm.table_name().to_string(),
        setup.moe.table_name().to_string(),
        if setup.attention_fp8 && setup.kv == Dtype::Fp8 { "fp8".into() } else { "bfloat16".into() },
        "half".into(),
        dtype(setup.kv).to_string(),
        par.tensor.to_string(),
        par.pipeline.to_string(),
        par.attention_data.to_string(),
        par.moe_tensor.to_string(),
        par.moe_expert.to_string(),
        "1".into(),
        "auto".into(),
        "auto".into(),
        "False".into(),
        "False".into(),
    ]
    .into();
    Ok(Cell {
        cell_id,
        model_path: model,
        system: r.hardware.id.clone(),
        backend: backend.into(),
        backend_version: version,
        identity,
        data,
    })
}

/// `total` split over `n` parts as evenly as integers allow (balanced_v1 partition).
fn split(total: u64, n: u64) -> Vec<u64> {
    let n = n.max(1);
    (0..n).map(|i| total / n + u64::from(i < total % n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lattices_cover_their_range_with_bounded_steps() {
        let l = lattice(1, 8192, &[512, 513]);
        assert_eq!(l.first(), Some(&1));
        assert_eq!(l.last(), Some(&8192));
        assert!(l.contains(&512) && l.contains(&513) && l.contains(&768));
        for w in l.windows(2) {
            assert!(w[1] > w[0]);
            assert!(w[1] <= w[0] * 2, "{w:?}");
        }
        assert_eq!(split(10, 3), vec![4, 3, 3]);
    }
}
