//! Measured end-to-end results of real deployments (`calibration.csv`, the columns of
//! AIConfigurator's `silicon_sample.csv`, AICDB §3.3): one row per benchmark point with its
//! deployment, ISL/OSL, concurrency and the measured TTFT and TPOT.

use std::fmt;

/// A calibration file could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct SiliconError {
    /// File name as given.
    pub file: String,
    /// Line (1-based) when the problem is on one.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SiliconError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// Parallel layout of one worker role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Tensor parallel degree (attention).
    pub tp: u32,
    /// Pipeline stages.
    pub pp: u32,
    /// Attention data-parallel ranks.
    pub dp: u32,
    /// MoE tensor parallel degree.
    pub moe_tp: u32,
    /// MoE expert parallel degree.
    pub moe_ep: u32,
    /// Requests per attention-DP rank the benchmark ran at (the engine's batch).
    pub batch: u32,
}

/// Aggregated or disaggregated serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One pool.
    Agg {
        /// Its layout.
        layout: Layout,
    },
    /// Prefill and decode pools.
    Disagg {
        /// Prefill layout.
        prefill: Layout,
        /// Prefill workers (`None` when the file leaves the count blank).
        prefill_workers: Option<u32>,
        /// Decode layout.
        decode: Layout,
        /// Decode workers (`None` when the file leaves the count blank).
        decode_workers: Option<u32>,
    },
}

/// One measured benchmark point.
#[derive(Clone, Debug, PartialEq)]
pub struct SiliconRow {
    /// Line in the file (1-based, header is line 1).
    pub line: usize,
    /// Row id.
    pub id: String,
    /// `silicon_data_source`: where the measurement comes from (file, notes).
    pub source: String,
    /// Engine (`vllm`, `sglang`, `trtllm`).
    pub backend: String,
    /// Engine version measured (may be empty).
    pub backend_version: String,
    /// Hugging Face model id.
    pub model: String,
    /// GPU id (`h200_sxm`, ...).
    pub system: String,
    /// Precision label (`fp8`, `fp4`, ...; empty for the checkpoint's own).
    pub precision: String,
    /// GEMM quantisation (`fp8`, `fp8_block`, `nvfp4`, ...; empty for the checkpoint's own).
    pub gemm_quant: String,
    /// MoE quantisation (empty for the checkpoint's own).
    pub moe_quant: String,
    /// Prompt tokens.
    pub isl: u32,
    /// Output tokens.
    pub osl: u32,
    /// Requests in flight (the benchmark's concurrency).
    pub concurrency: u32,
    /// The deployment.
    pub mode: Mode,
    /// Measured time to first token (ms).
    pub ttft_ms: f64,
    /// Measured time per output token (ms).
    pub tpot_ms: f64,
}

impl SiliconRow {
    /// Whether the deployment is disaggregated.
    #[must_use]
    pub fn disaggregated(&self) -> bool {
        matches!(self.mode, Mode::Disagg { .. })
    }
}

/// The attention data-parallel degree a layout that leaves `attention_dp_size` blank ran
/// with. AIConfigurator's layouts spread the experts over the GPUs attention runs on
/// (`tp × attention_dp = moe_tp × moe_ep`), and vLLM serves an MoE model with
/// `--data-parallel-size` that way: its expert layers form one DP × TP group, tensor
/// parallel unless expert parallelism is enabled. So a MoE width that is a whole multiple
/// of `tp` above it (vLLM rows recorded as `tp 1, moe_tp 2`) was attention data parallelism
/// over the quotient; anything else (dense models, whose MoE width is 1) reads as one rank.
fn blank_attention_dp(tp: u32, moe_width: u32) -> u32 {
    if moe_width > tp && moe_width.is_multiple_of(tp) {
        moe_width / tp
    } else {
        1
    }
}

