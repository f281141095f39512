#!/usr/bin/env node
/**
 * The `rpcrdma-gateway` command. Subcommands are added as the layers they run land (see README).
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const pkg = JSON.parse(readFileSync(join(here, '..', '..', 'package.json'), 'utf8')) as { version: string };

const usage = `rpcrdma-gateway ${pkg.version}

usage: rpcrdma-gateway <command>

commands:
  version     print the version
  help        this text
`;

function main(argv: string[]): number {
  const [command = 'help'] = argv;
  switch (command) {
    case 'version':
    case '--version':
      process.stdout.write(`${pkg.version}\n`);
      return 0;
    case 'help':
    case '--help':
      process.stdout.write(usage);
      return 0;
    default:
      process.stderr.write(`rpcrdma-gateway: unknown command '${command}'\n\n${usage}`);
      return 2;
  }
}

process.exitCode = main(process.argv.slice(2));
