//! The published benchmark recipes rows replay ([`recipe`]): AIConfigurator's generator and
//! InferenceX's scripts.

use super::*;

#[test]
fn aiconfigurator_gap_analysis_rows_replay_the_generators_engine_options() {
    let l = |batch| Layout { tp: 2, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch };
    let mut r = row(Mode::Agg { layout: l(8) });
    r.backend = "trtllm".into();
    r.backend_version = "1.0.0rc3".into();
    r.source =
        "source_file=/Users/x/aic-auto-gap-analysis/data/h100_sxm/trtllm/1.0.0rc3/Qwen_Qwen3-32B.csv; \
                silicon_concurrency=8"
            .into();
    (r.isl, r.concurrency) = (4096, 8);
    // 512 + 4,096 + 1,500 = 6,108, rounded up to the 32-token block.
    let want = Recipe {
        max_batched_tokens: Some(6112),
        max_sequences: Some(512),
        chunked_prefill: Some(false),
        ..Recipe::default()
    };
    assert_eq!(recipe(&r), want);
    let y = scenario_yaml(&r, &Knobs::default(), true, None);
    assert!(y.contains("  enable_chunked_prefill: false\n"), "{y}");
    assert!(y.contains("scheduler: {max_batched_tokens: 6112, max_sequences: 512}"), "{y}");
    let plain = scenario_yaml(&r, &Knobs { no_recipes: true, ..Knobs::default() }, true, None);
    assert!(
        !plain.contains("enable_chunked_prefill") && plain.contains("max_batched_tokens: 8192"),
        "{plain}"
    );
    // From 512 the cap doubles the configuration's batch size, and the budget follows it.
    r.mode = Mode::Agg { layout: l(600) };
    assert_eq!(recipe(&r).max_batched_tokens, Some((1200 + 4096 + 1500_u32).div_ceil(32) * 32));
    assert_eq!(recipe(&r).max_sequences, Some(1200));
    // SGLang: the batch size as the cap, the prompt plus 1,500 as the prefill budget, mixed
    // chunks; the chunk and the (ignored) step budget stay as they were.
    r.mode = Mode::Agg { layout: l(8) };
    r.backend = "sglang".into();
    let want = Recipe {
        max_sequences: Some(8),
        max_prefill_tokens: Some(5596),
        mixed_chunk: Some(true),
        ..Recipe::default()
    };
    assert_eq!(recipe(&r), want);
    let y = scenario_yaml(&r, &Knobs::default(), true, None);
    assert!(
        y.contains("max_sequences: 8, max_prefill_tokens: 5596, enable_mixed_chunk: true}")
            && !y.contains("enable_chunked_prefill"),
        "{y}"
    );
    // The harness's vLLM rows, and its disaggregated ones, keep the policy.
    r.backend = "vllm".into();
    assert_eq!(recipe(&r), Recipe::default());
    for backend in ["trtllm", "sglang"] {
        r.backend = backend.into();
        r.mode =
            Mode::Disagg { prefill: l(8), prefill_workers: Some(1), decode: l(8), decode_workers: Some(1) };
        assert_eq!(recipe(&r), Recipe::default(), "{backend}");
    }
}

