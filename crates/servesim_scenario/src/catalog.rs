//! Hardware and model catalogs: parsed from data files (embedded at build time, or supplied
//! by the user), never hard-coded.

use servesim_perf::memory::GIB;
use servesim_perf::spec::{Dtype, Hardware, ModelArch, Moe};

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
        };
        for (id, text) in files::MODELS {
            c.models.push(parse_model(id, text)?);
        }
        Ok(c)
    }

    /// The model with this id (case-insensitive).
    #[must_use]
    pub fn model(&self, id: &str) -> Option<&ModelArch> {
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
            let hbm = num("hbm_gib", &mut cx);
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
            let (Some(hbm), Some(bw), Some(bf16), Some(up), Some(out_bw), Some(tdp), Some(gpn)) =
                (hbm, bw, bf16, up, out_bw, tdp, gpn)
            else {
                return Err(CatalogError {
                    file: file.into(),
                    message: format!(
                        "{id}: needs hbm_gib, hbm_tb_per_s, bf16_tflops, gpus_per_node, scale_up_gb_per_s, scale_out_gb_per_s, tdp_w"
                    ),
                });
            };
            out.push(Hardware {
                id: id.clone(),
                hbm_bytes: (hbm * GIB as f64) as u64,
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
/// # Errors
/// A [`CatalogError`] naming the missing or malformed field.
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
    let hidden = need("hidden_size")?;
    let layers = u32::try_from(need("num_hidden_layers")?).unwrap_or(u32::MAX);
    let heads = u32::try_from(need("num_attention_heads")?).unwrap_or(u32::MAX);
    let kv_heads = get("num_key_value_heads").map_or(heads, |k| u32::try_from(k).unwrap_or(u32::MAX));
    let head_dim = get("head_dim").unwrap_or(hidden / u64::from(heads.max(1)));
    let experts = get("num_experts").or_else(|| get("num_local_experts")).or_else(|| get("n_routed_experts"));
    let moe = match experts {
        Some(n) if n > 1 => {
            let per_tok = need("num_experts_per_tok")?;
            let expert_size = get("moe_intermediate_size").or_else(|| get("intermediate_size")).unwrap_or(0);
            let shared = get("shared_expert_intermediate_size")
                .or_else(|| get("n_shared_experts").map(|s| s * expert_size))
                .unwrap_or(0);
            Some(Moe {
                num_experts: u32::try_from(n).unwrap_or(u32::MAX),
                experts_per_token: u32::try_from(per_tok).unwrap_or(u32::MAX),
                expert_intermediate_size: expert_size,
                shared_intermediate_size: shared,
            })
        }
        _ => None,
    };
    let quant =
        v.get("quantization_config").and_then(|q| q.get("quant_method")).and_then(serde_json::Value::as_str);
    let weight_dtype = match quant {
        Some("fp8") => Dtype::Fp8,
        Some("mxfp4" | "nvfp4" | "modelopt_fp4") => Dtype::Fp4,
        Some(other) => {
            return Err(CatalogError {
                file,
                message: format!("unsupported quantization_config.quant_method '{other}'"),
            });
        }
        None => Dtype::Bf16,
    };
    Ok(ModelArch {
        id: id.to_string(),
        hidden_size: hidden,
        num_layers: layers,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        intermediate_size: if moe.is_some() { 0 } else { need("intermediate_size")? },
        vocab_size: need("vocab_size")?,
        tie_word_embeddings: v
            .get("tie_word_embeddings")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false),
        max_position_embeddings: get("max_position_embeddings").unwrap_or(u64::from(u32::MAX)),
        moe,
        weight_dtype,
        // FP8 checkpoints are served with an FP8 KV cache (AISimulate's captured
        // Qwen3-32B-FP8 run reports 131,072 bytes/token = one byte per element).
        default_kv_dtype: if weight_dtype == Dtype::Bf16 { Dtype::Bf16 } else { Dtype::Fp8 },
    })
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
