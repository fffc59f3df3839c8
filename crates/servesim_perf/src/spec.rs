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

/// Weight format of dense linear layers, as the kernel tables name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GemmQuant {
    /// bf16 weights and activations.
    Bf16,
    /// fp8 with per-tensor scales (dynamic activation quantisation).
    Fp8,
    /// fp8 with 128×128 block scales (DeepSeek-style checkpoints).
    Fp8Block,
    /// NVFP4 (fp4 with fp8 block scales).
    Nvfp4,
}

impl GemmQuant {
    /// Storage class.
    #[must_use]
    pub fn dtype(self) -> Dtype {
        match self {
            GemmQuant::Bf16 => Dtype::Bf16,
            GemmQuant::Fp8 | GemmQuant::Fp8Block => Dtype::Fp8,
            GemmQuant::Nvfp4 => Dtype::Fp4,
        }
    }

    /// The `gemm_dtype` the measured tables use.
    #[must_use]
    pub fn table_name(self) -> &'static str {
        match self {
            GemmQuant::Bf16 => "bfloat16",
            GemmQuant::Fp8 => "fp8",
            GemmQuant::Fp8Block => "fp8_block",
            GemmQuant::Nvfp4 => "nvfp4",
        }
    }

    /// The natural format for a storage class (per-tensor fp8, NVFP4).
    #[must_use]
    pub fn of(d: Dtype) -> GemmQuant {
        match d {
            Dtype::Bf16 => GemmQuant::Bf16,
            Dtype::Fp8 => GemmQuant::Fp8,
            Dtype::Fp4 => GemmQuant::Nvfp4,
        }
    }
}

/// Weight format of MoE experts, as the kernel tables name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MoeQuant {
    /// bf16 experts.
    Bf16,
    /// fp8 per-tensor.
    Fp8,
    /// fp8 with block scales.
    Fp8Block,
    /// NVFP4.
    Nvfp4,
    /// MXFP4 weights, bf16 activations (gpt-oss).
    W4a16Mxfp4,
    /// int4 weight-only, group-quantised (Kimi K2 family).
    Int4Wo,
}

impl MoeQuant {
    /// Storage class.
    #[must_use]
    pub fn dtype(self) -> Dtype {
        match self {
            MoeQuant::Bf16 => Dtype::Bf16,
            MoeQuant::Fp8 | MoeQuant::Fp8Block => Dtype::Fp8,
            MoeQuant::Nvfp4 | MoeQuant::W4a16Mxfp4 | MoeQuant::Int4Wo => Dtype::Fp4,
        }
    }

    /// The `moe_dtype` the measured tables use.
    #[must_use]
    pub fn table_name(self) -> &'static str {
        match self {
            MoeQuant::Bf16 => "bfloat16",
            MoeQuant::Fp8 => "fp8",
            MoeQuant::Fp8Block => "fp8_block",
            MoeQuant::Nvfp4 => "nvfp4",
            MoeQuant::W4a16Mxfp4 => "w4a16_mxfp4",
            MoeQuant::Int4Wo => "int4_wo",
        }
    }

    /// Experts in the same format as the dense layers.
    #[must_use]
    pub fn like(g: GemmQuant) -> MoeQuant {
        match g {
            GemmQuant::Bf16 => MoeQuant::Bf16,
            GemmQuant::Fp8 => MoeQuant::Fp8,
            GemmQuant::Fp8Block => MoeQuant::Fp8Block,
            GemmQuant::Nvfp4 => MoeQuant::Nvfp4,
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
    /// Total intermediate size of the always-active shared experts (0 if none).
    pub shared_intermediate_size: u64,
    /// Leading layers with a dense MLP instead (`first_k_dense_replace`), of
    /// [`ModelArch::intermediate_size`].
    pub dense_layers: u32,
}

/// Multi-head latent attention (DeepSeek V2/V3 family).
#[derive(Clone, Debug, PartialEq)]
pub struct Mla {
    /// Rank of the query down-projection (0: queries are projected directly).
    pub q_lora_rank: u64,
    /// Rank of the compressed KV (what the cache stores, with the rope part).
    pub kv_lora_rank: u64,
    /// Per-head query/key dimension without rotary embedding.
    pub qk_nope_head_dim: u64,
    /// Per-head rotary dimension (shared across heads in the cache).
    pub qk_rope_head_dim: u64,
    /// Per-head value dimension.
    pub v_head_dim: u64,
}

/// Linear-attention (gated delta-net) layers of hybrid models (Qwen3.5): fixed-size state,
/// no KV cache.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearAttention {
    /// How many decoder layers use it.
    pub layers: u32,
    /// Key heads.
    pub key_heads: u32,
    /// Dimension of one key head.
    pub key_head_dim: u64,
    /// Value heads.
    pub value_heads: u32,
    /// Dimension of one value head.
    pub value_head_dim: u64,
    /// Width of the short causal convolution over q, k and v (`linear_conv_kernel_dim`);
    /// its last `conv_kernel - 1` inputs are part of each sequence's state.
    pub conv_kernel: u64,
    /// The state matrices' type the checkpoint asks for (`mamba_ssm_dtype`; Qwen3.5: float32).
    pub ssm_dtype: Option<StateDtype>,
}

/// Element type of a hybrid model's recurrent state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateDtype {
    /// 16-bit (bf16 or fp16).
    Half,
    /// 32-bit float.
    Fp32,
}

impl StateDtype {
    /// Bytes per element.
    #[must_use]
    pub fn bytes(self) -> u64 {
        match self {
            StateDtype::Half => 2,
            StateDtype::Fp32 => 4,
        }
    }

