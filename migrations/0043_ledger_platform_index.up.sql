-- The platform accounts' names, for GET /v1/platform-accounts: a partial
-- index of the few platform rows among the users' millions, built without
-- blocking the postings (CONCURRENTLY, hence outside a transaction). A
-- build that failed leaves an invalid index of the name: it is dropped
-- first, so that a run after a failure builds it again.
DROP INDEX CONCURRENTLY IF EXISTS public.ledger_accounts_platform;

--bun:split

CREATE INDEX CONCURRENTLY ledger_accounts_platform ON public.ledger_accounts (owner)
    WHERE kind = 'platform_available';
