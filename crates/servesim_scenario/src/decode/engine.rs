//! The `engine` block: model, hardware, backend, quantization and speculative decoding; each
//! worker role's own settings are decoded in [`super::role`].

use servesim_core::engine::Backend;
use servesim_perf::spec::{Dtype, GemmQuant, MoeQuant};

use crate::config::{
    ContextLength, EngineConfig, KvEvictionPolicy, KvTransferConfig, Mode, Quantization, SpeculationConfig,
    TimingKind, Workers,
};
use crate::diag::{boolean, choice, number_in, string, u32_in, u64_min, Cx, Fields};
use crate::node::{Node, Value};

use super::role::{decode_kv_transfer, decode_workers, RoleDefaults};
use super::MAX_TOKENS;

fn dtype(node: &Node, path: &str, cx: &mut Cx) -> Option<Dtype> {
    match choice(node, path, cx, &["bf16", "bfloat16", "fp16", "float16", "fp8", "fp4", "nvfp4", "mxfp4"])? {
        "bf16" | "bfloat16" | "fp16" | "float16" => Some(Dtype::Bf16),
        "fp8" => Some(Dtype::Fp8),
        _ => Some(Dtype::Fp4),
    }
}

const ENGINE_KEYS: &[&str] = &[
    "mode",
    "model",
    "hardware",
    "backend",
    "backend_version",
    "context_length",
    "enable_chunked_prefill",
    "speculation",
    "nextn",
    "nextn_accepted",
    "kv_transfer",
    "workers",
    "afd",
    "quantization",
    "kv_eviction_policy",
];

