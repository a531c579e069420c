-- Every function reads the tables it means, whoever calls it.
--
-- A PL/pgSQL or SQL function resolves an unqualified table name through
-- the search path of the session that calls it, and a session's search
-- path starts with its own temporary schema (pg_temp) unless pg_temp is
-- named in it. A session allowed to create temporary tables could shadow
-- ledger_postings with a table of its own: the trigger that checks a
-- balance against its latest posting, and the deferred trigger that
-- checks that an entry balances, then read the session's rows instead of
-- the ledger's, and accepted a balance moved without a posting or an entry
-- with a single posting.
--
-- Each function below is its latest definition (the migration named with
-- it), unchanged in what it does, with two differences:
--
--   * SET search_path = pg_catalog, public, pg_temp: the function's own
--     search path, whatever the caller's, with pg_temp last (named, so it
--     is not searched first);
--   * every table (and every function of the schema) it reads, writes or
--     calls is named public.<name>, so that nothing depends on the search
--     path at all. A trigger's transition table (new_postings) is not a
--     table of any schema and keeps its name.
--
-- svc migrate, after every migration, also sets this search path on any
-- function of the schema the owner owns that lacks it (River's own
-- included; platform/db.PinSearchPath), and the runtime role may not
-- create temporary tables at all (platform/db.GrantRuntime,
-- docs/operations.md). A function added later must carry the SET clause
-- itself: TestFunctionsPinTheirSearchPath lists every function of the
-- schema and fails on one that does not.

-- 0002
CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'ledger: % on % refused: the ledger is append-only; post a correction entry instead', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END $$;

-- 0025
CREATE OR REPLACE FUNCTION ledger_postings_check() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.id, n.entry_id, n.account_id, n.amount, n.balance_after,
           e.id AS e_id, e.asset AS e_asset, a.id AS a_id, a.asset AS a_asset, a.balance,
           e.created_xact = pg_current_xact_id() AS same_xact, prev.balance_after AS prev_after,
           CASE WHEN a.balance IS NULL
                THEN n.entry_kind IS NOT NULL OR n.entry_ref IS NOT NULL OR n.entry_memo IS NOT NULL OR n.entry_at IS NOT NULL
                ELSE (n.entry_kind, n.entry_ref, n.entry_memo, n.entry_at) IS DISTINCT FROM (e.kind, e.source_ref, e.memo, e.created_at)
           END AS bad_copy
      INTO bad
      FROM new_postings n
      LEFT JOIN public.ledger_entries e ON e.id = n.entry_id
      LEFT JOIN public.ledger_accounts a ON a.id = n.account_id
      LEFT JOIN LATERAL (SELECT q.balance_after FROM public.ledger_postings q
                          WHERE q.account_id = n.account_id AND q.id < n.id
                          ORDER BY q.id DESC LIMIT 1) prev ON a.balance IS NOT NULL
      -- the statement's latest posting on each account (a hash join, so a
      -- bulk insert stays linear)
      LEFT JOIN (SELECT DISTINCT ON (account_id) account_id, id FROM new_postings
                  ORDER BY account_id, id DESC) latest ON latest.id = n.id
     WHERE e.id IS NULL OR a.id IS NULL OR a.asset <> e.asset OR e.created_xact <> pg_current_xact_id()
        OR (a.balance IS NULL AND (n.entry_kind IS NOT NULL OR n.entry_ref IS NOT NULL OR n.entry_memo IS NOT NULL OR n.entry_at IS NOT NULL))
        OR (a.balance IS NOT NULL AND (n.entry_kind, n.entry_ref, n.entry_memo, n.entry_at) IS DISTINCT FROM (e.kind, e.source_ref, e.memo, e.created_at))
        OR (a.balance IS NULL) <> (n.balance_after IS NULL)
        OR n.balance_after <> coalesce(prev.balance_after, 0) + n.amount
        OR (latest.id IS NOT NULL AND n.balance_after <> a.balance)
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF bad.e_id IS NULL OR bad.a_id IS NULL OR bad.a_asset <> bad.e_asset OR NOT bad.same_xact THEN
        RAISE EXCEPTION 'ledger: posting % refused: entry % (found: %, same transaction: %), account % (found: %, asset % vs entry asset %)',
            bad.id, bad.entry_id, bad.e_id IS NOT NULL, coalesce(bad.same_xact, false),
            bad.account_id, bad.a_id IS NOT NULL, bad.a_asset, bad.e_asset
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_postings_check';
    END IF;
    IF bad.bad_copy THEN
        RAISE EXCEPTION 'ledger: posting % refused: %',
            bad.id, CASE WHEN bad.balance IS NULL
                         THEN format('account %s is a system account, whose postings carry no copy of their entry', bad.account_id)
                         ELSE format('its copies of entry %s (kind, source_ref, memo, created_at) are not the entry''s', bad.entry_id) END
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_posting_entry_copies';
    END IF;
    RAISE EXCEPTION 'ledger: posting % refused: account % would hold % after it (its previous posting left %, amount %), but its balance is %',
        bad.id, bad.account_id, coalesce(bad.balance_after::text, 'nothing'), coalesce(bad.prev_after, 0), bad.amount,
        coalesce(bad.balance::text, 'not materialized')
        USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_balance_posted';
