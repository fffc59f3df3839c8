//! The calls into JavaScript APIs: plotly.js (loaded from the page's own origin), the clipboard.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::charts::Figure;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = Plotly, js_name = react, catch)]
    fn plotly_react(
        div: &str,
        data: &JsValue,
        layout: &JsValue,
        config: &JsValue,
    ) -> Result<JsValue, JsValue>;
}

fn to_js(v: &serde_json::Value) -> Result<JsValue, String> {
    js_sys::JSON::parse(&v.to_string()).map_err(|e| format!("{e:?}"))
}

/// Draws (or redraws) `fig` into the element with id `div`.
///
/// # Errors
/// When plotly.js is missing or rejects the figure.
pub fn draw(div: &str, fig: &Figure) -> Result<(), String> {
    let config = serde_json::json!({"displaylogo": false, "responsive": true});
    plotly_react(div, &to_js(&fig.data)?, &to_js(&fig.layout)?, &to_js(&config)?)
        .map(|_| ())
        .map_err(|e| format!("plotly could not draw the chart: {e:?}"))
}

/// Draws `fig` into `div` and marks the element `data-status="rendered"` or `"failed"` (the
/// end-to-end tests wait on it); a failure is logged. True when it drew.
pub fn draw_marked(div: &str, fig: &Figure) -> bool {
    let drawn = draw(div, fig).map_err(|e| leptos::logging::warn!("{e}")).is_ok();
    let doc = web_sys::window().and_then(|w| w.document());
    if let Some(el) = doc.and_then(|d| d.get_element_by_id(div)) {
        let _ = el.set_attribute("data-status", if drawn { "rendered" } else { "failed" });
    }
    drawn
}

/// Calls `f` with the `customdata` (a candidate index) of the point clicked in chart `div`.
/// Bound once per chart: plotly keeps the listener across redraws.
pub fn on_click(div: &str, f: impl Fn(usize) + 'static) {
    use js_sys::Reflect;
    let Some(el) = web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id(div)) else {
        return;
    };
    if el.has_attribute("data-click") {
        return;
    }
    let Ok(on) = Reflect::get(&el, &JsValue::from_str("on")).and_then(|o| o.dyn_into::<js_sys::Function>())
    else {
        return;
    };
    let handler = Closure::<dyn FnMut(JsValue)>::new(move |ev: JsValue| {
        let index = Reflect::get(&ev, &JsValue::from_str("points"))
            .and_then(|p| Reflect::get(&p, &JsValue::from_f64(0.0)))
            .and_then(|p| Reflect::get(&p, &JsValue::from_str("customdata")))
            .ok()
            .and_then(|v| v.as_f64());
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        if let Some(i) = index.filter(|i| *i >= 0.0) {
            f(i as usize);
        }
    });
    if on.call2(&el, &JsValue::from_str("plotly_click"), handler.as_ref()).is_ok() {
        let _ = el.set_attribute("data-click", "bound");
    }
    // The chart lives as long as the page.
    handler.forget();
}

/// Puts `text` on the clipboard when the browser allows it (it may not: insecure origin,
/// no user gesture, headless); the page shows the text either way.
pub fn copy_text(text: &str) {
    use js_sys::Reflect;
    let Some(nav) = web_sys::window().map(|w| w.navigator()) else { return };
    let Ok(clip) = Reflect::get(&nav, &JsValue::from_str("clipboard")) else { return };
    if clip.is_undefined() {
        return;
    }
    if let Ok(f) =
        Reflect::get(&clip, &JsValue::from_str("writeText")).and_then(|f| f.dyn_into::<js_sys::Function>())
    {
        // The promise's rejection (no permission) is not an error worth reporting.
        if let Ok(p) = f.call1(&clip, &JsValue::from_str(text)) {
            if let Ok(p) = p.dyn_into::<js_sys::Promise>() {
                let ignore = Closure::<dyn FnMut(JsValue)>::new(|_: JsValue| {});
                let _ = p.catch(&ignore);
                ignore.forget();
            }
        }
    }
}

/// True once plotly.js has loaded.
#[must_use]
pub fn ready() -> bool {
    js_sys::Reflect::get(&js_sys::global(), &JsValue::from_str("Plotly")).is_ok_and(|p| !p.is_undefined())
}

/// How often to look for plotly.js while it loads (ms), and for how long at most (tries):
/// 50 ms × 600 = 30 s, after which `f` runs anyway and reports the missing library.
const READY_POLL_MS: i32 = 50;
const READY_POLL_TRIES: u32 = 600;

/// Where plotly.js is served, relative to the page.
const PLOTLY_URL: &str = "plotly.min.js";

/// Starts loading plotly.js if nothing has yet. It is 4.8 MB of script whose evaluation holds
/// the main thread for a second or more, so the page asks for it only when it first draws:
/// the first result's figures show before that, not after.
fn load() {
    let Some(doc) = web_sys::window().and_then(|w| w.document()) else { return };
    if doc.get_element_by_id("plotly-js").is_some() {
        return;
    }
    let Ok(script) = doc.create_element("script") else { return };
    let _ = script.set_attribute("id", "plotly-js");
    let _ = script.set_attribute("src", PLOTLY_URL);
    let _ = script.set_attribute("async", "");
    if let Some(body) = doc.body() {
        let _ = body.append_child(&script);
    }
}

/// Runs `f` (which draws charts) in the next frame once plotly.js is there, loading it first
/// if needed.
pub fn when_ready(f: impl FnOnce() + 'static) {
    load();
    fn poll(f: Box<dyn FnOnce()>, tries: u32) {
        let Some(w) = web_sys::window() else { return };
        if ready() || tries == 0 {
            let cb = Closure::once_into_js(f);
            let _ = w.request_animation_frame(cb.unchecked_ref());
            return;
        }
        let cb = Closure::once_into_js(move || poll(f, tries - 1));
        let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(cb.unchecked_ref(), READY_POLL_MS);
    }
    poll(Box::new(f), READY_POLL_TRIES);
}
