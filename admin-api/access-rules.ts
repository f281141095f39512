/**
 * The admin settings that only work together — the one place they are checked. The configuration loader
 * (`gateway/config.ts`, before anything starts) and `createAdminApi` (`app.ts`) both call
 * `checkAdminAccess`, each wrapping a refusal in its own error (`ConfigError` ERR_CONFIG_VALUE naming the
 * key and where its value came from; `AdminError` ERR_ADMIN_CONFIG), so the two can never disagree.
 *
 * The rules:
 * - the token loses surrounding whitespace (a Kubernetes Secret made from a file ends with a newline) and
 *   must then be empty or an RFC 6750 `b64token`, or no client could ever send it;
 * - `allowUnauthenticatedWrites` needs a loopback listener;
 * - `protectReads` needs a token.
 * With the admin API off (no `host`) only the token is checked.
 */
import { isBearerToken, isLoopbackHost } from './auth.js';

export interface AdminAccessSettings {
  /** The admin listener's host; undefined when the admin API is off. */
  host: string | undefined;
  token: string;
  protectReads: boolean;
  allowUnauthenticatedWrites: boolean;
}

/** The configuration key a refusal is about. */
export type AdminAccessKey = 'admin.token' | 'admin.allowUnauthenticatedWrites' | 'admin.protectReads';

export interface AdminAccessViolation {
  key: AdminAccessKey;
  /** The refused value as the user gave it (the token is a secret: callers mask it). */
  value: unknown;
  /** What would be accepted instead, for "KEY: expected …, got …". */
  expected: string;
  /** The refusal as one sentence. */
  message: string;
  details: Record<string, unknown>;
}

export type AdminAccessVerdict =
  | { ok: true /** The token to use: trimmed. */; token: string }
  | { ok: false; violation: AdminAccessViolation };

export function checkAdminAccess(settings: AdminAccessSettings): AdminAccessVerdict {
  const token = settings.token.trim();
  if (token !== '' && !isBearerToken(token)) {
    return refused(
      'admin.token',
      settings.token,
      'a bearer token: letters, digits and -._~+/, then any =',
      'admin.token is not a bearer token: RFC 6750 allows letters, digits and -._~+/, then any =',
      {},
    );
  }
  const host = settings.host;
  if (host === undefined) return { ok: true, token };
  if (settings.allowUnauthenticatedWrites && !isLoopbackHost(host)) {
    return refused(
      'admin.allowUnauthenticatedWrites',
      true,
      `false while admin.listen is not a loopback address (${host})`,
      `unauthenticated write endpoints are only allowed on a loopback address, not ${host}`,
      { host },
    );
  }
  if (settings.protectReads && token === '') {
    return refused(
      'admin.protectReads',
      true,
      'false while admin.token is empty',
      'protecting read endpoints needs admin.token',
      {},
    );
  }
  return { ok: true, token };
}

function refused(
  key: AdminAccessKey,
  value: unknown,
  expected: string,
  message: string,
  details: Record<string, unknown>,
): AdminAccessVerdict {
  return { ok: false, violation: { key, value, expected, message, details } };
}