#[test]
fn inferencex_trtllm_llama_70b_rows_replay_with_their_recipe() {
    let l = |tp| Layout { tp, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 8 };
    let mut r = row(Mode::Agg { layout: l(2) });
    r.backend = "trtllm".into();
    r.model = "meta-llama/Llama-3.1-70B".into();
    r.source = "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=8".into();
    (r.isl, r.osl) = (1024, 1024);
    let want = Recipe { max_batched_tokens: Some(16_384), batch_wait: Some((20, 0.9)), ..Recipe::default() };
    assert_eq!(recipe(&r), want);
    let y = scenario_yaml(&r, &Knobs::default(), true, None);
    assert!(
        y.contains("max_batched_tokens: 16384")
            && y.contains("batch_wait_timeout_iters: 20, batch_wait_max_tokens_ratio: 0.9"),
        "{y}"
    );
    let plain = scenario_yaml(&r, &Knobs { no_recipes: true, ..Knobs::default() }, true, None);
    assert!(plain.contains("max_batched_tokens: 8192") && !plain.contains("batch_wait"), "{plain}");
    // Batch waiting only at 1k/1k below TP8; the larger budget throughout.
    let only_budget = Recipe { max_batched_tokens: Some(16_384), ..Recipe::default() };
    r.mode = Mode::Agg { layout: l(8) };
    assert_eq!(recipe(&r), only_budget);
    (r.mode, r.osl) = (Mode::Agg { layout: l(2) }, 8192);
    assert_eq!(recipe(&r), only_budget);
    // Other sources, engines and models replay the policy.
    r.osl = 1024;
    for change in [
        |r: &mut SiliconRow| r.source = "source_file=/data/h100_sxm/trtllm/1.0.0rc3/x.csv".into(),
        |r: &mut SiliconRow| r.backend = "sglang".into(),
        |r: &mut SiliconRow| r.model = "Qwen/Qwen3-32B".into(),
    ] {
        let mut other = r.clone();
        change(&mut other);
        assert_eq!(recipe(&other), Recipe::default(), "{other:?}");
    }
    // vLLM: the scripts' `--gpu-memory-utilization 0.9`, not the recent engines' 0.92.
    r.backend = "vllm".into();
    assert_eq!(recipe(&r), Recipe { memory_fraction: Some(0.9), ..Recipe::default() });
    let y = scenario_yaml(&r, &Knobs::default(), true, None);
    assert!(y.contains("capacity: {type: default, memory_fraction: 0.9}"), "{y}");
    r.source = "source_file=/data/h100_sxm/vllm/0.12.0/x.csv".into();
    assert_eq!(recipe(&r), Recipe::default());
}

