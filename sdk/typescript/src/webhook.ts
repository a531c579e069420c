// Verification of the service's outbound webhooks: the same scheme, and the
// same verdict on every header, as the service's Go package
// platform/webhooksig (sdk/testdata/webhook-vectors.json, generated from it,
// holds the cases both check).
//
//   X-Service-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">
//
// Several v1 may be sent (during a rotation of the secret the service signs
// with the new and the previous one): any one matching is enough. Keys other
// than t and v1 are ignored, so that a later scheme can be added beside v1.

import { createHmac, timingSafeEqual } from "node:crypto";

/** The name of the signature header (Node lowercases it: `x-service-signature`). */
export const WEBHOOK_SIGNATURE_HEADER = "X-Service-Signature";

/** How far the signed timestamp may be from the receiver's clock, either way. */
export const WEBHOOK_TOLERANCE_SECONDS = 300;

/** Why a delivery was refused; a receiver answers each with a 4xx and does not act on the body. */
export type WebhookFailure = "malformed" | "timestamp" | "mismatch";

/** The error verifyWebhook throws. */
export class WebhookVerificationError extends Error {
  readonly reason: WebhookFailure;
  constructor(reason: WebhookFailure) {
    super(
      {
        malformed: "webhook: malformed signature header",
        timestamp: "webhook: signature timestamp outside the tolerance",
        mismatch: "webhook: signature does not match the body",
      }[reason],
    );
    this.name = "WebhookVerificationError";
    this.reason = reason;
  }
}

/**
 * Checks a delivery, or throws a WebhookVerificationError saying why not.
 *
 * @param secret the signing secret shared with the service (PLATFORM_WEBHOOK_SECRET)
 * @param header the X-Service-Signature value as received
 * @param rawBody the request body exactly as received: its bytes, never a re-encoded copy of parsed JSON
 * @param now the receiver's clock (default: now)
 * @param toleranceSeconds how far the signed time may be from now, either way (default 300)
 */
export function verifyWebhook(
  secret: string | Uint8Array,
  header: string | null | undefined,
  rawBody: string | Uint8Array,
  now: Date = new Date(),
  toleranceSeconds: number = WEBHOOK_TOLERANCE_SECONDS,
): void {
  const { ts, sigs } = parse(header ?? "");
  // The difference in milliseconds, as exact as the clock (Go compares
  // nanoseconds; a Date has milliseconds).
  const skew = now.getTime() - Number(ts) * 1000;
  if (skew > toleranceSeconds * 1000 || skew < -toleranceSeconds * 1000) {
    throw new WebhookVerificationError("timestamp");
  }
  const mac = createHmac("sha256", secret);
  mac.update(ts, "latin1");
  mac.update(".");
  mac.update(rawBody);
  const want = mac.digest();
  let ok = false;
  for (const sig of sigs) {
    // Every signature is compared, in constant time (each is 32 bytes).
    if (timingSafeEqual(sig, want)) ok = true;
  }
  if (!ok) throw new WebhookVerificationError("mismatch");
}

/**
 * Returns the header value for body sent at t, with one v1 per secret: what
 * the service sends. For a receiver's own tests.
 */
export function signWebhook(secrets: Array<string | Uint8Array>, t: Date, rawBody: string | Uint8Array): string {
  const ts = String(Math.floor(t.getTime() / 1000));
  let header = `t=${ts}`;
  for (const s of secrets) {
    header += ",v1=" + createHmac("sha256", s).update(`${ts}.`).update(rawBody).digest("hex");
  }
  return header;
}

// parse splits the header into its timestamp (the digits as sent, which the
// MAC covers) and its decoded v1 signatures, refusing what the Go package
// refuses.
function parse(header: string): { ts: string; sigs: Buffer[] } {
  let ts = "";
  const sigs: Buffer[] = [];
  for (const raw of header.split(",")) {
    const part = trimSpace(raw);
    const eq = part.indexOf("=");
    if (eq < 0) throw new WebhookVerificationError("malformed");
    const k = part.slice(0, eq);
    const v = part.slice(eq + 1);
    if (k === "t") {
      if (ts !== "" || !/^[0-9]{1,18}$/.test(v)) throw new WebhookVerificationError("malformed");
      ts = v;
    } else if (k === "v1") {
      if (!/^[0-9a-fA-F]{64}$/.test(v)) throw new WebhookVerificationError("malformed");
      sigs.push(Buffer.from(v, "hex"));
    }
  }
  if (ts === "" || sigs.length === 0) throw new WebhookVerificationError("malformed");
  return { ts, sigs };
}

// Go's strings.TrimSpace removes the Unicode White_Space characters, which
// are not quite those of String.prototype.trim (that one keeps U+0085 and
// removes U+FEFF).
const SPACE = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g;

function trimSpace(s: string): string {
  return s.replace(SPACE, "");
}
