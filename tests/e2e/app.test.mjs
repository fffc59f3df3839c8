// End-to-end tests: Playwright (playwright-core) drives Debian's Chromium against the built
// dist/ served on 127.0.0.1. Run by scripts/test:
//   BASE_URL=http://127.0.0.1:PORT/ SERVESIM_BIN=target/debug/servesim node --test tests/e2e/
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, mkdirSync, writeFileSync, symlinkSync, cpSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const BASE = process.env.BASE_URL ?? 'http://127.0.0.1:8765/';
const BIN = process.env.SERVESIM_BIN ?? 'target/debug/servesim';
const ARTIFACTS = process.env.ARTIFACTS ?? 'test-artifacts';
mkdirSync(ARTIFACTS, { recursive: true });

let browser;
const logs = [];
// Every test's files live under one scratch directory, removed when the run ends.
const SCRATCH = mkdtempSync(join(tmpdir(), 'servesim-e2e-'));
const scratchDir = (prefix) => mkdtempSync(join(SCRATCH, prefix));

function cliPrediction(args = []) {
  const dir = scratchDir('run-');
  execFileSync(BIN, ['predict', '-c', 'data/scenarios/default.yaml', '--output-dir', dir, '--format', 'json', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return readFileSync(join(dir, 'prediction.json'), 'utf8');
}

function cliEstimate() {
  return JSON.parse(execFileSync(BIN, ['estimate', '-c', 'data/scenarios/default.yaml', '--format', 'json'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  }).toString());
}

async function openPage() {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('console', (m) => { if (m.type() === 'error') logs.push(`[console] ${m.text()}`); });
  page.on('pageerror', (e) => logs.push(`[pageerror] ${e.message}`));
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (u.origin !== new URL(BASE).origin && u.protocol !== 'data:' && u.protocol !== 'blob:') logs.push(`[offsite] ${r.url()}`);
  });
  await page.goto(BASE);
  return page;
}

// Does `action` and waits until a new run's prediction is on screen.
async function runAfter(page, action) {
  const before = await page.textContent('#prediction-json');
  await action();
  await page.waitForFunction((b) => (document.querySelector('#status')?.textContent ?? '').startsWith('Done')
    && document.querySelector('#prediction-json')?.textContent !== b, before, { timeout: 60000 });
}

