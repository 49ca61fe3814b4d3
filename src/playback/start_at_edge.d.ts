// Types of start_at_edge.js for the console's TypeScript (hls.js's `Hls` fits `LiveHls`).
export interface LiveHls {
  readonly liveSyncPosition: number | null;
  // hls.js types its listeners by a string enum the plain script names by value.
  on: Function;
  off: Function;
}

export interface StartAtEdgeOptions {
  /** Seconds past the sync position to seek (default 0.1). */
  lead?: number;
  /** Starts playing (default: `video.play()`, a refusal ignored). */
  play?: () => void;
  /** Told where it seeks, and the sync position then. */
  onSeek?: (at: number, sync: number) => void;
}

export function startAtEdge(hls: LiveHls, video: HTMLVideoElement, options?: StartAtEdgeOptions): () => void;
