//! Hardware and model catalogs: parsed from data files (embedded at build time, or supplied
//! by the user), never hard-coded.

use servesim_perf::memory::GIB;
use servesim_perf::spec::{
    Dtype, GemmQuant, Hardware, LinearAttention, Mla, ModelArch, Moe, MoeQuant, StateDtype,
};

use crate::diag::{number, string, suggest, u32_in, Cx, Fields};
use crate::node::{self, Value};

mod files {
    include!(concat!(env!("OUT_DIR"), "/catalog_files.rs"));
}

/// A catalog file is malformed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct CatalogError {
    /// Which file.
    pub file: String,
    /// What is wrong.
    pub message: String,
}

/// The GPUs and models servesim knows.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    /// GPU types.
    pub hardware: Vec<Hardware>,
    /// Model architectures.
    pub models: Vec<ModelArch>,
    /// Other ids of catalog models: (alias, catalog id).
    pub aliases: Vec<(String, String)>,
}

impl Catalog {
    /// The catalog shipped in `data/catalog`.
    ///
    /// # Errors
    /// When a shipped file is malformed (a build defect; tests guard against it).
    pub fn builtin() -> Result<Catalog, CatalogError> {
        let mut c = Catalog {
            hardware: parse_hardware("data/catalog/hardware.yaml", files::HARDWARE)?,
            models: Vec::new(),
            aliases: parse_aliases("data/catalog/models/aliases.yaml", files::ALIASES)?,
        };
        for (id, text) in files::MODELS {
            c.models.push(parse_model(id, text)?);
        }
        Ok(c)
    }

    /// The model with this id (case-insensitive).
    #[must_use]
    pub fn model(&self, id: &str) -> Option<&ModelArch> {
        let id =
            self.aliases.iter().find(|(a, _)| a.eq_ignore_ascii_case(id)).map_or(id, |(_, t)| t.as_str());
        self.models.iter().find(|m| m.id.eq_ignore_ascii_case(id))
    }

    /// The GPU with this id (case-insensitive).
    #[must_use]
    pub fn gpu(&self, id: &str) -> Option<&Hardware> {
        self.hardware.iter().find(|h| h.id.eq_ignore_ascii_case(id))
    }

    /// A "did you mean" hint among model ids.
    #[must_use]
    pub fn suggest_model(&self, id: &str) -> Option<String> {
        let ids: Vec<&str> = self.models.iter().map(|m| m.id.as_str()).collect();
        suggest(id, &ids).map(str::to_string).or_else(|| {
            // Also match on the name after the organisation.
            let tail = id.rsplit('/').next().unwrap_or(id).to_ascii_lowercase();
            self.models.iter().find(|m| m.id.to_ascii_lowercase().ends_with(&tail)).map(|m| m.id.clone())
        })
    }

    /// What to say of a model id the catalog lacks: the closest id, and every known one.
    #[must_use]
    pub fn unknown_model(&self, what: &str, id: &str) -> String {
        let hint = self.suggest_model(id).map(|s| format!(" (did you mean '{s}'?)")).unwrap_or_default();
        let known: Vec<&str> = self.models.iter().map(|m| m.id.as_str()).collect();
        format!("unknown {what} '{id}'{hint}; known: {}", known.join(", "))
    }
}