pub(super) fn decode_engine(node: &Node, path: &str, cx: &mut Cx) -> Option<EngineConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let mode = match f.take("mode") {
        Some((n, p)) => match choice(n, &p, cx, &["aggregated", "disaggregated", "afd"])? {
            "aggregated" => Some(Mode::Aggregated),
            "disaggregated" => Some(Mode::Disaggregated),
            _ => {
                cx.unsupported(&p, n, "attention-FFN disaggregation (afd) is not estimated by servesim yet");
                None
            }
        },
        None => Some(Mode::Aggregated),
    };
    let required = |f: &mut Fields, key: &str, what: &str, cx: &mut Cx| match f.take(key) {
        Some((n, p)) => string(n, &p, cx),
        None => {
            cx.schema(&crate::diag::join(path, key), node, format!("required: {what}"));
            None
        }
    };
    let model = required(&mut f, "model", "a model id such as Qwen/Qwen3-32B-FP8", cx);
    let hardware = required(&mut f, "hardware", "a GPU id such as h200_sxm", cx);
    let backend = match f.take("backend") {
        Some((n, p)) => Backend::from_name(choice(n, &p, cx, &Backend::NAMES)?),
        None => Some(Backend::Vllm),
    };
    let backend_version = f.take("backend_version").and_then(|(n, p)| string(n, &p, cx));
    let context_length = match f.take("context_length") {
        Some((n, p)) => match &n.value {
            Value::Str(s) if s == "max" => Some(ContextLength::Max),
            _ => u32_in(n, &p, cx, 1, MAX_TOKENS).map(ContextLength::Tokens),
        },
        None => Some(ContextLength::Max),
    };
    let chunked = match f.take("enable_chunked_prefill") {
        Some((n, p)) => {
            let v = boolean(n, &p, cx);
            if v == Some(false) && backend == Some(Backend::Sglang) {
                cx.domain(
                    &p,
                    n,
                    "SGLang always chunks long prompts; enable_chunked_prefill: false is rejected for sglang",
                );
            }
            v
        }
        None => Some(true),
    };
    let kv_transfer = match f.take("kv_transfer") {
        Some((n, p)) => {
            if mode == Some(Mode::Aggregated) {
                cx.schema(&p, n, "kv_transfer applies to engine.mode: disaggregated");
            }
            decode_kv_transfer(n, &p, cx)
        }
        None => Some(KvTransferConfig::default()),
    };
    let speculation = decode_speculation(&mut f, backend, cx);
    if let Some((n, p)) = f.take("afd") {
        cx.unsupported(&p, n, "'afd' is not simulated by servesim yet");
    }
    let eviction = f.take("kv_eviction_policy");
    let quantization = match f.take("quantization") {
        Some((n, p)) => decode_quantization(n, &p, cx),
        None => Some(Quantization::default()),
    };
    let backend_for_defaults = backend.unwrap_or(Backend::Vllm);
    let workers = match f.take("workers") {
        Some((n, p)) => {
            let defaults =
                RoleDefaults { backend: backend_for_defaults, mode: mode.unwrap_or(Mode::Aggregated) };
            decode_workers(n, &p, cx, defaults)
        }
        None => {
            cx.schema(&crate::diag::join(path, "workers"), node, "required: e.g. workers: {aggregated: {}}");
            None
        }
    };
    let kv_eviction_policy = match eviction {
        Some((n, p)) => decode_eviction(n, &p, cx, backend, mode, workers.as_ref()),
        None => Some(KvEvictionPolicy::Lru),
    };
    if let (Some(spec), Some(w)) = (&speculation, &workers) {
        let key = if matches!(spec, SpeculationConfig::DraftLayers { .. }) { "nextn" } else { "speculation" };
        for (name, role) in w.roles() {
            if *spec != SpeculationConfig::Off && role.scheduler.sglang.mixed_chunk {
                // SGLang's server arguments turn mixed chunks off under any draft algorithm.
                cx.domain(
                    &crate::diag::join(path, key),
                    node,
                    format!(
                        "SGLang turns --enable-mixed-chunk off with speculative decoding; drop engine.workers.{name}.scheduler.enable_mixed_chunk or the drafts"
                    ),
                );
            }
            if *spec != SpeculationConfig::Off && matches!(role.timing.kind, TimingKind::Fpm(_)) {
                cx.unsupported(
                    &crate::diag::join(path, key),
                    node,
                    format!(
                        "speculative decoding with FPM timing (engine.workers.{name}.timing.forward_model: fpm): FPM cells time forward passes without drafts; use forward_model: op_level"
                    ),
                );
            }
        }
    }
    f.finish(cx, ENGINE_KEYS, "");
    Some(EngineConfig {
        mode: mode?,
        model: model?,
        hardware: hardware?,
        backend: backend?,
        backend_version,
        context_length: context_length?,
        enable_chunked_prefill: chunked?,
        quantization: quantization?,
        workers: workers?,
        kv_transfer: kv_transfer?,
        speculation: speculation?,
        kv_eviction_policy: kv_eviction_policy?,
    })
}

/// `kv_eviction_policy`, refused where AISimulate's Belady oracle does not apply: SGLang's
/// radix cache, P/D, host offload, and pools without prefix caching (nothing to keep).
fn decode_eviction(
    node: &Node,
    path: &str,
    cx: &mut Cx,
    backend: Option<Backend>,
    mode: Option<Mode>,
    workers: Option<&Workers>,
) -> Option<KvEvictionPolicy> {
    if choice(node, path, cx, &["lru", "belady"])? == "lru" {
        return Some(KvEvictionPolicy::Lru);
    }
    let before = cx.diags.len();
    if backend == Some(Backend::Sglang) {
        cx.unsupported(
            path,
            node,
            "Belady eviction is simulated for vLLM and TensorRT-LLM block pools; SGLang's radix cache evicts by LRU here",
        );
    }
    if mode == Some(Mode::Disaggregated) {
        cx.unsupported(
            path,
            node,
            "Belady eviction is simulated for aggregated workers only, as in AISimulate",
        );
    }
    for (name, role) in workers.map(Workers::roles).into_iter().flatten() {
        if role.kv_cache.host_offload.is_some() {
            cx.unsupported(
                path,
                node,
                format!("Belady eviction with engine.workers.{name}.kv_cache.host_offload is not simulated (AISimulate rejects it too)"),
            );
        }
        if !role.kv_cache.prefix_caching {
            cx.domain(
                path,
                node,
                format!("Belady eviction ranks cached blocks, and engine.workers.{name}.kv_cache.prefix_caching is false"),
            );
        }
    }
    (cx.diags.len() == before).then_some(KvEvictionPolicy::Belady)
}

