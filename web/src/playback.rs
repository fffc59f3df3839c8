//! Playback: scrub or play a finished run's timeline and watch each worker's queue, batch
//! composition (prompt vs output tokens computed) and KV occupancy. Every frame is a sample
//! of the simulation's own time series in prediction.json, not an animation of a model.

use leptos::prelude::*;
use serde_json::Value;

/// One worker's series.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerTrack {
    /// `prefill 0`, `aggregated 1`, ...
    pub label: String,
    /// Requests waiting at each sample.
    pub waiting: Vec<f64>,
    /// Requests running at each sample.
    pub running: Vec<f64>,
    /// KV blocks in use at each sample.
    pub kv_used: Vec<f64>,
    /// KV blocks the worker has.
    pub kv_total: f64,
    /// Prompt tokens computed per second over the interval ending at each sample.
    pub prefill_rate: Vec<f64>,
    /// Output tokens computed per second over the interval ending at each sample.
    pub decode_rate: Vec<f64>,
}

/// A run's timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Sample times (ms).
    pub time_ms: Vec<f64>,
    /// One track per worker.
    pub tracks: Vec<WorkerTrack>,
    /// Arrival times of the requests the page holds (ms), sorted.
    pub arrivals_ms: Vec<f64>,
    /// Completion times (ms), sorted.
    pub finishes_ms: Vec<f64>,
    /// Requests each held one stands for (1: the page holds them all; `every` of a sample).
    pub weight: usize,
}

/// One worker at one instant.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// Worker label.
    pub label: String,
    /// Requests waiting.
    pub waiting: f64,
    /// Requests running.
    pub running: f64,
    /// KV in use, 0–1.
    pub kv_fraction: f64,
    /// Prompt tokens/s over the last interval.
    pub prefill_rate: f64,
    /// Output tokens/s over the last interval.
    pub decode_rate: f64,
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().map_or(Vec::new(), |a| a.iter().map(|x| x.as_f64().unwrap_or(0.0)).collect())
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(f64::total_cmp);
    v
}

impl Timeline {
    /// Reads the timeline of prediction.json and requests.jsonl's records (`rows`), or every
    /// `every`-th record (`None` without samples).
    #[must_use]
    pub fn read(prediction: &Value, rows: &[crate::requests::Row], every: u64) -> Option<Timeline> {
        let ts = &prediction["servesim"]["time_series"];
        let time_ms = floats(&ts["time_ms"]);
        if time_ms.is_empty() {
            return None;
        }
        let tracks = ts["workers"]
            .as_array()?
            .iter()
            .filter(|w| crate::charts::ever_provisioned(w))
            .map(|w| WorkerTrack {
                label: format!("{} {}", w["role"].as_str().unwrap_or("worker"), w["worker"]),
                waiting: floats(&w["waiting"]),
                running: floats(&w["running"]),
                kv_used: floats(&w["kv_blocks_used"]),
                kv_total: w["kv_blocks_total"].as_f64().unwrap_or(0.0),
                prefill_rate: floats(&w["prefill_tokens_per_s"]),
                decode_rate: floats(&w["decode_tokens_per_s"]),
            })
            .collect();
        let (mut arrivals, mut finishes) = (Vec::new(), Vec::new());
        for r in rows {
            if let Some(a) = r.arrival_time_ms {
                arrivals.push(a);
                if let Some(e) = r.e2e_latency_ms {
                    finishes.push(a + e);
                }
            }
        }
        let weight = usize::try_from(every.max(1)).unwrap_or(usize::MAX);
        Some(Timeline {
            time_ms,
            tracks,
            arrivals_ms: sorted(arrivals),
            finishes_ms: sorted(finishes),
            weight,
        })
    }

    /// Samples.
    #[must_use]
    pub fn len(&self) -> usize {
        self.time_ms.len()
    }

