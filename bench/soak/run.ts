/**
 * Soak mode: `npm run soak -- --minutes N [--cases K]` runs the reliability campaigns (test/reliability:
 * TCP records, RPC-over-RDMA headers, MPA/DDP frames, the rkey checks and the connection flood) over and
 * over for N minutes, each round with fresh seeds and FUZZ_CASES=K (default 1) times the CI case count,
 * and prints a summary: rounds, campaigns passed and failed, the seeds of failing runs (replay one with
 * FUZZ_SEED=...), the largest RSS a round reached.
 *
 * The last two campaigns run mixed traffic through the gateway chain with faults (test/reliability/faults*);
 * their logged figures are summed into the summary's `chain` block: calls, faults injected, retransmissions,
 * client reconnects; lost calls and leaked registrations are asserted 0 by every run (a failing run is
 * listed with its seed; replay with FAULT_SEED=...).
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface SoakOptions {
  minutes: number;
  cases: number;
}

/**
 * The seeds of the tests that failed in an ava run's output: each randomised test logs
 * `seed N (random; replay with FAULT_SEED=N)` (or `(commit …; replay …)`) right under its title line,
 * and a failed one's title line carries ✘.
 */
export function failingSeeds(output: string): string[] {
  const lines = output.split('\n');
  const seeds: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (!lines[i].includes('✘')) continue;
    for (let j = i + 1; j < Math.min(lines.length, i + 6); j++) {
      const m = /seed (\d+) \([^)]*replay with [A-Z_]+=\d+\)/.exec(lines[j]);
      if (m) {
        seeds.push(m[1]);
        break;
      }
    }
  }
  return seeds;
}

export function parseSoakArgs(argv: readonly string[]): SoakOptions {
  const out: SoakOptions = { minutes: 5, cases: 1 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2);
    const value = inline ?? argv[++i];
    const n = Number(value);
    if ((flag === '--minutes' || flag === '--cases') && Number.isFinite(n) && n > 0) {
      out[flag === '--minutes' ? 'minutes' : 'cases'] = n;
    } else {
      throw new Error(`usage: npm run soak -- --minutes N [--cases K] (bad argument ${argv[i]})`);
    }
  }
  return out;
}

/** The campaigns of one round, as compiled test files. */
export const CAMPAIGNS = [
  'fuzz-tcp-records',
  'fuzz-rpcrdma',
  'fuzz-iwarp',
  'rkey-access',
  'frontend-access',
  'load',
  // The gateway chain under load with faults (RDMA connections killed mid-call, mid-chunk and mid-reconnect,
  // clients dropped and stalled, responder and upstream processes killed and restarted).
  'faults',
  'faults-process',
];

/** Figures the chain-fault campaigns log (see test/reliability/faults*.test.ts), summed over the run. */
export interface ChainFigures {
  calls: number;
  faults: number;
  clientResends: number;
  clientReconnects: number;
  routerRetransmits: number;
}

export function chainFigures(text: string): ChainFigures {
  const f: ChainFigures = {
    calls: 0,
    faults: 0,
    clientResends: 0,
    clientReconnects: 0,
    routerRetransmits: 0,
  };
  const sum = (re: RegExp) => [...text.matchAll(re)].reduce((n, m) => n + Number(m[1]), 0);
  f.calls = sum(/ℹ (\d+) calls/g);
  f.clientResends = sum(/client resends (\d+)/g) + sum(/(\d+) resends/g);
  f.clientReconnects = sum(/, (\d+) reconnects/g) + sum(/reconnects (\d+)(?!,)/g);
  f.routerRetransmits = sum(/router retransmits (\d+)/g);
  for (const m of text.matchAll(/faults (\{[^}]*\})/g)) {
    for (const v of Object.values(JSON.parse(m[1]) as Record<string, number>)) f.faults += v;
  }
  f.faults += sum(/(\d+) clients dropped/g);
  for (const m of text.matchAll(/faults: ([^;\n]+(?:; [^;\n]+)*); client/g))
    f.faults += m[1].split('; ').length;
  // The stalled client: one fault per run.
  f.faults += (text.match(/while one client stalled/g) ?? []).length;
  return f;
}

interface RoundResult {
  campaign: string;
  ok: boolean;
  seeds: string[];
  ms: number;
  maxRssKiB: number;
  chain: ChainFigures;
}

