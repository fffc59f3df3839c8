//! servesim's performance models: how long a forward step takes and how much memory a
//! deployment has for KV cache.
//!
//! - [`spec`]: hardware and model-architecture descriptions (filled from catalog data).
//! - [`memory`]: per-GPU memory plan and KV capacity, matching AISimulate's published figures.
//! - [`fpm`]: whole-forward-pass step times from AISimulate FPM tables (never extrapolated).
//! - [`roofline`]: a first-principles [`StepTimer`](servesim_core::timing::StepTimer), the
//!   fallback wherever no measured kernel table applies.
//!
//! `#![no_std]` + `alloc`, like the core: no IO and no serialisation here.
#![no_std]
#![warn(missing_docs)]

extern crate alloc;

pub mod draft;
pub mod fpm;
pub mod memory;
pub mod oplevel;
pub mod roofline;
pub mod spec;
pub mod tables;

#[cfg(test)]
mod tests {
    use super::memory::{
        plan, sglang_default_fraction, sglang_gpu_defaults, FractionOf, MemoryInputs, Parallelism,
        SglangReserve, GIB,
    };
    use super::roofline::RooflineTimer;
    use super::spec::{Dtype, GemmQuant, Hardware, ModelArch, MoeQuant};
    use alloc::string::String;
    use alloc::vec;
    use servesim_core::timing::{PrefillChunk, RankLoad, StepTimer};

    fn qwen3_32b_fp8() -> ModelArch {
        ModelArch {
            id: String::from("Qwen/Qwen3-32B-FP8"),
            hidden_size: 5120,
            num_layers: 64,
            num_heads: 64,
            num_kv_heads: 8,
            head_dim: 128,
            intermediate_size: 25600,
            vocab_size: 151_936,
            tie_word_embeddings: false,
            max_position_embeddings: 40960,
            moe: None,
            mla: None,
            sliding_window: None,
            linear_attention: None,
            sparse_attention_topk: None,
            attn_output_gate: false,
            gemm_quant: GemmQuant::Fp8Block,
            moe_quant: MoeQuant::Fp8Block,
            weight_dtype: Dtype::Fp8,
            default_kv_dtype: Dtype::Fp8,
        }
    }

    /// H200 SXM as the catalog describes it (shared by the crate's tests).
    pub(crate) fn h200() -> Hardware {
        Hardware {
            id: String::from("h200_sxm"),
            hbm_bytes: 141 * GIB,
            hbm_bytes_per_s: 4.8e12,
            bf16_flops: 989e12,
            fp8_flops: Some(1978e12),
            fp4_flops: None,
            gpus_per_node: 8,
            scale_up_bytes_per_s: 450e9,
            scale_out_bytes_per_s: 50e9,
            tdp_w: 700.0,
        }
    }

    /// AISimulate 0.12.0's captured memory detail (REF §2.1): Qwen3-32B-FP8 on one H200,
    /// vLLM, block 64. Every published figure is reproduced exactly.
    #[test]
    fn memory_plan_matches_aisimulate_published_example() {
        let p = plan(
            &qwen3_32b_fp8(),
            &h200(),
            &MemoryInputs {
                parallelism: Parallelism::SINGLE,
                weight_dtype: Dtype::Fp8,
                expert_dtype: Dtype::Fp8,
                kv_dtype: Dtype::Fp8,
                memory_fraction: 0.9,
                fraction_of: FractionOf::Total,
                max_batched_tokens: 8192,
                block_size: 64,
                cuda_graph_reserved_bytes: 0,
            },
        )
        .unwrap();
        assert_eq!(p.total_gpu_capacity_bytes, 151_397_597_184);
        assert_eq!(p.weights_bytes, 34_317_271_040);
        assert_eq!(p.activations_bytes, 1_476_395_008);
        assert_eq!(p.runtime_overhead_bytes, 3_758_096_384);
        assert_eq!(p.kv_cache_bytes, 96_706_075_033);
        assert_eq!(p.kv_bytes_per_token, 131_072);
        assert_eq!(p.kv_tokens, 737_808);
        assert_eq!(p.kv_blocks, 11_528);
    }

    #[test]
    fn larger_tp_never_needs_more_memory_per_gpu() {
        let mut last = u64::MAX;
        for tp in [1, 2, 4, 8] {
            let p = plan(
                &qwen3_32b_fp8(),
                &h200(),
                &MemoryInputs {
                    parallelism: Parallelism { tensor: tp, ..Parallelism::SINGLE },
                    weight_dtype: Dtype::Fp8,
                    expert_dtype: Dtype::Fp8,
                    kv_dtype: Dtype::Fp8,
                    memory_fraction: 0.9,
                    fraction_of: FractionOf::Total,
                    max_batched_tokens: 8192,
                    block_size: 64,
                    cuda_graph_reserved_bytes: 0,
                },
            )
            .unwrap();
            let used = p.weights_bytes + p.activations_bytes + p.kv_bytes_per_token * 1000;
            assert!(used <= last);
            last = used;
        }
    }

