// Dagster's UI on a data directory of many tenants (issue 19 item 5), in headless Chromium:
// an asset's Partitions tab, one tenant's metadata, the asset checks, and the backfill dialog
// (a backfill of a few tenants launched and followed to its end). Each page's load time is
// from navigation to the element that shows it is usable. Screenshots and a JSON log go to --out.
//
//   npm install --prefix /tmp/pw playwright-core      # once (never committed)
//   NODE_PATH=/tmp/pw/node_modules node docs/ui/check_scale.mjs --ui http://127.0.0.1:3000 \
//     --tenant org0100/repo05000 --backfill_tenants org0150/repo07500,org0190/repo09500 --out /tmp/shots
import { writeFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const opts = {
  ui: 'http://127.0.0.1:3000',
  tenant: 'org0001/repo00050',
  asset: 'validated_facts',
  check: 'cap_usage',
  out: '/tmp/memflow-ui-scale',
  timeout: '120000',
  prefix: '',
};
for (let i = 2; i < process.argv.length; i++) opts[process.argv[i].replace(/^--/, '')] = process.argv[++i];
mkdirSync(opts.out, { recursive: true });
const timeout = Number(opts.timeout);
const log = { started: new Date().toISOString(), options: opts, steps: [] };
const say = (step, data = {}) => {
  const row = { at: new Date().toISOString(), step, ...data };
  log.steps.push(row);
  console.log(JSON.stringify(row));
};
const save = () => writeFileSync(`${opts.out}/check_scale.json`, JSON.stringify(log, null, 2) + '\n');

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
page.setDefaultTimeout(timeout);

// Dagster's one-time "Join the Dagster community" dialog covers the page on a new profile.
async function dismissCommunity() {
  const skip = page.getByRole('button', { name: 'Skip' });
  if (await skip.isVisible().catch(() => false)) await skip.click();
}

async function timed(step, url, ready, shot) {
  const t0 = Date.now();
  if (url) await page.goto(opts.ui + url, { waitUntil: 'domcontentloaded' });
  await ready();
  await dismissCommunity();
  const ms = Date.now() - t0;
  if (shot) await page.screenshot({ path: `${opts.out}/${opts.prefix}${shot}.png` });
  say(step, { url, load_ms: ms, screenshot: shot ? `${opts.prefix}${shot}.png` : null });
  save();
  return ms;
}

const enc = encodeURIComponent;
try {
  // 1. the Partitions tab: the partition count and the list of tenants
  await timed('partitions_tab', `/assets/${opts.asset}?view=partitions`,
    () => page.getByText(/[\d,]+ Partitions/i).first().waitFor(), '20-partitions-tab');
  // 2. one tenant's partition: its latest materialization's metadata
  await timed('tenant_metadata', `/assets/${opts.asset}?view=partitions&partition=${enc(opts.tenant)}`,
    () => page.getByText(opts.tenant).first().waitFor().then(
      () => page.getByText(/triples_in|facts_new|rows/i).first().waitFor()), '21-tenant-metadata');
  // 3. the asset's checks, and one check's detail
  await timed('checks_tab', `/assets/${opts.asset}?view=checks`,
    () => page.getByText(opts.check).first().waitFor(), '22-checks-tab');
  await timed('check_detail', `/assets/${opts.asset}?view=checks&checkDetail=${opts.check}`,
    () => page.getByText(/Execution history|Evaluation|Metadata/i).first().waitFor(), '23-check-detail');
  // 4. the backfill dialog: Materialize... on the asset, a few tenants, launch
  await timed('asset_overview', `/assets/${opts.asset}`,
    () => page.getByRole('button', { name: /Materialize/ }).first().waitFor(), null);
  await timed('backfill_dialog', null, async () => {
    await page.getByRole('button', { name: /Materialize/ }).first().click();
    // validated_facts is one step with entities, quarantine, ...: Dagster asks to confirm them
    const confirm = page.getByRole('button', { name: 'Confirm' });
    await page.getByText(/Launch backfill|Additional assets will be materialized/).first().waitFor();
    if (await confirm.isVisible()) await confirm.click();
    await page.getByText(/Launch backfill|Launch run|Launch \d+ run/i).first().waitFor();
  }, '24-backfill-dialog');
  // the tenants to backfill, picked in the dialog's searchable list (one at a time)
  const picks = opts.backfill_tenants ? opts.backfill_tenants.split(',') : [opts.tenant];
  await timed('backfill_pick', null, async () => {
    // the dialog's partition list: a menu over every tenant, filtered by what is typed
    await page.getByText(/Select a partition or create one/).first().click();
    const filter = page.getByPlaceholder('Filter partitions');
    for (const tenant of picks) {
      await filter.fill(tenant);
      await page.locator('[role=menu] label', { has: page.getByText(tenant, { exact: true }) })
        .first().click();
    }
    await page.keyboard.press('Escape');
    await page.getByText(new RegExp(`^${picks.length} partitions?$`)).first().waitFor();
  }, '25-backfill-picked');
  await timed('backfill_launch', null, async () => {
    await page.getByRole('button', { name: 'Launch backfill' }).click();
    await page.getByText('Launch runs to materialize').first().waitFor({ state: 'hidden' });
  }, '26-backfill-launched');
  await timed('backfill_list', '/runs?tab=backfills',
    () => page.getByText('Backfill', { exact: true }).first().waitFor(), '27-backfills');
  // the newest backfill's own page, followed to its end (the daemon runs it)
  const id = (await page.locator('a[href^="/runs/b/"]').first().getAttribute('href')).split('/').pop();
  const t0 = Date.now();
  for (;;) {
    await page.goto(`${opts.ui}/runs/b/${id}`, { waitUntil: 'domcontentloaded' });
    await dismissCommunity();
    await page.getByText(id).first().waitFor();
    await page.waitForTimeout(3000);
    const body = await page.locator('body').innerText();
    const status = (body.match(/Status\s+([A-Z][a-z]+(?: [a-z]+)*)/) || [])[1];
    if (status && !/In progress|Requested|Canceling/.test(status)) {
      await page.screenshot({ path: `${opts.out}/${opts.prefix}28-backfill-done.png` });
      say('backfill_done', { backfill: id, status, after_ms: Date.now() - t0 });
      if (status !== 'Succeeded' && status !== 'Completed') process.exitCode = 1;
      break;
    }
    if (Date.now() - t0 > timeout * 5) throw new Error(`backfill ${id} not done`);
    await page.waitForTimeout(5000);
  }
  say('done');
} catch (err) {
  await page.screenshot({ path: `${opts.out}/${opts.prefix}error.png` }).catch(() => {});
  say('error', { message: String(err).slice(0, 2000) });
  process.exitCode = 1;
} finally {
  save();
  await browser.close();
}
