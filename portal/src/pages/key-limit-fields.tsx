import { useId } from "react";
import { Field } from "../components/ui.tsx";
import type { KeyLimitView } from "../lib/key-limit.ts";

/** The spend limit inputs (amount and reset) of the new-key form and of each key's edit form. */
export function KeyLimitFields({ current, label }: { current?: KeyLimitView; label: string }) {
  const id = useId();
  return (
    <>
      <Field
        label={`Spend limit of ${label} (USD)`}
        name="limit_usd"
        type="number"
        min={0}
        step="0.01"
        placeholder="No limit"
        defaultValue={current?.limit_usd ?? ""}
        hint="Requests that could pass it are refused (402)."
      />
      <div className="field">
        <label htmlFor={id}>Limit resets</label>
        <select id={id} name="limit_reset" defaultValue={current?.limit_reset ?? ""}>
          <option value="">Never</option>
          <option value="daily">Daily (UTC)</option>
          <option value="weekly">Weekly (Monday, UTC)</option>
          <option value="monthly">Monthly (UTC)</option>
        </select>
      </div>
    </>
  );
}
