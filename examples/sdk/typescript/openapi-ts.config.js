// @hey-api/openapi-ts: the TypeScript client of Sluice, generated from the committed document.
// `npm run generate` writes it to ./client (not committed); demo.ts imports it from there.
export default {
  input: process.env.SLUICE_OPENAPI ?? '../../../openapi/openapi.json',
  output: { path: 'client' },
  parser: { validate_EXPERIMENTAL: 'strict' },
  plugins: ['@hey-api/client-fetch', '@hey-api/typescript', '@hey-api/sdk'],
  logs: { file: false },
};
