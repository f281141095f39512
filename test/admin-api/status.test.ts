/** `rpcrdma-gateway status` against a running admin API (fake gateway behind it), through the CLI's `main`. */

import { Writable } from 'node:stream';
import test from 'ava';
import { createAdminApi } from '../../admin-api/index.js';
import { main } from '../../gateway/cli.js';
import { adminUrl } from '../../gateway/commands/status.js';
import { captureLogger } from '../gateway/helpers.js';
import { freePort } from '../helpers/ports.js';
import { FakeControl } from './fake-control.js';

function sink() {
  let text = '';
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      text += chunk.toString('utf8');
      done();
    },
  });
  return { stream, text: () => text };
}

async function runStatus(argv: string[], env: Record<string, string> = {}) {
  const out = sink();
  const err = sink();
  const code = await main(['status', ...argv], { env, stdout: out.stream, stderr: err.stream });
  return { code, stdout: out.text(), stderr: err.text() };
}

async function withApi(
  options: { protectReads?: boolean },
  fn: (url: string, control: FakeControl) => Promise<void>,
): Promise<void> {
  const control = new FakeControl();
  const { logger } = captureLogger();
  const api = await createAdminApi({ control, logger, port: 0, token: 'status-token', ...options });
  const { url } = await api.listen();
  try {
    await fn(url, control);
  } finally {
    await api.close();
  }
}

test('prints a readable summary and exits 0 when ready', async (t) => {
  await withApi({}, async (url) => {
    const r = await runStatus(['--url', url]);
    t.is(r.code, 0, r.stderr);
    t.regex(
      r.stdout,
      /^rpcrdma-gateway 0\.1\.0-test \(gateway\) at http:\/\/127\.0\.0\.1:\d+ — running, up \d+s/,
    );
    t.regex(r.stdout, /ready: {5}yes/);
    t.regex(r.stdout, /RDMA connections \(2\/2 ready\):/);
    t.regex(
      r.stdout,
      /#1 ready +v2 {2}credits 3\/32 in use, 0 queued {2}reconnects 1 {2}last error: peer "closed"/,
    );
    t.regex(r.stdout, /clients: {3}1 connected, 1 calls in flight, 0 paused/);
    t.regex(r.stdout, /10 calls, 9 replies, 1000 B in, 2\.0 KiB out, 5 connections/);
  });
});

test('says why it is not ready and exits 4; --format json prints the documents', async (t) => {
  await withApi({}, async (url, control) => {
    control.facts.upstreamsReady = 0;
    const r = await runStatus(['--url', url]);
    t.is(r.code, 4);
    t.regex(r.stdout, /ready: {5}NO — no RDMA connection established/);
    const j = await runStatus(['--url', url, '--format', 'json']);
    t.is(j.code, 4);
    const doc = JSON.parse(j.stdout);
    t.is(doc.readiness.reason, 'no RDMA connection established');
    t.is(doc.upstreams.upstreams.length, 2);
  });
});

test('sends the configured token to a gateway that protects its reads', async (t) => {
  await withApi({ protectReads: true }, async (url) => {
    const denied = await runStatus(['--url', url]);
    t.is(denied.code, 1);
    t.regex(denied.stderr, /HTTP 401/);
    const ok = await runStatus(['--url', url], { RPCRDMA_GATEWAY_ADMIN_TOKEN: 'status-token' });
    t.is(ok.code, 0, ok.stderr);
  });
});

test('unreachable admin API: exit 1 with the address; bad flags: exit 2', async (t) => {
  // A port that was free a moment ago: nothing listens there.
  const port = await freePort();
  const r = await runStatus(['--url', `http://127.0.0.1:${port}`]);
  t.is(r.code, 1);
  t.regex(r.stderr, new RegExp(`cannot reach the admin API at http://127\\.0\\.0\\.1:${port}: ECONNREFUSED`));
  t.is((await runStatus(['--format', 'xml'])).code, 2);
  t.is((await runStatus([], { RPCRDMA_GATEWAY_ADMIN_LISTEN: 'off' })).code, 2);
});

test('the default URL comes from admin.listen, wildcards becoming loopback', (t) => {
  t.is(adminUrl({ host: '127.0.0.1', port: 9249 }), 'http://127.0.0.1:9249');
  t.is(adminUrl({ host: '0.0.0.0', port: 1 }), 'http://127.0.0.1:1');
  t.is(adminUrl({ host: '::', port: 2 }), 'http://[::1]:2');
});
