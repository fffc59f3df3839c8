//! InferenceX's published disaggregated deployments.
//!
//! InferenceX's exports record a disaggregated row's layouts but not how many workers of each
//! role ran, and they lose the attention data parallelism of both roles (a `dep8` decode
//! worker is written `tp 8, attention_dp 1`) and the decode worker's expert degree. Its
//! benchmark configuration (`nvidia-master.yaml`) lists, for every model, GPU, precision and
//! framework, which deployment ran at which client counts: workers, GPUs a worker, expert
//! parallelism and attention DP per role, and the srt-slurm recipe whose name carries the
//! decode batch a rank. `inferencex_disagg.csv` transcribes it; [`published`] finds a row's
//! entry. Where entries that deploy differently ran at the row's clients (a speculative and a
//! plain configuration at the same client count, or two pool sizes), the one whose workers
//! hold the GPUs and prefill experts the row's layouts record is taken; a row that none or
//! several such match has no published deployment, and its pools are sized as before.
//!
//! Some of InferenceX's GB200 DeepSeek-R1 rows measured in November 2025 are written as one
//! aggregated worker of every GPU the deployment held (`tp 36`, `tp 52`): they ran the
//! Dynamo disaggregated deployments of InferenceMAX's configuration of the time, which
//! `inferencemax_gb200_2025.csv` transcribes; [`legacy`] finds a row's by its clients and its
//! GPUs.

use std::sync::OnceLock;

use servesim_data::silicon::{Layout, Mode, SiliconRow};

use super::recipe::from_inferencex;

/// The transcribed table, embedded.
const TABLE: &str = include_str!("inferencex_disagg.csv");

/// InferenceMAX's earlier GB200 deployments ([`legacy`]), embedded.
const LEGACY_TABLE: &str = include_str!("inferencemax_gb200_2025.csv");

/// The first day a disaggregated row is taken to have run InferenceX's current configuration
/// rather than InferenceMAX's: the snapshot's GB200 blocks run the images of October and
/// November 2025 (`tensorrtllm-runtime:0.5.1-rc0.pre3`, `sglang:v0.5.5.post2`), and its
/// client counts are those of the rows measured in November and December 2025; which the rows
/// of 2026 ran, the exports do not say.
const LEGACY_UNTIL: &str = "2026-01-01";

/// Prompts a prefill rank batches in one step: the srt-slurm TensorRT-LLM context servers
/// run `max_batch_size: 16` (`max_num_tokens: 16384`) for 1k-token prompts and
/// `max_batch_size: 1` (`max_num_tokens: 8320`) for 8k-token ones
/// (`recipes/trtllm/b200-fp8/1k1k/stp/ctx1_gen5_dep8_batch48_…`, `…/8k1k/stp/ctx1_gen4_tp8_…`).
const SHORT_PROMPT_PREFILL_BATCH: u32 = 16;
/// The longest prompt the 16-prompt context batch above is configured for.
const SHORT_PROMPT_TOKENS: u32 = 1024;

/// One role of a published deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Role {
    /// Workers of the role.
    pub workers: u32,
    /// GPUs a worker.
    pub gpus: u32,
    /// Expert-parallel degree.
    pub ep: u32,
    /// Attention data parallelism over the worker's GPUs (else tensor parallelism).
    pub attention_dp: bool,
}

impl Role {
    /// The role's layout with `batch` requests a rank.
    #[must_use]
    pub fn layout(self, batch: u32) -> Layout {
        let (tp, dp) = if self.attention_dp { (1, self.gpus) } else { (self.gpus, 1) };
        let ep = self.ep.clamp(1, self.gpus.max(1));
        Layout { tp, pp: 1, dp, moe_tp: (self.gpus / ep).max(1), moe_ep: ep, batch }
    }
}

