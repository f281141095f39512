/** The provider-neutral verbs interface: constants with libibverbs values, types, completions, errors. */
export * from './constants.js';
export { invalidArgument, VerbsError } from './errors.js';
export type * from './types.js';
export { createWorkCompletions, WorkCompletion } from './work-completion.js';