/// Most draft tokens a round (AISimulate's bound, as the core keeps it).
#[allow(clippy::cast_possible_truncation)] // 5.
const MAX: u32 = servesim_core::engine::MAX_DRAFT_TOKENS as u32;

/// `nextn` + `nextn_accepted` (MTP, EAGLE) or `speculation` (vLLM's n-gram lookup), REF §1.2.
fn decode_speculation(f: &mut Fields, backend: Option<Backend>, cx: &mut Cx) -> Option<SpeculationConfig> {
    let nextn = f.take("nextn").map(|(n, p)| (u32_in(n, &p, cx, 0, MAX), n, p));
    let accepted = f.take("nextn_accepted");
    let ngram = f.take("speculation");
    // Drafts asked for: an invalid nextn is reported on its own, not also as a conflict.
    let drafts = matches!(nextn, Some((Some(k), ..)) if k > 0);
    let mut out = Some(SpeculationConfig::Off);
    match (nextn, accepted) {
        (Some((Some(0), ..)), None) | (None, None) => {}
        (Some((Some(0), n, p)), Some(_)) => {
            cx.schema(&p, n, "nextn is 0 (no drafts), so nextn_accepted does not apply");
            out = None;
        }
        (Some((Some(k), ..)), Some((a, pa))) => {
            let mean = number_in(a, &pa, cx, 0.0, f64::from(k));
            out = mean.map(|accepted| SpeculationConfig::DraftLayers { nextn: k, accepted });
        }
        (Some((Some(_), n, p)), None) => {
            cx.schema(
                &p,
                n,
                "nextn_accepted is required with nextn > 0: the mean number of drafts accepted per round (e.g. nextn: 3, nextn_accepted: 2.2)",
            );
            out = None;
        }
        (None, Some((a, pa))) => {
            cx.schema(&pa, a, "nextn_accepted needs nextn (the draft tokens per round)");
            out = None;
        }
        (Some((None, ..)), _) => out = None,
    }
    if let Some((n, p)) = ngram {
        if drafts {
            cx.schema(&p, n, "speculation (n-gram lookup) and nextn (MTP/EAGLE drafts) are exclusive");
            return None;
        }
        // Another speculation error was reported already.
        out.as_ref()?;
        if backend.is_some_and(|b| b != Backend::Vllm) {
            cx.domain(
                &p,
                n,
                "speculation (n-gram lookup, draft model) is vLLM's here; use nextn for MTP or EAGLE drafts",
            );
            return None;
        }
        return decode_speculation_block(n, &p, cx);
    }
    out
}

const SPECULATION_KEYS: &[&str] = &["kind", "model", "num_speculative_tokens", "acceptance_rates", "seed"];