END $$;

-- 0002
CREATE OR REPLACE FUNCTION ledger_entry_balanced() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    n     bigint;
    total numeric;
BEGIN
    SELECT count(*), coalesce(sum(amount), 0) INTO n, total FROM public.ledger_postings WHERE entry_id = NEW.id;
    IF n < 2 OR total <> 0 THEN
        RAISE EXCEPTION 'ledger: entry % (% %) is unbalanced: % postings summing to %', NEW.id, NEW.kind, NEW.source_ref, n, total
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_entries_balanced';
    END IF;
    RETURN NULL;
END $$;

-- 0002
CREATE OR REPLACE FUNCTION ledger_refuse_partial_debit(entry_kind text, ref text, line int) RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'ledger: % % refused: insufficient funds for line %', entry_kind, ref, line
        USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_accounts_balance_nonneg', DETAIL = line::text;
END $$;

-- 0002
CREATE OR REPLACE FUNCTION ledger_system_accounts() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO public.ledger_accounts (asset, kind, owner)
    SELECT NEW.asset, k, '' FROM unnest(ARRAY['custody', 'in_flight', 'fee_income', 'network_fees', 'suspense']) AS k
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

-- 0014
CREATE OR REPLACE FUNCTION ledger_account_balance_posted() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    after bigint;
BEGIN
    SELECT p.balance_after INTO after FROM public.ledger_postings p WHERE p.account_id = NEW.id ORDER BY p.id DESC LIMIT 1;
    IF coalesce(after, 0) <> NEW.balance THEN
        RAISE EXCEPTION 'ledger: % of the balance of account % (%) refused: % is not what its postings add up to (%); balances move only with their postings',
            TG_OP, NEW.id, NEW.kind, NEW.balance, coalesce(after, 0)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_balance_posted';
    END IF;
    RETURN NULL;
END $$;

-- 0020
CREATE OR REPLACE FUNCTION ledger_checkpoint_leaves() RETURNS TABLE (seq bigint, "position" integer, entry_id bigint, leaf bytea)
    LANGUAGE sql STABLE SET search_path = pg_catalog, public, pg_temp AS $$
SELECT b.seq, b.block * 1024 + i, ('x' || encode(substr(b.entry_ids, 8 * i + 1, 8), 'hex'))::bit(64)::bigint,
       substr(b.leaves, 32 * i + 1, 32)
  FROM public.ledger_checkpoint_blocks b, generate_series(0, octet_length(b.entry_ids) / 8 - 1) i
$$;

-- 0015
CREATE OR REPLACE FUNCTION outbound_events_guard() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'outbound events are never deleted (event %)', OLD.id;
    END IF;
    IF NEW.id <> OLD.id OR NEW.type <> OLD.type OR NEW.created_at <> OLD.created_at
       OR NEW.payload::text <> OLD.payload::text OR NEW.xact_id <> OLD.xact_id THEN
        RAISE EXCEPTION 'the id, type, created_at, payload and xact_id of an outbound event never change (event %)', OLD.id;
    END IF;
    RETURN NEW;
END
$$;

-- 0005
CREATE OR REPLACE FUNCTION deposit_payments_keep_credit() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
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

-- 0006
CREATE OR REPLACE FUNCTION audit_log_refuse_change() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'audit: % on audit_log refused: the audit trail is append-only', TG_OP
        USING ERRCODE = 'restrict_violation';
END $$;

-- 0008
CREATE OR REPLACE FUNCTION idempotency_claim(p_key text, p_method text, p_path text, p_hash bytea, p_token uuid, p_now timestamptz)
RETURNS boolean LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'idempotency_claim must run in a transaction of its own';
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    INSERT INTO public.idempotency_keys (key, method, path, request_hash, state, lock_token, locked_at, created_at)
    VALUES (p_key, p_method, p_path, p_hash, 'in_flight', p_token, p_now, p_now)
    ON CONFLICT (key) DO NOTHING;
    RETURN FOUND;
END $$;

-- 0013
CREATE OR REPLACE FUNCTION idempotency_require_claim(completed boolean) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF NOT completed THEN
        RAISE EXCEPTION 'idempotency key taken over by a newer attempt' USING ERRCODE = 'SV001';
    END IF;
    RETURN true;
END $$;

-- 0026
CREATE OR REPLACE FUNCTION assets_next_version() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    NEW.version := OLD.version + 1;
    RETURN NEW;
END $$;

