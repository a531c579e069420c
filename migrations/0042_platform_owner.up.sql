-- A deposit or a withdrawal is a user's (external_user_id) or a platform
-- account's (platform_account, the owner of its platform_* ledger
-- accounts, migration 0038): exactly one of the two.
--
-- Not one transaction, as 0039: each ALTER is a catalogue change that
-- takes its lock for an instant (a new nullable column, external_user_id
-- no longer NOT NULL, the rules added NOT VALID), then the rules are
-- validated while reads and writes go on. Every section can run again.
-- The release still running never writes platform_account and always
-- writes external_user_id, which the rules allow. A withdrawal's
-- platform_account joins the instructions that never change (0032's
-- trigger, replaced the same but for it).
SET lock_timeout = '5s';
ALTER TABLE public.deposits
    ADD COLUMN IF NOT EXISTS platform_account text,
    ALTER COLUMN external_user_id DROP NOT NULL;
ALTER TABLE public.deposits DROP CONSTRAINT IF EXISTS deposits_one_owner;
ALTER TABLE public.deposits DROP CONSTRAINT IF EXISTS deposits_platform_account_name;
ALTER TABLE public.deposits
    ADD CONSTRAINT deposits_one_owner CHECK ((external_user_id IS NULL) <> (platform_account IS NULL)) NOT VALID,
    ADD CONSTRAINT deposits_platform_account_name CHECK (platform_account ~ '^[a-z0-9_.:-]{1,64}$') NOT VALID;

--bun:split

SET lock_timeout = '5s';
ALTER TABLE public.withdrawals
    ADD COLUMN IF NOT EXISTS platform_account text,
    ALTER COLUMN external_user_id DROP NOT NULL;
ALTER TABLE public.withdrawals DROP CONSTRAINT IF EXISTS withdrawals_one_owner;
ALTER TABLE public.withdrawals DROP CONSTRAINT IF EXISTS withdrawals_platform_account_name;
ALTER TABLE public.withdrawals
    ADD CONSTRAINT withdrawals_one_owner CHECK ((external_user_id IS NULL) <> (platform_account IS NULL)) NOT VALID,
    ADD CONSTRAINT withdrawals_platform_account_name CHECK (platform_account ~ '^[a-z0-9_.:-]{1,64}$') NOT VALID;

--bun:split

-- A withdrawal's owner is one of its instructions (0032): platform_account
-- never changes either. One section: the function and the trigger are
-- replaced in one implicit transaction, the trigger's lock held an instant.
SET lock_timeout = '5s';
CREATE OR REPLACE FUNCTION public.withdrawals_refuse_instruction_change() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    changed text[] := '{}';
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'withdrawal %: DELETE refused: withdrawals are never deleted', OLD.id
            USING ERRCODE = 'restrict_violation', CONSTRAINT = 'withdrawals_never_deleted';
    END IF;
    IF NEW.id IS DISTINCT FROM OLD.id THEN changed := changed || 'id'::text; END IF;
    IF NEW.destination IS DISTINCT FROM OLD.destination THEN changed := changed || 'destination'::text; END IF;
    IF NEW.amount_gross IS DISTINCT FROM OLD.amount_gross THEN changed := changed || 'amount_gross'::text; END IF;
    IF NEW.asset IS DISTINCT FROM OLD.asset THEN changed := changed || 'asset'::text; END IF;
    IF NEW.external_user_id IS DISTINCT FROM OLD.external_user_id THEN changed := changed || 'external_user_id'::text; END IF;
    IF NEW.platform_account IS DISTINCT FROM OLD.platform_account THEN changed := changed || 'platform_account'::text; END IF;
    IF NEW.fee_mode IS DISTINCT FROM OLD.fee_mode THEN changed := changed || 'fee_mode'::text; END IF;
    IF OLD.fee IS NOT NULL AND NEW.fee IS DISTINCT FROM OLD.fee THEN changed := changed || 'fee'::text; END IF;
    IF OLD.amount_net IS NOT NULL AND NEW.amount_net IS DISTINCT FROM OLD.amount_net THEN changed := changed || 'amount_net'::text; END IF;
    RAISE EXCEPTION 'withdrawal %: a change of % refused: a withdrawal''s instructions never change, and its fee and net are fixed once',
        OLD.id, array_to_string(changed, ', ')
        USING ERRCODE = 'restrict_violation', CONSTRAINT = 'withdrawals_instructions_fixed';
END $$;
DROP TRIGGER IF EXISTS withdrawals_instructions_fixed ON public.withdrawals;
CREATE TRIGGER withdrawals_instructions_fixed BEFORE UPDATE ON public.withdrawals
    FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id
                       OR NEW.destination::text IS DISTINCT FROM OLD.destination::text
                       OR NEW.amount_gross::bigint IS DISTINCT FROM OLD.amount_gross::bigint
                       OR NEW.asset IS DISTINCT FROM OLD.asset
                       OR NEW.external_user_id::text IS DISTINCT FROM OLD.external_user_id::text
                       OR NEW.platform_account IS DISTINCT FROM OLD.platform_account
                       OR NEW.fee_mode::text IS DISTINCT FROM OLD.fee_mode::text
                       OR (OLD.fee IS NOT NULL AND NEW.fee::bigint IS DISTINCT FROM OLD.fee::bigint)
                       OR (OLD.amount_net IS NOT NULL AND NEW.amount_net::bigint IS DISTINCT FROM OLD.amount_net::bigint))
    EXECUTE FUNCTION public.withdrawals_refuse_instruction_change();

--bun:split

RESET lock_timeout;
ALTER TABLE public.deposits VALIDATE CONSTRAINT deposits_one_owner;
ALTER TABLE public.deposits VALIDATE CONSTRAINT deposits_platform_account_name;
ALTER TABLE public.withdrawals VALIDATE CONSTRAINT withdrawals_one_owner;
ALTER TABLE public.withdrawals VALIDATE CONSTRAINT withdrawals_platform_account_name;
