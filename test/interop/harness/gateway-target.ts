/**
 * The gateway chain as a scenario target: client → `rpcrdma-gateway start` (TCP frontend) → RPC-over-RDMA
 * over the soft iWARP provider → `rpcrdma-gateway responder` → the backend ganesha. The gateway and the
 * responder are separate processes (the built `dist/gateway/cli.js`), each in its own process group with
 * its log in the session, on fresh loopback ports.
 *
 * MOUNT goes straight to ganesha's MNT port (the endpoint's `mountPort` is the backend's): the gateway
 * relays one RPC server per listener, and program routing (NFS and MOUNT behind one gateway) is a later
 * issue. Only the NFS program crosses the RDMA link — which is where the chunks are.
 */
import { get } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePorts } from '../../helpers/ports.js';
import type { GaneshaInstance } from './ganesha.js';
import { launch } from './launcher.js';
import type { ManagedProcess } from './processes.js';
import type { DataPathCounters, Target, TargetHooks, TargetLink } from './scenario.js';
import type { InteropSession } from './session.js';

/** `dist/gateway/cli.js`, from this file's place in `dist/test/interop/harness/`. */
export const GATEWAY_CLI = join(
  dirname(fileURLToPath(import.meta.url)),
  '..',
  '..',
  '..',
  'gateway',
  'cli.js',
);

const COMMON_FLAGS = [
  '--rdma-provider',
  'soft',
  '--log-format',
  'json',
  '--shutdown-drain-timeout-ms',
  '2000',
];

/** GETs `url` and resolves with its status and body (status 0 when nothing answers). */
export function httpGet(url: string, timeoutMs = 3000): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    const req = get(url, { timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => {
        body += d;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', () => resolve({ status: 0, body }));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve({ status: 0, body: '' }));
  });
}

const GATEWAY_SIDE = [
  'inlineCalls',
  'readChunkCalls',
  'longCalls',
  'longReplies',
  'repliesReceived',
  'bytesSent',
  'bytesReceived',
] as const;

async function statsOf<T>(adminUrl: string): Promise<T> {
  const res = await httpGet(`${adminUrl}/v1/stats`);
  if (res.status !== 200)
    throw new Error(`GET ${adminUrl}/v1/stats: ${res.status} ${res.body.slice(0, 200)}`);
  return JSON.parse(res.body) as T;
}

/**
 * The gateway's per-upstream (per RDMA connection) counters summed, and the responder's RDMA Read and
 * Write bytes summed over its accepted connections: each end's own account of the same transfer.
 */
export async function chainCounters(adminUrl: string, responderAdminUrl: string): Promise<DataPathCounters> {
  type Counters = Record<string, number>;
  const [gateway, responder] = await Promise.all([
    statsOf<{ upstreams: Counters[] }>(adminUrl),
    statsOf<{ connections: Counters[] }>(responderAdminUrl),
  ]);
  const sum = { responderRdmaReadBytes: 0, responderRdmaWriteBytes: 0 } as DataPathCounters;
  for (const k of GATEWAY_SIDE) sum[k] = gateway.upstreams.reduce((n, u) => n + u[k], 0);
  for (const c of responder.connections) {
    sum.responderRdmaReadBytes += c.rdmaReadBytes;
    sum.responderRdmaWriteBytes += c.rdmaWriteBytes;
  }
  return sum;
}

export interface GatewayChain extends TargetLink {
  adminUrl: string;
  responderAdminUrl: string;
  responderPort: number;
  gateway: ManagedProcess;
  responder: ManagedProcess;
}

/** Starts responder then gateway in front of `backend`; `hooks.beforeConnect` runs between the two. */
export async function startGatewayChain(
  session: InteropSession,
  backend: GaneshaInstance,
  hooks: TargetHooks,
  protocolVersion: 1 | 2,
): Promise<GatewayChain> {
  const [responderPort, gatewayPort, adminPort, responderAdminPort] = await freePorts(4);
  const responderAdminUrl = `http://127.0.0.1:${responderAdminPort}`;
  // The RDMA link (what scenario 6 decodes) and the frontend (what scenario 3 counts connections on).
  const capturePorts = [responderPort, gatewayPort];
  const up = backend.endpoint;
  const responder = await launch(session, {
    name: 'responder',
    command: process.execPath,
    args: [
      GATEWAY_CLI,
      'responder',
      '--upstream',
      `${up.host}:${up.nfsPort}`,
      '--responder-listen',
      `127.0.0.1:${responderPort}`,
      '--rdma-protocol-version',
      String(protocolVersion),
      '--admin-listen',
      `127.0.0.1:${responderAdminPort}`,
      ...COMMON_FLAGS,
    ],
    // Its /readyz: the RDMA listener is bound (a TCP probe of that port would be an MPA peer that never
    // speaks).
    ready: async () => (await httpGet(`${responderAdminUrl}/readyz`, 1000)).status === 200,
    readyTimeoutMs: 20_000,
  });
  await hooks.beforeConnect(capturePorts);
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  const gateway = await launch(session, {
    name: 'gateway',
    command: process.execPath,
    args: [
      GATEWAY_CLI,
      'start',
      '--rdma-peer',
      `127.0.0.1:${responderPort}`,
      '--listen',
      `127.0.0.1:${gatewayPort}`,
      '--admin-listen',
      `127.0.0.1:${adminPort}`,
      '--rdma-protocol-version',
      String(protocolVersion),
      ...COMMON_FLAGS,
    ],
    // Ready = frontend bound and every pooled RDMA connection established (the admin API's /readyz).
    ready: async () => (await httpGet(`${adminUrl}/readyz`, 1000)).status === 200,
    readyTimeoutMs: 20_000,
  });
  return {
    endpoint: { host: '127.0.0.1', nfsPort: gatewayPort, mountPort: up.mountPort, exportPath: up.exportPath },
    capturePorts,
    counters: () => chainCounters(adminUrl, responderAdminUrl),
    adminUrl,
    responderAdminUrl,
    responderPort,
    gateway,
    responder,
  };
}

/** `gateway-v1` (Version 1 only, RFC 8166) or `gateway-v2` (proposes Version 2). */
export function gatewayTarget(protocolVersion: 1 | 2): Target {
  return {
    name: `gateway-v${protocolVersion}`,
    build: (session, backend, hooks) => startGatewayChain(session, backend, hooks, protocolVersion),
  };
}
