/**
 * When the host already runs rpcbind (port 111 is taken), the gateway can register its programs there
 * instead of serving the portmapper itself: PMAP version 2 SET / UNSET over TCP to 127.0.0.1:111 (RFC 1833
 * §3.2; rpcbind accepts PMAP SET from a local privileged caller). Only IPv4 TCP mappings are registered
 * (PMAP v2 has no address family).
 */
import type { Logger } from 'pino';
import { RpcClient } from '../../tcp-frontend/client.js';
import { PORTMAP_PROGRAM } from './programs.js';
import { IPPROTO_TCP, type Mapping, PmapProc } from './service.js';

function args(m: Mapping): Buffer {
  const b = Buffer.alloc(16);
  b.writeUInt32BE(m.program, 0);
  b.writeUInt32BE(m.version, 4);
  b.writeUInt32BE(IPPROTO_TCP, 8);
  b.writeUInt32BE(m.port, 12);
  return b;
}

/** SETs (or UNSETs) each mapping; returns how many the host rpcbind accepted. Failures are logged. */
export async function registerWithRpcbind(
  mappings: readonly Mapping[],
  how: 'set' | 'unset',
  log: Logger,
  rpcbind = { host: '127.0.0.1', port: 111 },
): Promise<number> {
  const timeoutMs = 2000;
  let client: RpcClient;
  try {
    client = await RpcClient.connect({ ...rpcbind, connectTimeoutMs: timeoutMs, callTimeoutMs: timeoutMs });
  } catch (err) {
    log.warn({ err: (err as Error).message }, `cannot ${how} with the host rpcbind`);
    return 0;
  }
  let ok = 0;
  const done = new Set<string>();
  // An rpcbind that did not answer in time is not waited for again: its connection is destroyed rather
  // than closed (a graceful close would wait for it to close its side, which a hung one never does).
  let answered = true;
  try {
    for (const m of mappings) {
      if (m.family !== 'IPv4') continue;
      const k = `${m.program}/${m.version}`;
      if (done.has(k)) continue; // PMAP v2 holds one port per (program, version, protocol)
      done.add(k);
      const reply = await client.call(
        PORTMAP_PROGRAM,
        2,
        how === 'set' ? PmapProc.SET : PmapProc.UNSET,
        args(m),
      );
      const accepted =
        reply.replyStat === 0 &&
        reply.acceptStat === 0 &&
        reply.body.length >= 4 &&
        reply.body.readUInt32BE(0) === 1;
      if (accepted) ok++;
      else log.warn({ program: m.program, version: m.version, port: m.port }, `host rpcbind refused ${how}`);
    }
  } catch (err) {
    answered = false;
    log.warn({ err: (err as Error).message }, `${how} with the host rpcbind failed`);
  } finally {
    if (answered) await client.close(timeoutMs);
    else client.destroy();
  }
  return ok;
}
