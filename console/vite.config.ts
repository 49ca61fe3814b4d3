import preact from '@preact/preset-vite';
import { defineConfig } from 'vite';

// The console is served by Sluice itself at `/` (index.html for every client route, assets under
// /assets/ with hashed names), so the base is absolute and nothing is loaded from anywhere else.
//
// `server.proxy` only matters to `npm run dev`: it forwards the API, the playback origin and the
// upload target to a local `sluice serve` on 127.0.0.1:18080. The Host header is kept
// (changeOrigin: false), so the Origin the browser sends matches the Host the server sees and
// cookie-authenticated writes pass its CSRF check.
const backend = process.env.SLUICE_DEV_BACKEND ?? 'http://127.0.0.1:18080';

export default defineConfig({
  base: '/',
  plugins: [preact({ devToolsEnabled: false, prerender: { enabled: false } })],
  build: {
    outDir: 'dist',
    assetsDir: 'assets',
    target: 'es2020',
    sourcemap: false,
    emptyOutDir: true,
    // hls.js is one lazy chunk of about 600 kB (190 kB gzipped), loaded only by a player.
    chunkSizeWarningLimit: 700,
  },
  server: {
    port: 5173,
    strictPort: true,
    proxy: {
      '/v1': { target: backend, changeOrigin: false },
      '/play': { target: backend, changeOrigin: false },
      '/upload': { target: backend, changeOrigin: false },
    },
  },
});
