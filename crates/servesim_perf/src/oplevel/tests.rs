use super::*;
use servesim_core::timing::StepTimer;
use servesim_core::units::{SimDur, SimTime};

#[test]
fn op_kinds_resolve_to_themselves() {
    for (i, k) in OP_KINDS.iter().enumerate() {
        assert_eq!(OpLevelTimer::kind(k), i, "{k}");
    }
    assert_eq!(OpLevelTimer::kind("no such kind"), 0);
}
use crate::memory::Parallelism;
use crate::spec::{Dtype, Hardware, ModelArch, Moe, MoeQuant};
use crate::tables::Row;
use alloc::string::ToString;
use alloc::vec;
use servesim_core::timing::PrefillChunk;

fn model() -> ModelArch {
    ModelArch {
        id: "test/dense".to_string(),
        hidden_size: 4096,
        num_layers: 32,
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        intermediate_size: 14336,
        vocab_size: 128_256,
        tie_word_embeddings: false,
        max_position_embeddings: 131_072,
        moe: None,
        mla: None,
        sliding_window: None,
        linear_attention: None,
        sparse_attention_topk: None,
        attn_output_gate: false,
        gemm_quant: GemmQuant::Bf16,
        moe_quant: MoeQuant::Bf16,
        weight_dtype: Dtype::Bf16,
        default_kv_dtype: Dtype::Bf16,
    }
}

fn hw() -> Hardware {
    crate::tests::h200()
}

fn setup(tp: u32) -> OpLevelSetup {
    OpLevelSetup {
        model: model(),
        hardware: hw(),
        parallelism: Parallelism { tensor: tp, ..Parallelism::SINGLE },
        gemm: GemmQuant::Bf16,
        moe: MoeQuant::Bf16,
        kv: Dtype::Bf16,
        attention_fp8: false,
        graphs: GraphPolicy::vllm(256),
        constants: OpConstants::default(),
        draft_layers: 0,
    }
}

/// A GEMM table whose latency is 1.25 × its bf16 roofline on a coarse grid.
fn gemm_db() -> PerfDb {
    let mut rows: Vec<Row> = Vec::new();
    for m in [1u64, 16, 256, 4096, 16384] {
        for n in [256u64, 1024, 4096, 16384, 65536, 131_072] {
            for k in [1024u64, 4096, 16384] {
                #[allow(clippy::cast_precision_loss)]
                let (mf, nf, kf) = (m as f64, n as f64, k as f64);
                let sol = (2.0 * mf * nf * kf / 989e12).max((mf * kf + nf * kf + mf * nf) * 2.0 / 4.8e12);
                rows.push((vec!["bfloat16".to_string()], vec![m, n, k], sol * 1.25 * 1e3));
            }
        }
    }
    let mut db = PerfDb::new("h200_sxm", "vllm", "test", "unit test");
    db.insert(Rc::new(Table::from_rows(Family::Gemm, rows).unwrap()));
    db
}

/// `gemm_db` plus a generation-attention table on a coarse grid (bandwidth-bound, with
/// a per-batch offset so the blend is not linear in every axis).
fn decode_db() -> PerfDb {
    let mut db = gemm_db();
    let mut rows: Vec<Row> = Vec::new();
    for b in [1u64, 4, 16, 64, 256] {
        for kv in [1u64, 128, 1024, 4096, 16384] {
            for h in [8u64, 32, 64] {
                for kh in [1u64, 8] {
                    #[allow(clippy::cast_precision_loss)]
                    let ms = (b * kv * kh * 128 * 4) as f64 / 4.8e9 + 0.003 + 0.0001 * (b as f64).sqrt();
                    rows.push((
                        vec!["bfloat16".into(), "bfloat16".into(), "128".into(), "0".into()],
                        vec![b, kv, h, kh],
                        ms,
                    ));
                }
            }
        }
    }
    db.insert(Rc::new(Table::from_rows(Family::GenerationAttention, rows).unwrap()));
    db.insert(Rc::new(Table::from_rows(Family::Gdn, gdn_rows("5120")).unwrap()));
    db
}

/// A hybrid model after Qwen3.5-27B: 48 of its 64 layers Gated DeltaNet.
fn hybrid(tp: u32) -> OpLevelSetup {
    let mut s = setup(tp);
    s.model.hidden_size = 5120;
    s.model.num_layers = 64;
    s.model.linear_attention = Some(crate::spec::LinearAttention {
        layers: 48,
        key_heads: 16,
        key_head_dim: 128,
        value_heads: 48,
        value_head_dim: 128,
        conv_kernel: 4,
        ssm_dtype: Some(crate::spec::StateDtype::Fp32),
    });
    s
}

/// The four GDN kernels at 8 key and 24 value heads per GPU (the hybrid model at TP2), with
/// hidden size `hidden`: the prompt kernels on a batch × length grid, the decode kernels by
/// batch, each with its own cost per token and per sequence.
fn gdn_rows(hidden: &str) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    for (i, kernel) in Family::GDN_KERNELS.iter().enumerate() {
        let key: Vec<String> =
            [kernel, hidden, "8", "128", "24", "128", "4"].iter().map(|k| (*k).to_string()).collect();
        let seqs: &[u64] = if i < 2 { &[1, 64, 1024, 4096] } else { &[1] };
        for b in [1u64, 4, 16, 64] {
            for &len in seqs {
                #[allow(clippy::cast_precision_loss)]
                let ms = 0.002 * (i + 1) as f64 + 1e-5 * (b * len) as f64 + 3e-4 * b as f64;
                rows.push((key.clone(), vec![b, len], ms));
            }
        }
    }
    rows
}

