//! Hardware and model descriptions: the numbers the timing and memory models consume.
//! They are filled in from catalog files by the scenario layer; nothing here is hard-coded
//! per product.

use alloc::string::String;

/// Numeric formats of weights, activations and KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dtype {
    /// 16-bit brain float (also stands for fp16: same size and tensor-core rate).
    Bf16,
    /// 8-bit float (E4M3).
    Fp8,
    /// 4-bit float (NVFP4 / MXFP4).
    Fp4,
}

impl Dtype {
    /// Storage size in bytes per element (fp4 is half a byte, kept exact as a fraction).
    #[must_use]
    pub fn bytes(self) -> f64 {
        match self {
            Dtype::Bf16 => 2.0,
            Dtype::Fp8 => 1.0,
            Dtype::Fp4 => 0.5,
        }
    }

    /// Canonical lower-case name (`bf16`, `fp8`, `fp4`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Bf16 => "bf16",
            Dtype::Fp8 => "fp8",
            Dtype::Fp4 => "fp4",
        }
    }
}

/// One GPU type.
#[derive(Clone, Debug, PartialEq)]
pub struct Hardware {
    /// Catalog id, e.g. `h200_sxm`.
    pub id: String,
    /// HBM capacity per GPU (bytes).
    pub hbm_bytes: u64,
    /// HBM bandwidth per GPU (bytes/s).
    pub hbm_bytes_per_s: f64,
    /// Dense tensor-core peak at bf16 (FLOP/s).
    pub bf16_flops: f64,
    /// Dense tensor-core peak at fp8 (FLOP/s); `None` when unsupported.
    pub fp8_flops: Option<f64>,
    /// Dense tensor-core peak at fp4 (FLOP/s); `None` when unsupported.
    pub fp4_flops: Option<f64>,
    /// GPUs in one scale-up domain (NVLink/xGMI island).
    pub gpus_per_node: u32,
    /// Scale-up (intra-node) bandwidth per GPU, one direction (bytes/s).
    pub scale_up_bytes_per_s: f64,
    /// Scale-out (inter-node) bandwidth per GPU, one direction (bytes/s).
    pub scale_out_bytes_per_s: f64,
    /// Board power (W).
    pub tdp_w: f64,
}

impl Hardware {
    /// Dense peak for GEMMs in `dtype`; formats without tensor-core support run at the
    /// next wider supported rate.
    #[must_use]
    pub fn peak_flops(&self, dtype: Dtype) -> f64 {
        match dtype {
            Dtype::Bf16 => self.bf16_flops,
            Dtype::Fp8 => self.fp8_flops.unwrap_or(self.bf16_flops),
            Dtype::Fp4 => self.fp4_flops.or(self.fp8_flops).unwrap_or(self.bf16_flops),
        }
    }
}

/// Mixture-of-experts feed-forward layers.
#[derive(Clone, Debug, PartialEq)]
pub struct Moe {
    /// Routed experts.
    pub num_experts: u32,
    /// Experts each token is routed to.
    pub experts_per_token: u32,
    /// Intermediate size of one expert.
    pub expert_intermediate_size: u64,
    /// Always-active shared experts (each of `expert_intermediate_size`, or as configured).
    pub shared_intermediate_size: u64,
}

/// A transformer's architecture, as its public `config.json` gives it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelArch {
    /// Catalog id (Hugging Face id).
    pub id: String,
    /// Residual width.
    pub hidden_size: u64,
    /// Decoder layers.
    pub num_layers: u32,
    /// Query heads.
    pub num_heads: u32,
    /// Key/value heads (GQA); equals `num_heads` for MHA.
    pub num_kv_heads: u32,
    /// Dimension of one head.
    pub head_dim: u64,
    /// Dense MLP intermediate size (0 when every layer is MoE).
    pub intermediate_size: u64,
    /// Vocabulary size.
    pub vocab_size: u64,
    /// Whether the LM head shares the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Longest context the model supports.
    pub max_position_embeddings: u64,
    /// Mixture-of-experts layers, if any.
    pub moe: Option<Moe>,
    /// Format of the checkpoint's linear-layer weights.
    pub weight_dtype: Dtype,
    /// KV-cache format the engines pick by default for this checkpoint.
    pub default_kv_dtype: Dtype,
}

impl ModelArch {
    /// Parameters of one layer's linear maps (attention projections and MLP or experts).
    #[must_use]
    pub fn layer_linear_params(&self) -> u64 {
        let h = self.hidden_size;
        let q = u64::from(self.num_heads) * self.head_dim;
        let kv = u64::from(self.num_kv_heads) * self.head_dim;
        let attn = h * q + 2 * h * kv + q * h;
        let ffn = match &self.moe {
            // Gated MLP: gate and up (h x I) plus down (I x h) per expert, plus the router.
            Some(m) => {
                3 * h * m.expert_intermediate_size * u64::from(m.num_experts)
                    + 3 * h * m.shared_intermediate_size
                    + h * u64::from(m.num_experts)
            }
            None => 3 * h * self.intermediate_size,
        };
        attn + ffn
    }

    /// Parameters one token touches in one layer's linear maps (MoE: only routed experts).
    #[must_use]
    pub fn layer_active_linear_params(&self) -> u64 {
        match &self.moe {
            Some(m) => {
                let h = self.hidden_size;
                let q = u64::from(self.num_heads) * self.head_dim;
                let kv = u64::from(self.num_kv_heads) * self.head_dim;
                h * q
                    + 2 * h * kv
                    + q * h
                    + 3 * h * m.expert_intermediate_size * u64::from(m.experts_per_token)
                    + 3 * h * m.shared_intermediate_size
            }
            None => self.layer_linear_params(),
        }
    }

    /// Embedding plus LM-head parameters.
    #[must_use]
    pub fn embedding_params(&self) -> u64 {
        let one = self.vocab_size * self.hidden_size;
        if self.tie_word_embeddings {
            one
        } else {
            2 * one
        }
    }

    /// All parameters (norms omitted: under 0.01% of any model here).
    #[must_use]
    pub fn total_params(&self) -> u64 {
        self.layer_linear_params() * u64::from(self.num_layers) + self.embedding_params()
    }
}
