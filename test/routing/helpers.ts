import { freePorts } from '../helpers/ports.js';

/** A loopback port nothing listens on, below the ephemeral range (`test/helpers/ports.ts`). */
export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  return port;
}