/// A synchronously scheduling engine's step also waits for its host work: the per-step
/// cost plus the per-sequence cost of the busiest attention-DP rank (prompts count as
/// sequences), on top of the same GPU time, in place of the step overhead an asynchronous
/// scheduler leaves.
#[test]
fn synchronous_host_work_adds_to_every_step() {
    let mut dp = setup(2);
    dp.parallelism.attention_data = 2;
    dp.constants.step_overhead_s = 0.000_7;
    let mut sync = dp.clone();
    sync.constants = sync.constants.synchronous();
    let loads = [
        RankLoad {
            prefill: vec![PrefillChunk { new_tokens: 300, context_tokens: 0 }],
            decode_requests: 6,
            decode_kv_tokens: 6 * 800,
        },
        RankLoad { prefill: vec![], decode_requests: 30, decode_kv_tokens: 30 * 400 },
    ];
    let db = Rc::new(decode_db());
    let gpu = OpLevelTimer::new(dp, db.clone()).step_seconds(&loads);
    let with_host = OpLevelTimer::new(sync, db).step_seconds(&loads);
    // The host time takes the place of the asynchronous scheduler's exposed overhead.
    let want = SYNC_HOST_S_PER_STEP + 30.0 * SYNC_HOST_S_PER_SEQUENCE - 0.000_7;
    assert!((with_host - gpu - want).abs() < 1e-12, "{with_host} - {gpu} != {want}");
}

/// The run path equals one `step_time` per step: step ends bit for bit and the lookups
/// counted, for one rank, a sliding-window model, attention-DP ranks (one idle) and a
/// step overhead; and it stops at `max_end` as the step-by-step path does.
#[test]
fn decode_runs_equal_stepping_one_step_at_a_time() {
    let decode = |n: u32, kv: u64| RankLoad { prefill: vec![], decode_requests: n, decode_kv_tokens: kv };
    let mut sliding = setup(1);
    sliding.model.sliding_window = Some((128, 16));
    let mut dp = setup(2);
    dp.parallelism.attention_data = 2;
    dp.constants.step_overhead_s = 0.000_7;
    let mut sync = dp.clone();
    sync.constants.host_s_per_step = SYNC_HOST_S_PER_STEP;
    sync.constants.host_s_per_sequence = SYNC_HOST_S_PER_SEQUENCE;
    let cases: Vec<(OpLevelSetup, Vec<RankLoad>)> = vec![
        (setup(1), vec![decode(37, 37 * 900)]),
        (sync, vec![decode(9, 9 * 1500), decode(40, 40 * 300)]),
        (setup(1), vec![decode(3, 5000)]),
        (sliding, vec![decode(20, 20 * 100)]),
        (dp.clone(), vec![decode(9, 9 * 1500), decode(40, 40 * 300)]),
        (dp, vec![RankLoad::default(), decode(5, 5 * 2000)]),
        (hybrid(2), vec![decode(24, 24 * 1000)]),
        (hybrid(1), vec![decode(10, 10 * 700)]),
    ];
    for (i, (s, loads)) in cases.into_iter().enumerate() {
        let db = Rc::new(decode_db());
        let mut bulk = OpLevelTimer::new(s.clone(), db.clone());
        let mut one = OpLevelTimer::new(s, db);
        let start = SimTime::ZERO + bulk.step_time(&loads).unwrap();
        one.step_time(&loads).unwrap();
        let (mut a, mut b) = (vec![start], vec![start]);
        bulk.extend_decode_run(&loads, &mut a, 3000, SimTime::MAX).unwrap();
        servesim_core::timing::extend_decode_run_stepwise(&mut one, &loads, &mut b, 3000, SimTime::MAX)
            .unwrap();
        assert_eq!(a.len(), 3000, "case {i}");
        assert_eq!(a, b, "case {i}: step ends");
        assert_eq!(bulk.provenance_by_kind(), one.provenance_by_kind(), "case {i}: lookups");
        // A bound in the middle of the run: both stop before the same step.
        let bound = a[1234] + SimDur::from_ns(1);
        let (mut a2, mut b2) = (vec![start], vec![start]);
        bulk.extend_decode_run(&loads, &mut a2, 3000, bound).unwrap();
        servesim_core::timing::extend_decode_run_stepwise(&mut one, &loads, &mut b2, 3000, bound).unwrap();
        assert_eq!(a2.len(), 1235, "case {i}");
        assert_eq!((a2, bulk.provenance_by_kind()), (b2, one.provenance_by_kind()), "case {i}: bounded");
    }
}

/// A weight-bound fp8 GEMM whose table carries a fixed 10 µs per call is floored at the
/// bf16 kernel's relative efficiency; compute-bound shapes and timers without the floor
/// keep the fp8 table.
#[test]
fn quantized_gemm_floor_applies_only_where_weights_bound_it() {
    let mut db = gemm_db();
    // One GEMM table holds both slices: bf16 (as `gemm_db`) and fp8.
    let mut rows: Vec<Row> = db
        .table(Family::Gemm)
        .unwrap()
        .slices()
        .flat_map(|(key, g)| {
            let axes = g.axes().to_vec();
            let mut out = Vec::new();
            for &m in &axes[0] {
                for &n in &axes[1] {
                    for &k in &axes[2] {
                        if let Some(v) = g.exact(&[m, n, k]) {
                            out.push((key.clone(), vec![m, n, k], v));
                        }
                    }
                }
            }
            out
        })
        .collect();
    let sol_q =
        |m: f64, n: f64, k: f64| (2.0 * m * n * k / 1978e12).max((m * k + n * k + 2.0 * m * n) / 4.8e12);
    for m in [1u64, 16, 256, 4096, 16384] {
        for n in [256u64, 1024, 4096, 16384, 65536, 131_072] {
            for k in [1024u64, 4096, 16384] {
                #[allow(clippy::cast_precision_loss)]
                let sol = sol_q(m as f64, n as f64, k as f64);
                rows.push((vec!["fp8".to_string()], vec![m, n, k], (sol * 1.25 + 10e-6) * 1e3));
            }
        }
    }
    db.insert(Rc::new(Table::from_rows(Family::Gemm, rows).unwrap()));
    let db = Rc::new(db);
    let mut s = setup(1);
    let plain = OpLevelTimer::new(s.clone(), db.clone());
    s.constants.quantized_gemm_floor = Some(0.8);
    let floored = OpLevelTimer::new(s, db);
    // Weight-bound: 1.25 x the fp8 speed of light (as the bf16 kernel) / 0.8.
    let (t, src) = floored.gemm(16, 4096, 4096, GemmQuant::Fp8);
    let want = 1.25 * sol_q(16.0, 4096.0, 4096.0) / 0.8;
    assert!((t / want - 1.0).abs() < 1e-9, "{t} vs {want}");
    assert_eq!(src, Source::Interpolated);
    // Without the floor the fp8 table (1.25 x its speed of light + 10 us) is slower than
    // bf16 here, so the bf16 bound applies: 1.25 x the bf16 speed of light.
    let (raw, src) = plain.gemm(16, 4096, 4096, GemmQuant::Fp8);
    assert_eq!(src, Source::Interpolated);
    assert!((raw / (2.0 * want * 0.8) - 1.0).abs() < 1e-2, "{raw} vs {want}");
    assert!(raw > t + 2e-6, "{raw} vs {t}");
    // Compute-bound: the fp8 table as measured.
    assert_eq!(
        floored.gemm(4096, 16384, 16384, GemmQuant::Fp8),
        plain.gemm(4096, 16384, 16384, GemmQuant::Fp8)
    );
    // bf16 is never floored.
    assert_eq!(floored.gemm(16, 4096, 4096, GemmQuant::Bf16), plain.gemm(16, 4096, 4096, GemmQuant::Bf16));
}

