//! `servesim`: the native command-line interface.
//!
//! Exit codes (REF §1.5): 0 success; 1 run failure; 2 usage, config or validation error;
//! 3 resource refusal (the deployment does not fit its GPUs).

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use servesim_scenario::catalog::Catalog;
use servesim_scenario::report::{add_details, summary_table, to_pretty_json, Details};
use servesim_scenario::scenario::{parse_with_overrides, prepare, Prepared};
use servesim_scenario::{Files, Override, ScenarioError};

/// `println!` that ends quietly when stdout is closed (`servesim ... | head`) instead of panicking.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

/// `print!` with [`say!`]'s handling of a closed stdout.
macro_rules! say_raw {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

mod calibrate;
mod data;
mod estimate;
mod validate;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/data_files.rs"));
}

/// Files named by a config, resolved relative to the config file's directory; servesim's own
/// data from `--data-dir`, else from the copy built into the binary.
pub(crate) struct DiskFiles {
    base: PathBuf,
    data_dir: Option<PathBuf>,
}

impl DiskFiles {
    /// Files beside `config` (relative paths in it resolve against its directory).
    pub(crate) fn beside(config: &Path, data_dir: Option<PathBuf>) -> Self {
        DiskFiles { base: config.parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf), data_dir }
    }
}

impl Files for DiskFiles {
    fn read(&self, path: &str) -> Result<Vec<u8>, String> {
        let p = self.base.join(path);
        std::fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    }

    fn data(&self, path: &str) -> Result<Option<Vec<u8>>, String> {
        if let Some(dir) = &self.data_dir {
            let p = dir.join(path);
            return match std::fs::read(&p) {
                Ok(b) => Ok(Some(b)),
                // A table the directory lacks is timed on the roofline (and reported so); a
                // directory that is not there was refused before the run (`main`).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("cannot read {}: {e}", p.display())),
            };
        }
        Ok(embedded::DATA.iter().find(|(p, _)| *p == path).map(|(_, b)| b.to_vec()))
    }
}

#[derive(Parser)]
#[command(
    name = "servesim",
    version,
    about = "Predict how an LLM serving deployment behaves, request by request."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// A summary table on stdout.
    Table,
    /// prediction.json on stdout.
    Json,
}

/// `--allreduce` (validate, estimate --default): which kernels time the all-reduce.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AllReduceArg {
    /// The engine's custom all-reduce kernels.
    Custom,
    /// NCCL.
    Nccl,
}

impl AllReduceArg {
    /// The implementation it names.
    pub(crate) fn implementation(self) -> servesim_perf::oplevel::AllReduceImpl {
        match self {
            AllReduceArg::Custom => servesim_perf::oplevel::AllReduceImpl::Custom,
            AllReduceArg::Nccl => servesim_perf::oplevel::AllReduceImpl::Nccl,
        }
    }

    /// Its `timing.allreduce` name.
    pub(crate) fn name(self) -> &'static str {
        self.implementation().name()
    }
}

/// `--moe-kernel` (validate, estimate --default): which kernels time the routed experts.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum MoeKernelArg {
    /// The tables' default lane (TensorRT-LLM's CUTLASS experts for nvfp4).
    Default,
    /// TensorRT-LLM's TRTLLM-gen experts (`moe_config.backend: TRTLLM`).
    MinLatency,
}

impl MoeKernelArg {
    /// The kernels it names.
    pub(crate) fn kernel(self) -> servesim_perf::oplevel::MoeKernel {
        match self {
            MoeKernelArg::Default => servesim_perf::oplevel::MoeKernel::Default,
            MoeKernelArg::MinLatency => servesim_perf::oplevel::MoeKernel::MinLatency,
        }
    }

    /// Its `timing.moe_kernel` name.
    pub(crate) fn name(self) -> &'static str {
        self.kernel().name()
    }
}

