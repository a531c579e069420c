-- A user's history reads only the user's postings.
--
-- The transaction list (ledger.Transactions) takes a page of the user's
-- postings from the (account_id, id) index (0019) and then joined, for
-- every posting of the page, its entry by primary key for the entry's
-- kind, source_ref, memo and created_at. On a large ledger each of those
-- is a descent of a three-level B-tree and one more heap page, so a page
-- of fifty postings read about two hundred buffers, and at ten million
-- postings a history page was 1.5 to 1.8 times slower than at a hundred
-- thousand even with the whole ledger in the server's buffers
-- (docs/performance.md, "The ledger at ten million postings").
--
-- From here on a user posting carries copies of its entry's display
-- fields: entry_kind, entry_ref (source_ref), entry_memo and entry_at
-- (created_at). The history page reads each posting's own heap row, one
-- page per line at most, and no entry. The asset is not copied: it is the
-- account's, which the posting check already holds equal to the entry's.
--
-- Only user postings (accounts with a materialized balance: user_available
-- and user_hold) carry the copies; a system account's postings leave them
-- NULL. History never shows a system account, and half of the postings are
-- on system accounts, so this halves what the copies add to the table.
--
-- The copies are display data, but they must never say something the
-- entry does not: the postings' statement trigger (ledger_postings_check,
-- replaced below) refuses a posting whose copies are not its entry's
-- fields (NULL memo copied as NULL), and a system account's posting that
-- carries any. The trigger already joins every new posting with its entry
-- and account, so the comparison costs nothing more than the columns.
-- Since the ledger is append-only (0002), a copy that was right when
-- written stays right; the ledger checks (full and incremental) compare
-- them anyway, for a row changed around the triggers.
--
-- Not in the (account_id, id) index: memo may hold 2000 characters and
-- source_ref 512, and a B-tree tuple is limited to about a third of a page
-- (2704 bytes), so an index carrying them could refuse a legitimate
-- posting; the narrow copies alone (kind, created_at) would not make the
-- page index-only. The index still finds the page's postings, and the
-- heap fetch of one posting row per line replaces the probe of the
-- entries' primary key plus the entry's heap page.
--
-- The backfill rewrites every existing user posting (about half of the
-- table) in this transaction, with ledger_postings_append_only off around
-- the UPDATE as 0014 did. Updated rows do not fit on their full pages, so
-- every rewritten row is a new row version with new entries in all three
-- indexes. At a million postings the UPDATE took 9 s on two shared cores,
-- and the postings with their indexes grew from 177 to 312 MB (the same
-- ledger written with the copies: 210 MB). VACUUM (which cannot run
-- inside the migration's transaction) makes the old versions' space
-- reusable by later postings; REINDEX ... CONCURRENTLY gives the indexes'
-- back. Run this migration in a quiet window on a large ledger (the ALTER
-- TABLE locks the postings for the whole transaction), then VACUUM
-- ANALYZE ledger_postings.

ALTER TABLE ledger_postings
    ADD COLUMN entry_kind text,
    ADD COLUMN entry_ref  text,
    ADD COLUMN entry_memo text,
    ADD COLUMN entry_at   timestamptz;

ALTER TABLE ledger_postings DISABLE TRIGGER ledger_postings_append_only;
UPDATE ledger_postings p
   SET entry_kind = e.kind, entry_ref = e.source_ref, entry_memo = e.memo, entry_at = e.created_at
  FROM ledger_entries e, ledger_accounts a
 WHERE e.id = p.entry_id AND a.id = p.account_id AND a.balance IS NOT NULL;
ALTER TABLE ledger_postings ENABLE TRIGGER ledger_postings_append_only;

-- Every posting statement (replaces 0014's): the entry exists and was made
-- by this transaction, the account exists and has the entry's asset, a
-- user posting carries its entry's kind, source_ref, memo and created_at
-- and a system posting none of them, a user posting continues its
-- account's chain, and the account's balance is its latest posting's
-- balance_after.
CREATE OR REPLACE FUNCTION ledger_postings_check() RETURNS trigger LANGUAGE plpgsql AS $$
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
      LEFT JOIN ledger_entries e ON e.id = n.entry_id
      LEFT JOIN ledger_accounts a ON a.id = n.account_id
      LEFT JOIN LATERAL (SELECT q.balance_after FROM ledger_postings q
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
