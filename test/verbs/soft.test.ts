/** Runs the verbs conformance suite against the soft (userspace iWARP) provider, with and without CRC. */
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { registerConformance } from './conformance.js';

registerConformance({ name: 'soft', create: () => createSoftProvider(), reportsTerminate: true });
registerConformance({
  name: 'soft no-CRC, small FPDUs',
  create: () => createSoftProvider({ crc: false, mulpdu: 1000 }),
  reportsTerminate: true,
});
