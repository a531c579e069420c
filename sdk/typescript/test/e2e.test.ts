// The client against the real service: sdk/sdktest (part of make test)
// starts svc api, svc worker and svc simulator and runs `npm test` with
// SVC_SDK_* set. Without them this test is skipped.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";

import {
  createClient,
  isApiError,
  isPoolExhausted,
  isValidationError,
  verifyWebhook,
  WEBHOOK_SIGNATURE_HEADER,
  withIdempotency,
  type Deposit,
  type ServiceEvent,
} from "../src/index.js";

const env = process.env;
const apiURL = env.SVC_SDK_API_URL ?? "";
const apiKey = env.SVC_SDK_API_KEY ?? "";
const adminKey = env.SVC_SDK_ADMIN_KEY ?? "";
const secret = env.SVC_SDK_WEBHOOK_SECRET ?? "";
const receiverPort = Number(env.SVC_SDK_WEBHOOK_PORT ?? 0);
const simURL = env.SVC_SDK_SIMULATOR_URL ?? "";
// A valid regtest address (BIP 173's P2WPKH example) for the withdrawal.
const destination = "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080";

const off = apiURL === "" ? "SVC_SDK_API_URL is not set: the end-to-end flow runs under make test (sdk/sdktest starts the service)" : false;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

/** The simulator's control API (/_sim/...): the processor going down or slow. */
async function sim(path: string, body: unknown = {}) {
  const r = await fetch(`${simURL}/_sim/${path}`, { method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" } });
  assert.equal(r.status, 200, `simulator ${path}: ${await r.text()}`);
}

/** A webhook receiver: every delivery verified with verifyWebhook over its raw bytes and `secret` (settable); 401 otherwise. */
function receiver(secret: string) {
  const events = new Map<string, ServiceEvent>();
  let refused = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const raw = Buffer.concat(chunks);
      try {
        verifyWebhook(rx.secret, req.headers[WEBHOOK_SIGNATURE_HEADER.toLowerCase()] as string | undefined, raw);
      } catch {
        refused++;
        res.writeHead(401).end();
        return;
      }
      const ev = JSON.parse(raw.toString("utf8")) as ServiceEvent;
      events.set(ev.id, ev);
      res.writeHead(200).end();
    });
  });
  const about = (e: ServiceEvent, key: string, id: string) => (e.data as Record<string, unknown>)[key] === id;
  const find = (type: string, key: string, id: string) => [...events.values()].find((e) => e.type === type && about(e, key, id));
  /** The types of the events about data[key] === id. */
  const types = (key: string, id: string) => [...events.values()].filter((e) => about(e, key, id)).map((e) => e.type);
  /** Listens on 127.0.0.1:port (0: any free port); resolves to the receiver's URL. */
  const listen = (port: number) =>
    new Promise<string>((resolve) =>
      server.listen(port, "127.0.0.1", () => resolve(`http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`)),
    );
  const close = () => new Promise<void>((resolve) => server.close(() => resolve()));
  const rx = { secret, server, events, find, types, listen, close, refused: () => refused };
  return rx;
}

