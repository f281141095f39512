import type { ParsedArgs } from '../cli-args.js';

/** What a subcommand gets; it resolves with the process exit code. */
export interface CommandContext {
  args: ParsedArgs;
  env: Readonly<Record<string, string | undefined>>;
  stdout: NodeJS.WritableStream & { isTTY?: boolean };
  stderr: NodeJS.WritableStream;
}

export type Command = (ctx: CommandContext) => Promise<number>;
