/**
 * Runs one load: the load generator (load-worker.ts, autocannon) as its own process pinned to the load
 * core, never inside the process under test or the harness.
 */
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { LoadResult, LoadSpec } from './load-worker.js';
import { spawnPinned, tail } from './processes.js';

export type { LoadResult, LoadSpec };

let runs = 0;

/** Runs `spec` in a new load-generator process on `core`; resolves with its measured numbers. */
export async function runLoad(
  spec: LoadSpec,
  opts: { core: number; repoRoot: string; workDir: string; env: NodeJS.ProcessEnv },
): Promise<LoadResult> {
  const n = ++runs;
  const specFile = path.join(opts.workDir, `load-${n}.json`);
  const resultFile = path.join(opts.workDir, `load-${n}.result.json`);
  await writeFile(specFile, JSON.stringify(spec));
  const proc = spawnPinned(
    `load generator ${n}`,
    opts.core,
    [process.execPath, '--import', 'tsx', path.join(opts.repoRoot, 'bench/load-worker.ts'), specFile, resultFile],
    {
      cwd: opts.repoRoot,
      env: opts.env,
      logFile: path.join(opts.workDir, `load-${n}.log`),
    },
  );
  const code = await proc.exited;
  await proc.stop();
  if (code !== 0) throw new Error(`load generator exited with ${code}:\n${tail(proc.logFile)}`);
  return JSON.parse(await readFile(resultFile, 'utf8')) as LoadResult;
}
