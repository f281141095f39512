/**
 * Who may connect to the TCP frontend: an allow-list of client networks (CIDR, IPv4 and IPv6) and the NFS
 * `secure` convention — a source port below 1024 (IPPORT_RESERVED), which on most systems only root can
 * bind, as Linux nfsd requires by default (exports(5) `secure`) and AUTH_SYS trust historically assumed.
 *
 * The check runs once per accepted socket, before any state is allocated for it, on the addresses the
 * kernel reports; it is a filter against stray and misrouted clients, not an authentication (addresses
 * can be spoofed off-path only with great difficulty on TCP, but any local root can pick a low port).
 *
 * Matching uses `net.BlockList` (native, one lookup per rule family). A client of an IPv4 network that
 * reaches a dual-stack IPv6 listener appears as `::ffff:a.b.c.d` (RFC 4291 §2.5.5.2); it is matched as the
 * IPv4 address it is, so an IPv4 rule admits it whichever listener it came through.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net';
import { UsageError } from '../common/errors.js';

/** RFC 6335 / BSD `IPPORT_RESERVED`: ports below it are privileged. */
export const PRIVILEGED_PORT_LIMIT = 1024;

export interface AccessPolicy {
  /**
   * Client networks allowed to connect (`10.0.0.0/8`, `2001:db8::/32`, or a bare address for one host).
   * Empty or absent: every address is allowed.
   */
  allow?: readonly string[];
  /** Refuse clients whose source port is not privileged (< 1024): the NFS `secure` export option. */
  requirePrivilegedPort?: boolean;
}

/** One parsed rule, kept in the form the operator wrote for logs. */
export interface CidrRule {
  text: string;
  address: string;
  prefix: number;
  family: 'ipv4' | 'ipv6';
}

/** Why an accepted socket is turned away; `code` is counted in `FrontendStats.errors`. */
export interface AccessDenial {
  code: 'REFUSED_NOT_ALLOWED' | 'REFUSED_INSECURE_PORT';
  message: string;
  details: Record<string, unknown>;
}

const MAPPED_V4 = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i;

/**
 * Parses `ADDRESS/PREFIX` or a bare address (a host: /32 or /128). Throws `UsageError` ERR_ACCESS_CIDR
 * naming the text; host bits set below the prefix are refused (`10.1.2.3/8` is almost always a typo for a
 * host rule, and silently widening it would admit a whole network).
 */
export function parseCidr(text: string): CidrRule {
  const s = text.trim();
  const slash = s.indexOf('/');
  const address = slash < 0 ? s : s.slice(0, slash);
  const family = isIPv4(address) ? 'ipv4' : isIPv6(address) ? 'ipv6' : undefined;
  const fail = (why: string) =>
    new UsageError('ERR_ACCESS_CIDR', `client network '${text}': ${why}`, { text, reason: why });
  if (family === undefined) throw fail('not an IPv4 or IPv6 address');
  const bits = family === 'ipv4' ? 32 : 128;
  let prefix = bits;
  if (slash >= 0) {
    const p = s.slice(slash + 1);
    prefix = /^\d{1,3}$/.test(p) ? Number(p) : Number.NaN;
    if (!(prefix >= 0 && prefix <= bits)) throw fail(`prefix length must be 0..${bits}`);
  }
  if (hostBitsSet(address, family, prefix)) {
    throw fail(`address has bits set beyond the /${prefix} prefix`);
  }
  return { text: s, address, prefix, family };
}

function hostBitsSet(address: string, family: 'ipv4' | 'ipv6', prefix: number): boolean {
  if (prefix === (family === 'ipv4' ? 32 : 128)) return false;
  // Compare through a BlockList so that equal addresses written differently (`::1` and `0:0::1`) match.
  const exact = new BlockList();
  exact.addAddress(address, family);
  return !exact.check(networkAddress(address, family, prefix), family);
}

