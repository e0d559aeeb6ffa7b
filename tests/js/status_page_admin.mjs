// status_page_admin.mjs: the live status page's admin actions in Debian's headless chromium
// (playwright-core). Prints ONE JSON line with what it saw at each step;
// tests/browser/test_status_page_admin.py judges it.
//
//   node tests/js/status_page_admin.mjs --url http://127.0.0.1:PORT/ --token TOKEN \
//        --loaded MODEL --stopped MODEL [--chromium /usr/bin/chromium] [--timeout-ms 30000]
//
// Steps: no_token (the page without a token: how many action buttons; a POST to an admin
// route from the page without a token: its status), wrong_token (a wrong token typed in: the
// message shown, the buttons), with_token (the right one: the buttons per model, the page's
// URL, sessionStorage), unload (click unload on --loaded: its state once the page shows
// "stopped"), load (click load on --stopped: "ready"), restart (click restart on it: the
// message and the instance text once a new instance id shows), pin / unpin (the row's
// data-pinned), reloaded (the page reloaded in the same tab: buttons still there),
// stale_token (sessionStorage holds a wrong token, a click: the 401 message, buttons gone).
// Exit status: 0 when the JSON line was printed, 2 on a usage error, 1 when a step failed
// (the JSON line then carries "error" and the step).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

function parseArgs(argv) {
  const opts = { chromium: '/usr/bin/chromium', timeoutMs: 30000 };
  const names = { '--url': 'url', '--token': 'token', '--loaded': 'loaded', '--stopped': 'stopped',
                  '--chromium': 'chromium', '--timeout-ms': 'timeoutMs' };
  for (let i = 0; i < argv.length; i += 2) {
    const k = names[argv[i]];
    if (!k || argv[i + 1] === undefined) { console.error(`bad argument ${argv[i]}`); process.exit(2); }
    opts[k] = k === 'timeoutMs' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!opts.url || !opts.token || !opts.loaded || !opts.stopped) {
    console.error('usage: status_page_admin.mjs --url URL --token T --loaded M --stopped M');
    process.exit(2);
  }
  return opts;
}

// What the page shows of the admin part (runs in the page).
function readAdmin() {
  const rows = {};
  document.querySelectorAll('#models tbody tr[data-model]').forEach((tr) => {
    rows[tr.dataset.model] = {
      state: tr.querySelector('[data-field="state"] .badge').dataset.state,
      pinned: tr.dataset.pinned,
      instances: tr.querySelector('[data-field="instances"]').textContent,
      actions: [...tr.querySelectorAll('button[data-action]')].map((b) => b.dataset.action),
    };
  });
  const msg = document.getElementById('admin-msg');
  return {
    admin: document.body.dataset.admin,
    buttons: document.querySelectorAll('button[data-action]').length,
    msg: msg.textContent, msg_state: msg.dataset.state || '',
    actions_head_hidden: document.getElementById('actions-head').hidden,
    rows,
  };
}

