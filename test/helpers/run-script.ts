import { spawn } from 'node:child_process';

export interface ScriptRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs the Node.js script `file` with `args` to its end, with `env` added to this process's environment;
 * its exit code and everything it printed.
 */
export function runScript(
  file: string,
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<ScriptRun> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => {
      stdout += d;
    });
    child.stderr.on('data', (d) => {
      stderr += d;
    });
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}
