/**
 * What the portmapper advertises: every (program, version) the routing table serves, on every bound
 * listener that serves the program.
 */
import type { BoundAddress } from '../../tcp-frontend/server.js';
import type { ListenerPrograms, RoutingTable } from '../dispatch.js';
import type { Mapping } from './service.js';

export function buildMappings(
  table: RoutingTable,
  bound: readonly BoundAddress[],
  listeners: ListenerPrograms,
): Mapping[] {
  const out: Mapping[] = [];
  const seen = new Set<string>();
  for (const program of table.programs()) {
    for (const version of table.versionsOf(program)) {
      for (const a of bound) {
        const allowed = listeners.get(a.port);
        if (allowed && !allowed.has(program)) continue;
        const family = a.family === 'IPv6' || a.host.includes(':') ? 'IPv6' : 'IPv4';
        const k = `${program}/${version}/${a.host}/${a.port}`;
        if (seen.has(k)) continue;
        seen.add(k);
        out.push({ program, version, host: a.host, port: a.port, family, dedicated: allowed != null });
      }
    }
  }
  return out;
}
