/**
 * The NFS workload with real peers: libnfs `nfs-cp` puts and gets one large file (256 MiB; 16 MiB with
 * --quick) over NFSv3 (libnfs 4.0's NFSv4 WRITE fails above ~3.9 KB: docs/interop.md) to nfs-ganesha
 * (FSAL VFS on a temp export, started as the interop harness does), directly, through socat ×2, and
 * through the gateway chain (gateway → soft iWARP → responder process → ganesha). The figure is wall
 * time; the target compares the gateway chain with socat ×2 (two hops each).
 *
 * Each chain writes the file five times (fresh names: nfs-cp never overwrites) and reads the copies
 * back; the figure is the median of the five. Not the best: ganesha's write times are bimodal (one run
 * measured puts of 0.35, 0.96 and 1.03 s through socat, and 0.84-0.96 s directly), so the best of a few
 * compares one chain's lucky run with another's usual one; and each chain's first get is cold. The read
 * is checked by size against the source. MOUNT goes straight to ganesha (as in the interop gateway
 * target): only the NFS program crosses the chain. The server's page cache holds the file when it is
 * read, for every chain alike: the comparison is of the path, not of the disk.
 */
import { createWriteStream, rmSync, statSync } from 'node:fs';
import type { ExecutionContext } from 'ava';
import { startGanesha } from '../../test/interop/harness/ganesha.js';
import { nfsCopyIn, nfsCopyOut } from '../../test/interop/harness/libnfs.js';
import { RpcProgram } from '../../test/interop/harness/rpc-ping.js';
import { useRpcbind } from '../../test/interop/harness/rpcbind.js';
import { InteropSession } from '../../test/interop/harness/session.js';
import { type BenchContext, type BenchRow, row, type Suite } from '../harness.js';
import { Progress } from '../progress.js';
import { BenchWorld, type Chain, gatewayChain, relayChain } from '../scenarios/chains.js';
import { type ResourceFigures, ResourceSampler } from '../scenarios/resources.js';
import { benchTempDir } from '../scenarios/temp.js';
import { chainLabel } from './scenarios.js';

const MiB = 1024 * 1024;
const PEERS = ['ganesha.nfsd', 'rpcbind', 'nfs-cp', 'timeout'];

/** The interop session needs only a title, teardown registration and a pass flag from ava's context. */
function benchSession(): { session: InteropSession; close: () => Promise<void> } {
  const teardowns: (() => unknown)[] = [];
  const t = { title: 'bench-nfs', passed: true, teardown: (fn: () => unknown) => teardowns.push(fn) };
  const session = InteropSession.open(t as unknown as ExecutionContext);
  return {
    session,
    close: async () => {
      for (const fn of teardowns.reverse()) await fn();
    },
  };
}

async function writeTestFile(path: string, bytes: number): Promise<void> {
  const block = Buffer.alloc(MiB);
  const out = createWriteStream(path);
  for (let i = 0; i < bytes / MiB; i++) {
    // Distinct content per MiB, so that a misplaced block would change the file.
    for (let k = 0; k < MiB; k += 4) block.writeUInt32BE((i * 0x9e3779b9 + k) >>> 0, k);
    if (!out.write(block)) await new Promise<void>((r) => out.once('drain', () => r()));
  }
  await new Promise<void>((resolve, reject) =>
    out.end((err?: Error | null) => (err ? reject(err) : resolve())),
  );
}

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function which(cmd: string): boolean {
  return (process.env.PATH ?? '').split(':').some((d) => {
    try {
      return statSync(`${d}/${cmd}`).isFile();
    } catch {
      return false;
    }
  });
}

interface Timed {
  /** The median of the repetitions (see the module comment for why not the best). */
  seconds?: number;
  times?: number[];
  resources?: Record<string, ResourceFigures>;
  error?: string;
}

