-- Transfers: money moved between accounts inside the service (a user or a
-- platform account on each side), atomically, one ledger entry per leg
-- (modules/transfer).
--
-- transfers is the request, transfer_legs its legs in request order, and
-- transfer_parties names every account a transfer touches once (the
-- accounts of all its legs, without repeats), so that an account's list,
-- newest first, is one keyset scan of its primary key.
--
-- Each leg i of transfer T is posted as the ledger entry of kind
-- 'transfer' with source_ref 'T:i' (ledger.PostTransferLeg), in the same
-- transaction as these rows: transfer.CheckLegs compares them with the
-- entries in the ledger check.
--
-- The three tables are append-only, like the ledger: a transfer is never
-- edited or deleted (the *_append_only triggers also leave the runtime
-- role only SELECT and INSERT on them: platform/db.GrantRuntime).
SET LOCAL lock_timeout = '5s';

CREATE TABLE public.transfers (
    id               uuid PRIMARY KEY,
    -- The Idempotency-Key of the request that made it: a retry after the
    -- key's record was pruned still finds it.
    idempotency_key  text UNIQUE,
    description      text CHECK (char_length(description) <= 500),
    metadata         jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    client_reference text CHECK (char_length(client_reference) BETWEEN 1 AND 255),
    leg_count        integer NOT NULL CHECK (leg_count BETWEEN 1 AND 100),
    created_at       timestamptz NOT NULL
);

CREATE UNIQUE INDEX transfers_client_reference_key ON public.transfers (client_reference)
    WHERE client_reference IS NOT NULL;

-- An account is (platform, owner): a user (owner = external_user_id) or a
-- platform account (owner = its name).
CREATE TABLE public.transfer_legs (
    transfer_id   uuid NOT NULL REFERENCES public.transfers (id),
    leg           integer NOT NULL CHECK (leg BETWEEN 0 AND 99),
    asset         text NOT NULL,
    from_platform boolean NOT NULL,
    from_owner    text NOT NULL CHECK (char_length(from_owner) BETWEEN 1 AND 255),
    to_platform   boolean NOT NULL,
    to_owner      text NOT NULL CHECK (char_length(to_owner) BETWEEN 1 AND 255),
    amount        bigint NOT NULL CHECK (amount > 0),
    PRIMARY KEY (transfer_id, leg),
    CONSTRAINT transfer_legs_distinct_accounts CHECK (from_platform <> to_platform OR from_owner <> to_owner)
);

CREATE TABLE public.transfer_parties (
    platform    boolean NOT NULL,
    owner       text NOT NULL,
    created_at  timestamptz NOT NULL,
    transfer_id uuid NOT NULL REFERENCES public.transfers (id),
    PRIMARY KEY (platform, owner, created_at, transfer_id)
);

CREATE FUNCTION public.transfers_refuse_change() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'transfers: % on % refused: transfers are append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END $$;

CREATE TRIGGER transfers_append_only BEFORE UPDATE OR DELETE ON public.transfers
    FOR EACH ROW EXECUTE FUNCTION public.transfers_refuse_change();
CREATE TRIGGER transfers_no_truncate BEFORE TRUNCATE ON public.transfers
    FOR EACH STATEMENT EXECUTE FUNCTION public.transfers_refuse_change();
CREATE TRIGGER transfer_legs_append_only BEFORE UPDATE OR DELETE ON public.transfer_legs
    FOR EACH ROW EXECUTE FUNCTION public.transfers_refuse_change();
CREATE TRIGGER transfer_legs_no_truncate BEFORE TRUNCATE ON public.transfer_legs
    FOR EACH STATEMENT EXECUTE FUNCTION public.transfers_refuse_change();
CREATE TRIGGER transfer_parties_append_only BEFORE UPDATE OR DELETE ON public.transfer_parties
    FOR EACH ROW EXECUTE FUNCTION public.transfers_refuse_change();
CREATE TRIGGER transfer_parties_no_truncate BEFORE TRUNCATE ON public.transfer_parties
    FOR EACH STATEMENT EXECUTE FUNCTION public.transfers_refuse_change();

-- The event a transfer emits (transfer.completed) joins the types
-- outbound_events accepts. The list only grows: every row already there
-- satisfied the narrower check this one replaces, so it is added NOT VALID
-- (a brief lock, no scan of the table) and still holds every new row.
ALTER TABLE public.outbound_events DROP CONSTRAINT outbound_events_type_check;
ALTER TABLE public.outbound_events ADD CONSTRAINT outbound_events_type_check CHECK (type IN (
    'deposit.detected', 'deposit.settled', 'deposit.review_required', 'deposit.expired',
    'withdrawal.pending_approval', 'withdrawal.broadcast', 'withdrawal.completed', 'withdrawal.failed',
    'transfer.completed')) NOT VALID;
