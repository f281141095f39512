import type { Suite } from '../harness.js';

/** Every suite, in the documented order `npm run bench` runs them. */
export const suites: Suite[] = [];