/// Parses the hardware catalog YAML.
///
/// # Errors
/// A [`CatalogError`] naming the file, entry and field.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
pub fn parse_hardware(file: &str, text: &str) -> Result<Vec<Hardware>, CatalogError> {
    let root =
        node::parse(text, None).map_err(|e| CatalogError { file: file.into(), message: e.to_string() })?;
    let mut cx = Cx::default();
    let mut out = Vec::new();
    if let Value::Map(entries) = &root.value {
        for (id, _, entry) in entries {
            let Some(mut f) = Fields::of(entry, id, &mut cx) else { continue };
            let mut num = |k: &str, cx: &mut Cx| f.take(k).and_then(|(n, p)| number(n, &p, cx));
            let hbm_gib = num("hbm_gib", &mut cx);
            let hbm_exact = num("hbm_bytes", &mut cx);
            let bw = num("hbm_tb_per_s", &mut cx);
            let bf16 = num("bf16_tflops", &mut cx);
            let fp8 = num("fp8_tflops", &mut cx);
            let fp4 = num("fp4_tflops", &mut cx);
            let up = num("scale_up_gb_per_s", &mut cx);
            let out_bw = num("scale_out_gb_per_s", &mut cx);
            let tdp = num("tdp_w", &mut cx);
            let gpn = f.take("gpus_per_node").and_then(|(n, p)| u32_in(n, &p, &mut cx, 1, 1024));
            let _label = f.take("name").and_then(|(n, p)| string(n, &p, &mut cx));
            f.finish(
                &mut cx,
                &[
                    "name",
                    "hbm_gib",
                    "hbm_bytes",
                    "hbm_tb_per_s",
                    "bf16_tflops",
                    "fp8_tflops",
                    "fp4_tflops",
                    "gpus_per_node",
                    "scale_up_gb_per_s",
                    "scale_out_gb_per_s",
                    "tdp_w",
                ],
                "",
            );
            if let Some(d) = cx.diags.first() {
                return Err(CatalogError { file: file.into(), message: d.to_string() });
            }
            let hbm = hbm_exact.or(hbm_gib.map(|g| g * GIB as f64));
            let (Some(hbm), Some(bw), Some(bf16), Some(up), Some(out_bw), Some(tdp), Some(gpn)) =
                (hbm, bw, bf16, up, out_bw, tdp, gpn)
            else {
                return Err(CatalogError {
                    file: file.into(),
                    message: format!(
                        "{id}: needs hbm_gib or hbm_bytes, hbm_tb_per_s, bf16_tflops, gpus_per_node, scale_up_gb_per_s, scale_out_gb_per_s, tdp_w"
                    ),
                });
            };
            out.push(Hardware {
                id: id.clone(),
                hbm_bytes: hbm as u64,
                hbm_bytes_per_s: bw * 1e12,
                bf16_flops: bf16 * 1e12,
                fp8_flops: fp8.map(|x| x * 1e12),
                fp4_flops: fp4.map(|x| x * 1e12),
                gpus_per_node: gpn,
                scale_up_bytes_per_s: up * 1e9,
                scale_out_bytes_per_s: out_bw * 1e9,
                tdp_w: tdp,
            });
        }
    } else {
        return Err(CatalogError { file: file.into(), message: "expected a mapping of GPU ids".into() });
    }
    if let Some(d) = cx.diags.first() {
        return Err(CatalogError { file: file.into(), message: d.to_string() });
    }
    Ok(out)
}

