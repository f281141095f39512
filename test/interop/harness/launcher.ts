/**
 * A generic launcher for the product's own processes (the gateway, the responder) and any other helper:
 * a command line, an environment, and a readiness condition — a TCP port accepting connections, or an RPC
 * program answering NULL through it. Logs and teardown are the session's, like every other peer.
 */

import { isListening } from '../../helpers/ports.js';
import type { ManagedProcess } from './processes.js';
import { answersNull } from './rpc-ping.js';
import type { InteropSession } from './session.js';

export interface LaunchSpec {
  name: string;
  command: string;
  args: readonly string[];
  env?: NodeJS.ProcessEnv;
  /** Ready once this port accepts TCP connections... */
  readyPort?: number;
  /** ...or once this RPC program answers NULL on `readyPort`. */
  readyNull?: { program: number; version: number };
  /** Any other readiness condition (a log line, an HTTP probe); wins over `readyPort`. */
  ready?: (proc: ManagedProcess) => Promise<boolean>;
  readyTimeoutMs?: number;
  stopSignal?: NodeJS.Signals;
  stopGraceMs?: number;
}

export function launch(session: InteropSession, spec: LaunchSpec): Promise<ManagedProcess> {
  const port = spec.readyPort;
  const ready =
    spec.ready ??
    (port === undefined
      ? async () => true
      : spec.readyNull
        ? () => answersNull('127.0.0.1', port, spec.readyNull!.program, spec.readyNull!.version)
        : () => isListening(port));
  return session.start({
    name: spec.name,
    command: spec.command,
    args: spec.args,
    env: spec.env,
    ready,
    readyTimeoutMs: spec.readyTimeoutMs,
    stopSignal: spec.stopSignal,
    stopGraceMs: spec.stopGraceMs,
  });
}
