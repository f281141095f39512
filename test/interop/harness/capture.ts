/**
 * Packet capture of loopback traffic with tshark, for decode checks and for failure diagnostics. The
 * capture must be running before the first connection of interest (Wireshark follows ONC RPC and finds
 * iWARP MPA only from a connection's start), and "tshark printed Capturing on" is not proof: so the
 * harness sends UDP probe datagrams to a port in the filter until one shows up in the file. At the end an
 * end-marker probe is awaited the same way, so every earlier packet has been written before tshark stops.
 */
import { execFile } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePorts } from './ports.js';
import type { ManagedProcess } from './processes.js';
import type { InteropSession } from './session.js';

const PCAP_HEADER = 24;
const PROBE_TIMEOUT_MS = 10_000;

export class Capture {
  private stopped = false;

  constructor(
    readonly path: string,
    readonly probePort: number,
    private readonly proc: ManagedProcess,
  ) {}

  private fileSize(): number {
    try {
      return statSync(this.path).size;
    } catch {
      return 0;
    }
  }

  /** Sends probes until the file grows beyond `size`; rejects if tshark dies or nothing arrives in time. */
  async probeUntilGrown(size: number): Promise<void> {
    const socket = createSocket('udp4');
    const deadline = Date.now() + PROBE_TIMEOUT_MS;
    try {
      while (this.fileSize() <= size) {
        if (!this.proc.running) throw new Error(`tshark exited: ${this.proc.logTails(10)}`);
        if (Date.now() > deadline) throw new Error(`tshark wrote no probe packet in ${PROBE_TIMEOUT_MS} ms`);
        await new Promise<void>((resolve) =>
          socket.send(Buffer.from('rpcrdma-interop-probe'), this.probePort, '127.0.0.1', () => resolve()),
        );
        await sleep(50);
      }
    } finally {
      socket.close();
    }
  }

  /** Waits until everything sent so far is in the file, then stops tshark (idempotent). */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.proc.running) await this.probeUntilGrown(this.fileSize()).catch(() => undefined);
    await this.proc.stop();
  }
}

/**
 * Starts `tshark -i lo` writing a classic pcap file that holds TCP traffic to or from `tcpPorts` (plus the
 * harness's UDP probes), and returns once tshark is really capturing. Teardown stops it; on failure the
 * capture is kept and its path printed.
 */
export async function startCapture(session: InteropSession, name: string, tcpPorts: readonly number[]) {
  const [probePort] = await freePorts(1);
  const path = session.path(`${name}.pcap`);
  const filter = [...tcpPorts.map((p) => `tcp port ${p}`), `udp port ${probePort}`].join(' or ');
  const proc = await session.start({
    name: `tshark-${name}`,
    command: 'tshark',
    // A 64 MiB kernel buffer: loopback segments are up to 64 KiB and the default 2 MiB drops some at full speed.
    args: ['-i', 'lo', '-B', '64', '-f', filter, '-w', path, '-F', 'pcap', '-q'],
    stopSignal: 'SIGINT', // tshark finishes the file and exits on SIGINT
    ready: async () => true,
  });
  const capture = new Capture(path, probePort, proc);
  session.t.teardown(async () => {
    await capture.stop();
    if (session.failed)
      session.report(`capture kept at ${session.keepArtifact(path) ?? `(missing: ${path})`}`);
  });
  await capture.probeUntilGrown(PCAP_HEADER);
  return capture;
}

/**
 * `tshark -r file -Y filter -T fields -e f1 -e f2 ...` → one row per packet, one array of values per field
 * (a field occurring several times in a packet, like RPC in a segment carrying two records, gives several
 * values). Extra arguments (`-o`, `-d`) go before the filter.
 */
export function tsharkFields(
  path: string,
  displayFilter: string,
  fields: readonly string[],
  extraArgs: readonly string[] = [],
): Promise<string[][][]> {
  const args = ['-r', path, ...extraArgs, '-Y', displayFilter, '-T', 'fields', '-E', 'separator=\t'];
  args.push('-E', 'occurrence=a', '-E', 'aggregator=|');
  for (const f of fields) args.push('-e', f);
  return new Promise((resolve, reject) => {
    execFile('tshark', args, { encoding: 'utf8', maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`tshark ${args.join(' ')}: ${stderr || err.message}`));
      const rows = stdout
        .split('\n')
        .filter((l) => l.length > 0)
        .map((l) => l.split('\t').map((v) => (v === '' ? [] : v.split('|'))));
      resolve(rows);
    });
  });
}