export const nfsSuite: Suite = {
  name: 'nfs',
  async run(ctx: BenchContext): Promise<BenchRow[]> {
    const missing = PEERS.filter((p) => !which(p));
    if (missing.length > 0) {
      ctx.log(`[nfs] skipped: ${missing.join(', ')} not installed (see scripts/install-system-deps.sh)`);
      return [];
    }
    const size = (ctx.quick ? 16 : 256) * MiB;
    const sizeText = `${size / MiB}MiB`;
    const reps = ctx.quick ? 1 : 5;
    const { session, close } = benchSession();
    const world = new BenchWorld(benchTempDir('nfs'));
    const results = new Map<string, Timed>();
    const chainIds = ['direct', 'socat', 'gw-v2-p4'];
    const progress = new Progress('nfs', [
      5,
      ...chainIds.flatMap(() => [2, (reps * size) / (20 * MiB), (reps * size) / (20 * MiB)]),
    ]);
    try {
      progress.step('rpcbind and ganesha (FSAL VFS, NFSv3)');
      await useRpcbind(session);
      const ganesha = await startGanesha(session, { protocols: [3], name: 'ganesha-bench' });
      const upstream = { host: '127.0.0.1', port: ganesha.endpoint.nfsPort };
      const probe = { program: RpcProgram.NFS, version: 3 };
      const source = session.path('source.bin');
      await writeTestFile(source, size);
      progress.advance();
      for (const id of chainIds) {
        progress.step(`start ${id}`);
        let chain: Chain | undefined;
        try {
          chain =
            id === 'direct'
              ? {
                  id,
                  label: 'direct',
                  kind: 'direct',
                  endpoint: upstream,
                  watched: [{ role: 'server', pid: ganesha.process.pid, group: false }],
                  stop: async () => {},
                }
              : id === 'socat'
                ? await relayChain('socat', world, upstream, probe)
                : await gatewayChain(world, upstream, probe, {
                    protocolVersion: 2,
                    poolSize: 4,
                    profileDir: ctx.profileDir,
                    rdma: ctx.rdma,
                  });
        } catch (err) {
          ctx.log(`\n[nfs] ${id} did not start: ${err instanceof Error ? err.message : err}`);
        }
        progress.advance();
        const endpoint = { ...ganesha.endpoint, nfsPort: chain?.endpoint.port ?? 0 };
        const names: string[] = [];
        for (const dir of ['put', 'get'] as const) {
          progress.step(`${dir} ${sizeText} ×${reps} via ${id}`);
          if (!chain || (dir === 'get' && results.get(`${id}/put`)?.error)) {
            results.set(`${id}/${dir}`, { error: 'not run (the chain or the put failed)' });
            progress.advance();
            continue;
          }
          const sampler = new ResourceSampler(chain.watched);
          const times: number[] = [];
          try {
            for (let rep = 0; rep < reps; rep++) {
              const name = dir === 'put' ? session.freshName(`bench-${id}`) : names[rep];
              const t0 = process.hrtime.bigint();
              if (dir === 'put') {
                await nfsCopyIn(source, endpoint, name, 3, 300);
                names.push(name);
              } else {
                const local = session.path(`${name}.back`);
                await nfsCopyOut(endpoint, name, local, 3, 300);
                const got = statSync(local).size;
                if (got !== size) throw new Error(`read back ${got} bytes, ${size} written`);
                rmSync(local);
              }
              times.push(Number(process.hrtime.bigint() - t0) / 1e9);
            }
            results.set(`${id}/${dir}`, { seconds: median(times), times, resources: sampler.stop() });
          } catch (err) {
            sampler.stop();
            const error = err instanceof Error ? err.message : String(err);
            ctx.log(`\n[nfs] ${dir} via ${id} failed: ${error}`);
            results.set(`${id}/${dir}`, { error });
          }
          progress.advance();
        }
        await chain?.stop();
      }
      progress.finish();
    } finally {
      await world.close();
      await close();
    }
    const rows: BenchRow[] = [];
    for (const dir of ['put', 'get'] as const) {
      for (const id of chainIds) {
        const r = results.get(`${id}/${dir}`);
        if (!r) continue;
        const base =
          id === 'direct' ? undefined : results.get(`${id === 'socat' ? 'direct' : 'socat'}/${dir}`);
        const built = row({
          suite: 'nfs',
          name: `libnfs ${dir} ${sizeText} ${id}`,
          value: r.seconds ?? Number.NaN,
          unit: 's',
          baseline:
            base?.seconds !== undefined
              ? { name: id === 'socat' ? 'direct' : 'socat', value: base.seconds }
              : undefined,
          // "No slower than socat ×2": wall time at most the socat chain's.
          target: id.startsWith('gw-') ? { of: 'ratio', op: '<=', value: 1.0 } : undefined,
          extra: {
            scenario: id,
            chain: chainLabel(id),
            workload: `nfs-${dir}`,
            bytes: size,
            bytesPerSec: r.seconds ? size / r.seconds : undefined,
            times: r.times,
            resources: r.resources,
            error: r.error,
          },
        });
        // A failed measurement (this chain's or its baseline's) is no figure: the target is not met, and
        // the row says why (never a blank `met`).
        const broken =
          r.seconds === undefined
            ? (r.error ?? 'not measured')
            : id !== 'direct' && base?.seconds === undefined
              ? `baseline: ${base?.error ?? 'not measured'}`
              : undefined;
        if (broken !== undefined) {
          built.extra = { ...built.extra, invalid: broken };
          if (built.target) built.met = false;
        }
        rows.push(built);
      }
    }
    return rows;
  },
};
