#!/usr/bin/env node
/**
 * The `rpcrdma-gateway` command.
 *
 * Subcommands live in `COMMANDS`; each is a function of `CommandContext` (in `commands/`) resolving with
 * the exit code.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GatewayError } from '../common/errors.js';
import { type ParsedArgs, parseArgs, takeFlag } from './cli-args.js';
import type { Command, CommandContext } from './commands/context.js';
import { ping } from './commands/ping.js';
import { responder } from './commands/responder.js';
import { DEFAULT_TEST_PROGRAM_LISTEN, serveTestProgramCommand } from './commands/serve-test-program.js';
import { demo, start } from './commands/start.js';
import { status } from './commands/status.js';
import {
  CONFIG_SCHEMA,
  defaultText,
  ENV_CONFIG_FILE,
  envName,
  flagName,
  loadConfig,
  printableConfig,
} from './config.js';

const here = dirname(fileURLToPath(import.meta.url));
const pkg = JSON.parse(readFileSync(join(here, '..', '..', 'package.json'), 'utf8')) as { version: string };

interface CommandEntry {
  summary: string;
  run: Command;
}

const COMMANDS: Record<string, CommandEntry> = {
  start: {
    summary: 'run the gateway (TCP frontend -> RDMA pool); with no configuration, the embedded chain',
    run: start,
  },
  responder: {
    summary: 'accept RPC-over-RDMA connections and forward them to a TCP RPC server (--upstream)',
    run: responder,
  },
  demo: {
    summary: 'the embedded chain in front of a local NFS server (--upstream 127.0.0.1:2050)',
    run: demo,
  },
  status: {
    summary:
      "a running gateway's or responder's state from its admin API [--url http://HOST:PORT] [--role gateway|responder] [--format json]",
    run: status,
  },
  'serve-test-program': {
    summary: `serve the built-in load-test RPC program over TCP [--listen HOST:PORT] (default ${DEFAULT_TEST_PROGRAM_LISTEN})`,
    run: serveTestProgramCommand,
  },
  ping: {
    summary:
      'call the test program and print round-trip times [--target HOST:PORT] [--count N] [--size BYTES] [--interval MS] [--timeout MS]',
    run: ping,
  },
  version: {
    summary: 'print the version',
    run: async (ctx) => {
      ctx.stdout.write(`${pkg.version}\n`);
      return 0;
    },
  },
  help: { summary: 'this text; `help config` lists every configuration key', run: async (ctx) => help(ctx) },
};

function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length)) + 2;
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}${c.summary}`);
  return `rpcrdma-gateway ${pkg.version}

usage: rpcrdma-gateway <command> [flags]

commands:
${lines.join('\n')}

flags for every command:
  --config FILE       configuration file, YAML or JSON (or ${ENV_CONFIG_FILE})
  --print-config      print the effective configuration (defaults < file < environment < flags) and exit
  --<key> VALUE       any configuration key, e.g. --frontend-max-calls-in-flight 64, --log-level debug

Configuration: docs/configuration.md, or 'rpcrdma-gateway help config'. Test program: docs/test-program.md.
`;
}

function configHelp(): string {
  const rows = CONFIG_SCHEMA.map(
    (d) =>
      `  ${d.key}\n      --${flagName(d.key)}, ${envName(d.key)} (default: ${defaultText(d)})\n      ${d.doc}`,
  );
  return `configuration keys (file key, flag, environment variable):\n${rows.join('\n')}\n`;
}

async function help(ctx: CommandContext): Promise<number> {
  ctx.stdout.write(ctx.args.positionals[0] === 'config' ? configHelp() : usage());
  return 0;
}

function printConfig(ctx: CommandContext, args: ParsedArgs): number {
  const file = takeFlag(args, 'config');
  const role = args.command === 'responder' ? 'responder' : 'gateway';
  ctx.stdout.write(printableConfig(loadConfig({ file, env: ctx.env, flags: args.flags, role })));
  return 0;
}

export async function main(argv: readonly string[], ctx: Omit<CommandContext, 'args'>): Promise<number> {
  let args: ParsedArgs;
  try {
    args = parseArgs(argv);
  } catch (err) {
    return fail(ctx, err);
  }
  const full: CommandContext = { ...ctx, args };
  try {
    if (args.switches.has('version') && args.command === undefined) return await COMMANDS.version.run(full);
    if (args.switches.has('print-config')) return printConfig(full, args);
    if (args.switches.has('help') || args.command === undefined) return await help(full);
    const entry = Object.hasOwn(COMMANDS, args.command) ? COMMANDS[args.command] : undefined;
    if (!entry) {
      ctx.stderr.write(`rpcrdma-gateway: unknown command '${args.command}'\n\n${usage()}`);
      return 2;
    }
    // `--config FILE` reaches every command through the environment variable the loader reads.
    const file = takeFlag(args, 'config');
    if (file) full.env = { ...full.env, [ENV_CONFIG_FILE]: file };
    return await entry.run(full);
  } catch (err) {
    return fail(ctx, err);
  }
}

function fail(ctx: Omit<CommandContext, 'args'>, err: unknown): number {
  if (err instanceof GatewayError) {
    ctx.stderr.write(`rpcrdma-gateway: ${err.message}\n`);
    // A configuration or usage problem is the caller's (2); anything else failed at run time (1).
    return err.code.startsWith('ERR_CONFIG') || err.code === 'ERR_ADDRESS' ? 2 : 1;
  }
  ctx.stderr.write(`rpcrdma-gateway: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  return 1;
}

/** How long the process may stay alive after its command ended before it exits anyway (see below). */
const EXIT_GRACE_MS = 3000;

const invokedDirectly =
  process.argv[1] !== undefined && fileURLToPath(import.meta.url) === (await realpath(process.argv[1]));

async function realpath(p: string): Promise<string> {
  const { realpathSync } = await import('node:fs');
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
}

/** Resolves once what was written to `stream` before has been handed to the system. */
function flushed(stream: NodeJS.WritableStream): Promise<void> {
  return new Promise((resolve) => stream.write('', () => resolve()));
}

if (invokedDirectly) {
  const code = await main(process.argv.slice(2), {
    env: process.env,
    stdout: process.stdout,
    stderr: process.stderr,
  });
  process.exitCode = code;
  // The command is over and everything it started should be closed, so the process ends by itself. If
  // something was not (a socket or a timer of a component a failed start could not undo), the process
  // must not stay alive with nobody left to stop it: after a grace period it exits anyway and says what
  // was still open, which the tests assert never happens. The timer is unref'd: it never holds the
  // process up itself.
  await Promise.all([flushed(process.stdout), flushed(process.stderr)]);
  setTimeout(() => {
    // (Not the timer itself, nor stdio's pipes or terminal, which every process has.)
    const open = process
      .getActiveResourcesInfo()
      .filter((r) => r !== 'Timeout' && r !== 'PipeWrap' && r !== 'TTYWrap');
    process.stderr.write(
      `rpcrdma-gateway: still open ${EXIT_GRACE_MS} ms after the command ended (${open.join(', ') || 'nothing named'}): exiting\n`,
      () => process.exit(code),
    );
  }, EXIT_GRACE_MS).unref();
}
