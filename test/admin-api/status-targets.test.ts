/**
 * Which admin API addresses `rpcrdma-gateway status` asks, in order, from the same configuration sources
 * the processes read (file, `RPCRDMA_GATEWAY_*` environment, flags, defaults per role). The asking itself,
 * against real listeners, is in status.test.ts.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { adminTargets, type StatusRole } from '../../gateway/commands/status.js';
import { loadConfig } from '../../gateway/config.js';

function targets(
  o: { url?: string; role?: StatusRole; env?: Record<string, string>; flags?: Record<string, string> } = {},
) {
  const flags = new Map(Object.entries(o.flags ?? {}).map(([k, v]) => [k, [v]]));
  return adminTargets({
    url: o.url,
    role: o.role,
    loaded: (role) => loadConfig({ env: o.env ?? {}, flags, role }),
  });
}

test('nothing configured: the gateway default, then the responder default', (t) => {
  t.deepEqual(targets(), [
    { url: 'http://127.0.0.1:9249', from: "the gateway's default" },
    { url: 'http://127.0.0.1:9250', from: "the responder's default" },
  ]);
});

test('--role: only that role, at its default', (t) => {
  t.deepEqual(targets({ role: 'responder' }), [
    { url: 'http://127.0.0.1:9250', from: "the responder's default" },
  ]);
  t.deepEqual(targets({ role: 'gateway' }), [
    { url: 'http://127.0.0.1:9249', from: "the gateway's default" },
  ]);
});

test('admin.listen configured anywhere: that address alone, saying where it was set', (t) => {
  t.deepEqual(targets({ env: { RPCRDMA_GATEWAY_ADMIN_LISTEN: '0.0.0.0:7000' } }), [
    { url: 'http://127.0.0.1:7000', from: 'admin.listen from RPCRDMA_GATEWAY_ADMIN_LISTEN' },
  ]);
  t.deepEqual(targets({ flags: { 'admin-listen': '[::1]:7001' }, role: 'responder' }), [
    { url: 'http://[::1]:7001', from: '--admin-listen' },
  ]);
  const dir = mkdtempSync(join(tmpdir(), 'status-targets-'));
  try {
    const file = join(dir, 'responder.yaml');
    writeFileSync(file, 'admin:\n  listen: 127.0.0.2:7002\n');
    t.deepEqual(targets({ env: { RPCRDMA_GATEWAY_CONFIG: file } }), [
      { url: 'http://127.0.0.2:7002', from: `admin.listen in ${file}` },
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('--url wins over everything, as given; admin.listen off without --url is a usage error', (t) => {
  t.deepEqual(targets({ url: 'http://10.0.0.1:1234/', env: { RPCRDMA_GATEWAY_ADMIN_LISTEN: 'off' } }), [
    { url: 'http://10.0.0.1:1234', from: '--url' },
  ]);
  t.throws(() => targets({ env: { RPCRDMA_GATEWAY_ADMIN_LISTEN: 'off' } }), {
    code: 'ERR_CONFIG_VALUE',
    message:
      /^admin\.listen is off \(admin\.listen from RPCRDMA_GATEWAY_ADMIN_LISTEN\): give the admin API address with --url$/,
  });
});
