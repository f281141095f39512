/** Response-schema helpers shared by the route modules. */
import type { TSchema } from 'typebox';
import { ErrorBody } from '../schemas.js';

const ERROR_TEXT: Record<number, string> = {
  400: 'Invalid request',
  401: 'No bearer token',
  403: 'Wrong bearer token, or write endpoints disabled',
  404: 'No such resource',
  409: 'Conflicts with the current state',
  421: 'Listening on loopback, the API answers only requests whose Host names a loopback host',
  500: 'Internal error',
  501: 'Not supported by this gateway',
  503: 'Not ready',
};

/** `{ [status]: schema }` for the success answer plus the error bodies given. */
export function responses(ok: TSchema, okStatus = 200, errors: number[] = []): Record<number, TSchema> {
  const out: Record<number, TSchema> = { [okStatus]: ok };
  for (const s of [...errors, 500]) out[s] = { ...ErrorBody, description: ERROR_TEXT[s] } as TSchema;
  return out;
}

/** The errors every write route may answer before it runs (authentication, validation, Host). */
export const WRITE_ERRORS = [400, 401, 403, 421];
/** The errors of a read route (401/403 only matter with `protectReads`, 421 on a loopback listener). */
export const READ_ERRORS = [401, 403, 421];