/// A quantized kernel the table times slower than bf16 at the same shape, or than the other
/// fp8 scaling where weights bind (a fallback path, as in AIConfigurator's vLLM
/// `fp8_block` GEMM tables), gets that faster time, GEMM and MoE alike; otherwise its own
/// table is used as measured.
#[test]
fn quantized_kernels_are_never_timed_slower_than_bf16() {
    let mut db = gemm_db();
    let mut rows: Vec<Row> = Vec::new();
    for (key, g) in db.table(Family::Gemm).unwrap().slices() {
        let axes = g.axes().to_vec();
        for &m in &axes[0] {
            for &n in &axes[1] {
                for &k in &axes[2] {
                    let v = g.exact(&[m, n, k]).unwrap();
                    rows.push((key.clone(), vec![m, n, k], v));
                    // fp8_block: a flat 0.17 ms up to m = 256, 0.8 x bf16 above; per-tensor
                    // fp8: half of bf16 everywhere.
                    let q = if m <= 256 { 0.17 } else { v * 0.8 };
                    rows.push((vec!["fp8_block".to_string()], vec![m, n, k], q));
                    rows.push((vec!["fp8".to_string()], vec![m, n, k], v / 2.0));
                    // nvfp4: 0.9 x bf16, slower than fp8 although it moves fewer bytes.
                    rows.push((vec!["nvfp4".to_string()], vec![m, n, k], v * 0.9));
                }
            }
        }
    }
    db.insert(Rc::new(Table::from_rows(Family::Gemm, rows).unwrap()));
    let mut moe_rows: Vec<Row> = Vec::new();
    for t in [1u64, 16, 256, 4096] {
        #[allow(clippy::cast_precision_loss)]
        let bf16 = 0.02 + 1e-4 * t as f64;
        let key = |q: &str| {
            [q, "power_law_1.01", "4096", "1536", "8", "128", "1", "1"].map(str::to_string).to_vec()
        };
        moe_rows.push((key("bfloat16"), vec![t], bf16));
        // Per-tensor fp8: 4x bf16 at small token counts, a flat 0.1 ms at 256 and a third of
        // bf16 at 4096 (slow where weights bind, yet never faster with fewer tokens).
        let fp8 = match t {
            256 => 0.1,
            4096 => bf16 / 3.0,
            _ => 4.0 * bf16,
        };
        moe_rows.push((key("fp8"), vec![t], fp8));
    }
    db.insert(Rc::new(Table::from_rows(Family::Moe, moe_rows).unwrap()));
    let db = Rc::new(db);
    let t = OpLevelTimer::new(setup(1), db.clone());
    // Weight-bound: per-tensor fp8 moves the same bytes, so its time bounds fp8_block's.
    let bf16 = t.gemm(16, 4096, 4096, GemmQuant::Bf16);
    assert_eq!(bf16.1, Source::Measured);
    assert_eq!(t.gemm(16, 4096, 4096, GemmQuant::Fp8Block), (bf16.0 / 2.0, Source::Interpolated));
    // Compute-bound: block scaling is real work, so only bf16 bounds it (not binding here).
    let (big, src) = t.gemm(4096, 4096, 4096, GemmQuant::Fp8Block);
    assert_eq!(src, Source::Measured);
    assert!((big / t.gemm(4096, 4096, 4096, GemmQuant::Bf16).0 - 0.8).abs() < 1e-12, "{big}");
    // nvfp4 moves fewer bytes than either fp8: where weights bind, per-tensor fp8 bounds it;
    // where compute binds, its own table stands.
    assert_eq!(t.gemm(16, 4096, 4096, GemmQuant::Nvfp4), (bf16.0 / 2.0, Source::Interpolated));
    let (big, src) = t.gemm(4096, 4096, 4096, GemmQuant::Nvfp4);
    assert_eq!(src, Source::Measured);
    assert!((big / t.gemm(4096, 4096, 4096, GemmQuant::Bf16).0 - 0.9).abs() < 1e-12, "{big}");

    let mut s = setup(1);
    s.model.moe = Some(Moe {
        num_experts: 128,
        experts_per_token: 8,
        expert_intermediate_size: 1536,
        shared_intermediate_size: 0,
        dense_layers: 0,
    });
    let bf16 = OpLevelTimer::new(s.clone(), db.clone()).moe_experts(16);
    assert_eq!(bf16, (0.0216 / 1e3, Source::Measured));
    s.moe = MoeQuant::Fp8;
    let fp8 = OpLevelTimer::new(s, db);
    assert_eq!(fp8.moe_experts(16), (bf16.0, Source::Interpolated));
    let (many, src) = fp8.moe_experts(4096);
    assert_eq!(src, Source::Measured);
    assert!((many * 1e3 - (0.02 + 0.4096) / 3.0).abs() < 1e-12, "{many}");
}