#[test]
fn inferencex_sglang_deepseek_r1_rows_replay_with_their_recipe() {
    let l = |tp| Layout { tp, pp: 1, dp: 1, moe_tp: tp, moe_ep: 1, batch: 8 };
    let mut r = row(Mode::Agg { layout: l(8) });
    (r.backend, r.model, r.system, r.precision) =
        ("sglang".into(), "deepseek-ai/DeepSeek-R1".into(), "b200_sxm".into(), "fp8".into());
    r.source = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=16".into();
    let interval = |r: &SiliconRow| recipe(r).recv_interval;
    r.concurrency = 16;
    assert_eq!(interval(&r), Some(30));
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    assert!(y.contains("scheduler_recv_interval: 30"), "{y}");
    let plain = scenario_yaml(&r, &Knobs { no_recipes: true, ..Knobs::default() }, false, None);
    assert!(!plain.contains("scheduler_recv_interval"), "{plain}");
    // Below 16 clients, and the fp8 script's TP4 layout: every 10 steps.
    r.concurrency = 8;
    assert_eq!(interval(&r), Some(10));
    (r.concurrency, r.mode) = (64, Mode::Agg { layout: l(4) });
    assert_eq!(interval(&r), Some(10));
    // The fp8 script's TP4 layout also raises the memory fraction the weights need, and caps
    // the running requests and the prefill chunk.
    let tp4 = Recipe {
        chunked_prefill_size: Some(8192),
        recv_interval: Some(10),
        max_sequences: Some(32),
        memory_fraction: Some(0.95),
        ..Recipe::default()
    };
    assert_eq!(recipe(&r), tp4);
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    assert!(y.contains("max_batched_tokens: 8192, max_sequences: 32, scheduler_recv_interval: 10, chunked_prefill_size: 8192}"), "{y}");
    assert!(y.contains("capacity: {type: default, memory_fraction: 0.95}"), "{y}");
    r.precision = "fp4".into();
    assert_eq!(interval(&r), Some(30));
    assert_eq!(recipe(&r).memory_fraction, None);
    // The database dump is InferenceX too, and its DeepSeek-V3 rows are these benchmarks;
    // other GPUs, engines and sources are not this recipe.
    r.source = "db-dump/2026-04-27; config_id=1; silicon_concurrency=64".into();
    assert_eq!(interval(&r), Some(30));
    r.model = "deepseek-ai/DeepSeek-V3".into();
    assert_eq!(interval(&r), Some(30));
    // B300's scripts reuse B200's recipe as it is.
    let b300 = SiliconRow { system: "b300_sxm".into(), ..r.clone() };
    assert_eq!(recipe(&b300), recipe(&r));
    for change in [
        |r: &mut SiliconRow| r.system = "gb200".into(),
        |r: &mut SiliconRow| r.backend = "vllm".into(),
        |r: &mut SiliconRow| r.source = "source_file=qwen3.5-397b-gap-analysis.csv".into(),
    ] {
        let mut other = r.clone();
        change(&mut other);
        assert_eq!(recipe(&other), Recipe::default(), "{other:?}");
    }
    // On H200 (`dsr1_fp8_h200.sh`) the script leaves the KV cache at the model's bf16, with
    // 32k chunks and prefill budget, a 0.82 memory fraction and 512 or 256 running requests.
    (r.system, r.precision, r.mode) = ("h200_sxm".into(), "fp8".into(), Mode::Agg { layout: l(8) });
    r.concurrency = 64;
    let want = Recipe {
        chunked_prefill_size: Some(32_768),
        max_prefill_tokens: Some(32_768),
        memory_fraction: Some(0.82),
        max_sequences: Some(256),
        kv_cache_bf16: true,
        ..Recipe::default()
    };
    assert_eq!(recipe(&r), want);
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    assert!(y.contains("kv_cache: bf16}"), "{y}");
    let plain = scenario_yaml(&r, &Knobs { no_recipes: true, ..Knobs::default() }, false, None);
    assert!(plain.contains("kv_cache: fp8}"), "{plain}");
}

#[test]
fn inferencex_sglang_qwen3_5_rows_replay_with_their_recipe() {
    let l = |tp| Layout { tp, pp: 1, dp: 1, moe_tp: tp, moe_ep: 1, batch: 8 };
    let mut r = row(Mode::Agg { layout: l(4) });
    (r.backend, r.model, r.system, r.precision) =
        ("sglang".into(), "Qwen/Qwen3.5-397B-A17B".into(), "b200_sxm".into(), "fp8".into());
    r.source = "db-dump/2026-04-27; config_id=1; silicon_concurrency=16".into();
    r.concurrency = 16;
    let relaxed = Recipe {
        recv_interval: Some(30),
        chunked_prefill_size: Some(32_768),
        max_prefill_tokens: Some(32_768),
        memory_fraction: Some(0.82),
        ..Recipe::default()
    };
    assert_eq!(recipe(&r), relaxed);
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    assert!(y.contains("scheduler_recv_interval: 30"), "{y}");
    assert!(y.contains("memory_fraction: 0.82"), "{y}");
    // Below 16 clients the scheduler polls every 10 steps; B300 runs the same script, whose
    // fp4 revision keeps a 0.8 memory fraction.
    r.concurrency = 8;
    r.system = "b300_sxm".into();
    assert_eq!(recipe(&r), Recipe { recv_interval: Some(10), ..relaxed });
    r.precision = "fp4".into();
    assert_eq!(recipe(&r), Recipe { recv_interval: Some(10), memory_fraction: Some(0.8), ..relaxed });
    // No recipe is known for H200, nor for runs outside InferenceX.
    r.system = "h200_sxm".into();
    assert_eq!(recipe(&r), Recipe::default());
    r.system = "b200_sxm".into();
    r.source = "source_file=qwen3.5-397b-gap-analysis.csv; silicon_concurrency=8".into();
    assert_eq!(recipe(&r), Recipe::default());
}

