/**
 * What every fuzz campaign of test/reliability shares: a seeded PRNG (a failing run is replayed by setting
 * FUZZ_SEED), the case budget (a CI base multiplied by FUZZ_CASES for soak runs), a byte-level mutator
 * biased towards the values that break decoders (lengths of 0, 2^31, 2^32-1, off-by-one), the seed
 * corpus from real captures, a process-level guard against unhandled rejections and uncaught exceptions,
 * and a heap measurement after a forced GC.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { ExecutionContext } from 'ava';
import { testSeed } from '../helpers/seed.js';

/** mulberry32: small, fast, good enough to drive mutations reproducibly. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 0x1_0000_0000;
  };
}

/** The campaign's seed (see test/helpers/seed.ts): FUZZ_SEED replays a failure. */
export function campaignSeed(t: ExecutionContext): number {
  return testSeed(t, 'FUZZ_SEED');
}

/** `base` cases, times FUZZ_CASES (a positive number, default 1) for longer runs. */
export function caseCount(base: number): number {
  const m = Number(process.env.FUZZ_CASES ?? '1');
  return Math.max(1, Math.round(base * (Number.isFinite(m) && m > 0 ? m : 1)));
}

export class Rand {
  constructor(readonly next: () => number) {}
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)];
  }
  bytes(n: number): Buffer {
    const b = Buffer.allocUnsafe(n);
    for (let i = 0; i < n; i++) b[i] = this.int(256);
    return b;
  }
}

/** 32-bit values that find length and bounds bugs. */
export const INTERESTING_U32 = [
  0, 1, 2, 3, 4, 7, 8, 0xff, 0x100, 0xfff, 0x1000, 0xffff, 0x10000, 0x7fff_ffff, 0x8000_0000, 0x8000_0001,
  0xffff_fffc, 0xffff_ffff,
] as const;

/**
 * One mutation of `input` (never modified): a few of byte flips, interesting words at word offsets,
 * truncation, random extension, a repeated slice, or a word set to "the remaining length ± k" (what a
 * lying length field looks like).
 */
export function mutate(r: Rand, input: Buffer): Buffer {
  let b = Buffer.from(input);
  const rounds = 1 + r.int(4);
  for (let k = 0; k < rounds; k++) {
    switch (r.int(7)) {
      case 0: {
        if (b.length === 0) break;
        const i = r.int(b.length);
        b[i] ^= 1 << r.int(8);
        break;
      }
      case 1: {
        if (b.length < 4) break;
        const at = r.int(b.length >>> 2) * 4;
        b.writeUInt32BE(r.pick(INTERESTING_U32), at);
        break;
      }
      case 2:
        b = b.subarray(0, r.int(b.length + 1));
        break;
      case 3:
        b = Buffer.concat([b, r.bytes(r.int(64))]);
        break;
      case 4: {
        if (b.length === 0) break;
        const from = r.int(b.length);
        const to = Math.min(b.length, from + 1 + r.int(64));
        const at = r.int(b.length + 1);
        b = Buffer.concat([b.subarray(0, at), b.subarray(from, to), b.subarray(at)]);
        break;
      }
      case 5: {
        if (b.length < 4) break;
        const at = r.int(b.length >>> 2) * 4;
        const left = b.length - at - 4;
        b.writeUInt32BE((left + r.int(9) - 4) >>> 0, at);
        break;
      }
      default: {
        if (b.length === 0) break;
        const i = r.int(b.length);
        b[i] = r.int(256);
      }
    }
  }
  return b;
}

const nfsDir = fileURLToPath(new URL('../../../test/fixtures/nfs/', import.meta.url));
const rpcDir = fileURLToPath(new URL('../../../test/fixtures/rpc/', import.meta.url));

/**
 * RPC call messages (no record mark) from the real captures: NFSv3, NFSv4.x (test/fixtures/nfs) and an
 * rpcinfo NULL ping (test/fixtures/rpc).
 */
export function seedCalls(): Buffer[] {
  const out: Buffer[] = [];
  for (const name of ['nfs3', 'nfs4']) {
    for (const line of readFileSync(`${nfsDir}${name}.messages.txt`, 'utf8').trim().split('\n')) {
      const buf = Buffer.from(line.split(' ')[3], 'hex');
      if (buf.length >= 8 && buf.readUInt32BE(4) === 0) out.push(buf);
    }
  }
  for (const name of ['rpcinfo-null-call', 'nfs3-read-call']) {
    const framed = Buffer.from(readFileSync(`${rpcDir}${name}.hex`, 'utf8').replace(/\s+/g, ''), 'hex');
    out.push(framed.subarray(4)); // one single-fragment record: drop its mark
  }
  return out;
}

export interface ProcessGuard {
  /** Unhandled rejections and uncaught exceptions seen since `guardProcess()`. */
  readonly problems: string[];
  /** Removes the listeners and fails the test if anything was seen. */
  check(): void;
}

/**
 * Records every unhandled rejection and uncaught exception of this worker while the campaign runs (ava
 * would report them too, but only after the fact and without failing this particular test).
 */
export function guardProcess(t: ExecutionContext): ProcessGuard {
  const problems: string[] = [];
  const onRejection = (reason: unknown) => problems.push(`unhandled rejection: ${describeError(reason)}`);
  const onException = (err: unknown) => problems.push(`uncaught exception: ${describeError(err)}`);
  process.on('unhandledRejection', onRejection);
  process.on('uncaughtException', onException);
  let done = false;
  const stop = () => {
    if (done) return;
    done = true;
    process.off('unhandledRejection', onRejection);
    process.off('uncaughtException', onException);
  };
  t.teardown(stop);
  return {
    problems,
    check() {
      stop();
      t.deepEqual(problems, [], 'no unhandled rejection or uncaught exception');
    },
  };
}

function describeError(e: unknown): string {
  if (e instanceof Error) return `${e.name}: ${e.message}\n${e.stack ?? ''}`;
  return String(e);
}

let gcFn: (() => void) | undefined;

/** Heap used after a full GC (the flag is set at run time: ava's workers do not pass --expose-gc). */
export function heapAfterGc(): number {
  if (!gcFn) {
    setFlagsFromString('--expose-gc');
    gcFn = runInNewContext('gc') as () => void;
  }
  gcFn();
  gcFn();
  return process.memoryUsage().heapUsed;
}

/** Resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