/// A published disaggregated deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deployment {
    /// Prefill role.
    pub prefill: Role,
    /// Decode role.
    pub decode: Role,
    /// Most requests a decode rank runs (the recipe's batch), when the entry names it.
    pub decode_batch: Option<u32>,
    /// MTP draft tokens a decode step proposes, when every entry that ran at the row's
    /// clients speculated with that depth (`mtpN` in the recipe name).
    pub drafts: Option<u32>,
    /// Prompts a prefill worker batches in one step, when the entry sets it
    /// (`PREFILL_MAX_BATCH_SIZE`); else [`Deployment::prefill_prompts`].
    pub prefill_batch: Option<u32>,
}

impl Deployment {
    /// The prefill layout at `isl`-token prompts: the entry's prefill batch, else
    /// [`Deployment::prefill_prompts`].
    #[must_use]
    pub fn prefill_layout(&self, isl: u32) -> Layout {
        self.prefill.layout(self.prefill_batch.unwrap_or(Self::prefill_prompts(isl)))
    }

    /// The decode layout at the entry's decode batch (1 where it names none).
    #[must_use]
    pub fn decode_layout(&self) -> Layout {
        self.decode.layout(self.decode_batch.unwrap_or(1))
    }

    /// Prompts a prefill rank runs in one step at `isl`-token prompts
    /// ([`SHORT_PROMPT_PREFILL_BATCH`]).
    #[must_use]
    pub fn prefill_prompts(isl: u32) -> u32 {
        if isl <= SHORT_PROMPT_TOKENS {
            SHORT_PROMPT_PREFILL_BATCH
        } else {
            1
        }
    }
}

/// Whether an entry speculated: `none`, or `mtpN` (`mtp` where the entry names no depth).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Speculation {
    None,
    Mtp(Option<u32>),
}

/// One line of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    config: String,
    isl: u32,
    osl: u32,
    concurrency: Vec<u32>,
    speculation: Speculation,
    /// The entry's deployment (`drafts` left to [`published`], which sees every entry).
    deployment: Deployment,
}

/// Parses a table (`name` for errors) of 14 columns, or 15 with the prefill batch; an error
/// names the malformed line (a test checks there is none).
fn parse(name: &str, text: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.starts_with("config,") || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let bad = |what: &str| format!("{name}:{}: {what}", n + 1);
        if f.len() != 14 && f.len() != 15 {
            return Err(bad("expected 14 or 15 fields"));
        }
        let num = |i: usize| {
            f[i].trim().parse::<u32>().map_err(|_| bad(&format!("field {} is not a count", i + 1)))
        };
        let role = |i: usize| -> Result<Role, String> {
            Ok(Role { workers: num(i)?, gpus: num(i + 1)?, ep: num(i + 2)?, attention_dp: num(i + 3)? == 1 })
        };
        let concurrency = f[4]
            .split_whitespace()
            .map(|c| c.parse::<u32>().map_err(|_| bad("clients are not counts")))
            .collect::<Result<Vec<_>, _>>()?;
        let decode_batch = if f[13].trim().is_empty() { None } else { Some(num(13)?) };
        let prefill_batch = if f.len() == 15 && !f[14].trim().is_empty() { Some(num(14)?) } else { None };
        let speculation = match f[3].trim() {
            "none" => Speculation::None,
            "mtp" => Speculation::Mtp(None),
            other => Speculation::Mtp(Some(
                other
                    .strip_prefix("mtp")
                    .and_then(|n| n.parse::<u32>().ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad("speculation is not none, mtp or mtpN"))?,
            )),
        };
        out.push(Entry {
            config: f[0].to_string(),
            isl: num(1)?,
            osl: num(2)?,
            concurrency,
            speculation,
            deployment: Deployment {
                prefill: role(5)?,
                decode: role(9)?,
                decode_batch,
                drafts: None,
                prefill_batch,
            },
        });
    }
    Ok(out)
}

fn table() -> &'static [Entry] {
    static T: OnceLock<Vec<Entry>> = OnceLock::new();
    T.get_or_init(|| parse("inferencex_disagg.csv", TABLE).unwrap_or_default())
}