/// Parses a calibration CSV.
///
/// # Errors
/// A [`SiliconError`] naming the line and column of the first malformed row.
#[allow(clippy::too_many_lines)]
pub fn parse(bytes: &[u8], file: &str) -> Result<Vec<SiliconRow>, SiliconError> {
    let err = |line: Option<usize>, message: String| SiliconError { file: file.to_string(), line, message };
    let mut rdr = csv::ReaderBuilder::new().flexible(false).from_reader(bytes);
    let headers = rdr.headers().map_err(|e| err(Some(1), format!("cannot read the header: {e}")))?.clone();
    let col = |name: &str| headers.iter().position(|h| h == name);
    for need in
        ["model_path", "system", "backend", "mode", "isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms"]
    {
        if col(need).is_none() {
            return Err(err(Some(1), format!("missing column '{need}'")));
        }
    }
    let mut out = Vec::new();
    for (i, rec) in rdr.records().enumerate() {
        let line = i + 2;
        let rec = rec.map_err(|e| err(Some(line), format!("malformed row: {e}")))?;
        let text = |name: &str| col(name).and_then(|c| rec.get(c)).unwrap_or("").trim().to_string();
        let num = |name: &str| -> Result<Option<f64>, SiliconError> {
            let t = text(name);
            if t.is_empty() {
                return Ok(None);
            }
            t.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .map(Some)
                .ok_or_else(|| err(Some(line), format!("'{name}' is not a number: '{t}'")))
        };
        let count = |name: &str, default: u32| -> Result<u32, SiliconError> {
            match num(name)? {
                None => Ok(default),
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                Some(v) if v >= 1.0 && v.fract() == 0.0 && v < 1e7 => Ok(v as u32),
                Some(v) => Err(err(Some(line), format!("'{name}' must be a positive whole number, got {v}"))),
            }
        };
        let known = |name: &str| -> Result<Option<u32>, SiliconError> {
            if text(name).is_empty() {
                Ok(None)
            } else {
                count(name, 1).map(Some)
            }
        };
        // Parallel degrees of 0 mean "not used" in these files: one rank.
        let degree = |name: &str| -> Result<u32, SiliconError> {
            if num(name)? == Some(0.0) {
                Ok(1)
            } else {
                count(name, 1)
            }
        };
        let layout = |prefix: &str| -> Result<Layout, SiliconError> {
            let tp = degree(&format!("{prefix}tp_size"))?;
            let moe_tp = degree(&format!("{prefix}moe_tp_size"))?;
            let moe_ep = degree(&format!("{prefix}moe_ep_size"))?;
            let dp_column = format!("{prefix}attention_dp_size");
            let dp = if text(&dp_column).is_empty() {
                blank_attention_dp(tp, moe_tp.saturating_mul(moe_ep))
            } else {
                degree(&dp_column)?
            };
            Ok(Layout {
                tp,
                pp: degree(&format!("{prefix}pp_size"))?,
                dp,
                moe_tp,
                moe_ep,
                batch: count(&format!("{prefix}batch_size"), 1)?,
            })
        };
        let mode = match text("mode").as_str() {
            "agg" => Mode::Agg { layout: layout("")? },
            "disagg" => Mode::Disagg {
                prefill: layout("prefill_")?,
                prefill_workers: known("prefill_num_workers")?,
                decode: layout("decode_")?,
                decode_workers: known("decode_num_workers")?,
            },
            other => return Err(err(Some(line), format!("'mode' must be agg or disagg, got '{other}'"))),
        };
        // The benchmark's concurrency is recorded in the source note; otherwise it is the
        // decode batch over every rank and worker.
        let source = text("silicon_data_source");
        let noted = source
            .split(';')
            .filter_map(|p| p.trim().strip_prefix("silicon_concurrency="))
            .find_map(|v| v.trim().parse::<u32>().ok());
        let concurrency = noted.unwrap_or(match mode {
            Mode::Agg { layout } => layout.batch * layout.dp,
            Mode::Disagg { decode, decode_workers, .. } => {
                decode.batch * decode.dp * decode_workers.unwrap_or(1)
            }
        });
        let positive = |name: &str| -> Result<f64, SiliconError> {
            match num(name)? {
                Some(v) if v > 0.0 => Ok(v),
                _ => Err(err(Some(line), format!("'{name}' must be a positive number"))),
            }
        };
        out.push(SiliconRow {
            line,
            id: text("id"),
            source: source.clone(),
            backend: text("backend"),
            backend_version: text("backend_version"),
            model: text("model_path"),
            system: text("system"),
            precision: text("precision"),
            gemm_quant: text("gemm_quant_mode"),
            moe_quant: text("moe_quant_mode"),
            isl: count("isl", 0)?,
            osl: count("osl", 0)?,
            concurrency: concurrency.max(1),
            mode,
            ttft_ms: positive("silicon_ttft_ms")?,
            tpot_ms: positive("silicon_tpot_ms")?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n";

    #[test]
    fn agg_and_disagg_rows() {
        let text = format!(
            "{HEAD}a,x; silicon_concurrency=512; y,vllm,0.19.0,m/a,b200_sxm,fp8,agg,1024,1024,fp8,fp8,256,2,1,2,1,4,,,,,,,,,,,,,,,205.5,17.7\n\
             d,x,trtllm,1.1,m/b,gb200,fp4,disagg,8192,1024,nvfp4,nvfp4,,,,,,,1,1,1,1,4,1,4,90,4,8,1,1,1,8,494.5,14.2\n"
        );
        let rows = parse(text.as_bytes(), "c.csv").unwrap();
        assert_eq!(rows[0].concurrency, 512);
        assert_eq!(
            rows[0].mode,
            Mode::Agg { layout: Layout { tp: 2, pp: 1, dp: 2, moe_tp: 1, moe_ep: 4, batch: 256 } }
        );
        assert_eq!(rows[1].concurrency, 360, "decode batch x workers when no note");
        assert!(rows[1].disaggregated());
        let blank = text.replace(",90,4,8,", ",90,,8,").replace(",1,1,1,1,4,1,4,", ",1,,1,1,4,1,4,");
        let rows = parse(blank.as_bytes(), "c.csv").unwrap();
        let Mode::Disagg { prefill_workers, decode_workers, .. } = rows[1].mode else { panic!() };
        assert_eq!((prefill_workers, decode_workers), (None, None), "blank counts stay unknown");
        assert_eq!(rows[1].concurrency, 90, "one decode worker assumed for the concurrency");
    }

    #[test]
    fn a_blank_attention_dp_is_the_moe_width_over_tp() {
        // vLLM's Qwen3-235B rows: TP1 attention with experts over two GPUs, DP left blank.
        let row = |tp: &str, dp: &str, moe_tp: &str, moe_ep: &str| {
            format!(
                "{HEAD}a,x,vllm,0.12.0,m/a,h200_sxm,fp8,agg,1000,100,fp8,fp8,8,{tp},1,{dp},{moe_tp},{moe_ep},,,,,,,,,,,,,,,356.9,54.9\n"
            )
        };
        let layout = |text: String| match parse(text.as_bytes(), "c.csv").unwrap()[0].mode {
            Mode::Agg { layout } => (layout.tp, layout.dp, layout.moe_tp, layout.moe_ep),
            Mode::Disagg { .. } => panic!("aggregated row"),
        };
        assert_eq!(layout(row("1", "", "2", "1")), (1, 2, 2, 1));
        assert_eq!(layout(row("2", "", "4", "1")), (2, 2, 4, 1));
        assert_eq!(layout(row("1", "", "1", "4")), (1, 4, 1, 4));
        assert_eq!(layout(row("2", "", "2", "1")), (2, 1, 2, 1), "MoE width equal to TP: no DP");
        assert_eq!(layout(row("4", "", "1", "1")), (4, 1, 1, 1), "dense: no DP");
        assert_eq!(layout(row("2", "", "3", "1")), (2, 1, 3, 1), "not a multiple: left as written");
        assert_eq!(layout(row("1", "1", "2", "1")), (1, 1, 2, 1), "a recorded degree is kept");
    }

    #[test]
    fn bad_rows_name_line_and_column() {
        let text = format!(
            "{HEAD}a,x,vllm,0.19.0,m/a,b200_sxm,fp8,agg,lots,1024,fp8,fp8,8,1,1,1,1,1,,,,,,,,,,,,,,,1,1\n"
        );
        let e = parse(text.as_bytes(), "c.csv").unwrap_err();
        assert_eq!(e.line, Some(2));
        assert!(e.message.contains("'isl'"), "{e}");
        let e = parse(b"a,b\n1,2\n", "c.csv").unwrap_err();
        assert!(e.message.contains("missing column"), "{e}");
        let text = format!(
            "{HEAD}a,x,vllm,0.19.0,m/a,b200_sxm,fp8,agg,8,8,fp8,fp8,8,1,1,1,1,1,,,,,,,,,,,,,,,-1,1\n"
        );
        assert!(parse(text.as_bytes(), "c.csv").unwrap_err().message.contains("silicon_ttft_ms"));
    }
}

/// One request of a measured per-request log (vLLM request-level timestamps, seconds).
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredRequest {
    /// `request_id`.
    pub id: String,
    /// `input_toks`.
    pub input_tokens: u64,
    /// `output_toks`.
    pub output_tokens: u64,
    /// `first_token_ts − queued_ts`, in ms.
    pub ttft_ms: f64,
    /// `(last_token_ts − first_token_ts) / (output_toks − 1)`, in ms; `None` for one-token outputs.
    pub tpot_ms: Option<f64>,
}

/// Parses a per-request JSONL log with `request_id`, `input_toks`, `output_toks`,
/// `queued_ts`, `first_token_ts` and `last_token_ts` (seconds) on every line.
///
/// # Errors
/// A line that is not JSON, lacks a field, or has timestamps out of order (naming the line).
pub fn parse_request_log(bytes: &[u8], file: &str) -> Result<Vec<MeasuredRequest>, SiliconError> {
    let err =
        |line: usize, message: String| SiliconError { file: file.to_string(), line: Some(line), message };
    let text = std::str::from_utf8(bytes).map_err(|_| SiliconError {
        file: file.to_string(),
        line: None,
        message: "not UTF-8 text".into(),
    })?;
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(raw).map_err(|e| err(line, format!("not a JSON object: {e}")))?;
        let num = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_f64)
                .ok_or_else(|| err(line, format!("missing number '{k}'")))
        };
        let int = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| err(line, format!("missing integer '{k}'")))
        };
        let (queued, first, last) = (num("queued_ts")?, num("first_token_ts")?, num("last_token_ts")?);
        if !(queued <= first && first <= last) {
            return Err(err(
                line,
                "timestamps out of order (queued_ts <= first_token_ts <= last_token_ts)".into(),
            ));
        }
        let output_tokens = int("output_toks")?;
        #[allow(clippy::cast_precision_loss)]
        let tpot_ms = (output_tokens > 1).then(|| (last - first) * 1e3 / (output_tokens - 1) as f64);
        out.push(MeasuredRequest {
            id: v.get("request_id").and_then(serde_json::Value::as_str).unwrap_or_default().to_string(),
            input_tokens: int("input_toks")?,
            output_tokens,
            ttft_ms: (first - queued) * 1e3,
            tpot_ms,
        });
    }
    if out.is_empty() {
        return Err(SiliconError { file: file.to_string(), line: None, message: "no requests".into() });
    }
    Ok(out)
}

