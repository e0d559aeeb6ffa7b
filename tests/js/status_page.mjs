// status_page.mjs: loads vramd's live status page (GET /) in Debian's headless chromium
// through playwright-core, reads what the page shows, checks that it refreshes by itself
// and that it shows a lost connection and recovers, takes a screenshot, and prints ONE
// JSON line with everything it read (tests/browser/test_status_page.py judges it).
//
//   node tests/js/status_page.mjs --url http://127.0.0.1:PORT/ --screenshot out.png \
//        [--load MODEL] [--chromium /usr/bin/chromium] [--timeout-ms 30000]
//
// --load MODEL: after the first reading, POST /v1/models/MODEL/load (admin route, no token:
// vramd listens on loopback) and wait until the page shows MODEL's resident memory and
// state "ready" without being reloaded.
// Phases, in order: first (page loaded, GPU bars drawn), after (MODEL loaded), screenshot,
// outage (the page's requests to v1/status are aborted: it must say "lost"), recovered
// (requests allowed again: "live" and polling). Console messages of type error and page
// errors are collected per phase; every URL the page requests is listed.
// Exit status: 0 when the JSON line was printed (the verdict is the caller's), 2 on a
// usage error, 1 when a step failed (the JSON line then carries "error").
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

function parseArgs(argv) {
  const opts = { chromium: '/usr/bin/chromium', timeoutMs: 30000, load: null };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = argv[i + 1];
    if (a === '--url') opts.url = v;
    else if (a === '--screenshot') opts.screenshot = v;
    else if (a === '--load') opts.load = v;
    else if (a === '--chromium') opts.chromium = v;
    else if (a === '--timeout-ms') opts.timeoutMs = Number(v);
    else { console.error(`unknown argument ${a}`); process.exit(2); }
    i++;
  }
  if (!opts.url || !opts.screenshot) {
    console.error('usage: status_page.mjs --url URL --screenshot PATH [--load MODEL]');
    process.exit(2);
  }
  return opts;
}

