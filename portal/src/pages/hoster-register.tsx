import { useState } from "react";
import { Link } from "../components/link.tsx";
import { ErrorNote, Field, SecretOnce } from "../components/ui.tsx";
import { api } from "../lib/api.ts";
import { navigate } from "../lib/router.ts";
import { useSession } from "../lib/session.ts";
import { text, useSubmit } from "../lib/use-submit.ts";

/** A text field sent only when filled (the server applies its default otherwise). */
const optional = (form: FormData, name: string) => (text(form, name) ? { [name]: text(form, name) } : {});

/**
 * POST /hosters/register. The server checks the hoster's endpoint (health, models, refusal
 * without a token) and its message, when a check fails, is shown as it is: it says what to fix.
 */
export function HosterRegisterPage() {
  const { refresh } = useSession();
  const [password, setPassword] = useState<string>();
  const { busy, error, onSubmit } = useSubmit(async (form) => {
    const chosen = String(form.get("password") ?? "");
    const created = await api<{ portal_password?: string }>("/hosters/register", {
      method: "POST",
      body: {
        name: text(form, "name"),
        email: text(form, "email"),
        endpoint_url: text(form, "endpoint_url"),
        api_key: text(form, "api_key"),
        invite_code: text(form, "invite_code"),
        ...(chosen ? { password: chosen } : {}),
        models: [
          {
            model_id: text(form, "model_id"),
            model_alias: text(form, "model_alias"),
            context_window: Number(text(form, "context_window")),
            ...optional(form, "canonical_id"),
            ...optional(form, "quantization"),
          },
        ],
      },
    });
    if (created.portal_password) setPassword(created.portal_password);
    else {
      await refresh();
      navigate("/");
    }
  });
  if (password) {
    return (
      <div className="card narrow">
        <SecretOnce
          title="Your portal password"
          secret={password}
          onDone={async () => {
            await refresh();
            navigate("/");
          }}
        />
      </div>
    );
  }
  return (
    <form className="card" onSubmit={onSubmit}>
      <div className="grid-2">
        <Field label="Invite code" name="invite_code" required autoComplete="off" />
        <Field label="Hoster name" name="name" required autoComplete="organization" />
        <Field label="Contact e-mail" name="email" type="email" required autoComplete="email" />
        <Field
          label="Portal password (optional)"
          name="password"
          type="password"
          minLength={8}
          autoComplete="new-password"
          hint="Leave empty and we generate one, shown once."
        />
        <Field
          label="Server address"
          name="endpoint_url"
          type="url"
          required
          placeholder="https://models.example.com"
          hint="Must answer GET /health, and GET /v1/models only with the token."
        />
        <Field
          label="Server token"
          name="api_key"
          type="password"
          required
          autoComplete="off"
          hint="The bearer token your server requires."
        />
        <Field label="Model file name" name="model_id" required placeholder="llama-3-8b.Q4_K_M.gguf" />
        <Field label="Model display name" name="model_alias" placeholder="Llama 3 8B" />
        <Field label="Context window (tokens)" name="context_window" type="number" min={1} defaultValue={8192} />
        <Field
          label="Public model name"
          name="canonical_id"
          placeholder="meta-llama/Llama-3.1-8B-Instruct"
          hint="The name every hoster of this model shares, such as its Hugging Face repository. Default: the file name."
        />
        <Field
          label="Quantization"
          name="quantization"
          placeholder="q4_k_m"
          hint="bf16, fp16, fp8, int8, int4, q4_k_m, … Default: unknown."
        />
      </div>
      <ErrorNote message={error} />
      <button type="submit" disabled={busy}>
        {busy ? "Checking your server…" : "Register"}
      </button>
      <p>
        Registered already? <Link to="/">Log in</Link>.
      </p>
    </form>
  );
}
