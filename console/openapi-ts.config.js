// @hey-api/openapi-ts: the console's API client, generated from the committed document into
// src/api/generated (never edited by hand, not committed). Same generator, version and plugins as
// examples/sdk/typescript, so the console is exactly as capable as any script.
export default {
  input: process.env.SLUICE_OPENAPI ?? '../openapi/openapi.json',
  output: { path: 'src/api/generated' },
  parser: { validate_EXPERIMENTAL: 'strict' },
  plugins: ['@hey-api/client-fetch', '@hey-api/typescript', '@hey-api/sdk'],
  logs: { file: false },
};
