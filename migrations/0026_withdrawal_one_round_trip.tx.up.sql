-- An auto-approved withdrawal created in one round trip to the database
-- (modules/withdrawal/withdrawal_create_auto.go; docs/performance.md).
--
-- The service decides whether a request can be auto-approved from a copy
-- of the asset's row it keeps in memory, and sends everything at once: the
-- reservation below as a transaction of its own, then the hold, the row
-- and the key's response as a second one. The copy is only trusted when
-- the row has not changed since: every change of an asset's row (limits,
-- enabling, an insolvency halt, a change by hand) moves its version, and
-- the reservation refuses a version that is not the current one.

ALTER TABLE assets ADD COLUMN version bigint NOT NULL DEFAULT 1;

CREATE FUNCTION assets_next_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := OLD.version + 1;
    RETURN NEW;
END $$;

CREATE TRIGGER assets_version BEFORE UPDATE ON assets
    FOR EACH ROW EXECUTE FUNCTION assets_next_version();

-- withdrawal_reserve_auto counts p_gross in the asset's rolling 24-hour
-- volume, for a withdrawal the service found auto-approvable from version
-- p_version of the asset's row. It raises SV002, which undoes it, when
-- anything the service could not see says otherwise: the request's
-- Idempotency-Key (p_key, NULL for none) is known already, the asset's row
-- is no longer that version, the destination (any of p_spellings) was
-- issued for a deposit, or the volume including this withdrawal is above
-- the asset's daily cap. The service then creates the withdrawal the
-- ordinary way, which gives the exact answer. The key itself is claimed,
-- with the response, by the withdrawal's own transaction.
--
-- Like withdrawal_window_reserve it must be a transaction of its own,
-- whose commit does not wait for the WAL flush: the asset's window row is
-- locked only until that commit, and the withdrawal's own commit, later in
-- the WAL, flushes it.
CREATE FUNCTION withdrawal_reserve_auto(p_key text, p_asset text, p_version bigint, p_gross bigint,
    p_spellings text[], p_now timestamptz) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_cap   bigint;
    v_total bigint;
BEGIN
    IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto must run in a transaction of its own';
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency_keys WHERE key = p_key) THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto: the Idempotency-Key is known' USING ERRCODE = 'SV002';
    END IF;
    SELECT withdrawal_daily_cap INTO v_cap FROM assets WHERE asset = p_asset AND version = p_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto: asset % is not at version %', p_asset, p_version USING ERRCODE = 'SV002';
    END IF;
    IF EXISTS (SELECT 1 FROM deposits WHERE address = ANY(p_spellings)) THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto: the destination was issued for a deposit' USING ERRCODE = 'SV002';
    END IF;
    v_total := withdrawal_window_add(p_asset, p_gross, p_now);
    IF v_total > v_cap THEN
        RAISE EXCEPTION 'withdrawal_reserve_auto: the % daily cap would be passed', p_asset USING ERRCODE = 'SV002';
    END IF;
    RETURN v_total;
END $$;