/// InferenceX's TensorRT-LLM DeepSeek-R1 scripts size the token budget to the clients and
/// the prompt, and set the KV memory fraction by GPU, precision and workload.
#[test]
fn inferencex_trtllm_deepseek_rows_replay_with_their_recipe() {
    let l = |tp| Layout { tp, pp: 1, dp: 1, moe_tp: 1, moe_ep: tp, batch: 8 };
    let mut r = row(Mode::Agg { layout: l(8) });
    (r.backend, r.model, r.system, r.precision) =
        ("trtllm".into(), "deepseek-ai/DeepSeek-R1".into(), "b200_sxm".into(), "fp8".into());
    r.source = "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=64".into();
    (r.isl, r.osl, r.concurrency) = (8192, 1024, 64);
    // (64 + 8192 + 64) rounded up to 64; the fp8 script keeps TRTLLM-gen experts at 8k/1k.
    let trtllm_gen = Some(MoeKernel::MinLatency);
    let want = Recipe {
        max_batched_tokens: Some(8320),
        memory_fraction: Some(0.8),
        moe_kernel: trtllm_gen,
        ..Recipe::default()
    };
    assert_eq!(recipe(&r), want);
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    assert!(y.contains("max_batched_tokens: 8320,"), "{y}");
    assert!(y.contains("capacity: {type: default, memory_fraction: 0.8}"), "{y}");
    assert!(y.contains("timing: {moe_kernel: min_latency}"), "{y}");
    // `--moe-kernel` replays every worker with the kernels given instead.
    let what_if = Knobs { moe_kernel: Some(MoeKernel::Default), ..Knobs::default() };
    let y = scenario_yaml(&r, &what_if, false, None);
    assert!(y.contains("timing: {moe_kernel: default}") && !y.contains("min_latency"), "{y}");
    r.mode = Mode::Agg { layout: l(4) };
    assert_eq!(recipe(&r).memory_fraction, Some(0.75));
    // 1k prompts keep the 8,192 floor; 1k/1k waits for batches from 64 to 255 clients, and
    // from 256 the KV fraction drops to 0.7.
    (r.isl, r.osl, r.mode) = (1024, 1024, Mode::Agg { layout: l(8) });
    let at = |r: &mut SiliconRow, c: u32| {
        r.concurrency = c;
        recipe(r)
    };
    assert_eq!(
        at(&mut r, 32),
        Recipe {
            max_batched_tokens: Some(8192),
            memory_fraction: Some(0.8),
            moe_kernel: trtllm_gen,
            ..Recipe::default()
        }
    );
    assert_eq!(at(&mut r, 64).batch_wait, Some((40, 0.8)));
    // With attention DP, TensorRT-LLM skips batch waiting and the script balances the ranks.
    let dp8 = Layout { tp: 1, dp: 8, ..l(8) };
    r.mode = Mode::Agg { layout: dp8 };
    let balanced = recipe(&r);
    assert_eq!((balanced.batch_wait, balanced.adp_balance), (None, Some((60, 0))));
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    assert!(
        y.contains("attention_dp_config: {enable_balance: true, timeout_iters: 60, batching_wait_iters: 0}"),
        "{y}"
    );
    r.mode = Mode::Agg { layout: l(8) };
    // From 256 clients the fp8 script runs DeepGEMM experts (the table's default lane).
    assert_eq!(
        at(&mut r, 256),
        Recipe { max_batched_tokens: Some(8192), memory_fraction: Some(0.7), ..Recipe::default() }
    );
    // fp4 on B200 keeps 0.8 and runs CUTLASS from 256 clients, at 8k/1k above 32.
    r.precision = "fp4".into();
    assert_eq!((at(&mut r, 256).memory_fraction, recipe(&r).moe_kernel), (Some(0.8), None));
    assert_eq!(at(&mut r, 255).moe_kernel, trtllm_gen);
    (r.isl, r.osl) = (8192, 1024);
    assert_eq!((at(&mut r, 32).moe_kernel, at(&mut r, 33).moe_kernel), (trtllm_gen, None));
    (r.isl, r.osl) = (1024, 1024);
    (r.system, r.precision, r.model) = ("h200_sxm".into(), "fp8".into(), "deepseek-ai/DeepSeek-V3".into());
    r.source = "db-dump/2026-04-27; config_id=9; silicon_concurrency=64".into();
    assert_eq!(at(&mut r, 64).memory_fraction, Some(0.75));
    assert_eq!((recipe(&r).batch_wait, recipe(&r).moe_kernel), (None, None));
    // Other GPUs are not these scripts.
    r.system = "gb200".into();
    assert_eq!(recipe(&r), Recipe::default());
}

