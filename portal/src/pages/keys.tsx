import { useState } from "react";
import { Empty, ErrorNote, Field, Loading, SecretOnce, Table } from "../components/ui.tsx";
import { api } from "../lib/api.ts";
import { when } from "../lib/format.ts";
import { describeLimit, limitBody, type KeyLimitView } from "../lib/key-limit.ts";
import { useApi } from "../lib/use-api.ts";
import { text, useSubmit } from "../lib/use-submit.ts";
import { KeyLimitFields } from "./key-limit-fields.tsx";

interface Key extends KeyLimitView {
  key_id: string;
  name: string;
  prefix: string;
  created_at: string;
  revoked_at: string | null;
  subscription_id: string | null;
  session_key: boolean;
  expires_at: string | null;
}

function kindOf(key: Key): string {
  if (key.subscription_id) return "Subscription key";
  if (key.session_key) return `Playground, ends with the session (${when(key.expires_at)})`;
  return "API key";
}

/** A key's spend limit, and a form to change it (PATCH /v1/keys/{id}). */
function LimitCell({ keyRow, onSaved }: { keyRow: Key; onSaved: () => void }) {
  const [editing, setEditing] = useState(false);
  const save = useSubmit(async (form) => {
    await api(`/v1/keys/${keyRow.key_id}`, {
      method: "PATCH",
      body: limitBody(text(form, "limit_usd"), text(form, "limit_reset")),
    });
    setEditing(false);
    onSaved();
  });
  if (!editing) {
    return (
      <>
        {describeLimit(keyRow)}{" "}
        {!keyRow.revoked_at && (
          <button type="button" onClick={() => setEditing(true)}>
            Change<span className="visually-hidden"> the spend limit of {keyRow.name}</span>
          </button>
        )}
      </>
    );
  }
  return (
    <form className="row-form" onSubmit={save.onSubmit}>
      <KeyLimitFields current={keyRow} label={keyRow.name || "this key"} />
      <button type="submit" disabled={save.busy}>
        Save
      </button>
      <button type="button" onClick={() => setEditing(false)}>
        Cancel
      </button>
      <ErrorNote message={save.error} />
    </form>
  );
}

/** GET/POST /v1/keys, PATCH and DELETE /v1/keys/{id}: create (shown once), list, limit, revoke. */
export function KeysPage() {
  const keys = useApi<{ data: Key[] }>("/v1/keys");
  const [created, setCreated] = useState<string>();
  const [revokeError, setRevokeError] = useState<string>();
  const create = useSubmit(async (form) => {
    const limit = limitBody(text(form, "limit_usd"), text(form, "limit_reset"));
    const key = await api<{ api_key: string }>("/v1/keys", {
      method: "POST",
      body: { name: text(form, "name"), ...limit },
    });
    setCreated(key.api_key);
    (document.getElementById("new-key") as HTMLFormElement | null)?.reset();
    keys.reload();
  });
  const revoke = async (key: Key) => {
    if (!window.confirm(`Revoke "${key.name}"? Requests with it stop working at once.`)) return;
    setRevokeError(undefined);
    try {
      await api(`/v1/keys/${key.key_id}`, { method: "DELETE" });
      keys.reload();
    } catch (err) {
      setRevokeError((err as Error).message);
    }
  };
  const list = keys.data?.data ?? [];
  return (
    <>
      {created && <SecretOnce title="Your new API key" secret={created} onDone={() => setCreated(undefined)} />}
      <form id="new-key" className="card row-form" onSubmit={create.onSubmit}>
        <Field label="Name of the new key" name="name" maxLength={100} placeholder="e.g. laptop" />
        <KeyLimitFields label="the new key" />
        <button type="submit" disabled={create.busy}>
          Create key
        </button>
        <ErrorNote message={create.error} />
      </form>
      <ErrorNote message={keys.error ?? revokeError} />
      {keys.loading && !keys.data ? (
        <Loading what="your keys" />
      ) : list.length === 0 ? (
        <Empty>No keys yet.</Empty>
      ) : (
        <Table
          caption="Your API keys"
          columns={[
            { label: "Name" },
            { label: "Key starts with" },
            { label: "Kind" },
            { label: "Created" },
            { label: "Spend limit" },
            { label: "Status" },
          ]}
          rows={list.map((key) => ({
            key: key.key_id,
            cells: [
              key.name,
              <code>{key.prefix}…</code>,
              kindOf(key),
              when(key.created_at),
              <LimitCell keyRow={key} onSaved={keys.reload} />,
              key.revoked_at ? (
                `Revoked ${when(key.revoked_at)}`
              ) : key.subscription_id ? (
                "Active (cancel the subscription to stop it)"
              ) : (
                <button type="button" className="danger" onClick={() => revoke(key)}>
                  Revoke<span className="visually-hidden"> {key.name}</span>
                </button>
              ),
            ],
          }))}
        />
      )}
    </>
  );
}
