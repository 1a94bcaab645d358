// The README's "Switching models" steps (embedding), followed in headless Chromium against a
// running `make dev` / `memflow dev`, with `memflow recall --json` and `memflow status --json`
// read between the steps. Screenshots and a JSON log of what was seen go to --out.
//
//   npm install --prefix /tmp/pw playwright-core      # once (never committed)
//   NODE_PATH=/tmp/pw/node_modules node docs/ui/check_model_switch.mjs \
//     --ui http://127.0.0.1:3000 --data .memflow --env .env \
//     --model sentence-transformers/all-MiniLM-L6-v2 --previous all-MiniLM-L6-v2 --out /tmp/shots
//
// Run it from the checkout `make dev` runs in (its .env is the settings file the code location
// re-reads). Step 1 edits --env in place (the two embedding lines only); --restore puts the
// file back as it was at the end. docs/ui/README.md says what it saw.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);
const { chromium } = require('playwright-core');

const opts = {
  ui: 'http://127.0.0.1:3000',
  data: '.memflow',
  env: '.env',
  model: 'sentence-transformers/all-MiniLM-L6-v2',
  previous: 'all-MiniLM-L6-v2',
  out: '/tmp/memflow-ui-check',
  memflow: '.venv/bin/memflow',
  question: 'which database does the payments service use?',
  until: '5',
  from: '0',
  restore: false,
};
for (let i = 2; i < process.argv.length; i++) {
  const key = process.argv[i].replace(/^--/, '');
  if (key === 'restore') opts.restore = true;
  else opts[key] = process.argv[++i];
}
mkdirSync(opts.out, { recursive: true });
const log = { started: new Date().toISOString(), options: opts, steps: [] };
const say = (step, what, data = {}) => {
  const row = { at: new Date().toISOString(), step, what, ...data };
  log.steps.push(row);
  console.log(JSON.stringify(row));
};