    /// True without samples.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.time_ms.is_empty()
    }

    /// Every worker at sample `k`.
    #[must_use]
    pub fn frame(&self, k: usize) -> Vec<Frame> {
        let at = |v: &[f64]| v.get(k).copied().unwrap_or(0.0);
        self.tracks
            .iter()
            .map(|t| Frame {
                label: t.label.clone(),
                waiting: at(&t.waiting),
                running: at(&t.running),
                kv_fraction: if t.kv_total > 0.0 {
                    (at(&t.kv_used) / t.kv_total).clamp(0.0, 1.0)
                } else {
                    0.0
                },
                prefill_rate: at(&t.prefill_rate),
                decode_rate: at(&t.decode_rate),
            })
            .collect()
    }

    /// Requests arrived and finished by sample `k` (estimated from a sample: each held
    /// request counts `weight` times).
    #[must_use]
    pub fn counts(&self, k: usize) -> (usize, usize) {
        let t = self.time_ms.get(k).copied().unwrap_or(0.0);
        let n = |v: &[f64], t: f64| v.partition_point(|&x| x <= t).saturating_mul(self.weight);
        (n(&self.arrivals_ms, t), n(&self.finishes_ms, t))
    }

    /// Largest queue and token rate over the run, for bar scales that do not jump.
    #[must_use]
    pub fn scales(&self) -> (f64, f64) {
        let max = |f: &dyn Fn(&WorkerTrack) -> f64| self.tracks.iter().map(f).fold(1.0, f64::max);
        let queue = max(&|t| t.waiting.iter().chain(&t.running).copied().fold(0.0, f64::max));
        let rate =
            max(&|t| t.prefill_rate.iter().zip(&t.decode_rate).map(|(a, b)| a + b).fold(0.0, f64::max));
        (queue, rate)
    }
}

/// Playback speeds offered: samples advanced per tick.
const SPEEDS: [usize; 4] = [1, 4, 16, 64];
/// Time between frames while playing.
const TICK: std::time::Duration = std::time::Duration::from_millis(50);

fn pct(x: f64, of: f64) -> String {
    format!("{:.2}%", if of > 0.0 { 100.0 * x / of } else { 0.0 })
}

