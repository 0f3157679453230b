import { useState } from "react";
import { Empty, ErrorNote, Loading } from "../components/ui.tsx";
import { api } from "../lib/api.ts";
import { limitsLine, priceLine, type Plan } from "../lib/plan.ts";
import { useApi } from "../lib/use-api.ts";
import { PlanForm } from "./plan-form.tsx";

/** The hoster's plans (GET /hosters/products): create, edit, archive. */
export function PlansPage() {
  const plans = useApi<{ data: Plan[] }>("/hosters/products");
  const [editing, setEditing] = useState<string | "new">();
  const [error, setError] = useState<string>();
  const saved = () => {
    setEditing(undefined);
    plans.reload();
  };
  const archive = async (plan: Plan) => {
    if (!window.confirm(`Archive ${plan.name}? It takes no new subscribers; current ones keep it and renew.`)) return;
    setError(undefined);
    try {
      await api(`/hosters/products/${plan.product_id}/archive`, { method: "POST" });
      plans.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  if (plans.loading && !plans.data) return <Loading what="your plans" />;
  const list = plans.data?.data ?? [];
  return (
    <>
      <ErrorNote message={plans.error ?? error} />
      {editing === "new" ? (
        <PlanForm onSaved={saved} />
      ) : (
        <button type="button" onClick={() => setEditing("new")}>
          New plan
        </button>
      )}
      {list.length === 0 && <Empty>No plans yet: customers see your models once you publish one.</Empty>}
      <ul className="plans">
        {list.map((plan) => (
          <li key={plan.product_id} className="plan">
            <h2>
              {plan.name} <span className={`badge ${plan.status}`}>{plan.status}</span>
              {plan.open && <span className="badge open">open</span>}
            </h2>
            <p>{priceLine(plan)}</p>
            <p className="muted">{limitsLine(plan)}</p>
            {editing === plan.product_id ? (
              <PlanForm plan={plan} onSaved={saved} />
            ) : (
              plan.status !== "archived" && (
                <div className="row">
                  <button type="button" className="secondary" onClick={() => setEditing(plan.product_id)}>
                    Edit<span className="visually-hidden"> {plan.name}</span>
                  </button>
                  <button type="button" className="danger" onClick={() => archive(plan)}>
                    Archive<span className="visually-hidden"> {plan.name}</span>
                  </button>
                </div>
              )
            )}
          </li>
        ))}
      </ul>
    </>
  );
}
