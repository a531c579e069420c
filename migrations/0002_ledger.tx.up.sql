-- Ledger: append-only double entry (modules/ledger owns these tables).
--
-- Sign convention: a posting's amount is positive for a credit and negative
-- for a debit, and the postings of an entry sum to zero. User accounts and
-- fee income are credit-normal (their balance is the sum of their postings);
-- custody, in-flight and network fees are debit-normal (their balance is
-- minus that sum).
--
-- What the database itself refuses, whatever the code above it does:
--   * UPDATE, DELETE or TRUNCATE of entries and postings (append-only);
--   * an entry whose postings do not sum to zero or that has fewer than two
--     postings, checked at commit (deferred constraint trigger);
--   * a posting into an entry made by another transaction, into an account
--     that does not exist, or into an account of another asset;
--   * a negative user_available or user_hold balance (CHECK);
--   * deleting an account or changing what an account is.

CREATE TABLE ledger_accounts (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    asset      text NOT NULL REFERENCES assets (asset),
    kind       text NOT NULL CHECK (kind IN ('user_available', 'user_hold',
                                             'custody', 'in_flight', 'fee_income', 'network_fees', 'suspense')),
    -- external_user_id for the two user kinds, '' for the per-asset system accounts.
    owner      text NOT NULL,
    -- Materialized for user accounts only, updated in the same statement as
    -- their postings. System accounts are touched by every deposit and
    -- payout; their balances are derived from postings so that no single
    -- row serializes the traffic (docs/performance.md has the measurements).
    balance    bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ledger_accounts_key UNIQUE (owner, asset, kind),
    CONSTRAINT ledger_accounts_owner CHECK (CASE WHEN kind IN ('user_available', 'user_hold')
                                                 THEN char_length(owner) BETWEEN 1 AND 255
                                                 ELSE owner = '' END),
    CONSTRAINT ledger_accounts_materialized CHECK ((kind IN ('user_available', 'user_hold')) = (balance IS NOT NULL)),
    CONSTRAINT ledger_accounts_balance_nonneg CHECK (balance >= 0)
);

CREATE TABLE ledger_entries (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         text NOT NULL CHECK (kind IN ('deposit_credit', 'withdrawal_hold', 'withdrawal_release',
                                               'payout_broadcast', 'payout_settle', 'correction')),
    -- Not a foreign key: a key-share lock on the assets row by every entry
    -- would be a hot row again. Postings are checked against their accounts'
    -- asset instead, and accounts reference assets.
    asset        text NOT NULL,
    source_ref   text NOT NULL CHECK (char_length(source_ref) BETWEEN 1 AND 512),
    memo         text CHECK (char_length(memo) <= 2000),
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- The transaction that made the entry: postings may join only an entry
    -- of their own transaction.
    created_xact xid8 NOT NULL DEFAULT pg_current_xact_id(),
    -- One business fact is posted once.
    CONSTRAINT ledger_entries_source UNIQUE (kind, source_ref)
);

-- No foreign keys either, for the same reason (every posting would lock its
-- account row); ledger_postings_check verifies both references, and neither
-- an entry nor an account can ever be deleted afterwards.
CREATE TABLE ledger_postings (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    entry_id   bigint NOT NULL,
    account_id bigint NOT NULL,
    amount     bigint NOT NULL CHECK (amount <> 0)
);
CREATE INDEX ledger_postings_entry ON ledger_postings (entry_id);
-- A user's history (keyset on id) and every derived balance read this index
-- only.
CREATE INDEX ledger_postings_account ON ledger_postings (account_id, id) INCLUDE (amount);

-- Append-only.
CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger: % on % refused: the ledger is append-only; post a correction entry instead', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END $$;

CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_postings_append_only BEFORE UPDATE OR DELETE ON ledger_postings
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_postings_no_truncate BEFORE TRUNCATE ON ledger_postings
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
-- Accounts keep their identity forever; only a user account's balance moves.
CREATE TRIGGER ledger_accounts_no_delete BEFORE DELETE ON ledger_accounts
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_accounts_no_truncate BEFORE TRUNCATE ON ledger_accounts
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_accounts_identity BEFORE UPDATE OF id, asset, kind, owner ON ledger_accounts
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();

-- Every posting statement: the entry exists and was made by this
-- transaction, the account exists and has the entry's asset.
CREATE FUNCTION ledger_postings_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.id, n.entry_id, n.account_id, e.id AS e_id, e.asset AS e_asset, a.id AS a_id, a.asset AS a_asset,
           e.created_xact = pg_current_xact_id() AS same_xact
      INTO bad
      FROM new_postings n
      LEFT JOIN ledger_entries e ON e.id = n.entry_id
      LEFT JOIN ledger_accounts a ON a.id = n.account_id
     WHERE e.id IS NULL OR a.id IS NULL OR a.asset <> e.asset OR e.created_xact <> pg_current_xact_id()
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger: posting % refused: entry % (found: %, same transaction: %), account % (found: %, asset % vs entry asset %)',
            bad.id, bad.entry_id, bad.e_id IS NOT NULL, coalesce(bad.same_xact, false),
            bad.account_id, bad.a_id IS NOT NULL, bad.a_asset, bad.e_asset
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'ledger_postings_check';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER ledger_postings_check AFTER INSERT ON ledger_postings
    REFERENCING NEW TABLE AS new_postings
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_postings_check();

-- At commit: the entry has at least two postings and they sum to zero.
CREATE FUNCTION ledger_entry_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n     bigint;
    total numeric;
BEGIN
    SELECT count(*), coalesce(sum(amount), 0) INTO n, total FROM ledger_postings WHERE entry_id = NEW.id;
    IF n < 2 OR total <> 0 THEN
        RAISE EXCEPTION 'ledger: entry % (% %) is unbalanced: % postings summing to %', NEW.id, NEW.kind, NEW.source_ref, n, total
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_entries_balanced';
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER ledger_entries_balanced AFTER INSERT ON ledger_entries
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_entry_balanced();

-- Used inside a posting statement to abort it when some but not all of its
-- guarded debits succeeded, so no partial debit can ever be committed. The
-- DETAIL is the index of the entry line that did not fit.
CREATE FUNCTION ledger_refuse_partial_debit(entry_kind text, ref text, line int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger: % % refused: insufficient funds for line %', entry_kind, ref, line
        USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_accounts_balance_nonneg', DETAIL = line::text;
END $$;

-- The per-asset system accounts, for today's assets and any added later.
CREATE FUNCTION ledger_system_accounts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO ledger_accounts (asset, kind, owner)
    SELECT NEW.asset, k, '' FROM unnest(ARRAY['custody', 'in_flight', 'fee_income', 'network_fees', 'suspense']) AS k
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER ledger_system_accounts AFTER INSERT ON assets
    FOR EACH ROW EXECUTE FUNCTION ledger_system_accounts();

INSERT INTO ledger_accounts (asset, kind, owner)
SELECT a.asset, k, ''
  FROM assets a
 CROSS JOIN unnest(ARRAY['custody', 'in_flight', 'fee_income', 'network_fees', 'suspense']) AS k;
