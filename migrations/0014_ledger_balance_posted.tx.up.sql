-- A materialized balance cannot move without its postings.
--
-- Until now the runtime role's UPDATE of ledger_accounts.balance was guarded
-- by nothing but the code: `UPDATE ledger_accounts SET balance = balance +
-- 1000` committed, and the API served the edited balance until a ledger
-- check found the drift. From here on every user posting carries the
-- account's running balance after it (balance_after), and triggers (the
-- postings' statement trigger, and row triggers on account inserts and
-- balance updates) hold, at the end of every statement, for every user
-- account the statement touched:
--
--   (1) chain:   a posting's balance_after = the account's previous
--                posting's balance_after (0 for the first) + its amount;
--   (2) balance: the account's balance = the balance_after of its latest
--                posting (0 when it has none).
--
-- By (1), the latest balance_after is the sum of all the account's postings,
-- so (2) says the balance equals that sum. (2) is checked both after a
-- posting insert (a posting whose balance was not moved) and after an
-- account insert or update (a balance moved without a posting), so no
-- statement can leave the two apart, whoever runs it. Both checks read one
-- row per touched account through the (account_id, id) index: nothing on
-- the write path grows with an account's history, nothing extra is written
-- but eight bytes per posting, and no lock is taken beyond the row lock the
-- posting statement holds anyway. Postings of one account are serialized by
-- that lock (a posting must move the balance, and moving it locks the row),
-- so "previous" and "latest" by id are well defined: ids are drawn after the
-- lock is held.
--
-- The posting statement fills balance_after from the balance its own update
-- of the account returns (modules/ledger/post.go). System accounts have no
-- materialized balance and their postings no balance_after.

-- A balance that already differs from its postings would fail every
-- posting to its account from now on: refuse to migrate instead, and say
-- which (svc admin ledger check lists them all).
DO $$
DECLARE
    bad record;
BEGIN
    SELECT a.id, a.asset, a.kind, a.owner, a.balance, coalesce(sum(p.amount), 0) AS postings
      INTO bad
      FROM ledger_accounts a
      LEFT JOIN ledger_postings p ON p.account_id = a.id
     WHERE a.balance IS NOT NULL
     GROUP BY a.id
    HAVING a.balance <> coalesce(sum(p.amount), 0)
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'ledger: the % % balance of "%" (account %) is % but its postings add up to %: find every such drift with svc admin ledger check and resolve it before this migration',
            bad.asset, bad.kind, bad.owner, bad.id, bad.balance, bad.postings
            USING ERRCODE = 'check_violation';
    END IF;
END $$;

ALTER TABLE ledger_postings ADD COLUMN balance_after bigint;

-- The running balance of every existing user posting, in id order.
ALTER TABLE ledger_postings DISABLE TRIGGER ledger_postings_append_only;
UPDATE ledger_postings p
   SET balance_after = r.running
  FROM (SELECT q.id, sum(q.amount) OVER (PARTITION BY q.account_id ORDER BY q.id) AS running
          FROM ledger_postings q
          JOIN ledger_accounts a ON a.id = q.account_id
         WHERE a.balance IS NOT NULL) r
 WHERE p.id = r.id;
ALTER TABLE ledger_postings ENABLE TRIGGER ledger_postings_append_only;

-- Every posting statement (replaces 0002's): the entry exists and was made
-- by this transaction, the account exists and has the entry's asset, a user
-- posting continues its account's chain, and the account's balance is its
-- latest posting's balance_after.
CREATE OR REPLACE FUNCTION ledger_postings_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT n.id, n.entry_id, n.account_id, n.amount, n.balance_after,
           e.id AS e_id, e.asset AS e_asset, a.id AS a_id, a.asset AS a_asset, a.balance,
           e.created_xact = pg_current_xact_id() AS same_xact, prev.balance_after AS prev_after
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
    RAISE EXCEPTION 'ledger: posting % refused: account % would hold % after it (its previous posting left %, amount %), but its balance is %',
        bad.id, bad.account_id, coalesce(bad.balance_after::text, 'nothing'), coalesce(bad.prev_after, 0), bad.amount,
        coalesce(bad.balance::text, 'not materialized')
        USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_balance_posted';
END $$;

-- Every insert or update of an account: a user account's balance is its
-- latest posting's balance_after (0 when it has none). A balance moved by
-- hand fails here, at the end of the statement that moved it; so does a new
-- account that opens with a balance but no posting. Row triggers with a
-- WHEN, not statement triggers: an account opening at zero costs nothing
-- here, and an upsert that updates does not also pay for an INSERT
-- statement trigger (a statement trigger on INSERT cost a deposit about
-- 17% more server CPU; docs/performance.md). The row triggers run at the
-- end of the statement, so they see the postings it inserted.
CREATE FUNCTION ledger_account_balance_posted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    after bigint;
BEGIN
    SELECT p.balance_after INTO after FROM ledger_postings p WHERE p.account_id = NEW.id ORDER BY p.id DESC LIMIT 1;
    IF coalesce(after, 0) <> NEW.balance THEN
        RAISE EXCEPTION 'ledger: % of the balance of account % (%) refused: % is not what its postings add up to (%); balances move only with their postings',
            TG_OP, NEW.id, NEW.kind, NEW.balance, coalesce(after, 0)
            USING ERRCODE = 'check_violation', CONSTRAINT = 'ledger_balance_posted';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER ledger_accounts_balance_posted AFTER UPDATE ON ledger_accounts
    FOR EACH ROW WHEN (NEW.balance IS DISTINCT FROM OLD.balance)
    EXECUTE FUNCTION ledger_account_balance_posted();
CREATE TRIGGER ledger_accounts_opened_posted AFTER INSERT ON ledger_accounts
    FOR EACH ROW WHEN (NEW.balance <> 0)
    EXECUTE FUNCTION ledger_account_balance_posted();
