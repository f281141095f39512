/**
 * Two "hosts" on one machine for the drop-in test (issue 14): network namespaces made with `ip netns add`,
 * joined by a veth pair with addresses of the test's own (10.213.14.0/30, which exist only inside these
 * namespaces), so that the NFS server's rpcbind and the gateway's portmapper each own port 111 on their
 * own host, as on two machines.
 *
 * Each namespace has a *holder*: `ip netns exec NS sh -c 'mount -t tmpfs tmpfs /run; exec sleep'`. `ip netns
 * exec` gives it a mount namespace of its own whose mounts do not propagate back (it makes `/` a slave), so
 * the tmpfs on /run is private to it: rpcbind's /run/rpcbind.sock and ganesha's registration through it stay
 * on that host. Daemons join the holder's network and mount namespaces with `nsenter -t HOLDER -m -n`
 * (nsenter execs: the daemon keeps its own process group); short-lived clients join only the network
 * namespace (`nsenter --net=/run/netns/NS`). Nothing is mounted outside the holder's namespace, so nothing
 * can leak: the tmpfs goes with the last process of that mount namespace.
 *
 * Teardown: the namespaces are deleted by a teardown registered before any process starts (so it runs
 * after all of them are stopped), by an exit-time safety net if the worker dies, and at the next start
 * (namespaces named after a worker PID that is gone).
 */
import { execFile, execFileSync } from 'node:child_process';
import { type ManagedProcess, pidAlive } from './processes.js';
import type { InteropSession } from './session.js';

const PREFIX = 'rgwdi';

export interface NetnsHost {
  /** `ip netns` name. */
  name: string;
  /** Its end of the veth pair. */
  address: string;
  /** The holder process (its PID names the namespaces for `nsenter -t`). */
  holder: ManagedProcess;
}

export interface NetnsPair {
  server: NetnsHost;
  gateway: NetnsHost;
}

/** Namespaces of this worker still to delete if it exits abruptly. */
const liveNamespaces = new Set<string>();
let safetyNetInstalled = false;

function deleteNamespace(name: string): void {
  try {
    execFileSync('ip', ['netns', 'del', name], { stdio: 'ignore' });
  } catch {
    // Already gone.
  }
  liveNamespaces.delete(name);
}

/** Our namespaces whose worker died before deleting them. */
function reclaimStale(): void {
  let list = '';
  try {
    list = execFileSync('ip', ['netns', 'list'], { encoding: 'utf8' });
  } catch {
    return;
  }
  for (const line of list.split('\n')) {
    const m = new RegExp(`^(${PREFIX}-(\\d+)-[\\w-]+)`).exec(line);
    if (m && Number(m[2]) !== process.pid && !pidAlive(Number(m[2]))) deleteNamespace(m[1]);
  }
}

function ip(args: readonly string[]): void {
  execFileSync('ip', args, { stdio: ['ignore', 'ignore', 'pipe'] });
}

let pairCounter = 0;

/**
 * Creates the server and gateway namespaces, the veth pair between them (`10.213.14.1/30` server,
 * `.2/30` gateway, loopback up in both) and their holders; registers their removal with the session.
 */
export async function createNetnsPair(session: InteropSession): Promise<NetnsPair> {
  reclaimStale();
  if (!safetyNetInstalled) {
    safetyNetInstalled = true;
    const deleteAll = () => {
      for (const n of [...liveNamespaces]) deleteNamespace(n);
    };
    process.on('exit', deleteAll);
    // A worker killed by a signal emits no 'exit': run before processes.ts's handler re-raises the signal.
    for (const sig of ['SIGINT', 'SIGTERM'] as const) process.prependOnceListener(sig, deleteAll);
  }
  const tag = `${PREFIX}-${process.pid}-${++pairCounter}`;
  const names = { server: `${tag}-srv`, gateway: `${tag}-gw` };
  const addresses = { server: '10.213.14.1', gateway: '10.213.14.2' };
  // Registered first, so it runs last: after every process of the test (holders included) has stopped.
  session.t.teardown(() => {
    deleteNamespace(names.server);
    deleteNamespace(names.gateway);
  });
  for (const n of [names.server, names.gateway]) {
    ip(['netns', 'add', n]);
    liveNamespaces.add(n);
    ip(['-n', n, 'link', 'set', 'lo', 'up']);
  }
  // Interface names are per namespace, so fixed ones cannot collide with another test's.
  ip([
    'link',
    'add',
    'name',
    'eth-srv',
    'netns',
    names.server,
    'type',
    'veth',
    'peer',
    'name',
    'eth-gw',
    'netns',
    names.gateway,
  ]);
  ip(['-n', names.server, 'addr', 'add', `${addresses.server}/30`, 'dev', 'eth-srv']);
  ip(['-n', names.gateway, 'addr', 'add', `${addresses.gateway}/30`, 'dev', 'eth-gw']);
  ip(['-n', names.server, 'link', 'set', 'eth-srv', 'up']);
  ip(['-n', names.gateway, 'link', 'set', 'eth-gw', 'up']);
  const server = await startHolder(session, names.server, addresses.server);
  const gateway = await startHolder(session, names.gateway, addresses.gateway);
  return { server, gateway };
}

async function startHolder(session: InteropSession, name: string, address: string): Promise<NetnsHost> {
  const marker = session.path(`${name}.holder-ready`);
  const holder = await session.start({
    name: `holder-${name.endsWith('srv') ? 'srv' : 'gw'}`,
    command: 'ip',
    args: [
      'netns',
      'exec',
      name,
      'sh',
      '-c',
      // The marker is written from inside, after the mount: then the namespace is ready to be entered.
      `mount -t tmpfs -o mode=0755 tmpfs /run && : > '${marker}' && exec sleep 3600`,
    ],
    stopSignal: 'SIGKILL',
    ready: async () => {
      try {
        execFileSync('test', ['-e', marker]);
        return true;
      } catch {
        return false;
      }
    },
    readyTimeoutMs: 5000,
  });
  return { name, address, holder };
}

/** `nsenter` arguments running `command` in the host's network and mount namespaces (daemons). */
export function inHost(
  host: NetnsHost,
  command: string,
  args: readonly string[],
): { command: string; args: string[] } {
  return { command: 'nsenter', args: ['-t', String(host.holder.pid), '-m', '-n', '--', command, ...args] };
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs a client in the host's network namespace under coreutils `timeout` (SIGTERM, SIGKILL 2 s later)
 * and resolves with its exit code and output (never rejects on a non-zero exit).
 */
export function runIn(
  host: NetnsHost,
  command: string,
  args: readonly string[],
  timeoutS = 30,
): Promise<RunResult> {
  const full = [
    `--net=/run/netns/${host.name}`,
    '--',
    'timeout',
    '-k',
    '2',
    String(timeoutS),
    command,
    ...args,
  ];
  return new Promise((resolve) => {
    execFile('nsenter', full, { encoding: 'utf8', maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : null) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

/** True when RPC program `program` version `version` answers NULL over TCP at host:port, seen from `from`. */
export async function answersNullIn(
  from: NetnsHost,
  address: string,
  port: number,
  program: number,
  version: number,
): Promise<boolean> {
  const r = await runIn(
    from,
    'rpcinfo',
    ['-n', String(port), '-t', address, String(program), String(version)],
    5,
  );
  return r.code === 0;
}
