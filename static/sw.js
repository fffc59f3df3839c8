// servesim's service worker: the app works offline after its first load.
//
// Every same-origin GET goes to the network first, so an online visit always sees the
// latest build; a copy of each answer is kept, and served when the network is not there.
// On install the shell is fetched at once (the page's own assets, the simulation worker,
// plotly.js and the default scenario's kernel tables), so going offline right after the
// first visit works even for files that visit never asked for.
const CACHE = "servesim-v1";

// The default scenario's data (data/scenarios/default.yaml: Qwen3-32B-FP8, H200, vLLM 0.24.0).
const SHELL = [
  "./",
  "./index.html",
  "./worker_loader.js",
  "./worker.js",
  "./worker_bg.wasm",
  "./plotly.min.js",
  "./favicon.svg",
  "./data/perf/manifest.json",
  "./data/perf/h200_sxm/nccl.parquet",
  "./data/perf/h200_sxm/vllm/0.24.0/gemm.parquet",
  "./data/perf/h200_sxm/vllm/0.24.0/context_attention.parquet",
  "./data/perf/h200_sxm/vllm/0.24.0/generation_attention.parquet",
  "./data/perf/h200_sxm/vllm/0.24.0/allreduce.parquet",
  "./data/perf/h200_sxm/vllm/0.24.0/moe.parquet",
];

self.addEventListener("install", (event) => {
  event.waitUntil((async () => {
    const cache = await caches.open(CACHE);
    // The page's hashed assets (script, wasm, stylesheet) are named in index.html.
    const html = await (await fetch("./index.html", { cache: "no-cache" })).text();
    const named = [...html.matchAll(/(?:href|src)="\.\/([^"?#]+)"/g)].map((m) => "./" + m[1]);
    await Promise.all([...new Set([...SHELL, ...named])].map(async (url) => {
      try {
        const resp = await fetch(url, { cache: "no-cache" });
        if (resp.ok) await cache.put(url, resp);
      } catch (_) {
        // A file this host does not serve is simply not available offline.
      }
    }));
    await self.skipWaiting();
  })());
});

self.addEventListener("activate", (event) => {
  event.waitUntil((async () => {
    for (const key of await caches.keys()) {
      if (key !== CACHE) await caches.delete(key);
    }
    await self.clients.claim();
  })());
});

self.addEventListener("fetch", (event) => {
  const req = event.request;
  if (req.method !== "GET" || new URL(req.url).origin !== self.location.origin) return;
  event.respondWith((async () => {
    const cache = await caches.open(CACHE);
    try {
      const resp = await fetch(req);
      if (resp.ok) await cache.put(req, resp.clone());
      return resp;
    } catch (err) {
      // Offline: the kept copy (the page itself for any navigation within the app).
      const hit = (await cache.match(req, { ignoreSearch: req.mode === "navigate" }))
        ?? (req.mode === "navigate" ? await cache.match("./") : undefined);
      if (hit) return hit;
      throw err;
    }
  })());
});