// `servesim predict -c CONFIG` run in `cwd` (files beside the config), its prediction.json.
function cliPredictIn(cwd, config, extra = []) {
  execFileSync(join(process.cwd(), BIN), ['predict', '-c', config, '--output-dir', 'out', ...extra], { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
  return readFileSync(join(cwd, 'out', 'prediction.json'), 'utf8');
}

async function waitDone(page, timeout = 60000) {
  await page.waitForFunction(() => {
    const s = document.querySelector('#status')?.textContent ?? '';
    return s.startsWith('Done') || s.includes('failed');
  }, null, { timeout });
  return page.textContent('#status');
}

before(async () => {
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
});

after(async () => {
  if (logs.length) console.log(logs.join('\n'));
  await browser?.close();
  rmSync(SCRATCH, { recursive: true, force: true });
});

test('the page runs the default scenario on load and matches the CLI byte for byte', async () => {
  const cli = cliPrediction();
  const again = cliPrediction();
  assert.equal(cli, again, 'the CLI is deterministic');
  const page = await openPage();
  const status = await waitDone(page);
  assert.match(status, /^Done: 100 requests/);
  const pagePrediction = await page.textContent('#prediction-json');
  assert.equal(pagePrediction, cli, 'page prediction.json equals the CLI prediction.json');
  const want = JSON.parse(cli);
  const ttft = Number(await page.textContent('#mean-ttft'));
  const tpot = Number(await page.textContent('#mean-tpot'));
  assert.ok(Math.abs(ttft - want.mean_ttft_ms) <= 0.005, `mean TTFT ${ttft} vs ${want.mean_ttft_ms}`);
  assert.ok(Math.abs(tpot - want.mean_tpot_ms) <= 0.005, `mean TPOT ${tpot} vs ${want.mean_tpot_ms}`);
  // The static estimate shown beside the replay is the CLI's `servesim estimate`.
  const est = cliEstimate();
  const estTtft = Number(await page.textContent('#est-ttft'));
  const estTpot = Number(await page.textContent('#est-tpot'));
  assert.ok(Math.abs(estTtft - est.mean_ttft_ms) <= 0.005, `estimate TTFT ${estTtft} vs ${est.mean_ttft_ms}`);
  assert.ok(Math.abs(estTpot - est.mean_tpot_ms) <= 0.005, `estimate TPOT ${estTpot} vs ${est.mean_tpot_ms}`);
  assert.match(await page.textContent('#est-note'), /^bottleneck: /);
  // Where the estimate's typical steps spend their time: the CLI's step breakdown, a line each.
  const stepLines = await page.$$eval('#est-steps li', (lis) => lis.map((li) => li.textContent));
  assert.ok(est.step_breakdown.length >= 2, 'decode and mixed steps');
  assert.equal(stepLines.length, est.step_breakdown.length);
  est.step_breakdown.forEach((s, i) => {
    assert.ok(stepLines[i].startsWith(`${s.step} step`), stepLines[i]);
    assert.ok(stepLines[i].includes(`${s.step_ms.toFixed(2)} ms: `), `${stepLines[i]} vs ${s.step_ms}`);
  });
  // The summary: GPUs, percentiles, SLA, memory and timing provenance, all from prediction.json.
  assert.equal(await page.textContent('#gpus'), String(want.servesim.deployment.gpus));
  const ttftRow = await page.$$eval('#latency-table tbody tr:first-child td', (tds) => tds.map((t) => t.textContent));
  assert.deepEqual(ttftRow, ['mean', 'median', 'p90', 'p95', 'p99'].map((s) => want[`${s}_ttft_ms`].toFixed(2)));
  assert.equal(await page.textContent('#sla-attainment'), 'no SLA set');
  assert.match(await page.textContent('#provenance'), /op_level — servesim data\/perf\/h200_sxm\/vllm\/0\.24\.0/);
  assert.match(await page.textContent('#memory-table'), /KV capacity \(tokens\)/);
  // Where the GPU time went: the lines `servesim predict --detail time` prints.
  const table = execFileSync(BIN, ['predict', '-c', 'data/scenarios/default.yaml', '--output-dir', scratchDir('time-'), '--detail', 'time'], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const busyWant = table.split('\n').filter((l) => l.startsWith('Busy time, '));
  assert.equal(busyWant.length, 1, table);
  assert.deepEqual(await page.$$eval('#busy-time li', (lis) => lis.map((li) => li.textContent)), busyWant);
  await page.waitForSelector('#ttft-chart[data-status="rendered"] .main-svg', { timeout: 20000 });
  await page.screenshot({ path: join(ARTIFACTS, 'predict-default.png'), fullPage: true });
  assert.deepEqual(logs.filter((l) => l.startsWith('[offsite]')), [], 'no request leaves the origin');
  await page.close();
});

test('editing the scenario and running again changes the numbers', async () => {
  const page = await openPage();
  await waitDone(page);
  const before = await page.textContent('#mean-ttft');
  const yaml = await page.inputValue('#scenario-yaml');
  await page.fill('#scenario-yaml', yaml.replace('concurrency: 10', 'concurrency: 1'));
  await page.click('#run');
  await page.waitForFunction((b) => {
    const s = document.querySelector('#status')?.textContent ?? '';
    return s.startsWith('Done') && document.querySelector('#mean-ttft')?.textContent !== b;
  }, before, { timeout: 60000 });
  const after = Number(await page.textContent('#mean-ttft'));
  assert.ok(after < Number(before), `concurrency 1 should queue less: ${after} vs ${before}`);
  const cli = JSON.parse(cliPrediction(['--set', 'traffic.load.concurrency=1']));
  assert.ok(Math.abs(after - cli.mean_ttft_ms) <= 0.005, `page ${after} vs CLI ${cli.mean_ttft_ms}`);
  assert.equal(await page.$('#rejected'), null, 'a run that refuses nothing shows no warning');
  // Requests longer than Qwen3-32B's context never run, and the page says why.
  const long = (await page.inputValue('#scenario-yaml'))
    .replace('input_tokens: 1024', 'input_tokens: 40000').replace('output_tokens: 128', 'output_tokens: 100000');
  await runAfter(page, async () => { await page.fill('#scenario-yaml', long); await page.click('#run'); });
  assert.match(await page.textContent('#rejected'),
    /^warning: 100 requests were rejected and never ran: 100 longer \(prompt \+ output\) than the model's context of 40960 tokens$/);
  await page.close();
});

test('the form and the YAML stay in step both ways, and problems show at their field', async () => {
  const page = await openPage();
  await waitDone(page);
  // Form → YAML: only the value changes; comments and layout stay.
  const original = await page.inputValue('#scenario-yaml');
  await page.selectOption('#f-engine-backend', 'sglang');
  assert.equal(await page.inputValue('#scenario-yaml'), original.replace('backend: vllm', 'backend: sglang'));
  // YAML → form.
  await page.fill('#scenario-yaml', (await page.inputValue('#scenario-yaml')).replace('concurrency: 10', 'concurrency: 3'));
  await page.waitForFunction(() => document.querySelector('#f-traffic-load-concurrency')?.value === '3');
  // A benchmark client's dataset of 20 prompts, set in the form, lands in the source.
  await page.fill('#f-traffic-source-prompt-pool', '20');
  await page.press('#f-traffic-source-prompt-pool', 'Tab');
  assert.match(await page.inputValue('#scenario-yaml'), /prompt_pool: 20/);
  // Belady eviction ranks block-pool blocks: with SGLang (chosen above) the validator says
  // at the field that its radix cache keeps LRU, and unsetting it clears the problem.
  await page.selectOption('#f-engine-kv-eviction-policy', 'belady');
  assert.match(await page.inputValue('#scenario-yaml'), /kv_eviction_policy: belady/);
  const belady = page.locator('#f-engine-kv-eviction-policy-error');
  await belady.waitFor({ timeout: 30000 });
  assert.match(await belady.textContent(), /SGLang's radix cache evicts by LRU/);
  await page.selectOption('#f-engine-kv-eviction-policy', '');
  await belady.waitFor({ state: 'detached', timeout: 30000 });
  assert.doesNotMatch(await page.inputValue('#scenario-yaml'), /kv_eviction_policy/);
  // A bad value typed in the form is named at that field (by the worker's validator).
  await page.fill('#f-engine-workers-aggregated-parallelism-tensor', '0');
  await page.press('#f-engine-workers-aggregated-parallelism-tensor', 'Tab');
  assert.match(await page.inputValue('#scenario-yaml'), /aggregated: \{parallelism: \{tensor: 0\}\}/);
  const err = page.locator('#f-engine-workers-aggregated-parallelism-tensor-error');
  await err.waitFor({ timeout: 30000 });
  assert.match(await err.textContent(), /tensor|at least|between|1/);
  await page.screenshot({ path: join(ARTIFACTS, 'form-error.png'), fullPage: true });
  // Clearing the field removes the key, and the problem goes.
  await page.fill('#f-engine-workers-aggregated-parallelism-tensor', '');
  await page.press('#f-engine-workers-aggregated-parallelism-tensor', 'Tab');
  await err.waitFor({ state: 'detached', timeout: 30000 });
  // Aggregated → disaggregated: a prefill and a decode pool with their own fields.
  await page.selectOption('#f-engine-mode', 'disaggregated');
  await page.waitForSelector('#f-engine-workers-decode-parallelism-tensor');
  await page.fill('#f-engine-workers-decode-parallelism-tensor', '2');
  await page.press('#f-engine-workers-decode-parallelism-tensor', 'Tab');
  // The decode pool's all-reduces timed as NCCL's (custom all-reduce off).
  await page.selectOption('#f-engine-workers-decode-timing-allreduce', 'nccl');
  const yaml = await page.inputValue('#scenario-yaml');
  assert.match(yaml, /mode: disaggregated/);
  assert.match(yaml, /timing: \{allreduce: nccl\}/);
  // A syntax error disables the form and says why; the app stays usable.
  await page.fill('#scenario-yaml', yaml + 'oops: [\n');
  await page.waitForSelector('#form-syntax');
  assert.ok(await page.isDisabled('#f-engine-backend'));
  await page.fill('#scenario-yaml', yaml);
  await page.waitForSelector('#form-syntax', { state: 'detached' });
  // The edited scenario runs, and equals the CLI on the same text.
  const before = await page.textContent('#prediction-json');
  await page.click('#run');
  await page.waitForFunction((b) => (document.querySelector('#status')?.textContent ?? '').startsWith('Done')
    && document.querySelector('#prediction-json')?.textContent !== b, before, { timeout: 60000 });
  const dir = scratchDir('form-');
  writeFileSync(join(dir, 'scenario.yaml'), yaml);
  execFileSync(BIN, ['predict', '-c', join(dir, 'scenario.yaml'), '--output-dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
  assert.equal(await page.textContent('#prediction-json'), readFileSync(join(dir, 'prediction.json'), 'utf8'));
  await page.close();
});

test('speculative decoding set in the form runs, is summarised, and equals the CLI', async () => {
  const page = await openPage();
  await waitDone(page);
  // nextn alone is a problem named at its field; with the accepted count it runs.
  await page.fill('#f-engine-nextn', '2');
  await page.press('#f-engine-nextn', 'Tab');
  const err = page.locator('#f-engine-nextn-error');
  await err.waitFor({ timeout: 30000 });
  assert.match(await err.textContent(), /nextn_accepted is required/);
  await page.fill('#f-engine-nextn-accepted', '1.5');
  await page.press('#f-engine-nextn-accepted', 'Tab');
  await err.waitFor({ state: 'detached', timeout: 30000 });
  assert.match(await page.inputValue('#scenario-yaml'), /nextn: 2\n\s*nextn_accepted: 1\.5/);
  const before = await page.textContent('#prediction-json');
  await page.click('#run');
  await page.waitForFunction((b) => (document.querySelector('#status')?.textContent ?? '').startsWith('Done')
    && document.querySelector('#prediction-json')?.textContent !== b, before, { timeout: 60000 });
  assert.match(await page.textContent('#speculation'), /^draft layers \(MTP\/EAGLE\): 2 drafts a round · [0-9.]+ tokens a round \(2\.50 expected\)$/);
  const dir = scratchDir('spec-');
  writeFileSync(join(dir, 'scenario.yaml'), await page.inputValue('#scenario-yaml'));
  execFileSync(BIN, ['predict', '-c', join(dir, 'scenario.yaml'), '--output-dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
  assert.equal(await page.textContent('#prediction-json'), readFileSync(join(dir, 'prediction.json'), 'utf8'));
  await page.close();
});

test('an uncertainty band set in the form replays every seed in the worker and equals the CLI on threads', async () => {
  const page = await openPage();
  await waitDone(page);
  assert.equal(await page.textContent('#uncertainty'), 'off');
  await page.fill('#f-evaluation-uncertainty-seeds', '4');
  await page.press('#f-evaluation-uncertainty-seeds', 'Tab');
  assert.match(await page.inputValue('#scenario-yaml'), /uncertainty:[\s{]*seeds: 4/);
  await runAfter(page, () => page.click('#run'));
  const dir = scratchDir('band-');
  writeFileSync(join(dir, 'scenario.yaml'), await page.inputValue('#scenario-yaml'));
  execFileSync(BIN, ['predict', '-c', join(dir, 'scenario.yaml'), '--output-dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
  const cli = readFileSync(join(dir, 'prediction.json'), 'utf8');
  assert.equal(await page.textContent('#prediction-json'), cli);
  const f = JSON.parse(cli).servesim.uncertainty.figures;
  assert.equal(await page.textContent('#uncertainty'),
    `4 seeds · TTFT p90 ${f.p90_ttft_ms.min.toFixed(1)}–${f.p90_ttft_ms.max.toFixed(1)} ms · TPOT p90 ${f.p90_tpot_ms.min.toFixed(2)}–${f.p90_tpot_ms.max.toFixed(2)} ms · ${f.request_throughput_rps.min.toFixed(3)}–${f.request_throughput_rps.max.toFixed(3)} req/s`);
  await page.close();
});

test('an invalid scenario shows every problem and the app stays usable', async () => {
  const page = await openPage();
  await waitDone(page);
  await page.fill('#scenario-yaml', 'engine:\n  model: Qwen/Qwen3-32B-FP9\n  hardware: h200_sxm\n  workers: {aggregated: {}}\ntraffic:\n  load: {type: poisson, requests_per_second: -1}\n');
  await page.click('#run');
  await page.waitForSelector('#run-error');
  const err = await page.textContent('#run-error');
  assert.match(err, /engine\.model \(line 2, column 10\): unknown model/);
  assert.match(err, /traffic\.load\.requests_per_second .*greater than 0/);
  await page.screenshot({ path: join(ARTIFACTS, 'predict-invalid.png'), fullPage: true });
  await page.fill('#scenario-yaml', 'engine: [unclosed\n');
  await page.click('#run');
  await page.waitForFunction(() => (document.querySelector('#run-error')?.textContent ?? '').includes('line'));
  // Still usable: a valid scenario runs again.
  const { readFileSync: rf } = await import('node:fs');
  await page.fill('#scenario-yaml', rf('data/scenarios/default.yaml', 'utf8'));
  await page.click('#run');
  assert.match(await waitDone(page), /^Done/);
  await page.close();
});

test('a long run can be cancelled', async () => {
  const page = await openPage();
  await waitDone(page);
  const yaml = await page.inputValue('#scenario-yaml');
  await page.fill('#scenario-yaml', yaml.replace('requests: 100', 'requests: 2000000').replace('concurrency: 10', 'concurrency: 256'));
  await page.click('#run');
  await page.waitForFunction(() => (document.querySelector('#status')?.textContent ?? '').startsWith('Simulating'), null, { timeout: 30000 });
  await page.click('#cancel');
  await page.waitForFunction(() => document.querySelector('#status')?.textContent === 'Cancelled.');
  // A fresh worker serves the next run.
  await page.fill('#scenario-yaml', yaml);
  await page.click('#run');
  assert.match(await waitDone(page), /^Done/);
  await page.close();
});

function cliRecommend(spec) {
  const dir = scratchDir('rec-');
  execFileSync(BIN, ['recommend', '-c', spec, '--output-dir', dir], { stdio: ['ignore', 'pipe', 'pipe'] });
  return readFileSync(join(dir, 'recommendation.json'), 'utf8');
}

async function waitSearch(page, timeout = 180000) {
  await page.waitForFunction(() => {
    const s = document.querySelector('#rec-status')?.textContent ?? '';
    return s.startsWith('Done') || s.includes('failed');
  }, null, { timeout });
  return page.textContent('#rec-status');
}

test('Recommend: a staged search on a pool of workers equals the CLI, and a row opens in Predict', async () => {
  const cli = cliRecommend('data/recommend/qwen3_32b_h200_staged.yaml');
  const page = await openPage();
  await waitDone(page);
  await page.click('#tab-recommend');
  assert.equal(await page.isVisible('#page-predict'), false);
  const t0 = Date.now();
  await page.click('#rec-run');
  // The plot fills in while the search runs.
  await page.waitForSelector('#pareto-chart[data-status="rendered"] .main-svg', { timeout: 60000 });
  const status = await waitSearch(page);
  const wallMs = Number(await page.getAttribute('#rec-status', 'data-wall-ms'));
  // Every candidate is screened statically; those the screen cannot rule out are replayed (as
  // many as the CLI replayed for the same spec).
  const rec = JSON.parse(cli);
  const replays = rec.candidates.filter((c) => c.evaluation === 'full replay').length;
  assert.ok(replays > 0 && replays < 279, `${replays} full replays`);
  assert.ok(status.startsWith(`Done: 279 candidates (279 static estimate, ${replays} full replay)`), status);
  assert.equal(await page.textContent('#recommendation-json'), cli, 'page recommendation.json equals the CLI');
  const rows = await page.$$eval('#rec-table tbody tr', (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  assert.equal(rows.length, rec.views.top_n.length);
  const top = rec.candidates.find((c) => c.candidate_id === rec.views.top_n[0]);
  assert.ok(Math.abs(Number(rows[0][5]) - top.objectives.throughput_per_gpu) <= 0.05, `${rows[0][5]} vs ${top.objectives.throughput_per_gpu}`);
  await page.screenshot({ path: join(ARTIFACTS, 'recommend-staged.png'), fullPage: true });
  const workers = Number(/on (\d+) workers/.exec(status)[1]);
  writeFileSync(join(ARTIFACTS, 'bench-recommend-browser.json'), JSON.stringify({
    spec: 'data/recommend/qwen3_32b_h200_staged.yaml', candidates: 279, full_replays: replays, workers,
    search_wall_ms: wallMs, candidates_per_s: 279 / (wallMs / 1000), click_to_done_ms: Date.now() - t0,
  }, null, 2) + '\n');
  // The best row opens in Predict and replays to the same figures.
  await page.click('#rec-table tbody tr:first-child .open-predict');
  assert.equal(await page.isVisible('#page-predict'), true);
  await page.waitForFunction(() => (document.querySelector('#status')?.textContent ?? '').startsWith('Done'), null, { timeout: 60000 });
  const ttft = Number(await page.textContent('#mean-ttft'));
  assert.ok(Math.abs(ttft - top.metrics.mean_ttft_ms) <= 0.005, `predict ${ttft} vs recommend ${top.metrics.mean_ttft_ms}`);
  await page.close();
});

test('Recommend: a bad spec is an error at its field, and a search can be cancelled', async () => {
  const page = await openPage();
  await page.click('#tab-recommend');
  await page.fill('#spec-yaml', 'engine: {model: Qwen/Qwen3-8B, backend: {choices: []}}\n');
  await page.click('#rec-run');
  await page.waitForSelector('#rec-error');
  assert.match(await page.textContent('#rec-error'), /engine\.backend.*choices is empty/);
  await page.selectOption('#rec-preset', '1');
  await page.selectOption('#rec-preset', '0');
  const spec = await page.inputValue('#spec-yaml');
  await page.fill('#spec-yaml', spec.replace('requests: 256', 'requests: 200000'));
  await page.click('#rec-run');
  await page.waitForFunction(() => /\(full replay\)/.test(document.querySelector('#rec-status')?.textContent ?? ''), null, { timeout: 60000 });
  await page.click('#rec-cancel');
  await page.waitForFunction(() => document.querySelector('#rec-status')?.textContent === 'Cancelled.');
  assert.equal(await page.isEnabled('#rec-run'), true);
  await page.close();
});

test('Agg vs disagg: the AIConfigurator README case in the page equals servesim estimate --default', async () => {
  const args = ['estimate', '--default', '--model', 'Qwen/Qwen3-32B-FP8', '--system', 'h200_sxm', '--total-gpus', '32',
    '--isl', '4000', '--osl', '500', '--prefix', '500', '--ttft', '300', '--tpot', '10', '--format', 'json'];
  const cli = JSON.parse(execFileSync(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString());
  const page = await openPage();
  await waitDone(page);
  await page.click('#tab-sweep');
  const t0 = Date.now();
  await page.click('#def-run');
  await page.waitForFunction(() => {
    const s = document.querySelector('#def-status')?.textContent ?? '';
    return s.startsWith('Done') || s.includes('failed');
  }, null, { timeout: 180000 });
  const clickToDone = Date.now() - t0;
  assert.match(await page.textContent('#def-status'), /^Done in/);
  const wallMs = Number(await page.getAttribute('#def-status', 'data-wall-ms'));
  const got = JSON.parse(await page.textContent('#def-json'));
  const pageWall = got.wall_seconds;
  // Host times differ; everything else is the CLI's answer.
  delete got.wall_seconds;
  const cliWall = cli.wall_seconds;
  delete cli.wall_seconds;
  assert.deepEqual(got, cli);
  assert.match(await page.textContent('#def-agg'), /^8 x tp4, 16 per rank/);
  await page.screenshot({ path: join(ARTIFACTS, 'sweep-readme-case.png'), fullPage: true });
  writeFileSync(join(ARTIFACTS, 'bench-readme-case-browser.json'), JSON.stringify({
    query: 'Qwen3-32B-FP8, 32 x H200, ISL 4000, OSL 500, prefix 500, TTFT 300 ms, TPOT 10 ms',
    page_wall_ms: wallMs, page_static_s: pageWall.static, click_to_done_ms: clickToDone,
    cli_debug_build_s: cliWall.total,
    aggregated_estimated: cli.counts.aggregated_estimated, disaggregated_screened: cli.counts.disaggregated_screened,
    replays: cli.replayed.length,
  }, null, 2) + '\n');
  // A winner opens in Predict.
  await page.click('.winners li:first-child .open-predict');
  await page.waitForFunction(() => (document.querySelector('#status')?.textContent ?? '').startsWith('Done'), null, { timeout: 120000 });
  await page.close();
});

test('Agg vs disagg with MTP drafts and NCCL: the page equals estimate --default --nextn --allreduce, and a bad draft count is refused by name', async () => {
  const args = ['estimate', '--default', '--model', 'Qwen/Qwen3-32B-FP8', '--system', 'h200_sxm', '--total-gpus', '8',
    '--isl', '4000', '--osl', '500', '--prefix', '500', '--ttft', '300', '--tpot', '10',
    '--nextn', '2', '--nextn-accepted', '1.5', '--allreduce', 'nccl', '--format', 'json'];
  const cli = JSON.parse(execFileSync(BIN, args, { stdio: ['ignore', 'pipe', 'pipe'] }).toString());
  const page = await openPage();
  await waitDone(page);
  await page.click('#tab-sweep');
  const finish = () => page.waitForFunction(() => {
    const s = document.querySelector('#def-status')?.textContent ?? '';
    return s.startsWith('Done') || s.includes('failed');
  }, null, { timeout: 180000 });
  await page.fill('#def-gpus', '8');
  await page.fill('#def-nextn', '6');
  await page.fill('#def-nextn-accepted', '1.5');
  await page.click('#def-run');
  await finish();
  assert.match(await page.textContent('#def-error'), /--nextn 6/);
  await page.fill('#def-nextn', '2');
  await page.selectOption('#def-allreduce', 'nccl');
  await page.click('#def-run');
  await finish();
  assert.match(await page.textContent('#def-status'), /^Done in/);
  const got = JSON.parse(await page.textContent('#def-json'));
  delete got.wall_seconds;
  delete cli.wall_seconds;
  assert.deepEqual(got, cli);
  // Every candidate speculates: the winner's config carries the drafts into Predict.
  await page.click('.winners li:first-child .open-predict');
  await page.waitForFunction(() => (document.querySelector('#status')?.textContent ?? '').startsWith('Done'), null, { timeout: 120000 });
  assert.match(await page.inputValue('#scenario-yaml'), /nextn: 2\n\s*nextn_accepted: 1\.5/);
  assert.match(await page.inputValue('#scenario-yaml'), /timing: \{allreduce: nccl\}/);
  assert.match(await page.textContent('#speculation'), /^draft layers \(MTP\/EAGLE\): 2 drafts a round · [0-9.]+ tokens a round \(2\.50 expected\)$/);
  await page.close();
});

test('a share link reproduces the run, and ?embed shows it compactly', async () => {
  const page = await openPage();
  await waitDone(page);
  const yaml = await page.inputValue('#scenario-yaml');
  await page.fill('#scenario-yaml', yaml.replace('concurrency: 10', 'concurrency: 3'));
  await page.click('#run');
  await page.waitForFunction(() => (document.querySelector('#status')?.textContent ?? '').startsWith('Done'), null, { timeout: 60000 });
  const ttft = await page.textContent('#mean-ttft');
  await page.click('#share');
  const url = await page.inputValue('#share-url');
  assert.match(url, /#cfg=[A-Za-z0-9_-]+$/);
  assert.equal(page.url(), url, 'the address bar carries the link');
  const other = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await other.goto(url);
  await waitDone(other);
  assert.equal(await other.textContent('#mean-ttft'), ttft, 'the link reproduces the numbers');
  assert.equal(await other.inputValue('#scenario-yaml'), yaml.replace('concurrency: 10', 'concurrency: 3'));
  const u = new URL(url);
  await other.goto(`${u.origin}${u.pathname}?embed${u.hash}`);
  await other.waitForFunction(() => /^[0-9.]+$/.test(document.querySelector('#mean-ttft')?.textContent ?? ''), null, { timeout: 60000 });
  assert.equal(await other.textContent('#mean-ttft'), ttft);
  assert.equal(await other.isVisible('#scenario-yaml'), false, 'embed hides the editor');
  assert.equal(await other.isVisible('#tab-recommend'), false, 'embed hides the tabs');
  assert.equal(await other.isVisible('#open-full'), true);
  await other.setViewportSize({ width: 640, height: 520 });
  await other.waitForSelector('#ttft-chart[data-status="rendered"] .main-svg', { timeout: 20000 });
  await other.screenshot({ path: join(ARTIFACTS, 'embed.png') });
  // A damaged link says so and the page still runs the default scenario.
  await other.goto(`${u.origin}${u.pathname}#cfg=${u.hash.slice(5, 20)}`);
  await other.waitForSelector('#share-error');
  assert.match(await other.textContent('#share-error'), /damaged/);
  assert.match(await waitDone(other), /^Done: 100 requests/);
  await other.close();
  await page.close();
});

test('Validate: a calibration file replayed on a pool of workers equals servesim validate --report', async () => {
  const dir = scratchDir('validate-');
  const head = 'id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,'
    + 'batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,'
    + 'prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,'
    + 'decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms\n';
  // Aggregated rows on two engines, a disaggregated row whose pools are sized from the
  // estimate, and a model nobody knows (not predicted, said why).
  const csv = head
    + 'l8,sweep.csv,vllm,0.24.0,meta-llama/Llama-3.1-8B-Instruct,h200_sxm,,agg,1024,128,,,8,1,1,1,1,1,,,,,,,,,,,,,,,40,6\n'
    + 'l8x16,sweep.csv,vllm,0.24.0,meta-llama/Llama-3.1-8B-Instruct,h200_sxm,,agg,1024,128,,,16,1,1,1,1,1,,,,,,,,,,,,,,,55,7\n'
    + 'q32,,sglang,,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,8,2,1,1,1,1,,,,,,,,,,,,,,,90,12\n'
    + 'pd,x; silicon_concurrency=16,trtllm,,Qwen/Qwen3-32B,h200_sxm,,disagg,1024,128,,,,,,,,,1,,2,1,1,2,1,,,2,1,1,2,1,120,14\n'
    + 'nope,,vllm,,acme/NoSuchModel,h200_sxm,,agg,1024,128,,,8,1,1,1,1,1,,,,,,,,,,,,,,,40,6\n';
  writeFileSync(join(dir, 'cal.csv'), csv);
  const stdout = execFileSync(join(process.cwd(), BIN), ['validate', '--silicon', 'cal.csv', '--report', 'report.json'],
    { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] }).toString();
  const cli = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8'));
  const page = await openPage();
  await waitDone(page);
  await page.click('#tab-validate');
  await page.setInputFiles('#val-file', join(dir, 'cal.csv'));
  await page.waitForFunction(() => (document.querySelector('#val-csv')?.value ?? '').includes('acme/NoSuchModel'));
  assert.equal(await page.textContent('#val-name'), 'cal.csv');
  await page.click('#val-run');
  await page.waitForFunction(() => /^(Done|Validation failed)/.test(document.querySelector('#val-status')?.textContent ?? ''), null, { timeout: 180000 });
  assert.match(await page.textContent('#val-status'), /^Done: 5 rows/);
  const got = JSON.parse(await page.textContent('#val-json'));
  // The command line is the CLI's own; every figure and row is the same.
  assert.match(got.command, /^servesim validate --silicon cal\.csv/);
  delete got.command;
  delete cli.command;
  assert.deepEqual(got, cli);
  assert.equal(got.overall.predicted, 4);
  assert.equal(got.rows[3].workers_source, 'sized');
  // The row table puts the largest TTFT error first (rows not predicted last) and filters.
  const size = (r) => (r.ttft_error_pct == null ? -Infinity : Math.abs(r.ttft_error_pct));
  const worstFirst = got.rows.map((r, i) => [r, i]).sort((a, b) => size(b[0]) - size(a[0]) || a[1] - b[1]).map(([r]) => r.id);
  assert.deepEqual(await page.$$eval('#val-rows tbody tr', (trs) => trs.map((tr) => tr.dataset.id)), worstFirst);
  await page.fill('#val-rows-filter', 'sglang');
  assert.deepEqual(await page.$$eval('#val-rows tbody tr', (trs) => trs.map((tr) => tr.dataset.id)), ['q32']);
  assert.equal(await page.textContent('#val-rows-count'), '1 of 1 shown (5 rows)');
  // A row opens in Predict as the scenario it replays as, and runs to its prediction there.
  const before = await page.textContent('#mean-ttft');
  await page.click('#val-rows tbody tr[data-id="q32"] .open-predict');
  await page.waitForFunction((b) => (document.querySelector('#status')?.textContent ?? '').startsWith('Done')
    && document.querySelector('#mean-ttft')?.textContent !== b, before, { timeout: 60000 });
  assert.equal(await page.isVisible('#page-predict'), true);
  const q32 = got.rows.find((r) => r.id === 'q32');
  const opened = Number(await page.textContent('#mean-ttft'));
  assert.ok(Math.abs(opened - q32.predicted_ttft_ms) <= 0.01, `predict ${opened} vs validate ${q32.predicted_ttft_ms}`);
  await page.click('#tab-validate');
  await page.fill('#val-rows-filter', '');
  // The table the CLI prints, and a curve of two points has a shape error.
  const table = await page.textContent('#val-table');
  for (const line of stdout.split('\n').filter((l) => l.startsWith('| **'))) assert.ok(table.includes(line), line);
  assert.equal(got.rows[1].curve, got.rows[0].curve);
  assert.equal(typeof got.rows[1].ttft_shape_pct, 'number');
  for (const id of ['#val-ttft-chart', '#val-tpot-chart']) {
    await page.waitForFunction((s) => document.querySelector(s)?.dataset.status === 'rendered', id, { timeout: 30000 });
  }
  assert.match(await page.getAttribute('#download-validation-json', 'href'), /^data:application\/json/);
  await page.screenshot({ path: join(ARTIFACTS, 'validate.png'), fullPage: true });
  // A filter no row matches is refused by name, and the page stays usable.
  await page.fill('#val-filter', 'b300');
  await page.click('#val-run');
  await page.waitForSelector('#val-error');
  assert.match(await page.textContent('#val-error'), /no row of cal\.csv matches the selection \(filter 'b300'\)/);
  await page.fill('#val-filter', 'sglang');
  await page.click('#val-run');
  await page.waitForFunction(() => /^Done: 1 row in/.test(document.querySelector('#val-status')?.textContent ?? ''), null, { timeout: 120000 });
  // A class, as --class picks it: the one disaggregated row.
  await page.fill('#val-filter', '');
  await page.selectOption('#val-class', 'dense-disagg');
  await page.click('#val-run');
  // The last run's report (the SGLang row) is cleared when this one starts.
  await page.waitForFunction(() => (document.querySelector('#val-json')?.textContent ?? '').includes('"id": "pd"'), null, { timeout: 120000 });
  assert.match(await page.textContent('#val-status'), /^Done: 1 row in/);
  assert.deepEqual(JSON.parse(await page.textContent('#val-json')).rows.map((r) => r.id), ['pd']);
  // What-if options, named and checked as the CLI's flags: out of range is refused by name…
  await page.selectOption('#val-class', '');
  await page.fill('#val-filter', 'l8');
  await page.click('#val-what-if summary');
  await page.fill('#val-opt-length-floor', '1.5');
  assert.match(await page.textContent('#val-command'), /^--length-floor: '1\.5' is not a number from 0 to 1/);
  await page.click('#val-run');
  await page.waitForSelector('#val-error');
  assert.match(await page.textContent('#val-error'), /--length-floor: '1\.5'/);
  // …and in range, the page replays as the command it shows does.
  await page.fill('#val-opt-length-floor', '1');
  await page.fill('#val-opt-frontend-ms', '150');
  await page.check('#val-opt-no-recipes');
  const command = 'servesim validate --silicon cal.csv --filter l8 --frontend-ms 150 --length-floor 1 --no-recipes';
  assert.equal(await page.textContent('#val-command'), command);
  execFileSync(join(process.cwd(), BIN), [...command.split(' ').slice(1), '--report', 'what-if.json'], { cwd: dir, stdio: 'ignore' });
  const whatIf = JSON.parse(readFileSync(join(dir, 'what-if.json'), 'utf8'));
  await page.click('#val-run');
  await page.waitForFunction(() => /^(Done: 2 rows|Validation failed)/.test(document.querySelector('#val-status')?.textContent ?? ''), null, { timeout: 120000 });
  const replayed = JSON.parse(await page.textContent('#val-json'));
  assert.equal(replayed.command, command);
  assert.equal(whatIf.command, `${command} --report what-if.json`);
  delete replayed.command;
  delete whatIf.command;
  assert.deepEqual(replayed, whatIf);
  // 150 ms of frontend on every first token.
  assert.ok(replayed.rows[0].predicted_ttft_ms > got.rows[0].predicted_ttft_ms + 100, JSON.stringify(replayed.rows[0]));
  await page.screenshot({ path: join(ARTIFACTS, 'validate-what-if.png'), fullPage: true });
  // Calibration, as servesim calibrate: rows of several engines are refused by name…
  await page.fill('#val-filter', '');
  await page.click('#cal-run');
  await page.waitForSelector('#cal-error');
  assert.match(await page.textContent('#cal-error'), /ran on 3 engines \(sglang, trtllm, vllm\)/);
  // …and one engine's rows are fitted on the pool to the CLI's report, line for line.
  await page.fill('#val-filter', 'l8');
  await page.uncheck('#cal-fit-prefill_scale');
  await page.uncheck('#cal-fit-step_overhead_ms');
  await page.click('#cal-run');
  await page.waitForFunction(() => /^(Done|Calibration failed)/.test(document.querySelector('#cal-status')?.textContent ?? ''), null, { timeout: 300000 });
  assert.match(await page.textContent('#cal-status'), /^Done in/);
  const calibrated = execFileSync(join(process.cwd(), BIN), ['calibrate', '--silicon', 'cal.csv', '--filter', 'l8', '--fit', 'frontend_ms'],
    { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] }).toString();
  assert.equal(await page.textContent('#cal-table'), calibrated);
  assert.match(calibrated, /frontend_ms/);
  await page.screenshot({ path: join(ARTIFACTS, 'validate-calibrate.png'), fullPage: true });
  await page.close();
});

test('Validate: a per-request vLLM log against its replay equals servesim validate --requests', async () => {
  const shared = join(process.cwd(), '..', 'shared', 'validation', 'vllm-requests');
  const log = join(shared, 'RTXPRO6000_Qwen3-32B_vllm_requests.jsonl');
  const config = 'tests/validation/vllm_rtxpro6000_qwen3_32b.yaml';
  const cli = execFileSync(BIN, ['validate', '--requests', log, '--config', config], { stdio: ['ignore', 'pipe', 'pipe'] }).toString();
  const page = await openPage();
  await waitDone(page);
  // The trace the scenario names, dropped on the Data page, is found by its name.
  await page.click('#tab-data');
  await page.setInputFiles('#data-files', join(shared, 'sharegpt-qwen3-300-sps10.mooncake-bs16.jsonl'));
  await page.locator('li.data-file[data-name="sharegpt-qwen3-300-sps10.mooncake-bs16.jsonl"]').waitFor({ timeout: 30000 });
  await page.click('#tab-validate');
  await page.setInputFiles('#req-log-file', log);
  await page.setInputFiles('#req-config-file', config);
  await page.waitForFunction(() => (document.querySelector('#req-config')?.value ?? '').includes('rtx_pro_6000_server'));
  assert.equal(await page.textContent('#req-log-name'), 'RTXPRO6000_Qwen3-32B_vllm_requests.jsonl');
  await page.click('#req-run');
  await page.waitForFunction(() => /^(Done|Comparison failed)/.test(document.querySelector('#req-status')?.textContent ?? ''), null, { timeout: 180000 });
  assert.equal(await page.textContent('#req-table'), cli);
  assert.match(cli, /^requests: 300 measured, 300 predicted/);
  // A config that does not parse is refused by name.
  await page.fill('#req-config', 'engine: [');
  await page.click('#req-run');
  await page.waitForSelector('#req-error');
  assert.match(await page.textContent('#req-error'), /vllm_rtxpro6000_qwen3_32b\.yaml/);
  await page.close();
});

test('the Features page shows the capability matrix of features.toml', async () => {
  const page = await openPage();
  await page.click('#tab-features');
  const rows = await page.$$eval('#features-table tbody tr[data-feature]', (trs) => trs.map((tr) => tr.dataset.feature));
  const toml = readFileSync('features.toml', 'utf8');
  const ids = [...toml.matchAll(/^id = "([^"]+)"/gm)].map((m) => m[1]);
  assert.deepEqual(rows, ids);
  await page.click('#features-table tr[data-feature="pipeline_parallelism"] td:nth-child(2) summary');
  assert.match(await page.textContent('#features-table tr[data-feature="pipeline_parallelism"] td:nth-child(2)'), /micro-batch/);
  await page.screenshot({ path: join(ARTIFACTS, 'features.png'), fullPage: true });
  await page.close();
});

test('Predict draws every chart and a sortable, filterable request table with downloads', async () => {
  const page = await openPage();
  await waitDone(page);
  for (const id of ['ttft-chart', 'offered-chart', 'workers-chart', 'ttft-cdf-chart', 'itl-cdf-chart', 'waiting-chart', 'running-chart', 'kv-chart', 'tokens-chart']) {
    await page.waitForSelector(`#${id}[data-status="rendered"] .main-svg`, { timeout: 20000 });
  }
  assert.equal(await page.textContent('#request-count'), '100 of 100 shown');
  await page.click('#request-table button.sort[data-key="ttft_ms"]');
  const ttfts = await page.$$eval('#request-table tbody tr td:nth-child(3)', (tds) => tds.map((td) => Number(td.textContent)));
  assert.deepEqual(ttfts, [...ttfts].sort((a, b) => a - b), 'ascending by TTFT');
  const dir = scratchDir('req-');
  execFileSync(BIN, ['predict', '-c', 'data/scenarios/default.yaml', '--output-dir', dir, '--capture-per-request'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const records = readFileSync(join(dir, 'requests.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  const minTtft = Math.min(...records.map((r) => r.ttft_ms));
  assert.ok(Math.abs(ttfts[0] - minTtft) <= 0.005, `${ttfts[0]} vs CLI ${minTtft}`);
  await page.click('#request-table button.sort[data-key="ttft_ms"]');
  const desc = await page.$$eval('#request-table tbody tr td:nth-child(3)', (tds) => tds.map((td) => Number(td.textContent)));
  assert.ok(desc[0] >= desc[desc.length - 1]);
  await page.fill('#request-filter', 'no-such-request');
  assert.equal(await page.textContent('#request-count'), '0 of 0 shown');
  await page.fill('#request-filter', '');
  // The downloads come whole from the worker that ran the scenario, as files.
  const saved = async (button) => {
    const [download] = await Promise.all([page.waitForEvent('download'), page.click(button)]);
    return { name: download.suggestedFilename(), text: readFileSync(await download.path(), 'utf8') };
  };
  const csv = await saved('#download-requests-csv');
  assert.equal(csv.name, 'requests.csv');
  assert.equal(csv.text.trim().split('\n').length, 101);
  assert.match(csv.text.split('\n')[0], /^[a-z0-9_]+(,[a-z0-9_]+)+$/);
  const jsonl = await saved('#download-requests');
  assert.equal(jsonl.name, 'requests.jsonl');
  assert.equal(jsonl.text, readFileSync(join(dir, 'requests.jsonl'), 'utf8'), 'the CLI\'s requests.jsonl, byte for byte');
  assert.equal(await page.$('#request-sample'), null, 'a 100-request run is shown whole');
  // Asked for one after the other at once, each file arrives whole under its own name.
  const both = [];
  page.on('download', (d) => both.push(d));
  await page.click('#download-requests-csv');
  await page.click('#download-requests');
  for (let i = 0; i < 100 && both.length < 2; i++) await page.waitForTimeout(100);
  const got = await Promise.all(both.map(async (d) => [d.suggestedFilename(), readFileSync(await d.path(), 'utf8')]));
  assert.deepEqual(got.map(([n]) => n), ['requests.csv', 'requests.jsonl']);
  assert.equal(got[0][1], csv.text);
  assert.equal(got[1][1], jsonl.text);
  await page.screenshot({ path: join(ARTIFACTS, 'predict-charts.png'), fullPage: true });
  await page.close();
});

test('Playback scrubs and plays the simulated timeline, worker by worker, from the run itself', async () => {
  const page = await openPage();
  await waitDone(page);
  await page.selectOption('#preset', '3');  // P/D: prefill and decode workers behave differently
  await page.waitForFunction(() => /^Done: 300/.test(document.querySelector('#status')?.textContent ?? ''), null, { timeout: 60000 });
  const p = JSON.parse(await page.textContent('#prediction-json'));
  assert.equal(await page.textContent('#sla-attainment'),
    `${(100 * p.goodput_completed_requests / p.completed_requests).toFixed(1)}% (${p.goodput_completed_requests} of ${p.completed_requests})`);
  const ts = p.servesim.time_series;
  const k = Math.floor(ts.time_ms.length / 3);
  await page.fill('#pb-time', String(k));
  await page.waitForFunction((t) => (document.querySelector('#pb-clock')?.textContent ?? '').startsWith(`t = ${t} s`),
    (ts.time_ms[k] / 1000).toFixed(2));
  const rows = page.locator('#playback tr.pb-row');
  assert.equal(await rows.count(), ts.workers.length);
  for (let w = 0; w < ts.workers.length; w++) {
    const row = rows.nth(w);
    assert.equal(await row.locator('.pb-waiting').textContent(), ts.workers[w].waiting[k].toFixed(0));
    assert.equal(await row.locator('.pb-running').textContent(), ts.workers[w].running[k].toFixed(0));
    const kv = (100 * ts.workers[w].kv_blocks_used[k] / ts.workers[w].kv_blocks_total).toFixed(1);
    assert.equal(await row.locator('.pb-kv').textContent(), `${kv}%`);
    assert.equal(await row.locator('.pb-tokens').textContent(),
      `${ts.workers[w].prefill_tokens_per_s[k].toFixed(0)} + ${ts.workers[w].decode_tokens_per_s[k].toFixed(0)}`);
  }
  await page.screenshot({ path: join(ARTIFACTS, 'playback.png'), fullPage: true });
  // Play advances the clock; Pause holds it.
  const before = await page.textContent('#pb-clock');
  await page.click('#pb-play');
  await page.waitForFunction((b) => document.querySelector('#pb-clock')?.textContent !== b, before, { timeout: 10000 });
  await page.click('#pb-play');
  assert.equal(await page.textContent('#pb-play'), 'Play');
  await page.close();
});

test('Compare runs two scenarios and shows their differences', async () => {
  const page = await openPage();
  await page.click('#tab-compare');
  const b = await page.inputValue('#compare-b');
  assert.match(b, /concurrency: 20/);
  await page.click('#compare-run');
  await page.waitForFunction(() => ['#compare-a-status', '#compare-b-status'].every((s) => (document.querySelector(s)?.textContent ?? '').startsWith('done')), null, { timeout: 90000 });
  // Every request ran, so neither side carries a rejection warning.
  assert.equal(await page.textContent('#compare-a-status'), 'done: 100 requests');
  const rows = await page.$$eval('#compare-table tbody tr', (trs) => trs.map((tr) => [...tr.children].map((c) => c.textContent)));
  const ttft = rows.find((r) => r[0] === 'mean TTFT (ms)');
  const cliA = JSON.parse(cliPrediction());
  const cliB = JSON.parse(cliPrediction(['--set', 'traffic.load.concurrency=20']));
  assert.equal(Number(ttft[1]).toFixed(2), cliA.mean_ttft_ms.toFixed(2));
  assert.equal(Number(ttft[2]).toFixed(2), cliB.mean_ttft_ms.toFixed(2));
  assert.ok(Number(ttft[3]) > 0, 'twice the clients queue longer');
  for (const id of ['cmp-ttft-chart', 'cmp-itl-chart', 'cmp-e2e-chart']) {
    await page.waitForSelector(`#${id}[data-status="rendered"] .main-svg`, { timeout: 20000 });
  }
  await page.screenshot({ path: join(ARTIFACTS, 'compare.png'), fullPage: true });
  await page.close();
});

/** Picks Predict preset `index`, waits for its run to replace `before`, and checks the page's
 * prediction.json against the CLI on `file` (written into `dir`); returns that text. */
async function presetMatchesCli(page, index, file, before, dir) {
  await page.selectOption('#preset', String(index));
  await page.waitForFunction((b) => (document.querySelector('#status')?.textContent ?? '').startsWith('Done')
    && document.querySelector('#prediction-json')?.textContent !== b, before, { timeout: 60000 });
  execFileSync(BIN, ['predict', '-c', file, '--output-dir', dir, '--overwrite'], { stdio: ['ignore', 'pipe', 'pipe'] });
  const cli = readFileSync(join(dir, 'prediction.json'), 'utf8');
  assert.equal(await page.textContent('#prediction-json'), cli, file);
  return cli;
}

test('a preset runs at once and matches the CLI on the same file', async () => {
  const page = await openPage();
  await waitDone(page);
  const dir = scratchDir('preset-');
  const pd = await presetMatchesCli(page, 3, 'tests/scenarios/pd_vllm.yaml', await page.textContent('#prediction-json'), dir);
  assert.match(await page.inputValue('#scenario-yaml'), /Prefill\/decode disaggregation/);
  assert.equal(await page.textContent('#host-tier'), 'none');
  // KV offloading to host memory: the summary says what the tier restored.
  const cli = await presetMatchesCli(page, 7, 'tests/scenarios/vllm_host_offload.yaml', pd, dir);
  const host = JSON.parse(cli).servesim.host_offload;
  assert.match(await page.textContent('#host-tier'),
    new RegExp(`^${host.restores} restores of [0-9,]+ tokens · ${host.mean_restore_wait_ms.toFixed(2)} ms wait on average · `));
  assert.equal(await page.textContent('#autoscaling'), 'off');
  // Autoscaling through a traffic peak: the planner's fleet in the summary and on the chart.
  const ramp = await presetMatchesCli(page, 8, 'tests/scenarios/planner_vllm_ramp.yaml', cli, dir);
  const pool = JSON.parse(ramp).servesim.planner.pools[0];
  assert.equal(await page.textContent('#autoscaling'),
    `aggregated 1 → ${pool.peak_workers} → ${pool.final_workers} workers, ${pool.scale_ups} up, ${pool.scale_downs} down`);
  assert.match(await page.textContent('#gpus'), new RegExp(`^1 at start · ${pool.peak_workers} at most · ${pool.mean_workers.toFixed(2)} on average$`));
  await page.waitForSelector('#workers-chart[data-status="rendered"] .main-svg', { timeout: 20000 });
  assert.equal(await page.locator('#workers-chart .scatterlayer .trace').count(), 2, 'serving and provisioned');
  await page.screenshot({ path: join(ARTIFACTS, 'autoscaling.png'), fullPage: true });
  assert.equal(await page.textContent('#storage-tier'), 'none');
  // A storage KV tier (G3) shared by two replicas: the summary says what it read back.
  const g3cli = await presetMatchesCli(page, 9, 'tests/scenarios/vllm_g3_shared.yaml', ramp, dir);
  const g3 = JSON.parse(g3cli).servesim.g3_offload;
  assert.ok(g3.cross_worker_read_blocks > 0, 'reads across workers');
  assert.match(await page.textContent('#storage-tier'),
    new RegExp(`^cluster shared · [0-9,]+ blocks read back in ${g3.read_jobs} reads \\([0-9,]+ across workers\\) · `));
  assert.equal(await page.textContent('#kv-eviction'), 'LRU');
  // Belady eviction over a benchmark dataset twice the KV cache: the summary names the forecast.
  const belady = await presetMatchesCli(page, 10, 'tests/scenarios/vllm_belady_prompt_pool.yaml', g3cli, dir);
  const ev = JSON.parse(belady).servesim.kv_eviction;
  assert.ok(ev.first_admission_prefix_cache_reused_ratio > 0.4, 'the forecast keeps half the prompts');
  assert.match(await page.textContent('#kv-eviction'),
    new RegExp(`^Belady \\(global_input_trace_order_v1\\) · forecast of 1500 requests over 6200 blocks · `));
  assert.equal(await page.textContent('#recurrent-state'), '–');
  // A hybrid model: the summary says how big its recurrent state is and where vLLM keeps it.
  const hybrid = await presetMatchesCli(page, 11, 'tests/scenarios/hybrid_qwen35_vllm_sessions.yaml', belady, dir);
  const st = JSON.parse(hybrid).servesim.memory.aggregated.recurrent_state;
  assert.equal(st.blocks_per_sequence, 3);
  assert.equal(await page.textContent('#recurrent-state'),
    'aggregated: 146.8 MiB a sequence (float32) · 3 KV blocks a sequence · reuse up to a checkpointed block');
  // TensorRT-LLM's host tier is written only with what GPU memory evicts, and the summary says so.
  const trt = await presetMatchesCli(page, 12, 'tests/scenarios/trtllm_host_offload.yaml', hybrid, dir);
  const trtHost = JSON.parse(trt).servesim.host_offload;
  assert.equal(trtHost.writes, 'on_eviction');
  assert.match(await page.textContent('#host-tier'),
    new RegExp(`^${trtHost.restores} restores of [0-9,]+ tokens · ${trtHost.mean_restore_wait_ms.toFixed(2)} ms wait on average · [0-9,]+ blocks written as GPU memory evicted them, `));
  // SGLang's HiCache writes what enters its radix cache and counts tokens.
  const hicache = await presetMatchesCli(page, 13, 'tests/scenarios/sglang_hicache.yaml', trt, dir);
  const hc = JSON.parse(hicache).servesim.host_offload;
  assert.equal(hc.writes, 'write_through');
  assert.match(await page.textContent('#host-tier'),
    new RegExp(`^${hc.restores} restores of [0-9,]+ tokens · ${hc.mean_restore_wait_ms.toFixed(2)} ms wait on average · [0-9,]+ tokens written through from the radix cache, `));
  // With HiCache's storage tier, prefetches read histories in before admission.
  const l3Cli = await presetMatchesCli(page, 14, 'tests/scenarios/sglang_hicache_storage.yaml', hicache, dir);
  const l3 = JSON.parse(l3Cli).servesim.g3_offload;
  assert.equal(l3.reads, 'prefetch');
  assert.ok(l3.prefetches > 0 && l3.prefetched_tokens > 0);
  assert.match(await page.textContent('#storage-tier'),
    new RegExp(`^cluster shared · ${l3.prefetches} prefetches \\(wait complete\\) read [0-9,]+ tokens, [0-9,]+ reached host memory · `));
  // A disaggregated deployment's prefill workers keep the host tier, and the summary says so.
  const pdHostCli = await presetMatchesCli(page, 15, 'tests/scenarios/pd_vllm_host_offload.yaml', l3Cli, dir);
  const pdHost = JSON.parse(pdHostCli).servesim.host_offload;
  assert.equal(pdHost.role, 'prefill');
  assert.match(await page.textContent('#host-tier'),
    new RegExp(`^prefill workers · ${pdHost.restores} restores of [0-9,]+ tokens · `));
  assert.equal(await page.textContent('#storage-tier'), 'none');
  // Two replicas sharing one host pool: the summary gives the pool and what crossed ranks.
  const sharedCli = await presetMatchesCli(page, 16, 'tests/scenarios/vllm_host_offload_shared.yaml', pdHostCli, dir);
  const shared = JSON.parse(sharedCli).servesim.host_offload;
  assert.equal(shared.scope, 'cluster_shared');
  assert.ok(shared.cross_rank_restored_blocks > 0, 'restores across ranks');
  assert.match(await page.textContent('#host-tier'),
    new RegExp(` · ${shared.capacity_blocks} blocks in one pool 2 ranks share \\(${shared.cross_rank_restored_blocks} restored by another rank than wrote them\\)$`));
  await page.close();
});

test('Data: dropped files are described like servesim data inspect, drawn, and a trace replays in Predict as in the CLI', async () => {
  // A small Mooncake trace (shared prompt blocks, timestamps), a corrupt one, and a kernel table.
  const dir = scratchDir('data-');
  const rows = [];
  for (let i = 0; i < 40; i++) {
    const blocks = 1 + (i % 3);
    rows.push(JSON.stringify({ timestamp: i * 250, input_length: 512 * blocks, output_length: 16 + (i % 5) * 8,
      hash_ids: Array.from({ length: blocks }, (_, b) => (b === 0 ? 1 : 100 + i * 4 + b)) }));
  }
  writeFileSync(join(dir, 'tiny_trace.jsonl'), rows.join('\n') + '\n');
  writeFileSync(join(dir, 'bad.jsonl'), rows[0] + '\n{"timestamp": 5, "input_length": "many"}\n');
  const gemm = 'data/perf/h200_sxm/vllm/0.24.0/gemm.parquet';
  const page = await openPage();
  await waitDone(page);
  await page.click('#tab-data');
  await page.setInputFiles('#data-files', [join(dir, 'tiny_trace.jsonl'), join(dir, 'bad.jsonl'), gemm]);
  const trace = page.locator('li.data-file[data-name="tiny_trace.jsonl"][data-kind="mooncake_trace"]');
  await trace.waitFor({ timeout: 30000 });
  const cliText = execFileSync(join(process.cwd(), BIN), ['data', 'inspect', 'tiny_trace.jsonl'], { cwd: dir }).toString();
  assert.equal(await trace.locator('pre.summary').textContent(), cliText, 'page summary equals servesim data inspect');
  // A file dropped on the drop zone is read the same way.
  await page.evaluate((text) => {
    const dt = new DataTransfer();
    dt.items.add(new File([text], 'dropped.jsonl', { type: 'application/jsonl' }));
    document.querySelector('#drop-zone').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
  }, rows.slice(0, 10).join('\n') + '\n');
  await page.locator('li.data-file[data-name="dropped.jsonl"][data-kind="mooncake_trace"]').waitFor({ timeout: 30000 });
  const bad = page.locator('li.data-file[data-name="bad.jsonl"][data-kind="failed"] pre.summary');
  await bad.waitFor({ timeout: 30000 });
  assert.match(await bad.textContent(), /bad\.jsonl:2/);
  const table = page.locator('li.data-file[data-name="gemm.parquet"][data-kind="servesim_table"]');
  await table.waitFor({ timeout: 30000 });
  assert.match(await table.locator('pre.summary').textContent(), /servesim table 'gemm'/);
  await table.locator('.chart[data-status="rendered"]').first().waitFor({ timeout: 30000 });
  await page.waitForSelector('li.data-file[data-name="gemm.parquet"] [id^="data-heatmap-"][data-status="rendered"]', { timeout: 30000 });
  await page.screenshot({ path: join(ARTIFACTS, 'data.png'), fullPage: true });
  // Measured results: a calibration CSV and a per-request log, summarised as the CLI does.
  const head = 'id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms';
  writeFileSync(join(dir, 'cal.csv'), head + '\n' +
    'a,x,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,,,8,2,1,,1,1,,,,,,,,,,,,,,,150.5,12.25\n' +
    'b,x,trtllm,1.0.0rc3,Qwen/Qwen3-32B,h100_sxm,,agg,4096,512,,,16,4,1,,1,1,,,,,,,,,,,,,,,556.0,13.34\n');
  writeFileSync(join(dir, 'log.jsonl'),
    '{"request_id":"a","input_toks":10,"output_toks":5,"queued_ts":1.0,"first_token_ts":1.25,"last_token_ts":1.65}\n');
  await page.setInputFiles('#data-files', [join(dir, 'cal.csv'), join(dir, 'log.jsonl')]);
  for (const [name, kind] of [['cal.csv', 'calibration'], ['log.jsonl', 'request_log']]) {
    const item = page.locator(`li.data-file[data-name="${name}"][data-kind="${kind}"]`);
    await item.waitFor({ timeout: 30000 });
    const cli = execFileSync(join(process.cwd(), BIN), ['data', 'inspect', name], { cwd: dir }).toString();
    assert.equal(await item.locator('pre.summary').textContent(), cli, `${name}: page summary equals servesim data inspect`);
  }
  // Replay the trace: the page's scenario, run by the CLI beside the trace, gives the same bytes.
  await runAfter(page, () => trace.locator('button.use-trace').click());
  assert.match(await page.textContent('#status'), /^Done: 40 requests/);
  const yaml = await page.inputValue('#scenario-yaml');
  assert.match(yaml, /^# The default servesim scenario/, 'the edit keeps the comments');
  writeFileSync(join(dir, 'scenario.yaml'), yaml);
  assert.equal(await page.textContent('#prediction-json'), cliPredictIn(dir, 'scenario.yaml'));
  // A folder: a config naming its trace by a relative path runs as the CLI runs it there.
  const folder = join(dir, 'study');
  mkdirSync(join(folder, 'traces'), { recursive: true });
  writeFileSync(join(folder, 'traces', 'burst.jsonl'), rows.slice(0, 25).join('\n') + '\n');
  writeFileSync(join(folder, 'scenario.yaml'), 'engine:\n  model: Qwen/Qwen3-8B\n  hardware: h100_sxm\n  backend: sglang\n'
    + '  workers: {aggregated: {}}\ntraffic:\n  source: {type: trace, paths: [traces/burst.jsonl]}\n  load: {type: trace_timestamps}\n');
  await page.click('#tab-data');
  await page.setInputFiles('#data-folder', folder);
  const cfg = page.locator('li.data-file[data-name="study/scenario.yaml"][data-kind="config"]');
  await cfg.waitFor({ timeout: 30000 });
  await page.locator('li.data-file[data-name="study/traces/burst.jsonl"][data-kind="mooncake_trace"]').waitFor({ timeout: 30000 });
  await runAfter(page, () => cfg.locator('button.open-config').click());
  assert.equal(await page.textContent('#prediction-json'), cliPredictIn(folder, 'scenario.yaml'));
  // A corrupt table (one byte of a data page changed: the Parquet reader panics on it, which
  // aborts the worker) fails by name with the reason, and the next files get a fresh worker.
  await page.selectOption('#preset', '0');
  await waitDone(page);
  await page.click('#tab-data');
  const corrupt = readFileSync('tests/fixtures/fpm/sglang/fpm_forward_perf.parquet');
  corrupt[102042] = 163;
  writeFileSync(join(dir, 'corrupt.parquet'), corrupt);
  await page.setInputFiles('#data-files', [join(dir, 'corrupt.parquet')]);
  const broken = page.locator('li.data-file[data-name="corrupt.parquet"][data-kind="failed"] pre.summary');
  await broken.waitFor({ timeout: 30000 });
  assert.match(await broken.textContent(), /internal error: Decoder for dict should have been set/);
  // An AISimulate FPM table with its sidecar times the scenario in Predict, as in the CLI.
  const fpmDir = 'tests/fixtures/fpm/vllm';
  await page.setInputFiles('#data-files', [join(fpmDir, 'fpm_forward_perf.parquet'), join(fpmDir, 'fpm_forward_perf.metadata.json')]);
  const fpm = page.locator('li.data-file[data-name="fpm_forward_perf.parquet"][data-kind="fpm"]');
  await fpm.waitFor({ timeout: 30000 });
  await page.locator('li.data-file[data-name="fpm_forward_perf.metadata.json"][data-kind="fpm_sidecar"]').waitFor({ timeout: 30000 });
  await runAfter(page, () => fpm.locator('button.use-fpm').click());
  const fpmYaml = await page.inputValue('#scenario-yaml');
  assert.match(fpmYaml, /forward_model: fpm/);
  const fpmRun = join(dir, 'fpm');
  mkdirSync(fpmRun);
  writeFileSync(join(fpmRun, 'scenario.yaml'), fpmYaml);
  for (const f of ['fpm_forward_perf.parquet', 'fpm_forward_perf.metadata.json']) writeFileSync(join(fpmRun, f), readFileSync(join(fpmDir, f)));
  const fpmPage = await page.textContent('#prediction-json');
  assert.equal(fpmPage, cliPredictIn(fpmRun, 'scenario.yaml'));
  assert.match(fpmPage, /"model": "fpm"/);
  // A folder of the AIConfigurator perf database times Predict in place of the built-in
  // tables; the CLI gives the same bytes with the same table imported by `data import-aic`.
  await page.selectOption('#preset', '0');
  await waitDone(page);
  await page.click('#tab-data');
  await page.setInputFiles('#data-folder', 'tests/fixtures/aic');
  const aic = page.locator('li.data-file[data-name="aic/systems/data/h200_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"][data-kind="aic_table"]');
  await aic.waitFor({ timeout: 30000 });
  await aic.locator('[id^="data-heatmap-"][data-status="rendered"]').waitFor({ timeout: 30000 });
  const prevAic = await page.textContent('#prediction-json');
  await runAfter(page, () => aic.locator('button.use-aic').click());
  const aicRun = join(dir, 'aic');
  cpSync('data/perf', join(aicRun, 'perf'), { recursive: true });
  execFileSync(join(process.cwd(), BIN), ['data', 'import-aic', '--from', 'tests/fixtures/aic', '--out', join(aicRun, 'perf'),
    '--systems', 'h200_sxm', '--backends', 'vllm'], { stdio: ['ignore', 'pipe', 'pipe'] });
  writeFileSync(join(aicRun, 'scenario.yaml'), await page.inputValue('#scenario-yaml'));
  const aicPage = await page.textContent('#prediction-json');
  assert.equal(aicPage, cliPredictIn(aicRun, 'scenario.yaml', ['--data-dir', aicRun]));
  assert.ok(JSON.parse(aicPage).mean_tpot_ms > 1.3 * JSON.parse(prevAic).mean_tpot_ms, 'the 1.5x slower GEMMs are used');
  await page.close();
});

test('Data: an agentic trace is recognised, its graph summarised, and it replays in Predict as in the CLI', async () => {
  const dir = scratchDir('agentic-');
  const fixture = 'tests/fixtures/traces/agentic_coding.jsonl';
  writeFileSync(join(dir, 'agentic_coding.jsonl'), readFileSync(fixture));
  const page = await openPage();
  await waitDone(page);
  await page.click('#tab-data');
  await page.setInputFiles('#data-files', [join(dir, 'agentic_coding.jsonl')]);
  const trace = page.locator('li.data-file[data-name="agentic_coding.jsonl"][data-kind="agentic_trace"]');
  await trace.waitFor({ timeout: 30000 });
  const cliText = execFileSync(join(process.cwd(), BIN), ['data', 'inspect', 'agentic_coding.jsonl'], { cwd: dir }).toString();
  assert.equal(await trace.locator('pre.summary').textContent(), cliText, 'page summary equals servesim data inspect');
  assert.match(cliText, /12 roots start at their timestamps, 328 requests wait for others/);
  // Replayed with the whole graph (the default scenario stops at 100 requests otherwise).
  await runAfter(page, () => trace.locator('button.use-trace').click());
  await page.fill('#scenario-yaml', (await page.inputValue('#scenario-yaml')).replace(/requests: 100/, 'requests: 1000'));
  await runAfter(page, () => page.click('#run'));
  assert.match(await page.textContent('#status'), /^Done: 340 requests/);
  const yaml = await page.inputValue('#scenario-yaml');
  assert.match(yaml, /format: agentic_mooncake/);
  writeFileSync(join(dir, 'scenario.yaml'), yaml);
  const cli = cliPredictIn(dir, 'scenario.yaml');
  assert.equal(await page.textContent('#prediction-json'), cli);
  const a = JSON.parse(cli).servesim.agentic;
  assert.match(await page.textContent('#agentic'), new RegExp(`^12 plays, all completed · ${(a.play_duration_ms.mean / 1e3).toFixed(1)} s mean`));
  await page.close();
});

test('a strict Content-Security-Policy holds, and the app runs offline after its first load', async () => {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  await context.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  const page = await context.newPage();
  await page.goto(BASE);
  await waitDone(page);
  const policy = await page.getAttribute('meta[http-equiv="Content-Security-Policy"]', 'content');
  assert.match(policy, /script-src 'self' 'wasm-unsafe-eval' 'sha256-[A-Za-z0-9+/=]+'; /);
  assert.doesNotMatch(policy, /script-src[^;]*unsafe-inline/);
  await page.waitForSelector('#ttft-chart[data-status="rendered"] .main-svg', { timeout: 20000 });
  const online = await page.textContent('#prediction-json');
  // The service worker has taken over and kept the shell.
  await page.waitForFunction(async () => {
    if (!navigator.serviceWorker?.controller) return false;
    const keys = await (await caches.open('servesim-v1')).keys();
    const names = keys.map((r) => new URL(r.url).pathname);
    return ['worker_bg.wasm', 'plotly.min.js', 'gemm.parquet'].every((f) => names.some((n) => n.endsWith(f)))
      && names.some((n) => /servesim_web-[0-9a-f]+_bg\.wasm$/.test(n));
  }, null, { timeout: 30000, polling: 250 });
  await context.setOffline(true);
  await page.reload();
  // Really offline: a file nobody fetched before is not there.
  assert.equal(await page.evaluate(() => fetch('./data/perf/h100_sxm/nccl.parquet').then(() => 'fetched', () => 'failed')), 'failed');
  const status = await waitDone(page);
  assert.match(status, /^Done: 100 requests/, 'offline run');
  assert.equal(await page.textContent('#prediction-json'), online, 'offline numbers equal online ones');
  await page.waitForSelector('#ttft-chart[data-status="rendered"] .main-svg', { timeout: 20000 });
  assert.deepEqual(await page.evaluate(() => window.__csp), [], 'no CSP violation');
  await context.close();
});

test('the built app works from a sub-path of a static host', async () => {
  // dist/ served as /apps/servesim/ by a plain static server (nothing rewrites URLs).
  const root = scratchDir('host-');
  mkdirSync(join(root, 'apps'));
  symlinkSync(join(process.cwd(), 'dist'), join(root, 'apps', 'servesim'));
  const server = spawn('python3', ['-u', '-m', 'http.server', '0', '--bind', '127.0.0.1', '--directory', root], { stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    const port = await new Promise((resolve, reject) => {
      const seen = (d) => { const m = /port (\d+)/.exec(d.toString()); if (m) resolve(Number(m[1])); };
      server.stdout.on('data', seen);
      server.stderr.on('data', seen);
      server.on('exit', () => reject(new Error('static server exited')));
    });
    const page = await browser.newPage();
    const failed = [];
    page.on('response', (r) => { if (r.status() >= 400) failed.push(`${r.status()} ${r.url()}`); });
    await page.goto(`http://127.0.0.1:${port}/apps/servesim/`);
    const status = await waitDone(page);
    assert.match(status, /^Done: 100 requests/);
    assert.equal(await page.textContent('#prediction-json'), cliPrediction());
    assert.deepEqual(failed, [], 'every asset, worker and table is found under the sub-path');
    await page.close();
  } finally {
    server.kill();
  }
});

test('first result and load size are measured (written to test-artifacts, not asserted)', async () => {
  // A fresh context: nothing cached, as a first visit.
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  let bytes = 0;
  const sizes = {};
  page.on('response', async (r) => {
    try {
      const len = (await r.body()).length;
      bytes += len;
      sizes[new URL(r.url()).pathname.split('/').pop() || 'index.html'] = len;
    } catch { /* redirects and aborted requests have no body */ }
  });
  const t0 = Date.now();
  await page.goto(BASE);
  await page.waitForFunction(() => (document.querySelector('#status')?.textContent ?? '').startsWith('Done'), null, { timeout: 60000 });
  const waitedMs = Date.now() - t0;
  // The page stamps the moment the result was set (performance.now() since navigation).
  const firstResultMs = Number(await page.getAttribute('#status', 'data-done-ms'));
  const nav = await page.evaluate(() => performance.getEntriesByType('navigation')[0]?.domContentLoadedEventEnd ?? null);
  writeFileSync(join(ARTIFACTS, 'bench-first-result.json'), JSON.stringify({
    first_result_ms_from_navigation: firstResultMs, playwright_saw_it_ms: waitedMs, dom_content_loaded_ms: nav, bytes_transferred: bytes, files: sizes,
  }, null, 2) + '\n');
  assert.ok(firstResultMs > 0);
  await context.close();
});
