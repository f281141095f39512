/**
 * Bearer-token authentication (RFC 6750). The token is compared in constant time: both sides are hashed
 * with SHA-256 first so that `timingSafeEqual` always compares two 32-byte digests — comparing the raw
 * strings would leak the token's length, and an early-exit comparison its prefix.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

export type AuthOutcome = 'ok' | 'missing' | 'wrong';

export class BearerAuth {
  private readonly digest: Buffer;

  constructor(token: string) {
    this.digest = sha256(token);
  }

  /** Checks an `Authorization` header value. */
  check(header: string | undefined): AuthOutcome {
    if (header === undefined) return 'missing';
    // RFC 6750 §2.1: the scheme is case-insensitive; one space separates it from the token.
    const m = /^Bearer +(\S+) *$/i.exec(header);
    if (!m) return 'missing';
    return timingSafeEqual(sha256(m[1]), this.digest) ? 'ok' : 'wrong';
  }
}

function sha256(s: string): Buffer {
  return createHash('sha256').update(s, 'utf8').digest();
}

/** RFC 6750 §2.1 `b64token`: what a Bearer credential may be made of. */
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;

/** Whether `token` can travel in an `Authorization: Bearer` header at all (RFC 6750 §2.1). */
export function isBearerToken(token: string): boolean {
  return B64TOKEN.test(token);
}

/** True for 127.0.0.0/8, ::1 and the IPv4-mapped loopback, and `localhost`. */
export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h === '::1' || /^(::ffff:)?127\.\d+\.\d+\.\d+$/.test(h);
}

/**
 * Whether an HTTP `Host` header (`name[:port]`, `[v6]:port`) names this host by a loopback name or
 * address. An API that listens on loopback only answers those: a web page whose name was rebound to
 * 127.0.0.1 (DNS rebinding) reaches the port, but its requests still carry its own name.
 */
export function isLoopbackHostHeader(header: string | undefined): boolean {
  if (header === undefined) return false;
  const name = header.startsWith('[')
    ? header.slice(0, header.indexOf(']') + 1)
    : header.replace(/:\d*$/, '');
  return isLoopbackHost(name);
}
