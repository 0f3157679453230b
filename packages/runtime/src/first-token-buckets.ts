/**
 * Histogram buckets, in seconds, for the steps before a chat completion's first token (the edge's
 * admission and first event, the registry's upstream first event): a millisecond or two when the
 * system is idle, seconds when it is saturated or a model server is cold (the first-byte limit is
 * 60 s by default). One set, so the edge's and the registry's histograms can be compared bucket for
 * bucket.
 */
export const FIRST_TOKEN_BUCKETS_SECONDS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];
