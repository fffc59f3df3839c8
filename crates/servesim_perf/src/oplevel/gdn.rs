//! Gated DeltaNet kernels of a hybrid model's linear-attention layers (Qwen3.5), timed from
//! AIConfigurator's `gdn_perf` tables ([`Family::Gdn`]) with a roofline fallback.
//!
//! A prompt chunk runs a causal convolution over its q, k and v channels and the chunked
//! delta-rule scan; a decode step runs the convolution's one-token update and the recurrence,
//! which reads and writes each sequence's whole state. The tables are keyed by heads per
//! GPU, as the engines shard them under tensor parallelism; a step's prefill chunks are looked
//! up as a batch of equal chunks of their mean length (both kernels run packed variable-length
//! sequences, whose work is about linear in their tokens).

use alloc::rc::Rc;
use alloc::string::{String, ToString};

use servesim_core::timing::RankLoad;

use crate::spec::{Dtype, StateDtype};
use crate::tables::{Family, Grid, Provenance, Source};

use super::{OpLevelTimer, Tally};

/// Tokens per chunk of the chunked delta-rule scan: `chunk_size = 64` in flash-linear-attention's
/// `chunk_gated_delta_rule`, which vLLM and SGLang run; the scan writes the state at each
/// chunk boundary.
const SCAN_CHUNK_TOKENS: f64 = 64.0;

/// The measured grid of each of [`Family::GDN_KERNELS`], in that order.
pub(super) type GdnGrids = [Option<Rc<Grid>>; 4];

/// One GPU's shape of a linear-attention layer, for the speeds of light.
#[derive(Clone, Copy)]
struct Shape {
    /// Key and value widths per GPU (heads × head dim).
    k: f64,
    v: f64,
    /// Value heads per GPU (one gate and one beta each per token).
    v_heads: f64,
    /// One sequence's state matrices on this GPU, bytes.
    state_bytes: f64,
    /// Key and value head dims.
    hk: f64,
    hv: f64,
    conv: f64,
}

impl Shape {
    /// Speed-of-light seconds of `kernel` at grid coordinates `c` (batch, tokens a sequence).
    fn sol(&self, kernel: usize, c: &[f64], peak: f64, bw: f64) -> f64 {
        let (b, s) = (c[0], c[1]);
        let tokens = b * s;
        let channels = 2.0 * self.k + self.v;
        let (flops, bytes) = match kernel {
            // Causal convolution: each channel's `conv` taps, bf16 in and out.
            0 => (2.0 * tokens * channels * self.conv, tokens * channels * 2.0 * 2.0),
            // Chunked scan: the state applied and updated per token, the chunk's own
            // attention; q, k, v, o, gate and beta read or written once, the state at every
            // chunk boundary.
            1 => (
                tokens
                    * self.v_heads
                    * (4.0 * self.hk * self.hv + 4.0 * SCAN_CHUNK_TOKENS * (self.hk + self.hv)),
                tokens * (2.0 * self.k + 2.0 * self.v + 2.0 * self.v_heads) * 2.0
                    + b * libm::ceil(s / SCAN_CHUNK_TOKENS) * self.state_bytes,
            ),
            // Convolution update: each sequence's window read and written.
            2 => (2.0 * b * channels * self.conv, b * channels * self.conv * 2.0 * 2.0),
            // Recurrence: each sequence's state read and written.
            _ => (
                4.0 * b * self.v_heads * self.hk * self.hv,
                b * (2.0 * self.state_bytes + (2.0 * self.k + 2.0 * self.v) * 2.0),
            ),
        };
        (flops / peak).max(bytes / bw)
    }
}

impl OpLevelTimer {
    /// The measured grids of this model's linear-attention layers at this tensor-parallel
    /// size: the slice of its hidden size and heads per GPU, else (the kernels do not read
    /// the hidden size) the slice of the same heads whose hidden size is nearest.
    pub(super) fn gdn_grids(&self) -> GdnGrids {
        let mut out = GdnGrids::default();
        let (Some(la), Some(t)) = (&self.s.model.linear_attention, self.db.table(Family::Gdn)) else {
            return out;
        };
        let tp = self.tp();
        let heads = [
            u64::from(la.key_heads.div_ceil(tp).max(1)).to_string(),
            la.key_head_dim.to_string(),
            u64::from(la.value_heads.div_ceil(tp).max(1)).to_string(),
            la.value_head_dim.to_string(),
            la.conv_kernel.to_string(),
        ];
        let hidden = self.s.model.hidden_size;
        for (slot, kernel) in out.iter_mut().zip(Family::GDN_KERNELS) {
            let same = |k: &[String]| k[0] == kernel && k[2..].iter().eq(heads.iter());
            let nearest = t
                .slices()
                .filter(|(k, _)| same(k))
                .min_by_key(|(k, _)| k[1].parse::<u64>().map_or(u64::MAX, |h| h.abs_diff(hidden)))
                .map(|(k, _)| k.clone());
            *slot = nearest.and_then(|k| {
                let key: alloc::vec::Vec<&str> = k.iter().map(String::as_str).collect();
                t.slice_rc(&key).cloned()
            });
        }
        out
    }

