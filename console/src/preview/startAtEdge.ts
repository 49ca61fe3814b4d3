// Starting hls.js at the live edge: the one copy in src/playback/start_at_edge.js, which the demo
// page and the test player use too (docs/live-hls.md, "Starting at the edge"). Bundled by Vite.
export { startAtEdge } from '../../../src/playback/start_at_edge.js';