const testDir = fileURLToPath(new URL('../../test/reliability/', import.meta.url));

/** Runs one campaign file under ava in a child, sampling the RSS of its process tree. */
function runCampaign(name: string, cases: number): Promise<RoundResult> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(
      'bash',
      ['-c', `ulimit -n 65536 2>/dev/null; exec npx ava --timeout=10m "${testDir}${name}.test.js"`],
      {
        env: { ...process.env, FUZZ_CASES: String(cases), FORCE_COLOR: '0' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let text = '';
    child.stdout.on('data', (d: Buffer) => {
      text += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      text += d.toString();
    });
    let maxRssKiB = 0;
    // Sample the tree's RSS from /proc while it runs (Linux; zero elsewhere).
    const sampler = setInterval(() => {
      maxRssKiB = Math.max(maxRssKiB, treeRssKiB(child.pid ?? 0));
    }, 250);
    // 'close', not 'exit': only then has all of the child's output been read (the seeds and the chain
    // figures are parsed from it).
    child.on('close', (code) => {
      clearInterval(sampler);
      const seeds = failingSeeds(text);
      if (code !== 0) process.stderr.write(text);
      resolve({
        campaign: name,
        ok: code === 0,
        seeds,
        ms: Date.now() - started,
        maxRssKiB,
        chain: chainFigures(text),
      });
    });
  });
}

function treeRssKiB(pid: number): number {
  let total = 0;
  try {
    const children = new Map<number, number[]>();
    const rss = new Map<number, number>();
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        const ppid = Number(fields[1]);
        rss.set(Number(entry), Number(fields[21]) * 4);
        children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
      } catch {
        // the process went away
      }
    }
    const stack = [pid];
    while (stack.length > 0) {
      const p = stack.pop() as number;
      total += rss.get(p) ?? 0;
      stack.push(...(children.get(p) ?? []));
    }
  } catch {
    return 0;
  }
  return total;
}

async function main(): Promise<void> {
  const options = parseSoakArgs(process.argv.slice(2));
  const deadline = Date.now() + options.minutes * 60_000;
  const results: RoundResult[] = [];
  let rounds = 0;
  process.stdout.write(
    `soak: ${options.minutes} min, FUZZ_CASES=${options.cases}, campaigns ${CAMPAIGNS.join(', ')}\n`,
  );
  while (Date.now() < deadline) {
    rounds++;
    for (const name of CAMPAIGNS) {
      if (Date.now() >= deadline) break;
      const r = await runCampaign(name, options.cases);
      results.push(r);
      process.stdout.write(
        `round ${rounds} ${name}: ${r.ok ? 'ok' : 'FAILED'} in ${(r.ms / 1000).toFixed(1)} s, RSS max ${(r.maxRssKiB / 1024).toFixed(0)} MiB${r.ok ? '' : `, seeds ${r.seeds.join(' ')}`}\n`,
      );
    }
  }
  const failed = results.filter((r) => !r.ok);
  const total = (f: (r: RoundResult) => number) => results.reduce((n, r) => n + f(r), 0);
  const summary = {
    minutes: options.minutes,
    fuzzCasesMultiplier: options.cases,
    rounds,
    campaignsRun: results.length,
    campaignsFailed: failed.length,
    failingSeeds: failed.map((r) => ({ campaign: r.campaign, seeds: r.seeds })),
    chain: {
      calls: total((r) => r.chain.calls),
      faultsInjected: total((r) => r.chain.faults),
      routerRetransmits: total((r) => r.chain.routerRetransmits),
      clientResends: total((r) => r.chain.clientResends),
      clientReconnects: total((r) => r.chain.clientReconnects),
      // Every faults campaign asserts lost calls = 0 and registrations back at baseline; a failing run is
      // counted here as lost/leaked, and its seed printed above.
      failedChainRuns: failed.filter((r) => r.campaign.startsWith('faults')).length,
      lostCalls: failed.some((r) => r.campaign.startsWith('faults')) ? 'see failing seeds' : 0,
      leakedRegistrations: failed.some((r) => r.campaign.startsWith('faults')) ? 'see failing seeds' : 0,
    },
    maxRssMiB: Math.round(Math.max(0, ...results.map((r) => r.maxRssKiB)) / 1024),
  };
  process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  process.exitCode = failed.length === 0 ? 0 : 1;
}

// Run only as the program (`npm run soak`), not when a test imports the parsers above.
if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
