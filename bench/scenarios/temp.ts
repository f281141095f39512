/**
 * Temp directories of the end-to-end suites (process logs, haproxy configs, ganesha's export). Removed by
 * `BenchWorld.close()`, or at exit by the interop harness's safety net if the run dies first; set
 * BENCH_KEEP_TEMP=1 to keep them for a look at the logs.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trackDir } from '../../test/interop/harness/processes.js';

export function benchTempDir(name: string): string {
  const dir = mkdtempSync(join(tmpdir(), `rpcrdma-bench-${name}-`));
  if (process.env.BENCH_KEEP_TEMP !== '1') trackDir(dir);
  return dir;
}
