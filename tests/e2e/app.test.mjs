// End-to-end tests: Playwright (playwright-core) drives Debian's Chromium against the built
// dist/ served on 127.0.0.1. Run by scripts/test:
//   BASE_URL=http://127.0.0.1:PORT/ SERVESIM_BIN=target/debug/servesim node --test tests/e2e/
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const BASE = process.env.BASE_URL ?? 'http://127.0.0.1:8765/';
const BIN = process.env.SERVESIM_BIN ?? 'target/debug/servesim';
const ARTIFACTS = process.env.ARTIFACTS ?? 'test-artifacts';
mkdirSync(ARTIFACTS, { recursive: true });

let browser;
const logs = [];

function cliPrediction(args = []) {
  const dir = mkdtempSync(join(tmpdir(), 'servesim-e2e-'));
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