fn legacy_table() -> &'static [Entry] {
    static T: OnceLock<Vec<Entry>> = OnceLock::new();
    T.get_or_init(|| parse("inferencemax_gb200_2025.csv", LEGACY_TABLE).unwrap_or_default())
}

/// The configuration keys a row's benchmark could have run under (`dsr1-fp4-b200-dynamo-trt`,
/// and the `-mtp` variant some frameworks keep apart).
fn configs(row: &SiliconRow) -> Option<[String; 2]> {
    let model = if row.model.contains("DeepSeek-R1") || row.model.contains("DeepSeek-V3") {
        "dsr1"
    } else if row.model.contains("gpt-oss-120b") {
        "gptoss"
    } else {
        return None;
    };
    let gpu = row.system.strip_suffix("_sxm").unwrap_or(&row.system);
    let framework = match row.backend.as_str() {
        "trtllm" => "dynamo-trt",
        "sglang" => "dynamo-sglang",
        _ => return None,
    };
    let base = format!("{model}-{}-{gpu}-{framework}", row.precision);
    Some([format!("{base}-mtp"), base])
}

/// The entries of `table` under one of `keys` at the row's lengths and clients.
fn at<'a>(table: &'a [Entry], keys: &[String; 2], row: &SiliconRow) -> Vec<&'a Entry> {
    table
        .iter()
        .filter(|e| {
            keys.contains(&e.config)
                && e.isl == row.isl
                && e.osl == row.osl
                && e.concurrency.contains(&row.concurrency)
        })
        .collect()
}

/// The deployment InferenceX published for a disaggregated row of its own, when exactly one
/// deployment ran at the row's clients ([`unique`]); where several did, the one whose pools
/// have the GPUs a worker and the expert degree the row's layouts record ([`as_written`]).
#[must_use]
pub fn published(row: &SiliconRow) -> Option<Deployment> {
    if !row.disaggregated() || !from_inferencex(row) {
        return None;
    }
    let keys = configs(row)?;
    let entries = at(table(), &keys, row);
    unique(&entries, row.concurrency).or_else(|| unique(&as_written(&entries, row), row.concurrency))
}

/// The entries whose workers hold the GPUs (tensor × attention data × pipeline degree) the
/// row's layouts record, and whose prefill workers run the expert degree it records (the
/// decode one is written lossily, often as the prefill's). Most exports write one layout
/// pair at every client count, which then matches no entry or all alike; where an export
/// writes the layouts that ran it tells the deployments at the same clients apart: H200
/// SGLang DeepSeek-R1 records `ep 8` at the client counts of its DEP8 deployment and `ep 1`
/// at those of its TP8 one, GB300 TensorRT-LLM fp4 at 8k/1k and 666 clients a 16-GPU decode
/// worker for the MTP entry and a 32-GPU one for the plain entry.
fn as_written<'a>(entries: &[&'a Entry], row: &SiliconRow) -> Vec<&'a Entry> {
    let Mode::Disagg { prefill, decode, .. } = row.mode else { return Vec::new() };
    let gpus = |l: &Layout| l.tp.max(1) * l.dp.max(1) * l.pp.max(1);
    entries
        .iter()
        .copied()
        .filter(|e| {
            let (p, d) = (e.deployment.prefill, e.deployment.decode);
            p.gpus == gpus(&prefill)
                && p.ep.clamp(1, p.gpus.max(1)) == prefill.moe_ep.max(1)
                && d.gpus == gpus(&decode)
        })
        .collect()
}

