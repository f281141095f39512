/**
 * A small writer of classic libpcap files holding synthetic TCP streams between two IPv4 endpoints, so a
 * test can hand bytes to tshark exactly as a capture would show them: Ethernet (zero MACs, like a Linux
 * loopback capture), IPv4 with a valid header checksum, TCP with real sequence/acknowledgement numbers
 * and checksum, starting with the three-way handshake so Wireshark tracks the stream (and runs
 * heuristics such as iWARP MPA detection) from its first byte.
 *
 * Usage:
 * ```ts
 * const cap = new PcapWriter();
 * const s = cap.tcpStream({ ip: '127.0.0.1', port: 40000 }, { ip: '127.0.0.1', port: 20049 });
 * s.send('client', bytes); s.send('server', reply); s.close();
 * writeFileSync(path, cap.toBuffer());
 * ```
 */

/** LINKTYPE_ETHERNET. */
const LINKTYPE_ETHERNET = 1;
const ETH_HEADER = 14;
const IP_HEADER = 20;
const TCP_HEADER = 20;

const TCP_FIN = 0x01;
const TCP_SYN = 0x02;
const TCP_PSH = 0x08;
const TCP_ACK = 0x10;

export interface Endpoint {
  /** Dotted IPv4 address, e.g. 127.0.0.1. */
  ip: string;
  port: number;
}

function ipv4Bytes(ip: string): number[] {
  const parts = ip.split('.').map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) {
    throw new Error(`not an IPv4 address: ${ip}`);
  }
  return parts;
}

/** RFC 1071 Internet checksum over `bufs` (concatenated), starting from `initial`. */
function inetChecksum(bufs: readonly Uint8Array[], initial = 0): number {
  let sum = initial;
  let odd = -1;
  for (const b of bufs) {
    for (let i = 0; i < b.length; i++) {
      if (odd < 0) odd = b[i];
      else {
        sum += (odd << 8) | b[i];
        odd = -1;
      }
    }
  }
  if (odd >= 0) sum += odd << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return ~sum & 0xffff;
}

interface Packet {
  timeMicros: bigint;
  data: Buffer;
}

/** A pcap file being assembled in memory. */
export class PcapWriter {
  private readonly packets: Packet[] = [];
  private clockMicros: bigint;
  private ipId = 1;

  /** `startSeconds`: capture time of the first packet (fixed by default so files are reproducible). */
  constructor(startSeconds = 1_700_000_000) {
    this.clockMicros = BigInt(startSeconds) * 1_000_000n;
  }

  /** Starts a TCP connection from `client` to `server` (writes the handshake). */
  tcpStream(client: Endpoint, server: Endpoint, options: { mss?: number } = {}): TcpStream {
    return new TcpStream(this, client, server, options.mss ?? 16_384);
  }

  /** @internal Appends one Ethernet/IPv4/TCP frame. */
  addTcp(src: Endpoint, dst: Endpoint, seq: number, ack: number, flags: number, payload: Uint8Array): void {
    const total = ETH_HEADER + IP_HEADER + TCP_HEADER + payload.length;
    const f = Buffer.alloc(total);
    // Ethernet: zero MACs, EtherType IPv4.
    f.writeUInt16BE(0x0800, 12);
    const ip = ETH_HEADER;
    f[ip] = 0x45;
    f.writeUInt16BE(IP_HEADER + TCP_HEADER + payload.length, ip + 2);
    f.writeUInt16BE(this.ipId++ & 0xffff, ip + 4);
    f.writeUInt16BE(0x4000, ip + 6); // DF
    f[ip + 8] = 64;
    f[ip + 9] = 6; // TCP
    f.set(ipv4Bytes(src.ip), ip + 12);
    f.set(ipv4Bytes(dst.ip), ip + 16);
    f.writeUInt16BE(inetChecksum([f.subarray(ip, ip + IP_HEADER)]), ip + 10);
    const tcp = ip + IP_HEADER;
    f.writeUInt16BE(src.port, tcp);
    f.writeUInt16BE(dst.port, tcp + 2);
    f.writeUInt32BE(seq >>> 0, tcp + 4);
    f.writeUInt32BE(ack >>> 0, tcp + 8);
    f[tcp + 12] = (TCP_HEADER / 4) << 4;
    f[tcp + 13] = flags;
    f.writeUInt16BE(65_535, tcp + 14);
    f.set(payload, tcp + TCP_HEADER);
    const pseudo = Buffer.alloc(12);
    pseudo.set(ipv4Bytes(src.ip), 0);
    pseudo.set(ipv4Bytes(dst.ip), 4);
    pseudo[9] = 6;
    pseudo.writeUInt16BE(TCP_HEADER + payload.length, 10);
    f.writeUInt16BE(inetChecksum([pseudo, f.subarray(tcp)]), tcp + 16);
    this.packets.push({ timeMicros: this.clockMicros, data: f });
    this.clockMicros += 1000n;
  }

