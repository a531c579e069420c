-- A platform's labels on deposits and withdrawals: metadata (at most 20
-- string keys of 1 to 40 characters, string values of at most 500; the API
-- checks them, platform/metadata) and client_reference (its own id of the
-- resource, at most 255 characters, unique per resource type when given).
--
-- Not one transaction, so that the unique indexes are built CONCURRENTLY
-- (CONTRIBUTING: no ACCESS EXCLUSIVE on a hot table for longer than an
-- instant). Each section is sent on its own; every one can run again after
-- a failure. The columns come first, each ALTER taking its lock for an
-- instant: a constant default is stored in the catalogue, not written to
-- every row, and the CHECKs are added NOT VALID (no scan under the lock),
-- then validated while reads and writes go on. The release still running
-- does not name the columns: its inserts take the defaults.
SET lock_timeout = '5s';
ALTER TABLE public.deposits
    ADD COLUMN IF NOT EXISTS metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN IF NOT EXISTS client_reference text;

--bun:split

SET lock_timeout = '5s';
ALTER TABLE public.withdrawals
    ADD COLUMN IF NOT EXISTS metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN IF NOT EXISTS client_reference text;

--bun:split

SET lock_timeout = '5s';
ALTER TABLE public.deposits DROP CONSTRAINT IF EXISTS deposits_metadata_object;
ALTER TABLE public.deposits ADD CONSTRAINT deposits_metadata_object
    CHECK (jsonb_typeof(metadata) = 'object') NOT VALID;
ALTER TABLE public.deposits DROP CONSTRAINT IF EXISTS deposits_client_reference_length;
ALTER TABLE public.deposits ADD CONSTRAINT deposits_client_reference_length
    CHECK (char_length(client_reference) BETWEEN 1 AND 255) NOT VALID;

--bun:split

SET lock_timeout = '5s';
ALTER TABLE public.withdrawals DROP CONSTRAINT IF EXISTS withdrawals_metadata_object;
ALTER TABLE public.withdrawals ADD CONSTRAINT withdrawals_metadata_object
    CHECK (jsonb_typeof(metadata) = 'object') NOT VALID;
ALTER TABLE public.withdrawals DROP CONSTRAINT IF EXISTS withdrawals_client_reference_length;
ALTER TABLE public.withdrawals ADD CONSTRAINT withdrawals_client_reference_length
    CHECK (char_length(client_reference) BETWEEN 1 AND 255) NOT VALID;

--bun:split

RESET lock_timeout;
ALTER TABLE public.deposits VALIDATE CONSTRAINT deposits_metadata_object;
ALTER TABLE public.deposits VALIDATE CONSTRAINT deposits_client_reference_length;

--bun:split

ALTER TABLE public.withdrawals VALIDATE CONSTRAINT withdrawals_metadata_object;
ALTER TABLE public.withdrawals VALIDATE CONSTRAINT withdrawals_client_reference_length;

--bun:split

-- A second deposit with the same client reference answers 409 naming the
-- first (deposit.ErrClientReferenceUsed); the name is what the code maps.
DROP INDEX CONCURRENTLY IF EXISTS public.deposits_client_reference_key;

--bun:split

CREATE UNIQUE INDEX CONCURRENTLY deposits_client_reference_key
    ON public.deposits (client_reference) WHERE client_reference IS NOT NULL;

--bun:split

DROP INDEX CONCURRENTLY IF EXISTS public.withdrawals_client_reference_key;

--bun:split

CREATE UNIQUE INDEX CONCURRENTLY withdrawals_client_reference_key
    ON public.withdrawals (client_reference) WHERE client_reference IS NOT NULL;
