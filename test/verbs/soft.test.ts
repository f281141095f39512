/**
 * Runs the verbs conformance suite against the soft (userspace iWARP) provider: with CRC, without CRC and
 * with small FPDUs, and with the native provider's memory rule (only `allocBuffer` memory registers), which
 * proves the suite itself is fit to run on a real device.
 */
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { registerConformance } from './conformance.js';

registerConformance({ name: 'soft', create: () => createSoftProvider(), reportsTerminate: true });
registerConformance({
  name: 'soft no-CRC, small FPDUs',
  create: () => createSoftProvider({ crc: false, mulpdu: 1000 }),
  reportsTerminate: true,
});
registerConformance({
  name: 'soft, owned memory only',
  create: () => createSoftProvider({ ownedMemoryOnly: true }),
  reportsTerminate: true,
});
