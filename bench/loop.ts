/**
 * The command line and the two modes shared by the closed-loop instruments (`transport-loop`,
 * `chain-loop`; docs/performance.md, "Counting instructions per call"): a loop keeps a fixed number of
 * calls outstanding in this process, and either
 * - runs rounds of `--seconds` and prints calls/s and this process's CPU time per call for each, or
 * - with `--calls N`, runs exactly N calls after a 300 ms warm-up and says only that on stderr, for an
 *   instruction count by callgrind (the difference of two counts over the difference of their calls).
 */
import { performance } from 'node:perf_hooks';
import { type ParseArgsConfig, parseArgs } from 'node:util';

/**
 * Runs the instrument's calls until `more(done, outstanding)`, asked after each completed call, says stop
 * (then no call is started); resolves with the calls completed once none is outstanding.
 */
export type ClosedLoop = (more: (done: number, outstanding: number) => boolean) => Promise<number>;

type Options = NonNullable<ParseArgsConfig['options']>;

export class LoopCommand<O extends Options> {
  readonly values: { [K in keyof O]: O[K]['type'] extends 'boolean' ? boolean : string };

  /** Parses `argv` with the shared options (`--seconds`, `--rounds`, `--calls`) beside `options`. */
  constructor(
    readonly name: string,
    options: O,
    argv: string[] = process.argv.slice(2),
  ) {
    try {
      this.values = parseArgs({
        args: argv,
        options: {
          ...options,
          seconds: { type: 'string', default: '1' },
          rounds: { type: 'string', default: '5' },
          calls: { type: 'string' },
        },
      }).values as never;
    } catch (e) {
      this.refuse((e as Error).message);
    }
  }

  /** Exits with status 2 and the reason on stderr: a bad argument is never run with a guess. */
  refuse(reason: string): never {
    process.stderr.write(`${this.name}: ${reason}\n`);
    process.exit(2);
  }

  /** The option `name` as a whole number, at least 1 (or 0 with `zeroOk`). */
  whole(name: string, zeroOk = false): number {
    const text = (this.values as Record<string, string>)[name];
    const n = Number(text);
    if (!Number.isInteger(n) || n < (zeroOk ? 0 : 1))
      this.refuse(`--${name} wants a whole number${zeroOk ? '' : ' above 0'}, not ${text}`);
    return n;
  }

  /** Checks the shared options before anything is started, so that a bad one costs no set-up. */
  checkShared(): void {
    const v = this.values as Record<string, string | undefined>;
    if (v.calls !== undefined) this.whole('calls');
    else {
      if (!(Number(v.seconds) > 0)) this.refuse(`--seconds wants a time above 0, not ${v.seconds}`);
      this.whole('rounds');
    }
  }

  /** Warms `loop` up, then runs the mode the options chose. */
  async run(loop: ClosedLoop): Promise<void> {
    const v = this.values as Record<string, string | undefined>;
    await loop(forMs(300));
    if (v.calls !== undefined) {
      const n = this.whole('calls');
      const done = await loop((d, outstanding) => d + outstanding < n);
      process.stderr.write(`${this.name}: ${done} calls\n`);
      return;
    }
    const seconds = Number(v.seconds);
    for (let round = this.whole('rounds'); round > 0; round--) {
      const start = performance.now();
      const cpu = process.cpuUsage();
      const done = await loop(forMs(seconds * 1000));
      const used = process.cpuUsage(cpu);
      const wall = (performance.now() - start) / 1000;
      process.stdout.write(
        `${(done / wall / 1000).toFixed(1)}k calls/s  ${((used.user + used.system) / done).toFixed(2)} µs CPU per call ` +
          `(system ${(used.system / done).toFixed(2)})\n`,
      );
    }
  }
}

function forMs(ms: number): () => boolean {
  const end = performance.now() + ms;
  return () => performance.now() < end;
}
