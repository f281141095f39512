/**
 * Every interop scenario run direct to nfs-ganesha (no gateway): proves each scenario — its clients, its
 * server configuration, its checks — is sound on its own, so a failure through the gateway chain is the
 * gateway's. Scenarios needing rpcbind take the port-111 lock and run one at a time.
 */
import { requireExecutable, testWithPeers } from '../helpers/peers.js';
import { direct, runScenario } from './harness/scenario.js';
import { SCENARIO_PEERS as PEERS, SCENARIOS } from './scenarios.js';

const test = testWithPeers(...PEERS);

for (const scenario of SCENARIOS) {
  test(`direct: (${scenario.id}) ${scenario.title}`, async (t) => {
    for (const p of PEERS) requireExecutable(p);
    t.timeout(240_000); // includes waiting for the port-111 lock behind the gateway runs
    await runScenario(t, scenario, direct);
  });
}
