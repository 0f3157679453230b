import { Link } from "../components/link.tsx";
import { ErrorNote, Field } from "../components/ui.tsx";
import { api } from "../lib/api.ts";
import { navigate } from "../lib/router.ts";
import { useSession } from "../lib/session.ts";
import { text, useSubmit } from "../lib/use-submit.ts";

export function LoginPage() {
  const { refresh } = useSession();
  const { busy, error, onSubmit } = useSubmit(async (form) => {
    await api("/auth/login", {
      method: "POST",
      body: { email: text(form, "email"), password: String(form.get("password")), kind: text(form, "kind") },
    });
    await refresh();
    navigate("/");
  });
  return (
    <form className="card narrow" onSubmit={onSubmit}>
      <fieldset className="choice">
        <legend>I am a</legend>
        <label>
          <input type="radio" name="kind" value="customer" defaultChecked /> customer
        </label>
        <label>
          <input type="radio" name="kind" value="hoster" /> hoster
        </label>
      </fieldset>
      <Field label="E-mail" name="email" type="email" autoComplete="email" required />
      <Field label="Password" name="password" type="password" autoComplete="current-password" required />
      <ErrorNote message={error} />
      <button type="submit" disabled={busy}>
        {busy ? "Logging in…" : "Log in"}
      </button>
      <p>
        New here? <Link to="/signup">Create a customer account</Link> (5.00 USD of credit to start) or{" "}
        <Link to="/hoster/register">register as a hoster</Link> with an invite code.
      </p>
    </form>
  );
}
