/**
 * The root `prepare` script (run by `npm ci`): builds the web portal into portal/dist. An install
 * that has only the workspace manifests (the Dockerfile's dependency layers) has nothing to build
 * yet, and says so; the image builds the portal in its own stage.
 */
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
if (!existsSync(`${root}portal/src/main.tsx`)) {
  console.log("portal: no sources here, nothing to build");
} else {
  execFileSync("npm", ["run", "build", "-w", "@mkt/portal"], { cwd: root, stdio: "inherit" });
}
