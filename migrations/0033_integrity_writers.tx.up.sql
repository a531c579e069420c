-- The integrity records (docs/checkpoints.md, docs/provable-custody.md) are
-- written only through the functions below, which run as the schema owner
-- (SECURITY DEFINER) and compute from the caller's own snapshot what a
-- record claims about the ledger: its transaction-id bounds, its sums and
-- its timestamps. svc migrate (platform/db.GrantRuntime) leaves the runtime
-- role SELECT alone on ledger_checks, ledger_checkpoints,
-- ledger_checkpoint_blocks and liabilities_snapshots, and EXECUTE on these
-- functions; nobody else may execute them.
--
-- A caller must run in a REPEATABLE READ (or SERIALIZABLE) transaction:
-- there pg_current_snapshot() is the snapshot the caller read the ledger
-- on, so the boundary a function records (the snapshot's xmin) is the one
-- the caller's work covered, never one the caller chose.
--
-- The readers (modules/ledger, modules/liabilities) ignore, and report, a
-- row whose bound is beyond the reader's snapshot (xid_to above its xmax)
-- or whose time is more than a minute ahead of the database's clock: such
-- a row was not written by these functions. The functions ignore them
-- likewise.

-- A row written before this migration may be one of those; the next
-- checkpoint then starts where the latest row still believed ends, and
-- may share its xid_from with an ignored one. Sequence numbers stay
-- unique (the primary key), and only ledger_record_checkpoint writes.
ALTER TABLE public.ledger_checkpoints DROP CONSTRAINT ledger_checkpoints_from;

-- ledger_record_check records the ledger check the caller ran in its
-- transaction: the boundary (the snapshot's xmin), the largest posting id
-- of the snapshot, the time, the check it continued and the system
-- accounts' sums are computed here. p_since_check must be the latest
-- believable consistent check for an incremental check, NULL for a full
-- one.
--
-- A check that says it found nothing is verified as far as it cheaply can
-- be: every entry of a transaction at or above the boundary of the check
-- it continues (or, without one, every entry) has at least two postings
-- summing to zero, all on existing accounts of its asset; no posting above
-- that check's largest posting id belongs to no entry or to an entry below
-- its boundary; no user balance is negative. Otherwise it is refused.
--
-- The system sums (migration 0024) are the previous consistent check's
-- sums plus the postings of the entries between the two boundaries
-- (incremental), or the sums of every posting below the boundary (full).
CREATE FUNCTION public.ledger_record_check(
    p_scope text, p_since_check bigint, p_consistent boolean,
    p_accounts bigint, p_entries bigint, p_postings bigint, p_findings bigint, p_took_ms bigint)
RETURNS public.ledger_checks
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_to      xid8 := pg_snapshot_xmin(pg_current_snapshot());
    v_xmax    xid8 := pg_snapshot_xmax(pg_current_snapshot());
    base      public.ledger_checks;
    v_from    xid8;
    v_base    xid8 := '0';
    v_since   bigint;
    v_last    bigint;
    v_sums    jsonb;
    bad       record;
    out       public.ledger_checks;
BEGIN
    IF current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
        RAISE EXCEPTION 'ledger: a check is recorded from the repeatable-read transaction that ran it'
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    IF p_scope NOT IN ('full', 'incremental') THEN
        RAISE EXCEPTION 'ledger: unknown check scope %', p_scope USING ERRCODE = 'check_violation';
    END IF;
    -- The latest consistent check a reader believes.
    SELECT c.* INTO base FROM public.ledger_checks c
     WHERE c.consistent AND c.xid_to <= v_xmax AND c.checked_at <= now() + interval '1 minute'
     ORDER BY c.xid_to DESC, c.id DESC LIMIT 1;
    IF base.id IS NOT NULL AND base.xid_to > v_to THEN
        RAISE EXCEPTION 'ledger: check % ends at transaction %, beyond this snapshot''s boundary %', base.id, base.xid_to, v_to
            USING ERRCODE = 'check_violation';
    END IF;
    IF base.id IS NOT NULL THEN
        v_base := base.xid_to;
    END IF;
    IF p_scope = 'incremental' THEN
        IF base.id IS NULL OR p_since_check IS DISTINCT FROM base.id THEN
            RAISE EXCEPTION 'ledger: an incremental check continues the latest consistent check (%), not %', base.id, p_since_check
                USING ERRCODE = 'check_violation';
        END IF;
        v_since := base.id;
        v_from := base.xid_to;
    ELSIF p_since_check IS NOT NULL THEN
        RAISE EXCEPTION 'ledger: a full check continues no check' USING ERRCODE = 'check_violation';
    END IF;
    SELECT coalesce(max(p.id), 0) INTO v_last FROM public.ledger_postings p;

    IF p_consistent THEN
        -- The entries since the believed boundary (all without one).
        SELECT e.id, e.asset, count(p.id) AS n, coalesce(sum(p.amount), 0) AS total,
               bool_or(a.id IS NULL OR a.asset <> e.asset) AS foreign_account
          INTO bad
          FROM public.ledger_entries e
          LEFT JOIN public.ledger_postings p ON p.entry_id = e.id
          LEFT JOIN public.ledger_accounts a ON a.id = p.account_id
         WHERE e.created_xact >= v_base
         GROUP BY e.id, e.asset
        HAVING count(p.id) < 2 OR coalesce(sum(p.amount), 0) <> 0 OR bool_or(a.id IS NULL OR a.asset <> e.asset)
         LIMIT 1;
        IF bad.id IS NOT NULL THEN
            RAISE EXCEPTION 'ledger: the check cannot be recorded as consistent: entry % (%) has % postings summing to %, foreign account: %',
                bad.id, bad.asset, bad.n, bad.total, bad.foreign_account USING ERRCODE = 'check_violation';
        END IF;
        SELECT p.id, p.entry_id INTO bad
          FROM public.ledger_postings p
          LEFT JOIN public.ledger_entries e ON e.id = p.entry_id
         WHERE p.id > coalesce(base.last_posting, 0)
           AND (e.id IS NULL OR e.created_xact < v_base)
         LIMIT 1;
        IF bad.id IS NOT NULL THEN
            RAISE EXCEPTION 'ledger: the check cannot be recorded as consistent: posting % of entry % was added below the boundary of check %',
                bad.id, bad.entry_id, base.id USING ERRCODE = 'check_violation';
        END IF;
        SELECT a.id INTO bad FROM public.ledger_accounts a WHERE a.balance < 0 LIMIT 1;
        IF bad.id IS NOT NULL THEN
            RAISE EXCEPTION 'ledger: the check cannot be recorded as consistent: account % is below zero', bad.id
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;

    -- The system accounts' sums below the boundary.
    IF p_scope = 'incremental' AND base.system_sums IS NOT NULL THEN
        SELECT coalesce(jsonb_object_agg(a.id::text, coalesce((base.system_sums ->> a.id::text)::bigint, 0) + coalesce(d.s, 0)), '{}'::jsonb)
          INTO v_sums
          FROM public.ledger_accounts a
          LEFT JOIN (SELECT p.account_id, sum(p.amount)::bigint AS s
                       FROM public.ledger_entries e JOIN public.ledger_postings p ON p.entry_id = e.id
                      WHERE e.created_xact >= base.xid_to AND e.created_xact < v_to
                      GROUP BY p.account_id) d ON d.account_id = a.id
         WHERE a.owner = '';
    ELSE
        SELECT coalesce(jsonb_object_agg(a.id::text, coalesce(d.s, 0)), '{}'::jsonb)
          INTO v_sums
          FROM public.ledger_accounts a
          LEFT JOIN (SELECT p.account_id, sum(p.amount)::bigint AS s
                       FROM public.ledger_postings p JOIN public.ledger_entries e ON e.id = p.entry_id
                      WHERE e.created_xact < v_to AND p.account_id IN (SELECT id FROM public.ledger_accounts WHERE owner = '')
                      GROUP BY p.account_id) d ON d.account_id = a.id
         WHERE a.owner = '';
    END IF;

    INSERT INTO public.ledger_checks (checked_at, scope, since_check, xid_from, xid_to, last_posting,
                                      consistent, accounts, entries, postings, findings, took_ms, system_sums)
    VALUES (clock_timestamp(), p_scope, v_since, v_from, v_to, v_last,
            p_consistent, p_accounts, p_entries, p_postings, p_findings, p_took_ms, v_sums)
    RETURNING * INTO out;
    RETURN out;
END $$;

-- ledger_record_checkpoint seals the entries of the caller's snapshot
-- from the previous believable checkpoint's xid_to to the snapshot's xmin:
-- the caller hands in their leaf hashes, in (created_xact, id) order,
-- concatenated, the Merkle root it computed of them, and its signature of
-- the checkpoint's hash. The sequence number, the range, the entry count,
-- the previous hash, the time (the transaction's start, now()), the hash
-- over them (docs/checkpoints.md) and the sealed entry ids are computed
-- here; the leaves must be as many as the entries. svc admin ledger verify
-- and the scheduled verification recompute the leaves and the root.
CREATE FUNCTION public.ledger_record_checkpoint(p_root bytea, p_leaves bytea, p_signature bytea)
RETURNS public.ledger_checkpoints
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_to    xid8 := pg_snapshot_xmin(pg_current_snapshot());
    v_xmax  xid8 := pg_snapshot_xmax(pg_current_snapshot());
    prev    public.ledger_checkpoints;
    v_seq   bigint;
    v_from  xid8 := '0';
    v_prevh bytea := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    v_count bigint;
    v_at    timestamptz := now();
    v_hash  bytea;
    out     public.ledger_checkpoints;
BEGIN
    IF current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
        RAISE EXCEPTION 'ledger: a checkpoint is recorded from the repeatable-read transaction that read its range'
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    SELECT c.* INTO prev FROM public.ledger_checkpoints c
     WHERE c.xid_to <= v_xmax AND c.created_at <= now() + interval '1 minute'
     ORDER BY c.seq DESC LIMIT 1;
    IF prev.seq IS NOT NULL THEN
        v_from := prev.xid_to;
        v_prevh := prev.hash;
    END IF;
    SELECT coalesce(max(c.seq), 0) + 1 INTO v_seq FROM public.ledger_checkpoints c;
    IF v_to <= v_from THEN
        RAISE EXCEPTION 'ledger: nothing to seal below transaction %', v_to USING ERRCODE = 'check_violation';
    END IF;
    SELECT count(*) INTO v_count FROM public.ledger_entries e WHERE e.created_xact >= v_from AND e.created_xact < v_to;
    IF v_count = 0 THEN
        RAISE EXCEPTION 'ledger: nothing to seal in [%, %)', v_from, v_to USING ERRCODE = 'check_violation';
    END IF;
    IF p_leaves IS NULL OR octet_length(p_leaves) <> 32 * v_count THEN
        RAISE EXCEPTION 'ledger: the range [%, %) holds % entries, not % leaves', v_from, v_to, v_count, octet_length(p_leaves) / 32
            USING ERRCODE = 'check_violation';
    END IF;
    v_hash := sha256('\x4301'::bytea || int8send(v_seq) || int8send(v_from::text::bigint) || int8send(v_to::text::bigint)
                     || int8send(v_count) || p_root || v_prevh || int8send((extract(epoch FROM v_at) * 1000000)::bigint));
    INSERT INTO public.ledger_checkpoints (seq, xid_from, xid_to, entry_count, root, prev_hash, hash, signature, created_at)
    VALUES (v_seq, v_from, v_to, v_count, p_root, v_prevh, v_hash, p_signature, v_at)
    RETURNING * INTO out;
    INSERT INTO public.ledger_checkpoint_blocks (seq, block, entry_ids, leaves)
    SELECT v_seq, (x.rn / 1024)::int, string_agg(int8send(x.id), ''::bytea ORDER BY x.rn),
           substr(p_leaves, (min(x.rn) * 32)::int + 1, (count(*) * 32)::int)
      FROM (SELECT e.id, row_number() OVER (ORDER BY e.created_xact, e.id) - 1 AS rn
              FROM public.ledger_entries e WHERE e.created_xact >= v_from AND e.created_xact < v_to) x
     GROUP BY (x.rn / 1024)::int;
    RETURN out;
END $$;

-- The ledger snapshot a liabilities snapshot was read on, as the database
-- saw it (pg_current_snapshot() of its transaction): the reconciliation
-- report computes from it what the ledger owed the users at that snapshot
-- (the balances now, less the postings of the transactions it did not
-- see) and compares it with the published total. NULL for a snapshot
-- published before this migration.
ALTER TABLE public.liabilities_snapshots ADD COLUMN ledger_snapshot pg_snapshot;

-- liabilities_record_snapshot publishes one asset's liabilities snapshot,
-- from the repeatable-read transaction that read the users' balances and
-- built the tree: the time (the transaction's start, now()) is taken here,
-- and the total the root commits to must be the sum of the asset's user
-- balances in that snapshot.
CREATE FUNCTION public.liabilities_record_snapshot(
    p_asset text, p_trigger text, p_requested_by text, p_users bigint, p_salt_key bytea, p_root bytea, p_total bigint)
RETURNS public.liabilities_snapshots
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp
AS $$
DECLARE
    v_total numeric;
    out     public.liabilities_snapshots;
BEGIN
    IF current_setting('transaction_isolation') NOT IN ('repeatable read', 'serializable') THEN
        RAISE EXCEPTION 'liabilities: a snapshot is recorded from the repeatable-read transaction that read it'
            USING ERRCODE = 'invalid_transaction_state';
    END IF;
    SELECT coalesce(sum(a.balance), 0) INTO v_total FROM public.ledger_accounts a
     WHERE a.asset = p_asset AND a.kind IN ('user_available', 'user_hold');
    IF p_total IS DISTINCT FROM v_total THEN
        RAISE EXCEPTION 'liabilities: % users owe % in this snapshot, not %', p_asset, v_total, p_total
            USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO public.liabilities_snapshots (asset, taken_at, trigger, requested_by, users, salt_key, root, total, ledger_snapshot)
    VALUES (p_asset, now(), p_trigger, p_requested_by, p_users, p_salt_key, p_root, p_total, pg_current_snapshot())
    RETURNING * INTO out;
    RETURN out;
END $$;

REVOKE ALL ON FUNCTION public.ledger_record_check(text, bigint, boolean, bigint, bigint, bigint, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION public.ledger_record_checkpoint(bytea, bytea, bytea) FROM PUBLIC;
REVOKE ALL ON FUNCTION public.liabilities_record_snapshot(text, text, text, bigint, bytea, bytea, bigint) FROM PUBLIC;

-- The scheduled verification of checkpoints (modules/ledger,
-- checkpoint_schedule.go) goes through the checkpoints a few at a time:
-- each run records where it stopped, and the next one goes on from there,
-- back to the first after the last.
CREATE TABLE public.ledger_checkpoint_verifications (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    verified_at timestamptz NOT NULL DEFAULT now(),
    from_seq    bigint NOT NULL CHECK (from_seq >= 1),
    -- the last checkpoint whose entries were recomputed, or from_seq - 1
    to_seq      bigint NOT NULL CHECK (to_seq >= from_seq - 1),
    entries     bigint NOT NULL CHECK (entries >= 0),
    ok          boolean NOT NULL,
    mismatch    text
);
CREATE TRIGGER ledger_checkpoint_verifications_append_only BEFORE UPDATE OR DELETE ON public.ledger_checkpoint_verifications
    FOR EACH ROW EXECUTE FUNCTION public.ledger_refuse_change();
