/** The built-in load-test RPC program: see docs/test-program.md. */
export { TestProgramClient, TestProgramError } from './client.js';
export {
  decodeOpaque,
  decodeSourceArgs,
  decodeU32Result,
  encodeOpaqueParts,
  encodeSourceArgs,
  opaqueSize,
} from './codec.js';
export { DEFAULT_MAX_TEST_DATA, TEST_PROC_NAMES, TEST_PROGRAM, TEST_VERSION, TestProc } from './constants.js';
export { fillPattern, findPatternMismatch, patternWord, sourcePattern } from './pattern.js';
export { serveTestProgram, TestProgramHandler, type TestProgramServer } from './server.js';
export { createTestProgramUlb, testProgramUlb } from './ulb.js';
