//! What `servesim validate` replays with besides each row: the engines' timing constants, the
//! benchmark's replay policy and what-ifs. The CLI sets them from its options and the page's
//! Validate tab from fields named after them ([`OPTIONS`]), so both replay alike.

use servesim_perf::oplevel::{AllReduceImpl, MoeKernel};

use super::{LENGTH_FLOOR, REQUESTS_PER_SLOT};

/// Timing constants to replay with instead of the engines' calibrated ones.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Knobs {
    /// `timing.prefill_scale`.
    pub prefill_scale: Option<f64>,
    /// `timing.step_overhead_ms`.
    pub step_overhead_ms: Option<f64>,
    /// `timing.frontend_ms`.
    pub frontend_ms: Option<f64>,
    /// `timing.host_us_per_sequence`.
    pub host_us_per_sequence: Option<f64>,
    /// `timing.allreduce`.
    pub allreduce: Option<AllReduceImpl>,
    /// `timing.moe_kernel`, for every worker (in place of the recipe's choice).
    pub moe_kernel: Option<MoeKernel>,
    /// `frontend.request_ms` (aggregated rows).
    pub frontend_request_ms: Option<f64>,
    /// `frontend.chunk_us` (aggregated rows).
    pub frontend_chunk_us: Option<f64>,
    /// `frontend.prompt_token_us` (aggregated rows).
    pub frontend_prompt_token_us: Option<f64>,
    /// `scheduler.plan_ahead`, for every worker.
    pub plan_ahead: Option<bool>,
    /// Sample lengths uniformly from this fraction of nominal up to nominal (REF §7 uses 0.8);
    /// `None`: fixed lengths.
    pub length_floor: Option<f64>,
    /// Requests each concurrency slot sends; `None`: [`REQUESTS_PER_SLOT`].
    pub requests_per_slot: Option<u32>,
    /// Read an MLA model's `tp N, attention_dp 1` layout as attention data parallelism over
    /// the N GPUs (`tp 1, attention_dp N`), the way SGLang and TensorRT-LLM serve DeepSeek-style
    /// models at high concurrency. One rule for every row; off by default (rows replay as
    /// written).
    pub mla_attention_dp: bool,
    /// Replay every row with the replay policy's engine options only, ignoring what its
    /// benchmark's published recipe sets ([`recipe`](super::recipe)).
    pub no_recipes: bool,
    /// Replay every row with MTP/EAGLE speculative decoding: `nextn` drafts a round,
    /// `nextn_accepted` accepted on average. The file does not record which runs speculated,
    /// so this is a what-if for a filtered set of rows, never a default.
    pub speculation: Option<(u32, f64)>,
    /// Probability that each MTP draft is accepted, for rows whose published deployment
    /// speculated (`deployments::Deployment::drafts`); `None`: [`MTP_DRAFT_ACCEPTANCE`].
    pub mtp_acceptance: Option<f64>,
    /// Replay every row's prompts drawn from this many distinct entries with prefix caching
    /// on, as a benchmark client with a finite dataset and an engine that caches would run
    /// (aiperf's and genai-perf's `--num-dataset-entries`, 100 unless set). The file does
    /// not record the dataset or the cache, so this is a what-if for a filtered set of rows.
    pub prompt_pool: Option<u32>,
}

/// Probability that an MTP draft token is accepted, given the ones before it were: one
/// global constant, fitted on the calibration file's InferenceX rows whose published
/// deployment speculated (`docs/validation.md`, "Speculation in the published deployments").
pub const MTP_DRAFT_ACCEPTANCE: f64 = 0.75;

/// Drafts accepted per round on average when each of `drafts` is accepted with probability
/// `p` after the ones before it: p + p² + … + pⁿ.
#[must_use]
pub fn accepted_drafts(drafts: u32, p: f64) -> f64 {
    let p = p.clamp(0.0, 1.0);
    (1..=drafts).map(|i| libm::pow(p, f64::from(i))).sum()
}

impl Knobs {
    /// The replay policy of `servesim validate` at its defaults (lengths sampled from
    /// [`LENGTH_FLOOR`] of nominal, [`REQUESTS_PER_SLOT`] requests a client, the engines'
    /// constants and the benchmarks' recipes): what `calibrate` starts from and the page
    /// replays. `Knobs::default()` differs in sending fixed lengths.
    #[must_use]
    pub fn replay_policy() -> Knobs {
        Knobs {
            length_floor: Some(LENGTH_FLOOR),
            requests_per_slot: Some(REQUESTS_PER_SLOT),
            ..Knobs::default()
        }
    }

