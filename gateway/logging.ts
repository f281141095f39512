/**
 * The one logger factory: pino, JSON lines by default, pretty-printed on a terminal when pino-pretty is
 * installed (it is a dependency, but a slim container image may prune it). Components take a child logger
 * (`logger.child({ component: 'frontend' })`) so every line says where it came from.
 *
 * pino-pretty runs in this thread as a stream rather than as a pino transport (a worker thread): the CLI is
 * short-lived and must not lose its last lines at exit.
 */

import { createRequire } from 'node:module';
import { type DestinationStream, type Logger, pino } from 'pino';
import { GatewayError } from '../common/errors.js';
import type { LogFormat, LogLevel } from './config.js';

const require = createRequire(import.meta.url);

export interface LoggerOptions {
  level?: LogLevel;
  format?: LogFormat;
  /** Where lines go (default stdout); a terminal check uses `isTTY` of this stream when it has one. */
  destination?: NodeJS.WritableStream & { isTTY?: boolean };
  /** Fixed fields on every line (name, pid are pino's own). */
  base?: Record<string, unknown>;
}

type PrettyFactory = (options: Record<string, unknown>) => DestinationStream;

/** pino-pretty's factory, or undefined when the package is not installed. */
export function loadPretty(): PrettyFactory | undefined {
  try {
    return require('pino-pretty') as PrettyFactory;
  } catch {
    return undefined;
  }
}

/** Whether `format` asks for pretty output on `destination`. */
export function wantsPretty(format: LogFormat, destination: { isTTY?: boolean }): boolean {
  return format === 'pretty' || (format === 'auto' && destination.isTTY === true);
}

/**
 * `err` fields: a GatewayError logs its structured form (`type` = its class, `code`, details); the result
 * of `toLog()` passes through as it is (pino's own serializer would rename its type to "Object"); any
 * other Error gets pino's standard treatment.
 */
export function serializeError(err: unknown): unknown {
  if (err instanceof GatewayError) return { ...err.toLog(), stack: err.stack };
  if (err instanceof Error) return pino.stdSerializers.err(err);
  return err;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const level = options.level ?? 'info';
  const format = options.format ?? 'auto';
  const destination = options.destination ?? process.stdout;
  const pinoOptions = {
    level,
    name: 'rpcrdma-gateway',
    base: { pid: process.pid, ...options.base },
    serializers: { err: serializeError },
  };
  if (wantsPretty(format, destination)) {
    const pretty = loadPretty();
    if (pretty) {
      return pino(
        pinoOptions,
        pretty({
          destination,
          colorize: destination.isTTY === true,
          translateTime: 'SYS:HH:MM:ss.l',
          sync: true,
        }),
      );
    }
    if (format === 'pretty') {
      const log = pino(pinoOptions, destination as DestinationStream);
      log.warn('log.format is pretty but pino-pretty is not installed: logging JSON');
      return log;
    }
  }
  return pino(pinoOptions, destination as DestinationStream);
}

/** A child logger for one component (`frontend`, `router`, `responder`, `test-program`, ...). */
export function componentLogger(
  root: Logger,
  component: string,
  fields: Record<string, unknown> = {},
): Logger {
  return root.child({ component, ...fields });
}

/** A logger that discards everything (library defaults, tests). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
