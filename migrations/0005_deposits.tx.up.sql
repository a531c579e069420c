-- Deposits (modules/deposit owns these tables): one row per deposit, one
-- row per processor payment against it, and the wallet receives that match
-- no payment.
--
-- What the database itself refuses, whatever the code above it does:
--   * a status outside the SPEC's eight;
--   * two deposits created by one Idempotency-Key, two deposits on one
--     processor invoice, two open reservations of one USDT pool address
--     taken by the same deposit twice (the pool is checked by the code under
--     an advisory lock; a clash with another deposit is recorded, not hidden);
--   * one processor payment recorded twice, or credited by two ledger
--     entries (payment_id and ledger_entry_id are unique);
--   * a credited payment without its ledger entry, time and resolver, or
--     with an amount that is not whole smallest units;
--   * un-crediting a payment, changing what a credited payment was worth or
--     which entry credited it, and deleting a payment (a credit is never
--     reversed: a correction is a new ledger entry).

CREATE TABLE deposits (
    id                     uuid PRIMARY KEY,
    external_user_id       text NOT NULL CHECK (char_length(external_user_id) BETWEEN 1 AND 255),
    asset                  text NOT NULL REFERENCES assets (asset),
    status                 text NOT NULL CHECK (status IN ('creating', 'pending', 'confirming', 'settled',
                                                           'expired', 'review', 'dismissed', 'failed')),
    -- The Idempotency-Key of the request that created it: a retry with the
    -- same key finds this deposit and completes it instead of making another.
    idempotency_key        text UNIQUE CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    amount_expected        bigint CHECK (amount_expected > 0),
    invoice_id             text UNIQUE,
    address                text,
    checkout_link          text,
    expires_at             timestamptz,
    -- Until when the processor still watches the invoice; the poller keeps
    -- reconciling settled, expired and review deposits until then.
    monitoring_until       timestamptz,
    -- USDT pool reservations: held from reserved_from until released_at,
    -- which the release job sets once reserved_until (invoice expiry plus
    -- the grace) has passed.
    address_reserved_from  timestamptz,
    address_reserved_until timestamptz,
    address_released_at    timestamptz,
    -- The processor handed out an address another open deposit still held:
    -- every payment to this deposit goes to review.
    address_clash          boolean NOT NULL DEFAULT false,
    -- An invoice-level reason for review (marked by hand, failed to confirm),
    -- recorded once so that later reconciles do not raise it again.
    invoice_review         text,
    review_reason          text,
    review_at              timestamptz,
    failure_reason         text,
    -- Set when the deposit first settled or expired: a payment first seen
    -- after that is "a later payment to the same address" (review).
    closed_at              timestamptz,
    polled_at              timestamptz,
    created_at             timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL,
    CONSTRAINT deposits_invoice CHECK (status IN ('creating', 'failed') OR invoice_id IS NOT NULL),
    CONSTRAINT deposits_reservation CHECK (address_reserved_from IS NULL OR address_reserved_until IS NOT NULL)
);

-- A user's deposits, newest first (keyset pagination on (created_at, id)).
CREATE INDEX deposits_user ON deposits (external_user_id, created_at DESC, id DESC);
-- What the poller visits: open deposits and those still monitored.
CREATE INDEX deposits_poll ON deposits (polled_at NULLS FIRST)
    WHERE status IN ('creating', 'pending', 'confirming', 'settled', 'expired', 'review');
CREATE INDEX deposits_review ON deposits (review_at, id) WHERE status = 'review';
CREATE INDEX deposits_address ON deposits (address) WHERE address IS NOT NULL;
-- USDT reservations still held (the pool's occupancy).
CREATE INDEX deposits_pool_held ON deposits (address_reserved_until)
    WHERE asset = 'USDT_TRC20' AND address_released_at IS NULL AND status <> 'failed';

CREATE TABLE deposit_payments (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    deposit_id       uuid NOT NULL REFERENCES deposits (id),
    -- The processor's payment id ("<txid>-<vout>", a Lightning payment hash,
    -- "<txhash>-<index>" for USDT), or "marked:<invoice id>" for the value
    -- of an invoice marked settled by hand and credited by an operator.
    payment_id       text NOT NULL UNIQUE CHECK (char_length(payment_id) BETWEEN 1 AND 300),
    -- The on-chain transaction, for matching wallet receives (BTC only).
    txid             text,
    -- What the payment was worth (value minus the processor's method fee),
    -- exactly as the processor reported it, and in smallest units when it
    -- converts without rounding (NULL: it does not, and it is in review).
    amount           text NOT NULL CHECK (amount ~ '^[0-9]+(\.[0-9]+)?$'),
    units            bigint CHECK (units >= 0),
    processor_status text NOT NULL CHECK (processor_status IN ('Processing', 'Settled', 'Invalid', 'Marked')),
    received_at      timestamptz NOT NULL,
    after_expiration boolean NOT NULL,
    review_reason    text,
    credited         boolean NOT NULL DEFAULT false,
    credited_at      timestamptz,
    -- 'auto', or the id of the admin key (or the CLI operator) that resolved it.
    resolved_by      text CHECK (char_length(resolved_by) BETWEEN 1 AND 255),
    ledger_entry_id  bigint UNIQUE,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    CONSTRAINT deposit_payments_credit CHECK (
        credited = (credited_at IS NOT NULL) AND credited = (ledger_entry_id IS NOT NULL)
        AND (NOT credited OR (resolved_by IS NOT NULL AND units > 0)))
);
CREATE INDEX deposit_payments_deposit ON deposit_payments (deposit_id, received_at, id);
CREATE INDEX deposit_payments_txid ON deposit_payments (txid) WHERE txid IS NOT NULL;

CREATE FUNCTION deposit_payments_keep_credit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'deposit payments are never deleted' USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.credited AND (NOT NEW.credited OR NEW.units IS DISTINCT FROM OLD.units
                         OR NEW.amount IS DISTINCT FROM OLD.amount
                         OR NEW.ledger_entry_id IS DISTINCT FROM OLD.ledger_entry_id
                         OR NEW.credited_at IS DISTINCT FROM OLD.credited_at
                         OR NEW.resolved_by IS DISTINCT FROM OLD.resolved_by
                         OR NEW.deposit_id IS DISTINCT FROM OLD.deposit_id
                         OR NEW.payment_id IS DISTINCT FROM OLD.payment_id) THEN
        RAISE EXCEPTION 'a credited deposit payment is never changed (payment %)', OLD.payment_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER deposit_payments_keep_credit BEFORE UPDATE OR DELETE ON deposit_payments
    FOR EACH ROW EXECUTE FUNCTION deposit_payments_keep_credit();

-- BTC wallet receives that match no deposit payment, each recorded once.
CREATE TABLE wallet_alerts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    asset         text NOT NULL REFERENCES assets (asset),
    txid          text NOT NULL,
    amount        bigint NOT NULL CHECK (amount > 0),
    confirmations bigint CHECK (confirmations >= 0),
    detected_at   timestamptz NOT NULL,
    note          text,
    CONSTRAINT wallet_alerts_once UNIQUE (asset, txid)
);
