import { ErrorNote, Field } from "../components/ui.tsx";
import { api } from "../lib/api.ts";
import { PRICING_MODEL_CHOICES, type Plan } from "../lib/plan.ts";
import { text, useSubmit } from "../lib/use-submit.ts";

const NUMBER_FIELDS = [
  ["monthly_price_usd", "Monthly price (USD)", "Subscription plans.", "0.01"],
  ["included_tokens", "Included tokens per month", "Subscription plans.", "1"],
  ["input_price_per_1m_usd", "Input price per 1M tokens (USD)", "Pay-as-you-go plans.", "0.000001"],
  ["output_price_per_1m_usd", "Output price per 1M tokens (USD)", "Pay-as-you-go plans.", "0.000001"],
  [
    "overage_price_per_1m_usd",
    "Price per 1M tokens beyond the included (USD)",
    "Subscription with overage.",
    "0.000001",
  ],
  [
    "cached_input_price_per_1m_usd",
    "Price per 1M cached input tokens (USD)",
    "Input tokens your server served from its prompt cache. Pay-as-you-go (at most the input price) and subscription with overage (at most the overage price). Empty on a new plan: they cost the input (overage) price; once set, a price stays set (set it to that price to drop the discount).",
    "0.000001",
  ],
  ["rpm_limit", "Requests per minute, per subscriber", "Default 60.", "1"],
  ["tpm_limit", "Tokens per minute, per subscriber", "Default 100,000.", "1"],
  ["max_concurrent", "Requests at once, per subscriber", "Default 5.", "1"],
  ["max_output_tokens", "Output tokens per answer", "Default 4,096.", "1"],
  ["max_context_tokens", "Context tokens per request", "Default 8,192.", "1"],
] as const;

/**
 * The renewal rule (docs/adr/0019-subscriptions-saga-and-terms-snapshot.md), said where the hoster
 * edits: what reaches existing subscribers.
 */
export const EDIT_REACH =
  "Existing subscribers keep the terms they bought. At each renewal they get, field by field, whichever of their terms and the current plan favours them: a lower price, more included tokens or a higher limit reaches them; a higher price, fewer tokens or a lower limit applies to new subscribers only.";

/** What an open plan is, said where the hoster chooses it. */
export const OPEN_HINT =
  "Pay-as-you-go and free plans only. An open plan is meant for every customer's account key, without subscribing; until the marketplace routes account keys to open plans, customers reach it by subscribing, as any plan.";

/** Create (POST /hosters/products) or edit (PATCH) a plan; the server checks every rule. */
export function PlanForm({ plan, onSaved }: { plan?: Plan; onSaved: () => void }) {
  const { busy, error, onSubmit } = useSubmit(async (form) => {
    const body: Record<string, unknown> = { name: text(form, "name") };
    if (!plan) body.pricing_model = text(form, "pricing_model");
    for (const [name] of NUMBER_FIELDS) {
      const value = text(form, name);
      if (value !== "") body[name] = Number(value);
    }
    body.open = form.get("open") === "on";
    await api(plan ? `/hosters/products/${plan.product_id}` : "/hosters/products", {
      method: plan ? "PATCH" : "POST",
      body,
    });
    onSaved();
  });
  return (
    <form className="card" onSubmit={onSubmit} aria-label={plan ? `Edit ${plan.name}` : "New plan"}>
      <div className="grid-2">
        <Field label="Plan name" name="name" required defaultValue={plan?.name} />
        {plan ? (
          <p className="muted">The pricing model ({plan.pricing_model}) cannot change: make a new plan instead.</p>
        ) : (
          <div className="field">
            <label htmlFor="pricing_model">Pricing model</label>
            <select id="pricing_model" name="pricing_model" defaultValue="payg">
              {PRICING_MODEL_CHOICES.map(([model, label]) => (
                <option key={model} value={model}>
                  {label}
                </option>
              ))}
            </select>
          </div>
        )}
        {NUMBER_FIELDS.map(([name, label, hint, step]) => (
          <Field
            key={name}
            label={label}
            name={name}
            type="number"
            min={0}
            step={step}
            hint={hint}
            // A plan without a cached price shows an empty field, not "null".
            defaultValue={plan?.[name] == null ? undefined : String(plan[name])}
          />
        ))}
      </div>
      <div className="field">
        <label className="check">
          <input type="checkbox" name="open" aria-describedby="open-hint" defaultChecked={plan?.open ?? false} />
          Open to every customer
        </label>
        <small id="open-hint" className="hint">
          {OPEN_HINT}
        </small>
      </div>
      {plan && <p className="note">{EDIT_REACH}</p>}
      <ErrorNote message={error} />
      <button type="submit" disabled={busy}>
        {plan ? "Save changes" : "Create plan"}
      </button>
    </form>
  );
}