/// `MoeKernel::MinLatency` times the experts from the `…:min_latency` slices (TensorRT-LLM's
/// TRTLLM-gen kernels) where the table has them, and from the default lane, counted as
/// extrapolated, where it does not; the default choice never reads them.
#[test]
fn the_min_latency_moe_kernels_have_their_own_slices() {
    let key =
        |q: &str| [q, "power_law_1.01", "4096", "1536", "8", "128", "1", "1"].map(str::to_string).to_vec();
    let mut rows: Vec<Row> = Vec::new();
    for t in [1u64, 16, 256, 4096] {
        #[allow(clippy::cast_precision_loss)]
        let cutlass = 0.05 + 1e-4 * t as f64;
        rows.push((key("nvfp4"), vec![t], cutlass));
        // TRTLLM-gen: half the default lane's time at every size.
        rows.push((key(&alloc::format!("nvfp4{}", MoeKernel::MIN_LATENCY_SUFFIX)), vec![t], cutlass / 2.0));
        rows.push((key("fp8"), vec![t], cutlass));
    }
    let (db, mut s) = moe_fixture(rows, 1, 8, 1536);
    s.moe = MoeQuant::Nvfp4;
    let default = OpLevelTimer::new(s.clone(), db.clone()).moe_experts(16);
    assert_eq!(default, (0.0516 / 1e3, Source::Measured));
    s.constants.moe_kernel = MoeKernel::MinLatency;
    let fast = OpLevelTimer::new(s.clone(), db.clone());
    assert_eq!(fast.moe_experts(16), (0.0258 / 1e3, Source::Measured));
    let (mid, src) = fast.moe_experts(100);
    assert_eq!(src, Source::Interpolated);
    assert!(mid < OpLevelTimer::new(setup_with_moe(&s, MoeKernel::Default), db.clone()).moe_experts(100).0);
    // No TRTLLM-gen slice for fp8: the default lane stands in, and says so.
    s.moe = MoeQuant::Fp8;
    assert_eq!(OpLevelTimer::new(s, db).moe_experts(16), (0.0516 / 1e3, Source::Extrapolated));
    assert_eq!(MoeKernel::from_name("min_latency"), Some(MoeKernel::MinLatency));
    assert_eq!(MoeKernel::from_name("trtllm"), None);
    assert!(MoeKernel::NAMES.iter().all(|n| MoeKernel::from_name(n).is_some_and(|k| k.name() == *n)));
}

/// A MoE table of `rows` and a `gpus`-GPU setup whose model has 128 experts of `inter`,
/// `topk` a token.
fn moe_fixture(rows: Vec<Row>, gpus: u32, topk: u32, inter: u64) -> (Rc<PerfDb>, OpLevelSetup) {
    let mut db = PerfDb::default();
    db.insert(Rc::new(Table::from_rows(Family::Moe, rows).unwrap()));
    let mut s = setup(gpus);
    s.model.moe = Some(Moe {
        num_experts: 128,
        experts_per_token: topk,
        expert_intermediate_size: inter,
        shared_intermediate_size: 0,
        dense_layers: 0,
    });
    (Rc::new(db), s)
}

fn setup_with_moe(s: &OpLevelSetup, k: MoeKernel) -> OpLevelSetup {
    let mut s = s.clone();
    s.constants.moe_kernel = k;
    s
}

#[test]
fn gemm_exact_hits_are_measured_and_off_grid_is_interpolated() {
    let t = OpLevelTimer::new(setup(1), Rc::new(gemm_db()));
    let (s, src) = t.gemm(4096, 4096, 4096, GemmQuant::Bf16);
    assert_eq!(src, Source::Measured);
    let sol: f64 = 2.0 * 4096f64.powi(3) / 989e12;
    assert!((s - sol * 1.25).abs() < 1e-12, "{s}");
    let (_, src) = t.gemm(3000, 6144, 4096, GemmQuant::Bf16);
    assert_eq!(src, Source::Interpolated);
    // No fp8 table: roofline.
    let (_, src) = t.gemm(64, 4096, 4096, GemmQuant::Fp8);
    assert_eq!(src, Source::Roofline);
}

#[test]
fn more_tokens_and_longer_contexts_are_never_faster() {
    let mut t = OpLevelTimer::new(setup(1), Rc::new(gemm_db()));
    let mut last = SimDur::ZERO;
    for n in [1u32, 7, 64, 500, 2048, 8192] {
        let load = RankLoad {
            prefill: vec![PrefillChunk { new_tokens: n, context_tokens: 0 }],
            ..RankLoad::default()
        };
        let d = t.step_time(&[load]).unwrap();
        assert!(d >= last, "{n}: {d:?} < {last:?}");
        last = d;
    }
    let mut last = SimDur::ZERO;
    for kv in [100u64, 1000, 10_000, 100_000] {
        let load = RankLoad { decode_requests: 16, decode_kv_tokens: 16 * kv, ..RankLoad::default() };
        let d = t.step_time(&[load]).unwrap();
        assert!(d >= last);
        last = d;
    }
    // A chunk on top of cached context costs more than the same chunk alone.
    let alone = RankLoad {
        prefill: vec![PrefillChunk { new_tokens: 512, context_tokens: 0 }],
        ..RankLoad::default()
    };
    let cached = RankLoad {
        prefill: vec![PrefillChunk { new_tokens: 512, context_tokens: 8192 }],
        ..RankLoad::default()
    };
    assert!(t.step_time(&[cached]).unwrap() > t.step_time(&[alone]).unwrap());
}

