/**
 * Packet capture of loopback traffic with tshark, for decode checks and for failure diagnostics. The
 * capture must be running before the first connection of interest (Wireshark follows ONC RPC and finds
 * iWARP MPA only from a connection's start), and "tshark printed Capturing on" is not proof: so the
 * harness sends UDP probe datagrams to a port in the filter until one shows up in the file. At the end an
 * end-marker probe is awaited the same way, so every earlier packet has been written before tshark stops.
 *
 * A loopback capture can still lose packets when the two cores are saturated (dumpcap not scheduled while
 * the kernel ring fills): the decode checks then see a call without its reply although the client got it.
 * `stopComplete()` tells that case apart — dumpcap's own drop count, and bytes of a TCP stream that no
 * captured segment holds — and throws `CaptureIncompleteError`, which `runScenario` answers by repeating
 * the traffic.
 *
 * Loopback TCP really does lose and retransmit segments under load (a 1 MiB NFS READ reply from ganesha:
 * the receiver's duplicate ACKs, then the retransmission, both in the capture). Such a capture holds every
 * byte, only out of order, so it is complete; Wireshark's `tcp.analysis.lost_segment` flag fires on it all
 * the same, which is why completeness is judged by byte coverage, and why every dissection here runs with
 * `tcp.reassemble_out_of_order` (TSHARK_TCP_PREFS) so the RPC record spanning the hole is reassembled.
 */
import { execFile } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { readFileSync, statSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { freePort } from '../../helpers/ports.js';
import type { ManagedProcess } from './processes.js';
import type { InteropSession } from './session.js';

const PCAP_HEADER = 24;
const PROBE_TIMEOUT_MS = 10_000;

/**
 * The capture cannot judge this run: a fact about the capture or the dissector, not the peers.
 * `runScenario` answers it by repeating the traffic with a fresh capture.
 */
export class CaptureUnusableError extends Error {
  readonly code: string = 'CAPTURE_UNUSABLE';
}

/** A stretch of one direction of a TCP stream that no captured segment holds (relative sequence numbers). */
export interface TcpHole {
  /** Wireshark's `tcp.stream` index. */
  stream: number;
  /** `srcport→dstport` of the direction missing the bytes. */
  direction: string;
  /** First missing relative sequence number. */
  from: number;
  /** One past the last missing one. */
  to: number;
}

function describeHole(h: TcpHole): string {
  return `stream ${h.stream} ${h.direction} bytes ${h.from}–${h.to}`;
}

/** The capture file misses packets that were on the wire: a fact about the capture, not the peers. */
export class CaptureIncompleteError extends CaptureUnusableError {
  override readonly code = 'CAPTURE_INCOMPLETE';
  constructor(
    readonly path: string,
    readonly droppedByKernel: number | undefined,
    readonly holes: readonly TcpHole[],
  ) {
    super(
      `capture ${path} is incomplete: dumpcap reported ${droppedByKernel ?? 'no count of'} packets dropped, ` +
        `${holes.length} stretch(es) of TCP stream bytes are in no captured segment` +
        (holes.length > 0 ? ` (${holes.slice(0, 4).map(describeHole).join('; ')})` : ''),
    );
    this.name = 'CaptureIncompleteError';
  }
}

/**
 * dumpcap ends with "Packets received/dropped on interface 'Loopback: lo': R/D (pcap:P/dumpcap:U/flushed:F/
 * ps_ifdrop:I) (x%)": D counts what the kernel ring, dumpcap and its flush lost; I what the interface lost.
 * `undefined` when the line is absent (dumpcap killed before it could report).
 */
export function droppedFromLog(log: string): number | undefined {
  let dropped: number | undefined;
  const re = /received\/dropped on interface '[^']*': \d+\/(\d+)(?: \([^)]*ps_ifdrop:(\d+)\))?/g;
  for (const m of log.matchAll(re)) dropped = (dropped ?? 0) + Number(m[1]) + Number(m[2] ?? 0);
  return dropped;
}

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
        if (!this.proc.running) throw new Error(`dumpcap exited: ${this.proc.logTails(10)}`);
        if (Date.now() > deadline) throw new Error(`dumpcap wrote no probe packet in ${PROBE_TIMEOUT_MS} ms`);
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

  /**
   * Stops, then throws `CaptureIncompleteError` if packets are missing: dropped by the kernel (dumpcap's
   * count) or bytes of a TCP stream no captured segment holds (`tcpStreamHoles`).
   */
  async stopComplete(): Promise<void> {
    await this.stop();
    let log = '';
    try {
      log = readFileSync(this.proc.spec.logPath, 'utf8');
    } catch {
      // no log: only the file itself can tell
    }
    const dropped = droppedFromLog(log);
    const holes = await tcpStreamHoles(this.path);
    if (dropped === undefined || dropped > 0 || holes.length > 0)
      throw new CaptureIncompleteError(this.path, dropped, holes);
  }
}

/**
 * Starts `dumpcap -i lo` (the capture engine under tshark, without the dissection: less CPU taken from the
 * peers, and its drop count survives the stop signal, which tshark's does not) writing a classic pcap file that holds TCP traffic to or from `tcpPorts` (plus the
 * harness's UDP probes), and returns once tshark is really capturing. Teardown stops it; on failure the
 * capture is kept and its path printed.
 */