/// The InferenceMAX deployment a TensorRT-LLM disaggregated row measured in 2025 ran, from
/// `inferencemax_gb200_2025.csv`: among the entries at its lengths and clients, the one whose
/// pools hold the GPUs its layouts record (each pool's, or both written as their sum, as
/// those exports often do), or the one every entry agrees on where the layouts are one-GPU
/// placeholders. Only for a row that records no worker counts; its replay records the
/// deployment's ([`legacy`] then finds it again). SGLang's rows are left to [`published`]:
/// its DEP4 prefill workers hold DeepSeek-R1's fp8 weights only with a
/// `--mem-fraction-static` the configuration does not record, which servesim refuses.
#[must_use]
pub fn earlier(row: &SiliconRow) -> Option<Deployment> {
    let Mode::Disagg { prefill, prefill_workers: None, decode, decode_workers: None } = row.mode else {
        return None;
    };
    if row.backend != "trtllm" || !from_inferencex(row) || !measured_before_current(row) {
        return None;
    }
    let keys = configs(row)?;
    let of = |l: &Layout| l.tp.max(1) * l.dp.max(1) * l.pp.max(1);
    let entries = at(legacy_table(), &keys, row);
    let by_gpus: Vec<&Entry> = entries
        .iter()
        .copied()
        .filter(|e| {
            let d = e.deployment;
            let total = d.prefill.workers * d.prefill.gpus + d.decode.workers * d.decode.gpus;
            (of(&prefill) == total && of(&decode) == total)
                || (of(&prefill) == d.prefill.gpus && of(&decode) == d.decode.gpus)
        })
        .collect();
    unique(&by_gpus, row.concurrency).or_else(|| {
        (of(&prefill) == 1 && of(&decode) == 1).then(|| unique(&entries, row.concurrency)).flatten()
    })
}

/// Whether a row was measured before InferenceX's current configuration replaced
/// InferenceMAX's (`measured=` in its source before [`LEGACY_UNTIL`]).
fn measured_before_current(row: &SiliconRow) -> bool {
    row.source
        .split(';')
        .find_map(|f| f.trim().strip_prefix("measured="))
        .and_then(|d| d.get(..10))
        .is_some_and(|d| d < LEGACY_UNTIL)
}

/// The GPUs a row's deployment held: every GPU of an aggregated layout as the file writes
/// it, or both pools of a disaggregated row that records its worker counts.
fn gpus(row: &SiliconRow) -> Option<u32> {
    let of = |l: &Layout| l.tp.max(1) * l.dp.max(1) * l.pp.max(1);
    match row.mode {
        Mode::Agg { layout } => Some(of(&layout)),
        Mode::Disagg { prefill, prefill_workers: Some(p), decode, decode_workers: Some(d) } => {
            Some(p * of(&prefill) + d * of(&decode))
        }
        Mode::Disagg { .. } => None,
    }
}

/// The InferenceMAX deployment an InferenceX row ran whose file writes it as one aggregated
/// worker of all its GPUs: the entry of `inferencemax_gb200_2025.csv` at the row's lengths
/// and clients whose two pools hold as many GPUs as the row ([`unique`] among them). The
/// same row with those pools as its recorded workers finds it again. `None` for a row no
/// entry matches (its layout is replayed as written).
#[must_use]
pub fn legacy(row: &SiliconRow) -> Option<Deployment> {
    if !from_inferencex(row) || !measured_before_current(row) {
        return None;
    }
    let keys = configs(row)?;
    let held = gpus(row)?;
    let entries: Vec<&Entry> = legacy_table()
        .iter()
        .filter(|e| {
            let d = e.deployment;
            keys.contains(&e.config)
                && e.isl == row.isl
                && e.osl == row.osl
                && e.concurrency.contains(&row.concurrency)
                && d.prefill.workers * d.prefill.gpus + d.decode.workers * d.decode.gpus == held
        })
        .collect();
    unique(&entries, row.concurrency)
}