#[test]
fn tensor_parallelism_shrinks_per_gpu_work_and_adds_allreduce() {
    let load = RankLoad {
        prefill: vec![PrefillChunk { new_tokens: 4096, context_tokens: 0 }],
        ..RankLoad::default()
    };
    let t1 = OpLevelTimer::new(setup(1), Rc::new(gemm_db())).step_time(core::slice::from_ref(&load)).unwrap();
    let t4 = OpLevelTimer::new(setup(4), Rc::new(gemm_db())).step_time(&[load]).unwrap();
    assert!(t4 < t1, "{t4:?} >= {t1:?}");
}

#[test]
fn provenance_counts_every_op_of_every_step() {
    let mut t = OpLevelTimer::new(setup(1), Rc::new(gemm_db()));
    let load = RankLoad { decode_requests: 8, decode_kv_tokens: 8000, ..RankLoad::default() };
    t.step_time(core::slice::from_ref(&load)).unwrap();
    let first = t.provenance();
    assert!(first.total() > 0);
    t.step_time(&[load]).unwrap();
    let second = t.provenance();
    assert_eq!(second.total(), 2 * first.total(), "memoised steps count their ops again");
    let by = t.provenance_by_kind();
    assert!(by[0].1.measured + by[0].1.interpolated > 0, "GEMMs come from the table");
    assert!(by[1].1.roofline > 0, "no attention table: roofline");
}

#[test]
fn engine_releases_pick_their_calibration() {
    for (version, older) in [
        ("1.0.0rc3", true),
        ("0.21.0", true),
        ("1.1.0rc1", false),
        ("1.2.0rc6.post1", false),
        ("1.3.0rc20", false),
        ("10.0", false),
        ("", false),
        ("gpt-oss-dev", false),
    ] {
        assert_eq!(release_before(version, (1, 1)), older, "{version}");
        let want = if older { TRTLLM_1_0 } else { TRTLLM };
        assert_eq!(EngineCalibration::for_release("trtllm", version), want, "{version}");
    }
    assert!(release_before("0.13.2", (0, 14)) && !release_before("0.14.0", (0, 14)));
    assert_eq!(EngineCalibration::for_release("vllm", "0.12.0"), VLLM_0_12);
    assert_eq!(EngineCalibration::for_release("vllm", "0.14.0"), VLLM);
    assert_eq!(EngineCalibration::for_release("sglang", "0.5.9"), SGLANG);
    // The default release's constants are what a scenario without a release gets.
    let c = OpConstants::for_backend("trtllm");
    assert_eq!((c.prefill_scale, c.frontend_s), (TRTLLM.prefill_scale, TRTLLM.frontend_s));
}

/// Experts split in a way the table did not measure take the time measured for the same
/// GPU count split the other way (same speed of light), reported as extrapolated; with no
/// such slice they fall back to the roofline.
#[test]
fn an_unmeasured_expert_split_takes_the_other_split_over_as_many_gpus() {
    let mut rows: Vec<Row> = Vec::new();
    for (t, ms) in [(1u64, 0.074), (8, 0.1536), (64, 0.2937), (4096, 2.1112)] {
        let key = ["w4a16_mxfp4", "power_law_1.01", "4096", "2880", "4", "128", "1", "2"].map(str::to_string);
        rows.push((key.to_vec(), vec![t], ms));
    }
    let (db, mut s) = moe_fixture(rows, 2, 4, 2880);
    s.moe = MoeQuant::W4a16Mxfp4;
    // Measured as laid out: expert parallelism over 2 GPUs.
    s.parallelism = Parallelism { tensor: 2, moe_tensor: 1, moe_expert: 2, ..Parallelism::SINGLE };
    let ep = OpLevelTimer::new(s.clone(), db.clone()).moe_experts(8);
    assert_eq!(ep, (0.1536 / 1e3, Source::Measured));
    // Tensor parallelism over the same 2 GPUs: the expert-parallel time, extrapolated.
    s.parallelism = Parallelism { tensor: 2, moe_tensor: 2, moe_expert: 1, ..Parallelism::SINGLE };
    let tp = OpLevelTimer::new(s.clone(), db.clone());
    assert_eq!(tp.moe_experts(8), (ep.0, Source::Extrapolated));
    let (mid, src) = tp.moe_experts(30);
    assert_eq!(src, Source::Extrapolated);
    assert!(mid > 0.1536e-3 && mid < 0.2937e-3, "{mid}");
    // Four GPUs: nothing measured over four, so the roofline, which is 2-3x faster here.
    s.parallelism = Parallelism { tensor: 4, moe_tensor: 4, moe_expert: 1, ..Parallelism::SINGLE };
    let (four, src) = OpLevelTimer::new(s, db).moe_experts(8);
    assert_eq!(src, Source::Roofline);
    assert!(four < ep.0 / 2.0, "{four}");
}

/// MTP's draft layers scale a step's model time by (layers + nextn) / layers, as
/// AIConfigurator's `apply_nextn` does; the engine's per-step overhead is not scaled.
#[test]
fn draft_layers_scale_the_model_time_of_a_step() {
    let mut plain = setup(1);
    plain.constants.step_overhead_s = 0.002;
    let mut mtp = plain.clone();
    mtp.draft_layers = 3;
    let loads = [RankLoad { prefill: vec![], decode_requests: 4 * 16, decode_kv_tokens: 4 * 16 * 900 }];
    let db = Rc::new(decode_db());
    let a = OpLevelTimer::new(plain, db.clone()).step_seconds(&loads);
    let b = OpLevelTimer::new(mtp, db).step_seconds(&loads);
    let want = (a - 0.002) * 35.0 / 32.0 + 0.002;
    assert!((b - want).abs() < 1e-12, "{b} != {want}");
}