    /// The `timing:` entries these knobs set, as flow-mapping text.
    pub(super) fn yaml(&self) -> String {
        let number = |x: Option<f64>| x.map(|x| format!("{x}"));
        entries(&[
            ("prefill_scale", number(self.prefill_scale)),
            ("step_overhead_ms", number(self.step_overhead_ms)),
            ("frontend_ms", number(self.frontend_ms)),
            ("host_us_per_sequence", number(self.host_us_per_sequence)),
            ("allreduce", self.allreduce.map(|a| a.name().to_string())),
            ("moe_kernel", self.moe_kernel.map(|k| k.name().to_string())),
        ])
    }

    /// The `frontend:` entries these knobs set.
    pub(super) fn frontend_yaml(&self) -> String {
        let number = |x: Option<f64>| x.map(|x| format!("{x}"));
        entries(&[
            ("request_ms", number(self.frontend_request_ms)),
            ("chunk_us", number(self.frontend_chunk_us)),
            ("prompt_token_us", number(self.frontend_prompt_token_us)),
        ])
    }
}

/// `key: value` for each set entry, comma-separated.
fn entries(pairs: &[(&str, Option<String>)]) -> String {
    let set: Vec<String> =
        pairs.iter().filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}: {v}"))).collect();
    set.join(", ")
}

/// How an option's value is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionKind {
    /// A finite number above 0.
    Positive,
    /// A finite number of at least 0.
    NonNegative,
    /// A number from 0 to 1.
    Fraction,
    /// A whole number from `min` to `max`.
    Count {
        /// Smallest allowed.
        min: u32,
        /// Largest allowed.
        max: u32,
    },
    /// One of these names.
    Choice(&'static [&'static str]),
    /// On or off: a flag without a value on the command line, `true` or `false` here.
    Switch,
}

/// One of `servesim validate`'s replay options: its flag without the dashes, what it sets, and
/// what applies when it is not given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnobOption {
    /// The CLI's flag (`frontend-ms` for `--frontend-ms`).
    pub flag: &'static str,
    /// What it sets, in a few words.
    pub label: &'static str,
    /// How its value is written.
    pub kind: OptionKind,
    /// What applies when it is not given.
    pub unset: &'static str,
}

const fn option(
    flag: &'static str,
    label: &'static str,
    kind: OptionKind,
    unset: &'static str,
) -> KnobOption {
    KnobOption { flag, label, kind, unset }
}

/// Every replay option, in the CLI's order.
pub const OPTIONS: [KnobOption; 18] = [
    option("prefill-scale", "prefill-share multiplier", OptionKind::Positive, "the engine's"),
    option("step-overhead-ms", "engine overhead per step (ms)", OptionKind::NonNegative, "the engine's"),
    option("frontend-ms", "frontend delay (ms)", OptionKind::NonNegative, "the engine's"),
    option(
        "host-us-per-sequence",
        "host time per sequence, synchronous engines (µs)",
        OptionKind::NonNegative,
        "the engine's",
    ),
    option("allreduce", "all-reduce kernels", OptionKind::Choice(&["custom", "nccl"]), "custom"),
    option(
        "moe-kernel",
        "routed-expert kernels",
        OptionKind::Choice(&["default", "min-latency"]),
        "the row's recipe",
    ),
    option("frontend-request-ms", "serving-process time per request (ms)", OptionKind::NonNegative, "0"),
    option("frontend-chunk-us", "serving-process time per streamed chunk (µs)", OptionKind::NonNegative, "0"),
    option(
        "frontend-prompt-token-us",
        "serving-process time per prompt token (µs)",
        OptionKind::NonNegative,
        "0",
    ),
    option(
        "plan-ahead",
        "plan each step while the one before runs",
        OptionKind::Choice(&["true", "false"]),
        "as the release schedules",
    ),
    option("length-floor", "shortest sampled length, share of nominal", OptionKind::Fraction, "0.8"),
    option(
        "requests-per-slot",
        "requests each client sends",
        OptionKind::Count { min: 1, max: 10_000 },
        "10",
    ),
    option(
        "mla-attention-dp",
        "MLA models' tp N layouts as attention data parallelism",
        OptionKind::Switch,
        "off",
    ),
    option("no-recipes", "ignore the benchmarks' published recipes", OptionKind::Switch, "off"),
    option(
        "prompt-pool",
        "distinct prompts, with prefix caching on",
        OptionKind::Count { min: 1, max: 10_000_000 },
        "every prompt new, no caching",
    ),
    option("nextn", "speculative drafts a round", OptionKind::Count { min: 1, max: 5 }, "none"),
    option("nextn-accepted", "drafts accepted a round, with nextn", OptionKind::NonNegative, "none"),
    option(
        "mtp-acceptance",
        "acceptance of each draft, published MTP deployments",
        OptionKind::Fraction,
        "0.75",
    ),
];

