//! Chart builders: pure functions from a prediction to a plotly figure (`data`, `layout`).
//! They know nothing of the browser and are tested natively.

use serde_json::{json, Value};

/// A plotly figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Traces.
    pub data: Value,
    /// Layout.
    pub layout: Value,
}

fn base_layout(title: &str, x: &str, y: &str) -> Value {
    json!({
        "title": {"text": title, "font": {"size": 14}},
        "xaxis": {"title": {"text": x}, "zeroline": false},
        "yaxis": {"title": {"text": y}, "zeroline": false, "rangemode": "tozero"},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"color": "#8a94a6"},
        "showlegend": false,
    })
}

/// Point count above which scatter plots switch to WebGL.
const WEBGL_THRESHOLD: usize = 5000;

/// Time to first token of each completed request against its arrival time.
#[must_use]
pub fn ttft_by_arrival(requests_jsonl: &str) -> Figure {
    let mut x = Vec::new();
    let mut y = Vec::new();
    for line in requests_jsonl.lines() {
        let Ok(r) = serde_json::from_str::<Value>(line) else { continue };
        if let (Some(a), Some(t)) = (r["arrival_time_ms"].as_f64(), r["ttft_ms"].as_f64()) {
            x.push(a / 1000.0);
            y.push(t);
        }
    }
    // SVG scatter is crisp and needs no GPU; WebGL only pays off for large runs.
    let kind = if x.len() > WEBGL_THRESHOLD { "scattergl" } else { "scatter" };
    Figure {
        data: json!([{
            "type": kind,
            "mode": "markers",
            "x": x,
            "y": y,
            "marker": {"size": 6, "color": "#3b82f6"},
            "hovertemplate": "arrival %{x:.3f} s<br>TTFT %{y:.1f} ms<extra></extra>",
        }]),
        layout: base_layout("Time to first token by arrival time", "arrival time (s)", "TTFT (ms)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttft_chart_takes_completed_requests_only() {
        let jsonl = "{\"arrival_time_ms\": 1500.0, \"ttft_ms\": 20.5}\n{\"arrival_time_ms\": 10.0, \"ttft_ms\": null}\nnot json\n";
        let f = ttft_by_arrival(jsonl);
        assert_eq!(f.data[0]["x"], json!([1.5]));
        assert_eq!(f.data[0]["y"], json!([20.5]));
        assert_eq!(f.layout["xaxis"]["title"]["text"], "arrival time (s)");
    }
}
