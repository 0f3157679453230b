import { useState } from "react";
import { Empty, ErrorNote, Loading, Table } from "../components/ui.tsx";
import { api } from "../lib/api.ts";
import { day, usd } from "../lib/format.ts";
import { useApi } from "../lib/use-api.ts";

interface Subscription {
  subscription_id: string;
  product_name: string;
  hoster_name: string;
  status: "active" | "paused" | "cancelled" | "past_due" | string;
  monthly_price_usd: number;
  period_end: string | null;
  cancelled_at: string | null;
}

/** What each status means to the subscriber; the paused text is the hoster's message, verbatim. */
const STATUS_NOTE: Record<string, string> = {
  paused: "Your access has been temporarily paused by the hoster.",
  past_due: "The renewal could not be paid: top up your credit and it is retried.",
  cancelled: "Cancelled: its key no longer works.",
};

/** GET /v1/subscriptions and cancel (DELETE), after a confirmation that says what it does. */
export function SubscriptionsPage() {
  const subs = useApi<{ data: Subscription[] }>("/v1/subscriptions");
  const [error, setError] = useState<string>();
  const cancel = async (sub: Subscription) => {
    const sure = window.confirm(
      `Cancel ${sub.product_name}? Its key stops working at once, and the current month is not refunded.`,
    );
    if (!sure) return;
    setError(undefined);
    try {
      await api(`/v1/subscriptions/${sub.subscription_id}`, { method: "DELETE" });
      subs.reload();
    } catch (err) {
      setError((err as Error).message);
    }
  };
  if (subs.loading && !subs.data) return <Loading what="subscriptions" />;
  const list = subs.data?.data ?? [];
  return (
    <>
      <ErrorNote message={subs.error ?? error} />
      {list.length === 0 ? (
        <Empty>No subscriptions. Browse the hosters to subscribe to a plan.</Empty>
      ) : (
        <Table
          caption="Your subscriptions"
          columns={[
            { label: "Plan" },
            { label: "Hoster" },
            { label: "Status" },
            { label: "Monthly", numeric: true },
            { label: "Renews" },
            { label: "Actions", hideLabel: true },
          ]}
          rows={list.map((sub) => ({
            key: sub.subscription_id,
            cells: [
              sub.product_name,
              sub.hoster_name,
              <>
                <span className={`badge ${sub.status}`}>{sub.status.replace("_", " ")}</span>
                {STATUS_NOTE[sub.status] && <div className="note">{STATUS_NOTE[sub.status]}</div>}
              </>,
              usd(sub.monthly_price_usd),
              sub.status === "cancelled" ? "–" : day(sub.period_end),
              sub.status !== "cancelled" && (
                <button type="button" className="danger" onClick={() => cancel(sub)}>
                  Cancel<span className="visually-hidden"> {sub.product_name}</span>
                </button>
              ),
            ],
          }))}
        />
      )}
    </>
  );
}