-- 0027
CREATE OR REPLACE FUNCTION withdrawal_window_add(p_asset text, p_gross bigint, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
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
    UPDATE public.withdrawal_windows SET total = total + p_gross, open_gross = open_gross + p_gross
     WHERE asset = p_asset AND open_minute = v_minute AND swept_before >= v_cut
    RETURNING total INTO v_total;
    IF FOUND THEN
        RETURN v_total;
    END IF;

    SELECT open_minute, open_gross, swept_before INTO v_open, v_open_gross, v_swept
      FROM public.withdrawal_windows WHERE asset = p_asset FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO public.withdrawal_windows (asset) VALUES (p_asset) ON CONFLICT DO NOTHING;
        SELECT open_minute, open_gross, swept_before INTO v_open, v_open_gross, v_swept
          FROM public.withdrawal_windows WHERE asset = p_asset FOR UPDATE;
    END IF;
    IF v_open IS NULL OR v_minute > v_open THEN
        -- A later minute: the open bucket moves to withdrawal_volume (where
        -- the sweep below takes it out of the window if it is that old) and
        -- this minute's opens.
        IF v_open IS NOT NULL AND v_open_gross > 0 THEN
            INSERT INTO public.withdrawal_volume (asset, minute, gross) VALUES (p_asset, v_open, v_open_gross)
                ON CONFLICT (asset, minute) DO UPDATE SET gross = withdrawal_volume.gross + EXCLUDED.gross;
        END IF;
        UPDATE public.withdrawal_windows SET open_minute = v_minute, open_gross = p_gross, total = total + p_gross
         WHERE asset = p_asset;
    ELSIF v_minute = v_open THEN
        UPDATE public.withdrawal_windows SET open_gross = open_gross + p_gross, total = total + p_gross WHERE asset = p_asset;
    ELSE
        -- An earlier minute than the open one (a clock behind another's):
        -- its bucket is a row of withdrawal_volume, as before the open
        -- minute existed.
        INSERT INTO public.withdrawal_volume (asset, minute, gross) VALUES (p_asset, v_minute, p_gross)
            ON CONFLICT (asset, minute) DO UPDATE SET gross = withdrawal_volume.gross + EXCLUDED.gross;
        UPDATE public.withdrawal_windows SET total = total + p_gross WHERE asset = p_asset;
    END IF;
    -- Buckets that left the window, at most once a minute. The open bucket
    -- is never one of them: its minute is the latest seen, never before the
    -- cut of a request it counted for.
    IF v_swept IS NULL OR v_swept < v_cut THEN
        WITH gone AS (
            UPDATE public.withdrawal_volume SET expired = true
             WHERE asset = p_asset AND NOT expired AND minute < v_cut
            RETURNING gross)
        SELECT coalesce(sum(gross), 0) INTO v_expired FROM gone;
        UPDATE public.withdrawal_windows SET total = total - v_expired, swept_before = v_cut WHERE asset = p_asset;
    END IF;
    SELECT total INTO v_total FROM public.withdrawal_windows WHERE asset = p_asset;
    RETURN v_total;
END $$;

-- 0030
CREATE OR REPLACE FUNCTION withdrawal_window_sub(p_asset text, p_minute timestamptz, p_gross bigint) RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    v_expired boolean;
BEGIN
    UPDATE public.withdrawal_windows SET open_gross = open_gross - p_gross, total = total - p_gross
     WHERE asset = p_asset AND open_minute = p_minute AND open_gross >= p_gross;
    IF FOUND THEN
        RETURN;
    END IF;
    PERFORM 1 FROM public.withdrawal_windows WHERE asset = p_asset FOR UPDATE;
    UPDATE public.withdrawal_volume SET gross = gross - p_gross
     WHERE asset = p_asset AND minute = p_minute
    RETURNING expired INTO v_expired;
    IF FOUND AND NOT v_expired THEN
        UPDATE public.withdrawal_windows SET total = total - p_gross WHERE asset = p_asset;
    END IF;
END $$;

-- 0007
CREATE OR REPLACE FUNCTION withdrawal_window_reserve(p_asset text, p_gross bigint, p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'withdrawal_window_reserve must run in a transaction of its own';
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN public.withdrawal_window_add(p_asset, p_gross, p_now);
END $$;

-- 0027
CREATE OR REPLACE FUNCTION withdrawal_reserve_auto(p_key text, p_asset text, p_version bigint, p_gross bigint,
    p_spellings text[], p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
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
           p_key IS NOT NULL AND EXISTS (SELECT 1 FROM public.idempotency_keys WHERE key = p_key),
           EXISTS (SELECT 1 FROM public.deposits WHERE address = ANY(p_spellings))
      INTO v_cap, v_known, v_issued
      FROM (SELECT 1) AS one LEFT JOIN public.assets AS a ON a.asset = p_asset AND a.version = p_version;
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
        UPDATE public.withdrawal_windows SET total = total + p_gross, open_gross = open_gross + p_gross
         WHERE asset = p_asset AND open_minute = date_trunc('minute', p_now)
           AND swept_before >= date_trunc('minute', p_now - interval '24 hours')
        RETURNING total INTO v_total;
    END IF;
    IF v_total IS NULL THEN
        v_total := public.withdrawal_window_add(p_asset, p_gross, p_now);
    END IF;
    IF v_total > v_cap THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto: the % daily cap would be passed', p_asset USING ERRCODE = 'SV002';
    END IF;
    RETURN v_total;
END $$;
