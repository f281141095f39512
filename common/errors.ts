/**
 * The base of every error the project raises on purpose. Each category is a subclass with a stable
 * `code` string (logged as a structured field, matched by callers and tests); `details` carries the
 * facts that explain it (field, offset, limit, peer) so a log line says exactly what went wrong.
 *
 * `common/` holds what every layer needs and no layer owns (DESIGN.md §2 has no such folder; putting
 * the base error in `rpc/` would make the verbs providers import RPC, which §2 forbids).
 */
export class GatewayError extends Error {
  readonly code: string;
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: string, message: string, details: Record<string, unknown> = {}, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.details = details;
  }

  override get name(): string {
    return this.constructor.name;
  }

  /** The structured form for pino: `log.warn({ err: e.toLog() }, ...)`. */
  toLog(): Record<string, unknown> {
    return { type: this.name, code: this.code, message: this.message, ...this.details };
  }
}

/** A configuration value that is missing, of the wrong type or out of range; names the key. */
export class ConfigError extends GatewayError {}

/** A caller used an API outside its contract (a bug in our code, not bad input from the network). */
export class UsageError extends GatewayError {}