    /// TensorRT-LLM's fraction is of the memory left after the fixed costs, so a deployment
    /// whose weights nearly fill the GPUs keeps a usable KV cache where a fraction of the
    /// whole HBM would leave almost none.
    #[test]
    fn a_fraction_of_free_memory_applies_after_the_fixed_costs() {
        let inputs = |fraction_of| MemoryInputs {
            parallelism: Parallelism::SINGLE,
            weight_dtype: Dtype::Fp8,
            expert_dtype: Dtype::Fp8,
            kv_dtype: Dtype::Fp8,
            memory_fraction: 0.9,
            fraction_of,
            max_batched_tokens: 8192,
            block_size: 64,
            cuda_graph_reserved_bytes: 0,
        };
        let mut small = h200();
        small.hbm_bytes = 48 * GIB;
        let total = plan(&qwen3_32b_fp8(), &small, &inputs(FractionOf::Total)).unwrap();
        let free = plan(&qwen3_32b_fp8(), &small, &inputs(FractionOf::Free)).unwrap();
        let fixed = free.weights_bytes
            + free.activations_bytes
            + free.runtime_overhead_bytes
            + free.comm_overhead_bytes
            + free.cuda_graph_reserved_bytes;
        // 0.9 x (HBM - fixed) against 0.9 x HBM - fixed: 0.1 x fixed more.
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let expected = (0.9 * (small.hbm_bytes - fixed) as f64) as u64;
        assert_eq!(free.kv_cache_bytes, expected);
        assert!(free.kv_cache_bytes > total.kv_cache_bytes + fixed / 11, "{free:?} vs {total:?}");
        // With nothing left after the fixed costs it still refuses, naming the rule.
        small.hbm_bytes = 30 * GIB;
        let e = plan(&qwen3_32b_fp8(), &small, &inputs(FractionOf::Free)).unwrap_err();
        assert!(e.message.contains("the KV cache gets 0.9 of what is left"), "{}", e.message);
    }

    /// SGLang's fraction holds the weights and the KV pool only: the KV gets the fraction of
    /// the HBM less the weights, whatever the activations and overheads are.
    #[test]
    fn an_sglang_fraction_holds_weights_and_kv_alone() {
        let inputs = MemoryInputs {
            parallelism: Parallelism::SINGLE,
            weight_dtype: Dtype::Fp8,
            expert_dtype: Dtype::Fp8,
            kv_dtype: Dtype::Fp8,
            memory_fraction: 0.88,
            fraction_of: FractionOf::WeightsAndKv,
            max_batched_tokens: 8192,
            block_size: 1,
            cuda_graph_reserved_bytes: 0,
        };
        let p = plan(&qwen3_32b_fp8(), &h200(), &inputs).unwrap();
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let expected = (0.88 * h200().hbm_bytes as f64 - p.weights_bytes as f64) as u64;
        assert_eq!(p.kv_cache_bytes, expected);
        let total =
            plan(&qwen3_32b_fp8(), &h200(), &MemoryInputs { fraction_of: FractionOf::Total, ..inputs });
        let fixed_but_weights = p.activations_bytes + p.runtime_overhead_bytes + p.comm_overhead_bytes;
        assert_eq!(total.unwrap().kv_cache_bytes + fixed_but_weights, p.kv_cache_bytes);
        // Weights beyond the fraction refuse, naming the rule.
        let mut small = h200();
        small.hbm_bytes = 30 * GIB;
        let e = plan(&qwen3_32b_fp8(), &small, &inputs).unwrap_err();
        assert!(
            e.message.contains("0.88 x 30.0 GiB HBM for weights and KV alone) but weights"),
            "{}",
            e.message
        );
    }

    /// SGLang's default fraction, worked by hand from `_handle_gpu_memory_settings` (MiB).
    #[test]
    fn sglang_derives_its_default_fraction_from_the_gpu() {
        let r = |gib: u64, chunk, tp_size, attention_data, draft_mib| {
            sglang_default_fraction(&SglangReserve {
                hbm_bytes: gib * GIB,
                chunked_prefill_tokens: chunk,
                tp_size,
                pipeline: 1,
                attention_data,
                draft_mib,
            })
        };
        // 80 GiB, TP1: 512 + 8192 x 1.5 + 256 x 2 + 128 = 13,440 of 81,920.
        assert!((r(80, 8192, 1, 1, 0.0) - 0.836).abs() < 1e-12);
        // 180 GiB, TP4: 512 + 12,288 + 512 x 2 + 512 = 14,336 of 184,320.
        assert!((r(180, 8192, 4, 1, 0.0) - 0.922).abs() < 1e-12);
        // A draft model's 2,048 more: 16,384.
        assert!((r(180, 8192, 4, 1, 2048.0) - 0.911).abs() < 1e-12);
        // Attention DP over 8 GPUs: + 512 x 8 x 3 + 512 x 8 x 1.5 = 33,280.
        assert!((r(180, 8192, 8, 8, 0.0) - 0.819).abs() < 1e-12);
        // On 141 GiB, tp_size 8 (dp 8) captures 512 slots: 512 + 12,288 + 1,024 + 1,024 +
        // 12,288 + 6,144 = 33,280 of 144,384.
        assert!((r(141, 8192, 8, 8, 0.0) - 0.770).abs() < 1e-12);
        // 24 GiB, TP1, a 2,048 chunk: 512 + 3,072 + 24 x 2 + 128 = 3,760, no 10 GiB floor.
        assert!((r(24, 2048, 1, 1, 0.0) - 0.847).abs() < 1e-12);
        // 80 GiB with a small chunk: the 10 GiB floor.
        assert!((r(80, 1024, 1, 1, 0.0) - 0.875).abs() < 1e-12);
    }

