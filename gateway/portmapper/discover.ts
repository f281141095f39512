/**
 * What the NFS server really serves beside NFS: the gateway asks the server's portmapper (PMAP version 2
 * DUMP over TCP, RFC 1833 §3.2) which versions of MOUNT, NLM, NSM and rquota are registered for TCP and
 * on which ports, so that the default passthrough routes go to each program's own port and the gateway
 * advertises only what the server serves. Without it, `rpcinfo -p <gateway>` would list NLM and NSM for
 * a server that runs no lock manager, and a client's lock request would go to the MOUNT port.
 */
import { GatewayError } from '../../common/errors.js';
import { XdrReader } from '../../rpc/xdr.js';
import { formatHostPort, type HostPort } from '../../tcp-frontend/address.js';
import { RpcClient } from '../../tcp-frontend/client.js';
import { PORTMAP_PROGRAM } from './programs.js';
import { IPPROTO_TCP, PmapProc } from './service.js';

/** The upstream portmapper could not be asked, or answered something that is not a PMAP DUMP reply. */
export class DiscoveryError extends GatewayError {}

/** One TCP registration of the server's portmapper. */
export interface Registration {
  program: number;
  version: number;
  port: number;
}

/** A DUMP reply is a linked list; a hostile or broken portmapper must not make us loop or allocate without end. */
const MAX_ENTRIES = 4096;

/** Decodes a PMAP v2 DUMP result (`pmaplist`) into its TCP registrations. Throws DiscoveryError. */
export function decodePmapDump(body: Buffer): Registration[] {
  const r = new XdrReader(body);
  const out: Registration[] = [];
  try {
    for (let n = 0; r.bool('value_follows'); n++) {
      if (n === MAX_ENTRIES) {
        throw new DiscoveryError('ERR_PMAP_DUMP', `portmapper DUMP lists more than ${MAX_ENTRIES} entries`);
      }
      const program = r.u32('prog');
      const version = r.u32('vers');
      const prot = r.u32('prot');
      const port = r.u32('port');
      if (prot !== IPPROTO_TCP) continue;
      if (port === 0 || port > 65535) continue;
      out.push({ program, version, port });
    }
  } catch (err) {
    if (err instanceof DiscoveryError) throw err;
    throw new DiscoveryError('ERR_PMAP_DUMP', `malformed portmapper DUMP reply: ${(err as Error).message}`);
  }
  return out;
}

/** Asks the portmapper at `target` for its registrations (PMAPPROC_DUMP). Throws DiscoveryError. */
export async function dumpPortmapper(target: HostPort, timeoutMs: number): Promise<Registration[]> {
  const where = formatHostPort(target.host, target.port);
  let client: RpcClient;
  try {
    client = await RpcClient.connect({ ...target, connectTimeoutMs: timeoutMs, callTimeoutMs: timeoutMs });
  } catch (err) {
    throw new DiscoveryError('ERR_PMAP_UNREACHABLE', `portmapper ${where}: ${(err as Error).message}`, {
      target: where,
    });
  }
  // A portmapper that did not answer in time is not waited for again: its connection is destroyed rather
  // than closed (a graceful close would wait for it to close its side, which a hung one never does).
  let answered = false;
  try {
    const reply = await client.call(PORTMAP_PROGRAM, 2, PmapProc.DUMP);
    answered = true;
    if (reply.replyStat !== 0 || reply.acceptStat !== 0) {
      throw new DiscoveryError('ERR_PMAP_REFUSED', `portmapper ${where} refused DUMP`, {
        target: where,
        replyStat: reply.replyStat,
        acceptStat: reply.acceptStat,
      });
    }
    return decodePmapDump(reply.body);
  } catch (err) {
    if (err instanceof DiscoveryError) throw err;
    throw new DiscoveryError('ERR_PMAP_UNREACHABLE', `portmapper ${where}: ${(err as Error).message}`, {
      target: where,
    });
  } finally {
    if (answered) await client.close(timeoutMs);
    else client.destroy();
  }
}
