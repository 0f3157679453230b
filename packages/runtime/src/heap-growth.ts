/**
 * Imported first by every process's entry point (test/deploy checks it is): fixes how far V8 lets
 * the old generation grow past what survived the last full collection before it collects again.
 *
 * By default the factor follows allocation speed and, on a machine with a few GB, goes up to 4×:
 * under load a service with ~30 MB of live objects let its old generation reach 140 MB between
 * collections, and the resident set stayed at that high-water mark once the collections came
 * (1,000 streams after the throughput run: edge ~385 MB, registry ~390 MB, billing ~255 MB).
 * With the factor fixed at 2 the same run peaked at ~280, ~260 and ~190 MB. The price is paid when
 * the live set grows fast: a thousand streams starting at once cost the edge and the registry
 * ~15–20% more CPU each (more full collections on the way up); 1.5 saved ~90 MB more and cost more
 * (bench/README.md#process-memory has the A/B).
 *
 * NODE_OPTIONS does not accept this V8 flag, hence setting it from code. V8 reads it each time it
 * computes the next collection's limit, so setting it before the service has allocated anything
 * of note applies to the whole run. An operator's own `--heap-growing-percent` on the command line
 * wins.
 */
import { setFlagsFromString } from "node:v8";

export const HEAP_GROWING_PERCENT = 100;

const FLAG = "--heap-growing-percent";

if (!process.execArgv.some((arg) => arg === FLAG || arg.startsWith(`${FLAG}=`))) {
  setFlagsFromString(`${FLAG}=${HEAP_GROWING_PERCENT}`);
}
