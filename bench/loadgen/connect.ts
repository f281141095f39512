/** Opening many load-generator connections to one target, shared by the generator and the idle holder. */
import { parseHostPort } from '../../tcp-frontend/address.js';
import { RpcClient } from '../../tcp-frontend/client.js';

/** Opens `count` clients to `target`, each allowing `depth` calls in flight. */
export async function connectAll(target: string, count: number, depth: number): Promise<RpcClient[]> {
  const { host, port } = parseHostPort(target);
  const clients: RpcClient[] = [];
  // In batches, so that 1,000 connections do not all hit one accept backlog at once.
  for (let i = 0; i < count; i += 100) {
    const batch = Math.min(100, count - i);
    const opened = await Promise.all(
      Array.from({ length: batch }, () =>
        RpcClient.connect({ host, port, maxInFlight: depth, maxRecordSize: 8 << 20 }),
      ),
    );
    clients.push(...opened);
  }
  return clients;
}
