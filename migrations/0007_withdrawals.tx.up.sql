-- Withdrawals (modules/withdrawal owns these tables): the requests, the
-- operators' approvals, and the per-asset rolling 24-hour volume that the
-- daily-cap gate reads.

-- Two more per-asset withdrawal settings, changed at run time like the
-- others (svc admin assets set). NULL means off.
--   withdrawal_user_daily_cap:       a user's rolling 24-hour total per asset
--                                    above which their withdrawals wait for
--                                    an operator (gate c).
--   withdrawal_four_eyes_threshold:  a gross above which approval needs two
--                                    different operators.
ALTER TABLE assets
    ADD COLUMN withdrawal_user_daily_cap      bigint CHECK (withdrawal_user_daily_cap >= 0),
    ADD COLUMN withdrawal_four_eyes_threshold bigint CHECK (withdrawal_four_eyes_threshold >= 0);

CREATE TABLE withdrawals (
    id                  uuid PRIMARY KEY,
    external_user_id    text NOT NULL CHECK (char_length(external_user_id) BETWEEN 1 AND 255),
    -- Not a foreign key: every withdrawal would take a key-share lock on its
    -- asset's row, one hot row per asset again (the ledger avoids it for the
    -- same reason). Assets are never deleted, and creation reads the asset
    -- first.
    asset               text NOT NULL,
    status              text NOT NULL CHECK (status IN ('requested', 'pending_approval', 'approved', 'rejected',
                                                         'submitting', 'submitted', 'broadcast', 'confirmed',
                                                         'failed', 'refunded')),
    -- what was checked, in canonical form (lower-case bech32 and BOLT11)
    destination         text NOT NULL CHECK (char_length(destination) BETWEEN 1 AND 2048),
    amount_gross        bigint NOT NULL CHECK (amount_gross > 0),
    fee_mode            text NOT NULL CHECK (fee_mode IN ('deduct', 'absorb')),
    -- the fee estimated at creation, which decided dust and the minimum
    fee_estimate        bigint NOT NULL CHECK (fee_estimate >= 0),
    -- fixed at submission (for USDT_TRC20, at approval) and never changed
    fee                 bigint CHECK (fee >= 0),
    amount_net          bigint CHECK (amount_net > 0),
    approval_mode       text CHECK (approval_mode IN ('auto', 'manual')),
    approval_reason     text,
    -- the minute of the per-asset volume bucket this withdrawal was counted in
    volume_minute       timestamptz NOT NULL,
    -- BTC_LN: the invoice's payment hash and expiry
    payment_hash        text,
    invoice_expires_at  timestamptz,
    txid                text,
    failure_reason      text,
    backend_ref         text,
    approved_by         text,
    rejected_by         text,
    released_by         text,
    release_attestation text CHECK (char_length(release_attestation) BETWEEN 10 AND 2000),
    idempotency_key     text UNIQUE,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    CHECK ((fee IS NULL) = (amount_net IS NULL)),
    CHECK (status <> 'refunded' OR rejected_by IS NOT NULL OR released_by IS NOT NULL OR failure_reason IS NOT NULL),
    CHECK ((released_by IS NULL) = (release_attestation IS NULL))
);
-- A user's list, newest first (keyset on created_at, id); the per-user
-- daily cap reads the same index (a user's last 24 hours).
CREATE INDEX withdrawals_user ON withdrawals (external_user_id, created_at DESC, id DESC);
-- The admin list, oldest first, whole or by status.
CREATE INDEX withdrawals_created ON withdrawals (created_at, id);
CREATE INDEX withdrawals_status ON withdrawals (status, created_at, id);
-- A transaction pays one withdrawal: a txid reported twice is refused.
CREATE UNIQUE INDEX withdrawals_txid ON withdrawals (asset, txid) WHERE txid IS NOT NULL;

-- One row per operator approval. Four-eyes approval needs two rows by two
-- different operators; (withdrawal_id, actor) makes the same operator
-- approving twice impossible.
CREATE TABLE withdrawal_approvals (
    withdrawal_id uuid NOT NULL REFERENCES withdrawals (id),
    actor         text NOT NULL,
    actor_label   text NOT NULL,
    note          text CHECK (char_length(note) <= 2000),
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (withdrawal_id, actor)
);

-- The rolling 24-hour volume of each asset (gate b), counted by the minute.
-- withdrawal_volume holds one bucket per asset and minute: the gross of the
-- withdrawals created in that minute whose money has not been returned.
-- withdrawal_windows holds each asset's running total of the buckets that
-- are still inside the window. Both are only changed through the functions
-- below, which lock the asset's window row first, so the total is exact and
-- every decision that reads it is serialized per asset, at the cost of one
-- short statement instead of a sum over every recent withdrawal.
CREATE TABLE withdrawal_windows (
    asset        text PRIMARY KEY,
    total        bigint NOT NULL DEFAULT 0 CHECK (total >= 0),
    -- buckets before this minute have been taken out of total
    swept_before timestamptz
);
INSERT INTO withdrawal_windows (asset) SELECT asset FROM assets;

CREATE TABLE withdrawal_volume (
    asset   text NOT NULL,
    minute  timestamptz NOT NULL,
    gross   bigint NOT NULL CHECK (gross >= 0),
    -- true once the bucket left the window and was taken out of the total
    expired boolean NOT NULL DEFAULT false,
    PRIMARY KEY (asset, minute)
);
CREATE INDEX withdrawal_volume_live ON withdrawal_volume (asset, minute) WHERE NOT expired;

-- withdrawal_window_add counts p_gross in the bucket of p_now's minute and
-- returns the asset's rolling total including it. A bucket leaves the
-- window when all of its minute is more than 24 hours before p_now, so a
-- withdrawal counts for at least 24 hours and at most one minute longer.
CREATE FUNCTION withdrawal_window_add(p_asset text, p_gross bigint, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_cut     timestamptz := date_trunc('minute', p_now - interval '24 hours');
    v_swept   timestamptz;
    v_expired bigint;
    v_total   bigint;
BEGIN
    -- The service refuses larger withdrawals before it gets here; this keeps
    -- the sums far from overflowing whatever calls it.
    IF p_gross NOT BETWEEN 1 AND 1000000000000000 THEN
        RAISE EXCEPTION 'withdrawal_window_add: gross % out of range', p_gross USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    -- The update locks the asset's window row until the transaction ends:
    -- from here on, requests of this asset are serialized.
    UPDATE withdrawal_windows SET total = total + p_gross WHERE asset = p_asset
        RETURNING total, swept_before INTO v_total, v_swept;
    IF NOT FOUND THEN
        INSERT INTO withdrawal_windows (asset) VALUES (p_asset) ON CONFLICT DO NOTHING;
        UPDATE withdrawal_windows SET total = total + p_gross WHERE asset = p_asset
            RETURNING total, swept_before INTO v_total, v_swept;
    END IF;
    -- Buckets that left the window, at most once a minute.
    IF v_swept IS NULL OR v_swept < v_cut THEN
        WITH gone AS (
            UPDATE withdrawal_volume SET expired = true
             WHERE asset = p_asset AND NOT expired AND minute < v_cut
            RETURNING gross)
        SELECT coalesce(sum(gross), 0) INTO v_expired FROM gone;
        UPDATE withdrawal_windows SET total = total - v_expired, swept_before = v_cut WHERE asset = p_asset
            RETURNING total INTO v_total;
    END IF;
    INSERT INTO withdrawal_volume (asset, minute, gross) VALUES (p_asset, date_trunc('minute', p_now), p_gross)
        ON CONFLICT (asset, minute) DO UPDATE SET gross = withdrawal_volume.gross + EXCLUDED.gross;
    RETURN v_total;
END $$;

-- withdrawal_window_sub takes a withdrawal whose money was returned out of
-- its bucket (and out of the total while the bucket is in the window).
CREATE FUNCTION withdrawal_window_sub(p_asset text, p_minute timestamptz, p_gross bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_expired boolean;
BEGIN
    PERFORM 1 FROM withdrawal_windows WHERE asset = p_asset FOR UPDATE;
    UPDATE withdrawal_volume SET gross = gross - p_gross
     WHERE asset = p_asset AND minute = p_minute
    RETURNING expired INTO v_expired;
    IF FOUND AND NOT v_expired THEN
        UPDATE withdrawal_windows SET total = total - p_gross WHERE asset = p_asset;
    END IF;
END $$;

-- withdrawal_window_reserve is withdrawal_window_add as a transaction of
-- its own, run before the withdrawal's transaction (escrow): the asset's
-- window row is then locked only for this one statement, not until the
-- withdrawal commits, so concurrent withdrawals of one asset are decided
-- one after the other without waiting for each other's commits. Its commit
-- does not wait for the WAL flush: the withdrawal's own commit, later in
-- the WAL, flushes it, so a withdrawal that survives a crash always has its
-- reservation. A reservation whose withdrawal then fails is given back with
-- withdrawal_window_sub; one lost to a crash in between over-counts until
-- it leaves the window, which errs on the side of the operator.
--
-- It must be its own transaction (the synchronous_commit it turns off would
-- otherwise apply to the caller's writes): it refuses to run in a
-- transaction that has written anything.
CREATE FUNCTION withdrawal_window_reserve(p_asset text, p_gross bigint, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'withdrawal_window_reserve must run in a transaction of its own';
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN withdrawal_window_add(p_asset, p_gross, p_now);
END $$;
