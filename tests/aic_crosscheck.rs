//! Cross-check against AIConfigurator 0.12's own figures (`shared/spec/aiconfigurator-ref.json`,
//! produced by running the incumbent on the same tables): single kernels, whole steps and
//! memory. Exact table hits must match to the last digit; interpolated figures may differ
//! because servesim interpolates with its own method (documented in `servesim_perf::tables`);
//! the bounds below say how far, and `docs/validation.md` explains the differences.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::cast_precision_loss)]

use std::rc::Rc;

use serde_json::Value;
use servesim_core::timing::{PrefillChunk, RankLoad, StepTimer};
use servesim_perf::oplevel::OpLevelTimer;
use servesim_perf::spec::GemmQuant;
use servesim_perf::tables::Source;
use servesim_scenario::catalog::Catalog;
use servesim_scenario::scenario::{parse_with_overrides, prepare, RoleTiming};
use servesim_tests::{shared_dir, DataOnly};

fn reference() -> Option<Vec<Value>> {
    let p = shared_dir()?.join("spec/aiconfigurator-ref.json");
    Some(serde_json::from_str(&std::fs::read_to_string(p).ok()?).unwrap())
}

fn entry<'a>(r: &'a [Value], id: &str) -> &'a Value {
    r.iter().find(|e| e["id"] == id).unwrap_or_else(|| panic!("no {id}"))
}

fn timer(model: &str, system: &str, backend: &str, tp: u32) -> (OpLevelTimer, servesim_scenario::Prepared) {
    let yaml = format!(
        "engine:\n  model: {model}\n  hardware: {system}\n  backend: {backend}\n  workers:\n    aggregated:\n      parallelism: {{tensor: {tp}}}\ntraffic:\n  source: {{type: synthetic, input_tokens: 128, output_tokens: 8}}\n  load: {{type: concurrency, concurrency: 1}}\n  stop: {{requests: 1}}\n"
    );
    let root = parse_with_overrides(&yaml, "crosscheck", &[]).unwrap();
    let p = prepare(&root, "crosscheck", &Catalog::builtin().unwrap(), None, &DataOnly).unwrap();
    let RoleTiming::OpLevel { setup, db } = &p.roles[0].timing else { panic!("op-level expected") };
    // Kernels as the tables give them: AIConfigurator has no engine-calibrated floor under
    // quantized GEMMs, so the comparison leaves servesim's out.
    let mut setup = (**setup).clone();
    setup.constants.quantized_gemm_floor = None;
    (OpLevelTimer::new(setup, Rc::clone(db)), p)
}

fn ms(x: (f64, Source)) -> (f64, Source) {
    (x.0 * 1e3, x.1)
}

fn check(name: &str, ours: f64, theirs: f64, tol: f64, rows: &mut Vec<String>) {
    let err = ours / theirs - 1.0;
    let flag = if err.abs() <= tol { "" } else { "  <-- outside the bound" };
    rows.push(format!(
        "{name:<52} ours {ours:>10.4}  AIC {theirs:>10.4}  {:>+7.1}% (bound {:.0}%){flag}",
        err * 100.0,
        tol * 100.0
    ));
}

