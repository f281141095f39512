/**
 * The command line of `npm run bench`, checked before anything runs: an unknown or malformed argument is
 * refused with the usage, because a run that ignored it would spend ten minutes measuring the wrong thing.
 */
import { isIP } from 'node:net';
import type { NetworkInterfaceInfo } from 'node:os';
import { firstExternalIPv4 } from '../test/helpers/addresses.js';
import { MAX_LOADGENS } from './loadgen/split.js';

export const BENCH_USAGE = `usage: npm run bench -- [--quick] [--only SUITE[,SUITE]] [--profile]
                       [--rdma-provider soft|native] [--rdma-address IP] [--loadgens N]
  --quick           a short smoke run (CI runs it; timings are reported, not asserted)
  --only            run only the named suites (rpc, protocol, soft-provider, transport, scenarios, nfs)
  --profile         V8 CPU profiles with flame graphs, and allocation profiles, of the gateway and the
                    responder processes (node dist/bench/profile-summary.js DIR summarises both)
  --rdma-provider   the RDMA provider of the gateway chains: soft (default; userspace iWARP over TCP on
                    this host's CPUs) or native (the verbs addon: an RNIC, rxe or siw)
  --rdma-address    the address the responder listens on and the gateway connects to: 127.0.0.1 for
                    soft, the first non-loopback IPv4 address for native (rxe and siw do not carry
                    127.0.0.1); give the address of the RDMA device's interface
  --loadgens        load-generator processes per scenario (default 1): the workload's connections are
                    dealt out among them, so the load offered stays the same; for hosts with more cores
                    than one generator's event loop can keep busy
The micro-benchmark suites measure the soft provider whatever --rdma-provider says.`;

/** The RDMA data path the gateway chains run on. */
export interface BenchRdma {
  provider: 'soft' | 'native';
  address: string;
}

export interface BenchOptions {
  help: boolean;
  quick: boolean;
  only?: string[];
  profile: boolean;
  rdma: BenchRdma;
  /** Load-generator processes per scenario (`--loadgens`; bench/loadgen/split.ts). */
  loadgens: number;
}

export class BenchUsageError extends Error {
  readonly code = 'ERR_BENCH_USAGE';
  constructor(reason: string) {
    super(`${reason}\n${BENCH_USAGE}`);
    this.name = 'BenchUsageError';
  }
}

export function parseBenchArgs(
  argv: readonly string[],
  interfaces?: NodeJS.Dict<NetworkInterfaceInfo[]>,
): BenchOptions {
  const out: BenchOptions = {
    help: false,
    quick: false,
    profile: false,
    rdma: { provider: 'soft', address: '' },
    loadgens: 1,
  };
  let address: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const eq = arg.indexOf('=');
    const flag = eq > 0 ? arg.slice(0, eq) : arg;
    const takesValue =
      flag === '--only' || flag === '--rdma-provider' || flag === '--rdma-address' || flag === '--loadgens';
    if (eq > 0 && !takesValue) throw new BenchUsageError(`${flag} takes no value (got ${arg})`);
    const value = takesValue ? (eq > 0 ? arg.slice(eq + 1) : argv[++i]) : undefined;
    if (takesValue && (value === undefined || value === '' || value.startsWith('--')))
      throw new BenchUsageError(`${flag} needs a value`);
    switch (flag) {
      case '--help':
      case '-h':
        out.help = true;
        break;
      case '--quick':
        out.quick = true;
        break;
      case '--profile':
        out.profile = true;
        break;
      case '--only':
        out.only = value!.split(',').filter((s) => s !== '');
        break;
      case '--rdma-provider':
        if (value !== 'soft' && value !== 'native')
          throw new BenchUsageError(`--rdma-provider must be soft or native (got ${value})`);
        out.rdma.provider = value;
        break;
      case '--rdma-address':
        if (isIP(value!) === 0)
          throw new BenchUsageError(`--rdma-address must be an IP address (got ${value})`);
        address = value;
        break;
      case '--loadgens': {
        const n = /^[0-9]+$/.test(value!) ? Number(value) : Number.NaN;
        if (!(n >= 1 && n <= MAX_LOADGENS))
          throw new BenchUsageError(`--loadgens must be an integer in 1..${MAX_LOADGENS} (got ${value})`);
        out.loadgens = n;
        break;
      }
      default:
        throw new BenchUsageError(`unknown argument ${arg}`);
    }
  }
  if (address !== undefined) out.rdma.address = address;
  else if (out.rdma.provider === 'soft') out.rdma.address = '127.0.0.1';
  else {
    const found = firstExternalIPv4(interfaces);
    if (found === undefined)
      throw new BenchUsageError(
        '--rdma-provider native: this host has no non-loopback IPv4 address; give --rdma-address',
      );
    out.rdma.address = found;
  }
  return out;
}