#[derive(Subcommand)]
enum Command {
    /// Replay traffic through a simulated deployment and report latency, throughput and more.
    Predict {
        /// Prediction config (AISimulate prediction.yaml schema; YAML or JSON).
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: PathBuf,
        /// Override a config value: dotted path = YAML value (repeatable, applied left to right).
        #[arg(long = "set", value_name = "PATH=YAML")]
        set: Vec<String>,
        /// Where prediction.json (and requests.jsonl) are written.
        #[arg(long, value_name = "DIR", default_value = "servesim-output")]
        output_dir: PathBuf,
        /// Replace an existing prediction in the output directory.
        #[arg(long)]
        overwrite: bool,
        /// What to print on stdout.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Also write requests.jsonl, one record per request.
        #[arg(long)]
        capture_per_request: bool,
        /// Root seed of every random stream (default: traffic.load.seed, 42).
        #[arg(long)]
        seed: Option<u64>,
        /// Extra sections in prediction.json: summary, memory, time, source, all (comma-separated).
        #[arg(long, value_name = "LIST", default_value = "summary")]
        detail: String,
        /// Read servesim's data (kernel tables under perf/) from this directory instead of the
        /// copy built into the binary, e.g. the output of `servesim data import-aic`.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Search deployments (domains in the config, `optimization` block) by replaying each one:
    /// top-N or Pareto front, fewest GPUs under an SLA, cost.
    Recommend {
        /// Recommend config: a prediction config with `{choices: [...]}`/`{range: ...}` domains.
        #[arg(short = 'c', long = "config", value_name = "FILE")]
        config: PathBuf,
        /// Override a config value: dotted path = YAML value (repeatable).
        #[arg(long = "set", value_name = "PATH=YAML")]
        set: Vec<String>,
        /// Where recommendation.json, recommendation.csv and recommendations/ are written.
        #[arg(long, value_name = "DIR", default_value = "servesim-recommend")]
        output_dir: PathBuf,
        /// Replace existing results in the output directory.
        #[arg(long)]
        overwrite: bool,
        /// Candidates simulated in parallel (default: the machine's cores).
        #[arg(long)]
        jobs: Option<usize>,
        /// Read servesim's data from this directory instead of the built-in copy.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Static estimate of one deployment's steady state from its step times (no replay);
    /// with --default, AIConfigurator's sweep: best aggregated and best disaggregated
    /// deployment within --total-gpus under TTFT/TPOT limits, winners confirmed by replay.
    Estimate {
        /// Prediction config (synthetic traffic; closed-loop concurrency or a request rate).
        #[arg(short = 'c', long = "config", value_name = "FILE", required_unless_present = "default")]
        config: Option<PathBuf>,
        /// Override a config value: dotted path = YAML value (repeatable).
        #[arg(long = "set", value_name = "PATH=YAML")]
        set: Vec<String>,
        /// What to print on stdout.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Read servesim's data from this directory instead of the built-in copy.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        #[command(flatten)]
        sweep: DefaultSweepArgs,
    },
    /// Replay measured deployments (calibration CSV) and report TTFT/TPOT errors.
    Validate {
        /// Measured results: AIConfigurator silicon_sample.csv columns.
        #[arg(long, value_name = "FILE", required_unless_present = "requests")]
        silicon: Option<PathBuf>,
        /// A measured per-request log (vLLM request timestamps, JSONL) to compare with --config.
        #[arg(long, value_name = "FILE", requires = "config", conflicts_with = "silicon")]
        requests: Option<PathBuf>,
        /// The scenario that replays the --requests workload.
        #[arg(long, short = 'c', value_name = "FILE")]
        config: Option<PathBuf>,
        #[command(flatten)]
        rows: validate::RowSelection,
        /// Write every row's prediction and error as CSV.
        #[arg(long, value_name = "FILE")]
        rows_csv: Option<PathBuf>,
        /// Write the report to FILE: JSON if it ends in .json (the command, the error of every
        /// family, class and the total, and every row), else Markdown (the table, its notes and
        /// every row not predicted).
        #[arg(long, value_name = "FILE", requires = "silicon")]
        report: Option<PathBuf>,
        /// Rows replayed in parallel (default: the machine's cores; the results do not depend
        /// on it).
        #[arg(long)]
        jobs: Option<usize>,
        /// Read servesim's data from this directory instead of the built-in copy.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// Replay with this prefill-share multiplier instead of the engines' calibrated one.
        #[arg(long, value_parser = positive)]
        prefill_scale: Option<f64>,
        /// Replay with this per-step engine overhead (ms).
        #[arg(long, value_parser = non_negative)]
        step_overhead_ms: Option<f64>,
        /// Replay with this frontend delay (ms).
        #[arg(long, value_parser = non_negative)]
        frontend_ms: Option<f64>,
        /// Replay with this host time per sequence (µs) for engines that schedule synchronously.
        #[arg(long, value_parser = non_negative)]
        host_us_per_sequence: Option<f64>,
        /// Replay with this all-reduce implementation (default: the engines' custom kernels).
        #[arg(long, value_enum)]
        allreduce: Option<AllReduceArg>,
        /// Replay every worker with these routed-expert kernels (default: each row's recipe,
        /// else the tables' default lane).
        #[arg(long, value_enum)]
        moe_kernel: Option<MoeKernelArg>,
        /// Replay aggregated rows with this serving-process time per request (ms).
        #[arg(long, value_parser = non_negative)]
        frontend_request_ms: Option<f64>,
        /// Replay aggregated rows with this serving-process time per streamed chunk (µs).
        #[arg(long, value_parser = non_negative)]
        frontend_chunk_us: Option<f64>,
        /// Replay aggregated rows with this serving-process time per prompt token (µs).
        #[arg(long, value_parser = non_negative)]
        frontend_prompt_token_us: Option<f64>,
        /// Replay every worker planning each step while the one before it runs (true) or
        /// between steps (false); default: as the engine release schedules.
        #[arg(long)]
        plan_ahead: Option<bool>,
        /// Sample ISL/OSL uniformly from this fraction of nominal up to nominal, as the
        /// benchmark and AISimulate's dashboard do; 1 replays them exactly as given.
        #[arg(long, default_value_t = servesim_scenario::validate::LENGTH_FLOOR, value_parser = fraction)]
        length_floor: f64,
        /// Requests each concurrency slot sends (AISimulate's replay policy: 10). Fewer weigh
        /// the cold start, when every client's first prompt arrives at once, more heavily.
        #[arg(long, default_value_t = servesim_scenario::validate::REQUESTS_PER_SLOT,
              value_parser = clap::value_parser!(u32).range(1..=10_000))]
        requests_per_slot: u32,
        /// Replay MLA models' `tp N, attention_dp 1` layouts as attention data parallelism over N GPUs.
        #[arg(long)]
        mla_attention_dp: bool,
        /// Replay with the policy's engine options only, not those of a row's published
        /// benchmark recipe (InferenceX's TensorRT-LLM Llama-3.1-70B token budget and batch
        /// waiting and its vLLM memory fraction, its SGLang DeepSeek-R1 receive interval on B200, the MTP drafts of its
        /// TensorRT-LLM DeepSeek-R1 runs on the MTP-only image, InferenceMAX's disaggregated
        /// deployments of its GB200 rows of 2025, the published deployments of disaggregated
        /// rows).
        #[arg(long)]
        no_recipes: bool,
        /// Replay every row's prompts drawn from this many distinct entries with prefix caching
        /// on, as aiperf and genai-perf send them (`--num-dataset-entries`, 100 unless set; a
        /// what-if for a filtered set of rows: the file records neither dataset nor cache).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
        prompt_pool: Option<u32>,
        /// Replay every row with MTP/EAGLE speculative decoding, this many drafts a round (a
        /// what-if for a filtered set of rows: the file does not record which runs speculated).
        #[arg(long, requires = "nextn_accepted", value_parser = clap::value_parser!(u32).range(1..=5))]
        nextn: Option<u32>,
        /// With --nextn: drafts accepted per round on average (0 to nextn).
        #[arg(long, requires = "nextn", value_parser = non_negative)]
        nextn_accepted: Option<f64>,
        /// Probability that each MTP draft is accepted, for the rows whose published
        /// InferenceX deployment speculated (default: the calibrated constant).
        #[arg(long, value_parser = probability)]
        mtp_acceptance: Option<f64>,
        /// Print the prediction.yaml each row is replayed as, instead of running it.
        #[arg(long)]
        show_scenarios: bool,
    },
    /// Fit the engine's timing constants (prefill multiplier, step overhead, frontend delay) to
    /// measured rows of one engine, replaying each row as `validate` does; reports the error
    /// before and after the fit and, with --folds, on rows the fit did not see.
    Calibrate {
        /// Measured results: AIConfigurator silicon_sample.csv columns, rows of one engine.
        #[arg(long, value_name = "FILE")]
        silicon: PathBuf,
        #[command(flatten)]
        rows: validate::RowSelection,
        /// Constants to fit, comma-separated: prefill_scale, step_overhead_ms, frontend_ms.
        #[arg(long, value_delimiter = ',', default_value = "prefill_scale,step_overhead_ms,frontend_ms")]
        fit: Vec<String>,
        /// Also score every row with constants fitted on the other rows: K-fold
        /// cross-validation (2 to the number of rows; 0: off). Costs K more fits.
        #[arg(long, default_value_t = 0)]
        folds: usize,
        /// What to print on stdout.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Also write the report to FILE: JSON if it ends in .json (`--format json`'s, with the
        /// command), else Markdown (the command and the table).
        #[arg(long, value_name = "FILE")]
        report: Option<PathBuf>,
        /// Rows replayed in parallel (default: the machine's cores; the fit does not depend on it).
        #[arg(long)]
        jobs: Option<usize>,
        /// Read servesim's data from this directory instead of the built-in copy.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Import and inspect data files (kernel tables, traces).
    Data {
        #[command(subcommand)]
        command: DataCommand,
    },
}

/// `servesim estimate --default`: AIConfigurator's `cli default` flags.
#[derive(clap::Args)]
pub(crate) struct DefaultSweepArgs {
    /// Sweep aggregated and disaggregated deployments instead of estimating one config.
    #[arg(long = "default", conflicts_with = "config")]
    pub(crate) default: bool,
    /// Model id (catalog or Hugging Face id), e.g. Qwen/Qwen3-32B-FP8.
    #[arg(long, required_if_eq("default", "true"))]
    pub(crate) model: Option<String>,
    /// GPU type (catalog id), e.g. h200_sxm.
    #[arg(long, required_if_eq("default", "true"))]
    pub(crate) system: Option<String>,
    /// Engine: trtllm (AIConfigurator's default), vllm or sglang.
    #[arg(long, default_value = "trtllm")]
    pub(crate) backend: String,
    /// GPUs the deployment may use.
    #[arg(long, required_if_eq("default", "true"))]
    pub(crate) total_gpus: Option<u32>,
    /// Prompt tokens per request.
    #[arg(long, default_value_t = 4000)]
    pub(crate) isl: u32,
    /// Output tokens per request.
    #[arg(long, default_value_t = 1000)]
    pub(crate) osl: u32,
    /// Leading prompt tokens every request shares (served from the prefix cache).
    #[arg(long, default_value_t = 0)]
    pub(crate) prefix: u32,
    /// Mean TTFT limit (ms).
    #[arg(long, default_value_t = 2000.0)]
    pub(crate) ttft: f64,
    /// Mean TPOT limit (ms).
    #[arg(long, default_value_t = 30.0)]
    pub(crate) tpot: f64,
    /// MTP/EAGLE speculative decoding: draft tokens a round (0: none).
    #[arg(long, default_value_t = 0)]
    pub(crate) nextn: u32,
    /// With --nextn: drafts accepted per round on average.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) nextn_accepted: f64,
    /// All-reduce kernels of every worker (default: the engine's custom kernels).
    #[arg(long, value_enum)]
    pub(crate) allreduce: Option<AllReduceArg>,
    /// Routed-expert kernels of every worker (default: the tables' default lane).
    #[arg(long, value_enum)]
    pub(crate) moe_kernel: Option<MoeKernelArg>,
    /// Winners per mode confirmed by a full replay (0: estimate only).
    #[arg(long, default_value_t = 1)]
    pub(crate) replay_top: usize,
    /// Threads for the confirming replays (default: the machine's cores).
    #[arg(long)]
    pub(crate) jobs: Option<usize>,
    /// Write estimate-default.json and the winners' prediction configs here.
    #[arg(long, value_name = "DIR")]
    pub(crate) output_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
enum DataCommand {
    /// Convert the AIConfigurator perf database into compact servesim tables.
    ImportAic {
        /// aiconfigurator_core/systems (from `pip download --no-deps aiconfigurator-core==0.12.0`).
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
        /// Output directory (servesim tables plus manifest.json).
        #[arg(long, value_name = "DIR", default_value = "data/perf")]
        out: PathBuf,
        /// Systems to import (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "h100_sxm,h200_sxm,b200_sxm")]
        systems: Vec<String>,
        /// Engines to import (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "vllm,sglang,trtllm")]
        backends: Vec<String>,
        /// Engine version to import instead of AIConfigurator's default: BACKEND=VERSION (repeatable).
        #[arg(long = "version", value_name = "BACKEND=VERSION")]
        versions: Vec<String>,
        /// Keep every shape, not only those the built-in catalog's models need.
        #[arg(long)]
        all_shapes: bool,
    },
    /// Write the op-level model's step times for a scenario's deployment as an FPM table pair
    /// (fpm_forward_perf.parquet + .metadata.json), one cell per worker role.
    ExportFpm {
        /// The scenario (prediction.yaml).
        config: PathBuf,
        /// Output directory.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Read servesim's data from this directory instead of the built-in copy.
        #[arg(long, value_name = "DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Summarise a data file: servesim or AIConfigurator Parquet tables, FPM tables, traces.
    Inspect {
        /// The file.
        file: PathBuf,
    },
}

/// A failure with its exit code.
pub(crate) struct Failure {
    pub(crate) code: u8,
    pub(crate) message: String,
}

impl From<ScenarioError> for Failure {
    fn from(e: ScenarioError) -> Self {
        Failure { code: u8::try_from(e.exit_code()).unwrap_or(1), message: e.to_string() }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let data_dir = match &cli.command {
        Command::Predict { data_dir, .. }
        | Command::Recommend { data_dir, .. }
        | Command::Estimate { data_dir, .. }
        | Command::Validate { data_dir, .. }
        | Command::Calibrate { data_dir, .. }
        | Command::Data { command: DataCommand::ExportFpm { data_dir, .. } } => data_dir.as_deref(),
        Command::Data { .. } => None,
    };
    // A mistyped --data-dir is refused before anything runs; otherwise every table would be
    // missing and every op timed on the roofline.
    if let Some(dir) = data_dir.filter(|d| !d.is_dir()) {
        eprintln!("error: --data-dir {}: no such directory", dir.display());
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Predict {
            config,
            set,
            output_dir,
            overwrite,
            format,
            capture_per_request,
            seed,
            detail,
            data_dir,
        } => match Details::parse(&detail) {
            Ok(details) => predict(
                &config,
                &set,
                &output_dir,
                &Options { overwrite, format, capture: capture_per_request, seed, details, data_dir },
            ),
            Err(message) => Err(Failure { code: 2, message }),
        },
        Command::Validate {
            silicon,
            requests,
            config,
            rows,
            rows_csv,
            report,
            jobs,
            data_dir,
            prefill_scale,
            step_overhead_ms,
            frontend_ms,
            host_us_per_sequence,
            allreduce,
            moe_kernel,
            frontend_request_ms,
            frontend_chunk_us,
            frontend_prompt_token_us,
            plan_ahead,
            length_floor,
            requests_per_slot,
            mla_attention_dp,
            no_recipes,
            prompt_pool,
            nextn,
            nextn_accepted,
            mtp_acceptance,
            show_scenarios,
        } => {
            let knobs = servesim_scenario::validate::Knobs {
                prefill_scale,
                step_overhead_ms,
                frontend_ms,
                host_us_per_sequence,
                allreduce: allreduce.map(AllReduceArg::implementation),
                moe_kernel: moe_kernel.map(MoeKernelArg::kernel),
                frontend_request_ms,
                frontend_chunk_us,
                frontend_prompt_token_us,
                plan_ahead,
                length_floor: Some(length_floor),
                requests_per_slot: Some(requests_per_slot),
                mla_attention_dp,
                no_recipes,
                speculation: nextn.zip(nextn_accepted),
                mtp_acceptance,
                prompt_pool,
            };
            // The ranges the page's Validate tab enforces too, and nextn-accepted within nextn.
            if let Err(message) = knobs.check() {
                Err(Failure { code: 2, message })
            } else if let (Some(log), Some(config)) = (&requests, &config) {
                validate::requests(log, config, data_dir)
            } else if let Some(silicon) = silicon.as_deref().filter(|_| show_scenarios) {
                validate::show_scenarios(silicon, &rows, data_dir, &knobs)
            } else if let Some(silicon) = silicon.as_deref() {
                validate::silicon(
                    silicon,
                    &rows,
                    validate::Outputs { rows_csv: rows_csv.as_deref(), report: report.as_deref() },
                    data_dir,
                    &knobs,
                    jobs_or_cores(jobs),
                )
            } else {
                Err(Failure {
                    code: 2,
                    message: "give --silicon FILE, or --requests FILE with --config FILE".into(),
                })
            }
        }
        Command::Calibrate { silicon, rows, fit, folds, format, report, jobs, data_dir } => {
            calibrate::run(&calibrate::CalibrateArgs {
                silicon: &silicon,
                rows: &rows,
                fit: &fit,
                folds,
                format,
                report: report.as_deref(),
                jobs: jobs_or_cores(jobs),
                data_dir,
            })
        }
        Command::Estimate { config, set, format, data_dir, sweep } => match config {
            Some(config) if !sweep.default => estimate::single(&config, &set, format, data_dir),
            _ => estimate::default_sweep(&sweep, format, data_dir),
        },
        Command::Recommend { config, set, output_dir, overwrite, jobs, data_dir } => {
            recommend(&config, &set, &output_dir, overwrite, jobs, data_dir)
        }
        Command::Data { command } => match command {
            DataCommand::ImportAic { from, out, systems, backends, versions, all_shapes } => {
                data::import_aic(&data::ImportArgs { from, out, systems, backends, versions, all_shapes })
            }
            DataCommand::ExportFpm { config, out, data_dir } => export_fpm(&config, &out, data_dir),
            DataCommand::Inspect { file } => data::inspect(&file),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            let msg = f.message.trim_end();
            eprintln!("error: {msg}");
            ExitCode::from(f.code)
        }
    }
}

/// `--jobs`, else the machine's cores; at least one.
/// A probability argument: a number from 0 to 1.
/// `text` as a number `ok` accepts, else a message saying it expected `what`.
fn number_where(text: &str, ok: fn(f64) -> bool, what: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(x) if ok(x) => Ok(x),
        _ => Err(format!("expected {what}, got '{text}'")),
    }
}

fn probability(text: &str) -> Result<f64, String> {
    number_where(text, |p| (0.0..=1.0).contains(&p), "a probability from 0 to 1")
}

fn fraction(text: &str) -> Result<f64, String> {
    number_where(text, |p| (0.0..=1.0).contains(&p), "a fraction from 0 to 1")
}

fn non_negative(text: &str) -> Result<f64, String> {
    number_where(text, |x| x.is_finite() && x >= 0.0, "a finite number of at least 0")
}

fn positive(text: &str) -> Result<f64, String> {
    number_where(text, |x| x.is_finite() && x > 0.0, "a finite number greater than 0")
}

fn jobs_or_cores(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)).max(1)
}

/// `servesim recommend`: evaluate every candidate on `jobs` threads, then rank and write.
fn recommend(
    config: &Path,
    set: &[String],
    output_dir: &Path,
    overwrite: bool,
    jobs: Option<usize>,
    data_dir: Option<PathBuf>,
) -> Result<(), Failure> {
    use servesim_scenario::recommend::{evaluate_parallel, finish, parse_spec, search, Candidate, Fidelity};
    let started = Instant::now();
    let (source, root, catalog) = load_config(config, set)?;
    let spec = parse_spec(&root, &source, &catalog)?;
    let json_path = output_dir.join("recommendation.json");
    if json_path.exists() && !overwrite {
        return Err(Failure {
            code: 2,
            message: format!(
                "{} exists; pass --overwrite or choose another --output-dir",
                json_path.display()
            ),
        });
    }
    let files = DiskFiles::beside(config, data_dir);
    let total = spec.len();
    let jobs = jobs_or_cores(jobs);
    let show = std::io::stderr().is_terminal();
    let mut lost = 0usize;
    let mut run = |indices: &[usize], fidelity: Fidelity| -> Vec<Candidate> {
        let progress = |d: usize, n: usize| {
            if show {
                eprint!("\r{}: {d}/{n} candidates   ", fidelity.name());
            }
        };
        let results = evaluate_parallel(&spec, indices, fidelity, &source, &catalog, &files, jobs, &progress);
        if show {
            eprintln!();
        }
        lost += indices.len() - results.len();
        results
    };
    let (results, stages) = search(&spec, &mut run);
    if lost > 0 {
        return Err(Failure { code: 1, message: format!("{lost} candidate evaluations did not finish") });
    }
    let sha = servesim_scenario::recommend::config_sha256(&root);
    let rec = finish(&spec, results, &sha, &stages);
    let dir = output_dir.join("recommendations");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure { code: 1, message: format!("cannot create {}: {e}", dir.display()) })?;
    let write = |p: PathBuf, text: &str| {
        std::fs::write(&p, text)
            .map_err(|e| Failure { code: 1, message: format!("cannot write {}: {e}", p.display()) })
    };
    let pretty =
        serde_json::to_string_pretty(&rec.json).map_err(|e| Failure { code: 1, message: e.to_string() })?;
    write(json_path, &(pretty + "\n"))?;
    write(output_dir.join("recommendation.csv"), &rec.csv)?;
    for (name, yaml) in &rec.yamls {
        write(dir.join(name), yaml)?;
    }
    say_raw!("{}", rec.summary);
    say!(
        "wrote {}/recommendation.json, recommendation.csv and {} configs in recommendations/ ({} candidates in {:.1} s on {jobs} threads)",
        output_dir.display(),
        rec.yamls.len(),
        total,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

pub(crate) fn write_file(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text)
        .map_err(|e| Failure { code: 1, message: format!("cannot write {}: {e}", path.display()) })
}

/// Streams requests.jsonl to `path` a record at a time (a million requests are about
/// 700 MB of text, which need not be in memory at once).
fn write_requests(path: &Path, requests: &servesim_scenario::report::Requests) -> Result<(), Failure> {
    let fail =
        |e: std::io::Error| Failure { code: 1, message: format!("cannot write {}: {e}", path.display()) };
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(fail)?);
    requests.write_jsonl(&mut out).map_err(fail)?;
    std::io::Write::flush(&mut out).map_err(fail)
}

