// hello:start
import { createClient, verifyWebhook, withIdempotency } from "@svc/client";
import type { IncomingMessage } from "node:http";

const svc = createClient({ baseUrl: "http://localhost:8080", apiKey: process.env.SVC_API_KEY ?? "" });

// One Idempotency-Key per deposit, reused by every retry of it.
const { data: deposit, error } = await withIdempotency((key) =>
  svc.POST("/v1/deposits", { params: { header: { "Idempotency-Key": key } }, body: { external_user_id: "alice", asset: "BTC" } }),
);
console.log(deposit ? `pay to ${deposit.address}` : error);

const { data } = await svc.GET("/v1/users/{external_user_id}/balances", { params: { path: { external_user_id: "alice" } } });
console.log(data?.balances);

// In the webhook receiver: the raw body's bytes; throws WebhookVerificationError (answer 401).
export function verified(req: IncomingMessage, rawBody: Buffer) {
  verifyWebhook(process.env.PLATFORM_WEBHOOK_SECRET ?? "", req.headers["x-service-signature"] as string, rawBody);
  return JSON.parse(rawBody.toString("utf8"));
}
// hello:end
