/**
 * Free loopback ports for one test. Ports are drawn at random below the Linux ephemeral range
 * (32768–60999), so they never collide with the source ports of outgoing connections, and each one is
 * checked by binding it. Another process can still take a port between the check and the daemon's bind:
 * starters retry with fresh ports when a daemon reports the address in use. Ports that Wireshark dissects
 * by number are skipped too (`portsWiresharkClaims`).
 */
import { spawnSync } from 'node:child_process';
import { connect, createServer } from 'node:net';

const LOW = 20000;
const HIGH = 32000;
const handedOut = new Set<number>();

function canBind(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve(true)));
  });
}

let wiresharkPorts: Set<number> | undefined;

/**
 * The TCP ports Wireshark dissects by number (`tshark -G decodes`; empty without tshark). A daemon on one
 * of them is decoded as that protocol, and heuristic dissectors never see its stream: MPA's is
 * heuristic only, so an RDMA link drawn on 29418 (Gerrit's SSH to Wireshark) lost its MPA start-up
 * frames in a capture's decode.
 */
export function portsWiresharkClaims(): ReadonlySet<number> {
  if (wiresharkPorts === undefined) {
    wiresharkPorts = new Set();
    const r = spawnSync('tshark', ['-G', 'decodes'], { encoding: 'utf8', maxBuffer: 16 << 20 });
    if (r.status === 0) {
      for (const line of r.stdout.split('\n')) {
        const [table, value] = line.split('\t');
        if (table === 'tcp.port') wiresharkPorts.add(Number(value));
      }
    }
  }
  return wiresharkPorts;
}

/** `count` distinct ports that were free on `host` a moment ago and not handed out before in this worker. */
export async function freePorts(count: number, host = '127.0.0.1'): Promise<number[]> {
  const ports: number[] = [];
  for (let attempt = 0; ports.length < count; attempt++) {
    if (attempt > 200) throw new Error(`no free loopback port found in ${LOW}-${HIGH} after 200 attempts`);
    const port = LOW + Math.floor(Math.random() * (HIGH - LOW));
    if (handedOut.has(port) || ports.includes(port) || portsWiresharkClaims().has(port)) continue;
    if (await canBind(port, host)) ports.push(port);
  }
  for (const p of ports) handedOut.add(p);
  return ports;
}

/** One port as `freePorts` draws it: for a peer that listens later, or a target that must refuse. */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const [port] = await freePorts(1, host);
  return port;
}

/** True when something accepts TCP connections on host:port. */
export function isListening(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ port, host });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
