//! The public traces in ../shared/traces parse completely (skipped when they are absent).
#![allow(clippy::unwrap_used)]

use servesim_data::trace::{parse_azure, parse_mooncake};

#[test]
fn shared_traces_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
    let Ok(conv) = std::fs::read(dir.join("mooncake_conversation_trace.jsonl")) else { return };
    let t = parse_mooncake(&conv, "conversation", 512).unwrap();
    assert_eq!(t.trace.rows.len(), 12_031);
    assert_eq!(t.untimed_line, None);
    let azure = std::fs::read(dir.join("AzureLLMInferenceTrace_conv_2023.csv")).unwrap();
    let a = parse_azure(&azure, "azure").unwrap().trace;
    assert_eq!(a.rows.len(), 19_366);
    // 18:15:46.68 to 19:14:08.40.
    assert!((a.rows.last().unwrap().timestamp.as_secs_f64() - 3501.72).abs() < 0.01);
}
