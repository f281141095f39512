/**
 * The native addon's failed teardowns reach a real gateway's `/metrics` through its control adapter
 * (gateway/control.ts): once this process has loaded the addon, every call that failed in a finalizer is
 * a sample of `rpcrdma_gateway_native_teardown_failures_total`. No device here runs a real teardown, so the
 * failure is recorded through the addon's testing hook, the same counter a failing call increments.
 */
import parsePrometheus from 'parse-prometheus-text-format';
import { request } from 'undici';
import { createAdminApi } from '../../admin-api/index.js';
import { gatewayControl } from '../../gateway/control.js';
import { startGateway } from '../../gateway/gateway.js';
import { captureLogger } from '../gateway/helpers.js';
import { testConfig } from '../integration/helpers.js';
import { addonTest, requireAddon } from './native-helpers.js';

const test = addonTest();

test.serial(
  'a gateway that loaded the addon reports its failed teardowns in /metrics, per call',
  async (t) => {
    const a = requireAddon();
    const before = a.teardownFailures().ibv_dealloc_pd?.count ?? 0;
    a.testing.recordTeardownFailure('ibv_dealloc_pd', 16);
    const config = testConfig();
    const { logger } = captureLogger();
    const g = await startGateway({ config, logger });
    const api = await createAdminApi({ control: gatewayControl(g, { config, logger }), logger, port: 0 });
    const { url } = await api.listen();
    t.teardown(async () => {
      await api.close();
      await g.stop(0);
    });
    const res = await request(`${url}/metrics`);
    const family = parsePrometheus(await res.body.text()).find(
      (f) => f.name === 'rpcrdma_gateway_native_teardown_failures_total',
    );
    t.is(family?.type, 'COUNTER');
    t.deepEqual(
      ((family?.metrics ?? []) as { labels: Record<string, string>; value: string }[]).find(
        (m) => m.labels.call === 'ibv_dealloc_pd',
      ),
      { labels: { call: 'ibv_dealloc_pd' }, value: String(before + 1) },
    );
  },
);
