-- Escrow holds (modules/hold): a payer's money moved from available to
-- escrow (ledger entry escrow_hold), then captured to one or more accounts
-- with the rest returned (escrow_capture, escrow_release), voided
-- (escrow_release of all) or expired by the expiry pass (the same).
--
-- The database guards what the ledger's entries rely on:
--
--   * a hold's payer, asset, amount, expiry, description, metadata,
--     client reference and creation never change;
--   * its status moves only open -> captured | voided | expired, once, and
--     only that step may set captured_amount and released_amount, which
--     then add up to the amount (captured_amount is zero unless captured);
--   * a hold is never deleted, and its captures are append-only (SELECT
--     and INSERT only for the runtime role, platform/db.GrantRuntime), each
--     inserted only for a captured hold and never beyond its
--     captured_amount.
--
-- New tables: nothing else is locked.
SET LOCAL lock_timeout = '5s';

CREATE TABLE public.holds (
    id               uuid PRIMARY KEY,
    -- The payer: a user (external_user_id) or a platform account (its name).
    payer_platform   boolean NOT NULL,
    payer            text NOT NULL CHECK (char_length(payer) BETWEEN 1 AND 255
                                          AND (NOT payer_platform OR payer ~ '^[a-z0-9_.:-]{1,64}$')),
    -- Not a foreign key, as withdrawals: creation reads the asset first.
    asset            text NOT NULL,
    status           text NOT NULL CHECK (status IN ('open', 'captured', 'voided', 'expired')),
    amount           bigint NOT NULL CHECK (amount > 0),
    captured_amount  bigint NOT NULL DEFAULT 0 CHECK (captured_amount >= 0),
    released_amount  bigint NOT NULL DEFAULT 0 CHECK (released_amount >= 0),
    expires_at       timestamptz NOT NULL,
    description      text CHECK (char_length(description) <= 500),
    metadata         jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    client_reference text UNIQUE CHECK (char_length(client_reference) BETWEEN 1 AND 255),
    idempotency_key  text UNIQUE,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    CONSTRAINT holds_amounts_check CHECK (
        CASE status
            WHEN 'open' THEN captured_amount = 0 AND released_amount = 0
            WHEN 'captured' THEN captured_amount > 0 AND captured_amount + released_amount = amount
            ELSE captured_amount = 0 AND released_amount = amount
        END)
);

-- The lists: a payer's holds in one status, newest first.
CREATE INDEX holds_payer ON public.holds (payer_platform, payer, status, created_at DESC, id DESC);
-- The expiry pass: the open holds by expiry.
CREATE INDEX holds_open_expiry ON public.holds (expires_at, id) WHERE status = 'open';

CREATE TABLE public.hold_captures (
    hold_id     uuid NOT NULL REFERENCES public.holds (id),
    seq         smallint NOT NULL CHECK (seq BETWEEN 1 AND 15),
    to_platform boolean NOT NULL,
    to_id       text NOT NULL CHECK (char_length(to_id) BETWEEN 1 AND 255),
    amount      bigint NOT NULL CHECK (amount > 0),
    PRIMARY KEY (hold_id, seq),
    UNIQUE (hold_id, to_platform, to_id)
);

CREATE TRIGGER hold_captures_append_only BEFORE UPDATE OR DELETE ON public.hold_captures
    FOR EACH ROW EXECUTE FUNCTION public.ledger_refuse_change();

-- holds_guard refuses a DELETE, a change of what a hold is, and any status
-- step but open -> captured | voided | expired.
CREATE FUNCTION public.holds_guard() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'holds: DELETE of hold % refused: holds are never deleted', OLD.id
            USING ERRCODE = 'restrict_violation', CONSTRAINT = 'holds_guard';
    END IF;
    IF (NEW.id, NEW.payer_platform, NEW.payer, NEW.asset, NEW.amount, NEW.expires_at, NEW.description, NEW.metadata,
        NEW.client_reference, NEW.idempotency_key, NEW.created_at)
       IS DISTINCT FROM
       (OLD.id, OLD.payer_platform, OLD.payer, OLD.asset, OLD.amount, OLD.expires_at, OLD.description, OLD.metadata,
        OLD.client_reference, OLD.idempotency_key, OLD.created_at) THEN
        RAISE EXCEPTION 'holds: hold % refused: its payer, asset, amount and terms never change', OLD.id
            USING ERRCODE = 'restrict_violation', CONSTRAINT = 'holds_guard';
    END IF;
    IF OLD.status <> 'open' OR NEW.status NOT IN ('captured', 'voided', 'expired') THEN
        RAISE EXCEPTION 'holds: hold % refused: % -> % (a hold moves only from open to captured, voided or expired)',
            OLD.id, OLD.status, NEW.status
            USING ERRCODE = 'restrict_violation', CONSTRAINT = 'holds_guard';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER holds_guard BEFORE UPDATE OR DELETE ON public.holds
    FOR EACH ROW EXECUTE FUNCTION public.holds_guard();

-- holds_born_open: a hold is written open, with nothing captured or
-- released; only holds_guard's steps move it on. A row inserted captured
-- or voided would claim money paid or returned that no step moved.
CREATE FUNCTION public.holds_born_open() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF NEW.status <> 'open' OR NEW.captured_amount <> 0 OR NEW.released_amount <> 0 THEN
        RAISE EXCEPTION 'holds: hold % refused: a hold is created open, not %', NEW.id, NEW.status
            USING ERRCODE = 'restrict_violation', CONSTRAINT = 'holds_born_open';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER holds_born_open BEFORE INSERT ON public.holds
    FOR EACH ROW EXECUTE FUNCTION public.holds_born_open();

-- hold_captures_check: a capture belongs to a captured hold and the
-- captures never exceed its captured_amount.
CREATE FUNCTION public.hold_captures_check() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    h record;
    total bigint;
BEGIN
    SELECT status, captured_amount INTO h FROM public.holds WHERE id = NEW.hold_id;
    SELECT coalesce(sum(amount), 0) INTO total FROM public.hold_captures WHERE hold_id = NEW.hold_id;
    IF h.status IS DISTINCT FROM 'captured' OR total + NEW.amount > h.captured_amount THEN
        RAISE EXCEPTION 'holds: capture of hold % refused: the hold is % and captured % (% recorded, % more)',
            NEW.hold_id, coalesce(h.status, 'missing'), h.captured_amount, total, NEW.amount
            USING ERRCODE = 'restrict_violation', CONSTRAINT = 'hold_captures_check';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER hold_captures_check BEFORE INSERT ON public.hold_captures
    FOR EACH ROW EXECUTE FUNCTION public.hold_captures_check();

-- The events a hold emits (hold.captured, hold.voided, hold.expired) join
-- the types outbound_events accepts, beside transfer.completed (migration
-- 0040). The list only grows: every row already there satisfied the
-- narrower check this one replaces, so it is added NOT VALID (a brief
-- lock, no scan of the table) and still holds every new row.
ALTER TABLE public.outbound_events DROP CONSTRAINT outbound_events_type_check;
ALTER TABLE public.outbound_events ADD CONSTRAINT outbound_events_type_check CHECK (type IN (
    'deposit.detected', 'deposit.settled', 'deposit.review_required', 'deposit.expired',
    'withdrawal.pending_approval', 'withdrawal.broadcast', 'withdrawal.completed', 'withdrawal.failed',
    'transfer.completed', 'hold.captured', 'hold.voided', 'hold.expired')) NOT VALID;
