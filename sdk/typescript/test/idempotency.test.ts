import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import { createClient, isApiError, retryAfterMs, withIdempotency } from "../src/index.js";

function answer(status: number, headers: Record<string, string> = {}): { response: Response } {
  return { response: new Response("{}", { status, headers }) };
}

// A sleep that records the waits instead of waiting.
function recorder() {
  const waits: number[] = [];
  return { waits, sleep: async (ms: number) => void waits.push(ms) };
}

test("retries with one key, honoring Retry-After, until an answer that is not a retry", async () => {
  const keys: string[] = [];
  const { waits, sleep } = recorder();
  const script = [
    () => Promise.reject(new TypeError("fetch failed")),
    () => Promise.resolve(answer(409, { "Retry-After": "1" })),
    () => Promise.resolve(answer(503, { "Retry-After": "2" })),
    () => Promise.resolve(answer(503)),
    () => Promise.resolve(answer(201)),
  ];
  const res = await withIdempotency(
    (key, attempt) => {
      keys.push(key);
      return script[attempt - 1]!();
    },
    { sleep, baseDelayMs: 100, maxAttempts: 10 },
  );
  assert.equal(res.response.status, 201);
  assert.equal(keys.length, 5);
  assert.equal(new Set(keys).size, 1, "the same key on every attempt");
  assert.deepEqual(waits, [100, 1000, 2000, 800]);
});

test("each logical call has its own key", async () => {
  const keys = new Set<string>();
  for (let i = 0; i < 3; i++) await withIdempotency(async (key) => (keys.add(key), answer(201)));
  assert.equal(keys.size, 3);
  let given = "";
  await withIdempotency(async (key) => ((given = key), answer(201)), { key: "resume-1" });
  assert.equal(given, "resume-1");
});

test("a final answer is returned at once: 402, 409 without Retry-After, 422, 502", async () => {
  for (const status of [402, 409, 422, 502]) {
    let calls = 0;
    const res = await withIdempotency(async () => (calls++, answer(status)), { sleep: async () => {} });
    assert.equal(res.response.status, status);
    assert.equal(calls, 1, String(status));
  }
});

test("the attempts are bounded: the last answer, or the last error", async () => {
  const { sleep } = recorder();
  let calls = 0;
  const res = await withIdempotency(async () => (calls++, answer(503)), { sleep, maxAttempts: 3 });
  assert.equal(res.response.status, 503);
  assert.equal(calls, 3);
  await assert.rejects(
    withIdempotency(() => Promise.reject(new TypeError("fetch failed")), { sleep, maxAttempts: 2 }),
    TypeError,
  );
});

test("an abort stops the retries", async () => {
  const ctl = new AbortController();
  let calls = 0;
  const p = withIdempotency(async () => (calls++, answer(503, { "Retry-After": "60" })), { signal: ctl.signal });
  setTimeout(() => ctl.abort(new Error("stop")), 20);
  await assert.rejects(p, /stop/);
  assert.equal(calls, 1);
});

test("Retry-After in seconds or as a date", () => {
  const at = Date.parse("2026-01-02T03:04:05Z");
  const r = (v: string) => new Response(null, { status: 503, headers: { "Retry-After": v } });
  assert.equal(retryAfterMs(r("3")), 3000);
  assert.equal(retryAfterMs(r("Fri, 02 Jan 2026 03:04:10 GMT"), at), 5000);
  assert.equal(retryAfterMs(r("soon")), undefined);
  assert.equal(retryAfterMs(new Response(null, { status: 503 })), undefined);
});

// Through openapi-fetch against a real server: a dropped connection and a
// 409 in flight, then the 201; the same key and the same body bytes each time.
test("with the typed client, over HTTP", async (t) => {
  const seen: Array<{ key: string | undefined; auth: string | undefined; body: string }> = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      seen.push({ key: req.headers["idempotency-key"] as string, auth: req.headers.authorization, body });
      if (seen.length === 1) return req.socket.destroy();
      if (seen.length === 2) {
        res.writeHead(409, { "Content-Type": "application/json", "Retry-After": "0" });
        return res.end(JSON.stringify({ detail: "in flight" }));
      }
      res.writeHead(201, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ deposit_id: "0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b", status: "pending" }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => server.close());
  const client = createClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, apiKey: "k" });
  const { data, error, response } = await withIdempotency(
    (key) =>
      client.POST("/v1/deposits", {
        params: { header: { "Idempotency-Key": key } },
        body: { external_user_id: "user-1", asset: "BTC" },
      }),
    { baseDelayMs: 1 },
  );
  assert.equal(response.status, 201);
  assert.equal(error, undefined);
  assert.equal(data?.deposit_id, "0190a6b2-c3d4-7e8f-9a0b-1c2d3e4f5a6b");
  assert.equal(seen.length, 3);
  for (const s of seen) assert.deepEqual(s, seen[0]);
  assert.equal(seen[0]!.auth, "Bearer k");
  assert.ok(!isApiError(data));
});