/// `allreduce: nccl` times every all-reduce from the NCCL table, whose message size is in
/// bytes, where the engine's custom-kernel table counts elements.
#[test]
fn the_allreduce_implementation_picks_its_table() {
    let (custom_ms, nccl_ms) = (0.004, 0.020);
    let mut db = gemm_db();
    let mut custom = Vec::new();
    let mut nccl = Vec::new();
    for gpus in [2u64, 4, 8] {
        for size in [1u64 << 10, 1 << 14, 1 << 18, 1 << 22] {
            custom.push((vec!["bfloat16".to_string(), "graph".to_string()], vec![gpus, size], custom_ms));
            // Twice the time per byte beyond the latency, so a unit mix-up shows.
            #[allow(clippy::cast_precision_loss)]
            let ms = nccl_ms + size as f64 * 1e-9;
            nccl.push((vec!["all_reduce".to_string(), "half".to_string()], vec![gpus, size], ms));
        }
    }
    db.insert(Rc::new(Table::from_rows(Family::AllReduce, custom).unwrap()));
    db.insert(Rc::new(Table::from_rows(Family::Nccl, nccl).unwrap()));
    let db = Rc::new(db);
    let mut s = setup(4);
    let t = OpLevelTimer::new(s.clone(), db.clone());
    let (ms, src) = t.allreduce(8 * 4096, 4, true);
    assert!((ms * 1e3 - custom_ms).abs() < 1e-12 && src == Source::Interpolated, "{ms} {src:?}");
    s.constants.allreduce = AllReduceImpl::Nccl;
    let t = OpLevelTimer::new(s.clone(), db.clone());
    // 8 tokens × 4096 bf16 values = 65,536 bytes: between the 16 KiB and 256 KiB rows.
    let (ms, src) = t.allreduce(8 * 4096, 4, true);
    let want = nccl_ms + 65_536.0 * 1e-9;
    assert!((ms * 1e3 - want).abs() < 1e-9 && src == Source::Interpolated, "{ms} vs {want}, {src:?}");
    // A decode step pays the difference at each of the layer's two all-reduces.
    let load = RankLoad { decode_requests: 8, decode_kv_tokens: 8000, ..RankLoad::default() };
    let mut fast = OpLevelTimer::new(setup(4), db.clone());
    let mut slow = OpLevelTimer::new(s, db);
    let slow_ms = slow.step_time(core::slice::from_ref(&load)).unwrap().as_secs_f64() * 1e3;
    let gap_ms = slow_ms - fast.step_time(&[load]).unwrap().as_secs_f64() * 1e3;
    let want_gap_ms = 2.0 * 32.0 * (want - custom_ms);
    assert!((gap_ms - want_gap_ms).abs() < 1e-3, "{gap_ms} vs {want_gap_ms} ms");
    // Without an NCCL table the all-reduce falls to the roofline.
    let mut s = setup(4);
    s.constants.allreduce = AllReduceImpl::Nccl;
    assert_eq!(OpLevelTimer::new(s, Rc::new(gemm_db())).allreduce(8 * 4096, 4, true).1, Source::Roofline);
}

/// A step's breakdown adds up to its time and names where it goes: tensor-parallel
/// all-reduces, expert all-to-alls under attention DP, the calibrated prefill share, the
/// step overhead, a synchronous host's time, pipeline cycles and draft layers; and asking
/// for it counts no lookups.
#[test]
fn step_breakdowns_add_up_to_the_step_time() {
    let moe = Moe {
        num_experts: 64,
        experts_per_token: 4,
        expert_intermediate_size: 1536,
        shared_intermediate_size: 2048,
        dense_layers: 2,
    };
    let mixed = RankLoad {
        prefill: vec![PrefillChunk { new_tokens: 700, context_tokens: 300 }],
        decode_requests: 12,
        decode_kv_tokens: 12 * 1500,
    };
    let decode = RankLoad { prefill: vec![], decode_requests: 40, decode_kv_tokens: 40 * 600 };
    let mut scaled = setup(2);
    scaled.constants.prefill_scale = 1.3;
    scaled.constants.step_overhead_s = 0.000_7;
    let mut dp = setup(2);
    dp.model.moe = Some(moe);
    dp.parallelism = Parallelism { tensor: 1, attention_data: 2, moe_expert: 2, ..Parallelism::SINGLE };
    let mut sync = setup(1);
    sync.constants = sync.constants.synchronous();
    let mut pp = setup(2);
    pp.parallelism.pipeline = 2;
    pp.draft_layers = 1;
    let cases: Vec<(OpLevelSetup, Vec<RankLoad>, &[&str])> = vec![
        (scaled, vec![mixed.clone()], &["gemm", "attention", "allreduce", "prefill_scale", "step_overhead"]),
        (dp, vec![mixed.clone(), decode.clone()], &["moe", "nccl"]),
        (sync, vec![decode.clone()], &["host"]),
        (pp, vec![mixed.clone()], &["p2p", "allreduce"]),
        (hybrid(2), vec![mixed], &["gemm", "attention"]),
        (setup(1), vec![RankLoad::default()], &[]),
    ];
    for (i, (s, loads, nonzero)) in cases.into_iter().enumerate() {
        let mut t = OpLevelTimer::new(s, Rc::new(decode_db()));
        let step = t.step_seconds(&loads);
        let counted = t.provenance_by_kind();
        let parts = t.breakdown(&loads).unwrap();
        assert_eq!(t.provenance_by_kind(), counted, "case {i}: lookups");
        let sum: f64 = parts.iter().map(|(_, s)| s).sum();
        assert!((sum - step).abs() <= 1e-12 + step * 1e-9, "case {i}: {sum} != {step}: {parts:?}");
        assert!(parts.iter().all(|(_, s)| *s >= 0.0), "case {i}: {parts:?}");
        for name in nonzero {
            assert!(parts.iter().any(|(k, s)| k == name && *s > 0.0), "case {i}: no {name} in {parts:?}");
        }
        let names: Vec<&str> = parts.iter().map(|(k, _)| *k).collect();
        assert_eq!(names[..OP_KINDS.len()], OP_KINDS, "case {i}");
    }
}

