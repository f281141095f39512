/**
 * The ONC RPC programs the gateway knows by name: what a route in the configuration may call them, and the
 * versions the portmapper advertises for them (DUMP) when a route does not name a version. Numbers are the
 * IANA assignments (RFC 5531 §7.3; rpc(5)); the test program is the project's own (docs/test-program.md).
 */
import { TEST_PROGRAM, TEST_VERSION } from '../test-program/constants.js';

export interface KnownProgram {
  /** The name routes use (the first one `rpcinfo` prints). */
  name: string;
  /** Other names accepted in the configuration (rpc(5) aliases). */
  aliases: readonly string[];
  program: number;
  /** Versions advertised when the route does not restrict the version. */
  versions: readonly number[];
}

export const PORTMAP_PROGRAM = 100000;
export const NFS_PROGRAM = 100003;
export const MOUNT_PROGRAM = 100005;
export const NLM_PROGRAM = 100021;
export const NSM_PROGRAM = 100024;
export const RQUOTA_PROGRAM = 100011;
export const NFS_ACL_PROGRAM = 100227;

export const KNOWN_PROGRAMS: readonly KnownProgram[] = [
  {
    name: 'portmapper',
    aliases: ['portmap', 'rpcbind', 'sunrpc'],
    program: PORTMAP_PROGRAM,
    versions: [2, 3, 4],
  },
  { name: 'nfs', aliases: ['nfsprog'], program: NFS_PROGRAM, versions: [3, 4] },
  { name: 'mountd', aliases: ['mount', 'mountprog'], program: MOUNT_PROGRAM, versions: [1, 3] },
  { name: 'nlockmgr', aliases: ['nlm'], program: NLM_PROGRAM, versions: [1, 3, 4] },
  { name: 'status', aliases: ['nsm', 'statd'], program: NSM_PROGRAM, versions: [1] },
  { name: 'rquotad', aliases: ['rquota'], program: RQUOTA_PROGRAM, versions: [1, 2] },
  { name: 'nfs_acl', aliases: ['nfsacl'], program: NFS_ACL_PROGRAM, versions: [3] },
  { name: 'test', aliases: ['test-program', 'gwt'], program: TEST_PROGRAM, versions: [TEST_VERSION] },
];

const BY_NAME = new Map<string, KnownProgram>();
const BY_NUMBER = new Map<number, KnownProgram>();
for (const p of KNOWN_PROGRAMS) {
  BY_NUMBER.set(p.program, p);
  BY_NAME.set(p.name, p);
  for (const a of p.aliases) BY_NAME.set(a, p);
}

/** Every name a route may use (for "did you mean"). */
export function programNames(): string[] {
  return [...BY_NAME.keys()];
}

export function programByName(name: string): KnownProgram | undefined {
  return BY_NAME.get(name.toLowerCase());
}

export function programByNumber(program: number): KnownProgram | undefined {
  return BY_NUMBER.get(program);
}

/** `nfs`, or the number in decimal for a program the gateway has no name for. */
export function programName(program: number): string {
  return BY_NUMBER.get(program)?.name ?? String(program);
}