/// A value as read by its option's kind.
#[derive(Clone, Copy, Debug)]
enum Value<'a> {
    Number(f64),
    Count(u32),
    Name(&'a str),
    Switch(bool),
}

impl KnobOption {
    /// Reads `text` as this option's value.
    fn read<'a>(&self, text: &'a str) -> Result<Value<'a>, String> {
        let flag = self.flag;
        let number = |ok: fn(f64) -> bool, what: &str| {
            text.parse::<f64>()
                .ok()
                .filter(|x| ok(*x))
                .map(Value::Number)
                .ok_or_else(|| format!("--{flag}: '{text}' is not {what}"))
        };
        match self.kind {
            OptionKind::Positive => number(|x| x.is_finite() && x > 0.0, "a finite number greater than 0"),
            OptionKind::NonNegative => number(|x| x.is_finite() && x >= 0.0, "a finite number of at least 0"),
            OptionKind::Fraction => number(|x| (0.0..=1.0).contains(&x), "a number from 0 to 1"),
            OptionKind::Count { min, max } => text
                .parse::<u32>()
                .ok()
                .filter(|n| (min..=max).contains(n))
                .map(Value::Count)
                .ok_or_else(|| format!("--{flag}: '{text}' is not a whole number from {min} to {max}")),
            OptionKind::Choice(names) => names
                .iter()
                .find(|n| **n == text)
                .map(|n| Value::Name(n))
                .ok_or_else(|| format!("--{flag}: '{text}' is not one of {}", names.join(", "))),
            OptionKind::Switch => match text {
                "true" => Ok(Value::Switch(true)),
                "false" => Ok(Value::Switch(false)),
                _ => Err(format!("--{flag}: '{text}' is not true or false")),
            },
        }
    }
}

