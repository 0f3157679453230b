import { useState } from "react";
import { Empty, ErrorNote, Loading, SecretOnce } from "../components/ui.tsx";
import { api } from "../lib/api.ts";
import { count } from "../lib/format.ts";
import { limitsLine, priceLine, type Plan } from "../lib/plan.ts";
import { useApi } from "../lib/use-api.ts";

interface Hoster {
  hoster_id: string;
  name: string;
  status: string;
  models: Array<{ model_id: string; model_alias: string; context_window: number }>;
  plans: Plan[];
}

/** GET /v1/hosters with subscribe (POST /v1/subscriptions; the scoped key shown once). */
export function HostersPage() {
  const hosters = useApi<{ data: Hoster[] }>("/v1/hosters");
  const [created, setCreated] = useState<{ key: string; plan: string }>();
  // The refusal shows on the plan whose button was pressed, where the person is looking.
  const [error, setError] = useState<{ plan: string; message: string }>();
  const [busy, setBusy] = useState<string>();
  const subscribe = async (plan: Plan) => {
    setError(undefined);
    setBusy(plan.product_id);
    try {
      const sub = await api<{ api_key: string; product_name: string }>("/v1/subscriptions", {
        method: "POST",
        body: { product_id: plan.product_id },
        headers: { "idempotency-key": crypto.randomUUID() },
      });
      setCreated({ key: sub.api_key, plan: sub.product_name });
    } catch (err) {
      setError({ plan: plan.product_id, message: (err as Error).message });
    } finally {
      setBusy(undefined);
    }
  };
  if (hosters.error) return <ErrorNote message={hosters.error} />;
  if (hosters.loading && !hosters.data) return <Loading what="hosters" />;
  const list = hosters.data?.data ?? [];
  return (
    <>
      {created && (
        <SecretOnce title={`Your key for ${created.plan}`} secret={created.key} onDone={() => setCreated(undefined)} />
      )}
      {list.length === 0 && <Empty>No hoster has published a plan yet.</Empty>}
      {list.map((hoster) => (
        <section key={hoster.hoster_id} className="card" aria-labelledby={`h-${hoster.hoster_id}`}>
          <h2 id={`h-${hoster.hoster_id}`}>
            {hoster.name} <span className={`badge ${hoster.status}`}>{hoster.status}</span>
          </h2>
          <p className="muted">
            Models:{" "}
            {hoster.models
              .map((m) => `${m.model_alias || m.model_id} (${count(m.context_window)} tokens of context)`)
              .join(", ")}
          </p>
          {hoster.plans.length === 0 ? (
            <Empty>No plans yet.</Empty>
          ) : (
            <ul className="plans">
              {hoster.plans.map((plan) => (
                <li key={plan.product_id} className="plan">
                  <h3>
                    {plan.name} {plan.open && <span className="badge open">open to every key</span>}
                  </h3>
                  <p>{priceLine(plan)}</p>
                  <p className="muted">{limitsLine(plan)}</p>
                  {error?.plan === plan.product_id && <ErrorNote message={error.message} />}
                  <button type="button" onClick={() => subscribe(plan)} disabled={busy !== undefined}>
                    {busy === plan.product_id ? "Subscribing…" : "Subscribe"}
                    <span className="visually-hidden"> to {plan.name}</span>
                  </button>
                </li>
              ))}
            </ul>
          )}
        </section>
      ))}
    </>
  );
}
