/**
 * Holds the idle clients of a `busy+idle` run in a process of their own, as if they were on other hosts:
 *
 *   node dist/bench/loadgen/idle-main.js <target> <count>
 *
 * Opens `count` connections to `target`, makes one NULL call on each (so every idle client has been
 * through the whole chain once), prints `ready` on stdout, and holds them until its stdin ends; then it
 * closes them and exits 0. It exits 1, saying why on stderr, if a connection or a call fails, and 2 if
 * the chain closed an idle connection while it was held (the measurement would then have had fewer
 * idle clients than it claims).
 */
import { TEST_PROGRAM, TEST_VERSION, TestProc } from '../../gateway/test-program/constants.js';
import { connectAll } from './connect.js';

async function main(): Promise<number> {
  const [target, countText] = process.argv.slice(2);
  const count = Number(countText);
  if (!target || !Number.isInteger(count) || count <= 0) {
    throw new Error('usage: idle-main <host:port> <count>');
  }
  const clients = await connectAll(target, count, 1);
  await Promise.all(clients.map((c) => c.call(TEST_PROGRAM, TEST_VERSION, TestProc.NULL)));
  process.stdout.write('ready\n');
  process.stdin.resume();
  await new Promise((resolve) => process.stdin.once('end', resolve).once('close', resolve));
  // A close the chain sent just before the end of stdin may be read in the same poll phase, after it;
  // give those events a moment to be handled so that they are counted.
  await new Promise((resolve) => setTimeout(resolve, 100));
  const lost = clients.filter((c) => c.closed).length;
  for (const c of clients) c.destroy();
  if (lost > 0) {
    process.stderr.write(`${lost} of ${count} idle connections were closed by the chain while held\n`);
    return 2;
  }
  return 0;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    process.stderr.write(
      `idle clients failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
