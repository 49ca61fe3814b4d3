// Generates src/api/generated from ../openapi/openapi.json with @hey-api/openapi-ts (settings in
// openapi-ts.config.js). Fails if the generator exits non-zero or prints anything but its progress
// lines, as examples/sdk/typescript/generate.sh does: a warning today is a broken console tomorrow.
import { spawnSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const run = spawnSync(process.execPath, [join(root, 'node_modules/@hey-api/openapi-ts/bin/run.js')], {
  cwd: root,
  env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
  encoding: 'utf8',
});
// eslint-disable-next-line no-control-regex
const output = `${run.stdout ?? ''}${run.stderr ?? ''}`.replace(/\x1b\[[0-9;]*m/g, '');
process.stdout.write(output);
const progress = /^(@hey-api\/openapi-ts v[0-9.]+|\[Job [0-9]+\] (⏳ Generating from [0-9]+ inputs?:|  \[[0-9]+\] .*|✅ Done! Your output is in .*))?$/;
const unexpected = output.split('\n').filter((line) => !progress.test(line));
if (run.status !== 0 || unexpected.length > 0) {
  console.error(`generate: @hey-api/openapi-ts did not generate cleanly (exit ${run.status})`);
  process.exit(1);
}
