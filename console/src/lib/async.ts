// Loading data for a page: the result, the error (never swallowed), and a way to load again.
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';

import { ApiError, asApiError } from '../api/errors';

export interface Async<T> {
  data: T | undefined;
  error: ApiError | undefined;
  loading: boolean;
  reload: () => void;
  setData: (update: (old: T | undefined) => T | undefined) => void;
}

export function useAsync<T>(load: () => Promise<T>, deps: readonly unknown[]): Async<T> {
  const [data, setDataState] = useState<T | undefined>(undefined);
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const [loading, setLoading] = useState(true);
  const [round, setRound] = useState(0);
  const latest = useRef(0);

  useEffect(() => {
    const mine = ++latest.current;
    setLoading(true);
    load().then(
      (value) => {
        if (mine !== latest.current) return;
        setDataState(() => value);
        setError(undefined);
        setLoading(false);
      },
      (e: unknown) => {
        if (mine !== latest.current) return;
        setError(asApiError(e));
        setLoading(false);
      },
    );
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, round]);

  const reload = useCallback(() => setRound((r) => r + 1), []);
  const setData = useCallback((update: (old: T | undefined) => T | undefined) => setDataState(update), []);
  return { data, error, loading, reload, setData };
}