const stateIs = ([name, state]) => {
  const b = document.querySelector(`#models tr[data-model="${name}"] [data-field="state"] .badge`);
  return b && b.dataset.state === state;
};

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const out = { console_errors: [], page_errors: [], requests: [] };
  let step = 'start';
  const userDataDir = mkdtempSync(join(tmpdir(), 'vramd-chromium-'));
  let context = null;
  try {
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: opts.chromium, headless: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      viewport: { width: 1400, height: 900 }, timeout: opts.timeoutMs,
    });
    context.setDefaultTimeout(opts.timeoutMs);
    const page = context.pages()[0] || await context.newPage();
    page.on('request', (r) => out.requests.push(r.url()));
    page.on('console', (m) => { if (m.type() === 'error') out.console_errors.push(`${step}: ${m.text()}`); });
    page.on('pageerror', (e) => out.page_errors.push(`${step}: ${e}`));
    const click = (model, action) =>
      page.click(`#models tr[data-model="${model}"] button[data-action="${action}"]`);
    const msgSettled = () => page.waitForFunction(() => {
      const s = document.getElementById('admin-msg').dataset.state;
      return s === 'ok' || s === 'error';
    });

    step = 'no_token';
    await page.goto(opts.url, { waitUntil: 'load' });
    await page.waitForFunction(() => Number(document.body.dataset.polls) >= 2);
    out.no_token = await page.evaluate(readAdmin);
    out.no_token.post_status = await page.evaluate(async (m) =>
      (await fetch(`v1/models/${m}/unload`, { method: 'POST' })).status, opts.loaded);

    step = 'wrong_token';
    await page.fill('#token', `${opts.token}-wrong`);
    await page.click('#token-use');
    await msgSettled();
    await page.waitForFunction(() => Number(document.body.dataset.polls) >= 3);
    out.wrong_token = await page.evaluate(readAdmin);

    step = 'with_token';
    await page.fill('#token', opts.token);
    await page.click('#token-use');
    await page.waitForSelector('button[data-action]');
    out.with_token = await page.evaluate(readAdmin);
    out.with_token.url = page.url();
    out.with_token.stored = await page.evaluate(() => sessionStorage.getItem('vramd-admin-token'));

    step = 'unload';
    await click(opts.loaded, 'unload');
    await page.waitForFunction(stateIs, [opts.loaded, 'stopped']);
    await msgSettled();
    out.unload = await page.evaluate(readAdmin);

    step = 'load';
    await click(opts.stopped, 'load');
    await page.waitForFunction(stateIs, [opts.stopped, 'ready']);
    await msgSettled();
    out.load = await page.evaluate(readAdmin);

    step = 'restart';
    const before = out.load.rows[opts.stopped].instances;
    await click(opts.stopped, 'restart');
    await page.waitForFunction(() => document.getElementById('admin-msg').textContent.startsWith('restart'));
    await msgSettled();
    await page.waitForFunction(([m, b]) => {
      const tr = document.querySelector(`#models tr[data-model="${m}"]`);
      const text = tr.querySelector('[data-field="instances"]').textContent;
      return text !== b && text.includes(' ready') && tr.querySelector('.badge').dataset.state === 'ready';
    }, [opts.stopped, before]);
    out.restart = await page.evaluate(readAdmin);
    out.restart.before = before;

    step = 'pin';
    await click(opts.stopped, 'pin');
    await page.waitForFunction((m) => document.querySelector(`#models tr[data-model="${m}"]`).dataset.pinned === 'admin',
                               opts.stopped);
    await page.waitForSelector(`#models tr[data-model="${opts.stopped}"] button[data-action="unpin"]`);
    out.pin = await page.evaluate(readAdmin);

    step = 'unpin';
    await click(opts.stopped, 'unpin');
    await page.waitForFunction((m) => document.querySelector(`#models tr[data-model="${m}"]`).dataset.pinned === '',
                               opts.stopped);
    out.unpin = await page.evaluate(readAdmin);

    step = 'reloaded';
    await page.reload({ waitUntil: 'load' });
    await page.waitForSelector('button[data-action]');
    out.reloaded = await page.evaluate(readAdmin);

    step = 'stale_token';
    await page.evaluate(() => sessionStorage.setItem('vramd-admin-token', 'not-the-token'));
    await page.waitForFunction(() => Number(document.body.dataset.polls) >= 2);
    await page.evaluate(() => { document.getElementById('admin-msg').dataset.state = ''; });
    await click(opts.loaded, 'load');
    await msgSettled();
    await page.waitForFunction(() => document.querySelectorAll('button[data-action]').length === 0);
    out.stale_token = await page.evaluate(readAdmin);
    out.stale_token.stored = await page.evaluate(() => sessionStorage.getItem('vramd-admin-token'));
    step = 'done';
  } catch (e) {
    out.error = `${step}: ${e && e.stack ? e.stack : e}`;
  } finally {
    if (context) await context.close().catch(() => {});
    rmSync(userDataDir, { recursive: true, force: true });
  }
  console.log(JSON.stringify(out));
  process.exit(out.error ? 1 : 0);
}

main();