    /// SGLang's chunk and CUDA-graph defaults by GPU memory, before and from 0.5.3.
    #[test]
    fn sglang_sizes_its_chunk_and_graphs_by_the_gpu() {
        let d = |gib: u64, tp, recent| {
            let g = sglang_gpu_defaults(gib * GIB, tp, recent);
            (g.chunked_prefill_size, g.cuda_graph_max_bs)
        };
        // From 0.5.3: RTX-class, A10/4090, L40S, H100, H200, B200/MI300X.
        assert_eq!(d(16, 1, true), (2048, 8));
        assert_eq!(d(24, 1, true), (2048, 24));
        assert_eq!(d(24, 4, true), (2048, 80));
        assert_eq!(d(48, 1, true), (4096, 32));
        assert_eq!(d(48, 8, true), (4096, 160));
        assert_eq!(d(80, 2, true), (8192, 256));
        assert_eq!(d(141, 8, true), (8192, 512));
        assert_eq!(d(180, 1, true), (16_384, 512));
        assert_eq!(d(192, 8, true), (16_384, 512));
        // Before: the chunk has three tiers, the graphs stop at 160 (256 from TP4).
        assert_eq!(d(24, 1, false), (2048, 8));
        assert_eq!(d(48, 1, false), (8192, 160));
        assert_eq!(d(141, 2, false), (8192, 160));
        assert_eq!(d(141, 4, false), (8192, 256));
        assert_eq!(d(180, 8, false), (16_384, 256));
        // The derived fraction reserves the larger chunk: on 180 GiB at TP8, 512 + 16,384 x
        // 1.5 + 512 x 2 + 1,024 = 27,136 of 184,320.
        let f = sglang_default_fraction(&SglangReserve {
            hbm_bytes: 180 * GIB,
            chunked_prefill_tokens: d(180, 8, true).0,
            tp_size: 8,
            pipeline: 1,
            attention_data: 1,
            draft_mib: 0.0,
        });
        assert!((f - 0.853).abs() < 1e-12, "{f}");
    }

    #[test]
    fn model_that_does_not_fit_explains_why() {
        let mut small = h200();
        small.hbm_bytes = 24 * GIB;
        let e = plan(
            &qwen3_32b_fp8(),
            &small,
            &MemoryInputs {
                parallelism: Parallelism::SINGLE,
                weight_dtype: Dtype::Fp8,
                expert_dtype: Dtype::Fp8,
                kv_dtype: Dtype::Fp8,
                memory_fraction: 0.9,
                fraction_of: FractionOf::Total,
                max_batched_tokens: 8192,
                block_size: 64,
                cuda_graph_reserved_bytes: 0,
            },
        )
        .unwrap_err();
        assert!(e.message.contains("weights 31.96 GiB"), "{}", e.message);
    }

    #[test]
    fn more_tokens_never_faster() {
        let mut t = RooflineTimer::new(qwen3_32b_fp8(), h200(), Parallelism::SINGLE, Dtype::Fp8, Dtype::Fp8);
        let mut last = 0;
        for n in [1u32, 16, 128, 1024, 4096, 8192] {
            let load = RankLoad {
                prefill: vec![PrefillChunk { new_tokens: n, context_tokens: 0 }],
                ..RankLoad::default()
            };
            let d = t.step_time(&[load]).unwrap().as_ns();
            assert!(d >= last, "{n} tokens took {d} ns < {last}");
            last = d;
        }
        let mut last = 0;
        for b in [1u32, 8, 64, 256] {
            let load =
                RankLoad { decode_requests: b, decode_kv_tokens: u64::from(b) * 2048, ..RankLoad::default() };
            let d = t.step_time(&[load]).unwrap().as_ns();
            assert!(d >= last);
            last = d;
        }
    }

    #[test]
    fn slowest_rank_sets_the_step() {
        let mut t = RooflineTimer::new(qwen3_32b_fp8(), h200(), Parallelism::SINGLE, Dtype::Fp8, Dtype::Fp8);
        let light = RankLoad { decode_requests: 1, decode_kv_tokens: 100, ..RankLoad::default() };
        let heavy = RankLoad {
            prefill: vec![PrefillChunk { new_tokens: 4096, context_tokens: 0 }],
            ..RankLoad::default()
        };
        let both = t.step_time(&[light.clone(), heavy.clone()]).unwrap();
        assert_eq!(both, t.step_time(&[heavy]).unwrap());
        assert!(both > t.step_time(&[light]).unwrap());
    }
}