#[test]
fn kernels_steps_and_memory_agree_with_aiconfigurator() {
    let Some(r) = reference() else {
        eprintln!("skipped: ../shared/spec/aiconfigurator-ref.json not found");
        return;
    };
    let mut rows = Vec::new();
    let lat = |id: &str| entry(&r, id)["predicted_latency_ms"].as_f64().unwrap();

    // GEMMs (TensorRT-LLM tables on H200).
    let (t, _) = timer("Qwen/Qwen3-32B-FP8", "h200_sxm", "trtllm", 1);
    let (v, src) = ms(t.gemm(4096, 5120, 5120, GemmQuant::Fp8Block));
    assert_eq!(src, Source::Measured);
    // The reference prints the raw table row in full in its description.
    let desc = entry(&r, "K_GEMM_m=4096_n=5120_k=5120_fp8_block")["description"].as_str().unwrap();
    let raw: f64 = desc.split("raw table row: ").nth(1).unwrap().trim_end_matches(')').parse().unwrap();
    assert_eq!(v.to_bits(), raw.to_bits(), "an exact hit is the measured row, verbatim");
    check(
        "GEMM 4096x5120x5120 fp8_block (exact row)",
        v,
        lat("K_GEMM_m=4096_n=5120_k=5120_fp8_block"),
        1e-6,
        &mut rows,
    );
    let (v, _) = ms(t.gemm(8192, 8192, 8192, GemmQuant::Bf16));
    check("GEMM 8192^3 bf16 (exact row)", v, lat("K_GEMM_m=8192_n=8192_k=8192_bfloat16"), 1e-6, &mut rows);
    let (v, _) = ms(t.gemm(4000, 5120, 5120, GemmQuant::Fp8Block));
    let _ = raw;
    check(
        "GEMM 4000x5120x5120 fp8_block (m between rows)",
        v,
        lat("K_GEMM_m=4000_n=5120_k=5120_fp8_block"),
        0.03,
        &mut rows,
    );
    let (v, _) = ms(t.gemm(64, 12800, 5120, GemmQuant::Fp8Block));
    check(
        "GEMM 64x12800x5120 fp8_block (n between sites)",
        v,
        lat("K_GEMM_m=64_n=12800_k=5120_fp8_block"),
        0.05,
        &mut rows,
    );

    // Attention: 64 query heads, 8 KV heads, head size 128 = Qwen3-32B at TP1.
    let causal = |b: f64, s: f64| b * s * (s + 1.0) / 2.0;
    let (v, _) = ms(t.context_attention(1, causal(1.0, 4096.0)));
    check(
        "context attention b1 isl4096 fp8",
        v,
        lat("K_context_attention_b=1_isl=4096_heads=64_kv=8_d=128_fp8kv_fp8"),
        0.05,
        &mut rows,
    );
    let (v, _) = ms(t.context_attention(4, causal(4.0, 2000.0)));
    check(
        "context attention b4 isl2000 fp8",
        v,
        lat("K_context_attention_b=4_isl=2000_heads=64_kv=8_d=128_fp8kv_fp8"),
        0.05,
        &mut rows,
    );
    let (v, _) = ms(t.generation_attention(64, 4096.0));
    check(
        "generation attention b64 kv4096",
        v,
        lat("K_generation_attention_b=64_kv_len(s)=4096_heads=64_kv=8_d=128"),
        0.05,
        &mut rows,
    );
    let (v, _) = ms(t.generation_attention(8, 1025.0));
    check(
        "generation attention b8 kv1025",
        v,
        lat("K_generation_attention_b=8_kv_len(s)=1025_heads=64_kv=8_d=128_"),
        0.05,
        &mut rows,
    );

    // All-reduce (the engine's custom kernel) and the analytic element-wise rule.
    let (t4, _) = timer("Qwen/Qwen3-32B-FP8", "h200_sxm", "trtllm", 4);
    let (v, _) = ms(t4.allreduce(4000 * 5120, 4, true));
    check(
        "all-reduce 4000x5120 bf16 TP4",
        v,
        lat("K_custom_allreduce_tokens=4000_hidden=5120_bf16_tp=4"),
        0.05,
        &mut rows,
    );
    let (v, _) = ms(t4.allreduce(64 * 5120, 8, true));
    check(
        "all-reduce 64x5120 bf16 TP8",
        v,
        lat("K_custom_allreduce_tokens=64_hidden=5120_bf16_tp=8"),
        0.05,
        &mut rows,
    );
    let v = t4.elementwise(4000.0 * (10240.0 + 10240.0) * 2.0) * 1e3;
    check(
        "element-wise add+norm 4000x10240",
        v,
        lat("K_elementwise_add_norm_tokens=4000_dim_in=dim_out=10240_scale_"),
        1e-5,
        &mut rows,
    );

    // Whole steps of Qwen3-32B-FP8 on 4 H200s (TensorRT-LLM), no engine overhead on either side.
    let (mut t4, _) = timer("Qwen/Qwen3-32B-FP8", "h200_sxm", "trtllm", 4);
    let step = |t: &mut OpLevelTimer, load: RankLoad| t.step_time(&[load]).unwrap().as_ms_f64();
    // Kernels only: AIConfigurator's step figures carry no engine overhead or prefill scaling.
    let raw = servesim_perf::oplevel::OpConstants::default();
    t4.set_constants(raw);
    let overhead = 0.0;
    let prefill = RankLoad {
        prefill: vec![PrefillChunk { new_tokens: 4000, context_tokens: 0 }],
        ..RankLoad::default()
    };
    let v = step(&mut t4, prefill) - overhead;
    check("step: prefill 4000 tokens (TP4)", v, lat("STEP_prefill_bs1_isl4000"), 0.08, &mut rows);
    let decode = RankLoad { decode_requests: 16, decode_kv_tokens: 68_000, ..RankLoad::default() };
    let v = step(&mut t4, decode) - overhead;
    check(
        "step: decode 16 requests, 68,000 KV tokens (TP4)",
        v,
        lat("FPM_decode_16req_68000kv"),
        0.08,
        &mut rows,
    );
    let mixed = RankLoad {
        prefill: vec![PrefillChunk { new_tokens: 4000, context_tokens: 0 }],
        decode_requests: 15,
        decode_kv_tokens: 63_750,
    };
    let v = step(&mut t4, mixed) - overhead;
    check("step: 4000 prefill + 15 decode (TP4)", v, lat("FPM_mixed_4000_plus_15dec"), 0.08, &mut rows);

    // Memory: weights per GPU (AIConfigurator's A1 breakdown: 7.99 GiB at TP4).
    let (_, p) = timer("Qwen/Qwen3-32B-FP8", "h200_sxm", "trtllm", 4);
    let weights_gib = p.roles[0].memory.weights_bytes as f64 / (1u64 << 30) as f64;
    check("memory: Qwen3-32B-FP8 weights per GPU at TP4 (GiB)", weights_gib, 7.99, 0.02, &mut rows);
    let nccl_gib = p.roles[0].memory.comm_overhead_bytes as f64 / (1u64 << 30) as f64;
    check("memory: NCCL buffers at TP4 (GiB)", nccl_gib, 0.383, 0.01, &mut rows);

    println!("{}", rows.join("\n"));
    assert!(!rows.iter().any(|r| r.contains("outside the bound")), "see the table above");
}