/// The playback panel for a finished run.
#[component]
pub fn Playback(timeline: Signal<Option<std::sync::Arc<Timeline>>>) -> impl IntoView {
    let at = RwSignal::new(0usize);
    let playing = RwSignal::new(false);
    let speed = RwSignal::new(SPEEDS[1]);
    // A new run starts at its beginning, stopped.
    Effect::new(move |_| {
        timeline.track();
        at.set(0);
        playing.set(false);
    });
    let handle: StoredValue<Option<IntervalHandle>> = StoredValue::new(None);
    Effect::new(move |_| {
        if let Some(h) = handle.try_update_value(Option::take).flatten() {
            h.clear();
        }
        if playing.get() {
            let h = set_interval_with_handle(
                move || {
                    let n = timeline.with_untracked(|t| t.as_ref().map_or(0, |t| t.len()));
                    let next = at.get_untracked() + speed.get_untracked();
                    if next + 1 >= n {
                        at.set(n.saturating_sub(1));
                        playing.set(false);
                    } else {
                        at.set(next);
                    }
                },
                TICK,
            );
            handle.set_value(h.ok());
        }
    });
    let last = move || timeline.with(|t| t.as_ref().map_or(0, |t| t.len().saturating_sub(1)));
    let clock = move || {
        timeline.with(|t| {
            t.as_ref().map_or(String::new(), |t| {
                let k = at.get().min(t.len().saturating_sub(1));
                let (arrived, finished) = t.counts(k);
                let about = if t.weight > 1 { "about " } else { "" };
                format!(
                    "t = {:.2} s · {about}{arrived} requests arrived · {finished} finished · {} in flight",
                    t.time_ms[k] / 1000.0,
                    arrived.saturating_sub(finished)
                )
            })
        })
    };
    let rows = move || {
        timeline.with(|t| {
            let Some(t) = t.as_ref() else { return Vec::new() };
            let (qmax, rmax) = t.scales();
            t.frame(at.get().min(t.len().saturating_sub(1)))
                .into_iter()
                .map(|f| {
                    view! {
                        <tr class="pb-row">
                            <th scope="row">{f.label.clone()}</th>
                            <td>
                                <div class="pb-bar" title="waiting"><div class="pb-fill waiting" style:width=pct(f.waiting, qmax)></div></div>
                                <span class="pb-num pb-waiting">{format!("{:.0}", f.waiting)}</span>
                            </td>
                            <td>
                                <div class="pb-bar" title="running"><div class="pb-fill running" style:width=pct(f.running, qmax)></div></div>
                                <span class="pb-num pb-running">{format!("{:.0}", f.running)}</span>
                            </td>
                            <td>
                                <div class="pb-bar stacked" title="prompt (prefill) and output (decode) tokens computed per second">
                                    <div class="pb-fill prefill" style:width=pct(f.prefill_rate, rmax)></div>
                                    <div class="pb-fill decode" style:width=pct(f.decode_rate, rmax)></div>
                                </div>
                                <span class="pb-num pb-tokens">{format!("{:.0} + {:.0}", f.prefill_rate, f.decode_rate)}</span>
                            </td>
                            <td>
                                <div class="pb-bar" title="KV cache in use"><div class="pb-fill kv" style:width=pct(f.kv_fraction, 1.0)></div></div>
                                <span class="pb-num pb-kv">{format!("{:.1}%", 100.0 * f.kv_fraction)}</span>
                            </td>
                        </tr>
                    }
                })
                .collect::<Vec<_>>()
        })
    };
    view! {
        <Show when=move || timeline.with(Option::is_some)>
            <section id="playback" class="playback" aria-label="Playback">
                <h3>"Playback"</h3>
                <div class="pb-controls">
                    <button id="pb-play" class="secondary small" on:click=move |_| {
                        if !playing.get_untracked() && at.get_untracked() >= last() {
                            at.set(0);
                        }
                        playing.update(|p| *p = !*p);
                    }>{move || if playing.get() { "Pause" } else { "Play" }}</button>
                    <input id="pb-time" type="range" min="0" max=last prop:value=move || at.get().to_string()
                        aria-label="Simulated time" aria-valuetext=clock
                        on:input=move |ev| {
                            playing.set(false);
                            at.set(event_target_value(&ev).parse().unwrap_or(0));
                        } />
                    <label class="hint">"Speed "
                        <select id="pb-speed" on:change=move |ev| speed.set(event_target_value(&ev).parse().unwrap_or(1))>
                            {SPEEDS.iter().map(|s| view! { <option value=s.to_string() selected=*s == SPEEDS[1]>{format!("{s}×")}</option> }).collect_view()}
                        </select>
                    </label>
                </div>
                <p id="pb-clock" class="hint" aria-live="off">{clock}</p>
                <div class="table-wrap">
                    <table class="pb-table">
                        <thead><tr><th>"worker"</th><th>"waiting"</th><th>"running"</th><th>"tokens/s: prompt + output"</th><th>"KV in use"</th></tr></thead>
                        <tbody>{rows}</tbody>
                    </table>
                </div>
            </section>
        </Show>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_follow_the_time_series_of_a_real_run() {
        let prediction: Value =
            serde_json::from_str(include_str!("../../tests/golden/pd_vllm.prediction.json")).unwrap();
        let t = Timeline::read(&prediction, &[], 1).unwrap();
        let ts = &prediction["servesim"]["time_series"];
        assert_eq!(t.len(), ts["time_ms"].as_array().unwrap().len());
        assert_eq!(t.tracks.len(), 3);
        assert!(t.tracks[0].label.starts_with("prefill") && t.tracks[2].label.starts_with("decode"));
        // A prefill worker computes prompt tokens only; a decode worker output tokens only.
        let busy = (0..t.len()).find(|&k| t.frame(k)[0].prefill_rate > 0.0).unwrap();
        let f = t.frame(busy);
        assert_eq!(f[0].decode_rate, 0.0);
        // The decode pool computes output tokens (and one handed-off prompt token each).
        let (p, d): (f64, f64) = (0..t.len())
            .map(|k| t.frame(k)[2].clone())
            .fold((0.0, 0.0), |(p, d), f| (p + f.prefill_rate, d + f.decode_rate));
        assert!(d > 0.0 && p < 0.01 * d, "{p} {d}");
        // The rates integrate to the worker's token totals.
        let dt: Vec<f64> = t.time_ms.windows(2).map(|w| (w[1] - w[0]) / 1000.0).collect();
        let prefill: f64 = t.tracks[0].prefill_rate[1..].iter().zip(&dt).map(|(r, d)| r * d).sum();
        let want = ts["workers"][0]["prefill_tokens"].as_f64().unwrap();
        assert!((prefill - want).abs() / want < 0.02, "{prefill} vs {want}");
        for k in 0..t.len() {
            for f in t.frame(k) {
                assert!((0.0..=1.0).contains(&f.kv_fraction));
            }
        }
    }

    #[test]
    fn counts_come_from_the_requests() {
        let prediction =
            serde_json::json!({"servesim": {"time_series": {"time_ms": [0.0, 10.0, 20.0], "workers": []}}});
        let jsonl = "{\"arrival_time_ms\": 0.0, \"e2e_latency_ms\": 15.0}\n{\"arrival_time_ms\": 5.0, \"e2e_latency_ms\": 1.0}\n";
        let rows = crate::requests::Records::parse(jsonl).rows;
        let t = Timeline::read(&prediction, &rows, 1).unwrap();
        assert_eq!(t.counts(0), (1, 0));
        assert_eq!(t.counts(1), (2, 1));
        assert_eq!(t.counts(2), (2, 2));
        // Held as a sample of every 10th request, each stands for ten.
        assert_eq!(Timeline::read(&prediction, &rows, 10).unwrap().counts(1), (20, 10));
        assert!(Timeline::read(&serde_json::json!({}), &[], 1).is_none());
    }
}
