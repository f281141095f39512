/**
 * The verbs conformance suite (test/verbs/conformance.ts) against the native provider. It needs an RDMA
 * device — an RNIC, or Soft-RoCE / soft iWARP (`rdma link add rxe0 type rxe netdev eth0`, see
 * docs/native-provider.md) — and connects over the address in RDMA_TEST_HOST (default: the first
 * non-loopback IPv4 address; rxe and siw do not carry 127.0.0.1). Where no device exists it is reported
 * as NOT RUN, loudly, with the reason: a skipped test in the summary and a banner on stderr.
 */
import test from 'ava';
import { createNativeProvider, nativeAvailability } from '../../rdma-backend/providers/native/index.js';
import { firstExternalIPv4 } from '../helpers/addresses.js';
import { registerConformance } from '../verbs/conformance.js';

const availability = nativeAvailability();
if (availability.available) {
  registerConformance({
    name: `native ${availability.devices.join(',')}`,
    create: () => createNativeProvider(),
    reportsTerminate: false,
    host: process.env.RDMA_TEST_HOST ?? firstExternalIPv4(),
  });
} else {
  process.stderr.write(
    '\n!!! VERBS CONFORMANCE SUITE NOT RUN against the native provider\n' +
      `!!! reason: ${availability.message}\n` +
      '!!! (the soft provider runs it in test/verbs; to run it natively, see docs/native-provider.md)\n\n',
  );
  test.skip(`[native] verbs conformance suite — NOT RUN: ${availability.message}`, () => {});
}
