/**
 * Instructions per call by function, from two callgrind counts of a closed-loop instrument
 * (`transport-loop`, `chain-loop`; docs/performance.md, "Counting instructions per call").
 *
 * callgrind names the C++ functions and V8's built-ins it counts, but leaves V8's generated code as bare
 * addresses. Run with `node --perf-basic-prof`, the process also writes `/tmp/perf-<pid>.map`, one line per
 * compiled function (`start size name`, hexadecimal), which names those addresses. Each count's
 * exclusive ("self") cost is summed per name; the difference of two counts over the difference of their
 * calls cancels start-up, warm-up and teardown, so what is left is what one call costs, function by
 * function: a profile that does not move with the VM the way sampled CPU time does.
 *
 * This module parses and combines; `callgrind-profile-cli.ts` runs valgrind.
 */

/** Exclusive instruction counts (Ir) by function name, as callgrind wrote them (addresses unresolved). */
export type SelfCosts = Map<string, number>;

/**
 * Reads a callgrind output file (format of callgrind 3.x, events `Ir` first) and sums each function's
 * exclusive cost: the cost lines under `fn=`, not the inclusive cost lines that follow a `calls=` line.
 * Name compression (`(12) name` then `(12)`) is resolved.
 */
export function parseCallgrindSelf(text: string): SelfCosts {
  const names = new Map<string, string>();
  const name = (spec: string): string => {
    const m = /^\((\d+)\)(?:\s+(.*))?$/.exec(spec.trim());
    if (m === null) return spec.trim();
    if (m[2] !== undefined) names.set(m[1], m[2]);
    return names.get(m[1]) ?? m[1];
  };
  const self: SelfCosts = new Map();
  let fn = '';
  let afterCalls = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('fn=')) {
      fn = name(line.slice(3));
      afterCalls = false;
    } else if (line.startsWith('cfn=')) {
      name(line.slice(4)); // defines the compressed name, if it is the first use
    } else if (line.startsWith('calls=')) {
      afterCalls = true; // the next cost line is the call's inclusive cost, not this function's own
    } else if (/^[0-9+\-*]/.test(line)) {
      const ir = Number(line.split(/\s+/)[1] ?? 'NaN');
      if (afterCalls) afterCalls = false;
      else if (Number.isFinite(ir)) self.set(fn, (self.get(fn) ?? 0) + ir);
    }
  }
  return self;
}

/** A perf map's entries, sorted by start address. */
export interface PerfMap {
  starts: number[];
  ends: number[];
  names: string[];
}

/** Parses `/tmp/perf-<pid>.map` (`start size name` per line, start and size in hexadecimal). */
export function parsePerfMap(text: string): PerfMap {
  const entries: [number, number, string][] = [];
  for (const line of text.split('\n')) {
    const m = /^([0-9a-fA-F]+) ([0-9a-fA-F]+) (.+)$/.exec(line);
    if (m) entries.push([Number.parseInt(m[1], 16), Number.parseInt(m[2], 16), m[3]]);
  }
  entries.sort((a, b) => a[0] - b[0]);
  return {
    starts: entries.map((e) => e[0]),
    ends: entries.map((e) => e[0] + e[1]),
    names: entries.map((e) => e[2]),
  };
}

/**
 * The function an unresolved callgrind name (`0x…`) lies in, by the perf map; other names as they are.
 * V8's tier marks (`JS:*` optimized, `^` baseline, `~` interpreted, `+` Maglev) are dropped, and
 * `file://…/dist/` shortened, so that one function's tiers add up under one name.
 */
export function resolveName(fn: string, map: PerfMap): string {
  const m = /^0x([0-9a-fA-F]+)/.exec(fn);
  let name = fn;
  if (m) {
    const address = Number.parseInt(m[1], 16);
    let lo = 0;
    let hi = map.starts.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (map.starts[mid] <= address) {
        found = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    if (found >= 0 && address < map.ends[found]) name = map.names[found];
  }
  return name
    .replace(/^JS:[*^~+]?/, '')
    .replace(/'\d+$/, '')
    .replace(/file:\/\/\S*?\/dist\//, '');
}

/** Self costs by resolved name. */
export function resolveAll(self: SelfCosts, map: PerfMap): Map<string, number> {
  const out = new Map<string, number>();
  for (const [fn, ir] of self) {
    const name = resolveName(fn, map);
    out.set(name, (out.get(name) ?? 0) + ir);
  }
  return out;
}

export interface PerCall {
  name: string;
  /** Instructions per call (may be negative for noise in a small entry). */
  perCall: number;
}

/**
 * (larger − smaller) ÷ `calls` per name, largest first, and the total: what one call costs in each
 * function once everything the two runs share has cancelled out.
 */
export function perCallDifference(
  smaller: Map<string, number>,
  larger: Map<string, number>,
  calls: number,
): { total: number; rows: PerCall[] } {
  const names = new Set([...smaller.keys(), ...larger.keys()]);
  const rows: PerCall[] = [];
  let total = 0;
  for (const name of names) {
    const perCall = ((larger.get(name) ?? 0) - (smaller.get(name) ?? 0)) / calls;
    total += perCall;
    rows.push({ name, perCall });
  }
  rows.sort((a, b) => b.perCall - a.perCall);
  return { total, rows };
}
