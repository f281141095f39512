/**
 * What tshark sees of NFS traffic in a capture, reduced to a comparable summary: RPC calls and replies
 * paired by xid, procedures by name, bytes moved by NFSv3 WRITE/READ and NFSv4 READ, and any portmapper
 * traffic. The direct (client → ganesha) summary is the baseline the gateway chain's capture is compared
 * to: same procedures, every call answered once, same byte counts.
 */
import { tsharkFields } from './capture.js';

const FIELDS = [
  'tcp.srcport',
  'tcp.dstport',
  'rpc.xid',
  'rpc.msgtyp',
  'rpc.program',
  'rpc.procedure',
  'nfs.opcode',
  'nfs.count3',
  'nfs.read.data_length',
] as const;

/** NFSv3 procedures (RFC 1813 §3.3). */
// biome-ignore format: a table reads better packed
const NFS3_PROCS = [
  'NULL', 'GETATTR', 'SETATTR', 'LOOKUP', 'ACCESS', 'READLINK', 'READ', 'WRITE', 'CREATE', 'MKDIR', 'SYMLINK',
  'MKNOD', 'REMOVE', 'RMDIR', 'RENAME', 'LINK', 'READDIR', 'READDIRPLUS', 'FSSTAT', 'FSINFO', 'PATHCONF', 'COMMIT',
];
/** MOUNT v3 procedures (RFC 1813 §5.2). */
const MOUNT3_PROCS = ['NULL', 'MNT', 'DUMP', 'UMNT', 'UMNTALL', 'EXPORT'];
/** NFSv4 operations worth naming (RFC 7530 §16, RFC 8881 §18); others show as OP<n>. */
// biome-ignore format: a table reads better packed
const NFS4_OPS: Record<number, string> = {
  3: 'ACCESS', 4: 'CLOSE', 9: 'GETATTR', 10: 'GETFH', 15: 'LOOKUP', 18: 'OPEN', 20: 'OPEN_CONFIRM',
  22: 'PUTFH', 24: 'PUTROOTFH', 25: 'READ', 26: 'READDIR', 35: 'SETCLIENTID', 36: 'SETCLIENTID_CONFIRM',
  38: 'WRITE', 42: 'EXCHANGE_ID', 43: 'CREATE_SESSION', 44: 'DESTROY_SESSION', 53: 'SEQUENCE',
};

/** tshark options for captures whose client ports are arbitrary (and sometimes privileged). */
export const HEURISTICS_FIRST: readonly string[] = ['-o', 'tcp.try_heuristic_first:TRUE'];

const PROGRAMS: Record<number, string> = { 100000: 'PORTMAP', 100003: 'NFS', 100005: 'MOUNT' };

export interface NfsTrafficSummary {
  calls: number;
  replies: number;
  /** Calls with no reply in the capture, and replies to no captured call (xids, hex). */
  unanswered: string[];
  unsolicited: string[];
  /** Calls per procedure: `MOUNT.MNT`, `NFS3.WRITE`, `NFS4.COMPOUND(PUTFH,READ)`, `PORTMAP.GETADDR`... */
  procedures: Record<string, number>;
  /** Sum of `count` in NFSv3 WRITE calls and of data lengths in NFSv3/NFSv4 READ replies. */
  v3WriteBytes: number;
  readBytes: number;
  /** Every xid seen in a call, in capture order. */
  callXids: string[];
}

const num = (values: string[] | undefined, i = 0): number => Number(values?.[i] ?? Number.NaN);
const sum = (values: string[] | undefined): number => (values ?? []).reduce((a, v) => a + Number(v), 0);

function procedureName(program: number, version: number, proc: number, ops: string[]): string {
  const prog = PROGRAMS[program] ?? String(program);
  if (program === 100003 && version === 3) return `NFS3.${NFS3_PROCS[proc] ?? proc}`;
  if (program === 100003 && version === 4) {
    if (proc === 0) return 'NFS4.NULL';
    return `NFS4.COMPOUND(${ops.map((o) => NFS4_OPS[Number(o)] ?? `OP${o}`).join(',')})`;
  }
  if (program === 100005) return `MOUNT.${MOUNT3_PROCS[proc] ?? proc}`;
  return `${prog}.v${version}.${proc}`;
}

/**
 * Summarises the ONC RPC traffic in `pcap`. A TCP segment may carry several RPC records, so every field is
 * read with all its occurrences and records are walked in parallel within a packet.
 */
export async function summariseNfsCapture(pcap: string): Promise<NfsTrafficSummary> {
  // libnfs run as root binds privileged source ports (e.g. 547, 564), which Wireshark would hand to the
  // dissector registered there (DHCPv6 bulk leasequery...) before RPC: let heuristics (RPC's) go first.
  const rows = await tsharkFields(pcap, 'rpc', [...FIELDS, 'rpc.programversion'], HEURISTICS_FIRST);
  /** Calls awaiting their reply: xid → procedure name. */
  const pending = new Map<string, string>();
  const s: NfsTrafficSummary = {
    calls: 0,
    replies: 0,
    unanswered: [],
    unsolicited: [],
    procedures: {},
    v3WriteBytes: 0,
    readBytes: 0,
    callXids: [],
  };
  for (const row of rows) {
    const [, , xids, types, programs, procs, ops, count3, readLen, versions] = row;
    // Byte counts are read only from packets holding one RPC record: several records in one segment would
    // interleave their fields.
    const single = xids.length === 1;
    for (let i = 0; i < xids.length; i++) {
      const xid = xids[i];
      if (types[i] === '0') {
        // rpc.programversion occurs twice per call (header and program tree): take the record's first.
        const version = num(versions, versions.length === xids.length ? i : i * 2);
        const name = procedureName(num(programs, i), version, num(procs, i), single ? ops : []);
        s.calls++;
        s.callXids.push(xid);
        pending.set(xid, name);
        s.procedures[name] = (s.procedures[name] ?? 0) + 1;
        if (name === 'NFS3.WRITE' && single) s.v3WriteBytes += num(count3); // WRITE3args.count
      } else {
        s.replies++;
        const call = pending.get(xid);
        if (call === undefined) s.unsolicited.push(xid);
        pending.delete(xid);
        if (!single) continue;
        if (call === 'NFS3.READ')
          s.readBytes += num(count3); // READ3resok.count
        else if (call?.startsWith('NFS4.COMPOUND(')) s.readBytes += sum(readLen); // READ4resok data length
      }
    }
  }
  s.unanswered = [...pending.keys()];
  return s;
}
