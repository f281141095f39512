/**
 * Errors of the admin API. `ControlError` is what a `GatewayControl` implementation throws for a request it
 * cannot honour; its code decides the HTTP status. `AdminError` is a problem of the admin API itself
 * (configuration, authentication).
 */
import { GatewayError } from '../common/errors.js';

export class AdminError extends GatewayError {}

/**
 * Codes a control implementation uses: `ERR_CONTROL_NOT_FOUND` (404), `ERR_CONTROL_CONFLICT` (409, e.g.
 * the connection is not ready), `ERR_CONTROL_INVALID` (400, a value the gateway cannot take),
 * `ERR_CONTROL_UNSUPPORTED` (501, the gateway cannot do this yet). Anything else is a 500.
 */
export class ControlError extends GatewayError {}

const STATUS_BY_CODE: Record<string, number> = {
  ERR_CONTROL_NOT_FOUND: 404,
  ERR_CONTROL_CONFLICT: 409,
  ERR_CONTROL_INVALID: 400,
  ERR_CONTROL_UNSUPPORTED: 501,
  ERR_ADMIN_UNAUTHORIZED: 401,
  ERR_ADMIN_FORBIDDEN: 403,
  ERR_ADMIN_WRITES_DISABLED: 403,
};

export function httpStatusOf(err: GatewayError): number {
  return STATUS_BY_CODE[err.code] ?? 500;
}
