//! Each worker role's KV tiers beyond GPU memory as the core simulates them: the host tier
//! (G2) per rank or the pool its ranks share, the storage tier (G3) behind it, and HiCache's
//! prefetching from storage; from `kv_cache.host_offload` and `kv_cache.g3_offload`.

use std::cell::RefCell;
use std::rc::Rc;

use servesim_core::engine::Backend;
use servesim_core::host::{
    G3Spec, G3Store, HostPoolSpec, HostSpec, HostWrites, PrefetchPolicy, StoragePrefetch,
};
use servesim_core::sim::G3Attach;
use servesim_core::units::SimDur;

use super::{role, Prepared, PreparedRole};
use crate::config::{G3Scope, HicachePrefetchPolicy};

impl Prepared {
    /// `role`'s host KV tier per attention-DP rank (`kv_cache.host_offload`), if it has one:
    /// blocks of `block_size` tokens of one GPU's KV shard, each GPU moving its own shard over
    /// its own link.
    #[must_use]
    pub fn host_spec(&self, role: &PreparedRole) -> Option<HostSpec> {
        let h = role.config.kv_cache.host_offload?;
        let block = u64::from(role.config.kv_cache.block_size);
        let block_bytes = block * role.memory.kv_bytes_per_token.max(1);
        let backend = self.config.engine.backend;
        let gpus = role::host_size_gpus(backend, role.config.parallelism.tensor);
        let mut capacity_blocks =
            role::host_capacity_blocks(h.size, block_bytes, gpus, u64::from(role.blocks_per_rank));
        let mut block_bytes = block_bytes;
        if backend == Backend::Sglang {
            // HiCache's tier is a radix tree of tokens: its blocks are tokens.
            capacity_blocks = u32::try_from(u64::from(capacity_blocks) * block).unwrap_or(u32::MAX);
            block_bytes = role.memory.kv_bytes_per_token.max(1);
        }
        Some(HostSpec {
            capacity_blocks,
            block_bytes,
            d2h_bytes_per_s: link_bytes_per_s(h.d2h_bandwidth_gbps),
            h2d_bytes_per_s: link_bytes_per_s(h.h2d_bandwidth_gbps),
            first_byte: SimDur::from_ms_f64(h.latency_to_first_byte_ms),
            writes: match backend {
                Backend::TrtLlm => HostWrites::OnEviction,
                Backend::Sglang if h.selective => HostWrites::WriteThroughSelective,
                Backend::Sglang if h.write_back => HostWrites::WriteBack,
                Backend::Sglang => HostWrites::WriteThrough,
                Backend::Vllm => HostWrites::AfterCompute,
            },
        })
    }

    /// The pool `role`'s host tiers share when `host_offload.scope` is `cluster_shared`: its
    /// capacity (`num_host_blocks` in all, or `size_gib` in all) and its own bandwidth each
    /// way, per GPU shard of a block as the ranks' links are (every GPU of a rank copies its
    /// own shard, so the pool's bandwidth carries `tensor` shards of each block).
    #[must_use]
    pub fn host_pool_spec(&self, role: &PreparedRole) -> Option<HostPoolSpec> {
        let links = role.config.kv_cache.host_offload?.shared?;
        let spec = self.host_spec(role)?;
        let gpus = f64::from(
            role::host_size_gpus(self.config.engine.backend, role.config.parallelism.tensor).max(1),
        );
        Some(HostPoolSpec {
            capacity_blocks: spec.capacity_blocks,
            shared_d2h_bytes_per_s: link_bytes_per_s(links.d2h_gbps).map(|b| b / gpus),
            shared_h2d_bytes_per_s: link_bytes_per_s(links.h2d_gbps).map(|b| b / gpus),
        })
    }

    /// `role`'s storage KV tier behind its host tiers (`kv_cache.g3_offload`), if it has one:
    /// the host tier's blocks, each worker's links, and for a cluster-shared store the one
    /// store all its workers use.
    #[must_use]
    pub fn g3_spec(&self, role: &PreparedRole) -> Option<(G3Spec, G3Scope)> {
        let g = role.config.kv_cache.g3_offload?;
        let host = self.host_spec(role)?;
        let shared = g.scope == G3Scope::ClusterShared;
        // Behind HiCache's tree of tokens the store holds pages of `block_size` tokens.
        let block_bytes = if host.writes.tokens() {
            host.block_bytes.saturating_mul(u64::from(role.config.kv_cache.block_size))
        } else {
            host.block_bytes
        };
        Some((
            G3Spec {
                capacity_blocks: g.num_g3_blocks,
                block_bytes,
                read_bytes_per_s: link_bytes_per_s(g.read_bandwidth_gbps),
                write_bytes_per_s: link_bytes_per_s(g.write_bandwidth_gbps),
                shared_read_bytes_per_s: if shared {
                    link_bytes_per_s(g.shared_read_bandwidth_gbps)
                } else {
                    None
                },
                shared_write_bytes_per_s: if shared {
                    link_bytes_per_s(g.shared_write_bandwidth_gbps)
                } else {
                    None
                },
                first_byte: SimDur::from_ms_f64(g.latency_to_first_byte_ms),
            },
            g.scope,
        ))
    }

    /// How `role`'s HiCache tiers read their storage tier ahead of admission (SGLang with
    /// `g3_offload`): pages of `block_size` tokens, and the prefetch policy.
    #[must_use]
    pub fn prefetch_spec(&self, role: &PreparedRole) -> Option<StoragePrefetch> {
        let h = role.config.kv_cache.g3_offload?.hicache?;
        let page_tokens = role.config.kv_cache.block_size.max(1);
        Some(StoragePrefetch {
            policy: match h.policy {
                HicachePrefetchPolicy::BestEffort => PrefetchPolicy::BestEffort,
                HicachePrefetchPolicy::WaitComplete => PrefetchPolicy::WaitComplete,
                HicachePrefetchPolicy::Timeout => PrefetchPolicy::Timeout {
                    base: SimDur::from_secs_f64(h.timeout_base_s),
                    per_page: SimDur::from_secs_f64(
                        h.timeout_per_ki_token_s * f64::from(page_tokens) / 1024.0,
                    ),
                },
            },
            threshold_tokens: h.threshold_tokens,
            page_tokens,
        })
    }

    /// How `role`'s workers attach to their storage tier, a fresh shared store for this run
    /// when it is cluster-shared.
    pub(super) fn g3_attach(&self, role: &PreparedRole) -> Option<G3Attach> {
        let (spec, scope) = self.g3_spec(role)?;
        Some(match scope {
            G3Scope::WorkerLocal => G3Attach::PerWorker(spec),
            G3Scope::ClusterShared => G3Attach::Shared(Rc::new(RefCell::new(G3Store::new(spec)))),
        })
    }
}

/// A link's bandwidth in decimal GB/s as bytes a second (0: unlimited, `None`).
fn link_bytes_per_s(gbps: f64) -> Option<f64> {
    (gbps > 0.0).then_some(gbps * 1e9)
}
