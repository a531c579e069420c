-- The operator audit trail: every operator action (withdrawal approve,
-- reject, release and mark-broadcast, deposit resolve, API key mint and
-- revoke, asset limit changes, event redelivery) is one row, written in
-- the transaction of the action itself, so an action that commits is always
-- recorded and one that rolls back never is. Rows are never changed or
-- deleted: the database refuses UPDATE, DELETE and TRUNCATE.
CREATE TABLE audit_log (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at             timestamptz NOT NULL,
    -- who: an admin API key id ("key_...") or "cli:NAME" for the command line
    actor          text NOT NULL CHECK (char_length(actor) BETWEEN 1 AND 255),
    -- the key's label, or the operator name given with --as
    actor_label    text NOT NULL CHECK (char_length(actor_label) <= 255),
    action         text NOT NULL CHECK (action ~ '^[a-z][a-z0-9_.]{0,63}$'),
    -- what: a withdrawal id, deposit id, key id, asset code, event id
    target         text NOT NULL CHECK (char_length(target) BETWEEN 1 AND 255),
    -- SHA-256 (hex) of the action's parameters as the service encoded them
    -- (detail is the same parameters as jsonb, which reorders keys)
    request_digest text NOT NULL CHECK (request_digest ~ '^[0-9a-f]{64}$'),
    -- the parameters themselves (secrets never included)
    detail         jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_target ON audit_log (target, id);
CREATE INDEX audit_log_action ON audit_log (action, id);

CREATE FUNCTION audit_log_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit: % on audit_log refused: the audit trail is append-only', TG_OP
        USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();