/// The one deployment `entries` (those that ran at `concurrency` clients) agree on. Entries
/// that differ only in a decode batch the clients never reach count as one (the larger batch
/// is kept); speculation is known only where every entry ran the same depth.
fn unique(entries: &[&Entry], concurrency: u32) -> Option<Deployment> {
    let found: Vec<&Deployment> = entries.iter().map(|e| &e.deployment).collect();
    let first = **found.first()?;
    let drafts = match entries[0].speculation {
        Speculation::Mtp(Some(n)) if entries.iter().all(|e| e.speculation == entries[0].speculation) => {
            Some(n)
        }
        _ => None,
    };
    let same_pools = |d: &&Deployment| {
        d.prefill == first.prefill && d.decode == first.decode && d.prefill_batch == first.prefill_batch
    };
    if !found.iter().all(same_pools) {
        return None;
    }
    let ranks =
        first.decode.workers.max(1) * if first.decode.attention_dp { first.decode.gpus.max(1) } else { 1 };
    let per_rank = concurrency.div_ceil(ranks);
    let batches: Vec<Option<u32>> = found.iter().map(|d| d.decode_batch).collect();
    let decode_batch = batches.iter().copied().max().flatten();
    let smallest = batches.iter().copied().min().flatten();
    if batches.iter().any(|b| *b != batches[0]) && smallest.is_none_or(|b| b < per_rank) {
        return None;
    }
    Some(Deployment { decode_batch, drafts, ..first })
}

/// The published deployment a row replays with: [`earlier`] or [`published`], for a row that
/// records neither worker count (a count the row records is kept, with its layouts).
#[must_use]
pub fn replayed(row: &SiliconRow) -> Option<Deployment> {
    match row.mode {
        Mode::Disagg { prefill_workers: None, decode_workers: None, .. } => {
            earlier(row).or_else(|| published(row))
        }
        _ => None,
    }
}

