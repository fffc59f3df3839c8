// Trunk post-build hook: gives the built page a strict Content-Security-Policy.
//
// Trunk writes one inline module script that starts the app; its name carries a content
// hash, so the script's own SHA-256 changes with every build. This hook reads it from the
// staged index.html and allows exactly that script, and nothing else inline.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.env.TRUNK_STAGING_DIR;
if (!dir) {
  console.error('csp.mjs: TRUNK_STAGING_DIR is not set (run as a Trunk post_build hook)');
  process.exit(1);
}
const file = join(dir, 'index.html');
let html = readFileSync(file, 'utf8');
const scripts = [...html.matchAll(/<script(?![^>]*\bsrc=)[^>]*>([\s\S]*?)<\/script>/g)].map((m) => m[1]);
if (scripts.length === 0) {
  console.error('csp.mjs: no inline script in index.html; did Trunk change its output?');
  process.exit(1);
}
const hashes = scripts.map((s) => `'sha256-${createHash('sha256').update(s, 'utf8').digest('base64')}'`);
const policy = [
  "default-src 'self'",
  // Scripts: this origin and Trunk's start-up script; wasm compiles under 'wasm-unsafe-eval'.
  `script-src 'self' 'wasm-unsafe-eval' ${hashes.join(' ')}`,
  // plotly.js adds <style> elements for its charts.
  "style-src 'self' 'unsafe-inline'",
  // Downloads are data: links; plotly draws into data: and blob: images.
  "img-src 'self' data: blob:",
  "connect-src 'self'",
  "worker-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'none'",
].join('; ');
const meta = `<meta http-equiv="Content-Security-Policy" content="${policy}" />`;
if (html.includes('http-equiv="Content-Security-Policy"')) {
  html = html.replace(/<meta http-equiv="Content-Security-Policy"[^>]*>/, meta);
} else {
  html = html.replace('<meta charset="utf-8" />', `<meta charset="utf-8" />\n    ${meta}`);
}
writeFileSync(file, html);