/// Parses a Hugging Face `config.json` into a model architecture.
///
/// Understands dense GQA models (Llama, Qwen3), MoE (`num_experts` | `num_local_experts` |
/// `n_routed_experts`, shared experts, `first_k_dense_replace`), MLA (`kv_lora_rank` and
/// friends), sliding-window layers (`layer_types`/`sliding_window`), linear-attention hybrids
/// (`layer_types` with `linear_attention`), DSA sparse attention (`index_topk`), and the
/// checkpoint formats `fp8` (per-tensor or 128×128 blocks), `mxfp4`, `modelopt` FP8/NVFP4
/// and `compressed-tensors` int4 experts.
///
/// # Errors
/// A [`CatalogError`] naming the missing or malformed field.
#[allow(clippy::too_many_lines)]
pub fn parse_model(id: &str, text: &str) -> Result<ModelArch, CatalogError> {
    let file = format!("{id}.json");
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| CatalogError {
        file: file.clone(),
        message: format!("line {}, column {}: {e}", e.line(), e.column()),
    })?;
    // Multimodal configs nest the language model's fields.
    let v = v.get("text_config").cloned().unwrap_or(v);
    let get = |k: &str| v.get(k).and_then(serde_json::Value::as_u64);
    let need = |k: &str| {
        get(k).ok_or_else(|| CatalogError {
            file: file.clone(),
            message: format!("missing or non-integer field '{k}'"),
        })
    };
    let to_u32 = |x: u64| u32::try_from(x).unwrap_or(u32::MAX);
    let hidden = need("hidden_size")?;
    let layers = to_u32(need("num_hidden_layers")?);
    let heads = to_u32(need("num_attention_heads")?);
    let kv_heads = get("num_key_value_heads").map_or(heads, to_u32);
    let head_dim = get("head_dim").unwrap_or(hidden / u64::from(heads.max(1)));
    let layer_types: Vec<&str> = v
        .get("layer_types")
        .and_then(serde_json::Value::as_array)
        .map(|a| a.iter().filter_map(serde_json::Value::as_str).collect())
        .unwrap_or_default();
    let count = |kind: &str| to_u32(layer_types.iter().filter(|t| **t == kind).count() as u64);
    let experts = get("num_experts").or_else(|| get("num_local_experts")).or_else(|| get("n_routed_experts"));
    let moe = match experts {
        Some(n) if n > 1 => {
            let per_tok =
                get("num_experts_per_tok").or_else(|| get("experts_per_token")).ok_or_else(|| {
                    CatalogError {
                        file: file.clone(),
                        message: "MoE config without 'num_experts_per_tok'".into(),
                    }
                })?;
            let expert_size = get("moe_intermediate_size").or_else(|| get("intermediate_size")).unwrap_or(0);
            let shared = get("shared_expert_intermediate_size")
                .or_else(|| get("n_shared_experts").map(|s| s * expert_size))
                .unwrap_or(0);
            Some(Moe {
                num_experts: to_u32(n),
                experts_per_token: to_u32(per_tok),
                expert_intermediate_size: expert_size,
                shared_intermediate_size: shared,
                dense_layers: get("first_k_dense_replace").map_or(0, to_u32),
            })
        }
        _ => None,
    };
    let mla = get("kv_lora_rank").filter(|r| *r > 0).map(|kv_lora_rank| Mla {
        q_lora_rank: get("q_lora_rank").unwrap_or(0),
        kv_lora_rank,
        qk_nope_head_dim: get("qk_nope_head_dim").unwrap_or(128),
        qk_rope_head_dim: get("qk_rope_head_dim").unwrap_or(64),
        v_head_dim: get("v_head_dim").unwrap_or(128),
    });
    let sliding_window = match get("sliding_window") {
        Some(w) if w > 0 => {
            let n = count("sliding_attention");
            // Without layer_types every layer slides (Mistral-style).
            Some((w, if layer_types.is_empty() { layers } else { n })).filter(|(_, n)| *n > 0)
        }
        _ => None,
    };
    let linear_attention = match count("linear_attention") {
        0 => None,
        n => Some(LinearAttention {
            layers: n,
            key_heads: get("linear_num_key_heads").map_or(0, to_u32),
            key_head_dim: get("linear_key_head_dim").unwrap_or(0),
            value_heads: get("linear_num_value_heads").map_or(0, to_u32),
            value_head_dim: get("linear_value_head_dim").unwrap_or(0),
            // Gated DeltaNet's convolution is 4 wide when the config does not say
            // (`linear_conv_kernel_dim` in Qwen3-Next and Qwen3.5).
            conv_kernel: get("linear_conv_kernel_dim").unwrap_or(4),
            ssm_dtype: match v.get("mamba_ssm_dtype").and_then(serde_json::Value::as_str) {
                Some("float32") => Some(StateDtype::Fp32),
                Some("bfloat16" | "float16") => Some(StateDtype::Half),
                _ => None,
            },
        }),
    };
    let (gemm_quant, moe_quant) = quantization(&file, v.get("quantization_config"))?;
    let weight_dtype = gemm_quant.dtype();
    let kv_fp8 = v
        .get("quantization_config")
        .and_then(|q| q.get("kv_cache_quant_algo"))
        .and_then(serde_json::Value::as_str)
        .is_some_and(|a| a.eq_ignore_ascii_case("fp8"));
    Ok(ModelArch {
        id: id.to_string(),
        hidden_size: hidden,
        num_layers: layers,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        intermediate_size: match &moe {
            // MoE models use it only for their leading dense layers.
            Some(m) if m.dense_layers == 0 => 0,
            _ => need("intermediate_size")?,
        },
        vocab_size: need("vocab_size")?,
        tie_word_embeddings: v
            .get("tie_word_embeddings")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false),
        max_position_embeddings: get("max_position_embeddings").unwrap_or(u64::from(u32::MAX)),
        moe,
        mla,
        sliding_window,
        linear_attention,
        sparse_attention_topk: get("index_topk"),
        attn_output_gate: v.get("attn_output_gate").and_then(serde_json::Value::as_bool).unwrap_or(false),
        gemm_quant,
        moe_quant,
        weight_dtype,
        // Quantised checkpoints are served with an FP8 KV cache (AISimulate's captured
        // Qwen3-32B-FP8 run reports 131,072 bytes/token = one byte per element).
        default_kv_dtype: if weight_dtype == Dtype::Bf16 && !kv_fp8 { Dtype::Bf16 } else { Dtype::Fp8 },
    })
}

