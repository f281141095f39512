/**
 * Command-line parsing for `rpcrdma-gateway`: `<command> [--flag value | --flag=value | --switch]...`.
 * Every flag but the known switches takes a value; flags may repeat (values are kept in order). Commands
 * take their own flags out of the result and hand the rest to the configuration loader, which rejects
 * any flag it does not know, naming it.
 */
import { ConfigError } from '../common/errors.js';

/** Flags that take no value. */
export const SWITCHES: ReadonlySet<string> = new Set(['help', 'version', 'print-config']);

export interface ParsedArgs {
  command: string | undefined;
  positionals: string[];
  flags: Map<string, string[]>;
  switches: Set<string>;
}

export function parseArgs(argv: readonly string[]): ParsedArgs {
  const out: ParsedArgs = { command: undefined, positionals: [], flags: new Map(), switches: new Set() };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '-h') {
      out.switches.add('help');
      continue;
    }
    if (!arg.startsWith('--') || arg === '--') {
      if (out.command === undefined) out.command = arg;
      else out.positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const name = eq < 0 ? arg.slice(2) : arg.slice(2, eq);
    if (SWITCHES.has(name)) {
      if (eq >= 0) throw new ConfigError('ERR_CONFIG_FLAG', `flag --${name} takes no value`, { flag: name });
      out.switches.add(name);
      continue;
    }
    let value: string;
    if (eq >= 0) {
      value = arg.slice(eq + 1);
    } else {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith('--')) {
        throw new ConfigError('ERR_CONFIG_FLAG', `flag --${name} needs a value`, { flag: name });
      }
      value = next;
      i++;
    }
    const list = out.flags.get(name);
    if (list) list.push(value);
    else out.flags.set(name, [value]);
  }
  return out;
}

/** Removes flag `name` from `args` and returns its last value (or undefined). */
export function takeFlag(args: ParsedArgs, name: string): string | undefined {
  const values = takeFlagAll(args, name);
  return values.length > 0 ? values[values.length - 1] : undefined;
}

/** Removes flag `name` from `args` and returns all its values. */
export function takeFlagAll(args: ParsedArgs, name: string): string[] {
  const values = args.flags.get(name) ?? [];
  args.flags.delete(name);
  return values;
}

/** A non-negative integer flag value, or a ConfigError naming the flag. */
export function integerFlag(
  name: string,
  value: string | undefined,
  fallback: number,
  min = 0,
  max = 0x7fff_ffff,
): number {
  if (value === undefined) return fallback;
  const n = /^\d+$/.test(value.trim()) ? Number(value) : Number.NaN;
  if (!Number.isInteger(n) || n < min || n > max) {
    throw new ConfigError(
      'ERR_CONFIG_FLAG',
      `--${name}: expected an integer in ${min}..${max}, got '${value}'`,
      {
        flag: name,
        value,
      },
    );
  }
  return n;
}
