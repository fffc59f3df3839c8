//! SGLang's DeepEP path: its expert kernels and its dispatch and combine, from the wide-EP
//! tables.

use super::*;

/// DeepSeek's routed experts (256, top-8) on the test model's 4,096-wide hidden state.
fn wide_ep_moe() -> Moe {
    Moe {
        num_experts: 256,
        experts_per_token: 8,
        expert_intermediate_size: 2048,
        shared_intermediate_size: 2048,
        dense_layers: 3,
    }
}

/// SGLang under attention DP runs DeepEP's experts: the wide-EP context table for a step
/// that extends a prompt, the generation one for a decode step; a measured row is returned
/// as measured, and an expert degree the tables lack (EP8 on Blackwell) blends the degrees
/// around it at the same tokens a rank, linearly in log2 of the degree. Other engines and
/// layouts keep the fused-experts table.
#[test]
fn sglang_attention_dp_experts_read_the_deepep_tables() {
    let moe = wide_ep_moe();
    let key = |ep: u64| {
        ["fp8_block", "power_law_1.01", "4096", "2048", "8", "256", "1"]
            .iter()
            .map(|s| (*s).to_string())
            .chain([ep.to_string()])
            .collect::<Vec<_>>()
    };
    // Context rows take 1 ms per 1,000 tokens a rank plus 0.1 ms; decode rows a tenth.
    let rows = |scale: f64| -> Vec<Row> {
        let mut out = Vec::new();
        for ep in [4u64, 16] {
            for t in [1024u64, 2048, 4096, 8192, 16384, 32768] {
                #[allow(clippy::cast_precision_loss)]
                let ms = scale * (0.1 + (t / ep) as f64 / 1000.0);
                out.push((key(ep), vec![t], ms));
            }
        }
        out
    };
    let fused: Vec<Row> =
        [1024u64, 2048, 4096, 8192, 16384].iter().map(|&t| (key(8), vec![t], 50.0)).collect();
    let timer = |backend: &str, attention_data: u32, ep: u32| {
        let mut db = PerfDb::new("b200_sxm", backend, "test", "unit test");
        db.insert(Rc::new(Table::from_rows(Family::DeepEpContextMoe, rows(1.0)).unwrap()));
        db.insert(Rc::new(Table::from_rows(Family::DeepEpGenerationMoe, rows(0.1)).unwrap()));
        db.insert(Rc::new(Table::from_rows(Family::Moe, fused.clone()).unwrap()));
        let mut s = setup(1);
        s.model.moe = Some(moe.clone());
        s.moe = MoeQuant::Fp8Block;
        s.parallelism = Parallelism { tensor: 1, attention_data, moe_expert: ep, ..Parallelism::SINGLE };
        OpLevelTimer::new(s, Rc::new(db))
    };
    let close = |got: f64, want: f64| (got - want).abs() < 1e-12;
    // EP4, 8,192 tokens: the measured context row, and the decode row, verbatim.
    let t = timer("sglang", 4, 4);
    let (s, src) = t.deepep_experts(8192, true).unwrap();
    assert!(close(s * 1e3, 0.1 + 2.048) && src == Source::Measured, "{s} {src:?}");
    let (s, _) = t.deepep_experts(8192, false).unwrap();
    assert!(close(s * 1e3, 0.1 * (0.1 + 2.048)), "{s}");
    // EP8, 8,192 tokens (1,024 a rank): EP4 at 4,096 tokens and EP16 at 16,384 tokens hold
    // 1,024 a rank each, both 1.124 ms here; halfway in log2 of the degree.
    let t = timer("sglang", 8, 8);
    let (s, src) = t.deepep_experts(8192, true).unwrap();
    assert!(close(s * 1e3, 0.1 + 1.024) && src == Source::Interpolated, "{s} {src:?}");
    // A step's experts follow its phase through `moe_part`, not the fused table's 50 ms.
    let mut t = timer("sglang", 8, 8);
    let layers = f64::from(t.s.model.moe_layers());
    let decode = t.moe_part(8192, false).2[OpLevelTimer::kind("moe")] * 1e3 / layers;
    let extend = t.moe_part(8192, true).2[OpLevelTimer::kind("moe")] * 1e3 / layers;
    assert!(close(decode, 0.1 * 1.124) && close(extend, 1.124), "{decode} {extend}");
    // vLLM, or SGLang without attention DP, keep the fused-experts table.
    for t in [timer("vllm", 8, 8), timer("sglang", 1, 8)] {
        assert_eq!(t.deepep_experts(8192, true), None);
        assert!(close(t.moe_experts(8192).0 * 1e3, 50.0));
    }
}

