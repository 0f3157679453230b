import { useState, type FormEvent } from "react";

/** A form's submit handler with its busy flag and error sentence. */
export function useSubmit(action: (form: FormData) => Promise<void>) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string>();
  const onSubmit = async (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await action(new FormData(event.currentTarget));
    } catch (err) {
      setError((err as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return { busy, error, onSubmit, setError };
}

export const text = (form: FormData, name: string) => String(form.get(name) ?? "").trim();