function memflow(args) {
  const done = spawnSync(opts.memflow, args, { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (done.status !== 0) throw new Error(`memflow ${args.join(' ')}: ${done.stderr}`);
  return done.stdout;
}

function tenants() {
  return JSON.parse(memflow(['status', '--data', opts.data, '--json'])).tenants.map((t) => t.tenant);
}

// Which model answered each tenant, and its warnings (recall in-process, .env read at each call).
function recallAll(step) {
  const seen = {};
  for (const tenant of tenants()) {
    const a = JSON.parse(
      memflow(['recall', '--data', opts.data, '--tenant', tenant, opts.question, '--json'])
    );
    seen[tenant] = { embedding_model: a.embedding_model, mode: a.mode, warnings: a.warnings };
  }
  say(step, 'memflow recall --json', { recall: seen });
  return seen;
}

// Per tenant: the vector sets memflow status lists, and the current model's coverage.
function statusAll(step) {
  const st = JSON.parse(memflow(['status', '--data', opts.data, '--json']));
  const seen = {};
  for (const t of st.tenants) {
    seen[t.tenant] = {
      embedding_model: t.embedding_model,
      coverage: t.coverage,
      fact_coverage: t.fact_coverage,
      vectors: Object.fromEntries(
        Object.entries(t.vectors).map(([k, v]) => [k, v.count ?? v.rows ?? v])
      ),
    };
  }
  say(step, 'memflow status --json', { embedding_model: st.embedding_model, status: seen });
  return seen;
}

async function graphql(page, query, variables = {}) {
  const res = await page.request.post(`${opts.ui}/graphql`, { data: { query, variables } });
  return (await res.json()).data;
}

async function latestRuns(page, limit = 5) {
  const data = await graphql(
    page,
    `query($limit: Int) { runsOrError(limit: $limit) { ... on Runs { results {
       runId jobName status tags { key value } } } } }`,
    { limit }
  );
  return data.runsOrError.results;
}

async function waitForRunsAfter(page, knownIds, want = 1, timeoutMs = 900_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const fresh = (await latestRuns(page, 20)).filter((r) => !knownIds.has(r.runId));
    const done = fresh.filter((r) => ['SUCCESS', 'FAILURE', 'CANCELED'].includes(r.status));
    if (fresh.length >= want && done.length === fresh.length) return fresh;
    if (Date.now() > deadline) throw new Error(`runs did not finish: ${JSON.stringify(fresh)}`);
    await page.waitForTimeout(2000);
  }
}

async function shot(page, name) {
  const file = path.join(opts.out, name);
  await page.screenshot({ path: file });
  say('-', 'screenshot', { file });
}

async function open(page, url) {
  await page.goto(`${opts.ui}${url}`, { waitUntil: 'networkidle' });
  await page.waitForTimeout(1500);
  // A fresh browser profile first shows Dagster's "Join the Dagster community" dialog.
  const skip = page.getByRole('button', { name: 'Skip' });
  if (await skip.count()) {
    await skip.first().click();
    await page.waitForTimeout(500);
  }
}

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const original = readFileSync(opts.env, 'utf8');
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
try {
  page.setDefaultTimeout(60_000);
  const skip = Number(opts.from) > 0; // --from 4: .env edited, straight to step 4 (debugging)
  if (!skip) recallAll('0 before');
  if (!skip) statusAll('0 before');

  // 1. Edit .env: the new model, and the old one as the previous model.
  const edited = original
    .replace(/^MEMFLOW_EMBEDDING_MODEL=.*$/m, `MEMFLOW_EMBEDDING_MODEL=${opts.model}`)
    .replace(/^MEMFLOW_PREVIOUS_EMBEDDING_MODEL=.*$/m,
      `MEMFLOW_PREVIOUS_EMBEDDING_MODEL=${opts.previous}`);
  if (!/^MEMFLOW_EMBEDDING_MODEL=/m.test(edited) || !/^MEMFLOW_PREVIOUS_EMBEDDING_MODEL=/m.test(edited))
    throw new Error(`${opts.env} has no MEMFLOW_EMBEDDING_MODEL / MEMFLOW_PREVIOUS_EMBEDDING_MODEL line`);
  writeFileSync(opts.env, edited);
  say('1', 'edited .env', { model: opts.model, previous: opts.previous });
  if (!skip) recallAll('1 after editing .env');
  if (!skip) {

  // 2. Observe: Catalog -> embedding_model -> Observe; its Events tab shows the new model.
  await open(page, '/assets/embedding_model');
  const known = new Set((await latestRuns(page, 20)).map((r) => r.runId));
  await page.locator('button', { hasText: /^\s*Observe\s*$/ }).first().click();
  const observed = await waitForRunsAfter(page, known);
  say('2', 'observation run', { runs: observed.map((r) => [r.runId, r.jobName, r.status]) });
  await open(page, '/assets/embedding_model?view=events');
  await page.getByText(opts.model, { exact: true }).first().waitFor();
  await shot(page, '10-embedding_model-observed-after-editing-env.png');
  if (opts.until === '2') throw new Error('stopped after step 2 (--until 2)');

  // 3. See what is stale: entity_embeddings (and fact_embeddings) -> Partitions: Unsynced.
  // The badge shows on the selected partition: select each tenant in turn.
  for (const asset of ['entity_embeddings', 'fact_embeddings']) {
    const badges = {};
    for (const tenant of tenants()) {
      await open(page, `/assets/${asset}?view=partitions&partition=${encodeURIComponent(tenant)}`);
      await page.getByText('Latest materialization').first().waitFor();
      const badge = page.getByText(/^Unsynced/).first();
      badges[tenant] = await badge
        .waitFor({ timeout: 15_000 })
        .then(() => badge.innerText(), () => 'no Unsynced badge');
      if (tenant === 'acme/payments-api') await shot(page, `11-${asset}-unsynced.png`);
    }
    say('3', `${asset} partitions`, { badges });
  }
  if (opts.until === '3') throw new Error('stopped after step 3 (--until 3)');
  }

  // 4. Catalog -> tick entity_embeddings, fact_embeddings, vector_sink -> Materialize selected
  //    -> All -> Launch backfill.
  await open(page, '/assets');
  for (const asset of ['entity_embeddings', 'fact_embeddings', 'vector_sink']) {
    // The catalog's rows are virtualized: scroll until the asset's row is rendered.
    const link = page.locator(`a[href="/assets/${asset}"]`).first();
    await page.mouse.move(640, 500);
    for (let i = 0; i < 30 && !(await link.count()); i++) {
      await page.mouse.wheel(0, 300);
      await page.waitForTimeout(300);
    }
    await link.scrollIntoViewIfNeeded();
    // The row's checkbox input is hidden under its styled box: click the box.
    const box = page.getByTestId(`checkbox-${asset}`);
    await box.locator('xpath=..').click();
    if (!(await box.isChecked())) throw new Error(`${asset} did not get ticked`);
  }
  say('4', 'ticked', {});
  await shot(page, '12-reembed-three-assets-ticked.png');
  await page.getByRole('button', { name: /Materialize selected/ }).first().click();
  await page.getByRole('dialog').waitFor();
  await page.waitForTimeout(1500);
  const all = page.getByRole('dialog').getByText('All', { exact: true }).first();
  if (await all.count()) await all.click();
  await page.waitForTimeout(1000);
  await shot(page, '12-reembed-materialize-selected-all.png');
  const before4 = new Set((await latestRuns(page, 50)).map((r) => r.runId));
  await page.getByRole('dialog').getByRole('button', { name: /Launch backfill/ }).click();
  await page.waitForTimeout(3000);
  // The backfill is done when Dagster says so (each run it launched finished).
  for (let t = Date.now(); ; ) {
    const b = (await graphql(page, `{ partitionBackfillsOrError(limit: 1) {
      ... on PartitionBackfills { results { id status } } } }`)).partitionBackfillsOrError.results[0];
    if (b && !['REQUESTED', 'CANCELING'].includes(b.status)) {
      say('4', 'backfill', { id: b.id, status: b.status });
      break;
    }
    if (Date.now() - t > 900_000) throw new Error('the backfill did not finish');
    await page.waitForTimeout(3000);
  }
  const backfillRuns = await waitForRunsAfter(page, before4);
  say('4', 'backfill runs', {
    runs: backfillRuns.map((r) => [r.runId, r.jobName, r.status,
      Object.fromEntries(r.tags.filter((t) => t.key.startsWith('dagster/')).map((t) => [t.key, t.value]))]),
  });
  await open(page, `/runs/${backfillRuns[0].runId}`);
  await page.waitForTimeout(2000);
  await shot(page, '13-reembed-one-run-all-tenants.png');
  if (opts.until === '4') throw new Error('stopped after step 4 (--until 4)');

  // 5. Recall: every tenant on the new model once both kinds of vectors cover it.
  const after = recallAll('5 after the backfill');
  statusAll('5 after the backfill');
  const behind = Object.entries(after).filter(
    ([, a]) => a.embedding_model !== opts.model || JSON.stringify(a.warnings).includes('previous_model')
  );
  say('5', behind.length ? 'NOT every tenant on the new model' : 'every tenant on the new model',
    { behind: behind.map(([t]) => t) });
  for (const asset of ['entity_embeddings', 'fact_embeddings']) {
    await open(page, `/assets/${asset}?view=partitions&partition=initech%2Fmonorepo`);
    await page.getByText(opts.model, { exact: true }).first().waitFor();
    await shot(page, `14-${asset}-new-model.png`);
  }
  log.ok = behind.length === 0;
} catch (err) {
  log.error = String(err);
  await page.screenshot({ path: path.join(opts.out, 'failed.png') }).catch(() => {});
  console.error(err);
} finally {
  log.finished = new Date().toISOString();
  if (opts.restore) writeFileSync(opts.env, original);
  writeFileSync(path.join(opts.out, 'check_model_switch.json'), JSON.stringify(log, null, 2));
  await browser.close();
}
process.exit(log.ok ? 0 : 1);
