#!/usr/bin/env node
// One request to the gateway's admin API, for places that have Node but no curl: the image's HEALTHCHECK
// (`GET /livez`) and manual calls in a container (`POST /v1/drain`). Dependency-free on purpose — it runs
// in the runtime image, which carries production dependencies only.
//
//   admin-call.mjs METHOD PATH [--admin HOST:PORT] [--timeout-ms N] [--sleep-after-ms N]
//
// The address is --admin, else RPCRDMA_GATEWAY_ADMIN_LISTEN, else the default 127.0.0.1:9249; a wildcard
// listen address (0.0.0.0, ::) is reached through loopback. A request other than GET/HEAD carries
// `Authorization: Bearer $RPCRDMA_GATEWAY_ADMIN_TOKEN`, trimmed, when that variable is set.
// --sleep-after-ms waits after a successful request.
// Exit status: 0 on a 2xx answer, 1 on any other answer or a network error, 2 on a usage error.
import { request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';

const DEFAULT_ADMIN = '127.0.0.1:9249';

function usage(message) {
  process.stderr.write(
    `admin-call: ${message}\nusage: admin-call.mjs METHOD PATH [--admin HOST:PORT] [--timeout-ms N] [--sleep-after-ms N]\n`,
  );
  process.exit(2);
}

function parseArgs(argv) {
  const positionals = [];
  const options = { admin: undefined, timeoutMs: 3000, sleepAfterMs: 0 };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) {
      positionals.push(arg);
      continue;
    }
    const value = argv[++i];
    if (value === undefined) usage(`${arg} needs a value`);
    if (arg === '--admin') options.admin = value;
    else if (arg === '--timeout-ms' || arg === '--sleep-after-ms') {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 0) usage(`${arg} expects a non-negative integer, got ${value}`);
      options[arg === '--timeout-ms' ? 'timeoutMs' : 'sleepAfterMs'] = n;
    } else usage(`unknown option ${arg}`);
  }
  if (positionals.length !== 2) usage('expected METHOD and PATH');
  const [method, path] = positionals;
  if (!/^[A-Z]+$/.test(method)) usage(`METHOD must be an upper-case HTTP method, got ${method}`);
  if (!path.startsWith('/')) usage(`PATH must start with /, got ${path}`);
  return { method, path, ...options };
}

/** `HOST:PORT` or `[IPV6]:PORT` → where to connect; wildcard hosts become loopback. */
function connectTarget(listen) {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d{1,5})$/.exec(listen.trim());
  if (!m) return undefined;
  const port = Number(m[3]);
  if (port < 1 || port > 65535) return undefined;
  let host = m[1] ?? m[2];
  if (host === '0.0.0.0') host = '127.0.0.1';
  else if (host === '::') host = '::1';
  return { host, port };
}

function call({ method, path, target, timeoutMs }) {
  const headers = {};
  // Trimmed as the gateway trims it (admin-api/access-rules.ts): a Kubernetes Secret made from a file ends
  // with a newline, which Node refuses in a header (ERR_INVALID_CHAR), so the call never happened.
  const token = process.env.RPCRDMA_GATEWAY_ADMIN_TOKEN?.trim();
  if (token && method !== 'GET' && method !== 'HEAD') headers.authorization = `Bearer ${token}`;
  return new Promise((resolve) => {
    const req = request({ host: target.host, port: target.port, method, path, headers, timeout: timeoutMs });
    req.on('response', (res) => {
      const chunks = [];
      let size = 0;
      res.on('data', (c) => {
        // Keep at most 4 KiB of the body for the message: it is only shown, never parsed.
        if (size < 4096) chunks.push(c);
        size += c.length;
      });
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
      );
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (err) => resolve({ status: 0, body: err.message }));
    req.end();
  });
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const listen = args.admin ?? process.env.RPCRDMA_GATEWAY_ADMIN_LISTEN ?? DEFAULT_ADMIN;
  if (listen === 'off') {
    process.stderr.write('admin-call: the admin API is off (admin.listen = off)\n');
    return 1;
  }
  const target = connectTarget(listen);
  if (!target) usage(`the admin address must be HOST:PORT or [IPV6]:PORT, got ${listen}`);
  const { status, body } = await call({ ...args, target });
  const where = `${args.method} http://${target.host.includes(':') ? `[${target.host}]` : target.host}:${target.port}${args.path}`;
  if (status < 200 || status > 299) {
    process.stderr.write(`admin-call: ${where}: ${status === 0 ? body : `HTTP ${status} ${body.trim()}`}\n`);
    return 1;
  }
  if (args.sleepAfterMs > 0) await sleep(args.sleepAfterMs);
  return 0;
}

process.exitCode = await main();
