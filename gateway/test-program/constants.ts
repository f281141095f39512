/**
 * The built-in load-test RPC program (documented in docs/test-program.md).
 *
 * The program number is taken from the range RFC 5531 §7.3 leaves to users ("defined by user",
 * 0x20000000 - 0x3fffffff); its last three bytes spell "GWT" (gateway test) to be recognisable in a capture.
 */
export const TEST_PROGRAM = 0x2047_5754;
export const TEST_VERSION = 1;

export const TestProc = {
  /** void NULL(void) */
  NULL: 0,
  /** opaque ECHO(opaque data<>): the same bytes back. */
  ECHO: 1,
  /** unsigned int SINK(opaque data<>): how many bytes arrived (the data is DDP-eligible). */
  SINK: 2,
  /** opaque SOURCE(source_args): `count` bytes of a pattern given by `seed` (the result is DDP-eligible). */
  SOURCE: 3,
} as const;
export type TestProc = (typeof TestProc)[keyof typeof TestProc];

export const TEST_PROC_NAMES: Readonly<Record<number, string>> = Object.freeze({
  0: 'NULL',
  1: 'ECHO',
  2: 'SINK',
  3: 'SOURCE',
});

/**
 * Largest opaque the server accepts or produces by default: a 4 MiB payload, the largest NFS rsize/wsize
 * Linux negotiates, so the program exercises the same sizes as NFS READ and WRITE.
 */
export const DEFAULT_MAX_TEST_DATA = 4 * 1024 * 1024;
