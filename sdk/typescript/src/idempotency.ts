// One Idempotency-Key per logical operation, reused on every retry of it.
//
// The service replays the stored answer to a repeated key, answers 409 with
// Retry-After while the first attempt is still in flight, and asks for a
// retry with the same key after any 5xx (a new key would start a second
// deposit or withdrawal). withIdempotency makes the key once and retries the
// call with it.

import { randomUUID } from "node:crypto";

/** What a call returns: an openapi-fetch result ({data, error, response}) or a fetch Response. */
export type Answer = { response: Response } | Response;

export interface IdempotencyOptions {
  /** The key to use (default: a new random UUID). Persist it to resume a call after a crash. */
  key?: string;
  /** Attempts in all, the first included (default 5). */
  maxAttempts?: number;
  /** The first wait when the answer names none, doubled on each retry (default 500 ms). */
  baseDelayMs?: number;
  /** The longest wait, Retry-After included (default 30 s). */
  maxDelayMs?: number;
  /** Stops the retries: the wait ends at once and the signal's reason is thrown. */
  signal?: AbortSignal;
  /** Waits ms milliseconds (tests replace it). */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** The statuses retried with the same key: in flight (409 with Retry-After), and 500, 503 and 504. */
export function isRetryable(response: Response): boolean {
  const s = response.status;
  if (s === 409) return response.headers.has("Retry-After");
  return s === 500 || s === 503 || s === 504;
}

/**
 * The wait a response asks for, in milliseconds: Retry-After in seconds or
 * as an HTTP date; undefined when absent or unreadable.
 */
export function retryAfterMs(response: Response, now: number = Date.now()): number | undefined {
  const v = response.headers.get("Retry-After");
  if (v === null) return undefined;
  if (/^\s*\d+\s*$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/**
 * Calls fn with one Idempotency-Key, and again with the same key after a
 * network error (fn threw), a 409 with Retry-After (the first attempt is
 * still in flight) or a 500, 503 or 504, waiting what Retry-After says, or
 * else an exponential backoff. Returns the first other answer, or the last
 * one once maxAttempts are spent; throws fn's error if the last attempt
 * threw.
 *
 *   const { data, error } = await withIdempotency((key) =>
 *     client.POST("/v1/deposits", { params: { header: { "Idempotency-Key": key } }, body }));
 */
export async function withIdempotency<R extends Answer>(
  fn: (key: string, attempt: number) => Promise<R>,
  options: IdempotencyOptions = {},
): Promise<R> {
  const key = options.key ?? randomUUID();
  const maxAttempts = Math.max(1, options.maxAttempts ?? 5);
  const base = options.baseDelayMs ?? 500;
  const cap = options.maxDelayMs ?? 30_000;
  const sleep = options.sleep ?? defaultSleep;
  for (let attempt = 1; ; attempt++) {
    options.signal?.throwIfAborted();
    let wait: number;
    try {
      const answer = await fn(key, attempt);
      const response = answer instanceof Response ? answer : answer.response;
      if (!isRetryable(response) || attempt >= maxAttempts) return answer;
      wait = retryAfterMs(response) ?? base * 2 ** (attempt - 1);
    } catch (err) {
      if (attempt >= maxAttempts || options.signal?.aborted || isAbort(err)) throw err;
      wait = base * 2 ** (attempt - 1);
    }
    await sleep(Math.min(wait, cap), options.signal);
  }
}

function isAbort(err: unknown): boolean {
  return err instanceof Error && (err.name === "AbortError" || err.name === "TimeoutError");
}

function defaultSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