/// `servesim data export-fpm`: the op-level model's grid for each role as one FPM file.
fn export_fpm(config: &Path, out: &Path, data_dir: Option<PathBuf>) -> Result<(), Failure> {
    let (source, root, catalog) = load_config(config, &[])?;
    let files = DiskFiles::beside(config, data_dir);
    let prepared = prepare(&root, &source, &catalog, None, &files)?;
    let mut cells = Vec::new();
    for i in 0..prepared.roles.len() {
        cells.push(servesim_scenario::fpmgrid::cell(&prepared, i)?);
    }
    let path = out.join("fpm_forward_perf.parquet");
    let name = path.display().to_string();
    let (bytes, sidecar) = servesim_data::fpm::write_fpm(&name, &cells, "servesim_op_level_prediction_v1")
        .map_err(|e| Failure { code: 1, message: e.to_string() })?;
    std::fs::create_dir_all(out)
        .map_err(|e| Failure { code: 1, message: format!("cannot create {}: {e}", out.display()) })?;
    let side = servesim_data::fpm::sidecar_path(&name);
    std::fs::write(&path, &bytes)
        .map_err(|e| Failure { code: 1, message: format!("cannot write {name}: {e}") })?;
    std::fs::write(&side, sidecar)
        .map_err(|e| Failure { code: 1, message: format!("cannot write {side}: {e}") })?;
    for c in &cells {
        say!("{}", c.describe());
    }
    say!("wrote {name} ({} bytes) and {side}", bytes.len());
    Ok(())
}