/// Whether `decode` is the decode layout of `d` as [`replayed`] sets it.
#[must_use]
pub fn is_published_decode(d: &Deployment, decode: &Layout) -> bool {
    d.decode_layout() == *decode
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_covers_its_configurations() {
        let t = parse("t", TABLE).unwrap();
        assert_eq!(t.len(), table().len());
        let legacy = parse("t", LEGACY_TABLE).unwrap();
        assert_eq!((legacy.len(), legacy_table().len()), (25, 25));
        let trtllm = |e: &&Entry| e.config.ends_with("dynamo-trt");
        assert!(legacy.iter().filter(trtllm).all(|e| e.deployment.prefill_batch.is_some()));
        assert!(t.len() > 300, "{}", t.len());
        for e in &t {
            let d = e.deployment;
            assert!(d.prefill.workers >= 1 && d.decode.workers >= 1, "{e:?}");
            assert!(d.prefill.gpus % d.prefill.ep == 0 && d.decode.gpus % d.decode.ep == 0, "{e:?}");
            assert!(!e.concurrency.is_empty(), "{e:?}");
        }
        assert!(parse("t", "a,1,2\n").is_err());
        assert!(parse("t", "x,1024,1024,none,4 x,1,4,4,1,1,8,8,0,\n").is_err());
        assert!(parse("t", "x,1024,1024,mtpx,4,1,4,4,1,1,8,8,0,\n").is_err());
        let e = parse("t.csv", "x,1024,1024,none,4,1,4,4,1,1,8,8,0,,x\n").unwrap_err();
        assert!(e.starts_with("t.csv:1:"), "{e}");
    }

    fn row(system: &str, precision: &str, isl: u32, concurrency: u32) -> SiliconRow {
        let l = Layout { tp: 4, pp: 1, dp: 1, moe_tp: 1, moe_ep: 4, batch: 1 };
        SiliconRow {
            line: 2,
            id: "r".into(),
            source: format!("source_file=2026-03-25.csv; silicon_concurrency={concurrency}"),
            backend: "trtllm".into(),
            backend_version: "0.8.1.post1".into(),
            model: "deepseek-ai/DeepSeek-R1".into(),
            system: system.into(),
            precision: precision.into(),
            gemm_quant: String::new(),
            moe_quant: String::new(),
            isl,
            osl: 1024,
            concurrency,
            mode: Mode::Disagg { prefill: l, prefill_workers: None, decode: l, decode_workers: None },
            ttft_ms: 100.0,
            tpot_ms: 10.0,
        }
    }

    /// DeepSeek-R1 fp4 on B200 at 1k/1k: 2,192 clients ran one DEP4 prefill worker and two
    /// DEP8 decode workers of batch 128; 10 clients ran five TEP8 decode workers, with and
    /// without MTP alike (batch 32 either way).
    #[test]
    fn rows_find_their_published_deployment() {
        let d = published(&row("b200_sxm", "fp4", 1024, 2192)).unwrap();
        assert_eq!(d.prefill, Role { workers: 1, gpus: 4, ep: 4, attention_dp: true });
        assert_eq!(d.decode, Role { workers: 2, gpus: 8, ep: 8, attention_dp: true });
        assert_eq!((d.decode_batch, d.drafts), (Some(128), None));
        assert_eq!(d.decode.layout(128), Layout { tp: 1, pp: 1, dp: 8, moe_tp: 1, moe_ep: 8, batch: 128 });
        let d = published(&row("b200_sxm", "fp4", 1024, 10)).unwrap();
        assert_eq!((d.decode.workers, d.decode.attention_dp, d.decode_batch), (5, false, Some(32)));
        // Both an MTP and a plain run at 10 clients: the row does not say which speculated.
        assert_eq!(d.drafts, None);
        // 1,214 clients ran only `ctx1_gen2_dep8_batch64_eplb0_mtp2`.
        assert_eq!(published(&row("b200_sxm", "fp4", 1024, 1214)).unwrap().drafts, Some(2));
        // fp4 on B300 at 1k/1k and 10 clients: MTP ran 5 TEP8 workers of batch 32, the plain
        // run 5 TEP4 workers of batch 4, so the row does not say which.
        assert_eq!(published(&row("b300_sxm", "fp4", 1024, 10)), None);
        // Clients no entry lists, other sources and aggregated rows have none.
        assert_eq!(published(&row("b200_sxm", "fp4", 1024, 11)), None);
        let mut other = row("b200_sxm", "fp4", 1024, 2192);
        other.source = "source_file=/x/aic-auto-gap-analysis/data.csv".into();
        assert_eq!(published(&other), None);
        let mut agg = row("b200_sxm", "fp4", 1024, 2192);
        agg.mode = Mode::Agg { layout: Layout { tp: 8, pp: 1, dp: 1, moe_tp: 1, moe_ep: 8, batch: 1 } };
        assert_eq!(published(&agg), None);
        // GB200 fp4 at 8k/1k and 12 clients: MTP's batch 8 and the plain run's 16 over four
        // TEP8 workers hold 3 a rank either way.
        let d = published(&row("gb200", "fp4", 8192, 12)).unwrap();
        assert_eq!((d.decode.workers, d.decode_batch), (4, Some(16)));
    }

    /// Where several deployments ran at a row's clients, the one with the GPUs a worker (and
    /// the prefill expert degree) its layouts record.
    #[test]
    fn ambiguous_clients_take_the_deployment_the_layouts_record() {
        let layouts = |r: &mut SiliconRow, p: (u32, u32), d: (u32, u32)| {
            let l = |(tp, ep): (u32, u32)| Layout { tp, pp: 1, dp: 1, moe_tp: tp / ep, moe_ep: ep, batch: 1 };
            r.mode =
                Mode::Disagg { prefill: l(p), prefill_workers: None, decode: l(d), decode_workers: None };
        };
        // B300 fp4 at 1k/1k and 10 clients: MTP ran five TEP8 decode workers, the plain
        // run five TEP4 ones; the row's decode layout says which.
        let mut r = row("b300_sxm", "fp4", 1024, 10);
        layouts(&mut r, (2, 2), (8, 2));
        let d = published(&r).unwrap();
        assert_eq!((d.decode.workers, d.decode.gpus, d.decode_batch, d.drafts), (5, 8, Some(32), Some(3)));
        layouts(&mut r, (2, 2), (4, 2));
        let d = published(&r).unwrap();
        assert_eq!((d.decode.workers, d.decode.gpus, d.decode_batch, d.drafts), (5, 4, Some(4), None));
        // A layout no entry has leaves the row without one.
        layouts(&mut r, (2, 2), (16, 2));
        assert_eq!(published(&r), None);
        // H200 SGLang fp8 at 1k/1k and 128 clients: one DEP8 prefill and six DEP8 decode
        // workers, or one TP8 prefill and nine TP8 decode workers; the prefill's experts
        // tell them apart.
        let mut r = row("h200_sxm", "fp8", 1024, 128);
        r.backend = "sglang".into();
        layouts(&mut r, (8, 8), (8, 8));
        let d = published(&r).unwrap();
        assert_eq!(d.prefill, Role { workers: 1, gpus: 8, ep: 8, attention_dp: true });
        assert_eq!((d.decode.workers, d.decode.attention_dp), (6, true));
        layouts(&mut r, (8, 1), (8, 1));
        let d = published(&r).unwrap();
        assert_eq!((d.prefill.ep, d.decode.workers, d.decode.attention_dp), (1, 9, false));
        // The replayed row, written with the deployment's layouts, finds it again.
        r.mode = Mode::Disagg {
            prefill: d.prefill_layout(r.isl),
            prefill_workers: None,
            decode: d.decode_layout(),
            decode_workers: None,
        };
        assert_eq!(published(&r), Some(d));
    }

    /// InferenceX's GB200 rows of 2025-11-17 written as one worker of all the GPUs: 512
    /// clients on 20 GPUs ran one DEP4 prefill and one DEP16 decode worker with three MTP
    /// drafts; the same clients on 36 GPUs a DEP32 decode worker.
    #[test]
    fn rows_written_as_one_worker_find_inferencemaxs_deployment() {
        let agg = |isl: u32, concurrency: u32, gpus: u32| {
            let mut r = row("gb200", "fp4", isl, concurrency);
            r.source = "source_file=2026-04-06.csv; measured=2025-11-17T00:00:00.000Z".into();
            r.mode = Mode::Agg {
                layout: Layout { tp: gpus, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: concurrency },
            };
            r
        };
        let d = legacy(&agg(1024, 512, 20)).unwrap();
        assert_eq!(d.prefill, Role { workers: 1, gpus: 4, ep: 4, attention_dp: true });
        assert_eq!(d.decode, Role { workers: 1, gpus: 16, ep: 16, attention_dp: true });
        assert_eq!((d.decode_batch, d.drafts, d.prefill_batch), (Some(64), Some(3), Some(4)));
        let d = legacy(&agg(1024, 512, 36)).unwrap();
        assert_eq!((d.decode.gpus, d.decode_batch, d.drafts), (32, Some(16), Some(3)));
        // 8k prompts: one a prefill step; 538 clients on 64 GPUs ran eight DEP4 prefill
        // workers (the plain run at 538 held 48).
        let d = legacy(&agg(8192, 538, 64)).unwrap();
        assert_eq!((d.prefill.workers, d.prefill_batch, d.drafts), (8, Some(1), Some(3)));
        // 16 clients on 36 GPUs: four TEP8 decode workers with and without MTP, so no drafts.
        let d = legacy(&agg(1024, 16, 36)).unwrap();
        assert_eq!((d.decode.workers, d.decode.attention_dp, d.drafts), (4, false, None));
        // No entry at 256 clients, none of 512 clients on 28 GPUs.
        assert_eq!(legacy(&agg(1024, 256, 36)), None);
        assert_eq!(legacy(&agg(1024, 512, 28)), None);
        // The row with the deployment's pools as its recorded workers finds it again; with
        // blank counts (as InferenceX writes disaggregated rows) it does not.
        let d = legacy(&agg(1024, 512, 20)).unwrap();
        let mut split = agg(1024, 512, 20);
        split.mode = Mode::Disagg {
            prefill: d.prefill.layout(4),
            prefill_workers: Some(1),
            decode: d.decode.layout(64),
            decode_workers: Some(1),
        };
        assert_eq!(legacy(&split), Some(d));
        split.mode = Mode::Disagg {
            prefill: d.prefill.layout(4),
            prefill_workers: None,
            decode: d.decode.layout(64),
            decode_workers: None,
        };
        assert_eq!(legacy(&split), None);
        // SGLang fp8 at 8k/1k: 1,024 clients on 72 GPUs ran five DEP8 prefill workers and
        // one DEP32 decode worker, with no batch the entry names.
        let mut sglang = agg(8192, 1024, 72);
        (sglang.backend, sglang.precision) = ("sglang".into(), "fp8".into());
        let d = legacy(&sglang).unwrap();
        assert_eq!((d.prefill.workers, d.prefill.gpus, d.decode.gpus), (5, 8, 32));
        assert_eq!((d.decode_batch, d.prefill_batch, d.drafts), (None, None, None));
        // Other sources do not.
        let mut other = agg(1024, 512, 20);
        other.source = "source_file=/x/aic-auto-gap-analysis/data.csv".into();
        assert_eq!(legacy(&other), None);
    }

    /// A TensorRT-LLM disaggregated row of December 2025 that records no worker counts:
    /// 2,150 clients at 8k prompts ran three deployments in InferenceMAX's configuration, and
    /// the GPUs its layouts record pick one (32 written for both pools: six DEP4 prefill
    /// workers and a DEP8 decode worker with one MTP draft).
    #[test]
    fn disaggregated_rows_of_2025_find_inferencemaxs_deployment_by_their_gpus() {
        let split = |prefill: u32, decode: u32| {
            let mut r = row("gb200", "fp4", 8192, 2150);
            r.source = "source_file=2026-04-06.csv; measured=2025-12-15T00:00:00.000Z".into();
            let l = |gpus: u32| Layout { tp: gpus, pp: 1, dp: 1, moe_tp: 1, moe_ep: 1, batch: 1 };
            r.mode = Mode::Disagg {
                prefill: l(prefill),
                prefill_workers: None,
                decode: l(decode),
                decode_workers: None,
            };
            r
        };
        let d = earlier(&split(32, 32)).unwrap();
        assert_eq!((d.prefill.workers, d.decode.gpus, d.decode_batch, d.drafts), (6, 8, Some(256), Some(1)));
        assert_eq!(replayed(&split(32, 32)), Some(d));
        assert_eq!(earlier(&split(48, 48)).map(|d| (d.prefill.workers, d.decode.gpus)), Some((8, 16)));
        // Pools of 4 and 8 GPUs: two entries (6 and 5 prefill workers), so none.
        assert_eq!(earlier(&split(4, 8)), None);
        // At 256 clients only one entry has a DEP32 decode worker behind DEP4 prefill.
        let mut r = split(4, 32);
        r.concurrency = 256;
        assert_eq!(earlier(&r).map(|d| (d.prefill.workers, d.decode_batch)), Some((4, Some(16))));
        // Measured in 2026, or SGLang: not from this table.
        let mut later = split(32, 32);
        later.source = "source_file=2026-04-06.csv; measured=2026-02-03T00:00:00.000Z".into();
        assert_eq!(earlier(&later), None);
        let mut sglang = split(32, 32);
        sglang.backend = "sglang".into();
        assert_eq!(earlier(&sglang), None);
    }

    #[test]
    fn prefill_ranks_batch_as_the_context_servers_were_configured() {
        assert_eq!(Deployment::prefill_prompts(1024), 16);
        assert_eq!(Deployment::prefill_prompts(8192), 1);
        assert_eq!(Deployment::prefill_prompts(100), 16);
    }
}