/// Dense and expert weight formats from a `quantization_config`.
fn quantization(file: &str, q: Option<&serde_json::Value>) -> Result<(GemmQuant, MoeQuant), CatalogError> {
    let Some(q) = q else { return Ok((GemmQuant::Bf16, MoeQuant::Bf16)) };
    let s = |k: &str| q.get(k).and_then(serde_json::Value::as_str);
    let method = s("quant_method").unwrap_or("");
    let bad = |what: String| CatalogError { file: file.to_string(), message: what };
    Ok(match method {
        "fp8" => {
            let g = if q.get("weight_block_size").is_some() { GemmQuant::Fp8Block } else { GemmQuant::Fp8 };
            (g, MoeQuant::like(g))
        }
        // gpt-oss: MXFP4 experts; attention, router, embeddings stay bf16.
        "mxfp4" => (GemmQuant::Bf16, MoeQuant::W4a16Mxfp4),
        "modelopt" => match s("quant_algo").unwrap_or("") {
            a if a.eq_ignore_ascii_case("nvfp4") => (GemmQuant::Nvfp4, MoeQuant::Nvfp4),
            a if a.eq_ignore_ascii_case("fp8") => (GemmQuant::Fp8, MoeQuant::Fp8),
            other => return Err(bad(format!("unsupported quantization_config.quant_algo '{other}'"))),
        },
        "compressed-tensors" => {
            let w = q.pointer("/config_groups/group_0/weights");
            let bits = w.and_then(|w| w.get("num_bits")).and_then(serde_json::Value::as_u64);
            let ty = w.and_then(|w| w.get("type")).and_then(serde_json::Value::as_str);
            match (bits, ty) {
                // Kimi K2 family: int4 routed experts, everything else bf16 (the `ignore` list).
                (Some(4), Some("int")) => (GemmQuant::Bf16, MoeQuant::Int4Wo),
                (Some(8), Some("float")) => (GemmQuant::Fp8, MoeQuant::Fp8),
                _ => return Err(bad(format!("unsupported compressed-tensors scheme ({bits:?}-bit {ty:?})"))),
            }
        }
        other => return Err(bad(format!("unsupported quantization_config.quant_method '{other}'"))),
    })
}