/// How `predict` writes its results.
struct Options {
    overwrite: bool,
    format: Format,
    capture: bool,
    seed: Option<u64>,
    details: Details,
    data_dir: Option<PathBuf>,
}

/// Reads a config file, applies `--set` overrides and loads the catalog.
pub(crate) fn load_config(
    config: &Path,
    set: &[String],
) -> Result<(String, servesim_scenario::node::Node, Catalog), Failure> {
    let source = config.display().to_string();
    let text = std::fs::read_to_string(config)
        .map_err(|e| Failure { code: 2, message: format!("cannot read {source}: {e}") })?;
    let overrides = set
        .iter()
        .map(|s| Override::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| Failure { code: 2, message: m })?;
    let catalog = Catalog::builtin().map_err(|e| Failure { code: 1, message: e.to_string() })?;
    let root = parse_with_overrides(&text, &source, &overrides)?;
    Ok((source, root, catalog))
}

/// An uncertainty band's further replays (`evaluation.uncertainty`), on every core, each
/// thread preparing its own: the replays are independent, so the band is the same on any
/// number of threads.
fn add_bands(
    prepared: &Prepared,
    again: &(dyn Fn() -> Result<Prepared, ScenarioError> + Sync),
    prediction: &mut servesim_scenario::Prediction,
) -> Result<(), Failure> {
    use servesim_scenario::uncertainty::{further_replays, variant};
    let n = further_replays(prepared);
    if n == 0 {
        return Ok(());
    }
    let show = std::io::stderr().is_terminal();
    let progress = |done: usize, n: usize| {
        if show {
            eprint!("\runcertainty band: {}/{} replays   ", done + 1, n + 1);
        }
    };
    let runs = servesim_scenario::parallel::map(
        n,
        jobs_or_cores(None),
        &|i| again().and_then(|p| variant(&p, i + 1).run_once()).map(|p| p.json).map_err(|e| e.to_string()),
        &progress,
    );
    if show {
        eprintln!();
    }
    let mut others = Vec::with_capacity(runs.len());
    for (i, r) in runs.into_iter().enumerate() {
        let seed = prepared.seed.wrapping_add(i as u64 + 1);
        match r {
            Some(Ok(json)) => others.push(json),
            Some(Err(e)) => {
                return Err(Failure { code: 1, message: format!("run failed (seed {seed}): {e}") })
            }
            None => {
                return Err(Failure {
                    code: 1,
                    message: format!(
                        "the replay of seed {seed} panicked: a bug in servesim (its message is above)"
                    ),
                })
            }
        }
    }
    servesim_scenario::uncertainty::attach(&mut prediction.json, prepared, &others);
    Ok(())
}

