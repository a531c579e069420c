-- Money that moves inside the platform (docs/transfers.md): platform
-- accounts, escrow holds and transfers.
--
-- Four account kinds, each owned and materialized as user_available and
-- user_hold are (a balance column kept by the posting statement, never
-- negative, equal to its newest posting's balance_after: migrations 0014,
-- 0025 and 0029 guard every materialized account by balance IS NOT NULL,
-- so they guard these from the start):
--
--   user_escrow         reserved by a user's open escrow holds
--   platform_available  a platform account's spendable money
--   platform_hold       reserved by a platform account's open withdrawals
--   platform_escrow     reserved by a platform account's open escrow holds
--
-- A platform account's owner is its name, 1 to 64 characters of
-- [a-z0-9_.:-]; the kind tells a platform account from a user of the same
-- name. Four entry kinds: transfer (one leg of a transfer), escrow_hold,
-- escrow_capture and escrow_release (modules/ledger's package doc has
-- their postings).
--
-- The kinds' rules only grow, so the rows already there keep them: each
-- rule is added NOT VALID, which checks every new value and reads no
-- existing row, instead of scanning the ledger under a lock that stops
-- the postings. A lock this migration cannot get at once fails it after
-- five seconds (svc migrate runs it again) rather than queueing the
-- postings behind it.
SET LOCAL lock_timeout = '5s';

ALTER DOMAIN public.ledger_account_kind DROP CONSTRAINT ledger_accounts_kind_check;
ALTER DOMAIN public.ledger_account_kind ADD CONSTRAINT ledger_accounts_kind_check CHECK (VALUE IN ('user_available', 'user_hold',
    'custody', 'in_flight', 'fee_income', 'network_fees', 'suspense', 'transfer',
    'user_escrow', 'platform_available', 'platform_hold', 'platform_escrow')) NOT VALID;

ALTER DOMAIN public.ledger_entry_kind DROP CONSTRAINT ledger_entries_kind_check;
ALTER DOMAIN public.ledger_entry_kind ADD CONSTRAINT ledger_entries_kind_check CHECK (VALUE IN ('deposit_credit', 'withdrawal_hold',
    'withdrawal_release', 'payout_broadcast', 'payout_settle', 'correction',
    'transfer', 'escrow_hold', 'escrow_capture', 'escrow_release')) NOT VALID;

-- The two rules that tie kind to owner and to the balance column. Added
-- NOT VALID, then validated: the validation reads the table under a SHARE
-- UPDATE EXCLUSIVE lock, so postings go on while it runs.
ALTER TABLE public.ledger_accounts
    DROP CONSTRAINT ledger_accounts_owner,
    DROP CONSTRAINT ledger_accounts_materialized,
    ADD CONSTRAINT ledger_accounts_owner CHECK (CASE
        WHEN kind IN ('user_available', 'user_hold', 'user_escrow') THEN char_length(owner) BETWEEN 1 AND 255
        WHEN kind IN ('platform_available', 'platform_hold', 'platform_escrow') THEN owner ~ '^[a-z0-9_.:-]{1,64}$'
        ELSE owner = '' END) NOT VALID,
    ADD CONSTRAINT ledger_accounts_materialized CHECK ((kind IN ('user_available', 'user_hold', 'user_escrow',
        'platform_available', 'platform_hold', 'platform_escrow')) = (balance IS NOT NULL)) NOT VALID;
ALTER TABLE public.ledger_accounts VALIDATE CONSTRAINT ledger_accounts_owner;
ALTER TABLE public.ledger_accounts VALIDATE CONSTRAINT ledger_accounts_materialized;

-- The liabilities a snapshot commits to are every owned balance: a user's
-- available, held and reserved, and the platform accounts' (each a leaf
-- of its own, modules/liabilities).
CREATE OR REPLACE FUNCTION public.liabilities_record_snapshot(
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
     WHERE a.asset = p_asset AND a.balance IS NOT NULL;
    IF p_total IS DISTINCT FROM v_total THEN
        RAISE EXCEPTION 'liabilities: % users owe % in this snapshot, not %', p_asset, v_total, p_total
            USING ERRCODE = 'check_violation';
    END IF;
    INSERT INTO public.liabilities_snapshots (asset, taken_at, trigger, requested_by, users, salt_key, root, total, ledger_snapshot)
    VALUES (p_asset, now(), p_trigger, p_requested_by, p_users, p_salt_key, p_root, p_total, pg_current_snapshot())
    RETURNING * INTO out;
    RETURN out;
END $$;
