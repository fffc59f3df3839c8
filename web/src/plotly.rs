//! The one place that calls plotly.js (loaded from the page's own origin).

use wasm_bindgen::prelude::*;

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