/// InferenceX's B200 DeepSeek-R1 rows on the image only its MTP configurations ran replay the
/// MTP scripts: three drafts (one under attention DP), their token budget and experts.
#[test]
fn inferencex_trtllm_deepseek_rows_on_the_mtp_image_replay_speculation() {
    let l = Layout { tp: 8, pp: 1, dp: 1, moe_tp: 1, moe_ep: 8, batch: 4 };
    let mut r = row(Mode::Agg { layout: l });
    (r.backend, r.model, r.system, r.precision) =
        ("trtllm".into(), "deepseek-ai/DeepSeek-R1".into(), "b200_sxm".into(), "fp8".into());
    (r.isl, r.osl, r.concurrency) = (1024, 8192, 4);
    let image = |tag: &str| {
        format!(
            "source_file=2026-03-25.csv; model=DeepSeek-R1; image=nvcr.io#nvidia/tensorrt-llm/release:{tag}"
        )
    };
    r.source = image("1.2.0rc6.post3");
    assert!(ran_mtp_configuration(&r));
    // (3 + 1) × 4 clients + 1,024 + 64, rounded up to 64; fp8 runs DeepGEMM (default lane).
    let want = Recipe {
        max_batched_tokens: Some(1152),
        memory_fraction: Some(0.8),
        drafts: Some(3),
        ..Recipe::default()
    };
    assert_eq!(recipe(&r), want);
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    let accepted = accepted_drafts(3, MTP_DRAFT_ACCEPTANCE);
    assert!(y.contains("  nextn: 3\n") && y.contains(&format!("nextn_accepted: {accepted}")), "{y}");
    // `--mtp-acceptance` sets the probability; `--nextn` replaces the recipe's speculation;
    // `--no-recipes` drops it.
    let p = Knobs { mtp_acceptance: Some(0.5), ..Knobs::default() };
    assert!(scenario_yaml(&r, &p, false, None).contains("nextn_accepted: 0.875"));
    let what_if = Knobs { speculation: Some((1, 0.9)), ..Knobs::default() };
    assert!(scenario_yaml(&r, &what_if, false, None).contains("  nextn: 1\n"));
    let plain = Knobs { no_recipes: true, ..Knobs::default() };
    assert!(!scenario_yaml(&r, &plain, false, None).contains("nextn"));
    // fp4 runs TRTLLM-gen experts; under attention DP one draft, CUTLASS, a rank's share of
    // the clients in the budget and the balance the script enables.
    r.precision = "fp4".into();
    assert_eq!(recipe(&r).moe_kernel, Some(MoeKernel::MinLatency));
    (r.concurrency, r.mode) = (256, Mode::Agg { layout: Layout { tp: 1, dp: 8, ..l } });
    let dp = recipe(&r);
    assert_eq!(
        (dp.drafts, dp.moe_kernel, dp.max_batched_tokens, dp.adp_balance),
        (Some(1), None, Some(1152), Some((60, 0)))
    );
    // The plain configurations' image, another GPU or another harness: no speculation.
    r.source = image("1.2.0rc6.post2");
    assert!(!ran_mtp_configuration(&r) && recipe(&r).drafts.is_none());
    r.source = image("1.2.0rc6.post3");
    r.system = "h200_sxm".into();
    assert!(!ran_mtp_configuration(&r));
    r.system = "b200_sxm".into();
    r.source = r.source.replace("source_file=2026-03-25.csv", "source_file=/x/aic-auto-gap-analysis/y.csv");
    assert!(!ran_mtp_configuration(&r));
}

