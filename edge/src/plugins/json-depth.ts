/**
 * Bodies nested deeper than this are refused. OpenAI's deepest documented structure (a
 * structured-output JSON schema, 10 levels of nesting, two JSON levels each) stays far below it;
 * an unknown field nested thousands of arrays deep would overflow the stack of whatever walks it
 * later (the registry's JSON.stringify did: a 500).
 */
export const MAX_JSON_DEPTH = 100;

/**
 * Is `value` nested more than `maxDepth` arrays or objects deep? Iterative (an explicit stack),
 * so the check itself cannot overflow; its cost grows with the number of arrays and objects, not
 * with the bytes of the strings (a 14 MB prompt is one node).
 */
export function nestedDeeperThan(value: unknown, maxDepth: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [node, depth] = next;
    if (node === null || typeof node !== "object") continue;
    if (depth + 1 > maxDepth) return true;
    for (const child of Array.isArray(node) ? node : Object.values(node)) {
      if (child !== null && typeof child === "object") stack.push([child, depth + 1]);
    }
  }
  return false;
}