  /** The complete file: global header (microsecond timestamps, snaplen 262144) and every packet. */
  toBuffer(): Buffer {
    const head = Buffer.alloc(24);
    head.writeUInt32LE(0xa1b2c3d4, 0);
    head.writeUInt16LE(2, 4);
    head.writeUInt16LE(4, 6);
    head.writeUInt32LE(262_144, 16);
    head.writeUInt32LE(LINKTYPE_ETHERNET, 20);
    const parts: Buffer[] = [head];
    for (const p of this.packets) {
      const rec = Buffer.alloc(16);
      rec.writeUInt32LE(Number(p.timeMicros / 1_000_000n), 0);
      rec.writeUInt32LE(Number(p.timeMicros % 1_000_000n), 4);
      rec.writeUInt32LE(p.data.length, 8);
      rec.writeUInt32LE(p.data.length, 12);
      parts.push(rec, p.data);
    }
    return Buffer.concat(parts);
  }

  get packetCount(): number {
    return this.packets.length;
  }
}

/** One TCP connection inside a `PcapWriter`; tracks both directions' sequence numbers. */
export class TcpStream {
  private clientSeq: number;
  private serverSeq: number;
  private closed = false;

  constructor(
    private readonly cap: PcapWriter,
    readonly client: Endpoint,
    readonly server: Endpoint,
    private readonly mss: number,
  ) {
    const clientIsn = 0x1000_0000;
    const serverIsn = 0x2000_0000;
    cap.addTcp(client, server, clientIsn, 0, TCP_SYN, Buffer.alloc(0));
    cap.addTcp(server, client, serverIsn, clientIsn + 1, TCP_SYN | TCP_ACK, Buffer.alloc(0));
    this.clientSeq = clientIsn + 1;
    this.serverSeq = serverIsn + 1;
    cap.addTcp(client, server, this.clientSeq, this.serverSeq, TCP_ACK, Buffer.alloc(0));
  }

  /** Sends `data` from one side, split into segments of at most `mss` bytes, each acknowledged. */
  send(from: 'client' | 'server', data: Uint8Array): void {
    if (this.closed) throw new Error('stream already closed');
    for (let at = 0; at < data.length; at += this.mss) {
      const chunk = data.subarray(at, Math.min(data.length, at + this.mss));
      if (from === 'client') {
        this.cap.addTcp(this.client, this.server, this.clientSeq, this.serverSeq, TCP_PSH | TCP_ACK, chunk);
        this.clientSeq = (this.clientSeq + chunk.length) >>> 0;
        this.cap.addTcp(this.server, this.client, this.serverSeq, this.clientSeq, TCP_ACK, Buffer.alloc(0));
      } else {
        this.cap.addTcp(this.server, this.client, this.serverSeq, this.clientSeq, TCP_PSH | TCP_ACK, chunk);
        this.serverSeq = (this.serverSeq + chunk.length) >>> 0;
        this.cap.addTcp(this.client, this.server, this.clientSeq, this.serverSeq, TCP_ACK, Buffer.alloc(0));
      }
    }
  }

  /** Orderly close: FIN from the client, FIN from the server, final ACK. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    const { client, server } = this;
    this.cap.addTcp(client, server, this.clientSeq, this.serverSeq, TCP_FIN | TCP_ACK, Buffer.alloc(0));
    this.clientSeq = (this.clientSeq + 1) >>> 0;
    this.cap.addTcp(server, client, this.serverSeq, this.clientSeq, TCP_FIN | TCP_ACK, Buffer.alloc(0));
    this.serverSeq = (this.serverSeq + 1) >>> 0;
    this.cap.addTcp(client, server, this.clientSeq, this.serverSeq, TCP_ACK, Buffer.alloc(0));
  }
}
