-- Operators are enrolled people (modules/operator; docs/operations.md,
-- "Operators").
--
-- operator_records is the enrollment chain: every enrollment, role change,
-- key change and revocation, from the first admin's self-signed record on.
-- A record holds the signed statements that made it (each binds the hash
-- of the record before it, chain_head) and is linked to its predecessor by
-- prev_hash; its hash covers both. Who is an operator, with which role and
-- keys, is what replaying this chain and verifying every signature gives;
-- nothing else grants it. Append-only: the runtime role may only add a
-- record, and only one that verifies is ever used.
CREATE TABLE operator_records (
    seq        bigint PRIMARY KEY CHECK (seq >= 1),
    prev_hash  bytea NOT NULL CHECK (octet_length(prev_hash) = 32),
    hash       bytea NOT NULL UNIQUE CHECK (octet_length(hash) = 32),
    -- the change the statements sign: {action, name, role, public_key, key_id}
    change     jsonb NOT NULL,
    -- the signatures that made it: [envelope, ...] (operator.Envelope)
    signatures jsonb NOT NULL CHECK (jsonb_typeof(signatures) = 'array' AND jsonb_array_length(signatures) >= 1),
    at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (prev_hash)
);
CREATE FUNCTION operator_records_refuse_change() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RAISE EXCEPTION 'operators: % on operator_records refused: the enrollment chain is append-only', TG_OP
        USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER operator_records_append_only BEFORE UPDATE OR DELETE ON operator_records
    FOR EACH ROW EXECUTE FUNCTION operator_records_refuse_change();
CREATE TRIGGER operator_records_no_truncate BEFORE TRUNCATE ON operator_records
    FOR EACH STATEMENT EXECUTE FUNCTION operator_records_refuse_change();

-- The roster as the chain last gave it, for listing. It grants nothing:
-- authorization replays the chain, and a row here that the chain does not
-- prove (inserted by hand) is reported by svc admin audit verify and
-- raised as an alert by the reconciliation.
CREATE TABLE operators (
    name         text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,63}$'),
    role         text NOT NULL CHECK (role IN ('viewer', 'approver', 'admin')),
    enrolled_seq bigint NOT NULL,
    revoked_seq  bigint,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE operator_keys (
    key_id        text PRIMARY KEY CHECK (key_id ~ '^opk_[a-z2-7]{16}$'),
    operator      text NOT NULL REFERENCES operators (name),
    public_key    text NOT NULL,
    credential_id text,
    added_seq     bigint NOT NULL,
    revoked_seq   bigint
);
CREATE INDEX operator_keys_operator ON operator_keys (operator);

-- A change that needs a second admin's signature waits here with the
-- signatures it has; the record is written when the quorum is reached.
-- A proposal is bound to the chain head its statements sign: once the
-- chain moves, it can never complete (the signers sign again).
CREATE TABLE operator_proposals (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    chain_head    bytea NOT NULL,
    change_digest text NOT NULL,
    change        jsonb NOT NULL,
    signatures    jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chain_head, change_digest)
);

-- The audit trail becomes a hash chain, and a signed row carries its
-- operator's signature.
--
-- seq, prev_hash and hash are set by the trigger below, whoever inserts:
-- hash = sha256(prev_hash || audit_log_canonical(row)), the rows taken in
-- seq order under one advisory lock. A row changed afterwards (by the
-- schema owner, with the append-only trigger switched off) no longer
-- hashes to its hash, nor links to the next row. operator, key_id,
-- signature and nonce are those of the operator's signed statement; the
-- nonce is unique, so a statement is accepted once.
ALTER TABLE audit_log
    ADD COLUMN operator  text,
    ADD COLUMN key_id    text,
    ADD COLUMN signature jsonb,
    ADD COLUMN nonce     text UNIQUE,
    ADD COLUMN seq       bigint UNIQUE,
    ADD COLUMN prev_hash bytea,
    ADD COLUMN hash      bytea,
    ADD CONSTRAINT audit_log_signed CHECK ((signature IS NULL) = (operator IS NULL)
        AND (signature IS NULL) = (key_id IS NULL) AND (signature IS NULL) = (nonce IS NULL));

-- The bytes a row's hash covers: every column but the chain's own, as one
-- JSON array (jsonb's text form is deterministic; the time is rendered in
-- UTC to the microsecond whatever the session's TimeZone).
CREATE FUNCTION audit_log_canonical(r audit_log) RETURNS text LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT jsonb_build_array(r.seq, r.id, to_char(r.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
        r.actor, r.actor_label, r.action, r.target, r.request_digest, r.detail,
        r.operator, r.key_id, r.signature, r.nonce)::text
$$;

CREATE FUNCTION audit_log_chain() RETURNS trigger LANGUAGE plpgsql
    SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    last public.audit_log%ROWTYPE;
BEGIN
    -- One appender at a time: the next row links to the last committed one.
    PERFORM pg_advisory_xact_lock(hashtext('audit_log_chain'));
    SELECT * INTO last FROM public.audit_log WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1;
    NEW.seq := coalesce(last.seq, 0) + 1;
    NEW.prev_hash := coalesce(last.hash, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea);
    NEW.hash := sha256(NEW.prev_hash || convert_to(public.audit_log_canonical(NEW), 'UTF8'));
    RETURN NEW;
END $$;

-- The rows recorded before: chained in id order.
DO $$
DECLARE
    r public.audit_log%ROWTYPE;
    prev bytea := '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea;
    n bigint := 0;
BEGIN
    ALTER TABLE public.audit_log DISABLE TRIGGER audit_log_append_only;
    FOR r IN SELECT * FROM public.audit_log ORDER BY id LOOP
        n := n + 1;
        r.seq := n;
        r.prev_hash := prev;
        r.hash := sha256(prev || convert_to(public.audit_log_canonical(r), 'UTF8'));
        UPDATE public.audit_log SET seq = r.seq, prev_hash = r.prev_hash, hash = r.hash WHERE id = r.id;
        prev := r.hash;
    END LOOP;
    ALTER TABLE public.audit_log ENABLE TRIGGER audit_log_append_only;
END $$;

ALTER TABLE audit_log ALTER COLUMN seq SET NOT NULL, ALTER COLUMN prev_hash SET NOT NULL, ALTER COLUMN hash SET NOT NULL;
CREATE TRIGGER audit_log_chain BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION audit_log_chain();

-- An approval carries its operator's signature (four-eyes counts
-- operators, not API keys).
ALTER TABLE withdrawal_approvals
    ADD COLUMN operator  text,
    ADD COLUMN key_id    text,
    ADD COLUMN signature jsonb;