/// The roofline timer's parts add up to its step too (TP2, a pipeline of two, a draft layer).
#[test]
fn roofline_breakdowns_add_up_to_the_step_time() {
    use crate::roofline::RooflineTimer;
    let mixed = RankLoad {
        prefill: vec![PrefillChunk { new_tokens: 700, context_tokens: 300 }],
        decode_requests: 12,
        decode_kv_tokens: 12 * 1500,
    };
    let decode = RankLoad { prefill: vec![], decode_requests: 40, decode_kv_tokens: 40 * 600 };
    for (i, (pipeline, draft, loads)) in [
        (1, 0, vec![mixed.clone()]),
        (1, 0, vec![decode.clone(), mixed.clone()]),
        (2, 1, vec![mixed.clone()]),
        (1, 0, vec![RankLoad::default()]),
    ]
    .into_iter()
    .enumerate()
    {
        let s = setup(2);
        let p = Parallelism { pipeline, ..s.parallelism };
        let mut t =
            RooflineTimer::new(s.model, s.hardware, p, Dtype::Bf16, Dtype::Bf16).with_draft_layers(draft);
        let step = t.step_time(&loads).unwrap().as_secs_f64();
        let parts = t.breakdown(&loads).unwrap();
        let sum: f64 = parts.iter().map(|(_, s)| s).sum();
        assert!((sum - step).abs() <= 1e-9 + step * 1e-9, "case {i}: {sum} != {step}: {parts:?}");
        if step > 0.0 {
            for name in ["gemm", "attention", "allreduce", "elementwise"] {
                assert!(
                    parts.iter().any(|(k, s)| *k == name && *s > 0.0),
                    "case {i}: no {name} in {parts:?}"
                );
            }
        }
    }
}