#[test]
fn inferencex_trtllm_gpt_oss_rows_on_b200_replay_with_their_recipe() {
    let l = |tp, dp| Layout { tp, pp: 1, dp, moe_tp: 1, moe_ep: tp * dp, batch: 8 };
    let mut r = row(Mode::Agg { layout: l(2, 1) });
    (r.backend, r.model, r.system, r.precision) =
        ("trtllm".into(), "openai/gpt-oss-120b".into(), "b200_sxm".into(), "fp4".into());
    r.source = "source_file=2026-04-06.csv; model=gpt-oss-120b".into();
    let want = Recipe { max_batched_tokens: Some(20_000), max_sequences: Some(512), ..Recipe::default() };
    assert_eq!(recipe(&r), want);
    // With attention DP, balance at TensorRT-LLM's defaults.
    r.mode = Mode::Agg { layout: l(1, 4) };
    assert_eq!(recipe(&r), Recipe { adp_balance: Some((50, 10)), ..want });
    r.system = "h200_sxm".into();
    assert_eq!(recipe(&r), Recipe::default());
}

/// InferenceX's disaggregated Dynamo SGLang DeepSeek recipes on H100 and H200 pass no
/// `--kv-cache-dtype`: the replay keeps the model's bf16 KV there, and the fp8 KV the replay
/// policy gives fp8 rows elsewhere (Blackwell's recipes pass `fp8_e4m3`) and for other engines.
#[test]
fn inferencex_hopper_sglang_disaggregated_rows_keep_a_bf16_kv_cache() {
    let l = Layout { tp: 8, pp: 1, dp: 1, moe_tp: 8, moe_ep: 1, batch: 1 };
    let mut r =
        row(Mode::Disagg { prefill: l, prefill_workers: Some(1), decode: l, decode_workers: Some(1) });
    (r.backend, r.model, r.system, r.precision) =
        ("sglang".into(), "deepseek-ai/DeepSeek-R1".into(), "h200_sxm".into(), "fp8".into());
    r.source = "source_file=2026-03-25.csv; model=DeepSeek-R1; silicon_concurrency=64".into();
    assert_eq!(recipe(&r), Recipe { kv_cache_bf16: true, ..Recipe::default() });
    let y = scenario_yaml(&r, &Knobs::default(), false, None);
    assert!(y.contains("kv_cache: bf16}"), "{y}");
    let plain = scenario_yaml(&r, &Knobs { no_recipes: true, ..Knobs::default() }, false, None);
    assert!(plain.contains("kv_cache: fp8}"), "{plain}");
    r.system = "h100_sxm".into();
    assert!(recipe(&r).kv_cache_bf16);
    for change in [
        |r: &mut SiliconRow| r.system = "b200_sxm".into(),
        |r: &mut SiliconRow| r.backend = "trtllm".into(),
        |r: &mut SiliconRow| r.model = "Qwen/Qwen3-235B-A22B-FP8".into(),
        |r: &mut SiliconRow| r.source = "source_file=/x/aic-auto-gap-analysis/y.csv".into(),
    ] {
        let mut other = r.clone();
        change(&mut other);
        assert_eq!(recipe(&other), Recipe::default(), "{other:?}");
        assert!(scenario_yaml(&other, &Knobs::default(), false, None).contains("kv_cache: fp8}"));
    }
}
