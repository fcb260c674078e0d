// dashboard_browser_test's browser half (run by run_dashboard_test.sh): a real headless
// Chromium, driven by playwright-core, opens the dashboard of a LIVE `bulwark run --ui`
// job with a crash and a hang injected, checks the live view, waits for the job to end,
// then checks the finished view against the JSON API.
//
//   node dashboard.test.mjs DASHBOARD_URL OUT_DIR
//
// DASHBOARD_URL: what `bulwark run` printed ("http://127.0.0.1:PORT/"); OUT_DIR: where
// the screenshot goes. UPDATE_SCREENSHOT=1 also writes docs/images/dashboard.png.
// CHROMIUM overrides /usr/bin/chromium. Exits non-zero on the first failed check.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
// playwright-core is pinned by ui/package-lock.json (npm ci --prefix ui).
const require = createRequire(path.join(ROOT, 'ui', 'package.json'));
const { chromium } = require('playwright-core');

const [base, outDir] = process.argv.slice(2);
if (!base || !outDir) {
  console.error('usage: node dashboard.test.mjs DASHBOARD_URL OUT_DIR');
  process.exit(2);
}
const url = (p) => new URL(p, base).toString();
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const t0 = Date.now();
const log = (msg) => console.log(`[${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
const ok = (msg) => log(`ok - ${msg}`);

async function api(p) {
  const r = await fetch(url(p), { cache: 'no-store', signal: AbortSignal.timeout(5000) });
  assert.equal(r.status, 200, `GET ${p}: HTTP ${r.status}`);
  return r.json();
}

// Polls fn() until it returns a truthy value; fails with `what` after timeoutMs.
async function until(what, fn, timeoutMs, everyMs = 200) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}` +
        (last ? `: ${last.message}` : ''));
    }
    await sleep(everyMs);
  }
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--headless=new'],
});
let failed = false;
let page = null;
try {
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  // (Refused connections are the simulated outage below.)
  page.on('console', (m) => {
    if (m.type() === 'error' && !m.text().includes('ERR_CONNECTION_REFUSED')) {
      pageErrors.push(m.text());
    }
  });
  // Only the binary serves the page: any other host would be an external request.
  const foreign = [];
  const origin = new URL(base).origin;
  page.on('request', (r) => { if (!r.url().startsWith(origin)) foreign.push(r.url()); });

  await page.goto(base);
  const testid = (id) => page.locator(`[data-testid="${id}"]`);

  // ---------------------------------------------------------------- LIVE view
  await until('the page to say "live"',
    async () => (await testid('conn').getAttribute('data-state')) === 'live', 30000);
  const status0 = await api('api/status');
  assert.equal(status0.end_time, 0, 'the job already ended: the live checks came too late');
  ok(`live: connected; job "${await testid('job').textContent()}"`);
  assert.equal(await testid('job').textContent(), status0.job);

  // The header's step increases between two polls.
  const readStep = async () => Number((await testid('step').textContent()).replace(/,/g, ''));
  const step1 = await until('a step > 0 in the header', async () => {
    const s = await readStep();
    return s > 0 ? s : 0;
  }, 30000);
  const step2 = await until(`the header's step to increase past ${step1}`, async () => {
    const s = await readStep();
    return s > step1 ? s : 0;
  }, 20000);
  ok(`live: header step went ${step1} -> ${step2}`);

  // Every chart is a uPlot with a drawn canvas of non-zero size.
  for (const id of ['chart-loss', 'chart-throughput', 'chart-ettr', 'chart-timeline']) {
    const size = await until(`a canvas in #${id}`, () => page.evaluate((id) => {
      const c = document.querySelector(`#${id} .uplot canvas`);
      if (!c) return null;
      const r = c.getBoundingClientRect();
      return c.width > 0 && c.height > 0 && r.width > 0 && r.height > 0
        ? { w: c.width, h: c.height } : null;
    }, id), 10000);
    ok(`live: #${id} canvas ${size.w}x${size.h}`);
  }

  // The heatmap has cells drawn (the canvas is transparent where there is none).
  const painted = await until('painted cells in the heatmap', () => page.evaluate(() => {
    const c = document.getElementById('heatmap');
    if (!c || !c.width || !c.height) return 0;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
    return n;
  }), 20000);
  const legend = await page.locator('#heatmap-hi').textContent();
  assert.ok(legend.trim().length > 0, 'the heatmap legend has no scale');
  ok(`live: heatmap has ${painted} painted pixels, legend up to ${legend}`);

  // Incidents: rows, or the "no incidents" row, never an empty table.
  const rows0 = await testid('incident-row').count();
  const none0 = await testid('no-incidents').count();
  assert.ok(rows0 > 0 || none0 === 1, 'the incidents table is empty without saying so');
  ok(`live: incidents table shows ${rows0 ? rows0 + ' incident(s)' : '"no incidents"'}`);

  // The API unreachable: the page says "disconnected" and keeps retrying, then recovers.
  await page.route('**/api/**', (route) => route.abort('connectionrefused'));
  await until('the page to say "disconnected"',
    async () => (await testid('conn').getAttribute('data-state')) === 'disconnected', 10000);
  ok(`live: API unreachable -> "${await testid('conn').textContent()}"`);
  await page.unroute('**/api/**');
  await until('the page to reconnect',
    async () => (await testid('conn').getAttribute('data-state')) === 'live', 10000);
  ok('live: API back -> "live" again');

  const status1 = await api('api/status');
  assert.equal(status1.end_time, 0, 'the job ended during the live checks: make it longer');
  ok(`live: every live check passed while the job ran (API step ${status1.step})`);

  // ------------------------------------------------------------- FINISHED view
  await until('the page to say "finished"',
    async () => (await testid('conn').getAttribute('data-state')) === 'finished', 180000, 500);
  const status = await api('api/status');
  assert.ok(status.end_time > 0, 'the page says finished but the API does not');
  ok(`finished: ${status.phase} at step ${status.step}, ${status.restarts} restarts`);

  const { incidents, costs } = await api('api/incidents');
  assert.ok(incidents.length >= 2, `the API has ${incidents.length} incidents, want >= 2`);
  assert.equal(costs.length, incidents.length);
  const rows = testid('incident-row');
  assert.equal(await rows.count(), incidents.length, 'one table row per incident');
  for (let n = 0; n < incidents.length; n++) {
    const row = page.locator(`#incident-${n}`);
    const action = (await row.locator('[data-testid="decision-action"]').textContent()).trim();
    assert.ok(action.length > 0 && action !== '—', `incident ${n} has no decision`);
    assert.equal(action, incidents[n].decision.action);
    assert.equal(await row.getAttribute('data-kind'), incidents[n].kind);
  }
  ok(`finished: ${incidents.length} incident rows, each with its decision ` +
    `(${incidents.map((i) => `${i.kind}: ${i.decision.action}`).join(', ')})`);

  const hangAt = incidents.findIndex((i) => i.kind === 'hang');
  assert.ok(hangAt >= 0, 'no hang incident (the job injects one)');
  const hang = incidents[hangAt];
  const hangRow = page.locator(`#incident-${hangAt}`);
  // A hang sends its node to its self-tests (stop-diagnose): the row says so.
  assert.ok(hang.diagnosis && hang.diagnosis.run, `the hang was not diagnosed: ${JSON.stringify(hang.diagnosis)}`);
  const tested = (await hangRow.locator('[data-testid="diagnosis"]').textContent()).trim();
  assert.ok(tested.startsWith(`tested ${hang.diagnosis.node_id}:`), `diagnosis shown: ${tested}`);
  if (hang.diagnosis.verdict) assert.ok(tested.includes(hang.diagnosis.verdict), tested);
  ok(`finished: the hang row shows its diagnosis "${tested}"`);
  const marker = 'localised: ';
  if (hang.detail.includes(marker)) {
    const culprit = hang.detail.slice(hang.detail.indexOf(marker) + marker.length).trim();
    const shown = (await hangRow.locator('[data-testid="culprit"]').textContent()).trim();
    assert.equal(shown, culprit, 'the hang row names the localised culprit');
    ok(`finished: hang row names the culprit "${shown}"`);
  } else {
    log(`note: the hang's detail names no localised culprit: ${hang.detail}`);
  }

  // The stacks button fetches /api/stacks?incident=N into a <pre>.
  const stacksApi = await api(`api/stacks?incident=${hangAt}`);
  await hangRow.locator('[data-testid="stacks-btn"]').click();
  const pre = page.locator(`#stacks-${hangAt}`);
  const text = await until('the hang\'s stacks in the <pre>', async () => {
    const t = await pre.textContent();
    return t && !t.startsWith('fetching') ? t : null;
  }, 10000);
  if (typeof stacksApi.stacks === 'string') {
    assert.equal(text, stacksApi.stacks, 'the <pre> holds /api/stacks\' text');
  }
  assert.match(text, /rank \d/, 'the stacks name ranks');
  ok(`finished: stacks button shows ${text.length} characters of stacks`);

  // ETTR as the API has it, to 3 decimals.
  const ettrShown = (await testid('ettr').textContent()).trim();
  assert.equal(ettrShown, status.ettr.toFixed(3));
  ok(`finished: ETTR shown ${ettrShown} = /api/status ettr ${status.ettr}`);

  // Charts and heatmap survive the final render; the time budget has its parts.
  const segs = await page.locator('#budget-bar .seg').count();
  assert.ok(segs >= 2, `the time budget shows ${segs} categories`);
  const pts = (await api('api/series')).points.length;
  assert.ok(pts >= 5, `the series has ${pts} points`);
  ok(`finished: time budget shows ${segs} categories; series has ${pts} points`);

  assert.deepEqual(pageErrors, [], 'the page logged errors');
  assert.deepEqual(foreign, [], 'the page requested other hosts');
  ok('no page errors, no request left 127.0.0.1');

  // Screenshot: the finished view, full page, 1400 px wide.
  const shot = path.join(outDir, 'dashboard.png');
  await page.screenshot({ path: shot, fullPage: true });
  log(`screenshot: ${shot}`);
  if (process.env.UPDATE_SCREENSHOT === '1') {
    const docs = path.join(ROOT, 'docs', 'images', 'dashboard.png');
    await page.screenshot({ path: docs, fullPage: true });
    log(`screenshot: ${docs} (UPDATE_SCREENSHOT=1)`);
  }

  // Let the run exit: --metrics-linger waits for one scrape of the final /metrics.
  await fetch(url('metrics'), { signal: AbortSignal.timeout(5000) }).catch(() => {});
  log('PASS');
} catch (e) {
  failed = true;
  console.error(`FAIL: ${e && e.stack ? e.stack : e}`);
  if (page) {
    const shot = path.join(outDir, 'dashboard-failed.png');
    await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
    console.error(`screenshot of the failure: ${shot}`);
  }
} finally {
  await browser.close().catch(() => {});
}
process.exit(failed ? 1 : 0);
