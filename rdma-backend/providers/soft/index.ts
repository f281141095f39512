/**
 * The soft verbs provider: userspace iWARP (RFC 5040 RDMAP, RFC 5041 DDP, RFC 5044 MPA with the
 * RFC 6581 enhancements) over Node TCP sockets. One device, "soft0".
 */
import type { Device, VerbsProvider } from '../../verbs/index.js';
import type { SoftProviderOptions } from './connection.js';
import { resolveOptions, SoftDevice } from './device.js';

export type { SoftProviderOptions } from './connection.js';
export { crc32c, crc32cImplementation, crc32cSoftware } from './crc32c.js';
export { SOFT_CAPS } from './device.js';

export const SOFT_DEVICE_NAME = 'soft0';

export function createSoftProvider(options: SoftProviderOptions = {}): VerbsProvider {
  const resolved = resolveOptions(options);
  return {
    name: 'soft',
    listDevices: async () => [SOFT_DEVICE_NAME],
    openDevice: async (name?: string): Promise<Device> => {
      if (name !== undefined && name !== SOFT_DEVICE_NAME) {
        const { VerbsError } = await import('../../verbs/index.js');
        throw new VerbsError('VERBS_NO_DEVICE', `no soft device named ${name}`, { name });
      }
      return new SoftDevice(SOFT_DEVICE_NAME, resolved);
    },
  };
}
