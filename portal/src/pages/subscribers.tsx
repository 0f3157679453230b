import { useState } from "react";
import { Empty, ErrorNote, Loading, Table } from "../components/ui.tsx";
import { api } from "../lib/api.ts";
import { count, day, plural, usd } from "../lib/format.ts";
import { useApi } from "../lib/use-api.ts";

interface Subscribers {
  plans: Array<{ product_id: string; product_name: string; subscribers: number; earned_usd: number }>;
  subscribers: Array<{
    subscription_id: string;
    product_id: string;
    product_name: string;
    status: string;
    email_masked: string;
    period_end: string | null;
    requests: number;
    total_tokens: number;
  }>;
}

const SUBSCRIBER_COLUMNS = [
  { label: "Subscriber" },
  { label: "Status" },
  { label: "Requests", numeric: true },
  { label: "Tokens", numeric: true },
  { label: "Renews" },
  { label: "Actions", hideLabel: true },
];

/** GET /v1/hoster/subscribers by plan, with pause and resume (the portal actions). */
export function SubscribersPage() {
  const subs = useApi<Subscribers>("/v1/hoster/subscribers");
  const [error, setError] = useState<string>();
  const act = async (id: string, action: "pause" | "resume") => {
    setError(undefined);
    try {
      await api(`/hosters/subscribers/${id}/${action}`, { method: "POST" });
      subs.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  if (subs.loading && !subs.data) return <Loading what="subscribers" />;
  const data = subs.data ?? { plans: [], subscribers: [] };
  return (
    <>
      <ErrorNote message={subs.error ?? error} />
      <p className="note">
        A paused subscriber's key is refused with: “Your access has been temporarily paused by the hoster.” Resume lets
        it work again at once.
      </p>
      {data.plans.length === 0 && <Empty>No subscribers yet.</Empty>}
      {data.plans.map((plan) => {
        const members = data.subscribers.filter((s) => s.product_id === plan.product_id);
        return (
          <section key={plan.product_id} aria-labelledby={`p-${plan.product_id}`}>
            <h2 id={`p-${plan.product_id}`}>
              {plan.product_name}{" "}
              <span className="muted">
                · {plural(plan.subscribers, "subscriber")} · earned {usd(plan.earned_usd)}
              </span>
            </h2>
            {members.length === 0 ? (
              <Empty>Nobody on this plan.</Empty>
            ) : (
              <Table
                caption={`Subscribers of ${plan.product_name}`}
                columns={SUBSCRIBER_COLUMNS}
                rows={members.map((s) => ({
                  key: s.subscription_id,
                  cells: [
                    s.email_masked,
                    <span className={`badge ${s.status}`}>{s.status.replace("_", " ")}</span>,
                    count(s.requests),
                    count(s.total_tokens),
                    day(s.period_end),
                    s.status === "active" ? (
                      <button type="button" className="danger" onClick={() => act(s.subscription_id, "pause")}>
                        Pause<span className="visually-hidden"> {s.email_masked}</span>
                      </button>
                    ) : s.status === "paused" ? (
                      <button type="button" onClick={() => act(s.subscription_id, "resume")}>
                        Resume<span className="visually-hidden"> {s.email_masked}</span>
                      </button>
                    ) : null,
                  ],
                }))}
              />
            )}
          </section>
        );
      })}
    </>
  );
}
