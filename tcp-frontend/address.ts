/**
 * `HOST:PORT` strings as they appear in configuration and on the command line: `127.0.0.1:2049`,
 * `[::1]:2049`, `localhost:2049`, or a bare host when a default port is given.
 */
import { UsageError } from '../common/errors.js';

export interface HostPort {
  host: string;
  port: number;
}

/** `host:port`, with brackets around an IPv6 host. */
export function formatHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * Parses `HOST:PORT`, `[IPV6]:PORT`, or (when `defaultPort` is given) a bare `HOST` / `[IPV6]` / IPv6
 * literal. Throws `UsageError` ERR_ADDRESS with the text that did not parse; callers that know which
 * configuration key it came from wrap it in a `ConfigError`.
 */
export function parseHostPort(text: string, defaultPort?: number): HostPort {
  const s = text.trim();
  let host: string;
  let portText: string | undefined;
  const bracketed = /^\[([^\]]+)\](?::(.*))?$/.exec(s);
  if (bracketed) {
    host = bracketed[1];
    portText = bracketed[2];
  } else if ((s.match(/:/g) ?? []).length > 1) {
    // An unbracketed IPv6 literal cannot carry a port: `::1:2049` is ambiguous.
    host = s;
  } else {
    const colon = s.lastIndexOf(':');
    host = colon < 0 ? s : s.slice(0, colon);
    portText = colon < 0 ? undefined : s.slice(colon + 1);
  }
  if (host === '') throw new UsageError('ERR_ADDRESS', `'${text}' has no host`, { text });
  let port: number;
  if (portText === undefined) {
    if (defaultPort === undefined) {
      throw new UsageError('ERR_ADDRESS', `'${text}' has no port (expected HOST:PORT)`, { text });
    }
    port = defaultPort;
  } else {
    port = /^\d{1,5}$/.test(portText) ? Number(portText) : Number.NaN;
    if (!(port >= 0 && port <= 65535)) {
      throw new UsageError('ERR_ADDRESS', `'${text}' has an invalid port '${portText}' (0..65535)`, { text });
    }
  }
  return { host, port };
}
