-- Ingress: the payment processor's webhook deliveries, stored before they
-- are acknowledged and processed afterwards by a River job inserted in the
-- same transaction.

-- One row per delivery identity. BTCPay retries and redelivers an event
-- under new delivery ids that name the first one in originalDeliveryId;
-- delivery_key is that first id (or the delivery id, or the SHA-256 of the
-- body when the event names none), so every copy of an event is stored
-- once. body keeps the exact signed bytes.
CREATE TABLE processor_webhooks (
    id           bigserial PRIMARY KEY,
    delivery_key text NOT NULL UNIQUE CHECK (length(delivery_key) BETWEEN 1 AND 200),
    delivery_id  text,                          -- the delivery that was stored (null when the body names none)
    event_type   text NOT NULL,
    store_id     text NOT NULL,
    invoice_id   text,
    payout_id    text,
    body         bytea NOT NULL,
    received_at  timestamptz NOT NULL,
    processed_at timestamptz,                   -- set once the event was handed over
    attempts     int NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error   text
);
CREATE INDEX processor_webhooks_invoice ON processor_webhooks (invoice_id) WHERE invoice_id IS NOT NULL;
CREATE INDEX processor_webhooks_payout ON processor_webhooks (payout_id) WHERE payout_id IS NOT NULL;
CREATE INDEX processor_webhooks_unprocessed ON processor_webhooks (received_at) WHERE processed_at IS NULL;
