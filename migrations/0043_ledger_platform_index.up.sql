-- The platform accounts' names, for GET /v1/platform-accounts: a partial
-- index of the few platform rows among the users' millions, built without
-- blocking the postings (CONCURRENTLY, hence outside a transaction).
CREATE INDEX CONCURRENTLY IF NOT EXISTS ledger_accounts_platform ON public.ledger_accounts (owner)
    WHERE kind = 'platform_available';
