/**
 * V8 sampling heap profiles (the `.heapprofile` JSON DevTools reads) as the benchmark tools see them:
 * bytes allocated per function and per file. `allocation-sampler` writes them with the objects already
 * collected included, so a node's `selfSize` is V8's estimate of everything allocated there over the run.
 */
import { type CallFrame, FrameTotals, type Ranked, readProfileJson } from './cpuprofile.js';

export interface HeapProfileNode {
  callFrame: CallFrame;
  /** Estimated bytes allocated by this frame itself (not its callees). */
  selfSize: number;
  children: HeapProfileNode[];
}

export interface HeapProfile {
  head: HeapProfileNode;
}

export interface Allocated {
  name: string;
  bytes: number;
  share: number;
}

/** The deepest call tree a profile may have: V8 records at most 128 frames per sample by default. */
const MAX_DEPTH = 1024;

/** Reads and checks a `.heapprofile`: a clear error naming the file when it is not one. */
export function readHeapProfile(path: string): HeapProfile {
  const head = (readProfileJson(path, 'heap profile') as Partial<HeapProfile> | null)?.head;
  if (!isNode(head)) throw new Error(`${path}: not a V8 sampling heap profile (needs a head node)`);
  return { head };
}

function isNode(n: unknown): n is HeapProfileNode {
  const x = n as Partial<HeapProfileNode> | null;
  return (
    typeof x === 'object' &&
    x !== null &&
    typeof x.selfSize === 'number' &&
    Array.isArray(x.children) &&
    typeof x.callFrame?.functionName === 'string'
  );
}

/** Bytes allocated per function and per file, largest first. */
export function summariseAllocations(profile: HeapProfile): {
  total: number;
  functions: Allocated[];
  files: Allocated[];
} {
  const totals = new FrameTotals();
  // Iterative walk: a hostile or broken file cannot overflow the stack.
  const stack: Array<[HeapProfileNode, number]> = [[profile.head, 0]];
  while (stack.length > 0) {
    const [n, depth] = stack.pop() as [HeapProfileNode, number];
    if (depth > MAX_DEPTH) throw new Error(`heap profile deeper than ${MAX_DEPTH} frames`);
    if (n.selfSize > 0) totals.add(n.callFrame, n.selfSize);
    for (const c of n.children) {
      if (!isNode(c)) throw new Error('heap profile node without callFrame, selfSize or children');
      stack.push([c, depth + 1]);
    }
  }
  const asBytes = (r: Ranked): Allocated => ({ name: r.name, bytes: r.amount, share: r.share });
  return {
    total: totals.total,
    functions: totals.functions().map(asBytes),
    files: totals.files().map(asBytes),
  };
}