/// SGLang's DeepEP traffic is timed from the DeepEP tables by tokens a rank: the normal
/// kernels (on DeepEP's default 20 SMs) for a step that extends a prompt, the low-latency ones
/// for a decode step, a measured row verbatim. An expert group beyond the NVLink domain (H200:
/// more than 8 GPUs), another engine, or a shape the tables lack keep the NCCL all-to-all.
#[test]
fn sglang_deepep_traffic_reads_the_dispatch_and_combine_tables() {
    let moe = wide_ep_moe();
    let shape = ["4096", "8", "256"].map(str::to_string);
    // Normal: dispatch 10 µs + 1 µs per token a rank on 20 SMs (other SM counts slower);
    // combine twice that. Low-latency: a tenth of the normal times.
    let us = |phase: &str, t: u64, sms: u64| {
        #[allow(clippy::cast_precision_loss)]
        let d = (10.0 + t as f64) * 20.0 / sms as f64;
        if phase == "combine" {
            2.0 * d
        } else {
            d
        }
    };
    let mut normal: Vec<Row> = Vec::new();
    let mut ll: Vec<Row> = Vec::new();
    for phase in ["dispatch", "combine"] {
        for t in [1u64, 64, 512, 2048, 8192] {
            for sms in [8u64, 20, 24] {
                let mut k = vec![phase.to_string(), sms.to_string()];
                k.extend(shape.iter().cloned());
                normal.push((k, vec![t], us(phase, t, sms) / 1e3));
            }
            let mut k = vec![phase.to_string()];
            k.extend(shape.iter().cloned());
            ll.push((k, vec![t], us(phase, t, 20) / 1e4));
        }
    }
    let timer = |backend: &str, attention_data: u32, tables: bool| {
        let mut db = PerfDb::new("h200_sxm", backend, "test", "unit test");
        if tables {
            db.insert(Rc::new(Table::from_rows(Family::DeepEpNormal, normal.clone()).unwrap()));
            db.insert(Rc::new(Table::from_rows(Family::DeepEpLowLatency, ll.clone()).unwrap()));
        }
        let mut s = setup(1);
        s.model.moe = Some(moe.clone());
        s.parallelism =
            Parallelism { tensor: 1, attention_data, moe_expert: attention_data, ..Parallelism::SINGLE };
        OpLevelTimer::new(s, Rc::new(db))
    };
    let close = |got: f64, want: f64| (got - want).abs() < 1e-9;
    // DEP8, 16,384 tokens: 2,048 a rank, a measured row for both phases.
    let t = timer("sglang", 8, true);
    let [d, c] = t.deepep_transfer(2048, true).unwrap();
    assert!(close(d.0 * 1e6, 2058.0) && close(c.0 * 1e6, 4116.0), "{d:?} {c:?}");
    assert_eq!((d.1, c.1), (Source::Measured, Source::Measured));
    let [d, c] = t.deepep_transfer(2048, false).unwrap();
    assert!(close(d.0 * 1e6, 205.8) && close(c.0 * 1e6, 411.6), "{d:?} {c:?}");
    // Between measured token counts: interpolated.
    let [d, _] = t.deepep_transfer(1000, true).unwrap();
    assert!(d.0 * 1e6 > 522.0 && d.0 * 1e6 < 2058.0 && d.1 == Source::Interpolated, "{d:?}");
    // A step's traffic through `moe_part`: both phases on every MoE layer.
    let mut t = timer("sglang", 8, true);
    let layers = f64::from(t.s.model.moe_layers());
    let traffic = t.moe_part(16384, true).2[OpLevelTimer::kind("nccl")] / layers;
    assert!(close(traffic * 1e6, 2058.0 + 4116.0), "{traffic}");
    let traffic = t.moe_part(16384, false).2[OpLevelTimer::kind("nccl")] / layers;
    assert!(close(traffic * 1e6, 205.8 + 411.6), "{traffic}");
    // Beyond one H200 node, another engine, or no tables: NCCL's all-to-all.
    assert_eq!(timer("sglang", 16, true).deepep_transfer(2048, true), None);
    assert_eq!(timer("vllm", 8, true).deepep_transfer(2048, true), None);
    let mut nccl = timer("sglang", 8, false);
    assert_eq!(nccl.deepep_transfer(2048, true), None);
    let fallback = nccl.moe_part(16384, true).2[OpLevelTimer::kind("nccl")] / layers;
    assert!(fallback > 0.0 && !close(fallback * 1e6, 2058.0 + 4116.0), "{fallback}");
}
