// Loads the simulation worker (wasm-bindgen "no-modules" output) inside a classic Web Worker.
importScripts("./worker.js");
wasm_bindgen({ module_or_path: "./worker_bg.wasm" });
