/**
 * The embedded peer (DESIGN §3 "Embedded default"): the responder role running in the gateway's own
 * process on its own verbs device, forwarding to an upstream — by default the built-in test program,
 * served over TCP on a free loopback port in the same process. With it, `npm start` serves with nothing
 * else installed: TCP client → frontend → router → soft iWARP → responder → TCP → test program.
 */
import type { Logger } from 'pino';
import type { TransportOptions } from '../rdma-backend/transport/index.js';
import type { Device, VerbsProvider } from '../rdma-backend/verbs/index.js';
import type { HostPort } from '../tcp-frontend/address.js';
import { Responder } from './responder.js';
import { serveTestProgram, type TestProgramServer } from './test-program/server.js';
import type { UlbRegistry } from './ulb/registry.js';

export interface EmbeddedPeerOptions {
  provider: VerbsProvider;
  /** `embedded`: the built-in test program; otherwise the TCP RPC server to forward to. */
  upstream: 'embedded' | HostPort;
  registry: UlbRegistry;
  transport: TransportOptions;
  maxRecordSize: number;
  logger: Logger;
}

export interface EmbeddedPeer {
  /** Where the responder accepts RPC-over-RDMA connections (loopback, a free port). */
  readonly host: string;
  readonly port: number;
  readonly responder: Responder;
  /** The in-process test program, when it is the upstream. */
  readonly testProgram: TestProgramServer | null;
  readonly upstream: HostPort;
  close(drainTimeoutMs?: number): Promise<void>;
}

export async function startEmbeddedPeer(o: EmbeddedPeerOptions): Promise<EmbeddedPeer> {
  let testProgram: TestProgramServer | null = null;
  let upstream: HostPort;
  if (o.upstream === 'embedded') {
    testProgram = await serveTestProgram({
      host: '127.0.0.1',
      port: 0,
      logger: o.logger.child({ component: 'test-program' }),
    });
    upstream = { host: '127.0.0.1', port: testProgram.addresses[0].port };
  } else {
    upstream = o.upstream;
  }
  // What started is undone if a later step fails: the test program's listener would keep the process alive.
  let device: Device | null = null;
  let responder: Responder;
  let bound: { host: string; port: number };
  try {
    device = await o.provider.openDevice();
    responder = new Responder({
      device,
      host: '127.0.0.1',
      port: 0,
      upstream,
      registry: o.registry,
      transport: o.transport,
      maxRecordSize: o.maxRecordSize,
      // Its only peer is this process's own pool, which would reconnect at once: reaping buys nothing.
      idleTimeoutMs: 0,
      logger: o.logger.child({ component: 'responder' }),
    });
    bound = await responder.listen();
  } catch (err) {
    await testProgram?.close({ drainTimeoutMs: 0 });
    if (device) closeDeviceSoon(device);
    throw err;
  }
  const opened = device;
  return {
    host: bound.host,
    port: bound.port,
    responder,
    testProgram,
    upstream,
    async close(drainTimeoutMs = 5000) {
      await responder.close(drainTimeoutMs);
      await testProgram?.close({ drainTimeoutMs });
      closeDeviceSoon(opened);
    },
  };
}

/** Closes a device once its connections have released their resources (they do so on setImmediate). */
export function closeDeviceSoon(device: Device): void {
  setTimeout(() => {
    try {
      device.close();
    } catch {
      // Still busy (a connection being torn down): the process exit frees it.
    }
  }, 50).unref();
}
