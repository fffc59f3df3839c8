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