/// Under attention DP the routed experts' tokens travel as the engines move them: every
/// rank gathers all ranks' tokens and reduce-scatters the bf16 outputs (vLLM, and
/// TensorRT-LLM off NVL72, which gathers NVFP4 activations on Blackwell), or an all-to-all
/// each way that sends a token once to each rank its experts are on (SGLang's DeepEP,
/// TensorRT-LLM where the NVLink domain spans nodes). Each collective is read from its own
/// slice of the NCCL table, the message sized as nccl-tests size it.
#[test]
fn expert_traffic_under_attention_dp_follows_the_engine() {
    let moe = Moe {
        num_experts: 64,
        experts_per_token: 4,
        expert_intermediate_size: 1536,
        shared_intermediate_size: 0,
        dense_layers: 2,
    };
    let (tokens, dp) = (4096u64, 4u32);
    let elems = tokens * 4096;
    // 16 experts a rank: a token misses a rank with probability (48·47·46·45)/(64·63·62·61).
    let miss = (48.0 * 47.0 * 46.0 * 45.0) / (64.0 * 63.0 * 62.0 * 61.0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let a2a_elems = libm::round((tokens / 4) as f64 * 4096.0 * 4.0 * (1.0 - miss)) as u64;
    // Distinct latencies per collective and linear in bytes; the sizes a case needs are rows.
    let lat = |op: &str, bytes: u64| {
        let (base, per_byte) = match op {
            "all_gather" => (0.010, 1e-9),
            "reduce_scatter" => (0.020, 2e-9),
            _ => (0.030, 3e-9),
        };
        #[allow(clippy::cast_precision_loss)]
        let ms = base + bytes as f64 * per_byte;
        ms
    };
    let fp4 = |e: u64| e / 2 + e / 16;
    let sizes = [1u64 << 10, elems * 2, fp4(elems), a2a_elems * 2, fp4(a2a_elems), 1 << 34];
    let timer = |backend: &str, quant: MoeQuant, nvl72: bool| {
        let mut rows: Vec<Row> = Vec::new();
        for op in ["all_gather", "reduce_scatter", "alltoall"] {
            for gpus in [2u64, 4, 8] {
                for &b in &sizes {
                    rows.push((vec![op.to_string(), "half".to_string()], vec![gpus, b], lat(op, b)));
                }
            }
        }
        let mut db = PerfDb::new("b200_sxm", backend, "test", "unit test");
        db.insert(Rc::new(Table::from_rows(Family::Nccl, rows).unwrap()));
        let mut s = setup(1);
        s.model.moe = Some(moe.clone());
        s.moe = quant;
        s.hardware.fp4_flops = Some(9e15);
        if nvl72 {
            s.hardware.scale_out_bytes_per_s = s.hardware.scale_up_bytes_per_s;
        }
        s.parallelism = Parallelism { tensor: 1, attention_data: dp, moe_expert: dp, ..Parallelism::SINGLE };
        OpLevelTimer::new(s, Rc::new(db))
    };
    let layers = 30.0;
    let nccl_ms =
        |mut t: OpLevelTimer| t.moe_part(tokens, false).2[OpLevelTimer::kind("nccl")] * 1e3 / layers;
    let close = |got: f64, want: f64| (got - want).abs() < 1e-9 * want.max(1.0);
    let gather_bf16 = lat("all_gather", elems * 2) + lat("reduce_scatter", elems * 2);
    let got = nccl_ms(timer("vllm", MoeQuant::Nvfp4, false));
    assert!(close(got, gather_bf16), "vLLM gathers bf16: {got} vs {gather_bf16}");
    let got = nccl_ms(timer("trtllm", MoeQuant::Nvfp4, false));
    let gather_fp4 = lat("all_gather", fp4(elems)) + lat("reduce_scatter", elems * 2);
    assert!(close(got, gather_fp4), "TensorRT-LLM gathers NVFP4: {got} vs {gather_fp4}");
    let got = nccl_ms(timer("trtllm", MoeQuant::Nvfp4, true));
    let a2a = lat("alltoall", fp4(a2a_elems)) + lat("alltoall", a2a_elems * 2);
    assert!(close(got, a2a), "TensorRT-LLM on NVL72 dispatches NVFP4 all-to-all: {got} vs {a2a}");
    let got = nccl_ms(timer("sglang", MoeQuant::Nvfp4, false));
    let a2a = 2.0 * lat("alltoall", a2a_elems * 2);
    assert!(close(got, a2a), "SGLang's DeepEP sends bf16 all-to-all: {got} vs {a2a}");
    // Without attention DP nothing crosses ranks here (tensor-parallel all-reduces do).
    let mut t = timer("vllm", MoeQuant::Bf16, false);
    t.s.parallelism = Parallelism { tensor: 4, moe_expert: 4, ..Parallelism::SINGLE };
    assert!(t.moe_part(tokens, false).2[OpLevelTimer::kind("nccl")].abs() < 1e-15);
}

/// The expected count of ranks a token's experts land on matches enumerating every choice
/// of experts, and stays within its bounds (at least one rank, at most `min(k, ranks)`).
#[test]
fn distinct_ranks_match_enumeration() {
    fn enumerate(experts: u32, k: u32, ranks: u32) -> f64 {
        let per = experts / ranks;
        let (mut sum, mut count) = (0u64, 0u64);
        // Every k-subset of experts as a bit mask (small cases only).
        for mask in 0u32..(1 << experts) {
            if mask.count_ones() != k {
                continue;
            }
            let hit = (0..ranks).filter(|r| (mask >> (r * per)) & ((1 << per) - 1) != 0).count();
            sum += hit as u64;
            count += 1;
        }
        #[allow(clippy::cast_precision_loss)]
        let mean = sum as f64 / count as f64;
        mean
    }
    for (e, k, r) in [(8, 2, 4), (8, 3, 2), (12, 4, 3), (16, 4, 8), (16, 1, 4), (8, 8, 4)] {
        let want = enumerate(e, k, r);
        let got = super::distinct_ranks(e, k, r);
        assert!((got - want).abs() < 1e-12, "{e} experts, top-{k}, {r} ranks: {got} vs {want}");
        assert!(got >= 1.0 - 1e-12 && got <= f64::from(k.min(r)) + 1e-12);
    }
}

mod deepep;

/// A hybrid model's Gated DeltaNet kernels come from their table, keyed by heads per GPU: a
/// grid point verbatim, in between interpolated, and a table measured at another hidden
/// size stands in (the kernels do not read it); without a table, or at a TP whose heads the
/// table lacks, they fall back to the roofline, whose decode recurrence moves each sequence's
/// state twice. Prompt chunks are looked up as a batch of chunks of their mean length, and
/// a step adds the kernels over the linear-attention layers only.
#[test]
fn gdn_kernels_are_timed_from_their_table() {
    let t = OpLevelTimer::new(hybrid(2), Rc::new(decode_db()));
    let ms = |i: usize, b: f64, len: f64| 0.002 * (i + 1) as f64 + 1e-5 * b * len + 3e-4 * b;
    for (i, (b, len)) in [(4.0, 1024.0), (16.0, 64.0), (1.0, 1.0), (64.0, 1.0)].into_iter().enumerate() {
        let (s, src) = t.gdn_kernel(i, b, len);
        assert_eq!(src, Source::Measured, "kernel {i}");
        assert!((s - ms(i, b, len) / 1e3).abs() < 1e-15, "kernel {i}: {s}");
    }
    let (s, src) = t.gdn_kernel(1, 8.0, 2000.0);
    assert_eq!(src, Source::Interpolated);
    assert!(s > t.gdn_kernel(1, 4.0, 1024.0).0 && s < t.gdn_kernel(1, 16.0, 4096.0).0, "{s}");

    // Another hidden size with the same heads per GPU stands in.
    let mut other = gemm_db();
    other.insert(Rc::new(Table::from_rows(Family::Gdn, gdn_rows("4096")).unwrap()));
    let o = OpLevelTimer::new(hybrid(2), Rc::new(other));
    assert_eq!(o.gdn_kernel(3, 16.0, 1.0), t.gdn_kernel(3, 16.0, 1.0));

    // TP1's 16 and 48 heads a GPU are not in the table: the roofline.
    let r = OpLevelTimer::new(hybrid(1), Rc::new(decode_db()));
    let (one, src) = r.gdn_kernel(3, 1.0, 1.0);
    assert_eq!(src, Source::Roofline);
    let c = OpConstants::default();
    let state = 48.0 * 128.0 * 128.0 * 4.0;
    let per_seq = (2.0 * state + (2.0 * 16.0 * 128.0 + 2.0 * 48.0 * 128.0) * 2.0) / hw().hbm_bytes_per_s;
    assert!((one - (per_seq / c.memory_efficiency + c.kernel_latency_s)).abs() < 1e-15, "{one}");
    let (many, _) = r.gdn_kernel(3, 64.0, 1.0);
    assert!((many - one - 63.0 * per_seq / c.memory_efficiency).abs() < 1e-12, "{many}");

    // A step's GDN time: two 500- and 1548-token chunks as a batch of two 1024-token ones,
    // and the decode kernels at 24 sequences, over 48 layers.
    let load = RankLoad {
        prefill: vec![
            PrefillChunk { new_tokens: 500, context_tokens: 0 },
            PrefillChunk { new_tokens: 1548, context_tokens: 3000 },
        ],
        decode_requests: 24,
        decode_kv_tokens: 24 * 900,
    };
    let mut t = t;
    let (mut prov, before) = (Provenance::default(), t.provenance_by_kind()[1].1);
    let got = t.gdn_secs(&load, &mut prov);
    let per_layer: f64 = [(0, 2.0, 1024.0), (1, 2.0, 1024.0), (2, 24.0, 1.0), (3, 24.0, 1.0)]
        .into_iter()
        .map(|(i, b, len)| t.gdn_kernel(i, b, len).0)
        .sum();
    assert!((got - 48.0 * per_layer).abs() < 1e-12, "{got}");
    // The prompt kernels' lookups counted here, the decode kernels' with their memo.
    assert_eq!(prov.total(), 2);
    assert_eq!(t.provenance_by_kind()[1].1.total(), before.total() + 2);
    // A dense model has none.
    let mut dense = OpLevelTimer::new(setup(2), Rc::new(decode_db()));
    assert_eq!(dense.gdn_secs(&load, &mut prov), 0.0);
    assert_eq!(prov.total(), 2);
}