#[cfg(test)]
mod request_log_tests {
    use super::*;

    #[test]
    fn request_logs_give_ttft_and_tpot_and_name_bad_lines() {
        let log = b"{\"request_id\":\"a\",\"input_toks\":10,\"output_toks\":5,\"queued_ts\":1.0,\"first_token_ts\":1.25,\"last_token_ts\":1.65}\n\n{\"request_id\":\"b\",\"input_toks\":3,\"output_toks\":1,\"queued_ts\":2.0,\"first_token_ts\":2.5,\"last_token_ts\":2.5}\n";
        let r = parse_request_log(log, "log.jsonl").unwrap();
        assert_eq!(r.len(), 2);
        assert!((r[0].ttft_ms - 250.0).abs() < 1e-9);
        assert!((r[0].tpot_ms.unwrap() - 100.0).abs() < 1e-9);
        assert_eq!(r[1].tpot_ms, None);
        let e = parse_request_log(b"{\"request_id\":\"a\"}\n", "log.jsonl").unwrap_err();
        assert_eq!(e.to_string(), "log.jsonl:1: missing number 'queued_ts'");
        let e = parse_request_log(
            b"{\"input_toks\":1,\"output_toks\":2,\"queued_ts\":3,\"first_token_ts\":2,\"last_token_ts\":4}",
            "x",
        )
        .unwrap_err();
        assert!(e.to_string().contains("out of order"), "{e}");
        assert!(parse_request_log(b"\n", "x").is_err());
    }
}
