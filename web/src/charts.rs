//! Chart builders: pure functions from a prediction to a plotly figure (`data`, `layout`).
//! They know nothing of the browser and are tested natively.

use serde_json::{json, Value};

use crate::requests::Row;

/// A plotly figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    /// Traces.
    pub data: Value,
    /// Layout.
    pub layout: Value,
}

/// Grid lines: the muted text colour at low opacity.
const GRID_COLOR: &str = "rgba(138,148,166,0.3)";

fn base_layout(title: &str, x: &str, y: &str) -> Value {
    json!({
        "title": {"text": title, "font": {"size": 14}},
        // A muted grid that reads in light and dark themes alike (plotly's default is white).
        "xaxis": {"title": {"text": x}, "zeroline": false, "gridcolor": GRID_COLOR},
        "yaxis": {"title": {"text": y}, "zeroline": false, "rangemode": "tozero", "gridcolor": GRID_COLOR},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"color": "#8a94a6"},
        "showlegend": false,
    })
}

/// Point count above which scatter plots switch to WebGL.
const WEBGL_THRESHOLD: usize = 5000;

/// Time to first token of each completed request against its arrival time (`rows`: parsed
/// requests.jsonl records).
#[must_use]
pub fn ttft_by_arrival(rows: &[Row]) -> Figure {
    let mut x = Vec::new();
    let mut y = Vec::new();
    for r in rows {
        if let (Some(a), Some(t)) = (r.arrival_time_ms, r.ttft_ms) {
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

fn request_values(rows: &[Row], key: &str) -> Vec<f64> {
    rows.iter().filter_map(|r| r.num(key)).collect()
}

/// Empirical CDF of a per-request figure (`ttft_ms`, `tpot_ms`, `e2e_latency_ms`, ...).
#[must_use]
pub fn cdf(rows: &[Row], key: &str, title: &str, unit: &str) -> Figure {
    let mut v = request_values(rows, key);
    v.sort_by(f64::total_cmp);
    #[allow(clippy::cast_precision_loss)]
    let n = v.len() as f64;
    #[allow(clippy::cast_precision_loss)]
    let y: Vec<f64> = (1..=v.len()).map(|i| i as f64 / n).collect();
    let mut layout = base_layout(title, unit, "fraction of requests");
    layout["yaxis"]["range"] = json!([0, 1]);
    Figure {
        data: json!([{
            "type": "scatter", "mode": "lines", "x": v, "y": y, "line": {"shape": "hv", "color": "#3b82f6"},
            "hovertemplate": "%{x:.1f}<br>%{y:.1%} of requests<extra></extra>",
        }]),
        layout,
    }
}

/// Requests arriving per second over the run (the offered load), in `bins` bins, from records
/// that each stand for `every` requests (an even sample of a long run).
#[must_use]
pub fn offered_load(rows: &[Row], bins: usize, every: u64) -> Figure {
    let arrivals = request_values(rows, "arrival_time_ms");
    let end = arrivals.iter().copied().fold(0.0f64, f64::max);
    let bins = bins.max(1);
    #[allow(clippy::cast_precision_loss)]
    let width_ms = (end / bins as f64).max(1.0);
    let mut counts = vec![0u32; bins];
    for a in &arrivals {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let k = ((a / width_ms) as usize).min(bins - 1);
        counts[k] += 1;
    }
    #[allow(clippy::cast_precision_loss)]
    let x: Vec<f64> = (0..bins).map(|k| (k as f64 + 0.5) * width_ms / 1000.0).collect();
    #[allow(clippy::cast_precision_loss)] // Sampling steps are far below 2^53.
    let weight = every.max(1) as f64;
    let y: Vec<f64> = counts.iter().map(|c| f64::from(*c) * weight / (width_ms / 1000.0)).collect();
    Figure {
        data: json!([{
            "type": "bar", "x": x, "y": y, "marker": {"color": "#60a5fa"},
            "hovertemplate": "%{x:.1f} s<br>%{y:.2f} req/s<extra></extra>",
        }]),
        layout: base_layout("Offered load", "time (s)", "arrivals (req/s)"),
    }
}

/// Whether a time-series worker ever existed: a slot the autoscaling planner never started
/// has `provisioned_ms` 0 and is left out of charts.
#[must_use]
pub fn ever_provisioned(worker: &Value) -> bool {
    worker["provisioned_ms"].as_f64().is_none_or(|ms| ms > 0.0)
}

/// One line per worker of a time series in prediction.json (`servesim.time_series`):
/// `waiting`, `running`, `kv_blocks_used` or `tokens_per_s`.
#[must_use]
pub fn worker_series(prediction: &Value, field: &str, title: &str, unit: &str) -> Figure {
    let ts = &prediction["servesim"]["time_series"];
    let t: Vec<f64> = ts["time_ms"]
        .as_array()
        .map_or(Vec::new(), |a| a.iter().filter_map(Value::as_f64).map(|ms| ms / 1000.0).collect());
    let data: Vec<Value> = ts["workers"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter(|w| ever_provisioned(w))
        .map(|w| {
            let name = format!("{} {}", w["role"].as_str().unwrap_or("worker"), w["worker"]);
            json!({
                "type": "scatter", "mode": "lines", "name": name, "x": t, "y": w[field],
                "line": {"width": 1.5, "shape": "hv"},
                "hovertemplate": format!("{name}<br>%{{x:.1f}} s: %{{y:.0f}} {unit}<extra></extra>"),
            })
        })
        .collect();
    let mut layout = base_layout(title, "time (s)", unit);
    layout["showlegend"] = json!(data.len() > 1);
    Figure { data: Value::Array(data), layout }
}

/// Workers of each pool over the run: serving, and provisioned (serving, starting or draining)
/// as the autoscaling planner changed them; a fixed fleet is one flat line a role.
#[must_use]
pub fn fleet(prediction: &Value) -> Figure {
    let end_s = prediction["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0;
    let mut data = Vec::new();
    let pools = prediction["servesim"]["planner"]["pools"].as_array().map_or(&[][..], Vec::as_slice);
    if pools.is_empty() {
        for r in prediction["servesim"]["deployment"]["roles"].as_array().map_or(&[][..], Vec::as_slice) {
            let name = r["role"].as_str().unwrap_or("workers").to_string();
            data.push(json!({
                "type": "scatter", "mode": "lines", "name": name, "x": [0.0, end_s], "y": [r["replicas"], r["replicas"]],
                "line": {"width": 2, "shape": "hv"},
            }));
        }
    }
    for pool in pools {
        let role = pool["role"].as_str().unwrap_or("workers");
        let tl = &pool["timeline"];
        let mut x: Vec<f64> = tl["time_ms"]
            .as_array()
            .map_or(Vec::new(), |a| a.iter().filter_map(Value::as_f64).map(|ms| ms / 1000.0).collect());
        x.push(end_s.max(x.last().copied().unwrap_or(0.0)));
        for (key, label, dash) in [("serving", "serving", "solid"), ("provisioned", "provisioned", "dot")] {
            let mut y: Vec<Value> = tl[key].as_array().cloned().unwrap_or_default();
            if let Some(last) = y.last().cloned() {
                y.push(last);
            }
            let name = format!("{role} {label}");
            data.push(json!({
                "type": "scatter", "mode": "lines", "name": name, "x": x, "y": y,
                "line": {"width": 2, "shape": "hv", "dash": dash},
                "hovertemplate": format!("{name}<br>%{{x:.1f}} s: %{{y}} workers<extra></extra>"),
            }));
        }
    }
    let mut layout = base_layout("Workers over time", "time (s)", "workers");
    layout["showlegend"] = json!(data.len() > 1);
    Figure { data: Value::Array(data), layout }
}

/// How each evaluation stage is drawn on the Pareto plot: (fidelity key, legend, colour, size).
const STAGE_STYLE: [(&str, &str, &str, u32); 3] = [
    ("static", "static estimate", "#9ca3af", 6),
    ("short", "short replay", "#f59e0b", 8),
    ("full", "full replay", "#2563eb", 10),
];

/// The search so far: every feasible candidate at its latest evaluation, output tok/s/GPU
/// against tok/s/user, with the front of the fully replayed ones as a line. `candidates` are
/// `Candidate::to_wire` objects; each point carries its index (`customdata`) for clicks.
#[must_use]
pub fn pareto(candidates: &[&Value], front: &[usize]) -> Figure {
    let obj = |c: &Value, k: &str| c["objectives"][k].as_f64();
    let mut data = Vec::new();
    for (key, name, color, size) in STAGE_STYLE {
        let (mut x, mut y, mut idx, mut text) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for c in candidates.iter().filter(|c| c["status"] == "feasible" && c["fidelity"] == key) {
            if let (Some(u), Some(g)) = (obj(c, "throughput_per_user"), obj(c, "throughput_per_gpu")) {
                x.push(u);
                y.push(g);
                idx.push(c["index"].clone());
                text.push(format!("{} ({} GPUs)", c["label"].as_str().unwrap_or(""), c["used_gpus"]));
            }
        }
        data.push(json!({
            "type": "scatter", "mode": "markers", "name": name,
            "x": x, "y": y, "customdata": idx, "text": text,
            "marker": {"size": size, "color": color, "opacity": 0.85},
            "hovertemplate": "%{text}<br>%{x:.1f} tok/s/user<br>%{y:.1f} tok/s/GPU<extra>%{fullData.name}</extra>",
        }));
    }
    let by_index = |i: usize| candidates.iter().find(|c| c["index"].as_u64() == u64::try_from(i).ok());
    let pts: Vec<(f64, f64)> = front
        .iter()
        .filter_map(|i| by_index(*i))
        .filter_map(|c| Some((obj(c, "throughput_per_user")?, obj(c, "throughput_per_gpu")?)))
        .collect();
    data.push(json!({
        "type": "scatter", "mode": "lines", "name": "Pareto front",
        "x": pts.iter().map(|p| p.0).collect::<Vec<_>>(), "y": pts.iter().map(|p| p.1).collect::<Vec<_>>(),
        "line": {"color": "#2563eb", "width": 2, "shape": "hv"}, "hoverinfo": "skip",
    }));
    let mut layout = base_layout("Output tok/s/GPU vs tok/s/user", "tok/s/user", "tok/s/GPU");
    layout["showlegend"] = json!(true);
    layout["legend"] = json!({"orientation": "h", "y": -0.2});
    Figure { data: Value::Array(data), layout }
}

/// Predicted against measured (`points`: row label, measured, predicted, in `unit`) on log
/// axes, with the line where they agree: the Validate page's view of a calibration file.
#[must_use]
pub fn parity(points: &[(String, f64, f64)], title: &str, unit: &str) -> Figure {
    let shown: Vec<&(String, f64, f64)> =
        points.iter().filter(|p| p.1 > 0.0 && p.2 > 0.0 && p.1.is_finite() && p.2.is_finite()).collect();
    let lo = shown.iter().map(|p| p.1.min(p.2)).fold(f64::INFINITY, f64::min);
    let hi = shown.iter().map(|p| p.1.max(p.2)).fold(0.0, f64::max);
    let line = if shown.is_empty() { Vec::new() } else { vec![lo, hi] };
    let data = json!([
        {
            "type": "scatter", "mode": "markers", "name": "rows",
            "x": shown.iter().map(|p| p.1).collect::<Vec<_>>(),
            "y": shown.iter().map(|p| p.2).collect::<Vec<_>>(),
            "text": shown.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(),
            "marker": {"size": 7, "color": "#2563eb", "opacity": 0.8},
            "hovertemplate": format!("%{{text}}<br>measured %{{x:.2f}} {unit}<br>predicted %{{y:.2f}} {unit}<extra></extra>"),
        },
        {
            "type": "scatter", "mode": "lines", "name": "predicted = measured",
            "x": line, "y": line,
            "line": {"color": "#8a94a6", "width": 1, "dash": "dot"}, "hoverinfo": "skip",
        },
    ]);
    let mut layout = base_layout(title, &format!("measured ({unit})"), &format!("predicted ({unit})"));
    layout["xaxis"]["type"] = json!("log");
    layout["yaxis"]["type"] = json!("log");
    Figure { data, layout }
}

/// Figures of a data file's preview (Data tab): `{"curves": figure, "heatmap": figure|null}`,
/// each figure as `{"data", "layout"}`.
#[must_use]
pub fn preview_figures(p: &servesim_scenario::Preview) -> Value {
    let axis = |title: &str| {
        if p.log {
            json!({"title": {"text": title}, "type": "log", "gridcolor": GRID_COLOR})
        } else {
            json!({"title": {"text": title}, "zeroline": false, "rangemode": "tozero", "gridcolor": GRID_COLOR})
        }
    };
    let mut layout = base_layout(&p.title, &p.x_title, &p.y_title);
    layout["xaxis"] = axis(&p.x_title);
    layout["yaxis"] = axis(&p.y_title);
    layout["showlegend"] = json!(p.series.len() > 1);
    let data: Vec<Value> = p
        .series
        .iter()
        .map(|s| json!({"type": "scatter", "mode": "lines+markers", "name": s.name, "x": s.x, "y": s.y}))
        .collect();
    let heatmap = p.heatmap.as_ref().map(|h| {
        let mut layout = base_layout(&p.title, &p.x_title, &h.y_title);
        layout["xaxis"] = json!({"title": {"text": p.x_title}, "type": "category"});
        layout["yaxis"] = json!({"title": {"text": h.y_title}, "type": "category"});
        json!({
            "data": [{
                "type": "heatmap",
                "x": h.x,
                "y": h.y,
                // log10 so a table spanning decades keeps its contrast; hover shows ms.
                "z": h.z.iter().map(|r| r.iter().map(|v| v.map(libm::log10)).collect::<Vec<_>>()).collect::<Vec<_>>(),
                "customdata": h.z,
                "colorscale": "Viridis",
                "colorbar": {"title": {"text": "log10 ms"}},
                "hovertemplate": "%{x}, %{y}: %{customdata:.4g} ms<extra></extra>",
            }],
            "layout": layout,
        })
    });
    json!({"curves": {"data": data, "layout": layout}, "heatmap": heatmap})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttft_chart_takes_completed_requests_only() {
        let jsonl = "{\"arrival_time_ms\": 1500.0, \"ttft_ms\": 20.5}\n{\"arrival_time_ms\": 10.0, \"ttft_ms\": null}\nnot json\n";
        let f = ttft_by_arrival(&crate::requests::Records::parse(jsonl).rows);
        assert_eq!(f.data[0]["x"], json!([1.5]));
        assert_eq!(f.data[0]["y"], json!([20.5]));
        assert_eq!(f.layout["xaxis"]["title"]["text"], "arrival time (s)");
    }

    #[test]
    fn parity_plot_shows_positive_points_and_the_agreement_line_over_their_range() {
        let points = [
            ("a".to_string(), 100.0, 150.0),
            ("b".to_string(), 40.0, 30.0),
            ("not predicted".to_string(), 50.0, f64::NAN),
            ("zero".to_string(), 0.0, 10.0),
        ];
        let f = parity(&points, "TTFT", "ms");
        assert_eq!(f.data[0]["x"], json!([100.0, 40.0]));
        assert_eq!(f.data[0]["y"], json!([150.0, 30.0]));
        assert_eq!(f.data[0]["text"], json!(["a", "b"]));
        assert_eq!(f.data[1]["x"], json!([30.0, 150.0]));
        assert_eq!(f.layout["xaxis"]["type"], "log");
        assert_eq!(f.layout["yaxis"]["title"]["text"], "predicted (ms)");
        assert_eq!(parity(&[], "TPOT", "ms").data[1]["x"], json!([]));
    }

    #[test]
    fn pareto_plot_draws_feasible_points_by_stage_and_the_front() {
        let c = |i: u64, f: &str, st: &str, u: f64, g: f64| {
            json!({"index": i, "status": st, "fidelity": f, "label": "tensor 2", "used_gpus": 2,
                   "objectives": {"throughput_per_user": u, "throughput_per_gpu": g}})
        };
        let cands = [
            c(0, "static", "feasible", 10.0, 100.0),
            c(1, "full", "feasible", 20.0, 50.0),
            c(2, "full", "infeasible", 1.0, 1.0),
            c(3, "full", "feasible", 5.0, 200.0),
        ];
        let refs: Vec<&Value> = cands.iter().collect();
        let f = pareto(&refs, &[3, 1]);
        assert_eq!(f.data[0]["x"], json!([10.0]));
        assert_eq!(f.data[2]["customdata"], json!([1, 3]));
        assert_eq!(f.data[3]["x"], json!([5.0, 20.0]));
        assert_eq!(f.data[3]["y"], json!([200.0, 50.0]));
    }

    #[test]
    fn the_fleet_chart_steps_with_the_planner_and_is_flat_without_it() {
        let ramp: Value =
            serde_json::from_str(include_str!("../../tests/golden/planner_vllm_ramp.prediction.json"))
                .unwrap();
        let f = fleet(&ramp);
        let tl = &ramp["servesim"]["planner"]["pools"][0]["timeline"];
        let n = tl["time_ms"].as_array().unwrap().len();
        assert_eq!(f.data.as_array().unwrap().len(), 2);
        assert_eq!(f.data[0]["name"], "aggregated serving");
        assert_eq!(f.data[0]["x"].as_array().unwrap().len(), n + 1, "held to the end of the run");
        assert_eq!(f.data[1]["y"][n - 1], tl["provisioned"][n - 1]);
        let peak = ramp["servesim"]["planner"]["pools"][0]["peak_workers"].as_u64().unwrap();
        assert_eq!(f.data[1]["y"].as_array().unwrap().iter().filter_map(Value::as_u64).max(), Some(peak));
        // Worker charts leave out slots the planner never started.
        let mut trimmed = ramp.clone();
        trimmed["servesim"]["time_series"]["workers"][3]["provisioned_ms"] = json!(0.0);
        let lines = |p: &Value| worker_series(p, "running", "t", "u").data.as_array().unwrap().len();
        assert_eq!(lines(&trimmed) + 1, lines(&ramp));
        let pd: Value =
            serde_json::from_str(include_str!("../../tests/golden/pd_vllm.prediction.json")).unwrap();
        let flat = fleet(&pd);
        assert_eq!(flat.data.as_array().unwrap().len(), 2);
        assert_eq!(flat.data[0]["y"][0], flat.data[0]["y"][1]);
    }

    #[test]
    fn cdf_offered_load_and_worker_series_read_the_reports() {
        let jsonl = "{\"arrival_time_ms\": 0.0, \"ttft_ms\": 30.0}\n{\"arrival_time_ms\": 1500.0, \"ttft_ms\": 10.0}\n{\"arrival_time_ms\": 2000.0, \"ttft_ms\": null}\n";
        let rows = crate::requests::Records::parse(jsonl).rows;
        let c = cdf(&rows, "ttft_ms", "TTFT", "ms");
        assert_eq!(c.data[0]["x"], json!([10.0, 30.0]));
        assert_eq!(c.data[0]["y"], json!([0.5, 1.0]));
        let o = offered_load(&rows, 2, 1);
        // Two bins of 1 s: one arrival in the first, two in the second.
        assert_eq!(o.data[0]["y"], json!([1.0, 2.0]));
        // A sample of every 10th request stands for ten times the arrivals.
        assert_eq!(offered_load(&rows, 2, 10).data[0]["y"], json!([10.0, 20.0]));
        let p = json!({"servesim": {"time_series": {"time_ms": [0.0, 500.0], "workers": [
            {"worker": 0, "role": "prefill", "waiting": [1, 2]}, {"worker": 1, "role": "decode", "waiting": [0, 3]}]}}});
        let w = worker_series(&p, "waiting", "Queue", "requests");
        assert_eq!(w.data[1]["name"], "decode 1");
        assert_eq!(w.data[1]["x"], json!([0.0, 0.5]));
        assert_eq!(w.data[1]["y"], json!([0, 3]));
        assert_eq!(w.layout["showlegend"], true);
    }
}
