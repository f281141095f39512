/**
 * Every interop scenario through the gateway chain: client → `rpcrdma-gateway start` → RPC-over-RDMA
 * (soft iWARP) → `rpcrdma-gateway responder` → nfs-ganesha, the gateway and the responder as separate
 * processes. `gateway-v2` (the default: Version 2 proposed) runs the whole table; `gateway-v1` (Version 1
 * pinned) runs the NFSv3 data path and its own decode check. The direct runs are in direct.test.ts.
 */
import { requireExecutable, testWithPeers } from '../helpers/peers.js';
import { chainDecodeV1, chainDecodeV2 } from './chain-decode.js';
import { gatewayTarget } from './harness/gateway-target.js';
import { runScenario } from './harness/scenario.js';
import { nfsv3Files, SCENARIO_PEERS as PEERS, SCENARIOS } from './scenarios.js';

const test = testWithPeers(...PEERS);

const v1 = gatewayTarget(1);
const v2 = gatewayTarget(2);
const RUNS = [
  // The decode baseline is direct-only: the chain's own decode checks are chainDecodeV1/V2.
  ...SCENARIOS.filter((s) => s.id !== '6-decode').map((s) => ({ scenario: s, target: v2 })),
  { scenario: chainDecodeV2, target: v2 },
  { scenario: nfsv3Files, target: v1 },
  { scenario: chainDecodeV1, target: v1 },
];

for (const { scenario, target } of RUNS) {
  test(`${target.name}: (${scenario.id}) ${scenario.title}`, async (t) => {
    for (const p of PEERS) requireExecutable(p);
    t.timeout(240_000); // includes waiting for the port-111 lock
    await runScenario(t, scenario, target);
  });
}
