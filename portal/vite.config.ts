import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

// Served by the edge under /portal (edge/src/plugins/portal-static.ts); assets are named by
// content hash, so the edge can cache them for a year.
export default defineConfig({
  base: "/portal/",
  plugins: [react()],
  build: {
    outDir: "dist",
    emptyOutDir: true,
    // The edge's CSP allows no inline script: keep Vite's module preload polyfill out of the page.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
  },
});