    fn gdn_shape(&self) -> Option<Shape> {
        let la = self.s.model.linear_attention.as_ref()?;
        let tp = f64::from(self.tp());
        #[allow(clippy::cast_precision_loss)]
        let (hk, hv) = (la.key_head_dim as f64, la.value_head_dim as f64);
        let v_heads = f64::from(la.value_heads) / tp;
        let state_elem = match la.ssm_dtype {
            Some(StateDtype::Fp32) => 4.0,
            Some(StateDtype::Half) | None => 2.0,
        };
        #[allow(clippy::cast_precision_loss)]
        Some(Shape {
            k: f64::from(la.key_heads) / tp * hk,
            v: v_heads * hv,
            v_heads,
            state_bytes: v_heads * hk * hv * state_elem,
            hk,
            hv,
            conv: la.conv_kernel as f64,
        })
    }

    /// Seconds of one GDN kernel (index into [`Family::GDN_KERNELS`]) of one
    /// layer at `batch` sequences of `seq_len` tokens each.
    #[must_use]
    pub fn gdn_kernel(&self, kernel: usize, batch: f64, seq_len: f64) -> (f64, Source) {
        let Some(shape) = self.gdn_shape() else { return (0.0, Source::Measured) };
        let (peak, bw) = (self.s.hardware.peak_flops(Dtype::Bf16), self.bw());
        let sol = |c: &[f64]| shape.sol(kernel, c, peak, bw);
        let x = [batch, seq_len.max(1.0)];
        if let Some(g) = self.gdn.get(kernel).and_then(Option::as_deref) {
            if let Some((ms, src)) = g.lookup(&x, Family::Gdn.scales(), sol) {
                return (ms / 1e3, src);
            }
        }
        (sol(&x) / self.s.constants.memory_efficiency + self.s.constants.kernel_latency_s, Source::Roofline)
    }

    /// Seconds of one rank's GDN kernels in a step, over this stage's linear-attention
    /// layers: the prefill chunks' convolution and scan (lookups counted into `prov`), then
    /// the decode requests' convolution update and recurrence (memoised by batch, counted
    /// with the memo's tally). A decode-only load's seconds are `0.0 +` the memo's: a decode
    /// run adds the memo in the same way, bit for bit.
    #[allow(clippy::cast_precision_loss)] // Token counts are far below 2^52.
    pub(super) fn gdn_secs(&mut self, r: &RankLoad, prov: &mut Provenance) -> f64 {
        if self.s.model.linear_attention.is_none() {
            return 0.0;
        }
        let mut prefill = 0.0;
        if !r.prefill.is_empty() {
            let b = r.prefill.len() as f64;
            let tokens: f64 = r.prefill.iter().map(|c| f64::from(c.new_tokens)).sum();
            for kernel in [0, 1] {
                let (secs, src) = self.gdn_kernel(kernel, b, tokens / b);
                prov.count(src);
                prefill += secs;
            }
            prefill *= self.gdn_layers();
        }
        let decode = if r.decode_requests > 0 { self.memo(5, u64::from(r.decode_requests)) } else { 0.0 };
        prefill + decode
    }

    /// Linear-attention layers on this pipeline stage.
    fn gdn_layers(&self) -> f64 {
        let m = &self.s.model;
        f64::from(m.num_layers - m.attention_layers()) / f64::from(self.s.parallelism.pipeline.max(1))
    }

    /// The decode kernels of `seqs` requests over this stage's linear-attention layers, and
    /// their lookups (as attention).
    #[allow(clippy::cast_precision_loss)] // Request counts are far below 2^52.
    pub(super) fn gdn_decode_part(&mut self, seqs: u64) -> (f64, Tally) {
        let mut tally = Tally::default();
        let mut per_layer = 0.0;
        if self.s.model.linear_attention.is_some() && seqs > 0 {
            for kernel in [2, 3] {
                let (secs, src) = self.gdn_kernel(kernel, seqs as f64, 1.0);
                tally.count(const { Self::kind("attention") }, src);
                per_layer += secs;
            }
        }
        (per_layer * self.gdn_layers(), tally)
    }
}
