// Build the federated extension into ../../jupyter_exec/labextension (package.json
// "jupyterlab.outputDir") with @jupyterlab/builder, against the JupyterLab core metadata
// pinned in package-lock.json (@jupyterlab/core-meta): the same bundle on every machine,
// with no Python or JupyterLab needed at build time. Run after `tsc -b` (npm run build).
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const meta = JSON.parse(readFileSync(join(here, 'package.json'), 'utf8'));
const output = resolve(here, meta.jupyterlab.outputDir);
const core = mkdtempSync(join(tmpdir(), 'jupyter-exec-core-'));
try {
  // The builder reads the core's package.json from a folder: give it the pinned snapshot.
  const snapshot = require.resolve('@jupyterlab/core-meta/core.package.json');
  copyFileSync(snapshot, join(core, 'package.json'));
  rmSync(output, { recursive: true, force: true });
  const builder = require.resolve('@jupyterlab/builder/lib/build-labextension.js');
  const args = [builder, '--core-path', core, here];
  const run = spawnSync(process.execPath, args, { stdio: 'inherit' });
  if (run.status !== 0) {
    process.exit(run.status ?? 1);
  }
  // What pip installs beside it: how the extension is installed, for `jupyter labextension list`.
  copyFileSync(join(here, 'install.json'), join(output, 'install.json'));
} finally {
  rmSync(core, { recursive: true, force: true });
}
