-- The rules of the ledger's and the idempotency keys' single columns
-- become domains, as migration 0028 did for the withdrawals table
-- (docs/performance.md, "The ledger's column rules as types").
--
-- PostgreSQL reads a table's CHECK constraints back from their stored text
-- at every statement that writes the table; a domain's it keeps compiled
-- for the session. Every withdrawal's hold writes two user accounts, an
-- entry and its postings, and claims an Idempotency-Key: eleven CHECKs
-- read back per creation, and every deposit's credit pays the same. The
-- eight that look at one column are now that column's type, each keeping
-- its constraint's name, so that a refusal names what it named before
-- (SQLSTATE 23514, check_violation; the ledger maps
-- ledger_accounts_balance_nonneg to insufficient funds by that name). The
-- three that tie columns together stay CHECK constraints.
--
-- Each column first takes a domain without a rule, which needs no rewrite
-- of the table (the domain's base type is the column's) and keeps its
-- indexes; then the rule is added to the domain, which checks the rows
-- already there, and the table's CHECK is dropped. A column a trigger
-- names (in UPDATE OF or WHEN) cannot change type under it: those three
-- triggers are dropped and created again, the same, in this transaction.

DROP TRIGGER ledger_accounts_identity ON ledger_accounts;
DROP TRIGGER ledger_accounts_balance_posted ON ledger_accounts;
DROP TRIGGER ledger_accounts_opened_posted ON ledger_accounts;

CREATE DOMAIN ledger_account_kind AS text;
CREATE DOMAIN ledger_balance AS bigint;
CREATE DOMAIN ledger_entry_kind AS text;
CREATE DOMAIN ledger_source_ref AS text;
CREATE DOMAIN ledger_memo AS text;
CREATE DOMAIN ledger_amount AS bigint;
CREATE DOMAIN idempotency_key AS text;
CREATE DOMAIN idempotency_state AS text;

ALTER TABLE ledger_accounts
    ALTER COLUMN kind TYPE ledger_account_kind,
    ALTER COLUMN balance TYPE ledger_balance;
ALTER TABLE ledger_entries
    ALTER COLUMN kind TYPE ledger_entry_kind,
    ALTER COLUMN source_ref TYPE ledger_source_ref,
    ALTER COLUMN memo TYPE ledger_memo;
ALTER TABLE ledger_postings
    ALTER COLUMN amount TYPE ledger_amount;
ALTER TABLE idempotency_keys
    ALTER COLUMN key TYPE idempotency_key,
    ALTER COLUMN state TYPE idempotency_state;

ALTER DOMAIN ledger_account_kind ADD CONSTRAINT ledger_accounts_kind_check CHECK (VALUE IN ('user_available', 'user_hold',
    'custody', 'in_flight', 'fee_income', 'network_fees', 'suspense'));
ALTER DOMAIN ledger_balance ADD CONSTRAINT ledger_accounts_balance_nonneg CHECK (VALUE >= 0);
ALTER DOMAIN ledger_entry_kind ADD CONSTRAINT ledger_entries_kind_check CHECK (VALUE IN ('deposit_credit', 'withdrawal_hold',
    'withdrawal_release', 'payout_broadcast', 'payout_settle', 'correction'));
ALTER DOMAIN ledger_source_ref ADD CONSTRAINT ledger_entries_source_ref_check CHECK (char_length(VALUE) BETWEEN 1 AND 512);
ALTER DOMAIN ledger_memo ADD CONSTRAINT ledger_entries_memo_check CHECK (char_length(VALUE) <= 2000);
ALTER DOMAIN ledger_amount ADD CONSTRAINT ledger_postings_amount_check CHECK (VALUE <> 0);
ALTER DOMAIN idempotency_key ADD CONSTRAINT idempotency_keys_key_check CHECK (length(VALUE) BETWEEN 1 AND 300);
ALTER DOMAIN idempotency_state ADD CONSTRAINT idempotency_keys_state_check CHECK (VALUE IN ('in_flight', 'completed'));

ALTER TABLE ledger_accounts
    DROP CONSTRAINT ledger_accounts_kind_check,
    DROP CONSTRAINT ledger_accounts_balance_nonneg;
ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_kind_check,
    DROP CONSTRAINT ledger_entries_source_ref_check,
    DROP CONSTRAINT ledger_entries_memo_check;
ALTER TABLE ledger_postings
    DROP CONSTRAINT ledger_postings_amount_check;
ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_key_check,
    DROP CONSTRAINT idempotency_keys_state_check;

CREATE TRIGGER ledger_accounts_identity BEFORE UPDATE OF id, asset, kind, owner ON ledger_accounts
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_accounts_balance_posted AFTER UPDATE ON ledger_accounts
    FOR EACH ROW WHEN (NEW.balance IS DISTINCT FROM OLD.balance) EXECUTE FUNCTION ledger_account_balance_posted();
CREATE TRIGGER ledger_accounts_opened_posted AFTER INSERT ON ledger_accounts
    FOR EACH ROW WHEN (NEW.balance <> 0) EXECUTE FUNCTION ledger_account_balance_posted();
