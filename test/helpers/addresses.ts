/** Addresses of this host that tests and benchmarks bind to. */
import { type NetworkInterfaceInfo, networkInterfaces } from 'node:os';

/**
 * The first non-internal IPv4 address: where an rxe or siw device lives (neither carries 127.0.0.1), so
 * the default for anything that listens through the native verbs provider.
 */
export function firstExternalIPv4(
  interfaces: NodeJS.Dict<NetworkInterfaceInfo[]> = networkInterfaces(),
): string | undefined {
  for (const addrs of Object.values(interfaces)) {
    for (const a of addrs ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  }
  return undefined;
}