/// Parses `aliases.yaml`: `alias: catalog id` pairs.
///
/// # Errors
/// A [`CatalogError`] when the file is not a mapping of strings.
pub fn parse_aliases(file: &str, text: &str) -> Result<Vec<(String, String)>, CatalogError> {
    let root =
        node::parse(text, None).map_err(|e| CatalogError { file: file.into(), message: e.to_string() })?;
    let mut out = Vec::new();
    match &root.value {
        Value::Map(entries) => {
            for (alias, _, target) in entries {
                match &target.value {
                    Value::Str(t) => out.push((alias.clone(), t.clone())),
                    _ => {
                        return Err(CatalogError {
                            file: file.into(),
                            message: format!("{alias}: expected a model id"),
                        })
                    }
                }
            }
        }
        Value::Null => {}
        _ => {
            return Err(CatalogError {
                file: file.into(),
                message: "expected a mapping of alias: model id".into(),
            })
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_loads() {
        let c = Catalog::builtin().unwrap();
        assert!(c.gpu("h200_sxm").is_some());
        assert!(c.gpu("H200_SXM").is_some());
        let m = c.model("Qwen/Qwen3-32B-FP8").unwrap();
        assert_eq!(m.weight_dtype, Dtype::Fp8);
        assert_eq!(m.total_params(), 32_761_446_400);
        assert_eq!(c.suggest_model("qwen3-32b-fp8").as_deref(), Some("Qwen/Qwen3-32B-FP8"));
    }

    #[test]
    fn malformed_files_name_the_problem() {
        let e = parse_model("x/y", "{\"hidden_size\": 8}").unwrap_err();
        assert_eq!(e.file, "x/y.json");
        assert!(e.message.contains("num_hidden_layers"));
        let e = parse_model("x/y", "{").unwrap_err();
        assert!(e.message.contains("line 1"));
        let e = parse_hardware("hw.yaml", "a100:\n  hbm_gib: lots\n").unwrap_err();
        assert!(e.message.contains("a100.hbm_gib"), "{e}");
    }
}
#[cfg(test)]
mod published_sizes {
    /// Parameter counts from the catalog agree with the model cards (within 1%): a check that
    /// MoE, MLA, hybrid and sliding-window configs are read field by field correctly.
    #[test]
    fn total_and_active_parameters_match_model_cards() {
        let c = super::Catalog::builtin().unwrap();
        // (id, total B, active B) from each model card.
        for (id, total, active) in [
            ("deepseek-ai/DeepSeek-V3", 671.0, 37.0),
            ("openai/gpt-oss-120b", 116.8, 5.1),
            ("openai/gpt-oss-20b", 20.9, 3.6),
            ("Qwen/Qwen3-235B-A22B", 235.0, 22.0),
            ("Qwen/Qwen3-30B-A3B", 30.5, 3.3),
            ("Qwen/Qwen3.5-397B-A17B", 397.0, 17.0),
            ("Qwen/Qwen3.5-27B", 27.0, 27.0),
            ("meta-llama/Llama-3.1-405B-Instruct", 405.0, 405.0),
            ("moonshotai/Kimi-K2.5", 1040.0, 32.0),
            ("zai-org/GLM-5", 744.0, 40.0),
            ("MiniMaxAI/MiniMax-M2.5", 229.0, 10.0),
        ] {
            let m = c.model(id).unwrap();
            #[allow(clippy::cast_precision_loss)]
            let t = m.total_params() as f64 / 1e9;
            assert!((t / total - 1.0).abs() < 0.015, "{id}: {t:.1}B total vs {total}B");
            // Active counts on cards differ in whether embeddings count; check the order.
            #[allow(clippy::cast_precision_loss)]
            let a = (m.active_linear_params() + m.embedding_params()) as f64 / 1e9;
            assert!(a > active * 0.85 && a < active * 1.25, "{id}: {a:.1}B active vs {active}B");
        }
        assert_eq!(c.model("zhipuai/GLM-5").map(|m| m.id.as_str()), Some("zai-org/GLM-5"));
        assert_eq!(
            c.model("meta-llama/Llama-3.1-70B").map(|m| m.id.as_str()),
            Some("meta-llama/Llama-3.1-70B-Instruct")
        );
    }
}
