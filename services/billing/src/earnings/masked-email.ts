/**
 * A customer's e-mail as a hoster may see it: the first character of the local
 * part, three stars, and the domain (`j***@example.com`). The star count is fixed, so the mask
 * does not tell the local part's length either.
 */
export function maskEmail(email: string): string {
  const at = email.lastIndexOf("@");
  if (at <= 0) return "***";
  const [first] = email.slice(0, at); // the first code point, not half of a surrogate pair
  return `${first}***${email.slice(at)}`;
}