/** `address` with the bits below `/prefix` cleared (runs only while parsing the configuration). */
function networkAddress(address: string, family: 'ipv4' | 'ipv6', prefix: number): string {
  if (family === 'ipv4') {
    const parts = address.split('.').map(Number);
    let v = ((parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]) >>> 0;
    v = prefix === 0 ? 0 : (v & (0xffff_ffff << (32 - prefix))) >>> 0;
    return [v >>> 24, (v >>> 16) & 0xff, (v >>> 8) & 0xff, v & 0xff].join('.');
  }
  const groups = expandIpv6(address);
  const out: number[] = [];
  for (let g = 0; g < 8; g++) {
    const keep = Math.max(0, Math.min(16, prefix - g * 16));
    out.push(keep === 0 ? 0 : groups[g] & ((0xffff << (16 - keep)) & 0xffff));
  }
  return out.map((x) => x.toString(16)).join(':');
}

/** The eight 16-bit groups of an IPv6 literal (already validated by `isIPv6`), embedded IPv4 included. */
function expandIpv6(address: string): number[] {
  let s = address;
  const v4 = /(\d+\.\d+\.\d+\.\d+)$/.exec(s);
  if (v4) {
    const p = v4[1].split('.').map(Number);
    s = `${s.slice(0, v4.index)}${((p[0] << 8) | p[1]).toString(16)}:${((p[2] << 8) | p[3]).toString(16)}`;
  }
  const [head, tail] = s.includes('::') ? s.split('::') : [s, undefined];
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const zeros = tail === undefined ? [] : Array(8 - h.length - t.length).fill('0');
  return [...h, ...zeros, ...t].map((x) => Number.parseInt(x, 16));
}

/** Parses every entry of a list; the first bad one throws (ERR_ACCESS_CIDR). */
export function parseCidrList(list: readonly string[]): CidrRule[] {
  return list.filter((s) => s.trim() !== '').map(parseCidr);
}

/** The access filter of one frontend server; `check` is called for every accepted socket. */
export class ClientAccess {
  readonly rules: readonly CidrRule[];
  readonly requirePrivilegedPort: boolean;
  private readonly allowList: BlockList | undefined;

  constructor(policy: AccessPolicy = {}) {
    this.rules = parseCidrList(policy.allow ?? []);
    this.requirePrivilegedPort = policy.requirePrivilegedPort ?? false;
    if (this.rules.length > 0) {
      const list = new BlockList();
      for (const r of this.rules) list.addSubnet(r.address, r.prefix, r.family);
      this.allowList = list;
    }
  }

  /** True when the policy admits everyone (no rule, no port requirement): the server skips the check. */
  get open(): boolean {
    return this.allowList === undefined && !this.requirePrivilegedPort;
  }

  /** Undefined when the client may connect, else why not. */
  check(remoteAddress: string, remotePort: number): AccessDenial | undefined {
    if (this.allowList !== undefined && !this.allowed(remoteAddress)) {
      return {
        code: 'REFUSED_NOT_ALLOWED',
        message: `client address ${remoteAddress} is not in an allowed network`,
        details: { remoteAddress, allow: this.rules.map((r) => r.text) },
      };
    }
    if (this.requirePrivilegedPort && !(remotePort > 0 && remotePort < PRIVILEGED_PORT_LIMIT)) {
      return {
        code: 'REFUSED_INSECURE_PORT',
        message: `client source port ${remotePort} is not privileged (< ${PRIVILEGED_PORT_LIMIT})`,
        details: { remoteAddress, remotePort },
      };
    }
    return undefined;
  }

  private allowed(address: string): boolean {
    const list = this.allowList as BlockList;
    const mapped = MAPPED_V4.exec(address);
    if (mapped) return list.check(mapped[1], 'ipv4');
    if (isIPv4(address)) return list.check(address, 'ipv4');
    if (isIPv6(address)) return list.check(address, 'ipv6');
    // No address at all (the socket was reset before accept reported it): nothing to admit.
    return false;
  }
}
