-- A queued payout's instructions are the database's to keep.
--
-- The submitter pays what a withdrawal's row says: its destination and its
-- amount_net. Until now nothing but the code kept them what the request
-- and the fee fixing made them, and the runtime role, which may UPDATE
-- withdrawals (statuses, claims, txids), could set amount_net to a
-- thousand times the gross or point an approved withdrawal at another
-- address before the submitter claimed it. From here on, whoever writes
-- (the runtime role, the owner, a superuser short of switching triggers
-- off):
--
--   * withdrawals_fee_net (CHECK): fee and amount_net are both set or both
--     NULL (the CHECK of 0007, folded in), amount_net <= amount_gross, and
--     fee + amount_net = amount_gross: under deduct the fee comes out of
--     the gross, under absorb the destination receives the whole gross and
--     the user's fee is 0 (modules/withdrawal, netOf);
--   * withdrawals_instructions_fixed (trigger): the id, destination,
--     amount_gross, asset, external_user_id and fee_mode of a withdrawal
--     never change, and its fee and amount_net are set once (NULL to a
--     value, when the fee is fixed: at submission, or at approval for
--     USDT_TRC20) and never change afterwards;
--   * withdrawals_never_deleted (trigger): a withdrawal is never deleted
--     (the service never deletes one), so that its instructions cannot be
--     changed by deleting the row and inserting it again under its id.
--
-- The trigger's WHEN holds the comparison, so an update that keeps the
-- instructions (every status change, claim and txid) calls no function.
-- One CHECK replaces one: a table's CHECKs are read back by every
-- statement that writes it (0028), and their number is unchanged.

-- A row that breaks the new CHECK was written around the service: refuse
-- to migrate, and say which.
DO $$
DECLARE
    bad record;
BEGIN
    SELECT id, fee_mode, amount_gross, fee, amount_net INTO bad
      FROM public.withdrawals
     WHERE (fee IS NULL) <> (amount_net IS NULL)
        OR amount_net > amount_gross
        OR (fee_mode = 'deduct' AND fee <> amount_gross - amount_net)
        OR (fee_mode = 'absorb' AND (amount_net <> amount_gross OR fee <> 0))
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'withdrawal %: fee % and net % do not make its gross % under %; resolve it before this migration',
            bad.id, bad.fee, bad.amount_net, bad.amount_gross, bad.fee_mode
            USING ERRCODE = 'check_violation';
    END IF;
END $$;

ALTER TABLE withdrawals
    DROP CONSTRAINT withdrawals_check,
    ADD CONSTRAINT withdrawals_fee_net CHECK (
        (fee IS NULL) = (amount_net IS NULL)
        AND (amount_net IS NULL
             OR (amount_net <= amount_gross
                 AND CASE fee_mode::text
                         WHEN 'deduct' THEN fee = amount_gross - amount_net
                         WHEN 'absorb' THEN amount_net = amount_gross AND fee = 0
                         ELSE false
                     END)));

CREATE FUNCTION withdrawals_refuse_instruction_change() RETURNS trigger LANGUAGE plpgsql
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
    IF NEW.fee_mode IS DISTINCT FROM OLD.fee_mode THEN changed := changed || 'fee_mode'::text; END IF;
    IF OLD.fee IS NOT NULL AND NEW.fee IS DISTINCT FROM OLD.fee THEN changed := changed || 'fee'::text; END IF;
    IF OLD.amount_net IS NOT NULL AND NEW.amount_net IS DISTINCT FROM OLD.amount_net THEN changed := changed || 'amount_net'::text; END IF;
    RAISE EXCEPTION 'withdrawal %: a change of % refused: a withdrawal''s instructions never change, and its fee and net are fixed once',
        OLD.id, array_to_string(changed, ', ')
        USING ERRCODE = 'restrict_violation', CONSTRAINT = 'withdrawals_instructions_fixed';
END $$;

CREATE TRIGGER withdrawals_instructions_fixed BEFORE UPDATE ON withdrawals
    FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id
                       OR NEW.destination::text IS DISTINCT FROM OLD.destination::text
                       OR NEW.amount_gross::bigint IS DISTINCT FROM OLD.amount_gross::bigint
                       OR NEW.asset IS DISTINCT FROM OLD.asset
                       OR NEW.external_user_id::text IS DISTINCT FROM OLD.external_user_id::text
                       OR NEW.fee_mode::text IS DISTINCT FROM OLD.fee_mode::text
                       OR (OLD.fee IS NOT NULL AND NEW.fee::bigint IS DISTINCT FROM OLD.fee::bigint)
                       OR (OLD.amount_net IS NOT NULL AND NEW.amount_net::bigint IS DISTINCT FROM OLD.amount_net::bigint))
    EXECUTE FUNCTION withdrawals_refuse_instruction_change();

CREATE TRIGGER withdrawals_never_deleted BEFORE DELETE ON withdrawals
    FOR EACH ROW EXECUTE FUNCTION withdrawals_refuse_instruction_change();
