/**
 * `npm run bench [-- --quick] [-- --only NAME]`: runs every suite in a fixed order, prints a readable
 * table on stderr and the JSON on stdout, and writes bench/results/<timestamp>.json.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BenchContext, type BenchRow, type Suite, table } from './harness.js';
import { suites } from './suites/index.js';

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  const quick = args.includes('--quick');
  const onlyAt = args.indexOf('--only');
  const only = onlyAt >= 0 ? args[onlyAt + 1]?.split(',') : undefined;
  const ctx: BenchContext = {
    quick,
    seconds: quick ? 0.2 : 2,
    log: (msg) => process.stderr.write(`${msg}\n`),
  };
  const selected: Suite[] = only ? suites.filter((s) => only.includes(s.name)) : suites;
  if (only && selected.length === 0) {
    throw new Error(`no suite named ${only.join(',')}; suites: ${suites.map((s) => s.name).join(', ')}`);
  }
  const rows: BenchRow[] = [];
  for (const suite of selected) {
    ctx.log(`[bench] ${suite.name} ...`);
    rows.push(...(await suite.run(ctx)));
  }
  const result = {
    date: new Date().toISOString(),
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    quick,
    rows,
  };
  const here = dirname(fileURLToPath(import.meta.url));
  const dir = join(here, '..', '..', 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${result.date.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  process.stderr.write(`\n${table(rows)}\n\nwritten to ${file}\n`);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main().catch((err) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
