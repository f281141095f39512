/**
 * The scenario table's machinery. A scenario is written once against an NfsEndpoint and runs against any
 * target: `direct` (the endpoint is ganesha itself) now, and the gateway chain (client → gateway → RDMA →
 * responder → ganesha) once the gateway exists — a target only has to put something in front of the
 * backend ganesha and say which TCP ports are worth capturing.
 */
import type { ExecutionContext } from 'ava';
import { type Capture, CaptureUnusableError, startCapture } from './capture.js';
import type { NfsEndpoint } from './endpoint.js';
import { type GaneshaFsal, type GaneshaInstance, type NfsVersion, startGanesha } from './ganesha.js';
import { startGlusterVolume } from './gluster.js';
import { RPCBIND_PORT, useRpcbind, withoutRpcbind } from './rpcbind.js';
import { InteropSession } from './session.js';

/** How the data of NFS READ/WRITE crossed a link, from the product's own counters (summed over its links). */
export interface DataPathCounters {
  /** Calls sent inline, with a Read chunk (DDP: WRITE data), or as Long Calls (Position-Zero Read chunk). */
  inlineCalls: number;
  readChunkCalls: number;
  longCalls: number;
  /** Replies that came in a Reply chunk (Long Replies). */
  longReplies: number;
  repliesReceived: number;
  /** Bytes carried by Sends / Receives: small when the payloads moved by RDMA Read / Write instead. */
  bytesSent: number;
  bytesReceived: number;
  /**
   * The other end's view, from the responder's own admin API: bytes it pulled by RDMA Read (WRITE data
   * from the gateway's Read chunks) and pushed by RDMA Write (READ data into the gateway's Write chunks).
   */
  responderRdmaReadBytes: number;
  responderRdmaWriteBytes: number;
}

export interface TargetLink {
  endpoint: NfsEndpoint;
  /** TCP ports whose traffic a capturing scenario records (direct: the endpoint's; chain: the RDMA link). */
  capturePorts: number[];
  /** The chain's transport counters (undefined for `direct`: there is no RDMA link). */
  counters?: () => Promise<DataPathCounters>;
}

export interface TargetHooks {
  /**
   * Called by `build` with the ports to capture before anything connects on them: Wireshark finds iWARP
   * MPA and follows ONC RPC records only from a connection's start.
   */
  beforeConnect(capturePorts: readonly number[]): Promise<void>;
}

export interface Target {
  /** `direct`, `gateway-v1`, `gateway-v2`... shown in test titles and docs/interop.md's matrix. */
  name: string;
  build(session: InteropSession, backend: GaneshaInstance, hooks: TargetHooks): Promise<TargetLink>;
}

/** Clients talk straight to ganesha: proves each scenario is sound without the product. */
export const direct: Target = {
  name: 'direct',
  async build(_session, backend, hooks) {
    const e = backend.endpoint;
    const capturePorts = e.mountPort === undefined ? [e.nfsPort] : [e.nfsPort, e.mountPort];
    await hooks.beforeConnect(capturePorts);
    return { endpoint: e, capturePorts };
  },
};

export interface ScenarioContext {
  t: ExecutionContext;
  session: InteropSession;
  target: Target;
  link: TargetLink;
  /** What the clients use. */
  endpoint: NfsEndpoint;
  /** The real server (its export directory can be seeded and checked directly). */
  backend: GaneshaInstance;
  /** Present when the scenario asked for one; started before any client connection. */
  capture: Capture | undefined;
  /** For scenarios run without rpcbind: false when a foreign rpcbind was found on port 111. */
  port111Silent: boolean | undefined;
}

export interface Scenario {
  /** Issue 10's scenario number and a slug: `1-nfsv3-files`. */
  id: string;
  title: string;
  /** NFS versions the backend ganesha serves; 3 needs rpcbind. */
  backendProtocols: readonly NfsVersion[];
  /** `running`: rpcbind on port 111 (lock held); `absent`: lock held and none started. */
  rpcbind: 'running' | 'absent' | 'unused';
  /** Capture the target's ports (plus port 111 when rpcbind is involved) from before the first client. */
  capture?: boolean;
  /** The backend grants NFSv4 delegations. */
  backendDelegations?: boolean;
  /**
   * The backend's storage: `VFS` (default, a session directory) or `GLUSTER` (a one-brick volume started
   * for the test, harness/gluster.ts: the FSAL that really grants delegations).
   */
  backendFsal?: 'VFS' | 'GLUSTER';
  run(ctx: ScenarioContext): Promise<void>;
}

/** How many times a capturing scenario runs when its capture keeps missing packets. */
const CAPTURE_ATTEMPTS = 3;

/**
 * Runs the scenario; one that captures runs inside `t.try`, so that when its capture turns out unusable
 * (`CaptureUnusableError`: it lost packets, or Wireshark could not dissect what it holds; the peers did
 * nothing wrong) the attempt — its
 * processes, ports and lock released by its own teardowns — is discarded and the traffic repeated from
 * scratch with a fresh capture. Any other failure, or the last incomplete capture, is committed as is.
 */
export async function runScenario(t: ExecutionContext, scenario: Scenario, target: Target): Promise<void> {
  if (!scenario.capture) return runScenarioOnce(t, scenario, target);
  for (let attempt = 1; ; attempt++) {
    let incomplete: CaptureUnusableError | undefined;
    const result = await t.try(async (tt) => {
      try {
        await runScenarioOnce(tt, scenario, target);
      } catch (err) {
        if (err instanceof CaptureUnusableError) incomplete = err;
        throw err;
      }
    });
    if (incomplete !== undefined && attempt < CAPTURE_ATTEMPTS) {
      t.log(
        `attempt ${attempt} discarded: ${incomplete.message}; repeating the traffic with a fresh capture`,
      );
      result.discard();
      continue;
    }
    result.commit();
    return;
  }
}

/** Sets up rpcbind, the backend ganesha, the target and the capture, then runs the scenario once. */
async function runScenarioOnce(t: ExecutionContext, scenario: Scenario, target: Target): Promise<void> {
  const session = InteropSession.open(t);
  let port111Silent: boolean | undefined;
  if (scenario.rpcbind === 'running') await useRpcbind(session);
  else if (scenario.rpcbind === 'absent') port111Silent = await withoutRpcbind(session);
  const fsal: GaneshaFsal =
    scenario.backendFsal === 'GLUSTER'
      ? { name: 'GLUSTER', gluster: await startGlusterVolume(session) }
      : { name: 'VFS' };
  const backend = await startGanesha(session, {
    protocols: scenario.backendProtocols,
    name: 'ganesha-backend',
    delegations: scenario.backendDelegations,
    fsal,
  });
  let capture: Capture | undefined;
  const link = await target.build(session, backend, {
    async beforeConnect(capturePorts) {
      if (!scenario.capture) return;
      const ports = scenario.rpcbind === 'unused' ? capturePorts : [...capturePorts, RPCBIND_PORT];
      capture = await startCapture(session, `${target.name}-${scenario.id}`, ports);
    },
  });
  await scenario.run({ t, session, target, link, endpoint: link.endpoint, backend, capture, port111Silent });
}
