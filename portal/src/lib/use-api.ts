import { useCallback, useEffect, useState } from "react";
import { api } from "./api.ts";

export interface Loaded<T> {
  data: T | undefined;
  error: string | undefined;
  loading: boolean;
  reload: () => void;
}

/** GETs `path` (null: nothing yet) and again on `reload()`; the latest answer wins. */
export function useApi<T>(path: string | null): Loaded<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<string>();
  const [loading, setLoading] = useState(path !== null);
  const [generation, setGeneration] = useState(0);
  useEffect(() => {
    if (path === null) return;
    const abort = new AbortController();
    setLoading(true);
    api<T>(path, { signal: abort.signal })
      .then((answer) => {
        setData(answer);
        setError(undefined);
      })
      .catch((err: Error) => {
        if (err.name !== "AbortError") setError(err.message);
      })
      .finally(() => {
        if (!abort.signal.aborted) setLoading(false);
      });
    return () => abort.abort();
  }, [path, generation]);
  const reload = useCallback(() => setGeneration((g) => g + 1), []);
  return { data, error, loading, reload };
}
