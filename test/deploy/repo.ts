/**
 * Paths and loaders shared by the deployment tests. The deploy/ scripts are plain ES modules (deploy/ is
 * not compiled by tsc), so they are imported by absolute URL from the repository root, which is three
 * levels above this file's compiled location (dist/test/deploy/).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseAllDocuments } from 'yaml';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
export const chartDir = join(repoRoot, 'deploy', 'helm', 'rpcrdma-gateway');
export const examplesDir = join(repoRoot, 'deploy', 'helm', 'examples');

export function repoPath(...parts: string[]): string {
  return join(repoRoot, ...parts);
}

export function readRepo(...parts: string[]): string {
  return readFileSync(repoPath(...parts), 'utf8');
}

export interface Manifest {
  path: string;
  text: string;
}

/** The parts of deploy/scripts/helm-lite.mjs the tests use. */
export interface HelmLite {
  renderChart(
    chartDir: string,
    options?: { valuesFiles?: string[]; release?: { name?: string; namespace?: string } },
  ): { manifests: Manifest[]; notes: string; values: Record<string, unknown> };
  formatManifests(manifests: Manifest[]): string;
  deepMerge(base: unknown, over: unknown): unknown;
}

export async function helmLite(): Promise<HelmLite> {
  return (await import(pathToFileURL(repoPath('deploy', 'scripts', 'helm-lite.mjs')).href)) as HelmLite;
}

/** Runs a Node script of the repository; returns its exit status and output. */
export function runNode(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, args, {
    cwd: repoRoot,
    encoding: 'utf8',
    timeout: 30_000,
    env: { ...process.env, ...env },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

export type K8sObject = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  // biome-ignore lint/suspicious/noExplicitAny: manifests are checked field by field in the tests
  spec?: any;
  data?: Record<string, string>;
};

/** Every document of a multi-document YAML text; a YAML error throws. */
export function parseManifests(text: string): K8sObject[] {
  return parseAllDocuments(text, { strict: true, uniqueKeys: true })
    .map((d) => {
      if (d.errors.length) throw d.errors[0];
      return d.toJS() as K8sObject | null;
    })
    .filter((d): d is K8sObject => d !== null);
}