fn predict(config: &Path, set: &[String], output_dir: &Path, opts: &Options) -> Result<(), Failure> {
    let Options { overwrite, format, capture, seed, details, ref data_dir } = *opts;
    let started = Instant::now();
    let (source, root, catalog) = load_config(config, set)?;
    let files = DiskFiles::beside(config, data_dir.clone());
    let prepared = prepare(&root, &source, &catalog, seed, &files)?;

    let prediction_path = output_dir.join("prediction.json");
    if prediction_path.exists() && !overwrite {
        return Err(Failure {
            code: 2,
            message: format!(
                "{} exists; pass --overwrite or choose another --output-dir",
                prediction_path.display()
            ),
        });
    }

    let mut sim = prepared.start();
    let show_progress = std::io::stderr().is_terminal();
    loop {
        let p =
            sim.run_slice(200_000).map_err(|e| Failure { code: 1, message: format!("run failed: {e}") })?;
        if show_progress && p.total_requests > 0 {
            #[allow(clippy::cast_precision_loss)]
            let frac = p.finished_requests as f64 / p.total_requests as f64;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let filled = (frac * 30.0) as usize;
            eprint!(
                "\r[{}{}] {:>3.0}% {}/{} requests, simulated {:.1} s",
                "#".repeat(filled),
                " ".repeat(30 - filled.min(30)),
                frac * 100.0,
                p.finished_requests,
                p.total_requests,
                p.now.as_ms_f64() / 1000.0
            );
            let _ = std::io::stderr().flush();
        }
        if p.stopped.is_some() {
            break;
        }
    }
    if show_progress {
        eprintln!();
    }
    let mut prediction = prepared.finish(sim);
    add_bands(&prepared, &|| prepare(&root, &source, &catalog, seed, &files), &mut prediction)?;
    add_details(&prepared, &mut prediction, details);
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;

    std::fs::create_dir_all(output_dir)
        .map_err(|e| Failure { code: 1, message: format!("cannot create {}: {e}", output_dir.display()) })?;
    let json = to_pretty_json(&prediction.json);
    write_file(&prediction_path, &json)?;
    if capture {
        write_requests(&output_dir.join("requests.jsonl"), &prediction.requests)?;
    }
    // Host-side figures live outside prediction.json so that file is identical run to run.
    let s = &prediction.summary;
    let runtime = serde_json::json!({
        "wall_time_ms": wall_ms,
        "processed_tokens_per_s": if wall_ms > 0.0 { s.processed_tokens as f64 / (wall_ms / 1000.0) } else { 0.0 },
        "processed_output_tokens_per_s": if wall_ms > 0.0 { s.total_output_tokens as f64 / (wall_ms / 1000.0) } else { 0.0 },
        "simulated_requests_per_s": if wall_ms > 0.0 { s.num_requests as f64 / (wall_ms / 1000.0) } else { 0.0 },
    });
    write_file(&output_dir.join("resource-runtime.json"), &to_pretty_json(&runtime))?;

    match format {
        Format::Table => {
            say_raw!("{}", summary_table(&prediction));
            say!("\nwrote {}{}", prediction_path.display(), if capture { " and requests.jsonl" } else { "" });
        }
        Format::Json => say_raw!("{json}"),
    }
    eprintln!("wall time {:.0} ms", wall_ms);
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;
    use servesim_scenario::validate::{Knobs, OptionKind, OPTIONS};

    use super::Cli;

    /// The page's Validate tab sets the replay from `OPTIONS`; each must be `validate`'s flag
    /// of the same name, taking the same values.
    #[test]
    fn the_replay_options_are_validates_flags_with_their_ranges() {
        let samples =
            ["-1", "0", "0.5", "1", "3", "5.5", "6", "1e9", "inf", "NaN", "x", "nccl", "min-latency", "true"];
        for option in OPTIONS {
            let flag = format!("--{}", option.flag);
            for sample in samples {
                let mut args = vec!["servesim", "validate", "--silicon", "f.csv"];
                if option.kind == OptionKind::Switch {
                    args.push(&flag);
                } else {
                    args.extend([flag.as_str(), sample]);
                }
                // nextn and its acceptance are given together, within the drafts.
                let partner = match option.flag {
                    "nextn" => ["--nextn-accepted", "0"],
                    "nextn-accepted" => ["--nextn", "5"],
                    _ => ["", ""],
                };
                args.extend(partner.iter().filter(|a| !a.is_empty()));
                // Accepting more drafts than proposed passes clap; `validate` then refuses it
                // with the page's own check.
                let over = option.flag == "nextn-accepted" && sample.parse::<f64>().is_ok_and(|x| x > 5.0);
                let clap_takes = Cli::command().try_get_matches_from(&args).is_ok() && !over;
                let value = if option.kind == OptionKind::Switch { "true" } else { sample };
                let pairs = [(option.flag, value), (partner[0].trim_start_matches('-'), partner[1])];
                let page_takes =
                    Knobs::from_options(pairs.into_iter().filter(|(f, _)| !f.is_empty())).is_ok();
                assert_eq!(clap_takes, page_takes, "{flag} {sample}: the CLI and the page disagree");
                if option.kind == OptionKind::Switch {
                    assert!(clap_takes, "{flag}");
                    break;
                }
            }
        }
    }
}