test("end to end against the service", { skip: off, timeout: 120_000 }, async (t) => {
  const client = createClient({ baseUrl: apiURL, apiKey });
  // Every event goes to PLATFORM_WEBHOOK_URL, signed with its secret.
  const rx = receiver(secret);
  await rx.listen(receiverPort);
  t.after(rx.close);
  t.after(() => sim("up"));
  const user = `ts-${randomUUID()}`;
  const header = (key: string) => ({ header: { "Idempotency-Key": key } });

  await t.test("422 with field errors", async () => {
    const { error, response } = await client.POST("/v1/deposits", {
      params: header(randomUUID()),
      body: { external_user_id: "", asset: "BTC" },
    });
    assert.equal(response.status, 422);
    assert.ok(isValidationError(error), JSON.stringify(error));
    assert.ok(error.detail.some((f) => f.loc.join(".") === "body.external_user_id"), JSON.stringify(error));
  });

  await t.test("409 with Retry-After while the same key is in flight, then the replay", async () => {
    await sim("slow", { delay: "1s" });
    const key = randomUUID();
    const body = { external_user_id: user, asset: "BTC" as const, expected_amount: "1000" };
    const first = client.POST("/v1/deposits", { params: header(key), body });
    await sleep(300);
    const second = await client.POST("/v1/deposits", { params: header(key), body });
    assert.equal(second.response.status, 409);
    assert.ok(isApiError(second.error), JSON.stringify(second.error));
    assert.equal(second.response.headers.get("Retry-After"), "1");
    // withIdempotency with that key waits Retry-After and gets the first attempt's answer.
    const again = await withIdempotency((k) => client.POST("/v1/deposits", { params: header(k), body }), { key, maxAttempts: 20 });
    await sim("up");
    const done = await first;
    assert.equal(done.response.status, 201);
    assert.equal(again.response.status, 201);
    assert.equal(again.data?.deposit_id, done.data?.deposit_id);
    assert.equal(again.response.headers.get("Idempotent-Replayed"), "true");
  });

  await t.test("503 {detail: string}: the processor unreachable; the same key then creates the deposit", async () => {
    await sim("down", { mode: "error" });
    const key = randomUUID();
    const body = { external_user_id: user, asset: "BTC" as const };
    const down = await client.POST("/v1/deposits", { params: header(key), body });
    await sim("up");
    assert.equal(down.response.status, 503);
    assert.ok(isApiError(down.error) && !isPoolExhausted(down.error), JSON.stringify(down.error));
    const up = await withIdempotency((k) => client.POST("/v1/deposits", { params: header(k), body }), { key });
    assert.equal(up.response.status, 201, JSON.stringify(up.error));
  });

  await t.test("503 {detail: {code, message}}: the USDT address pool exhausted, with Retry-After", async () => {
    await until("USDT_TRC20 enabled", async () => {
      const { data } = await client.GET("/v1/assets");
      return data?.assets.some((a) => a.asset === "USDT_TRC20") ? true : undefined;
    });
    for (let i = 0; ; i++) {
      assert.ok(i < 30, "the pool never ran out");
      const { error, response } = await client.POST("/v1/deposits", {
        params: header(randomUUID()),
        body: { external_user_id: user, asset: "USDT_TRC20", expected_amount: "10000000" },
      });
      if (response.status === 201) continue;
      assert.equal(response.status, 503, JSON.stringify(error));
      assert.ok(isPoolExhausted(error), JSON.stringify(error));
      assert.equal(error.detail.code, "DEPOSIT_TEMPORARILY_UNAVAILABLE");
      assert.match(response.headers.get("Retry-After") ?? "", /^\d+$/);
      break;
    }
  });

  await t.test("402: a withdrawal beyond the balance", async () => {
    const { error, response } = await client.POST("/v1/withdrawals", {
      params: header(randomUUID()),
      body: { external_user_id: user, asset: "BTC", amount: "5000000", destination_address: destination },
    });
    assert.equal(response.status, 402);
    assert.ok(isApiError(error), JSON.stringify(error));
  });

  // An endpoint of this test's own, with a filter, and the secret its creation answers once.
  const ep = receiver("");
  const epURL = await ep.listen(0);
  t.after(ep.close);
  const admin = createClient({ baseUrl: apiURL, apiKey: adminKey });
  const endpoint = await withIdempotency((k) =>
    admin.POST("/v1/admin/webhook-endpoints", {
      params: header(k),
      body: { url: epURL, events: ["deposit.*", "withdrawal.completed"], description: "sdk/typescript end-to-end test" },
    }),
  );
  assert.equal(endpoint.response.status, 201, JSON.stringify(endpoint.error));
  assert.ok(endpoint.data?.secret, "the secret, answered once");
  ep.secret = endpoint.data.secret;

  let deposit: Deposit | undefined;
  await t.test("a deposit through every state: pending, confirming, settled; deposit.settled verified on the endpoint", async (t) => {
    const created = await withIdempotency((k) =>
      client.POST("/v1/deposits", { params: header(k), body: { external_user_id: user, asset: "BTC", expected_amount: "100000" } }),
    );
    assert.equal(created.response.status, 201, JSON.stringify(created.error));
    assert.equal(created.data?.status, "pending");
    const id = created.data!.deposit_id;
    const path = { deposit_id: id };
    const paid = await withIdempotency((k) =>
      client.POST("/v1/test_helpers/deposits/{deposit_id}/pay", { params: { path, ...header(k) }, body: { confirmed: false } }),
    );
    if (paid.response.status === 404) return t.skip("the test helpers answer 404: not served by this build or deployment");
    assert.equal(paid.response.status, 200, JSON.stringify(paid.error));
    assert.equal(paid.data?.status, "confirming");
    const confirmed = await withIdempotency((k) =>
      client.POST("/v1/test_helpers/deposits/{deposit_id}/confirm", { params: { path, ...header(k) }, body: {} }),
    );
    assert.equal(confirmed.response.status, 200, JSON.stringify(confirmed.error));
    assert.equal(confirmed.data?.status, "settled");
    for (const r of [rx, ep]) {
      const ev = await until("deposit.settled", async () => r.find("deposit.settled", "deposit_id", id));
      assert.equal((ev.data as Record<string, unknown>).amount_credited, "0.00100000");
    }
    await until("deposit.detected at the endpoint (deposit.* takes every deposit event)", async () => ep.find("deposit.detected", "deposit_id", id));
    const { data } = await client.GET("/v1/deposits/{deposit_id}", { params: { path } });
    assert.equal(data?.status, "settled");
    deposit = data;
    const balances = await client.GET("/v1/users/{external_user_id}/balances", { params: { path: { external_user_id: user } } });
    assert.equal(balances.data?.balances.find((b) => b.asset === "BTC")?.available, "0.00100000");
  });

  await t.test("a withdrawal through every state: submitted by the worker, broadcast, confirmed; only withdrawal.completed on the endpoint", async (t) => {
    if (deposit === undefined) return t.skip("no settled deposit to withdraw (the test helpers answer 404)");
    const created = await withIdempotency((k) =>
      client.POST("/v1/withdrawals", {
        params: header(k),
        body: { external_user_id: user, asset: "BTC", amount: "50000", destination_address: destination },
      }),
    );
    assert.equal(created.response.status, 201, JSON.stringify(created.error));
    const id = created.data!.withdrawal_id;
    const path = { withdrawal_id: id };
    // Auto-approved, then handed to the processor by the worker.
    await until("submitted by the worker", async () => {
      const { data } = await client.GET("/v1/withdrawals/{withdrawal_id}", { params: { path } });
      return data?.status === "submitted" ? data : undefined;
    });
    const broadcast = await withIdempotency((k) =>
      client.POST("/v1/test_helpers/withdrawals/{withdrawal_id}/broadcast", { params: { path, ...header(k) }, body: {} }),
    );
    assert.equal(broadcast.response.status, 200, JSON.stringify(broadcast.error));
    assert.equal(broadcast.data?.status, "broadcast");
    assert.ok(broadcast.data?.txid);
    const confirmed = await withIdempotency((k) =>
      client.POST("/v1/test_helpers/withdrawals/{withdrawal_id}/confirm", { params: { path, ...header(k) }, body: {} }),
    );
    assert.equal(confirmed.response.status, 200, JSON.stringify(confirmed.error));
    assert.equal(confirmed.data?.status, "confirmed");
    const { data } = await client.GET("/v1/withdrawals/{withdrawal_id}", { params: { path } });
    assert.equal(data?.status, "confirmed");
    // The platform URL gets every event; the endpoint only those its filter takes.
    for (const r of [rx, ep]) await until("withdrawal.completed", async () => r.find("withdrawal.completed", "withdrawal_id", id));
    await until("withdrawal.broadcast at the platform URL", async () => rx.find("withdrawal.broadcast", "withdrawal_id", id));
    assert.deepEqual(ep.types("withdrawal_id", id), ["withdrawal.completed"], "the endpoint's filter takes withdrawal.completed only");
    assert.equal(rx.refused(), 0, "every delivery to the platform URL verified with its secret");
    assert.equal(ep.refused(), 0, "every delivery to the endpoint verified with the secret it was created with");
  });
});