export async function startCapture(session: InteropSession, name: string, tcpPorts: readonly number[]) {
  const probePort = await freePort();
  const path = session.path(`${name}.pcap`);
  const filter = [...tcpPorts.map((p) => `tcp port ${p}`), `udp port ${probePort}`].join(' or ');
  const proc = await session.start({
    name: `dumpcap-${name}`,
    command: 'dumpcap',
    // A 256 MiB kernel buffer: loopback segments are up to 64 KiB, the 64 MiB scenarios move 130 MiB in two
    // seconds, and smaller buffers lost segments while the two cores were busy with the peers.
    args: ['-i', 'lo', '-B', '256', '-f', filter, '-w', path, '-P'],
    stopSignal: 'SIGINT', // dumpcap finishes the file, prints its counts and exits on SIGINT
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
 * Wireshark (4.0, Debian 12) reassembles iWARP Send messages keyed by frame, so when one TCP segment holds
 * two Sends only the first reaches the RPC-over-RDMA dissector; the second shows as bare DDP/RDMAP. Which
 * Sends share a segment is up to timing (two messages posted in one turn leave in one write), so a
 * decode check that misses a message in such a frame cannot tell absence from this.
 */
export class CaptureUndissectedError extends CaptureUnusableError {
  override readonly code = 'CAPTURE_UNDISSECTED';
  constructor(
    readonly path: string,
    readonly frames: readonly number[],
  ) {
    super(
      `capture ${path}: Wireshark left RPC-over-RDMA Sends undissected in frame(s) ${frames.join(', ')} ` +
        '(several Sends in one TCP segment)',
    );
    this.name = 'CaptureUndissectedError';
  }
}

/** iWARP RDMAP opcodes of the Send family (RFC 5040 §4.3): Send, Send with Invalidate, with SE, both. */
const SEND_OPCODES = new Set([3, 4, 5, 6]);

/** Frames in which Wireshark dissected fewer RPC-over-RDMA headers than the frame carries Sends. */
export async function undissectedSendFrames(
  path: string,
  extraArgs: readonly string[] = [],
): Promise<number[]> {
  const rows = await tsharkFields(
    path,
    'iwarp_rdma',
    ['frame.number', 'iwarp_rdma.opcode', 'rpcordma.xid'],
    extraArgs,
  );
  const frames: number[] = [];
  for (const [frame, opcodes, xids] of rows) {
    const sends = opcodes.filter((o) => SEND_OPCODES.has(Number(o))).length;
    if (sends > xids.length) frames.push(Number(frame[0]));
  }
  return frames;
}

/**
 * Preferences every dissection of a live capture needs: a segment lost on loopback and retransmitted
 * arrives after the ones that follow it, and without this the RPC record spanning it is never reassembled.
 */
export const TSHARK_TCP_PREFS: readonly string[] = ['-o', 'tcp.reassemble_out_of_order:TRUE'];

/**
 * Every stretch of a TCP stream's sequence space that no captured segment holds, per direction: the gaps
 * between the captured segments (retransmissions and reordering fill them, so only bytes that are in no
 * packet at all count), and the bytes beyond the last captured segment that the other side acknowledged.
 * Sequence numbers are Wireshark's relative ones; SYN and FIN occupy one each (`tcp.nxtseq` counts them).
 */
export async function tcpStreamHoles(path: string): Promise<TcpHole[]> {
  const rows = await tsharkFields(path, 'tcp', [
    'tcp.stream',
    'tcp.srcport',
    'tcp.dstport',
    'tcp.seq',
    'tcp.nxtseq',
    'tcp.ack',
    'tcp.flags.ack',
  ]);
  interface Direction {
    stream: number;
    direction: string;
    ranges: [number, number][];
    /** The highest sequence number the other side acknowledged. */
    acked: number;
  }
  const directions = new Map<string, Direction>();
  const direction = (stream: number, src: string, dst: string): Direction => {
    const key = `${stream}/${src}`;
    let d = directions.get(key);
    if (d === undefined) {
      d = { stream, direction: `${src}→${dst}`, ranges: [], acked: 0 };
      directions.set(key, d);
    }
    return d;
  };
  for (const [stream, src, dst, seq, nxtseq, ack, ackFlag] of rows) {
    if (stream.length === 0 || seq.length === 0) continue; // ICMP-quoted TCP headers and the like
    const s = Number(stream[0]);
    const from = Number(seq[0]);
    const to = Number(nxtseq[0] ?? from);
    if (to > from) direction(s, src[0], dst[0]).ranges.push([from, to]);
    if (ackFlag[0] === '1' || ackFlag[0] === 'True') {
      const back = direction(s, dst[0], src[0]);
      back.acked = Math.max(back.acked, Number(ack[0]));
    }
  }
  const holes: TcpHole[] = [];
  for (const d of directions.values()) {
    d.ranges.sort((a, b) => a[0] - b[0]);
    // The stream starts where the capture first saw it: the SYN when the capture began before it.
    let covered = d.ranges.length > 0 ? d.ranges[0][0] : d.acked;
    for (const [from, to] of d.ranges) {
      if (from > covered) holes.push({ stream: d.stream, direction: d.direction, from: covered, to: from });
      covered = Math.max(covered, to);
    }
    if (d.acked > covered && d.ranges.length > 0)
      holes.push({ stream: d.stream, direction: d.direction, from: covered, to: d.acked });
  }
  return holes;
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
  const args = [
    '-r',
    path,
    ...TSHARK_TCP_PREFS,
    ...extraArgs,
    '-Y',
    displayFilter,
    '-T',
    'fields',
    '-E',
    'separator=\t',
  ];
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
