-- The rolling 24-hour volume (migration 0007) keeps the bucket of the
-- current minute on the asset's window row (docs/performance.md, "The
-- open minute").
--
-- Every withdrawal request of an asset used to write two rows: its window
-- row (the running total, locked so that the gate's decisions are strict)
-- and the bucket of its minute in withdrawal_volume, an upsert of a second
-- row just as hot. Now the minute being filled, the open bucket, lives on
-- the window row itself: the common request is one UPDATE of one row. The
-- open bucket moves to withdrawal_volume when a request of a later minute
-- comes, which is at most once a minute. Nothing about what counts
-- changes: the total is still the sum of the buckets inside the window,
-- the open one included, and withdrawal_window_add returns what it did.
--
-- total and open_gross become the domain nonneg_bigint instead of carrying
-- a table CHECK: PostgreSQL keeps a domain's constraint compiled, where a
-- table's CHECK is read back from its text by every statement that writes
-- the table, a measurable part of a statement this short.

CREATE DOMAIN nonneg_bigint AS bigint CHECK (VALUE >= 0);

ALTER TABLE withdrawal_windows DROP CONSTRAINT withdrawal_windows_total_check;
ALTER TABLE withdrawal_windows ALTER COLUMN total TYPE nonneg_bigint;
ALTER TABLE withdrawal_windows ADD COLUMN open_minute timestamptz,
    ADD COLUMN open_gross nonneg_bigint NOT NULL DEFAULT 0;

COMMENT ON COLUMN withdrawal_windows.open_minute IS
    'the minute of the open bucket: its gross is open_gross, counted in total and not yet in withdrawal_volume';

-- withdrawal_window_add counts p_gross in the bucket of p_now's minute and
-- returns the asset's rolling total including it. A bucket leaves the
-- window when all of its minute is more than 24 hours before p_now, so a
-- withdrawal counts for at least 24 hours and at most one minute longer.
CREATE OR REPLACE FUNCTION withdrawal_window_add(p_asset text, p_gross bigint, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_minute     timestamptz := date_trunc('minute', p_now);
    v_cut        timestamptz := date_trunc('minute', p_now - interval '24 hours');
    v_open       timestamptz;
    v_open_gross bigint;
    v_swept      timestamptz;
    v_expired    bigint;
    v_total      bigint;
BEGIN
    -- The service refuses larger withdrawals before it gets here; this keeps
    -- the sums far from overflowing whatever calls it.
    IF p_gross NOT BETWEEN 1 AND 1000000000000000 THEN
        RAISE EXCEPTION 'withdrawal_window_add: gross % out of range', p_gross USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    -- The common case: the request's minute is the open one and no bucket
    -- has left the window since the last sweep. The update locks the
    -- asset's window row until the transaction ends: from here on,
    -- requests of this asset are serialized.
    UPDATE withdrawal_windows SET total = total + p_gross, open_gross = open_gross + p_gross
     WHERE asset = p_asset AND open_minute = v_minute AND swept_before >= v_cut
    RETURNING total INTO v_total;
    IF FOUND THEN
        RETURN v_total;
    END IF;

    SELECT open_minute, open_gross, swept_before INTO v_open, v_open_gross, v_swept
      FROM withdrawal_windows WHERE asset = p_asset FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO withdrawal_windows (asset) VALUES (p_asset) ON CONFLICT DO NOTHING;
        SELECT open_minute, open_gross, swept_before INTO v_open, v_open_gross, v_swept
          FROM withdrawal_windows WHERE asset = p_asset FOR UPDATE;
    END IF;
    IF v_open IS NULL OR v_minute > v_open THEN
        -- A later minute: the open bucket moves to withdrawal_volume (where
        -- the sweep below takes it out of the window if it is that old) and
        -- this minute's opens.
        IF v_open IS NOT NULL AND v_open_gross > 0 THEN
            INSERT INTO withdrawal_volume (asset, minute, gross) VALUES (p_asset, v_open, v_open_gross)
                ON CONFLICT (asset, minute) DO UPDATE SET gross = withdrawal_volume.gross + EXCLUDED.gross;
        END IF;
        UPDATE withdrawal_windows SET open_minute = v_minute, open_gross = p_gross, total = total + p_gross
         WHERE asset = p_asset;
    ELSIF v_minute = v_open THEN
        UPDATE withdrawal_windows SET open_gross = open_gross + p_gross, total = total + p_gross WHERE asset = p_asset;
    ELSE
        -- An earlier minute than the open one (a clock behind another's):
        -- its bucket is a row of withdrawal_volume, as before the open
        -- minute existed.
        INSERT INTO withdrawal_volume (asset, minute, gross) VALUES (p_asset, v_minute, p_gross)
            ON CONFLICT (asset, minute) DO UPDATE SET gross = withdrawal_volume.gross + EXCLUDED.gross;
        UPDATE withdrawal_windows SET total = total + p_gross WHERE asset = p_asset;
    END IF;
    -- Buckets that left the window, at most once a minute. The open bucket
    -- is never one of them: its minute is the latest seen, never before the
    -- cut of a request it counted for.
    IF v_swept IS NULL OR v_swept < v_cut THEN
        WITH gone AS (
            UPDATE withdrawal_volume SET expired = true
             WHERE asset = p_asset AND NOT expired AND minute < v_cut
            RETURNING gross)
        SELECT coalesce(sum(gross), 0) INTO v_expired FROM gone;
        UPDATE withdrawal_windows SET total = total - v_expired, swept_before = v_cut WHERE asset = p_asset;
    END IF;
    SELECT total INTO v_total FROM withdrawal_windows WHERE asset = p_asset;
    RETURN v_total;
END $$;

-- withdrawal_window_sub takes a withdrawal whose money was returned out of
-- its bucket (and out of the total while the bucket is in the window).
CREATE OR REPLACE FUNCTION withdrawal_window_sub(p_asset text, p_minute timestamptz, p_gross bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_expired boolean;
BEGIN
    UPDATE withdrawal_windows SET open_gross = open_gross - p_gross, total = total - p_gross
     WHERE asset = p_asset AND open_minute = p_minute;
    IF FOUND THEN
        RETURN;
    END IF;
    PERFORM 1 FROM withdrawal_windows WHERE asset = p_asset FOR UPDATE;
    UPDATE withdrawal_volume SET gross = gross - p_gross
     WHERE asset = p_asset AND minute = p_minute
    RETURNING expired INTO v_expired;
    IF FOUND AND NOT v_expired THEN
        UPDATE withdrawal_windows SET total = total - p_gross WHERE asset = p_asset;
    END IF;
END $$;

-- withdrawal_reserve_auto (migration 0026), with its three lookups in one
-- statement and the common case of withdrawal_window_add inline: each
-- statement and each nested call of a PL/pgSQL function costs a creation
-- a measurable share of its time. What it checks and answers is
-- unchanged.
CREATE OR REPLACE FUNCTION withdrawal_reserve_auto(p_key text, p_asset text, p_version bigint, p_gross bigint,
    p_spellings text[], p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_cap    bigint;
    v_known  boolean;
    v_issued boolean;
    v_total  bigint;
BEGIN
    IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto must run in a transaction of its own';
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT a.withdrawal_daily_cap,
           p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency_keys WHERE key = p_key),
           EXISTS (SELECT 1 FROM deposits WHERE address = ANY(p_spellings))
      INTO v_cap, v_known, v_issued
      FROM (SELECT 1) AS one LEFT JOIN assets AS a ON a.asset = p_asset AND a.version = p_version;
    IF v_known THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto: the Idempotency-Key is known' USING ERRCODE = 'SV002';
    END IF;
    IF v_cap IS NULL THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto: asset % is not at version %', p_asset, p_version USING ERRCODE = 'SV002';
    END IF;
    IF v_issued THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto: the destination was issued for a deposit' USING ERRCODE = 'SV002';
    END IF;
    IF p_gross BETWEEN 1 AND 1000000000000000 THEN
        -- withdrawal_window_add's common case, inline.
        UPDATE withdrawal_windows SET total = total + p_gross, open_gross = open_gross + p_gross
         WHERE asset = p_asset AND open_minute = date_trunc('minute', p_now)
           AND swept_before >= date_trunc('minute', p_now - interval '24 hours')
        RETURNING total INTO v_total;
    END IF;
    IF v_total IS NULL THEN
        v_total := withdrawal_window_add(p_asset, p_gross, p_now);
    END IF;
    IF v_total > v_cap THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto: the % daily cap would be passed', p_asset USING ERRCODE = 'SV002';
    END IF;
    RETURN v_total;
END $$;
