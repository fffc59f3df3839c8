//! Step-time lookups per second of the op-level timer over the measured tables:
//!
//!     cargo bench -p servesim_tests --bench step_time
//!
//! For a few deployments (dense, MoE, MLA), times a stream of varied steps — decode batches
//! over growing KV, prefill chunks on top of cached context, mixed steps — first cold (every
//! token count new to the memo tables) and then warm (the shapes a long run revisits).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_precision_loss)]

use std::rc::Rc;
use std::time::Instant;

use servesim_core::timing::{PrefillChunk, RankLoad, StepTimer};
use servesim_perf::oplevel::OpLevelTimer;
use servesim_scenario::catalog::Catalog;
use servesim_scenario::scenario::{parse_with_overrides, prepare, RoleTiming};
use servesim_tests::DataOnly;

fn timer(engine: &str) -> OpLevelTimer {
    let yaml = format!("engine:\n{engine}\n");
    let root = parse_with_overrides(&yaml, "bench", &[]).unwrap();
    let p = prepare(&root, "bench", &Catalog::builtin().unwrap(), None, &DataOnly).unwrap();
    let RoleTiming::OpLevel { setup, db } = &p.roles[0].timing else { panic!("op-level expected") };
    OpLevelTimer::new((**setup).clone(), Rc::clone(db))
}

fn steps(n: usize) -> Vec<RankLoad> {
    // A deterministic mix: 60% decode-only, 30% mixed, 10% prefill-only.
    let mut out = Vec::with_capacity(n);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = (x % 256 + 1) as u32;
        let kv = 512 + (x >> 8) % 8000;
        let chunk = (x >> 20) % 8192 + 1;
        let ctx = (x >> 34) % 16_000;
        let load = match x % 10 {
            0..=5 => {
                RankLoad { decode_requests: b, decode_kv_tokens: u64::from(b) * kv, ..RankLoad::default() }
            }
            6..=8 => RankLoad {
                prefill: vec![PrefillChunk { new_tokens: chunk as u32, context_tokens: ctx as u32 }],
                decode_requests: b,
                decode_kv_tokens: u64::from(b) * kv,
            },
            _ => RankLoad {
                prefill: vec![PrefillChunk { new_tokens: chunk as u32, context_tokens: ctx as u32 }],
                ..RankLoad::default()
            },
        };
        out.push(load);
    }
    out
}

fn main() {
    let cases = [
        ("Qwen3-32B-FP8 H200 vLLM TP1", "  model: Qwen/Qwen3-32B-FP8\n  hardware: h200_sxm\n  backend: vllm\n  workers: {aggregated: {}}"),
        (
            "Llama-3.1-70B H100 TRT-LLM TP4",
            "  model: meta-llama/Llama-3.1-70B-Instruct\n  hardware: h100_sxm\n  backend: trtllm\n  workers: {aggregated: {parallelism: {tensor: 4}}}",
        ),
        (
            "Qwen3-30B-A3B H200 vLLM TP2 EP2",
            "  model: Qwen/Qwen3-30B-A3B\n  hardware: h200_sxm\n  backend: vllm\n  workers: {aggregated: {parallelism: {tensor: 2, moe_expert: 2}}}",
        ),
        (
            "DeepSeek-V3 H200 SGLang DP8 EP8",
            "  model: deepseek-ai/DeepSeek-V3\n  hardware: h200_sxm\n  backend: sglang\n  workers: {aggregated: {parallelism: {attention_data: 8, moe_expert: 8}}}",
        ),
    ];
    let loads = steps(200_000);
    println!("{:<36} {:>14} {:>14}", "deployment", "cold steps/s", "warm steps/s");
    for (name, engine) in cases {
        let mut t = timer(engine);
        let start = Instant::now();
        let mut sum = 0u64;
        for l in &loads {
            sum = sum.wrapping_add(t.step_time(std::slice::from_ref(l)).unwrap().as_ns());
        }
        let cold = loads.len() as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        for l in &loads {
            sum = sum.wrapping_add(t.step_time(std::slice::from_ref(l)).unwrap().as_ns());
        }
        let warm = loads.len() as f64 / start.elapsed().as_secs_f64();
        println!("{name:<36} {cold:>14.0} {warm:>14.0}   (checksum {})", sum % 1000);
    }
}
