import { useState } from "react";
import { Link } from "../components/link.tsx";
import { ErrorNote, Field, SecretOnce } from "../components/ui.tsx";
import { api } from "../lib/api.ts";
import { navigate } from "../lib/router.ts";
import { useSession } from "../lib/session.ts";
import { text, useSubmit } from "../lib/use-submit.ts";

/** Sign-up (POST /v1/accounts), then a login with the same credentials for the portal's session. */
export function SignupPage() {
  const { refresh } = useSession();
  const [firstKey, setFirstKey] = useState<string>();
  const { busy, error, onSubmit } = useSubmit(async (form) => {
    const credentials = { email: text(form, "email"), password: String(form.get("password")) };
    const created = await api<{ api_key: string }>("/v1/accounts", { method: "POST", body: credentials });
    await api("/auth/login", { method: "POST", body: credentials });
    setFirstKey(created.api_key);
  });
  if (firstKey) {
    return (
      <div className="card narrow">
        <p>Your account is ready, with 5.00 USD of credit. This is your first API key:</p>
        <SecretOnce
          title="Your API key"
          secret={firstKey}
          onDone={async () => {
            await refresh();
            navigate("/");
          }}
        />
      </div>
    );
  }
  return (
    <form className="card narrow" onSubmit={onSubmit}>
      <Field label="E-mail" name="email" type="email" autoComplete="email" required />
      <Field
        label="Password"
        name="password"
        type="password"
        autoComplete="new-password"
        minLength={8}
        required
        hint="At least 8 characters."
      />
      <ErrorNote message={error} />
      <button type="submit" disabled={busy}>
        {busy ? "Creating your account…" : "Create account"}
      </button>
      <p>
        Already have one? <Link to="/">Log in</Link>.
      </p>
    </form>
  );
}