    /// The name engines use for it (`bfloat16`, `float32`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            StateDtype::Half => "bfloat16",
            StateDtype::Fp32 => "float32",
        }
    }
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
    /// Key/value heads (GQA); equals `num_heads` for MHA. Unused with MLA.
    pub num_kv_heads: u32,
    /// Dimension of one head (GQA).
    pub head_dim: u64,
    /// Dense MLP intermediate size (dense models, and the dense layers of MoE models).
    pub intermediate_size: u64,
    /// Vocabulary size.
    pub vocab_size: u64,
    /// Whether the LM head shares the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Longest context the model supports.
    pub max_position_embeddings: u64,
    /// Mixture-of-experts layers, if any.
    pub moe: Option<Moe>,
    /// Multi-head latent attention, if the model uses it instead of GQA.
    pub mla: Option<Mla>,
    /// Sliding-window attention: `(window tokens, layers that use it)`.
    pub sliding_window: Option<(u64, u32)>,
    /// Linear-attention layers of a hybrid model.
    pub linear_attention: Option<LinearAttention>,
    /// Sparse attention: keys each query attends to (DeepSeek V3.2 / GLM-5 indexer top-k).
    pub sparse_attention_topk: Option<u64>,
    /// Softmax attention's output is gated by a sigmoid of a second query-sized projection
    /// (`attn_output_gate`, Qwen3-Next and Qwen3.5): the query projection is twice as wide.
    pub attn_output_gate: bool,
    /// Format of the checkpoint's dense linear weights.
    pub gemm_quant: GemmQuant,
    /// Format of the checkpoint's experts.
    pub moe_quant: MoeQuant,
    /// Storage class of the dense linear weights (`gemm_quant.dtype()`).
    pub weight_dtype: Dtype,
    /// KV-cache format the engines pick by default for this checkpoint.
    pub default_kv_dtype: Dtype,
}

impl ModelArch {
    /// Layers with softmax attention (and a KV cache).
    #[must_use]
    pub fn attention_layers(&self) -> u32 {
        self.num_layers - self.linear_attention.as_ref().map_or(0, |l| l.layers.min(self.num_layers))
    }

    /// Layers with an MoE feed-forward.
    #[must_use]
    pub fn moe_layers(&self) -> u32 {
        self.moe.as_ref().map_or(0, |m| self.num_layers - m.dense_layers.min(self.num_layers))
    }

    /// Attention projection parameters of one softmax-attention layer.
    #[must_use]
    pub fn attention_params(&self) -> u64 {
        let h = self.hidden_size;
        let heads = u64::from(self.num_heads);
        match &self.mla {
            Some(m) => {
                let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
                let q = if m.q_lora_rank > 0 {
                    h * m.q_lora_rank + m.q_lora_rank * heads * qk
                } else {
                    h * heads * qk
                };
                let kv = h * (m.kv_lora_rank + m.qk_rope_head_dim)
                    + m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim);
                q + kv + heads * m.v_head_dim * h
            }
            None => {
                let q = heads * self.head_dim;
                let kv = u64::from(self.num_kv_heads) * self.head_dim;
                let gate = if self.attn_output_gate { q } else { 0 };
                h * (q + gate) + 2 * h * kv + q * h
            }
        }
    }

    /// Projection parameters of one linear-attention layer (0 for models without them).
    #[must_use]
    pub fn linear_attention_params(&self) -> u64 {
        self.linear_attention.as_ref().map_or(0, |l| {
            let h = self.hidden_size;
            let k = u64::from(l.key_heads) * l.key_head_dim;
            let v = u64::from(l.value_heads) * l.value_head_dim;
            // q, k, v and output-gate projections in, beta/alpha gates, output projection.
            h * (2 * k + 2 * v) + h * 2 * u64::from(l.value_heads) + v * h
        })
    }

    /// Dense-format linear parameters of the whole model (attention, dense MLPs, shared
    /// experts, routers); experts are counted by [`ModelArch::expert_params`].
    #[must_use]
    pub fn dense_linear_params(&self) -> u64 {
        let h = self.hidden_size;
        let attn = self.attention_params() * u64::from(self.attention_layers())
            + self.linear_attention_params() * u64::from(self.num_layers - self.attention_layers());
        let mlp = match &self.moe {
            Some(m) => {
                3 * h * self.intermediate_size * u64::from(m.dense_layers.min(self.num_layers))
                    + (3 * h * m.shared_intermediate_size + h * u64::from(m.num_experts))
                        * u64::from(self.moe_layers())
            }
            None => 3 * h * self.intermediate_size * u64::from(self.num_layers),
        };
        attn + mlp
    }

    /// Routed-expert parameters of the whole model.
    #[must_use]
    pub fn expert_params(&self) -> u64 {
        self.moe.as_ref().map_or(0, |m| {
            3 * self.hidden_size
                * m.expert_intermediate_size
                * u64::from(m.num_experts)
                * u64::from(self.moe_layers())
        })
    }

    /// Linear parameters one token touches in a forward pass (MoE: only its routed experts).
    #[must_use]
    pub fn active_linear_params(&self) -> u64 {
        self.dense_linear_params()
            + self.moe.as_ref().map_or(0, |m| {
                3 * self.hidden_size
                    * m.expert_intermediate_size
                    * u64::from(m.experts_per_token)
                    * u64::from(self.moe_layers())
            })
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
        self.dense_linear_params() + self.expert_params() + self.embedding_params()
    }
}