// Everything the page shows, read from the DOM (runs in the page).
function readPage() {
  const text = (root, sel) => { const e = root.querySelector(sel); return e ? e.textContent.trim() : null; };
  const field = (tr, f) => text(tr, `[data-field="${f}"]`);
  return {
    polls: Number(document.body.dataset.polls),
    updated_ms: Number(document.body.dataset.updated || 0),
    conn: document.getElementById('conn').dataset.state,
    conn_text: text(document, '#conn'),
    version: text(document, '#version'),
    daemon_state: document.getElementById('daemon-state').dataset.state || null,
    uptime: text(document, '#uptime'),
    gpus: [...document.querySelectorAll('#gpus [data-gpu]')].map((card) => {
      const bar = card.querySelector('.bar');
      return {
        index: Number(card.dataset.gpu),
        name: text(card, '.gpu-name'),
        total_bytes: Number(card.querySelector('.gpu-total').dataset.bytes),
        total_text: text(card, '.gpu-total'),
        bar_width: bar.getBoundingClientRect().width,
        bar_label: bar.getAttribute('aria-label'),
        facts: text(card, '.facts'),
        segments: [...bar.querySelectorAll('[data-segment]')].map((d) => ({
          segment: d.dataset.segment,
          bytes: Number(d.dataset.bytes),
          width: d.getBoundingClientRect().width,
          title: d.title,
          background: getComputedStyle(d).backgroundImage + ' ' + getComputedStyle(d).backgroundColor,
          text: d.textContent,
        })),
        legend: [...card.querySelectorAll('.legend [data-segment]')].map((li) => ({
          segment: li.dataset.segment,
          bytes: Number(li.dataset.bytes),
          label: text(li, '.lbl'),
          value: text(li, '.val'),
        })),
      };
    }),
    models: [...document.querySelectorAll('#models tbody tr[data-model]')].map((tr) => ({
      name: tr.dataset.model,
      state: tr.querySelector('[data-field="state"] .badge').dataset.state,
      state_text: text(tr, '[data-field="state"] .badge'),
      instances: field(tr, 'instances'),
      in_flight: Number(field(tr, 'in_flight')),
      queue_depth: Number(field(tr, 'queue_depth')),
      oldest_wait: field(tr, 'oldest_wait'),
      requests: Number(field(tr, 'requests')),
      restarts: Number(field(tr, 'restarts')),
    })),
    queue_summary: text(document, '#queue-summary'),
    queues: [...document.querySelectorAll('#queues tbody tr[data-queue]')].map((tr) => ({
      name: tr.dataset.queue,
      depth: Number(field(tr, 'depth')),
      max: Number(field(tr, 'max')),
      by_priority: field(tr, 'by_priority'),
    })),
    queue_polls: Number(document.body.dataset.queuePolls || 0),
    waiting_note: text(document, '#waiting-note'),
    waiting: [...document.querySelectorAll('#waiting tbody tr[data-request]')].map((tr) => ({
      id: tr.dataset.request,
      model: tr.dataset.model,
      gpu: tr.dataset.gpu,
      position: Number(tr.dataset.position),
      waiting_for: tr.dataset.waitingFor,
      cells: {
        model: field(tr, 'model'), id: field(tr, 'id'), position: field(tr, 'position'),
        waited: field(tr, 'waited'), eta_start: field(tr, 'eta_start'), eta_done: field(tr, 'eta_done'),
        waiting_for: field(tr, 'waiting_for'),
      },
    })),
    events: [...document.querySelectorAll('#events li[data-ts]')].map((li) => ({
      ts_ms: Number(li.dataset.ts),
      text: text(li, '.text'),
    })),
  };
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const origin = new URL(opts.url).origin;
  const out = { url: opts.url, origin, requests: [], console_errors: {}, page_errors: {} };
  let phase = 'first';
  const note = (kind, msg) => { (out[kind][phase] ||= []).push(msg); };
  const userDataDir = mkdtempSync(join(tmpdir(), 'vramd-chromium-'));
  let context = null;
  try {
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: opts.chromium,
      headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      viewport: { width: 1280, height: 860 },
      timeout: opts.timeoutMs,
    });
    context.setDefaultTimeout(opts.timeoutMs);
    const page = context.pages()[0] || await context.newPage();
    page.on('request', (r) => out.requests.push(r.url()));
    page.on('console', (m) => { if (m.type() === 'error') note('console_errors', m.text()); });
    page.on('pageerror', (e) => note('page_errors', String(e)));

    const resp = await page.goto(opts.url, { waitUntil: 'load' });
    const h = resp.headers();
    out.http_status = resp.status();
    out.headers = { 'content-type': h['content-type'], 'cache-control': h['cache-control'],
                    'content-security-policy': h['content-security-policy'] || null };
    await page.waitForFunction(() => Number(document.body.dataset.polls) >= 1 &&
                               Number(document.body.dataset.queuePolls) >= 1 &&
                               document.querySelector('#gpus [data-gpu] .bar [data-segment]'));
    out.first = await page.evaluate(readPage);

    if (opts.load) {
      phase = 'after';
      const r = await fetch(`${origin}/v1/models/${encodeURIComponent(opts.load)}/load`, { method: 'POST' });
      out.load_status = r.status;
      out.load_body = await r.text();
      await page.waitForFunction((name) => {
        const row = document.querySelector(`#models tr[data-model="${name}"] .badge`);
        return document.querySelector(`.bar [data-segment="resident:${name}"]`) &&
          row && row.dataset.state === 'ready';
      }, opts.load);
    }
    phase = 'after';
    const polls = out.first.polls;
    await page.waitForFunction((n) => Number(document.body.dataset.polls) >= n + 2, polls);
    out.after = await page.evaluate(readPage);
    out.status_after = await (await fetch(`${origin}/v1/status`)).json();
    out.queue_after = await (await fetch(`${origin}/v1/queue`)).json();
    await page.screenshot({ path: opts.screenshot, fullPage: true });
    out.screenshot = opts.screenshot;

    phase = 'outage';
    await page.route('**/v1/status*', (route) => route.abort('connectionrefused'));
    await page.waitForFunction(() => document.getElementById('conn').dataset.state === 'lost');
    out.outage = await page.evaluate(() => ({
      conn: document.getElementById('conn').dataset.state,
      conn_text: document.getElementById('conn').textContent,
      stale: document.body.classList.contains('stale'),
      gpus_still_shown: document.querySelectorAll('#gpus [data-gpu]').length,
    }));
    await page.unroute('**/v1/status*');

    phase = 'recovered';
    const lostPolls = await page.evaluate(() => Number(document.body.dataset.polls));
    await page.waitForFunction((n) => document.getElementById('conn').dataset.state === 'live' &&
                               Number(document.body.dataset.polls) > n, lostPolls);
    out.recovered = await page.evaluate(() => ({
      conn: document.getElementById('conn').dataset.state,
      stale: document.body.classList.contains('stale'),
      polls: Number(document.body.dataset.polls),
    }));
  } catch (e) {
    out.error = `${phase}: ${e && e.stack ? e.stack : e}`;
  } finally {
    if (context) await context.close().catch(() => {});
    rmSync(userDataDir, { recursive: true, force: true });
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exitCode = out.error ? 1 : 0;
}

main();
