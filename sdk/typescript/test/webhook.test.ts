import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { signWebhook, verifyWebhook, WebhookVerificationError } from "../src/index.js";

// The shared vectors, generated from the service's Go verifier
// (sdk/go/webhook_vectors_test.go): the same bytes, the same verdicts.
interface Vector {
  name: string;
  secret: string;
  header: string;
  body_base64: string;
  now_unix_ms: number;
  want: "" | "malformed" | "timestamp" | "mismatch";
}
const vectors: Vector[] = JSON.parse(
  readFileSync(new URL("../../../testdata/webhook-vectors.json", import.meta.url), "utf8"),
);

function verdict(fn: () => void): string {
  try {
    fn();
    return "";
  } catch (err) {
    if (err instanceof WebhookVerificationError) return err.reason;
    throw err;
  }
}

test("the shared vectors give the Go verifier's verdicts", () => {
  assert.ok(vectors.length >= 30);
  for (const v of vectors) {
    const body = Buffer.from(v.body_base64, "base64");
    const got = verdict(() => verifyWebhook(v.secret, v.header, body, new Date(v.now_unix_ms)));
    assert.equal(got, v.want, v.name);
  }
});

test("a body given as a string is its UTF-8 bytes", () => {
  for (const v of vectors.filter((v) => ["DocsExample", "UTF8Body", "BodyChanged", "Exact"].includes(v.name))) {
    const body = Buffer.from(v.body_base64, "base64").toString("utf8");
    assert.equal(verdict(() => verifyWebhook(v.secret, v.header, body, new Date(v.now_unix_ms))), v.want, v.name);
  }
});

test("a missing header is malformed", () => {
  assert.equal(verdict(() => verifyWebhook("s", undefined, "{}")), "malformed");
  assert.equal(verdict(() => verifyWebhook("s", null, "{}")), "malformed");
});

test("signWebhook signs as the service does, one v1 per secret", () => {
  const docs = vectors.find((v) => v.name === "DocsExample")!;
  const body = Buffer.from(docs.body_base64, "base64");
  assert.equal(signWebhook([docs.secret], new Date(docs.now_unix_ms), body), docs.header);
  const now = new Date();
  const header = signWebhook(["new", "old"], now, "{}");
  assert.match(header, /^t=\d+,v1=[0-9a-f]{64},v1=[0-9a-f]{64}$/);
  verifyWebhook("old", header, "{}", now);
  verifyWebhook("new", header, "{}", now);
  assert.equal(verdict(() => verifyWebhook("other", header, "{}", now)), "mismatch");
});
