-- The owner rule 0044 added NOT VALID, validated on its own: outside a
-- transaction, the validation reads the accounts under a SHARE UPDATE
-- EXCLUSIVE lock, so postings go on while it runs. Every existing row
-- passes: the rule only grew.
ALTER TABLE public.ledger_accounts VALIDATE CONSTRAINT ledger_accounts_owner;