impl Knobs {
    /// The replay policy ([`Knobs::replay_policy`]) with `options` set: `(flag, value)` as
    /// [`OPTIONS`] names and writes them; an empty value leaves an option unset.
    ///
    /// # Errors
    /// Naming the option, when a flag is unknown, a value out of its range, or `nextn` and
    /// `nextn-accepted` not given together or more drafts accepted than proposed.
    pub fn from_options<'a>(options: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Knobs, String> {
        let mut knobs = Knobs::replay_policy();
        let (mut nextn, mut accepted) = (None, None);
        for (flag, text) in options {
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let option =
                OPTIONS.iter().find(|o| o.flag == flag).ok_or_else(|| format!("--{flag}: no such option"))?;
            match (flag, option.read(text)?) {
                ("nextn", Value::Count(n)) => nextn = Some(n),
                ("nextn-accepted", Value::Number(x)) => accepted = Some(x),
                (_, value) => knobs.set(flag, value),
            }
        }
        knobs.speculation = match (nextn, accepted) {
            (None, None) => None,
            (Some(n), Some(a)) => Some((n, a)),
            _ => return Err("--nextn and --nextn-accepted go together".to_string()),
        };
        knobs.check()?;
        Ok(knobs)
    }

    fn set(&mut self, flag: &str, value: Value<'_>) {
        match (flag, value) {
            ("prefill-scale", Value::Number(x)) => self.prefill_scale = Some(x),
            ("step-overhead-ms", Value::Number(x)) => self.step_overhead_ms = Some(x),
            ("frontend-ms", Value::Number(x)) => self.frontend_ms = Some(x),
            ("host-us-per-sequence", Value::Number(x)) => self.host_us_per_sequence = Some(x),
            ("allreduce", Value::Name(n)) => self.allreduce = AllReduceImpl::from_name(n),
            ("moe-kernel", Value::Name(n)) => self.moe_kernel = MoeKernel::from_name(&n.replace('-', "_")),
            ("frontend-request-ms", Value::Number(x)) => self.frontend_request_ms = Some(x),
            ("frontend-chunk-us", Value::Number(x)) => self.frontend_chunk_us = Some(x),
            ("frontend-prompt-token-us", Value::Number(x)) => self.frontend_prompt_token_us = Some(x),
            ("plan-ahead", Value::Name(n)) => self.plan_ahead = Some(n == "true"),
            ("length-floor", Value::Number(x)) => self.length_floor = Some(x),
            ("requests-per-slot", Value::Count(n)) => self.requests_per_slot = Some(n),
            ("mla-attention-dp", Value::Switch(on)) => self.mla_attention_dp = on,
            ("no-recipes", Value::Switch(on)) => self.no_recipes = on,
            ("prompt-pool", Value::Count(n)) => self.prompt_pool = Some(n),
            ("mtp-acceptance", Value::Number(x)) => self.mtp_acceptance = Some(x),
            // `OPTIONS` and the kinds above agree (test `every_option_reads_back_what_it_sets`).
            _ => {}
        }
    }

    /// The options that make these knobs from the replay policy, as `(flag, value)` (a switch's
    /// value is `true`), in [`OPTIONS`]' order.
    #[must_use]
    pub fn options(&self) -> Vec<(&'static str, String)> {
        let number = |x: Option<f64>| x.map(|x| format!("{x}"));
        let switch = |on: bool| on.then(|| "true".to_string());
        OPTIONS
            .iter()
            .filter_map(|o| {
                let value = match o.flag {
                    "prefill-scale" => number(self.prefill_scale),
                    "step-overhead-ms" => number(self.step_overhead_ms),
                    "frontend-ms" => number(self.frontend_ms),
                    "host-us-per-sequence" => number(self.host_us_per_sequence),
                    "allreduce" => self.allreduce.map(|a| a.name().to_string()),
                    "moe-kernel" => self.moe_kernel.map(|k| k.name().replace('_', "-")),
                    "frontend-request-ms" => number(self.frontend_request_ms),
                    "frontend-chunk-us" => number(self.frontend_chunk_us),
                    "frontend-prompt-token-us" => number(self.frontend_prompt_token_us),
                    "plan-ahead" => self.plan_ahead.map(|p| p.to_string()),
                    // No floor replays the lengths as given, as a floor of 1 does.
                    // Exactly: the policy's floor as typed (0.8) is the policy.
                    "length-floor" => Some(self.length_floor.unwrap_or(1.0))
                        .filter(|f| f.to_bits() != LENGTH_FLOOR.to_bits())
                        .map(|f| format!("{f}")),
                    "requests-per-slot" => Some(self.requests_per_slot.unwrap_or(REQUESTS_PER_SLOT))
                        .filter(|n| *n != REQUESTS_PER_SLOT)
                        .map(|n| n.to_string()),
                    "mla-attention-dp" => switch(self.mla_attention_dp),
                    "no-recipes" => switch(self.no_recipes),
                    "prompt-pool" => self.prompt_pool.map(|n| n.to_string()),
                    "nextn" => self.speculation.map(|(n, _)| n.to_string()),
                    "nextn-accepted" => self.speculation.and_then(|(_, a)| number(Some(a))),
                    "mtp-acceptance" => number(self.mtp_acceptance),
                    _ => None,
                };
                value.map(|v| (o.flag, v))
            })
            .collect()
    }

    /// The options as the CLI takes them (` --frontend-ms 80 --no-recipes`), each after a space.
    #[must_use]
    pub fn flags(&self) -> String {
        self.options()
            .iter()
            .map(|(flag, value)| match OPTIONS.iter().find(|o| o.flag == *flag).map(|o| o.kind) {
                Some(OptionKind::Switch) => format!(" --{flag}"),
                _ => format!(" --{flag} {value}"),
            })
            .collect()
    }

    /// Whether every knob is within its option's range, and speculation accepts no more drafts
    /// than it proposes.
    ///
    /// # Errors
    /// Naming the first option out of range.
    pub fn check(&self) -> Result<(), String> {
        for (flag, value) in self.options() {
            if let Some(o) = OPTIONS.iter().find(|o| o.flag == flag) {
                o.read(&value)?;
            }
        }
        match self.speculation {
            Some((n, accepted)) if accepted > f64::from(n) => Err(format!(
                "--nextn-accepted: {accepted} drafts accepted a round is more than the {n} --nextn proposes"
            )),
            _ => Ok(()),
        }
    }
}