/// `speculation: {kind: ngram | draft_model, model (draft_model), num_speculative_tokens,
/// acceptance_rates, seed}`.
fn decode_speculation_block(node: &Node, path: &str, cx: &mut Cx) -> Option<SpeculationConfig> {
    let mut f = Fields::of(node, path, cx)?;
    let kind = match f.take("kind") {
        Some((n, p)) => choice(n, &p, cx, &["ngram", "draft_model"]),
        None => {
            cx.schema(&crate::diag::join(path, "kind"), node, "required: ngram or draft_model");
            None
        }
    };
    let model = match (f.take("model"), kind) {
        (Some((n, p)), Some("draft_model")) => string(n, &p, cx).map(Some),
        (Some((n, p)), Some(_)) => {
            cx.schema(&p, n, "model names the draft model of kind: draft_model; n-gram lookup has none");
            None
        }
        (None, Some("draft_model")) => {
            cx.schema(
                &crate::diag::join(path, "model"),
                node,
                "required for kind: draft_model: the draft model's id, e.g. meta-llama/Llama-3.1-8B-Instruct",
            );
            None
        }
        (_, _) => Some(None),
    };
    let count = match f.take("num_speculative_tokens") {
        Some((n, p)) => u32_in(n, &p, cx, 1, MAX).map(|k| (k, n, p)),
        None => {
            cx.schema(
                &crate::diag::join(path, "num_speculative_tokens"),
                node,
                format!("required: 1 to {MAX}"),
            );
            None
        }
    };
    let rates = match f.take("acceptance_rates") {
        Some((n, p)) => match &n.value {
            Value::Seq(items) => {
                let rates: Vec<Option<f64>> = items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| number_in(x, &format!("{p}[{i}]"), cx, 0.0, 1.0))
                    .collect();
                rates.into_iter().collect::<Option<Vec<f64>>>().map(|r| (r, n, p))
            }
            other => {
                cx.schema(&p, n, format!("expected a list of acceptance rates, found {}", other.kind()));
                None
            }
        },
        None => {
            cx.schema(
                &crate::diag::join(path, "acceptance_rates"),
                node,
                "required: one conditional acceptance rate per draft position, e.g. [0.8, 0.6, 0.4]",
            );
            None
        }
    };
    let seed = match f.take("seed") {
        Some((n, p)) => u64_min(n, &p, cx, 0),
        // AISimulate's default.
        None => Some(42),
    };
    f.finish(cx, SPECULATION_KEYS, "");
    let (_, model) = (kind?, model?);
    let ((k, ..), (rates, rn, rp)) = (count?, rates?);
    if rates.len() != k as usize {
        cx.domain(
            &rp,
            rn,
            format!("has {} rates for {k} speculative tokens: give one per draft position", rates.len()),
        );
        return None;
    }
    let seed = seed?;
    Some(match model {
        Some(model) => SpeculationConfig::DraftModel { model, rates, seed },
        None => SpeculationConfig::Ngram { rates, seed },
    })
}

fn gemm_quant(node: &Node, path: &str, cx: &mut Cx) -> Option<GemmQuant> {
    match choice(
        node,
        path,
        cx,
        &["bf16", "bfloat16", "fp16", "float16", "fp8", "fp8_block", "fp4", "nvfp4"],
    )? {
        "bf16" | "bfloat16" | "fp16" | "float16" => Some(GemmQuant::Bf16),
        "fp8" => Some(GemmQuant::Fp8),
        "fp8_block" => Some(GemmQuant::Fp8Block),
        _ => Some(GemmQuant::Nvfp4),
    }
}

fn moe_quant(node: &Node, path: &str, cx: &mut Cx) -> Option<MoeQuant> {
    match choice(
        node,
        path,
        cx,
        &[
            "bf16",
            "bfloat16",
            "fp16",
            "float16",
            "fp8",
            "fp8_block",
            "fp4",
            "nvfp4",
            "mxfp4",
            "w4a16_mxfp4",
            "int4",
            "int4_wo",
        ],
    )? {
        "bf16" | "bfloat16" | "fp16" | "float16" => Some(MoeQuant::Bf16),
        "fp8" => Some(MoeQuant::Fp8),
        "fp8_block" => Some(MoeQuant::Fp8Block),
        "fp4" | "nvfp4" => Some(MoeQuant::Nvfp4),
        "mxfp4" | "w4a16_mxfp4" => Some(MoeQuant::W4a16Mxfp4),
        _ => Some(MoeQuant::Int4Wo),
    }
}

fn decode_quantization(node: &Node, path: &str, cx: &mut Cx) -> Option<Quantization> {
    let mut f = Fields::of(node, path, cx)?;
    let gemm = f.take("gemm").map(|(n, p)| gemm_quant(n, &p, cx));
    let moe = f.take("moe").map(|(n, p)| moe_quant(n, &p, cx));
    let kv = f.take("kv_cache").map(|(n, p)| dtype(n, &p, cx));
    f.finish(cx, &["gemm", "moe", "kv_cache"], "");
    Some(Quantization {
        gemm: match gemm {
            Some(g) => Some(g?),
            None => None,
        },
        moe: match moe {
            Some(g) => Some(g?),
            None => None,
        },
        kv_cache: match kv {
            Some(k) => Some(k?),
            None => None,
        },
    })
}
