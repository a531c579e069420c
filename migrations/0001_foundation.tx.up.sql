-- Foundation: API keys, idempotency records, assets, worker heartbeats.

CREATE TABLE api_keys (
    id           text PRIMARY KEY,                       -- "key_<random>", shown by keys list
    scope        text NOT NULL CHECK (scope IN ('readwrite', 'admin')),
    label        text NOT NULL CHECK (length(label) BETWEEN 1 AND 200),
    mode         text NOT NULL CHECK (mode IN ('live', 'test')),
    secret_hash  bytea NOT NULL UNIQUE,                  -- SHA-256 of the whole key; the key itself is never stored
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    revoked_at   timestamptz,
    last_used_at timestamptz
);

-- One row per Idempotency-Key (global, so a retry after a key rotation
-- still finds the first attempt). request_hash covers method, route and the
-- exact body bytes.
CREATE TABLE idempotency_keys (
    key             text PRIMARY KEY CHECK (length(key) BETWEEN 1 AND 255),
    method          text NOT NULL,
    path            text NOT NULL,
    request_hash    bytea NOT NULL,
    state           text NOT NULL CHECK (state IN ('in_flight', 'completed')),
    lock_token      uuid,                                 -- the attempt that owns an in_flight record
    locked_at       timestamptz,
    response_status int,
    response_body   bytea,
    response_type   text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz,
    CHECK ((state = 'completed') = (response_status IS NOT NULL))
);
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);

-- Assets and their run-time withdrawal limits, in smallest units.
CREATE TABLE assets (
    asset                 text PRIMARY KEY,
    display_name          text NOT NULL,
    decimals              int NOT NULL CHECK (decimals BETWEEN 0 AND 18),
    unit_name             text NOT NULL,
    payment_method        text NOT NULL,                 -- the processor's payment method id
    enabled               boolean NOT NULL DEFAULT false,
    withdrawal_min        bigint NOT NULL CHECK (withdrawal_min >= 0),
    withdrawal_auto_limit bigint NOT NULL CHECK (withdrawal_auto_limit >= 0),
    withdrawal_daily_cap  bigint NOT NULL CHECK (withdrawal_daily_cap >= 0),
    withdrawal_flat_fee   bigint NOT NULL CHECK (withdrawal_flat_fee >= 0),
    updated_at            timestamptz NOT NULL DEFAULT now()
);

-- BTC is on until discovery says otherwise; BTC_LN and USDT_TRC20 stay off
-- until the processor shows their payment methods (and, for BTC_LN, the
-- deployment opts in).
INSERT INTO assets (asset, display_name, decimals, unit_name, payment_method, enabled,
                    withdrawal_min, withdrawal_auto_limit, withdrawal_daily_cap, withdrawal_flat_fee) VALUES
    ('BTC',        'Bitcoin',            8, 'sat',    'BTC-CHAIN', true,  10000,    1000000,    10000000,    0),
    ('BTC_LN',     'Bitcoin (Lightning)', 8, 'sat',   'BTC-LN',    false, 1000,     100000,     1000000,     10),
    ('USDT_TRC20', 'Tether USD (TRON)',  6, 'micro-USDT', 'USDT-TRON', false, 10000000, 1000000000, 10000000000, 2000000);

CREATE TABLE worker_heartbeats (
    worker_id text PRIMARY KEY,
    beat_at   timestamptz NOT NULL
);
