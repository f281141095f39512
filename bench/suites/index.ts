import type { Suite } from '../harness.js';
import { nfsSuite } from './nfs.js';
import { protocolSuite } from './protocol.js';
import { rpcSuite } from './rpc.js';
import { scenarioSuite } from './scenarios.js';
import { softProvider } from './soft-provider.js';
import { transportSuite } from './transport.js';

/** Every suite, in the documented order `npm run bench` runs them. */
export const suites: Suite[] = [
  rpcSuite,
  protocolSuite,
  softProvider,
  transportSuite,
  scenarioSuite,
  nfsSuite,
];
